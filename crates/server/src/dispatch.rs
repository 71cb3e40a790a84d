//! Request dispatch: compound splitting, the command table with each
//! command's preconditions, signing and sealing of responses, async
//! completion. MS-SMB2 3.3.5.2 (receiving any message) and 3.3.4.1
//! (sending any message).

use crate::conn_state::{ConnState, Connection, Fatal};
use crate::ctx::{Ctx, HResult, Req};
use crate::pending::{AsyncWork, Deferred, Pending};
use crate::transport_info::CONTROL_STREAM;
use crate::cmd;
use bytes::Bytes;
use crate::session::SessionState;
use smbq_crypto::TRANSFORM_HEADER_LEN;
use smbq_wire::header::{encode_error_body, flags, HEADER_LEN};
use smbq_wire::{Command, Dialect, FileId, Header, NtStatus};
use std::sync::Arc;
use std::time::Instant;


/// Run deferred request `d` again in `ctx`; `None` while it still waits.
fn retry_deferred(ctx: &mut Ctx<'_>, d: &mut Deferred) -> Option<HResult> {
    let msg = std::mem::take(&mut d.msg);
    ctx.deferred_since = Some(d.since);
    let hdr = ctx.hdr.clone();
    let handler = TABLE.get(usize::from(hdr.command))?.handler;
    let result = handler(ctx, &Req { hdr: &hdr, msg: &msg, tail: &[] });
    match ctx.go_async.take() {
        Some(AsyncWork::Deferred(next)) => {
            *d = next;
            None
        }
        _ => Some(result),
    }
}

type Handler = fn(&mut Ctx<'_>, &Req<'_>) -> HResult;

/// Whether a request changes what a share holds. On a read-only tree (a
/// share marked read-only, or a share's read-only user) a modifying
/// request is refused with STATUS_ACCESS_DENIED before its handler runs.
#[derive(Clone, Copy)]
pub enum Modifies {
    Never,
    Always,
    /// Decided from the request body (CREATE's access and disposition,
    /// SET_INFO's class, IOCTL's control code).
    When(fn(&[u8]) -> bool),
}

/// Preconditions per command (the Samba `smbd_smb2_table` idea): checked
/// here, once, before the handler runs.
pub struct CommandSpec {
    pub command: Command,
    /// StructureSize of the request body.
    pub structure_size: u16,
    pub needs_session: bool,
    pub needs_tree: bool,
    pub modifies: Modifies,
    pub handler: Handler,
}

const fn spec(command: Command, structure_size: u16, needs_session: bool, needs_tree: bool, modifies: Modifies, handler: Handler) -> CommandSpec {
    CommandSpec { command, structure_size, needs_session, needs_tree, modifies, handler }
}

use Modifies::{Always, Never, When};

/// Indexed by opcode; `TABLE[i].command.0 == i` (tested).
pub static TABLE: [CommandSpec; 19] = [
    spec(Command::NEGOTIATE, 36, false, false, Never, cmd::negotiate::handle),
    spec(Command::SESSION_SETUP, 25, false, false, Never, cmd::session_setup::handle),
    spec(Command::LOGOFF, 4, true, false, Never, cmd::logoff::handle),
    spec(Command::TREE_CONNECT, 9, true, false, Never, cmd::tree_connect::handle),
    spec(Command::TREE_DISCONNECT, 4, true, true, Never, cmd::tree_disconnect::handle),
    spec(Command::CREATE, 57, true, true, When(cmd::create::modifies), cmd::create::handle),
    spec(Command::CLOSE, 24, true, true, Never, cmd::close::handle),
    spec(Command::FLUSH, 24, true, true, Never, cmd::flush::handle),
    spec(Command::READ, 49, true, true, Never, cmd::read::handle),
    spec(Command::WRITE, 49, true, true, Always, cmd::write::handle),
    spec(Command::LOCK, 48, true, true, Never, cmd::lock::handle),
    spec(Command::IOCTL, 57, true, true, When(cmd::ioctl::modifies), cmd::ioctl::handle),
    spec(Command::CANCEL, 4, false, false, Never, not_supported),
    spec(Command::ECHO, 4, false, false, Never, cmd::echo::handle),
    spec(Command::QUERY_DIRECTORY, 33, true, true, Never, cmd::query_directory::handle),
    spec(Command::CHANGE_NOTIFY, 32, true, true, Never, cmd::change_notify::handle),
    spec(Command::QUERY_INFO, 41, true, true, Never, cmd::query_info::handle),
    spec(Command::SET_INFO, 33, true, true, When(cmd::set_info::modifies), cmd::set_info::handle),
    spec(Command::OPLOCK_BREAK, 24, true, true, Never, cmd::oplock_break::handle),
];

