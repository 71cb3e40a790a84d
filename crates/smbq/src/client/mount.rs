//! `smbq mount`: a share as a local directory, through FUSE (the `fuser`
//! crate speaking the kernel's protocol on /dev/fuse).
//!
//! One [`Share`] (one connection, one tree) serves every request; FUSE
//! requests come one at a time on fuser's thread and each runs its SMB
//! exchange with `Runtime::block_on`. The kernel knows files by inode
//! number, SMB by path: [`Inodes`] hands out our own numbers and follows
//! renames and deletions. Around that:
//!
//! - attributes and directory listings are cached for `attr_ttl` (the
//!   kernel's entry and attribute TTL too), and what we change ourselves
//!   is dropped from the cache at once;
//! - a sequential reader gets a read-ahead window (up to 8 MiB) fetched
//!   with pipelined READs (MS-SMB2 2.2.19, 3.2.4.1.5: as many outstanding
//!   as the credits allow);
//! - contiguous writes are gathered per handle (up to 8 MiB) and sent as
//!   pipelined WRITEs (MS-SMB2 2.2.21) on a non-contiguous write, flush,
//!   fsync, release, and before anything that reads the file or its size.
//!
//! fcntl(2) record locks (F_SETLK, F_SETLKW, F_GETLK; FUSE_POSIX_LOCKS)
//! are SMB2 byte-range locks (MS-SMB2 2.2.26) on the file's handle, so
//! they conflict with other mounts and other clients of the share;
//! [`super::posix_locks`] keeps POSIX meaning on top (per-owner ranges
//! that split and change type; owners sharing a handle checked here). SMB
//! locks bind I/O: others cannot read or write a range we locked (shared:
//! nobody writes it). F_SETLKW waits by trying again on a thread of its
//! own, and a signal to the waiter ends it (EINTR). Once a lock is ours,
//! the kernel's cache of the file, and of names extending its name (a
//! database's `-journal`), is dropped; before one goes, our writes go
//! out. Closing a descriptor drops its process's locks on the file; a
//! lock held through one handle still conflicts with the same process's
//! other handles. flock(2) stays local to the mount.
//!
//! SMB errors become errnos in [`errno`]; a broken connection is EIO on
//! every later request (no reconnection).

use anyhow::Context;
use bytes::Bytes;
use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, KernelConfig, LockOwner, MountOption, OpenAccMode, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyLock, ReplyOpen, ReplyStatfs,
    ReplyWrite, Request, SessionACL, TimeOrNow, WriteFlags,
};
use smbq_client::share::{access, filetime, system_time, FileInfo, Share};
use smbq_client::ClientError;
use super::posix_locks::{self, Conflicting, Kind, Range, Refused, Table};
use smbq_wire::create::{disposition, options};
use smbq_wire::fscc::attr;
use smbq_wire::lock::{flags as lock_flags, LockElement};
use smbq_wire::{FileId, NtStatus};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime};
use tokio::runtime::Runtime;

/// Largest read-ahead window and write-back buffer.
const MAX_WINDOW: usize = 8 << 20;
const MAX_WRITE_BUFFER: usize = 8 << 20;
/// A read starting this close to where the last one ended counts as
/// sequential (the kernel's own read-ahead may reorder a little).
const SEQUENTIAL_SLACK: u64 = 256 << 10;
/// What the kernel is told to send at most per WRITE and to read ahead.
const KERNEL_IO: u32 = 1 << 20;
/// Cached attributes and listings kept at most (then the cache starts over).
const CACHE_LIMIT: usize = 100_000;
/// Pauses between CREATEs of a name still delete-pending (about 1 s in all).
const DELETE_PENDING_WAITS: [u64; 7] = [10, 20, 50, 100, 200, 300, 320];
/// How long to wait for answers still outstanding after a failed exchange.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

pub struct MountOptions {
    /// How long the kernel and we may trust attributes and listings.
    pub attr_ttl: Duration,
    /// Let users other than the one mounting use the mount (`allow_other`).
    pub allow_other: bool,
    /// Called once, when the mount is in place.
    pub foreground_ready: Option<Box<dyn FnOnce() + Send>>,
    /// Permission bits of files and directories on a share without the
    /// POSIX extensions, as cifs.ko's `file_mode`/`dir_mode` (0755 both by
    /// default, so a program built on the mount runs); a file with
    /// FILE_ATTRIBUTE_READONLY shows them without the write bits.
    pub file_mode: u32,
    pub dir_mode: u32,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions { attr_ttl: Duration::from_secs(1), allow_other: false, foreground_ready: None, file_mode: 0o755, dir_mode: 0o755 }
    }
}

/// Mount `share` on `dir` and serve it until it is unmounted from outside
/// (`fusermount3 -u DIR`) or SIGINT or SIGTERM arrives, which unmounts it
/// here (lazily, if something still holds it busy).
pub fn run(share: Share, rt: Runtime, dir: &Path, opts: MountOptions) -> anyhow::Result<()> {
    let rt = Arc::new(rt);
    let fsname = format!("smbq:{}", share.url);
    // Before mounting, so that a signal during the mount is not lost.
    let (mut sigint, mut sigterm) = rt
        .block_on(async {
            use tokio::signal::unix::{signal, SignalKind};
            Ok::<_, std::io::Error>((signal(SignalKind::interrupt())?, signal(SignalKind::terminate())?))
        })
        .context("installing signal handlers")?;
    let mut config = Config::default();
    config.mount_options = vec![MountOption::FSName(fsname.clone()), MountOption::Subtype("smbq".into()), MountOption::NoDev, MountOption::NoSuid, MountOption::RW];
    config.acl = if opts.allow_other { SessionACL::All } else { SessionACL::Owner };
    let fs = SmbFs::new(share, rt.clone(), &opts);
    let (state, notifier) = (fs.inner.clone(), fs.notifier.clone());
    let session = fuser::spawn_mount(fs, dir, &config).with_context(|| format!("mounting {fsname} on {}", dir.display()))?;
    let _ = notifier.set(session.notifier());
    tracing::info!(dir = %dir.display(), "mounted {fsname}");
    if let Some(ready) = opts.foreground_ready {
        ready();
    }
    let signal = rt.block_on(async {
        loop {
            tokio::select! {
                _ = sigint.recv() => break Some("SIGINT"),
                _ = sigterm.recv() => break Some("SIGTERM"),
                _ = tokio::time::sleep(Duration::from_millis(200)) => {
                    if session.guard.is_finished() {
                        break None;
                    }
                }
            }
        }
    });
    match signal {
        None => {
            session.join().context("serving the mount")?;
            tracing::info!(dir = %dir.display(), "unmounted");
        }
        Some(sig) => {
            tracing::info!(dir = %dir.display(), "{sig}: unmounting");
            if let Err(e) = session.umount_and_join() {
                tracing::warn!(dir = %dir.display(), "unmount: {e}; detaching it lazily");
                lazy_unmount(dir);
                // Whoever still has files open loses them now: send what
                // they wrote before we exit.
                state.lock().unwrap_or_else(|p| p.into_inner()).shut_down();
            }
        }
    }
    Ok(())
}

/// `fusermount3 -u -z DIR`: detach a busy mount; it goes when its last user does.
fn lazy_unmount(dir: &Path) {
    match std::process::Command::new("fusermount3").arg("-u").arg("-z").arg(dir).status() {
        Ok(s) if s.success() => {}
        Ok(s) => tracing::error!(dir = %dir.display(), "fusermount3 -u -z: {s}"),
        Err(e) => tracing::error!(dir = %dir.display(), "fusermount3: {e}"),
    }
}

/// The errno for a failed exchange: the NTSTATUS (MS-ERREF 2.3) the
/// server answered, or EIO for a connection or protocol failure.
fn errno(e: &ClientError) -> Errno {
    let ClientError::Status(_, st) = e else {
        return Errno::EIO;
    };
    match *st {
        NtStatus::OBJECT_NAME_NOT_FOUND | NtStatus::OBJECT_PATH_NOT_FOUND | NtStatus::NO_SUCH_FILE | NtStatus::DELETE_PENDING => Errno::ENOENT,
        NtStatus::OBJECT_NAME_COLLISION => Errno::EEXIST,
        NtStatus::ACCESS_DENIED | NtStatus::CANNOT_DELETE => Errno::EACCES,
        NtStatus::DIRECTORY_NOT_EMPTY => Errno::ENOTEMPTY,
        NtStatus::NOT_A_DIRECTORY => Errno::ENOTDIR,
        NtStatus::FILE_IS_A_DIRECTORY => Errno::EISDIR,
        NtStatus::SHARING_VIOLATION => Errno::EBUSY,
        // A READ or WRITE into a range someone else locked (SMB locks bind I/O).
        NtStatus::FILE_LOCK_CONFLICT | NtStatus::LOCK_NOT_GRANTED => Errno::EAGAIN,
        NtStatus::DISK_FULL => Errno::ENOSPC,
        NtStatus::OBJECT_NAME_INVALID => Errno::EINVAL,
        NtStatus::MEDIA_WRITE_PROTECTED => Errno::EROFS,
        _ => Errno::EIO,
    }
}

/// `dir/name` for share-relative `/`-separated paths ("" is the root).
fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// The directory holding `path` ("" for the root's children).
fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(d, _)| d)
}

/// One inode number the kernel holds: the path it stands for (None once
/// deleted) and how many lookups the kernel has not forgotten.
struct Node {
    path: Option<String>,
    lookups: u64,
    /// The attributes last given for it, for fstat(2) after unlink(2).
    last: Option<FileAttr>,
}

/// Our inode numbers (a counter; 1 is the root) both ways.
struct Inodes {
    nodes: HashMap<u64, Node>,
    by_path: HashMap<String, u64>,
    next: u64,
}

impl Inodes {
    fn new() -> Inodes {
        let mut i = Inodes { nodes: HashMap::new(), by_path: HashMap::new(), next: 2 };
        i.nodes.insert(INodeNo::ROOT.0, Node { path: Some(String::new()), lookups: 1, last: None });
        i.by_path.insert(String::new(), INodeNo::ROOT.0);
        i
    }

    fn path(&self, ino: u64) -> Result<&str, Errno> {
        self.nodes.get(&ino).and_then(|n| n.path.as_deref()).ok_or(Errno::ENOENT)
    }

