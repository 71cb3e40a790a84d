//! Batches of datagrams without UDP GSO: one sendmmsg(2) for a batch that
//! quinn built for GSO (a run of equal-sized datagrams, the last perhaps
//! shorter), where the kernel or the device has no UDP segmentation
//! offload (before Linux 4.18, or switched off). quinn-udp then sends
//! one datagram per sendmsg(2); receiving, it always uses recvmmsg(2).

use quinn::udp::{EcnCodepoint, Transmit};
use std::io;
use std::net::IpAddr;
use std::os::fd::RawFd;

/// The most datagrams one call sends (the kernel's UIO_MAXIOV is 1024).
pub(crate) const MAX_BATCH: usize = 64;

/// Whether [`send`] can send `t` from a socket of the given family: a
/// destination (and source) of the socket's family.
pub(crate) fn can_send(t: &Transmit, socket_is_v6: bool) -> bool {
    t.destination.is_ipv6() == socket_is_v6 && t.src_ip.is_none_or(|ip| ip.is_ipv6() == socket_is_v6)
}

/// Sends every datagram of `t` on `fd` with sendmmsg(2), in calls of at
/// most [`MAX_BATCH`]; returns the calls made. Every message carries the
/// batch's ECN codepoint and source address as ancillary data, as
/// quinn-udp's sendmsg(2) does. An error (WouldBlock included) leaves the
/// rest unsent: the caller sends the whole batch again, and the peer
/// drops what it got twice (QUIC packet numbers).
pub(crate) fn send(fd: RawFd, t: &Transmit) -> io::Result<u64> {
    let seg = t.segment_size.unwrap_or(t.contents.len()).max(1);
    let addr = socket2::SockAddr::from(t.destination);
    let control = Control::new(t);
    let mut calls = 0;
    for batch in t.contents.chunks(seg * MAX_BATCH) {
        let mut iovs: Vec<libc::iovec> = batch
            .chunks(seg)
            .map(|d| libc::iovec { iov_base: d.as_ptr() as *mut libc::c_void, iov_len: d.len() })
            .collect();
        let mut msgs: Vec<libc::mmsghdr> = Vec::with_capacity(iovs.len());
        for iov in iovs.iter_mut() {
            // SAFETY: an all-zero msghdr is a valid empty one.
            let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
            h.msg_name = addr.as_ptr() as *mut libc::c_void;
            h.msg_namelen = addr.len();
            h.msg_iov = iov;
            h.msg_iovlen = 1;
            // Every message reads the same ancillary data; the kernel
            // only reads it.
            if control.len > 0 {
                h.msg_control = control.buf.as_ptr() as *mut libc::c_void;
                h.msg_controllen = control.len as _;
            }
            msgs.push(libc::mmsghdr { msg_hdr: h, msg_len: 0 });
        }
        let mut sent = 0;
        while sent < msgs.len() {
            let rest = &mut msgs[sent..];
            // SAFETY: every mmsghdr points at live buffers (`addr`, `iovs`,
            // `control`, the batch) that outlive the call.
            let n = unsafe { libc::sendmmsg(fd, rest.as_mut_ptr(), rest.len() as libc::c_uint, 0) };
            calls += 1;
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            sent += n as usize;
        }
    }
    Ok(calls)
}

/// The ancillary data of every message of a batch: the ECN codepoint
/// (RFC 3168; IP_TOS or IPV6_TCLASS, an int) and the source address
/// (IP_PKTINFO or IPV6_PKTINFO), each when the batch has one.
struct Control {
    /// Kept in `u64`s: a cmsghdr is aligned as a size_t.
    buf: Vec<u64>,
    /// Bytes of `buf` in use (0: none).
    len: usize,
}

impl Control {
    fn new(t: &Transmit) -> Control {
        let v6 = t.destination.is_ipv6();
        let ecn: Option<libc::c_int> = t.ecn.map(|e| match e {
            EcnCodepoint::Ect0 => 0b10,
            EcnCodepoint::Ect1 => 0b01,
            EcnCodepoint::Ce => 0b11,
        });
        let size = |n: usize| {
            // SAFETY: CMSG_SPACE only computes a size.
            unsafe { libc::CMSG_SPACE(n as u32) as usize }
        };
        let (tos_level, tos_type) = if v6 { (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) } else { (libc::IPPROTO_IP, libc::IP_TOS) };
        let mut parts: Vec<(libc::c_int, libc::c_int, Vec<u8>)> = Vec::new();
        if let Some(ecn) = ecn {
            parts.push((tos_level, tos_type, ecn.to_ne_bytes().to_vec()));
        }
        match t.src_ip {
            Some(IpAddr::V4(ip)) => {
                let info = libc::in_pktinfo {
                    ipi_ifindex: 0,
                    ipi_spec_dst: libc::in_addr { s_addr: u32::from_ne_bytes(ip.octets()) },
                    ipi_addr: libc::in_addr { s_addr: 0 },
                };
                parts.push((libc::IPPROTO_IP, libc::IP_PKTINFO, raw(&info)));
            }
            Some(IpAddr::V6(ip)) => {
                let info = libc::in6_pktinfo { ipi6_addr: libc::in6_addr { s6_addr: ip.octets() }, ipi6_ifindex: 0 };
                parts.push((libc::IPPROTO_IPV6, libc::IPV6_PKTINFO, raw(&info)));
            }
            None => {}
        }
        let len: usize = parts.iter().map(|p| size(p.2.len())).sum();
        let mut buf = vec![0u64; len.div_ceil(8)];
        if parts.is_empty() {
            return Control { buf, len: 0 };
        }
        // SAFETY: an all-zero msghdr is a valid empty one; it points at
        // `buf`, which holds CMSG_SPACE of every part, so CMSG_FIRSTHDR
        // and CMSG_NXTHDR return headers inside it with room for their
        // data, written unaligned.
        unsafe {
            let mut h: libc::msghdr = std::mem::zeroed();
            h.msg_control = buf.as_mut_ptr().cast();
            h.msg_controllen = len as _;
            let mut c = libc::CMSG_FIRSTHDR(&h);
            for (level, ty, data) in &parts {
                (*c).cmsg_level = *level;
                (*c).cmsg_type = *ty;
                (*c).cmsg_len = libc::CMSG_LEN(data.len() as u32) as _;
                std::ptr::copy_nonoverlapping(data.as_ptr(), libc::CMSG_DATA(c), data.len());
                c = libc::CMSG_NXTHDR(&h, c);
            }
        }
        Control { buf, len }
    }
}

/// The bytes of a plain C struct.
fn raw<T: Copy>(v: &T) -> Vec<u8> {
    // SAFETY: `v` is a live, initialized value of `size_of::<T>()` bytes;
    // the C structs passed here have no padding.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()).to_vec() }
}