fn not_supported(_: &mut Ctx<'_>, _: &Req<'_>) -> HResult {
    Err(NtStatus::NOT_SUPPORTED)
}

/// At most this many elements in one compound.
const MAX_COMPOUND: usize = 128;

/// The most a response message may hold: the 24-bit Direct TCP length
/// (MS-SMB2 2.1) less the transform header, with room left for an error
/// answer to every element the compound may still hold. An element whose
/// response would pass it (several large READs in one compound) fails
/// alone with STATUS_INSUFFICIENT_RESOURCES; the frame stays well formed.
const MAX_RESPONSE: usize = smbq_wire::framing::MAX_FRAME - TRANSFORM_HEADER_LEN - MAX_COMPOUND * (HEADER_LEN + 16);

/// State carried between the elements of a compound (MS-SMB2 3.3.5.2.7).
#[derive(Default)]
struct Chain {
    session_id: u64,
    tree_id: u32,
    file_id: Option<FileId>,
    /// A failed CREATE fails the related elements after it with its status.
    create_failed: Option<NtStatus>,
    /// The previous element named a session and tree that exist; a related
    /// element after one that did not (or heading the chain) is invalid.
    valid: bool,
    /// The message holds one request, not a compound.
    alone: bool,
}

/// Process one plaintext message (possibly a compound). `enc` is the
/// session whose key decrypted it.
pub(crate) fn process(c: &mut Connection, now: Instant, msg: &[u8], enc: Option<u64>, tail: &[Bytes]) -> Result<(), Fatal> {
    let prefix = 4 + if enc.is_some() { TRANSFORM_HEADER_LEN } else { 0 };
    let mut out = Vec::with_capacity(prefix + 1024);
    out.resize(prefix, 0);
    let mut chain = Chain { valid: false, ..Chain::default() };
    let mut starts: Vec<(usize, Option<u64>)> = Vec::new();
    let mut off = 0usize;
    for n in 0.. {
        if n >= MAX_COMPOUND {
            return Err(Fatal::PeerMisbehaved("too many compound elements"));
        }
        let rest = msg.get(off..).ok_or(Fatal::Malformed("compound offset"))?;
        let hdr = Header::decode(rest).map_err(|_| Fatal::Malformed("SMB2 header"))?;
        let len = match hdr.next_command as usize {
            0 => rest.len(),
            next if next < HEADER_LEN || next % 8 != 0 || next > rest.len() => {
                return Err(Fatal::Malformed("NextCommand"));
            }
            next => next,
        };
        let elem = rest.get(..len).ok_or(Fatal::Malformed("compound element"))?;
        chain.alone = n == 0 && hdr.next_command == 0;
        if let Some(&(prev, _)) = starts.last() {
            let pad = (8 - (out.len() - prev) % 8) % 8;
            out.resize(out.len() + pad, 0);
            let next = (out.len() - prev) as u32;
            if let Some(f) = out.get_mut(prev + 20..prev + 24) {
                f.copy_from_slice(&next.to_le_bytes());
            }
        }
        let start = out.len();
        let sign = element(c, now, &Req { hdr: &hdr, msg: elem, tail }, &mut out, &mut chain, enc)?;
        if out.len() > start {
            starts.push((start, sign));
        }
        if hdr.next_command == 0 {
            break;
        }
        off += len;
    }
    if starts.is_empty() {
        return Ok(());
    }
    // The last response of a compound is padded to 8 bytes too, as
    // Windows and Samba pad it (smbtorture smb2.compound.compound-padding);
    // a lone response is not.
    if let (true, Some(&(last, _))) = (starts.len() > 1, starts.last()) {
        let pad = (8 - (out.len() - last) % 8) % 8;
        out.resize(out.len() + pad, 0);
    }
    finish(c, out, &starts, enc);
    if !c.pending.is_empty() {
        // Work released by this message (a LOGOFF closing handles) is
        // answered while its session's keys still exist.
        retry_pending(c, now);
    }
    let gone: Vec<u64> = c.st.sessions.iter().filter(|(_, s)| matches!(s.state, SessionState::LoggedOff)).map(|(&id, _)| id).collect();
    for sid in gone {
        c.st.end_session(sid, now);
    }
    Ok(())
}

