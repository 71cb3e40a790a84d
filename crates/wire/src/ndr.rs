//! NDR (C706 chapter 14, MS-RPCE 2.2.5) for the little that srvsvc needs:
//! aligned little-endian integers, unique pointers with referent ids, and
//! conformant varying UTF-16 strings with their NUL. Alignment counts from
//! the start of the stub data. The server's srvsvc and the client's
//! share listing both use it.

use crate::reader::{put_utf16le, utf16le};
use crate::DecodeError;

/// Longest string a stub may carry, in UTF-16 units (share and server
/// names, and share remarks, are far shorter).
pub const MAX_STRING: u32 = 1024;

/// Writes NDR stub data. Referent ids start at 0x00020000 and step by 4,
/// as Windows and Samba number them.
pub struct Writer {
    pub buf: Vec<u8>,
    next_ref: u32,
}

impl Default for Writer {
    fn default() -> Writer {
        Writer::new()
    }
}

impl Writer {
    pub fn new() -> Writer {
        Writer { buf: Vec::new(), next_ref: 0x0002_0000 }
    }

    pub fn align(&mut self, n: usize) {
        let pad = (n - self.buf.len() % n) % n;
        self.buf.resize(self.buf.len() + pad, 0);
    }

    pub fn u32(&mut self, v: u32) {
        self.align(4);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    /// A non-null unique pointer: its referent id.
    pub fn pointer(&mut self) {
        let r = self.next_ref;
        self.next_ref = self.next_ref.wrapping_add(4);
        self.u32(r);
    }

    pub fn null(&mut self) {
        self.u32(0);
    }

    /// A `[string] wchar_t*` pointee: MaximumCount, Offset 0, ActualCount
    /// (both counting the NUL), the characters, the NUL.
    pub fn string(&mut self, s: &str) {
        let n = s.encode_utf16().count() as u32 + 1;
        self.u32(n);
        self.u32(0);
        self.u32(n);
        put_utf16le(&mut self.buf, s);
        self.buf.extend_from_slice(&[0, 0]);
    }
}

/// Reads NDR stub data; every short read or out-of-range count is an error.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    pub fn align(&mut self, n: usize) -> Result<(), DecodeError> {
        let pad = (n - self.pos % n) % n;
        self.take(pad).map(|_| ())
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.pos.checked_add(n).ok_or(DecodeError::Truncated)?;
        let s = self.buf.get(self.pos..end).ok_or(DecodeError::Truncated)?;
        self.pos = end;
        Ok(s)
    }

    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        self.align(4)?;
        let b = self.take(4)?;
        let mut a = [0u8; 4];
        a.copy_from_slice(b);
        Ok(u32::from_le_bytes(a))
    }

    /// A unique pointer: true when non-null (its pointee follows later).
    pub fn pointer(&mut self) -> Result<bool, DecodeError> {
        Ok(self.u32()? != 0)
    }

    /// A conformant varying UTF-16 string; the trailing NUL, if present, is
    /// dropped. Offset must be 0 and ActualCount at most MaximumCount.
    pub fn string(&mut self) -> Result<String, DecodeError> {
        let max = self.u32()?;
        let offset = self.u32()?;
        let actual = self.u32()?;
        if offset != 0 || actual > max {
            return Err(DecodeError::Invalid);
        }
        if max > MAX_STRING {
            return Err(DecodeError::TooLong);
        }
        let b = self.take(actual as usize * 2)?;
        let b = b.strip_suffix(&[0, 0]).unwrap_or(b);
        utf16le(b)
    }

    /// Bytes left to read: what bounds a conformant array's count.
    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// Whether every byte was read (trailing bytes are the caller's error).
    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn string_round_trip() {
        let mut w = Writer::new();
        w.pointer();
        w.string("IPC$");
        w.u32(7);
        // 4 referent + 12 counts + 10 chars, then 2 bytes of padding.
        assert_eq!(w.buf.len(), 4 + 12 + 10 + 2 + 4);
        assert_eq!(&w.buf[..8], &[0, 0, 2, 0, 5, 0, 0, 0]);
        let mut r = Reader::new(&w.buf);
        assert!(r.pointer().unwrap());
        assert_eq!(r.string().unwrap(), "IPC$");
        assert_eq!(r.u32().unwrap(), 7);
        assert!(r.is_empty());
    }

    #[test]
    fn hostile_strings() {
        // ActualCount above MaximumCount.
        let mut w = Writer::new();
        w.u32(1);
        w.u32(0);
        w.u32(2);
        assert_eq!(Reader::new(&w.buf).string(), Err(DecodeError::Invalid));
        // Nonzero offset.
        let mut w = Writer::new();
        w.u32(2);
        w.u32(1);
        w.u32(1);
        assert_eq!(Reader::new(&w.buf).string(), Err(DecodeError::Invalid));
        // Huge counts, truncated data.
        let mut w = Writer::new();
        w.u32(u32::MAX);
        w.u32(0);
        w.u32(u32::MAX);
        assert_eq!(Reader::new(&w.buf).string(), Err(DecodeError::TooLong));
        let mut w = Writer::new();
        w.u32(10);
        w.u32(0);
        w.u32(10);
        w.buf.extend_from_slice(&[0x41, 0]);
        assert_eq!(Reader::new(&w.buf).string(), Err(DecodeError::Truncated));
        // Unpaired surrogate.
        let mut w = Writer::new();
        w.u32(1);
        w.u32(0);
        w.u32(1);
        w.buf.extend_from_slice(&[0x00, 0xD8]);
        assert_eq!(Reader::new(&w.buf).string(), Err(DecodeError::BadString));
    }
}
