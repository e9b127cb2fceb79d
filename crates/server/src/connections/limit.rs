//! Open connections per client address (docs/api.md, "Limits that hold (second security review)"):
//! at most `REGISTRY_MAX_CONNECTIONS_PER_ADDRESS` per TCP peer, keyed like the rate limits
//! ([`rate_limit_key`]: IPv4 alone, IPv6 by its /64), `REGISTRY_TRUSTED_PROXIES` exempt.
//!
//! The server asks [`ConnectionLimit::admit`] where it accepts a connection, before any byte
//! of it is read, and keeps the [`Slot`] with the connection: the slot's `Drop` gives the
//! place back when the connection goes. The map holds only addresses with open admitted
//! connections (an entry leaves with its last slot), so its size is bounded by the
//! connections the server holds.

use ipnetwork::IpNetwork;
use registry_domain::limits::rate_limit_key;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds between two warnings about refused connections: a flood must not flood the log.
const WARN_EVERY_SECS: u64 = 10;

/// The open connections of each client address, shared by every worker.
#[derive(Debug)]
pub struct ConnectionLimit {
    max: u32,
    exempt: Vec<IpNetwork>,
    open: Mutex<HashMap<IpAddr, u32>>,
    refused: AtomicU64,
    warned_at: AtomicU64,
}

/// One admitted connection's place in its address's count, given back when dropped.
#[derive(Debug)]
pub struct Slot {
    limit: Arc<ConnectionLimit>,
    key: IpAddr,
}

impl ConnectionLimit {
    /// At most `max` connections per address key; peers in `exempt` (the trusted proxies, whose
    /// connections carry many clients) are not counted.
    pub fn new(max: u32, exempt: Vec<IpNetwork>) -> Arc<Self> {
        Arc::new(Self {
            max,
            exempt,
            open: Mutex::new(HashMap::new()),
            refused: AtomicU64::new(0),
            warned_at: AtomicU64::new(0),
        })
    }

    /// The most connections one address may hold.
    pub fn max(&self) -> u32 {
        self.max
    }

    /// Counts a new connection from `ip`, or refuses it when its address holds the most it may
    /// (a warning then, at most one every ten seconds).
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Admission {
        let ip = ip.to_canonical();
        if self.exempt.iter().any(|network| network.contains(ip)) {
            return Admission::Exempt;
        }
        let key = rate_limit_key(ip);
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(key).or_insert(0);
        if *count >= self.max {
            drop(open);
            self.warn_refused(ip);
            return Admission::Refused;
        }
        *count += 1;
        Admission::Admitted(Slot {
            limit: Arc::clone(self),
            key,
        })
    }

    fn release(&self, key: IpAddr) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&key);
            }
        }
    }

    /// Connections open now from `ip`'s address key (tests).
    #[cfg(test)]
    fn open_from(&self, ip: IpAddr) -> u32 {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.get(&rate_limit_key(ip)).copied().unwrap_or(0)
    }

    /// Addresses with open connections (tests).
    #[cfg(test)]
    fn addresses(&self) -> usize {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    fn warn_refused(&self, ip: IpAddr) {
        let refused = self.refused.fetch_add(1, Ordering::Relaxed) + 1;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let last = self.warned_at.load(Ordering::Relaxed);
        if now >= last + WARN_EVERY_SECS
            && self
                .warned_at
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(
                address = %rate_limit_key(ip),
                max = self.max,
                refused_since_start = refused,
                "connection refused: this address holds the most open connections it may \
                 (REGISTRY_MAX_CONNECTIONS_PER_ADDRESS)"
            );
        }
    }
}

/// What [`ConnectionLimit::admit`] decided.
#[derive(Debug)]
pub enum Admission {
    /// A trusted proxy's: not counted.
    Exempt,
    /// Counted, until the slot is dropped.
    Admitted(Slot),
    /// Past the limit: close it.
    Refused,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.limit.release(self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn admitted(admission: Admission) -> Slot {
        match admission {
            Admission::Admitted(slot) => slot,
            Admission::Exempt => panic!("exempt"),
            Admission::Refused => panic!("refused"),
        }
    }

    #[test]
    fn an_address_gets_its_places_back_when_its_connections_close() {
        let limit = ConnectionLimit::new(2, Vec::new());
        let first = admitted(limit.admit(ip("203.0.113.7")));
        let second = admitted(limit.admit(ip("::ffff:203.0.113.7")));
        assert!(matches!(limit.admit(ip("203.0.113.7")), Admission::Refused));
        admitted(limit.admit(ip("203.0.113.8")));
        drop(first);
        assert_eq!(limit.open_from(ip("203.0.113.7")), 1);
        let third = admitted(limit.admit(ip("203.0.113.7")));
        drop((second, third));
        assert_eq!(limit.addresses(), 0, "no entry outlives its connections");
    }

    #[test]
    fn ipv6_counts_by_its_64_and_trusted_proxies_are_exempt() {
        let limit = ConnectionLimit::new(1, vec!["10.0.0.0/8".parse().unwrap()]);
        let _held = admitted(limit.admit(ip("2001:db8:1:2::1")));
        assert!(matches!(
            limit.admit(ip("2001:db8:1:2:ffff::9")),
            Admission::Refused
        ));
        admitted(limit.admit(ip("2001:db8:1:3::1")));
        for _ in 0..3 {
            assert!(matches!(limit.admit(ip("10.1.2.3")), Admission::Exempt));
        }
        assert_eq!(limit.addresses(), 1);
    }
}
