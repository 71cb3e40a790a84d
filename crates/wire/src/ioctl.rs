//! IOCTL request and response (MS-SMB2 2.2.31, 2.2.32) and the FSCTL
//! structures the server answers: VALIDATE_NEGOTIATE_INFO (2.2.31.4,
//! 2.2.32.6), NETWORK_INTERFACE_INFO (2.2.32.5), SRV_REQUEST_RESUME_KEY
//! (2.2.32.3), SRV_COPYCHUNK_COPY / SRV_COPYCHUNK_RESPONSE (2.2.31.1,
//! 2.2.32.1).

use crate::reader::{at, Put, Reader};
use crate::{check_structure_size, DecodeError, Dialect, FileId};
use std::net::IpAddr;

pub const REQUEST_SIZE: u16 = 57;
pub const RESPONSE_SIZE: u16 = 49;
/// Fixed part of the response; the buffers follow at header + 64 + 48.
pub const RESPONSE_FIXED: usize = 48;

/// SMB2_0_IOCTL_IS_FSCTL (2.2.31).
pub const IS_FSCTL: u32 = 1;

/// Control codes (MS-SMB2 2.2.31, MS-FSCC 2.3).
pub mod fsctl {
    pub const DFS_GET_REFERRALS: u32 = 0x0006_0194;
    pub const DFS_GET_REFERRALS_EX: u32 = 0x0006_01B0;
    pub const PIPE_TRANSCEIVE: u32 = 0x0011_C017;
    pub const SRV_COPYCHUNK: u32 = 0x0014_40F2;
    pub const SRV_COPYCHUNK_WRITE: u32 = 0x0014_80F2;
    pub const SRV_REQUEST_RESUME_KEY: u32 = 0x0014_0078;
    pub const QUERY_NETWORK_INTERFACE_INFO: u32 = 0x0014_01FC;
    pub const LMR_REQUEST_RESILIENCY: u32 = 0x0014_01D4;
    pub const VALIDATE_NEGOTIATE_INFO: u32 = 0x0014_0204;
    pub const GET_COMPRESSION: u32 = 0x0009_003C;
    pub const SET_COMPRESSION: u32 = 0x0009_C040;
    pub const GET_REPARSE_POINT: u32 = 0x0009_00A8;
    pub const SET_REPARSE_POINT: u32 = 0x0009_00A4;
    pub const DELETE_REPARSE_POINT: u32 = 0x0009_00AC;
    pub const QUERY_ALLOCATED_RANGES: u32 = 0x0009_40CF;
    pub const CREATE_OR_GET_OBJECT_ID: u32 = 0x0009_00C0;
    pub const GET_OBJECT_ID: u32 = 0x0009_009C;
    pub const SET_SPARSE: u32 = 0x0009_00C4;
    pub const SET_ZERO_DATA: u32 = 0x0009_80C8;
    pub const DUPLICATE_EXTENTS_TO_FILE: u32 = 0x0009_8344;
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IoctlRequest<'a> {
    pub ctl_code: u32,
    pub file_id: FileId,
    pub input: &'a [u8],
    pub max_input_response: u32,
    /// OutputCount: a buffer the client sends along (unused by FSCTLs
    /// served here, but bounds-checked and charged).
    pub output_count: u32,
    pub max_output_response: u32,
    pub flags: u32,
}

