//! The Kerberos KDC proxy (MS-KKDCP) of `smbq serve` (`[kerberos]
//! kdc_proxy = true`): `POST /KdcProxy` over HTTPS, on TCP at the QUIC
//! listener's address and port, with the QUIC certificate, so a client on
//! the internet that reaches smbq over QUIC also reaches the KDC.
//!
//! A request ([`smbq_auth::kkdcp`]) is decoded to its realm; one that is
//! malformed (400), too large (413), or not for the configured realm (403)
//! is refused with a log line and forwarded nowhere. Otherwise its Kerberos
//! message goes to the configured KDCs over TCP (RFC 4120 7.2.2), each
//! tried in order within [`KDC_TIMEOUT`] and all within
//! [`FORWARD_TIMEOUT`], and the first reply (at most
//! [`kkdcp::MAX_REPLY`] bytes, an AS-REP, TGS-REP or KRB-ERROR) comes
//! back in a KDC-PROXY-MESSAGE (200); no reply: 503.
//!
//! The port is shared with ACME's TLS-ALPN-01 responder by ALPN: a client
//! offering `acme-tls/1` gets the challenge certificate
//! ([`acme::share_tls_alpn_port`]), any other the server certificate, TLS
//! 1.2 or 1.3 with ALPN `http/1.1` (MIT krb5 and Windows clients speak
//! HTTP/1.x).

use crate::acme;
use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use smbq_auth::kkdcp::{self, KkdcpError};
use smbq_transport::tls::Certificates;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, info, warn};

/// The URL path (MS-KKDCP servers on Windows answer at `/KdcProxy`).
pub const PATH: &str = "/KdcProxy";
/// The media type of requests and replies.
const MEDIA_TYPE: &str = "application/kerberos";
/// At most this many connections at once; more are closed at accept.
const MAX_CONNECTIONS: usize = 256;
/// A TLS handshake must finish within this.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// A request's head must arrive within this; a connection lasts at most
/// [`CONNECTION_TIMEOUT`].
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(30);
/// One KDC's connect, send and reply.
pub const KDC_TIMEOUT: Duration = Duration::from_secs(3);
/// All KDCs of one request.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(8);
/// An oversized body up to this size is read (and dropped) before the 413.
const DRAIN_MAX: usize = 1024 * 1024;
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);
/// The KDC port when an entry of `kdc` names none (RFC 4120 7.2.3.1).
const KDC_PORT: u16 = 88;

/// What the proxy forwards, and where.
#[derive(Clone, Debug)]
pub struct KdcProxyConfig {
    /// The one realm relayed (compared ignoring ASCII case, MS-KKDCP 2.2.2).
    pub realm: String,
    /// KDCs, `host[:port]`, tried in order.
    pub kdcs: Vec<String>,
}

impl KdcProxyConfig {
    pub fn check(&self) -> anyhow::Result<()> {
        if self.realm.is_empty() {
            anyhow::bail!("[kerberos] kdc_proxy needs the realm");
        }
        if self.kdcs.is_empty() {
            anyhow::bail!("[kerberos] kdc_proxy needs at least one kdc (host:port)");
        }
        Ok(())
    }
}

/// The TLS config of the proxy: the server certificate as `certs` holds
/// it at each handshake, TLS 1.2 and 1.3, ALPN `http/1.1`.
fn https_config(certs: Arc<Certificates>) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_cert_resolver(certs);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The name for the proxy's URL: the first ACME domain, else the
/// certificate's first DNS name other than `localhost`, else `localhost`.
pub fn url_name(acme_domains: &[String], certs: &Certificates) -> String {
    if let Some(d) = acme_domains.first() {
        return d.clone();
    }
    let mut names = Vec::new();
    if let Some(leaf) = certs.leaf() {
        if let Ok((_, cert)) = x509_parser::parse_x509_certificate(&leaf) {
            if let Ok(Some(san)) = cert.subject_alternative_name() {
                for n in &san.value.general_names {
                    if let x509_parser::extensions::GeneralName::DNSName(d) = n {
                        names.push(d.to_string());
                    }
                }
            }
        }
    }
    names.into_iter().find(|n| n != "localhost").unwrap_or_else(|| "localhost".into())
}

/// A bound KDC proxy, ready to [`serve`](KdcProxy::serve).
pub struct KdcProxy {
    listener: TcpListener,
    https: Arc<rustls::ServerConfig>,
    acme_tls: Arc<rustls::ServerConfig>,
    config: Arc<KdcProxyConfig>,
}

