//! NEGOTIATE (MS-SMB2 2.2.3, 2.2.4; processing 3.3.5.3 and 3.3.5.4), and
//! the SMB1 negotiate that starts a multi-protocol exchange (3.3.5.3.1).

use crate::conn_state::DIALECTS;
use crate::conn_state::{ConnState, Fatal, Negotiated};
use crate::transport_info::TransportKind;
use crate::credits::{self, Credits, CREDIT_PAYLOAD};
use crate::ctx::{Ctx, HResult, Req};
use smbq_crypto::{Cipher, PreauthHash, SigningAlgorithm};
use smbq_wire::negotiate::{
    caps, ctx as nctx, decode_id_list, decode_preauth, decode_transport_caps, security_mode, NegotiateRequest,
    NegotiateResponse, ACCEPT_TRANSPORT_LEVEL_SECURITY, HASH_SHA512,
};
use smbq_wire::{header, Dialect, Header, NtStatus, Put};

/// Cipher preference: GCM before CCM, 128 before 256 (what Windows picks).
const CIPHERS: [Cipher; 4] = [Cipher::Aes128Gcm, Cipher::Aes256Gcm, Cipher::Aes128Ccm, Cipher::Aes256Ccm];
const SIGNING: [SigningAlgorithm; 3] = [SigningAlgorithm::AesGmac, SigningAlgorithm::AesCmac, SigningAlgorithm::HmacSha256];

