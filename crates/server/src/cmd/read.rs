//! READ (MS-SMB2 2.2.19, 2.2.20; processing 3.3.5.12). File data is read
//! straight into the response buffer: the only copy is the kernel's.

use crate::byte_range::io_conflict;
use crate::conn_state::ConnState;
use crate::pending::AsyncWork;
use crate::ctx::{Ctx, HResult, Req};
use crate::job::{ReadJob, Work};
use crate::open::{access, OpenKind};
use smbq_wire::read::{encode_response_head, set_data_len, ReadRequest};
use smbq_wire::{NtStatus, Put};

/// Handle an SMB2 READ (MS-SMB2 3.3.5.12).
pub fn handle(ctx: &mut Ctx<'_>, req: &Req<'_>) -> HResult {
    let r = ReadRequest::decode(req.msg).map_err(NtStatus::from)?;
    //= MS-SMB2 3.3.5.12
    //# If Length is greater than Connection.MaxReadSize, the server MUST
    //# fail the request with STATUS_INVALID_PARAMETER.
    if r.length > ctx.max_io() {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    ctx.check_charge(r.length)?;
    // A range past the signed 64-bit offsets is invalid (MS-FSA 2.1.5.2).
    if !crate::byte_range::in_range(r.offset, u64::from(r.length)) {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    let fid = ctx.resolve(r.file_id)?;
    let open = ctx.conn.opens.get_mut(&fid.volatile).ok_or(NtStatus::FILE_CLOSED)?;
    //= MS-SMB2 3.3.5.12
    //# If Open.GrantedAccess does not allow read access, the server MUST
    //# fail the request with STATUS_ACCESS_DENIED.
    if open.access & (access::FILE_READ_DATA | access::FILE_EXECUTE) == 0 {
        return Err(NtStatus::ACCESS_DENIED);
    }
    let owner = open.owner();
    let file_key = open.file_key;
    let h = match &mut open.kind {
        OpenKind::Pipe(p) => {
            let (data, more) = p.read(r.length as usize)?;
            encode_response_head(ctx.out, data.len() as u32, 0);
            ctx.out.bytes(&data);
            if data.is_empty() {
                ctx.out.u8(0);
            }
            return Ok(if more { NtStatus::BUFFER_OVERFLOW } else { NtStatus::SUCCESS });
        }
        OpenKind::File(h) => h,
    };
    if h.is_dir {
        return Err(NtStatus::INVALID_DEVICE_REQUEST);
    }
    {
        if let Some(e) = ctx.conn.server.files.get(file_key) {
            if io_conflict(&e.locks, owner, r.offset, u64::from(r.length), false) {
                return Err(NtStatus::FILE_LOCK_CONFLICT);
            }
        }
    }
    let head = ctx.out.len();
    encode_response_head(ctx.out, r.length, 0);
    let len = r.length as usize;
    // One allocation of the exact size (plus the pad byte of an empty
    // read), filled by the read itself.
    ctx.out.reserve_exact(len + 1);
    let n = if ctx.may_defer {
        // What the page cache holds is read here; a read that would wait
        // for the disk goes to the pool and is answered when done.
        match h.read_cached(ctx.out, len, r.offset).map_err(NtStatus::from)? {
            Some(n) => n,
            None => {
                let mut out = Vec::with_capacity(ctx.out.len() + len + 1);
                out.extend_from_slice(ctx.out);
                let job = ReadJob { out, head, len, offset: r.offset, minimum: r.minimum_count, volatile: fid.volatile };
                let file = h.object();
                let id = ctx.conn.job(file, Work::Read(job));
                ctx.go_async = Some(AsyncWork::Job(id));
                return Ok(NtStatus::PENDING);
            }
        }
    } else {
        h.read_append(ctx.out, len, r.offset).map_err(NtStatus::from)?
    };
    read_done(ctx.conn, ctx.out, head, (len, r.minimum_count), r.offset, fid.volatile, n)?;
    Ok(NtStatus::SUCCESS)
}

/// The answer of a READ whose `n` bytes are in `out` after the response
/// head at `head`: DataLength set, the open's position moved on.
fn read_done(st: &mut ConnState, out: &mut Vec<u8>, head: usize, (len, minimum): (usize, u32), offset: u64, volatile: u64, n: usize) -> Result<(), NtStatus> {
    //= MS-SMB2 3.3.5.12
    //# If the read fails or the number of bytes read is less than
    //# MinimumCount, the server MUST fail the request with STATUS_END_OF_FILE
    if (n == 0 && len > 0) || n < minimum as usize {
        return Err(NtStatus::END_OF_FILE);
    }
    if let Some(m) = &st.server.metrics {
        m.read(n);
    }
    set_data_len(out, head, n as u32);
    if n > 0 {
        if let Some(o) = st.opens.get_mut(&volatile) {
            o.position = offset + n as u64;
        }
    } else {
        out.u8(0);
    }
    Ok(())
}

/// The final answer of a READ done on the pool: `n` bytes read into `job.out`.
pub(crate) fn job_done(st: &mut ConnState, mut job: ReadJob, n: usize) -> (HResult, Vec<u8>) {
    let r = read_done(st, &mut job.out, job.head, (job.len, job.minimum), job.offset, job.volatile, n);
    (r.map(|()| NtStatus::SUCCESS), job.out)
}
