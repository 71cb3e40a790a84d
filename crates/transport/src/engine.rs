//! A connection's engine: the sans-IO [`Connection`] driven by its events
//! (frames, the TCP socket's bytes, notices from other connections, its
//! timer, jobs done), as a task while the connection is idle and on a
//! blocking thread while it is busy; and the rule that sizes the runtime's
//! blocking pool for it ([`max_blocking_threads`]).

use crate::connection::Hooks;
use crate::frame::{Admission, Frame};
use crate::tcp::input::{TcpInput, Wake};
use crate::writer::Direct;
use smbq_server::job::JobDone;
use smbq_server::{Connection, Server, TransportInfo};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tracing::{debug, info};

/// Blocking threads beyond one per connection (see [`max_blocking_threads`]).
const BLOCKING_HEADROOM: usize = 16;

/// The blocking threads (`tokio::runtime::Builder::max_blocking_threads`)
/// of a runtime serving at most `max_connections` connections.
///
/// A busy connection's engine holds one blocking thread, and over TCP it
/// may wait there for the server-wide memory budget
/// (`limits.memory_budget`), which other connections' frames hold until
/// their engines, each on a blocking thread of its own, have handled them.
/// With fewer threads than connections, every thread could be held by an
/// engine waiting so while the engines that would free the budget wait for
/// a thread: one per connection rules that out. The headroom is for the
/// jobs engines hand to the pool (a FLUSH's fsync) and the runtime's own
/// blocking work. Idle connections hold no thread, so the threads in use
/// follow the load.
pub const fn max_blocking_threads(max_connections: usize) -> usize {
    max_connections.saturating_add(BLOCKING_HEADROOM)
}

/// Where the engine's frames come from.
pub(crate) enum Input {
    Frames(mpsc::Receiver<Frame>),
    Tcp(TcpInput),
}

/// What wakes a connection's engine.
pub(crate) enum Event {
    /// A frame, or `None` when the input ended.
    Frame(Option<Frame>),
    /// The TCP socket may have bytes: go and look.
    Readable,
    Notice,
    Timeout,
    /// A job done on the pool (a FLUSH's fsync).
    Job(JobDone),
}

/// A connection's engine and its ends of the channels, moved between the
/// async task that waits and the blocking thread that works.
struct Engine {
    conn: Connection,
    input: Input,
    peer: Option<SocketAddr>,
    tx: mpsc::Sender<(u16, Vec<u8>)>,
    direct: Option<Direct>,
    adm: Arc<Admission>,
    hooks: Hooks,
    notices: Arc<tokio::sync::Notify>,
    /// Jobs done on the blocking pool come back here.
    done_tx: mpsc::UnboundedSender<JobDone>,
    done_rx: mpsc::UnboundedReceiver<JobDone>,
}

/// A busy connection keeps its thread this long after its last event,
/// so a stream of requests is handled without a hand-off per request.
const BUSY_LINGER: Duration = Duration::from_millis(20);

impl Engine {
    /// The next event: a frame, a notice from another connection, or the
    /// engine's own timer.
    async fn next(&mut self) -> Event {
        let deadline = self.conn.poll_timeout();
        let sleep = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d.into()).await,
                None => std::future::pending().await,
            }
        };
        let Engine { input, tx, notices, done_rx, .. } = self;
        let input = async {
            match input {
                Input::Frames(rx) => Event::Frame(rx.recv().await),
                Input::Tcp(t) => t.readable().await,
            }
        };
        tokio::select! {
            ev = input => ev,
            _ = notices.notified() => Event::Notice,
            Some(d) = done_rx.recv() => Event::Job(d),
            _ = sleep => Event::Timeout,
            // The writer is gone (the peer stopped reading).
            _ = tx.closed() => Event::Frame(None),
        }
    }

    /// An event that is there already, taken without waiting (and without
    /// a timer): while a connection is busy most are.
    fn ready(&mut self, rt: &tokio::runtime::Handle) -> Option<Event> {
        if let Ok(d) = self.done_rx.try_recv() {
            return Some(Event::Job(d));
        }
        let notified = std::pin::pin!(self.notices.notified());
        if notified.poll(&mut std::task::Context::from_waker(std::task::Waker::noop())).is_ready() {
            return Some(Event::Notice);
        }
        let frame = match &mut self.input {
            Input::Frames(rx) => match rx.try_recv() {
                Ok(f) => Some(Event::Frame(Some(f))),
                Err(mpsc::error::TryRecvError::Disconnected) => Some(Event::Frame(None)),
                Err(mpsc::error::TryRecvError::Empty) => None,
            },
            Input::Tcp(t) => t.try_frame(&self.adm, rt, self.peer),
        };
        // Else a timer that is due (one that stays due cannot hold up the rest).
        frame.or_else(|| self.conn.poll_timeout().is_some_and(|d| d <= Instant::now()).then_some(Event::Timeout))
    }

    /// The next event while busy: one that is there, or one that comes
    /// within [`BUSY_LINGER`]; `None` once the connection is quiet.
    fn next_busy(&mut self, rt: &tokio::runtime::Handle) -> Option<Event> {
        if let Some(ev) = self.ready(rt) {
            return Some(ev);
        }
        let quiet = Instant::now() + BUSY_LINGER;
        loop {
            match &self.input {
                Input::Frames(_) => {
                    return rt.block_on(async { tokio::time::timeout(BUSY_LINGER, self.next()).await }).ok();
                }
                Input::Tcp(t) => t.wait(self.conn.poll_timeout().map_or(quiet, |d| d.min(quiet))),
            }
            if let Some(ev) = self.ready(rt) {
                return Some(ev);
            }
            if Instant::now() >= quiet {
                return None;
            }
        }
    }

    /// What wakes a busy TCP engine besides its socket.
    fn wake(&self) -> Option<Arc<Wake>> {
        match &self.input {
            Input::Tcp(t) => Some(Arc::clone(t.wake())),
            Input::Frames(_) => None,
        }
    }

    /// Handle `ev` and what follows it within [`BUSY_LINGER`], on this
    /// (blocking) thread; `Some(reason)` when the connection ends.
    fn work(&mut self, mut ev: Event, rt: &tokio::runtime::Handle) -> Option<String> {
        loop {
            let result = match ev {
                Event::Frame(None) => return Some("peer closed".to_string()),
                Event::Readable => Ok(()),
                Event::Notice => {
                    self.conn.handle_notices(Instant::now());
                    Ok(())
                }
                Event::Frame(Some(mut f)) => {
                    let r = self.conn.handle_frame_on(Instant::now(), f.stream, &mut f.head, &f.tail);
                    if self.adm.note_logon(&self.conn) {
                        if let Some(f) = self.hooks.on_logon.take() {
                            f();
                        }
                    }
                    if self.conn.streams() > 1 {
                        if let Some(f) = self.hooks.on_streams.take() {
                            f(self.conn.streams());
                        }
                    }
                    r
                }
                Event::Timeout => self.conn.handle_timeout(Instant::now()),
                Event::Job(d) => {
                    self.conn.handle_job_done(d);
                    Ok(())
                }
            };
            // Blocking work goes to the pool (bounded: max_blocking_threads);
            // the connection goes on meanwhile.
            while let Some(job) = self.conn.poll_job() {
                let tx = self.done_tx.clone();
                let wake = self.wake();
                rt.spawn_blocking(move || {
                    let _ = tx.send(job.run());
                    if let Some(w) = wake {
                        w.signal();
                    }
                });
            }
            while let Some((stream, out)) = self.conn.poll_transmit_on() {
                let left = match &self.direct {
                    Some(d) => match d.try_send(out) {
                        Ok(left) => left,
                        Err(e) => return Some(format!("send failed: {e}")),
                    },
                    None => Some(out),
                };
                if let Some(out) = left {
                    if let Some(d) = &self.direct {
                        d.queued.fetch_add(1, Ordering::AcqRel);
                    }
                    if self.tx.blocking_send((stream, out)).is_err() {
                        return Some("peer stopped reading".to_string());
                    }
                }
            }
            if let Err(e) = result {
                return Some(e.to_string());
            }
            ev = self.next_busy(rt)?;
        }
    }
}

