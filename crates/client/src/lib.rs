//! An SMB 3.1.1 client over QUIC or TCP (MS-SMB2 3.2). `core` holds the
//! protocol state without I/O; this module moves framed messages over a
//! TCP or QUIC stream; `connect` reaches a server by name and logs on;
//! `share` is what a user does with files; `srvsvc` lists shares.

#![forbid(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod connect;
pub mod core;
pub mod many;
pub mod resume;
pub mod srvsvc;
pub mod share;
mod streams;
pub mod url;

use crate::core::{check, Core};
use smbq_auth::ClientAuth;
use smbq_wire::create::{disposition, CreateRequest, CreateResponse};
use smbq_wire::header::HEADER_LEN;
use smbq_wire::{framing, Command, FileId, Header, NtStatus, Put};
use std::net::SocketAddr;
use std::sync::Arc;
use bytes::Bytes;
use smbq_quic::StreamChunks;
use smbq_wire::transform;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0:?} failed: {1}")]
    Status(Command, NtStatus),
    #[error("protocol: {0}")]
    Protocol(String),
    #[error("QUIC: {0}")]
    Quic(String),
    #[error("the server's certificate: {0}")]
    Certificate(String),
    #[error("{0}")]
    Unreachable(String),
    #[error("{0}")]
    Usage(String),
    /// The server lacks what was asked for (the SMB3 POSIX extensions, say).
    #[error("{0}")]
    Unsupported(String),
    /// No usable credentials to log on with (Kerberos: no ticket, or none
    /// to be had for the server), before anything is sent.
    #[error("{0}")]
    Credentials(String),
}

impl ClientError {
    /// The connection is gone (reset, closed, timed out): a reconnect may help.
    pub fn is_connection_lost(&self) -> bool {
        matches!(self, ClientError::Io(_) | ClientError::Quic(_))
    }
}

/// Small enough that a large response bypasses it: tokio's BufReader reads
/// straight into the caller's buffer when its own is empty and the read is
/// at least this long, so READ data is copied once, not twice.
const READ_BUFFER: usize = 64 * 1024;

enum Reader {
    Tcp(BufReader<tokio::net::tcp::OwnedReadHalf>),
    /// A large response's payload stays in quinn's chunks.
    Quic(StreamChunks),
    /// Several QUIC streams, read by a task each ([`streams`]).
    Streams(tokio::sync::mpsc::Receiver<streams::Incoming>),
    /// Between the two above, or after a failed switch.
    Gone,
}

enum Writer {
    Tcp(tokio::net::tcp::OwnedWriteHalf),
    /// Frames go to quinn as `Bytes`, without another copy.
    Quic(quinn::SendStream),
    Streams(streams::Streams),
    Gone,
}

pub struct Client {
    pub core: Core,
    rd: Reader,
    wr: Writer,
    /// The QUIC endpoint and connection, when on QUIC.
    pub quic: Option<(quinn::Endpoint, quinn::Connection)>,
    /// How long to wait for the next response frame while requests are in
    /// flight before the connection counts as lost (none: for ever).
    pub response_timeout: Option<std::time::Duration>,
    /// Messages of a compound response not yet returned, and whether they came sealed.
    chained: std::collections::VecDeque<(Vec<u8>, bool)>,
    /// Why a response frame could not be read: the answers it carried are
    /// lost, so later receives fail at once instead of waiting for them.
    broken: Option<String>,
    /// The stream the last response frame came on.
    last_stream: u16,
    /// Whether this connection went in 0-RTT ([`resume`]).
    pub zero_rtt: resume::ZeroRtt,
    /// The connection's qlog trace ([`QuicTarget::qlog_dir`]); its end is
    /// written when the client is dropped.
    qlog: Option<smbq_quictrace::qlog::Trace>,
}

/// How to reach a server over QUIC.
pub struct QuicTarget<'a> {
    pub addr: SocketAddr,
    pub server_name: &'a str,
    /// Trusted roots (e.g. the server's self-signed certificate).
    pub roots: rustls::RootCertStore,
    /// Checks the server's certificate instead of `roots` when set.
    pub verifier: Option<Arc<dyn rustls::client::danger::ServerCertVerifier>>,
    /// Client certificate chain and key, for servers that require one.
    pub client_cert: Option<(Vec<rustls::pki_types::CertificateDer<'static>>, rustls::pki_types::PrivateKeyDer<'static>)>,
    /// Stream receive window (the connection's is twice that).
    pub receive_window: u32,
    /// Upper bound for path MTU discovery (UDP payload bytes); by default
    /// [`smbq_quic::mtu_upper_bound`] of the server's address.
    pub max_udp_payload: u16,
    /// What the endpoint's UDP socket does (calls, datagrams, bytes).
    pub udp: Arc<smbq_quic::Counters>,
    pub congestion: smbq_quic::Congestion,
    /// Send as if the kernel had no UDP GSO (sendmmsg(2) batches).
    pub no_gso: bool,
    /// Connect through this endpoint and TLS session cache, in 0-RTT when
    /// it has a ticket for the server ([`resume`]); none: an endpoint of
    /// its own, no tickets asked for.
    pub resumption: Option<Arc<resume::Resumption>>,
    /// Write a qlog trace of the connection into this directory
    /// ([`smbq_quictrace::qlog`]; `SMBQ_QLOG_DIR` for the smbq binary).
    pub qlog_dir: Option<std::path::PathBuf>,
}

