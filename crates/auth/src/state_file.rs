//! Crash-safe writes of smbq's state files: the users file here, the QUIC
//! certificate and key in `smbq-transport`.
//!
//! [`write_atomic`] replaces a file so that after a crash (of the process
//! or of the machine) the path holds either the old or the new contents,
//! never a mix or nothing, and once it returns the new contents survive a
//! power loss:
//!
//! 1. the contents go to a temporary file `.NAME.tmpPID.SEQ` in the same
//!    directory, created there with the final mode (0600 for secrets: it is
//!    never more permissive, not even before the first byte is written),
//!    and are fsynced;
//! 2. the temporary file is renamed over `NAME` (atomic within a directory);
//! 3. the directory is fsynced, which makes the rename durable.
//!
//! A temporary file left by a crash is never read; a later write that picks
//! the same name (same pid after a reboot) removes it first rather than
//! writing through it. [`write_synced`] and [`sync_dir`] are the steps, for
//! updates of more than one file (see `smbq_transport::tls`).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Replaces `path` with `data` atomically and durably (steps above); the
/// file gets `mode` (exactly: not filtered by the umask).
pub fn write_atomic(path: &Path, data: &[u8], mode: u32) -> io::Result<()> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let file_name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("{}: no file name", path.display())))?;
    // Unique among the writers alive now: two threads or processes saving
    // the same file each rename their own complete temporary file.
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(file_name);
    tmp_name.push(format!(".tmp{}.{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed)));
    let tmp = path.with_file_name(tmp_name);
    let result = write_synced(&tmp, data, mode).and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(path)
}

/// Creates `path` afresh with `data` and fsyncs it. Whatever was at `path`
/// (a stale file, a symbolic link) is removed first, never written through
/// or reused; the new file has `mode` from its creation on.
pub fn write_synced(path: &Path, data: &[u8], mode: u32) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    // O_CREAT|O_EXCL: fails rather than follow a link planted meanwhile.
    let mut f = OpenOptions::new().write(true).create_new(true).mode(mode).open(path)?;
    // The creation mode was filtered by the umask: set it exactly.
    f.set_permissions(std::fs::Permissions::from_mode(mode))?;
    f.write_all(data)?;
    f.sync_all()
}

/// Fsyncs the directory holding `path`, making a rename, creation or
/// removal of `path` durable.
pub fn sync_dir(path: &Path) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}

/// A fresh directory for a test (left behind, as tests' scratch files are).
#[cfg(test)]
pub(crate) fn temp_dir(tag: &str) -> std::path::PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let d = std::env::temp_dir().join(format!("smbq-auth-{tag}-{}-{nanos}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&d) {
        panic!("{}: {e}", d.display());
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn write_atomic_replaces_and_leaves_only_the_target() {
        let dir = temp_dir("atomic");
        let path = dir.join("f");
        write_atomic(&path, b"one", 0o600).unwrap();
        write_atomic(&path, b"two", 0o640).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert_eq!(mode(&path), 0o640);
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("f")]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn write_synced_replaces_a_stale_file_or_link_without_writing_through() {
        let dir = temp_dir("synced");
        let path = dir.join("f.new");
        let victim = dir.join("victim");
        std::fs::write(&victim, b"untouched").unwrap();
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        write_synced(&path, b"secret", 0o600).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"untouched");
        assert!(std::fs::symlink_metadata(&path).unwrap().file_type().is_file());
        assert_eq!(mode(&path), 0o600);
        // A stale, world-readable file is replaced, not reused with its mode.
        std::fs::write(&path, b"stale and longer than the new contents").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_synced(&path, b"secret", 0o600).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"secret");
        assert_eq!(mode(&path), 0o600);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn sync_dir_of_a_bare_file_name_is_the_current_directory() {
        sync_dir(Path::new("users")).unwrap();
    }
}
