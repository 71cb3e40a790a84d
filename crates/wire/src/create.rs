//! CREATE request and response with their create contexts (MS-SMB2
//! 2.2.13, 2.2.13.2, 2.2.14, 2.2.14.2).

use crate::header::HEADER_LEN;
use crate::reader::{at, put_utf16le, utf16_len, utf16le, Put, Reader};
use crate::{check_structure_size, DecodeError, FileId};

pub const REQUEST_SIZE: u16 = 57;
pub const RESPONSE_SIZE: u16 = 89;
/// Longest name accepted, in bytes of UTF-16 (32767 characters, as Windows).
pub const MAX_NAME: usize = 65534;
/// More create contexts than this is hostile (Windows clients send < 10).
pub const MAX_CONTEXTS: usize = 32;

/// CreateDisposition values (2.2.13).
pub mod disposition {
    pub const SUPERSEDE: u32 = 0;
    pub const OPEN: u32 = 1;
    pub const CREATE: u32 = 2;
    pub const OPEN_IF: u32 = 3;
    pub const OVERWRITE: u32 = 4;
    pub const OVERWRITE_IF: u32 = 5;
}

/// CreateOptions bits (2.2.13).
pub mod options {
    pub const DIRECTORY_FILE: u32 = 0x0000_0001;
    pub const WRITE_THROUGH: u32 = 0x0000_0002;
    pub const SEQUENTIAL_ONLY: u32 = 0x0000_0004;
    pub const NO_INTERMEDIATE_BUFFERING: u32 = 0x0000_0008;
    pub const SYNCHRONOUS_IO_ALERT: u32 = 0x0000_0010;
    pub const SYNCHRONOUS_IO_NONALERT: u32 = 0x0000_0020;
    pub const NON_DIRECTORY_FILE: u32 = 0x0000_0040;
    pub const CREATE_TREE_CONNECTION: u32 = 0x0000_0080;
    pub const DELETE_ON_CLOSE: u32 = 0x0000_1000;
    pub const OPEN_BY_FILE_ID: u32 = 0x0000_2000;
    pub const RESERVE_OPFILTER: u32 = 0x0010_0000;
    /// FILE_OPEN_REPARSE_POINT: open a symlink or other reparse point itself, not what it points at.
    pub const OPEN_REPARSE_POINT: u32 = 0x0020_0000;
}

/// ShareAccess bits (2.2.13).
pub mod share {
    pub const READ: u32 = 0x1;
    pub const WRITE: u32 = 0x2;
    pub const DELETE: u32 = 0x4;
}

/// Create context names (2.2.13.2).
pub mod ctx_name {
    pub const MAXIMAL_ACCESS: &[u8] = b"MxAc";
    pub const QUERY_ON_DISK_ID: &[u8] = b"QFid";
    pub const ALLOCATION_SIZE: &[u8] = b"AlSi";
    pub const TIMEWARP: &[u8] = b"TWrp";
    /// Extended attributes to set on the file (2.2.13.2.1).
    pub const EA_BUFFER: &[u8] = b"ExtA";
    /// SMB2_CREATE_SD_BUFFER (2.2.13.2.2): the new file's security descriptor.
    pub const SD_BUFFER: &[u8] = b"SecD";
    /// Durable handles (MS-SMB2 2.2.13.2.3, .4, .11, .12).
    pub const DURABLE_REQUEST: &[u8] = b"DHnQ";
    pub const DURABLE_RECONNECT: &[u8] = b"DHnC";
    pub const DURABLE_REQUEST_V2: &[u8] = b"DH2Q";
    pub const DURABLE_RECONNECT_V2: &[u8] = b"DH2C";
    /// Lease request (MS-SMB2 2.2.13.2.8, 2.2.13.2.10).
    pub const LEASE: &[u8] = b"RqLs";
}

/// One create context: name and data borrow the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CreateContext<'a> {
    pub name: &'a [u8],
    pub data: &'a [u8],
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateRequest<'a> {
    pub oplock_level: u8,
    pub impersonation_level: u32,
    pub desired_access: u32,
    pub file_attributes: u32,
    pub share_access: u32,
    pub disposition: u32,
    pub options: u32,
    /// The name as sent (no separator processing).
    pub name: String,
    pub contexts: Vec<CreateContext<'a>>,
}

