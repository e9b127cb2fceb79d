//! Prometheus metrics, kept by hand: a few counters and one latency histogram per route.
//!
//! Every request records a sample, so recording must cost next to nothing: each route gets its
//! own block of atomic counters the first time it is seen, and later requests find it under a
//! read lock (shared by all workers) and only add to atomics. The lock is taken for writing once
//! per route, and once per (method, status) pair of a route.

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, RwLock};
use std::time::Duration;

const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// One route's counters.
#[derive(Debug, Default)]
struct RouteStats {
    /// Requests by (method, status); a route sees only a handful of pairs.
    responses: RwLock<Vec<(&'static str, u16, AtomicU64)>>,
    /// Cumulative histogram buckets (`le` = each bound of [`BUCKETS`]).
    buckets: [AtomicU64; BUCKETS.len()],
    /// Sum of latencies, in nanoseconds (an integer, so that it can be an atomic).
    sum_nanos: AtomicU64,
    total: AtomicU64,
}

impl RouteStats {
    fn record(&self, method: &'static str, status: u16, elapsed: Duration) {
        let counted = self
            .responses
            .read()
            .expect("metrics lock")
            .iter()
            .find(|(m, s, _)| *m == method && *s == status)
            .map(|(_, _, n)| n.fetch_add(1, Relaxed))
            .is_some();
        if !counted {
            let mut responses = self.responses.write().expect("metrics lock");
            // Another worker may have added the pair between the two locks.
            match responses
                .iter()
                .find(|(m, s, _)| *m == method && *s == status)
            {
                Some((_, _, n)) => {
                    n.fetch_add(1, Relaxed);
                }
                None => responses.push((method, status, AtomicU64::new(1))),
            }
        }
        let seconds = elapsed.as_secs_f64();
        for (count, bound) in self.buckets.iter().zip(BUCKETS) {
            if seconds <= bound {
                count.fetch_add(1, Relaxed);
            }
        }
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Relaxed);
        self.total.fetch_add(1, Relaxed);
    }
}

/// The registry's metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    routes: RwLock<HashMap<String, Arc<RouteStats>>>,
    hosting_hits: AtomicU64,
    hosting_misses: AtomicU64,
    token_cache_hits: AtomicU64,
    identity_token_cache_hits: AtomicU64,
    argon2_verifications: AtomicU64,
}

impl Metrics {
    /// Counts one finished request.
    pub fn request(&self, route: &str, method: &'static str, status: u16, elapsed: Duration) {
        let known = self
            .routes
            .read()
            .expect("metrics lock")
            .get(route)
            .cloned();
        let stats = match known {
            Some(stats) => stats,
            None => self
                .routes
                .write()
                .expect("metrics lock")
                .entry(route.to_owned())
                .or_default()
                .clone(),
        };
        stats.record(method, status, elapsed);
    }

    /// A public document served from memory.
    pub fn hosting_hit(&self) {
        self.hosting_hits.fetch_add(1, Relaxed);
    }

    /// A public request for something not published.
    pub fn hosting_miss(&self) {
        self.hosting_misses.fetch_add(1, Relaxed);
    }

    /// A secret accepted without running argon2.
    pub fn token_cache_hit(&self) {
        self.token_cache_hits.fetch_add(1, Relaxed);
    }

    /// An identity token accepted without checking its signature again.
    pub fn identity_token_cache_hit(&self) {
        self.identity_token_cache_hits.fetch_add(1, Relaxed);
    }

    /// Identity tokens accepted without checking their signature again, so far.
    pub fn identity_token_cache_hits(&self) -> u64 {
        self.identity_token_cache_hits.load(Relaxed)
    }

    /// One argon2 verification.
    pub fn argon2_verification(&self) {
        self.argon2_verifications.fetch_add(1, Relaxed);
    }