impl<'a> IoctlRequest<'a> {
    /// `msg` is the element from the SMB2 header on; Input/Output offsets
    /// are header-relative and must lie inside it.
    pub fn decode(msg: &'a [u8]) -> Result<IoctlRequest<'a>, DecodeError> {
        let body = msg.get(crate::header::HEADER_LEN..).ok_or(DecodeError::Truncated)?;
        check_structure_size(body, REQUEST_SIZE)?;
        let mut r = Reader::new(body);
        r.skip(4)?;
        let ctl_code = r.u32()?;
        let file_id = FileId::decode(&mut r)?;
        let input_offset = r.u32()? as usize;
        let input_count = r.u32()? as usize;
        let max_input_response = r.u32()?;
        let output_offset = r.u32()? as usize;
        let output_count = r.u32()?;
        let max_output_response = r.u32()?;
        let flags = r.u32()?;
        let input = at(msg, input_offset, input_count)?;
        at(msg, output_offset, output_count as usize)?;
        Ok(IoctlRequest { ctl_code, file_id, input, max_input_response, output_count, max_output_response, flags })
    }

    /// The request body (tests, client). Input goes right after the fixed
    /// part, at header-relative offset 120.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.u16(REQUEST_SIZE);
        out.u16(0);
        out.u32(self.ctl_code);
        self.file_id.encode(out);
        out.u32(if self.input.is_empty() { 0 } else { 120 });
        out.u32(self.input.len() as u32);
        out.u32(self.max_input_response);
        out.u32(0);
        out.u32(0);
        out.u32(self.max_output_response);
        out.u32(self.flags);
        out.u32(0);
        out.bytes(self.input);
    }
}

/// Append an IOCTL response body (2.2.32) to `out`, whose SMB2 header
/// starts at `header_start`. InputCount is 0 (no FSCTL here echoes its
/// input); both offsets point just past the fixed part, as Windows and
/// Samba set them. An empty output still carries one pad byte (the
/// StructureSize promises a variable part).
pub fn encode_response(out: &mut Vec<u8>, header_start: usize, ctl_code: u32, file_id: FileId, output: &[u8]) {
    let buf_off = (out.len() - header_start + RESPONSE_FIXED) as u32;
    out.u16(RESPONSE_SIZE);
    out.u16(0);
    out.u32(ctl_code);
    file_id.encode(out);
    out.u32(buf_off);
    out.u32(0);
    out.u32(buf_off);
    out.u32(output.len() as u32);
    out.u32(0);
    out.u32(0);
    if output.is_empty() {
        out.u8(0);
    } else {
        out.bytes(output);
    }
}

/// The output buffer of a response element (2.2.32; for our client and
/// tests): OutputOffset and OutputCount must lie inside `msg`.
pub fn decode_response(msg: &[u8]) -> Result<&[u8], DecodeError> {
    let body = msg.get(crate::header::HEADER_LEN..).ok_or(DecodeError::Truncated)?;
    check_structure_size(body, RESPONSE_SIZE)?;
    let mut r = Reader::new(body);
    r.skip(4 + 4 + 16 + 4 + 4)?;
    let off = r.u32()? as usize;
    let len = r.u32()? as usize;
    at(msg, off, len)
}

/// VALIDATE_NEGOTIATE_INFO request (2.2.31.4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidateNegotiateRequest {
    pub capabilities: u32,
    pub guid: [u8; 16],
    pub security_mode: u16,
    pub dialects: Vec<Dialect>,
}

impl ValidateNegotiateRequest {
    /// At most 64 dialects (as NEGOTIATE); DialectCount past the input is
    /// an error.
    pub fn decode(input: &[u8]) -> Result<ValidateNegotiateRequest, DecodeError> {
        let mut r = Reader::new(input);
        let capabilities = r.u32()?;
        let guid = r.array()?;
        let security_mode = r.u16()?;
        let count = r.u16()? as usize;
        if count > crate::negotiate::MAX_DIALECTS {
            return Err(DecodeError::TooLong);
        }
        let mut d = r.sub(count * 2)?;
        let dialects = (0..count).map(|_| d.u16().map(Dialect)).collect::<Result<_, _>>()?;
        Ok(ValidateNegotiateRequest { capabilities, guid, security_mode, dialects })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.u32(self.capabilities);
        out.bytes(&self.guid);
        out.u16(self.security_mode);
        out.u16(self.dialects.len() as u16);
        for d in &self.dialects {
            out.u16(d.0);
        }
    }
}

/// VALIDATE_NEGOTIATE_INFO response (2.2.32.6), 24 bytes.
pub const VALIDATE_NEGOTIATE_RESPONSE_LEN: usize = 24;

pub fn encode_validate_negotiate_response(out: &mut Vec<u8>, capabilities: u32, guid: &[u8; 16], security_mode: u16, dialect: Dialect) {
    out.u32(capabilities);
    out.bytes(guid);
    out.u16(security_mode);
    out.u16(dialect.0);
}

