//! The network a client fetches from (docs/api.md, "Key readiness"): an IPv4 address's /24, an
//! IPv6 address's /48. A verifier is recognised by its User-Agent *and* its networks, so that
//! anyone can send a verifier's agent, but only the verifier's own machines fetch from where it
//! does.
//!
//! ```
//! use registry_domain::network::Network;
//! let aws: std::net::IpAddr = "203.0.113.77".parse().unwrap();
//! let network = Network::of(aws);
//! assert_eq!(network.to_string(), "203.0.113.0/24");
//! assert_eq!("203.0.113.0/24".parse::<Network>().unwrap(), network);
//! let v6: std::net::IpAddr = "2001:db8:7:1::5".parse().unwrap();
//! assert_eq!(Network::of(v6).to_string(), "2001:db8:7::/48");
//! ```

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An IPv4 /24 or an IPv6 /48: where a fetch came from, as far as readiness tells clients apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Network {
    /// The first three octets of an IPv4 address.
    V4([u8; 3]),
    /// The first three groups of an IPv6 address.
    V6([u16; 3]),
}

impl Network {
    /// The network of `address` (an IPv4-mapped IPv6 address counts as its IPv4 address).
    pub fn of(address: IpAddr) -> Self {
        match address.to_canonical() {
            IpAddr::V4(v4) => {
                let [a, b, c, _] = v4.octets();
                Self::V4([a, b, c])
            }
            IpAddr::V6(v6) => {
                let s = v6.segments();
                Self::V6([s[0], s[1], s[2]])
            }
        }
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::V4([a, b, c]) => write!(f, "{}/24", Ipv4Addr::new(a, b, c, 0)),
            Self::V6([a, b, c]) => write!(f, "{}/48", Ipv6Addr::new(a, b, c, 0, 0, 0, 0, 0)),
        }
    }
}

/// A network's text is not `a.b.c.0/24` or `x:y:z::/48`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an IPv4 /24 or an IPv6 /48 network")]
pub struct NotANetwork(pub String);

impl FromStr for Network {
    type Err = NotANetwork;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let fail = || NotANetwork(text.to_owned());
        let (address, bits) = text.split_once('/').ok_or_else(fail)?;
        let address: IpAddr = address.parse().map_err(|_| fail())?;
        let network = Self::of(address);
        let exact = match (network, bits) {
            (Self::V4(_), "24") | (Self::V6(_), "48") => network.to_string() == text,
            _ => false,
        };
        exact.then_some(network).ok_or_else(fail)
    }
}

impl serde::Serialize for Network {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Network {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks_round_trip_and_group_their_addresses() {
        for (address, network) in [
            ("10.1.2.3", "10.1.2.0/24"),
            ("10.1.2.254", "10.1.2.0/24"),
            ("::ffff:10.1.2.3", "10.1.2.0/24"),
            ("2001:db8:1:ffff::1", "2001:db8:1::/48"),
            ("::1", "::/48"),
        ] {
            let of = Network::of(address.parse().unwrap());
            assert_eq!(of.to_string(), network, "{address}");
            assert_eq!(network.parse::<Network>().unwrap(), of);
        }
        assert_ne!(
            Network::of("10.1.2.3".parse().unwrap()),
            Network::of("10.1.3.3".parse().unwrap())
        );
        for bad in [
            "10.1.2.3/24",
            "10.1.2.0/16",
            "10.1.2.0",
            "x/24",
            "2001:db8::1/48",
        ] {
            assert!(bad.parse::<Network>().is_err(), "{bad}");
        }
    }
}
