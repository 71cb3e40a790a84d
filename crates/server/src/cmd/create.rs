//! CREATE (MS-SMB2 2.2.13, 2.2.14; processing 3.3.5.9): open or create a
//! file or directory on a disk share, or a named pipe on IPC$. Also the
//! access-mask and share-mode rules the other file commands reuse.

use crate::meta::{meta, pipe_meta};
use crate::share_mode::{share_conflict, share_path, READ_ACCESS, WRITE_ACCESS};
use crate::access::{self as acl, map_access};
use crate::ctx::{Ctx, HResult, Req};
use crate::files::{FileLock, FileTable, OpenOwner, OpenRef};
use crate::open::{access, Open, OpenKind};
use crate::durable;
use crate::files::{Lease, LeaseId};
use crate::oplock;
use smbq_wire::lease::{self, LeaseContext};
use smbq_wire::oplock_break;
use crate::share::{Share, ShareKind};
use smbq_vfs::{CreateAction, Disposition, FileStat, FileSystem, Kind, OpenOptions};
use smbq_wire::create::{ctx_name, disposition, maximal_access_data, on_disk_id_data, options, share, CreateRequest, CreateResponse};
use smbq_wire::fscc::{attr, FileMeta};
use smbq_wire::security::SecurityDescriptor;
use smbq_wire::{FileId, NtStatus, Reader};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// DesiredAccess bits that are reserved (MS-SMB2 3.3.5.9).
const RESERVED_ACCESS: u32 = 0x0CE0_FE00;
/// CreateOptions bits Windows answers with STATUS_NOT_SUPPORTED
/// (FILE_CREATE_TREE_CONNECTION, FILE_OPEN_BY_FILE_ID, FILE_RESERVE_OPFILTER).
const NOT_SUPPORTED_OPTIONS: u32 = options::CREATE_TREE_CONNECTION | options::OPEN_BY_FILE_ID | options::RESERVE_OPFILTER;
/// CreateOptions bits above the defined ones.
const RESERVED_OPTIONS: u32 = 0xFF00_0000;

