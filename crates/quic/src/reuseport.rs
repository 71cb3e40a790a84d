//! Several QUIC endpoints on one UDP port, to spread connections over
//! cores: each endpoint has its own socket in one SO_REUSEPORT group, and
//! the kernel hands each datagram to the socket whose endpoint issued the
//! connection ID the datagram is addressed to.
//!
//! The kernel's own choice, a hash of the address 4-tuple, would send a
//! client's datagrams to another endpoint after its address changes (RFC
//! 9000 section 9, connection migration), and that endpoint knows nothing
//! of the connection. So the group gets a classic BPF program
//! (SO_ATTACH_REUSEPORT_CBPF, socket(7)) that reads the first byte of the
//! destination connection ID (RFC 9000 section 17: byte 6 of a long-header
//! packet, byte 1 of a short-header one) and answers that byte modulo the
//! number of sockets, and endpoint `i` issues only connection IDs whose
//! first byte is `i` modulo that number ([`SteeringCids`]). A client's
//! first Initial carries an ID the client chose, which lands on any one
//! socket; that endpoint takes the connection, and from its first answer
//! on the client addresses the IDs it issues.

use quinn::{ConnectionId, ConnectionIdGenerator};
use std::hash::{BuildHasher, RandomState};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

/// The most endpoints one port can have: the steering byte's values.
pub const MAX_ENDPOINTS: usize = 256;

/// `n` UDP sockets bound to `addr` (its port: the first socket's, when
/// `addr` has port 0) in one SO_REUSEPORT group whose datagrams are
/// steered by connection ID: socket `i` gets the datagrams addressed to
/// connection IDs that [`SteeringCids::new(i, n)`] issues. One socket is
/// an ordinary socket, outside any group.
pub fn sockets(addr: SocketAddr, buffer: usize, n: usize) -> io::Result<Vec<UdpSocket>> {
    if !(1..=MAX_ENDPOINTS).contains(&n) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{n} endpoints: between 1 and {MAX_ENDPOINTS}")));
    }
    if n == 1 {
        return Ok(vec![crate::socket(addr, buffer)?]);
    }
    let first = crate::bind(addr, buffer, true)?;
    attach_steering(&first, n)?;
    let addr = first.local_addr()?;
    let mut all = vec![first];
    for _ in 1..n {
        all.push(crate::bind(addr, buffer, true)?);
    }
    Ok(all)
}

/// The group's program, in classic BPF (linux/filter.h): A = byte 0; if
/// its high bit is set (long header), A = byte 6, else A = byte 1; return
/// A modulo `n`. The kernel runs it with the packet at the UDP payload; a
/// datagram too short for the load ends the program with 0 (socket 0).
fn attach_steering(s: &UdpSocket, n: usize) -> io::Result<()> {
    const LDB_ABS: u16 = (libc::BPF_LD | libc::BPF_B | libc::BPF_ABS) as u16;
    const JSET: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
    const JA: u16 = (libc::BPF_JMP | libc::BPF_JA) as u16;
    const MOD: u16 = (libc::BPF_ALU | libc::BPF_MOD | libc::BPF_K) as u16;
    const RET_A: u16 = (libc::BPF_RET | libc::BPF_A) as u16;
    let op = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let mut prog = [
        op(LDB_ABS, 0, 0, 0),
        op(JSET, 0, 2, 0x80),
        op(LDB_ABS, 0, 0, 6),
        op(JA, 0, 0, 1),
        op(LDB_ABS, 0, 0, 1),
        op(MOD, 0, 0, n as u32),
        op(RET_A, 0, 0, 0),
    ];
    // linux/asm-generic/socket.h (x86, arm, riscv; not mips, sparc).
    const SO_ATTACH_REUSEPORT_CBPF: libc::c_int = 51;
    let fprog = libc::sock_fprog { len: prog.len() as u16, filter: prog.as_mut_ptr() };
    use std::os::fd::AsRawFd;
    // SAFETY: the option takes a sock_fprog, whose filter points at
    // `prog`, which outlives the call (the kernel copies the program).
    unsafe { crate::socket_option(s.as_raw_fd(), SO_ATTACH_REUSEPORT_CBPF, &fprog) }
}

/// Connection IDs of endpoint `index` of `count` on one port: 8 bytes, the
/// first a random multiple of `count` plus `index` (what the group's
/// program steers by), two random bytes, and five bytes of a keyed hash of
/// the first three, which [`ConnectionIdGenerator::validate`] checks, as
/// quinn's default generator does, so that datagrams that are not QUIC
/// cost little. With one endpoint the first byte is random too.
pub struct SteeringCids {
    index: u8,
    count: usize,
    key: RandomState,
}