    /// The number of `path`, given a new one if it has none (no lookup counted).
    fn number(&mut self, path: &str) -> u64 {
        if let Some(&ino) = self.by_path.get(path) {
            return ino;
        }
        let ino = self.next;
        self.next += 1;
        self.nodes.insert(ino, Node { path: Some(path.to_string()), lookups: 0, last: None });
        self.by_path.insert(path.to_string(), ino);
        ino
    }

    /// The kernel learned of `path` (an entry reply): count it.
    fn lookup(&mut self, path: &str) -> u64 {
        let ino = self.number(path);
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.lookups += 1;
        }
        ino
    }

    /// FUSE FORGET: the kernel dropped `n` of its lookups.
    fn forget(&mut self, ino: u64, n: u64) {
        if ino == INodeNo::ROOT.0 {
            return;
        }
        let Some(node) = self.nodes.get_mut(&ino) else { return };
        node.lookups = node.lookups.saturating_sub(n);
        if node.lookups == 0 {
            if let Some(p) = node.path.take() {
                if self.by_path.get(&p) == Some(&ino) {
                    self.by_path.remove(&p);
                }
            }
            self.nodes.remove(&ino);
        }
    }

    /// `path` is gone: its number stays valid (open files) but names nothing.
    fn unlinked(&mut self, path: &str) {
        if let Some(ino) = self.by_path.remove(path) {
            if let Some(n) = self.nodes.get_mut(&ino) {
                n.path = None;
                if let Some(a) = &mut n.last {
                    a.nlink = 0;
                }
            }
        }
    }

    /// `from` (and all below it) is now `to`; what was at `to` is gone.
    fn renamed(&mut self, from: &str, to: &str) {
        self.unlinked(to);
        let prefix = format!("{from}/");
        let moved: Vec<(String, u64)> = self.by_path.iter().filter(|(p, _)| p.as_str() == from || p.starts_with(&prefix)).map(|(p, &i)| (p.clone(), i)).collect();
        for (old, ino) in moved {
            self.by_path.remove(&old);
            let new = format!("{to}{}", &old[from.len()..]);
            if let Some(n) = self.nodes.get_mut(&ino) {
                n.path = Some(new.clone());
            }
            self.by_path.insert(new, ino);
        }
    }
}

/// Attributes and listings fetched less than `ttl` ago.
struct Cache {
    ttl: Duration,
    attrs: HashMap<String, (Instant, FileInfo)>,
    dirs: HashMap<String, (Instant, Vec<FileInfo>)>,
}

impl Cache {
    fn attr(&self, path: &str) -> Option<FileInfo> {
        self.attrs.get(path).filter(|(t, _)| t.elapsed() < self.ttl).map(|(_, i)| i.clone())
    }

    fn dir(&self, path: &str) -> Option<Vec<FileInfo>> {
        self.dirs.get(path).filter(|(t, _)| t.elapsed() < self.ttl).map(|(_, l)| l.clone())
    }

    fn put_attr(&mut self, path: &str, info: &FileInfo) {
        if self.ttl.is_zero() {
            return;
        }
        if self.attrs.len() >= CACHE_LIMIT {
            self.attrs.clear();
        }
        self.attrs.insert(path.to_string(), (Instant::now(), info.clone()));
    }

    /// A listing, and the attributes of each entry in it.
    fn put_dir(&mut self, path: &str, list: &[FileInfo]) {
        if self.ttl.is_zero() {
            return;
        }
        if self.dirs.len() >= CACHE_LIMIT / 100 {
            self.dirs.clear();
        }
        for e in list {
            self.put_attr(&join(path, &e.name), e);
        }
        self.dirs.insert(path.to_string(), (Instant::now(), list.to_vec()));
    }

    /// We changed `path`: forget it and the listing it appears in.
    fn changed(&mut self, path: &str) {
        self.attrs.remove(path);
        self.dirs.remove(parent(path));
    }

    fn clear(&mut self) {
        self.attrs.clear();
        self.dirs.clear();
    }
}

/// An open file: its SMB handle, the writes not sent yet and the
/// read-ahead window.
struct Open {
    ino: u64,
    fid: FileId,
    /// What it was opened for (a reconnect opens it again so).
    access: u32,
    /// Gathered contiguous writes starting at `wbuf_off`.
    wbuf_off: u64,
    wbuf: Vec<u8>,
    /// Bytes of the file from `window_off`.
    window_off: u64,
    window: Vec<u8>,
    /// Where the last read ended (to tell a sequential reader).
    next_read: u64,
    /// The window after `window`, fetched in the background.
    next_window: Option<(u64, Vec<u8>)>,
    /// A write sent in the background failed: the next write, flush or close says so.
    error: Option<Errno>,
    /// A write time was set through this handle, so the server no longer
    /// moves it on writes through it (MS-FSA 2.1.5.14.2,
    /// Open.UserSetModificationTime); `Some(true)` once written since:
    /// the next flush sets it to the time of the flush, as a local write would.
    user_time: Option<bool>,
}

impl Open {
    /// `len` bytes at `off` if the window holds them, or holds what there
    /// is up to the end of file (`eof`, when the window reached it).
    fn in_window(&self, off: u64, len: u32, eof: Option<u64>) -> Option<&[u8]> {
        let start = usize::try_from(off.checked_sub(self.window_off)?).ok()?;
        let end = start.checked_add(len as usize)?;
        let window_end = self.window_off + self.window.len() as u64;
        if end <= self.window.len() {
            self.window.get(start..end)
        } else if eof == Some(window_end) && start <= self.window.len() {
            self.window.get(start..)
        } else {
            None
        }
    }
}

/// A directory listing taken at opendir, served to readdir by offset.
struct DirEntry {
    ino: u64,
    kind: FileType,
    name: String,
}

/// What runs on the connection while the kernel's next requests are
/// served: a full write-back buffer going out, or the next read-ahead
/// window coming in. It owns the connection until it is joined.
struct Background {
    task: tokio::task::JoinHandle<(Share, Result<Vec<u8>, ClientError>)>,
    job: Job,
}

enum Job {
    /// Handle `fh`'s writes to file `ino`: `data` at `off`.
    Write { fh: u64, ino: u64, off: u64, data: Bytes },
    /// Handle `fh`'s next read-ahead window, from `off`.
    Prefetch { fh: u64, off: u64 },
}

/// Everything the FUSE requests share, behind one lock.
struct Inner {
    rt: Arc<Runtime>,
    /// The connection; `None` while a [`Background`] job has it.
    share: Option<Share>,
    background: Option<Background>,
    uid: u32,
    gid: u32,
    /// MountOptions' file_mode and dir_mode.
    file_mode: u32,
    dir_mode: u32,
    /// The share speaks the SMB3 POSIX extensions (`--posix`): modes,
    /// owners, file types and symlinks come from the server.
    posix: bool,
    inodes: Inodes,
    cache: Cache,
    opens: HashMap<u64, Open>,
    listings: HashMap<u64, Vec<DirEntry>>,
    next_fh: u64,
    /// Read-ahead window: what `chunk` × `depth` READs carry, at most 8 MiB.
    window: usize,
    /// A lost connection was replaced while serving this request.
    reconnected: bool,
    /// The POSIX locks held on the server through each handle.
    locks: HashMap<u64, Table>,
}

/// The `fuser` filesystem: [`Inner`] behind a mutex.
#[derive(Clone)]
struct SmbFs {
    inner: Arc<Mutex<Inner>>,
    ttl: Duration,
    /// Tells the kernel to drop what it cached (once mounted).
    notifier: Arc<OnceLock<fuser::Notifier>>,
}

impl SmbFs {
    fn new(share: Share, rt: Arc<Runtime>, opts: &MountOptions) -> SmbFs {
        let (ttl, posix) = (opts.attr_ttl, share.posix);
        let window = (share.chunk as usize).saturating_mul(share.depth).clamp(share.chunk.max(1) as usize, MAX_WINDOW);
        // SAFETY: getuid and getgid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let inner = Inner {
            rt,
            share: Some(share),
            background: None,
            uid,
            gid,
            file_mode: opts.file_mode & 0o7777,
            dir_mode: opts.dir_mode & 0o7777,
            posix,
            inodes: Inodes::new(),
            cache: Cache { ttl, attrs: HashMap::new(), dirs: HashMap::new() },
            opens: HashMap::new(),
            listings: HashMap::new(),
            next_fh: 1,
            window,
            reconnected: false,
            locks: HashMap::new(),
        };
        SmbFs { inner: Arc::new(Mutex::new(inner)), ttl, notifier: Arc::new(OnceLock::new()) }
    }

    /// The state; a panic in another request does not make it unusable.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Serve one request; if it failed because the connection was lost
    /// and [`Inner::recover`] replaced it, once more.
    fn call<T>(&self, f: impl Fn(&mut Inner) -> Result<T, Errno>) -> Result<T, Errno> {
        let mut g = self.lock();
        g.reconnected = false;
        let r = f(&mut g);
        if r.is_err() && std::mem::take(&mut g.reconnected) {
            return f(&mut g);
        }
        r
    }
}

/// `len` bytes at `offset` with pipelined READs (the read-ahead window).
async fn fetch(s: &mut Share, fid: FileId, offset: u64, len: u64) -> Result<Vec<u8>, ClientError> {
    let mut buf = vec![0u8; len as usize];
    let (chunk, depth) = (s.chunk, s.depth);
    s.client()
        .read_range(fid, offset, len, chunk, depth, |at, piece| {
            let start = (at - offset) as usize;
            let dst = buf.get_mut(start..start + piece.len()).ok_or_else(|| std::io::Error::other("READ data outside the window asked for"))?;
            dst.copy_from_slice(piece);
            Ok(())
        })
        .await?;
    Ok(buf)
}

/// A name from the kernel as an SMB path component: UTF-8, no `\`
/// (which SMB would take as a separator, MS-SMB2 2.2.13).
fn component(name: &OsStr) -> Result<&str, Errno> {
    let n = name.to_str().ok_or(Errno::EINVAL)?;
    if n.is_empty() || n.contains('\\') {
        return Err(Errno::EINVAL);
    }
    Ok(n)
}

