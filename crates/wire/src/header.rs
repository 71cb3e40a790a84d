//! The SMB2 packet header, sync and async forms (MS-SMB2 2.2.1).

use crate::reader::{Put, Reader};
use crate::DecodeError;

pub const PROTOCOL_ID: [u8; 4] = *b"\xfeSMB";
pub const SMB1_PROTOCOL_ID: [u8; 4] = *b"\xffSMB";
pub const HEADER_LEN: usize = 64;
/// Offset of the 16-byte Signature field in the header.
pub const SIGNATURE_OFFSET: usize = 48;

macro_rules! newtype_consts {
    ($ty:ident($inner:ty) { $($name:ident = $v:expr,)* }) => {
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $ty(pub $inner);
        impl $ty {
            $(pub const $name: $ty = $ty($v);)*
            pub fn name(self) -> Option<&'static str> {
                match self.0 { $($v => Some(stringify!($name)),)* _ => None }
            }
        }
        impl std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                match self.name() {
                    Some(n) => f.write_str(n),
                    None => write!(f, "{}({:#x})", stringify!($ty), self.0),
                }
            }
        }
    };
}

newtype_consts!(Command(u16) {
    NEGOTIATE = 0x00,
    SESSION_SETUP = 0x01,
    LOGOFF = 0x02,
    TREE_CONNECT = 0x03,
    TREE_DISCONNECT = 0x04,
    CREATE = 0x05,
    CLOSE = 0x06,
    FLUSH = 0x07,
    READ = 0x08,
    WRITE = 0x09,
    LOCK = 0x0A,
    IOCTL = 0x0B,
    CANCEL = 0x0C,
    ECHO = 0x0D,
    QUERY_DIRECTORY = 0x0E,
    CHANGE_NOTIFY = 0x0F,
    QUERY_INFO = 0x10,
    SET_INFO = 0x11,
    OPLOCK_BREAK = 0x12,
});

newtype_consts!(Dialect(u16) {
    SMB202 = 0x0202,
    SMB210 = 0x0210,
    SMB300 = 0x0300,
    SMB302 = 0x0302,
    SMB311 = 0x0311,
    WILDCARD = 0x02FF,
});

impl Dialect {
    /// SMB 3.x family (signing with AES, encryption, KDF).
    pub fn is_smb3(self) -> bool {
        self.0 >= 0x0300 && self != Dialect::WILDCARD
    }
}

pub mod flags {
    pub const SERVER_TO_REDIR: u32 = 0x0000_0001;
    pub const ASYNC_COMMAND: u32 = 0x0000_0002;
    pub const RELATED_OPERATIONS: u32 = 0x0000_0004;
    pub const SIGNED: u32 = 0x0000_0008;
    pub const PRIORITY_MASK: u32 = 0x0000_0070;
    pub const DFS_OPERATIONS: u32 = 0x1000_0000;
    pub const REPLAY_OPERATION: u32 = 0x2000_0000;
}

/// A decoded SMB2 header. `async_id` is set when `ASYNC_COMMAND` is;
/// otherwise `tree_id` holds the sync form's TreeId.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Header {
    pub credit_charge: u16,
    /// ChannelSequence/Reserved in requests, Status in responses.
    pub status: u32,
    pub command: u16,
    /// CreditRequest in requests, CreditResponse in responses.
    pub credits: u16,
    pub flags: u32,
    pub next_command: u32,
    pub message_id: u64,
    pub async_id: u64,
    pub tree_id: u32,
    pub session_id: u64,
    pub signature: [u8; 16],
}

impl Header {
    pub fn decode(msg: &[u8]) -> Result<Header, DecodeError> {
        let mut r = Reader::new(msg);
        if r.array::<4>()? != PROTOCOL_ID {
            return Err(DecodeError::BadProtocolId);
        }
        if r.u16()? != HEADER_LEN as u16 {
            return Err(DecodeError::BadStructureSize);
        }
        let credit_charge = r.u16()?;
        let status = r.u32()?;
        let command = r.u16()?;
        let credits = r.u16()?;
        let flags = r.u32()?;
        let next_command = r.u32()?;
        let message_id = r.u64()?;
        let (async_id, tree_id) = if flags & flags::ASYNC_COMMAND != 0 {
            (r.u64()?, 0)
        } else {
            r.u32()?; // Reserved (process id)
            (0, r.u32()?)
        };
        let session_id = r.u64()?;
        let signature = r.array()?;
        Ok(Header {
            credit_charge,
            status,
            command,
            credits,
            flags,
            next_command,
            message_id,
            async_id,
            tree_id,
            session_id,
            signature,
        })
    }

    pub fn command(&self) -> Command {
        Command(self.command)
    }

    pub fn is_async(&self) -> bool {
        self.flags & flags::ASYNC_COMMAND != 0
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.bytes(&PROTOCOL_ID);
        out.u16(HEADER_LEN as u16);
        out.u16(self.credit_charge);
        out.u32(self.status);
        out.u16(self.command);
        out.u16(self.credits);
        out.u32(self.flags);
        out.u32(self.next_command);
        out.u64(self.message_id);
        if self.is_async() {
            out.u64(self.async_id);
        } else {
            // Reserved (ProcessId): 0, as Samba answers; some clients (smb-rs)
            // verify signatures over a header rebuilt with 0 here.
            out.u32(0);
            out.u32(self.tree_id);
        }
        out.u64(self.session_id);
        out.bytes(&self.signature);
    }
}

/// ERROR response body (MS-SMB2 2.2.2), with no error contexts.
pub fn encode_error_body(out: &mut Vec<u8>, data: &[u8]) {
    out.u16(9);
    out.u8(0); // ErrorContextCount
    out.u8(0);
    out.u32(data.len() as u32);
    if data.is_empty() {
        out.u8(0);
    } else {
        out.bytes(data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_sync_and_async() {
        for flags in [0, flags::ASYNC_COMMAND | flags::SERVER_TO_REDIR] {
            let h = Header {
                credit_charge: 3,
                status: 0x103,
                command: Command::READ.0,
                credits: 64,
                flags,
                next_command: 0,
                message_id: 77,
                async_id: if flags != 0 { 9 } else { 0 },
                tree_id: if flags != 0 { 0 } else { 5 },
                session_id: 0x1122,
                signature: [7; 16],
            };
            let mut v = Vec::new();
            h.encode(&mut v);
            assert_eq!(v.len(), HEADER_LEN);
            assert_eq!(Header::decode(&v).unwrap(), h);
        }
    }

    #[test]
    fn rejects_bad_magic_and_size() {
        let mut v = Vec::new();
        Header::default().encode(&mut v);
        assert!(Header::decode(&v[..63]).is_err());
        v[4] = 63;
        assert_eq!(Header::decode(&v), Err(DecodeError::BadStructureSize));
        v[0] = 0xFF;
        assert_eq!(Header::decode(&v), Err(DecodeError::BadProtocolId));
    }
}
