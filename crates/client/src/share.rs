//! What a user does with the files of a share: open, list, stat, make and
//! remove directories, delete, rename, truncate, and move whole files with
//! pipelined READs and WRITEs (MS-SMB2 3.2.4.3 to 3.2.4.14, with the
//! information classes of MS-FSCC 2.4 and 2.5); with the SMB3 POSIX
//! extensions, modes, owners and symlinks too (as Samba's client uses
//! them: `source3/libsmb/cli_smb2_fnum.c`, `clifile.c`, `clisymlink.c`).

use crate::connect::{connect, ConnectOptions, Session, Transport};
use crate::core::check;
use crate::url::{to_smb_path, SmbUrl};
use crate::{Client, ClientError};
use bytes::Bytes;
use smbq_wire::create::{ctx_name, disposition, options, CreateResponse};
use smbq_wire::fscc::{attr, class, fs_class};
use smbq_wire::ioctl::fsctl;
use smbq_wire::posix::{self, CcInfo, PosixInfo};
use smbq_wire::security::{ace_type, control, secinfo, Ace, Acl, SecurityDescriptor, Sid};
use smbq_wire::header::HEADER_LEN;
use smbq_wire::query_info::info_type;
use smbq_wire::reader::{at, utf16le};
use smbq_wire::{Command, FileId, NtStatus, Put, Reader};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Access masks (MS-SMB2 2.2.13.1.1).
pub mod access {
    pub const READ_DATA: u32 = 0x0000_0001;
    pub const WRITE_DATA: u32 = 0x0000_0002;
    pub const APPEND_DATA: u32 = 0x0000_0004;
    pub const READ_EA: u32 = 0x0000_0008;
    pub const WRITE_EA: u32 = 0x0000_0010;
    pub const READ_ATTRIBUTES: u32 = 0x0000_0080;
    pub const WRITE_ATTRIBUTES: u32 = 0x0000_0100;
    pub const DELETE: u32 = 0x0001_0000;
    pub const READ_CONTROL: u32 = 0x0002_0000;
    pub const WRITE_DAC: u32 = 0x0004_0000;
    pub const WRITE_OWNER: u32 = 0x0008_0000;
    pub const SYNCHRONIZE: u32 = 0x0010_0000;
    /// What reading a file or listing a directory needs.
    pub const READ: u32 = READ_DATA | READ_EA | READ_ATTRIBUTES | READ_CONTROL | SYNCHRONIZE;
    /// Reading and writing.
    pub const READ_WRITE: u32 = READ | WRITE_DATA | APPEND_DATA | WRITE_EA | WRITE_ATTRIBUTES;
}

/// One file's metadata, from CREATE, FileAllInformation or a directory entry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileInfo {
    pub name: String,
    pub size: u64,
    pub allocation: u64,
    pub attributes: u32,
    /// FILETIMEs: 100 ns since 1601.
    pub created: u64,
    pub accessed: u64,
    pub written: u64,
    pub changed: u64,
    /// The server's file id (inode number on smbq and Samba), 0 if unknown.
    pub file_id: u64,
    pub links: u32,
    /// Mode, owner and group, from a POSIX share.
    pub posix: Option<Posix>,
}

/// What the SMB3 POSIX extensions tell of a file (`smb3_posix_cc_info`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Posix {
    /// `st_mode`: the file type (`S_IFDIR`, `S_IFLNK`, ...) and the permission bits.
    pub mode: u32,
    /// The uid of an owner S-1-22-1-uid (none for another SID).
    pub uid: Option<u32>,
    /// The gid of a group S-1-22-2-gid (none for another SID).
    pub gid: Option<u32>,
    pub owner: Sid,
    pub group: Sid,
    /// The reparse tag (IO_REPARSE_TAG_SYMLINK for a symlink), 0 if none.
    pub reparse_tag: u32,
}

/// `S_IFMT` and `S_IFLNK`.
const S_IFMT: u32 = 0o170000;
const S_IFLNK: u32 = 0o120000;

impl Posix {
    pub fn from_cc(cc: &CcInfo) -> Posix {
        Posix {
            mode: posix::mode_from_wire(cc.mode),
            uid: posix::unix_id_from_sid(&cc.owner, false),
            gid: posix::unix_id_from_sid(&cc.group, true),
            owner: cc.owner.clone(),
            group: cc.group.clone(),
            reparse_tag: cc.reparse_tag,
        }
    }

    pub fn is_symlink(&self) -> bool {
        self.mode & S_IFMT == S_IFLNK || self.reparse_tag == posix::REPARSE_TAG_SYMLINK
    }
}

impl FileInfo {
    pub fn is_dir(&self) -> bool {
        self.attributes & attr::DIRECTORY != 0
    }

    /// A symlink, as a POSIX share lists one.
    pub fn is_symlink(&self) -> bool {
        self.posix.as_ref().is_some_and(Posix::is_symlink)
    }

    /// FILE_POSIX_INFORMATION (QUERY_INFO or a directory entry of class 100).
    pub fn from_posix(name: String, p: &PosixInfo) -> FileInfo {
        FileInfo {
            name,
            size: p.end_of_file,
            allocation: p.allocation_size,
            attributes: p.attributes,
            created: p.creation_time,
            accessed: p.last_access_time,
            written: p.last_write_time,
            changed: p.change_time,
            file_id: p.inode,
            links: p.cc.nlinks,
            posix: Some(Posix::from_cc(&p.cc)),
        }
    }

    fn from_create(r: &CreateResponse) -> FileInfo {
        FileInfo {
            size: r.end_of_file,
            allocation: r.allocation_size,
            attributes: r.file_attributes,
            created: r.creation_time,
            accessed: r.last_access_time,
            written: r.last_write_time,
            changed: r.change_time,
            links: 1,
            ..FileInfo::default()
        }
    }
}

/// A FILETIME as a `SystemTime` (times before 1970 become 1970).
pub fn system_time(filetime: u64) -> SystemTime {
    let since_1601 = Duration::from_nanos(filetime.saturating_mul(100));
    UNIX_EPOCH + since_1601.saturating_sub(Duration::from_secs(11_644_473_600))
}

