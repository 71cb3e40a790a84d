//! Extended attributes: FILE_FULL_EA_INFORMATION lists (MS-FSCC 2.4.15),
//! as SET_INFO/QUERY_INFO FileFullEaInformation and the CREATE EA buffer
//! context (MS-SMB2 2.2.13.2.1) carry them, and FILE_GET_EA_INFORMATION
//! name lists (MS-FSCC 2.4.15.1) a QUERY_INFO may ask with.

use crate::{DecodeError, Put, Reader};

/// One extended attribute. Names are ASCII (at most 255 bytes), values at
/// most 65535 bytes: the widths of EaNameLength and EaValueLength.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ea {
    /// FILE_NEED_EA (0x80) or 0.
    pub flags: u8,
    pub name: String,
    pub value: Vec<u8>,
}

/// Characters an EA name may not hold (MS-FSCC 2.4.15: the name follows
/// the file name rules of 2.1.5.2, which Windows also applies to `+,;=[]`).
fn valid_name(name: &[u8]) -> bool {
    !name.is_empty()
        && name
            .iter()
            .all(|&c| c > 0x1f && c < 0x7f && !b"\"*+,/:;<=>?[\\]|".contains(&c))
}

/// Iterate the entries of a NextEntryOffset-chained list: each entry's
/// bytes (up to the next one, or the end).
fn entries(buf: &[u8]) -> impl Iterator<Item = Result<&[u8], DecodeError>> {
    let mut rest = Some(buf);
    std::iter::from_fn(move || {
        let cur = rest.take()?;
        let next = match cur.get(..4).and_then(|b| b.try_into().ok()) {
            Some(b) => u32::from_le_bytes(b) as usize,
            None => return Some(Err(DecodeError::Truncated)),
        };
        if next == 0 {
            return Some(Ok(cur));
        }
        //= MS-FSCC 2.4.15
        //# NextEntryOffset [...] MUST be 4-byte aligned.
        if next % 4 != 0 || next > cur.len() {
            return Some(Err(DecodeError::OutOfBounds));
        }
        let (this, more) = cur.split_at(next);
        rest = Some(more);
        Some(Ok(this))
    })
}

/// Why an EA list was refused, as the status MS-FSCC/MS-FSA name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EaError {
    /// Malformed list: STATUS_INVALID_PARAMETER (or EA_LIST_INCONSISTENT).
    Decode(DecodeError),
    /// A name with characters EAs may not have: STATUS_INVALID_EA_NAME.
    InvalidName,
}

impl From<DecodeError> for EaError {
    fn from(e: DecodeError) -> Self {
        EaError::Decode(e)
    }
}

/// Decode a FILE_FULL_EA_INFORMATION list (an empty buffer is no EA).
pub fn decode_full(buf: &[u8]) -> Result<Vec<Ea>, EaError> {
    if buf.is_empty() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for entry in entries(buf) {
        let mut r = Reader::new(entry?);
        r.skip(4)?;
        let flags = r.u8()?;
        let name_len = usize::from(r.u8()?);
        let value_len = usize::from(r.u16()?);
        let name = r.take(name_len)?;
        if r.u8()? != 0 {
            return Err(DecodeError::OutOfBounds.into());
        }
        let value = r.take(value_len)?.to_vec();
        if !valid_name(name) {
            return Err(EaError::InvalidName);
        }
        let name = String::from_utf8(name.to_vec()).map_err(|_| EaError::InvalidName)?;
        out.push(Ea { flags, name, value });
    }
    Ok(out)
}

/// Decode a FILE_GET_EA_INFORMATION list of names.
pub fn decode_names(buf: &[u8]) -> Result<Vec<String>, EaError> {
    let mut out = Vec::new();
    for entry in entries(buf) {
        let mut r = Reader::new(entry?);
        r.skip(4)?;
        let len = usize::from(r.u8()?);
        let name = r.take(len)?;
        if !valid_name(name) {
            return Err(EaError::InvalidName);
        }
        out.push(String::from_utf8(name.to_vec()).map_err(|_| EaError::InvalidName)?);
    }
    Ok(out)
}

