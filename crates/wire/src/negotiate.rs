//! NEGOTIATE request and response, negotiate contexts (MS-SMB2 2.2.3, 2.2.4).

use crate::reader::{Put, Reader};
use crate::{check_structure_size, DecodeError, Dialect};

pub const REQUEST_SIZE: u16 = 36;
pub const RESPONSE_SIZE: u16 = 65;
/// More dialects or contexts than this is hostile (Windows sends 5 / 6).
pub const MAX_DIALECTS: usize = 64;
pub const MAX_CONTEXTS: usize = 32;

pub mod ctx {
    pub const PREAUTH_INTEGRITY: u16 = 1;
    pub const ENCRYPTION: u16 = 2;
    pub const COMPRESSION: u16 = 3;
    pub const NETNAME: u16 = 5;
    pub const TRANSPORT_CAPABILITIES: u16 = 6;
    pub const RDMA_TRANSFORM: u16 = 7;
    pub const SIGNING: u16 = 8;
}

pub const HASH_SHA512: u16 = 1;
/// SMB2_ACCEPT_TRANSPORT_LEVEL_SECURITY (2.2.3.1.5).
pub const ACCEPT_TRANSPORT_LEVEL_SECURITY: u32 = 1;

pub mod security_mode {
    pub const SIGNING_ENABLED: u16 = 1;
    pub const SIGNING_REQUIRED: u16 = 2;
}

pub mod caps {
    pub const DFS: u32 = 0x01;
    pub const LEASING: u32 = 0x02;
    pub const LARGE_MTU: u32 = 0x04;
    pub const MULTI_CHANNEL: u32 = 0x08;
    pub const PERSISTENT_HANDLES: u32 = 0x10;
    pub const DIRECTORY_LEASING: u32 = 0x20;
    pub const ENCRYPTION: u32 = 0x40;
    pub const NOTIFICATIONS: u32 = 0x80;
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NegotiateContext<'a> {
    pub kind: u16,
    pub data: &'a [u8],
}

#[derive(Clone, Debug)]
pub struct NegotiateRequest<'a> {
    pub dialects: Vec<Dialect>,
    pub security_mode: u16,
    pub capabilities: u32,
    pub client_guid: [u8; 16],
    pub contexts: Vec<NegotiateContext<'a>>,
}

impl<'a> NegotiateRequest<'a> {
    /// `msg` is the whole element from the SMB2 header on; offsets are header-relative.
    pub fn decode(msg: &'a [u8]) -> Result<Self, DecodeError> {
        let body = msg.get(crate::header::HEADER_LEN..).ok_or(DecodeError::Truncated)?;
        check_structure_size(body, REQUEST_SIZE)?;
        let mut r = Reader::new(body);
        r.skip(2)?;
        let count = r.u16()? as usize;
        let security_mode = r.u16()?;
        r.skip(2)?;
        let capabilities = r.u32()?;
        let client_guid = r.array()?;
        let ctx_offset = r.u32()? as usize;
        let ctx_count = r.u16()? as usize;
        r.skip(2)?;
        if count == 0 {
            return Err(DecodeError::Invalid);
        }
        if count > MAX_DIALECTS {
            return Err(DecodeError::TooLong);
        }
        let mut d = r.sub(count * 2)?;
        let dialects = (0..count).map(|_| d.u16().map(Dialect)).collect::<Result<Vec<_>, _>>()?;
        let mut contexts = Vec::new();
        if dialects.contains(&Dialect::SMB311) && ctx_count > 0 {
            if ctx_count > MAX_CONTEXTS {
                return Err(DecodeError::TooLong);
            }
            let tail = msg.get(ctx_offset..).ok_or(DecodeError::OutOfBounds)?;
            contexts = decode_contexts(tail, ctx_count)?;
        }
        Ok(NegotiateRequest { dialects, security_mode, capabilities, client_guid, contexts })
    }

    pub fn context(&self, kind: u16) -> Option<&[u8]> {
        self.contexts.iter().find(|c| c.kind == kind).map(|c| c.data)
    }
}

/// Contexts are 8-byte aligned relative to the first one (2.2.3.1).
pub fn decode_contexts(buf: &[u8], count: usize) -> Result<Vec<NegotiateContext<'_>>, DecodeError> {
    let mut r = Reader::new(buf);
    let mut out = Vec::with_capacity(count.min(MAX_CONTEXTS));
    for i in 0..count {
        if i > 0 {
            let pad = (8 - r.pos() % 8) % 8;
            r.skip(pad)?;
        }
        let kind = r.u16()?;
        let len = r.u16()? as usize;
        r.skip(4)?;
        let data = r.take(len)?;
        out.push(NegotiateContext { kind, data });
    }
    Ok(out)
}

/// List of u16 ids with a u16 count in front (ciphers, signing algorithms).
pub fn decode_id_list(data: &[u8]) -> Result<Vec<u16>, DecodeError> {
    let mut r = Reader::new(data);
    let n = r.u16()? as usize;
    if n == 0 {
        return Err(DecodeError::Invalid);
    }
    (0..n).map(|_| r.u16()).collect()
}

/// PREAUTH_INTEGRITY_CAPABILITIES: hash algorithm ids (salt ignored).
pub fn decode_preauth(data: &[u8]) -> Result<Vec<u16>, DecodeError> {
    let mut r = Reader::new(data);
    let n = r.u16()? as usize;
    let salt = r.u16()? as usize;
    if n == 0 {
        return Err(DecodeError::Invalid);
    }
    let ids = (0..n).map(|_| r.u16()).collect::<Result<Vec<_>, _>>()?;
    r.skip(salt)?;
    Ok(ids)
}

