//! NTSTATUS values (MS-ERREF 2.3.1) used by SMB2.

use std::fmt;

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct NtStatus(pub u32);

macro_rules! statuses {
    ($($name:ident = $v:expr,)*) => {
        impl NtStatus {
            $(pub const $name: NtStatus = NtStatus($v);)*
            pub fn name(self) -> Option<&'static str> {
                match self.0 { $($v => Some(stringify!($name)),)* _ => None }
            }
            /// The name as MS-ERREF spells it (`STATUS_` and [`NtStatus::name`]).
            pub fn status_name(self) -> Option<&'static str> {
                match self.0 { $($v => Some(concat!("STATUS_", stringify!($name))),)* _ => None }
            }
        }
    };
}

statuses! {
    SUCCESS = 0x0000_0000,
    PENDING = 0x0000_0103,
    NOTIFY_ENUM_DIR = 0x0000_010C,
    BUFFER_OVERFLOW = 0x8000_0005,
    NO_MORE_FILES = 0x8000_0006,
    STOPPED_ON_SYMLINK = 0x8000_002D,
    UNSUCCESSFUL = 0xC000_0001,
    NOT_IMPLEMENTED = 0xC000_0002,
    INVALID_INFO_CLASS = 0xC000_0003,
    INFO_LENGTH_MISMATCH = 0xC000_0004,
    INVALID_HANDLE = 0xC000_0008,
    INVALID_PARAMETER = 0xC000_000D,
    NO_SUCH_DEVICE = 0xC000_000E,
    NO_SUCH_FILE = 0xC000_000F,
    INVALID_DEVICE_REQUEST = 0xC000_0010,
    END_OF_FILE = 0xC000_0011,
    MORE_PROCESSING_REQUIRED = 0xC000_0016,
    NO_MEMORY = 0xC000_0017,
    ACCESS_DENIED = 0xC000_0022,
    BUFFER_TOO_SMALL = 0xC000_0023,
    OBJECT_TYPE_MISMATCH = 0xC000_0024,
    OBJECT_NAME_INVALID = 0xC000_0033,
    OBJECT_NAME_NOT_FOUND = 0xC000_0034,
    OBJECT_NAME_COLLISION = 0xC000_0035,
    OBJECT_PATH_INVALID = 0xC000_0039,
    OBJECT_PATH_NOT_FOUND = 0xC000_003A,
    OBJECT_PATH_SYNTAX_BAD = 0xC000_003B,
    SHARING_VIOLATION = 0xC000_0043,
    DELETE_PENDING = 0xC000_0056,
    PRIVILEGE_NOT_HELD = 0xC000_0061,
    WRONG_PASSWORD = 0xC000_006A,
    LOGON_FAILURE = 0xC000_006D,
    TIME_DIFFERENCE_AT_DC = 0xC000_0133,
    NTLM_BLOCKED = 0xC000_0418,
    ACCOUNT_RESTRICTION = 0xC000_006E,
    PASSWORD_EXPIRED = 0xC000_0071,
    INSUFFICIENT_RESOURCES = 0xC000_009A,
    DISK_FULL = 0xC000_007F,
    RANGE_NOT_LOCKED = 0xC000_007E,
    LOCK_NOT_GRANTED = 0xC000_0055,
    FILE_LOCK_CONFLICT = 0xC000_0054,
    MEDIA_WRITE_PROTECTED = 0xC000_00A2,
    FILE_IS_A_DIRECTORY = 0xC000_00BA,
    NOT_SUPPORTED = 0xC000_00BB,
    NETWORK_NAME_DELETED = 0xC000_00C9,
    BAD_NETWORK_NAME = 0xC000_00CC,
    REQUEST_NOT_ACCEPTED = 0xC000_00D0,
    INTERNAL_ERROR = 0xC000_00E5,
    DIRECTORY_NOT_EMPTY = 0xC000_0101,
    NOT_A_DIRECTORY = 0xC000_0103,
    NAME_TOO_LONG = 0xC000_0106,
    CANCELLED = 0xC000_0120,
    CANNOT_DELETE = 0xC000_0121,
    FILE_CLOSED = 0xC000_0128,
    TOO_MANY_OPENED_FILES = 0xC000_011F,
    INVALID_LEVEL = 0xC000_0148,
    PIPE_BROKEN = 0xC000_014B,
    NOT_FOUND = 0xC000_0225,
    USER_SESSION_DELETED = 0xC000_0203,
    NETWORK_SESSION_EXPIRED = 0xC000_035C,
    INVALID_DEVICE_STATE = 0xC000_0184,
    INVALID_OPLOCK_PROTOCOL = 0xC000_00E3,
    REQUEST_OUT_OF_SEQUENCE = 0xC000_042A,
    FS_DRIVER_REQUIRED = 0xC000_019C,
    NOT_A_REPARSE_POINT = 0xC000_0275,
    IO_REPARSE_TAG_MISMATCH = 0xC000_0277,
    IO_REPARSE_DATA_INVALID = 0xC000_0278,
    STOPPED_ON_SYMLINK_ERR = 0xC000_0280,
    DUPLICATE_OBJECTID = 0xC000_022A,
    TOO_MANY_SESSIONS = 0xC000_00CE,
    NO_SUCH_USER = 0xC000_0064,
    ACCESS_VIOLATION = 0xC000_0005,
    EAS_NOT_SUPPORTED = 0xC000_004F,
    INVALID_NETWORK_RESPONSE = 0xC000_00C3,
    FILE_SYSTEM_LIMITATION = 0xC000_0427,
    OBJECTID_NOT_FOUND = 0xC000_02F0,
    NO_EAS_ON_FILE = 0xC000_0052,
    INVALID_EA_NAME = 0x8000_0013,
    EA_LIST_INCONSISTENT = 0x8000_0014,
    EA_TOO_LARGE = 0xC000_0050,
    IO_TIMEOUT = 0xC000_00B5,
    INVALID_LOCK_SEQUENCE = 0xC000_001E,
    INVALID_VIEW_SIZE = 0xC000_001F,
    USER_MAPPED_FILE = 0xC000_0243,
    BAD_IMPERSONATION_LEVEL = 0xC000_00A5,
    FILE_NOT_AVAILABLE = 0xC000_0467,
    SMB_BAD_CLUSTER_DIALECT = 0xC05D_0001,
    DATA_ERROR = 0xC000_003E,
}

impl NtStatus {
    /// Severity "error" (top two bits 11).
    pub fn is_error(self) -> bool {
        self.0 >> 30 == 3
    }
}

impl fmt::Debug for NtStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.status_name() {
            Some(n) => f.write_str(n),
            None => write!(f, "NtStatus({:#010x})", self.0),
        }
    }
}

impl fmt::Display for NtStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}
