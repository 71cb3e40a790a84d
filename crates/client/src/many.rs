//! Many files over one connection, several at a time: each file's CREATE,
//! READs or WRITEs and CLOSE follow one another, and up to `in_flight`
//! files are under way together, every answer matched to its file by
//! MessageId (MS-SMB2 3.2.5.1). With smbq's multi-stream extension
//! (`docs/multistream.md`) each file's requests go on a stream of its own
//! (by the file's place in the list), so a packet lost from one file's
//! answers holds up no other file: what the 001 paper's FTP over QUIC
//! did with a stream per file. With one stream it is the same pipeline on
//! that stream.

use bytes::Bytes;
use smbq_wire::create::{disposition, CreateResponse};
use smbq_wire::{Command, FileId};
use std::collections::HashMap;

use crate::core::check;
use crate::{charge, create_body, write_body_len, Client, ClientError};

/// One file to move.
pub enum FileJob {
    /// Write `data` as `name` (replacing it).
    Put { name: String, data: Bytes },
    /// Read `size` bytes of `name`.
    Get { name: String, size: u64 },
}

impl FileJob {
    fn name(&self) -> &str {
        match self {
            FileJob::Put { name, .. } | FileJob::Get { name, .. } => name,
        }
    }

    fn size(&self) -> u64 {
        match self {
            FileJob::Put { data, .. } => data.len() as u64,
            FileJob::Get { size, .. } => *size,
        }
    }
}

/// A file under way.
struct Active {
    job: usize,
    stream: u16,
    fid: Option<FileId>,
    /// Next offset to ask for or send.
    next: u64,
    /// READs or WRITEs in flight.
    pending: usize,
    data: Vec<u8>,
}

/// What an answer is to.
#[derive(Clone, Copy)]
enum Step {
    Create,
    Data { off: u64, len: u32 },
    Close,
}

/// READs or WRITEs in flight per file.
const PER_FILE: usize = 4;

