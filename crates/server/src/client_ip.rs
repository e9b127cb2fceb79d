//! The client's address: the TCP peer, or behind trusted proxies the right-most
//! `X-Forwarded-For` address that is not itself a trusted proxy.

use actix_web::HttpRequest;
use ipnetwork::IpNetwork;
use std::net::{IpAddr, Ipv4Addr};

/// The address the request comes from, as far as it can be trusted.
pub fn client_ip(req: &HttpRequest, trusted: &[IpNetwork]) -> IpAddr {
    let peer = req
        .peer_addr()
        .map(|a| a.ip().to_canonical())
        .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    resolve(peer, forwarded_for(req), trusted)
}

fn forwarded_for(req: &HttpRequest) -> Vec<IpAddr> {
    req.headers()
        .get_all("x-forwarded-for")
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|s| s.trim().parse::<IpAddr>().map(|ip| ip.to_canonical()))
        // An unparsable hop ends what can be trusted: everything left of it is client-supplied.
        .collect::<Result<Vec<_>, _>>()
        .unwrap_or_default()
}

/// Walks the forwarding chain from the right while the hops are trusted proxies.
fn resolve(peer: IpAddr, chain: Vec<IpAddr>, trusted: &[IpNetwork]) -> IpAddr {
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|n| n.contains(*ip));
    if !is_trusted(&peer) {
        return peer;
    }
    let mut client = peer;
    for hop in chain.into_iter().rev() {
        client = hop;
        if !is_trusted(&hop) {
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

    #[test]
    fn untrusted_peer_is_the_client_whatever_the_header_says() {
        assert_eq!(
            resolve(ip("203.0.113.9"), vec![ip("1.2.3.4")], &[]),
            ip("203.0.113.9")
        );
    }

    #[test]
    fn trusted_proxies_are_skipped_from_the_right() {
        let trusted: Vec<IpNetwork> = vec!["10.0.0.0/8".parse().unwrap()];
        let chain = vec![ip("1.1.1.1"), ip("198.51.100.7"), ip("10.0.0.3")];
        assert_eq!(resolve(ip("10.0.0.2"), chain, &trusted), ip("198.51.100.7"));
        assert_eq!(resolve(ip("10.0.0.2"), vec![], &trusted), ip("10.0.0.2"));
        assert_eq!(
            resolve(ip("10.0.0.2"), vec![ip("10.9.9.9")], &trusted),
            ip("10.9.9.9")
        );
    }
}