/// A `SystemTime` as a FILETIME.
pub fn filetime(t: SystemTime) -> u64 {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    (d.as_secs() + 11_644_473_600) * 10_000_000 + u64::from(d.subsec_nanos() / 100)
}

/// An open file or directory.
#[derive(Clone, Debug)]
pub struct Handle {
    pub fid: FileId,
    pub info: FileInfo,
}

/// A file system's size (FileFsFullSizeInformation, MS-FSCC 2.5.4).
#[derive(Clone, Copy, Debug, Default)]
pub struct FsSize {
    pub total_units: u64,
    pub free_units: u64,
    pub bytes_per_unit: u64,
}

/// What reclaims a durable open after a lost connection (MS-SMB2 3.2.4.3.5, 2.2.13.2.12).
#[derive(Clone, Copy, Debug)]
pub struct Durable {
    pub fid: FileId,
    pub create_guid: [u8; 16],
}

/// A logged-on connection with one share connected.
pub struct Share {
    pub session: Session,
    pub url: SmbUrl,
    /// How it connected (a reconnect connects the same way, with the same ClientGuid).
    pub options: ConnectOptions,
    /// READ and WRITE size and how many may be outstanding at once.
    pub chunk: u32,
    pub depth: usize,
    /// [`ConnectOptions::posix`] asked for the SMB3 POSIX extensions and
    /// the server agreed for this share: every CREATE carries the POSIX
    /// create context, names match in their exact case, `list` and `stat`
    /// fill [`FileInfo::posix`].
    pub posix: bool,
}

/// SMB2_OPLOCK_LEVEL_BATCH (MS-SMB2 2.2.13).
const OPLOCK_BATCH: u8 = 0x09;

/// The most entries one listing may have (a server that never says
/// STATUS_NO_MORE_FILES does not grow memory for ever).
const MAX_ENTRIES: usize = 10_000_000;

/// Largest QUERY_DIRECTORY and QUERY_INFO answer asked for.
const LIST_BUFFER: u32 = 64 * 1024;

impl Share {
    /// Connect to `url`'s host and share.
    pub async fn connect(url: &SmbUrl, o: &ConnectOptions) -> Result<Share, ClientError> {
        if url.share.is_empty() {
            return Err(ClientError::Usage(format!("{url} names no share")));
        }
        // Its reconnects resume the TLS session in 0-RTT (crate::resume).
        let mut o = o.clone();
        o.resumption.get_or_insert_with(Default::default);
        let mut session = connect(&url.host, url.port, &o, None).await?;
        session.client.tree_connect(&url.unc()).await?;
        let mut s = Share { session, url: url.clone(), options: o, chunk: 0, depth: 16, posix: false };
        s.set_request_size(1 << 20);
        s.posix = s.detect_posix().await?;
        Ok(s)
    }

    /// Whether the server agreed to the POSIX extensions for this share:
    /// it answered the negotiate context, and a POSIX open of the share's
    /// root comes back with the POSIX create context (a server with one
    /// POSIX share answers the negotiate context for all of them). A root
    /// that cannot be opened (IPC$) counts as no.
    async fn detect_posix(&mut self) -> Result<bool, ClientError> {
        if !(self.options.posix && self.client().core.posix) {
            return Ok(false);
        }
        let body = create_body("", access::READ_ATTRIBUTES | access::SYNCHRONIZE, disposition::OPEN, 0, 0, 0, &[], Some(0));
        let h = match self.create_with("", body).await {
            Ok((h, _)) => h,
            Err(ClientError::Status(..)) => return Ok(false),
            Err(e) => return Err(e),
        };
        self.close(h.fid).await?;
        Ok(h.info.posix.is_some())
    }

    /// The mode a CREATE's POSIX create context carries, on a POSIX share:
    /// 0 to open, else `mode` (by default 0o755 for a directory, 0o644 for
    /// a file) for what it may create.
    fn posix_mode(&self, disp: u32, create_options: u32, mode: Option<u32>) -> Option<u32> {
        let default = if create_options & options::DIRECTORY_FILE != 0 { 0o755 } else { 0o644 };
        self.posix.then(|| if disp == disposition::OPEN { 0 } else { mode.unwrap_or(default) & posix::PERMISSION_BITS })
    }

    /// An error unless this share speaks the POSIX extensions.
    pub fn need_posix(&self) -> Result<(), ClientError> {
        if self.posix {
            return Ok(());
        }
        let unc = self.url.unc();
        Err(ClientError::Unsupported(if self.options.posix {
            format!("the server does not offer the SMB3 POSIX extensions on {unc}")
        } else {
            format!("the connection to {unc} did not ask for the SMB3 POSIX extensions")
        }))
    }

    /// READ and WRITE requests of `bytes`, or the server's maximum if less.
    pub fn set_request_size(&mut self, bytes: u32) {
        let core = &self.session.client.core;
        self.chunk = bytes.min(core.max_read).min(core.max_write);
    }

    /// Connect again after a lost connection: a new connection over the
    /// same transport with the same ClientGuid, logon and tree connect.
    pub async fn reconnect(&mut self) -> Result<(), ClientError> {
        let mut o = self.options.clone();
        o.transport = self.session.transport;
        let guid = self.session.client.core.client_guid;
        let mut session = connect(&self.url.host, self.url.port, &o, Some(guid)).await?;
        session.client.tree_connect(&self.url.unc()).await?;
        self.session = session;
        self.posix = self.detect_posix().await?;
        Ok(())
    }

    /// CREATE asking for a durable handle (DH2Q with a batch oplock, which
    /// servers require before they grant one: MS-SMB2 3.3.5.9.10); the
    /// handle comes with what reclaims it when the server granted it.
    pub async fn create_durable(&mut self, path: &str, desired_access: u32, disp: u32, create_options: u32) -> Result<(Handle, Option<Durable>), ClientError> {
        let create_guid: [u8; 16] = rand::random();
        let mut dh2q = [0u8; 32];
        dh2q[16..].copy_from_slice(&create_guid);
        let body = create_body(path, desired_access, disp, create_options, 0, OPLOCK_BATCH, &[(ctx_name::DURABLE_REQUEST_V2, &dh2q)], self.posix_mode(disp, create_options, None));
        let (h, granted) = self.create_with(path, body).await?;
        let durable = granted.contains(&ctx_name::DURABLE_REQUEST_V2.to_vec()).then_some(Durable { fid: h.fid, create_guid });
        Ok((h, durable))
    }

