//! A qlog trace per QUIC connection, on request: `SMBQ_QLOG_DIR=DIR` (or
//! `smbq serve --qlog-dir DIR`, `smbq get/put/... --qlog-dir DIR`) writes
//! one file per connection into DIR, server and client alike.
//!
//! The events come from quinn-proto itself: its `qlog` feature (which smbq
//! builds with) writes qlog's JSON-SEQ flavour (RFC 7464: each record is
//! an RS byte, 0x1e, one JSON object and a newline; the first record is
//! the trace's header) to the writer of a per-connection
//! `TransportConfig::qlog_stream`: `transport:packet_sent` and
//! `transport:packet_received` per packet, `recovery:packet_lost` per lost
//! packet, and `recovery:metrics_updated` whenever one of its figures
//! changes (on every ACK, loss and timeout: congestion window, bytes and
//! packets in flight, smoothed, minimum and latest RTT, RTT variance,
//! PTO count, slow-start threshold, and the pacing rate when the
//! controller gives one), each with the packet-level detail qvis
//! (qvis.quictools.info) shows. Times are milliseconds since the trace
//! began. [`Trace`] adds two events of its own: `connectivity:connection_started`
//! (addresses, ALPN, role) and, at the end, `connectivity:connection_closed`
//! with the close reason and the connection's final figures
//! ([`crate::figures::Figures`], as `smbq get --json` reports them, plus
//! quinn's UDP counts).
//!
//! A file holds at most [`MAX_BYTES`] of quinn's events (a 1 GiB transfer
//! at 1452-byte datagrams makes about 150 MiB of them): the first record
//! over the limit is replaced by a `smbq:trace_truncated` event and the
//! rest are dropped; the closing event is written whatever the size.
//! Files are named `ROLE-UNIXMILLIS-PEER-PID-N.sqlog` (`.sqlog` is what
//! qvis expects of JSON-SEQ). Tracing costs a JSON record per packet, so
//! it is for diagnosis, not for production load.

use crate::Figures;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

/// The environment variable that names the directory, for the server and
/// the client.
pub const ENV: &str = "SMBQ_QLOG_DIR";

/// The most bytes of quinn's events one connection's file holds.
pub const MAX_BYTES: u64 = 64 << 20;

/// The JSON-SEQ record separator (RFC 7464).
const RS: u8 = 0x1e;

/// The longest record kept from quinn (its largest, a packet with many
/// frames, is a few KiB); a longer one is dropped whole.
const MAX_RECORD: usize = 1 << 20;

/// Which end of the connection writes the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Server,
    Client,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Server => "server",
            Role::Client => "client",
        }
    }
}

/// The directory `SMBQ_QLOG_DIR` names, if it is set and not empty.
pub fn dir_from_env() -> Option<PathBuf> {
    std::env::var_os(ENV).filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// The trace file: quinn's records and ours, under one lock, so a record
/// is written whole whichever thread writes it.
struct Sink<W: Write> {
    out: W,
    start: Instant,
    /// Bytes of quinn's records written.
    written: u64,
    limit: u64,
    truncated: bool,
}

impl<W: Write> Sink<W> {
    /// A whole record from quinn-proto: written while the file holds less
    /// than `limit` bytes of them; the first one beyond is replaced by a
    /// line that says so.
    fn quinn_record(&mut self, record: &[u8]) -> io::Result<()> {
        if self.truncated {
            return Ok(());
        }
        if self.written + record.len() as u64 > self.limit {
            self.truncated = true;
            let limit = self.limit;
            return self.own_record("smbq:trace_truncated", serde_json::json!({ "limit_bytes": limit, "reason": "the trace reached its size limit; later packet events are not written" }));
        }
        self.written += record.len() as u64;
        self.out.write_all(record)
    }

    /// One of [`Trace`]'s events, whatever the size so far.
    fn own_record(&mut self, name: &str, data: serde_json::Value) -> io::Result<()> {
        let time = self.start.elapsed().as_secs_f64() * 1e3;
        let mut line = vec![RS];
        serde_json::to_writer(&mut line, &serde_json::json!({ "time": time, "name": name, "data": data }))?;
        line.push(b'\n');
        self.out.write_all(&line)
    }
}

/// What quinn-proto's streamer writes to: it writes a record in several
/// calls, so the bytes are gathered here until the newline that ends it
/// and go to the [`Sink`] whole.
struct Records<W: Write> {
    sink: Arc<Mutex<Sink<W>>>,
    partial: Vec<u8>,
}

impl<W: Write> Write for Records<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut rest = buf;
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            let (line, after) = rest.split_at(end + 1);
            rest = after;
            let mut sink = self.sink.lock().unwrap_or_else(|p| p.into_inner());
            if self.partial.is_empty() {
                sink.quinn_record(line)?;
            } else {
                self.partial.extend_from_slice(line);
                let r = sink.quinn_record(&self.partial);
                self.partial.clear();
                r?;
            }
        }
        if self.partial.len() + rest.len() > MAX_RECORD {
            // Not a record of quinn's: drop it rather than hold it.
            self.partial.clear();
        } else {
            self.partial.extend_from_slice(rest);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.sink.lock().unwrap_or_else(|p| p.into_inner()).out.flush()
    }
}

