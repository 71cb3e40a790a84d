//! File system information classes (MS-FSCC 2.4 file, 2.5 file system),
//! file attributes (2.6). Each structure is written once here
//! and shared by QUERY_DIRECTORY, QUERY_INFO and SET_INFO.

use crate::reader::{put_utf16le, utf16_len, utf16le, Put, Reader};
use crate::DecodeError;

/// FILE_ATTRIBUTE_* (MS-FSCC 2.6).
pub mod attr {
    pub const READONLY: u32 = 0x0001;
    pub const HIDDEN: u32 = 0x0002;
    pub const SYSTEM: u32 = 0x0004;
    pub const DIRECTORY: u32 = 0x0010;
    pub const ARCHIVE: u32 = 0x0020;
    pub const NORMAL: u32 = 0x0080;
    pub const TEMPORARY: u32 = 0x0100;
    pub const SPARSE_FILE: u32 = 0x0200;
    pub const REPARSE_POINT: u32 = 0x0400;
    pub const COMPRESSED: u32 = 0x0800;
    pub const OFFLINE: u32 = 0x1000;
    pub const NOT_CONTENT_INDEXED: u32 = 0x2000;
    pub const ENCRYPTED: u32 = 0x4000;
    /// Bits a client may pass in CREATE or SET_INFO (no VOLUME 0x8, no DEVICE 0x40).
    pub const VALID_SET: u32 = 0x7FB7;
}

/// FileInformationClass values (MS-FSCC 2.4).
pub mod class {
    pub const DIRECTORY: u8 = 1;
    pub const FULL_DIRECTORY: u8 = 2;
    pub const BOTH_DIRECTORY: u8 = 3;
    pub const BASIC: u8 = 4;
    pub const STANDARD: u8 = 5;
    pub const INTERNAL: u8 = 6;
    pub const EA: u8 = 7;
    pub const ACCESS: u8 = 8;
    pub const RENAME: u8 = 10;
    pub const LINK: u8 = 11;
    pub const NAMES: u8 = 12;
    pub const DISPOSITION: u8 = 13;
    pub const POSITION: u8 = 14;
    pub const FULL_EA: u8 = 15;
    pub const MODE: u8 = 16;
    pub const ALIGNMENT: u8 = 17;
    pub const ALL: u8 = 18;
    pub const ALLOCATION: u8 = 19;
    pub const END_OF_FILE: u8 = 20;
    pub const ALTERNATE_NAME: u8 = 21;
    pub const STREAM: u8 = 22;
    pub const PIPE: u8 = 23;
    pub const COMPRESSION: u8 = 28;
    pub const NETWORK_OPEN: u8 = 34;
    pub const ATTRIBUTE_TAG: u8 = 35;
    pub const ID_BOTH_DIRECTORY: u8 = 37;
    pub const ID_FULL_DIRECTORY: u8 = 38;
    pub const SHORT_NAME: u8 = 40;
    pub const NORMALIZED_NAME: u8 = 48;
}

/// FsInformationClass values (MS-FSCC 2.5).
pub mod fs_class {
    pub const VOLUME: u8 = 1;
    pub const SIZE: u8 = 3;
    pub const DEVICE: u8 = 4;
    pub const ATTRIBUTE: u8 = 5;
    pub const CONTROL: u8 = 6;
    pub const FULL_SIZE: u8 = 7;
    pub const OBJECT_ID: u8 = 8;
    pub const SECTOR_SIZE: u8 = 11;
}

/// FileSystemAttributes (MS-FSCC 2.5.1).
pub mod fs_attr {
    pub const CASE_SENSITIVE_SEARCH: u32 = 0x0000_0001;
    pub const CASE_PRESERVED_NAMES: u32 = 0x0000_0002;
    pub const UNICODE_ON_DISK: u32 = 0x0000_0004;
    pub const SUPPORTS_SPARSE_FILES: u32 = 0x0000_0040;
    pub const NAMED_STREAMS: u32 = 0x0004_0000;
    pub const READ_ONLY_VOLUME: u32 = 0x0008_0000;
    pub const SUPPORTS_BLOCK_REFCOUNTING: u32 = 0x0800_0000;
}

