//! SESSION_SETUP (MS-SMB2 2.2.5, 2.2.6; processing 3.3.5.5): SPNEGO with
//! NTLMv2 or Kerberos, key derivation, re-authentication.

use crate::config::{EncryptPolicy, ServerConfig};
use crate::ctx::{Ctx, HResult, Req};
use crate::conn_state::Negotiated;
use crate::transport_info::TransportKind;
use crate::server::LiveSession;
use crate::session::{Channel, Session, SessionState};
use smbq_auth::{AuthError, AuthStep, ServerAuth, TargetInfo};
use smbq_crypto::{derive_keys, Sealer, Signer, SigningAlgorithm};
use smbq_wire::negotiate::security_mode;
use smbq_wire::session_setup::{encode_response, session_flags, SessionSetupRequest, FLAG_BINDING};
use smbq_wire::security::Sid;
use smbq_wire::{Dialect, NtStatus};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

pub fn handle(ctx: &mut Ctx<'_>, req: &Req<'_>) -> HResult {
    let server = ctx.conn.server.clone();
    let limits = &server.config.limits;
    let r = SessionSetupRequest::decode(req.msg, limits.max_security_blob).map_err(NtStatus::from)?;
    let neg = ctx.conn.neg.clone().ok_or(NtStatus::INVALID_PARAMETER)?;
    // A new NTLM exchange: this server's names, its clock, a challenge
    // from its generator.
    let new_auth = || {
        let target = TargetInfo {
            netbios_computer: server.config.server_name.clone(),
            netbios_domain: server.config.domain.clone(),
            dns_computer: server.config.server_name.to_lowercase(),
            dns_domain: String::new(),
        };
        let keytab = server.config.kerberos.keytab.as_deref().map(Arc::from);
        ServerAuth::with_challenge(target, server.now(), server.random()).mechanisms(server.config.ntlm, keytab)
    };
    if r.flags & FLAG_BINDING != 0 {
        if let Some(refusal) = bind_refusal(ctx, req, &neg) {
            return Err(refusal);
        }
        return bind(ctx, req, &r, &neg, new_auth());
    }
    let mut sid = req.hdr.session_id;
    let me = ctx.conn.id;
    if sid == 0 {
        if ctx.conn.sessions.values().filter(|s| s.on(me)).count() >= limits.max_sessions_per_connection
            || server.sessions.load(Ordering::Relaxed) >= limits.max_sessions
        {
            return Err(NtStatus::REQUEST_NOT_ACCEPTED);
        }
        sid = server.session_id();
        let s = Session::new(sid, ctx.conn.id, new_auth(), ctx.conn.preauth.clone(), server.random());
        ctx.conn.sessions.insert(sid, s);
        server.count_session(true);
    }
    ctx.session_id = sid;
    let session = ctx.conn.sessions.get_mut(&sid).filter(|s| s.on(me)).ok_or(NtStatus::USER_SESSION_DELETED)?;
    let reauth = session.signer.is_some();
    if session.is_valid() {
        //= MS-SMB2 3.3.5.5.2: re-authentication of a valid session.
        session.state = SessionState::InProgress(Box::new(new_auth()));
    }
    if neg.dialect == Dialect::SMB311 && !reauth {
        session.preauth.update(req.msg);
    }
    let SessionState::InProgress(auth) = &mut session.state else {
        return Err(NtStatus::INVALID_PARAMETER);
    };
    let lookup = |user: &str, _domain: &str| server.lookup_user(user);
    let step = auth.step(r.security_buffer, &lookup);
    let failed = |ctx: &mut Ctx<'_>, status: NtStatus| {
        tracing::info!(peer = ?ctx.conn.info.peer, %status, "session setup failed");
        if reauth {
            //= MS-SMB2 3.3.5.5.3: a failed re-authentication ends the
            //= session; it goes once its error response is signed with
            //= its key (dispatch drops logged-off sessions after sending).
            ctx.conn.close_where(ctx.now, |o| o.session_id == sid);
            if let Some(s) = ctx.conn.sessions.get_mut(&sid) {
                s.trees.clear();
                s.state = SessionState::LoggedOff;
            }
        } else {
            ctx.conn.end_session(sid, ctx.now);
        }
        if status == NtStatus::LOGON_FAILURE && limits.failed_logon_delay_ms > 0 {
            ctx.conn.delay_until = Some(ctx.now + Duration::from_millis(limits.failed_logon_delay_ms));
        }
        Err(status)
    };
    let Logon { token, user, domain, session_key, groups, .. } = match outcome(&server.config, step) {
        Ok(Outcome::Continue(tok)) => {
            encode_response(ctx.out, ctx.header_start, 0, &tok);
            return Ok(NtStatus::MORE_PROCESSING_REQUIRED);
        }
        // Anonymous logons are refused, but a session may re-authenticate
        // as anonymous (Windows and Samba allow it; smbtorture
        // smb2.session.reauth2).
        Ok(Outcome::Done(l)) if l.anonymous && !reauth => return failed(ctx, NtStatus::LOGON_FAILURE),
        Ok(Outcome::Done(l)) => l,
        Err(status) => return failed(ctx, status),
    };
    if reauth {
        //# The user of a re-authenticated session must not change; it may
        //# drop to anonymous and come back.
        if !user.is_empty() && !session.logon_user.eq_ignore_ascii_case(&user) {
            return failed(ctx, NtStatus::ACCESS_DENIED);
        }
        session.user = user;
        session.groups = groups;
        session.state = SessionState::Valid;
        encode_response(ctx.out, ctx.header_start, if session.encrypt_data { session_flags::ENCRYPT_DATA } else { 0 }, &token);
        return Ok(NtStatus::SUCCESS);
    }
    let preauth = (neg.dialect == Dialect::SMB311).then_some(&session.preauth.0);
    let keys = derive_keys(neg.dialect.0, &session_key, preauth, neg.cipher);
    let algo = if neg.dialect.is_smb3() { neg.signing } else { SigningAlgorithm::HmacSha256 };
    let signer = Arc::new(Signer::new(algo, &keys.signing));
    session.signer = Some(Arc::clone(&signer));
    if let Some(ch) = session.channel_mut(me) {
        ch.signer = Some(Arc::clone(&signer));
    }
    if let Some(cipher) = neg.cipher {
        session.encryptor = Some(Sealer::new(cipher, &keys.encrypt));
        session.decryptor = Some(Sealer::new(cipher, &keys.decrypt));
    }
    session.signing_required = server.config.signing_required
        || u16::from(r.security_mode) & security_mode::SIGNING_REQUIRED != 0;
    let info = &ctx.conn.info;
    let trusted_transport = info.secure && info.kind == TransportKind::Quic && server.config.allow_transport_security;
    match session_encrypts(server.config.encrypt, neg.cipher.is_some(), neg.transport_security, trusted_transport) {
        Ok(on) => session.encrypt_data = on,
        Err(status) => return failed(ctx, status),
    }
    session.logon_user = user.clone();
    session.user = user;
    session.groups = groups;
    session.domain = domain;
    session.state = SessionState::Valid;
    let live = LiveSession {
        connection: ctx.conn.id,
        user: session.user.to_lowercase(),
        dialect: neg.dialect,
        signing: algo,
        cipher: neg.cipher,
        signer,
        ended: Arc::clone(&session.ended),
    };
    server.register_session(sid, live);
    //= MS-SMB2 3.3.5.5.3
    //# If PreviousSessionId is not zero, the server MUST look up [the
    //# session] in GlobalSessionTable [...] if the user is the same, the
    //# server MUST remove the previous session [...].
    if r.previous_session_id != 0 && r.previous_session_id != sid {
        server.end_previous_session(r.previous_session_id, &session.user);
    }
    tracing::info!(peer = ?ctx.conn.info.peer, user = %session.user, dialect = ?neg.dialect, cipher = ?neg.cipher,
        encrypt = session.encrypt_data, transport_security = neg.transport_security, "session established");
    let flags = if session.encrypt_data { session_flags::ENCRYPT_DATA } else { 0 };
    encode_response(ctx.out, ctx.header_start, flags, &token);
    Ok(NtStatus::SUCCESS)
}

