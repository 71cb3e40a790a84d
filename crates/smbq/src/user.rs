//! `smbq user add|del|list`.

use anyhow::{bail, Context};
use clap::Subcommand;
use smbq_auth::UserDb;
use std::io::{BufRead, IsTerminal};
use std::path::{Path, PathBuf};

#[derive(Subcommand)]
pub enum UserAction {
    /// Add a user or set a user's password.
    Add {
        name: String,
        /// Users file (default STATE_DIR/users).
        #[arg(long)]
        users: Option<PathBuf>,
        /// Read the password from the first line of standard input.
        #[arg(long)]
        password_stdin: bool,
    },
    /// Delete a user.
    Del {
        name: String,
        #[arg(long)]
        users: Option<PathBuf>,
    },
    /// List user names, each with its SID (what security descriptors name
    /// the user by).
    List {
        #[arg(long)]
        users: Option<PathBuf>,
    },
}

pub fn users_path(users: Option<PathBuf>) -> PathBuf {
    users.unwrap_or_else(|| crate::default_state_dir().join("users"))
}

pub fn load_or_new(path: &Path) -> anyhow::Result<UserDb> {
    if path.exists() {
        UserDb::load(path).with_context(|| format!("reading users file {}", path.display()))
    } else {
        Ok(UserDb::new())
    }
}

/// Writes the users file atomically (see [`smbq_auth::state_file`]),
/// creating its directory (durably) if needed.
pub fn save(db: &UserDb, path: &Path) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        smbq_auth::state_file::sync_dir(dir).with_context(|| format!("syncing the directory of {}", dir.display()))?;
    }
    db.save(path).with_context(|| format!("writing users file {}", path.display()))
}

fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 64 && name.chars().all(|c| c.is_alphanumeric() || "._-".contains(c))
}

pub fn run(action: UserAction) -> anyhow::Result<()> {
    match action {
        UserAction::Add { name, users, password_stdin } => {
            if !valid_name(&name) {
                bail!("user names are 1-64 letters, digits, '.', '_' or '-'");
            }
            let path = users_path(users);
            let password = if password_stdin || !std::io::stdin().is_terminal() {
                let mut line = String::new();
                std::io::stdin().lock().read_line(&mut line)?;
                line.trim_end_matches(['\r', '\n']).to_string()
            } else {
                bail!("give the password on standard input with --password-stdin");
            };
            if password.is_empty() {
                bail!("empty password");
            }
            let mut db = load_or_new(&path)?;
            db.add(&name, &password);
            save(&db, &path)?;
            eprintln!("user {name} saved in {}", path.display());
        }
        UserAction::Del { name, users } => {
            let path = users_path(users);
            let mut db = load_or_new(&path)?;
            if !db.remove(&name) {
                bail!("no user {name} in {}", path.display());
            }
            save(&db, &path)?;
        }
        UserAction::List { users } => {
            let path = users_path(users);
            for n in load_or_new(&path)?.names() {
                println!("{n}\t{}", smbq_server::access::user_sid(&n));
            }
        }
    }
    Ok(())
}