/// The request-level checks of MS-SMB2 3.3.5.9 that need no file.
fn validate(r: &CreateRequest<'_>) -> Result<(), NtStatus> {
    //= MS-SMB2 3.3.5.9
    //# If the ImpersonationLevel in the request is not one of the values
    //# specified in section 2.2.13, the server MUST fail the request with
    //# STATUS_BAD_IMPERSONATION_LEVEL.
    if r.impersonation_level > 3 {
        return Err(NtStatus::BAD_IMPERSONATION_LEVEL);
    }
    if r.options & RESERVED_OPTIONS != 0 {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    if r.options & NOT_SUPPORTED_OPTIONS != 0 {
        return Err(NtStatus::NOT_SUPPORTED);
    }
    if r.options & options::DIRECTORY_FILE != 0 && r.options & options::NON_DIRECTORY_FILE != 0 {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    if r.disposition > disposition::OVERWRITE_IF {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    // Checked before the attributes, as Windows does.
    //= MS-SMB2 3.3.5.9
    //# the server MUST fail the request with STATUS_ACCESS_DENIED if any
    //# reserved bits of DesiredAccess are set
    if r.desired_access & RESERVED_ACCESS != 0 {
        return Err(NtStatus::ACCESS_DENIED);
    }
    if r.desired_access & access::ACCESS_SYSTEM_SECURITY != 0 {
        return Err(NtStatus::PRIVILEGE_NOT_HELD);
    }
    // Windows over SMB2 denies an open that asks for no access at all
    // (smbtorture smb2.create.gentest).
    if r.desired_access == 0 {
        return Err(NtStatus::ACCESS_DENIED);
    }
    if r.file_attributes & !attr::VALID_SET != 0 {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    if r.share_access & !(share::READ | share::WRITE | share::DELETE) != 0 {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    Ok(())
}

fn vfs_disposition(d: u32) -> Disposition {
    match d {
        disposition::SUPERSEDE => Disposition::Supersede,
        disposition::OPEN => Disposition::Open,
        disposition::CREATE => Disposition::Create,
        disposition::OPEN_IF => Disposition::OpenIf,
        disposition::OVERWRITE => Disposition::Overwrite,
        _ => Disposition::OverwriteIf,
    }
}

/// Whether a CREATE body asks to change the share: a disposition that
/// creates or overwrites, delete-on-close, or any access beyond reading
/// (MAXIMUM_ALLOWED is not: it gets what the tree allows).
pub fn modifies(body: &[u8]) -> bool {
    let u32_at = |o: usize| Reader::new(body.get(o..).unwrap_or(&[])).u32().unwrap_or(0);
    const CHANGES: u32 = WRITE_ACCESS
        | access::FILE_WRITE_EA
        | access::FILE_WRITE_ATTRIBUTES
        | access::FILE_DELETE_CHILD
        | access::DELETE
        | access::WRITE_DAC
        | access::WRITE_OWNER
        | access::GENERIC_WRITE
        | access::GENERIC_ALL;
    let (desired, disp, opts) = (u32_at(24), u32_at(36), u32_at(40));
    desired & CHANGES != 0
        || matches!(disp, disposition::SUPERSEDE | disposition::CREATE | disposition::OVERWRITE | disposition::OVERWRITE_IF)
        || opts & options::DELETE_ON_CLOSE != 0
}

/// Handle an SMB2 CREATE (MS-SMB2 3.3.5.9).
pub fn handle(ctx: &mut Ctx<'_>, req: &Req<'_>) -> HResult {
    let r = CreateRequest::decode(req.msg).map_err(NtStatus::from)?;
    let tree = ctx.tree()?;
    let (share, maximal) = (Arc::clone(&tree.share), tree.maximal_access);
    if ctx.conn.opens.len() >= ctx.conn.server.config.limits.max_opens_per_connection {
        return Err(NtStatus::INSUFFICIENT_RESOURCES);
    }
    let durable = match share.kind {
        ShareKind::Disk(_) => durable_contexts(&r)?,
        ShareKind::Ipc => (None, None),
    };
    //= MS-SMB2 3.3.5.9.7
    //# There is no processing done for "Path Name Validation" or "Open
    //# Execution" [for a durable reconnect].
    if let (_, Some(rc)) = durable {
        return reconnect(ctx, req.msg, &r, &rc, &share);
    }
    validate(&r)?;
    let granted = map_access(r.desired_access, maximal);
    if granted & !maximal != 0 {
        return Err(NtStatus::ACCESS_DENIED);
    }
    match &share.kind {
        ShareKind::Ipc => open_pipe(ctx, &r, share_path(&r.name), granted, Arc::clone(&share)),
        // Names are share-relative: Windows fails one that starts with a
        // separator (smbtorture smb2.create.leading-slash).
        ShareKind::Disk(_) if r.name.starts_with('\\') => Err(NtStatus::INVALID_PARAMETER),
        ShareKind::Disk(fs) => {
            let posix = posix_mode(ctx, &r, &share)?;
            let fs = match (posix, &share.posix) {
                (Some(_), Some(view)) => Arc::clone(view),
                _ => Arc::clone(fs),
            };
            let result = open_file(ctx, req.msg, &r, durable.0, granted, maximal, fs.as_ref(), posix, Arc::clone(&share));
            // A durable v2 CREATE that waits can be told from its replay.
            if let Some(d) = durable.0.filter(|d| d.v2) {
                if result == Ok(NtStatus::PENDING) {
                    ctx.conn.creating.insert(d.create_guid, ctx.conn.id);
                } else {
                    ctx.conn.creating.remove(&d.create_guid);
                }
            }
            result
        }
    }
}

/// The mode a POSIX open asks for (crate::posix_ext): `Some` for a CREATE
/// with the POSIX create context, on a connection that negotiated the
/// extensions, to a share that offers them; its data is the 4-byte mode,
/// anything else INVALID_PARAMETER, as Samba answers. Elsewhere the
/// context is ignored, as unknown contexts are (MS-SMB2 3.3.5.9).
fn posix_mode(ctx: &Ctx<'_>, r: &CreateRequest<'_>, share: &Share) -> Result<Option<u32>, NtStatus> {
    if share.posix.is_none() || !ctx.conn.neg.as_ref().is_some_and(|n| n.posix) {
        return Ok(None);
    }
    r.context(&smbq_wire::posix::TAG)
        .map(|c| smbq_wire::posix::decode_create_request(c.data).map_err(|_| NtStatus::INVALID_PARAMETER))
        .transpose()
}

/// The stream `path` names; none on a POSIX open, where `:` is a
/// character like any other.
fn stream_name(path: &str, posix: bool) -> Option<&str> {
    if posix {
        None
    } else {
        smbq_vfs::named_stream(path)
    }
}

/// Whether a CREATE replaces what the file holds (SUPERSEDE, OVERWRITE,
/// OVERWRITE_IF) if it exists.
fn overwrites(r: &CreateRequest<'_>) -> bool {
    matches!(r.disposition, disposition::SUPERSEDE | disposition::OVERWRITE | disposition::OVERWRITE_IF)
}

/// The durable request and reconnect contexts of a CREATE (MS-SMB2
/// 3.3.5.9.6, .7, .10, .12), with the combinations Samba and Windows
/// refuse: a reconnect together with a request or reconnect of the other
/// version is INVALID_PARAMETER; a reconnect with any other context
/// (but a DHnQ beside a DHnC, a lease request, or the POSIX create
/// context a POSIX client sends with every CREATE) OBJECT_NAME_NOT_FOUND.
fn durable_contexts(r: &CreateRequest<'_>) -> Result<(Option<durable::Request>, Option<durable::Reconnect>), NtStatus> {
    let (q1, c1) = (r.context(ctx_name::DURABLE_REQUEST), r.context(ctx_name::DURABLE_RECONNECT));
    let (q2, c2) = (r.context(ctx_name::DURABLE_REQUEST_V2), r.context(ctx_name::DURABLE_RECONNECT_V2));
    if (c1.is_some() && (c2.is_some() || q2.is_some())) || (c2.is_some() && (q1.is_some() || q2.is_some())) {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    let others = r.contexts.len()
        - usize::from(r.context(ctx_name::LEASE).is_some())
        - usize::from(r.context(&smbq_wire::posix::TAG).is_some());
    if let Some(c) = c2 {
        let rc = durable::parse_reconnect(c.data, true)?;
        return if others == 1 { Ok((None, Some(rc))) } else { Err(NtStatus::OBJECT_NAME_NOT_FOUND) };
    }
    if let Some(c) = c1 {
        let rc = durable::parse_reconnect(c.data, false)?;
        return if others == 1 + usize::from(q1.is_some()) { Ok((None, Some(rc))) } else { Err(NtStatus::OBJECT_NAME_NOT_FOUND) };
    }
    if let Some(q) = q2 {
        return Ok((Some(durable::parse_request_v2(q.data)?), None));
    }
    Ok((q1.map(|_| durable::Request { v2: false, create_guid: [0; 16], timeout_ms: 0 }), None))
}

/// Reclaim a durable open after a lost connection (MS-SMB2 3.3.5.9.7,
/// 3.3.5.9.12): the open, its oplock, share mode and locks move to this
/// session and tree; the response describes the file as it is now.
/// How long a reconnect waits for the lost connection of its open to be
/// noticed (the client often reconnects before its old TCP connection's
/// end reaches the server), polling this often.
const RECONNECT_GRACE: Duration = Duration::from_secs(2);
const RECONNECT_POLL: Duration = Duration::from_millis(50);

fn reconnect(ctx: &mut Ctx<'_>, msg: &[u8], r: &CreateRequest<'_>, rc: &durable::Reconnect, share: &Arc<Share>) -> HResult {
    let user = ctx.session()?.user.clone();
    let client = ctx.conn.client_guid();
    // A reconnect names its lease by the context alone (clients send it
    // with RequestedOplockLevel 0, as smbtorture does).
    let lease_key = r.context(ctx_name::LEASE).map(|c| LeaseContext::decode(c.data)).transpose().map_err(NtStatus::from)?.map(|l| l.key);
    let server = Arc::clone(&ctx.conn.server);
    server.expire_parked(ctx.now, |_| false);
    let mut open = match server.reclaim(rc, &user, client, lease_key, ctx.conn.id) {
        Err(NtStatus::OBJECT_NAME_NOT_FOUND)
            if server.open_elsewhere(rc.persistent, ctx.conn.id)
                && ctx.now < ctx.deferred_since.unwrap_or(ctx.now) + RECONNECT_GRACE =>
        {
            return ctx.defer(msg, ctx.now + RECONNECT_POLL);
        }
        r => r?,
    };
    //= MS-SMB2 3.3.5.9.7, 3.3.5.9.12
    //# [a leased open reconnects under its own name:] if Open.Lease is
    //# not NULL [...] and Open.Lease.FileName does not match the file
    //# name [of the request], the server MUST fail the request with
    //# STATUS_INVALID_PARAMETER.
    let refusal = if open.share.name != share.name {
        Some(NtStatus::OBJECT_NAME_NOT_FOUND)
    } else if open.lease.is_some() && !r.name.eq_ignore_ascii_case(&open.path) {
        Some(NtStatus::INVALID_PARAMETER)
    } else {
        None
    };
    if let Some(status) = refusal {
        // Not this request's open: leave it parked for its owner.
        if let Some(open) = server.park(open, ctx.now) {
            crate::teardown::release(&server, open, ctx.now);
        }
        return Err(status);
    }
    let st = match open.handle().map(|h| h.stat()) {
        Some(Ok(st)) => st,
        _ => {
            crate::teardown::release(&server, open, ctx.now);
            return Err(NtStatus::OBJECT_NAME_NOT_FOUND);
        }
    };
    let owner = open.owner();
    // The open's oplock, or its lease as it stands now.
    let (level, lease_ctx) = {
        let entry = server.files.get(open.file_key);
        match (entry, open.lease) {
            (Some(mut e), Some(key)) => {
                let l = e.lease_mut(&(client, key)).cloned();
                let ctx = l.map(|l| LeaseContext {
                    key,
                    state: u32::from(l.state),
                    flags: if l.breaking.is_some() { lease::FLAG_BREAK_IN_PROGRESS } else { 0 },
                    v2: l.v2.then_some(([0; 16], l.epoch)),
                });
                (oplock_break::level::LEASE, ctx)
            }
            (Some(mut e), None) => (e.open_mut(owner).map_or(0, |o| o.oplock), None),
            (None, _) => (0, None),
        }
    };
    open.session_id = ctx.session_id;
    open.tree_id = ctx.tree_id;
    let fid = open.file_id;
    let posix_open = open.posix;
    ctx.conn.opens.insert(fid.volatile, open);
    ctx.related_file_id = Some(fid);
    // Windows and Samba answer a reconnect with no durable context
    // (smbtorture smb2.durable-v2-open.reopen1a checks it), but with the
    // lease of a leased open.
    let header_start = ctx.header_start;
    let data = lease_ctx.map(|l| l.encode());
    let mut list: Vec<(&[u8], &[u8])> = data.iter().map(|d| (ctx_name::LEASE, d.as_slice())).collect();
    // A POSIX open stays one, and says so as its CREATE did.
    let cc = (posix_open && r.context(&smbq_wire::posix::TAG).is_some()).then(|| crate::posix_ext::cc_context(&st));
    if let Some(cc) = &cc {
        list.push((&smbq_wire::posix::TAG, cc));
    }
    CreateResponse { oplock_level: level, ..response(&meta(&st), CreateAction::Opened, fid) }.encode(ctx.out, header_start, &list);
    Ok(NtStatus::SUCCESS)
}

/// Register a new open under `fid` and make it the compound's current file.
#[allow(clippy::too_many_arguments)]
fn insert_open(ctx: &mut Ctx<'_>, fid: FileId, r: &CreateRequest<'_>, share: Arc<Share>, kind: OpenKind, path: String, granted: u32, file_key: u64) {
    let open = Open {
        file_id: fid,
        session_id: ctx.session_id,
        tree_id: ctx.tree_id,
        share,
        kind,
        path,
        access: granted,
        share_access: r.share_access,
        create_options: r.options,
        file_key,
        delete_on_close: file_key != 0 && r.options & options::DELETE_ON_CLOSE != 0,
        dir: None,
        lock_sequences: [crate::open::NO_LOCK_SEQUENCE; 64],
        channel_sequence: 0,
        position: 0,
        durable: None,
        lease: None,
        replay: None,
        home: ctx.conn.id,
        written: false,
        posix: false,
        counted: ctx.conn.server.metrics.as_ref().map_or(crate::metrics::Held::NONE, |m| crate::metrics::Held::new(&m.opens)),
    };
    ctx.conn.opens.insert(fid.volatile, open);
    ctx.related_file_id = Some(fid);
}

fn open_pipe(ctx: &mut Ctx<'_>, r: &CreateRequest<'_>, name: &str, granted: u32, share: Arc<Share>) -> HResult {
    let user = ctx.session()?.user.clone();
    let server = &ctx.conn.server;
    let pipe = crate::rpc::Pipe::open(name, &server.config.server_name, &server.shares(), &user, server.random::<u32>().max(1))?;
    let fid = new_file_id(ctx);
    insert_open(ctx, fid, r, share, OpenKind::Pipe(pipe), name.to_string(), granted, 0);
    let m = pipe_meta();
    let resp = response(&m, CreateAction::Opened, fid);
    let header_start = ctx.header_start;
    resp.encode(ctx.out, header_start, &[]);
    Ok(NtStatus::SUCCESS)
}

fn new_file_id(ctx: &mut Ctx<'_>) -> FileId {
    let v = ctx.conn.volatile_id();
    FileId { persistent: v, volatile: v }
}

fn response(m: &FileMeta, action: CreateAction, file_id: FileId) -> CreateResponse {
    CreateResponse {
        oplock_level: 0,
        create_action: action as u32,
        creation_time: m.creation_time,
        last_access_time: m.last_access_time,
        last_write_time: m.last_write_time,
        change_time: m.change_time,
        allocation_size: m.allocation_size,
        end_of_file: m.end_of_file,
        file_attributes: m.attributes,
        file_id,
    }
}

/// What `token` may do to the existing `path` ([`acl::allowed`]), with
/// DELETE also where the parent grants FILE_DELETE_CHILD, and
/// FILE_READ_ATTRIBUTES where it grants FILE_LIST_DIRECTORY, as Windows
/// and Samba allow (MS-FSA 2.1.5.1.2.1). A file that cannot be found
/// now is left to the open to report; any other failure to read its
/// security refuses the open.
fn allowed_on(fs: &dyn FileSystem, path: &str, token: &acl::Token, desired: u32) -> Result<u32, NtStatus> {
    let sec = match fs.security(path).map_err(NtStatus::from) {
        Ok(sec) => sec,
        Err(NtStatus::OBJECT_NAME_NOT_FOUND | NtStatus::OBJECT_PATH_NOT_FOUND) => return Ok(access::FILE_ALL),
        Err(e) => return Err(e),
    };
    let mut allowed = acl::allowed(&sec, token);
    let via_parent = access::DELETE | access::FILE_READ_ATTRIBUTES;
    let wanted = if desired & access::MAXIMUM_ALLOWED != 0 { via_parent } else { map_access(desired, 0) & via_parent };
    if wanted & !allowed != 0 && !path.is_empty() {
        let parent = path.rsplit_once('\\').map_or("", |(d, _)| d);
        if let Ok(p) = fs.security(parent).map(|s| acl::allowed(&s, token)) {
            if p & access::FILE_DELETE_CHILD != 0 {
                allowed |= access::DELETE;
            }
            if p & acl::FILE_LIST_DIRECTORY != 0 {
                allowed |= access::FILE_READ_ATTRIBUTES;
            }
        }
    }
    Ok(allowed)
}

/// Whether `token` may create `path` in its directory: the directory
/// must grant FILE_ADD_FILE, or FILE_ADD_SUBDIRECTORY for a directory
/// (MS-FSA 2.1.5.1.1). Returns the directory's security, which the new
/// object inherits from; `None` where the directory cannot be read (the
/// open then says why).
fn may_add(fs: &dyn FileSystem, path: &str, directory: bool, token: &acl::Token) -> Result<Option<smbq_vfs::Security>, NtStatus> {
    let parent = path.rsplit_once('\\').map_or("", |(d, _)| d);
    let Ok(sec) = fs.security(parent) else { return Ok(None) };
    let need = if directory { acl::FILE_ADD_SUBDIRECTORY } else { acl::FILE_ADD_FILE };
    if acl::allowed(&sec, token) & need == 0 {
        return Err(NtStatus::ACCESS_DENIED);
    }
    Ok(Some(sec))
}

/// Give a created object its descriptor (MS-DTYP 2.5.3.4): the one the
/// CREATE carried in its SD context (owner and group defaulting to the
/// creator's, a missing DACL inherited), else, under a directory with a
/// kept descriptor, what it inherits from that, or
/// [`acl::default_descriptor`] where that passes nothing on. Under a
/// directory without one nothing is kept: the object's own mode stands
/// for it, as for its directory. Where the file system cannot keep it,
/// an inherited descriptor is let go; a given one fails the CREATE.
fn new_descriptor(h: &smbq_vfs::Handle, parent: Option<&smbq_vfs::Security>, given: Option<&SecurityDescriptor>, token: &acl::Token) -> Result<(), NtStatus> {
    let kept = parent.filter(|p| p.descriptor.is_some());
    let inherited = kept.map(|p| acl::inherit(&acl::descriptor(p, true), h.is_dir, token).unwrap_or_else(|| acl::default_descriptor(token)));
    let Some(g) = given else {
        if let Some(sd) = inherited {
            let _ = h.set_security(&sd.to_bytes());
        }
        return Ok(());
    };
    let mut sd = acl::as_set(g.clone());
    sd.owner = sd.owner.or_else(|| Some(token.owner.clone()));
    sd.group = sd.group.or_else(|| Some(token.group.clone()));
    if sd.control & smbq_wire::security::control::DACL_PRESENT == 0 {
        let from = inherited.unwrap_or_else(|| acl::descriptor(&h.security().unwrap_or_default(), h.is_dir));
        sd.dacl = from.dacl;
        sd.control |= from.control & smbq_wire::security::control::DACL_BITS;
    }
    h.set_security(&sd.to_bytes()).map_err(NtStatus::from)
}

/// The checks that need the existing file, made before opening so a
/// refused overwrite truncates nothing. Share modes and oplocks come
/// after them ([`contend`]).
fn check_existing(st: &FileStat, entry: Option<&crate::files::FileEntry>, r: &CreateRequest<'_>, granted: u32) -> Result<(), NtStatus> {
    if st.attributes & attr::READONLY != 0 && !st.is_dir {
        if r.options & options::DELETE_ON_CLOSE != 0 {
            return Err(NtStatus::CANNOT_DELETE);
        }
        let overwrite = overwrites(r);
        if granted & WRITE_ACCESS != 0 || overwrite {
            return Err(NtStatus::ACCESS_DENIED);
        }
    }
    //= MS-FSA 2.1.5.1.2.1
    //# If CreateDisposition is FILE_SUPERSEDE, FILE_OVERWRITE, or
    //# FILE_OVERWRITE_IF [...] HIDDEN or SYSTEM set on the file and not in
    //# FileAttributes: STATUS_ACCESS_DENIED.
    if overwrites(r) && !st.is_dir && st.attributes & (attr::HIDDEN | attr::SYSTEM) & !r.file_attributes != 0 {
        return Err(NtStatus::ACCESS_DENIED);
    }
    if entry.is_some_and(|e| e.delete_pending) {
        return Err(NtStatus::DELETE_PENDING);
    }
    Ok(())
}

/// Share modes and oplocks against the file's other opens (MS-SMB2
/// 3.3.5.9, MS-FSA 2.1.5.1.2): break the oplocks this open cannot live
/// with; `Ok(Some(deadline))` when it must wait for their holders'
/// acknowledgments, SHARING_VIOLATION when the share modes conflict.
fn contend(
    ctx: &Ctx<'_>,
    entry: &mut crate::files::FileEntry,
    r: &CreateRequest<'_>,
    granted: u32,
    lease: Option<&LeaseId>,
) -> Result<Option<Instant>, NtStatus> {
    let server = &ctx.conn.server;
    // Opens under the same lease do not conflict with each other's caching.
    let violation = share_conflict(&entry.opens, granted, r.share_access);
    let overwrite = overwrites(r);
    let access = oplock::effective_access(granted, overwrite);
    let c = oplock::contend(entry, access, lease, violation, overwrite, ctx.now, server.break_timeout());
    server.send_breaks(&c.breaks);
    // Only the last element of a compound may go async (MS-SMB2
    // 3.3.4.2); one in the middle does not wait for the break it caused
    // unless it could not proceed anyway, as Samba and Windows answer
    // (smbtorture smb2.compound.compound-break).
    let waits = c.wait.filter(|_| ctx.hdr.next_command == 0 || violation);
    if let Some(deadline) = waits {
        entry.wait(ctx.conn.id);
        return Ok(Some(deadline));
    }
    if violation {
        return Err(NtStatus::SHARING_VIOLATION);
    }
    Ok(None)
}

/// The lease a CREATE asks for (MS-SMB2 3.3.5.9.8, 3.3.5.9.11): with
/// RequestedOplockLevel LEASE and a lease context, on a dialect that
/// has leases.
fn lease_request(ctx: &Ctx<'_>, r: &CreateRequest<'_>) -> Result<Option<LeaseContext>, NtStatus> {
    if r.oplock_level != oplock_break::level::LEASE || ctx.dialect() == smbq_wire::Dialect::SMB202 {
        return Ok(None);
    }
    r.context(ctx_name::LEASE).map(|c| LeaseContext::decode(c.data).map_err(|_| NtStatus::INVALID_PARAMETER)).transpose()
}

/// Grant the lease of a new open (or join the open to its existing
/// lease, which may grow), returning its response context.
fn grant_lease(entry: &mut crate::files::FileEntry, id: LeaseId, req: &LeaseContext, directory: bool, overwritten: bool) -> LeaseContext {
    // What a directory can be granted at most is what is asked of it.
    let want = (req.state & 0x7) as u8 & if directory { oplock::READ | oplock::HANDLE } else { 0x7 };
    let granted = oplock::grant_lease(entry, &id, want, directory, overwritten);
    let lease = match entry.lease_mut(&id) {
        Some(l) => {
            // Upgrade only to a strict superset of what the lease holds,
            // granted in full, and not while it breaks (Samba's
            // try_lease_upgrade; smbtorture smb2.lease.upgrade*).
            let upgrade = l.state & want == l.state && granted != l.state && granted == want && l.breaking.is_none();
            if upgrade {
                l.state = granted;
                if l.v2 {
                    l.epoch = l.epoch.wrapping_add(1);
                }
            }
            l.clone()
        }
        None => {
            let l = Lease {
                id,
                state: granted,
                breaking: None,
                v2: req.v2.is_some(),
                epoch: req.v2.map_or(0, |(_, e)| e.wrapping_add(1)),
                parent: parent_key(req),
            };
            entry.leases.push(l.clone());
            l
        }
    };
    let mut flags = if lease.breaking.is_some() { lease::FLAG_BREAK_IN_PROGRESS } else { 0 };
    if lease.parent.is_some() {
        flags |= lease::FLAG_PARENT_LEASE_KEY_SET;
    }
    LeaseContext { key: id.1, state: u32::from(lease.state), flags, v2: lease.v2.then_some((lease.parent.unwrap_or_default(), lease.epoch)) }
}

//= MS-SMB2 3.3.5.9.11
//# [with directory leasing,] if SMB2_LEASE_FLAG_PARENT_LEASE_KEY_SET is
//# set, the server MUST set Lease.ParentLeaseKey to ParentLeaseKey
/// The directory lease key a version 2 lease request names, if any.
fn parent_key(req: &LeaseContext) -> Option<[u8; 16]> {
    req.v2.filter(|_| req.flags & lease::FLAG_PARENT_LEASE_KEY_SET != 0).map(|(p, _)| p)
}

/// The file-table key of what `st` describes: the file's id, or for its
/// named stream `stream` that stream's own key.
fn table_key(files: &FileTable, st: &FileStat, stream: Option<&str>) -> u64 {
    match stream {
        Some(name) => files.stream_key(st.file_id, name),
        None => st.file_id,
    }
}

/// The checks a named stream's open makes against its file (MS-FSA
/// 2.1.5.1.2): a file whose deletion is pending opens no stream
/// (DELETE_PENDING), and a read-only file's streams take no writes and
/// no new streams (ACCESS_DENIED).
fn check_stream_base(files: &FileTable, fs: &dyn FileSystem, name: &str, r: &CreateRequest<'_>, granted: u32, exists: bool) -> Result<(), NtStatus> {
    let base = smbq_vfs::parse_stream(name).map_err(NtStatus::from)?.0;
    let Ok(st) = fs.stat_path(base) else { return Ok(()) };
    if files.get(st.file_id).is_some_and(|e| e.delete_pending) {
        return Err(NtStatus::DELETE_PENDING);
    }
    let changes = granted & WRITE_ACCESS != 0 || overwrites(r) || (!exists && r.disposition != disposition::OPEN);
    if st.attributes & attr::READONLY != 0 && changes {
        return Err(NtStatus::ACCESS_DENIED);
    }
    Ok(())
}

/// An open of a file asking for DELETE must be able to delete each of its
/// streams: one open without FILE_SHARE_DELETE makes it a sharing
/// violation, while the file's own share mode does not bind its streams
/// (smbtorture smb2.streams.delete, as Windows and Samba answer).
fn check_streams_share_delete(files: &FileTable, key: u64) -> Result<(), NtStatus> {
    let all = share::READ | share::WRITE | share::DELETE;
    let busy = files.open_streams(key).into_iter().filter_map(|k| files.get(k)).any(|e| share_conflict(&e.opens, access::DELETE, all));
    if busy {
        return Err(NtStatus::SHARING_VIOLATION);
    }
    Ok(())
}

/// The NTFS quota index Windows clients open to manage quotas.
const QUOTA_FAKE_FILE: &str = "$Extend\\$Quota:$Q:$INDEX_ALLOCATION";

/// Open the quota "file" as Samba fakes it: a handle on the share root
/// (so it can be neither deleted nor renamed, and holds no share mode)
/// reported as a hidden system directory without times or sizes
/// (smbtorture smb2.create.quota-fake-file).
fn open_quota_file(ctx: &mut Ctx<'_>, r: &CreateRequest<'_>, granted: u32, fs: &dyn FileSystem, share: Arc<Share>) -> HResult {
    if !matches!(r.disposition, disposition::OPEN | disposition::OPEN_IF) || r.options & options::DELETE_ON_CLOSE != 0 {
        return Err(NtStatus::ACCESS_DENIED);
    }
    let opts = OpenOptions { disposition: Disposition::Open, kind: Kind::Directory, read: false, write: false };
    let (h, _) = fs.open("", &opts).map_err(NtStatus::from)?;
    let fid = new_file_id(ctx);
    insert_open(ctx, fid, r, share, OpenKind::File(h), String::new(), granted & !(WRITE_ACCESS | access::DELETE), 0);
    let m = FileMeta { attributes: attr::HIDDEN | attr::SYSTEM | attr::DIRECTORY | attr::ARCHIVE, directory: true, ..FileMeta::default() };
    let header_start = ctx.header_start;
    response(&m, CreateAction::Opened, fid).encode(ctx.out, header_start, &[]);
    Ok(NtStatus::SUCCESS)
}

/// A CREATE of a file or directory on a disk share, as the steps of
/// [`open_file`] see it: the request, the file system it opens on, and
/// the access granted so far (the file's security descriptor narrows it).
struct Opening<'a> {
    r: &'a CreateRequest<'a>,
    fs: &'a dyn FileSystem,
    /// The mode of a POSIX open.
    posix: Option<u32>,
    /// The named stream the name opens.
    stream: Option<&'a str>,
    granted: u32,
    maximal: u32,
}

/// What a CREATE's contexts set on a file it creates or overwrites.
struct Asked {
    alloc_size: Option<u64>,
    eas: Option<Vec<smbq_wire::ea::Ea>>,
}

/// After [`lock_existing`]: the file as it was found, locked, or the time
/// to wait until for the breaks the open caused.
enum Found<'t> {
    Ready(Option<FileStat>, Option<FileLock<'t>>),
    Wait(Instant),
}

/// Open or create a file or directory on a disk share (MS-SMB2 3.3.5.9):
/// check the request, lock and check the file if it exists, open it, set
/// what the request asks of a new file, register the open, answer.
#[allow(clippy::too_many_arguments)]
fn open_file(
    ctx: &mut Ctx<'_>,
    req_msg: &[u8],
    r: &CreateRequest<'_>,
    durable_request: Option<durable::Request>,
    granted: u32,
    maximal: u32,
    fs: &dyn FileSystem,
    posix: Option<u32>,
    share: Arc<Share>,
) -> HResult {
    let name = r.name.as_str();
    if name.eq_ignore_ascii_case(QUOTA_FAKE_FILE) {
        return open_quota_file(ctx, r, granted, fs, share);
    }
    let asked = check_request(r, granted, posix)?;
    let lease_req = lease_request(ctx, r)?;
    let client = ctx.conn.client_guid();
    let lease_id: Option<LeaseId> = lease_req.map(|l| (client, l.key));
    if let Some(d) = durable_request.filter(|d| d.v2) {
        if let Some(r) = replay(ctx, &d.create_guid, client, lease_id.map(|id| id.1), r.oplock_level) {
            return r;
        }
    }
    let server = Arc::clone(&ctx.conn.server);
    let files = &server.files;
    let mut o = Opening { r, fs, posix, stream: stream_name(name, posix.is_some()), granted, maximal };
    // Durable opens parked after a lost connection hold a batch oplock
    // nobody can acknowledge: an open that would break it closes them.
    let parked = (!oplock::is_stat_open(oplock::effective_access(granted, overwrites(r))))
        .then(|| fs.stat_path(name).ok())
        .flatten()
        .map(|s| table_key(files, &s, o.stream));
    server.expire_parked(ctx.now, |p| Some(p.open.file_key) == parked);
    let session = ctx.session()?;
    let token = acl::Token::for_user(&session.user).with_groups(&session.groups);
    let (existing, locked) = match lock_existing(ctx, &mut o, files, &token, lease_id.as_ref())? {
        Found::Ready(existing, locked) => (existing, locked),
        Found::Wait(deadline) => return ctx.defer(req_msg, deadline),
    };
    let stream = o.stream;
    //= MS-SMB2 3.3.5.9.8
    //# a lease key names one file: a key in use on another file is
    //# STATUS_INVALID_PARAMETER.
    if let Some(k) = lease_id.as_ref().and_then(|id| files.lease_file(id)) {
        if existing.as_ref().map(|e| table_key(files, e, stream)) != Some(k) {
            return Err(NtStatus::INVALID_PARAMETER);
        }
    }
    let (h, action, mut st, mut entry) = open_on_disk(&mut o, files, &token, existing.as_ref(), locked)?;
    let key = entry.key;
    set_asked(&h, action, &mut st, r, &asked, o.granted & WRITE_ACCESS != 0)?;
    let (granted, maximal) = (o.granted, o.maximal);
    let fid = new_file_id(ctx);
    let overwritten = action != CreateAction::Opened;
    let owner = OpenOwner { connection: ctx.conn.id, volatile: fid.volatile };
    let dir_leasing = ctx.conn.neg.as_ref().is_some_and(|n| n.server_capabilities & smbq_wire::negotiate::caps::DIRECTORY_LEASING != 0);
    let lease = lease_req.zip(lease_id).filter(|(req, _)| !st.is_dir || (req.v2.is_some() && dir_leasing));
    let (level, lease_ctx) = register(files, &mut entry, &o, &h.path, &st, owner, lease, overwritten, existing.is_some());
    // (A stream's times are its file's: shown after the stream's lock goes.)
    drop(entry);
    files.show_times(&mut st, ctx.now);
    let m = meta(&st);
    let mut contexts: Vec<(&[u8], Vec<u8>)> = Vec::new();
    if r.context(ctx_name::MAXIMAL_ACCESS).is_some() {
        contexts.push((ctx_name::MAXIMAL_ACCESS, maximal_access_data(0, maximal).to_vec()));
    }
    if r.context(ctx_name::QUERY_ON_DISK_ID).is_some() {
        let volume = fs.stat_fs().map(|s| u64::from(s.serial)).unwrap_or(0);
        contexts.push((ctx_name::QUERY_ON_DISK_ID, on_disk_id_data(st.file_id, volume).to_vec()));
    }
    if posix.is_some() {
        contexts.push((&smbq_wire::posix::TAG, crate::posix_ext::cc_context(&st)));
    }
    let lease_data = lease_ctx.map(|l| l.encode());
    if let Some(d) = &lease_data {
        contexts.push((ctx_name::LEASE, d.clone()));
    }
    //= MS-SMB2 3.3.5.9.6, 3.3.5.9.10
    //# a durable handle is granted with a batch oplock (or a lease
    //# with handle caching), never on a directory.
    let handle_lease = lease_ctx.is_some_and(|l| l.state & u32::from(oplock::HANDLE) != 0);
    let durable = durable_request.filter(|_| (level == oplock_break::level::BATCH || handle_lease) && !st.is_dir);
    if let Some(d) = &durable {
        let data = if d.v2 { durable::response_v2(durable::timeout(d.timeout_ms)) } else { [0; 8] };
        contexts.push((if d.v2 { ctx_name::DURABLE_REQUEST_V2 } else { ctx_name::DURABLE_REQUEST }, data.to_vec()));
    }
    let path = h.path.clone();
    if overwritten {
        // A new or overwritten entry changes its directory.
        let spared = lease_req.as_ref().and_then(parent_key).map(|p| (client, p));
        server.dir_changed(fs, &path, spared, ctx.now);
    }
    insert_open(ctx, fid, r, share, OpenKind::File(h), path, granted, key);
    if let Some(o) = ctx.conn.opens.get_mut(&fid.volatile) {
        o.lease = lease_id.map(|id| id.1);
        o.posix = posix.is_some();
    }
    if let Some(d) = durable {
        let user = ctx.session()?.user.to_lowercase();
        let timeout = if d.v2 { durable::timeout(d.timeout_ms) } else { durable::DEFAULT_TIMEOUT };
        if let Some(o) = ctx.conn.opens.get_mut(&fid.volatile) {
            o.durable = Some(crate::open::Durable { v2: d.v2, create_guid: d.create_guid, client_guid: client, user, timeout, resilient: false });
        }
    }
    let list: Vec<(&[u8], &[u8])> = contexts.iter().map(|(n, d)| (*n, d.as_slice())).collect();
    let header_start = ctx.header_start;
    CreateResponse { oplock_level: level, ..response(&m, action, fid) }.encode(ctx.out, header_start, &list);
    // A replay of this CREATE gets this same answer (MS-SMB2 3.3.5.9.10),
    // whether or not the open is durable.
    if let Some(d) = durable_request.filter(|d| d.v2) {
        let response = ctx.out.get(header_start + smbq_wire::header::HEADER_LEN..).map(<[u8]>::to_vec).unwrap_or_default();
        if let Some(o) = ctx.conn.opens.get_mut(&fid.volatile) {
            o.replay = Some(Box::new(crate::open::Replay { create_guid: d.create_guid, client_guid: client, response }));
        }
    }
    Ok(NtStatus::SUCCESS)}

/// The checks of a CREATE's name and contexts that come before the file
/// is looked at, and what its contexts ask of a new file.
fn check_request(r: &CreateRequest<'_>, granted: u32, posix: Option<u32>) -> Result<Asked, NtStatus> {
    let name = r.name.as_str();
    // Names never climb: a `..` component is a syntax error, as on
    // Windows and Samba (smbtorture smb2.mkdir).
    if name.split('\\').any(|c| c == "..") {
        return Err(NtStatus::OBJECT_PATH_SYNTAX_BAD);
    }
    // The file's name, then what it says of a stream (MS-FSCC 2.1.5).
    // (A POSIX open's names are checked by its view of the share.)
    if posix.is_none() {
        smbq_vfs::check_name(smbq_vfs::parse_stream(name).map_err(NtStatus::from)?.0).map_err(NtStatus::from)?;
    }
    // No snapshots here: a timewarp open names nothing (MS-SMB2 3.3.5.9.6
    // fails a missing snapshot with OBJECT_NAME_NOT_FOUND).
    if r.context(ctx_name::TIMEWARP).is_some() {
        return Err(NtStatus::OBJECT_NAME_NOT_FOUND);
    }
    // MS-SMB2 2.2.13.2.6, 3.3.5.9.3: AllocationSize is 8 bytes, reserved
    // for the file being created or overwritten.
    let alloc_size = match r.context(ctx_name::ALLOCATION_SIZE) {
        Some(c) => Some(u64::from_le_bytes(c.data.try_into().map_err(|_| NtStatus::INVALID_PARAMETER)?)),
        None => None,
    };
    //= MS-SMB2 3.3.5.9.2
    //# the server MUST apply the extended attributes [of an
    //# SMB2_CREATE_EA_BUFFER] to the newly created or overwritten file
    // (checked here, before anything is created).
    let eas = match r.context(ctx_name::EA_BUFFER) {
        Some(c) => Some(smbq_wire::ea::decode_full(c.data).map_err(crate::meta::ea_status)?),
        None => None,
    };
    let doc = r.options & options::DELETE_ON_CLOSE != 0;
    //= MS-SMB2 3.3.5.9
    //# If the CreateOptions field includes FILE_DELETE_ON_CLOSE and
    //# DesiredAccess does not include DELETE, the server MUST fail the
    //# request with STATUS_ACCESS_DENIED.
    if doc && granted & access::DELETE == 0 {
        return Err(NtStatus::ACCESS_DENIED);
    }
    if doc && r.file_attributes & attr::READONLY != 0 {
        return Err(NtStatus::CANNOT_DELETE);
    }
    // MS-FSA 2.1.5.1: a directory cannot be created or opened TEMPORARY.
    if r.options & options::DIRECTORY_FILE != 0 && r.file_attributes & attr::TEMPORARY != 0 {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    Ok(Asked { alloc_size, eas })
}

/// Look the file up and, if it exists, take its lock and check the open
/// against it: its security descriptor (which narrows what is granted),
/// delete-pending, its streams' share modes, and the share modes and
/// oplocks of its opens, which may have to break first ([`Found::Wait`]).
/// The lock is held from these checks to the registration of the new
/// open: no other open of the file comes between them, and nothing is
/// truncated before the share modes and oplocks allow it.
fn lock_existing<'t>(ctx: &Ctx<'_>, o: &mut Opening<'_>, files: &'t FileTable, token: &acl::Token, lease_id: Option<&LeaseId>) -> Result<Found<'t>, NtStatus> {
    let (r, fs, posix, stream) = (o.r, o.fs, o.posix, o.stream);
    let name = r.name.as_str();
    let existing = if r.disposition != disposition::CREATE { fs.stat_path(name).ok() } else { None };
    // What the name asks of the object comes before share modes: a data
    // stream is no directory (smbtorture smb2.streams.dir).
    let data = posix.is_none() && matches!(smbq_vfs::parse_stream(name), Ok((_, smbq_vfs::Stream::Data | smbq_vfs::Stream::Named(_))));
    if data && r.options & options::DIRECTORY_FILE != 0 {
        return Err(NtStatus::NOT_A_DIRECTORY);
    }
    if data && stream.is_none() && existing.as_ref().is_some_and(|st| st.is_dir) {
        return Err(NtStatus::FILE_IS_A_DIRECTORY);
    }
    if stream.is_some() {
        check_stream_base(files, fs, name, r, o.granted, existing.is_some())?;
    }
    let mut locked = None;
    if let Some(st) = &existing {
        //= MS-SMB2 3.3.5.9
        //# the server MUST perform access checks [of DesiredAccess against
        //# the file's security descriptor, MS-FSA 2.1.5.1.2.1]
        o.maximal &= allowed_on(fs, name, token, r.desired_access)?;
        o.granted = map_access(r.desired_access, o.maximal);
        // Replacing the contents needs the right to write them, asked
        // for or not (MS-FSA 2.1.5.1.2.1; smbtorture
        // smb2.acls.OVERWRITE_READ_ONLY_FILE).
        let implied = if overwrites(r) { access::FILE_WRITE_DATA } else { 0 };
        if (o.granted | implied) & !o.maximal != 0 {
            return Err(NtStatus::ACCESS_DENIED);
        }
        let key = table_key(files, st, stream);
        if st.attributes & attr::READONLY != 0 && !st.is_dir {
            // MAXIMUM_ALLOWED on a read-only file grants no data writes.
            o.maximal &= !WRITE_ACCESS;
            if r.desired_access & access::MAXIMUM_ALLOWED != 0 && r.desired_access & (access::GENERIC_WRITE | access::GENERIC_ALL) == 0 {
                o.granted &= !(WRITE_ACCESS & !r.desired_access);
            }
        }
        let entry = locked.insert(files.entry(key));
        if let Some(n) = stream {
            // Found by its name from now on (the key is looked up again
            // after the open).
            files.set_stream(entry, st.file_id, n);
        }
        check_existing(st, Some(entry), r, o.granted)?;
        if stream.is_none() && o.granted & access::DELETE != 0 {
            check_streams_share_delete(files, key)?;
        }
        if let Some(deadline) = contend(ctx, entry, r, o.granted, lease_id)? {
            return Ok(Found::Wait(deadline));
        }
    }
    Ok(Found::Ready(existing, locked))
}

/// Open (or create) the file on the file system, then hold its lock: the
/// one taken by [`lock_existing`], else its own now, checked against the
/// file's opens (a file made meanwhile by another open, or replaced from
/// outside smbq between the stat and the open).
fn open_on_disk<'t>(
    o: &mut Opening<'_>,
    files: &'t FileTable,
    token: &acl::Token,
    existing: Option<&FileStat>,
    mut locked: Option<FileLock<'t>>,
) -> Result<(smbq_vfs::Handle, CreateAction, FileStat, FileLock<'t>), NtStatus> {
    let (r, fs, posix, stream) = (o.r, o.fs, o.posix, o.stream);
    let name = r.name.as_str();
    let kind = if r.options & options::DIRECTORY_FILE != 0 {
        Kind::Directory
    } else if r.options & options::NON_DIRECTORY_FILE != 0 {
        Kind::NonDirectory
    } else {
        Kind::Any
    };
    let opts = OpenOptions {
        disposition: vfs_disposition(r.disposition),
        kind,
        read: o.granted & READ_ACCESS != 0,
        write: o.granted & WRITE_ACCESS != 0,
    };
    // A new stream of an existing file is data written into that file:
    // the file's DACL must grant what is asked and FILE_WRITE_DATA; the
    // directory is not asked (MS-FSA 2.1.5.1.2.1).
    let into_file = stream.is_some() && existing.is_none() && fs.security(name).is_ok();
    if into_file {
        o.maximal &= allowed_on(fs, name, token, r.desired_access)?;
        o.granted = map_access(r.desired_access, o.maximal);
        let creating = !matches!(r.disposition, disposition::OPEN | disposition::OVERWRITE);
        let implied = if creating { access::FILE_WRITE_DATA } else { 0 };
        if (o.granted | implied) & !o.maximal != 0 {
            return Err(NtStatus::ACCESS_DENIED);
        }
    }
    let creates = existing.is_none() && !into_file && !matches!(r.disposition, disposition::OPEN | disposition::OVERWRITE);
    let parent_sec = if creates { may_add(fs, name, kind == Kind::Directory, token)? } else { None };
    let given = r.context(ctx_name::SD_BUFFER).map(|c| SecurityDescriptor::decode(c.data)).transpose().map_err(|_| NtStatus::INVALID_PARAMETER)?;
    let (h, action) = fs.open(name, &opts).map_err(NtStatus::from)?;
    if action == CreateAction::Created {
        new_descriptor(&h, parent_sec.as_ref(), given.as_ref(), token)?;
        // A POSIX open creates with the mode asked for, exactly (no umask).
        if let Some(mode) = posix {
            h.chmod(mode & smbq_wire::posix::PERMISSION_BITS).map_err(NtStatus::from)?;
        }
    }
    let st = h.stat().map_err(NtStatus::from)?;
    let key = table_key(files, &st, stream_name(&h.path, posix.is_some()));
    let entry = match locked.take() {
        Some(e) if e.key == key => e,
        held => {
            drop(held);
            // A file not locked across its open: new, made by another
            // open since the stat, or replaced from outside smbq between
            // the stat and the open. Its opens now are checked against.
            let e = files.entry(key);
            if e.delete_pending {
                return Err(NtStatus::DELETE_PENDING);
            }
            if share_conflict(&e.opens, o.granted, r.share_access) {
                return Err(NtStatus::SHARING_VIOLATION);
            }
            e
        }
    };
    Ok((h, action, st, entry))
}

/// Register open `owner` of the file `entry` holds (opened as `path`,
/// found as `st`): its share mode, and the lease it asked for (`lease`,
/// when the file may have one: a directory only with a version 2 request
/// on a connection with directory leasing) or else the oplock it is
/// granted. Returns the oplock level to answer and the lease context.
#[allow(clippy::too_many_arguments)]
fn register(
    files: &FileTable,
    entry: &mut crate::files::FileEntry,
    o: &Opening<'_>,
    path: &str,
    st: &FileStat,
    owner: OpenOwner,
    lease: Option<(LeaseContext, LeaseId)>,
    overwritten: bool,
    existed: bool,
) -> (u8, Option<LeaseContext>) {
    let (r, granted) = (o.r, o.granted);
    if let Some(n) = stream_name(path, o.posix.is_some()) {
        files.set_stream(entry, st.file_id, n);
    }
    if entry.opens.is_empty() {
        entry.path = path.to_string();
    }
    match lease {
        Some((req, id)) => {
            let l = grant_lease(entry, id, &req, st.is_dir, overwritten);
            entry.opens.push(OpenRef { lease: Some(id), ..OpenRef::new(owner, granted, r.share_access) });
            files.add_lease(entry, id);
            (oplock_break::level::LEASE, Some(l))
        }
        None => {
            let access = oplock::effective_access(granted, overwritten && existed);
            let level = oplock::grant(entry, r.oplock_level, access, st.is_dir, existed, overwritten);
            entry.opens.push(OpenRef { oplock: level, ..OpenRef::new(owner, granted, r.share_access) });
            (level, None)
        }
    }
}

/// What a created, overwritten or superseded file gets: the attributes,
/// extended attributes and allocation size the request asks for.
fn set_asked(h: &smbq_vfs::Handle, action: CreateAction, st: &mut FileStat, r: &CreateRequest<'_>, asked: &Asked, write: bool) -> Result<(), NtStatus> {
    // MS-FSA 2.1.5.1.1 and 2.1.5.1.2.1: a created, overwritten or
    // superseded file gets the attributes asked for, and ARCHIVE (a
    // directory only what was asked); what a new object has without
    // stored attributes is not written. SPARSE_FILE is not taken from
    // CREATE (a file becomes sparse by FSCTL_SET_SPARSE; smbtorture
    // smb2.ioctl.sparse_file_attr).
    if action != CreateAction::Opened {
        let default = if st.is_dir { 0 } else { attr::ARCHIVE };
        let want = r.file_attributes & smbq_vfs::STORED_ATTRIBUTES & !attr::SPARSE_FILE | default;
        if want != default || action != CreateAction::Created {
            h.set_attributes(want).map_err(NtStatus::from)?;
            *st = h.stat().map_err(NtStatus::from)?;
        }
    }
    if let Some(eas) = asked.eas.as_deref().filter(|_| action != CreateAction::Opened) {
        h.set_eas(eas).map_err(NtStatus::from)?;
    }
    // The allocation size applies to a file this open created or overwrote.
    if let Some(len) = asked.alloc_size {
        if action != CreateAction::Opened && !st.is_dir && write && len > st.size {
            h.set_allocation(len).map_err(NtStatus::from)?;
            *st = h.stat().map_err(NtStatus::from)?;
        }
    }
    Ok(())
}

/// Where, in a CREATE response message, its lease context's LeaseState is.
fn lease_state_offset(msg: &[u8]) -> Option<usize> {
    let (_, contexts) = CreateResponse::decode(msg).ok()?;
    let c = contexts.iter().find(|c| c.name == ctx_name::LEASE)?;
    Some(c.data.as_ptr() as usize - msg.as_ptr() as usize + 16)
}

/// A replayed durable v2 CREATE (SMB2_FLAGS_REPLAY_OPERATION, MS-SMB2
/// 3.3.5.9.10): the client did not see the answer to a CREATE that
/// succeeded, and sends it again with the same CreateGuid. It gets the
/// open it created and the answer it missed; a replay that asks for
/// another lease (or none where there was one) is ACCESS_DENIED.
fn replay(ctx: &mut Ctx<'_>, create_guid: &[u8; 16], client: [u8; 16], lease: Option<[u8; 16]>, oplock: u8) -> Option<HResult> {
    if ctx.hdr.flags & smbq_wire::header::flags::REPLAY_OPERATION == 0 {
        return None;
    }
    // The CREATE it repeats still waits (Samba's answer; Windows answers
    // ACCESS_DENIED: smbtorture smb2.replay.dhv2-pending1*-sane).
    if ctx.conn.creating.contains_key(create_guid) {
        return Some(Err(NtStatus::FILE_NOT_AVAILABLE));
    }
    let o = ctx.conn.opens.values().find(|o| {
        o.replay.as_ref().is_some_and(|r| &r.create_guid == create_guid && r.client_guid == client)
    })?;
    if o.lease != lease {
        return Some(Err(NtStatus::ACCESS_DENIED));
    }
    let (fid, key, body) = (o.file_id, o.file_key, o.replay.as_ref().map(|r| r.response.clone()).unwrap_or_default());
    let start = ctx.out.len();
    ctx.out.extend_from_slice(&body);
    // A replay that asks for a lower oplock is told that level, and the
    // durable handle only a batch oplock carries is not reported
    // (smbtorture smb2.replay.replay-dhv2-oplock2; Samba does so).
    let granted = body.get(2).copied().unwrap_or(0);
    if lease.is_none() && granted != oplock_break::level::LEASE && oplock < granted {
        if let Some(level) = ctx.out.get_mut(start + 2) {
            *level = oplock;
        }
        if oplock != oplock_break::level::BATCH {
            // CreateContextsOffset and Length (2.2.14), then no contexts.
            if let Some(c) = ctx.out.get_mut(start + 80..start + 88) {
                c.fill(0);
            }
            ctx.out.truncate(start + 88);
        }
    }
    // ... with the lease as it stands now (an open under the same lease
    // may have upgraded it since; smbtorture smb2.replay.replay-dhv2-lease1).
    if let Some(k) = lease {
        let state = ctx.conn.server.files.get(key).and_then(|mut e| e.lease_mut(&(client, k)).map(|l| l.state));
        let at = lease_state_offset(&ctx.out[ctx.header_start..]).map(|o| ctx.header_start + o);
        if let (Some(state), Some(at)) = (state, at.filter(|&a| a >= start)) {
            if let Some(dst) = ctx.out.get_mut(at..at + 4) {
                dst.copy_from_slice(&u32::from(state).to_le_bytes());
            }
        }
    }
    ctx.related_file_id = Some(fid);
    Some(Ok(NtStatus::SUCCESS))
}

#[cfg(test)]
mod tests {
    use super::*;
    use access::*;

    fn open(access: u32, share_access: u32) -> OpenRef {
        OpenRef::new(OpenOwner { connection: 1, volatile: 1 }, access, share_access)
    }

    const ALL_SHARE: u32 = share::READ | share::WRITE | share::DELETE;

    #[test]
    fn share_modes() {
        // Readers sharing read coexist; a writer needs everyone to share write.
        assert!(!share_conflict(&[open(FILE_READ_DATA, share::READ)], FILE_READ_DATA, share::READ));
        assert!(share_conflict(&[open(FILE_READ_DATA, share::READ)], FILE_WRITE_DATA, ALL_SHARE));
        assert!(!share_conflict(&[open(FILE_READ_DATA, share::READ | share::WRITE)], FILE_WRITE_DATA, ALL_SHARE));
        // The new open must share what the existing ones already hold.
        assert!(share_conflict(&[open(FILE_WRITE_DATA, ALL_SHARE)], FILE_READ_DATA, share::READ));
        assert!(share_conflict(&[open(FILE_APPEND_DATA, ALL_SHARE)], FILE_READ_DATA, share::READ | share::DELETE));
        assert!(share_conflict(&[open(FILE_EXECUTE, ALL_SHARE)], FILE_READ_DATA, share::WRITE));
        // DELETE needs SHARE_DELETE both ways.
        assert!(share_conflict(&[open(FILE_READ_DATA, share::READ)], DELETE, ALL_SHARE));
        assert!(!share_conflict(&[open(FILE_READ_DATA, share::READ | share::DELETE)], DELETE, ALL_SHARE));
        assert!(share_conflict(&[open(DELETE, ALL_SHARE)], FILE_READ_DATA, share::READ));
        // Attribute-only opens take no part, on either side.
        assert!(!share_conflict(&[open(FILE_READ_DATA, 0)], FILE_READ_ATTRIBUTES | SYNCHRONIZE, 0));
        assert!(!share_conflict(&[open(FILE_READ_ATTRIBUTES, 0)], FILE_ALL, 0));
        // Share mode 0 with data access excludes every other data open.
        assert!(share_conflict(&[open(FILE_READ_DATA, 0)], FILE_READ_DATA, ALL_SHARE));
        assert!(share_conflict(&[open(FILE_READ_ATTRIBUTES, 0), open(FILE_READ_DATA, ALL_SHARE)], FILE_READ_DATA, 0));
        assert!(!share_conflict(&[], FILE_ALL, 0));
    }

    fn req(desired: u32, disp: u32, opts: u32) -> CreateRequest<'static> {
        CreateRequest {
            oplock_level: 0,
            impersonation_level: 2,
            desired_access: desired,
            file_attributes: 0,
            share_access: 0,
            disposition: disp,
            options: opts,
            name: String::new(),
            contexts: Vec::new(),
        }
    }

    #[test]
    fn request_validation() {
        assert_eq!(validate(&req(FILE_READ_DATA, 1, 0)), Ok(()));
        assert_eq!(validate(&CreateRequest { impersonation_level: 4, ..req(1, 1, 0) }), Err(NtStatus::BAD_IMPERSONATION_LEVEL));
        assert_eq!(validate(&req(1, 6, 0)), Err(NtStatus::INVALID_PARAMETER));
        assert_eq!(validate(&req(1, 1, options::DIRECTORY_FILE | options::NON_DIRECTORY_FILE)), Err(NtStatus::INVALID_PARAMETER));
        assert_eq!(validate(&req(1, 1, options::OPEN_BY_FILE_ID)), Err(NtStatus::NOT_SUPPORTED));
        assert_eq!(validate(&req(1, 1, options::RESERVE_OPFILTER)), Err(NtStatus::NOT_SUPPORTED));
        assert_eq!(validate(&req(1, 1, 0x0100_0000)), Err(NtStatus::INVALID_PARAMETER));
        assert_eq!(validate(&req(0x0000_0200, 1, 0)), Err(NtStatus::ACCESS_DENIED));
        assert_eq!(validate(&req(ACCESS_SYSTEM_SECURITY, 1, 0)), Err(NtStatus::PRIVILEGE_NOT_HELD));
        assert_eq!(validate(&CreateRequest { file_attributes: 0x8, ..req(1, 1, 0) }), Err(NtStatus::INVALID_PARAMETER));
        assert_eq!(validate(&CreateRequest { share_access: 8, ..req(1, 1, 0) }), Err(NtStatus::INVALID_PARAMETER));
    }

    #[test]
    fn existing_file_checks() {
        let st = FileStat { attributes: attr::ARCHIVE, ..FileStat::default() };
        let ro = FileStat { attributes: attr::READONLY, ..FileStat::default() };
        let r = req(FILE_READ_DATA, 1, 0);
        assert_eq!(check_existing(&st, None, &r, FILE_READ_DATA), Ok(()));
        assert_eq!(check_existing(&ro, None, &r, FILE_READ_DATA), Ok(()));
        assert_eq!(check_existing(&ro, None, &r, FILE_WRITE_DATA), Err(NtStatus::ACCESS_DENIED));
        assert_eq!(check_existing(&ro, None, &req(FILE_READ_DATA, 5, 0), FILE_READ_DATA), Err(NtStatus::ACCESS_DENIED));
        assert_eq!(check_existing(&ro, None, &req(DELETE, 1, options::DELETE_ON_CLOSE), DELETE), Err(NtStatus::CANNOT_DELETE));
        let pending = crate::files::FileEntry { delete_pending: true, ..Default::default() };
        assert_eq!(check_existing(&st, Some(&pending), &r, FILE_READ_DATA), Err(NtStatus::DELETE_PENDING));
        // Access to a read-only file is refused before a pending delete shows.
        assert_eq!(check_existing(&ro, Some(&pending), &r, FILE_WRITE_DATA), Err(NtStatus::ACCESS_DENIED));
    }

    #[test]
    fn paths_and_meta() {
        assert_eq!(share_path("\\a\\b"), "a\\b");
        assert_eq!(share_path("a"), "a");
        assert_eq!(share_path("\\"), "");
        assert_eq!(share_path(""), "");
        let d = FileStat { is_dir: true, size: 4096, allocation_size: 4096, attributes: attr::DIRECTORY, ..FileStat::default() };
        let m = meta(&d);
        assert_eq!((m.end_of_file, m.allocation_size, m.directory), (0, 0, true));
        let f = FileStat { size: 10, allocation_size: 4096, file_id: 5, ..FileStat::default() };
        assert_eq!(meta(&f).end_of_file, 10);
        assert_eq!(meta(&f).file_id, 5);
    }
}