    /// Reclaim a durable open on this (new) connection (DH2C, MS-SMB2 3.2.4.3.5).
    pub async fn reclaim(&mut self, path: &str, d: Durable) -> Result<Handle, ClientError> {
        let mut dh2c = Vec::with_capacity(36);
        d.fid.encode(&mut dh2c);
        dh2c.extend_from_slice(&d.create_guid);
        dh2c.u32(0);
        let body = create_body(path, 0, disposition::OPEN, 0, 0, OPLOCK_BATCH, &[(ctx_name::DURABLE_RECONNECT_V2, &dh2c)], self.posix_mode(disposition::OPEN, 0, None));
        self.create_with(path, body).await.map(|(h, _)| h)
    }

    pub fn client(&mut self) -> &mut Client {
        &mut self.session.client
    }

    pub fn transport(&self) -> Transport {
        self.session.transport
    }

    /// CREATE (MS-SMB2 3.2.4.3) with the access, disposition and options given.
    pub async fn create(&mut self, path: &str, desired_access: u32, disp: u32, create_options: u32, file_attributes: u32) -> Result<Handle, ClientError> {
        self.create_mode(path, desired_access, disp, create_options, file_attributes, None).await
    }

    /// [`Share::create`] giving what it creates on a POSIX share the
    /// permission bits `mode` (none: 0o755 for a directory, 0o644 for a file).
    pub async fn create_mode(&mut self, path: &str, desired_access: u32, disp: u32, create_options: u32, file_attributes: u32, mode: Option<u32>) -> Result<Handle, ClientError> {
        let body = create_body(path, desired_access, disp, create_options, file_attributes, 0, &[], self.posix_mode(disp, create_options, mode));
        self.create_with(path, body).await.map(|(h, _)| h)
    }

    /// Send a CREATE body; returns the handle and the names of the create
    /// contexts the server answered.
    async fn create_with(&mut self, path: &str, body: Vec<u8>) -> Result<(Handle, Vec<Vec<u8>>), ClientError> {
        let (_, r) = self.client().call(Command::CREATE, 1, &body).await?;
        created(path, &r)
    }

    /// Open an existing file or directory to read it.
    pub async fn open_read(&mut self, path: &str) -> Result<Handle, ClientError> {
        self.create(path, access::READ, disposition::OPEN, 0, 0).await
    }

    pub async fn close(&mut self, fid: FileId) -> Result<(), ClientError> {
        self.client().close(fid).await
    }

    /// Metadata of `path` in one round trip: CREATE, QUERY_INFO
    /// (FileAllInformation) and CLOSE as a compound (MS-SMB2 3.2.4.1.4).
    /// On a POSIX share the class asked is FILE_POSIX_INFORMATION, and a
    /// symlink is the link itself.
    pub async fn stat(&mut self, path: &str) -> Result<FileInfo, ClientError> {
        let create = create_body(path, access::READ_ATTRIBUTES | access::SYNCHRONIZE, disposition::OPEN, 0, 0, 0, &[], self.posix_mode(disposition::OPEN, 0, None));
        let class = if self.posix { posix::INFO_CLASS } else { class::ALL };
        let mut query = Vec::new();
        smbq_wire::query_info::QueryInfoRequest { info_type: info_type::FILE, class, output_buffer_length: 4096, file_id: FileId::RELATED, ..Default::default() }.encode(&mut query);
        let mut close = Vec::new();
        smbq_wire::close::CloseRequest { flags: 0, file_id: FileId::RELATED }.encode(&mut close);
        let c = self.client();
        if !c.core.may_send(3)? {
            return Err(ClientError::Protocol("not enough credits for a compound of 3 with nothing in flight".into()));
        }
        let m = c.core.compound(&[(Command::CREATE, create), (Command::QUERY_INFO, query), (Command::CLOSE, close)]);
        c.send(m).await?;
        let created = c.recv().await;
        let queried = c.recv().await;
        let closed = c.recv().await;
        let created = created?;
        check(&created, Command::CREATE)?;
        let (Handle { mut info, .. }, _) = self::created(path, &created)?;
        let queried = queried?;
        check(&queried, Command::QUERY_INFO)?;
        let all = info_buffer(&queried)?;
        if self.posix {
            let p = PosixInfo::decode(&mut Reader::new(all)).map_err(|e| ClientError::Protocol(format!("FILE_POSIX_INFORMATION: {e}")))?;
            check(&closed?, Command::CLOSE)?;
            return Ok(FileInfo::from_posix(info.name, &p));
        }
        // FileAllInformation: Basic (40), Standard (24: links at 16), Internal (8) ...
        let mut r = Reader::new(all);
        let bad = |_| ClientError::Protocol("short FileAllInformation".into());
        r.skip(40 + 16).map_err(bad)?;
        info.links = r.u32().map_err(bad)?;
        r.skip(4).map_err(bad)?;
        info.file_id = r.u64().map_err(bad)?;
        check(&closed?, Command::CLOSE)?;
        Ok(info)
    }

    /// The entries of directory `dir` matching `pattern` (`*` for all;
    /// MS-FSCC 2.1.4.4 wildcards, matched by the server), without `.` and `..`.
    pub async fn list(&mut self, dir: &str, pattern: &str) -> Result<Vec<FileInfo>, ClientError> {
        let h = self.create(dir, access::READ, disposition::OPEN, options::DIRECTORY_FILE, 0).await?;
        let listed = self.list_open(h.fid, pattern).await;
        let closed = self.close(h.fid).await;
        let out = listed?;
        closed?;
        Ok(out)
    }

