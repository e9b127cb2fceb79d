//! The client's address (docs/api.md, "Limits"): the TCP peer, or behind trusted proxies the
//! right-most `X-Forwarded-For` address that is not itself a trusted proxy.
//!
//! The chain is read from the right, the end the trusted proxy wrote, and reading stops at the
//! first entry that does not parse: everything left of it is whatever the client sent. Such a
//! chain never resolves to the proxy's own address (a request that came through a proxy is not
//! the proxy's), but to [`UNKNOWN`], which no allowlist entry narrower than everything contains.

use actix_web::HttpRequest;
use ipnetwork::IpNetwork;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// The address of a client a forwarding chain does not reveal.
pub const UNKNOWN: IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);

/// The address the request comes from, as far as it can be trusted.
pub fn client_ip(req: &HttpRequest, trusted: &[IpNetwork]) -> IpAddr {
    let peer = req.peer_addr().map_or(UNKNOWN, |a| a.ip().to_canonical());
    if trusted.is_empty() {
        return peer;
    }
    let headers = req.headers().get_all("x-forwarded-for");
    // Header lines are one list in order (RFC 9110 §5.3); one that is not text ends it there.
    let mut entries: Vec<&str> = Vec::new();
    for value in headers {
        match value.to_str() {
            Ok(text) => entries.extend(text.split(',')),
            Err(_) => entries.push(""),
        }
    }
    resolve(peer, &entries, trusted)
}

/// One `X-Forwarded-For` entry: an address, `ip:port` or `[v6]:port`.
fn parse_hop(entry: &str) -> Option<IpAddr> {
    let entry = entry.trim();
    let ip = entry
        .parse::<IpAddr>()
        .or_else(|_| entry.parse::<SocketAddr>().map(|a| a.ip()))
        .ok()?;
    Some(ip.to_canonical())
}

/// Walks the forwarding chain from the right while the hops are trusted proxies.
fn resolve(peer: IpAddr, chain: &[&str], trusted: &[IpNetwork]) -> IpAddr {
    let is_trusted = |ip: IpAddr| trusted.iter().any(|n| n.contains(ip));
    if !is_trusted(peer) || chain.is_empty() {
        return peer;
    }
    let mut client = peer;
    for entry in chain.iter().rev() {
        let Some(hop) = parse_hop(entry) else {
            // A hop the proxies vouch for wrote something that is not an address: the client
            // is not known. Never a trusted proxy's own address.
            return UNKNOWN;
        };
        client = hop;
        if !is_trusted(hop) {
            break;
        }
    }
    client
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn nets(list: &[&str]) -> Vec<IpNetwork> {
        list.iter().map(|n| n.parse().unwrap()).collect()
    }

    #[test]
    fn untrusted_peer_is_the_client_whatever_the_header_says() {
        assert_eq!(
            resolve(ip("203.0.113.9"), &["1.2.3.4"], &nets(&["10.0.0.0/8"])),
            ip("203.0.113.9")
        );
    }

    #[test]
    fn trusted_proxies_are_skipped_from_the_right() {
        let trusted = nets(&["10.0.0.0/8"]);
        let chain = ["1.1.1.1", " 198.51.100.7", "10.0.0.3"];
        assert_eq!(
            resolve(ip("10.0.0.2"), &chain, &trusted),
            ip("198.51.100.7")
        );
        assert_eq!(resolve(ip("10.0.0.2"), &[], &trusted), ip("10.0.0.2"));
        assert_eq!(
            resolve(ip("10.0.0.2"), &["10.9.9.9"], &trusted),
            ip("10.9.9.9")
        );
    }

    #[test]
    fn junk_left_of_the_client_changes_nothing() {
        let trusted = nets(&["127.0.0.1/32"]);
        let peer = ip("127.0.0.1");
        assert_eq!(
            resolve(peer, &["junk", " 203.0.113.5"], &trusted),
            ip("203.0.113.5")
        );
        assert_eq!(resolve(peer, &["203.0.113.5"], &trusted), ip("203.0.113.5"));
    }

    #[test]
    fn ports_are_accepted() {
        let trusted = nets(&["127.0.0.1/32"]);
        let peer = ip("127.0.0.1");
        assert_eq!(
            resolve(peer, &["203.0.113.5:4711"], &trusted),
            ip("203.0.113.5")
        );
        assert_eq!(
            resolve(peer, &["[2001:db8::1]:443"], &trusted),
            ip("2001:db8::1")
        );
        assert_eq!(
            resolve(peer, &["::ffff:192.0.2.1"], &trusted),
            ip("192.0.2.1")
        );
    }

    #[test]
    fn a_chain_that_stops_parsing_is_never_the_proxy() {
        let trusted = nets(&["127.0.0.0/8"]);
        let peer = ip("127.0.0.1");
        assert_eq!(resolve(peer, &["203.0.113.5", "junk"], &trusted), UNKNOWN);
        assert_eq!(resolve(peer, &[""], &trusted), UNKNOWN);
        assert_eq!(resolve(peer, &["junk", "127.0.0.9"], &trusted), UNKNOWN);
    }
}
