//! What a command handler sees: the request ([`Req`]), its connection's
//! state and the response being built ([`Ctx`]), and what it answers
//! ([`HResult`]).

use crate::conn_state::ConnState;
use crate::open::Open;
use crate::pending::{AsyncWork, Deferred};
use crate::session::Session;
use crate::tree::Tree;
use bytes::Bytes;
use smbq_wire::header::{flags, HEADER_LEN};
use smbq_wire::{Command, Dialect, FileId, Header, NtStatus};
use std::time::Instant;

/// A request element: its header and its bytes from the header to the end
/// of the element (offsets in the body are relative to the header).
pub struct Req<'a> {
    pub hdr: &'a Header,
    pub msg: &'a [u8],
    /// The rest of a WRITE whose payload the transport handed on in the
    /// chunks it arrived in ([`crate::Connection::handle_frame`]); empty
    /// for any other request.
    pub tail: &'a [Bytes],
}

impl<'a> Req<'a> {
    pub fn body(&self) -> &'a [u8] {
        self.msg.get(HEADER_LEN..).unwrap_or(&[])
    }
}

/// `Ok(status)` with the response body written to `ctx.out` (status may be
/// a success or warning like BUFFER_OVERFLOW), or `Err(status)` for an
/// ERROR response.
pub type HResult = Result<NtStatus, NtStatus>;

/// What a handler sees: the connection, the session/tree the request is
/// for (already checked by the table's preconditions), and the output.
pub struct Ctx<'a> {
    pub conn: &'a mut ConnState,
    pub hdr: &'a Header,
    pub session_id: u64,
    pub tree_id: u32,
    /// FileId of the previous element in a related compound.
    pub related_file_id: Option<FileId>,
    pub encrypted: bool,
    /// The response being built; the body goes after `header_start + 64`.
    pub out: &'a mut Vec<u8>,
    pub header_start: usize,
    pub now: Instant,
    pub go_async: Option<AsyncWork>,
    /// The request may be handed to the transport's pool
    /// ([`AsyncWork::Job`]): the transport runs jobs, it is alone in its
    /// message, and the connection's pending requests are within
    /// `limits.max_outstanding`.
    pub may_defer: bool,
    /// When a deferred request (being run again) was first deferred.
    pub deferred_since: Option<Instant>,
    /// Set by a handler whose request the spec says must end the connection
    /// (e.g. a VALIDATE_NEGOTIATE_INFO mismatch, MS-SMB2 3.3.5.15.12).
    pub disconnect: bool,
}

impl Ctx<'_> {
    /// Defer this request (`msg`) until woken or `deadline`.
    pub fn defer(&mut self, msg: &[u8], deadline: Instant) -> HResult {
        let since = self.deferred_since.unwrap_or(self.now);
        self.go_async = Some(AsyncWork::Deferred(Deferred::new(msg, deadline, since)));
        Ok(NtStatus::PENDING)
    }


    /// Offset of the next byte written, relative to the response header.
    pub fn offset(&self) -> usize {
        self.out.len() - self.header_start
    }

    pub fn dialect(&self) -> Dialect {
        self.conn.neg.as_ref().map(|n| n.dialect).unwrap_or(Dialect::SMB202)
    }

    pub fn max_io(&self) -> u32 {
        self.conn.neg.as_ref().map(|n| n.max_io).unwrap_or(65536)
    }

    pub fn session(&mut self) -> Result<&mut Session, NtStatus> {
        self.conn.session_mut(self.session_id).ok_or(NtStatus::USER_SESSION_DELETED)
    }

    pub fn tree(&self) -> Result<&Tree, NtStatus> {
        self.conn
            .session(self.session_id)
            .and_then(|s| s.trees.get(&self.tree_id))
            .ok_or(NtStatus::NETWORK_NAME_DELETED)
    }

    /// Resolve a FileId (all-ones means the related compound's file) to an
    /// open of this session and tree (MS-SMB2 3.3.5.2.7.2, 3.3.5.2.10-ish).
    pub fn resolve(&mut self, fid: FileId) -> Result<FileId, NtStatus> {
        let fid = if fid == FileId::RELATED {
            if self.hdr.flags & flags::RELATED_OPERATIONS == 0 {
                return Err(NtStatus::FILE_CLOSED);
            }
            self.related_file_id.ok_or(NtStatus::FILE_CLOSED)?
        } else {
            fid
        };
        let o = self.conn.opens.get(&fid.volatile).ok_or(NtStatus::FILE_CLOSED)?;
        if o.file_id.persistent != fid.persistent || o.session_id != self.session_id || o.tree_id != self.tree_id {
            return Err(NtStatus::FILE_CLOSED);
        }
        self.check_channel_sequence(fid.volatile)?;
        self.related_file_id = Some(fid);
        Ok(fid)
    }

    pub fn open(&mut self, fid: FileId) -> Result<&mut Open, NtStatus> {
        let fid = self.resolve(fid)?;
        self.conn.opens.get_mut(&fid.volatile).ok_or(NtStatus::FILE_CLOSED)
    }

    fn check_channel_sequence(&mut self, volatile: u64) -> Result<(), NtStatus> {
        let smb3 = self.dialect().is_smb3();
        let (csn, command) = (self.hdr.status as u16, self.hdr.command());
        let open = self.conn.opens.get_mut(&volatile).ok_or(NtStatus::FILE_CLOSED)?;
        //= MS-SMB2 3.3.5.2.10
        //# a request with a newer ChannelSequence (16-bit, wrapping; a
        //# client that failed over to another channel increments it)
        //# moves the open's on; a WRITE, SET_INFO or IOCTL with an older one
        //# fails with STATUS_FILE_NOT_AVAILABLE, as Samba does. (No request
        //# of an earlier sequence is still outstanding here: the engine
        //# answers each before the next, but for blocked ones that modify
        //# nothing.)
        if smb3 {
            let cmp = csn.wrapping_sub(open.channel_sequence) as i16;
            let modifies = matches!(command, Command::WRITE | Command::SET_INFO | Command::IOCTL);
            if cmp > 0 {
                open.channel_sequence = csn;
            } else if cmp < 0 && modifies {
                return Err(NtStatus::FILE_NOT_AVAILABLE);
            }
        }
        Ok(())
    }

    /// MS-SMB2 3.3.5.2.5: a multi-credit request must be charged enough.
    pub fn check_charge(&self, payload: u32) -> Result<(), NtStatus> {
        crate::credits::check_charge(crate::credits::multi_credit(self.conn.neg.as_ref()), self.hdr.credit_charge, payload)
    }
}