    /// QUERY_DIRECTORY (MS-SMB2 3.2.4.17) with FileIdBothDirectoryInformation
    /// (on a POSIX share, FILE_POSIX_INFORMATION) until STATUS_NO_MORE_FILES.
    pub async fn list_open(&mut self, fid: FileId, pattern: &str) -> Result<Vec<FileInfo>, ClientError> {
        let mut out = Vec::new();
        let mut first = true;
        loop {
            let req = smbq_wire::query_directory::QueryDirectoryRequest {
                class: if self.posix { posix::INFO_CLASS } else { class::ID_BOTH_DIRECTORY },
                flags: if first { smbq_wire::query_directory::flags::RESTART_SCANS } else { 0 },
                file_index: 0,
                file_id: fid,
                pattern: pattern.to_string(),
                output_buffer_length: LIST_BUFFER,
            };
            first = false;
            let mut b = Vec::new();
            req.encode(&mut b);
            match self.client().call(Command::QUERY_DIRECTORY, 1, &b).await {
                Ok((_, r)) => {
                    let buf = smbq_wire::query_directory::decode_response(&r).map_err(|e| ClientError::Protocol(format!("QUERY_DIRECTORY response: {e}")))?;
                    if buf.is_empty() {
                        break;
                    }
                    if self.posix {
                        decode_posix_entries(buf, &mut out)?;
                    } else {
                        decode_id_both_entries(buf, &mut out)?;
                    }
                    if out.len() > MAX_ENTRIES {
                        return Err(ClientError::Protocol(format!("the server listed more than {MAX_ENTRIES} entries in one directory")));
                    }
                }
                Err(ClientError::Status(_, st)) if st == NtStatus::NO_MORE_FILES || (st == NtStatus::NO_SUCH_FILE && out.is_empty()) => break,
                Err(e) => return Err(e),
            }
        }
        out.retain(|e| e.name != "." && e.name != "..");
        Ok(out)
    }

    pub async fn mkdir(&mut self, path: &str) -> Result<(), ClientError> {
        self.mkdir_mode(path, None).await
    }

    /// Make a directory with the permission bits `mode` on a POSIX share (none: 0o755).
    pub async fn mkdir_mode(&mut self, path: &str, mode: Option<u32>) -> Result<(), ClientError> {
        let h = self.create_mode(path, access::READ, disposition::CREATE, options::DIRECTORY_FILE, 0, mode).await?;
        self.close(h.fid).await
    }

    /// Remove an empty directory (FileDispositionInformation, so a
    /// directory that is not empty gets STATUS_DIRECTORY_NOT_EMPTY).
    pub async fn rmdir(&mut self, path: &str) -> Result<(), ClientError> {
        self.delete(path, options::DIRECTORY_FILE).await
    }

    /// Delete a file (not a directory).
    pub async fn remove(&mut self, path: &str) -> Result<(), ClientError> {
        self.delete(path, options::NON_DIRECTORY_FILE).await
    }

    async fn delete(&mut self, path: &str, kind: u32) -> Result<(), ClientError> {
        self.on_open(path, access::DELETE | access::READ_ATTRIBUTES, kind, async |s, fid| s.set_info(fid, class::DISPOSITION, &[1]).await).await
    }

    /// Open `path` (an existing file or directory), run `f` on the handle
    /// and close it; `f`'s error comes first, then the close's.
    async fn on_open<T>(&mut self, path: &str, desired_access: u32, create_options: u32, f: impl AsyncFnOnce(&mut Share, FileId) -> Result<T, ClientError>) -> Result<T, ClientError> {
        let h = self.create(path, desired_access, disposition::OPEN, create_options, 0).await?;
        let done = f(self, h.fid).await;
        let closed = self.close(h.fid).await;
        let v = done?;
        closed?;
        Ok(v)
    }

    /// Rename `from` to `to` (both paths in the share), replacing an existing `to` when asked.
    pub async fn rename(&mut self, from: &str, to: &str, replace: bool) -> Result<(), ClientError> {
        let b = rename_info(to, replace);
        self.on_open(from, access::DELETE | access::READ_ATTRIBUTES | access::SYNCHRONIZE, 0, async |s, fid| s.set_info(fid, class::RENAME, &b).await).await
    }

    /// Make `to` a hard link to `from` (SET_INFO FileLinkInformation,
    /// MS-FSCC 2.4.27; `to` `\`-separated, never replacing).
    pub async fn link(&mut self, from: &str, to: &str) -> Result<(), ClientError> {
        let b = rename_info(to, false);
        self.on_open(from, access::READ_ATTRIBUTES | access::SYNCHRONIZE, 0, async |s, fid| s.set_info(fid, class::LINK, &b).await).await
    }

    /// Delete file `path` so that its name is free at once, as unlink(2)
    /// frees it. A file no one else has open (an open that shares nothing
    /// succeeds) is deleted where it is. One that others hold open would
    /// keep its name, delete-pending, until the last of them closes it
    /// (MS-FSA 2.1.5.4), and a CREATE of that name would fail with
    /// STATUS_DELETE_PENDING: it is first renamed to `hidden` (a share
    /// path, `/`-separated), as an NFS client renames such a file to
    /// `.nfsXXXX`. Returns whether it was renamed (a rename the server
    /// refuses leaves it delete-pending under its name).
    pub async fn unlink(&mut self, path: &str, hidden: &str) -> Result<bool, ClientError> {
        let wants = access::DELETE | access::READ_ATTRIBUTES | access::SYNCHRONIZE;
        let kind = options::NON_DIRECTORY_FILE;
        let body = create_body_sharing(path, wants, 0, disposition::OPEN, kind, 0, 0, &[], self.posix_mode(disposition::OPEN, kind, None));
        let (fid, shared) = match self.create_with(path, body).await {
            Ok((h, _)) => (h.fid, false),
            Err(ClientError::Status(_, st)) if st == NtStatus::SHARING_VIOLATION => (self.create(path, wants, disposition::OPEN, kind, 0).await?.fid, true),
            Err(e) => return Err(e),
        };
        let renamed = shared && self.set_info(fid, class::RENAME, &rename_info(&hidden.replace('/', "\\"), false)).await.is_ok();
        let deleted = self.set_info(fid, class::DISPOSITION, &[1]).await;
        let closed = self.close(fid).await;
        deleted?;
        closed?;
        Ok(renamed)
    }