impl<'a> QuicTarget<'a> {
    pub fn new(addr: SocketAddr, server_name: &'a str, roots: rustls::RootCertStore) -> Self {
        QuicTarget { addr, server_name, roots, verifier: None, client_cert: None, receive_window: 64 << 20, max_udp_payload: smbq_quic::mtu_upper_bound(addr.ip()), udp: Arc::default(), congestion: smbq_quic::Congestion::default(), no_gso: false, resumption: None, qlog_dir: None }
    }
}

impl Client {
    pub async fn connect_tcp(addr: SocketAddr) -> Result<Client, ClientError> {
        let s = tokio::net::TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        let (r, w) = s.into_split();
        Ok(Client { core: Core::new(), rd: Reader::Tcp(BufReader::with_capacity(READ_BUFFER, r)), wr: Writer::Tcp(w), quic: None, chained: Default::default(), broken: None, response_timeout: None, last_stream: 0, zero_rtt: resume::ZeroRtt::NotTried, qlog: None })
    }

    /// The TCP socket's descriptor, when on TCP (to read its TCP_INFO).
    pub fn tcp_fd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        match &self.wr {
            Writer::Tcp(w) => Some(w.as_ref().as_raw_fd()),
            _ => None,
        }
    }

    /// TLS 1.3 with ALPN "smb", then one bidirectional stream (MS-SMB2 2.1).
    pub async fn connect_quic(t: QuicTarget<'_>) -> Result<Client, ClientError> {
        if let Some(r) = t.resumption.clone() {
            return resume::connect(t, &r).await;
        }
        let cfg = client_config(&t, |_| {})?;
        let ep = quic_endpoint_for(&t, cfg.clone())?;
        let (connecting, mut trace) = connecting(&ep, &cfg, &t)?;
        let conn = connecting.await.map_err(handshake_error)?;
        started(&mut trace, &ep, &conn);
        let (send, recv) = conn.open_bi().await.map_err(|e| ClientError::Quic(e.to_string()))?;
        let mut c = Client::on_quic(ep, conn, send, StreamChunks::new(recv, t.udp.clone()));
        c.qlog = trace;
        Ok(c)
    }

    /// A client on a QUIC connection's stream.
    fn on_quic(ep: quinn::Endpoint, conn: quinn::Connection, send: quinn::SendStream, recv: StreamChunks) -> Client {
        Client { core: Core::new(), rd: Reader::Quic(recv), wr: Writer::Quic(send), quic: Some((ep, conn)), chained: Default::default(), broken: None, response_timeout: None, zero_rtt: resume::ZeroRtt::NotTried, last_stream: 0, qlog: None }
    }

    /// The QUIC connection's congestion window, RTTs, packets sent and
    /// lost and path MTU now ([`smbq_quictrace::Figures`]); none over TCP.
    pub fn quic_figures(&self) -> Option<smbq_quictrace::Figures> {
        self.quic.as_ref().map(|(_, conn)| smbq_quictrace::Figures::of(conn))
    }

    /// Where the connection's qlog trace is written, if it has one.
    pub fn qlog_path(&self) -> Option<&std::path::Path> {
        self.qlog.as_ref().map(|t| t.path())
    }

    /// One message, framed (MS-SMB2 2.1), on the control stream.
    pub async fn send(&mut self, msg: Vec<u8>) -> Result<(), ClientError> {
        self.send_on(streams::CONTROL, msg).await
    }

    /// One message on `stream` (0, the control stream, unless several
    /// streams were agreed: see [`Client::streams`]).
    pub async fn send_on(&mut self, stream: u16, msg: Vec<u8>) -> Result<(), ClientError> {
        self.send_parts(stream, msg, Bytes::new()).await
    }

    /// One message made of `head` and then `tail`, framed; on QUIC neither
    /// is copied again.
    async fn send_parts(&mut self, stream: u16, head: Vec<u8>, tail: Bytes) -> Result<(), ClientError> {
        let prefix = framing::prefix(head.len() + tail.len());
        let quic = match &mut self.wr {
            Writer::Tcp(w) => {
                w.write_all(&prefix).await?;
                w.write_all(&head).await?;
                w.write_all(&tail).await?;
                return Ok(());
            }
            Writer::Quic(s) => s,
            Writer::Streams(s) => s.send_half(stream)?,
            Writer::Gone => return Err(ClientError::Quic("the connection's streams are gone".into())),
        };
        let mut chunks = [Bytes::copy_from_slice(&prefix), Bytes::from(head), tail];
        quic.write_all_chunks(&mut chunks).await.map_err(|e| ClientError::Quic(e.to_string()))?;
        Ok(())
    }

    /// Streams this connection uses (1 unless smbq's multi-stream
    /// extension was agreed).
    pub fn streams(&self) -> usize {
        match &self.wr {
            Writer::Streams(s) => s.len(),
            _ => 1,
        }
    }

    /// The stream the last response frame came on (0 with one stream).
    pub fn last_stream(&self) -> u16 {
        self.last_stream
    }

    /// Give up stream `stream` (multi-stream only; not the control
    /// stream): see `docs/multistream.md`, "Lost streams". Answers the
    /// server could not send on it come on the control stream; those it
    /// had sent may be lost.
    pub fn reset_stream(&mut self, stream: u16) {
        if let Writer::Streams(s) = &mut self.wr {
            s.reset(stream);
        }
    }

    /// The stream for a request `command` with `body`: its open's, or the
    /// next in turn (always 0 with one stream).
    fn stream_for(&mut self, command: Command, body: &[u8]) -> u16 {
        match &mut self.wr {
            Writer::Streams(s) if command != Command::SESSION_SETUP && command != Command::LOGOFF => match streams::open_of(command, body) {
                Some(v) => s.for_open(v),
                None => s.any(),
            },
            _ => 0,
        }
    }

    /// The stream for the `k`th piece of a striped READ or WRITE.
    fn stripe(&self, k: u64) -> u16 {
        match &self.wr {
            Writer::Streams(s) => s.stripe(k),
            _ => 0,
        }
    }

    /// After NEGOTIATE agreed several streams (QUIC only): open them.
    async fn open_streams(&mut self) -> Result<(), ClientError> {
        let n = self.core.streams;
        let Some((_, conn)) = &self.quic else { return Ok(()) };
        if n < 2 {
            return Ok(());
        }
        let (Reader::Quic(rd), Writer::Quic(wr)) = (std::mem::replace(&mut self.rd, Reader::Gone), std::mem::replace(&mut self.wr, Writer::Gone)) else {
            return Err(ClientError::Protocol("several streams agreed on a connection that is not QUIC".into()));
        };
        let (s, rx) = streams::Streams::open(conn, wr, rd, n).await?;
        self.rd = Reader::Streams(rx);
        self.wr = Writer::Streams(s);
        Ok(())
    }

    /// Next response frame, unsealed; interim STATUS_PENDING answers are skipped.
    pub async fn recv(&mut self) -> Result<Vec<u8>, ClientError> {
        let (m, tail) = self.recv_parts().await?;
        Ok(framing::gather(m, &tail))
    }

    /// [`Client::recv`], but a large unsealed response over QUIC comes as
    /// its head and then the rest in quinn's chunks, not gathered. Each
    /// response is accounted for by [`Core::on_response`] (request in
    /// flight, credits, signature); the messages of a compound response
    /// come one by one.
    async fn recv_parts(&mut self) -> Result<(Vec<u8>, Vec<Bytes>), ClientError> {
        if let Some(why) = &self.broken {
            return Err(ClientError::Protocol(format!("an earlier response was unreadable: {why}")));
        }
        loop {
            let (m, tail, sealed, fresh) = match self.chained.pop_front() {
                Some((m, sealed)) => (m, Vec::new(), sealed, false),
                None => {
                    let frame = match self.response_timeout {
                        Some(t) => tokio::time::timeout(t, self.next_frame()).await.map_err(|_| ClientError::Io(std::io::Error::new(std::io::ErrorKind::TimedOut, format!("no answer from the server in {} s", t.as_secs()))))?,
                        None => self.next_frame().await,
                    };
                    let (m, tail, sealed) = frame.map_err(|e| self.unreadable(e))?;
                    (m, tail, sealed, true)
                }
            };
            let h = Header::decode(&m).map_err(|e| self.unreadable(ClientError::Protocol(format!("bad response header: {e}"))))?;
            let (m, tail) = if fresh && h.next_command != 0 {
                let mut chain = split_chain(framing::gather(m, &tail)).map_err(|e| self.unreadable(e))?.into_iter();
                let first = chain.next().unwrap_or_default();
                for next in chain {
                    self.chained.push_back((next, sealed));
                }
                (first, Vec::new())
            } else if !tail.is_empty() && h.flags & smbq_wire::header::flags::SIGNED != 0 {
                (framing::gather(m, &tail), Vec::new())
            } else {
                (m, tail)
            };
            // An interim answer, or an oplock or lease break (this client holds none), is skipped.
            if self.core.on_response(&m, sealed)?.is_some() {
                return Ok((m, tail));
            }
        }
    }

    /// Note that a frame could not be read (not an I/O error: those recur by themselves).
    fn unreadable(&mut self, e: ClientError) -> ClientError {
        if let ClientError::Protocol(why) = &e {
            self.broken = Some(why.clone());
        }
        e
    }

    /// The next frame off the transport, unsealed: (message, rest of a
    /// large unsealed QUIC message, whether it was sealed).
    async fn next_frame(&mut self) -> Result<(Vec<u8>, Vec<Bytes>, bool), ClientError> {
        let eof = || ClientError::Io(std::io::ErrorKind::UnexpectedEof.into());
        let frame_len = |p| framing::frame_len(p, framing::MAX_FRAME).map_err(|e| ClientError::Protocol(format!("{e:?}")));
        // Room at once for the largest answer this client asks for (a READ
        // and its headers); a longer frame grows as its bytes arrive, so a
        // length prefix alone (up to 16 MiB) allocates no more than that.
        let room = self.core.max_read as usize + 64 * 1024;
        let (m, tail) = match &mut self.rd {
            Reader::Tcp(rd) => {
                let mut p = [0u8; 4];
                rd.read_exact(&mut p).await?;
                let len = frame_len(p)?;
                // read_to_end on a Take fills spare capacity: no zeroing pass.
                let mut m = Vec::with_capacity(len.min(room));
                rd.take(len as u64).read_to_end(&mut m).await?;
                if m.len() != len {
                    return Err(eof());
                }
                (m, Vec::new())
            }
            Reader::Quic(rd) => {
                let (head, tail) = rd.next_message(frame_len).await?.ok_or_else(eof)?;
                (Vec::from(head), tail)
            }
            Reader::Streams(rx) => {
                let (stream, head, tail) = rx.recv().await.ok_or_else(eof)??;
                self.last_stream = stream;
                (head, tail)
            }
            Reader::Gone => return Err(eof()),
        };
        if !transform::is_transform(&m) {
            return Ok((m, tail, false));
        }
        // A sealed message opens only whole.
        let m = if tail.is_empty() { m } else { framing::gather(m, &tail) };
        Ok((self.core.open(m)?, Vec::new(), true))
    }

    /// One request, one checked response.
    pub async fn call(&mut self, command: Command, charge: u16, body: &[u8]) -> Result<(Header, Vec<u8>), ClientError> {
        // An error when short of credits with nothing in flight to bring more.
        self.core.may_send(charge)?;
        let stream = self.stream_for(command, body);
        let (_, m) = self.core.request(command, charge, body);
        self.exchange(stream, command, m).await
    }

    /// Send a built request `m` on `stream` and return its checked response.
    async fn exchange(&mut self, stream: u16, command: Command, m: Vec<u8>) -> Result<(Header, Vec<u8>), ClientError> {
        self.send_on(stream, m).await?;
        let r = self.recv().await?;
        Ok((check(&r, command)?, r))
    }

    pub async fn negotiate(&mut self, transport_caps: bool) -> Result<(), ClientError> {
        let body = self.core.negotiate_body(transport_caps);
        let (_, m) = self.core.request(Command::NEGOTIATE, 1, &body);
        self.core.hash(&m);
        resume::send_negotiate(self, m).await?;
        let r = self.recv().await?;
        self.core.on_negotiate(&r)?;
        self.open_streams().await
    }

    pub async fn login(&mut self, user: &str, password: &str) -> Result<(), ClientError> {
        self.login_as(user, "", password).await
    }

    /// NTLMv2 through SPNEGO as `domain\user` (MS-SMB2 3.2.4.2.3, 3.2.5.3).
    pub async fn login_as(&mut self, user: &str, domain: &str, password: &str) -> Result<(), ClientError> {
        self.authenticate(ClientAuth::new(user, domain, password, share::filetime(std::time::SystemTime::now()))).await
    }

    /// Kerberos through SPNEGO with the default credential cache
    /// (`KRB5CCNAME`), for the service `cifs/host` (MS-KILE 3.2.1: `host`
    /// is the server's name, not its address). MIT may ask the KDC for the
    /// service ticket: that runs on a blocking thread.
    pub async fn login_kerberos(&mut self, host: &str) -> Result<(), ClientError> {
        let host = host.to_string();
        let auth = tokio::task::spawn_blocking(move || ClientAuth::kerberos(&host))
            .await
            .map_err(|e| ClientError::Protocol(format!("Kerberos: {e}")))?
            .map_err(|e| ClientError::Credentials(e.to_string()))?;
        self.authenticate(auth).await
    }

    /// SESSION_SETUP until the server accepts `auth`'s tokens, then the
    /// session's keys from its session key.
    pub async fn authenticate(&mut self, mut auth: ClientAuth) -> Result<(), ClientError> {
        let mut token = auth.step(None).map_err(|e| ClientError::Protocol(e.to_string()))?.unwrap_or_default();
        loop {
            let mut b = vec![0u8; HEADER_LEN];
            smbq_wire::session_setup::encode_request(&mut b, 0, 1, &token);
            self.core.may_send(1)?;
            let (_, m) = self.core.request(Command::SESSION_SETUP, 1, &b[HEADER_LEN..]);
            let mut hash = self.core.preauth();
            hash.update(&m);
            self.send(m).await?;
            let r = self.recv().await?;
            let h = check(&r, Command::SESSION_SETUP)?;
            self.core.session_id = h.session_id;
            let body = r.get(HEADER_LEN..).unwrap_or(&[]);
            let mut rd = smbq_wire::Reader::new(body);
            let bad = |_| ClientError::Protocol("bad SESSION_SETUP response".into());
            rd.skip(2).map_err(bad)?;
            let session_flags = rd.u16().map_err(bad)?;
            let off = rd.u16().map_err(bad)? as usize;
            let len = rd.u16().map_err(bad)? as usize;
            let server_token = smbq_wire::reader::at(&r, off, len).map_err(bad)?.to_vec();
            if NtStatus(h.status) == NtStatus::MORE_PROCESSING_REQUIRED {
                hash.update(&r);
                self.core.set_preauth(hash);
                token = auth
                    .step(Some(&server_token))
                    .map_err(|e| ClientError::Protocol(e.to_string()))?
                    .ok_or_else(|| ClientError::Protocol("authentication ended early".into()))?;
                continue;
            }
            auth.step(Some(&server_token)).map_err(|e| ClientError::Protocol(format!("server token: {e}")))?;
            return self.core.on_session_established(&auth, &hash, session_flags, &r);
        }
    }

    pub async fn tree_connect(&mut self, unc: &str) -> Result<u32, ClientError> {
        let path: Vec<u8> = unc.encode_utf16().flat_map(|u| u.to_le_bytes()).collect();
        let mut b = Vec::new();
        b.u16(9);
        b.u16(0);
        b.u16((HEADER_LEN + 8) as u16);
        b.u16(path.len() as u16);
        b.bytes(&path);
        let (h, r) = self.call(Command::TREE_CONNECT, 1, &b).await?;
        self.core.tree_id = h.tree_id;
        let share_flags = u32::from_le_bytes(r.get(HEADER_LEN + 4..HEADER_LEN + 8).and_then(|s| s.try_into().ok()).unwrap_or([0; 4]));
        if share_flags & smbq_wire::tree_connect::share_flags::ENCRYPT_DATA != 0 && !self.core.transport_security {
            self.core.encrypt = true;
        }
        Ok(h.tree_id)
    }

    /// Open or create `path` for read and write (and delete).
    pub async fn create(&mut self, path: &str, disp: u32, options: u32) -> Result<(FileId, CreateResponse), ClientError> {
        // read/write data+attributes, delete, read control, synchronize
        let body = create_body(path, 0x0013_019F, disp, options, 0, 0, &[]);
        let (_, r) = self.call(Command::CREATE, 1, &body).await?;
        let (resp, _) = CreateResponse::decode(&r).map_err(|e| ClientError::Protocol(e.to_string()))?;
        Ok((resp.file_id, resp))
    }

    pub async fn write(&mut self, fid: FileId, offset: u64, data: &[u8]) -> Result<u32, ClientError> {
        let req = smbq_wire::write::WriteRequest { offset, file_id: fid, channel: 0, remaining_bytes: 0, flags: 0, data };
        self.core.may_send(charge(data.len()))?;
        let stream = self.stripe(fid.volatile);
        let (_, m) = self.core.request_with(Command::WRITE, charge(data.len()), write_body_len(data), |b| req.encode(b));
        let (_, r) = self.exchange(stream, Command::WRITE, m).await?;
        smbq_wire::write::decode_response(&r).map_err(|e| ClientError::Protocol(e.to_string()))
    }

    pub async fn read(&mut self, fid: FileId, offset: u64, len: u32) -> Result<Vec<u8>, ClientError> {
        let req = smbq_wire::read::ReadRequest { length: len, offset, file_id: fid, ..Default::default() };
        let mut b = Vec::new();
        req.encode(&mut b);
        let (_, r) = self.call(Command::READ, charge(len as usize), &b).await?;
        Ok(smbq_wire::read::decode_response(&r).map_err(|e| ClientError::Protocol(e.to_string()))?.to_vec())
    }

    pub async fn close(&mut self, fid: FileId) -> Result<(), ClientError> {
        let mut b = Vec::new();
        smbq_wire::close::CloseRequest { flags: 0, file_id: fid }.encode(&mut b);
        self.call(Command::CLOSE, 1, &b).await.map(|_| ())
    }

    /// Delete a file: open it with FILE_DELETE_ON_CLOSE and close it.
    pub async fn delete(&mut self, path: &str) -> Result<(), ClientError> {
        let (fid, _) = self.create(path, disposition::OPEN, 0x0000_1040).await?;
        self.close(fid).await
    }

    /// Write `data` at offset 0 in `chunk`-byte WRITEs with up to `depth`
    /// requests outstanding (the fio iodepth of the benchmarks).
    pub async fn write_pipelined(&mut self, fid: FileId, data: &Bytes, chunk: usize, depth: usize) -> Result<(), ClientError> {
        self.write_from(fid, 0, data.len() as u64, chunk, depth, |off, len| Ok(data.slice(off as usize..off as usize + len)), |_, _| {}).await
    }

    /// Write `size` bytes from `offset` in `chunk`-byte WRITEs with up to
    /// `depth` outstanding, as far as the credits the server granted allow
    /// (MS-SMB2 3.2.4.1.5); `source(offset, len)` gives each piece and
    /// `progress(offset, len)` hears of each piece written.
    ///
    /// When WRITEs are neither sealed nor signed (QUIC with transport
    /// capabilities), only their header and fixed part are encoded and the
    /// data goes to the transport as the `Bytes` given, without a copy.
    #[allow(clippy::too_many_arguments)]
    pub async fn write_from(
        &mut self,
        fid: FileId,
        offset: u64,
        size: u64,
        chunk: usize,
        depth: usize,
        mut source: impl FnMut(u64, usize) -> std::io::Result<Bytes>,
        mut progress: impl FnMut(u64, u64),
    ) -> Result<(), ClientError> {
        let chunk = chunk.max(1) as u64;
        let n = size.div_ceil(chunk);
        let (mut sent, mut done) = (0u64, 0u64);
        let mut lens = std::collections::HashMap::new();
        while done < n {
            while sent < n && sent - done < depth.max(1) as u64 {
                let off = offset + sent * chunk;
                let len = (offset + size - off).min(chunk) as usize;
                if !self.core.may_send(charge(len))? {
                    break;
                }
                let c = source(off, len)?;
                if c.len() != len {
                    return Err(ClientError::Io(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, format!("the source gave {} bytes at {off}, not {len}", c.len()))));
                }
                let req = smbq_wire::write::WriteRequest { offset: off, file_id: fid, channel: 0, remaining_bytes: 0, flags: 0, data: &c };
                let stream = self.stripe(sent);
                let id = if self.core.protects(Command::WRITE) {
                    let (id, m) = self.core.request_with(Command::WRITE, charge(len), write_body_len(&c), |b| req.encode(b));
                    self.send_on(stream, m).await?;
                    id
                } else {
                    let (id, head) = self.core.request_with(Command::WRITE, charge(len), smbq_wire::write::HEAD_LEN, |b| req.encode_head(b));
                    self.send_parts(stream, head, c).await?;
                    id
                };
                lens.insert(id, (off, len as u32));
                sent += 1;
            }
            let r = self.recv().await?;
            let h = check(&r, Command::WRITE)?;
            let written = smbq_wire::write::decode_response(&r).map_err(|e| ClientError::Protocol(e.to_string()))?;
            let (off, asked) = lens.remove(&h.message_id).ok_or_else(|| ClientError::Protocol(format!("WRITE answer for message {} that is not outstanding", h.message_id)))?;
            if written != asked {
                return Err(ClientError::Protocol(format!("the server wrote {written} of {asked} bytes")));
            }
            progress(off, u64::from(written));
            done += 1;
        }
        Ok(())
    }

    /// Read `size` bytes from offset 0 in `chunk`-byte READs with up to
    /// `depth` outstanding; calls `sink` with each piece and its offset.
    pub async fn read_pipelined(&mut self, fid: FileId, size: u64, chunk: u32, depth: usize, mut sink: impl FnMut(u64, &[u8])) -> Result<(), ClientError> {
        self.read_range(fid, 0, size, chunk, depth, |off, piece| {
            sink(off, piece);
            Ok(())
        })
        .await
    }

    /// Read `size` bytes from `offset` in `chunk`-byte READs with up to
    /// `depth` outstanding, as far as the credits granted allow; calls
    /// `sink` with each piece and its offset (over QUIC, the chunks quinn
    /// received it in). A server may answer in any order (MS-SMB2 3.2.5.1
    /// matches a response to its request by MessageId), so pieces of
    /// different READs come in the order their answers do; those of one
    /// READ come in order. A READ answered short (the file shrank) is an error.
    pub async fn read_range(&mut self, fid: FileId, offset: u64, size: u64, chunk: u32, depth: usize, mut sink: impl FnMut(u64, &[u8]) -> std::io::Result<()>) -> Result<(), ClientError> {
        let chunk = chunk.max(1);
        let n = size.div_ceil(u64::from(chunk));
        let (mut sent, mut done) = (0u64, 0u64);
        let mut ids = Vec::new();
        while done < n {
            while sent < n && sent - done < depth.max(1) as u64 {
                let off = offset + sent * u64::from(chunk);
                let len = (offset + size - off).min(u64::from(chunk)) as u32;
                if !self.core.may_send(charge(len as usize))? {
                    break;
                }
                let req = smbq_wire::read::ReadRequest { length: len, offset: off, file_id: fid, ..Default::default() };
                let mut b = Vec::new();
                req.encode(&mut b);
                let stream = self.stripe(sent);
                let (id, m) = self.core.request(Command::READ, charge(len as usize), &b);
                self.send_on(stream, m).await?;
                ids.push((id, off, len));
                sent += 1;
            }
            let (r, tail) = self.recv_parts().await?;
            let h = check(&r, Command::READ)?;
            let Some(at) = ids.iter().position(|&(id, _, _)| id == h.message_id) else {
                return Err(ClientError::Protocol(format!("READ answer for message {} that is not outstanding", h.message_id)));
            };
            let (_, off, asked) = ids.swap_remove(at);
            let more = tail.iter().map(Bytes::len).sum();
            let (data, len) = smbq_wire::read::decode_response_head(&r, more).map_err(|e| ClientError::Protocol(e.to_string()))?;
            if len != asked as usize {
                return Err(ClientError::Protocol(format!("READ at {off} returned {len} of {asked} bytes: the file changed size")));
            }
            let mut at = off;
            for piece in framing::payload(data, &tail, len) {
                sink(at, piece)?;
                at += piece.len() as u64;
            }
            done += 1;
        }
        Ok(())
    }

    /// An FSCTL on `fid` (MS-SMB2 3.2.4.20); returns its output, at most `max_output` bytes.
    pub async fn fsctl(&mut self, fid: FileId, ctl_code: u32, input: &[u8], max_output: u32) -> Result<Vec<u8>, ClientError> {
        use smbq_wire::ioctl::{IoctlRequest, IS_FSCTL};
        let req = IoctlRequest { ctl_code, file_id: fid, input, max_input_response: 0, output_count: 0, max_output_response: max_output, flags: IS_FSCTL };
        let mut b = Vec::new();
        req.encode(&mut b);
        let (_, r) = self.call(Command::IOCTL, charge(input.len().max(max_output as usize)), &b).await?;
        Ok(smbq_wire::ioctl::decode_response(&r).map_err(|e| ClientError::Protocol(format!("IOCTL response: {e}")))?.to_vec())
    }

    pub async fn echo(&mut self) -> Result<(), ClientError> {
        self.call(Command::ECHO, 1, &[4, 0, 0, 0]).await.map(|_| ())
    }
}

