//! Open state (MS-SMB2 3.3.1.10).

use std::time::Duration;
use crate::files::OpenOwner;
use crate::share::Share;
use smbq_vfs::Handle;
use smbq_wire::FileId;
use std::sync::Arc;

pub enum OpenKind {
    File(Handle),
    Pipe(crate::rpc::Pipe),
}

pub struct Open {
    pub file_id: FileId,
    pub session_id: u64,
    pub tree_id: u32,
    pub share: Arc<Share>,
    pub kind: OpenKind,
    /// Share-relative path in SMB form (`dir\file`), updated on rename.
    pub path: String,
    /// Granted access mask (MS-SMB2 2.2.13.1).
    pub access: u32,
    pub share_access: u32,
    pub create_options: u32,
    /// Key into the global file table (`FileStat::file_id`); 0 for pipes.
    pub file_key: u64,
    pub delete_on_close: bool,
    /// QUERY_DIRECTORY enumeration state.
    pub dir: Option<crate::dir_cursor::DirCursor>,
    /// Open.LockSequenceArray (MS-SMB2 3.3.5.14): the LockSequenceNumber
    /// of the last LOCK that succeeded per LockSequenceIndex 1..=64.
    pub lock_sequences: [u8; 64],
    /// Open.ChannelSequence (MS-SMB2 3.3.5.2.10): the newest a request on
    /// it carried.
    pub channel_sequence: u16,
    /// FilePositionInformation (MS-FSCC 2.4.35): set by SET_INFO and, as
    /// Samba does, moved to the end of each READ.
    pub position: u64,
    /// Granted a durable handle: the open may outlive its connection.
    pub durable: Option<crate::open::Durable>,
    /// The key of the lease it was opened under.
    pub lease: Option<[u8; 16]>,
    /// Made by a CREATE with a durable v2 request: a replay of it gets
    /// this open and this answer again (MS-SMB2 3.3.5.9.10).
    pub replay: Option<Box<Replay>>,
    /// The connection its entry in the file table names (where its breaks
    /// go): the one it was made on, another channel of its session when
    /// that one goes, [`crate::open::DISCONNECTED`] while parked.
    pub home: u64,
    /// Data was written through it: its close changes its directory
    /// (directory leases break then).
    pub written: bool,
    /// A POSIX open (crate::posix_ext).
    pub posix: bool,
    /// In the opens gauge while it lives.
    pub counted: crate::metrics::Held,
}

impl Open {
    /// The files this open works on: the share's POSIX view for a POSIX
    /// open (crate::posix_ext), else the share's.
    pub fn fs(&self) -> Option<&dyn smbq_vfs::FileSystem> {
        match &self.share.posix {
            Some(view) if self.posix => Some(view.as_ref()),
            _ => self.share.fs(),
        }
    }

    pub fn owner(&self) -> OpenOwner {
        OpenOwner { connection: self.home, volatile: self.file_id.volatile }
    }

    pub fn handle(&self) -> Option<&Handle> {
        match &self.kind {
            OpenKind::File(h) => Some(h),
            OpenKind::Pipe(_) => None,
        }
    }
}

/// A LockSequenceArray entry no LOCK has set (sequence numbers are 4 bits).
pub const NO_LOCK_SEQUENCE: u8 = 0xFF;

pub struct Replay {
    pub create_guid: [u8; 16],
    pub client_guid: [u8; 16],
    /// The CREATE response body.
    pub response: Vec<u8>,
}

/// Access mask bits (MS-SMB2 2.2.13.1.1).
pub mod access {
    pub const FILE_READ_DATA: u32 = 0x0000_0001;
    pub const FILE_WRITE_DATA: u32 = 0x0000_0002;
    pub const FILE_APPEND_DATA: u32 = 0x0000_0004;
    pub const FILE_READ_EA: u32 = 0x0000_0008;
    pub const FILE_WRITE_EA: u32 = 0x0000_0010;
    pub const FILE_EXECUTE: u32 = 0x0000_0020;
    pub const FILE_DELETE_CHILD: u32 = 0x0000_0040;
    pub const FILE_READ_ATTRIBUTES: u32 = 0x0000_0080;
    pub const FILE_WRITE_ATTRIBUTES: u32 = 0x0000_0100;
    pub const DELETE: u32 = 0x0001_0000;
    pub const READ_CONTROL: u32 = 0x0002_0000;
    pub const WRITE_DAC: u32 = 0x0004_0000;
    pub const WRITE_OWNER: u32 = 0x0008_0000;
    pub const SYNCHRONIZE: u32 = 0x0010_0000;
    pub const ACCESS_SYSTEM_SECURITY: u32 = 0x0100_0000;
    pub const MAXIMUM_ALLOWED: u32 = 0x0200_0000;
    pub const GENERIC_ALL: u32 = 0x1000_0000;
    pub const GENERIC_EXECUTE: u32 = 0x2000_0000;
    pub const GENERIC_WRITE: u32 = 0x4000_0000;
    pub const GENERIC_READ: u32 = 0x8000_0000;
    /// Everything a file owner gets (FILE_ALL_ACCESS).
    pub const FILE_ALL: u32 = 0x001F_01FF;
}

/// What a durable open remembers to check a reconnect against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Durable {
    /// Granted through DH2Q (v2) rather than DHnQ (v1).
    pub v2: bool,
    pub create_guid: [u8; 16],
    /// The client's GUID: a leased open comes back only to it.
    pub client_guid: [u8; 16],
    /// Lower-case user name of the session that opened it.
    pub user: String,
    pub timeout: Duration,
    /// Made resilient (FSCTL_LMR_REQUEST_RESILIENCY): kept on a lost
    /// connection whatever its oplock or lease.
    pub resilient: bool,
}

/// The connection id a parked open's entries in the file table carry.
pub const DISCONNECTED: u64 = 0;