pub fn handle(ctx: &mut Ctx<'_>, req: &Req<'_>) -> HResult {
    let r = NegotiateRequest::decode(req.msg).map_err(NtStatus::from)?;
    //= MS-SMB2 3.3.5.4
    //# the server MUST select the greatest common dialect; if there is none,
    //# it MUST fail the request with STATUS_NOT_SUPPORTED.
    let dialect = DIALECTS.iter().copied().find(|d| r.dialects.contains(d)).ok_or(NtStatus::NOT_SUPPORTED)?;
    let info = &ctx.conn.info;
    let mut neg = Negotiated {
        client_guid: r.client_guid,
        client_capabilities: r.capabilities,
        client_security_mode: r.security_mode,
        ..settle(ctx.conn, dialect)
    };
    let mut contexts = Vec::new();
    if dialect == Dialect::SMB311 {
        //# If the negotiate request has no SMB2_PREAUTH_INTEGRITY_CAPABILITIES
        //# context, or it names no hash we support, fail with
        //# STATUS_INVALID_PARAMETER / STATUS_SMB_NO_PREAUTH_INTEGRITY_HASH_OVERLAP.
        let pre = r.context(nctx::PREAUTH_INTEGRITY).ok_or(NtStatus::INVALID_PARAMETER)?;
        let hashes = decode_preauth(pre).map_err(NtStatus::from)?;
        if !hashes.contains(&HASH_SHA512) {
            return Err(NtStatus(0xC05D_0000)); // STATUS_SMB_NO_PREAUTH_INTEGRITY_HASH_OVERLAP
        }
        let salt: [u8; 32] = ctx.conn.server.random();
        let mut d = Vec::new();
        d.u16(1);
        d.u16(32);
        d.u16(HASH_SHA512);
        d.bytes(&salt);
        contexts.push((nctx::PREAUTH_INTEGRITY, d));

        if let Some(data) = r.context(nctx::ENCRYPTION) {
            let offered = decode_id_list(data).map_err(NtStatus::from)?;
            neg.cipher = CIPHERS.iter().copied().find(|c| offered.contains(&c.id()));
            let mut d = Vec::new();
            d.u16(1);
            d.u16(neg.cipher.map(|c| c.id()).unwrap_or(0));
            contexts.push((nctx::ENCRYPTION, d));
        }
        if let Some(data) = r.context(nctx::SIGNING) {
            let offered = decode_id_list(data).map_err(NtStatus::from)?;
            neg.signing = SIGNING.iter().copied().find(|a| offered.contains(&a.id())).unwrap_or(SigningAlgorithm::AesCmac);
            let mut d = Vec::new();
            d.u16(1);
            d.u16(neg.signing.id());
            contexts.push((nctx::SIGNING, d));
        }
        //= MS-SMB2 3.3.5.4
        //# SMB2_TRANSPORT_CAPABILITIES: accepted only over a transport that
        //# itself provides security (QUIC), never over TCP.
        if let Some(data) = r.context(nctx::TRANSPORT_CAPABILITIES) {
            let flags = decode_transport_caps(data).map_err(NtStatus::from)?;
            let allowed = ctx.conn.server.config.allow_transport_security;
            if flags & ACCEPT_TRANSPORT_LEVEL_SECURITY != 0 && allowed && info.secure && info.kind == TransportKind::Quic {
                neg.transport_security = true;
                let mut d = Vec::new();
                d.u32(ACCEPT_TRANSPORT_LEVEL_SECURITY);
                contexts.push((nctx::TRANSPORT_CAPABILITIES, d));
            }
        }
        // The SMB3 POSIX extensions (smbq_wire::posix), where a share has
        // them: the client lists the variants it speaks, 16 bytes each;
        // a list of another length is INVALID_PARAMETER, as on Samba.
        if let Some(data) = r.context(smbq_wire::posix::NEGOTIATE_CONTEXT).filter(|_| ctx.conn.server.has_posix_share()) {
            if data.len() % 16 != 0 {
                return Err(NtStatus::INVALID_PARAMETER);
            }
            if data.chunks(16).any(|v| v == smbq_wire::posix::TAG) {
                neg.posix = true;
                contexts.push((smbq_wire::posix::NEGOTIATE_CONTEXT, smbq_wire::posix::TAG.to_vec()));
            }
        }
        // smbq's multi-stream extension (docs/multistream.md): answered
        // only where the transport carries more than one stream (QUIC).
        if let Some(offer) = r.context(smbq_wire::multistream::NEGOTIATE_CONTEXT).and_then(smbq_wire::multistream::decode) {
            if info.streams > 1 {
                neg.streams = offer.min(info.streams);
                contexts.push((smbq_wire::multistream::NEGOTIATE_CONTEXT, smbq_wire::multistream::encode(neg.streams)));
            }
        }
    }
    //= MS-SMB2 3.3.5.4: directory leasing and multichannel for a 3.x
    //= client that asks for them, as Samba offers them (a client that
    //= does not ask may not handle them: impacket 0.13 fails every CREATE
    //= on a connection that has directory leasing).
    if dialect.is_smb3() && r.capabilities & caps::DIRECTORY_LEASING != 0 {
        neg.server_capabilities |= caps::DIRECTORY_LEASING;
    }
    if dialect.is_smb3() && r.capabilities & caps::MULTI_CHANNEL != 0 {
        neg.server_capabilities |= caps::MULTI_CHANNEL;
    }
    if (dialect == Dialect::SMB300 || dialect == Dialect::SMB302) && r.capabilities & caps::ENCRYPTION != 0 {
        neg.cipher = Some(Cipher::Aes128Ccm);
        neg.server_capabilities |= caps::ENCRYPTION;
    }
    let token = security_token(&ctx.conn.server.config);
    let header_start = ctx.header_start;
    response(ctx.conn, &neg, &token, contexts).encode(ctx.out, header_start);
    ctx.conn.preauth = PreauthHash::new();
    // SMB 2.0.2 has no ClientGuid; an all-zero one names no client.
    if dialect != Dialect::SMB202 && neg.client_guid != [0; 16] {
        ctx.conn.join_client = Some(neg.client_guid);
    }
    ctx.conn.neg = Some(neg);
    Ok(NtStatus::SUCCESS)
}

/// What a NEGOTIATE at `dialect` settles before the client's fields and
/// negotiate contexts are looked at; the SMB2 NEGOTIATE and the SMB1 one
/// answered with 2.0.2 share it, so both tell a client the same.
fn settle(st: &ConnState, dialect: Dialect) -> Negotiated {
    let multi_credit = credits::supports_multi_credit(dialect);
    let mut capabilities = 0;
    if multi_credit {
        capabilities |= caps::LARGE_MTU;
    }
    if dialect != Dialect::SMB202 {
        capabilities |= caps::LEASING;
    }
    //= MS-SMB2 3.3.5.3.2, 3.3.5.4
    //# SecurityMode MUST have the SMB2_NEGOTIATE_SIGNING_ENABLED bit set.
    //# If RequireMessageSigning is TRUE, the server MUST also set
    //# SMB2_NEGOTIATE_SIGNING_REQUIRED in the SecurityMode.
    let mut sec_mode = security_mode::SIGNING_ENABLED;
    if st.server.config.signing_required {
        sec_mode |= security_mode::SIGNING_REQUIRED;
    }
    Negotiated {
        dialect,
        client_guid: [0; 16],
        client_capabilities: 0,
        client_security_mode: 0,
        cipher: None,
        signing: if dialect.is_smb3() { SigningAlgorithm::AesCmac } else { SigningAlgorithm::HmacSha256 },
        max_io: max_io(multi_credit, st.server.config.limits.max_io),
        server_capabilities: capabilities,
        server_security_mode: sec_mode,
        transport_security: false,
        posix: false,
        streams: 1,
    }
}