fn time_arg(t: Option<TimeOrNow>) -> u64 {
    match t {
        None => 0,
        Some(TimeOrNow::Now) => filetime(SystemTime::now()),
        Some(TimeOrNow::SpecificTime(t)) => filetime(t),
    }
}

impl Inner {
    /// An error from `what` on `path` as an errno; server answers that are
    /// part of normal life (no such file) are logged at debug level, the
    /// rest at error. Answers still outstanding (a pipeline stopped by the
    /// error) are read and dropped, so the next exchange gets its own.
    fn fail(&mut self, what: &str, path: &str, e: ClientError) -> Errno {
        let n = errno(&e);
        match &e {
            ClientError::Status(..) if n != Errno::EIO => tracing::debug!(path, "{what}: {e}"),
            _ => tracing::error!(path, "{what}: {e}"),
        }
        if e.is_connection_lost() {
            self.recover();
            return n;
        }
        let rt = self.rt.clone();
        let Some(share) = self.share.as_mut() else { return n };
        if share.client().core.in_flight() > 0 {
            let drained = rt.block_on(async {
                tokio::time::timeout(DRAIN_TIMEOUT, async {
                    while share.client().core.in_flight() > 0 {
                        share.client().recv().await?;
                    }
                    Ok::<_, ClientError>(())
                })
                .await
            });
            match drained {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::error!("after {what}: reading the answers still outstanding: {e}"),
                Err(_) => tracing::error!("after {what}: the answers still outstanding did not come"),
            }
        }
        n
    }

    /// After a lost connection: connect again (a new session on a new
    /// connection, MS-SMB2 3.2.4.2) and open every file the kernel holds
    /// open again by name, so its handles stay good; then the request that
    /// failed is tried once more ([`SmbFs::call`]).
    fn recover(&mut self) {
        let rt = self.rt.clone();
        let Some(share) = self.share.as_mut() else { return };
        let mut connected = false;
        for wait_ms in [0u64, 250, 1000, 2000, 4000] {
            std::thread::sleep(Duration::from_millis(wait_ms));
            match rt.block_on(share.reconnect()) {
                Ok(()) => {
                    connected = true;
                    break;
                }
                Err(e) => tracing::warn!("reconnecting: {e}"),
            }
        }
        if !connected {
            return;
        }
        tracing::warn!("the connection was lost; reconnected to {}", share.url);
        self.cache.clear();
        for (fh, o) in self.opens.iter_mut() {
            let path = self.inodes.path(o.ino).unwrap_or_default().to_string();
            match rt.block_on(share.create(&path, o.access, disposition::OPEN, options::NON_DIRECTORY_FILE, 0)) {
                Ok(h) => o.fid = h.fid,
                Err(e) => {
                    tracing::error!(path, fh, "opening again after the reconnect: {e}");
                    o.error = Some(Errno::EIO);
                }
            }
            o.window = Vec::new();
            o.next_window = None;
        }
        // The server forgot our locks with the old connection: take them again.
        for (fh, t) in self.locks.iter_mut() {
            let Some(fid) = self.opens.get(fh).map(|o| o.fid) else { continue };
            t.held.retain(|h| match rt.block_on(share.lock(fid, &[element(h.range, Some(h.kind))])) {
                Ok(()) => true,
                Err(e) => {
                    tracing::error!(fh, start = h.range.start, stop = h.range.stop, "locking again after the reconnect: {e}; the lock is lost");
                    false
                }
            });
        }
        self.reconnected = true;
    }

    /// Writes that did not go out on a lost connection go back in front
    /// of handle `fh`'s buffer, to be sent again once reconnected.
    fn restore(&mut self, fh: u64, off: u64, data: Bytes) {
        let Some(o) = self.opens.get_mut(&fh) else { return };
        if o.wbuf.is_empty() {
            o.wbuf_off = off;
            o.wbuf = data.to_vec();
        } else if off + data.len() as u64 == o.wbuf_off {
            let mut v = data.to_vec();
            v.extend_from_slice(&o.wbuf);
            o.wbuf = v;
            o.wbuf_off = off;
        } else {
            o.error = Some(Errno::EIO);
        }
    }

    /// Run `f` on the connection, once a background job is done with it.
    fn with_share<T>(&mut self, f: impl AsyncFnOnce(&mut Share) -> Result<T, ClientError>) -> Result<T, ClientError> {
        self.join();
        let rt = self.rt.clone();
        match self.share.as_mut() {
            Some(s) => rt.block_on(f(s)),
            None => Err(ClientError::Io(std::io::Error::other("the connection was lost in a background job"))),
        }
    }

    /// Wait for the background job and take the connection back: a
    /// failed write is kept for its handle, a read-ahead window for its.
    fn join(&mut self) {
        let Some(bg) = self.background.take() else { return };
        let (share, r) = match self.rt.block_on(bg.task) {
            Ok(done) => done,
            Err(e) => {
                tracing::error!("a background job on the connection failed: {e}");
                return;
            }
        };
        self.share = Some(share);
        match (bg.job, r) {
            (Job::Write { .. }, Ok(_)) => {}
            (Job::Write { fh, ino, off, data }, Err(e)) => {
                let path = self.inodes.path(ino).unwrap_or_default().to_string();
                let n = self.fail("write", &path, e);
                if self.reconnected {
                    self.restore(fh, off, data);
                } else if let Some(o) = self.opens.get_mut(&fh) {
                    o.error = Some(n);
                }
            }
            (Job::Prefetch { fh, off }, Ok(buf)) => {
                if let Some(o) = self.opens.get_mut(&fh) {
                    o.next_window = Some((off, buf));
                }
            }
            (Job::Prefetch { .. }, Err(e)) => {
                // A plain READ later says what is wrong, if anything is.
                self.fail("read-ahead", "", e);
            }
        }
    }

    /// Start `f` on the connection in the background (after the job before it).
    fn spawn<F>(&mut self, job: Job, f: F)
    where
        F: FnOnce(Share) -> std::pin::Pin<Box<dyn std::future::Future<Output = (Share, Result<Vec<u8>, ClientError>)> + Send>>,
    {
        self.join();
        let Some(share) = self.share.take() else { return };
        let task = self.rt.spawn(f(share));
        self.background = Some(Background { task, job });
    }