impl KdcProxy {
    /// Binds TCP `addr` and takes over ACME's TLS-ALPN-01 answers on its port.
    pub async fn bind(addr: SocketAddr, certs: Arc<Certificates>, config: KdcProxyConfig) -> anyhow::Result<KdcProxy> {
        config.check()?;
        let listener = TcpListener::bind(addr).await.with_context(|| format!("binding the KDC proxy on tcp {addr}"))?;
        let port = listener.local_addr()?.port();
        let https = https_config(certs)?;
        let acme_tls = acme::alpn_config(acme::share_tls_alpn_port(port))?;
        Ok(KdcProxy { listener, https, acme_tls, config: Arc::new(config) })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `stop` completes.
    pub async fn serve(self, stop: impl Future<Output = ()>) {
        let KdcProxy { listener, https, acme_tls, config } = self;
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        tokio::pin!(stop);
        loop {
            let (stream, peer) = tokio::select! {
                _ = &mut stop => return,
                r = listener.accept() => match r {
                    Ok(x) => x,
                    Err(e) => {
                        // Out of descriptors, say: do not spin.
                        warn!("kdc proxy: accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
                debug!("kdc proxy: {MAX_CONNECTIONS} connections open: closing the one from {peer}");
                continue;
            };
            let (https, acme_tls, config) = (Arc::clone(&https), Arc::clone(&acme_tls), Arc::clone(&config));
            tokio::spawn(async move {
                let _slot = slot;
                let _ = tokio::time::timeout(CONNECTION_TIMEOUT, connection(stream, peer, https, acme_tls, config)).await;
            });
        }
    }
}

/// One TCP connection: TLS (the ACME answer, or HTTPS), then HTTP/1.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    https: Arc<rustls::ServerConfig>,
    acme_tls: Arc<rustls::ServerConfig>,
    config: Arc<KdcProxyConfig>,
) {
    let acceptor = tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), stream);
    let start = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return debug!("kdc proxy: no TLS ClientHello from {peer}: {e}"),
        Err(_) => return,
    };
    let hello = start.client_hello();
    if hello.alpn().is_some_and(|mut a| a.any(|p| p == acme::ACME_TLS_ALPN)) {
        // The validator only needs the handshake; then it closes.
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, start.into_stream(acme_tls)).await {
            Ok(Ok(_)) => info!("ACME: answered a TLS-ALPN-01 validation from {peer}"),
            Ok(Err(e)) => info!("ACME: TLS-ALPN-01 handshake from {peer} failed: {e}"),
            Err(_) => {}
        }
        return;
    }
    let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, start.into_stream(https)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return debug!("kdc proxy: TLS handshake from {peer} failed: {e}"),
        Err(_) => return,
    };
    let service = hyper::service::service_fn(move |req| {
        let config = Arc::clone(&config);
        async move { Ok::<_, std::convert::Infallible>(handle(req, peer, &config).await) }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_buf_size(16 * 1024)
        .serve_connection(TokioIo::new(tls), service)
        .await;
    if let Err(e) = served {
        debug!("kdc proxy: HTTP connection from {peer} ended: {e}");
    }
}

fn response(status: StatusCode, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut rsp = Response::new(Full::new(Bytes::from(body)));
    *rsp.status_mut() = status;
    if status == StatusCode::OK {
        rsp.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(MEDIA_TYPE));
    }
    rsp
}

fn refuse(peer: SocketAddr, status: StatusCode, why: &str) -> Response<Full<Bytes>> {
    info!("kdc proxy: refused a request from {peer} (HTTP {}): {why}", status.as_u16());
    let mut rsp = response(status, format!("{why}\n").into_bytes());
    rsp.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    rsp
}

enum Body {
    TooLarge,
    Failed(hyper::Error),
}

/// The request body, at most [`kkdcp::MAX_REQUEST`] bytes. A longer one is
/// drained (up to [`DRAIN_MAX`]) so the client, still writing, reads the
/// 413 rather than a reset.
async fn read_body(mut body: Incoming) -> Result<Vec<u8>, Body> {
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(Body::Failed)?.into_data() else { continue };
        if out.len() + data.len() > kkdcp::MAX_REQUEST {
            drain(body, out.len() + data.len()).await;
            return Err(Body::TooLarge);
        }
        out.extend_from_slice(&data);
    }
    Ok(out)
}

/// Reads and drops the rest of a refused body until its end, [`DRAIN_MAX`]
/// bytes in all (`seen` so far) or [`DRAIN_TIMEOUT`], whichever comes first.
async fn drain(mut body: Incoming, mut seen: usize) {
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, async {
        while seen <= DRAIN_MAX {
            match body.frame().await {
                Some(Ok(frame)) => seen += frame.data_ref().map_or(0, |d| d.len()),
                _ => return,
            }
        }
    })
    .await;
}

