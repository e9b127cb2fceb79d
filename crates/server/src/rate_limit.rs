//! Fixed-window counters per client address, counted by the keys of DECISIONS §9
//! ([`rate_limit_key`]: an IPv4 address alone, IPv4-mapped as IPv4, IPv6 by its /64).

use registry_domain::limits::rate_limit_key;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// At most `limit` events per `window` for each client address.
#[derive(Debug)]
pub struct RateLimiter {
    limit: u32,
    window: Duration,
    windows: Mutex<HashMap<IpAddr, (Instant, u32)>>,
}

/// Refused: retry after this long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryAfter(pub Duration);

impl RateLimiter {
    /// `limit` events per `window`.
    pub fn new(limit: u32, window: Duration) -> Self {
        Self {
            limit,
            window,
            windows: Mutex::new(HashMap::new()),
        }
    }

    /// `limit` events per hour.
    pub fn per_hour(limit: u32) -> Self {
        Self::new(limit, Duration::from_secs(3600))
    }

    /// Counts one event for `ip`; refuses when the window is full.
    pub fn hit(&self, ip: IpAddr) -> Result<(), RetryAfter> {
        self.hit_at(ip, Instant::now())
    }

    /// Whether `ip` is currently over its limit, without counting an event.
    pub fn check(&self, ip: IpAddr) -> Result<(), RetryAfter> {
        let now = Instant::now();
        let windows = self.windows.lock().expect("rate limiter lock");
        match windows.get(&rate_limit_key(ip)) {
            Some((start, count)) if now < *start + self.window && *count >= self.limit => {
                Err(RetryAfter(*start + self.window - now))
            }
            _ => Ok(()),
        }
    }

    fn hit_at(&self, ip: IpAddr, now: Instant) -> Result<(), RetryAfter> {
        let mut windows = self.windows.lock().expect("rate limiter lock");
        if windows.len() > 100_000 {
            // Bounded memory under address-spraying: forget windows that have ended.
            windows.retain(|_, (start, _)| now < *start + self.window);
        }
        let entry = windows.entry(rate_limit_key(ip)).or_insert((now, 0));
        if now >= entry.0 + self.window {
            *entry = (now, 0);
        }
        if entry.1 >= self.limit {
            return Err(RetryAfter(entry.0 + self.window - now));
        }
        entry.1 += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_address_and_window() {
        let limiter = RateLimiter::new(2, Duration::from_secs(10));
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let t0 = Instant::now();
        assert!(limiter.hit_at(a, t0).is_ok());
        assert!(limiter.hit_at(a, t0).is_ok());
        let RetryAfter(wait) = limiter.hit_at(a, t0 + Duration::from_secs(4)).unwrap_err();
        assert_eq!(wait, Duration::from_secs(6));
        assert!(limiter.hit_at(b, t0).is_ok());
        assert!(limiter.hit_at(a, t0 + Duration::from_secs(10)).is_ok());
    }

    #[test]
    fn ipv6_counts_by_64_and_mapped_ipv4_as_ipv4() {
        let limiter = RateLimiter::new(2, Duration::from_secs(10));
        let t0 = Instant::now();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(limiter.hit_at(ip("2001:db8:0:1::1"), t0).is_ok());
        assert!(limiter.hit_at(ip("2001:db8:0:1:ffff::2"), t0).is_ok());
        assert!(limiter.hit_at(ip("2001:db8:0:1::3"), t0).is_err());
        assert!(limiter.hit_at(ip("2001:db8:0:2::1"), t0).is_ok());
        assert!(limiter.hit_at(ip("192.0.2.9"), t0).is_ok());
        assert!(limiter.hit_at(ip("::ffff:192.0.2.9"), t0).is_ok());
        assert!(limiter.hit_at(ip("192.0.2.9"), t0).is_err());
        assert!(limiter.check(ip("::ffff:192.0.2.9")).is_err());
    }
}
