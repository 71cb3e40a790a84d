//! The users file: `name:<32 hex digits of the NT hash>` per line.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use crate::ntlm::nt_hash;

/// Users and their NT hashes (MS-NLMP 3.3.1 NTOWFv1). The file holds one
/// `name:32-hex-NT-hash` per line; blank lines and lines starting with `#`
/// are ignored. Names are case-insensitive and stored lowercase.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserDb {
    users: BTreeMap<String, [u8; 16]>,
}

fn invalid(line: usize, what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("users file line {line}: {what}"))
}

impl UserDb {
    pub fn new() -> UserDb {
        UserDb::default()
    }

    /// Reads a users file. A missing file is an error (`NotFound`); a bad
    /// line is `InvalidData` naming the line.
    pub fn load(path: &Path) -> io::Result<UserDb> {
        let text = std::fs::read_to_string(path)?;
        let mut db = UserDb::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (name, hash) = line.rsplit_once(':').ok_or_else(|| invalid(i + 1, "expected name:hash"))?;
            let name = name.trim();
            if name.is_empty() {
                return Err(invalid(i + 1, "empty user name"));
            }
            let mut h = [0u8; 16];
            hex::decode_to_slice(hash.trim(), &mut h).map_err(|_| invalid(i + 1, "hash is not 32 hex digits"))?;
            db.users.insert(name.to_lowercase(), h);
        }
        Ok(db)
    }

    /// Writes the file atomically and durably, mode 0600 from creation
    /// ([`crate::state_file::write_atomic`]): after a crash `path` holds the
    /// old or the new users, never part of either.
    pub fn save(&self, path: &Path) -> io::Result<()> {
        let mut text = String::from("# smbq users: name:NT-hash (MD4 of the UTF-16LE password)\n");
        for (name, hash) in &self.users {
            text.push_str(name);
            text.push(':');
            text.push_str(&hex::encode(hash));
            text.push('\n');
        }
        crate::state_file::write_atomic(path, text.as_bytes(), 0o600)
    }

    /// Adds `name` with the NT hash of `password`, replacing any entry.
    pub fn add(&mut self, name: &str, password: &str) {
        self.users.insert(name.to_lowercase(), nt_hash(password));
    }

    pub fn remove(&mut self, name: &str) -> bool {
        self.users.remove(&name.to_lowercase()).is_some()
    }

    /// The NT hash of `name` (any case).
    pub fn get(&self, name: &str) -> Option<[u8; 16]> {
        self.users.get(&name.to_lowercase()).copied()
    }

    /// The user names, lowercase and sorted.
    pub fn names(&self) -> Vec<String> {
        self.users.keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state_file::temp_dir;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn add_get_remove_case_insensitive() {
        let mut db = UserDb::new();
        db.add("Alice", "secret");
        db.add("bob", "x");
        assert_eq!(db.get("ALICE"), Some(nt_hash("secret")));
        db.add("alice", "other");
        assert_eq!(db.get("Alice"), Some(nt_hash("other")));
        assert_eq!(db.names(), vec!["alice", "bob"]);
        assert!(db.remove("BOB"));
        assert!(!db.remove("bob"));
        assert_eq!(db.get("bob"), None);
    }

    #[test]
    fn save_load_round_trip_mode_0600() {
        let dir = temp_dir("db");
        let path = dir.join("users");
        let mut db = UserDb::new();
        db.add("Alice", "secret");
        db.add("ünïcode", "pässword");
        db.save(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let loaded = UserDb::load(&path).unwrap();
        assert_eq!(loaded, db);
        // Saving again replaces the file and leaves no temporary behind.
        db.remove("alice");
        db.save(&path).unwrap();
        assert_eq!(UserDb::load(&path).unwrap().names(), vec!["ünïcode"]);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn concurrent_saves_all_succeed_and_never_mix() {
        let dir = temp_dir("concurrent");
        let path = dir.join("users");
        let dbs: Vec<UserDb> = (0..8)
            .map(|t| {
                let mut db = UserDb::new();
                for u in 0..50 {
                    db.add(&format!("thread{t}-user{u}"), &format!("password {t} {u}"));
                }
                db
            })
            .collect();
        std::thread::scope(|s| {
            for db in &dbs {
                let path = &path;
                s.spawn(move || {
                    for _ in 0..40 {
                        db.save(path).unwrap();
                    }
                });
            }
        });
        let last = UserDb::load(&path).unwrap();
        assert!(dbs.contains(&last), "the file mixes several saves");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "temporary files left behind");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn stale_temp_from_a_crashed_save_is_harmless() {
        let dir = temp_dir("stale");
        let path = dir.join("users");
        let mut db = UserDb::new();
        db.add("alice", "secret");
        db.save(&path).unwrap();
        // What a save killed before its rename leaves, under names this
        // process may pick again (pids are reused, e.g. pid 1 in containers):
        // half-written files, world-readable, and one that is a symbolic link.
        let pid = std::process::id();
        let leak = dir.join("leak");
        std::os::unix::fs::symlink(&leak, dir.join(format!(".users.tmp{pid}"))).unwrap();
        for seq in 0..4 {
            let stale = dir.join(format!(".users.tmp{pid}.{seq}"));
            std::fs::write(&stale, "bob:a4f49c40").unwrap();
            std::fs::set_permissions(&stale, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        assert_eq!(UserDb::load(&path).unwrap(), db);
        db.add("bob", "Password");
        db.save(&path).unwrap();
        assert_eq!(UserDb::load(&path).unwrap(), db);
        assert!(!leak.exists(), "the save wrote through a stale link");
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_file());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn load_parses_comments_and_rejects_bad_lines() {
        let dir = temp_dir("parse");
        let path = dir.join("users");
        assert_eq!(UserDb::load(&path).unwrap_err().kind(), io::ErrorKind::NotFound);
        std::fs::write(&path, "# comment\n\n  Bob : A4F49C406510BDCAB6824EE7C30FD852 \n").unwrap();
        assert_eq!(UserDb::load(&path).unwrap().get("bob"), Some(nt_hash("Password")));
        for bad in ["bob\n", ":a4f49c406510bdcab6824ee7c30fd852\n", "bob:a4f49c\n", "bob:zz\n"] {
            std::fs::write(&path, bad).unwrap();
            assert_eq!(UserDb::load(&path).unwrap_err().kind(), io::ErrorKind::InvalidData, "{bad}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
