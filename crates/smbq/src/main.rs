//! `smbq`: serve directories over SMB 3.1.1 on QUIC and TCP, manage users and the certificate.

mod cert;
mod config;
mod serve;
mod user;

use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(name = "smbq", version, about = "SMB 3.1.1 server for Linux, over QUIC and TCP")]
struct Cli {
    /// More log output (-v debug, -vv trace); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve a directory (default ./share, created if absent) as share `share`, over QUIC and TCP.
    Serve(serve::ServeArgs),
    /// Add, delete or list users (the file stores NT hashes only, mode 0600).
    User {
        #[command(subcommand)]
        action: user::UserAction,
    },
    /// Show or generate the QUIC server certificate.
    Cert {
        #[command(subcommand)]
        action: cert::CertAction,
    },
}

/// Where state lives: `$XDG_STATE_HOME/smbq` or `~/.local/state/smbq`.
pub fn default_state_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("smbq");
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    home.join(".local/state/smbq")
}

fn main() -> anyhow::Result<()> {
    smbq_transport::keep_large_buffers_on_heap();
    let cli = Cli::parse();
    let default = match cli.verbose {
        0 => "info",
        1 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Colours only for a person at a terminal, not in log files.
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
    match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::User { action } => user::run(action),
        Command::Cert { action } => cert::run(action),
    }
}
