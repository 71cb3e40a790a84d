//! Connection-oriented DCE/RPC PDUs (C706 chapter 12, MS-RPCE 2.2.2):
//! the common header, its flags and the PDU types, the NDR transfer
//! syntax, and the status and reason codes both ends of a named pipe
//! (server `rpc` module, client `srvsvc`) read and write.

use crate::reader::Reader;
use crate::DecodeError;

/// Length of the common header (C706 12.6.3.1).
pub const HEADER_LEN: usize = 16;

/// PDU types (C706 12.6.4.1).
pub mod ptype {
    pub const REQUEST: u8 = 0;
    pub const RESPONSE: u8 = 2;
    pub const FAULT: u8 = 3;
    pub const BIND: u8 = 11;
    pub const BIND_ACK: u8 = 12;
    pub const BIND_NAK: u8 = 13;
    pub const ALTER_CONTEXT: u8 = 14;
    pub const ALTER_CONTEXT_RESP: u8 = 15;
    pub const AUTH3: u8 = 16;
    pub const CO_CANCEL: u8 = 18;
    pub const ORPHANED: u8 = 19;
}

/// pfc_flags (C706 12.6.3.1).
pub mod pfc {
    pub const FIRST_FRAG: u8 = 0x01;
    pub const LAST_FRAG: u8 = 0x02;
    pub const DID_NOT_EXECUTE: u8 = 0x20;
    pub const OBJECT_UUID: u8 = 0x80;
}

/// Fault statuses (C706 appendix E, MS-RPCE 3.1.1.5.5).
pub mod fault {
    pub const NCA_OP_RNG_ERROR: u32 = 0x1C01_0002;
    pub const NCA_UNK_IF: u32 = 0x1C01_0003;
    pub const NCA_PROTO_ERROR: u32 = 0x1C01_000B;
    pub const ACCESS_DENIED: u32 = 0x0000_0005;
    pub const RPC_X_BAD_STUB_DATA: u32 = 0x0000_06F7;
}

/// Presentation context results, p_cont_def_result_t (C706 12.6.3.1,
/// MS-RPCE 2.2.2.4 for negotiate_ack).
pub mod result {
    pub const ACCEPTANCE: u16 = 0;
    pub const USER_REJECTION: u16 = 1;
    pub const PROVIDER_REJECTION: u16 = 2;
    pub const NEGOTIATE_ACK: u16 = 3;
}

/// Why a presentation context was rejected, p_provider_reason_t (C706
/// 12.6.3.1).
pub mod provider_reason {
    pub const NOT_SPECIFIED: u16 = 0;
    pub const ABSTRACT_SYNTAX_NOT_SUPPORTED: u16 = 1;
    pub const TRANSFER_SYNTAXES_NOT_SUPPORTED: u16 = 2;
    pub const LOCAL_LIMIT_EXCEEDED: u16 = 3;
}

/// Why a whole BIND was refused with bind_nak, p_reject_reason_t (C706
/// 12.6.3.1, MS-RPCE 2.2.2.5 for the last two).
pub mod reject_reason {
    pub const NOT_SPECIFIED: u16 = 0;
    pub const TEMPORARY_CONGESTION: u16 = 1;
    pub const LOCAL_LIMIT_EXCEEDED: u16 = 2;
    pub const CALLED_PADDR_UNKNOWN: u16 = 3;
    pub const PROTOCOL_VERSION_NOT_SUPPORTED: u16 = 4;
    pub const DEFAULT_CONTEXT_NOT_SUPPORTED: u16 = 5;
    pub const USER_DATA_NOT_READABLE: u16 = 6;
    pub const NO_PSAP_AVAILABLE: u16 = 7;
    pub const AUTHENTICATION_TYPE_NOT_RECOGNIZED: u16 = 8;
    pub const INVALID_CHECKSUM: u16 = 9;
}

/// NDR transfer syntax 8a885d04-1ceb-11c9-9fe8-08002b104860 version 2.
pub const NDR: [u8; 20] = [
    0x04, 0x5d, 0x88, 0x8a, 0xeb, 0x1c, 0xc9, 0x11, 0x9f, 0xe8, 0x08, 0x00, 0x2b, 0x10, 0x48, 0x60, 2, 0, 0, 0,
];

/// Largest fragment we send or advertise (what Windows uses), and the
/// smallest every implementation must accept (C706 12.6.3.1 MustRecvFragSize).
pub const MAX_FRAG: u16 = 4280;
pub const MIN_FRAG: u16 = 1432;

/// The 16-byte common header (C706 12.6.3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub ptype: u8,
    pub flags: u8,
    pub frag_len: u16,
    pub auth_len: u16,
    pub call_id: u32,
}

impl Header {
    /// Version 5.0/5.1, little-endian integers and ASCII characters (the
    /// only data representation spoken), frag_len at least a header.
    pub fn decode(b: &[u8]) -> Result<Header, DecodeError> {
        let mut r = Reader::new(b);
        let (vers, minor) = (r.u8()?, r.u8()?);
        let ptype = r.u8()?;
        let flags = r.u8()?;
        let drep = r.array::<4>()?;
        let frag_len = r.u16()?;
        let auth_len = r.u16()?;
        let call_id = r.u32()?;
        if vers != 5 || minor > 1 || drep[0] != 0x10 || (frag_len as usize) < HEADER_LEN {
            return Err(DecodeError::Invalid);
        }
        Ok(Header { ptype, flags, frag_len, auth_len, call_id })
    }

    /// Version 5.0, little-endian/ASCII/IEEE data representation.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&[5, 0, self.ptype, self.flags, 0x10, 0, 0, 0]);
        out.extend_from_slice(&self.frag_len.to_le_bytes());
        out.extend_from_slice(&self.auth_len.to_le_bytes());
        out.extend_from_slice(&self.call_id.to_le_bytes());
    }
}

/// Write the PDU's length into its header's frag_length, once the body is
/// complete (a PDU never exceeds a u16: callers cap fragments at
/// [`MAX_FRAG`]).
pub fn set_frag_len(pdu: &mut [u8]) {
    let len = (pdu.len() as u16).to_le_bytes();
    if let Some(f) = pdu.get_mut(8..10) {
        f.copy_from_slice(&len);
    }
}