/// The bytes one entry takes, without the padding to 4 after it.
pub fn entry_len(e: &Ea) -> usize {
    8 + e.name.len() + 1 + e.value.len()
}

/// Append `eas` as a FILE_FULL_EA_INFORMATION list, entries padded to 4.
/// Names over 255 bytes or values over 65535 are the caller's to refuse
/// (they are cut to the field widths here).
pub fn encode_full(out: &mut Vec<u8>, eas: &[Ea]) {
    for (i, e) in eas.iter().enumerate() {
        let len = entry_len(e);
        let next = if i + 1 == eas.len() { 0 } else { len.next_multiple_of(4) };
        out.u32(next as u32);
        out.u8(e.flags);
        out.u8(e.name.len().min(255) as u8);
        out.u16(e.value.len().min(65535) as u16);
        out.extend_from_slice(e.name.as_bytes());
        out.u8(0);
        out.extend_from_slice(&e.value);
        if next != 0 {
            out.resize(out.len() + (next - len), 0);
        }
    }
}

/// FileEaInformation's EaSize and the directory classes' EaSize (MS-FSCC
/// 2.4.13): what the list takes as FILE_FULL_EA_INFORMATION, as Windows
/// counts it (each entry padded to 4), 0 for none.
pub fn list_size(eas: &[Ea]) -> u32 {
    eas.iter().map(|e| entry_len(e).next_multiple_of(4) as u32).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MS-FSCC 2.4.15's layout, as smbtorture's util.c sends it: two EAs.
    #[test]
    fn two_entries_round_trip() {
        let eas = vec![
            Ea { flags: 0, name: "EAONE".into(), value: b"VALUE1".to_vec() },
            Ea { flags: 0x80, name: "SECONDEA".into(), value: b"ValueTwo".to_vec() },
        ];
        let mut b = Vec::new();
        encode_full(&mut b, &eas);
        // 8 + 5 + 1 + 6 = 20, aligned 20; then 8 + 8 + 1 + 8 = 25 unpadded.
        assert_eq!(&b[..8], &[20, 0, 0, 0, 0, 5, 6, 0]);
        assert_eq!(&b[8..14], b"EAONE\0");
        assert_eq!(b.len(), 45);
        assert_eq!(decode_full(&b), Ok(eas.clone()));
        assert_eq!(list_size(&eas), 20 + 28);
    }

    #[test]
    fn names_list() {
        // FILE_GET_EA_INFORMATION: NextEntryOffset, EaNameLength, EaName + NUL.
        let mut b = vec![12, 0, 0, 0, 3];
        b.extend_from_slice(b"ABC\0");
        b.extend_from_slice(&[0, 0, 0]);
        b.extend_from_slice(&[0, 0, 0, 0, 1, b'x', 0]);
        assert_eq!(decode_names(&b), Ok(vec!["ABC".to_string(), "x".to_string()]));
    }

    #[test]
    fn hostile_lists_are_refused() {
        let mut one = Vec::new();
        encode_full(&mut one, &[Ea { flags: 0, name: "A".into(), value: vec![1; 3] }]);
        for n in 1..one.len() {
            assert!(decode_full(&one[..n]).is_err(), "cut at {n}");
        }
        // NextEntryOffset past the end, misaligned, or pointing at itself.
        for next in [64u32, 6, 4] {
            let mut b = one.clone();
            b[..4].copy_from_slice(&next.to_le_bytes());
            assert!(decode_full(&b).is_err(), "NextEntryOffset {next}");
        }
        // The name's NUL missing; a name with a character EAs may not have.
        let mut b = one.clone();
        b[9] = b'x';
        assert!(decode_full(&b).is_err());
        for bad in ["a:b", "a*", "", "a\\b"] {
            let mut b = Vec::new();
            encode_full(&mut b, &[Ea { flags: 0, name: bad.into(), value: vec![] }]);
            assert_eq!(decode_full(&b), Err(EaError::InvalidName), "{bad:?}");
        }
    }
}
