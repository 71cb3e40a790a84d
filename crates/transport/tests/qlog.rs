//! qlog traces on request (`smbq_quictrace::qlog`): a QUIC transfer with
//! both ends tracing into a directory leaves one JSON-SEQ file per end,
//! each with quinn's header, the connection's start, quinn-proto's
//! packet and recovery events, and the end with the final figures.

mod common;

use smbq_client::{Client, QuicTarget};
use smbq_transport::quic::{Qlog, QuicOptions};
use smbq_wire::create::disposition;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Every record of a JSON-SEQ file: each line an RS byte and one object.
fn records(path: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read(path).unwrap();
    text.split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| {
            assert_eq!(l.first(), Some(&0x1e), "{}: a record without its RS", path.display());
            serde_json::from_slice(&l[1..]).unwrap_or_else(|e| panic!("{}: {e}: {}", path.display(), String::from_utf8_lossy(l)))
        })
        .collect()
}

fn named<'a>(r: &'a [serde_json::Value], name: &str) -> Vec<&'a serde_json::Value> {
    r.iter().filter(|e| e["name"] == name).collect()
}

fn trace_of(dir: &Path, role: &str) -> PathBuf {
    let files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with(role)).collect();
    assert_eq!(files.len(), 1, "one {role} trace in {}: {files:?}", dir.display());
    files.into_iter().next().unwrap()
}

/// What both ends' traces have.
fn check(r: &[serde_json::Value], role: &str) {
    assert_eq!(r[0]["qlog_format"], "JSON-SEQ", "{role}: quinn's header first: {}", r[0]);
    let started = named(r, "connectivity:connection_started");
    assert_eq!(started.len(), 1, "{role}");
    assert_eq!(started[0]["data"]["alpn"], "smb", "{role}: {}", started[0]);
    assert_eq!(started[0]["data"]["role"], role);
    // 64 KiB datagrams on loopback: 4 MiB are about 70 packets, their ACKs fewer.
    let sent = named(r, "transport:packet_sent").len();
    assert!(sent > 10, "{role}: quinn's packet events: {sent}");
    assert!(!named(r, "transport:packet_received").is_empty(), "{role}");
    let cwnd: Vec<u64> = named(r, "recovery:metrics_updated").iter().filter_map(|e| e["data"]["congestion_window"].as_u64()).collect();
    assert!(cwnd.iter().any(|&c| c > 0), "{role}: a metrics sample with a window");
    assert!(named(r, "recovery:metrics_updated").iter().any(|e| e["data"]["smoothed_rtt"].as_f64().is_some()), "{role}: an RTT sample");
    let closed = named(r, "connectivity:connection_closed");
    assert_eq!(closed.len(), 1, "{role}");
    let f = &closed[0]["data"]["figures"];
    assert!(f["cwnd_bytes"].as_u64().unwrap() > 0, "{role}: {f}");
    assert!(f["packets_sent"].as_u64().unwrap() > 10, "{role}: {f}");
    assert!(f["srtt_ms"].as_f64().unwrap() > 0.0, "{role}: {f}");
    assert!(f["mtu"].as_u64().unwrap() >= 1200, "{role}: {f}");
    assert!(closed[0]["data"]["udp_tx"]["datagrams"].as_u64().unwrap() > 0, "{role}");
    // Times are milliseconds since the trace began, in order for ours.
    let t = |e: &serde_json::Value| e["time"].as_f64().unwrap();
    assert!(t(started[0]) <= t(closed[0]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_with_both_ends_tracing_leaves_a_qlog_file_each() {
    let dir = tempfile::tempdir().unwrap();
    let (server_dir, client_dir) = (dir.path().join("server"), dir.path().join("client"));
    let s = common::start(&[("alice", "secret")], QuicOptions { qlog: Some(Qlog::new(server_dir.clone())), ..QuicOptions::default() }).await;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(s.cert.clone()).unwrap();
    let mut target = QuicTarget::new(s.addr, "localhost", roots);
    target.qlog_dir = Some(client_dir.clone());
    let mut c = Client::connect_quic(target).await.unwrap();
    assert!(c.qlog_path().unwrap().starts_with(&client_dir));
    c.negotiate(true).await.unwrap();
    c.login("alice", "secret").await.unwrap();
    c.tree_connect("\\\\localhost\\share").await.unwrap();
    let data = bytes::Bytes::from(vec![7u8; 4 << 20]);
    let (fid, _) = c.create("traced.bin", disposition::OVERWRITE_IF, 0).await.unwrap();
    c.write_pipelined(fid, &data, 1 << 20, 4).await.unwrap();
    let back = c.read(fid, 0, 1 << 20).await.unwrap();
    assert_eq!(back.len(), 1 << 20);
    c.close(fid).await.unwrap();
    let figures = c.quic_figures().unwrap();
    assert!(figures.cwnd > 0 && figures.sent_packets > 0, "{figures:?}");
    // Dropping the client writes its trace's end and closes the
    // connection, which ends the server's.
    drop(c);
    let client = records(&trace_of(&client_dir, "client"));
    check(&client, "client");
    let server_trace = trace_of(&server_dir, "server");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let server = loop {
        let r = records(&server_trace);
        if !named(&r, "connectivity:connection_closed").is_empty() {
            break r;
        }
        assert!(tokio::time::Instant::now() < deadline, "the server's trace has no end");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    check(&server, "server");
    // The server received the 4 MiB the client sent.
    let received = named(&server, "connectivity:connection_closed")[0]["data"]["udp_rx"]["bytes"].as_u64().unwrap();
    assert!(received > 4 << 20, "{received}");
    let started = &named(&server, "connectivity:connection_started")[0]["data"];
    assert_eq!(started["dst_port"], s.addr.port(), "{started}");
    assert_eq!(started["dst_ip"], "127.0.0.1");
}
