//! `smbq cert show|generate`: the QUIC server certificate.

use clap::Subcommand;
use smbq_transport::tls;
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum CertAction {
    /// Print the certificate's path and SHA-256 fingerprint.
    Show {
        /// Certificate (PEM); default STATE_DIR/tls/cert.pem.
        #[arg(long, value_name = "FILE")]
        cert: Option<PathBuf>,
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
        /// One JSON object on stdout.
        #[arg(long)]
        json: bool,
    },
    /// (Re)generate STATE_DIR/tls/cert.pem and key.pem: an ECDSA P-256 leaf
    /// for localhost, the host name, its addresses and each --san. The pair
    /// is replaced as one unit (a crash leaves the old pair or the new).
    Generate {
        #[arg(long, value_name = "NAME")]
        san: Vec<String>,
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
    },
}

pub fn run(action: CertAction) -> anyhow::Result<()> {
    match action {
        CertAction::Show { cert, state_dir, json } => {
            let path = match cert {
                Some(path) => path,
                None => {
                    // Show what `serve` will present: finish an update a crash interrupted.
                    let (c, k) = tls::default_paths(&state_dir.unwrap_or_else(crate::default_state_dir));
                    tls::finish_update(&c, &k)?;
                    c
                }
            };
            let chain = tls::load_certs(&path)?;
            let fp = chain.first().map(|c| tls::fingerprint(c)).unwrap_or_default();
            if json {
                println!("{{\"path\":{:?},\"sha256\":\"{fp}\",\"chain_len\":{}}}", path.display().to_string(), chain.len());
            } else {
                println!("certificate {}\nSHA-256 {fp}\nchain of {} certificate(s)", path.display(), chain.len());
            }
        }
        CertAction::Generate { san, state_dir } => {
            let dir = state_dir.unwrap_or_else(crate::default_state_dir);
            let (c, k) = tls::default_paths(&dir);
            let sans = tls::default_sans(&san);
            let id = tls::generate(&c, &k, &sans)?;
            println!("certificate {}\nkey {}\nnames {}\nSHA-256 {}", c.display(), k.display(), sans.join(", "), id.fingerprint());
        }
    }
    Ok(())
}