/// Sign each element that needs it, seal the whole if the request was
/// sealed, queue it.
fn finish(c: &mut Connection, mut out: Vec<u8>, starts: &[(usize, Option<u64>)], enc: Option<u64>) {
    for (i, &(start, sign)) in starts.iter().enumerate() {
        let end = starts.get(i + 1).map(|s| s.0).unwrap_or(out.len());
        if let (Some(sid), Some(elem)) = (sign, out.get_mut(start..end)) {
            if let Some(signer) = signing_key(&c.st, sid, elem) {
                signer.sign(elem);
            }
        }
    }
    if let Some(sid) = enc {
        if let Some(s) = c.st.session_mut(sid) {
            let nonce = s.next_nonce();
            if let (Some(sealer), Some(buf)) = (s.encryptor.as_ref(), out.get_mut(4..)) {
                sealer.seal(sid, &nonce, buf);
            }
        }
    }
    c.queue(out);
}

/// MS-SMB2 3.3.4.1.1: an answer is signed with the key of the channel it
/// goes out on; a SESSION_SETUP answer that is not a success, on a
/// connection that has no channel key yet (a binding under way), with
/// Session.SigningKey, found in the GlobalSessionTable. (Samba's client
/// checks such answers so: the channel's key if it has one.)
fn signing_key(st: &ConnState, sid: u64, response: &[u8]) -> Option<Arc<smbq_crypto::Signer>> {
    let channel = st.session(sid).and_then(|s| s.channel_signer(st.id)).cloned();
    let command = response.get(12..14).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let status = response.get(8..12).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    if command == Some(Command::SESSION_SETUP.0) && status != Some(NtStatus::SUCCESS.0) {
        channel.or_else(|| session_key(st, sid))
    } else {
        channel
    }
}

/// Session.SigningKey of session `sid`, wherever it lives.
fn session_key(st: &ConnState, sid: u64) -> Option<Arc<smbq_crypto::Signer>> {
    match st.sessions.get(&sid) {
        Some(s) => s.signer.clone(),
        None => st.server.live_session(sid).map(|l| l.signer),
    }
}

/// A SESSION_SETUP asking to bind a further channel (MS-SMB2 2.2.5 Flags).
fn binds(req: &[u8]) -> bool {
    req.get(HEADER_LEN + 2).is_some_and(|f| f & smbq_wire::session_setup::FLAG_BINDING != 0)
}

/// Handle one element; appends its response to `out`. Returns the session
/// whose key must sign the response, if any.
fn element(
    c: &mut Connection,
    now: Instant,
    req: &Req<'_>,
    out: &mut Vec<u8>,
    chain: &mut Chain,
    enc: Option<u64>,
) -> Result<Option<u64>, Fatal> {
    let hdr = req.hdr;
    if !admit(c, hdr, enc)? {
        return Ok(None);
    }
    let header_start = out.len();
    let Ran { result, session_id, tree_id, related_file_id, go_async, disconnect, lookup_failed } = run(c, now, req, out, chain, enc, header_start);
    let command = hdr.command();
    if disconnect {
        return Err(Fatal::PeerMisbehaved("request the spec answers by disconnecting"));
    }
    if let (Some(AsyncWork::Job(job)), Ok(_)) = (&go_async, &result) {
        // On the pool: no answer yet (a late one, or an interim first,
        // see crate::job). Only a request alone in its message gets here.
        let job = *job;
        out.truncate(header_start);
        let async_id = c.async_id();
        let p = Pending::new(hdr, now, async_id, (session_id, tree_id), enc.is_some(), AsyncWork::Job(job));
        c.pending.push(Pending { interim_at: Some(now + crate::job::INTERIM_DELAY), stream: c.stream, ..p });
        return Ok(None);
    }
    let result = match result {
        Ok(_) if out.len() > MAX_RESPONSE => Err(NtStatus::INSUFFICIENT_RESOURCES),
        r => r,
    };
    let status = match result {
        Ok(s) => s,
        Err(s) => {
            out.truncate(header_start + HEADER_LEN);
            encode_error_body(out, &[]);
            s
        }
    };
    if out.len() == header_start + HEADER_LEN {
        encode_error_body(out, &[]);
    }
    chain.valid = !lookup_failed;
    chain.session_id = session_id;
    chain.tree_id = tree_id;
    chain.file_id = related_file_id;
    if command == Command::CREATE && status.is_error() {
        chain.create_failed = Some(status);
    }

    let (status, sign) = answer_header(c, req, now, out, header_start, (session_id, tree_id), status, go_async, enc);
    hash_preauth(c, req, out, header_start, session_id, status, sign);
    Ok(sign.then_some(session_id))
}

