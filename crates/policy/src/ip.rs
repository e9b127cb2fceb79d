//! The `ip_allowlist`: IPv4 and IPv6 addresses and CIDR ranges.

use crate::{PolicyError, Violation};
use ipnetwork::{IpNetwork, Ipv4Network};
use std::net::IpAddr;

/// The parsed `ip_allowlist` of a policy. Empty allows every address.
///
/// ```
/// use registry_policy::IpAllowlist;
///
/// let list = IpAllowlist::parse(["203.0.113.0/24", "2001:db8::/32"]).unwrap();
/// assert!(list.allows("203.0.113.9".parse().unwrap()));
/// // An IPv4 client seen on a dual-stack socket as IPv4-mapped IPv6 matches IPv4 entries.
/// assert!(list.allows("::ffff:203.0.113.9".parse().unwrap()));
/// assert!(list.allows("2001:db8::1".parse().unwrap()));
/// assert!(!list.allows("198.51.100.1".parse().unwrap()));
/// assert!(IpAllowlist::default().allows("198.51.100.1".parse().unwrap()));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IpAllowlist {
    entries: Box<[IpNetwork]>,
}

impl IpAllowlist {
    /// Parses every entry; on failure, [`PolicyError::Invalid`] with the problem of each bad
    /// entry, its pointer the entry's index in the list (`/1`).
    ///
    /// ```
    /// use registry_policy::IpAllowlist;
    ///
    /// let error = IpAllowlist::parse(["10.0.0.1", "x", "10.0.0.0/40"]).unwrap_err();
    /// let pointers: Vec<String> = error.violations().into_iter().map(|v| v.pointer).collect();
    /// assert_eq!(pointers, ["/1", "/2"]);
    /// ```
    pub fn parse<'a>(entries: impl IntoIterator<Item = &'a str>) -> Result<Self, PolicyError> {
        let mut nets = Vec::new();
        let mut errors = Vec::new();
        for (i, entry) in entries.into_iter().enumerate() {
            match parse_ip_entry(entry) {
                Ok(net) => nets.push(net),
                Err(e) => errors.push(Violation::new(format!("/{i}"), e.to_string())),
            }
        }
        if errors.is_empty() {
            Ok(Self {
                entries: nets.into(),
            })
        } else {
            Err(PolicyError::Invalid(errors))
        }
    }

    /// The ranges, in document order (an address is a range of one).
    pub fn entries(&self) -> &[IpNetwork] {
        &self.entries
    }

    /// Whether the list is empty (every address allowed).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether `ip` may call: the list is empty, or an entry contains `ip`.
    ///
    /// An IPv4 client is one client whether the socket reports it as `a.b.c.d` or as the
    /// IPv4-mapped `::ffff:a.b.c.d`: it matches IPv4 entries and IPv6 entries inside the mapped
    /// block `::ffff:0:0/96`, and no other IPv6 entry (`::/0` means every IPv6 client).
    pub fn allows(&self, ip: IpAddr) -> bool {
        if self.entries.is_empty() {
            return true;
        }
        match ip.to_canonical() {
            IpAddr::V4(v4) => self
                .entries
                .iter()
                .any(|net| as_v4(*net).is_some_and(|n| n.contains(v4))),
            v6 => self.entries.iter().any(|net| net.contains(v6)),
        }
    }

    /// Whether every address this list allows, `outer` allows too: `outer` is empty, or each
    /// entry of this list lies inside one entry of `outer`. An account limited to some addresses
    /// may only give the accounts it manages addresses inside its own, or they would be broader
    /// than itself. Ranges covered only by several of `outer`'s entries together count as not
    /// covered (the caller can write them as one range).
    ///
    /// ```
    /// use registry_policy::IpAllowlist;
    ///
    /// let office = IpAllowlist::parse(["203.0.113.0/24"]).unwrap();
    /// let desk = IpAllowlist::parse(["203.0.113.7", "::ffff:203.0.113.8"]).unwrap();
    /// assert!(desk.is_within(&office));
    /// assert!(!office.is_within(&desk));
    /// // The empty list lets every address in: it is within the empty list only.
    /// assert!(!IpAllowlist::default().is_within(&office));
    /// assert!(office.is_within(&IpAllowlist::default()));
    /// ```
    pub fn is_within(&self, outer: &IpAllowlist) -> bool {
        if outer.is_empty() {
            return true;
        }
        !self.is_empty()
            && self
                .entries
                .iter()
                .all(|inner| outer.entries.iter().any(|o| range_within(*inner, *o)))
    }
}