    /// A background write's failure, once.
    fn take_error(&mut self, fh: u64) -> Result<(), Errno> {
        match self.opens.get_mut(&fh).and_then(|o| o.error.take()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn path(&self, ino: INodeNo) -> Result<String, Errno> {
        self.inodes.path(ino.0).map(str::to_string)
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<String, Errno> {
        Ok(join(self.inodes.path(parent.0)?, component(name)?))
    }

    /// Metadata of `path`: cached, or a CREATE+QUERY_INFO+CLOSE compound.
    fn stat(&mut self, path: &str) -> Result<FileInfo, Errno> {
        if let Some(i) = self.cache.attr(path) {
            return Ok(i);
        }
        match self.with_share(async |s| s.stat(path).await) {
            Ok(i) => {
                self.cache.put_attr(path, &i);
                Ok(i)
            }
            Err(e) => Err(self.fail("stat", path, e)),
        }
    }

    /// FUSE attributes for `info`: the mount's dir_mode and file_mode, a
    /// file with FILE_ATTRIBUTE_READONLY (MS-FSCC 2.6) without write bits
    /// (as cifs.ko shows them), owned by whoever mounted.
    ///
    /// On a POSIX share the server's mode, owner, group and file type.
    fn attr(&mut self, ino: u64, info: &FileInfo) -> FileAttr {
        let dir = info.is_dir();
        let perm = match &info.posix {
            Some(p) => p.mode & 0o7777,
            None if dir => self.dir_mode,
            None if info.attributes & attr::READONLY != 0 => self.file_mode & !0o222,
            None => self.file_mode,
        };
        let (uid, gid) = match &info.posix {
            Some(p) => (p.uid.unwrap_or(self.uid), p.gid.unwrap_or(self.gid)),
            None => (self.uid, self.gid),
        };
        let a = FileAttr {
            ino: INodeNo(ino),
            size: info.size,
            blocks: info.allocation.div_ceil(512),
            atime: system_time(info.accessed),
            mtime: system_time(info.written),
            ctime: system_time(info.changed),
            crtime: system_time(info.created),
            kind: kind_of(info),
            perm: perm as u16,
            nlink: info.links.max(1),
            uid,
            gid,
            rdev: 0,
            blksize: KERNEL_IO,
            flags: 0,
        };
        if let Some(n) = self.inodes.nodes.get_mut(&ino) {
            n.last = Some(a);
        }
        a
    }

    /// An entry for the kernel: `path`'s attributes, its lookup counted.
    fn entry(&mut self, path: &str, info: &FileInfo) -> FileAttr {
        let ino = self.inodes.lookup(path);
        self.attr(ino, info)
    }

    /// Handle `fh`'s gathered writes, taken out of its buffer to be sent
    /// (after the background job, and any failure it left, are dealt with):
    /// the file, its id, the offset and the bytes.
    fn take_pending(&mut self, fh: u64) -> Result<Option<(u64, FileId, u64, Bytes)>, Errno> {
        self.join();
        self.take_error(fh)?;
        Ok(match self.opens.get_mut(&fh) {
            Some(o) if !o.wbuf.is_empty() => Some((o.ino, o.fid, o.wbuf_off, Bytes::from(std::mem::take(&mut o.wbuf)))),
            _ => None,
        })
    }

    /// Send the writes gathered on handle `fh`, then move its write time
    /// on if the server no longer does ([`Open::user_time`]).
    fn flush_open(&mut self, fh: u64) -> Result<(), Errno> {
        self.send_pending(fh)?;
        let Some(o) = self.opens.get_mut(&fh).filter(|o| o.user_time == Some(true)) else { return Ok(()) };
        o.user_time = Some(false);
        let (ino, fid, now) = (o.ino, o.fid, filetime(SystemTime::now()));
        let r = self.with_share(async |s| s.set_basic(fid, 0, 0, now, 0).await);
        let path = self.inodes.path(ino).unwrap_or_default().to_string();
        self.cache.changed(&path);
        r.map_err(|e| self.fail("setting the write time", &path, e))
    }

    /// Send the writes gathered on handle `fh` (pipelined WRITEs).
    fn send_pending(&mut self, fh: u64) -> Result<(), Errno> {
        let Some((ino, fid, off, data)) = self.take_pending(fh)? else { return Ok(()) };
        let r = self.with_share(async |s| s.write_at(fid, off, data.clone()).await);
        let path = self.inodes.path(ino).unwrap_or_default().to_string();
        self.cache.changed(&path);
        r.map_err(|e| {
            let n = self.fail("write", &path, e);
            if self.reconnected {
                self.restore(fh, off, data);
            }
            n
        })
    }

    /// Send handle `fh`'s gathered writes in the background, so the
    /// kernel's next writes are gathered while they go out (after the
    /// writes sent before them: one job runs at a time).
    fn send_in_background(&mut self, fh: u64) -> Result<(), Errno> {
        let Some((ino, fid, off, data)) = self.take_pending(fh)? else { return Ok(()) };
        if let Ok(p) = self.inodes.path(ino) {
            let p = p.to_string();
            self.cache.changed(&p);
        }
        let sent = data.clone();
        self.spawn(Job::Write { fh, ino, off, data }, move |mut s| {
            Box::pin(async move {
                let r = s.write_at(fid, off, sent).await.map(|()| Vec::new());
                (s, r)
            })
        });
        Ok(())
    }

    /// Send every handle's gathered writes to file `ino` (but `except`'s).
    fn flush_ino(&mut self, ino: u64, except: Option<u64>) -> Result<(), Errno> {
        let pending: Vec<u64> = self.opens.iter().filter(|(&fh, o)| o.ino == ino && !o.wbuf.is_empty() && Some(fh) != except).map(|(&fh, _)| fh).collect();
        for fh in pending {
            self.flush_open(fh)?;
        }
        Ok(())
    }

    /// File `ino` changed: read-ahead windows on it are stale.
    fn drop_windows(&mut self, ino: u64) {
        self.join();
        for o in self.opens.values_mut().filter(|o| o.ino == ino) {
            o.window = Vec::new();
            o.next_window = None;
        }
    }

    fn add_open(&mut self, ino: u64, fid: FileId, access: u32) -> u64 {
        let fh = self.next_fh;
        self.next_fh += 1;
        self.opens.insert(fh, Open { ino, fid, access, wbuf_off: 0, wbuf: Vec::new(), window_off: 0, window: Vec::new(), next_read: 0, next_window: None, error: None, user_time: None });
        fh
    }

    fn lookup(&mut self, parent: INodeNo, name: &OsStr) -> Result<FileAttr, Errno> {
        let path = self.child(parent, name)?;
        if let Some(&ino) = self.inodes.by_path.get(&path) {
            self.flush_ino(ino, None)?;
        }
        let info = self.stat(&path)?;
        Ok(self.entry(&path, &info))
    }

    fn getattr(&mut self, ino: INodeNo) -> Result<FileAttr, Errno> {
        self.flush_ino(ino.0, None)?;
        let Ok(path) = self.path(ino) else {
            // Deleted but still open: what we knew last.
            return self.inodes.nodes.get(&ino.0).and_then(|n| n.last).ok_or(Errno::ENOENT);
        };
        let info = self.stat(&path)?;
        Ok(self.attr(ino.0, &info))
    }

    /// Size through FileEndOfFileInformation and times through
    /// FileBasicInformation (SET_INFO, MS-SMB2 2.2.39; MS-FSCC 2.4.7: a
    /// time of 0 leaves that time as it is): the size on the open handle
    /// `fh` when it may write, times on every handle of ours that may
    /// write the file; else on a handle opened for it. Mode and owner are
    /// not SMB's to change and are left as they are.
    fn setattr(&mut self, ino: INodeNo, size: Option<u64>, atime: Option<TimeOrNow>, mtime: Option<TimeOrNow>, fh: Option<FileHandle>) -> Result<FileAttr, Errno> {
        let path = self.path(ino)?;
        self.flush_ino(ino.0, None)?;
        self.drop_windows(ino.0);
        let times = atime.is_some() || mtime.is_some();
        if size.is_some() || times {
            let given = fh.and_then(|fh| self.opens.get(&fh.0)).filter(|o| o.access & access::WRITE_DATA != 0).map(|o| o.fid);
            // Times go through every handle of ours that may write the
            // file (the application's): smbd, as Windows, stamps the write
            // time when a handle that wrote closes, unless a time was set
            // through that very handle (MS-FSA 2.1.5.14.2,
            // Open.UserSetModificationTime), so a time set through another
            // handle is lost at close (tar's futimens, touch of an open file).
            let writers: Vec<FileId> = if times { self.opens.values().filter(|o| o.ino == ino.0 && o.access & access::WRITE_ATTRIBUTES != 0).map(|o| o.fid).collect() } else { Vec::new() };
            let temporary = if (size.is_some() && given.is_none()) || (times && writers.is_empty()) {
                let want = access::READ_ATTRIBUTES | access::WRITE_ATTRIBUTES | access::SYNCHRONIZE | if size.is_some() { access::WRITE_DATA } else { 0 };
                match self.with_share(async |s| s.create(&path, want, disposition::OPEN, 0, 0).await) {
                    Ok(h) => Some(h.fid),
                    Err(e) => return Err(self.fail("open for setattr", &path, e)),
                }
            } else {
                None
            };
            let mut r = Ok(());
            if let (Some(s), Some(fid)) = (size, given.or(temporary)) {
                r = self.with_share(async |sh| sh.set_size(fid, s).await);
            }
            if times {
                let (at, mt) = (time_arg(atime), time_arg(mtime));
                for fid in if writers.is_empty() { temporary.into_iter().collect() } else { writers } {
                    if r.is_ok() {
                        r = self.with_share(async |s| s.set_basic(fid, 0, at, mt, 0).await);
                    }
                }
                if mt != 0 {
                    for o in self.opens.values_mut().filter(|o| o.ino == ino.0 && o.access & access::WRITE_ATTRIBUTES != 0) {
                        o.user_time = Some(false);
                    }
                }
            }
            if let Some(fid) = temporary {
                let closed = self.with_share(async |s| s.close(fid).await);
                r = r.and(closed);
            }
            self.cache.changed(&path);
            r.map_err(|e| self.fail("setattr", &path, e))?;
        }
        let info = self.stat(&path)?;
        Ok(self.attr(ino.0, &info))
    }

    /// The entries of directory `ino` (`.` and `..` first), from the cache
    /// or QUERY_DIRECTORY (MS-SMB2 2.2.33).
    fn opendir(&mut self, ino: INodeNo) -> Result<u64, Errno> {
        let path = self.path(ino)?;
        let list = match self.cache.dir(&path) {
            Some(l) => l,
            None => match self.with_share(async |s| s.list(&path, "*").await) {
                Ok(l) => {
                    self.cache.put_dir(&path, &l);
                    l
                }
                Err(e) => return Err(self.fail("list", &path, e)),
            },
        };
        let up = self.inodes.by_path.get(parent(&path)).copied().unwrap_or(INodeNo::ROOT.0);
        let mut entries = vec![DirEntry { ino: ino.0, kind: FileType::Directory, name: ".".into() }, DirEntry { ino: up, kind: FileType::Directory, name: "..".into() }];
        for e in list {
            if e.name.is_empty() || e.name.contains(['/', '\\']) {
                continue;
            }
            let kind = kind_of(&e);
            entries.push(DirEntry { ino: self.inodes.number(&join(&path, &e.name)), kind, name: e.name });
        }
        let fh = self.next_fh;
        self.next_fh += 1;
        self.listings.insert(fh, entries);
        Ok(fh)
    }

    /// CREATE (MS-SMB2 2.2.13) of an existing file, to read or read and write.
    fn open(&mut self, ino: INodeNo, flags: OpenFlags) -> Result<u64, Errno> {
        let path = self.path(ino)?;
        let write = flags.acc_mode() != OpenAccMode::O_RDONLY;
        let want = if write { access::READ_WRITE } else { access::READ };
        let h = match self.with_share(async |s| s.create(&path, want, disposition::OPEN, options::NON_DIRECTORY_FILE, 0).await) {
            Ok(h) => h,
            Err(e) => return Err(self.fail("open", &path, e)),
        };
        if write && flags.0 & libc::O_TRUNC != 0 {
            self.flush_ino(ino.0, None)?;
            self.drop_windows(ino.0);
            let r = self.with_share(async |s| s.set_size(h.fid, 0).await);
            self.cache.changed(&path);
            if let Err(e) = r {
                let n = self.fail("truncate", &path, e);
                let _ = self.with_share(async |s| s.close(h.fid).await);
                return Err(n);
            }
        }
        Ok(self.add_open(ino.0, h.fid, want))
    }

    /// CREATE with FILE_CREATE when O_EXCL, FILE_OVERWRITE_IF when
    /// O_TRUNC, else FILE_OPEN_IF (MS-SMB2 2.2.13). The mode is not SMB's.
    fn create(&mut self, parent: INodeNo, name: &OsStr, flags: i32, mode: u32) -> Result<(FileAttr, u64), Errno> {
        let path = self.child(parent, name)?;
        let disp = if flags & libc::O_EXCL != 0 {
            disposition::CREATE
        } else if flags & libc::O_TRUNC != 0 {
            disposition::OVERWRITE_IF
        } else {
            disposition::OPEN_IF
        };
        let want = if flags & libc::O_ACCMODE == libc::O_RDONLY { access::READ } else { access::READ_WRITE };
        let mode = self.posix.then_some(mode);
        // A name whose file another open keeps delete-pending (deleted by
        // a client other than a mount of ours, or renamed aside without
        // success) is free once that open closes, which is often a moment
        // later: try again for about a second (MS-FSA 2.1.5.1.2: such a
        // CREATE fails with STATUS_DELETE_PENDING), then say EBUSY.
        let mut waits = DELETE_PENDING_WAITS.iter();
        let r = loop {
            let r = self.with_share(async |s| s.create_mode(&path, want, disp, options::NON_DIRECTORY_FILE, 0, mode).await);
            match (&r, waits.next()) {
                (Err(ClientError::Status(_, st)), Some(&ms)) if *st == NtStatus::DELETE_PENDING => std::thread::sleep(Duration::from_millis(ms)),
                _ => break r,
            }
        };
        self.cache.changed(&path);
        let pending = matches!(&r, Err(ClientError::Status(_, st)) if *st == NtStatus::DELETE_PENDING);
        let h = r.map_err(|e| {
            let n = self.fail("create", &path, e);
            if pending {
                Errno::EBUSY
            } else {
                n
            }
        })?;
        let a = self.entry(&path, &h.info);
        if disp != disposition::CREATE {
            self.drop_windows(a.ino.0);
        }
        Ok((a, self.add_open(a.ino.0, h.fid, want)))
    }

    /// `size` bytes at `offset`: from the read-ahead window, or for a
    /// sequential reader a new window of pipelined READs, else one READ.
    fn read(&mut self, ino: INodeNo, fh: FileHandle, offset: u64, size: u32) -> Result<Vec<u8>, Errno> {
        self.flush_ino(ino.0, None)?;
        let path = self.inodes.path(ino.0).ok().map(str::to_string);
        // The file's size bounds a window: READs past it fail, and one
        // answered short stops the pipeline.
        let eof = match &path {
            Some(p) => self.cache.attr(p).map(|i| i.size),
            None => None,
        };
        if let Some(d) = self.in_windows(fh.0, offset, size, eof) {
            self.prefetch(fh.0, eof);
            return Ok(d);
        }
        let o = self.opens.get(&fh.0).ok_or(Errno::EBADF)?;
        let (fid, sequential) = (o.fid, offset.abs_diff(o.next_read) <= SEQUENTIAL_SLACK);
        let path = path.unwrap_or_default();
        if sequential && self.window > size as usize && !path.is_empty() {
            let eof = self.stat(&path)?.size;
            let len = eof.saturating_sub(offset).min(self.window as u64);
            if len > u64::from(size) {
                let r = self.with_share(async |s| fetch(s, fid, offset, len).await);
                match r {
                    Ok(buf) => {
                        let o = self.opens.get_mut(&fh.0).ok_or(Errno::EBADF)?;
                        o.window_off = offset;
                        o.window = buf;
                        let d = o.window.get(..size as usize).unwrap_or(&o.window).to_vec();
                        o.next_read = offset + d.len() as u64;
                        return Ok(d);
                    }
                    // The file may have shrunk under us: one plain READ says.
                    Err(e) => {
                        let n = self.fail("read-ahead", &path, e);
                        if n != Errno::EIO || self.share.as_mut().is_none_or(|s| s.client().core.in_flight() > 0) {
                            return Err(n);
                        }
                        self.cache.changed(&path);
                    }
                }
            }
        }
        match self.with_share(async |s| s.read_at(fid, offset, size).await) {
            Ok(d) => {
                if let Some(o) = self.opens.get_mut(&fh.0) {
                    o.next_read = offset + d.len() as u64;
                }
                Ok(d)
            }
            Err(e) => Err(self.fail("read", &path, e)),
        }
    }

    /// `size` bytes at `offset` from handle `fh`'s read-ahead window, or
    /// from the next one when the background fetched it.
    fn in_windows(&mut self, fh: u64, offset: u64, size: u32, eof: Option<u64>) -> Option<Vec<u8>> {
        if self.opens.get(&fh)?.in_window(offset, size, eof).is_none() {
            if matches!(self.background, Some(Background { job: Job::Prefetch { fh: f, .. }, .. }) if f == fh) {
                self.join();
            }
            let o = self.opens.get_mut(&fh)?;
            match o.next_window.take() {
                Some((at, buf)) if offset >= at && offset < at + buf.len() as u64 => {
                    o.window_off = at;
                    o.window = buf;
                }
                other => o.next_window = other,
            }
        }
        let o = self.opens.get_mut(&fh)?;
        let d = o.in_window(offset, size, eof)?.to_vec();
        o.next_read = offset + d.len() as u64;
        Some(d)
    }

    /// Once a sequential reader is half way through its window, fetch the
    /// next one in the background (when nothing else runs and the end of
    /// file is known).
    fn prefetch(&mut self, fh: u64, eof: Option<u64>) {
        let (Some(eof), None) = (eof, &self.background) else { return };
        let Some(o) = self.opens.get(&fh) else { return };
        let end = o.window_off + o.window.len() as u64;
        if o.window.is_empty() || o.next_window.is_some() || end >= eof || o.next_read < o.window_off + o.window.len() as u64 / 2 {
            return;
        }
        let (fid, len) = (o.fid, (eof - end).min(self.window as u64));
        self.spawn(Job::Prefetch { fh, off: end }, move |mut s| {
            Box::pin(async move {
                let r = fetch(&mut s, fid, end, len).await;
                (s, r)
            })
        });
    }

    /// Gather `data` behind the handle's pending writes when it continues
    /// them, else send those first.
    fn write(&mut self, ino: INodeNo, fh: FileHandle, offset: u64, data: &[u8]) -> Result<u32, Errno> {
        self.take_error(fh.0)?;
        // Writes through other handles go first, so they land in order.
        self.flush_ino(ino.0, Some(fh.0))?;
        self.drop_windows(ino.0);
        let o = self.opens.get(&fh.0).ok_or(Errno::EBADF)?;
        if !o.wbuf.is_empty() && (offset != o.wbuf_off + o.wbuf.len() as u64 || o.wbuf.len() + data.len() > MAX_WRITE_BUFFER) {
            self.flush_open(fh.0)?;
        }
        let o = self.opens.get_mut(&fh.0).ok_or(Errno::EBADF)?;
        if o.wbuf.is_empty() {
            o.wbuf_off = offset;
            o.wbuf.reserve(MAX_WRITE_BUFFER.max(data.len()));
        }
        o.wbuf.extend_from_slice(data);
        if o.user_time.is_some() {
            o.user_time = Some(true);
        }
        let full = o.wbuf.len() >= MAX_WRITE_BUFFER;
        if let Ok(p) = self.inodes.path(ino.0) {
            let p = p.to_string();
            self.cache.changed(&p);
        }
        if full {
            self.send_in_background(fh.0)?;
        }
        u32::try_from(data.len()).map_err(|_| Errno::EINVAL)
    }

    /// FLUSH (MS-SMB2 2.2.17) after the pending writes.
    fn fsync(&mut self, fh: FileHandle) -> Result<(), Errno> {
        self.flush_open(fh.0)?;
        let o = self.opens.get(&fh.0).ok_or(Errno::EBADF)?;
        let (fid, ino) = (o.fid, o.ino);
        let r = self.with_share(async |s| s.flush(fid).await);
        r.map_err(|e| {
            let path = self.inodes.path(ino).unwrap_or_default().to_string();
            self.fail("flush", &path, e)
        })
    }

    /// fallocate(2) on handle `fh`. Punching a hole (always with
    /// FALLOC_FL_KEEP_SIZE) and zeroing a range are FSCTL_SET_ZERO_DATA
    /// (MS-FSCC 2.3.85), which never changes the size; zeroing without
    /// KEEP_SIZE then extends the file to the range's end as
    /// preallocation (mode 0) does, with FileEndOfFileInformation.
    /// Preallocation also asks for the space with FileAllocationInformation
    /// (MS-FSCC 2.4.4; best effort: smbd reserves it only with `strict
    /// allocate`). Collapse, insert and unshare have no SMB counterpart.
    fn fallocate(&mut self, ino: INodeNo, fh: FileHandle, offset: u64, length: u64, mode: i32) -> Result<(), Errno> {
        let keep = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        let zero = match mode & !libc::FALLOC_FL_KEEP_SIZE {
            0 => false,
            libc::FALLOC_FL_PUNCH_HOLE if keep => true,
            libc::FALLOC_FL_ZERO_RANGE => true,
            _ => return Err(Errno::EOPNOTSUPP),
        };
        let end = offset.checked_add(length).filter(|&e| i64::try_from(e).is_ok()).ok_or(Errno::EFBIG)?;
        // What any handle buffered lands first; windows read ahead and
        // cached attributes are stale after.
        self.flush_ino(ino.0, None)?;
        self.drop_windows(ino.0);
        self.take_error(fh.0)?;
        let o = self.opens.get(&fh.0).ok_or(Errno::EBADF)?;
        if o.access & access::WRITE_DATA == 0 {
            return Err(Errno::EBADF);
        }
        let fid = o.fid;
        let r = self.with_share(async |s| {
            if zero && length > 0 {
                s.zero_data(fid, offset, end).await?;
            }
            if zero && keep {
                return Ok(());
            }
            let (allocated, size) = s.sizes(fid).await?;
            if !keep && end > size {
                s.set_size(fid, end).await?;
            }
            if !zero && end > allocated && end >= size {
                if let Err(e) = s.set_allocation(fid, end).await {
                    tracing::debug!("fallocate: FileAllocationInformation: {e}");
                }
            }
            Ok(())
        });
        let path = self.inodes.path(ino.0).unwrap_or_default().to_string();
        self.cache.changed(&path);
        r.map_err(|e| self.fail("fallocate", &path, e))
    }

    /// The pending writes, then CLOSE (MS-SMB2 2.2.15).
    fn release(&mut self, fh: FileHandle) -> Result<(), Errno> {
        let flushed = self.flush_open(fh.0);
        let o = self.opens.remove(&fh.0).ok_or(Errno::EBADF)?;
        // CLOSE drops the handle's locks on the server.
        self.locks.remove(&fh.0);
        let path = self.inodes.path(o.ino).unwrap_or_default().to_string();
        self.cache.changed(&path);
        let closed = self.with_share(async |s| s.close(o.fid).await);
        flushed?;
        closed.map_err(|e| self.fail("close", &path, e))
    }

    /// chmod and chown. On a POSIX share they are the server's
    /// (SMB3 POSIX SET_INFO, and an owner SID S-1-22-1-uid); elsewhere, as
    /// cifs.ko does, a mode without write bits sets FILE_ATTRIBUTE_READONLY
    /// and one with them clears it, and owners are left alone.
    fn chmod_chown(&mut self, ino: INodeNo, mode: Option<u32>, uid: Option<u32>, gid: Option<u32>) -> Result<(), Errno> {
        let path = self.path(ino)?;
        self.flush_ino(ino.0, None)?;
        let r = if self.posix {
            let mut r = Ok(());
            if let Some(m) = mode {
                r = self.with_share(async |s| s.chmod(&path, m & 0o7777).await);
            }
            if r.is_ok() && (uid.is_some() || gid.is_some()) {
                r = self.with_share(async |s| s.chown(&path, uid, gid).await);
            }
            r
        } else if let Some(m) = mode {
            let info = self.stat(&path)?;
            let readonly = m & 0o222 == 0;
            let attrs = if readonly { info.attributes | attr::READONLY } else { info.attributes & !attr::READONLY };
            if attrs == info.attributes || info.is_dir() {
                return Ok(());
            }
            // FILE_ATTRIBUTE_NORMAL stands for "no attributes" in SET_INFO.
            let attrs = if attrs == 0 { attr::NORMAL } else { attrs };
            self.with_share(async |s| {
                let h = s.create(&path, access::READ_ATTRIBUTES | access::WRITE_ATTRIBUTES | access::SYNCHRONIZE, disposition::OPEN, 0, 0).await?;
                let set = s.set_basic(h.fid, 0, 0, 0, attrs).await;
                let closed = s.close(h.fid).await;
                set.and(closed)
            })
        } else {
            Ok(())
        };
        self.cache.changed(&path);
        r.map_err(|e| self.fail("chmod/chown", &path, e))
    }

    /// The file's EAs (its `user.` xattrs).
    fn eas(&mut self, ino: INodeNo) -> Result<Vec<smbq_wire::ea::Ea>, Errno> {
        let path = self.path(ino)?;
        match self.with_share(async |s| s.eas(&path).await) {
            Ok(eas) => Ok(eas),
            Err(e) => Err(self.fail("query EAs", &path, e)),
        }
    }

    /// setxattr (`value`) and removexattr (None) on a `user.` xattr, as an
    /// SMB EA: XATTR_CREATE of one that exists is EEXIST, XATTR_REPLACE or
    /// a removal of one that does not ENODATA. SMB has no empty EA value
    /// (an empty one deletes it): EINVAL.
    fn set_xattr(&mut self, ino: INodeNo, name: &OsStr, value: Option<&[u8]>, flags: i32) -> Result<(), Errno> {
        let Some(ea) = ea_name(name) else { return Err(Errno::EOPNOTSUPP) };
        if ea.len() > 255 || value.is_some_and(|v| v.is_empty() || v.len() > usize::from(u16::MAX)) {
            return Err(Errno::EINVAL);
        }
        // A plain set needs no look first; XATTR_CREATE, XATTR_REPLACE and
        // a removal ask whether the EA is there.
        let checked = value.is_none() || flags & (libc::XATTR_CREATE | libc::XATTR_REPLACE) != 0;
        if checked {
            let exists = self.eas(ino)?.iter().any(|e| e.name.eq_ignore_ascii_case(ea));
            match value {
                Some(_) if flags & libc::XATTR_CREATE != 0 && exists => return Err(Errno::EEXIST),
                Some(_) if flags & libc::XATTR_REPLACE != 0 && !exists => return Err(Errno::NO_XATTR),
                None if !exists => return Err(Errno::NO_XATTR),
                _ => {}
            }
        }
        let path = self.path(ino)?;
        let value = value.unwrap_or(&[]);
        match self.with_share(async |s| s.set_ea(&path, ea, value).await) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.fail("set EA", &path, e)),
        }
    }

    fn readlink(&mut self, ino: INodeNo) -> Result<Vec<u8>, Errno> {
        let path = self.path(ino)?;
        match self.with_share(async |s| s.readlink(&path).await) {
            Ok(t) => Ok(t.into_bytes()),
            Err(e) => Err(self.fail("readlink", &path, e)),
        }
    }

    /// `ln -s TARGET NAME` on a POSIX share (its symlink reparse point).
    fn symlink(&mut self, parent: INodeNo, name: &OsStr, target: &Path) -> Result<FileAttr, Errno> {
        if !self.posix {
            return Err(Errno::EPERM);
        }
        let path = self.child(parent, name)?;
        let target = target.to_str().ok_or(Errno::EINVAL)?;
        let r = self.with_share(async |s| s.symlink(target, &path).await);
        self.cache.changed(&path);
        r.map_err(|e| self.fail("symlink", &path, e))?;
        let info = self.stat(&path)?;
        Ok(self.entry(&path, &info))
    }

    fn mkdir(&mut self, parent: INodeNo, name: &OsStr, mode: u32) -> Result<FileAttr, Errno> {
        let path = self.child(parent, name)?;
        let mode = self.posix.then_some(mode);
        let r = self.with_share(async |s| s.mkdir_mode(&path, mode).await);
        self.cache.changed(&path);
        r.map_err(|e| self.fail("mkdir", &path, e))?;
        let info = self.stat(&path)?;
        Ok(self.entry(&path, &info))
    }

    /// Delete through FileDispositionInformation (MS-FSCC 2.4.11). A
    /// file still open (here or elsewhere) is first renamed to a hidden
    /// name beside it ([`Share::unlink`]), so its name is free at once as
    /// on a local file system; a directory's name goes when the last
    /// handle to it closes.
    fn remove(&mut self, parent: INodeNo, name: &OsStr, dir: bool) -> Result<(), Errno> {
        let path = self.child(parent, name)?;
        let r = if dir {
            self.with_share(async |s| s.rmdir(&path).await)
        } else {
            let hidden = join(self::parent(&path), &format!(".smbq-deleted-{:016x}", rand::random::<u64>()));
            self.with_share(async |s| s.unlink(&path, &hidden).await.map(|_| ()))
        };
        self.cache.changed(&path);
        self.cache.dirs.remove(&path);
        r.map_err(|e| self.fail(if dir { "rmdir" } else { "unlink" }, &path, e))?;
        self.inodes.unlinked(&path);
        Ok(())
    }

    /// FileRenameInformation (MS-FSCC 2.4.42.2) with ReplaceIfExists
    /// unless RENAME_NOREPLACE; RENAME_EXCHANGE has no SMB counterpart.
    fn rename(&mut self, parent: INodeNo, name: &OsStr, newparent: INodeNo, newname: &OsStr, flags: RenameFlags) -> Result<(), Errno> {
        if flags.intersects(RenameFlags::RENAME_EXCHANGE | RenameFlags::RENAME_WHITEOUT) {
            return Err(Errno::EINVAL);
        }
        let from = self.child(parent, name)?;
        let to = self.child(newparent, newname)?;
        for p in [&from, &to] {
            if let Some(&ino) = self.inodes.by_path.get(p.as_str()) {
                self.flush_ino(ino, None)?;
            }
        }
        let replace = !flags.contains(RenameFlags::RENAME_NOREPLACE);
        // The new name goes to the server as it is: `\`-separated.
        let r = self.with_share(async |s| s.rename(&from, &to.replace('/', "\\"), replace).await);
        self.cache.clear();
        r.map_err(|e| self.fail("rename", &from, e))?;
        self.inodes.renamed(&from, &to);
        Ok(())
    }

    /// `ln EXISTING NEW`: a hard link through FileLinkInformation (MS-FSCC
    /// 2.4.27), where the server makes them (Samba does); a server that
    /// does not (STATUS_NOT_SUPPORTED, smbq) is EPERM, as link(2) says of
    /// a file system without hard links. The new name gets its own inode
    /// number here; the link count comes from the server.
    fn link(&mut self, ino: INodeNo, newparent: INodeNo, newname: &OsStr) -> Result<FileAttr, Errno> {
        let from = self.path(ino)?;
        let to = self.child(newparent, newname)?;
        self.flush_ino(ino.0, None)?;
        let r = self.with_share(async |s| s.link(&from, &to.replace('/', "\\")).await);
        self.cache.changed(&from);
        self.cache.changed(&to);
        match r {
            Err(ClientError::Status(_, NtStatus::NOT_SUPPORTED)) => return Err(Errno::EPERM),
            r => r.map_err(|e| self.fail("link", &from, e))?,
        }
        let info = self.stat(&to)?;
        Ok(self.entry(&to, &info))
    }

    /// FileFsFullSizeInformation (MS-FSCC 2.5.4) as statfs(2) sees it.
    fn statfs(&mut self) -> Result<(u64, u64, u32), Errno> {
        match self.with_share(async |s| s.fs_size().await) {
            Ok(s) => {
                let unit = u32::try_from(s.bytes_per_unit).unwrap_or(4096).max(1);
                Ok((s.total_units, s.free_units, unit))
            }
            Err(e) => Err(self.fail("statfs", "", e)),
        }
    }

    /// At unmount: send what is pending, close what is open, say goodbye.
    fn shut_down(&mut self) {
        let fhs: Vec<u64> = self.opens.keys().copied().collect();
        for fh in fhs {
            if let Err(e) = self.release(FileHandle(fh)) {
                tracing::warn!("closing a file at unmount: {e:?}");
            }
        }
        self.join();
        if let Some((ep, conn)) = self.share.as_ref().and_then(|s| s.session.client.quic.as_ref()) {
            conn.close(quinn::VarInt::from_u32(0), b"unmounted");
            let _ = self.rt.block_on(async { tokio::time::timeout(Duration::from_secs(1), ep.wait_idle()).await });
        }
    }
}

/// The FUSE file type of `info`: a POSIX share's mode says it (symlinks,
/// FIFOs, devices, sockets); elsewhere a directory or a regular file.
fn kind_of(info: &FileInfo) -> FileType {
    match info.posix.as_ref().map(|p| p.mode & libc::S_IFMT) {
        Some(libc::S_IFLNK) => FileType::Symlink,
        Some(libc::S_IFIFO) => FileType::NamedPipe,
        Some(libc::S_IFCHR) => FileType::CharDevice,
        Some(libc::S_IFBLK) => FileType::BlockDevice,
        Some(libc::S_IFSOCK) => FileType::Socket,
        _ if info.is_symlink() => FileType::Symlink,
        _ if info.is_dir() => FileType::Directory,
        _ => FileType::RegularFile,
    }
}

/// A LOCK element (MS-SMB2 2.2.26.1) for `r`: a FAIL_IMMEDIATELY lock of
/// `kind`, or an unlock (None).
fn element(r: Range, kind: Option<Kind>) -> LockElement {
    let flags = match kind {
        Some(Kind::Shared) => lock_flags::SHARED | lock_flags::FAIL_IMMEDIATELY,
        Some(Kind::Exclusive) => lock_flags::EXCLUSIVE | lock_flags::FAIL_IMMEDIATELY,
        None => lock_flags::UNLOCK,
    };
    LockElement { offset: r.start, length: r.len(), flags }
}

/// fcntl's lock type: F_RDLCK, F_WRLCK, or F_UNLCK (None).
fn lock_kind(typ: i32) -> Result<Option<Kind>, Errno> {
    match typ {
        libc::F_RDLCK => Ok(Some(Kind::Shared)),
        libc::F_WRLCK => Ok(Some(Kind::Exclusive)),
        libc::F_UNLCK => Ok(None),
        _ => Err(Errno::EINVAL),
    }
}

fn lock_type(kind: Kind) -> i32 {
    match kind {
        Kind::Shared => libc::F_RDLCK,
        Kind::Exclusive => libc::F_WRLCK,
    }
}

/// Whether thread `tid`, a FUSE request's caller, has a signal pending
/// that it neither blocks nor ignores (SIGKILL included), as
/// /proc/TID/status says: its F_SETLKW ends with EINTR. fuser does not
/// pass FUSE_INTERRUPT on, so this is how a waiting lock learns of one. A
/// caller gone is interrupted too; one we cannot see (pid 0: another pid
/// namespace) never is.
fn interrupted(tid: u32) -> bool {
    if tid == 0 {
        return false;
    }
    let Ok(s) = std::fs::read_to_string(format!("/proc/{tid}/status")) else { return true };
    let field = |name: &str| s.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| u64::from_str_radix(v.trim(), 16).ok()).unwrap_or(0);
    (field("SigPnd:") | field("ShdPnd:")) & !field("SigBlk:") & !field("SigIgn:") != 0
}