/// One connection's trace: its file, the qlog stream quinn writes into it
/// ([`Trace::create`]), and the start and end events. Dropped without
/// [`Trace::end`], it writes the end then (a process that exits without
/// closing its connection still gets its trace's last line, with the
/// figures of that moment).
pub struct Trace {
    sink: Arc<Mutex<Sink<BufWriter<File>>>>,
    path: PathBuf,
    role: Role,
    conn: Option<quinn::Connection>,
    ended: bool,
}

/// Files made by this process, for their names.
static MADE: AtomicU64 = AtomicU64::new(0);

impl Trace {
    /// A new file in `dir` (made if missing) for a connection of `role`
    /// with `peer`, and the stream to give quinn for that connection
    /// (`TransportConfig::qlog_stream` of a configuration of its own: a
    /// server's `Incoming::accept_with`, a client's `Endpoint::connect_with`).
    pub fn create(dir: &Path, role: Role, peer: SocketAddr) -> io::Result<(Trace, quinn::QlogStream)> {
        std::fs::create_dir_all(dir)?;
        let millis = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis());
        let n = MADE.fetch_add(1, Ordering::Relaxed) + 1;
        let peer_name = format!("{}_{}", peer.ip(), peer.port()).replace(':', "-");
        let path = dir.join(format!("{}-{millis}-{peer_name}-{}-{n}.sqlog", role.name(), std::process::id()));
        let file = std::fs::OpenOptions::new().write(true).create_new(true).open(&path)?;
        let start = Instant::now();
        let sink = Arc::new(Mutex::new(Sink { out: BufWriter::with_capacity(64 << 10, file), start, written: 0, limit: MAX_BYTES, truncated: false }));
        let mut config = quinn::QlogConfig::default();
        config
            .writer(Box::new(Records { sink: sink.clone(), partial: Vec::new() }))
            .title(Some(format!("smbq {}", role.name())))
            .description(Some(format!("QUIC connection with {peer}")))
            .start_time(start);
        let stream = config.into_stream().ok_or_else(|| io::Error::other("quinn could not start the qlog trace"))?;
        Ok((Trace { sink, path, role, conn: None, ended: false }, stream))
    }

    /// Where the trace is written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The connection is there: `connectivity:connection_started` with its
    /// addresses (`local`: the endpoint's, its IP replaced by the one the
    /// connection uses when quinn knows it) and the ALPN protocol agreed.
    pub fn started(&mut self, conn: &quinn::Connection, local: Option<SocketAddr>, alpn: Option<&[u8]>) {
        let peer = conn.remote_address();
        let local = local.map(|l| conn.local_ip().map_or(l, |ip| SocketAddr::new(ip, l.port())));
        let (src, dst) = match self.role {
            Role::Client => (local, Some(peer)),
            Role::Server => (Some(peer), local),
        };
        let data = serde_json::json!({
            "ip_version": if peer.is_ipv4() { "ipv4" } else { "ipv6" },
            "src_ip": src.map(|a| a.ip().to_string()),
            "src_port": src.map(|a| a.port()),
            "dst_ip": dst.map(|a| a.ip().to_string()),
            "dst_port": dst.map(|a| a.port()),
            "protocol": "QUIC",
            "alpn": alpn.map(|a| String::from_utf8_lossy(a).into_owned()),
            "role": self.role.name(),
        });
        self.event("connectivity:connection_started", data);
        self.conn = Some(conn.clone());
    }

    /// The end: `connectivity:connection_closed` with the close reason (or
    /// that it was still open) and the final figures; the file is flushed.
    /// Once; quinn's records of the closing packets may follow it.
    pub fn end(&mut self) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        let data = match self.conn.take() {
            Some(conn) => {
                let stats = conn.stats();
                let udp = |u: quinn::UdpStats| serde_json::json!({ "datagrams": u.datagrams, "bytes": u.bytes, "ios": u.ios });
                serde_json::json!({
                    "reason": conn.close_reason().map_or_else(|| "still open: the process let go of it".to_string(), |r| r.to_string()),
                    "figures": Figures::of(&conn).json(),
                    "udp_tx": udp(stats.udp_tx),
                    "udp_rx": udp(stats.udp_rx),
                })
            }
            None => serde_json::json!({ "reason": "the connection was not established" }),
        };
        self.event("connectivity:connection_closed", data);
        let _ = self.sink.lock().unwrap_or_else(|p| p.into_inner()).out.flush();
    }

    fn event(&self, name: &str, data: serde_json::Value) {
        let mut sink = self.sink.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = sink.own_record(name, data) {
            tracing::warn!(path = %self.path.display(), error = %e, "writing the qlog trace");
        }
    }
}

