//! Bounded little-endian reader over a borrowed slice (the rustls `Reader` idea).
//!
//! A short read is an error, never a panic. Header-relative offset/length
//! pairs are resolved with [`at`], which checks them against the message.

use crate::DecodeError;

#[derive(Clone, Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    pub fn pos(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn rest(&mut self) -> &'a [u8] {
        let r = self.buf.get(self.pos..).unwrap_or(&[]);
        self.pos = self.buf.len();
        r
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.pos.checked_add(n).ok_or(DecodeError::Truncated)?;
        let s = self.buf.get(self.pos..end).ok_or(DecodeError::Truncated)?;
        self.pos = end;
        Ok(s)
    }

    /// A sub-reader over exactly the next `n` bytes.
    pub fn sub(&mut self, n: usize) -> Result<Reader<'a>, DecodeError> {
        Ok(Reader::new(self.take(n)?))
    }

    pub fn skip(&mut self, n: usize) -> Result<(), DecodeError> {
        self.take(n).map(|_| ())
    }

    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.array::<1>()?[0])
    }
    pub fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    pub fn u128(&mut self) -> Result<u128, DecodeError> {
        Ok(u128::from_le_bytes(self.array()?))
    }
}

/// Resolve an (offset, length) pair, where `offset` counts from the start of
/// `msg` (the SMB2 header for most PDUs). An empty field may carry any offset.
pub fn at(msg: &[u8], offset: usize, len: usize) -> Result<&[u8], DecodeError> {
    if len == 0 {
        return Ok(&[]);
    }
    let end = offset.checked_add(len).ok_or(DecodeError::OutOfBounds)?;
    msg.get(offset..end).ok_or(DecodeError::OutOfBounds)
}

/// [`at`] for a message of which `msg` is the first part and `more` bytes
/// follow elsewhere (kept in the chunks they arrived in): with `more`, the
/// field must start inside `msg` and may run on into those bytes, and its
/// part inside `msg` is returned.
pub fn at_head(msg: &[u8], offset: usize, len: usize, more: usize) -> Result<&[u8], DecodeError> {
    if more == 0 {
        return at(msg, offset, len);
    }
    let end = offset.checked_add(len).ok_or(DecodeError::OutOfBounds)?;
    if offset > msg.len() || end > msg.len().saturating_add(more) {
        return Err(DecodeError::OutOfBounds);
    }
    msg.get(offset..end.min(msg.len())).ok_or(DecodeError::OutOfBounds)
}

/// Little-endian writers for `Vec<u8>`.
pub trait Put {
    fn u8(&mut self, v: u8);
    fn u16(&mut self, v: u16);
    fn u32(&mut self, v: u32);
    fn u64(&mut self, v: u64);
    fn bytes(&mut self, v: &[u8]);
    fn zeros(&mut self, n: usize);
    /// Pad with zeros to a multiple of `align` (relative to the vec start).
    fn align(&mut self, align: usize);
    fn set_u16(&mut self, at: usize, v: u16);
    fn set_u32(&mut self, at: usize, v: u32);
}

impl Put for Vec<u8> {
    fn u8(&mut self, v: u8) {
        self.push(v)
    }
    fn u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_le_bytes())
    }
    fn u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_le_bytes())
    }
    fn u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_le_bytes())
    }
    fn bytes(&mut self, v: &[u8]) {
        self.extend_from_slice(v)
    }
    fn zeros(&mut self, n: usize) {
        self.resize(self.len() + n, 0)
    }
    fn align(&mut self, align: usize) {
        let pad = (align - self.len() % align) % align;
        self.zeros(pad)
    }
    /// Overwrite a field this code wrote earlier; out of range is ignored.
    fn set_u16(&mut self, at: usize, v: u16) {
        if let Some(f) = self.get_mut(at..at.saturating_add(2)) {
            f.copy_from_slice(&v.to_le_bytes())
        }
    }
    fn set_u32(&mut self, at: usize, v: u32) {
        if let Some(f) = self.get_mut(at..at.saturating_add(4)) {
            f.copy_from_slice(&v.to_le_bytes())
        }
    }
}

/// UTF-16LE bytes to a Rust string; odd lengths and unpaired surrogates are errors.
pub fn utf16le(b: &[u8]) -> Result<String, DecodeError> {
    if !b.len().is_multiple_of(2) {
        return Err(DecodeError::BadString);
    }
    let units = b.chunks_exact(2).map(|c| match c {
        [lo, hi] => u16::from_le_bytes([*lo, *hi]),
        _ => 0xFFFF, // chunks_exact(2) yields pairs only
    });
    char::decode_utf16(units)
        .collect::<Result<String, _>>()
        .map_err(|_| DecodeError::BadString)
}

pub fn put_utf16le(out: &mut Vec<u8>, s: &str) {
    for u in s.encode_utf16() {
        out.extend_from_slice(&u.to_le_bytes());
    }
}

pub fn utf16_len(s: &str) -> usize {
    s.encode_utf16().count() * 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_reads_are_errors() {
        let mut r = Reader::new(&[1, 2, 3]);
        assert_eq!(r.u16().unwrap(), 0x0201);
        assert_eq!(r.u16(), Err(DecodeError::Truncated));
        assert_eq!(r.u8().unwrap(), 3);
        assert_eq!(r.take(usize::MAX), Err(DecodeError::Truncated));
    }

    #[test]
    fn offsets_are_bounded() {
        let m = [0u8; 10];
        assert!(at(&m, 8, 2).is_ok());
        assert_eq!(at(&m, 9, 2), Err(DecodeError::OutOfBounds));
        assert_eq!(at(&m, usize::MAX, 2), Err(DecodeError::OutOfBounds));
        assert_eq!(at(&m, 100, 0).unwrap(), &[] as &[u8]);
    }

    #[test]
    fn utf16_round_trip() {
        let mut v = Vec::new();
        put_utf16le(&mut v, "a\u{e9}\u{1F600}");
        assert_eq!(utf16le(&v).unwrap(), "a\u{e9}\u{1F600}");
        assert_eq!(utf16le(&[0x41]), Err(DecodeError::BadString));
        assert_eq!(utf16le(&[0x00, 0xD8]), Err(DecodeError::BadString));
    }
}