pub fn decode_transport_caps(data: &[u8]) -> Result<u32, DecodeError> {
    Reader::new(data).u32()
}

pub struct NegotiateResponse<'a> {
    pub security_mode: u16,
    pub dialect: Dialect,
    pub server_guid: [u8; 16],
    pub capabilities: u32,
    pub max_transact: u32,
    pub max_read: u32,
    pub max_write: u32,
    pub system_time: u64,
    pub start_time: u64,
    pub security_buffer: &'a [u8],
    /// (kind, data) pairs, only for 3.1.1.
    pub contexts: Vec<(u16, Vec<u8>)>,
}

impl NegotiateResponse<'_> {
    /// Append the body; `out` starts at the SMB2 header (offsets are header-relative).
    pub fn encode(&self, out: &mut Vec<u8>, header_start: usize) {
        let base = out.len();
        out.u16(RESPONSE_SIZE);
        out.u16(self.security_mode);
        out.u16(self.dialect.0);
        out.u16(if self.dialect == Dialect::SMB311 { self.contexts.len() as u16 } else { 0 });
        out.bytes(&self.server_guid);
        out.u32(self.capabilities);
        out.u32(self.max_transact);
        out.u32(self.max_read);
        out.u32(self.max_write);
        out.u64(self.system_time);
        out.u64(self.start_time);
        let sec_off_pos = out.len();
        out.u16(0);
        out.u16(self.security_buffer.len() as u16);
        let ctx_off_pos = out.len();
        out.u32(0);
        let sec_off = out.len() - header_start;
        out.set_u16(sec_off_pos, sec_off as u16);
        out.bytes(self.security_buffer);
        if self.dialect == Dialect::SMB311 && !self.contexts.is_empty() {
            pad8(out, header_start);
            out.set_u32(ctx_off_pos, (out.len() - header_start) as u32);
            for (i, (kind, data)) in self.contexts.iter().enumerate() {
                if i > 0 {
                    pad8(out, header_start);
                }
                out.u16(*kind);
                out.u16(data.len() as u16);
                out.u32(0);
                out.bytes(data);
            }
        } else if out.len() == base + 64 {
            out.u8(0); // the variable part is never empty on the wire
        }
    }
}

fn pad8(out: &mut Vec<u8>, start: usize) {
    let pad = (8 - (out.len() - start) % 8) % 8;
    out.zeros(pad);
}

/// Build a NEGOTIATE request body (used by our client and tests).
pub fn encode_request(out: &mut Vec<u8>, header_start: usize, dialects: &[Dialect], security_mode: u16, capabilities: u32, guid: [u8; 16], contexts: &[(u16, Vec<u8>)]) {
    out.u16(REQUEST_SIZE);
    out.u16(dialects.len() as u16);
    out.u16(security_mode);
    out.u16(0);
    out.u32(capabilities);
    out.bytes(&guid);
    let off_pos = out.len();
    out.u32(0);
    out.u16(contexts.len() as u16);
    out.u16(0);
    for d in dialects {
        out.u16(d.0);
    }
    if !contexts.is_empty() {
        pad8(out, header_start);
        out.set_u32(off_pos, (out.len() - header_start) as u32);
        for (i, (kind, data)) in contexts.iter().enumerate() {
            if i > 0 {
                pad8(out, header_start);
            }
            out.u16(*kind);
            out.u16(data.len() as u16);
            out.u32(0);
            out.bytes(data);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::{Command, Header};

    fn request(contexts: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut m = Vec::new();
        Header { command: Command::NEGOTIATE.0, ..Default::default() }.encode(&mut m);
        encode_request(&mut m, 0, &[Dialect::SMB300, Dialect::SMB311], 1, caps::ENCRYPTION, [9; 16], contexts);
        m
    }

    #[test]
    fn round_trip_with_contexts() {
        let preauth = vec![1, 0, 32, 0, 1, 0].into_iter().chain([7u8; 32]).collect::<Vec<u8>>();
        let enc = vec![2, 0, 2, 0, 1, 0];
        let m = request(&[(ctx::PREAUTH_INTEGRITY, preauth), (ctx::ENCRYPTION, enc)]);
        let req = NegotiateRequest::decode(&m).unwrap();
        assert_eq!(req.dialects, vec![Dialect::SMB300, Dialect::SMB311]);
        assert_eq!(req.client_guid, [9; 16]);
        assert_eq!(decode_preauth(req.context(ctx::PREAUTH_INTEGRITY).unwrap()).unwrap(), vec![HASH_SHA512]);
        assert_eq!(decode_id_list(req.context(ctx::ENCRYPTION).unwrap()).unwrap(), vec![2, 1]);
    }

    #[test]
    fn hostile_counts_and_offsets() {
        let mut m = request(&[(ctx::ENCRYPTION, vec![1, 0, 1, 0])]);
        // DialectCount beyond the message.
        let mut bad = m.clone();
        bad[66] = 0xFF;
        assert!(NegotiateRequest::decode(&bad).is_err());
        // Context offset outside.
        let off = 64 + 28;
        m[off..off + 4].copy_from_slice(&0xFFFF_FFF0u32.to_le_bytes());
        assert_eq!(NegotiateRequest::decode(&m).unwrap_err(), DecodeError::OutOfBounds);
        assert!(NegotiateRequest::decode(&m[..70]).is_err());
    }
}