impl<'a> CreateRequest<'a> {
    /// `msg` is the element from the SMB2 header on (offsets are header-relative).
    pub fn decode(msg: &'a [u8]) -> Result<Self, DecodeError> {
        let body = msg.get(HEADER_LEN..).ok_or(DecodeError::Truncated)?;
        check_structure_size(body, REQUEST_SIZE)?;
        let mut r = Reader::new(body);
        r.skip(3)?; // StructureSize, SecurityFlags
        let oplock_level = r.u8()?;
        let impersonation_level = r.u32()?;
        r.skip(16)?; // SmbCreateFlags, Reserved
        let desired_access = r.u32()?;
        let file_attributes = r.u32()?;
        let share_access = r.u32()?;
        let disposition = r.u32()?;
        let options = r.u32()?;
        let name_off = r.u16()? as usize;
        let name_len = r.u16()? as usize;
        let ctx_off = r.u32()? as usize;
        let ctx_len = r.u32()? as usize;
        //= MS-SMB2 3.3.5.9
        //# The server MUST fail the request with STATUS_INVALID_PARAMETER
        //# [...] If NameLength is not a multiple of 2. If NameOffset is less
        //# than the Buffer field offset.
        if name_len > 0 && name_off < HEADER_LEN + 56 {
            return Err(DecodeError::OutOfBounds);
        }
        if !name_len.is_multiple_of(2) {
            return Err(DecodeError::Invalid);
        }
        if name_len > MAX_NAME {
            return Err(DecodeError::TooLong);
        }
        let name = utf16le(at(msg, name_off, name_len)?)?;
        let contexts = if ctx_len == 0 { Vec::new() } else { decode_contexts(at(msg, ctx_off, ctx_len)?)? };
        Ok(CreateRequest {
            oplock_level,
            impersonation_level,
            desired_access,
            file_attributes,
            share_access,
            disposition,
            options,
            name,
            contexts,
        })
    }

    pub fn context(&self, name: &[u8]) -> Option<&CreateContext<'a>> {
        self.contexts.iter().find(|c| c.name == name)
    }

    /// Build the request body (for our client and tests); `out` starts at
    /// the SMB2 header of this element.
    pub fn encode(&self, out: &mut Vec<u8>, header_start: usize) {
        out.u16(REQUEST_SIZE);
        out.u8(0);
        out.u8(self.oplock_level);
        out.u32(self.impersonation_level);
        out.zeros(16);
        out.u32(self.desired_access);
        out.u32(self.file_attributes);
        out.u32(self.share_access);
        out.u32(self.disposition);
        out.u32(self.options);
        let name_pos = out.len();
        out.u16(0);
        out.u16(utf16_len(&self.name) as u16);
        let ctx_pos = out.len();
        out.u32(0);
        out.u32(0);
        out.set_u16(name_pos, (out.len() - header_start) as u16);
        put_utf16le(out, &self.name);
        if self.name.is_empty() {
            out.u8(0); // the variable part is never empty on the wire
        }
        if !self.contexts.is_empty() {
            pad8(out, header_start);
            let start = out.len();
            let list: Vec<(&[u8], &[u8])> = self.contexts.iter().map(|c| (c.name, c.data)).collect();
            encode_contexts(out, &list);
            out.set_u32(ctx_pos, (start - header_start) as u32);
            out.set_u32(ctx_pos + 4, (out.len() - start) as u32);
        }
    }
}

/// Walk the context chain (2.2.13.2): each Next is relative to the
/// context's start and 8-byte aligned; name and data lie inside the
/// context; the last one has Next 0.
pub fn decode_contexts(buf: &[u8]) -> Result<Vec<CreateContext<'_>>, DecodeError> {
    let mut out = Vec::new();
    let mut rest = buf;
    loop {
        if out.len() == MAX_CONTEXTS {
            return Err(DecodeError::TooLong);
        }
        let mut r = Reader::new(rest);
        let next = r.u32()? as usize;
        let name_off = r.u16()? as usize;
        let name_len = r.u16()? as usize;
        r.skip(2)?;
        let data_off = r.u16()? as usize;
        let data_len = r.u32()? as usize;
        let this = if next == 0 { rest } else { rest.get(..next).ok_or(DecodeError::OutOfBounds)? };
        // Names are at least 4 bytes (2.2.13.2; Windows fails shorter ones).
        if !next.is_multiple_of(8) || (next != 0 && next < 16) || name_len < 4 || name_off < 16 {
            return Err(DecodeError::Invalid);
        }
        if data_len > 0 && data_off < name_off + name_len {
            return Err(DecodeError::Invalid);
        }
        let name = at(this, name_off, name_len)?;
        let data = at(this, data_off, data_len)?;
        out.push(CreateContext { name, data });
        if next == 0 {
            return Ok(out);
        }
        rest = rest.get(next..).ok_or(DecodeError::OutOfBounds)?;
    }
}

