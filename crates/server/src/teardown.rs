//! The end of an open: its release from the server's tables, the wake-up
//! of whoever waited for it, and what its close does to the file (delete
//! on close, the write time a close leaves).

use crate::files::WriteTime;
use crate::open::{Open, OpenKind};
use crate::server::Server;
use std::time::Instant;

/// Release `open` from the file table (its
/// share mode, oplock and locks), wake whoever waits on the file, and
/// delete the file if it was marked delete-on-close and this was its
/// last open. A deletion, or the close of an open that wrote, changes the
/// directory: its leases break.
pub fn release(server: &Server, open: Open, now: Instant) -> Open {
    // Its change-notify watches go back at once.
    crate::notify::forget(server, open.file_id.volatile);
    if open.file_key != 0 {
        let owner = open.owner();
        let files = &server.files;
        let mut entry = files.entry(open.file_key);
        let spared = entry.parent_lease(owner);
        if open.delete_on_close {
            entry.delete_pending = true;
        }
        let delete = entry.delete_pending;
        // The write time a close leaves (files::WriteTime), put on the
        // file (writes moved the file system's meanwhile): a writing
        // handle's, and the last handle's.
        let last = entry.opens.len() == 1;
        let write_time = match entry.write_time {
            Some(w) if open.written || last => {
                let t = w.at_close(now, server.now());
                if !matches!(w, WriteTime::Set(_)) {
                    entry.write_time = Some(WriteTime::Updated { time: t, dirty: false });
                }
                Some(t)
            }
            _ => None,
        };
        let base = entry.stream.as_ref().map(|(b, _)| *b);
        // Another connection may have renamed the file since this open.
        let path = if entry.path.is_empty() { open.path.clone() } else { entry.path.clone() };
        let (last, waiters) = files.remove_open(&mut entry, owner);
        drop(entry);
        // The last open of a stream of a file deleted meanwhile: the file goes now.
        let deferred = base.filter(|_| last).and_then(|b| files.deferred_delete(b));
        server.wake(&waiters);
        if let (Some(t), OpenKind::File(h)) = (write_time.filter(|_| !delete), &open.kind) {
            let times = smbq_vfs::SetTimes { last_write_time: Some(t), ..smbq_vfs::SetTimes::default() };
            if let Err(e) = h.set_times(&times) {
                tracing::debug!(path = %open.path, error = %e, "write time at close not set");
            }
        }
        let Some(fs) = open.fs() else { return open };
        let mut changed = open.written;
        let mut doomed = Vec::new();
        if let (true, true, OpenKind::File(h)) = (last, delete, &open.kind) {
            doomed.push((path.clone(), h.is_dir));
        }
        if let Some(p) = deferred {
            let is_dir = fs.stat_path(&p).is_ok_and(|st| st.is_dir);
            doomed.push((p, is_dir));
        }
        for (p, is_dir) in doomed {
            match fs.unlink(&p, is_dir) {
                Ok(()) => changed = true,
                Err(e) => tracing::debug!(path = %p, error = %e, "delete on close failed"),
            }
        }
        if changed {
            server.dir_changed(fs, &path, spared, now);
        }
    }
    open
}
