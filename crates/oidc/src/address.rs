//! Which IP addresses an issuer fetch may connect to (the SSRF guard's core).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// How far an address is from the public internet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressClass {
    /// Globally routable: always allowed.
    Public,
    /// Loopback, private, unique-local or carrier-grade NAT: allowed only with
    /// `allow_insecure_issuers` (a developer's own issuer, a test issuer).
    Internal,
    /// Never fetched, not even in insecure mode: link-local (where cloud metadata services
    /// live), unspecified (`0.0.0.0` reaches the local host on Linux), multicast, broadcast,
    /// documentation and other reserved ranges.
    Forbidden,
}

impl AddressClass {
    /// Whether a connection to an address of this class is allowed.
    pub fn allowed(self, allow_insecure: bool) -> bool {
        match self {
            Self::Public => true,
            Self::Internal => allow_insecure,
            Self::Forbidden => false,
        }
    }
}

const fn v4(a: u8, b: u8, c: u8, d: u8) -> u32 {
    u32::from_be_bytes([a, b, c, d])
}

/// IPv4 ranges that are not public, as (network, prefix length, class).
const V4_RANGES: &[(u32, u32, AddressClass)] = &[
    (v4(0, 0, 0, 0), 8, AddressClass::Forbidden), // "this network", incl. unspecified
    (v4(10, 0, 0, 0), 8, AddressClass::Internal), // private
    (v4(100, 64, 0, 0), 10, AddressClass::Internal), // carrier-grade NAT
    (v4(127, 0, 0, 0), 8, AddressClass::Internal), // loopback
    (v4(169, 254, 0, 0), 16, AddressClass::Forbidden), // link-local, cloud metadata
    (v4(172, 16, 0, 0), 12, AddressClass::Internal), // private
    (v4(192, 0, 0, 0), 24, AddressClass::Forbidden), // IETF protocol assignments
    (v4(192, 0, 2, 0), 24, AddressClass::Forbidden), // documentation
    (v4(192, 88, 99, 0), 24, AddressClass::Forbidden), // 6to4 relay anycast
    (v4(192, 168, 0, 0), 16, AddressClass::Internal), // private
    (v4(198, 18, 0, 0), 15, AddressClass::Forbidden), // benchmarking
    (v4(198, 51, 100, 0), 24, AddressClass::Forbidden), // documentation
    (v4(203, 0, 113, 0), 24, AddressClass::Forbidden), // documentation
    (v4(224, 0, 0, 0), 4, AddressClass::Forbidden), // multicast
    (v4(240, 0, 0, 0), 4, AddressClass::Forbidden), // reserved, incl. broadcast
];

/// IPv6 ranges that are not public and embed no IPv4 address.
const V6_RANGES: &[(u128, u32, AddressClass)] = &[
    (0, 128, AddressClass::Forbidden), // unspecified
    (1, 128, AddressClass::Internal),  // loopback
    (
        0x0100_0000_0000_0000_0000_0000_0000_0000,
        64,
        AddressClass::Forbidden,
    ), // discard
    (
        0x2001_0000_0000_0000_0000_0000_0000_0000,
        32,
        AddressClass::Forbidden,
    ), // Teredo
    (
        0x2001_0db8_0000_0000_0000_0000_0000_0000,
        32,
        AddressClass::Forbidden,
    ), // documentation
    (
        0x3fff_0000_0000_0000_0000_0000_0000_0000,
        20,
        AddressClass::Forbidden,
    ), // documentation
    (
        0xfc00_0000_0000_0000_0000_0000_0000_0000,
        7,
        AddressClass::Internal,
    ), // unique-local
    (
        0xfe80_0000_0000_0000_0000_0000_0000_0000,
        10,
        AddressClass::Forbidden,
    ), // link-local
    (
        0xfec0_0000_0000_0000_0000_0000_0000_0000,
        10,
        AddressClass::Forbidden,
    ), // site-local
    (
        0xff00_0000_0000_0000_0000_0000_0000_0000,
        8,
        AddressClass::Forbidden,
    ), // multicast
];

/// AWS's IPv6 instance metadata endpoint; it sits inside unique-local space, which insecure
/// mode admits, so it is named on its own.
const V6_METADATA: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254);

/// Classifies an address, looking through the IPv6 forms that carry an IPv4 address.
pub fn classify(ip: IpAddr) -> AddressClass {
    match ip {
        IpAddr::V4(ip) => classify_v4(ip),
        IpAddr::V6(ip) => classify_v6(ip),
    }
}

