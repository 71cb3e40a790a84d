//! Where MTU discovery's upper bound comes from: the MTU of the route to a
//! peer ([`route_mtu`], for a client, which knows its server), and the
//! MTUs of this host's interfaces ([`interfaces`], for a server, which
//! does not know its peers before they come).
//!
//! The route: a UDP socket connect(2)ed to the peer sends nothing (a UDP
//! connect only looks the route and the source address up) and answers
//! getsockopt IP_MTU (IPv4) or IPV6_MTU (IPv6) with the MTU of the route it
//! got: the outgoing interface's, a lower one set on the route (`ip route
//! ... mtu N`), or one the kernel has learnt from an ICMP "packet too big"
//! (its path MTU cache). A peer that is an address of this host is reached
//! through `lo`, and so gets loopback's MTU, as its packets do.
//!
//! The interfaces: getifaddrs(3) lists every address with its interface
//! and flags; SIOCGIFMTU gives the interface's MTU.
//!
//! Both ask the network namespace of the calling thread (getifaddrs and
//! the sockets are made in it); nothing here reads /sys, which shows the
//! namespace /sys was mounted in.

use std::ffi::CStr;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsRawFd;

/// IPv4's header without options.
pub const IPV4_HEADER: u32 = 20;
/// IPv6's fixed header.
pub const IPV6_HEADER: u32 = 40;
/// UDP's header.
pub const UDP_HEADER: u32 = 8;

/// The largest UDP payload one IP packet of `mtu` bytes carries to or from
/// `ip` (IPv4 or IPv6 header by `ip`'s family, IPv4-mapped IPv6 addresses
/// counting as IPv4), within QUIC's 1200-byte minimum and
/// [`crate::MAX_DATAGRAM`].
pub fn udp_payload(mtu: u32, ip: IpAddr) -> u16 {
    let header = if ip.to_canonical().is_ipv4() { IPV4_HEADER } else { IPV6_HEADER };
    let payload = mtu.saturating_sub(header + UDP_HEADER).clamp(1200, crate::MAX_DATAGRAM.into());
    u16::try_from(payload).unwrap_or(crate::MAX_DATAGRAM)
}

/// The MTU of the route to `peer` (an IPv4-mapped IPv6 address is taken
/// as the IPv4 address it maps): an error when there is no route (e.g.
/// ENETUNREACH) or `peer` is unspecified.
pub fn route_mtu(peer: IpAddr) -> io::Result<u32> {
    let peer = peer.to_canonical();
    if peer.is_unspecified() {
        // connect(2) to 0.0.0.0 or :: reaches this host: no path to
        // measure.
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "unspecified address"));
    }
    use socket2::{Domain, Protocol, Socket, Type};
    let to = SocketAddr::new(peer, 9);
    let s = Socket::new(Domain::for_address(to), Type::DGRAM, Some(Protocol::UDP))?;
    s.connect(&to.into())?;
    let (level, opt) = if peer.is_ipv4() { (libc::IPPROTO_IP, libc::IP_MTU) } else { (libc::IPPROTO_IPV6, libc::IPV6_MTU) };
    let mut mtu: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the option writes one c_int, `len` says so; `s` is open.
    let r = unsafe { libc::getsockopt(s.as_raw_fd(), level, opt, (&mut mtu as *mut libc::c_int).cast(), &mut len) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    u32::try_from(mtu).map_err(|_| io::Error::other(format!("negative MTU {mtu}")))
}

/// One address of one of this host's interfaces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    pub addr: IpAddr,
    pub mtu: u32,
    /// IFF_UP.
    pub up: bool,
    /// IFF_LOOPBACK.
    pub loopback: bool,
}