/// DeviceType FILE_DEVICE_DISK and characteristics (MS-FSCC 2.5.10).
pub const FILE_DEVICE_DISK: u32 = 0x0000_0007;
pub const FILE_READ_ONLY_DEVICE: u32 = 0x0000_0002;
pub const FILE_DEVICE_IS_MOUNTED: u32 = 0x0000_0020;

/// What the information classes say about one file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileMeta {
    pub file_id: u64,
    pub end_of_file: u64,
    pub allocation_size: u64,
    pub creation_time: u64,
    pub last_access_time: u64,
    pub last_write_time: u64,
    pub change_time: u64,
    pub attributes: u32,
    pub nlink: u32,
    pub directory: bool,
}

fn times(out: &mut Vec<u8>, m: &FileMeta) {
    out.u64(m.creation_time);
    out.u64(m.last_access_time);
    out.u64(m.last_write_time);
    out.u64(m.change_time);
}

pub const BASIC_LEN: usize = 40;
pub const STANDARD_LEN: usize = 24;
/// FileAllInformation without the name characters.
pub const ALL_FIXED_LEN: usize = 100;
pub const NETWORK_OPEN_LEN: usize = 56;

/// FileBasicInformation (MS-FSCC 2.4.7), 40 bytes.
pub fn basic(out: &mut Vec<u8>, m: &FileMeta) {
    times(out, m);
    out.u32(m.attributes);
    out.u32(0);
}

/// FileStandardInformation (MS-FSCC 2.4.47), 24 bytes.
pub fn standard(out: &mut Vec<u8>, m: &FileMeta, delete_pending: bool) {
    out.u64(m.allocation_size);
    out.u64(m.end_of_file);
    out.u32(m.nlink);
    out.u8(delete_pending as u8);
    out.u8(m.directory as u8);
    out.u16(0);
}

/// FileAllInformation (MS-FSCC 2.4.2): basic, standard, internal, EA,
/// access, position, mode, alignment and name information in a row.
pub fn all(out: &mut Vec<u8>, m: &FileMeta, delete_pending: bool, access: u32, position: u64, mode: u32, name: &str) {
    basic(out, m);
    standard(out, m, delete_pending);
    out.u64(m.file_id); // FileInternalInformation
    out.u32(0); // FileEaInformation
    out.u32(access); // FileAccessInformation
    out.u64(position); // FilePositionInformation
    out.u32(mode); // FileModeInformation
    out.u32(0); // FileAlignmentInformation: byte aligned
    name_info(out, name);
}

/// FileNameInformation (MS-FSCC 2.4.28): FileNameLength then the name.
pub fn name_info(out: &mut Vec<u8>, name: &str) {
    out.u32(utf16_len(name) as u32);
    put_utf16le(out, name);
}

/// Punctuation an 8.3 name may hold besides letters and digits
/// (MS-FSCC 2.1.5.2.1).
const SHORT_PUNCT: &str = "$%'-_@~`!(){}^#&";

fn short_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || SHORT_PUNCT.contains(c)
}

/// Whether `name` already is a valid 8.3 name (MS-FSCC 2.1.5.2.1): a base
/// of 1 to 8 characters and an optional extension of 1 to 3 after the
/// only dot, all letters, digits or the allowed punctuation.
fn is_short_name(name: &str) -> bool {
    let (base, ext) = match name.split_once('.') {
        Some((b, e)) => (b, Some(e)),
        None => (name, None),
    };
    let ok = |part: &str, max: usize| (1..=max).contains(&part.len()) && part.chars().all(short_char);
    ok(base, 8) && ext.is_none_or(|e| ok(e, 3))
}

