//! Reaching a server as a user would: by name and port, over QUIC, TCP or
//! whichever answers first (QUIC on 443 tried briefly, then TCP on 445),
//! with the server's certificate checked against the system's roots, a CA
//! file, or a pinned SHA-256 fingerprint; then NEGOTIATE and an NTLMv2 or
//! Kerberos logon through SPNEGO (MS-SMB2 3.2.4.2, 3.2.5.2, 3.2.5.3).

use crate::{Client, ClientError, QuicTarget};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Quic,
    Tcp,
    /// QUIC first with [`ConnectOptions::quic_timeout`], then TCP.
    Auto,
}

impl Transport {
    pub fn name(self) -> &'static str {
        match self {
            Transport::Quic => "QUIC",
            Transport::Tcp => "TCP",
            Transport::Auto => "auto",
        }
    }

    /// The port a server listens on by default (MS-SMB2 2.1).
    fn default_port(self) -> u16 {
        if self == Transport::Tcp {
            445
        } else {
            443
        }
    }
}

/// How the server's QUIC certificate is checked.
#[derive(Clone, Debug)]
pub enum Trust {
    /// The system's roots (`/etc/ssl/certs` and the like), the name in the URL.
    System,
    /// Roots from a PEM file, the name in the URL.
    CaFile(PathBuf),
    /// The leaf certificate's SHA-256, whatever its name and issuer.
    Fingerprint([u8; 32]),
    /// Any certificate (the handshake's signature is still checked).
    Insecure,
}

#[derive(Clone, Debug)]
pub struct ConnectOptions {
    pub transport: Transport,
    pub trust: Trust,
    pub user: String,
    pub password: String,
    pub domain: String,
    /// Log on with Kerberos from the credential cache (`KRB5CCNAME`) for
    /// the service `cifs/NAME` instead of with `user` and `password`.
    pub kerberos: Option<String>,
    /// The ciphers offered for SMB encryption, preferred first.
    pub ciphers: Vec<smbq_crypto::Cipher>,
    /// How long `auto` waits for QUIC before it tries TCP.
    pub quic_timeout: Duration,
    /// How long a connection and logon may take.
    pub timeout: Duration,
    /// Seal every request, even where the server does not ask for it (never on top of QUIC).
    pub encrypt: bool,
    /// A server silent this long with requests in flight counts as gone (then a transfer reconnects).
    pub response_timeout: Duration,
    /// Offer the SMB3 POSIX extensions; where the server agrees for the
    /// share ([`crate::share::Share::posix`]), every CREATE carries the POSIX create context.
    pub posix: bool,
    /// Streams to offer in smbq's multi-stream extension
    /// (`docs/multistream.md`; only a QUIC connection uses them); 1: not offered.
    pub quic_streams: u16,
    /// QUIC connections share this endpoint and TLS session cache, and a
    /// later one resumes in 0-RTT ([`crate::resume`]); a
    /// [`crate::share::Share`] makes one for itself and its reconnects.
    pub resumption: Option<Arc<crate::resume::Resumption>>,
    /// Write a qlog trace of each QUIC connection into this directory
    /// ([`crate::QuicTarget::qlog_dir`]).
    pub qlog_dir: Option<PathBuf>,
}

/// Streams our client offers over QUIC by default.
pub const DEFAULT_QUIC_STREAMS: u16 = 4;

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            transport: Transport::Auto,
            trust: Trust::System,
            user: String::new(),
            password: String::new(),
            domain: String::new(),
            kerberos: None,
            ciphers: crate::core::DEFAULT_CIPHERS.to_vec(),
            quic_timeout: Duration::from_secs(2),
            timeout: Duration::from_secs(20),
            encrypt: false,
            response_timeout: Duration::from_secs(60),
            posix: false,
            quic_streams: DEFAULT_QUIC_STREAMS,
            resumption: None,
            qlog_dir: None,
        }
    }
}

/// A logged-on connection and how it was made.
pub struct Session {
    pub client: Client,
    /// QUIC or TCP (never `Auto`).
    pub transport: Transport,
    pub addr: SocketAddr,
}

/// Connect to `host` and log on. With `Auto`, only an unreachable or
/// silent QUIC port makes it try TCP: a certificate that does not verify
/// is an error, not a reason to fall back.
/// `client_guid`: the one of an earlier connection, to reclaim its durable opens.
pub async fn connect(host: &str, port: Option<u16>, o: &ConnectOptions, client_guid: Option<[u8; 16]>) -> Result<Session, ClientError> {
    match o.transport {
        Transport::Auto => match connect_on(host, port, Transport::Quic, o, o.quic_timeout, client_guid).await {
            Ok(s) => Ok(s),
            Err(e @ (ClientError::Certificate(_) | ClientError::Status(..) | ClientError::Credentials(_))) => Err(e),
            Err(quic) => connect_on(host, port, Transport::Tcp, o, o.timeout, client_guid).await.map_err(|tcp| ClientError::Unreachable(format!("QUIC: {quic}; TCP: {tcp}"))),
        },
        t => connect_on(host, port, t, o, o.timeout, client_guid).await,
    }
}