/// A CREATE request body (MS-SMB2 2.2.13) sharing read, write and delete;
/// `name` goes as it is.
pub fn create_body(name: &str, desired_access: u32, disp: u32, create_options: u32, file_attributes: u32, oplock_level: u8, contexts: &[(&[u8], &[u8])]) -> Vec<u8> {
    create_body_sharing(name, desired_access, 7, disp, create_options, file_attributes, oplock_level, contexts)
}

/// [`create_body`] with the ShareAccess given (0: an open that fails
/// with STATUS_SHARING_VIOLATION while another has the file open).
#[allow(clippy::too_many_arguments)]
pub fn create_body_sharing(name: &str, desired_access: u32, share_access: u32, disp: u32, create_options: u32, file_attributes: u32, oplock_level: u8, contexts: &[(&[u8], &[u8])]) -> Vec<u8> {
    let req = CreateRequest {
        oplock_level,
        impersonation_level: 2,
        desired_access,
        file_attributes,
        share_access,
        disposition: disp,
        options: create_options,
        name: name.to_string(),
        contexts: contexts.iter().map(|(name, data)| smbq_wire::create::CreateContext { name, data }).collect(),
    };
    let mut b = vec![0u8; HEADER_LEN];
    req.encode(&mut b, 0);
    b.split_off(HEADER_LEN)
}