/// A request element's checks before its command runs: a response sent
/// to the server, NEGOTIATE first and once, the credit window; a CANCEL
/// is carried out here (`Ok(false)`: nothing to answer).
fn admit(c: &mut Connection, hdr: &Header, enc: Option<u64>) -> Result<bool, Fatal> {
    let command = hdr.command();
    if hdr.flags & flags::SERVER_TO_REDIR != 0 {
        return Err(Fatal::PeerMisbehaved("response sent to the server"));
    }
    match (&c.st.neg, command) {
        (None, Command::NEGOTIATE) => {}
        (None, _) => return Err(Fatal::PeerMisbehaved("request before NEGOTIATE")),
        (Some(_), Command::NEGOTIATE) => return Err(Fatal::PeerMisbehaved("second NEGOTIATE")),
        _ => {}
    }
    if let Some(m) = &c.st.server.metrics {
        m.request(hdr.command);
    }
    if command == Command::CANCEL {
        cancel(c, hdr, enc);
        return Ok(false);
    }
    let charge = crate::credits::charged(crate::credits::multi_credit(c.st.neg.as_ref()), hdr.credit_charge);
    if !c.credits.consume(hdr.message_id, charge) {
        return Err(Fatal::PeerMisbehaved("message id outside the credit window"));
    }
    Ok(true)
}

/// What running a request element's command left.
struct Ran {
    result: HResult,
    session_id: u64,
    tree_id: u32,
    related_file_id: Option<FileId>,
    go_async: Option<AsyncWork>,
    disconnect: bool,
    /// Its session or tree was not found (a related element after it
    /// inherits nothing).
    lookup_failed: bool,
}

/// Run a request element's command, its response body going after a
/// header's room at `header_start` of `out`.
fn run(c: &mut Connection, now: Instant, req: &Req<'_>, out: &mut Vec<u8>, chain: &Chain, enc: Option<u64>, header_start: usize) -> Ran {
    let hdr = req.hdr;
    let related = hdr.flags & flags::RELATED_OPERATIONS != 0;
    // A related element takes the previous element's session and tree; one
    // that cannot (it heads the chain) answers with its own ids.
    let inherit = related && chain.valid;
    let (session_id, tree_id) = if inherit { (chain.session_id, chain.tree_id) } else { (hdr.session_id, hdr.tree_id) };

    out.resize(header_start + HEADER_LEN, 0);
    let may_defer = chain.alone && c.st.offload && c.pending.len() < c.st.server.config.limits.max_outstanding;
    let mut ctx = Ctx {
        conn: &mut c.st,
        hdr,
        session_id,
        tree_id,
        related_file_id: if related { chain.file_id } else { None },
        encrypted: enc.is_some(),
        out,
        header_start,
        now,
        go_async: None,
        may_defer,
        deferred_since: None,
        disconnect: false,
    };
    //= MS-SMB2 3.3.5.2.7.2
    //# a related operation takes the session, tree and file of the previous
    //# one; the first operation of a compound cannot be related (Windows and
    //# Samba answer STATUS_INVALID_PARAMETER, as smbtorture smb2.compound.invalid1 checks).
    //= MS-SMB2 3.3.5.2.1.1, 3.3.5.2.9
    //# every element of a decrypted message must name the session whose
    //# key decrypted it (a related element inherits it); otherwise the
    //# request fails with STATUS_ACCESS_DENIED, as Samba answers.
    let foreign = enc.is_some_and(|e| e != session_id);
    let result = match (related, chain.create_failed) {
        (true, _) if !chain.valid => Err(NtStatus::INVALID_PARAMETER),
        _ if foreign => Err(NtStatus::ACCESS_DENIED),
        (true, Some(st)) => Err(st),
        _ => check(&mut ctx, req.msg).and_then(|spec| (spec.handler)(&mut ctx, req)),
    };
    let lookup_failed = matches!(result, Err(NtStatus::USER_SESSION_DELETED | NtStatus::NETWORK_NAME_DELETED))
        || (related && !chain.valid)
        || foreign;
    let Ctx { session_id, tree_id, related_file_id, go_async, disconnect, .. } = ctx;
    Ran { result, session_id, tree_id, related_file_id, go_async, disconnect, lookup_failed }
}