/// One NETWORK_INTERFACE_INFO entry (2.2.32.5) with its 128-byte
/// SOCKADDR_STORAGE (2.2.32.5.1): 152 bytes.
pub const NETWORK_INTERFACE_INFO_LEN: usize = 152;

/// A single (last) entry: Next 0, port 0.
pub fn encode_network_interface(out: &mut Vec<u8>, if_index: u32, capability: u32, link_speed: u64, addr: IpAddr) {
    let start = out.len();
    out.u32(0);
    out.u32(if_index);
    out.u32(capability);
    out.u32(0);
    out.u64(link_speed);
    match addr {
        IpAddr::V4(a) => {
            out.u16(0x0002);
            out.u16(0);
            out.bytes(&a.octets());
        }
        IpAddr::V6(a) => {
            out.u16(0x0017);
            out.u16(0);
            out.u32(0);
            out.bytes(&a.octets());
            out.u32(0);
        }
    }
    out.resize(start + NETWORK_INTERFACE_INFO_LEN, 0);
}

/// SRV_REQUEST_RESUME_KEY response (2.2.32.3): the key, ContextLength 0
/// and 4 zero bytes of Context, 32 bytes as Windows sends it (Samba's
/// client decodes exactly that).
pub const RESUME_KEY_RESPONSE_LEN: usize = 32;

pub fn encode_resume_key(out: &mut Vec<u8>, key: &[u8; 24]) {
    out.bytes(key);
    out.u32(0);
    out.u32(0);
}

/// One SRV_COPYCHUNK (2.2.31.1.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk {
    pub source_offset: u64,
    pub target_offset: u64,
    pub length: u32,
}

/// SRV_COPYCHUNK_COPY (2.2.31.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopyChunkRequest {
    pub source_key: [u8; 24],
    pub chunks: Vec<Chunk>,
}

/// Fixed part of SRV_COPYCHUNK_COPY.
pub const COPYCHUNK_FIXED: usize = 32;
const CHUNK_LEN: usize = 24;

impl CopyChunkRequest {
    /// Chunks past the input are an error; more than `max_chunks` is
    /// [`DecodeError::TooLong`] (checked before anything is allocated).
    pub fn decode(input: &[u8], max_chunks: usize) -> Result<CopyChunkRequest, DecodeError> {
        let mut r = Reader::new(input);
        let source_key = r.array()?;
        let count = r.u32()? as usize;
        r.skip(4)?;
        if count > max_chunks {
            return Err(DecodeError::TooLong);
        }
        let mut c = r.sub(count.checked_mul(CHUNK_LEN).ok_or(DecodeError::TooLong)?)?;
        let mut chunks = Vec::with_capacity(count);
        for _ in 0..count {
            let source_offset = c.u64()?;
            let target_offset = c.u64()?;
            let length = c.u32()?;
            c.skip(4)?;
            chunks.push(Chunk { source_offset, target_offset, length });
        }
        Ok(CopyChunkRequest { source_key, chunks })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.bytes(&self.source_key);
        out.u32(self.chunks.len() as u32);
        out.u32(0);
        for c in &self.chunks {
            out.u64(c.source_offset);
            out.u64(c.target_offset);
            out.u32(c.length);
            out.u32(0);
        }
    }
}

/// FILE_ALLOCATED_RANGE_BUFFER (MS-FSCC, FSCTL_QUERY_ALLOCATED_RANGES
/// request and reply), 16 bytes: a byte range of a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocatedRange {
    pub offset: u64,
    pub length: u64,
}

impl AllocatedRange {
    pub const LEN: usize = 16;

    /// The request's range. Bytes after the first 16 are ignored, as
    /// Windows ignores them (smbtorture sparse_qar_malformed); fewer are
    /// an error. Both fields are signed on the wire: a negative one is
    /// [`DecodeError::Invalid`].
    pub fn decode(input: &[u8]) -> Result<AllocatedRange, DecodeError> {
        let mut r = Reader::new(input);
        let (offset, length) = (non_negative(r.u64()?)?, non_negative(r.u64()?)?);
        Ok(AllocatedRange { offset, length })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.u64(self.offset);
        out.u64(self.length);
    }
}

