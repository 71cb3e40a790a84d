//! The engine's own reading of a TCP socket ([`TcpInput`]) and what wakes
//! it while it waits on its blocking thread ([`Wake`]).

use crate::engine::Event;
use crate::frame::{announced_len, Admission, Frame, Held};
use bytes::{Buf, BytesMut};
use rustix::event::{eventfd, poll, EventfdFlags, PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::net::{recv, RecvFlags};
use smbq_server::CONTROL_STREAM;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Instant;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// Spare room the reader keeps for small messages (larger frames reserve
/// their whole length).
const READ_AHEAD: usize = 64 * 1024;

/// An eventfd that wakes a busy TCP engine out of its poll(2) when another
/// connection posts it a notice or a job of its is done.
pub(crate) struct Wake(OwnedFd);

impl Wake {
    fn new() -> std::io::Result<Wake> {
        Ok(Wake(eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)?))
    }

    pub(crate) fn signal(&self) {
        let _ = rustix::io::write(&self.0, &1u64.to_ne_bytes());
    }

    fn clear(&self) {
        let _ = rustix::io::read(&self.0, &mut [0u8; 8]);
    }
}

/// The socket's read side as the engine holds it.
enum ReadIo {
    /// Idle: registered with the runtime, which wakes the engine's task.
    Idle(AsyncFd<TcpStream>),
    /// Busy: not registered, so no runtime thread wakes for its bytes.
    Busy(TcpStream),
    /// The registration failed; the connection ends.
    Gone,
}

/// Over TCP the engine reads the socket itself. An idle connection waits
/// for bytes through the runtime (an epoll registration of its own, on a
/// duplicate of the socket's fd); a busy one drops that registration and
/// its blocking thread waits in poll(2) on the socket and a [`Wake`]: a
/// request wakes the thread that handles it, and nothing else (no reader
/// task, no hand-off between threads). The bytes are read into one
/// buffer (one copy out of the socket) and each frame is split off it.
pub(crate) struct TcpInput {
    io: ReadIo,
    acc: BytesMut,
    /// Length and budget share of the frame whose body is being read.
    body: Option<(usize, Held)>,
    wake: Arc<Wake>,
}

impl TcpInput {
    /// Read `sock` (busy: the engine starts on its thread); `Err` when
    /// there is no eventfd for it.
    pub(crate) fn new(sock: TcpStream) -> std::io::Result<TcpInput> {
        Ok(TcpInput { io: ReadIo::Busy(sock), acc: BytesMut::new(), body: None, wake: Arc::new(Wake::new()?) })
    }

    /// What wakes the engine while it is busy.
    pub(crate) fn wake(&self) -> &Arc<Wake> {
        &self.wake
    }

    fn socket(&self) -> Option<&TcpStream> {
        match &self.io {
            ReadIo::Idle(a) => Some(a.get_ref()),
            ReadIo::Busy(s) => Some(s),
            ReadIo::Gone => None,
        }
    }

    /// Register with the runtime (in its context) before the engine waits as a task.
    pub(crate) fn register(&mut self) -> std::io::Result<()> {
        if let ReadIo::Busy(s) = std::mem::replace(&mut self.io, ReadIo::Gone) {
            self.io = ReadIo::Idle(crate::tcp::register(s, Interest::READABLE)?);
        }
        Ok(())
    }

    pub(crate) fn deregister(&mut self) {
        if let ReadIo::Idle(a) = std::mem::replace(&mut self.io, ReadIo::Gone) {
            self.io = ReadIo::Busy(a.into_inner());
        }
    }

    /// Wait (as a task) until the socket may have bytes.
    pub(crate) async fn readable(&self) -> Event {
        match &self.io {
            ReadIo::Idle(a) => match a.readable().await {
                Ok(_) => Event::Readable,
                Err(_) => Event::Frame(None),
            },
            ReadIo::Busy(_) => Event::Readable,
            ReadIo::Gone => Event::Frame(None),
        }
    }