/// The 8.3 alternate name reported for `name` (FileAlternateNameInformation,
/// MS-FSCC 2.4.5): the name itself in upper case when it already is a valid
/// 8.3 name, else a generated `BASE~1.EXT` from up to six characters of
/// the base and three of the last extension (characters an 8.3 name cannot
/// hold are dropped, non-ASCII ones become `_`).
pub fn short_name(name: &str) -> String {
    if is_short_name(name) {
        return name.to_ascii_uppercase();
    }
    let (base, ext) = match name.rfind('.') {
        Some(i) if i > 0 => (&name[..i], &name[i + 1..]),
        _ => (name, ""),
    };
    let clean = |s: &str, max: usize| -> String {
        s.chars()
            .filter_map(|c| match c {
                c if short_char(c) => Some(c.to_ascii_uppercase()),
                c if !c.is_ascii() => Some('_'),
                _ => None,
            })
            .take(max)
            .collect()
    };
    let mut base = clean(base, 6);
    if base.is_empty() {
        base.push('_');
    }
    let ext = clean(ext, 3);
    if ext.is_empty() {
        format!("{base}~1")
    } else {
        format!("{base}~1.{ext}")
    }
}

/// FileNetworkOpenInformation (MS-FSCC 2.4.29), 56 bytes.
pub fn network_open(out: &mut Vec<u8>, m: &FileMeta) {
    times(out, m);
    out.u64(m.allocation_size);
    out.u64(m.end_of_file);
    out.u32(m.attributes);
    out.u32(0);
}

/// FileAttributeTagInformation (MS-FSCC 2.4.6), 8 bytes (no reparse tag).
pub fn attribute_tag(out: &mut Vec<u8>, m: &FileMeta) {
    out.u32(m.attributes);
    out.u32(0);
}

/// FileStreamInformation (MS-FSCC 2.4.48): one entry per data stream
/// (name as `::$DATA` or `:name:$DATA`, size, allocation size), each
/// starting on an 8-byte boundary, NextEntryOffset 0 on the last. A
/// directory without named streams has no entry at all.
pub fn streams<'a>(out: &mut Vec<u8>, list: impl IntoIterator<Item = (&'a str, u64, u64)>) {
    let mut prev: Option<usize> = None;
    for (name, size, allocation) in list {
        while !out.len().is_multiple_of(8) {
            out.push(0);
        }
        let start = out.len();
        if let Some(p) = prev {
            let next = (start - p) as u32;
            if let Some(dst) = out.get_mut(p..p + 4) {
                dst.copy_from_slice(&next.to_le_bytes());
            }
        }
        out.u32(0);
        out.u32(utf16_len(name) as u32);
        out.u64(size);
        out.u64(allocation);
        put_utf16le(out, name);
        prev = Some(start);
    }
}

/// FileCompressionInformation (MS-FSCC 2.4.9), 16 bytes: not compressed.
pub fn compression(out: &mut Vec<u8>, m: &FileMeta) {
    out.u64(m.end_of_file);
    out.u16(0); // COMPRESSION_FORMAT_NONE
    out.zeros(6);
}

/// Size of an entry's fixed part for the directory classes QUERY_DIRECTORY
/// supports (MS-FSCC 2.4.10, .14, .8, .26, .17, .18); None for others.
pub fn dir_entry_fixed_len(class: u8) -> Option<usize> {
    match class {
        class::DIRECTORY => Some(64),
        class::FULL_DIRECTORY => Some(68),
        class::BOTH_DIRECTORY => Some(94),
        class::NAMES => Some(12),
        class::ID_BOTH_DIRECTORY => Some(104),
        class::ID_FULL_DIRECTORY => Some(80),
        _ => None,
    }
}

