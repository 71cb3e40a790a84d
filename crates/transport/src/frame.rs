//! What passes from a connection's input to its engine: [`Frame`]s, each
//! holding its share of the memory budgets ([`Admission`]) until the
//! engine has handled it, and the Direct TCP prefix that announces them.

use bytes::{Bytes, BytesMut};
use smbq_server::{Connection, Server};
use smbq_wire::framing::{frame_len, FrameError};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::info;

/// Frames in flight between the stages: enough to keep the pipe full.
pub(crate) const QUEUE: usize = 32;

/// One SMB message for the engine: `head`, then `tail` (empty except for a
/// large frame over QUIC, see [`smbq_quic::StreamChunks`]), and the share of
/// the memory budgets it holds until the engine has handled it.
pub(crate) struct Frame {
    /// The stream it came on (0 but with smbq's multi-stream extension).
    pub(crate) stream: u16,
    pub(crate) head: BytesMut,
    pub(crate) tail: Vec<Bytes>,
    pub(crate) _held: Held,
}

/// A frame's share of the connection's and the server's memory budgets.
pub(crate) type Held = (OwnedSemaphorePermit, OwnedSemaphorePermit);

/// Frames before logon: this many of `limits.preauth_max_frame()` may
/// wait for the engine.
const PREAUTH_FRAMES: usize = 2;

/// What one connection may queue after logon at most, whatever its credit
/// window allows (8192 credits would charge 512 MiB).
const MAX_QUEUED: usize = 64 << 20;

/// What one connection's reader may take in ahead of its engine. Before
/// a session exists a frame over `limits.preauth_max_frame()` (64 KiB of
/// security blob plus headers) closes the connection and only
/// [`PREAUTH_FRAMES`] of them are buffered. From logon on, frames up to
/// `limits.max_frame()` and as many bytes as the credit window can
/// charge (credits × 64 KiB, MS-SMB2 3.3.5.2.5; at most [`MAX_QUEUED`],
/// at least two largest frames). Every frame also holds
/// its bytes of the server-wide `limits.memory_budget`; readers wait while
/// it is spent.
pub(crate) struct Admission {
    server: Arc<Semaphore>,
    conn: Arc<Semaphore>,
    logged_on: AtomicBool,
    preauth_max: usize,
    max: usize,
    /// Permits the connection gains at logon.
    grown: usize,
}

impl Admission {
    pub(crate) fn new(server: &Server) -> Admission {
        let l = &server.config.limits;
        let preauth = PREAUTH_FRAMES * l.preauth_max_frame();
        let after = (usize::from(l.credits) * 65536).min(MAX_QUEUED).max(2 * l.max_frame());
        Admission {
            server: Arc::clone(&server.memory),
            conn: Arc::new(Semaphore::new(preauth)),
            logged_on: AtomicBool::new(false),
            preauth_max: l.preauth_max_frame(),
            max: l.max_frame(),
            grown: after.saturating_sub(preauth),
        }
    }

    pub(crate) fn max_frame(&self) -> usize {
        if self.logged_on.load(Ordering::Acquire) {
            self.max
        } else {
            self.preauth_max
        }
    }

    /// Wait until `len` bytes fit both budgets; `None` once the server's
    /// budget is closed.
    pub(crate) async fn admit(&self, len: usize) -> Option<Held> {
        let n = u32::try_from(len.max(1)).ok()?;
        let conn = Arc::clone(&self.conn).acquire_many_owned(n).await.ok()?;
        let server = Arc::clone(&self.server).acquire_many_owned(n).await.ok()?;
        Some((conn, server))
    }

    /// [`Admission::admit`] when it need not wait.
    pub(crate) fn try_admit(&self, len: usize) -> Option<Held> {
        let n = u32::try_from(len.max(1)).ok()?;
        let conn = Arc::clone(&self.conn).try_acquire_many_owned(n).ok()?;
        let server = Arc::clone(&self.server).try_acquire_many_owned(n).ok()?;
        Some((conn, server))
    }

    /// Called by the engine after each frame: true the first time the
    /// connection has an authenticated session.
    pub(crate) fn note_logon(&self, conn: &Connection) -> bool {
        if self.logged_on.load(Ordering::Relaxed) || !conn.authenticated() {
            return false;
        }
        self.conn.add_permits(self.grown);
        self.logged_on.store(true, Ordering::Release);
        true
    }
}

/// The frame length a Direct TCP prefix announces (MS-SMB2 2.1), or `None`
/// after logging why the connection ends.
pub(crate) fn announced_len(prefix: [u8; 4], max: usize, peer: Option<SocketAddr>) -> Option<usize> {
    match frame_len(prefix, max) {
        Ok(l) => Some(l),
        Err(FrameError::TooLong(l)) => {
            info!(?peer, len = l, max, "frame above the maximum; closing");
            None
        }
        Err(FrameError::BadType(t)) => {
            info!(?peer, kind = t, "not a Direct TCP session message; closing");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use smbq_server::ServerConfig;

    fn server(budget: usize) -> Server {
        let mut config = ServerConfig::default();
        config.limits.memory_budget = budget;
        Server::new(config, smbq_auth::UserDb::new()).expect("server")
    }

    /// Whether `admit` would wait (it resolves at once when it may not).
    async fn waits(adm: &Admission, len: usize) -> bool {
        tokio::time::timeout(Duration::from_millis(50), adm.admit(len)).await.is_err()
    }

    #[tokio::test]
    async fn before_logon_two_small_frames_wait_for_the_engine() {
        let srv = server(1 << 30);
        let adm = Admission::new(&srv);
        let l = &srv.config.limits;
        assert_eq!(adm.max_frame(), l.preauth_max_frame());
        assert!(adm.max_frame() < 128 << 10, "pre-logon frames stay small");
        let first = adm.admit(l.preauth_max_frame()).await.expect("budget open");
        let _second = adm.admit(l.preauth_max_frame()).await.expect("budget open");
        assert!(waits(&adm, 1).await, "a third frame waits while two are unhandled");
        drop(first);
        assert!(!waits(&adm, 1).await, "handling one lets the next in");
    }

    #[tokio::test]
    async fn the_server_wide_budget_bounds_all_connections_together() {
        let l = smbq_server::Limits::default();
        let srv = server(l.max_frame());
        let (a, b) = (Admission::new(&srv), Admission::new(&srv));
        a.conn.add_permits(a.grown); // as at logon
        let held = a.admit(l.max_frame() - 1000).await.expect("budget open");
        let rest = tokio::time::timeout(Duration::from_secs(5), b.admit(1000)).await;
        assert!(matches!(rest, Ok(Some(_))), "what is left of the budget is given");
        assert!(waits(&b, 1000).await, "another connection waits once the budget is spent");
        drop(held);
        assert!(!waits(&b, 1000).await, "and goes on once the first connection's frame is handled");
    }
}