    /// SET_INFO of a file information class (MS-SMB2 3.2.4.15).
    pub async fn set_info(&mut self, fid: FileId, class: u8, buffer: &[u8]) -> Result<(), ClientError> {
        self.set_info_of(fid, info_type::FILE, class, 0, buffer).await
    }

    /// SET_INFO of any kind (MS-SMB2 2.2.39): a file information class, or
    /// a security descriptor (`info_type::SECURITY`, the parts in `additional`).
    pub async fn set_info_of(&mut self, fid: FileId, info_type: u8, class: u8, additional: u32, buffer: &[u8]) -> Result<(), ClientError> {
        let mut b = Vec::new();
        smbq_wire::set_info::SetInfoRequest { info_type, class, buffer, additional_information: additional, file_id: fid }.encode(&mut b);
        self.client().call(Command::SET_INFO, 1, &b).await.map(|_| ())
    }

    /// Set the permission bits of `path` (POSIX shares only): SET_INFO of a
    /// DACL holding one ACCESS_ALLOWED ACE for S-1-5-88-3-`mode`, as
    /// Samba's client sets a mode (`cli_fchmod_send`).
    pub async fn chmod(&mut self, path: &str, mode: u32) -> Result<(), ClientError> {
        let ace = Ace::new(ace_type::ACCESS_ALLOWED, 0, 0, Sid::new(5, &[88, 3, mode & posix::PERMISSION_BITS]));
        let sd = SecurityDescriptor { control: control::SELF_RELATIVE | control::DACL_PRESENT, dacl: Some(Acl::new(vec![ace])), ..Default::default() };
        self.set_security(path, access::WRITE_DAC, secinfo::DACL, &sd).await
    }

    /// Give `path` the owner S-1-22-1-`uid` and/or the group S-1-22-2-`gid`
    /// (POSIX shares only).
    pub async fn chown(&mut self, path: &str, uid: Option<u32>, gid: Option<u32>) -> Result<(), ClientError> {
        let sd = SecurityDescriptor { control: control::SELF_RELATIVE, owner: uid.map(posix::unix_user_sid), group: gid.map(posix::unix_group_sid), ..Default::default() };
        let parts = uid.map_or(0, |_| secinfo::OWNER) | gid.map_or(0, |_| secinfo::GROUP);
        if parts == 0 {
            return Ok(());
        }
        self.set_security(path, access::WRITE_OWNER, parts, &sd).await
    }

    /// SET_INFO SECURITY of the `parts` of `sd` on `path`, opened with `needs` (POSIX shares only).
    async fn set_security(&mut self, path: &str, needs: u32, parts: u32, sd: &SecurityDescriptor) -> Result<(), ClientError> {
        self.need_posix()?;
        let buf = sd.to_bytes();
        self.on_open(path, needs | access::READ_ATTRIBUTES | access::SYNCHRONIZE, 0, async |s, fid| s.set_info_of(fid, info_type::SECURITY, 0, parts, &buf).await).await
    }

    /// Make `path` a symlink to `target`, as Samba's client does
    /// (`cli_create_reparse_point`): create the file with
    /// FILE_OPEN_REPARSE_POINT, FSCTL_SET_REPARSE_POINT with a symlink
    /// buffer (MS-FSCC 2.1.2.4), and delete it again when that fails.
    pub async fn symlink(&mut self, target: &str, path: &str) -> Result<(), ClientError> {
        let mut buf = Vec::new();
        posix::Symlink::from_target(target).encode(&mut buf);
        if buf.len() > posix::MAX_REPARSE_BUFFER {
            return Err(ClientError::Usage(format!("a symlink target of {} characters is too long", target.chars().count())));
        }
        let wants = access::SYNCHRONIZE | access::DELETE | access::READ_ATTRIBUTES | access::WRITE_ATTRIBUTES;
        let h = self.create(path, wants, disposition::CREATE, options::OPEN_REPARSE_POINT | options::NON_DIRECTORY_FILE, attr::NORMAL).await?;
        let set = self.client().fsctl(h.fid, fsctl::SET_REPARSE_POINT, &buf, 0).await;
        if set.is_err() {
            self.set_info(h.fid, class::DISPOSITION, &[1]).await.ok();
        }
        let closed = self.close(h.fid).await;
        set?;
        closed
    }

    /// The target of symlink `path` (FSCTL_GET_REPARSE_POINT on the link itself).
    pub async fn readlink(&mut self, path: &str) -> Result<String, ClientError> {
        let wants = access::READ_ATTRIBUTES | access::READ_EA | access::SYNCHRONIZE;
        let buf = self.on_open(path, wants, options::OPEN_REPARSE_POINT, async |s, fid| s.client().fsctl(fid, fsctl::GET_REPARSE_POINT, &[], posix::MAX_REPARSE_BUFFER as u32).await).await?;
        let link = posix::Symlink::decode(&buf).map_err(|e| ClientError::Protocol(format!("{path}: not a symlink's reparse buffer: {e}")))?;
        Ok(link.substitute)
    }

    /// Set the end of file (truncate or extend).
    pub async fn set_size(&mut self, fid: FileId, size: u64) -> Result<(), ClientError> {
        self.set_info(fid, class::END_OF_FILE, &size.to_le_bytes()).await
    }

    /// The allocation size and end of file of an open file
    /// (QUERY_INFO FileStandardInformation, MS-FSCC 2.4.47).
    pub async fn sizes(&mut self, fid: FileId) -> Result<(u64, u64), ClientError> {
        let mut b = Vec::new();
        smbq_wire::query_info::QueryInfoRequest { info_type: info_type::FILE, class: class::STANDARD, output_buffer_length: 24, file_id: fid, ..Default::default() }.encode(&mut b);
        let (_, r) = self.client().call(Command::QUERY_INFO, 1, &b).await?;
        let mut rd = Reader::new(info_buffer(&r)?);
        let bad = |_| ClientError::Protocol("short FileStandardInformation".into());
        Ok((rd.u64().map_err(bad)?, rd.u64().map_err(bad)?))
    }

    /// Reserve `size` bytes for the file (FileAllocationInformation,
    /// MS-FSCC 2.4.4); a size under the end of file truncates it.
    pub async fn set_allocation(&mut self, fid: FileId, size: u64) -> Result<(), ClientError> {
        self.set_info(fid, class::ALLOCATION, &size.to_le_bytes()).await
    }