/// The messages of a compound response (MS-SMB2 3.2.5.1.1): each
/// NextCommand must point inside the frame at an 8-byte boundary.
fn split_chain(mut m: Vec<u8>) -> Result<Vec<Vec<u8>>, ClientError> {
    let mut out = Vec::new();
    loop {
        let h = Header::decode(&m).map_err(|e| ClientError::Protocol(format!("bad compound response: {e}")))?;
        let next = h.next_command as usize;
        if next == 0 {
            out.push(m);
            return Ok(out);
        }
        if next < HEADER_LEN || next > m.len() || !next.is_multiple_of(8) {
            return Err(ClientError::Protocol(format!("compound response: NextCommand {next} in a {}-byte message", m.len())));
        }
        let rest = m.split_off(next);
        out.push(m);
        m = rest;
    }
}

/// Size of a WRITE request body carrying `data` (an empty one still has
/// the buffer's first byte).
fn write_body_len(data: &[u8]) -> usize {
    smbq_wire::write::HEAD_LEN + data.len().max(1)
}

/// A failed QUIC handshake as an error: a TLS alert (RFC 9001 4.8) means
/// the handshake, not the path, failed.
fn handshake_error(e: quinn::ConnectionError) -> ClientError {
    match e {
        quinn::ConnectionError::TransportError(ref te) if (0x100..0x200).contains(&u64::from(te.code)) => ClientError::Certificate(e.to_string()),
        e => ClientError::Quic(e.to_string()),
    }
}