async fn connect_on(host: &str, port: Option<u16>, t: Transport, o: &ConnectOptions, connect_timeout: Duration, client_guid: Option<[u8; 16]>) -> Result<Session, ClientError> {
    let port = port.unwrap_or(t.default_port());
    let addr = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| ClientError::Unreachable(format!("cannot resolve {host}: {e}")))?
        .next()
        .ok_or_else(|| ClientError::Unreachable(format!("{host} has no address")))?;
    let late = |what: &str| ClientError::Unreachable(format!("{what} {addr} over {} timed out", t.name()));
    let mut client = match t {
        Transport::Quic => {
            let mut target = QuicTarget::new(addr, host, rustls::RootCertStore::empty());
            target.verifier = Some(verifier(&o.trust)?);
            target.resumption = o.resumption.clone();
            target.qlog_dir = o.qlog_dir.clone();
            tokio::time::timeout(connect_timeout, Client::connect_quic(target)).await.map_err(|_| late("connecting to"))??
        }
        _ => tokio::time::timeout(connect_timeout, Client::connect_tcp(addr)).await.map_err(|_| late("connecting to"))??,
    };
    if let Some(g) = client_guid {
        client.core.client_guid = g;
    }
    client.core.offer_posix = o.posix;
    // Offered over TCP too: servers ignore it there (smbq answers it on
    // QUIC only, others not at all).
    client.core.offer_streams = o.quic_streams;
    client.core.offer_ciphers = o.ciphers.clone();
    let logon = async {
        client.negotiate(t == Transport::Quic).await?;
        match &o.kerberos {
            Some(name) => client.login_kerberos(name).await?,
            None => client.login_as(&o.user, &o.domain, &o.password).await?,
        }
        if o.encrypt && !client.core.transport_security {
            client.core.encrypt = true;
        }
        Ok::<_, ClientError>(())
    };
    tokio::time::timeout(o.timeout, logon).await.map_err(|_| late("logging on to"))??;
    client.response_timeout = Some(o.response_timeout);
    Ok(Session { client, transport: t, addr })
}

/// The rustls verifier `trust` asks for.
pub fn verifier(trust: &Trust) -> Result<Arc<dyn ServerCertVerifier>, ClientError> {
    let provider = Arc::new(smbq_crypto::tls_provider());
    let roots = |certs: Vec<CertificateDer<'static>>, from: &str| {
        let mut store = rustls::RootCertStore::empty();
        let (added, _) = store.add_parsable_certificates(certs);
        if added == 0 {
            return Err(ClientError::Certificate(format!("no usable CA certificate in {from}")));
        }
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider.clone())
            .build()
            .map(|v| v as Arc<dyn ServerCertVerifier>)
            .map_err(|e| ClientError::Certificate(e.to_string()))
    };
    match trust {
        Trust::System => roots(rustls_native_certs::load_native_certs().certs, "the system's certificate store"),
        Trust::CaFile(p) => {
            let certs = CertificateDer::pem_file_iter(p)
                .and_then(|i| i.collect::<Result<Vec<_>, _>>())
                .map_err(|e| ClientError::Certificate(format!("{}: {e}", p.display())))?;
            roots(certs, &p.display().to_string())
        }
        Trust::Fingerprint(fp) => Ok(Arc::new(Pinned { fingerprint: Some(*fp), provider })),
        Trust::Insecure => Ok(Arc::new(Pinned { fingerprint: None, provider })),
    }
}

/// Accepts the certificate whose SHA-256 is `fingerprint` (any, if none).
#[derive(Debug)]
struct Pinned {
    fingerprint: Option<[u8; 32]>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(&self, end_entity: &CertificateDer<'_>, _: &[CertificateDer<'_>], _: &ServerName<'_>, _: &[u8], _: UnixTime) -> Result<ServerCertVerified, rustls::Error> {
        match self.fingerprint {
            Some(fp) if smbq_crypto::tls::fingerprint_bytes(end_entity) != fp => {
                Err(rustls::Error::General(format!("the server's certificate has fingerprint {}, not the one pinned", smbq_crypto::tls::fingerprint(end_entity))))
            }
            _ => Ok(ServerCertVerified::assertion()),
        }
    }

    fn verify_tls12_signature(&self, message: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(&self, message: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}