    /// Zero the bytes from `offset` up to `end` (FSCTL_SET_ZERO_DATA,
    /// MS-FSCC 2.3.85): a sparse file gets a hole, and the size stays.
    pub async fn zero_data(&mut self, fid: FileId, offset: u64, end: u64) -> Result<(), ClientError> {
        let mut b = Vec::new();
        smbq_wire::ioctl::ZeroData { file_offset: offset, beyond_final_zero: end }.encode(&mut b);
        self.client().fsctl(fid, fsctl::SET_ZERO_DATA, &b, 0).await.map(|_| ())
    }

    /// Set times (FILETIMEs; 0 leaves one as it is) and attributes (0 leaves them).
    pub async fn set_basic(&mut self, fid: FileId, created: u64, accessed: u64, written: u64, attributes: u32) -> Result<(), ClientError> {
        let mut b = Vec::new();
        for t in [created, accessed, written, 0] {
            b.u64(t);
        }
        b.u32(attributes);
        b.u32(0);
        self.set_info(fid, class::BASIC, &b).await
    }

    /// LOCK (MS-SMB2 2.2.26): lock or unlock byte ranges of `fid`, one
    /// element each in `locks` (flags of 2.2.26.1). A lock without
    /// FAIL_IMMEDIATELY waits for the server's final answer past its
    /// interim STATUS_PENDING; a conflict is STATUS_LOCK_NOT_GRANTED (or
    /// FILE_LOCK_CONFLICT from older servers).
    pub async fn lock(&mut self, fid: FileId, locks: &[smbq_wire::lock::LockElement]) -> Result<(), ClientError> {
        let mut b = Vec::new();
        smbq_wire::lock::LockRequest { lock_sequence: 0, file_id: fid, locks: locks.to_vec() }.encode(&mut b);
        self.client().call(Command::LOCK, 1, &b).await.map(|_| ())
    }

    pub async fn flush(&mut self, fid: FileId) -> Result<(), ClientError> {
        let mut b = Vec::new();
        smbq_wire::flush::encode_request(&mut b, fid);
        self.client().call(Command::FLUSH, 1, &b).await.map(|_| ())
    }

    /// `path`'s extended attributes (QUERY_INFO FileFullEaInformation,
    /// MS-FSCC 2.4.15, with SL_RESTART_SCAN); a file with none, or a
    /// server answering STATUS_NO_EAS_ON_FILE, is an empty list.
    pub async fn eas(&mut self, path: &str) -> Result<Vec<smbq_wire::ea::Ea>, ClientError> {
        /// SL_RESTART_SCAN (MS-SMB2 2.2.37): the whole list, from its start.
        const RESTART_SCAN: u32 = 0x01;
        self.on_open(path, access::READ_EA | access::READ_ATTRIBUTES | access::SYNCHRONIZE, 0, async |s, fid| {
            let mut b = Vec::new();
            let q = smbq_wire::query_info::QueryInfoRequest { info_type: info_type::FILE, class: class::FULL_EA, output_buffer_length: 65536, flags: RESTART_SCAN, file_id: fid, ..Default::default() };
            q.encode(&mut b);
            match s.client().call(Command::QUERY_INFO, 1, &b).await {
                Ok((_, r)) => smbq_wire::ea::decode_full(info_buffer(&r)?).map_err(|e| ClientError::Protocol(format!("FileFullEaInformation: {e:?}"))),
                Err(ClientError::Status(_, NtStatus::NO_EAS_ON_FILE)) => Ok(Vec::new()),
                Err(e) => Err(e),
            }
        })
        .await
    }

    /// Set extended attribute `name` of `path` to `value`; an empty value
    /// removes it (SET_INFO FileFullEaInformation, MS-FSA 2.1.5.14.3).
    pub async fn set_ea(&mut self, path: &str, name: &str, value: &[u8]) -> Result<(), ClientError> {
        let mut b = Vec::new();
        smbq_wire::ea::encode_full(&mut b, &[smbq_wire::ea::Ea { flags: 0, name: name.to_string(), value: value.to_vec() }]);
        self.on_open(path, access::WRITE_EA | access::READ_ATTRIBUTES | access::SYNCHRONIZE, 0, async |s, fid| s.set_info(fid, class::FULL_EA, &b).await).await
    }

    /// The share's size (QUERY_INFO FileFsFullSizeInformation on its root).
    pub async fn fs_size(&mut self) -> Result<FsSize, ClientError> {
        let h = self.open_read("").await?;
        let mut b = Vec::new();
        smbq_wire::query_info::QueryInfoRequest { info_type: info_type::FILESYSTEM, class: fs_class::FULL_SIZE, output_buffer_length: 4096, file_id: h.fid, ..Default::default() }.encode(&mut b);
        let r = self.client().call(Command::QUERY_INFO, 1, &b).await;
        let closed = self.close(h.fid).await;
        let (_, r) = r?;
        closed?;
        let buf = info_buffer(&r)?;
        let mut rd = Reader::new(buf);
        let bad = |_| ClientError::Protocol("short FileFsFullSizeInformation".into());
        let total_units = rd.u64().map_err(bad)?;
        let _caller_free = rd.u64().map_err(bad)?;
        let free_units = rd.u64().map_err(bad)?;
        let sectors = u64::from(rd.u32().map_err(bad)?);
        let sector = u64::from(rd.u32().map_err(bad)?);
        Ok(FsSize { total_units, free_units, bytes_per_unit: (sectors * sector).max(1) })
    }

