//! The srvsvc interface's identifiers and codes (MS-SRVS), shared by the
//! server that answers it and the client that lists shares with it.

/// Abstract syntax 4b324fc8-1670-01d3-1278-5a47bf6ee188 version 3.0
/// (MS-SRVS 1.9), as it appears on the wire.
pub const SYNTAX: [u8; 20] = [
    0xc8, 0x4f, 0x32, 0x4b, 0x70, 0x16, 0xd3, 0x01, 0x12, 0x78, 0x5a, 0x47, 0xbf, 0x6e, 0xe1, 0x88, 3, 0, 0, 0,
];

/// Operation numbers (MS-SRVS 3.1.4).
pub const OP_SHARE_ENUM: u16 = 15;
pub const OP_SHARE_GET_INFO: u16 = 16;
pub const OP_SERVER_GET_INFO: u16 = 21;
pub const OP_SHARE_ENUM_STICKY: u16 = 36;

/// Share types (MS-SRVS 2.2.2.4): the low byte is the base type, the high
/// bits are flags.
pub const STYPE_DISKTREE: u32 = 0;
pub const STYPE_PRINTQ: u32 = 1;
pub const STYPE_DEVICE: u32 = 2;
pub const STYPE_IPC: u32 = 3;
pub const STYPE_MASK: u32 = 0xFF;
pub const STYPE_TEMPORARY: u32 = 0x4000_0000;
pub const STYPE_SPECIAL: u32 = 0x8000_0000;
pub const STYPE_IPC_SPECIAL: u32 = STYPE_IPC | STYPE_SPECIAL;

/// Win32 error codes returned as NET_API_STATUS (MS-ERREF 2.2).
pub const WERR_OK: u32 = 0;
pub const WERR_ACCESS_DENIED: u32 = 5;
pub const WERR_NOT_ENOUGH_MEMORY: u32 = 8;
pub const WERR_INVALID_PARAMETER: u32 = 87;
pub const WERR_INVALID_LEVEL: u32 = 124;
pub const WERR_MORE_DATA: u32 = 234;
pub const WERR_NET_NAME_NOT_FOUND: u32 = 2310;