/// A LARGE_INTEGER field that the spec says MUST be at least 0.
fn non_negative(v: u64) -> Result<u64, DecodeError> {
    if v > i64::MAX as u64 {
        return Err(DecodeError::Invalid);
    }
    Ok(v)
}

/// FILE_ZERO_DATA_INFORMATION (MS-FSCC 2.3.85, FSCTL_SET_ZERO_DATA
/// request), 16 bytes: FileOffset and BeyondFinalZero, each "MUST be
/// greater than or equal to 0". Trailing bytes are ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZeroData {
    pub file_offset: u64,
    pub beyond_final_zero: u64,
}

impl ZeroData {
    pub fn decode(input: &[u8]) -> Result<ZeroData, DecodeError> {
        let mut r = Reader::new(input);
        let (file_offset, beyond_final_zero) = (non_negative(r.u64()?)?, non_negative(r.u64()?)?);
        Ok(ZeroData { file_offset, beyond_final_zero })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.u64(self.file_offset);
        out.u64(self.beyond_final_zero);
    }
}

/// DUPLICATE_EXTENTS_DATA (MS-FSCC, FSCTL_DUPLICATE_EXTENTS_TO_FILE
/// request), 40 bytes: the source open's FileId (as SMB2 sends it), the
/// source and target offsets and the byte count, all signed on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DuplicateExtents {
    pub source: FileId,
    pub source_offset: u64,
    pub target_offset: u64,
    pub byte_count: u64,
}

impl DuplicateExtents {
    pub fn decode(input: &[u8]) -> Result<DuplicateExtents, DecodeError> {
        let mut r = Reader::new(input);
        let source = FileId::decode(&mut r)?;
        let source_offset = non_negative(r.u64()?)?;
        let target_offset = non_negative(r.u64()?)?;
        let byte_count = non_negative(r.u64()?)?;
        Ok(DuplicateExtents { source, source_offset, target_offset, byte_count })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        self.source.encode(out);
        out.u64(self.source_offset);
        out.u64(self.target_offset);
        out.u64(self.byte_count);
    }
}

/// SRV_COPYCHUNK_RESPONSE (2.2.32.1), 12 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyChunkResponse {
    pub chunks_written: u32,
    pub chunk_bytes_written: u32,
    pub total_bytes_written: u32,
}

pub const COPYCHUNK_RESPONSE_LEN: usize = 12;

