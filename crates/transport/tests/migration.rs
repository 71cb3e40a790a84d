//! Connection migration to a new client IP address (RFC 9000 section 9),
//! on loopback, where 127.0.0.2 is a second address of the host: a client
//! reading a file moves its UDP socket from 127.0.0.1 to 127.0.0.2 in the
//! middle. Unlike a new port alone (tests/quic.rs, which quinn takes for
//! a NAT rebinding and keeps the path's congestion state for), a new IP
//! makes quinn's server start the path afresh (congestion window, RTT,
//! MTU) and send at most three times what it received there until the
//! client answers its PATH_CHALLENGE. The port has four endpoints, so
//! the moved client's datagrams reach the one that owns the connection
//! only because they are steered by connection ID.

use smbq_client::{Client, QuicTarget};

mod common;
use smbq_transport::quic::QuicOptions;
use smbq_wire::create::disposition;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_continues_after_the_client_moves_to_a_new_ip() {
    let s = common::start(&[("alice", "secret")], QuicOptions { endpoints: 4, ..QuicOptions::default() }).await;
    let size = 48 << 20;
    let data: Vec<u8> = (0..size).map(|i| (i % 251) as u8 ^ (i >> 16) as u8).collect();
    std::fs::write(s.share.join("big.bin"), &data).unwrap();
    let (addr, eps) = (s.addr, &s.eps);

    let mut roots = rustls::RootCertStore::empty();
    roots.add(s.cert.clone()).unwrap();
    let mut c = Client::connect_quic(QuicTarget::new(addr, "localhost", roots)).await.unwrap();
    c.negotiate(true).await.unwrap();
    c.login("alice", "secret").await.unwrap();
    c.tree_connect("\\\\localhost\\share").await.unwrap();
    let (fid, _) = c.create("big.bin", disposition::OPEN, 0).await.unwrap();
    let (ep, conn) = c.quic.clone().unwrap();
    let before = ep.local_addr().unwrap();

    let mut back = vec![0u8; size];
    let mut got = 0;
    let mut moved = None;
    c.read_pipelined(fid, size as u64, 1 << 20, 4, |off, piece| {
        back[off as usize..off as usize + piece.len()].copy_from_slice(piece);
        got += piece.len();
        if moved.is_none() && got >= size / 3 {
            let sock = std::net::UdpSocket::bind("127.0.0.2:0").unwrap();
            ep.rebind(sock).unwrap();
            moved = Some(got);
        }
    })
    .await
    .unwrap();
    assert!(moved.is_some_and(|at| at < size), "moved in the middle");
    assert_eq!(got, size);
    assert!(back == data, "read back differs");
    let after = ep.local_addr().unwrap();
    // Before: the client's wildcard socket, whose datagrams to 127.0.0.1
    // leave from 127.0.0.1; after: 127.0.0.2.
    assert!(before.ip().is_unspecified(), "{before}");
    assert_eq!(after.ip().to_string(), "127.0.0.2");

    // The same session and open, on the same connection, after the move.
    assert!(c.read(fid, 1 << 20, 4096).await.unwrap() == data[1 << 20..(1 << 20) + 4096]);
    c.close(fid).await.unwrap();
    assert_eq!(eps.iter().map(|e| e.open_connections()).sum::<usize>(), 1, "one connection all along");
    // The server challenged the new path and the client answered from it.
    let st = conn.stats();
    assert!(st.frame_rx.path_challenge > 0 && st.frame_tx.path_response > 0, "path validation: {:?}", st.frame_rx);
}