/// One HTTP request.
async fn handle(req: Request<Incoming>, peer: SocketAddr, config: &KdcProxyConfig) -> Response<Full<Bytes>> {
    if !req.uri().path().eq_ignore_ascii_case(PATH) {
        return refuse(peer, StatusCode::NOT_FOUND, &format!("no such path {:?}", req.uri().path()));
    }
    if req.method() != Method::POST {
        let mut rsp = refuse(peer, StatusCode::METHOD_NOT_ALLOWED, &format!("method {} (only POST)", req.method()));
        rsp.headers_mut().insert(ALLOW, HeaderValue::from_static("POST"));
        return rsp;
    }
    if let Some(ct) = req.headers().get(CONTENT_TYPE) {
        let media = ct.to_str().unwrap_or("").split(';').next().unwrap_or("").trim();
        if !media.eq_ignore_ascii_case(MEDIA_TYPE) {
            return refuse(peer, StatusCode::UNSUPPORTED_MEDIA_TYPE, &format!("Content-Type {ct:?}, not {MEDIA_TYPE}"));
        }
    }
    let declared = req.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if let Some(n) = declared.filter(|&n| n > kkdcp::MAX_REQUEST as u64) {
        if n <= DRAIN_MAX as u64 {
            drain(req.into_body(), 0).await;
        }
        return refuse(peer, StatusCode::PAYLOAD_TOO_LARGE, &format!("body of {n} bytes, more than {}", kkdcp::MAX_REQUEST));
    }
    let body = match read_body(req.into_body()).await {
        Ok(b) => b,
        Err(Body::TooLarge) => {
            return refuse(peer, StatusCode::PAYLOAD_TOO_LARGE, &format!("body of more than {} bytes", kkdcp::MAX_REQUEST));
        }
        Err(Body::Failed(e)) => return refuse(peer, StatusCode::BAD_REQUEST, &format!("reading the body: {e}")),
    };
    let request = match kkdcp::decode_request(&body) {
        Ok(r) => r,
        Err(e @ KkdcpError::TooLarge { .. }) => return refuse(peer, StatusCode::PAYLOAD_TOO_LARGE, &e.to_string()),
        Err(e) => return refuse(peer, StatusCode::BAD_REQUEST, &e.to_string()),
    };
    if !request.is_for(&config.realm) {
        let why = format!(
            "realm {:?} (target domain {:?}) is not {:?}",
            request.realm,
            request.message.target_domain.unwrap_or("-"),
            config.realm
        );
        return refuse(peer, StatusCode::FORBIDDEN, &why);
    }
    match forward(&request.framed(), &config.kdcs).await {
        Ok(reply) => {
            debug!("kdc proxy: {:?} for {peer} in realm {}: {} byte reply", request.kind, request.realm, reply.len());
            response(StatusCode::OK, kkdcp::encode_reply(&reply))
        }
        Err(why) => {
            warn!("kdc proxy: no KDC answered the {:?} of {peer}: {why}", request.kind);
            let mut rsp = response(StatusCode::SERVICE_UNAVAILABLE, b"no KDC answered\n".to_vec());
            rsp.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
            rsp
        }
    }
}

/// Sends `framed` (length-prefixed) to each KDC in turn until one answers;
/// the reply without its prefix, or why none did.
pub async fn forward(framed: &[u8], kdcs: &[String]) -> Result<Vec<u8>, String> {
    let deadline = tokio::time::Instant::now() + FORWARD_TIMEOUT;
    let mut errors = Vec::new();
    for kdc in kdcs {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            errors.push(format!("{kdc}: not tried (out of time)"));
            continue;
        }
        match tokio::time::timeout(KDC_TIMEOUT.min(left), exchange(kdc, framed)).await {
            Ok(Ok(reply)) => return Ok(reply),
            Ok(Err(e)) => errors.push(format!("{kdc}: {e:#}")),
            Err(_) => errors.push(format!("{kdc}: no reply within {} s", KDC_TIMEOUT.min(left).as_secs_f32())),
        }
    }
    Err(errors.join("; "))
}

/// `host[:port]` with the KDC port when none is given (an IPv6 address
/// with a port is written `[addr]:port`).
fn kdc_address(kdc: &str) -> String {
    if let Ok(ip) = kdc.parse::<std::net::IpAddr>() {
        return SocketAddr::new(ip, KDC_PORT).to_string();
    }
    if kdc.contains(':') {
        kdc.to_string()
    } else {
        format!("{kdc}:{KDC_PORT}")
    }
}