/// Append one directory entry of `class` with NextEntryOffset 0 (the
/// caller links entries). FileIndex is 0 and ShortName empty, as NTFS
/// without 8.3 names. Unknown classes write nothing and return false.
pub fn dir_entry(out: &mut Vec<u8>, class: u8, m: &FileMeta, name: &str) -> bool {
    let name_len = utf16_len(name) as u32;
    if class == class::NAMES {
        out.u32(0);
        out.u32(0);
        out.u32(name_len);
        put_utf16le(out, name);
        return true;
    }
    if dir_entry_fixed_len(class).is_none() {
        return false;
    }
    out.u32(0); // NextEntryOffset
    out.u32(0); // FileIndex
    times(out, m);
    out.u64(m.end_of_file);
    out.u64(m.allocation_size);
    out.u32(m.attributes);
    out.u32(name_len);
    if class != class::DIRECTORY {
        out.u32(0); // EaSize
    }
    match class {
        class::BOTH_DIRECTORY | class::ID_BOTH_DIRECTORY => {
            out.u8(0); // ShortNameLength
            out.u8(0);
            out.zeros(24); // ShortName
            if class == class::ID_BOTH_DIRECTORY {
                out.u16(0);
                out.u64(m.file_id);
            }
        }
        class::ID_FULL_DIRECTORY => {
            out.u32(0);
            out.u64(m.file_id);
        }
        _ => {}
    }
    put_utf16le(out, name);
    true
}

/// FileFsVolumeInformation (MS-FSCC 2.5.9): 18 fixed bytes plus the label.
pub fn fs_volume(out: &mut Vec<u8>, creation_time: u64, serial: u32, label: &str) {
    out.u64(creation_time);
    out.u32(serial);
    out.u32(utf16_len(label) as u32);
    out.u8(0); // SupportsObjects
    out.u8(0);
    put_utf16le(out, label);
}

/// Allocation units as the size classes report them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsSize {
    pub total_units: u64,
    pub caller_available_units: u64,
    pub actual_available_units: u64,
    pub sectors_per_unit: u32,
    pub bytes_per_sector: u32,
}

/// FileFsSizeInformation (MS-FSCC 2.5.8), 24 bytes.
pub fn fs_size(out: &mut Vec<u8>, s: &FsSize) {
    out.u64(s.total_units);
    out.u64(s.caller_available_units);
    out.u32(s.sectors_per_unit);
    out.u32(s.bytes_per_sector);
}

/// FileFsFullSizeInformation (MS-FSCC 2.5.4), 32 bytes.
pub fn fs_full_size(out: &mut Vec<u8>, s: &FsSize) {
    out.u64(s.total_units);
    out.u64(s.caller_available_units);
    out.u64(s.actual_available_units);
    out.u32(s.sectors_per_unit);
    out.u32(s.bytes_per_sector);
}

/// FileFsDeviceInformation (MS-FSCC 2.5.10), 8 bytes.
pub fn fs_device(out: &mut Vec<u8>, device_type: u32, characteristics: u32) {
    out.u32(device_type);
    out.u32(characteristics);
}

/// FileFsAttributeInformation (MS-FSCC 2.5.1): 12 fixed bytes plus the name.
pub fn fs_attribute(out: &mut Vec<u8>, attributes: u32, max_name_len: u32, fs_name: &str) {
    out.u32(attributes);
    out.u32(max_name_len);
    out.u32(utf16_len(fs_name) as u32);
    put_utf16le(out, fs_name);
}

/// FileFsSectorSizeInformation (MS-FSCC 2.5.7), 28 bytes; flags say the
/// sectors are aligned on the device and partition.
pub fn fs_sector_size(out: &mut Vec<u8>, bytes_per_sector: u32) {
    for _ in 0..4 {
        out.u32(bytes_per_sector);
    }
    out.u32(0x3); // SSINFO_FLAGS_ALIGNED_DEVICE | SSINFO_FLAGS_PARTITION_ALIGNED_ON_DEVICE
    out.u32(0);
    out.u32(0);
}

/// FileFsControlInformation (MS-FSCC 2.5.2), 48 bytes: no free-space
/// filtering, no default quota (thresholds and limits of -1), quotas off.
pub fn fs_control(out: &mut Vec<u8>) {
    out.zeros(24); // FreeSpaceStartFiltering, FreeSpaceThreshold, FreeSpaceStopFiltering
    out.u64(u64::MAX); // DefaultQuotaThreshold
    out.u64(u64::MAX); // DefaultQuotaLimit
    out.u32(0); // FileSystemControlFlags
    out.u32(0); // Padding
}

