//! IOCTL (MS-SMB2 2.2.31, 2.2.32; processing 3.3.5.15): the FSCTLs an SMB
//! server answers itself (validate negotiate, network interfaces, DFS
//! referrals, named pipe transceive, server-side copy) and a few file
//! system ones with fixed answers. Unknown FSCTLs get what Samba answers
//! (source3/smbd/smb2_ioctl_network_fs.c): STATUS_FS_DRIVER_REQUIRED on
//! IPC$, STATUS_INVALID_DEVICE_REQUEST on a disk share.

use crate::cmd::lock::io_conflict;
use crate::dispatch::{Ctx, HResult, Req};
use crate::open::{access, Open, OpenKind};
use crate::server::ShareKind;
use smbq_wire::ioctl::{
    encode_network_interface, encode_resume_key, encode_response, encode_validate_negotiate_response, fsctl,
    CopyChunkRequest, CopyChunkResponse, IoctlRequest, ValidateNegotiateRequest, COPYCHUNK_FIXED,
    COPYCHUNK_RESPONSE_LEN, IS_FSCTL, NETWORK_INTERFACE_INFO_LEN, RESUME_KEY_RESPONSE_LEN,
    VALIDATE_NEGOTIATE_RESPONSE_LEN,
};
use smbq_wire::negotiate::{caps, security_mode};
use smbq_wire::{Dialect, DecodeError, FileId, NtStatus, Put};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Server-side copy limits (MS-SMB2 3.3.3: ServerSideCopyMaxNumberofChunks,
/// ServerSideCopyMaxChunkSize, ServerSideCopyMaxDataSize; the values
/// Windows uses).
pub const MAX_CHUNKS: u32 = 256;
pub const MAX_CHUNK_SIZE: u32 = 1024 * 1024;
pub const MAX_COPY_DATA: u32 = 16 * 1024 * 1024;
/// Link speed reported for the one network interface, in bit/s.
const LINK_SPEED: u64 = 10_000_000_000;

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
                //= MS-FSCC 2.3.31
                //# A file that is not a reparse point: STATUS_NOT_A_REPARSE_POINT.
                fsctl::GET_REPARSE_POINT => Err(NtStatus::NOT_A_REPARSE_POINT),
                //= MS-FSCC 2.3.10
                //# Files are never compressed: COMPRESSION_FORMAT_NONE.
                fsctl::GET_COMPRESSION => {
                    if r.max_output_response < 2 {
                        return Err(NtStatus::BUFFER_TOO_SMALL);
                    }
                    out.u16(0);
                    Ok(NtStatus::SUCCESS)
                }
                //= MS-FSCC 2.3.41, 2.3.42
                //# Files are not sparse, so everything up to the end of file
                //# is one allocated range.
                fsctl::QUERY_ALLOCATED_RANGES => {
                    let mut rd = smbq_wire::Reader::new(r.input);
                    let (offset, length) = match (rd.u64(), rd.u64()) {
                        (Ok(o), Ok(l)) if o <= i64::MAX as u64 && l <= i64::MAX as u64 => (o, l),
                        _ => return Err(NtStatus::INVALID_PARAMETER),
                    };
                    if h.is_dir {
                        return Err(NtStatus::INVALID_PARAMETER);
                    }
                    let size = h.stat().map_err(NtStatus::from)?.size;
                    let end = offset.saturating_add(length).min(size);
                    if offset < end {
                        if r.max_output_response < 16 {
                            return Err(NtStatus::BUFFER_TOO_SMALL);
                        }
                        out.u64(offset);
                        out.u64(end - offset);
                    }
                    Ok(NtStatus::SUCCESS)
                }
                _ => Err(if ipc { NtStatus::FS_DRIVER_REQUIRED } else { NtStatus::INVALID_DEVICE_REQUEST }),
            }
        }
    }
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
    let need = if r.ctl_code == fsctl::SRV_COPYCHUNK {
        access::FILE_WRITE_DATA | access::FILE_READ_DATA
    } else {
        access::FILE_WRITE_DATA
    };
    if target.access & need != need {
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
    //# if none, STATUS_ACCESS_DENIED without FILE_READ_DATA.
    let source = source_open(ctx, &req.source_key).ok_or(NtStatus::OBJECT_NAME_NOT_FOUND)?;
    let Some(src) = source.handle() else { return Err(NtStatus::OBJECT_NAME_NOT_FOUND) };
    if source.access & access::FILE_READ_DATA == 0 {
        return Err(NtStatus::ACCESS_DENIED);
    }
    if src.is_dir || dst.is_dir {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    let connection = ctx.conn.id;
    let (src_owner, dst_owner) = (source.owner(connection), target.owner(connection));
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
        if c.source_offset.checked_add(len).map_or(true, |end| end > size) || c.target_offset.checked_add(len).is_none() {
            status = NtStatus::INVALID_VIEW_SIZE;
            break;
        }
        let conflict = {
            let files = server.lock_files();
            let locks = |k: u64| files.files.get(&k).map(|e| e.locks.as_slice()).unwrap_or(&[]);
            io_conflict(locks(src_key), src_owner, c.source_offset, len, false)
                || io_conflict(locks(dst_key), dst_owner, c.target_offset, len, true)
        };
        if conflict {
            status = NtStatus::FILE_LOCK_CONFLICT;
            break;
        }
        buf.resize(c.length as usize, 0);
        let n = src.read_at(&mut buf, c.source_offset).map_err(NtStatus::from)?;
        if n != buf.len() {
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

/// Dialects in preference order, as NEGOTIATE selects them.
const DIALECTS: [Dialect; 5] = [Dialect::SMB311, Dialect::SMB302, Dialect::SMB300, Dialect::SMB210, Dialect::SMB202];

/// FSCTL_VALIDATE_NEGOTIATE_INFO (MS-SMB2 3.3.5.15.12). A mismatch must
/// terminate the connection; a handler cannot, so it answers
/// ACCESS_DENIED (what Samba sends before it disconnects).
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
    let dialect = DIALECTS.iter().copied().find(|d| v.dialects.contains(d));
    if dialect != Some(neg.dialect)
        || v.guid != neg.client_guid
        || v.security_mode != neg.client_security_mode
        || v.capabilities != neg.client_capabilities
    {
        return Err(NtStatus::ACCESS_DENIED);
    }
    // The server's NEGOTIATE answer, recomputed as cmd::negotiate builds it.
    let mut capabilities = 0;
    if neg.dialect != Dialect::SMB202 {
        capabilities |= caps::LARGE_MTU;
    }
    if (neg.dialect == Dialect::SMB300 || neg.dialect == Dialect::SMB302) && neg.client_capabilities & caps::ENCRYPTION != 0 {
        capabilities |= caps::ENCRYPTION;
    }
    let mut sec_mode = security_mode::SIGNING_ENABLED;
    if ctx.conn.server.config.signing_required {
        sec_mode |= security_mode::SIGNING_REQUIRED;
    }
    encode_validate_negotiate_response(out, capabilities, &ctx.conn.server.guid, sec_mode, neg.dialect);
    Ok(NtStatus::SUCCESS)
}

/// FSCTL_QUERY_NETWORK_INTERFACE_INFO (MS-SMB2 3.3.5.15.11): one
/// interface, index 1, no RSS/RDMA, 10 Gbit/s. The engine is not told its
/// own address, so it is only known for a loopback peer (the loopback of
/// the same family); otherwise the answer is Samba's for a server without
/// multi-channel (FS_DRIVER_REQUIRED on IPC$, else INVALID_DEVICE_REQUEST).
fn network_interfaces(ctx: &mut Ctx<'_>, r: &IoctlRequest<'_>, ipc: bool, out: &mut Vec<u8>) -> HResult {
    let addr = match ctx.conn.info.peer.map(|p| p.ip()) {
        Some(ip @ IpAddr::V4(_)) if ip.is_loopback() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        Some(ip @ IpAddr::V6(_)) if ip.is_loopback() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        _ => return Err(if ipc { NtStatus::FS_DRIVER_REQUIRED } else { NtStatus::INVALID_DEVICE_REQUEST }),
    };
    if (r.max_output_response as usize) < NETWORK_INTERFACE_INFO_LEN {
        return Err(NtStatus::BUFFER_TOO_SMALL);
    }
    encode_network_interface(out, 1, 0, LINK_SPEED, addr);
    Ok(NtStatus::SUCCESS)
}
