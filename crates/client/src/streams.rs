//! The client's side of smbq's multi-stream extension
//! (`docs/multistream.md`): once NEGOTIATE agreed N streams, the
//! connection's first stream stays the control stream and N-1 more are
//! opened. Requests for one open go on one stream (chosen by its FileId),
//! the pieces of a large READ or WRITE are striped over the streams, and
//! the rest goes round the streams. A task per stream cuts its frames and
//! hands them to one queue, so an answer delayed on one stream (a lost
//! packet being sent again) holds up none on the others.

use bytes::Bytes;
use smbq_quic::StreamChunks;
use smbq_wire::{framing, Command};
use tokio::sync::mpsc;

use crate::ClientError;

/// The control stream: the connection's first.
pub const CONTROL: u16 = 0;

/// One frame off some stream: (stream, message head, rest of a large message).
pub(crate) type Incoming = Result<(u16, Vec<u8>, Vec<Bytes>), ClientError>;

/// Frames read ahead of the client, over all streams.
const QUEUE: usize = 64;

/// The streams of a connection that agreed to several.
pub(crate) struct Streams {
    /// Send halves; `None` once reset ([`Streams::reset`]).
    sends: Vec<Option<quinn::SendStream>>,
    readers: Vec<tokio::task::AbortHandle>,
    /// Round robin for requests that belong to no open.
    next: usize,
}

impl Streams {
    /// Open `n - 1` streams besides the first (`send`, `recv`); the
    /// receiver gets every stream's frames. The server raises its stream
    /// limit when it agrees, so `open_bi` waits at most for that.
    pub(crate) async fn open(conn: &quinn::Connection, send: quinn::SendStream, recv: StreamChunks, n: u16) -> Result<(Streams, mpsc::Receiver<Incoming>), ClientError> {
        let (tx, rx) = mpsc::channel(QUEUE);
        let mut s = Streams { sends: vec![Some(send)], readers: Vec::new(), next: 0 };
        let counters = recv.counters();
        s.readers.push(tokio::spawn(read(recv, 0, tx.clone())).abort_handle());
        for i in 1..n {
            let (send, recv) = conn.open_bi().await.map_err(|e| ClientError::Quic(e.to_string()))?;
            s.sends.push(Some(send));
            s.readers.push(tokio::spawn(read(StreamChunks::new(recv, counters.clone()), i, tx.clone())).abort_handle());
        }
        Ok((s, rx))
    }

    /// The send half of `stream`, or of the control stream if it was reset.
    pub(crate) fn send_half(&mut self, stream: u16) -> Result<&mut quinn::SendStream, ClientError> {
        let i = if self.sends.get(usize::from(stream)).is_some_and(Option::is_some) { usize::from(stream) } else { 0 };
        self.sends.get_mut(i).and_then(Option::as_mut).ok_or_else(|| ClientError::Quic("the control stream is gone".into()))
    }

    /// Streams past the control stream still in use.
    fn data(&self) -> Vec<u16> {
        (1..self.sends.len()).filter(|&i| self.sends[i].is_some()).map(|i| i as u16).collect()
    }

    /// The stream for requests on the open whose volatile FileId is `volatile`.
    pub(crate) fn for_open(&self, volatile: u64) -> u16 {
        let d = self.data();
        if d.is_empty() {
            return 0;
        }
        d[(volatile % d.len() as u64) as usize]
    }

    /// The stream for the `k`th piece of a striped READ or WRITE.
    pub(crate) fn stripe(&self, k: u64) -> u16 {
        self.for_open(k)
    }

    /// The next stream in turn, for a request of no open.
    pub(crate) fn any(&mut self) -> u16 {
        self.next = self.next.wrapping_add(1);
        self.for_open(self.next as u64)
    }