/// Where one authentication leg leaves a SESSION_SETUP.
enum Outcome {
    /// Send this token with STATUS_MORE_PROCESSING_REQUIRED.
    Continue(Vec<u8>),
    Done(Logon),
}

/// Who authenticated, as smbq sees them.
struct Logon {
    token: Vec<u8>,
    /// The smbq user (empty for anonymous).
    user: String,
    domain: String,
    /// Full length: Kerberos AES-256 keys are 32 bytes (see derive_keys).
    session_key: Vec<u8>,
    /// SIDs beyond the user's own that access checks count: a Kerberos
    /// ticket's PAC's user and group SIDs.
    groups: Vec<Sid>,
    anonymous: bool,
}

/// The status an authentication failure gets (MS-SMB2 3.3.5.5.3; Samba's
/// mapping of Kerberos errors: a clock skew is
/// NT_STATUS_TIME_DIFFERENCE_AT_DC, other AP-REQ failures
/// NT_STATUS_LOGON_FAILURE).
fn status_of(e: AuthError) -> NtStatus {
    match e {
        AuthError::LogonFailure => NtStatus::LOGON_FAILURE,
        AuthError::Malformed(_) => NtStatus::INVALID_PARAMETER,
        AuthError::Unsupported(_) => NtStatus::NOT_SUPPORTED,
        AuthError::NtlmBlocked => NtStatus::NTLM_BLOCKED,
        AuthError::ClockSkew => NtStatus::TIME_DIFFERENCE_AT_DC,
    }
}