/// MaxTransactSize, MaxReadSize and MaxWriteSize: the configured `limit`
/// where requests may cost several credits, else what one credit pays for.
/// A client without multi-credit sends CreditCharge 0 and sizes its READs,
/// WRITEs and QUERY_DIRECTORY buffers by what it is told (impacket over
/// port 139 and Windows Vista negotiate 2.0.2 through SMB1); Samba tells
/// a 2.0.2 client 64 KiB too.
fn max_io(multi_credit: bool, limit: u32) -> u32 {
    //= MS-SMB2 3.2.4.1.5
    //# Otherwise, the CreditCharge field MUST be set to 0 and the payload
    //# size of a request or the maximum size of a response MUST be a
    //# maximum of 65536.
    if multi_credit {
        limit
    } else {
        CREDIT_PAYLOAD.min(limit)
    }
}

/// The NEGOTIATE response telling the client `neg` (MS-SMB2 2.2.4).
/// The NEGOTIATE response's security buffer (MS-SMB2 3.3.5.4): the
/// mechanisms SESSION_SETUP accepts, Kerberos when a keytab is set,
/// NTLMSSP unless `[auth] ntlm = false`.
fn security_token(config: &crate::config::ServerConfig) -> Vec<u8> {
    smbq_auth::spnego_negotiate_token(config.kerberos.keytab.is_some(), config.ntlm)
}

fn response<'a>(st: &ConnState, neg: &Negotiated, token: &'a [u8], contexts: Vec<(u16, Vec<u8>)>) -> NegotiateResponse<'a> {
    NegotiateResponse {
        security_mode: neg.server_security_mode,
        dialect: neg.dialect,
        server_guid: st.server.guid,
        capabilities: neg.server_capabilities,
        max_transact: neg.max_io,
        max_read: neg.max_io,
        max_write: neg.max_io,
        system_time: st.server.now(),
        start_time: 0,
        security_buffer: token,
        contexts,
    }
}

/// An SMB1 NEGOTIATE naming "SMB 2.???" or "SMB 2.002" gets an SMB2
/// NEGOTIATE response with the wildcard dialect 0x02FF (MS-SMB2 3.3.5.3.1),
/// or 0x0202 (3.3.5.3.2), which settles the connection at 2.0.2 as an SMB2
/// NEGOTIATE would. Anything else ends the connection.
pub(crate) fn smb1(st: &mut ConnState, credits: &mut Credits, msg: &[u8]) -> Result<Vec<u8>, Fatal> {
    if st.neg.is_some() {
        return Err(Fatal::PeerMisbehaved("SMB1 after NEGOTIATE"));
    }
    // SMB1 header is 32 bytes; command 0x72 NEGOTIATE at byte 4; then
    // WordCount (must be 0), ByteCount, and 0x02-prefixed dialect strings.
    if msg.get(4) != Some(&0x72) || msg.get(32) != Some(&0) {
        return Err(Fatal::Malformed("SMB1 message"));
    }
    let bytes = msg.get(35..).ok_or(Fatal::Malformed("SMB1 negotiate"))?;
    let names: Vec<&[u8]> = bytes.split(|b| *b == 0).map(|s| s.strip_prefix(&[2u8][..]).unwrap_or(s)).collect();
    let dialect = if names.contains(&&b"SMB 2.???"[..]) {
        Dialect::WILDCARD
    } else if names.contains(&&b"SMB 2.002"[..]) {
        Dialect::SMB202
    } else {
        return Err(Fatal::PeerMisbehaved("SMB1 negotiate without SMB2 dialects"));
    };
    if !credits.consume(0, 1) {
        return Err(Fatal::PeerMisbehaved("SMB1 negotiate twice"));
    }
    let mut out = vec![0u8; 4];
    let hdr = Header {
        command: smbq_wire::Command::NEGOTIATE.0,
        credits: credits.grant(1),
        flags: header::flags::SERVER_TO_REDIR,
        ..Default::default()
    };
    hdr.encode(&mut out);
    let token = security_token(&st.server.config);
    // The wildcard answer settles nothing: an SMB2 NEGOTIATE follows.
    let neg = settle(st, dialect);
    response(st, &neg, &token, Vec::new()).encode(&mut out, 4);
    if dialect == Dialect::SMB202 {
        st.neg = Some(neg);
    }
    Ok(out)
}
