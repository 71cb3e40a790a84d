//! TLS session tickets and 0-RTT over QUIC (docs/zero-rtt.md), against the
//! server on its defaults: tickets go only to clients that ask (ALPN
//! token), a resumed connection's early data is accepted, and a share
//! whose connection was lost reconnects in 0-RTT and reclaims its durable
//! open. The replay of a 0-RTT first flight is in tests/e2e/test_zero_rtt.py.

use smbq_client::connect::{ConnectOptions, Transport, Trust};
use smbq_client::share::{access, Share};
use smbq_client::url::SmbUrl;
use smbq_transport::quic::{zero_rtt, QuicOptions};
use smbq_transport::tls;
use smbq_wire::create::disposition;
use std::sync::Arc;
use std::time::Duration;

mod common;
use common::Running;

/// The server on its defaults, QUIC only, one share; user alice.
async fn start() -> Running {
    common::start(&[("alice", "secret")], QuicOptions::default()).await
}

/// A bare QUIC client endpoint trusting `cert`, with early data allowed,
/// a session cache, and `alpn`.
fn endpoint(cert: &rustls::pki_types::CertificateDer<'static>, alpn: &[&[u8]]) -> quinn::Endpoint {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.clone()).unwrap();
    let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(smbq_crypto::tls_provider()))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
    tls.enable_early_data = true;
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
    let mut ep = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    ep.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
    ep
}

/// Connect twice through one endpoint (the first connection lives long
/// enough for tickets to arrive); whether the second could go in 0-RTT,
/// and the ALPN protocol the server selected.
async fn second_in_0rtt(s: &Running, alpn: &[&[u8]]) -> (bool, Option<Vec<u8>>) {
    let ep = endpoint(&s.cert, alpn);
    let conn = ep.connect(s.addr, "localhost").unwrap().await.unwrap();
    let protocol = conn.handshake_data().and_then(|d| d.downcast::<quinn::crypto::rustls::HandshakeData>().ok()).and_then(|d| d.protocol);
    // NewSessionTicket comes in a 1-RTT CRYPTO frame after the handshake.
    tokio::time::sleep(Duration::from_millis(300)).await;
    conn.close(quinn::VarInt::from_u32(0), b"");
    let again = ep.connect(s.addr, "localhost").unwrap();
    let zero_rtt = match again.into_0rtt() {
        Ok((conn, accepted)) => {
            assert!(accepted.await, "the server refused the early data of a fresh ticket");
            conn.close(quinn::VarInt::from_u32(0), b"");
            true
        }
        Err(c) => {
            c.await.unwrap().close(quinn::VarInt::from_u32(0), b"");
            false
        }
    };
    ep.wait_idle().await;
    (zero_rtt, protocol)
}

#[tokio::test]
async fn tickets_go_only_to_clients_that_ask_for_them() {
    let s = start().await;
    // As Samba's and Windows' clients: ALPN "smb" alone, no ticket.
    let (zero_rtt, protocol) = second_in_0rtt(&s, &[b"smb"]).await;
    assert!(!zero_rtt, "a client that did not ask got a session ticket");
    assert_eq!(protocol.as_deref(), Some(&b"smb"[..]));
    // With the token after "smb": tickets, 0-RTT next time, still "smb".
    let (zero_rtt, protocol) = second_in_0rtt(&s, &[b"smb", zero_rtt::ALPN_TICKETS]).await;
    assert!(zero_rtt, "a client that asked got no session ticket");
    assert_eq!(protocol.as_deref(), Some(&b"smb"[..]));
}

#[tokio::test]
async fn a_share_reconnects_in_0rtt_and_reclaims_its_durable_open() {
    let s = start().await;
    let url = SmbUrl::parse(&format!("smb://alice@127.0.0.1:{}/share", s.addr.port())).unwrap();
    let o = ConnectOptions {
        transport: Transport::Quic,
        trust: Trust::Fingerprint(tls::fingerprint_bytes(&s.cert)),
        user: "alice".into(),
        password: "secret".into(),
        ..ConnectOptions::default()
    };
    let mut share = Share::connect(&url, &o).await.unwrap();
    assert_eq!(share.session.client.zero_rtt.accepted(), None, "no ticket yet: a full handshake");
    let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    let (h, durable) = share.create_durable("d.bin", access::READ_WRITE, disposition::OVERWRITE_IF, 0).await.unwrap();
    let durable = durable.expect("a durable handle");
    share.write_at(h.fid, 0, data.clone().into()).await.unwrap();
    // Lost: no CLOSE, no LOGOFF.
    share.session.client.quic.as_ref().unwrap().1.close(quinn::VarInt::from_u32(1), b"lost");
    tokio::time::sleep(Duration::from_millis(100)).await;

    share.reconnect().await.unwrap();
    assert_eq!(share.session.client.zero_rtt.accepted(), Some(true), "the reconnect's NEGOTIATE did not go in accepted 0-RTT");
    let h = share.reclaim("d.bin", durable).await.unwrap();
    assert_eq!(share.read_at(h.fid, 0, data.len() as u32).await.unwrap(), data);

    // And again: the reconnect brought a new ticket (each is single use).
    share.session.client.quic.as_ref().unwrap().1.close(quinn::VarInt::from_u32(1), b"lost");
    share.reconnect().await.unwrap();
    assert_eq!(share.session.client.zero_rtt.accepted(), Some(true));
    share.stat("d.bin").await.unwrap();
}