/// The response header of an element whose body is in `out`: credits,
/// ids, an async answer's interim (the request goes on the pending list),
/// and the signature when it is signed; returns the status sent and
/// whether it is signed.
#[allow(clippy::too_many_arguments)]
fn answer_header(
    c: &mut Connection,
    req: &Req<'_>,
    now: Instant,
    out: &mut Vec<u8>,
    header_start: usize,
    (session_id, tree_id): (u64, u32),
    mut status: NtStatus,
    go_async: Option<AsyncWork>,
    enc: Option<u64>,
) -> (NtStatus, bool) {
    let hdr = req.hdr;
    let mut rh = Header {
        credit_charge: hdr.credit_charge,
        status: 0,
        command: hdr.command,
        credits: c.credits.grant(hdr.credits),
        flags: flags::SERVER_TO_REDIR | (hdr.flags & (flags::RELATED_OPERATIONS | flags::PRIORITY_MASK)),
        next_command: 0,
        message_id: hdr.message_id,
        async_id: 0,
        tree_id,
        session_id,
        signature: [0; 16],
    };
    let go_async = match go_async {
        //= MS-SMB2 3.3.4.2 (and <159>): an operation that would go async in
        //= the middle of a compound fails with STATUS_INTERNAL_ERROR, as Windows does.
        Some(_) if hdr.next_command != 0 => {
            status = NtStatus::INTERNAL_ERROR;
            out.truncate(header_start + HEADER_LEN);
            encode_error_body(out, &[]);
            None
        }
        // Bound what a peer can park on the server (limits.max_outstanding).
        Some(_) if c.pending.len() >= c.st.server.config.limits.max_outstanding => {
            status = NtStatus::INSUFFICIENT_RESOURCES;
            out.truncate(header_start + HEADER_LEN);
            encode_error_body(out, &[]);
            None
        }
        w => w,
    };
    if let Some(work) = go_async {
        let async_id = c.async_id();
        rh.flags |= flags::ASYNC_COMMAND;
        rh.async_id = async_id;
        status = NtStatus::PENDING;
        out.truncate(header_start + HEADER_LEN);
        encode_error_body(out, &[]);
        // Its final answer, sent after the interim, echoes no priority bits.
        c.pending.push(Pending { priority: 0, stream: c.stream, ..Pending::new(hdr, now, async_id, (session_id, tree_id), enc.is_some(), work) });
    }
    rh.status = status.0;
    if let (Some(m), false) = (&c.st.server.metrics, status == NtStatus::PENDING) {
        m.response(hdr.command, status, now);
    }

    let sign = should_sign(c, req, session_id, status, enc);
    if sign {
        rh.flags |= flags::SIGNED;
    } else if status.is_error() && enc.is_none() && hdr.flags & flags::SIGNED != 0 {
        // No key to sign with (unknown session): echo the request's
        // signature, as Samba does and its client accepts for such errors.
        rh.flags |= flags::SIGNED;
        rh.signature = hdr.signature;
    }
    let mut h = Vec::with_capacity(HEADER_LEN);
    rh.encode(&mut h);
    if let Some(dst) = out.get_mut(header_start..header_start + HEADER_LEN) {
        dst.copy_from_slice(&h);
    }

    (status, sign)
}

/// Preauth integrity (MS-SMB2 3.3.5.4, 3.3.5.5): hash the exchange.
fn hash_preauth(c: &mut Connection, req: &Req<'_>, out: &mut [u8], header_start: usize, session_id: u64, status: NtStatus, sign: bool) {
    let command = req.hdr.command();
    if c.st.neg.as_ref().is_some_and(|n| n.dialect == Dialect::SMB311) {
        let resp = out.get(header_start..).unwrap_or(&[]);
        if command == Command::NEGOTIATE {
            c.st.preauth.update(req.msg);
            c.st.preauth.update(resp);
        } else if command == Command::SESSION_SETUP && status == NtStatus::MORE_PROCESSING_REQUIRED {
            let me = c.st.id;
            let key = out.get(header_start..).and_then(|r| signing_key(&c.st, session_id, r)).filter(|_| sign);
            if let (Some(s), Some(resp)) = (c.st.session_mut(session_id), out.get_mut(header_start..)) {
                // The client hashes the answer as it arrives: a binding's
                // is signed (and signed again, alike, when it is sent).
                if let Some(signer) = key {
                    signer.sign(resp);
                }
                s.preauth_on(me).update(resp);
            }
        }
    }
}

/// MS-SMB2 3.3.4.1.1: sign responses to signed requests and on sessions that
/// require signing, unless the message is sealed; always the final
/// SESSION_SETUP success of a 3.x session.
fn should_sign(c: &Connection, req: &Req<'_>, session_id: u64, status: NtStatus, enc: Option<u64>) -> bool {
    let hdr = req.hdr;
    if enc.is_some() {
        return false;
    }
    if hdr.command() == Command::SESSION_SETUP && binds(req.msg) && status != NtStatus::SUCCESS {
        // Answered with Session.SigningKey, also on a connection that is
        // not (yet) one of the session's channels.
        return hdr.flags & flags::SIGNED != 0 && session_key(&c.st, session_id).is_some();
    }
    let Some(s) = c.st.session(session_id) else { return false };
    // A session has a signing key from its first logon on; while it
    // re-authenticates its responses are signed as before.
    if s.signer.is_none() {
        return false;
    }
    if hdr.command() == Command::SESSION_SETUP {
        return status == NtStatus::SUCCESS || hdr.flags & flags::SIGNED != 0;
    }
    hdr.flags & flags::SIGNED != 0 || s.signing_required
}