/// FileFsObjectIdInformation (MS-FSCC 2.5.6), 64 bytes.
pub fn fs_object_id(out: &mut Vec<u8>, object_id: &[u8; 16]) {
    out.bytes(object_id);
    out.zeros(48);
}

/// FileBasicInformation as SET_INFO carries it (MS-FSCC 2.4.7).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BasicInfo {
    pub creation_time: u64,
    pub last_access_time: u64,
    pub last_write_time: u64,
    pub change_time: u64,
    pub attributes: u32,
}

impl BasicInfo {
    /// The 4-byte Reserved tail is optional (Windows accepts 36 bytes).
    pub fn decode(buf: &[u8]) -> Result<BasicInfo, DecodeError> {
        let mut r = Reader::new(buf);
        Ok(BasicInfo {
            creation_time: r.u64()?,
            last_access_time: r.u64()?,
            last_write_time: r.u64()?,
            change_time: r.u64()?,
            attributes: r.u32()?,
        })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.u64(self.creation_time);
        out.u64(self.last_access_time);
        out.u64(self.last_write_time);
        out.u64(self.change_time);
        out.u32(self.attributes);
        out.u32(0);
    }
}

/// Longest rename target accepted, in bytes of UTF-16.
pub const MAX_RENAME_NAME: usize = 65534;

/// FILE_RENAME_INFORMATION_TYPE_2 (MS-FSCC 2.4.37.2), the SMB2 form.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RenameInfo {
    pub replace_if_exists: bool,
    pub root_directory: u64,
    pub name: String,
}

impl RenameInfo {
    pub fn decode(buf: &[u8]) -> Result<RenameInfo, DecodeError> {
        let mut r = Reader::new(buf);
        let replace_if_exists = r.u8()? != 0;
        r.skip(7)?;
        let root_directory = r.u64()?;
        let len = r.u32()? as usize;
        if len > MAX_RENAME_NAME {
            return Err(DecodeError::TooLong);
        }
        let name = utf16le(r.take(len)?)?;
        Ok(RenameInfo { replace_if_exists, root_directory, name })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.u8(self.replace_if_exists as u8);
        out.zeros(7);
        out.u64(self.root_directory);
        out.u32(utf16_len(&self.name) as u32);
        put_utf16le(out, &self.name);
    }
}

/// An 8-byte little-endian value (FileEndOfFile, FileAllocation,
/// FilePosition information).
pub fn decode_u64(buf: &[u8]) -> Result<u64, DecodeError> {
    Reader::new(buf).u64()
}

/// A 4-byte little-endian value (FileModeInformation).
pub fn decode_u32(buf: &[u8]) -> Result<u32, DecodeError> {
    Reader::new(buf).u32()
}

