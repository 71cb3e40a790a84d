//! `smbq`: serve directories over SMB 3.1.1 on QUIC and TCP, manage users
//! and the certificate; and as a client: copy files, list, and mount a share.

// Every unsafe block says why it is sound (`// SAFETY:`).
#![deny(clippy::undocumented_unsafe_blocks)]

mod acme;
mod cert;
mod client;
mod config;
mod kdcproxy;
mod logging;
mod metrics;
mod notify;
mod reload;
mod serve;
mod user;

use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(name = "smbq", version, about = "SMB 3.1.1 server and client for Linux, over QUIC and TCP")]
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
    /// Make the running server read its config, users and certificate files again (SIGHUP).
    Reload(reload::ReloadArgs),
    /// Show or generate the QUIC server certificate.
    Cert {
        #[command(subcommand)]
        action: cert::CertAction,
    },
    /// List a directory (or the files matching a pattern: smb://h/s/dir/*.jpg).
    Ls(client::commands::LsArgs),
    /// Copy a file (or with -r a directory) from a share: get URL [LOCAL].
    Get(client::transfer::GetArgs),
    /// Copy a file (or with -r a directory) to a share: put LOCAL URL.
    Put(client::transfer::PutArgs),
    /// Delete files.
    Rm(client::commands::UrlsArgs),
    /// Make directories.
    Mkdir(client::commands::UrlsArgs),
    /// Remove empty directories.
    Rmdir(client::commands::UrlsArgs),
    /// Rename or move within a share: mv URL URL.
    Mv(client::commands::MvArgs),
    /// Write files to stdout.
    Cat(client::commands::UrlsArgs),
    /// Show files' metadata.
    Stat(client::commands::UrlsArgs),
    /// Set permission bits (with --posix): chmod MODE URL... (octal).
    Chmod(client::commands::ChmodArgs),
    /// Set owner and/or group (with --posix): chown UID[:GID] URL... (numbers).
    Chown(client::commands::ChownArgs),
    /// Make a symbolic link (with --posix): ln -s TARGET URL.
    Ln(client::commands::LnArgs),
    /// Print symlinks' targets (with --posix).
    Readlink(client::commands::UrlsArgs),
    /// List a server's shares: shares smb://[user@]host[:port].
    Shares(client::commands::SharesArgs),
    /// Mount a share on a directory with FUSE (until fusermount3 -u DIR or Ctrl-C).
    Mount(client::MountArgs),
}

/// Where state lives: `$XDG_STATE_HOME/smbq` or `~/.local/state/smbq`.
pub fn default_state_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("smbq");
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    home.join(".local/state/smbq")
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("smbq: {e:#}");
            std::process::ExitCode::from(client::exit_code(&e))
        }
    }
}

fn run() -> anyhow::Result<()> {
    smbq_transport::keep_large_buffers_on_heap();
    let cli = Cli::parse();
    let quiet = if matches!(cli.command, Command::Serve(_)) { "info" } else { "warn" };
    let default = match cli.verbose {
        0 => quiet,
        1 => "debug",
        _ => "trace",
    };
    // fuser warns when it drops a mount someone else already unmounted (fusermount3 -u): not news.
    logging::init(&format!("{default},fuser=error"));
    match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::User { action } => user::run(action),
        Command::Cert { action } => cert::run(action),
        Command::Reload(a) => reload::run(a),
        Command::Mount(a) => client::mount_main(a),
        c => {
            use client::commands::{self as cmd, Each};
            use client::transfer;
            client::runtime()?.block_on(async move {
                match c {
                    Command::Ls(a) => cmd::ls(a).await,
                    Command::Get(a) => transfer::get(a).await,
                    Command::Put(a) => transfer::put(a).await,
                    Command::Rm(a) => cmd::each(a, Each::Remove).await,
                    Command::Mkdir(a) => cmd::each(a, Each::Mkdir).await,
                    Command::Rmdir(a) => cmd::each(a, Each::Rmdir).await,
                    Command::Mv(a) => cmd::mv(a).await,
                    Command::Cat(a) => cmd::cat(a).await,
                    Command::Stat(a) => cmd::stat(a).await,
                    Command::Chmod(a) => cmd::chmod(a).await,
                    Command::Chown(a) => cmd::chown(a).await,
                    Command::Ln(a) => cmd::ln(a).await,
                    Command::Readlink(a) => cmd::readlink(a).await,
                    Command::Shares(a) => cmd::shares(a).await,
                    Command::Serve(_) | Command::User { .. } | Command::Cert { .. } | Command::Reload(_) | Command::Mount(_) => {
                        unreachable!("handled above")
                    }
                }
            })
        }
    }
}