/// Table preconditions (MS-SMB2 3.3.5.2.6 – 3.3.5.2.11).
fn check(ctx: &mut Ctx<'_>, elem: &[u8]) -> Result<&'static CommandSpec, NtStatus> {
    let spec = TABLE.get(ctx.hdr.command as usize).ok_or(NtStatus::INVALID_PARAMETER)?;
    let body = elem.get(HEADER_LEN..).unwrap_or(&[]);
    // OPLOCK_BREAK carries an oplock (24) or a lease (36) acknowledgment.
    let lease_ack = spec.command == Command::OPLOCK_BREAK && body.get(..2) == Some(&smbq_wire::lease::ACK_SIZE.to_le_bytes()[..]);
    let size = if lease_ack { smbq_wire::lease::ACK_SIZE } else { spec.structure_size };
    smbq_wire::check_structure_size(body, size).map_err(|_| NtStatus::INVALID_PARAMETER)?;
    let encrypted = ctx.encrypted;
    if !spec.needs_session {
        //= MS-SMB2 3.3.5.2.4: a signed request naming a session is verified
        //= even when the command needs no session (ECHO).
        let signed = ctx.hdr.flags & flags::SIGNED != 0;
        if signed && !encrypted && spec.command == Command::SESSION_SETUP && binds(elem) {
            //= MS-SMB2 3.3.5.2.4: a binding request is verified with
            //= Session.SigningKey, found in the GlobalSessionTable.
            if session_key(ctx.conn, ctx.session_id).is_some_and(|k| !k.verify(elem)) {
                return Err(NtStatus::ACCESS_DENIED);
            }
            return Ok(spec);
        }
        if let (true, false, Some(s)) = (signed, encrypted, ctx.conn.session(ctx.session_id)) {
            // A binding under way is verified with Session.SigningKey.
            let key = s.channel_signer(ctx.conn.id).or(s.signer.as_ref());
            if s.is_valid() && !key.is_some_and(|sig| sig.verify(elem)) {
                return Err(NtStatus::ACCESS_DENIED);
            }
        }
        //= MS-SMB2 3.3.5.2.4: a re-authentication of a session that
        //= requires signing must be signed (smbtorture
        //= smb2.session.bind_negative_smb3sign*s).
        let unsigned_reauth = !signed && !encrypted && spec.command == Command::SESSION_SETUP;
        if unsigned_reauth && ctx.conn.session(ctx.session_id).is_some_and(|s| s.is_valid() && s.signing_required) {
            return Err(NtStatus::ACCESS_DENIED);
        }
        return Ok(spec);
    }
    let s = ctx.conn.session(ctx.session_id).ok_or(NtStatus::USER_SESSION_DELETED)?;
    // A channel whose binding is still under way serves nothing else.
    // A session a reload ended (its user removed) may still log off, to
    // close its opens.
    let logs_off = spec.command == Command::LOGOFF && matches!(s.state, crate::session::SessionState::Valid);
    let Some(signer) = s.channel_signer(ctx.conn.id).filter(|_| s.is_valid() || logs_off) else {
        return Err(NtStatus::USER_SESSION_DELETED);
    };
    if !encrypted {
        if ctx.hdr.flags & flags::SIGNED != 0 {
            let ok = signer.verify(elem);
            if !ok {
                return Err(NtStatus::ACCESS_DENIED);
            }
        } else if s.signing_required {
            return Err(NtStatus::ACCESS_DENIED);
        }
        if s.encrypt_data {
            return Err(NtStatus::ACCESS_DENIED);
        }
    }
    if spec.needs_tree {
        let t = s.trees.get(&ctx.tree_id).ok_or(NtStatus::NETWORK_NAME_DELETED)?;
        // A reload removed or changed the share (Server::reload): the
        // client may only let go of the tree.
        if t.share.removed() && spec.command != Command::TREE_DISCONNECT {
            return Err(NtStatus::NETWORK_NAME_DELETED);
        }
        if t.encrypt && !encrypted {
            return Err(NtStatus::ACCESS_DENIED);
        }
        let modifies = match spec.modifies {
            Never => false,
            Always => true,
            When(f) => f(body),
        };
        if modifies && t.share.read_only() {
            return Err(NtStatus::ACCESS_DENIED);
        }
    }
    Ok(spec)
}

/// CANCEL (MS-SMB2 3.3.5.16): complete the matching pending request with
/// STATUS_CANCELLED; no response to the CANCEL itself.
fn cancel(c: &mut Connection, hdr: &Header, enc: Option<u64>) {
    let pos = c.pending.iter().position(|p| {
        // A sealed CANCEL cancels only requests of the session that sealed it.
        if enc.is_some_and(|e| e != p.session_id) {
            return false;
        }
        if hdr.is_async() {
            p.async_id == hdr.async_id
        } else {
            p.message_id == hdr.message_id
        }
    });
    if let Some(i) = pos {
        let p = c.pending.remove(i);
        if let AsyncWork::Lock(b) = &p.work {
            cmd::lock::cancel(&mut c.st, b);
        }
        complete(c, p, Err(NtStatus::CANCELLED), Vec::new());
    }
}

/// Retry blocked operations; finished ones get their final response.
pub(crate) fn retry_pending(c: &mut Connection, now: Instant) {
    // Requests of a session that logged off are dropped unanswered.
    let st = &c.st;
    c.pending.retain(|p| st.session(p.session_id).is_some());
    let mut i = 0;
    while i < c.pending.len() {
        let p = &mut c.pending[i];
        let prefix = p.prefix();
        let mut body = vec![0; prefix + HEADER_LEN];
        let hdr = Header { command: p.command, message_id: p.message_id, session_id: p.session_id, tree_id: p.tree_id, ..Default::default() };
        let mut ctx = Ctx {
            conn: &mut c.st,
            hdr: &hdr,
            session_id: p.session_id,
            tree_id: p.tree_id,
            related_file_id: None,
            encrypted: p.encrypted,
            out: &mut body,
            header_start: prefix,
            now,
            go_async: None,
            may_defer: false,
            deferred_since: None,
            disconnect: false,
        };
        let done = match &mut p.work {
            AsyncWork::Lock(b) => cmd::lock::retry(&mut ctx, b),
            AsyncWork::Notify(w) => cmd::change_notify::retry(&mut ctx, w),
            AsyncWork::Deferred(d) => retry_deferred(&mut ctx, d),
            AsyncWork::Job(_) => None,
        };
        match done {
            Some(result) => {
                let p = c.pending.remove(i);
                complete(c, p, result, body);
            }
            None => i += 1,
        }
    }
}

/// A job's result: the final answer of the request that waits for it
/// (one cancelled meanwhile was answered already).
pub(crate) fn job_done(c: &mut Connection, done: crate::job::JobDone) {
    use crate::job::Work;
    let Some(i) = c.pending.iter().position(|p| matches!(p.work, AsyncWork::Job(id) if id == done.id)) else { return };
    let p = c.pending.remove(i);
    let mut body = vec![0; p.prefix() + HEADER_LEN];
    let (result, body) = match (done.work, done.result) {
        (_, Err(s)) => (Err(s), Vec::new()),
        (Work::Read(job), Ok(n)) => cmd::read::job_done(&mut c.st, job, n),
        (Work::Write { .. }, Ok(n)) => {
            if let Some(m) = &c.st.server.metrics {
                m.written(n);
            }
            smbq_wire::write::encode_response(&mut body, n as u32);
            (Ok(NtStatus::SUCCESS), body)
        }
        (Work::Sync, Ok(_)) => {
            smbq_wire::flush::encode_response(&mut body);
            (Ok(NtStatus::SUCCESS), body)
        }
    };
    complete(c, p, result, body);
}

/// Interim responses (MS-SMB2 3.3.4.2) for jobs not done in time.
pub(crate) fn send_interims(c: &mut Connection, now: Instant) {
    let mut pending = std::mem::take(&mut c.pending);
    for p in pending.iter_mut().filter(|p| p.interim_at.is_some_and(|t| now >= t)) {
        let mut out = vec![0; p.prefix() + HEADER_LEN];
        encode_error_body(&mut out, &[]);
        late(c, p, NtStatus::PENDING, true, out);
        p.interim_at = None;
    }
    c.pending = pending;
}
/// An oplock break notification for the open `volatile` of this
/// connection (MS-SMB2 2.2.23.1, 3.3.4.6): MessageId all ones, no
/// session or tree in the header, not signed; sealed with the open's
/// session key when its session or share encrypts. An open closed
/// meanwhile needs no break.
pub(crate) fn send_oplock_break(c: &mut Connection, volatile: u64, level: u8) {
    let Some(o) = c.st.opens.get(&volatile) else { return };
    let file_id = o.file_id;
    send_break(c, volatile, |out| smbq_wire::oplock_break::encode(out, level, file_id));
}

/// A lease break notification (MS-SMB2 2.2.23.2, 3.3.4.7), sent as an
/// oplock break is, for a lease that an open of this connection is under.
pub(crate) fn send_lease_break(c: &mut Connection, key: &[u8; 16], epoch: u16, from: u8, to: u8, ack: bool) {
    let me = c.st.id;
    let Some(o) = c.st.opens.values().find(|o| o.lease.as_ref() == Some(key) && o.home == me) else { return };
    let volatile = o.file_id.volatile;
    send_break(c, volatile, |out| smbq_wire::lease::encode_break(out, epoch, ack, key, u32::from(from), u32::from(to)));
}

/// A server-initiated break message, its body written by `body`: sealed
/// with the key of the session of open `volatile` when its session or
/// share encrypts.
fn send_break(c: &mut Connection, volatile: u64, body: impl FnOnce(&mut Vec<u8>)) {
    let Some(o) = c.st.opens.get(&volatile) else { return };
    let (sid, tid) = (o.session_id, o.tree_id);
    let encrypt = c.st.session(sid).is_some_and(|s| {
        s.encryptor.is_some() && (s.encrypt_data || s.trees.get(&tid).is_some_and(|t| t.encrypt))
    });
    let prefix = 4 + if encrypt { TRANSFORM_HEADER_LEN } else { 0 };
    let mut out = Vec::with_capacity(prefix + HEADER_LEN + 44);
    out.resize(prefix, 0);
    let h = Header {
        command: Command::OPLOCK_BREAK.0,
        flags: flags::SERVER_TO_REDIR,
        message_id: u64::MAX,
        ..Default::default()
    };
    h.encode(&mut out);
    body(&mut out);
    c.on_stream(CONTROL_STREAM, |c| finish(c, out, &[(prefix, None)], encrypt.then_some(sid)));
}

/// Send the final response of an async operation. `body` is either empty
/// or room for the frame prefix and the header, then the response body.
fn complete(c: &mut Connection, p: Pending, result: crate::ctx::HResult, body: Vec<u8>) {
    if p.adopted {
        return;
    }
    let prefix = p.prefix();
    let (status, mut out) = match result {
        Ok(s) if body.len() >= prefix + HEADER_LEN => (s, body),
        Ok(s) | Err(s) => (s, vec![0; prefix + HEADER_LEN]),
    };
    if out.len() == prefix + HEADER_LEN {
        encode_error_body(&mut out, &[]);
    }
    late(c, &p, status, false, out);
}

/// Send an answer to pending request `p` that is not sent with the
/// request's own message: its interim (`interim`), or its final answer.
/// Whichever goes first grants the credits the request asked for; once
/// an interim went out, answers are async (MS-SMB2 3.3.4.2).
fn late(c: &mut Connection, p: &Pending, status: NtStatus, interim: bool, mut out: Vec<u8>) {
    let enc = if p.encrypted { Some(p.session_id) } else { None };
    if let (Some(m), false) = (&c.st.server.metrics, interim) {
        m.response(p.command, status, p.arrived);
    }
    let prefix = p.prefix();
    let first = interim || p.interim_at.is_some();
    let is_async = interim || p.interim_at.is_none();
    let signed = enc.is_none()
        && c.st.session(p.session_id).is_some_and(|s| s.signer.is_some() && (p.signed || s.signing_required));
    let rh = Header {
        // The request's charge on every answer, as Samba does: impacket
        // moves its message ids on by the charge of the final answer.
        credit_charge: p.credit_charge,
        status: status.0,
        command: p.command,
        credits: if first { c.credits.grant(p.credits_asked) } else { 0 },
        flags: flags::SERVER_TO_REDIR
            | p.priority
            | if is_async { flags::ASYNC_COMMAND } else { 0 }
            | if signed { flags::SIGNED } else { 0 },
        next_command: 0,
        message_id: p.message_id,
        async_id: if is_async { p.async_id } else { 0 },
        tree_id: if is_async { 0 } else { p.tree_id },
        session_id: p.session_id,
        signature: [0; 16],
    };
    let mut h = Vec::with_capacity(HEADER_LEN);
    rh.encode(&mut h);
    if let Some(dst) = out.get_mut(prefix..prefix + HEADER_LEN) {
        dst.copy_from_slice(&h);
    }
    // Interim answers go on the control stream, final ones on the
    // request's (docs/multistream.md).
    let stream = if interim { CONTROL_STREAM } else { p.stream };
    c.on_stream(stream, |c| finish(c, out, &[(prefix, signed.then_some(p.session_id))], enc));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_indexed_by_opcode() {
        for (i, s) in TABLE.iter().enumerate() {
            assert_eq!(s.command.0 as usize, i, "{:?}", s.command);
        }
    }
}