/// First and longest pause between tries of a lock F_SETLKW waits for.
const LOCK_POLL_FIRST: Duration = Duration::from_millis(5);
const LOCK_POLL_MAX: Duration = Duration::from_millis(100);

/// The LOCKs of [`posix_locks`] on one handle: FAIL_IMMEDIATELY locks
/// (a blocking one would hold the connection, which every request shares).
struct OnHandle<'a> {
    inner: &'a mut Inner,
    fid: FileId,
    path: &'a str,
}

impl OnHandle<'_> {
    fn send(&mut self, r: Range, kind: Option<Kind>) -> Result<(), Refused> {
        let (fid, el) = (self.fid, element(r, kind));
        match self.inner.with_share(async |s| s.lock(fid, &[el]).await) {
            Ok(()) => Ok(()),
            Err(ClientError::Status(_, st)) if st == NtStatus::LOCK_NOT_GRANTED || st == NtStatus::FILE_LOCK_CONFLICT => Err(Refused::Conflict),
            Err(e) => Err(Refused::Failed(self.inner.fail(if kind.is_some() { "lock" } else { "unlock" }, self.path, e))),
        }
    }
}

impl posix_locks::Server for OnHandle<'_> {
    fn lock(&mut self, r: Range, kind: Kind) -> Result<(), Refused> {
        self.send(r, Some(kind))
    }

    fn unlock(&mut self, r: Range) -> Result<(), Refused> {
        self.send(r, None)
    }
}