    /// Give up `stream` (not the control stream): stop reading it (quinn
    /// sends STOP_SENDING for a receive half dropped unfinished, RFC 9000
    /// 3.5) and reset its send half (RESET_STREAM). The server sends what
    /// it could not deliver there on the control stream; what was in
    /// flight on it may be lost (the caller sends such requests again).
    pub fn reset(&mut self, stream: u16) {
        let i = usize::from(stream);
        if i == 0 {
            return;
        }
        if let Some(r) = self.readers.get(i) {
            r.abort();
        }
        if let Some(mut s) = self.sends.get_mut(i).and_then(Option::take) {
            let _ = s.reset(quinn::VarInt::from_u32(0));
        }
    }

    /// How many streams the connection has (reset ones included).
    pub fn len(&self) -> usize {
        self.sends.len()
    }
}

impl Drop for Streams {
    fn drop(&mut self) {
        for r in &self.readers {
            r.abort();
        }
    }
}

/// Frames of `stream` into `tx` until it ends. The control stream's end
/// (or a broken frame on any stream) is passed on as an error: the
/// connection is lost; another stream's end is not (it was reset).
async fn read(mut rd: StreamChunks, stream: u16, tx: mpsc::Sender<Incoming>) {
    let frame_len = |p| framing::frame_len(p, framing::MAX_FRAME).map_err(|e| ClientError::Protocol(format!("{e:?}")));
    loop {
        let item = match rd.next_message(frame_len).await {
            Ok(Some((head, tail))) => Ok((stream, Vec::from(head), tail)),
            Ok(None) if stream != 0 => return,
            Ok(None) => Err(ClientError::Io(std::io::ErrorKind::UnexpectedEof.into())),
            Err(e) => Err(e),
        };
        let end = item.is_err();
        if tx.send(item).await.is_err() || end {
            return;
        }
    }
}

/// The open a request body names (its volatile FileId), for the commands
/// that name one: where MS-SMB2 2.2 puts the FileId in each body.
pub(crate) fn open_of(command: Command, body: &[u8]) -> Option<u64> {
    let at = match command {
        Command::CLOSE | Command::FLUSH | Command::LOCK | Command::IOCTL | Command::QUERY_DIRECTORY | Command::CHANGE_NOTIFY => 8,
        Command::READ | Command::WRITE | Command::SET_INFO => 16,
        Command::QUERY_INFO => 24,
        _ => return None,
    };
    // The volatile half follows the persistent one (2.2.14.1).
    let v = body.get(at + 8..at + 16)?;
    let volatile = u64::from_le_bytes(v.try_into().ok()?);
    // FileId::RELATED (all ones) names the open of an earlier request.
    (volatile != u64::MAX).then_some(volatile)
}

#[cfg(test)]
mod tests {
    use super::*;
    use smbq_wire::FileId;

    #[test]
    fn the_file_id_is_found_where_each_command_has_it() {
        let fid = FileId { persistent: 7, volatile: 42 };
        let mut b = Vec::new();
        smbq_wire::close::CloseRequest { flags: 0, file_id: fid }.encode(&mut b);
        assert_eq!(open_of(Command::CLOSE, &b), Some(42));
        let mut b = Vec::new();
        smbq_wire::read::ReadRequest { length: 1, offset: 0, file_id: fid, ..Default::default() }.encode(&mut b);
        assert_eq!(open_of(Command::READ, &b), Some(42));
        let mut b = Vec::new();
        smbq_wire::query_info::QueryInfoRequest { file_id: fid, ..Default::default() }.encode(&mut b);
        assert_eq!(open_of(Command::QUERY_INFO, &b), Some(42));
        let mut b = Vec::new();
        smbq_wire::close::CloseRequest { flags: 0, file_id: FileId::RELATED }.encode(&mut b);
        assert_eq!(open_of(Command::CLOSE, &b), None);
        assert_eq!(open_of(Command::CREATE, &[0; 64]), None);
        assert_eq!(open_of(Command::READ, &[0; 20]), None, "a short body names no open");
    }
}