/// Turns an authentication step into smbq's terms: a Kerberos principal
/// becomes the smbq user `[kerberos]` maps it to (refused when none), and
/// its PAC's SIDs join the session's groups.
fn outcome(config: &ServerConfig, step: Result<AuthStep, AuthError>) -> Result<Outcome, NtStatus> {
    let (token, user, domain, session_key, anonymous, kerberos) = match step.map_err(status_of)? {
        AuthStep::Continue(tok) => return Ok(Outcome::Continue(tok)),
        AuthStep::Done { token, user, domain, session_key, anonymous, kerberos } => (token, user, domain, session_key, anonymous, kerberos),
    };
    let Some(k) = kerberos else {
        return Ok(Outcome::Done(Logon { token, user, domain, session_key, groups: Vec::new(), anonymous }));
    };
    let Some(user) = config.kerberos.user_of(&k.principal) else {
        tracing::info!(principal = %k.principal, "kerberos: the principal is not an smbq user ([kerberos] realm, [kerberos.map])");
        return Err(NtStatus::LOGON_FAILURE);
    };
    let groups = match &k.pac {
        None => Vec::new(),
        Some(pac) => match smbq_auth::pac::logon_info(pac) {
            Ok(Some(info)) => std::iter::once(info.user).chain(info.groups).collect(),
            Ok(None) => Vec::new(),
            Err(e) => {
                tracing::info!(principal = %k.principal, "kerberos: the ticket's PAC does not decode: {e}");
                return Err(NtStatus::LOGON_FAILURE);
            }
        },
    };
    tracing::debug!(principal = %k.principal, service = %k.service, %user, groups = groups.len(), "kerberos logon");
    Ok(Outcome::Done(Logon { token, user, domain, session_key, groups, anonymous: false }))
}

