//! Where log events go: the systemd journal, in its native structured form,
//! when stderr is connected to it; else formatted lines on stderr.
//!
//! systemd connects a service's stderr to the journal and sets
//! `JOURNAL_STREAM=DEV:INODE` to that stream's device and inode. A process
//! whose fd 2 still is that stream (not redirected by a wrapper) may log
//! over the journal's socket instead (systemd.exec(5), "JOURNAL_STREAM"):
//! each event then keeps its fields as journal fields (`F_NAME`, with the
//! `tracing-journald` prefix), its level as `PRIORITY` (error 3, warn 4,
//! info 6, debug and trace 7), and its target and source location.

use std::io::IsTerminal;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber: `RUST_LOG`, else `directives`, filters.
pub fn init(directives: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(directives));
    let mut unreachable = None;
    let journald = if stderr_is_journal() {
        tracing_journald::layer().map(|l| l.with_priority_mappings(priorities())).map_err(|e| unreachable = Some(e)).ok()
    } else {
        None
    };
    // Colours only for a person at a terminal, not in log files.
    let stderr = journald.is_none().then(|| {
        tracing_subscriber::fmt::layer()
            .with_ansi(std::io::stderr().is_terminal())
            .with_writer(std::io::stderr)
    });
    tracing_subscriber::registry().with(filter).with(journald).with(stderr).init();
    if let Some(e) = unreachable {
        tracing::warn!("stderr is the journal's but its socket is not reachable ({e}); logging to stderr");
    }
}

/// syslog's meanings, which `journalctl -p` filters on: info is 6
/// (informational; the crate's default makes it 5, notice), debug and
/// trace are 7.
fn priorities() -> tracing_journald::PriorityMappings {
    use tracing_journald::Priority;
    tracing_journald::PriorityMappings {
        info: Priority::Informational,
        debug: Priority::Debug,
        trace: Priority::Debug,
        ..tracing_journald::PriorityMappings::new()
    }
}

/// Whether fd 2 is the stream `JOURNAL_STREAM` names.
fn stderr_is_journal() -> bool {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    let Some(var) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some(var) = var.to_str() else {
        return false;
    };
    let meta = std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .map(std::fs::File::from)
        .and_then(|f| f.metadata());
    match meta {
        Ok(m) => names_stream(var, m.dev(), m.ino()),
        Err(_) => false,
    }
}

/// Whether a `JOURNAL_STREAM` value (`DEV:INODE`, both decimal) names the
/// file with device `dev` and inode `ino`.
fn names_stream(var: &str, dev: u64, ino: u64) -> bool {
    let Some((d, i)) = var.split_once(':') else {
        return false;
    };
    matches!((d.parse::<u64>(), i.parse::<u64>()), (Ok(d), Ok(i)) if d == dev && i == ino)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_stream_must_name_this_stream() {
        assert!(names_stream("8:1234", 8, 1234));
        assert!(!names_stream("8:1234", 8, 1235));
        assert!(!names_stream("9:1234", 8, 1234));
        for bad in ["", "8", "8:", ":1234", "8:1234:5", "x:1234", "8:-1", " 8:1234", "8:1234\n"] {
            assert!(!names_stream(bad, 8, 1234), "{bad:?}");
        }
    }
}
