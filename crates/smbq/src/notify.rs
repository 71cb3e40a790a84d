//! Telling systemd how `smbq serve` is doing: the sd_notify(3) protocol of
//! a `Type=notify` service (packaging/systemd/smbq.service).
//!
//! systemd passes a Unix datagram socket in `$NOTIFY_SOCKET`, a path or
//! (leading `@`) an abstract address; each message is one datagram of
//! `KEY=VALUE` lines. Without `NOTIFY_SOCKET` every function here does
//! nothing, so callers need not ask whether systemd runs them.
//!
//! A reload (SIGHUP) is bracketed by [`reloading`] and [`ready`], as
//! `Type=notify-reload` expects; a shutdown starts with [`stopping`].
//!
//! The send is written here rather than taken from a crate: it is one
//! `sendto`, and the `sd-notify` crate (0.5) cannot reach an abstract
//! address, which service managers in containers and `systemd-run
//! --user` hand out.

use std::io;
use std::os::unix::net::UnixDatagram;
use tracing::{debug, warn};

/// Ready to serve (the listeners are bound), or done reloading; `status`
/// says what it serves, for `systemctl status`.
pub fn ready(status: &str) {
    send(&format!("READY=1\nSTATUS={}\n", one_line(status)));
}

/// Starting a reload: `RELOADING=1` with the `CLOCK_MONOTONIC` time, which
/// systemd (`Type=notify-reload`) matches to the reload it asked for. Call
/// [`ready`] when the reload is done, whether it was applied or refused.
#[allow(dead_code, reason = "for SIGHUP reload (issue 18, deliverable 2)")]
pub fn reloading() {
    send(&format!("RELOADING=1\nMONOTONIC_USEC={}\n", monotonic_usec()));
}

/// Shutting down.
pub fn stopping() {
    send("STOPPING=1\n");
}

/// A one-line status for `systemctl status`, without a change of state.
#[allow(dead_code, reason = "for SIGHUP reload (issue 18, deliverable 2)")]
pub fn status(text: &str) {
    send(&format!("STATUS={}\n", one_line(text)));
}

/// Sends `msg` to `$NOTIFY_SOCKET` when it is set; a failure is logged
/// (systemd then restarts us after its start timeout), never fatal.
fn send(msg: &str) {
    let Some(target) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    match send_to(&target, msg.as_bytes()) {
        Ok(()) => debug!(msg = msg.trim_end(), "notified systemd"),
        Err(e) => warn!(socket = ?target, error = %e, "cannot notify systemd"),
    }
}

fn send_to(target: &std::ffi::OsStr, msg: &[u8]) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let sock = UnixDatagram::unbound()?;
    let sent = match target.as_bytes() {
        [] => return Err(io::Error::new(io::ErrorKind::InvalidInput, "NOTIFY_SOCKET is empty")),
        [b'@', name @ ..] => {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
            sock.send_to_addr(msg, &addr)?
        }
        [b'/', ..] => sock.send_to(msg, target)?,
        _ => return Err(io::Error::new(io::ErrorKind::Unsupported, "NOTIFY_SOCKET is neither a path nor an abstract address")),
    };
    if sent != msg.len() {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "short datagram"));
    }
    Ok(())
}

/// A newline would end the STATUS field and start a field of its own.
fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

/// Microseconds on `CLOCK_MONOTONIC`, the clock `MONOTONIC_USEC` is read on.
fn monotonic_usec() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec, which `ts` is.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) } != 0 {
        return 0;
    }
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let micros = u64::try_from(ts.tv_nsec).unwrap_or(0) / 1000;
    secs.saturating_mul(1_000_000).saturating_add(micros)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    fn recv(sock: &UnixDatagram) -> String {
        let mut buf = [0u8; 512];
        let n = sock.recv(&mut buf).expect("datagram");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    #[test]
    fn sends_to_a_path_and_an_abstract_address() {
        let dir = std::env::temp_dir().join(format!("smbq-notify-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&path);
        let sock = UnixDatagram::bind(&path).expect("bind");
        send_to(path.as_os_str(), b"READY=1\n").expect("send to path");
        assert_eq!(recv(&sock), "READY=1\n");
        let _ = std::fs::remove_dir_all(&dir);

        use std::os::linux::net::SocketAddrExt;
        let name = format!("smbq-notify-test-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).expect("abstract name");
        let abs = UnixDatagram::bind_addr(&addr).expect("bind abstract");
        let target = format!("@{name}");
        send_to(std::ffi::OsStr::from_bytes(target.as_bytes()), b"STOPPING=1\n").expect("send to abstract");
        assert_eq!(recv(&abs), "STOPPING=1\n");
    }

    #[test]
    fn refuses_what_is_not_an_address() {
        assert!(send_to(std::ffi::OsStr::new(""), b"READY=1\n").is_err());
        assert!(send_to(std::ffi::OsStr::new("vsock:2:1234"), b"READY=1\n").is_err());
    }

    #[test]
    fn status_stays_one_field_and_the_clock_moves() {
        assert_eq!(one_line("a\nb\rc"), "a b c");
        let a = monotonic_usec();
        let b = monotonic_usec();
        assert!(a > 0 && b >= a);
    }
}