/// Whether a new session asks its client to encrypt (Session.EncryptData,
/// SMB2_SESSION_FLAG_ENCRYPT_DATA; MS-SMB2 3.3.5.5.3), or the status it is
/// refused with. `policy` is the server-wide EncryptData: `Required` also
/// sets RejectUnencryptedAccess, `Desired` asks without rejecting.
///
/// - SMB2_ACCEPT_TRANSPORT_LEVEL_SECURITY agreed in NEGOTIATE (QUIC only,
///   MS-SMB2 2.2.3.1.5, 3.3.5.4): no SMB encryption, whatever the policy.
/// - `Required` and a client without a cipher: STATUS_ACCESS_DENIED
///   (MS-SMB2 3.3.5.5, step 2).
/// - `Desired` over a transport this server trusts to encrypt
///   (`trusted_transport`: QUIC's TLS 1.3, with `allow_transport_security`
///   on): no SMB encryption either, the bytes are encrypted once, by QUIC.
///   MS-SMB2 has the server skip SMB encryption over a secure transport
///   (DisableEncryptionOverSecureTransport, 3.1.1.1) when the client
///   offered SMB2_TRANSPORT_CAPABILITIES; smbq does it for a desired
///   encryption without that offer too, since desiring is the server's own
///   wish and QUIC already meets it. `Required` still asks; a client that
///   wants SMB encryption inside QUIC anyway may seal its requests, and
///   their answers are sealed (MS-SMB2 3.3.4.1.4). SMB encryption keys
///   come from the user's credentials, QUIC's from the certificate:
///   `allow_transport_security = false` keeps SMB encryption inside QUIC.
///
/// Encryption decides what the end of a session looks like to the client:
/// a sealed request for a session that is gone (a failed
/// re-authentication ends the session, MS-SMB2 3.3.5.5.3) disconnects the
/// connection (MS-SMB2 3.3.5.2.1.1), while a signed one gets
/// STATUS_USER_SESSION_DELETED. Samba 4.24's QUIC client (ngtcp2) reports
/// a peer's CONNECTION_CLOSE as NT_STATUS_UNSUCCESSFUL, not
/// NT_STATUS_CONNECTION_DISCONNECTED, so smbtorture's
/// smb2.session.reauth6 fails over QUIC whenever the session encrypts.
fn session_encrypts(policy: EncryptPolicy, can_encrypt: bool, transport_security: bool, trusted_transport: bool) -> Result<bool, NtStatus> {
    match policy {
        //= MS-SMB2 3.3.5.4: transport-level security agreed (QUIC only).
        _ if transport_security => Ok(false),
        //= MS-SMB2 3.3.5.5: EncryptData and RejectUnencryptedAccess, and a
        //= client that cannot encrypt: STATUS_ACCESS_DENIED.
        EncryptPolicy::Required if !can_encrypt => Err(NtStatus::ACCESS_DENIED),
        EncryptPolicy::Required => Ok(true),
        //= MS-SMB2 3.1.1.1 (DisableEncryptionOverSecureTransport), applied
        //= to an encryption the server only desires.
        EncryptPolicy::Desired => Ok(can_encrypt && !trusted_transport),
        EncryptPolicy::Off => Ok(false),
    }
}

/// Why a request to bind this connection to an existing session as a
/// further channel is refused, if it is (MS-SMB2 3.3.5.5, checked in the
/// order Samba checks them, whose statuses smbtorture's
/// smb2.session.bind_negative_* expect).
fn bind_refusal(ctx: &Ctx<'_>, req: &Req<'_>, neg: &Negotiated) -> Option<NtStatus> {
    let sid = req.hdr.session_id;
    if sid == 0 {
        return Some(NtStatus::INVALID_PARAMETER);
    }
    let Some(s) = ctx.conn.server.live_session(sid) else { return Some(NtStatus::USER_SESSION_DELETED) };
    let gmac = SigningAlgorithm::AesGmac.id();
    if s.signing.id() >= gmac && neg.signing != s.signing {
        return Some(NtStatus::REQUEST_OUT_OF_SEQUENCE);
    }
    if neg.signing.id() >= gmac && s.signing != neg.signing {
        return Some(NtStatus::NOT_SUPPORTED);
    }
    if !neg.dialect.is_smb3() {
        return Some(NtStatus::REQUEST_NOT_ACCEPTED);
    }
    //# the server MUST fail a binding request that is not signed with
    //# STATUS_INVALID_PARAMETER; so one from another dialect or cipher.
    if req.hdr.flags & smbq_wire::header::flags::SIGNED == 0 || s.dialect != neg.dialect || s.cipher != neg.cipher {
        return Some(NtStatus::INVALID_PARAMETER);
    }
    None
}