/// One request to one KDC over TCP (RFC 4120 7.2.2).
async fn exchange(kdc: &str, framed: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut stream = TcpStream::connect(kdc_address(kdc)).await.context("connecting")?;
    stream.write_all(framed).await.context("sending")?;
    let mut prefix = [0u8; 4];
    stream.read_exact(&mut prefix).await.context("reading the reply length")?;
    let len = kkdcp::reply_len(prefix)?;
    let mut reply = vec![0u8; len];
    stream.read_exact(&mut reply).await.context("reading the reply")?;
    kkdcp::check_reply(&reply)?;
    Ok(reply)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::{DigitallySignedStruct, SignatureScheme};
    use smbq_client::connect::{verifier, Trust};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// `kinit alice` of MIT krb5 1.20 in realm SMBQ.TEST (as in smbq_auth::kkdcp's tests).
    const MIT_AS_REQ: &str = concat!(
        "3081caa081ba0481b7000000b36a81b03081ada103020105a20302010aa31a3018300aa10402020096a2020400300aa1040202",
        "0095a2020400a48184308181a00703050040000010a1123010a003020101a10930071b05616c696365a20b1b09534d42512e54",
        "455354a31e301ca003020102a11530131b066b72627467741b09534d42512e54455354a511180f32303236313132393130303231",
        "375aa70602040a1bcceaa81a301802011202011102011402011302011002011702011902011aa10b1b09534d42512e54455354",
    );
    /// An empty KRB-ERROR, length-prefixed: what the fake KDC answers.
    const KDC_REPLY: [u8; 6] = [0, 0, 0, 2, 0x7e, 0];

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex")).collect()
    }

    /// A KDC on loopback that counts connections and answers [`KDC_REPLY`].
    async fn fake_kdc() -> (String, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let count = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&count);
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                seen.fetch_add(1, Ordering::SeqCst);
                let mut prefix = [0u8; 4];
                if s.read_exact(&mut prefix).await.is_ok() {
                    let mut msg = vec![0u8; u32::from_be_bytes(prefix) as usize];
                    if s.read_exact(&mut msg).await.is_ok() {
                        let _ = s.write_all(&KDC_REPLY).await;
                    }
                }
            }
        });
        (addr, count)
    }

    struct Proxy {
        addr: SocketAddr,
        cert: std::path::PathBuf,
        _dir: tempfile::TempDir,
    }

    async fn start(kdcs: Vec<String>) -> Proxy {
        let dir = tempfile::tempdir().expect("tempdir");
        let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        let id = smbq_transport::tls::generate(&cert, &key, &["localhost".into()]).expect("certificate");
        let certs = Certificates::new(&id).expect("certificates");
        let config = KdcProxyConfig { realm: "smbq.test".into(), kdcs };
        let proxy = KdcProxy::bind("127.0.0.1:0".parse().expect("addr"), certs, config).await.expect("bind");
        let addr = proxy.local_addr().expect("addr");
        tokio::spawn(proxy.serve(std::future::pending()));
        Proxy { addr, cert, _dir: dir }
    }

    /// Takes any certificate and signature: the TLS-ALPN-01 certificate's
    /// critical acmeIdentifier extension is one webpki refuses to parse.
    #[derive(Debug)]
    struct AcceptAll;

    impl ServerCertVerifier for AcceptAll {
        fn verify_server_cert(
            &self,
            _: &CertificateDer<'_>,
            _: &[CertificateDer<'_>],
            _: &ServerName<'_>,
            _: &[u8],
            _: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            Ok(ServerCertVerified::assertion())
        }

        fn verify_tls12_signature(
            &self,
            _: &[u8],
            _: &CertificateDer<'_>,
            _: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            Ok(HandshakeSignatureValid::assertion())
        }

        fn verify_tls13_signature(
            &self,
            _: &[u8],
            _: &CertificateDer<'_>,
            _: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            Ok(HandshakeSignatureValid::assertion())
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            rustls::crypto::aws_lc_rs::default_provider().signature_verification_algorithms.supported_schemes()
        }
    }

    /// A TLS connection offering `alpn`, trusting `trust` (None: anything).
    async fn connect(
        addr: SocketAddr,
        trust: Option<&Trust>,
        name: &str,
        alpn: &[u8],
    ) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .dangerous()
            .with_custom_certificate_verifier(match trust {
                Some(t) => verifier(t).expect("verifier"),
                None => Arc::new(AcceptAll),
            })
            .with_no_client_auth();
        config.alpn_protocols = vec![alpn.to_vec()];
        let tcp = TcpStream::connect(addr).await?;
        let name = ServerName::try_from(name.to_string()).expect("name");
        tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await
    }

    /// POSTs `body` as MIT does (HTTP/1.0); the status and body of the answer.
    async fn post(p: &Proxy, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
        let mut tls = connect(p.addr, Some(&Trust::CaFile(p.cert.clone())), "localhost", b"http/1.1").await.expect("tls");
        let head = format!(
            "POST {path} HTTP/1.0\r\nHost: localhost\r\nContent-type: application/kerberos\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        tls.write_all(&[head.as_bytes(), body].concat()).await.expect("write");
        let mut rsp = Vec::new();
        let _ = tls.read_to_end(&mut rsp).await;
        let end = rsp.windows(4).position(|w| w == b"\r\n\r\n").expect("a response head");
        let status = std::str::from_utf8(&rsp[9..12]).expect("status").parse().expect("status code");
        (status, rsp[end + 4..].to_vec())
    }

    #[tokio::test]
    async fn forwards_our_realm_only() {
        let (kdc, count) = fake_kdc().await;
        let p = start(vec![kdc]).await;
        let good = hex(MIT_AS_REQ);
        let (status, body) = post(&p, PATH, &good).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        assert_eq!(body, kkdcp::encode_reply(&KDC_REPLY[4..]));
        assert_eq!(count.load(Ordering::SeqCst), 1);

        let other: Vec<u8> = hex(&MIT_AS_REQ.replace("534d42512e54455354", "4556494c2e54455354"));
        assert!(other.len() == good.len());
        let mut truncated = good.clone();
        truncated.pop();
        for (body, want) in [(other, 403), (truncated, 400), (vec![0x30; kkdcp::MAX_REQUEST + 1], 413)] {
            assert_eq!(post(&p, PATH, &body).await.0, want);
        }
        assert_eq!(post(&p, "/elsewhere", &good).await.0, 404);
        assert_eq!(count.load(Ordering::SeqCst), 1, "a refused request reached the KDC");
    }

    #[tokio::test]
    async fn no_kdc_is_503() {
        // A port nobody listens on: refused at once.
        let closed = TcpListener::bind("127.0.0.1:0").await.expect("bind").local_addr().expect("addr").to_string();
        let p = start(vec![closed]).await;
        assert_eq!(post(&p, PATH, &hex(MIT_AS_REQ)).await.0, 503);
    }

    #[tokio::test]
    async fn acme_tls_alpn_01_shares_the_port() {
        let p = start(vec!["127.0.0.1:9".into()]).await;
        let answers = acme::shared_tls_port(p.addr.port()).expect("the proxy took the port's ACME answers");
        let challenge = acme::alpn_certificate("smbq.example", &[7u8; 32]).expect("challenge certificate");
        let challenge_leaf = challenge.cert.first().cloned().expect("leaf");
        answers.lock().expect("lock").insert("smbq.example".into(), Arc::new(challenge));
        let leaf = |tls: &tokio_rustls::client::TlsStream<TcpStream>| -> Option<CertificateDer<'static>> {
            tls.get_ref().1.peer_certificates().and_then(|c| c.first()).map(|c| c.clone().into_owned())
        };

        // A validator offering acme-tls/1 gets the challenge certificate.
        let tls = connect(p.addr, None, "smbq.example", acme::ACME_TLS_ALPN).await.expect("ACME handshake");
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(acme::ACME_TLS_ALPN));
        assert_eq!(leaf(&tls), Some(challenge_leaf.clone()));
        // Anyone else gets the server's, for that name too.
        let tls = connect(p.addr, None, "smbq.example", b"http/1.1").await.expect("HTTPS handshake");
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
        assert_ne!(leaf(&tls), Some(challenge_leaf));
        // No answer for a name: no handshake.
        assert!(connect(p.addr, None, "other.example", acme::ACME_TLS_ALPN).await.is_err());
    }

    #[test]
    fn kdc_addresses_default_to_port_88() {
        assert_eq!(kdc_address("kdc.example"), "kdc.example:88");
        assert_eq!(kdc_address("kdc.example:750"), "kdc.example:750");
        assert_eq!(kdc_address("127.0.0.1"), "127.0.0.1:88");
        assert_eq!(kdc_address("::1"), "[::1]:88");
        assert_eq!(kdc_address("[::1]:8888"), "[::1]:8888");
    }
}