/// A client QUIC endpoint for `t`: TLS 1.3, ALPN "smb", its windows.
pub fn quic_endpoint(t: &QuicTarget<'_>) -> Result<quinn::Endpoint, ClientError> {
    quic_endpoint_for(t, client_config(t, |_| {})?)
}

/// The client configuration for `t` ([`quic_endpoint`]'s), its TLS
/// configuration changed by `adjust` first.
pub(crate) fn client_config(t: &QuicTarget<'_>, adjust: impl FnOnce(&mut rustls::ClientConfig)) -> Result<quinn::ClientConfig, ClientError> {
    let provider = Arc::new(smbq_crypto::tls_provider());
    let b = rustls::ClientConfig::builder_with_provider(provider).with_protocol_versions(&[&rustls::version::TLS13]).map_err(|e| ClientError::Quic(e.to_string()))?;
    let b = match &t.verifier {
        Some(v) => b.dangerous().with_custom_certificate_verifier(v.clone()),
        None => b.with_root_certificates(t.roots.clone()),
    };
    let mut tls = match &t.client_cert {
        Some((chain, key)) => b.with_client_auth_cert(chain.clone(), key.clone_key()).map_err(|e| ClientError::Quic(e.to_string()))?,
        None => b.with_no_client_auth(),
    };
    tls.alpn_protocols = vec![b"smb".to_vec()];
    adjust(&mut tls);
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).map_err(|e| ClientError::Quic(e.to_string()))?;
    let mut cfg = quinn::ClientConfig::new(Arc::new(crypto));
    cfg.transport_config(Arc::new(transport_config(t)));
    Ok(cfg)
}

