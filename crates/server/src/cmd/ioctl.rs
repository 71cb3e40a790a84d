//! IOCTL (MS-SMB2 2.2.31, 2.2.32; processing 3.3.5.15): the FSCTLs an SMB
//! server answers itself (validate negotiate, network interfaces, DFS
//! referrals, named pipe transceive, server-side copy), the sparse-file
//! ones (set sparse, zero data, allocated ranges), block cloning
//! (duplicate extents) and a few file system ones with fixed answers.
//! Unknown FSCTLs get what Samba answers
//! (source3/smbd/smb2_ioctl_network_fs.c): STATUS_FS_DRIVER_REQUIRED on
//! IPC$, STATUS_INVALID_DEVICE_REQUEST on a disk share.

use crate::byte_range::io_conflict;
use crate::ctx::{Ctx, HResult, Req};
use crate::open::{access, Open, OpenKind};
use crate::share::ShareKind;
use smbq_vfs::Handle;
use smbq_wire::fscc::attr;
use smbq_wire::ioctl::{
    encode_network_interface, encode_resume_key, encode_response, encode_validate_negotiate_response, fsctl,
    AllocatedRange, CopyChunkRequest, CopyChunkResponse, DuplicateExtents, IoctlRequest, ValidateNegotiateRequest,
    ZeroData, COPYCHUNK_FIXED,
    COPYCHUNK_RESPONSE_LEN, IS_FSCTL, NETWORK_INTERFACE_INFO_LEN, RESUME_KEY_RESPONSE_LEN,
    VALIDATE_NEGOTIATE_RESPONSE_LEN,
};
use smbq_wire::{DecodeError, Dialect, FileId, NtStatus, Put, Reader};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

/// Server-side copy limits (MS-SMB2 3.3.3: ServerSideCopyMaxNumberofChunks,
/// ServerSideCopyMaxChunkSize, ServerSideCopyMaxDataSize; the values
/// Windows uses).
pub const MAX_CHUNKS: u32 = 256;
pub const MAX_CHUNK_SIZE: u32 = 1024 * 1024;
pub const MAX_COPY_DATA: u32 = 16 * 1024 * 1024;
/// Access that lets an SMB2 open read data.
const READ_ACCESS: u32 = access::FILE_READ_DATA | access::FILE_EXECUTE;
/// Link speed reported for the one network interface, in bit/s.
const LINK_SPEED: u64 = 10_000_000_000;

/// Whether an IOCTL body changes the share: server-side copies into the
/// handle, and any FSCTL whose control code requires FILE_WRITE_ACCESS
/// (bit 15 of the code, as Windows defines CTL_CODE).
pub fn modifies(body: &[u8]) -> bool {
    let code = Reader::new(body.get(4..).unwrap_or(&[])).u32().unwrap_or(0);
    code == fsctl::SRV_COPYCHUNK || (code >> 14) & 2 != 0
}

