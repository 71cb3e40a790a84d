//! WRITE (MS-SMB2 2.2.21, 2.2.22; processing 3.3.5.13). The payload is
//! written from the request buffer, or from the chunks the transport
//! received it in ([`Req::tail`]); nothing is copied.

use crate::byte_range::in_range;
use crate::share_mode::WRITE_ACCESS;
use crate::byte_range::io_conflict;
use crate::pending::AsyncWork;
use crate::ctx::{Ctx, HResult, Req};
use crate::job::Work;
use bytes::Bytes;
use crate::open::{access, OpenKind};
use crate::oplock;
use smbq_wire::create::options;
use smbq_wire::write::{encode_response, WriteRequest, WRITE_THROUGH};
use smbq_wire::NtStatus;

/// The largest file NTFS allows (16 TiB - 64 KiB); Windows fails writes
/// that would end past it with INVALID_PARAMETER.
const MAX_FILE_SIZE: u64 = 0xFFF_FFFF_0000;

/// Handle an SMB2 WRITE (MS-SMB2 3.3.5.13).
pub fn handle(ctx: &mut Ctx<'_>, req: &Req<'_>) -> HResult {
    let more = req.tail.iter().map(|t| t.len()).sum();
    let (r, len) = WriteRequest::decode_head(req.msg, more).map_err(NtStatus::from)?;
    let len = u32::try_from(len).map_err(|_| NtStatus::INVALID_PARAMETER)?;
    // The data: its part in the message, then the chunks after it.
    let data: Vec<&[u8]> = smbq_wire::framing::payload(r.data, req.tail, len as usize).collect();
    //= MS-SMB2 3.3.5.13
    //# If Length is greater than Connection.MaxWriteSize, the server MUST
    //# fail the request with STATUS_INVALID_PARAMETER.
    if len > ctx.max_io() {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    ctx.check_charge(len)?;
    //= MS-FSA 2.1.5.3
    //# If ByteOffset is negative [...] the operation MUST be failed with
    //# STATUS_INVALID_PARAMETER.
    // Offsets are signed 64-bit and the write must end within them and,
    // as NTFS limits files, at or below MAX_FILE_SIZE. The SMB1-era
    // "offset -1 writes at the end" is not honoured over SMB2, as on
    // Windows (smbtorture smb2.rw.invalid).
    if !in_range(r.offset, u64::from(len)) || (len > 0 && r.offset + u64::from(len) > MAX_FILE_SIZE) {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    let fid = ctx.resolve(r.file_id)?;
    let open = ctx.conn.opens.get_mut(&fid.volatile).ok_or(NtStatus::FILE_CLOSED)?;
    if open.share.read_only() {
        return Err(NtStatus::ACCESS_DENIED);
    }
    //= MS-SMB2 3.3.5.13
    //# If Open.GrantedAccess does not allow write access, the server MUST
    //# fail the request with STATUS_ACCESS_DENIED.
    if open.access & WRITE_ACCESS == 0 {
        return Err(NtStatus::ACCESS_DENIED);
    }
    let owner = open.owner();
    open.written = true;
    let (file_key, granted) = (open.file_key, open.access);
    let write_through = r.flags & WRITE_THROUGH != 0 || open.create_options & options::WRITE_THROUGH != 0;
    let h = match &mut open.kind {
        OpenKind::Pipe(p) => {
            p.write(&data.concat())?;
            encode_response(ctx.out, len);
            return Ok(NtStatus::SUCCESS);
        }
        OpenKind::File(h) => h,
    };
    if h.is_dir {
        return Err(NtStatus::INVALID_DEVICE_REQUEST);
    }
    // MS-FSA 2.1.5.3: a write through an open that may only append goes
    // to the end of the file.
    let append_only = granted & access::FILE_WRITE_DATA == 0;
    let offset = if append_only { h.stat().map_err(NtStatus::from)?.size } else { r.offset };
    if !in_range(offset, u64::from(len)) {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    {
        if let Some(mut e) = ctx.conn.server.files.get(file_key) {
            if io_conflict(&e.locks, owner, offset, u64::from(len), true) {
                return Err(NtStatus::FILE_LOCK_CONFLICT);
            }
            let server = &ctx.conn.server;
            server.send_breaks(&oplock::contend_level2(&mut e, owner, ctx.now, server.break_timeout()));
            let time = server.now();
            e.written(|| h.stat().map_or(time, |s| s.last_write_time), ctx.now, time);
        }
    }
    // A write-through WRITE waits for the disk: it goes to the pool. A
    // buffered one is written here: the page cache takes it without
    // waiting but under memory pressure, and handing it over costs more
    // than it saves (measured with smbclient put of 512 MiB, sealed: 1 MiB
    // writes on the pool 1045 MB/s at 0.70 CPU-s/GiB, here 1092 at
    // 0.48). ext4 offers no RWF_NOWAIT for buffered writes to tell.
    if ctx.may_defer && write_through {
        // The data goes with the job (a copy: the fsync costs far more).
        let data = data.iter().map(|d| Bytes::copy_from_slice(d)).collect();
        let file = h.object();
        let id = ctx.conn.job(file, Work::Write { data, offset });
        ctx.go_async = Some(AsyncWork::Job(id));
        return Ok(NtStatus::PENDING);
    }
    h.write_vectored_at(&data, offset).map_err(NtStatus::from)?;
    if let Some(m) = &ctx.conn.server.metrics {
        m.written(len as usize);
    }
    if write_through {
        h.sync().map_err(NtStatus::from)?;
    }
    encode_response(ctx.out, len);
    Ok(NtStatus::SUCCESS)
}
