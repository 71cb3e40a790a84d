//! A durable open across a lost QUIC connection, reconnected in 0-RTT
//! (docs/zero-rtt.md; tests/e2e/test_zero_rtt.py runs it):
//!
//! 1. connect to the share over QUIC (asking for TLS session tickets),
//!    open `--name` durably (DH2Q, MS-SMB2 3.2.4.3.5) and write to it;
//! 2. lose the connection: close it without CLOSE or LOGOFF, so the
//!    server keeps the open for a reconnect (MS-SMB2 3.3.7.1);
//! 3. reconnect ([`Share::reconnect`]: NEGOTIATE in 0-RTT with the ticket
//!    of step 1; with `--fresh`, a new endpoint and TLS cache, so a full
//!    1-RTT handshake), reclaim the open (DH2C) and read the data back.
//!
//! Prints one JSON line: `zero_rtt` (true: accepted, false: refused,
//! null: not tried), `reconnect_ms` (from the start of the reconnect to
//! the last byte read through the reclaimed handle; `tree_connected_ms`
//! and `reclaimed_ms` on the way), `connect_ms` (step 1's connection),
//! `bytes`. Exits non-zero if the data differs.
//!
//! ```text
//! SMBQ_PASSWORD=secret cargo run --release -p smbq-client --example durable_reconnect -- \
//!     smb://alice@127.0.0.1:8443/share --fingerprint <sha256 hex> [--fresh] [--name f.bin] [--size 65536]
//! ```

use smbq_client::connect::{ConnectOptions, Transport, Trust};
use smbq_client::share::{access, Share};
use smbq_client::url::SmbUrl;
use smbq_wire::create::disposition;
use std::time::{Duration, Instant};

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("durable_reconnect: {e}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (mut url, mut fingerprint, mut fresh, mut name, mut size) = (None, None, false, "durable.bin".to_string(), 65536usize);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--fingerprint" => fingerprint = args.next(),
            "--fresh" => fresh = true,
            "--name" => name = args.next().ok_or("--name needs a value")?,
            "--size" => size = args.next().ok_or("--size needs a value")?.parse()?,
            _ if url.is_none() => url = Some(SmbUrl::parse(&a)?),
            _ => return Err(format!("unexpected argument {a}").into()),
        }
    }
    let url = url.ok_or("usage: durable_reconnect smb://user@host:port/share --fingerprint HEX [--fresh] [--name NAME] [--size BYTES]")?;
    let fp = smbq_crypto::tls::parse_fingerprint(&fingerprint.ok_or("--fingerprint is required")?).ok_or("bad --fingerprint")?;
    let o = ConnectOptions {
        transport: Transport::Quic,
        trust: Trust::Fingerprint(fp),
        user: url.user.clone().ok_or("no user in the URL")?,
        password: std::env::var("SMBQ_PASSWORD").unwrap_or_default(),
        timeout: Duration::from_secs(10),
        ..ConnectOptions::default()
    };
    let t = Instant::now();
    let mut share = Share::connect(&url, &o).await?;
    let connect_ms = t.elapsed().as_secs_f64() * 1e3;
    let data: Vec<u8> = (0..size).map(|_| rand::random::<u8>()).collect();
    let (h, durable) = share.create_durable(&name, access::READ_WRITE, disposition::OVERWRITE_IF, 0).await?;
    let durable = durable.ok_or("the server granted no durable handle")?;
    share.write_at(h.fid, 0, data.clone().into()).await?;

    // Lost: the QUIC connection closes under the SMB session.
    if let Some((_, conn)) = &share.session.client.quic {
        conn.close(quinn::VarInt::from_u32(1), b"lost");
    }
    if fresh {
        share.options.resumption = Some(Default::default());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;

    let t = Instant::now();
    share.reconnect().await?;
    let logged_on_ms = t.elapsed().as_secs_f64() * 1e3;
    let h = share.reclaim(&name, durable).await?;
    let reclaimed_ms = t.elapsed().as_secs_f64() * 1e3;
    let back = share.read_at(h.fid, 0, size as u32).await?;
    let reconnect_ms = t.elapsed().as_secs_f64() * 1e3;
    let zero_rtt = share.session.client.zero_rtt.accepted();
    if back != data {
        return Err(format!("read {} bytes back through the reclaimed handle, not the {} written", back.len(), data.len()).into());
    }
    share.close(h.fid).await?;
    if let Some((ep, conn)) = &share.session.client.quic {
        conn.close(quinn::VarInt::from_u32(0), b"done");
        let _ = tokio::time::timeout(Duration::from_secs(2), ep.wait_idle()).await;
    }
    let z = match zero_rtt {
        Some(b) => b.to_string(),
        None => "null".into(),
    };
    println!(
        "{{\"zero_rtt\": {z}, \"reconnect_ms\": {reconnect_ms:.3}, \"tree_connected_ms\": {logged_on_ms:.3}, \"reclaimed_ms\": {reclaimed_ms:.3}, \"connect_ms\": {connect_ms:.3}, \"bytes\": {}}}",
        back.len()
    );
    Ok(())
}
