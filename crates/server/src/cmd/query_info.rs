//! QUERY_INFO (MS-SMB2 2.2.37, 2.2.38; processing 3.3.5.20): file,
//! file system and security information (MS-FSCC 2.4, 2.5; MS-DTYP 2.4.6).

use crate::meta::{meta, pipe_meta, MODE_OPTIONS};
use crate::ctx::{Ctx, HResult, Req};
use crate::open::{access, Open};
use crate::server::Server;
use smbq_wire::fscc::{self, class, fs_attr, fs_class, FsSize};
use smbq_wire::security::secinfo;
use smbq_wire::header::encode_error_body;
use smbq_wire::query_info::{begin_response, finish_response, info_type, QueryInfoRequest};
use smbq_vfs::StreamInfo;
use smbq_wire::{Dialect, NtStatus, Put};

/// What a FILE or FILESYSTEM class produced: the structure and the size
/// of its fixed part as Windows counts it (rounded up to 8 bytes). When the
/// structure does not fit, an OutputBufferLength below `fixed` is
/// INFO_LENGTH_MISMATCH, else the structure is cut, with BUFFER_OVERFLOW
/// (smbtorture smb2.getinfo.qfile_buffercheck / qfs_buffercheck).
struct Info {
    data: Vec<u8>,
    fixed: usize,
}