    /// The Prometheus text exposition. `extra` adds gauges/counters owned elsewhere.
    pub fn render(&self, extra: &[(&str, &str, &str, u64)]) -> String {
        // Sorted, so that the output is stable from one scrape to the next.
        let mut routes: Vec<(String, Arc<RouteStats>)> = self
            .routes
            .read()
            .expect("metrics lock")
            .iter()
            .map(|(route, stats)| (route.clone(), stats.clone()))
            .collect();
        routes.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out = String::new();
        out.push_str(
            "# HELP registry_http_requests_total HTTP requests by route, method and status.\n",
        );
        out.push_str("# TYPE registry_http_requests_total counter\n");
        for (route, stats) in &routes {
            let mut responses: Vec<(&str, u16, u64)> = stats
                .responses
                .read()
                .expect("metrics lock")
                .iter()
                .map(|(m, s, n)| (*m, *s, n.load(Relaxed)))
                .collect();
            responses.sort_unstable();
            for (method, status, n) in responses {
                let _ = writeln!(
                    out,
                    "registry_http_requests_total{{route=\"{route}\",method=\"{method}\",status=\"{status}\"}} {n}"
                );
            }
        }
        out.push_str("# HELP registry_http_request_duration_seconds Request latency by route.\n");
        out.push_str("# TYPE registry_http_request_duration_seconds histogram\n");
        for (route, h) in &routes {
            for (count, bound) in h.buckets.iter().zip(BUCKETS) {
                let _ = writeln!(
                    out,
                    "registry_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"{bound}\"}} {}",
                    count.load(Relaxed)
                );
            }
            let total = h.total.load(Relaxed);
            let _ = writeln!(
                out,
                "registry_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"+Inf\"}} {total}\n\
                 registry_http_request_duration_seconds_sum{{route=\"{route}\"}} {}\n\
                 registry_http_request_duration_seconds_count{{route=\"{route}\"}} {total}",
                Duration::from_nanos(h.sum_nanos.load(Relaxed)).as_secs_f64(),
            );
        }
        let counters = [
            (
                "registry_hosting_cache_hits_total",
                "Public documents served from memory.",
                self.hosting_hits.load(Relaxed),
            ),
            (
                "registry_hosting_cache_misses_total",
                "Public requests for unpublished issuers.",
                self.hosting_misses.load(Relaxed),
            ),
            (
                "registry_token_cache_hits_total",
                "Secrets accepted from the verification cache.",
                self.token_cache_hits.load(Relaxed),
            ),
            (
                "registry_identity_token_cache_hits_total",
                "Identity tokens accepted from the verification cache.",
                self.identity_token_cache_hits.load(Relaxed),
            ),
            (
                "registry_argon2_verifications_total",
                "argon2 verifications run.",
                self.argon2_verifications.load(Relaxed),
            ),
        ];
        for (name, help, value) in counters {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
            );
        }
        for (name, kind, help, value) in extra {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_route_method_and_status_with_cumulative_buckets() {
        let metrics = Metrics::default();
        metrics.request("/a", "GET", 200, Duration::from_micros(300));
        metrics.request("/a", "GET", 200, Duration::from_millis(3));
        metrics.request("/a", "PUT", 400, Duration::from_millis(3));
        metrics.request("/b", "GET", 200, Duration::from_secs(5));
        let text = metrics.render(&[]);
        assert!(
            text.contains(
                "registry_http_requests_total{route=\"/a\",method=\"GET\",status=\"200\"} 2\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "registry_http_requests_total{route=\"/a\",method=\"PUT\",status=\"400\"} 1\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "registry_http_request_duration_seconds_bucket{route=\"/a\",le=\"0.0005\"} 1\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "registry_http_request_duration_seconds_bucket{route=\"/a\",le=\"0.005\"} 3\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "registry_http_request_duration_seconds_bucket{route=\"/b\",le=\"2.5\"} 0\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("registry_http_request_duration_seconds_count{route=\"/b\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("registry_http_request_duration_seconds_sum{route=\"/b\"} 5\n"),
            "{text}"
        );
    }
}