/// The IPv4 clients a range lets in, when it lets any in: an IPv4 range, or an IPv6 range
/// inside the IPv4-mapped block with a prefix of at least 96 (see [`IpAllowlist::allows`]).
pub(crate) fn as_v4(net: IpNetwork) -> Option<Ipv4Network> {
    match net {
        IpNetwork::V4(n) => Some(n),
        IpNetwork::V6(n) if n.prefix() >= 96 => n
            .network()
            .to_ipv4_mapped()
            .and_then(|a| Ipv4Network::new(a, n.prefix() - 96).ok()),
        IpNetwork::V6(_) => None,
    }
}

/// Whether `inner` lies inside `outer`, both read as [`IpAllowlist::allows`] reads them: ranges
/// that let IPv4 clients in are compared as IPv4 ranges, the others as IPv6 ones.
fn range_within(inner: IpNetwork, outer: IpNetwork) -> bool {
    let (inner, outer) = match (as_v4(inner), as_v4(outer)) {
        (Some(i), Some(o)) => (IpNetwork::V4(i), IpNetwork::V4(o)),
        (None, None) => (inner, outer),
        _ => return false,
    };
    outer.prefix() <= inner.prefix() && outer.contains(inner.network())
}

/// Parses one entry: an address, or an address, `/` and a prefix length in decimal without
/// leading zeros or sign (netmask notation is not accepted). This is exactly the language of the
/// schema's `IpAddressOrRange` pattern.
///
/// ```
/// use registry_policy::parse_ip_entry;
/// assert_eq!(parse_ip_entry("10.0.0.0/8").unwrap().prefix(), 8);
/// assert_eq!(parse_ip_entry("::1").unwrap().prefix(), 128);
/// assert!(parse_ip_entry("10.0.0.0/33").is_err());
/// assert!(parse_ip_entry("10.0.0.0/255.0.0.0").is_err());
/// ```
pub fn parse_ip_entry(entry: &str) -> Result<IpNetwork, PolicyError> {
    let (addr, prefix) = match entry.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (entry, None),
    };
    let addr: IpAddr = addr
        .parse()
        .map_err(|_| PolicyError::Address(entry.to_owned()))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let prefix = match prefix {
        None => max,
        Some(p) => {
            let canonical = p.bytes().all(|b| b.is_ascii_digit())
                && !p.is_empty()
                && p.len() <= 3
                && !(p.len() > 1 && p.starts_with('0'));
            let bad = || PolicyError::Prefix {
                entry: entry.to_owned(),
                max,
            };
            let n: u8 = if canonical {
                p.parse().map_err(|_| bad())?
            } else {
                return Err(bad());
            };
            if n > max {
                return Err(bad());
            }
            n
        }
    };
    IpNetwork::new(addr, prefix).map_err(|_| PolicyError::Prefix {
        entry: entry.to_owned(),
        max,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn list(entries: &[&str]) -> IpAllowlist {
        IpAllowlist::parse(entries.iter().copied()).unwrap()
    }

    #[test]
    fn ranges_within_ranges() {
        let outer = list(&["10.0.0.0/8", "2001:db8::/32"]);
        for inner in [
            &["10.1.0.0/16"][..],
            &["10.0.0.0/8", "2001:db8:1::/48"],
            &["::ffff:10.2.3.4"],
            &["::ffff:10.0.0.0/104"],
            &["10.9.9.9/8"],
        ] {
            assert!(list(inner).is_within(&outer), "{inner:?}");
        }
        for inner in [
            &["11.0.0.0/8"][..],
            &["10.0.0.0/7"],
            &["10.0.0.1", "192.0.2.1"],
            &["2001:db9::/32"],
            &["::/0"],
            &["0.0.0.0/0"],
            // Lets in IPv6 clients of the mapped block's neighbourhood, not IPv4 ones.
            &["::ffff:0:0/95"],
        ] {
            assert!(!list(inner).is_within(&outer), "{inner:?}");
        }
        // An IPv6 range that lets in no IPv4 client does not cover IPv4 ones.
        assert!(!list(&["10.0.0.1"]).is_within(&list(&["::/0"])));
        assert!(list(&["10.0.0.1"]).is_within(&list(&["::ffff:0:0/96"])));
    }

    #[test]
    fn entries_that_parse() {
        for entry in [
            "10.0.0.1",
            "10.0.0.0/8",
            "0.0.0.0/0",
            "255.255.255.255/32",
            "10.1.2.3/24",
            "::",
            "::1",
            "::/0",
            "2001:db8::/32",
            "2001:DB8::1/128",
            "fe80::1:2:3:4",
            "::ffff:192.0.2.1",
            "::ffff:192.0.2.0/120",
            "1:2:3:4:5:6:7:8",
            "1:2:3:4:5:6:1.2.3.4",
            "1:2:3:4:5:6:7::",
        ] {
            assert!(parse_ip_entry(entry).is_ok(), "{entry} should parse");
        }
    }

    #[test]
    fn entries_refused() {
        for (entry, prefix_problem) in [
            ("", false),
            ("localhost", false),
            ("10.0.0", false),
            ("10.0.0.256", false),
            ("010.0.0.1", false),
            (" 10.0.0.1", false),
            ("10.0.0.1 ", false),
            ("fe80::1%eth0", false),
            ("1:2:3:4:5:6:7:8:9", false),
            ("1::2::3", false),
            ("[::1]", false),
            ("10.0.0.0/", true),
            ("10.0.0.0/33", true),
            ("10.0.0.0/08", true),
            ("10.0.0.0/+8", true),
            ("10.0.0.0/-1", true),
            ("10.0.0.0/255.0.0.0", true),
            ("10.0.0.0/8/8", true),
            ("2001:db8::/129", true),
            ("2001:db8::/1000", true),
        ] {
            let err = parse_ip_entry(entry).expect_err(entry);
            assert_eq!(
                matches!(err, PolicyError::Prefix { .. }),
                prefix_problem,
                "{entry}: {err}"
            );
            assert!(err.to_string().contains(&format!("{entry:?}")));
        }
    }

    #[test]
    fn allows_v4_v6_and_mapped() {
        let list = IpAllowlist::parse(["203.0.113.0/24", "198.51.100.7", "2001:db8::/32"]).unwrap();
        assert!(list.allows(ip("203.0.113.0")));
        assert!(list.allows(ip("203.0.113.255")));
        assert!(!list.allows(ip("203.0.114.0")));
        assert!(list.allows(ip("198.51.100.7")));
        assert!(!list.allows(ip("198.51.100.8")));
        assert!(list.allows(ip("::ffff:198.51.100.7")));
        assert!(list.allows(ip("::ffff:203.0.113.1")));
        assert!(!list.allows(ip("::ffff:198.51.100.8")));
        assert!(list.allows(ip("2001:db8:ffff::1")));
        assert!(!list.allows(ip("2001:db9::1")));
        // IPv4-compatible (deprecated) addresses are not IPv4 clients.
        assert!(!list.allows(ip("::198.51.100.7")));
    }

    #[test]
    fn mapped_v6_entries_match_ipv4_clients() {
        let list = IpAllowlist::parse(["::ffff:10.0.0.0/104"]).unwrap();
        assert!(list.allows(ip("::ffff:10.0.0.1")));
        assert!(list.allows(ip("10.0.0.1")));
        assert!(!list.allows(ip("11.0.0.1")));
        assert!(!list.allows(ip("::ffff:11.0.0.1")));
        // A v6 range wider than the mapped block means IPv6 clients only.
        let list = IpAllowlist::parse(["::/0"]).unwrap();
        assert!(list.allows(ip("2001:db8::1")));
        assert!(!list.allows(ip("10.0.0.1")));
        assert!(!list.allows(ip("::ffff:10.0.0.1")));
    }

    #[test]
    fn empty_allows_everything() {
        let list = IpAllowlist::parse([]).unwrap();
        assert!(list.is_empty());
        assert!(list.allows(ip("192.0.2.1")));
        assert!(list.allows(ip("::1")));
    }

    #[test]
    fn parse_reports_every_bad_entry() {
        let errors = IpAllowlist::parse(["10.0.0.1", "x", "10.0.0.0/40"]).unwrap_err();
        let pointers: Vec<String> = errors.violations().into_iter().map(|v| v.pointer).collect();
        assert_eq!(pointers, ["/1", "/2"]);
    }
}