/// Run one connection's engine given its framed input and output channels.
/// Returns when the peer goes away, the engine closes it, or it times out.
///
/// An idle connection holds no thread: the engine waits as a task. An
/// event moves it to a blocking thread (its file I/O and crypto block),
/// where it stays while events keep coming, and back once the
/// connection has been quiet for [`BUSY_LINGER`]: the threads in use
/// follow the connections that are busy, not those that are open.
pub(crate) async fn run_engine(
    server: Arc<Server>,
    info: TransportInfo,
    input: Input,
    (tx, direct): (mpsc::Sender<(u16, Vec<u8>)>, Option<Direct>),
    adm: Arc<Admission>,
    hooks: Hooks,
) {
    let peer = info.peer;
    let mut conn = Connection::new(server, info, Instant::now());
    conn.set_offload(true);
    // Other connections post oplock breaks and wake-ups to this one.
    let notices = Arc::new(tokio::sync::Notify::new());
    let (done_tx, done_rx) = mpsc::unbounded_channel();
    let mut engine =
        Engine { conn, input, peer, tx, direct, adm, hooks, notices, done_tx, done_rx };
    let (n, wake) = (Arc::clone(&engine.notices), engine.wake());
    engine.conn.set_waker(Arc::new(move || {
        n.notify_one();
        if let Some(w) = &wake {
            w.signal();
        }
    }));
    let rt = tokio::runtime::Handle::current();
    let reason = loop {
        if let Input::Tcp(t) = &mut engine.input {
            if let Err(e) = t.register() {
                break format!("cannot wait for the socket: {e}");
            }
        }
        let ev = engine.next().await;
        if let Input::Tcp(t) = &mut engine.input {
            t.deregister();
        }
        let rt = rt.clone();
        let busy = tokio::task::spawn_blocking(move || match engine.work(ev, &rt) {
            None => Ok(engine),
            Some(reason) => {
                // The connection's opens are closed here, on the thread
                // that saw its end, before anything else is waited for:
                // a client that drops a connection and opens its files
                // again from a new one (smbtorture between subtests) must
                // not find them open, as it does not on smbd. A hop back
                // to the task and out to the pool again (file I/O) cost
                // two wake-ups, several milliseconds on a loaded machine:
                // longer than the new connection's NEGOTIATE, SESSION_SETUP,
                // TREE_CONNECT and CREATE.
                drop(engine);
                Err(reason)
            }
        });
        match busy.await {
            Ok(Ok(e)) => engine = e,
            Ok(Err(reason)) => break reason,
            Err(_) => break "engine failed".to_string(),
        }
    };
    if reason == "peer closed" {
        debug!(?peer, "connection closed by peer");
    } else {
        info!(?peer, %reason, "closing connection");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_connection_may_be_busy_and_jobs_still_find_a_thread() {
        for n in [1, smbq_server::Limits::default().max_connections, 1 << 20] {
            assert!(max_blocking_threads(n) > n, "{n} connections");
        }
        assert_eq!(max_blocking_threads(usize::MAX), usize::MAX, "no overflow");
    }
}
