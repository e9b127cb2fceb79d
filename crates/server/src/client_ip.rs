//! The client's address (docs/api.md, "Limits"): the TCP peer, or behind trusted proxies the
//! right-most address of the forwarding chain that is not itself a trusted proxy. The chain is
//! `X-Forwarded-For`, or the `for=` parameters of RFC 7239 `Forwarded`: proxies write one or the
//! other (some both, alike).
//!
//! The chain is read from the right, the end the trusted proxy wrote, and reading stops at the
//! first entry that does not parse: everything left of it is whatever the client sent. Such a
//! chain never resolves to the proxy's own address (a request that came through a proxy is not
//! the proxy's), but to [`UNKNOWN`], which no allowlist entry narrower than everything contains.
//! A chain whose every entry is a trusted proxy gives its left-most entry, as nginx's
//! `real_ip_recursive` does: a client inside the trusted ranges.
//! When a request carries both headers and they name different clients, one of them is the
//! client's own invention, and which one cannot be told: the client is [`UNKNOWN`] too.

use actix_web::http::header::HeaderMap;
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
    let headers = req.headers();
    let forwarded_for = chain(headers, "x-forwarded-for", Some);
    let forwarded = chain(headers, "forwarded", forwarded_for_parameter);
    match (forwarded_for.is_empty(), forwarded.is_empty()) {
        (false, true) => resolve(peer, &forwarded_for, trusted),
        (true, false) => resolve(peer, &forwarded, trusted),
        (true, true) => peer,
        (false, false) => {
            let one = resolve(peer, &forwarded_for, trusted);
            if one == resolve(peer, &forwarded, trusted) {
                one
            } else {
                UNKNOWN
            }
        }
    }
}

/// The entries of every line of the header `name`, in order (one list, RFC 9110 §5.3), each
/// through `entry` (`None`: not an address, as a line that is not text is).
fn chain<'a>(
    headers: &'a HeaderMap,
    name: &str,
    entry: impl Fn(&'a str) -> Option<&'a str>,
) -> Vec<&'a str> {
    let mut entries = Vec::new();
    for value in headers.get_all(name) {
        match value.to_str() {
            Ok(text) => entries.extend(text.split(',').map(|e| entry(e).unwrap_or(""))),
            Err(_) => entries.push(""),
        }
    }
    entries
}

/// The `for=` value of one `Forwarded` element (`for=192.0.2.60;proto=https`,
/// `For="[2001:db8::17]:4711"`), unquoted; `None` without one.
fn forwarded_for_parameter(element: &str) -> Option<&str> {
    element.split(';').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        if !name.trim().eq_ignore_ascii_case("for") {
            return None;
        }
        let value = value.trim();
        Some(
            value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(value),
        )
    })
}

/// One `X-Forwarded-For` entry, or one `for=` of `Forwarded`: an address, `ip:port`,
/// `[v6]:port`, or `[v6]` (RFC 7239's own form of an IPv6 address without a port).
fn parse_hop(entry: &str) -> Option<IpAddr> {
    let entry = entry.trim();
    let bracketed = entry.strip_prefix('[').and_then(|e| e.strip_suffix(']'));
    let ip = (bracketed.unwrap_or(entry))
        .parse::<IpAddr>()
        .or_else(|_| entry.parse::<SocketAddr>().map(|a| a.ip()))
        .ok()?;
    Some(ip.to_canonical())
}

/// Whether `ip` is one of the trusted proxies.
fn is_trusted(ip: IpAddr, trusted: &[IpNetwork]) -> bool {
    trusted.iter().any(|n| n.contains(ip))
}

/// Whether the request's TCP peer is one of the trusted proxies.
pub fn from_trusted_proxy(req: &HttpRequest, trusted: &[IpNetwork]) -> bool {
    req.peer_addr()
        .is_some_and(|peer| is_trusted(peer.ip().to_canonical(), trusted))
}

/// Walks the forwarding chain from the right while the hops are trusted proxies.
fn resolve(peer: IpAddr, chain: &[&str], trusted: &[IpNetwork]) -> IpAddr {
    let is_trusted = |ip: IpAddr| is_trusted(ip, trusted);
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
    fn forwarded_elements_give_their_for_parameter() {
        assert_eq!(
            forwarded_for_parameter("for=192.0.2.60;proto=http;by=203.0.113.43"),
            Some("192.0.2.60")
        );
        assert_eq!(
            forwarded_for_parameter(r#" proto=https; For="[2001:db8:cafe::17]:4711""#),
            Some("[2001:db8:cafe::17]:4711")
        );
        assert_eq!(forwarded_for_parameter("by=10.0.0.1"), None);
        // RFC 7239's own form of an IPv6 address without a port: brackets, in quotes.
        let bare = forwarded_for_parameter(r#"for="[2001:db8:cafe::17]""#).unwrap();
        assert_eq!(parse_hop(bare), Some(ip("2001:db8:cafe::17")));
        assert_eq!(parse_hop("[2001:db8::19]:443"), Some(ip("2001:db8::19")));
        let trusted = nets(&["127.0.0.1/32"]);
        let chain = [Some("[2001:db8:cafe::17]:4711"), Some("198.51.100.7")];
        let chain: Vec<&str> = chain.iter().map(|e| e.unwrap_or("")).collect();
        assert_eq!(
            resolve(ip("127.0.0.1"), &chain, &trusted),
            ip("198.51.100.7")
        );
        // `for=unknown` and obfuscated identifiers are no address: the client is unknown.
        assert_eq!(resolve(ip("127.0.0.1"), &["unknown"], &trusted), UNKNOWN);
        assert_eq!(resolve(ip("127.0.0.1"), &["_hidden"], &trusted), UNKNOWN);
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