/// The transport configuration for `t`: windows, MTU discovery's bound,
/// congestion controller, ACK frequency.
fn transport_config(t: &QuicTarget<'_>) -> quinn::TransportConfig {
    let mut transport = quinn::TransportConfig::default();
    transport.stream_receive_window(quinn::VarInt::from_u32(t.receive_window));
    transport.receive_window(quinn::VarInt::from_u32(t.receive_window.saturating_mul(2)));
    transport.send_window(u64::from(t.receive_window) * 2);
    let mut mtu = quinn::MtuDiscoveryConfig::default();
    mtu.upper_bound(t.max_udp_payload);
    transport.mtu_discovery_config(Some(mtu));
    transport.congestion_controller_factory(t.congestion.factory());
    transport.ack_frequency_config(Some(smbq_quic::ack_frequency()));
    transport
}

/// An endpoint for `t` whose connections use `cfg` unless told otherwise.
pub(crate) fn quic_endpoint_for(t: &QuicTarget<'_>, cfg: quinn::ClientConfig) -> Result<quinn::Endpoint, ClientError> {
    let bind: SocketAddr = if t.addr.is_ipv6() { ([0u16; 8], 0).into() } else { ([0u8; 4], 0).into() };
    let mut ec = quinn::EndpointConfig::default();
    let _ = ec.max_udp_payload_size(t.max_udp_payload.max(1200));
    let socket = smbq_quic::socket(bind, smbq_quic::DEFAULT_BUFFER)?;
    let mut ep = quinn::Endpoint::new(ec, None, socket, Arc::new(smbq_quic::Runtime { counters: t.udp.clone(), no_gso: t.no_gso }))?;
    ep.set_default_client_config(cfg);
    Ok(ep)
}