/// Handle an SMB2 QUERY_INFO (MS-SMB2 3.3.5.20).
pub fn handle(ctx: &mut Ctx<'_>, req: &Req<'_>) -> HResult {
    let r = QueryInfoRequest::decode(req.msg).map_err(NtStatus::from)?;
    //= MS-SMB2 3.3.5.20
    //# If OutputBufferLength is greater than Connection.MaxTransactSize,
    //# the server MUST fail the request with STATUS_INVALID_PARAMETER.
    if r.output_buffer_length > ctx.max_io() {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    let dialect = ctx.dialect();
    let fid = ctx.resolve(r.file_id)?;
    let server = &ctx.conn.server;
    let open = ctx.conn.opens.get(&fid.volatile).ok_or(NtStatus::FILE_CLOSED)?;
    let max = r.output_buffer_length as usize;
    let info = match r.info_type {
        info_type::FILE if r.class == class::FULL_EA => {
            let (data, all) = full_ea(open, &r, max)?;
            let start = begin_response(ctx.out, ctx.header_start);
            ctx.out.bytes(&data);
            finish_response(ctx.out, start);
            return Ok(if all { NtStatus::SUCCESS } else { NtStatus::BUFFER_OVERFLOW });
        }
        info_type::FILE if r.class == smbq_wire::posix::INFO_CLASS => posix_info(server, open)?,
        info_type::FILE => file_info(server, open, r.class, dialect)?,
        info_type::FILESYSTEM => fs_info(server, open, r.class)?,
        info_type::SECURITY => {
            let sd = security(open, r.additional_information)?;
            //= MS-SMB2 3.3.5.20.3
            //# If OutputBufferLength is less than the size of the security
            //# descriptor, the server MUST fail the request with
            //# STATUS_BUFFER_TOO_SMALL [and return the required size in
            //# the ErrorData].
            if sd.len() > max {
                encode_error_body(ctx.out, &(sd.len() as u32).to_le_bytes());
                return Ok(NtStatus::BUFFER_TOO_SMALL);
            }
            Info { data: sd, fixed: 0 }
        }
        info_type::QUOTA => return Err(NtStatus::NOT_SUPPORTED),
        _ => return Err(NtStatus::INVALID_PARAMETER),
    };
    let overflow = info.data.len() > max;
    if overflow && max < info.fixed {
        return Err(NtStatus::INFO_LENGTH_MISMATCH);
    }
    let data = info.data.get(..max).unwrap_or(&info.data);
    let start = begin_response(ctx.out, ctx.header_start);
    ctx.out.bytes(data);
    finish_response(ctx.out, start);
    Ok(if overflow { NtStatus::BUFFER_OVERFLOW } else { NtStatus::SUCCESS })
}

fn need(open: &Open, bits: u32) -> Result<(), NtStatus> {
    if open.access & bits == 0 {
        return Err(NtStatus::ACCESS_DENIED);
    }
    Ok(())
}

/// SMB2_0_INFO_FILE classes (MS-SMB2 3.3.5.20.1, MS-FSCC 2.4).
/// FILE_POSIX_INFORMATION (crate::posix_ext), for a POSIX open only
/// (INVALID_LEVEL otherwise, as on Samba).
fn posix_info(server: &Server, open: &Open) -> Result<Info, NtStatus> {
    let h = open.handle().filter(|_| open.posix).ok_or(NtStatus::INVALID_LEVEL)?;
    need(open, access::FILE_READ_ATTRIBUTES)?;
    let mut st = h.stat().map_err(NtStatus::from)?;
    server.files.show_times(&mut st, std::time::Instant::now());
    let mut data = Vec::new();
    crate::posix_ext::info(&st).encode(&mut data);
    Ok(Info { fixed: data.len(), data })
}

fn file_info(server: &Server, open: &Open, c: u8, dialect: Dialect) -> Result<Info, NtStatus> {
    let m = match open.handle() {
        Some(h) => {
            let mut st = h.stat().map_err(NtStatus::from)?;
            server.files.show_times(&mut st, std::time::Instant::now());
            meta(&st)
        }
        None => pipe_meta(),
    };
    let delete_pending = || open.file_key != 0 && server.files.get(open.file_key).is_some_and(|e| e.delete_pending);
    let mut d = Vec::new();
    let fixed = match c {
        class::BASIC => {
            need(open, access::FILE_READ_ATTRIBUTES)?;
            fscc::basic(&mut d, &m);
            fscc::BASIC_LEN
        }
        class::STANDARD => {
            fscc::standard(&mut d, &m, delete_pending());
            fscc::STANDARD_LEN
        }
        class::INTERNAL => {
            d.u64(m.file_id);
            8
        }
        class::EA => {
            d.u32(ea_size(open)?);
            4
        }
        class::ACCESS => {
            d.u32(open.access);
            4
        }
        class::POSITION => {
            d.u64(open.position);
            8
        }
        class::MODE => {
            d.u32(open.create_options & MODE_OPTIONS);
            4
        }
        class::ALIGNMENT => {
            d.u32(0);
            4
        }
        class::ALL => {
            need(open, access::FILE_READ_ATTRIBUTES)?;
            let name = format!("\\{}", open.path);
            fscc::all(&mut d, &m, delete_pending(), open.access, open.position, open.create_options & MODE_OPTIONS, &name);
            fscc::ALL_FIXED_LEN + 4
        }
        class::STREAM => {
            let list = match open.handle() {
                Some(h) => h.streams().map_err(NtStatus::from)?,
                None => vec![StreamInfo { name: "::$DATA".to_owned(), size: m.end_of_file, allocation_size: m.allocation_size }],
            };
            fscc::streams(&mut d, list.iter().map(|s| (s.name.as_str(), s.size, s.allocation_size)));
            32
        }
        class::COMPRESSION => {
            fscc::compression(&mut d, &m);
            16
        }
        class::NETWORK_OPEN => {
            need(open, access::FILE_READ_ATTRIBUTES)?;
            fscc::network_open(&mut d, &m);
            fscc::NETWORK_OPEN_LEN
        }
        class::ATTRIBUTE_TAG => {
            need(open, access::FILE_READ_ATTRIBUTES)?;
            fscc::attribute_tag(&mut d, &m);
            8
        }
        //= MS-SMB2 3.3.5.20.1
        //# If the FileInfoClass is FileNormalizedNameInformation and
        //# Connection.Dialect is not "3.1.1", the server MUST fail the request
        //# with STATUS_NOT_SUPPORTED.
        class::NORMALIZED_NAME if dialect != Dialect::SMB311 => return Err(NtStatus::NOT_SUPPORTED),
        class::NORMALIZED_NAME => {
            fscc::name_info(&mut d, &open.path);
            8
        }
        class::ALTERNATE_NAME => {
            // The share root has no name, so no short name either.
            let leaf = open.path.rsplit('\\').next().filter(|l| !l.is_empty()).ok_or(NtStatus::OBJECT_NAME_NOT_FOUND)?;
            fscc::name_info(&mut d, &fscc::short_name(leaf));
            8
        }
        _ => return Err(NtStatus::INVALID_INFO_CLASS),
    };
    Ok(Info { data: d, fixed })
}

/// FileEaInformation (MS-FSCC 2.4.13): the size of the open's EAs as a
/// FILE_FULL_EA_INFORMATION list; 0 for a pipe.
fn ea_size(open: &Open) -> Result<u32, NtStatus> {
    match open.handle() {
        Some(h) => Ok(smbq_wire::ea::list_size(&h.eas().map_err(NtStatus::from)?)),
        None => Ok(0),
    }
}

/// FileFullEaInformation (MS-FSA 2.1.5.11.x, MS-FSCC 2.4.15): the EAs
/// named by the request's FILE_GET_EA_INFORMATION list (one that is
/// missing with an empty value), or all of them; as many whole entries
/// as fit in `max`, and whether that is all. None at all is
/// NO_EAS_ON_FILE; not even the first fitting, BUFFER_TOO_SMALL.
fn full_ea(open: &Open, r: &QueryInfoRequest<'_>, max: usize) -> Result<(Vec<u8>, bool), NtStatus> {
    need(open, access::FILE_READ_EA)?;
    let h = open.handle().ok_or(NtStatus::INVALID_PARAMETER)?;
    let mut eas = h.eas().map_err(NtStatus::from)?;
    if !r.input.is_empty() {
        let names = smbq_wire::ea::decode_names(r.input).map_err(crate::meta::ea_status)?;
        eas = names
            .into_iter()
            .map(|n| match eas.iter().find(|e| e.name.eq_ignore_ascii_case(&n)) {
                Some(e) => e.clone(),
                None => smbq_wire::ea::Ea { flags: 0, name: n, value: Vec::new() },
            })
            .collect();
    }
    if eas.is_empty() {
        return Err(NtStatus::NO_EAS_ON_FILE);
    }
    // Whole entries, each but the last padded to 4, while they fit.
    let mut fit = 0;
    let mut used = 0;
    for e in &eas {
        let len = smbq_wire::ea::entry_len(e);
        if used + len > max {
            break;
        }
        used += len.next_multiple_of(4);
        fit += 1;
    }
    if fit == 0 {
        return Err(NtStatus::BUFFER_TOO_SMALL);
    }
    let all = fit == eas.len();
    eas.truncate(fit);
    let mut data = Vec::new();
    smbq_wire::ea::encode_full(&mut data, &eas);
    Ok((data, all))
}

/// Allocation units of `block_size` bytes as 512-byte sectors per unit.
fn units(block_size: u64) -> (u32, u32) {
    match u32::try_from(block_size) {
        Ok(b) if b >= 512 && b % 512 == 0 => (b / 512, 512),
        Ok(b) if b > 0 => (1, b),
        _ => (8, 512),
    }
}

/// SMB2_0_INFO_FILESYSTEM classes (MS-SMB2 3.3.5.20.2, MS-FSCC 2.5).
fn fs_info(server: &Server, open: &Open, c: u8) -> Result<Info, NtStatus> {
    let fs = open.share.fs().ok_or(NtStatus::INVALID_PARAMETER)?;
    let mut d = Vec::new();
    let fixed = match c {
        fs_class::VOLUME => {
            let st = fs.stat_fs().map_err(NtStatus::from)?;
            fscc::fs_volume(&mut d, server.start_time, st.serial, &open.share.name);
            24
        }
        fs_class::SIZE | fs_class::FULL_SIZE => {
            let st = fs.stat_fs().map_err(NtStatus::from)?;
            let (sectors_per_unit, bytes_per_sector) = units(st.block_size);
            let s = FsSize {
                total_units: st.total_blocks,
                caller_available_units: st.avail_blocks,
                actual_available_units: st.free_blocks,
                sectors_per_unit,
                bytes_per_sector,
            };
            if c == fs_class::SIZE {
                fscc::fs_size(&mut d, &s);
                24
            } else {
                fscc::fs_full_size(&mut d, &s);
                32
            }
        }
        fs_class::DEVICE => {
            let ro = if fs.read_only() { fscc::FILE_READ_ONLY_DEVICE } else { 0 };
            fscc::fs_device(&mut d, fscc::FILE_DEVICE_DISK, fscc::FILE_DEVICE_IS_MOUNTED | ro);
            8
        }
        fs_class::ATTRIBUTE => {
            let st = fs.stat_fs().map_err(NtStatus::from)?;
            //= MS-FSCC 2.5.1
            //# FILE_SUPPORTS_SPARSE_FILES: the SPARSE_FILE attribute is kept
            //# and holes are punched and found (FSCTL_SET_SPARSE, _SET_ZERO_DATA,
            //# _QUERY_ALLOCATED_RANGES); FILE_SUPPORTS_BLOCK_REFCOUNTING only
            //# where the file system clones blocks (FSCTL_DUPLICATE_EXTENTS_TO_FILE).
            let mut a = fs_attr::CASE_SENSITIVE_SEARCH
                | fs_attr::CASE_PRESERVED_NAMES
                | fs_attr::UNICODE_ON_DISK
                | fs_attr::SUPPORTS_SPARSE_FILES;
            if fs.named_streams() {
                a |= fs_attr::NAMED_STREAMS;
            }
            if fs.read_only() {
                a |= fs_attr::READ_ONLY_VOLUME;
            }
            if st.block_refcounting {
                a |= fs_attr::SUPPORTS_BLOCK_REFCOUNTING;
            }
            fscc::fs_attribute(&mut d, a, st.max_name_len.clamp(1, 255), "NTFS");
            16
        }
        fs_class::CONTROL => {
            fscc::fs_control(&mut d);
            48
        }
        fs_class::SECTOR_SIZE => {
            fscc::fs_sector_size(&mut d, 512);
            28
        }
        fs_class::OBJECT_ID => {
            fscc::fs_object_id(&mut d, &server.guid);
            64
        }
        _ => return Err(NtStatus::INVALID_INFO_CLASS),
    };
    Ok(Info { data: d, fixed })
}

/// SMB2_0_INFO_SECURITY (MS-SMB2 3.3.5.20.3): the parts of the file's
/// descriptor `info` selects (see [`crate::access::descriptor`]). Owner,
/// group and DACL need READ_CONTROL; a SACL is never returned (no open
/// is granted ACCESS_SYSTEM_SECURITY).
fn security(open: &Open, info: u32) -> Result<Vec<u8>, NtStatus> {
    if info & (secinfo::OWNER | secinfo::GROUP | secinfo::DACL) != 0 {
        need(open, access::READ_CONTROL)?;
    }
    let sd = match open.handle() {
        Some(h) => crate::access::descriptor(&h.security().map_err(NtStatus::from)?, h.is_dir),
        None => crate::access::descriptor(&smbq_vfs::Security::default(), false),
    };
    Ok(sd.select(info & !secinfo::SACL).to_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocation_units() {
        assert_eq!(units(4096), (8, 512));
        assert_eq!(units(512), (1, 512));
        assert_eq!(units(1000), (1, 1000));
        assert_eq!(units(0), (8, 512));
        assert_eq!(units(u64::MAX), (8, 512));
    }
}