/// FileDispositionInformation (MS-FSCC 2.4.11): DeletePending.
pub fn decode_disposition(buf: &[u8]) -> Result<bool, DecodeError> {
    Ok(Reader::new(buf).u8()? != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> FileMeta {
        FileMeta {
            file_id: 0x1122_3344_5566_7788,
            end_of_file: 1000,
            allocation_size: 4096,
            creation_time: 1,
            last_access_time: 2,
            last_write_time: 3,
            change_time: 4,
            attributes: attr::ARCHIVE,
            nlink: 1,
            directory: false,
        }
    }

    #[test]
    fn short_names() {
        // Valid 8.3 names are returned upper-cased.
        assert_eq!(short_name("bufsize.txt"), "BUFSIZE.TXT");
        assert_eq!(short_name("README"), "README");
        assert_eq!(short_name("a$b-c.x_y"), "A$B-C.X_Y");
        // Everything else is generated.
        assert_eq!(short_name("torture_smb2_getfinfo_access"), "TORTUR~1");
        assert_eq!(short_name("long name.html"), "LONGNA~1.HTM");
        assert_eq!(short_name("a.b.c"), "AB~1.C");
        assert_eq!(short_name(".bashrc"), "BASHRC~1");
        assert_eq!(short_name("abc."), "ABC~1");
        assert_eq!(short_name("\u{e9}t\u{e9}.txt"), "_T_~1.TXT");
        assert_eq!(short_name("a+b.txt"), "AB~1.TXT");
        assert_eq!(short_name("..."), "_~1");
        assert_eq!(short_name("123456789.txt"), "123456~1.TXT");
    }

    #[test]
    fn fs_control_layout() {
        let mut v = Vec::new();
        fs_control(&mut v);
        assert_eq!(v.len(), 48);
        assert_eq!(&v[24..40], &[0xFF; 16]);
        assert_eq!(&v[40..], &[0; 8]);
    }

    #[test]
    fn fixed_sizes() {
        let m = meta();
        let mut v = Vec::new();
        basic(&mut v, &m);
        assert_eq!(v.len(), BASIC_LEN);
        assert_eq!(&v[32..36], &attr::ARCHIVE.to_le_bytes());
        v.clear();
        standard(&mut v, &m, true);
        assert_eq!(v.len(), STANDARD_LEN);
        assert_eq!(v[20], 1);
        assert_eq!(v[21], 0);
        v.clear();
        all(&mut v, &m, false, 0x1F01FF, 77, 0x20, "\\a");
        assert_eq!(v.len(), ALL_FIXED_LEN + 4);
        assert_eq!(&v[80..88], &77u64.to_le_bytes());
        assert_eq!(&v[64..72], &m.file_id.to_le_bytes());
        assert_eq!(&v[76..80], &0x1F01FFu32.to_le_bytes());
        assert_eq!(&v[88..92], &0x20u32.to_le_bytes());
        assert_eq!(&v[96..100], &4u32.to_le_bytes());
        v.clear();
        network_open(&mut v, &m);
        assert_eq!(v.len(), NETWORK_OPEN_LEN);
        v.clear();
        compression(&mut v, &m);
        assert_eq!(v.len(), 16);
        v.clear();
        attribute_tag(&mut v, &m);
        assert_eq!(v, [0x20, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn dir_entries_have_their_fixed_sizes() {
        let m = meta();
        for c in [
            class::DIRECTORY,
            class::FULL_DIRECTORY,
            class::BOTH_DIRECTORY,
            class::NAMES,
            class::ID_BOTH_DIRECTORY,
            class::ID_FULL_DIRECTORY,
        ] {
            let mut v = Vec::new();
            assert!(dir_entry(&mut v, c, &m, "ab"));
            let fixed = dir_entry_fixed_len(c).unwrap();
            assert_eq!(v.len(), fixed + 4, "class {c}");
            assert_eq!(&v[fixed..], &[b'a', 0, b'b', 0]);
            // FileNameLength sits right after the attributes (or FileIndex for names).
            let len_at = if c == class::NAMES { 8 } else { 60 };
            assert_eq!(&v[len_at..len_at + 4], &4u32.to_le_bytes());
        }
        let mut v = Vec::new();
        dir_entry(&mut v, class::ID_BOTH_DIRECTORY, &m, "");
        assert_eq!(&v[96..104], &m.file_id.to_le_bytes());
        v.clear();
        dir_entry(&mut v, class::ID_FULL_DIRECTORY, &m, "");
        assert_eq!(&v[72..80], &m.file_id.to_le_bytes());
        assert!(!dir_entry(&mut v, class::BASIC, &m, "x"));
        assert_eq!(dir_entry_fixed_len(class::BASIC), None);
    }

    #[test]
    fn streams_list() {
        let mut v = Vec::new();
        streams(&mut v, [("::$DATA", 1000, 1024)]);
        assert_eq!(v.len(), 24 + 14);
        assert_eq!(&v[0..4], &0u32.to_le_bytes());
        assert_eq!(&v[4..8], &14u32.to_le_bytes());
        assert_eq!(&v[8..16], &1000u64.to_le_bytes());
        assert_eq!(&v[16..24], &1024u64.to_le_bytes());
        // Appended after 38 bytes: padded to 40; entries 8-aligned, linked.
        streams(&mut v, [("::$DATA", 1, 8), (":ab:$DATA", 2, 8)]);
        let second = &v[38..];
        assert_eq!(&second[0..2], &[0, 0], "padding");
        assert_eq!(&second[2..6], &40u32.to_le_bytes());
        assert_eq!(&second[42..46], &0u32.to_le_bytes(), "the last entry ends the list");
        assert_eq!(&second[46..50], &18u32.to_le_bytes());
        let mut d = Vec::new();
        streams(&mut d, []);
        assert!(d.is_empty());
    }

    #[test]
    fn fs_classes() {
        let mut v = Vec::new();
        fs_volume(&mut v, 5, 0xABCD, "sh");
        assert_eq!(v.len(), 18 + 4);
        assert_eq!(&v[12..16], &4u32.to_le_bytes());
        v.clear();
        let s = FsSize { total_units: 10, caller_available_units: 5, actual_available_units: 6, sectors_per_unit: 8, bytes_per_sector: 512 };
        fs_size(&mut v, &s);
        assert_eq!(v.len(), 24);
        v.clear();
        fs_full_size(&mut v, &s);
        assert_eq!(v.len(), 32);
        assert_eq!(&v[16..24], &6u64.to_le_bytes());
        v.clear();
        fs_attribute(&mut v, 7, 255, "NTFS");
        assert_eq!(v.len(), 12 + 8);
        v.clear();
        fs_device(&mut v, FILE_DEVICE_DISK, FILE_DEVICE_IS_MOUNTED);
        assert_eq!(v, [7, 0, 0, 0, 0x20, 0, 0, 0]);
        v.clear();
        fs_sector_size(&mut v, 512);
        assert_eq!(v.len(), 28);
        v.clear();
        fs_object_id(&mut v, &[1; 16]);
        assert_eq!(v.len(), 64);
    }

    #[test]
    fn set_info_structures_round_trip() {
        let b = BasicInfo { creation_time: 1, last_access_time: u64::MAX, last_write_time: 3, change_time: 0, attributes: attr::READONLY };
        let mut v = Vec::new();
        b.encode(&mut v);
        assert_eq!(v.len(), 40);
        assert_eq!(BasicInfo::decode(&v).unwrap(), b);
        assert_eq!(BasicInfo::decode(&v[..36]).unwrap(), b);
        assert_eq!(BasicInfo::decode(&v[..35]), Err(DecodeError::Truncated));

        let r = RenameInfo { replace_if_exists: true, root_directory: 0, name: "d\\new".into() };
        v.clear();
        r.encode(&mut v);
        assert_eq!(v.len(), 20 + 10);
        assert_eq!(RenameInfo::decode(&v).unwrap(), r);
        assert_eq!(RenameInfo::decode(&v[..29]), Err(DecodeError::Truncated));
        let mut huge = v.clone();
        huge[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(RenameInfo::decode(&huge), Err(DecodeError::TooLong));
        let mut odd = v.clone();
        odd[16..20].copy_from_slice(&9u32.to_le_bytes());
        assert_eq!(RenameInfo::decode(&odd), Err(DecodeError::BadString));

        assert_eq!(decode_u64(&7u64.to_le_bytes()).unwrap(), 7);
        assert_eq!(decode_u64(&[1; 7]), Err(DecodeError::Truncated));
        assert_eq!(decode_u32(&[2, 0, 0, 0]).unwrap(), 2);
        assert!(decode_disposition(&[1]).unwrap());
        assert!(!decode_disposition(&[0]).unwrap());
        assert_eq!(decode_disposition(&[]), Err(DecodeError::Truncated));
    }
}
