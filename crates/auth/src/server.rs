//! The server side of one SPNEGO exchange (MS-SPNG 3.2.5) with NTLMSSP
//! (MS-NLMP 3.2.5) or Kerberos (RFC 4121, MS-KILE 3.4.5, through MIT's
//! GSS-API: `smbq_gssapi`).

use crate::ntlm::{self, utf16le};
use crate::spnego::{self, NegState, NegTokenResp, Token, KRB5_OID, MAX_TOKEN, MS_KRB5_OID, NTLMSSP_OID};
use crate::{AuthError, AuthStep, KerberosLogon, TargetInfo};
use smbq_gssapi::{Acceptor, Failure, Step};
use std::path::Path;
use std::sync::Arc;

/// Flags the server always sets in CHALLENGE_MESSAGE (MS-NLMP 3.2.5.1.1).
const SERVER_FLAGS: u32 = ntlm::NEGOTIATE_UNICODE
    | ntlm::REQUEST_TARGET
    | ntlm::NEGOTIATE_NTLM
    | ntlm::TARGET_TYPE_SERVER
    | ntlm::NEGOTIATE_TARGET_INFO
    | ntlm::NEGOTIATE_VERSION;

/// What SPNEGO remembers across legs (RFC 4178 5).
struct Spnego {
    /// DER of the client's MechTypeList, covered by both mechListMICs.
    mech_types_der: Vec<u8>,
    /// NTLMSSP was not the client's first choice: the MIC exchange is
    /// mandatory and we answered request-mic.
    mic_required: bool,
}

enum State {
    Start,
    /// SPNEGO chose NTLMSSP but the client has not sent NEGOTIATE_MESSAGE yet.
    AwaitNegotiate(Spnego),
    /// SPNEGO chose Kerberos (`oid`) and waits for the AP-REQ, or for the
    /// next leg of a Kerberos exchange under way.
    /// `spnego` is None for a raw Kerberos exchange (RFC 4121 tokens
    /// without SPNEGO, as smbprotocol sends with auth_protocol="kerberos").
    Kerberos { spnego: Option<Spnego>, oid: &'static [u8], acceptor: Box<Acceptor> },
    AwaitAuthenticate { spnego: Option<Spnego>, negotiate: Vec<u8>, challenge: Vec<u8> },
    /// Done or failed: an error sticks, like the exchange's end.
    Finished,
}

/// One authentication exchange on the server (one per SESSION_SETUP
/// sequence). Feed each client security buffer to [`ServerAuth::step`].
///
/// The client may send SPNEGO (an InitialContextToken with NegTokenInit,
/// then NegTokenResp) or raw NTLMSSP messages; answers use the same form.
/// Once `step` returns an error or `Done`, further calls fail.
pub struct ServerAuth {
    target: TargetInfo,
    now_filetime: u64,
    server_challenge: [u8; 8],
    /// Offer and accept NTLMSSP (`[auth] ntlm`).
    ntlm: bool,
    /// Accept Kerberos with the keys of this keytab (`[kerberos] keytab`).
    keytab: Option<Arc<Path>>,
    state: State,
}

fn expect_resp(token: &[u8]) -> Result<NegTokenResp<'_>, AuthError> {
    match spnego::decode(token)? {
        Token::Resp(r) if r.neg_state == Some(NegState::Reject) => Err(AuthError::LogonFailure),
        Token::Resp(r) => Ok(r),
        Token::Init(_) => Err(AuthError::Malformed("expected NegTokenResp")),
    }
}

impl ServerAuth {
    /// `now_filetime`: the current time as FILETIME (100 ns since 1601),
    /// sent as MsvAvTimestamp; the server challenge comes from `rand`.
    pub fn new(target: TargetInfo, now_filetime: u64) -> ServerAuth {
        ServerAuth::with_challenge(target, now_filetime, rand::random())
    }

    /// As [`ServerAuth::new`], with the server challenge given (a fixed
    /// one lets a test replay a client's tokens).
    pub fn with_challenge(target: TargetInfo, now_filetime: u64, server_challenge: [u8; 8]) -> ServerAuth {
        ServerAuth { target, now_filetime, server_challenge, ntlm: true, keytab: None, state: State::Start }
    }

    /// Which mechanisms this exchange accepts: NTLMSSP when `ntlm`,
    /// Kerberos when there is a `keytab`.
    pub fn mechanisms(self, ntlm: bool, keytab: Option<Arc<Path>>) -> ServerAuth {
        ServerAuth { ntlm, keytab, ..self }
    }