impl CopyChunkResponse {
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.u32(self.chunks_written);
        out.u32(self.chunk_bytes_written);
        out.u32(self.total_bytes_written);
    }

    pub fn decode(b: &[u8]) -> Result<CopyChunkResponse, DecodeError> {
        let mut r = Reader::new(b);
        Ok(CopyChunkResponse { chunks_written: r.u32()?, chunk_bytes_written: r.u32()?, total_bytes_written: r.u32()? })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::HEADER_LEN;

    fn request_msg(input: &[u8]) -> Vec<u8> {
        let mut m = vec![0u8; HEADER_LEN];
        IoctlRequest {
            ctl_code: fsctl::PIPE_TRANSCEIVE,
            file_id: FileId { persistent: 1, volatile: 2 },
            input,
            max_input_response: 0,
            output_count: 0,
            max_output_response: 4280,
            flags: IS_FSCTL,
        }
        .encode(&mut m);
        m
    }

    #[test]
    fn request_round_trip() {
        let m = request_msg(b"dcerpc");
        let r = IoctlRequest::decode(&m).unwrap();
        assert_eq!(r.ctl_code, fsctl::PIPE_TRANSCEIVE);
        assert_eq!(r.file_id, FileId { persistent: 1, volatile: 2 });
        assert_eq!(r.input, b"dcerpc");
        assert_eq!((r.max_output_response, r.flags), (4280, IS_FSCTL));
        let empty = request_msg(&[]);
        assert_eq!(IoctlRequest::decode(&empty).unwrap().input, b"");
    }

    #[test]
    fn hostile_offsets() {
        let mut m = request_msg(b"abcd");
        // InputCount past the end.
        m[HEADER_LEN + 28..HEADER_LEN + 32].copy_from_slice(&5u32.to_le_bytes());
        assert_eq!(IoctlRequest::decode(&m), Err(DecodeError::OutOfBounds));
        // InputOffset huge.
        let mut m = request_msg(b"abcd");
        m[HEADER_LEN + 24..HEADER_LEN + 28].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(IoctlRequest::decode(&m), Err(DecodeError::OutOfBounds));
        // OutputCount past the end.
        let mut m = request_msg(b"abcd");
        m[HEADER_LEN + 36..HEADER_LEN + 40].copy_from_slice(&120u32.to_le_bytes());
        m[HEADER_LEN + 40..HEADER_LEN + 44].copy_from_slice(&100u32.to_le_bytes());
        assert_eq!(IoctlRequest::decode(&m), Err(DecodeError::OutOfBounds));
        // Truncated fixed part, wrong structure size.
        let m = request_msg(&[]);
        assert!(IoctlRequest::decode(&m[..HEADER_LEN + 40]).is_err());
        let mut m = request_msg(&[]);
        m[HEADER_LEN] = 56;
        assert_eq!(IoctlRequest::decode(&m), Err(DecodeError::BadStructureSize));
    }

    #[test]
    fn response_layout() {
        let mut out = vec![0u8; HEADER_LEN];
        encode_response(&mut out, 0, fsctl::VALIDATE_NEGOTIATE_INFO, FileId::RELATED, &[1, 2, 3]);
        assert_eq!(out.len(), HEADER_LEN + 48 + 3);
        assert_eq!(decode_response(&out).unwrap(), &[1, 2, 3]);
        let mut past = out.clone();
        past[HEADER_LEN + 36..HEADER_LEN + 40].copy_from_slice(&4u32.to_le_bytes());
        assert_eq!(decode_response(&past), Err(DecodeError::OutOfBounds));
        assert!(decode_response(&out[..HEADER_LEN + 40]).is_err());
        assert_eq!(&out[64..68], &[49, 0, 0, 0]);
        assert_eq!(&out[68..72], &0x0014_0204u32.to_le_bytes());
        assert_eq!(&out[88..92], &112u32.to_le_bytes()); // InputOffset
        assert_eq!(&out[92..96], &0u32.to_le_bytes());
        assert_eq!(&out[96..100], &112u32.to_le_bytes()); // OutputOffset
        assert_eq!(&out[100..104], &3u32.to_le_bytes());
        assert_eq!(&out[112..], &[1, 2, 3]);
        let mut out = vec![0u8; HEADER_LEN];
        encode_response(&mut out, 0, fsctl::SRV_COPYCHUNK, FileId::default(), &[]);
        assert_eq!(out.len(), HEADER_LEN + 49);
    }

    #[test]
    fn validate_negotiate() {
        let v = ValidateNegotiateRequest {
            capabilities: 0x7f,
            guid: [9; 16],
            security_mode: 1,
            dialects: vec![Dialect::SMB202, Dialect::SMB210, Dialect::SMB300],
        };
        let mut b = Vec::new();
        v.encode(&mut b);
        assert_eq!(b.len(), 24 + 6);
        assert_eq!(ValidateNegotiateRequest::decode(&b).unwrap(), v);
        assert_eq!(ValidateNegotiateRequest::decode(&b[..28]), Err(DecodeError::Truncated));
        b[22] = 200;
        assert_eq!(ValidateNegotiateRequest::decode(&b), Err(DecodeError::TooLong));
        let mut out = Vec::new();
        encode_validate_negotiate_response(&mut out, 0x44, &[7; 16], 1, Dialect::SMB302);
        assert_eq!(out.len(), VALIDATE_NEGOTIATE_RESPONSE_LEN);
        assert_eq!(&out[20..], &[1, 0, 0x02, 0x03]);
    }

    #[test]
    fn network_interface() {
        let mut out = Vec::new();
        encode_network_interface(&mut out, 1, 0, 10_000_000_000, "127.0.0.1".parse().unwrap());
        assert_eq!(out.len(), NETWORK_INTERFACE_INFO_LEN);
        assert_eq!(&out[..8], &[0, 0, 0, 0, 1, 0, 0, 0]);
        assert_eq!(&out[16..24], &10_000_000_000u64.to_le_bytes());
        assert_eq!(&out[24..32], &[2, 0, 0, 0, 127, 0, 0, 1]);
        let mut out = Vec::new();
        encode_network_interface(&mut out, 1, 0, 1, "::1".parse().unwrap());
        assert_eq!(out.len(), NETWORK_INTERFACE_INFO_LEN);
        assert_eq!(&out[24..26], &[0x17, 0]);
        assert_eq!(out[47], 1);
    }

    #[test]
    fn copychunk_round_trip_and_bounds() {
        let req = CopyChunkRequest {
            source_key: [3; 24],
            chunks: vec![
                Chunk { source_offset: 0, target_offset: 4096, length: 4096 },
                Chunk { source_offset: u64::MAX, target_offset: 1, length: u32::MAX },
            ],
        };
        let mut b = Vec::new();
        req.encode(&mut b);
        assert_eq!(b.len(), COPYCHUNK_FIXED + 48);
        assert_eq!(CopyChunkRequest::decode(&b, 256).unwrap(), req);
        assert_eq!(CopyChunkRequest::decode(&b, 1), Err(DecodeError::TooLong));
        assert_eq!(CopyChunkRequest::decode(&b[..b.len() - 1], 256), Err(DecodeError::Truncated));
        b[24..28].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(CopyChunkRequest::decode(&b, usize::MAX), Err(DecodeError::Truncated));
        let resp = CopyChunkResponse { chunks_written: 256, chunk_bytes_written: 1 << 20, total_bytes_written: 1 << 24 };
        let mut out = Vec::new();
        resp.encode(&mut out);
        assert_eq!(out.len(), COPYCHUNK_RESPONSE_LEN);
        assert_eq!(CopyChunkResponse::decode(&out).unwrap(), resp);
    }

    #[test]
    fn sparse_inputs() {
        // FILE_ALLOCATED_RANGE_BUFFER as smbtorture sends it: offset 4096, length 1024.
        let b = [0, 0x10, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0];
        let q = AllocatedRange::decode(&b).unwrap();
        assert_eq!(q, AllocatedRange { offset: 4096, length: 1024 });
        let mut out = Vec::new();
        q.encode(&mut out);
        assert_eq!(out, b);
        // Trailing bytes ignored, short input and negative fields refused.
        assert_eq!(AllocatedRange::decode(&[b, b].concat()).unwrap(), q);
        assert_eq!(AllocatedRange::decode(&b[..15]), Err(DecodeError::Truncated));
        let neg = [&b[..8], &u64::MAX.to_le_bytes()[..]].concat();
        assert_eq!(AllocatedRange::decode(&neg), Err(DecodeError::Invalid));

        let z = ZeroData { file_offset: 0, beyond_final_zero: 4096 };
        let mut out = Vec::new();
        z.encode(&mut out);
        assert_eq!(out, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0]);
        assert_eq!(ZeroData::decode(&out).unwrap(), z);
        assert_eq!(ZeroData::decode(&out[..8]), Err(DecodeError::Truncated));
        out[15] = 0x80;
        assert_eq!(ZeroData::decode(&out), Err(DecodeError::Invalid));

        let d = DuplicateExtents { source: FileId { persistent: 7, volatile: 9 }, source_offset: 0, target_offset: 65536, byte_count: 4096 };
        let mut out = Vec::new();
        d.encode(&mut out);
        assert_eq!(out.len(), 40);
        assert_eq!(&out[..16], &[7, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(DuplicateExtents::decode(&out).unwrap(), d);
        assert_eq!(DuplicateExtents::decode(&out[..39]), Err(DecodeError::Truncated));
    }
}
