//! Open connections per client address (DECISIONS §17): at most
//! `REGISTRY_MAX_CONNECTIONS_PER_ADDRESS` per TCP peer, keyed like the rate limits
//! ([`rate_limit_key`]: IPv4 alone, IPv6 by its /64), `REGISTRY_TRUSTED_PROXIES` exempt.
//!
//! Counted where actix accepts a connection ([`ConnectionLimit::on_connect`]), before any byte
//! of it is read: each admitted connection keeps a [`Slot`] in its connection data, which actix
//! drops with the connection (its dispatcher holds it; a request's copy is let go when the
//! request is); the slot's `Drop` gives the place back. A connection past the limit is shut
//! down at once, so a flood from one address costs one file descriptor per attempt for
//! microseconds rather than one per connection for as long as the client likes.
//!
//! The map holds only addresses with open admitted connections (an entry leaves with its
//! last slot), so its size is bounded by the connections the server holds.

use crate::problem::ApiError;
use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{Extensions, ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::ResponseError;
use ipnetwork::IpNetwork;
use registry_domain::limits::rate_limit_key;
use std::any::Any;
use std::collections::HashMap;
use std::net::{IpAddr, Shutdown};
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

    /// For `HttpServer::on_connect`: admits the TCP connection `io`, keeping its [`Slot`] in the
    /// connection's data, or shuts it down when its address holds the most it may.
    pub fn on_connect(self: &Arc<Self>, io: &dyn Any, data: &mut Extensions) {
        let Some(stream) = io.downcast_ref::<actix_web::rt::net::TcpStream>() else {
            return;
        };
        let Ok(peer) = stream.peer_addr() else {
            // Already gone: actix finds out on its first read.
            return;
        };
        match self.admit(peer.ip()) {
            Admission::Exempt => {}
            Admission::Admitted(slot) => {
                data.insert(slot);
            }
            Admission::Refused => {
                // Both halves: the client sees the connection closed without a byte, and the
                // dispatcher reads end-of-file once it has read what the client had already
                // sent, a request [`admitted`] then answers without running it.
                let _ = socket2::SockRef::from(stream).shutdown(Shutdown::Both);
                data.insert(Refused);
                self.warn_refused(peer.ip());
            }
        }
    }

    fn admit(self: &Arc<Self>, ip: IpAddr) -> Admission {
        let ip = ip.to_canonical();
        if self.exempt.iter().any(|network| network.contains(ip)) {
            return Admission::Exempt;
        }
        let key = rate_limit_key(ip);
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(key).or_insert(0);
        if *count >= self.max {
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

/// The mark of a connection shut down at connect time.
#[derive(Debug, Clone, Copy)]
struct Refused;

/// The middleware that runs no request of a refused connection: a shutdown socket still gives
/// up the bytes that arrived before it, and a request among them must have no effect (its
/// client is told nothing, and takes the connection for closed). Outermost, so that a flood
/// of them is neither logged nor counted one by one ([`ConnectionLimit`] warns instead).
pub async fn admitted(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    if req.conn_data::<Refused>().is_some() {
        let response = ApiError::Busy.error_response();
        return Ok(req.into_response(response).map_into_right_body());
    }
    next.call(req)
        .await
        .map(ServiceResponse::map_into_left_body)
}

enum Admission {
    Exempt,
    Admitted(Slot),
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