    /// The mechanism this server would pick for `oid`, if it accepts it.
    fn accepts(&self, oid: &[u8]) -> Option<&'static [u8]> {
        match oid {
            o if o == NTLMSSP_OID && self.ntlm => Some(NTLMSSP_OID),
            o if o == MS_KRB5_OID && self.keytab.is_some() => Some(MS_KRB5_OID),
            o if o == KRB5_OID && self.keytab.is_some() => Some(KRB5_OID),
            _ => None,
        }
    }

    /// Feeds the client's security buffer. `lookup(user, domain)` returns
    /// the user's NT hash.
    ///
    /// Errors: [`AuthError::Malformed`] for undecodable tokens or a token out
    /// of sequence; [`AuthError::Unsupported`] when the client offers no
    /// NTLMSSP (e.g. Kerberos only), an OEM-only NTLMSSP, or needs a
    /// mechListMIC without extended session security;
    /// [`AuthError::LogonFailure`] for an unknown user, a wrong password, a
    /// bad MIC or mechListMIC, a client reject, and for NTLMv1 and LM-only
    /// responses, which are refused (as Windows does when set to "NTLMv2
    /// only").
    pub fn step(&mut self, token: &[u8], lookup: &dyn Fn(&str, &str) -> Option<[u8; 16]>) -> Result<AuthStep, AuthError> {
        if token.len() > MAX_TOKEN {
            self.state = State::Finished;
            return Err(AuthError::Malformed("security token too large"));
        }
        match std::mem::replace(&mut self.state, State::Finished) {
            State::Start => self.start(token),
            State::AwaitNegotiate(spnego) => {
                let resp = expect_resp(token)?;
                let negotiate = resp.response_token.ok_or(AuthError::Malformed("NegTokenResp without responseToken"))?;
                self.challenge(negotiate, Some(spnego), false)
            }
            State::AwaitAuthenticate { spnego, negotiate, challenge } => {
                self.authenticate(token, spnego, &negotiate, &challenge, lookup)
            }
            State::Kerberos { spnego: None, oid, acceptor } => self.kerberos(token, None, None, oid, acceptor, false),
            State::Kerberos { spnego, oid, acceptor } => {
                let resp = expect_resp(token)?;
                let ap_req = resp.response_token.ok_or(AuthError::Malformed("NegTokenResp without responseToken"))?;
                self.kerberos(ap_req, resp.mech_list_mic, spnego, oid, acceptor, false)
            }
            State::Finished => Err(AuthError::Malformed("authentication exchange already finished")),
        }
    }

    /// First leg: raw NEGOTIATE_MESSAGE, or SPNEGO NegTokenInit
    /// (RFC 4178 4.2.1, MS-SPNG 3.2.5.2).
    fn start(&mut self, token: &[u8]) -> Result<AuthStep, AuthError> {
        if token.starts_with(ntlm::SIGNATURE) {
            if !self.ntlm {
                return Err(AuthError::NtlmBlocked);
            }
            return self.challenge(token, None, false);
        }
        // RFC 2743 3.1: a raw Kerberos InitialContextToken, no SPNEGO.
        if let Some(oid) = spnego::initial_token_mech(token).and_then(|m| self.accepts(m)).filter(|m| *m != NTLMSSP_OID) {
            let acceptor = self.acceptor()?;
            return self.kerberos(token, None, None, oid, acceptor, false);
        }
        let Token::Init(init) = spnego::decode(token)? else {
            return Err(AuthError::Malformed("exchange must start with NegTokenInit"));
        };
        // The initiator's first choice that this server accepts.
        let Some((pos, oid)) = init.mech_types.iter().enumerate().find_map(|(i, m)| Some((i, self.accepts(m)?))) else {
            if init.mech_types.contains(&NTLMSSP_OID) {
                return Err(AuthError::NtlmBlocked);
            }
            return Err(AuthError::Unsupported("client offered no mechanism this server accepts"));
        };
        // RFC 4178 5: when the selected mechanism is not the initiator's
        // first choice, the mechListMIC exchange is mandatory (request-mic).
        let spnego = Spnego { mech_types_der: init.mech_types_der.to_vec(), mic_required: pos != 0 };
        let state = if spnego.mic_required { NegState::RequestMic } else { NegState::AcceptIncomplete };
        if oid != NTLMSSP_OID {
            let acceptor = self.acceptor()?;
            return match init.mech_token {
                // The optimistic token is an AP-REQ for the mechanism chosen.
                Some(ap_req) if pos == 0 => self.kerberos(ap_req, None, Some(spnego), oid, acceptor, true),
                _ => {
                    self.state = State::Kerberos { spnego: Some(spnego), oid, acceptor };
                    Ok(AuthStep::Continue(spnego::encode_resp(Some(state), Some(oid), None, None)))
                }
            };
        }
        match init.mech_token {
            // The optimistic token is ours: answer it with the challenge.
            Some(negotiate) if pos == 0 => self.challenge(negotiate, Some(spnego), true),
            // No token, or one for a mechanism we lack: name NTLMSSP and wait.
            _ => {
                self.state = State::AwaitNegotiate(spnego);
                Ok(AuthStep::Continue(spnego::encode_resp(Some(state), Some(NTLMSSP_OID), None, None)))
            }
        }
    }

    /// A Kerberos acceptor with the keytab's keys.
    fn acceptor(&self) -> Result<Box<Acceptor>, AuthError> {
        let keytab = self.keytab.as_ref().ok_or(AuthError::Unsupported("no keytab"))?;
        Acceptor::new(keytab).map(Box::new).map_err(|e| {
            tracing::warn!("kerberos: the keytab's keys cannot be used: {e}");
            AuthError::LogonFailure
        })
    }

    /// MS-KILE 3.4.5.1: check an AP-REQ (in an RFC 4121 InitialContextToken)
    /// and answer with the AP-REP, in a NegTokenResp naming `oid` when
    /// `first_reply`. mechListMIC (RFC 4178 5) as for NTLMSSP: checked when
    /// the client sends one, required when Kerberos was not its first
    /// choice, and then answered with ours.
    fn kerberos(
        &mut self,
        ap_req: &[u8],
        client_mic: Option<&[u8]>,
        spnego: Option<Spnego>,
        oid: &'static [u8],
        mut acceptor: Box<Acceptor>,
        first_reply: bool,
    ) -> Result<AuthStep, AuthError> {
        let supported = first_reply.then_some(oid);
        let fail = |e: smbq_gssapi::Error| {
            tracing::info!("kerberos: AP-REQ refused: {e}");
            match e.failure() {
                Failure::Malformed => AuthError::Malformed("not a Kerberos AP-REQ"),
                Failure::ClockSkew => AuthError::ClockSkew,
                _ => AuthError::LogonFailure,
            }
        };
        let ap_rep = match acceptor.step(ap_req).map_err(fail)? {
            Step::Continue(tok) => {
                let out = match spnego {
                    None => tok,
                    Some(_) => spnego::encode_resp(Some(NegState::AcceptIncomplete), supported, Some(&tok), None),
                };
                self.state = State::Kerberos { spnego, oid, acceptor };
                return Ok(AuthStep::Continue(out));
            }
            Step::Done(tok) => tok,
        };
        let target = acceptor.acceptor().map_err(fail)?;
        //= MS-KILE 3.4.5.1: the server accepts tickets for its own service;
        //# smbq's is cifs/NAME for each name it answers to.
        if !target.starts_with("cifs/") {
            tracing::info!("kerberos: refused a ticket for {target}, not a cifs/ service");
            return Err(AuthError::LogonFailure);
        }
        let principal = acceptor.initiator().map_err(fail)?;
        let session_key = acceptor.session_key().map_err(fail)?;
        let pac = acceptor.pac().map_err(fail)?;
        let token = match spnego {
            None => ap_rep,
            Some(spnego) => {
                let send_mic = match client_mic {
                    Some(mic) => {
                        acceptor.verify_mic(&spnego.mech_types_der, mic).map_err(|_| AuthError::LogonFailure)?;
                        true
                    }
                    None if spnego.mic_required => return Err(AuthError::LogonFailure),
                    None => false,
                };
                let mic = if send_mic { Some(acceptor.get_mic(&spnego.mech_types_der).map_err(fail)?) } else { None };
                spnego::encode_resp(Some(NegState::AcceptCompleted), supported, Some(&ap_rep), mic.as_deref())
            }
        };
        let (user, domain) = principal.rsplit_once('@').map_or((principal.clone(), String::new()), |(u, r)| (u.to_string(), r.to_string()));
        Ok(AuthStep::Done {
            token,
            user,
            domain,
            session_key,
            anonymous: false,
            kerberos: Some(KerberosLogon { principal, service: target, pac }),
        })
    }

    /// MS-NLMP 3.2.5.1.1: answer NEGOTIATE_MESSAGE with CHALLENGE_MESSAGE.
    fn challenge(&mut self, negotiate: &[u8], spnego: Option<Spnego>, first_reply: bool) -> Result<AuthStep, AuthError> {
        let client_flags = ntlm::decode_negotiate(negotiate)?;
        if client_flags & ntlm::NEGOTIATE_UNICODE == 0 {
            return Err(AuthError::Unsupported("NTLMSSP without Unicode"));
        }
        let flags = SERVER_FLAGS | (client_flags & ntlm::ECHOED_FLAGS);
        let challenge = ntlm::encode_challenge(flags, &self.target.netbios_computer, &self.server_challenge, &self.target_info());
        let out = match &spnego {
            None => challenge.clone(),
            Some(_) => spnego::encode_resp(Some(NegState::AcceptIncomplete), first_reply.then_some(NTLMSSP_OID), Some(&challenge), None),
        };
        self.state = State::AwaitAuthenticate { spnego, negotiate: negotiate.to_vec(), challenge };
        Ok(AuthStep::Continue(out))
    }

    /// MS-NLMP 2.2.1.2 TargetInfo: NetBIOS and DNS names, MsvAvTimestamp, EOL.
    fn target_info(&self) -> Vec<u8> {
        let t = &self.target;
        let mut out = Vec::new();
        ntlm::push_av(&mut out, ntlm::AV_NB_DOMAIN_NAME, &utf16le(&t.netbios_domain));
        ntlm::push_av(&mut out, ntlm::AV_NB_COMPUTER_NAME, &utf16le(&t.netbios_computer));
        ntlm::push_av(&mut out, ntlm::AV_DNS_DOMAIN_NAME, &utf16le(&t.dns_domain));
        ntlm::push_av(&mut out, ntlm::AV_DNS_COMPUTER_NAME, &utf16le(&t.dns_computer));
        ntlm::push_av(&mut out, ntlm::AV_TIMESTAMP, &self.now_filetime.to_le_bytes());
        ntlm::push_av(&mut out, ntlm::AV_EOL, &[]);
        out
    }

    /// MS-NLMP 3.2.5.1.2 on AUTHENTICATE_MESSAGE, then RFC 4178 5 mechListMIC.
    fn authenticate(
        &mut self,
        token: &[u8],
        spnego: Option<Spnego>,
        negotiate: &[u8],
        challenge: &[u8],
        lookup: &dyn Fn(&str, &str) -> Option<[u8; 16]>,
    ) -> Result<AuthStep, AuthError> {
        let (auth_msg, client_mic) = match spnego {
            None => (token, None),
            Some(_) => {
                let r = expect_resp(token)?;
                (r.response_token.ok_or(AuthError::Malformed("NegTokenResp without responseToken"))?, r.mech_list_mic)
            }
        };
        let auth = ntlm::decode_authenticate(auth_msg)?;
        if auth.nt.is_empty() {
            // MS-NLMP 3.2.5.1.2: an empty NtChallengeResponse and UserName with
            // an empty or Z(1) LmChallengeResponse is anonymous authentication.
            if auth.user.is_empty() && matches!(auth.lm, [] | [0]) {
                let token = match spnego {
                    None => Vec::new(),
                    Some(_) => spnego::encode_resp(Some(NegState::AcceptCompleted), None, None, None),
                };
                return Ok(AuthStep::Done {
                    token,
                    user: String::new(),
                    domain: auth.domain,
                    session_key: vec![0; 16],
                    anonymous: true,
                    kerberos: None,
                });
            }
            // LM-only: refused.
            return Err(AuthError::LogonFailure);
        }
        // NTLMv1 (a 24-byte NT response) fails verify_v2's length check.
        let nt_hash = lookup(&auth.user, &auth.domain).ok_or(AuthError::LogonFailure)?;
        // NTOWFv2 covers the domain the client typed; also accept the usual
        // alternatives clients use with a standalone server.
        let upper = auth.domain.to_uppercase();
        let mut domains: Vec<&str> = Vec::new();
        for d in [auth.domain.as_str(), &upper, "", &self.target.netbios_domain, &self.target.netbios_computer] {
            if !domains.contains(&d) {
                domains.push(d);
            }
        }
        let v = ntlm::verify_v2(auth_msg, &auth, &nt_hash, &domains, &self.server_challenge, negotiate, challenge)?;
        let key = v.exported_session_key;
        let token = match spnego {
            None => Vec::new(),
            Some(s) => {
                let send_mic = match client_mic {
                    Some(mic) => {
                        let expected = ntlm::first_mic(auth.flags, &key, true, &s.mech_types_der)?;
                        if !ntlm::ct_eq(mic, &expected) {
                            return Err(AuthError::LogonFailure);
                        }
                        true
                    }
                    None if s.mic_required => return Err(AuthError::LogonFailure),
                    None => false,
                };
                let server_mic = if send_mic { Some(ntlm::first_mic(auth.flags, &key, false, &s.mech_types_der)?) } else { None };
                spnego::encode_resp(Some(NegState::AcceptCompleted), None, None, server_mic.as_ref().map(|m| m.as_slice()))
            }
        };
        Ok(AuthStep::Done { token, user: auth.user, domain: auth.domain, session_key: key.to_vec(), anonymous: false, kerberos: None })
    }
}