    /// The next frame if the socket has all of it now (without waiting,
    /// except for the memory budget); `Frame(None)` when the peer is gone
    /// or breaks the framing or the limits.
    pub(crate) fn try_frame(&mut self, adm: &Admission, rt: &tokio::runtime::Handle, peer: Option<SocketAddr>) -> Option<Event> {
        loop {
            if self.body.is_none() && self.acc.len() >= 4 {
                let prefix = [self.acc[0], self.acc[1], self.acc[2], self.acc[3]];
                let Some(len) = announced_len(prefix, adm.max_frame(), peer) else { return Some(Event::Frame(None)) };
                // The budget is taken before the body is read, as it comes.
                let Some(held) = adm.try_admit(len).or_else(|| rt.block_on(adm.admit(len))) else {
                    return Some(Event::Frame(None));
                };
                self.body = Some((len, held));
            }
            let want = self.body.as_ref().map_or(4, |(len, _)| 4 + len);
            if self.acc.len() >= want {
                if let Some((len, held)) = self.body.take() {
                    self.acc.advance(4);
                    return Some(Event::Frame(Some(Frame { stream: CONTROL_STREAM, head: self.acc.split_to(len), tail: Vec::new(), _held: held })));
                }
            }
            // Nothing is allocated before the peer sends (an idle connection
            // holds no buffer); from then on read ahead at least READ_AHEAD.
            if self.acc.capacity() < want {
                self.acc.reserve((want - self.acc.len()).max(READ_AHEAD));
            } else if self.acc.capacity() == self.acc.len() {
                self.acc.reserve(READ_AHEAD);
            }
            let sock = match &self.io {
                ReadIo::Idle(a) => a.get_ref(),
                ReadIo::Busy(s) => s,
                ReadIo::Gone => return Some(Event::Frame(None)),
            };
            match recv(sock, self.acc.spare_capacity_mut(), RecvFlags::empty()) {
                Ok((([], _), _)) => return Some(Event::Frame(None)),
                Ok(((read, _), _)) => {
                    let n = read.len();
                    // SAFETY: recv initialised `read`, the first `n` bytes
                    // of the spare capacity: the length grows by those only.
                    unsafe { self.acc.set_len(self.acc.len() + n) }
                }
                Err(Errno::AGAIN) => return None,
                Err(Errno::INTR) => {}
                Err(_) => return Some(Event::Frame(None)),
            }
        }
    }

    /// Wait on this (blocking) thread until the socket has bytes, the
    /// [`Wake`] is signalled, or `until`.
    pub(crate) fn wait(&self, until: Instant) {
        // No timeout (`None`) only for a wait too long for a timespec.
        let timeout = Timespec::try_from(until.saturating_duration_since(Instant::now())).ok();
        let woken = match self.socket() {
            Some(sock) => {
                let mut fds = [PollFd::new(sock, PollFlags::IN), PollFd::new(&self.wake.0, PollFlags::IN)];
                let _ = poll(&mut fds, timeout.as_ref());
                !fds[1].revents().is_empty()
            }
            None => {
                let mut fds = [PollFd::new(&self.wake.0, PollFlags::IN)];
                let _ = poll(&mut fds, timeout.as_ref());
                !fds[0].revents().is_empty()
            }
        };
        if woken {
            self.wake.clear();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use smbq_server::{Server, ServerConfig};
    use smbq_wire::framing::prefix;
    use std::io::Write;
    use std::time::Duration;

    /// A connected pair: the client's end, and the server's as the engine reads it.
    fn pair() -> (TcpStream, TcpInput) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        s.set_nonblocking(true).unwrap();
        (client, TcpInput::new(s).unwrap())
    }

    /// The next event once the bytes sent have arrived (loopback is quick,
    /// but not synchronous).
    fn next(input: &mut TcpInput, adm: &Admission, rt: &tokio::runtime::Handle) -> Option<Event> {
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(ev) = input.try_frame(adm, rt, None) {
                return Some(ev);
            }
            if Instant::now() >= until {
                return None;
            }
            input.wait(until);
        }
    }

    fn head(ev: Option<Event>) -> Vec<u8> {
        match ev {
            Some(Event::Frame(Some(f))) => f.head.to_vec(),
            _ => panic!("no frame"),
        }
    }

    #[test]
    fn frames_are_cut_from_the_bytes_as_they_come_and_the_peer_s_end_ends_them() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let server = Server::new(ServerConfig::default(), smbq_auth::UserDb::new()).unwrap();
        let adm = Admission::new(&server);
        let (mut client, mut input) = pair();
        assert!(input.try_frame(&adm, rt.handle(), None).is_none(), "nothing sent, nothing to wait for");

        let first: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        client.write_all(&prefix(first.len())).unwrap();
        client.write_all(&first[..300]).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert!(input.try_frame(&adm, rt.handle(), None).is_none(), "a partial frame waits for the rest");
        client.write_all(&first[300..]).unwrap();
        client.write_all(&prefix(3)).unwrap();
        client.write_all(b"abc").unwrap();
        assert_eq!(head(next(&mut input, &adm, rt.handle())), first);
        assert_eq!(head(next(&mut input, &adm, rt.handle())), b"abc");

        drop(client);
        assert!(matches!(next(&mut input, &adm, rt.handle()), Some(Event::Frame(None))));
    }

    #[test]
    fn a_busy_engine_s_wait_ends_when_woken() {
        let (_client, input) = pair();
        input.wake().signal();
        let t = Instant::now();
        input.wait(t + Duration::from_secs(10));
        assert!(t.elapsed() < Duration::from_secs(5), "the signal ends the wait");
        let t = Instant::now();
        input.wait(t + Duration::from_millis(50));
        assert!(t.elapsed() >= Duration::from_millis(50), "the signal was cleared: the next wait lasts");
    }
}
