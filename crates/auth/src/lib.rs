//! SPNEGO (RFC 4178, MS-SPNG) wrapping NTLMSSP with NTLMv2 (MS-NLMP) or
//! Kerberos (MS-KILE, through `smbq_gssapi`), as
//! server ([`ServerAuth`]) and client ([`ClientAuth`]), sans-IO; the users
//! file ([`UserDb`]); crash-safe writes of state files ([`state_file`]).
//!
//! Error to NTSTATUS mapping for SESSION_SETUP (MS-SMB2 3.3.5.5.3):
//! [`AuthError::LogonFailure`] -> STATUS_LOGON_FAILURE,
//! [`AuthError::Malformed`] -> STATUS_INVALID_PARAMETER,
//! [`AuthError::Unsupported`] -> STATUS_NOT_SUPPORTED,
//! [`AuthError::NtlmBlocked`] -> STATUS_NTLM_BLOCKED,
//! [`AuthError::ClockSkew`] -> STATUS_TIME_DIFFERENCE_AT_DC.

#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used))]
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod client;
pub mod kkdcp;
mod ntlm;
pub mod pac;
mod server;
mod spnego;
pub mod state_file;
mod userdb;

pub use client::ClientAuth;
pub use ntlm::nt_hash;
pub use server::ServerAuth;
pub use smbq_gssapi::check_keytab;
pub use spnego::{spnego_negotiate_token, MAX_TOKEN};
pub use userdb::UserDb;

/// The names the server advertises in CHALLENGE_MESSAGE TargetInfo
/// (MS-NLMP 2.2.2.1: MsvAvNbComputerName, MsvAvNbDomainName,
/// MsvAvDnsComputerName, MsvAvDnsDomainName).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetInfo {
    pub netbios_computer: String,
    pub netbios_domain: String,
    pub dns_computer: String,
    pub dns_domain: String,
}

/// Who a Kerberos logon was, as the ticket says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KerberosLogon {
    /// The client principal, `alice@EXAMPLE.COM`.
    pub principal: String,
    /// The service principal the ticket was for, `cifs/host@EXAMPLE.COM`.
    pub service: String,
    /// The ticket's PAC (MS-PAC 2.3) when the KDC put one in (Active
    /// Directory does), its server checksum checked by MIT.
    pub pac: Option<Vec<u8>>,
}

/// The result of one [`ServerAuth::step`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthStep {
    /// Send this token with STATUS_MORE_PROCESSING_REQUIRED.
    Continue(Vec<u8>),
    /// Authenticated: send `token` (SPNEGO accept-completed, with
    /// mechListMIC when the exchange calls for it; empty for raw NTLMSSP)
    /// with STATUS_SUCCESS. `session_key` is the NTLM exported session key
    /// (MS-NLMP 3.2.5.1.2), or the Kerberos session key (MS-KILE 3.1.1.2:
    /// the acceptor's subkey, else the initiator's, else the ticket's; 32
    /// bytes for AES-256), whose first 16 bytes are SMB's SessionKey while
    /// AES-256 encryption keys come from all of it (MS-SMB2 3.3.5.5.3).
    /// For Kerberos, `user` and `domain` are the client principal's name
    /// and realm, and `kerberos` says more. An anonymous logon (MS-NLMP 3.2.5.1.2: empty
    /// user and NT response) has an empty `user`, `anonymous: true` and an
    /// all-zero `session_key`; refusing it is the caller's policy.
    Done { token: Vec<u8>, user: String, domain: String, session_key: Vec<u8>, anonymous: bool, kerberos: Option<KerberosLogon> },
}

/// Why an authentication step failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// Unknown user, wrong password, bad MIC or mechListMIC, peer reject,
    /// NTLMv1 or LM-only response: STATUS_LOGON_FAILURE.
    #[error("logon failure")]
    LogonFailure,
    /// Undecodable or out-of-sequence token: STATUS_INVALID_PARAMETER.
    #[error("malformed security token: {0}")]
    Malformed(&'static str),
    /// The peer needs something we do not implement (e.g. only Kerberos
    /// offered): STATUS_NOT_SUPPORTED.
    #[error("unsupported: {0}")]
    Unsupported(&'static str),
    /// An NTLM logon where NTLM is off (`[auth] ntlm = false`):
    /// STATUS_NTLM_BLOCKED (MS-ERREF 2.3.1).
    #[error("NTLM is disabled on this server")]
    NtlmBlocked,
    /// The AP-REQ's authenticator is more than the allowed clock skew
    /// from the server's time (KRB_AP_ERR_SKEW): STATUS_TIME_DIFFERENCE_AT_DC.
    #[error("clock skew too great")]
    ClockSkew,
}

#[cfg(test)]
mod tests;