/// Start connecting to `t` through `ep` with `cfg`; with
/// [`QuicTarget::qlog_dir`], on a copy of `cfg` (the same TLS configuration
/// and session cache) whose transport configuration writes the
/// connection's qlog trace, returned with it.
pub(crate) fn connecting(ep: &quinn::Endpoint, cfg: &quinn::ClientConfig, t: &QuicTarget<'_>) -> Result<(quinn::Connecting, Option<smbq_quictrace::qlog::Trace>), ClientError> {
    let mut cfg = cfg.clone();
    let mut trace = None;
    if let Some(dir) = &t.qlog_dir {
        let (tr, stream) = smbq_quictrace::qlog::Trace::create(dir, smbq_quictrace::qlog::Role::Client, t.addr)
            .map_err(|e| ClientError::Usage(format!("cannot write a qlog trace in {}: {e}", dir.display())))?;
        let mut transport = transport_config(t);
        transport.qlog_stream(Some(stream));
        cfg.transport_config(Arc::new(transport));
        trace = Some(tr);
    }
    let c = ep.connect_with(cfg, t.addr, t.server_name).map_err(|e| ClientError::Quic(e.to_string()))?;
    Ok((c, trace))
}

/// The connection `trace` is for is there: its addresses and ALPN go in.
pub(crate) fn started(trace: &mut Option<smbq_quictrace::qlog::Trace>, ep: &quinn::Endpoint, conn: &quinn::Connection) {
    if let Some(t) = trace {
        let alpn = conn.handshake_data().and_then(|d| d.downcast::<quinn::crypto::rustls::HandshakeData>().ok()).and_then(|h| h.protocol);
        t.started(conn, ep.local_addr().ok(), alpn.as_deref());
    }
}

/// Credits a READ/WRITE of `len` bytes costs (MS-SMB2 3.1.5.2).
pub fn charge(len: usize) -> u16 {
    (len.max(1).div_ceil(65536)).min(u16::MAX as usize) as u16
}