/// MS-SMB2 3.3.5.15.
pub fn handle(ctx: &mut Ctx<'_>, req: &Req<'_>) -> HResult {
    let r = IoctlRequest::decode(req.msg).map_err(NtStatus::from)?;
    //= MS-SMB2 3.3.5.15
    //# If the Flags field of the request is not SMB2_0_IOCTL_IS_FSCTL the
    //# server MUST fail the request with STATUS_NOT_SUPPORTED.
    if r.flags != IS_FSCTL {
        return Err(NtStatus::NOT_SUPPORTED);
    }
    //# If InputCount, MaxInputResponse or MaxOutputResponse exceeds
    //# Connection.MaxTransactSize, fail with STATUS_INVALID_PARAMETER.
    let max_io = u64::from(ctx.max_io());
    let sent = r.input.len() as u64 + u64::from(r.output_count);
    let asked = u64::from(r.max_input_response) + u64::from(r.max_output_response);
    if sent > max_io || u64::from(r.max_input_response) > max_io || u64::from(r.max_output_response) > max_io {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    //= MS-SMB2 3.3.5.2.5
    //# For IOCTL the payload charged is the larger of the bytes sent and
    //# the bytes that may come back.
    ctx.check_charge(sent.max(asked).min(u64::from(u32::MAX)) as u32)?;

    let ipc = matches!(ctx.tree()?.share.kind, ShareKind::Ipc);
    //= MS-SMB2 3.3.5.15
    //# FSCTLs not addressed to an open (validate negotiate, network
    //# interfaces, DFS referrals) carry FileId 0xFFFFFFFFFFFFFFFF twice;
    //# any other FileId is STATUS_INVALID_PARAMETER (smbtorture bug14788).
    let no_file = matches!(
        r.ctl_code,
        fsctl::VALIDATE_NEGOTIATE_INFO
            | fsctl::QUERY_NETWORK_INTERFACE_INFO
            | fsctl::DFS_GET_REFERRALS
            | fsctl::DFS_GET_REFERRALS_EX
    );
    if no_file && r.file_id != FileId::RELATED {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    let mut out = Vec::new();
    let status = match r.ctl_code {
        fsctl::VALIDATE_NEGOTIATE_INFO => validate_negotiate(ctx, &r, &mut out)?,
        fsctl::QUERY_NETWORK_INTERFACE_INFO => network_interfaces(ctx, &r, ipc, &mut out)?,
        //= source3/smbd/smb2_ioctl_dfs.c (Samba, "host msdfs = no")
        //# DFS referrals: STATUS_INVALID_DEVICE_REQUEST off IPC$,
        //# STATUS_FS_DRIVER_REQUIRED on IPC$ when DFS is not hosted.
        fsctl::DFS_GET_REFERRALS | fsctl::DFS_GET_REFERRALS_EX => {
            return Err(if ipc { NtStatus::FS_DRIVER_REQUIRED } else { NtStatus::INVALID_DEVICE_REQUEST });
        }
        _ => on_open(ctx, &r, ipc, &mut out)?,
    };
    let header_start = ctx.header_start;
    encode_response(ctx.out, header_start, r.ctl_code, r.file_id, &out);
    Ok(status)
}

/// FSCTLs addressed to an open (the FileId must name one).
fn on_open(ctx: &mut Ctx<'_>, r: &IoctlRequest<'_>, ipc: bool, out: &mut Vec<u8>) -> HResult {
    let fid = ctx.resolve(r.file_id)?;
    let connection = ctx.conn.id;
    match r.ctl_code {
        fsctl::PIPE_TRANSCEIVE => {
            let o = ctx.conn.opens.get_mut(&fid.volatile).ok_or(NtStatus::FILE_CLOSED)?;
            let OpenKind::Pipe(pipe) = &mut o.kind else { return Err(NtStatus::INVALID_DEVICE_REQUEST) };
            let (data, more) = pipe.transceive(r.input, r.max_output_response as usize)?;
            out.extend_from_slice(&data);
            Ok(if more { NtStatus::BUFFER_OVERFLOW } else { NtStatus::SUCCESS })
        }
        fsctl::SRV_COPYCHUNK | fsctl::SRV_COPYCHUNK_WRITE => copychunk(ctx, fid, r, out),
        fsctl::LMR_REQUEST_RESILIENCY => request_resiliency(ctx, fid, r.input),
        fsctl::DUPLICATE_EXTENTS_TO_FILE => duplicate_extents(ctx, fid, r.input),
        code => {
            let o = ctx.conn.opens.get(&fid.volatile).ok_or(NtStatus::FILE_CLOSED)?;
            let Some(h) = o.handle() else {
                return Err(if ipc { NtStatus::FS_DRIVER_REQUIRED } else { NtStatus::INVALID_DEVICE_REQUEST });
            };
            match code {
                //= MS-SMB2 3.3.5.15.5
                //# The server returns a 24-byte ResumeKey that identifies
                //# the open, with ContextLength 0.
                fsctl::SRV_REQUEST_RESUME_KEY => {
                    if (r.max_output_response as usize) < RESUME_KEY_RESPONSE_LEN {
                        return Err(NtStatus::BUFFER_TOO_SMALL);
                    }
                    encode_resume_key(out, &resume_key(o.file_id, connection));
                    Ok(NtStatus::SUCCESS)
                }
                //= MS-FSCC 2.3.67
                //# A file system without compression accepts
                //# COMPRESSION_FORMAT_NONE and answers any other format with
                //# STATUS_NOT_SUPPORTED (smbtorture compress_notsup_set).
                fsctl::SET_COMPRESSION => match r.input {
                    [0, 0] => Ok(NtStatus::SUCCESS),
                    [_, _] => Err(NtStatus::NOT_SUPPORTED),
                    _ => Err(NtStatus::INVALID_PARAMETER),
                },
                //= MS-FSCC 2.3.7, 2.1.3
                //# FILE_OBJECTID_BUFFER: a 16-byte ObjectId (here the stable
                //# file id and the volume serial) and 48 bytes of
                //# BirthVolumeId/BirthObjectId/DomainId (zero: no tracking).
                fsctl::CREATE_OR_GET_OBJECT_ID | fsctl::GET_OBJECT_ID => {
                    if r.max_output_response < 64 {
                        return Err(NtStatus::BUFFER_TOO_SMALL);
                    }
                    let st = h.stat().map_err(NtStatus::from)?;
                    let serial = o.share.fs().and_then(|fs| fs.stat_fs().ok()).map(|f| f.serial).unwrap_or(0);
                    out.u64(st.file_id);
                    out.u32(serial);
                    out.u32(0x736D_6271); // "smbq"
                    out.zeros(48);
                    Ok(NtStatus::SUCCESS)
                }
                //= MS-FSA 2.1.5.10.14
                //# The file's REPARSE_DATA_BUFFER; a file that is not a
                //# reparse point: STATUS_NOT_A_REPARSE_POINT. Less room
                //# than its header: STATUS_BUFFER_TOO_SMALL; than all of
                //# it: as much as fits, STATUS_BUFFER_OVERFLOW.
                fsctl::GET_REPARSE_POINT => {
                    let data = h.reparse_point().map_err(NtStatus::from)?;
                    let max = r.max_output_response as usize;
                    if max < 8 {
                        return Err(NtStatus::BUFFER_TOO_SMALL);
                    }
                    out.bytes(data.get(..max).unwrap_or(&data));
                    Ok(if data.len() > max { NtStatus::BUFFER_OVERFLOW } else { NtStatus::SUCCESS })
                }
                //= MS-FSA 2.1.5.10.37, 2.1.5.10.8
                //# FSCTL_SET_REPARSE_POINT and FSCTL_DELETE_REPARSE_POINT
                //# need FILE_WRITE_DATA or FILE_WRITE_ATTRIBUTES (as Samba
                //# asks). A set buffer is kept as Samba keeps it
                //# (smbq_vfs::Handle::set_reparse_point); a delete names
                //# the tag with a ReparseDataLength of 0, else
                //# STATUS_IO_REPARSE_DATA_INVALID.
                fsctl::SET_REPARSE_POINT | fsctl::DELETE_REPARSE_POINT => {
                    if o.access & (access::FILE_WRITE_DATA | access::FILE_WRITE_ATTRIBUTES) == 0 || o.share.read_only() {
                        return Err(NtStatus::ACCESS_DENIED);
                    }
                    let done = if code == fsctl::SET_REPARSE_POINT {
                        h.set_reparse_point(r.input)
                    } else {
                        match smbq_wire::posix::split_reparse_buffer(r.input) {
                            Ok((tag, [])) => h.delete_reparse_point(tag),
                            _ => return Err(NtStatus::IO_REPARSE_DATA_INVALID),
                        }
                    };
                    done.map(|()| NtStatus::SUCCESS).map_err(NtStatus::from)
                }
                //= MS-FSCC 2.3.10
                //# Files are never compressed: COMPRESSION_FORMAT_NONE.
                fsctl::GET_COMPRESSION => {
                    if r.max_output_response < 2 {
                        return Err(NtStatus::BUFFER_TOO_SMALL);
                    }
                    out.u16(0);
                    Ok(NtStatus::SUCCESS)
                }
                fsctl::QUERY_ALLOCATED_RANGES => allocated_ranges(o, h, r, out),
                fsctl::SET_SPARSE => set_sparse(o, h, r.input),
                fsctl::SET_ZERO_DATA => {
                    let server = &ctx.conn.server;
                    let locked = |offset, len| {
                        let e = server.files.get(o.file_key);
                        io_conflict(e.as_ref().map_or(&[], |e| e.locks.as_slice()), o.owner(), offset, len, true)
                    };
                    zero_data(o, h, r.input, locked)
                }
                _ => Err(if ipc { NtStatus::FS_DRIVER_REQUIRED } else { NtStatus::INVALID_DEVICE_REQUEST }),
            }
        }
    }
}

/// Whether the file is sparse (FILE_ATTRIBUTE_SPARSE_FILE stored).
fn is_sparse(h: &Handle) -> Result<bool, NtStatus> {
    Ok(h.stat().map_err(NtStatus::from)?.attributes & attr::SPARSE_FILE != 0)
}

/// FSCTL_SET_SPARSE (MS-FSCC 2.3.64; MS-FSA 2.1.5.10). The flag is kept
/// as FILE_ATTRIBUTE_SPARSE_FILE among the stored attributes, as Samba
/// keeps it; only FSCTL_SET_ZERO_DATA and FSCTL_QUERY_ALLOCATED_RANGES act
/// on it (a Linux file has holes whatever the flag).
fn set_sparse(o: &Open, h: &Handle, input: &[u8]) -> HResult {
    //# Windows grants it with any of FILE_WRITE_DATA, FILE_WRITE_ATTRIBUTES
    //# or FILE_APPEND_DATA (smbtorture sparse_perms); else STATUS_ACCESS_DENIED.
    if o.access & (access::FILE_WRITE_DATA | access::FILE_WRITE_ATTRIBUTES | access::FILE_APPEND_DATA) == 0 {
        return Err(NtStatus::ACCESS_DENIED);
    }
    //# A directory is STATUS_INVALID_PARAMETER.
    if h.is_dir {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    //# FILE_SET_SPARSE_BUFFER is optional: without it SetSparse is TRUE.
    //# Bytes after SetSparse are ignored (smbtorture sparse_set_oversize).
    let sparse = input.first() != Some(&0);
    let attributes = h.stat().map_err(NtStatus::from)?.attributes;
    let want = if sparse { attributes | attr::SPARSE_FILE } else { attributes & !attr::SPARSE_FILE };
    if want != attributes {
        h.set_attributes(want).map_err(NtStatus::from)?;
    }
    Ok(NtStatus::SUCCESS)
}

/// FSCTL_QUERY_ALLOCATED_RANGES (MS-FSCC 2.3.51, 2.3.52; MS-FSA
/// 2.1.5.10.22). A sparse file's ranges come from SEEK_DATA/SEEK_HOLE; a
/// file that is not sparse is allocated everywhere below its size (as
/// Windows and Samba answer, whatever holes it has).
fn allocated_ranges(o: &Open, h: &Handle, r: &IoctlRequest<'_>, out: &mut Vec<u8>) -> HResult {
    //# FILE_READ_DATA is needed (smbtorture sparse_perms), else
    //# STATUS_ACCESS_DENIED.
    if o.access & access::FILE_READ_DATA == 0 {
        return Err(NtStatus::ACCESS_DENIED);
    }
    //# An input shorter than FILE_ALLOCATED_RANGE_BUFFER, a negative
    //# FileOffset or Length, or FileOffset + Length above MAXLONGLONG:
    //# STATUS_INVALID_PARAMETER. So is a directory.
    let q = AllocatedRange::decode(r.input).map_err(|_| NtStatus::INVALID_PARAMETER)?;
    let end = q.offset.checked_add(q.length).filter(|&e| e <= i64::MAX as u64).ok_or(NtStatus::INVALID_PARAMETER)?;
    if h.is_dir {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    let room = r.max_output_response as usize / AllocatedRange::LEN;
    let (ranges, more) = if is_sparse(h)? {
        h.allocated_ranges(q.offset, end, room).map_err(NtStatus::from)?
    } else {
        let end = end.min(h.stat().map_err(NtStatus::from)?.size);
        match (q.offset < end, room) {
            (false, _) => (Vec::new(), false),
            (true, 0) => (Vec::new(), true),
            (true, _) => (vec![(q.offset, end - q.offset)], false),
        }
    };
    //# No room for one range where there is one: STATUS_BUFFER_TOO_SMALL;
    //# room for some: those, with STATUS_BUFFER_OVERFLOW.
    if more && ranges.is_empty() {
        return Err(NtStatus::BUFFER_TOO_SMALL);
    }
    for (offset, length) in ranges {
        AllocatedRange { offset, length }.encode(out);
    }
    Ok(if more { NtStatus::BUFFER_OVERFLOW } else { NtStatus::SUCCESS })
}

/// FSCTL_SET_ZERO_DATA (MS-FSCC 2.3.85; MS-FSA 2.1.5.10). A sparse file
/// gets a hole punched; any other file is zeroed in place and stays
/// allocated, as Windows writes zeros to a file that is not sparse. The
/// size never changes.
fn zero_data(o: &Open, h: &Handle, input: &[u8], locked: impl Fn(u64, u64) -> bool) -> HResult {
    //# FILE_WRITE_DATA is needed, else STATUS_ACCESS_DENIED.
    if o.access & access::FILE_WRITE_DATA == 0 {
        return Err(NtStatus::ACCESS_DENIED);
    }
    //# A short input, a negative offset, FileOffset beyond BeyondFinalZero
    //# or a directory: STATUS_INVALID_PARAMETER.
    let z = ZeroData::decode(input).map_err(|_| NtStatus::INVALID_PARAMETER)?;
    if h.is_dir || z.file_offset > z.beyond_final_zero {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    let len = z.beyond_final_zero - z.file_offset;
    if len == 0 {
        return Ok(NtStatus::SUCCESS);
    }
    //# A byte-range lock of another open over the range:
    //# STATUS_FILE_LOCK_CONFLICT.
    if locked(z.file_offset, len) {
        return Err(NtStatus::FILE_LOCK_CONFLICT);
    }
    h.zero_range(z.file_offset, len, is_sparse(h)?).map_err(NtStatus::from)?;
    Ok(NtStatus::SUCCESS)
}

/// FSCTL_DUPLICATE_EXTENTS_TO_FILE (MS-FSCC 2.3.8; MS-FSA 2.1.5.10), by
/// FICLONERANGE where the share's file system clones blocks; the checks
/// and their order as Samba makes them (source3/smbd/smb2_ioctl_filesys.c).
fn duplicate_extents(ctx: &mut Ctx<'_>, fid: FileId, input: &[u8]) -> HResult {
    let target = ctx.conn.opens.get(&fid.volatile).ok_or(NtStatus::FILE_CLOSED)?;
    let Some(dst) = target.handle() else { return Err(NtStatus::INVALID_DEVICE_REQUEST) };
    //# Without FILE_SUPPORTS_BLOCK_REFCOUNTING: STATUS_INVALID_DEVICE_REQUEST.
    let clones = target.share.fs().and_then(|fs| fs.stat_fs().ok()).is_some_and(|st| st.block_refcounting);
    if !clones {
        return Err(NtStatus::INVALID_DEVICE_REQUEST);
    }
    let d = DuplicateExtents::decode(input).map_err(|_| NtStatus::INVALID_PARAMETER)?;
    //# A source FileId that names no open of this session:
    //# STATUS_INVALID_HANDLE (as Windows answers).
    let source = ctx
        .conn
        .opens
        .get(&d.source.volatile)
        .filter(|s| s.file_id.persistent == d.source.persistent && s.session_id == ctx.session_id)
        .ok_or(NtStatus::INVALID_HANDLE)?;
    let Some(src) = source.handle() else { return Err(NtStatus::INVALID_HANDLE) };
    if target.access & access::FILE_WRITE_DATA == 0 || source.access & access::FILE_READ_DATA == 0 {
        return Err(NtStatus::ACCESS_DENIED);
    }
    if src.is_dir || dst.is_dir {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    if d.byte_count == 0 {
        return Ok(NtStatus::SUCCESS);
    }
    let src_end = d.source_offset.checked_add(d.byte_count).ok_or(NtStatus::INVALID_PARAMETER)?;
    d.target_offset.checked_add(d.byte_count).ok_or(NtStatus::INVALID_PARAMETER)?;
    //# A source range past the source's end: STATUS_NOT_SUPPORTED; a target
    //# range past the target's end is cut there (Windows' behaviour).
    if src.stat().map_err(NtStatus::from)?.size < src_end {
        return Err(NtStatus::NOT_SUPPORTED);
    }
    let dst_size = dst.stat().map_err(NtStatus::from)?.size;
    let count = d.byte_count.min(dst_size.checked_sub(d.target_offset).ok_or(NtStatus::INVALID_PARAMETER)?);
    //# Overlapping ranges of one file, and a sparse source with a target
    //# that is not sparse: STATUS_NOT_SUPPORTED.
    let same = source.file_key == target.file_key;
    if same && d.source_offset < d.target_offset.saturating_add(count) && d.target_offset < d.source_offset.saturating_add(count) {
        return Err(NtStatus::NOT_SUPPORTED);
    }
    if is_sparse(src)? && !is_sparse(dst)? {
        return Err(NtStatus::NOT_SUPPORTED);
    }
    //# Byte-range locks do not stop it, on either file (unlike
    //# FSCTL_SRV_COPYCHUNK; smbtorture dup_extents_src_lock, _dest_lock).
    if count > 0 {
        dst.clone_range(src, d.source_offset, d.target_offset, count).map_err(NtStatus::from)?;
    }
    Ok(NtStatus::SUCCESS)
}

/// The resume key of an open: its volatile and persistent ids and the
/// connection, so a key names one open of one connection.
fn resume_key(fid: FileId, connection: u64) -> [u8; 24] {
    let mut k = [0u8; 24];
    k[..8].copy_from_slice(&fid.volatile.to_le_bytes());
    k[8..16].copy_from_slice(&fid.persistent.to_le_bytes());
    k[16..].copy_from_slice(&connection.to_le_bytes());
    k
}

/// The open a resume key names, if it is an open of this session.
fn source_open<'a>(ctx: &'a Ctx<'_>, key: &[u8; 24]) -> Option<&'a Open> {
    let mut r = smbq_wire::Reader::new(key);
    let (volatile, persistent, connection) = (r.u64().ok()?, r.u64().ok()?, r.u64().ok()?);
    let o = ctx.conn.opens.get(&volatile)?;
    (connection == ctx.conn.id && o.file_id.persistent == persistent && o.session_id == ctx.session_id).then_some(o)
}

/// SRV_COPYCHUNK_RESPONSE carrying the server's limits, sent with
/// STATUS_INVALID_PARAMETER (MS-SMB2 3.3.5.15.6).
fn limits(out: &mut Vec<u8>) -> HResult {
    CopyChunkResponse { chunks_written: MAX_CHUNKS, chunk_bytes_written: MAX_CHUNK_SIZE, total_bytes_written: MAX_COPY_DATA }
        .encode(out);
    Ok(NtStatus::INVALID_PARAMETER)
}

/// FSCTL_SRV_COPYCHUNK / FSCTL_SRV_COPYCHUNK_WRITE (MS-SMB2 3.3.5.15.6):
/// chunk by chunk, each read whole into a buffer (at most 1 MiB) and
/// written, so a copy within one file behaves like memmove per chunk.
fn copychunk(ctx: &mut Ctx<'_>, fid: FileId, r: &IoctlRequest<'_>, out: &mut Vec<u8>) -> HResult {
    //# If MaxOutputResponse is less than the size of SRV_COPYCHUNK_RESPONSE,
    //# or InputCount less than the size of SRV_COPYCHUNK_COPY, fail with
    //# STATUS_INVALID_PARAMETER.
    if (r.max_output_response as usize) < COPYCHUNK_RESPONSE_LEN || r.input.len() < COPYCHUNK_FIXED {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    let target = ctx.conn.opens.get(&fid.volatile).ok_or(NtStatus::FILE_CLOSED)?;
    let Some(dst) = target.handle() else { return Err(NtStatus::INVALID_DEVICE_REQUEST) };
    //# The target needs FILE_WRITE_DATA, and for FSCTL_SRV_COPYCHUNK
    //# FILE_READ_DATA too, else STATUS_ACCESS_DENIED.
    if target.access & access::FILE_WRITE_DATA == 0
        || (r.ctl_code == fsctl::SRV_COPYCHUNK && target.access & access::FILE_READ_DATA == 0)
    {
        return Err(NtStatus::ACCESS_DENIED);
    }
    let req = match CopyChunkRequest::decode(r.input, MAX_CHUNKS as usize) {
        Ok(req) => req,
        Err(DecodeError::TooLong) => return limits(out),
        Err(_) => return Err(NtStatus::INVALID_PARAMETER),
    };
    //# A chunk longer than ServerSideCopyMaxChunkSize (or empty), or a
    //# total above ServerSideCopyMaxDataSize: STATUS_INVALID_PARAMETER with
    //# the limits in the response.
    let total: u64 = req.chunks.iter().map(|c| u64::from(c.length)).sum();
    if total > u64::from(MAX_COPY_DATA) || req.chunks.iter().any(|c| c.length == 0 || c.length > MAX_CHUNK_SIZE) {
        return limits(out);
    }
    //# The source open is found by its ResumeKey: STATUS_OBJECT_NAME_NOT_FOUND
    //# if none, STATUS_ACCESS_DENIED without FILE_READ_DATA (FILE_EXECUTE
    //# also lets the source be read, as smbtorture copy_chunk_bad_access
    //# expects).
    let source = source_open(ctx, &req.source_key).ok_or(NtStatus::OBJECT_NAME_NOT_FOUND)?;
    let Some(src) = source.handle() else { return Err(NtStatus::OBJECT_NAME_NOT_FOUND) };
    if source.access & READ_ACCESS == 0 {
        return Err(NtStatus::ACCESS_DENIED);
    }
    if src.is_dir || dst.is_dir {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    let (src_owner, dst_owner) = (source.owner(), target.owner());
    let (src_key, dst_key) = (source.file_key, target.file_key);
    let server = ctx.conn.server.clone();

    let mut done = CopyChunkResponse { chunks_written: 0, chunk_bytes_written: 0, total_bytes_written: 0 };
    let mut buf = Vec::new();
    let mut status = NtStatus::SUCCESS;
    for c in &req.chunks {
        let len = u64::from(c.length);
        let size = src.stat().map_err(NtStatus::from)?.size;
        //# A source range past the end of the file fails with
        //# STATUS_INVALID_VIEW_SIZE (MS-FSA 2.1.5.9.18, as Windows answers).
        if c.source_offset.checked_add(len).filter(|&end| end <= size).is_none() || c.target_offset.checked_add(len).is_none() {
            status = NtStatus::INVALID_VIEW_SIZE;
            break;
        }
        // One file's lock at a time.
        let conflict = |key: u64, owner, offset, write| {
            server.files.get(key).is_some_and(|e| io_conflict(&e.locks, owner, offset, len, write))
        };
        let conflict = conflict(src_key, src_owner, c.source_offset, false) || conflict(dst_key, dst_owner, c.target_offset, true);
        if conflict {
            status = NtStatus::FILE_LOCK_CONFLICT;
            break;
        }
        buf.clear();
        let n = src.read_append(&mut buf, c.length as usize, c.source_offset).map_err(NtStatus::from)?;
        if n != c.length as usize {
            status = NtStatus::INVALID_VIEW_SIZE;
            break;
        }
        if let Err(e) = dst.write_at(&buf, c.target_offset) {
            status = e.into();
            break;
        }
        done.chunks_written += 1;
        done.total_bytes_written += c.length;
    }
    done.encode(out);
    Ok(status)
}

/// FSCTL_VALIDATE_NEGOTIATE_INFO (MS-SMB2 3.3.5.15.12). A mismatch
/// terminates the connection (`ctx.disconnect`).
fn validate_negotiate(ctx: &mut Ctx<'_>, r: &IoctlRequest<'_>, out: &mut Vec<u8>) -> HResult {
    let v = ValidateNegotiateRequest::decode(r.input).map_err(|_| NtStatus::INVALID_PARAMETER)?;
    if (r.max_output_response as usize) < VALIDATE_NEGOTIATE_RESPONSE_LEN {
        return Err(NtStatus::BUFFER_TOO_SMALL);
    }
    let neg = ctx.conn.neg.as_ref().ok_or(NtStatus::ACCESS_DENIED)?;
    //# The server MUST determine the greatest common dialect between the
    //# dialects it implements and the Dialects array; if none, or not equal
    //# to Connection.Dialect, terminate. Likewise if Capabilities, Guid or
    //# SecurityMode differ from what the client sent in NEGOTIATE.
    let dialect = crate::conn_state::DIALECTS.iter().copied().find(|d| v.dialects.contains(d));
    if dialect != Some(neg.dialect)
        || v.guid != neg.client_guid
        || v.security_mode != neg.client_security_mode
        || v.capabilities != neg.client_capabilities
    {
        ctx.disconnect = true;
        return Err(NtStatus::ACCESS_DENIED);
    }
    let (caps, mode, dialect) = (neg.server_capabilities, neg.server_security_mode, neg.dialect);
    encode_validate_negotiate_response(out, caps, &ctx.conn.server.guid, mode, dialect);
    Ok(NtStatus::SUCCESS)
}

/// The longest a resilient open may wait for its client (Windows'
/// MaxResiliencyTimeout).
const MAX_RESILIENCY: Duration = Duration::from_secs(300);

/// FSCTL_LMR_REQUEST_RESILIENCY (MS-SMB2 2.2.31.3, 3.3.5.15.9): the open
/// outlives a lost connection for the timeout asked (at most 5 minutes; 0:
/// the durable default), whatever oplock or lease it holds, and comes back
/// with a durable (v1) reconnect.
fn request_resiliency(ctx: &mut Ctx<'_>, fid: FileId, input: &[u8]) -> HResult {
    if ctx.dialect() == Dialect::SMB202 {
        return Err(NtStatus::INVALID_DEVICE_REQUEST);
    }
    // NETWORK_RESILIENCY_REQUEST: Timeout (ms), Reserved.
    let Some(&[a, b, c, d, _, _, _, _]) = input.get(..8).and_then(|i| <&[u8; 8]>::try_from(i).ok()) else {
        return Err(NtStatus::INVALID_PARAMETER);
    };
    let ms = u32::from_le_bytes([a, b, c, d]);
    let timeout = if ms == 0 { crate::durable::DEFAULT_TIMEOUT } else { Duration::from_millis(u64::from(ms)) };
    if timeout > MAX_RESILIENCY {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    let user = ctx.session()?.user.to_lowercase();
    let client_guid = ctx.conn.client_guid();
    let o = ctx.conn.opens.get_mut(&fid.volatile).ok_or(NtStatus::FILE_CLOSED)?;
    if o.handle().is_none() {
        return Err(NtStatus::INVALID_DEVICE_REQUEST);
    }
    match &mut o.durable {
        Some(d) => {
            d.resilient = true;
            d.timeout = timeout;
        }
        None => {
            o.durable = Some(crate::open::Durable { v2: false, create_guid: [0; 16], client_guid, user, timeout, resilient: true })
        }
    }
    Ok(NtStatus::SUCCESS)
}

/// FSCTL_QUERY_NETWORK_INTERFACE_INFO (MS-SMB2 3.3.5.15.11): the
/// addresses the server listens on (`ServerConfig::interfaces`, found by
/// the transport with their link speeds), chained by Next; no RSS/RDMA.
/// Without that list: the connection's own address, index 1, 10 Gbit/s;
/// when that is not known either (only for a loopback peer is it
/// guessed), the answer is Samba's for a server without multi-channel
/// (FS_DRIVER_REQUIRED on IPC$, else INVALID_DEVICE_REQUEST).
fn network_interfaces(ctx: &mut Ctx<'_>, r: &IoctlRequest<'_>, ipc: bool, out: &mut Vec<u8>) -> HResult {
    let mut list: Vec<(u32, u64, IpAddr)> =
        ctx.conn.server.config.interfaces.iter().map(|i| (i.index, i.link_speed, i.addr)).collect();
    if list.is_empty() {
        let addr = match ctx.conn.info.local.or(ctx.conn.info.peer).map(|p| p.ip()) {
            Some(ip) if ctx.conn.info.local.is_some() => ip,
            Some(ip @ IpAddr::V4(_)) if ip.is_loopback() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            Some(ip @ IpAddr::V6(_)) if ip.is_loopback() => IpAddr::V6(Ipv6Addr::LOCALHOST),
            _ => return Err(if ipc { NtStatus::FS_DRIVER_REQUIRED } else { NtStatus::INVALID_DEVICE_REQUEST }),
        };
        list.push((1, LINK_SPEED, addr));
    }
    if (r.max_output_response as usize) < list.len() * NETWORK_INTERFACE_INFO_LEN {
        return Err(NtStatus::BUFFER_TOO_SMALL);
    }
    let count = list.len();
    for (n, (index, speed, addr)) in list.into_iter().enumerate() {
        let start = out.len();
        encode_network_interface(out, index, 0, speed, addr);
        if n + 1 < count {
            if let Some(next) = out.get_mut(start..start + 4) {
                next.copy_from_slice(&(NETWORK_INTERFACE_INFO_LEN as u32).to_le_bytes());
            }
        }
    }
    Ok(NtStatus::SUCCESS)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use crate::harness::{self, DISK, IPC};
    use super::*;
    use crate::files::{ByteLock, OpenOwner};
    use smbq_wire::negotiate::caps;
    use smbq_wire::Dialect;
    use smbq_wire::ioctl::{Chunk, COPYCHUNK_RESPONSE_LEN};

    fn ioctl(h: &mut harness::H, tree: u32, ctl_code: u32, fid: FileId, input: &[u8], max_out: u32) -> (HResult, Vec<u8>) {
        let mut body = Vec::new();
        IoctlRequest { ctl_code, file_id: fid, input, max_input_response: 0, output_count: 0, max_output_response: max_out, flags: IS_FSCTL }
            .encode(&mut body);
        let (r, out, _) = h.call(tree, handle, &body);
        (r, out)
    }

    /// The output buffer of an IOCTL response body.
    fn output(body: &[u8]) -> &[u8] {
        let off = u32::from_le_bytes(body[32..36].try_into().unwrap()) as usize - 64;
        let len = u32::from_le_bytes(body[36..40].try_into().unwrap()) as usize;
        &body[off..off + len]
    }

    #[test]
    fn flags_must_be_fsctl() {
        let mut h = harness::new();
        let mut body = Vec::new();
        IoctlRequest { ctl_code: fsctl::GET_COMPRESSION, file_id: FileId::RELATED, input: &[], max_input_response: 0, output_count: 0, max_output_response: 8, flags: 0 }
            .encode(&mut body);
        assert_eq!(h.call(DISK, handle, &body).0, Err(NtStatus::NOT_SUPPORTED));
        let (r, _) = ioctl(&mut h, DISK, fsctl::GET_COMPRESSION, FileId::RELATED, &[], 16 << 20);
        assert_eq!(r, Err(NtStatus::INVALID_PARAMETER));
    }

    #[test]
    fn validate_negotiate_info() {
        let mut h = harness::new();
        let mut v = ValidateNegotiateRequest {
            capabilities: 0x7f,
            guid: [7; 16],
            security_mode: 1,
            dialects: vec![Dialect::SMB202, Dialect::SMB210, Dialect::SMB300, Dialect::SMB302],
        };
        let mut input = Vec::new();
        v.encode(&mut input);
        let (r, body) = ioctl(&mut h, IPC, fsctl::VALIDATE_NEGOTIATE_INFO, FileId::RELATED, &input, 24);
        assert_eq!(r, Ok(NtStatus::SUCCESS));
        let out = output(&body);
        assert_eq!(out.len(), 24);
        assert_eq!(&out[..4], &(caps::LARGE_MTU | caps::ENCRYPTION).to_le_bytes());
        assert_eq!(&out[4..20], &h.conn.st.server.guid);
        assert_eq!(&out[20..], &[1, 0, 0x02, 0x03]);
        let (r, _) = ioctl(&mut h, IPC, fsctl::VALIDATE_NEGOTIATE_INFO, FileId::RELATED, &input, 23);
        assert_eq!(r, Err(NtStatus::BUFFER_TOO_SMALL));
        assert_eq!(ioctl(&mut h, IPC, fsctl::VALIDATE_NEGOTIATE_INFO, FileId::RELATED, &input[..20], 24).0, Err(NtStatus::INVALID_PARAMETER));
        // Any difference from NEGOTIATE (a downgraded dialect list here).
        v.dialects.pop();
        let mut input = Vec::new();
        v.encode(&mut input);
        let (r, _) = ioctl(&mut h, IPC, fsctl::VALIDATE_NEGOTIATE_INFO, FileId::RELATED, &input, 24);
        assert_eq!(r, Err(NtStatus::ACCESS_DENIED));
    }

    #[test]
    fn network_interfaces_are_chained_by_next() {
        let iface = |index, addr: &str, gbit: u64| crate::NetInterface { index, addr: addr.parse().unwrap(), link_speed: gbit * 1_000_000_000 };
        let mut h = harness::with_interfaces(vec![iface(2, "10.1.0.1", 25), iface(3, "fd00::1", 1)]);
        let (r, body) = ioctl(&mut h, IPC, fsctl::QUERY_NETWORK_INTERFACE_INFO, FileId::RELATED, &[], 65536);
        assert_eq!(r, Ok(NtStatus::SUCCESS));
        let out = output(&body);
        assert_eq!(out.len(), 2 * NETWORK_INTERFACE_INFO_LEN);
        let (a, b) = out.split_at(NETWORK_INTERFACE_INFO_LEN);
        // Next, IfIndex, LinkSpeed, then the sockaddr (family 2, port, address).
        assert_eq!(&a[..8], &[152, 0, 0, 0, 2, 0, 0, 0]);
        assert_eq!(&a[16..24], &25_000_000_000u64.to_le_bytes());
        assert_eq!(&a[24..32], &[2, 0, 0, 0, 10, 1, 0, 1]);
        assert_eq!(&b[..8], &[0, 0, 0, 0, 3, 0, 0, 0]);
        assert_eq!(&b[24..26], &[0x17, 0]);
        let (r, _) = ioctl(&mut h, IPC, fsctl::QUERY_NETWORK_INTERFACE_INFO, FileId::RELATED, &[], 200);
        assert_eq!(r, Err(NtStatus::BUFFER_TOO_SMALL));
    }

    #[test]
    fn network_interface_dfs_and_unknown() {
        let mut h = harness::new();
        let (r, body) = ioctl(&mut h, IPC, fsctl::QUERY_NETWORK_INTERFACE_INFO, FileId::RELATED, &[], 65536);
        assert_eq!(r, Ok(NtStatus::SUCCESS));
        assert_eq!(&output(&body)[24..32], &[2, 0, 0, 0, 127, 0, 0, 1]);
        let real = FileId { persistent: 1, volatile: 1 };
        for code in [fsctl::QUERY_NETWORK_INTERFACE_INFO, fsctl::VALIDATE_NEGOTIATE_INFO, fsctl::DFS_GET_REFERRALS] {
            assert_eq!(ioctl(&mut h, IPC, code, real, &[], 65536).0, Err(NtStatus::INVALID_PARAMETER));
        }
        let (r, _) = ioctl(&mut h, IPC, fsctl::DFS_GET_REFERRALS, FileId::RELATED, &[4, 0, 0, 0], 65536);
        assert_eq!(r, Err(NtStatus::FS_DRIVER_REQUIRED));
        let (r, _) = ioctl(&mut h, DISK, fsctl::DFS_GET_REFERRALS_EX, FileId::RELATED, &[4, 0, 0, 0], 65536);
        assert_eq!(r, Err(NtStatus::INVALID_DEVICE_REQUEST));
        let f = h.open("a.txt", access::FILE_ALL);
        assert_eq!(ioctl(&mut h, DISK, 0x0009_0000, f, &[], 64).0, Err(NtStatus::INVALID_DEVICE_REQUEST));
        assert_eq!(ioctl(&mut h, DISK, fsctl::GET_REPARSE_POINT, f, &[], 64).0, Err(NtStatus::NOT_A_REPARSE_POINT));
        let (r, a) = ioctl(&mut h, DISK, fsctl::CREATE_OR_GET_OBJECT_ID, f, &[], 64);
        assert_eq!(r, Ok(NtStatus::SUCCESS));
        let (_, b) = ioctl(&mut h, DISK, fsctl::GET_OBJECT_ID, f, &[], 64);
        assert_eq!(a[a.len() - 64..], b[b.len() - 64..], "the object id is stable");
        assert_eq!(ioctl(&mut h, DISK, fsctl::GET_OBJECT_ID, f, &[], 63).0, Err(NtStatus::BUFFER_TOO_SMALL));
        assert_eq!(ioctl(&mut h, DISK, fsctl::SET_COMPRESSION, f, &[0, 0], 64).0, Ok(NtStatus::SUCCESS));
        assert_eq!(ioctl(&mut h, DISK, fsctl::SET_COMPRESSION, f, &[1, 0], 64).0, Err(NtStatus::NOT_SUPPORTED));
        assert_eq!(ioctl(&mut h, DISK, fsctl::PIPE_TRANSCEIVE, f, &[1], 64).0, Err(NtStatus::INVALID_DEVICE_REQUEST));
        let (r, body) = ioctl(&mut h, DISK, fsctl::GET_COMPRESSION, f, &[], 2);
        assert_eq!((r, output(&body)), (Ok(NtStatus::SUCCESS), &[0u8, 0][..]));
        // A FileId of another tree is closed to this one.
        assert_eq!(ioctl(&mut h, IPC, fsctl::GET_COMPRESSION, f, &[], 2).0, Err(NtStatus::FILE_CLOSED));
        let p = h.open_pipe();
        assert_eq!(ioctl(&mut h, IPC, 0x0009_0000, p, &[], 64).0, Err(NtStatus::FS_DRIVER_REQUIRED));
    }

    #[test]
    fn allocated_ranges() {
        let mut h = harness::new();
        std::fs::write(h.dir.path().join("r.bin"), [1u8; 1000]).unwrap();
        let f = h.open("r.bin", access::FILE_ALL);
        let q = |o: u64, l: u64| [o.to_le_bytes(), l.to_le_bytes()].concat();
        let (r, body) = ioctl(&mut h, DISK, fsctl::QUERY_ALLOCATED_RANGES, f, &q(100, 10_000), 64);
        assert_eq!(r, Ok(NtStatus::SUCCESS));
        assert_eq!(output(&body), &q(100, 900)[..]);
        let (_, body) = ioctl(&mut h, DISK, fsctl::QUERY_ALLOCATED_RANGES, f, &q(2000, 10), 64);
        assert!(output(&body).is_empty());
        assert_eq!(ioctl(&mut h, DISK, fsctl::QUERY_ALLOCATED_RANGES, f, &q(0, 10), 8).0, Err(NtStatus::BUFFER_TOO_SMALL));
        assert_eq!(ioctl(&mut h, DISK, fsctl::QUERY_ALLOCATED_RANGES, f, &q(u64::MAX, 1), 64).0, Err(NtStatus::INVALID_PARAMETER));
    }

    #[test]
    fn pipe_transceive_overflow() {
        let mut h = harness::new();
        let p = h.open_pipe();
        // BIND for srvsvc over NDR: its BIND_ACK (68 bytes) in 20-byte reads.
        let mut bind = vec![5, 0, 11, 3, 0x10, 0, 0, 0, 72, 0, 0, 0, 1, 0, 0, 0, 0xb8, 0x10, 0xb8, 0x10, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0];
        bind.extend_from_slice(&[0xc8, 0x4f, 0x32, 0x4b, 0x70, 0x16, 0xd3, 0x01, 0x12, 0x78, 0x5a, 0x47, 0xbf, 0x6e, 0xe1, 0x88, 3, 0, 0, 0]);
        bind.extend_from_slice(&[0x04, 0x5d, 0x88, 0x8a, 0xeb, 0x1c, 0xc9, 0x11, 0x9f, 0xe8, 0x08, 0x00, 0x2b, 0x10, 0x48, 0x60, 2, 0, 0, 0]);
        let (r, body) = ioctl(&mut h, IPC, fsctl::PIPE_TRANSCEIVE, p, &bind, 20);
        assert_eq!(r, Ok(NtStatus::BUFFER_OVERFLOW));
        let first = output(&body);
        assert_eq!(first.len(), 20);
        assert_eq!(&first[..4], &[5, 0, 12, 3]);
    }

    fn cc_input(key: &[u8], chunks: &[Chunk]) -> Vec<u8> {
        let mut v = Vec::new();
        CopyChunkRequest { source_key: key.try_into().unwrap(), chunks: chunks.to_vec() }.encode(&mut v);
        v
    }

    fn cc_response(body: &[u8]) -> CopyChunkResponse {
        CopyChunkResponse::decode(output(body)).unwrap()
    }

    #[test]
    fn copychunk() {
        let mut h = harness::new();
        let data: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(h.dir.path().join("src"), &data).unwrap();
        let src = h.open("src", access::FILE_ALL);
        let dst = h.open("dst", access::FILE_ALL);
        let (r, body) = ioctl(&mut h, DISK, fsctl::SRV_REQUEST_RESUME_KEY, src, &[], 32);
        assert_eq!(r, Ok(NtStatus::SUCCESS));
        let out = output(&body).to_vec();
        assert_eq!(out.len(), 32);
        let key = &out[..24];

        let chunks = [
            Chunk { source_offset: 0, target_offset: 4096, length: 4096 },
            Chunk { source_offset: 4096, target_offset: 0, length: 4096 },
        ];
        let (r, body) = ioctl(&mut h, DISK, fsctl::SRV_COPYCHUNK_WRITE, dst, &cc_input(key, &chunks), 12);
        assert_eq!(r, Ok(NtStatus::SUCCESS));
        assert_eq!(cc_response(&body), CopyChunkResponse { chunks_written: 2, chunk_bytes_written: 0, total_bytes_written: 8192 });
        let copied = std::fs::read(h.dir.path().join("dst")).unwrap();
        assert_eq!(&copied[4096..], &data[..4096]);
        assert_eq!(&copied[..4096], &data[4096..]);

        // Overlapping copy within the source file itself.
        let overlap = [Chunk { source_offset: 0, target_offset: 100, length: 1000 }];
        let (r, _) = ioctl(&mut h, DISK, fsctl::SRV_COPYCHUNK, src, &cc_input(key, &overlap), 12);
        assert_eq!(r, Ok(NtStatus::SUCCESS));
        assert_eq!(&std::fs::read(h.dir.path().join("src")).unwrap()[100..1100], &data[..1000]);

        // Limits: an oversized chunk, an empty one, too many chunks.
        let limits = CopyChunkResponse { chunks_written: 256, chunk_bytes_written: 1 << 20, total_bytes_written: 16 << 20 };
        for bad in [
            cc_input(key, &[Chunk { source_offset: 0, target_offset: 0, length: (1 << 20) + 1 }]),
            cc_input(key, &[Chunk { source_offset: 0, target_offset: 0, length: 0 }]),
            cc_input(key, &[Chunk { source_offset: 0, target_offset: 0, length: 1 }; 257]),
            cc_input(key, &[Chunk { source_offset: 0, target_offset: 0, length: 1 << 20 }; 17]),
        ] {
            let (r, body) = ioctl(&mut h, DISK, fsctl::SRV_COPYCHUNK_WRITE, dst, &bad, 12);
            assert_eq!(r, Ok(NtStatus::INVALID_PARAMETER));
            assert_eq!(cc_response(&body), limits);
        }
        let one = [Chunk { source_offset: 0, target_offset: 0, length: 10 }];
        assert_eq!(ioctl(&mut h, DISK, fsctl::SRV_COPYCHUNK_WRITE, dst, &cc_input(key, &one), 11).0, Err(NtStatus::INVALID_PARAMETER));
        assert_eq!(ioctl(&mut h, DISK, fsctl::SRV_COPYCHUNK_WRITE, dst, &[0; 31], 12).0, Err(NtStatus::INVALID_PARAMETER));

        // A bad key; a key of an open without read access; a target without write.
        assert_eq!(ioctl(&mut h, DISK, fsctl::SRV_COPYCHUNK_WRITE, dst, &cc_input(&[9; 24], &one), 12).0, Err(NtStatus::OBJECT_NAME_NOT_FOUND));
        let wo = h.open("src", access::FILE_WRITE_DATA);
        let (_, body) = ioctl(&mut h, DISK, fsctl::SRV_REQUEST_RESUME_KEY, wo, &[], 32);
        let wo_key = output(&body)[..24].to_vec();
        assert_eq!(ioctl(&mut h, DISK, fsctl::SRV_COPYCHUNK_WRITE, dst, &cc_input(&wo_key, &one), 12).0, Err(NtStatus::ACCESS_DENIED));
        let ro = h.open("dst", access::FILE_READ_DATA);
        assert_eq!(ioctl(&mut h, DISK, fsctl::SRV_COPYCHUNK_WRITE, ro, &cc_input(key, &one), 12).0, Err(NtStatus::ACCESS_DENIED));
        // Execute access reads too.
        let xo = h.open("src", access::FILE_EXECUTE);
        let (_, body) = ioctl(&mut h, DISK, fsctl::SRV_REQUEST_RESUME_KEY, xo, &[], 32);
        let xo_key = output(&body)[..24].to_vec();
        assert_eq!(ioctl(&mut h, DISK, fsctl::SRV_COPYCHUNK_WRITE, dst, &cc_input(&xo_key, &one), 12).0, Ok(NtStatus::SUCCESS));
        // COPYCHUNK (not _WRITE) needs FILE_READ_DATA on the target too.
        let wx = h.open("dst", access::FILE_WRITE_DATA | access::FILE_EXECUTE);
        assert_eq!(ioctl(&mut h, DISK, fsctl::SRV_COPYCHUNK, wx, &cc_input(key, &one), 12).0, Err(NtStatus::ACCESS_DENIED));
        assert_eq!(ioctl(&mut h, DISK, fsctl::SRV_COPYCHUNK, wo, &cc_input(key, &one), 12).0, Err(NtStatus::ACCESS_DENIED));

        // Second chunk past the source's end: the first is reported done.
        let exceed = [one[0], Chunk { source_offset: 8000, target_offset: 0, length: 1000 }];
        let (r, body) = ioctl(&mut h, DISK, fsctl::SRV_COPYCHUNK_WRITE, dst, &cc_input(key, &exceed), 12);
        assert_eq!(r, Ok(NtStatus::INVALID_VIEW_SIZE));
        assert_eq!(cc_response(&body), CopyChunkResponse { chunks_written: 1, chunk_bytes_written: 0, total_bytes_written: 10 });

        // A byte-range lock of another open on the source range.
        let key_no = h.conn.st.opens[&src.volatile].file_key;
        let other = OpenOwner { connection: 99, volatile: 1 };
        h.conn.st.server.files.entry(key_no).locks.push(ByteLock { owner: other, offset: 5, length: 1, exclusive: true });
        let (r, body) = ioctl(&mut h, DISK, fsctl::SRV_COPYCHUNK_WRITE, dst, &cc_input(key, &one), 12);
        assert_eq!(r, Ok(NtStatus::FILE_LOCK_CONFLICT));
        assert_eq!(output(&body).len(), COPYCHUNK_RESPONSE_LEN);
    }

    fn is_sparse(h: &harness::H, f: FileId) -> bool {
        h.conn.st.opens[&f.volatile].handle().unwrap().stat().unwrap().attributes & attr::SPARSE_FILE != 0
    }

    #[test]
    fn sparse_zero_data_and_ranges() {
        const K64: u64 = 65536;
        let mut h = harness::new();
        let path = h.dir.path().join("s.bin");
        std::fs::write(&path, vec![7u8; 4 * K64 as usize]).unwrap();
        let f = h.open("s.bin", access::FILE_ALL);
        let pair = |a: u64, b: u64| [a.to_le_bytes(), b.to_le_bytes()].concat();
        let ranges = |body: &[u8]| output(body).chunks(16).map(|c| AllocatedRange::decode(c).unwrap()).map(|r| (r.offset, r.length)).collect::<Vec<_>>();

        // SET_SPARSE without a buffer sets the attribute; one with a
        // longer buffer whose first byte is 0 clears it.
        assert!(!is_sparse(&h, f));
        assert_eq!(ioctl(&mut h, DISK, fsctl::SET_SPARSE, f, &[], 0).0, Ok(NtStatus::SUCCESS));
        assert!(is_sparse(&h, f));

        // A hole punched in the middle: the data reads as zeros, the size
        // stays, and the allocated ranges leave the hole out.
        assert_eq!(ioctl(&mut h, DISK, fsctl::SET_ZERO_DATA, f, &pair(K64, 3 * K64), 0).0, Ok(NtStatus::SUCCESS));
        let data = std::fs::read(&path).unwrap();
        assert_eq!(data.len() as u64, 4 * K64);
        assert!(data[..K64 as usize].iter().all(|&b| b == 7));
        assert!(data[K64 as usize..3 * K64 as usize].iter().all(|&b| b == 0));
        assert!(data[3 * K64 as usize..].iter().all(|&b| b == 7));
        let (r, body) = ioctl(&mut h, DISK, fsctl::QUERY_ALLOCATED_RANGES, f, &pair(0, 1 << 30), 1024);
        assert_eq!(r, Ok(NtStatus::SUCCESS));
        assert_eq!(ranges(&body), [(0, K64), (3 * K64, K64)]);
        // The query range clips the ranges.
        let (_, body) = ioctl(&mut h, DISK, fsctl::QUERY_ALLOCATED_RANGES, f, &pair(100, 3 * K64), 1024);
        assert_eq!(ranges(&body), [(100, K64 - 100), (3 * K64, 100)]);
        // Room for one of two ranges: that one and BUFFER_OVERFLOW; for none: BUFFER_TOO_SMALL.
        let (r, body) = ioctl(&mut h, DISK, fsctl::QUERY_ALLOCATED_RANGES, f, &pair(0, 1 << 30), 31);
        assert_eq!((r, ranges(&body)), (Ok(NtStatus::BUFFER_OVERFLOW), vec![(0, K64)]));
        assert_eq!(ioctl(&mut h, DISK, fsctl::QUERY_ALLOCATED_RANGES, f, &pair(0, 1 << 30), 15).0, Err(NtStatus::BUFFER_TOO_SMALL));
        // Nothing allocated in the hole: an empty answer even without room.
        let (r, body) = ioctl(&mut h, DISK, fsctl::QUERY_ALLOCATED_RANGES, f, &pair(K64, K64), 0);
        assert_eq!((r, ranges(&body)), (Ok(NtStatus::SUCCESS), vec![]));

        // Cleared, the file reads as allocated everywhere again.
        let mut clear = vec![0u8; 100];
        assert_eq!(ioctl(&mut h, DISK, fsctl::SET_SPARSE, f, &clear, 0).0, Ok(NtStatus::SUCCESS));
        assert!(!is_sparse(&h, f));
        let (_, body) = ioctl(&mut h, DISK, fsctl::QUERY_ALLOCATED_RANGES, f, &pair(0, 1 << 30), 1024);
        assert_eq!(ranges(&body), [(0, 4 * K64)]);
        clear[0] = 1;
        assert_eq!(ioctl(&mut h, DISK, fsctl::SET_SPARSE, f, &clear, 0).0, Ok(NtStatus::SUCCESS));
        assert!(is_sparse(&h, f));

        // Not sparse: zeroing writes zeros and keeps the range allocated.
        std::fs::write(h.dir.path().join("n.bin"), vec![9u8; 2 * K64 as usize]).unwrap();
        let n = h.open("n.bin", access::FILE_ALL);
        assert_eq!(ioctl(&mut h, DISK, fsctl::SET_ZERO_DATA, n, &pair(10, K64 + 10), 0).0, Ok(NtStatus::SUCCESS));
        let data = std::fs::read(h.dir.path().join("n.bin")).unwrap();
        assert_eq!((data[9], data[10], data[K64 as usize + 9], data[K64 as usize + 10]), (9, 0, 0, 9));

        // Past the end of file it changes nothing; an empty range is fine;
        // FileOffset beyond BeyondFinalZero or a short input is refused.
        assert_eq!(ioctl(&mut h, DISK, fsctl::SET_ZERO_DATA, f, &pair(8 * K64, 9 * K64), 0).0, Ok(NtStatus::SUCCESS));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 4 * K64);
        assert_eq!(ioctl(&mut h, DISK, fsctl::SET_ZERO_DATA, f, &pair(5, 5), 0).0, Ok(NtStatus::SUCCESS));
        assert_eq!(ioctl(&mut h, DISK, fsctl::SET_ZERO_DATA, f, &pair(6, 5), 0).0, Err(NtStatus::INVALID_PARAMETER));
        assert_eq!(ioctl(&mut h, DISK, fsctl::SET_ZERO_DATA, f, &[0; 15], 0).0, Err(NtStatus::INVALID_PARAMETER));
        assert_eq!(ioctl(&mut h, DISK, fsctl::QUERY_ALLOCATED_RANGES, f, &[0; 15], 64).0, Err(NtStatus::INVALID_PARAMETER));

        // Another open's byte-range lock over the range.
        let key = h.conn.st.opens[&f.volatile].file_key;
        let other = OpenOwner { connection: 99, volatile: 1 };
        h.conn.st.server.files.entry(key).locks.push(ByteLock { owner: other, offset: 0, length: 10, exclusive: false });
        assert_eq!(ioctl(&mut h, DISK, fsctl::SET_ZERO_DATA, f, &pair(5, 6), 0).0, Err(NtStatus::FILE_LOCK_CONFLICT));
        assert_eq!(ioctl(&mut h, DISK, fsctl::SET_ZERO_DATA, f, &pair(10, 11), 0).0, Ok(NtStatus::SUCCESS));
    }

    #[test]
    fn sparse_access_checks() {
        let mut h = harness::new();
        std::fs::write(h.dir.path().join("p.bin"), [1u8; 100]).unwrap();
        let pair = [0u64.to_le_bytes(), 50u64.to_le_bytes()].concat();
        // SET_SPARSE: any of WRITE_DATA, WRITE_ATTRIBUTES, APPEND_DATA.
        for (granted, ok) in [
            (access::FILE_WRITE_DATA, true),
            (access::FILE_WRITE_ATTRIBUTES, true),
            (access::FILE_APPEND_DATA, true),
            (access::FILE_WRITE_EA | access::FILE_READ_DATA, false),
        ] {
            let f = h.open("p.bin", granted);
            let want = if ok { Ok(NtStatus::SUCCESS) } else { Err(NtStatus::ACCESS_DENIED) };
            assert_eq!(ioctl(&mut h, DISK, fsctl::SET_SPARSE, f, &[], 0).0, want, "granted {granted:#x}");
        }
        // QUERY_ALLOCATED_RANGES needs READ_DATA, SET_ZERO_DATA WRITE_DATA.
        let ra = h.open("p.bin", access::FILE_READ_ATTRIBUTES | access::FILE_READ_EA | access::FILE_EXECUTE);
        assert_eq!(ioctl(&mut h, DISK, fsctl::QUERY_ALLOCATED_RANGES, ra, &pair, 64).0, Err(NtStatus::ACCESS_DENIED));
        let rd = h.open("p.bin", access::FILE_READ_DATA);
        assert_eq!(ioctl(&mut h, DISK, fsctl::QUERY_ALLOCATED_RANGES, rd, &pair, 64).0, Ok(NtStatus::SUCCESS));
        for granted in [access::FILE_WRITE_ATTRIBUTES, access::FILE_APPEND_DATA] {
            let f = h.open("p.bin", granted);
            assert_eq!(ioctl(&mut h, DISK, fsctl::SET_ZERO_DATA, f, &pair, 0).0, Err(NtStatus::ACCESS_DENIED));
        }
        let wd = h.open("p.bin", access::FILE_WRITE_DATA);
        assert_eq!(ioctl(&mut h, DISK, fsctl::SET_ZERO_DATA, wd, &pair, 0).0, Ok(NtStatus::SUCCESS));
        assert_eq!(std::fs::read(h.dir.path().join("p.bin")).unwrap()[..51], [[0u8; 50].as_slice(), &[1]].concat());
    }

    #[test]
    fn duplicate_extents_without_cloning() {
        let mut h = harness::new();
        std::fs::write(h.dir.path().join("src"), [1u8; 8192]).unwrap();
        let src = h.open("src", access::FILE_ALL);
        let dst = h.open("dst", access::FILE_ALL);
        let clones = h.conn.st.server.share("data").unwrap().fs().unwrap().stat_fs().unwrap().block_refcounting;
        let mut input = Vec::new();
        DuplicateExtents { source: src, source_offset: 0, target_offset: 0, byte_count: 4096 }.encode(&mut input);
        let (r, _) = ioctl(&mut h, DISK, fsctl::DUPLICATE_EXTENTS_TO_FILE, dst, &input, 0);
        if clones {
            // A reflink file system (btrfs, xfs): the target is shorter
            // than the range, so nothing is cloned, successfully.
            assert_eq!(r, Ok(NtStatus::SUCCESS));
        } else {
            //= MS-FSCC 2.3.8
            //# Without block refcounting: STATUS_INVALID_DEVICE_REQUEST.
            assert_eq!(r, Err(NtStatus::INVALID_DEVICE_REQUEST));
        }
    }
}