/// Append a context chain of (name, data) pairs, 8-byte aligned relative
/// to the first context (name at 16, data at the next multiple of 8).
pub fn encode_contexts(out: &mut Vec<u8>, contexts: &[(&[u8], &[u8])]) {
    let base = out.len();
    for (i, (name, data)) in contexts.iter().enumerate() {
        let start = out.len();
        out.u32(0);
        out.u16(16);
        out.u16(name.len() as u16);
        out.u16(0);
        let data_off = if data.is_empty() { 0 } else { (16 + name.len() + 7) & !7 };
        out.u16(data_off as u16);
        out.u32(data.len() as u32);
        out.bytes(name);
        if !data.is_empty() {
            out.zeros(data_off - 16 - name.len());
            out.bytes(data);
        }
        if i + 1 < contexts.len() {
            let pad = (8 - (out.len() - base) % 8) % 8;
            out.zeros(pad);
            let next = (out.len() - start) as u32;
            out.set_u32(start, next);
        }
    }
}

/// MxAc response data (2.2.14.2.5): QueryStatus and MaximalAccess.
pub fn maximal_access_data(status: u32, access: u32) -> [u8; 8] {
    let mut d = [0u8; 8];
    d[..4].copy_from_slice(&status.to_le_bytes());
    d[4..].copy_from_slice(&access.to_le_bytes());
    d
}