/// Every IPv4 and IPv6 address of this host's interfaces (in the calling
/// thread's network namespace), with its interface's MTU; an interface
/// with several addresses appears once for each.
pub fn interfaces() -> io::Result<Vec<Interface>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head we free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let probe = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None);
    let mut out = Vec::new();
    let mut at = head;
    while !at.is_null() {
        // SAFETY: `at` is a node of the list getifaddrs made, not yet freed.
        let ifa = unsafe { &*at };
        at = ifa.ifa_next;
        // SAFETY: ifa_addr is null or points to a sockaddr of the family
        // it names, sockaddr_in for AF_INET and sockaddr_in6 for AF_INET6.
        let addr = unsafe { sockaddr_ip(ifa.ifa_addr) };
        let (Some(addr), false) = (addr, ifa.ifa_name.is_null()) else { continue };
        // SAFETY: ifa_name is a NUL-terminated string of the list.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) };
        let Ok(probe) = &probe else { break };
        let Some(mtu) = interface_mtu(probe.as_raw_fd(), name) else { continue };
        let flags = ifa.ifa_flags;
        out.push(Interface {
            name: name.to_string_lossy().into_owned(),
            addr,
            mtu,
            up: flags & libc::IFF_UP as libc::c_uint != 0,
            loopback: flags & libc::IFF_LOOPBACK as libc::c_uint != 0,
        });
    }
    // SAFETY: `head` came from getifaddrs and nothing borrows from it now.
    unsafe { libc::freeifaddrs(head) };
    probe?;
    Ok(out)
}

/// The IP address in a sockaddr of family AF_INET or AF_INET6.
///
/// # Safety
/// `sa` is null or points to a sockaddr as large as its family's.
unsafe fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<IpAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: by the caller's contract, for the family read first.
    unsafe {
        match i32::from((*sa).sa_family) {
            libc::AF_INET => {
                let sin = &*sa.cast::<libc::sockaddr_in>();
                Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr))))
            }
            libc::AF_INET6 => {
                let sin6 = &*sa.cast::<libc::sockaddr_in6>();
                Some(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)))
            }
            _ => None,
        }
    }
}

/// SIOCGIFMTU of interface `name`, through socket `fd`.
fn interface_mtu(fd: std::os::fd::RawFd, name: &CStr) -> Option<u32> {
    let bytes = name.to_bytes();
    // SAFETY: ifreq is plain data; all zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    if bytes.len() >= req.ifr_name.len() {
        return None;
    }
    for (d, &s) in req.ifr_name.iter_mut().zip(bytes) {
        *d = s as libc::c_char;
    }
    // SAFETY: SIOCGIFMTU reads the name and writes ifru_mtu of one ifreq.
    if unsafe { libc::ioctl(fd, libc::SIOCGIFMTU, &mut req) } != 0 {
        return None;
    }
    // SAFETY: SIOCGIFMTU succeeded, so ifru_mtu is the member written.
    u32::try_from(unsafe { req.ifr_ifru.ifru_mtu }).ok()
}