impl Drop for Trace {
    fn drop(&mut self) {
        self.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sink(limit: u64) -> Arc<Mutex<Sink<Vec<u8>>>> {
        Arc::new(Mutex::new(Sink { out: Vec::new(), start: Instant::now(), written: 0, limit, truncated: false }))
    }

    fn lines(s: &Arc<Mutex<Sink<Vec<u8>>>>) -> Vec<serde_json::Value> {
        let out = s.lock().unwrap().out.clone();
        out.split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| {
                assert_eq!(l[0], RS, "each record starts with RS");
                serde_json::from_slice(&l[1..]).unwrap()
            })
            .collect()
    }

    #[test]
    fn records_written_in_pieces_reach_the_file_whole() {
        let s = sink(MAX_BYTES);
        let mut w = Records { sink: s.clone(), partial: Vec::new() };
        // As qlog's streamer writes: RS, the object, the newline, apart.
        for piece in [&[RS][..], br#"{"time":1.5,"name":"transport:packet_sent","#, br#""data":{}}"#, b"\n", &[RS], br#"{"time":2,"name":"a"}"#, b"\n\x1e{\"time\":3,"] {
            w.write_all(piece).unwrap();
        }
        // Our event between two of quinn's writes goes after the whole record.
        s.lock().unwrap().own_record("connectivity:connection_closed", serde_json::json!({"reason": "x"})).unwrap();
        w.write_all(b"\"name\":\"b\"}\n").unwrap();
        let l = lines(&s);
        let names: Vec<_> = l.iter().map(|v| v["name"].as_str().unwrap().to_string()).collect();
        assert_eq!(names, ["transport:packet_sent", "a", "connectivity:connection_closed", "b"]);
        assert_eq!(l[0]["time"], 1.5);
    }

    #[test]
    fn the_first_record_over_the_limit_says_the_trace_was_cut_and_the_end_still_comes() {
        let s = sink(100);
        let mut w = Records { sink: s.clone(), partial: Vec::new() };
        let record = format!("\x1e{{\"time\":0,\"name\":\"transport:packet_sent\",\"data\":{{\"pad\":\"{}\"}}}}\n", "x".repeat(20));
        for _ in 0..5 {
            w.write_all(record.as_bytes()).unwrap();
        }
        s.lock().unwrap().own_record("connectivity:connection_closed", serde_json::json!({})).unwrap();
        let names: Vec<_> = lines(&s).iter().map(|v| v["name"].as_str().unwrap().to_string()).collect();
        assert_eq!(names, ["transport:packet_sent", "smbq:trace_truncated", "connectivity:connection_closed"]);
        assert_eq!(lines(&s)[1]["data"]["limit_bytes"], 100);
    }

    #[test]
    fn an_endless_line_is_not_held() {
        let s = sink(MAX_BYTES);
        let mut w = Records { sink: s.clone(), partial: Vec::new() };
        w.write_all(&vec![b'x'; MAX_RECORD + 1]).unwrap();
        assert!(w.partial.is_empty());
        w.write_all(b"\x1e{\"name\":\"after\"}\n").unwrap();
        assert_eq!(lines(&s)[0]["name"], "after");
    }

    #[test]
    fn a_trace_file_has_quinns_header_and_our_end_without_a_connection() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("made");
        let (trace, stream) = Trace::create(&dir, Role::Client, "[::1]:443".parse().unwrap()).unwrap();
        let path = trace.path().to_path_buf();
        assert!(path.file_name().unwrap().to_str().unwrap().starts_with("client-"));
        assert!(path.to_str().unwrap().ends_with(".sqlog"));
        drop(stream);
        drop(trace);
        let text = std::fs::read(&path).unwrap();
        let records: Vec<serde_json::Value> = text.split(|&b| b == b'\n').filter(|l| !l.is_empty()).map(|l| serde_json::from_slice(&l[1..]).unwrap()).collect();
        assert_eq!(records[0]["title"], "smbq client", "quinn's header: {}", records[0]);
        assert_eq!(records.last().unwrap()["name"], "connectivity:connection_closed");
    }
}
