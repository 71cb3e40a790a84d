//! The addresses a server listening on one address can be reached at,
//! for FSCTL_QUERY_NETWORK_INTERFACE_INFO (MS-SMB2 3.3.5.15.11): what a
//! multichannel client opens its further channels to.

use smbq_server::NetInterface;
use std::net::IpAddr;

/// What a link reports no speed for (loopback, most virtual links) is
/// listed at 10 Gbit/s.
const DEFAULT_SPEED: u64 = 10_000_000_000;

/// The interface addresses a listener on `listen` accepts connections at:
/// every address of its family (both, for `::`) when it listens on the
/// unspecified address, else `listen` alone. Loopback addresses are left
/// out, as Windows and Samba leave them out, unless the listener is on
/// loopback or there is nothing else.
pub fn reachable(listen: IpAddr) -> Vec<NetInterface> {
    let all = if_addrs::get_if_addrs().unwrap_or_default();
    let found: Vec<NetInterface> = all
        .iter()
        .filter(|i| match listen {
            IpAddr::V4(a) if a.is_unspecified() => i.ip().is_ipv4(),
            IpAddr::V6(a) if a.is_unspecified() => true,
            a => i.ip() == a,
        })
        .map(|i| NetInterface { index: i.index.unwrap_or(0), addr: i.ip(), link_speed: link_speed(&i.name) })
        .collect();
    let remote: Vec<NetInterface> = found.iter().filter(|i| !i.addr.is_loopback()).cloned().collect();
    if remote.is_empty() || listen.is_loopback() {
        found
    } else {
        remote
    }
}

/// /sys/class/net/NAME/speed, in Mbit/s; -1 or absent when unknown.
fn link_speed(name: &str) -> u64 {
    std::fs::read_to_string(format!("/sys/class/net/{name}/speed"))
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .filter(|&m| m > 0)
        .map_or(DEFAULT_SPEED, |m| m as u64 * 1_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loopback_listener_lists_its_own_address() {
        let l: IpAddr = "127.0.0.1".parse().unwrap_or(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));
        let found = reachable(l);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].addr, l);
        assert!(found[0].index > 0 && found[0].link_speed > 0);
    }

    #[test]
    fn a_wildcard_listener_lists_every_ipv4_address_with_an_index() {
        let found = reachable("0.0.0.0".parse().unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)));
        assert!(!found.is_empty());
        assert!(found.iter().all(|i| i.addr.is_ipv4() && i.index > 0));
    }
}