impl Client {
    /// Move `jobs`, up to `in_flight` files at a time, in `chunk`-byte
    /// READs and WRITEs; returns what each Get read (empty for a Put), in
    /// the order of `jobs`.
    pub async fn transfer_files(&mut self, jobs: &[FileJob], in_flight: usize, chunk: u32) -> Result<Vec<Vec<u8>>, ClientError> {
        let chunk = chunk.clamp(1, self.core.max_read.min(self.core.max_write));
        let mut out: Vec<Vec<u8>> = jobs.iter().map(|_| Vec::new()).collect();
        let mut active: HashMap<usize, Active> = HashMap::new();
        let mut waiting: HashMap<u64, (usize, Step)> = HashMap::new();
        let mut started = 0usize;
        let mut finished = 0usize;
        // Files whose data is done, to be closed when there is credit.
        let mut to_close: Vec<usize> = Vec::new();
        while finished < jobs.len() {
            while let Some(&job) = to_close.last() {
                let Some((fid, stream)) = active.get(&job).and_then(|a| Some((a.fid?, a.stream))) else { break };
                if !self.core.may_send(1)? {
                    break;
                }
                to_close.pop();
                let mut b = Vec::new();
                smbq_wire::close::CloseRequest { flags: 0, file_id: fid }.encode(&mut b);
                let (id, m) = self.core.request(Command::CLOSE, 1, &b);
                self.send_on(stream, m).await?;
                waiting.insert(id, (job, Step::Close));
            }
            // Start files while there is room and credit.
            while started < jobs.len() && active.len() < in_flight.max(1) && self.core.may_send(1)? {
                let job = &jobs[started];
                let (access, disp) = match job {
                    FileJob::Put { .. } => (0x0013_019F, disposition::OVERWRITE_IF),
                    FileJob::Get { .. } => (0x0012_0089, disposition::OPEN),
                };
                let stream = self.stripe(started as u64);
                let body = create_body(job.name(), access, disp, 0, 0, 0, &[]);
                let (id, m) = self.core.request(Command::CREATE, 1, &body);
                self.send_on(stream, m).await?;
                waiting.insert(id, (started, Step::Create));
                let data = if matches!(job, FileJob::Get { .. }) { vec![0; job.size() as usize] } else { Vec::new() };
                active.insert(started, Active { job: started, stream, fid: None, next: 0, pending: 0, data });
                started += 1;
            }
            // Data requests of the files whose CREATE is done.
            for a in active.values_mut() {
                let Some(fid) = a.fid else { continue };
                let job = &jobs[a.job];
                while a.next < job.size() && a.pending < PER_FILE {
                    let len = (job.size() - a.next).min(u64::from(chunk)) as u32;
                    if !self.core.may_send(charge(len as usize))? {
                        break;
                    }
                    let off = a.next;
                    let (id, m) = match job {
                        FileJob::Put { data, .. } => {
                            let piece = data.slice(off as usize..off as usize + len as usize);
                            let req = smbq_wire::write::WriteRequest { offset: off, file_id: fid, channel: 0, remaining_bytes: 0, flags: 0, data: &piece };
                            self.core.request_with(Command::WRITE, charge(len as usize), write_body_len(&piece), |b| req.encode(b))
                        }
                        FileJob::Get { .. } => {
                            let mut b = Vec::new();
                            smbq_wire::read::ReadRequest { length: len, offset: off, file_id: fid, ..Default::default() }.encode(&mut b);
                            self.core.request(Command::READ, charge(len as usize), &b)
                        }
                    };
                    self.send_on(a.stream, m).await?;
                    waiting.insert(id, (a.job, Step::Data { off, len }));
                    a.next += u64::from(len);
                    a.pending += 1;
                }
            }
            let r = self.recv().await?;
            let h = smbq_wire::Header::decode(&r).map_err(|e| ClientError::Protocol(e.to_string()))?;
            let (job, step) = waiting.remove(&h.message_id).ok_or_else(|| ClientError::Protocol(format!("an answer to message {} that is not in flight", h.message_id)))?;
            let a = active.get_mut(&job).ok_or_else(|| ClientError::Protocol("an answer for a file not under way".into()))?;
            let close = match step {
                Step::Create => {
                    check(&r, Command::CREATE)?;
                    let (resp, _) = CreateResponse::decode(&r).map_err(|e| ClientError::Protocol(e.to_string()))?;
                    a.fid = Some(resp.file_id);
                    jobs[job].size() == 0
                }
                Step::Data { off, len } => {
                    a.pending -= 1;
                    match &jobs[job] {
                        FileJob::Put { .. } => {
                            check(&r, Command::WRITE)?;
                            let n = smbq_wire::write::decode_response(&r).map_err(|e| ClientError::Protocol(e.to_string()))?;
                            if n != len {
                                return Err(ClientError::Protocol(format!("{}: the server wrote {n} of {len} bytes", jobs[job].name())));
                            }
                        }
                        FileJob::Get { .. } => {
                            check(&r, Command::READ)?;
                            let d = smbq_wire::read::decode_response(&r).map_err(|e| ClientError::Protocol(e.to_string()))?;
                            let dst = a.data.get_mut(off as usize..off as usize + len as usize).filter(|_| d.len() == len as usize);
                            dst.ok_or_else(|| ClientError::Protocol(format!("{}: READ at {off} returned {} of {len} bytes", jobs[job].name(), d.len())))?.copy_from_slice(d);
                        }
                    }
                    a.pending == 0 && a.next >= jobs[job].size()
                }
                Step::Close => {
                    check(&r, Command::CLOSE)?;
                    if let Some(a) = active.remove(&job) {
                        out[job] = a.data;
                    }
                    finished += 1;
                    false
                }
            };
            if close {
                to_close.push(job);
            }
        }
        Ok(out)
    }
}