    /// Read up to `len` bytes at `offset` (fewer at the end of the file, none past it).
    pub async fn read_at(&mut self, fid: FileId, offset: u64, len: u32) -> Result<Vec<u8>, ClientError> {
        let mut out = Vec::new();
        let max = self.client().core.max_read;
        while (out.len() as u32) < len {
            let want = (len - out.len() as u32).min(max);
            match self.client().read(fid, offset + out.len() as u64, want).await {
                Ok(d) if d.is_empty() => break,
                Ok(d) => {
                    let short = (d.len() as u32) < want;
                    out.extend_from_slice(&d);
                    if short {
                        break;
                    }
                }
                Err(ClientError::Status(_, st)) if st == NtStatus::END_OF_FILE => break,
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Write all of `data` at `offset`, pipelined.
    pub async fn write_at(&mut self, fid: FileId, offset: u64, data: Bytes) -> Result<(), ClientError> {
        let (chunk, depth) = (self.client().core.max_write.min(self.chunk) as usize, self.depth);
        self.client().write_from(fid, offset, data.len() as u64, chunk, depth, |o, l| Ok(data.slice((o - offset) as usize..(o - offset) as usize + l)), |_, _| {}).await
    }
}

/// The shares of `host` (MS-SRVS NetrShareEnum over the `srvsvc` pipe of IPC$).
pub async fn list_shares(host: &str, port: Option<u16>, o: &ConnectOptions) -> Result<Vec<crate::srvsvc::Share>, ClientError> {
    use crate::srvsvc;
    let rpc = |e: srvsvc::RpcError| ClientError::Protocol(format!("srvsvc: {e}"));
    let url = SmbUrl { user: None, host: host.to_string(), port, share: "IPC$".into(), path: String::new() };
    let mut s = Share::connect(&url, o).await?;
    let pipe = s.create("srvsvc", access::READ_DATA | access::WRITE_DATA | access::READ_ATTRIBUTES | access::SYNCHRONIZE, disposition::OPEN, 0, 0).await?;
    let bind = srvsvc::bind_pdu(1);
    s.client().write(pipe.fid, 0, &bind).await?;
    let ack = s.client().read(pipe.fid, 0, 65536).await?;
    srvsvc::check_bind_ack(&ack).map_err(rpc)?;
    s.client().write(pipe.fid, 0, &srvsvc::share_enum_request(2, host)).await?;
    // A long answer comes in several READs (STATUS_BUFFER_OVERFLOW, a
    // warning, until the last), and maybe several fragments.
    let mut re = srvsvc::Reassembler::new(2);
    let stub = loop {
        let got = s.client().read(pipe.fid, 0, 65536).await?;
        if got.is_empty() {
            return Err(ClientError::Protocol("srvsvc: the pipe ended before the answer did".into()));
        }
        if let Some(stub) = re.push(&got).map_err(rpc)? {
            break stub;
        }
    };
    s.close(pipe.fid).await.ok();
    srvsvc::decode_share_enum(&stub).map_err(rpc)
}

/// A CREATE request body for `path` (`/` or `\\` separated), with the
/// POSIX create context carrying `posix_mode` if given.
#[allow(clippy::too_many_arguments)]
fn create_body(path: &str, desired_access: u32, disp: u32, create_options: u32, file_attributes: u32, oplock_level: u8, contexts: &[(&[u8], &[u8])], posix_mode: Option<u32>) -> Vec<u8> {
    create_body_sharing(path, desired_access, 7, disp, create_options, file_attributes, oplock_level, contexts, posix_mode)
}

/// [`create_body`] with the ShareAccess given.
#[allow(clippy::too_many_arguments)]
fn create_body_sharing(path: &str, desired_access: u32, share_access: u32, disp: u32, create_options: u32, file_attributes: u32, oplock_level: u8, contexts: &[(&[u8], &[u8])], posix_mode: Option<u32>) -> Vec<u8> {
    let mode = posix_mode.map(u32::to_le_bytes);
    let mut all = contexts.to_vec();
    if let Some(m) = &mode {
        all.push((&posix::TAG, m));
    }
    crate::create_body_sharing(&to_smb_path(&path.replace('\\', "/")), desired_access, share_access, disp, create_options, file_attributes, oplock_level, &all)
}

/// FILE_RENAME_INFORMATION_TYPE_2 (MS-FSCC 2.4.42.2) to `to`, a
/// `\\`-separated path from the share's root.
fn rename_info(to: &str, replace: bool) -> Vec<u8> {
    let name: Vec<u8> = to.encode_utf16().flat_map(|u| u.to_le_bytes()).collect();
    let mut b = Vec::new();
    b.u8(u8::from(replace));
    b.bytes(&[0; 7]);
    b.u64(0);
    b.u32(name.len() as u32);
    b.bytes(&name);
    b
}

/// The handle a CREATE response `r` gives for `path`, with the POSIX
/// create context's answer in its info when there is one, and the names
/// of the contexts answered.
fn created(path: &str, r: &[u8]) -> Result<(Handle, Vec<Vec<u8>>), ClientError> {
    let (resp, answered) = CreateResponse::decode(r).map_err(|e| ClientError::Protocol(format!("CREATE response: {e}")))?;
    let mut info = FileInfo::from_create(&resp);
    info.name = base_name(path);
    if let Some(c) = answered.iter().find(|c| c.name == posix::TAG) {
        let mut rd = Reader::new(c.data);
        let cc = CcInfo::decode(&mut rd).map_err(|e| ClientError::Protocol(format!("POSIX create context: {e}")))?;
        info.links = cc.nlinks;
        info.posix = Some(Posix::from_cc(&cc));
    }
    Ok((Handle { fid: resp.file_id, info }, answered.iter().map(|c| c.name.to_vec()).collect()))
}

/// Directory entries of class FILE_POSIX_INFORMATION; appended to `out`.
fn decode_posix_entries(buf: &[u8], out: &mut Vec<FileInfo>) -> Result<(), ClientError> {
    let entries = posix::decode_dir_entries(buf).map_err(|e| ClientError::Protocol(format!("bad POSIX directory entry: {e}")))?;
    out.extend(entries.into_iter().map(|e| FileInfo::from_posix(e.name, &e.info)));
    Ok(())
}

/// The last component of `path` (`/` or `\\` separated).
fn base_name(path: &str) -> String {
    path.rsplit(['\\', '/']).next().unwrap_or("").to_string()
}

/// The output buffer of a QUERY_INFO response (MS-SMB2 2.2.38).
fn info_buffer(r: &[u8]) -> Result<&[u8], ClientError> {
    let bad = || ClientError::Protocol("bad QUERY_INFO response".into());
    let mut rd = Reader::new(r.get(HEADER_LEN..).ok_or_else(bad)?);
    rd.skip(2).map_err(|_| bad())?;
    let off = rd.u16().map_err(|_| bad())? as usize;
    let len = rd.u32().map_err(|_| bad())? as usize;
    at(r, off, len).map_err(|_| bad())
}

/// FileIdBothDirectoryInformation entries (MS-FSCC 2.4.17), each bounded
/// by the buffer; appended to `out`.
pub fn decode_id_both_entries(buf: &[u8], out: &mut Vec<FileInfo>) -> Result<(), ClientError> {
    let bad = |why: &str| ClientError::Protocol(format!("bad directory entry: {why}"));
    let mut pos = 0usize;
    loop {
        let entry = buf.get(pos..).ok_or_else(|| bad("offset past the buffer"))?;
        let mut r = Reader::new(entry);
        let short = |_| bad("truncated");
        let next = r.u32().map_err(short)? as usize;
        r.skip(4).map_err(short)?;
        let created = r.u64().map_err(short)?;
        let accessed = r.u64().map_err(short)?;
        let written = r.u64().map_err(short)?;
        let changed = r.u64().map_err(short)?;
        let size = r.u64().map_err(short)?;
        let allocation = r.u64().map_err(short)?;
        let attributes = r.u32().map_err(short)?;
        let name_len = r.u32().map_err(short)? as usize;
        r.skip(4 + 1 + 1 + 24 + 2).map_err(short)?;
        let file_id = r.u64().map_err(short)?;
        let name = utf16le(r.take(name_len).map_err(short)?).map_err(|_| bad("name is not UTF-16"))?;
        out.push(FileInfo { name, size, allocation, attributes, created, accessed, written, changed, file_id, links: 1, posix: None });
        if next == 0 {
            return Ok(());
        }
        if next < 104 || !next.is_multiple_of(8) {
            return Err(bad("NextEntryOffset out of range"));
        }
        pos += next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, next: u32) -> Vec<u8> {
        let n: Vec<u8> = name.encode_utf16().flat_map(|u| u.to_le_bytes()).collect();
        let mut b = Vec::new();
        b.u32(next);
        b.u32(0);
        for t in [1u64, 2, 3, 4, 5, 6] {
            b.u64(t);
        }
        b.u32(attr::DIRECTORY);
        b.u32(n.len() as u32);
        b.bytes(&[0; 4 + 1 + 1 + 24 + 2]);
        b.u64(77);
        b.bytes(&n);
        b
    }

    #[test]
    fn directory_entries_decode_and_hostile_ones_fail() {
        let mut first = entry("a", 0);
        let len = first.len().next_multiple_of(8);
        first = entry("a", len as u32);
        first.resize(len, 0);
        let buf = [first.clone(), entry("bé", 0)].concat();
        let mut out = Vec::new();
        decode_id_both_entries(&buf, &mut out).unwrap();
        assert_eq!(out.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), ["a", "bé"]);
        assert_eq!((out[0].size, out[0].allocation, out[0].file_id, out[0].is_dir()), (5, 6, 77, true));
        // A name longer than the buffer, an offset past it, a loop, a truncated entry.
        let mut long = entry("a", 0);
        long[60..64].copy_from_slice(&1000u32.to_le_bytes());
        let mut past = first.clone();
        past[0..4].copy_from_slice(&4096u32.to_le_bytes());
        let mut zero_step = entry("a", 0);
        zero_step[0..4].copy_from_slice(&8u32.to_le_bytes());
        for b in [long, past, zero_step, entry("abc", 0)[..50].to_vec()] {
            assert!(decode_id_both_entries(&b, &mut Vec::new()).is_err());
        }
    }

    #[test]
    fn posix_create_context_answers_fill_the_info() {
        let cc = CcInfo { nlinks: 2, reparse_tag: posix::REPARSE_TAG_SYMLINK, mode: posix::mode_to_wire(0o120777), owner: posix::unix_user_sid(1000), group: posix::unix_group_sid(100) };
        let mut data = Vec::new();
        cc.encode(&mut data);
        let resp = CreateResponse { oplock_level: 0, create_action: 1, creation_time: 1, last_access_time: 2, last_write_time: 3, change_time: 4, allocation_size: 0, end_of_file: 5, file_attributes: attr::REPARSE_POINT, file_id: FileId { persistent: 1, volatile: 2 } };
        let mut m = Vec::new();
        smbq_wire::Header { command: Command::CREATE.0, ..Default::default() }.encode(&mut m);
        resp.encode(&mut m, 0, &[(&posix::TAG, &data)]);
        let (h, answered) = created("dir/link", &m).unwrap();
        assert_eq!(answered, [posix::TAG.to_vec()]);
        let p = h.info.posix.as_ref().unwrap();
        assert_eq!((p.mode, p.uid, p.gid, h.info.links), (0o120777, Some(1000), Some(100), 2));
        assert!(h.info.is_symlink() && h.info.name == "link");
        // Owners that are not Unix ids keep their SIDs and have no id.
        let other = Posix::from_cc(&CcInfo { owner: Sid::new(5, &[21, 1, 2, 3, 500]), group: posix::unix_user_sid(7), ..cc.clone() });
        assert_eq!((other.uid, other.gid), (None, None));
        // A context too short for its SIDs is an error, not a panic.
        let mut m = Vec::new();
        smbq_wire::Header { command: Command::CREATE.0, ..Default::default() }.encode(&mut m);
        resp.encode(&mut m, 0, &[(&posix::TAG, &data[..20])]);
        assert!(created("x", &m).is_err());
        let (plain, _) = {
            let mut m = Vec::new();
            smbq_wire::Header { command: Command::CREATE.0, ..Default::default() }.encode(&mut m);
            resp.encode(&mut m, 0, &[]);
            created("x", &m).unwrap()
        };
        assert!(plain.info.posix.is_none() && !plain.info.is_symlink());
    }

    #[test]
    fn filetimes_convert_both_ways() {
        let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(system_time(filetime(t)), t);
        assert_eq!(filetime(UNIX_EPOCH), 116_444_736_000_000_000);
        assert_eq!(system_time(0), UNIX_EPOCH);
    }
}
