//! `smbq cert show|generate`: the QUIC server certificate.

use clap::Subcommand;
use smbq_transport::tls;
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum CertAction {
    /// Print the certificate smbq serves (the ACME one if there is one, else the
    /// generated one): the chain, names, validity and the leaf's SHA-256 fingerprint.
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
                    let dir = state_dir.unwrap_or_else(crate::default_state_dir);
                    // What `serve` presents: the ACME certificate if there is one, else
                    // the generated one (finishing an update a crash interrupted).
                    let acme = crate::acme::Paths::new(&dir);
                    if crate::acme::load_stored(&acme).is_some() {
                        acme.cert
                    } else {
                        let (c, k) = tls::default_paths(&dir);
                        tls::finish_update(&c, &k)?;
                        c
                    }
                }
            };
            let chain = tls::load_certs(&path)?;
            show(&path, &chain, json)?;
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

/// One certificate of a chain, as `cert show` prints it.
#[derive(serde::Serialize)]
struct Shown {
    subject: String,
    issuer: String,
    not_before: String,
    not_after: String,
    days_left: i64,
    sans: Vec<String>,
    sha256: String,
}

fn describe(der: &[u8]) -> anyhow::Result<Shown> {
    let (_, c) = x509_parser::parse_x509_certificate(der).map_err(|e| anyhow::anyhow!("parsing certificate: {e}"))?;
    let mut sans = Vec::new();
    if let Ok(Some(san)) = c.subject_alternative_name() {
        for n in &san.value.general_names {
            match n {
                x509_parser::extensions::GeneralName::DNSName(d) => sans.push(d.to_string()),
                x509_parser::extensions::GeneralName::IPAddress(b) => match b.len() {
                    4 => sans.extend(<[u8; 4]>::try_from(*b).ok().map(|a| std::net::IpAddr::from(a).to_string())),
                    16 => sans.extend(<[u8; 16]>::try_from(*b).ok().map(|a| std::net::IpAddr::from(a).to_string())),
                    _ => {}
                },
                _ => {}
            }
        }
    }
    let v = c.validity();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    Ok(Shown {
        subject: c.subject().to_string(),
        issuer: c.issuer().to_string(),
        not_before: crate::acme::asn1_rfc3339(&v.not_before),
        not_after: crate::acme::asn1_rfc3339(&v.not_after),
        days_left: (v.not_after.timestamp() - now).div_euclid(86400),
        sans,
        sha256: tls::fingerprint(der),
    })
}

fn show(path: &std::path::Path, chain: &[rustls::pki_types::CertificateDer<'_>], json: bool) -> anyhow::Result<()> {
    let shown = chain.iter().map(|c| describe(c)).collect::<anyhow::Result<Vec<_>>>()?;
    let Some(leaf) = shown.first() else { anyhow::bail!("{}: no certificate", path.display()) };
    if json {
        let out = serde_json::json!({
            "path": path.display().to_string(),
            "sha256": leaf.sha256,
            "sans": leaf.sans,
            "not_before": leaf.not_before,
            "not_after": leaf.not_after,
            "days_left": leaf.days_left,
            "chain_len": shown.len(),
            "chain": shown,
        });
        println!("{out}");
        return Ok(());
    }
    println!("certificate {}", path.display());
    println!("SHA-256 {}", leaf.sha256);
    println!("names {}", leaf.sans.join(", "));
    println!("valid from {} until {} ({} days left)", leaf.not_before, leaf.not_after, leaf.days_left);
    println!("chain of {} certificate(s):", shown.len());
    for (i, c) in shown.iter().enumerate() {
        println!("  {i}: subject {}\n     issuer  {}\n     until   {}", c.subject, c.issuer, c.not_after);
    }
    Ok(())
}
