//! The whole server engine on arbitrary messages: one connection, each
//! input split into messages at a 4-byte Direct TCP style length prefix,
//! each handed over as a head and chunks.
//! A fatal error is fine; a panic is a bug.
#![no_main]
use libfuzzer_sys::fuzz_target;
use smbq_auth::UserDb;
use smbq_server::{Connection, Server, ServerConfig, ShareConfig, TransportInfo, TransportKind};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

fn server() -> Arc<Server> {
    static S: OnceLock<(Arc<Server>, tempfile::TempDir)> = OnceLock::new();
    S.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut c = ServerConfig::default();
        c.limits.failed_logon_delay_ms = 0;
        c.shares.push(ShareConfig::new("share", dir.path()));
        let mut users = UserDb::new();
        users.add("alice", "secret");
        (Arc::new(Server::new(c, users).expect("server")), dir)
    })
    .0
    .clone()
}

fuzz_target!(|data: &[u8]| {
    let info = TransportInfo { kind: TransportKind::Tcp, peer: None, local: None, secure: false, streams: 1 };
    let mut conn = Connection::new(server(), info, Instant::now());
    let mut rest = data;
    while rest.len() >= 4 {
        let len = (u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize).min(rest.len() - 4);
        let mut msg = rest[4..4 + len].to_vec();
        rest = &rest[4 + len..];
        // Odd-length messages come as a transport that keeps the chunks it
        // received hands them on: a head and the rest in pieces.
        let head = if len % 2 == 1 { msg.len().min(120) } else { msg.len() };
        let (head, tail) = msg.split_at_mut(head);
        let tail: Vec<bytes::Bytes> = tail.chunks(61).map(bytes::Bytes::copy_from_slice).collect();
        if conn.handle_frame(Instant::now(), head, &tail).is_err() {
            break;
        }
        while conn.poll_transmit().is_some() {}
    }
});