/// The largest UDP payload a server listening on `local` may be sent or
/// send, from its interfaces: the MTU of the interface holding `local`,
/// or, when `local` is unspecified, the largest MTU among the interfaces
/// that are up, not loopback and hold an address of `local`'s family (of
/// either family for `::`, whose socket takes IPv4 too), less the headers
/// ([`udp_payload`]; the IPv6 header for `::`). None when no such
/// interface is found.
pub fn listen_payload(local: IpAddr) -> Option<u16> {
    let local = local.to_canonical();
    let list = interfaces().ok()?;
    let fits = |i: &&Interface| {
        if local.is_unspecified() {
            i.up && !i.loopback && (local.is_ipv6() || i.addr.is_ipv4())
        } else {
            i.addr == local
        }
    };
    let mtu = list.iter().filter(fits).map(|i| i.mtu).max()?;
    Some(udp_payload(mtu, local))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_less_headers_within_quic_bounds() {
        let v4: IpAddr = "10.0.0.1".parse().expect("ip");
        let v6: IpAddr = "fd00::1".parse().expect("ip");
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().expect("ip");
        assert_eq!(udp_payload(1500, v4), 1472);
        assert_eq!(udp_payload(1500, v6), 1452);
        assert_eq!(udp_payload(1500, mapped), 1472);
        assert_eq!(udp_payload(9000, v4), 8972);
        assert_eq!(udp_payload(9000, v6), 8952);
        assert_eq!(udp_payload(65_536, v4), crate::MAX_DATAGRAM);
        assert_eq!(udp_payload(576, v4), 1200);
        assert_eq!(udp_payload(0, v6), 1200);
    }

    #[test]
    fn loopback_route_and_interface() {
        // lo's 65,536, capped at the largest IPv4 packet (IP_MAX_MTU).
        assert_eq!(route_mtu("127.0.0.1".parse().expect("ip")).expect("route to loopback"), 65_535);
        let lo = interfaces().expect("getifaddrs");
        assert!(lo.iter().any(|i| i.loopback && i.addr == IpAddr::V4(Ipv4Addr::LOCALHOST) && i.mtu == 65_536), "{lo:?}");
        assert_eq!(listen_payload(Ipv4Addr::LOCALHOST.into()), Some(crate::MAX_DATAGRAM));
        assert!(route_mtu(Ipv4Addr::UNSPECIFIED.into()).is_err());
    }

    /// Two network namespaces joined by a veth pair of `mtu` bytes,
    /// 10.79.N.1/24 and fd79:N::1/64 in the first, .2 and ::2 in the
    /// second; dropping it deletes both namespaces (and the pair).
    struct VethPair {
        ns: [String; 2],
    }

    impl VethPair {
        fn new(mtu: u32) -> VethPair {
            static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 250 + 1;
            let pid = std::process::id();
            let pair = VethPair { ns: [format!("smbq-quic-{pid}-{n}-a"), format!("smbq-quic-{pid}-{n}-b")] };
            let mtu = mtu.to_string();
            for ns in &pair.ns {
                ip(&["netns", "add", ns]);
            }
            let [a, b] = &pair.ns;
            ip(&["link", "add", "smbqveth", "netns", a, "type", "veth", "peer", "name", "smbqveth", "netns", b]);
            for (i, ns) in pair.ns.iter().enumerate() {
                ip(&["-n", ns, "addr", "add", &format!("10.79.{n}.{}/24", i + 1), "dev", "smbqveth"]);
                ip(&["-n", ns, "addr", "add", &format!("fd79:{n}::{}/64", i + 1), "dev", "smbqveth", "nodad"]);
                ip(&["-n", ns, "link", "set", "dev", "smbqveth", "mtu", &mtu, "up"]);
                ip(&["-n", ns, "link", "set", "dev", "lo", "up"]);
            }
            pair
        }

        /// `f` on a thread in the first namespace.
        fn in_first<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
            let path = format!("/var/run/netns/{}", self.ns[0]);
            std::thread::spawn(move || {
                let file = std::fs::File::open(&path).expect("namespace file");
                // SAFETY: setns on an open namespace fd; it moves this
                // thread alone.
                assert_eq!(unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) }, 0, "setns {path}");
                f()
            })
            .join()
            .expect("thread in the namespace")
        }
    }

    impl Drop for VethPair {
        fn drop(&mut self) {
            for ns in &self.ns {
                let _ = std::process::Command::new("ip").args(["netns", "del", ns]).status();
            }
        }
    }

    fn ip(args: &[&str]) {
        let out = std::process::Command::new("ip").args(args).output().expect("running ip (iproute2)");
        assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
    }

    fn root() -> bool {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        if !root {
            eprintln!("skipped: network namespaces need root");
        }
        root
    }

    /// The route's and the interfaces' MTU on a 9000-byte veth pair, and
    /// on a 1500-byte one, IPv4 and IPv6.
    #[test]
    fn veth_pair_mtu_sets_the_bound() {
        if !root() {
            return;
        }
        for mtu in [9000u32, 1500] {
            let pair = VethPair::new(mtu);
            let n = pair.ns[0].rsplit('-').nth(1).expect("n").to_string();
            let got = pair.in_first(move || {
                let peer4: IpAddr = format!("10.79.{n}.2").parse().expect("ip");
                let peer6: IpAddr = format!("fd79:{n}::2").parse().expect("ip");
                let own4: IpAddr = format!("10.79.{n}.1").parse().expect("ip");
                (
                    route_mtu(peer4).expect("route"),
                    crate::mtu_upper_bound(peer4),
                    crate::mtu_upper_bound(peer6),
                    crate::listen_mtu_upper_bound(Ipv4Addr::UNSPECIFIED.into()),
                    crate::listen_mtu_upper_bound(Ipv6Addr::UNSPECIFIED.into()),
                    crate::listen_mtu_upper_bound(own4),
                    // This namespace's own address is reached through lo.
                    crate::mtu_upper_bound(own4),
                    // No route beyond the pair's subnets.
                    crate::mtu_upper_bound("198.51.100.7".parse().expect("ip")),
                )
            });
            let (v4, v6) = (mtu - 28, mtu - 48);
            let v4 = u16::try_from(v4).expect("u16");
            let v6 = u16::try_from(v6).expect("u16");
            assert_eq!(got, (mtu, v4, v6, v4, v6, v4, crate::MAX_DATAGRAM, crate::ETHERNET_PAYLOAD), "MTU {mtu}");
        }
    }
}