/// Cloud metadata endpoints outside link-local space, named on their own: Alibaba Cloud's
/// (inside carrier-grade NAT space, which insecure mode admits) and Azure's platform endpoint
/// (the WireServer, on an address that is public only in name).
const V4_METADATA: [Ipv4Addr; 2] = [
    Ipv4Addr::new(100, 100, 100, 200),
    Ipv4Addr::new(168, 63, 129, 16),
];

fn classify_v4(ip: Ipv4Addr) -> AddressClass {
    if V4_METADATA.contains(&ip) {
        return AddressClass::Forbidden;
    }
    let bits = u32::from(ip);
    V4_RANGES
        .iter()
        .find(|(net, prefix, _)| bits >> (32 - prefix) == net >> (32 - prefix))
        .map_or(AddressClass::Public, |(_, _, class)| *class)
}

fn classify_v6(ip: Ipv6Addr) -> AddressClass {
    if ip == V6_METADATA {
        return AddressClass::Forbidden;
    }
    let bits = u128::from(ip);
    let low32 = Ipv4Addr::from(bits as u32);
    // ::ffff:a.b.c.d (mapped), ::a.b.c.d (compatible, deprecated) and 64:ff9b::a.b.c.d (NAT64)
    // all reach the embedded IPv4 address.
    if bits >> 32 == 0xffff
        || (bits >> 32 == 0 && bits > 1)
        || bits >> 32 == 0x0064_ff9b_0000_0000_0000_0000
    {
        return classify_v4(low32);
    }
    // 6to4: 2002:AABB:CCDD::/48 tunnels to AA.BB.CC.DD.
    if bits >> 112 == 0x2002 {
        return classify_v4(Ipv4Addr::from((bits >> 80) as u32));
    }
    V6_RANGES
        .iter()
        .find(|(net, prefix, _)| bits >> (128 - prefix) == net >> (128 - prefix))
        .map_or(AddressClass::Public, |(_, _, class)| *class)
}

#[cfg(test)]
mod tests {
    use super::*;
    use AddressClass::{Forbidden, Internal, Public};

    #[test]
    fn table() {
        let cases = [
            ("8.8.8.8", Public),
            ("1.1.1.1", Public),
            ("172.32.0.1", Public),
            ("100.128.0.1", Public),
            ("127.0.0.1", Internal),
            ("127.255.255.254", Internal),
            ("10.0.0.1", Internal),
            ("172.16.0.1", Internal),
            ("172.31.255.255", Internal),
            ("192.168.1.1", Internal),
            ("100.64.0.1", Internal),
            ("100.100.100.200", Forbidden),
            ("::ffff:100.100.100.200", Forbidden),
            ("168.63.129.16", Forbidden),
            ("169.254.169.254", Forbidden),
            ("169.254.0.1", Forbidden),
            ("0.0.0.0", Forbidden),
            ("0.1.2.3", Forbidden),
            ("255.255.255.255", Forbidden),
            ("224.0.0.1", Forbidden),
            ("192.0.2.1", Forbidden),
            ("198.51.100.7", Forbidden),
            ("203.0.113.9", Forbidden),
            ("2606:4700::1111", Public),
            ("2a00:1450:4001::200e", Public),
            ("::1", Internal),
            ("::", Forbidden),
            ("fe80::1", Forbidden),
            ("fd00::1", Internal),
            ("fc00::1", Internal),
            ("fd00:ec2::254", Forbidden),
            ("ff02::1", Forbidden),
            ("2001:db8::1", Forbidden),
            ("::ffff:127.0.0.1", Internal),
            ("::ffff:169.254.169.254", Forbidden),
            ("::ffff:10.0.0.1", Internal),
            ("::ffff:8.8.8.8", Public),
            ("::127.0.0.1", Internal),
            ("64:ff9b::a9fe:a9fe", Forbidden),
            ("64:ff9b::808:808", Public),
            ("2002:7f00:1::", Internal),
            ("2002:a9fe:a9fe::1", Forbidden),
            ("2002:808:808::1", Public),
        ];
        for (text, expected) in cases {
            let ip: IpAddr = text.parse().unwrap();
            assert_eq!(classify(ip), expected, "{text}");
        }
    }

    #[test]
    fn insecure_mode_admits_internal_only() {
        assert!(Public.allowed(false) && Public.allowed(true));
        assert!(!Internal.allowed(false) && Internal.allowed(true));
        assert!(!Forbidden.allowed(false) && !Forbidden.allowed(true));
    }
}