/// At most this many channels to one session (Samba's limit; smbtorture
/// smb2.multichannel.generic.num_channels expects INSUFFICIENT_RESOURCES
/// past it).
const MAX_CHANNELS: usize = 32;

/// Bind this connection to session `SessionId` as a further channel
/// (MS-SMB2 3.3.5.5.2 and 3.3.5.5.3; Samba's smbd_smb2_bind_auth_return):
/// the same user authenticates again; the channel then signs with a key
/// of its own, derived from that authentication's session key and, for
/// 3.1.1, from this connection's preauth hash. Encryption keeps the
/// session's keys. A session of another client (ClientGuid) cannot be
/// bound here: REQUEST_NOT_ACCEPTED, as Samba answers a bind to a
/// session of another process.
fn bind(ctx: &mut Ctx<'_>, req: &Req<'_>, r: &SessionSetupRequest<'_>, neg: &Negotiated, auth: ServerAuth) -> HResult {
    let (sid, me) = (req.hdr.session_id, ctx.conn.id);
    let preauth = ctx.conn.preauth.clone();
    let server = ctx.conn.server.clone();
    ctx.session_id = sid;
    let session = ctx.conn.sessions.get_mut(&sid).ok_or(NtStatus::REQUEST_NOT_ACCEPTED)?;
    if !session.is_valid() {
        return Err(NtStatus::USER_SESSION_DELETED);
    }
    match session.channel(me) {
        Some(c) if c.signer.is_some() => return Err(NtStatus::REQUEST_NOT_ACCEPTED),
        Some(_) => {}
        None => {
            if session.user.is_empty() {
                return Err(NtStatus::NOT_SUPPORTED);
            }
            if session.channels.len() >= MAX_CHANNELS {
                return Err(NtStatus::INSUFFICIENT_RESOURCES);
            }
            session.channels.push(Channel { connection: me, signer: None, binding: Some((Box::new(auth), preauth)) });
        }
    }
    if neg.dialect == Dialect::SMB311 {
        session.preauth_on(me).update(req.msg);
    }
    let lookup = |user: &str, _domain: &str| server.lookup_user(user);
    let step = match session.channel_mut(me).and_then(|c| c.binding.as_mut()) {
        Some((auth, _)) => auth.step(r.security_buffer, &lookup),
        None => Err(AuthError::Malformed("no binding under way")),
    };
    let failed = |session: &mut Session, status: NtStatus| {
        tracing::info!(%status, "session binding failed");
        session.channels.retain(|c| c.connection != me);
        Err(status)
    };
    let (token, session_key) = match outcome(&server.config, step) {
        Ok(Outcome::Continue(tok)) => {
            encode_response(ctx.out, ctx.header_start, 0, &tok);
            return Ok(NtStatus::MORE_PROCESSING_REQUIRED);
        }
        Ok(Outcome::Done(l)) if !l.anonymous && l.user.eq_ignore_ascii_case(&session.logon_user) => (l.token, l.session_key),
        Ok(Outcome::Done(_)) => return failed(session, NtStatus::ACCESS_DENIED),
        Err(status) => return failed(session, status),
    };
    let Some(ch) = session.channel_mut(me) else {
        return Err(NtStatus::USER_SESSION_DELETED);
    };
    let hash = ch.binding.take().map(|(_, p)| p.0);
    let preauth = hash.as_ref().filter(|_| neg.dialect == Dialect::SMB311);
    let keys = derive_keys(neg.dialect.0, &session_key, preauth, neg.cipher);
    ch.signer = Some(Arc::new(Signer::new(neg.signing, &keys.signing)));
    tracing::info!(peer = ?ctx.conn.info.peer, user = %session.user, session = sid, "channel bound");
    encode_response(ctx.out, ctx.header_start, 0, &token);
    Ok(NtStatus::SUCCESS)
}
