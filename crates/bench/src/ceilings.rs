//! The TCP ceilings of BENCHMARKS.md: a bulk transfer on one connection in
//! 1 MiB writes, over raw TCP (`raw-tcp`) and over TCP with rustls' TLS 1.3
//! (`tcp-tls`, AES-128-GCM as SMB's encryption uses); what the thesis
//! measured with iperf. The request protocol is raw quinn's (`raw_server`
//! in main.rs): b'W' + length (the server sinks that many bytes, then
//! answers one byte) or b'R' + length (the server sends that many bytes).

use anyhow::bail;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

const BLOCK: usize = 1 << 20;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    let mut p = rustls::crypto::aws_lc_rs::default_provider();
    p.cipher_suites.retain(|s| s.suite() == rustls::CipherSuite::TLS13_AES_128_GCM_SHA256);
    Arc::new(p)
}

/// rustls reads a record at a time (at most 16 KiB and a header) from
/// what it is given: a buffer under it saves most of those system calls.
fn buffered(s: TcpStream) -> tokio::io::BufStream<TcpStream> {
    tokio::io::BufStream::with_capacity(256 << 10, 256 << 10, s)
}

/// Serves the bulk protocol on `l`, in TLS 1.3 with `id` when given.
pub async fn serve(l: TcpListener, id: Option<(Vec<rustls::pki_types::CertificateDer<'static>>, rustls::pki_types::PrivateKeyDer<'static>)>) -> anyhow::Result<()> {
    let acceptor = match id {
        Some((chain, key)) => {
            let c = rustls::ServerConfig::builder_with_provider(provider())
                .with_protocol_versions(&[&rustls::version::TLS13])?
                .with_no_client_auth()
                .with_single_cert(chain, key)?;
            Some(TlsAcceptor::from(Arc::new(c)))
        }
        None => None,
    };
    loop {
        let (s, _) = l.accept().await?;
        let _ = s.set_nodelay(true);
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let _ = match acceptor {
                Some(a) => match a.accept(buffered(s)).await {
                    Ok(t) => serve_one(t).await,
                    Err(_) => return,
                },
                None => serve_one(s).await,
            };
        });
    }
}

async fn serve_one<S: AsyncRead + AsyncWrite + Unpin>(mut s: S) -> std::io::Result<()> {
    let mut req = [0u8; 9];
    s.read_exact(&mut req).await?;
    let mut len = [0u8; 8];
    len.copy_from_slice(&req[1..]);
    let len = u64::from_le_bytes(len) as usize;
    let mut buf = vec![7u8; BLOCK];
    let mut done = 0;
    if req[0] == b'W' {
        while done < len {
            let n = s.read(&mut buf).await?;
            if n == 0 {
                return Ok(());
            }
            done += n;
        }
        s.write_all(&[1]).await?;
    } else {
        while done < len {
            let n = (len - done).min(BLOCK);
            s.write_all(&buf[..n]).await?;
            done += n;
        }
    }
    s.flush().await?;
    s.shutdown().await
}

/// One transfer of `data` ("write": to the server; "read": from it) to
/// the server at `addr`; its rate in MB/s (10^6 bytes).
pub async fn run(addr: SocketAddr, tls: Option<rustls::pki_types::CertificateDer<'static>>, dir: &str, data: &[u8]) -> anyhow::Result<f64> {
    let s = TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    match tls {
        Some(cert) => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(cert)?;
            let c = rustls::ClientConfig::builder_with_provider(provider()).with_protocol_versions(&[&rustls::version::TLS13])?.with_root_certificates(roots).with_no_client_auth();
            let name = rustls::pki_types::ServerName::try_from("localhost")?;
            let t = TlsConnector::from(Arc::new(c)).connect(name, buffered(s)).await?;
            transfer(t, dir, data).await
        }
        None => transfer(s, dir, data).await,
    }
}

async fn transfer<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, dir: &str, data: &[u8]) -> anyhow::Result<f64> {
    let size = data.len();
    let mut req = vec![if dir == "write" { b'W' } else { b'R' }];
    req.extend_from_slice(&(size as u64).to_le_bytes());
    let t = Instant::now();
    s.write_all(&req).await?;
    s.flush().await?;
    if dir == "write" {
        for chunk in data.chunks(BLOCK) {
            s.write_all(chunk).await?;
        }
        s.flush().await?;
        let mut ack = [0u8; 1];
        s.read_exact(&mut ack).await?;
    } else {
        let mut buf = vec![0u8; BLOCK];
        let mut got = 0;
        while got < size {
            let n = s.read(&mut buf).await?;
            if n == 0 {
                bail!("read ended at {got} of {size}");
            }
            got += n;
        }
    }
    Ok(size as f64 / t.elapsed().as_secs_f64() / 1e6)
}