impl SteeringCids {
    /// `count` in 1..=[`MAX_ENDPOINTS`], `index` below it.
    pub fn new(index: usize, count: usize) -> SteeringCids {
        debug_assert!(index < count && count <= MAX_ENDPOINTS);
        SteeringCids { index: index as u8, count: count.clamp(1, MAX_ENDPOINTS), key: RandomState::new() }
    }

    fn signature(&self, head: &[u8]) -> [u8; 5] {
        let h = self.key.hash_one(head).to_le_bytes();
        [h[0], h[1], h[2], h[3], h[4]]
    }
}

impl ConnectionIdGenerator for SteeringCids {
    fn generate_cid(&mut self) -> ConnectionId {
        let mut r = [0u8; 3];
        // A CID needs no cryptographic quality here beyond being hard to
        // guess; fall back to the hasher's keyed output if getrandom fails.
        if getrandom(&mut r).is_err() {
            r.copy_from_slice(&self.key.hash_one(std::time::Instant::now()).to_le_bytes()[..3]);
        }
        let slots = (MAX_ENDPOINTS - usize::from(self.index)).div_ceil(self.count);
        let first = usize::from(r[0]) % slots * self.count + usize::from(self.index);
        let mut cid = [first as u8, r[1], r[2], 0, 0, 0, 0, 0];
        let sig = self.signature(&cid[..3]);
        cid[3..].copy_from_slice(&sig);
        ConnectionId::new(&cid)
    }

    fn validate(&self, cid: &ConnectionId) -> Result<(), quinn_proto::InvalidCid> {
        if cid.len() == 8 && usize::from(cid[0]) % self.count == usize::from(self.index) && cid[3..] == self.signature(&cid[..3]) {
            Ok(())
        } else {
            Err(quinn_proto::InvalidCid)
        }
    }

    fn cid_len(&self) -> usize {
        8
    }

    fn cid_lifetime(&self) -> Option<Duration> {
        None
    }
}

fn getrandom(buf: &mut [u8]) -> io::Result<()> {
    // SAFETY: getrandom(2) writes at most buf.len() bytes into buf.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n == buf.len() as isize {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_carry_their_endpoint_and_validate_only_there() {
        for count in [1, 2, 3, 7, 256] {
            let mut gens: Vec<SteeringCids> = (0..count).map(|i| SteeringCids::new(i, count)).collect();
            for i in 0..count {
                for _ in 0..50 {
                    let cid = gens[i].generate_cid();
                    assert_eq!(usize::from(cid[0]) % count, i, "count {count}");
                    assert!(gens[i].validate(&cid).is_ok());
                    if count > 1 {
                        assert!(gens[(i + 1) % count].validate(&cid).is_err(), "another endpoint's id");
                    }
                    let mut forged = cid.to_vec();
                    forged[7] ^= 1;
                    assert!(gens[i].validate(&ConnectionId::new(&forged)).is_err(), "bad signature");
                }
            }
        }
    }

    /// Datagrams shaped as QUIC short- and long-header packets reach the
    /// socket the connection ID's first byte names, whatever the sender's
    /// port; the kernel's hash alone would spread them over both.
    #[test]
    fn the_group_steers_datagrams_by_connection_id() {
        let n = 3;
        let socks = sockets("127.0.0.1:0".parse().expect("addr"), 1 << 20, n).expect("group");
        let port = socks[0].local_addr().expect("addr").port();
        for s in &socks {
            assert_eq!(s.local_addr().expect("addr").port(), port);
            s.set_read_timeout(Some(Duration::from_millis(500))).expect("timeout");
        }
        let target: SocketAddr = ([127, 0, 0, 1], port).into();
        let senders: Vec<UdpSocket> = (0..8).map(|_| UdpSocket::bind("127.0.0.1:0").expect("bind")).collect();
        for (k, tx) in senders.iter().enumerate() {
            for want in 0..n {
                let cid0 = (want + n * k) as u8;
                let short = [0x40, cid0, 1, 2, 3, 4, 5, 6, 7, 0xaa];
                let long = [0xc0, 0, 0, 0, 1, 8, cid0, 1, 2, 3, 4, 5, 6, 7, 0xbb];
                for pkt in [&short[..], &long[..]] {
                    tx.send_to(pkt, target).expect("send");
                    let mut buf = [0u8; 64];
                    let (len, _) = socks[want].recv_from(&mut buf).expect("datagram on the steered socket");
                    assert_eq!(&buf[..len], pkt);
                }
            }
        }
        for s in &socks {
            s.set_read_timeout(Some(Duration::from_millis(50))).expect("timeout");
            assert!(s.recv_from(&mut [0u8; 64]).is_err(), "a datagram went to a second socket");
        }
    }
}
