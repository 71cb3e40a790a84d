//! The QUIC server the transport's integration tests run against: one
//! share (`share`) in a temporary directory, the users given, every
//! endpoint of `opts` served until the `Running` is dropped.
#![allow(dead_code)]

use smbq_auth::UserDb;
use smbq_server::{Server, ServerConfig, ShareConfig};
use smbq_transport::quic::{self, QuicOptions};
use smbq_transport::tls::{self, ClientAccess};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

pub struct Running {
    pub addr: SocketAddr,
    pub cert: rustls::pki_types::CertificateDer<'static>,
    /// The share's directory.
    pub share: PathBuf,
    /// The endpoints on the port (to count connections).
    pub eps: Vec<quinn::Endpoint>,
    stop: tokio::sync::watch::Sender<bool>,
    _dir: tempfile::TempDir,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// The server on its defaults but `opts`, QUIC only, on 127.0.0.1.
pub async fn start(users: &[(&str, &str)], opts: QuicOptions) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let share = dir.path().join("share");
    std::fs::create_dir(&share).unwrap();
    let mut db = UserDb::new();
    for (user, password) in users {
        db.add(user, password);
    }
    let mut config = ServerConfig::default();
    config.shares.push(ShareConfig::new("share", share.clone()));
    let server = Arc::new(Server::new(config, db).unwrap());
    let (id, _) = tls::load_or_generate(dir.path(), None, &[]).unwrap();
    let cert = id.chain[0].clone();
    let tls_cfg = tls::server_config(tls::Certificates::new(&id).unwrap(), &ClientAccess::default()).unwrap();
    let eps = quic::endpoints("127.0.0.1:0".parse().unwrap(), tls_cfg, &opts).unwrap();
    let addr = eps[0].local_addr().unwrap();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    for ep in &eps {
        let mut w = stopped.clone();
        tokio::spawn(quic::serve(ep.clone(), server.clone(), opts.clone(), async move {
            let _ = w.wait_for(|s| *s).await;
        }));
    }
    Running { addr, cert, share, eps, stop, _dir: dir }
}