/// QFid response data (2.2.14.2.9): DiskFileId then VolumeId.
pub fn on_disk_id_data(file_id: u64, volume_id: u64) -> [u8; 32] {
    let mut d = [0u8; 32];
    d[..8].copy_from_slice(&file_id.to_le_bytes());
    d[16..24].copy_from_slice(&volume_id.to_le_bytes());
    d
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CreateResponse {
    pub oplock_level: u8,
    pub create_action: u32,
    pub creation_time: u64,
    pub last_access_time: u64,
    pub last_write_time: u64,
    pub change_time: u64,
    pub allocation_size: u64,
    pub end_of_file: u64,
    pub file_attributes: u32,
    pub file_id: FileId,
}

impl CreateResponse {
    /// Append the body and `contexts`; `out` starts at the SMB2 header
    /// (`header_start`), so offsets are header-relative.
    pub fn encode(&self, out: &mut Vec<u8>, header_start: usize, contexts: &[(&[u8], &[u8])]) {
        out.u16(RESPONSE_SIZE);
        out.u8(self.oplock_level);
        out.u8(0); // Flags
        out.u32(self.create_action);
        out.u64(self.creation_time);
        out.u64(self.last_access_time);
        out.u64(self.last_write_time);
        out.u64(self.change_time);
        out.u64(self.allocation_size);
        out.u64(self.end_of_file);
        out.u32(self.file_attributes);
        out.u32(0);
        self.file_id.encode(out);
        let ctx_pos = out.len();
        out.u32(0);
        out.u32(0);
        if contexts.is_empty() {
            out.u8(0); // the variable part is never empty on the wire
            return;
        }
        let start = out.len(); // header + 152: 8-byte aligned
        encode_contexts(out, contexts);
        out.set_u32(ctx_pos, (start - header_start) as u32);
        out.set_u32(ctx_pos + 4, (out.len() - start) as u32);
    }

    /// Decode a response element (for our client and tests); returns the
    /// contexts too.
    pub fn decode(msg: &[u8]) -> Result<(CreateResponse, Vec<CreateContext<'_>>), DecodeError> {
        let body = msg.get(HEADER_LEN..).ok_or(DecodeError::Truncated)?;
        check_structure_size(body, RESPONSE_SIZE)?;
        let mut r = Reader::new(body);
        r.skip(2)?;
        let oplock_level = r.u8()?;
        r.skip(1)?;
        let resp = CreateResponse {
            oplock_level,
            create_action: r.u32()?,
            creation_time: r.u64()?,
            last_access_time: r.u64()?,
            last_write_time: r.u64()?,
            change_time: r.u64()?,
            allocation_size: r.u64()?,
            end_of_file: r.u64()?,
            file_attributes: {
                let a = r.u32()?;
                r.skip(4)?;
                a
            },
            file_id: FileId::decode(&mut r)?,
        };
        let off = r.u32()? as usize;
        let len = r.u32()? as usize;
        let contexts = if len == 0 { Vec::new() } else { decode_contexts(at(msg, off, len)?)? };
        Ok((resp, contexts))
    }
}

fn pad8(out: &mut Vec<u8>, start: usize) {
    let pad = (8 - (out.len() - start) % 8) % 8;
    out.zeros(pad);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::{Command, Header};

    fn element(req: &CreateRequest<'_>) -> Vec<u8> {
        let mut m = Vec::new();
        Header { command: Command::CREATE.0, ..Default::default() }.encode(&mut m);
        req.encode(&mut m, 0);
        m
    }

    fn sample<'a>(contexts: Vec<CreateContext<'a>>) -> CreateRequest<'a> {
        CreateRequest {
            oplock_level: 0,
            impersonation_level: 2,
            desired_access: 0x0012_0089,
            file_attributes: 0x80,
            share_access: share::READ | share::WRITE,
            disposition: disposition::OPEN_IF,
            options: options::NON_DIRECTORY_FILE,
            name: "dir\\f\u{e9}.txt".into(),
            contexts,
        }
    }

    #[test]
    fn request_round_trip() {
        let ts = [1u8; 8];
        let ctxs = vec![
            CreateContext { name: ctx_name::MAXIMAL_ACCESS, data: &[] },
            CreateContext { name: b"DH2Q", data: &[7; 32] },
            CreateContext { name: ctx_name::QUERY_ON_DISK_ID, data: &ts },
        ];
        let req = sample(ctxs);
        let m = element(&req);
        assert_eq!(CreateRequest::decode(&m).unwrap(), req);
        let d = CreateRequest::decode(&m).unwrap();
        assert_eq!(d.context(b"DH2Q").unwrap().data, &[7; 32]);
        assert!(d.context(b"RqLs").is_none());

        let plain = sample(vec![]);
        assert_eq!(CreateRequest::decode(&element(&plain)).unwrap(), plain);
        let root = CreateRequest { name: String::new(), ..sample(vec![]) };
        assert_eq!(CreateRequest::decode(&element(&root)).unwrap(), root);
    }

    /// A CREATE request as Windows sends it ("test.dat", MS-SMB2 4.6 sample
    /// fields), built by hand.
    #[test]
    fn decodes_hand_built_request() {
        let mut m = Vec::new();
        Header { command: Command::CREATE.0, ..Default::default() }.encode(&mut m);
        let body: [u32; 6] = [0x0012_019F, 0x80, 0x7, 0x3, 0x40, 0];
        m.extend_from_slice(&[0x39, 0, 0, 9, 2, 0, 0, 0]);
        m.extend_from_slice(&[0; 16]);
        for v in &body[..5] {
            m.extend_from_slice(&v.to_le_bytes());
        }
        m.extend_from_slice(&0x78u16.to_le_bytes());
        m.extend_from_slice(&16u16.to_le_bytes());
        m.extend_from_slice(&[0; 8]);
        for c in "test.dat".encode_utf16() {
            m.extend_from_slice(&c.to_le_bytes());
        }
        let r = CreateRequest::decode(&m).unwrap();
        assert_eq!(r.name, "test.dat");
        assert_eq!(r.oplock_level, 9);
        assert_eq!(r.desired_access, 0x0012_019F);
        assert_eq!(r.share_access, 7);
        assert_eq!(r.disposition, 3);
        assert_eq!(r.options, 0x40);
        assert!(r.contexts.is_empty());
    }

    #[test]
    fn hostile_requests() {
        let m = element(&sample(vec![]));
        // Name running past the element.
        let mut bad = m.clone();
        bad[HEADER_LEN + 46..HEADER_LEN + 48].copy_from_slice(&200u16.to_le_bytes());
        assert_eq!(CreateRequest::decode(&bad), Err(DecodeError::OutOfBounds));
        // Odd name length.
        let mut bad = m.clone();
        bad[HEADER_LEN + 46..HEADER_LEN + 48].copy_from_slice(&3u16.to_le_bytes());
        assert_eq!(CreateRequest::decode(&bad), Err(DecodeError::Invalid));
        // Name offset inside the fixed part.
        let mut bad = m.clone();
        bad[HEADER_LEN + 44..HEADER_LEN + 46].copy_from_slice(&64u16.to_le_bytes());
        assert_eq!(CreateRequest::decode(&bad), Err(DecodeError::OutOfBounds));
        // Context offset/length outside.
        let mut bad = m.clone();
        bad[HEADER_LEN + 48..HEADER_LEN + 52].copy_from_slice(&u32::MAX.to_le_bytes());
        bad[HEADER_LEN + 52..HEADER_LEN + 56].copy_from_slice(&16u32.to_le_bytes());
        assert_eq!(CreateRequest::decode(&bad), Err(DecodeError::OutOfBounds));
        // Unpaired surrogate in the name.
        let mut bad = m.clone();
        let at = HEADER_LEN + 56;
        bad[at..at + 2].copy_from_slice(&0xD800u16.to_le_bytes());
        assert_eq!(CreateRequest::decode(&bad), Err(DecodeError::BadString));
        // Truncated fixed part.
        assert!(CreateRequest::decode(&m[..HEADER_LEN + 40]).is_err());
    }

    #[test]
    fn hostile_contexts() {
        let mut good = Vec::new();
        encode_contexts(&mut good, &[(b"MxAc", &[]), (b"QFid", &[])]);
        assert_eq!(decode_contexts(&good).unwrap().len(), 2);
        // Next not aligned.
        let mut bad = good.clone();
        bad[0] = 17;
        assert!(decode_contexts(&bad).is_err());
        // Next pointing past the buffer.
        let mut bad = good.clone();
        bad[0..4].copy_from_slice(&4096u32.to_le_bytes());
        assert_eq!(decode_contexts(&bad), Err(DecodeError::OutOfBounds));
        // Name outside its context.
        let mut bad = good.clone();
        bad[6..8].copy_from_slice(&100u16.to_le_bytes());
        assert_eq!(decode_contexts(&bad), Err(DecodeError::OutOfBounds));
        // Data length past the end.
        let mut bad = good.clone();
        let last = 24;
        bad[last + 10..last + 12].copy_from_slice(&24u16.to_le_bytes());
        bad[last + 12..last + 16].copy_from_slice(&1000u32.to_le_bytes());
        assert_eq!(decode_contexts(&bad), Err(DecodeError::OutOfBounds));
        // A self-loop cannot happen (Next 0 ends), but too many contexts is refused.
        let many: Vec<(&[u8], &[u8])> = (0..=MAX_CONTEXTS).map(|_| (&b"XXXX"[..], &[][..])).collect();
        let mut v = Vec::new();
        encode_contexts(&mut v, &many);
        assert_eq!(decode_contexts(&v), Err(DecodeError::TooLong));
        assert_eq!(decode_contexts(&[0; 8]), Err(DecodeError::Truncated));
        // Names shorter than 4 bytes are invalid; longer ones are fine.
        for (name, ok) in [(&b"x"[..], false), (b"xxx", false), (b"xxxx", true), (b"xxxxxxxxxxxxxxxxx", true)] {
            let mut v = Vec::new();
            encode_contexts(&mut v, &[(name, &[])]);
            assert_eq!(decode_contexts(&v).is_ok(), ok, "{name:?}");
        }
    }

    #[test]
    fn response_round_trip() {
        let resp = CreateResponse {
            oplock_level: 0,
            create_action: 2,
            creation_time: 1,
            last_access_time: 2,
            last_write_time: 3,
            change_time: 4,
            allocation_size: 4096,
            end_of_file: 10,
            file_attributes: 0x20,
            file_id: FileId { persistent: 5, volatile: 5 },
        };
        let mx = maximal_access_data(0, 0x1F01FF);
        let qfid = on_disk_id_data(77, 9);
        let mut m = vec![0u8; HEADER_LEN];
        resp.encode(&mut m, 0, &[(b"MxAc", &mx), (b"QFid", &qfid)]);
        assert_eq!(u32::from_le_bytes(m[HEADER_LEN + 80..HEADER_LEN + 84].try_into().unwrap()), 152);
        let (d, ctxs) = CreateResponse::decode(&m).unwrap();
        assert_eq!(d, resp);
        assert_eq!(ctxs.len(), 2);
        assert_eq!(ctxs[0].name, b"MxAc");
        assert_eq!(ctxs[0].data, &mx);
        assert_eq!(ctxs[1].data, &qfid);
        assert_eq!(&qfid[..8], &77u64.to_le_bytes());

        let mut m = vec![0u8; HEADER_LEN];
        resp.encode(&mut m, 0, &[]);
        assert_eq!(m.len(), HEADER_LEN + 89);
        assert_eq!(CreateResponse::decode(&m).unwrap().1, vec![]);
    }
}