/// What the kernel may hold stale once we hold a lock: file `ino`'s pages
/// and attributes, and the entries (`directory`, `name`) of the names in
/// its directory that extend its name (a database's `-journal`).
struct Stale {
    ino: u64,
    names: Vec<(u64, String)>,
}

impl Inner {
    /// Run `f` on handle `fh`'s lock table and the LOCKs of its handle.
    /// After a reconnect the table stays as [`Inner::recover`] left it
    /// (locked again on the new handle), for the request's retry.
    fn with_locks<T>(&mut self, fh: u64, f: impl FnOnce(&mut Table, &mut OnHandle<'_>) -> Result<T, Refused>) -> Result<T, Errno> {
        let o = self.opens.get(&fh).ok_or(Errno::EBADF)?;
        let (fid, ino) = (o.fid, o.ino);
        let path = self.inodes.path(ino).unwrap_or_default().to_string();
        let mut table = self.locks.get(&fh).cloned().unwrap_or_default();
        let r = f(&mut table, &mut OnHandle { inner: self, fid, path: &path });
        if !self.reconnected {
            if table.held.is_empty() {
                self.locks.remove(&fh);
            } else {
                self.locks.insert(fh, table);
            }
        }
        r.map_err(|e| match e {
            Refused::Conflict => Errno::EAGAIN,
            Refused::Failed(n) => n,
        })
    }

    /// F_SETLK of `kind` (None: unlock) on `r` for `owner` through handle
    /// `fh`. What we wrote goes out first (whoever locks next reads it);
    /// once we hold a lock, what we cached of others' writes goes, and the
    /// answer says what the kernel should drop.
    fn setlk(&mut self, fh: u64, owner: u64, pid: u32, r: Range, kind: Option<Kind>) -> Result<Option<Stale>, Errno> {
        let ino = self.opens.get(&fh).ok_or(Errno::EBADF)?.ino;
        self.flush_ino(ino, None)?;
        self.with_locks(fh, |t, s| t.set(s, owner, pid, r, kind))?;
        if kind.is_none() {
            return Ok(None);
        }
        self.drop_windows(ino);
        self.cache.clear();
        let mut names = Vec::new();
        if let Ok(path) = self.inodes.path(ino) {
            let dir = parent(path);
            if let Some(&d) = self.inodes.by_path.get(dir) {
                for p in self.inodes.by_path.keys().filter(|p| p.len() > path.len() && p.starts_with(path) && parent(p) == dir) {
                    names.push((d, p.rsplit('/').next().unwrap_or(p).to_string()));
                }
            }
        }
        Ok(Some(Stale { ino, names }))
    }

    /// F_GETLK: a lock that would stop `kind` on `r` for `owner`.
    fn getlk(&mut self, fh: u64, owner: u64, r: Range, kind: Kind) -> Result<Option<Conflicting>, Errno> {
        self.with_locks(fh, |t, s| t.test(s, owner, r, kind))
    }

    /// `owner` closed a descriptor of file `ino`: POSIX drops all its locks
    /// on the file, whichever handle took them (after the file's writes).
    fn unlock_owner(&mut self, ino: u64, owner: u64) -> Result<(), Errno> {
        let fhs: Vec<u64> = self.locks.iter().filter(|(fh, t)| t.held.iter().any(|h| h.owner == owner) && self.opens.get(fh).is_some_and(|o| o.ino == ino)).map(|(&fh, _)| fh).collect();
        if fhs.is_empty() {
            return Ok(());
        }
        let flushed = self.flush_ino(ino, None);
        let mut r = Ok(());
        for fh in fhs {
            r = r.and(self.with_locks(fh, |t, s| t.release_owner(s, owner)));
        }
        flushed.and(r)
    }
}

impl SmbFs {
    /// Take a lock; for F_SETLKW (`wait`) try again, with growing pauses,
    /// until it is free, fails otherwise or the caller is interrupted.
    /// Then the kernel drops what it cached of the file and of the names
    /// that extend it, and the caller gets its answer. This runs on a
    /// thread of its own: a waiting lock holds neither fuser's thread nor
    /// the connection, and the kernel's reads the invalidation may wait
    /// for are served meanwhile.
    #[allow(clippy::too_many_arguments)]
    fn take_lock(&self, fh: u64, owner: u64, pid: u32, r: Range, kind: Kind, wait: bool, caller: u32, reply: ReplyEmpty) {
        let mut pause = LOCK_POLL_FIRST;
        let stale = loop {
            match self.call(|i| i.setlk(fh, owner, pid, r, Some(kind))) {
                Ok(s) => break s,
                Err(e) if e == Errno::EAGAIN && wait => {
                    if interrupted(caller) {
                        return reply.error(Errno::EINTR);
                    }
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(LOCK_POLL_MAX);
                }
                Err(e) => return reply.error(e),
            }
        };
        if let (Some(s), Some(n)) = (stale, self.notifier.get()) {
            // An error here means the kernel had nothing of it cached.
            let _ = n.inval_inode(INodeNo(s.ino), 0, 0);
            for (dir, name) in s.names {
                let _ = n.inval_entry(INodeNo(dir), OsStr::new(&name));
            }
        }
        reply.ok();
    }
}

/// Extended attributes in the `user.` namespace are SMB EAs of the name
/// without it (`user.origin` is EA `origin`), as cifs.ko maps them; other
/// namespaces have none here.
const XATTR_PREFIX: &str = "user.";

/// The EA name of xattr `name`, if it is one of ours.
fn ea_name(name: &OsStr) -> Option<&str> {
    name.to_str()?.strip_prefix(XATTR_PREFIX).filter(|n| !n.is_empty())
}

/// getxattr/listxattr's answer: the size when asked for it (`size` 0),
/// ERANGE when the caller's buffer is too small, else the bytes.
fn xattr_reply(reply: fuser::ReplyXattr, size: u32, value: &[u8]) {
    if size == 0 {
        reply.size(value.len() as u32);
    } else if value.len() > size as usize {
        reply.error(Errno::ERANGE);
    } else {
        reply.data(value);
    }
}

/// Each request answers with what its `Inner` method returned.
impl Filesystem for SmbFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_write(KERNEL_IO);
        let _ = config.set_max_readahead(KERNEL_IO);
        // fcntl locks come to us (setlk, getlk) instead of staying in this kernel.
        if let Err(missing) = config.add_capabilities(fuser::InitFlags::FUSE_POSIX_LOCKS) {
            tracing::warn!("the kernel lacks {missing:?}: fcntl locks stay local to this mount");
        }
        Ok(())
    }

    fn destroy(&mut self) {
        self.lock().shut_down();
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.call(|i| i.lookup(parent, name)) {
            Ok(a) => reply.entry(&self.ttl, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.lock().inodes.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.call(|i| i.getattr(ino)) {
            Ok(a) => reply.attr(&self.ttl, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let chmod_chown = |i: &mut Inner| if mode.is_some() || uid.is_some() || gid.is_some() { i.chmod_chown(ino, mode, uid, gid) } else { Ok(()) };
        match self.call(|i| chmod_chown(i).and_then(|()| i.setattr(ino, size, atime, mtime, fh))) {
            Ok(a) => reply.attr(&self.ttl, &a),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.call(|i| i.readlink(ino)) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(e),
        }
    }

    fn symlink(&self, _req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        match self.call(|i| i.symlink(parent, link_name, target)) {
            Ok(a) => reply.entry(&self.ttl, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        match self.call(|i| i.mkdir(parent, name, mode & !umask)) {
            Ok(a) => reply.entry(&self.ttl, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.call(|i| i.remove(parent, name, false)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.call(|i| i.remove(parent, name, true)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rename(&self, _req: &Request, parent: INodeNo, name: &OsStr, newparent: INodeNo, newname: &OsStr, flags: RenameFlags, reply: ReplyEmpty) {
        match self.call(|i| i.rename(parent, name, newparent, newname, flags)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn link(&self, _req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        match self.call(|i| i.link(ino, newparent, newname)) {
            Ok(a) => reply.entry(&self.ttl, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self.call(|i| i.open(ino, flags)) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn read(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, size: u32, _flags: OpenFlags, _lock_owner: Option<LockOwner>, reply: ReplyData) {
        match self.call(|i| i.read(ino, fh, offset, size)) {
            Ok(d) => reply.data(&d),
            Err(e) => reply.error(e),
        }
    }

    fn write(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, data: &[u8], _write_flags: WriteFlags, _flags: OpenFlags, _lock_owner: Option<LockOwner>, reply: ReplyWrite) {
        match self.call(|i| i.write(ino, fh, offset, data)) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    /// close(2) of a descriptor: its writes, and (POSIX) the closing
    /// process's locks on the file, through any handle, go.
    fn flush(&self, _req: &Request, ino: INodeNo, fh: FileHandle, lock_owner: LockOwner, reply: ReplyEmpty) {
        match self.call(|i| i.flush_open(fh.0).and(i.unlock_owner(ino.0, lock_owner.0))) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn release(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, _lock_owner: Option<LockOwner>, _flush: bool, reply: ReplyEmpty) {
        match self.call(|i| i.release(fh)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    /// F_GETLK (see [`posix_locks`]): a lock another client holds shows
    /// as a write lock of pid 0 over the range asked.
    fn getlk(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, lock_owner: LockOwner, start: u64, end: u64, typ: i32, _pid: u32, reply: ReplyLock) {
        let (Some(r), Ok(Some(kind))) = (Range::from_fuse(start, end), lock_kind(typ)) else {
            return reply.error(Errno::EINVAL);
        };
        match self.call(|i| i.getlk(fh.0, lock_owner.0, r, kind)) {
            Ok(None) => reply.locked(start, end, libc::F_UNLCK, 0),
            Ok(Some(c)) => reply.locked(c.range.start, c.range.fuse_end(), lock_type(c.kind), c.pid),
            Err(e) => reply.error(e),
        }
    }

    /// F_SETLK and F_SETLKW as SMB2 LOCKs (see [`posix_locks`]); a lock
    /// is taken on a thread of its own ([`SmbFs::take_lock`]), an unlock here.
    fn setlk(&self, req: &Request, _ino: INodeNo, fh: FileHandle, lock_owner: LockOwner, start: u64, end: u64, typ: i32, pid: u32, sleep: bool, reply: ReplyEmpty) {
        let (Some(r), Ok(kind)) = (Range::from_fuse(start, end), lock_kind(typ)) else {
            return reply.error(Errno::EINVAL);
        };
        let Some(kind) = kind else {
            return match self.call(|i| i.setlk(fh.0, lock_owner.0, pid, r, None)) {
                Ok(_) => reply.ok(),
                Err(e) => reply.error(e),
            };
        };
        let (fs, caller) = (self.clone(), req.pid());
        let job = move || fs.take_lock(fh.0, lock_owner.0, pid, r, kind, sleep, caller, reply);
        // On failure the reply, dropped unsent, answers EIO.
        if let Err(e) = std::thread::Builder::new().name("smbq-lock".into()).spawn(job) {
            tracing::error!("starting a thread for a lock: {e}");
        }
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        match self.call(|i| i.fsync(fh)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, length: u64, mode: i32, reply: ReplyEmpty) {
        match self.call(|i| i.fallocate(ino, fh, offset, length, mode)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.call(|i| i.opendir(ino)) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let g = self.lock();
        let Some(entries) = g.listings.get(&fh.0) else {
            return reply.error(Errno::EBADF);
        };
        for (i, e) in entries.iter().enumerate().skip(usize::try_from(offset).unwrap_or(usize::MAX)) {
            if reply.add(INodeNo(e.ino), i as u64 + 1, e.kind, &e.name) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        self.lock().listings.remove(&fh.0);
        reply.ok();
    }

    /// The server checks access when a file is opened; ENOSYS tells the
    /// kernel to stop asking (access(2) then succeeds).
    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }

    /// No extended attributes: ENOSYS tells the kernel not to ask again.
    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: fuser::ReplyXattr) {
        let value = self.call(|i| {
            let Some(want) = ea_name(name) else { return Err(Errno::NO_XATTR) };
            let eas = i.eas(ino)?;
            eas.into_iter().find(|e| e.name.eq_ignore_ascii_case(want)).map(|e| e.value).ok_or(Errno::NO_XATTR)
        });
        match value {
            Ok(v) => xattr_reply(reply, size, &v),
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: fuser::ReplyXattr) {
        match self.call(|i| i.eas(ino)) {
            Ok(eas) => {
                let list: Vec<u8> = eas.iter().flat_map(|e| [XATTR_PREFIX.as_bytes(), e.name.as_bytes(), &[0]].concat()).collect();
                xattr_reply(reply, size, &list);
            }
            Err(e) => reply.error(e),
        }
    }

    fn setxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, value: &[u8], flags: i32, _position: u32, reply: ReplyEmpty) {
        match self.call(|i| i.set_xattr(ino, name, Some(value), flags)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.call(|i| i.set_xattr(ino, name, None, 0)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    /// No ioctls (isatty(3) asks TCGETS of every file it is given).
    fn ioctl(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _flags: fuser::IoctlFlags, _cmd: u32, _in_data: &[u8], _out_size: u32, reply: fuser::ReplyIoctl) {
        reply.error(Errno::from_i32(libc::ENOTTY));
    }

    fn fsyncdir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.call(|i| i.statfs()) {
            Ok((blocks, free, unit)) => reply.statfs(blocks, free, free, 0, 0, unit, 255, unit),
            Err(e) => reply.error(e),
        }
    }

    fn create(&self, _req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, flags: i32, reply: ReplyCreate) {
        match self.call(|i| i.create(parent, name, flags, mode & !umask)) {
            Ok((a, fh)) => reply.created(&self.ttl, &a, Generation(0), FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inodes_follow_renames_and_deletions() {
        let mut i = Inodes::new();
        let d = i.lookup("d");
        let f = i.lookup("d/f");
        let g = i.lookup("d/e/g");
        assert_eq!(i.lookup("d"), d, "a path keeps its number");
        i.renamed("d", "x");
        assert_eq!((i.path(d), i.path(f), i.path(g)), (Ok("x"), Ok("x/f"), Ok("x/e/g")));
        assert!(!i.by_path.contains_key("d/f"));
        // Renaming over an existing name leaves the old one nameless.
        let y = i.lookup("y");
        i.renamed("x/f", "y");
        assert_eq!(i.path(f), Ok("y"));
        assert_eq!(i.path(y), Err(Errno::ENOENT));
        i.unlinked("y");
        assert_eq!(i.path(f), Err(Errno::ENOENT));
        // Forgetting all lookups drops the number; the root stays.
        i.forget(g, 1);
        assert!(!i.nodes.contains_key(&g));
        i.forget(INodeNo::ROOT.0, 5);
        assert_eq!(i.path(INodeNo::ROOT.0), Ok(""));
        assert!(i.lookup("new") > g, "numbers are not reused");
    }

    #[test]
    fn window_serves_inside_and_up_to_the_end_of_file() {
        let o = Open { ino: 2, fid: FileId::default(), access: 0, wbuf_off: 0, wbuf: Vec::new(), window_off: 100, window: (0..50).collect(), next_read: 0, next_window: None, error: None, user_time: None };
        assert_eq!(o.in_window(110, 5, None), Some(&[10u8, 11, 12, 13, 14][..]));
        assert_eq!(o.in_window(99, 5, None), None);
        assert_eq!(o.in_window(140, 20, None), None, "past the window, end of file unknown");
        assert_eq!(o.in_window(140, 20, Some(150)).map(<[u8]>::len), Some(10));
        assert_eq!(o.in_window(150, 20, Some(150)).map(<[u8]>::len), Some(0));
        assert_eq!(o.in_window(140, 20, Some(200)), None);
    }

    #[test]
    fn statuses_map_to_errnos() {
        let st = |s| errno(&ClientError::Status(smbq_wire::Command::CREATE, s));
        assert_eq!(st(NtStatus::OBJECT_NAME_NOT_FOUND), Errno::ENOENT);
        assert_eq!(st(NtStatus::OBJECT_PATH_NOT_FOUND), Errno::ENOENT);
        assert_eq!(st(NtStatus::OBJECT_NAME_COLLISION), Errno::EEXIST);
        assert_eq!(st(NtStatus::DIRECTORY_NOT_EMPTY), Errno::ENOTEMPTY);
        assert_eq!(st(NtStatus::SHARING_VIOLATION), Errno::EBUSY);
        assert_eq!(st(NtStatus::DISK_FULL), Errno::ENOSPC);
        assert_eq!(st(NtStatus::INVALID_PARAMETER), Errno::EIO);
        assert_eq!(errno(&ClientError::Protocol("x".into())), Errno::EIO);
        assert_eq!(component(OsStr::new("a\\b")), Err(Errno::EINVAL));
        assert_eq!((join("", "a"), join("a", "b"), parent("a/b/c"), parent("a")), ("a".into(), "a/b".into(), "a/b", ""));
    }
}
