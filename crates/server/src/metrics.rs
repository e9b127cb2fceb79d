//! Prometheus metrics, kept by hand: a few counters and one latency histogram per route.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

#[derive(Debug, Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    total: u64,
}

/// The registry's metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(String, &'static str, u16), u64>>,
    latency: Mutex<BTreeMap<String, Histogram>>,
    hosting_hits: AtomicU64,
    hosting_misses: AtomicU64,
    token_cache_hits: AtomicU64,
    argon2_verifications: AtomicU64,
}

impl Metrics {
    /// Counts one finished request.
    pub fn request(&self, route: &str, method: &'static str, status: u16, elapsed: Duration) {
        *self
            .requests
            .lock()
            .expect("metrics lock")
            .entry((route.to_owned(), method, status))
            .or_default() += 1;
        let seconds = elapsed.as_secs_f64();
        let mut latency = self.latency.lock().expect("metrics lock");
        let histogram = latency.entry(route.to_owned()).or_default();
        for (count, bound) in histogram.counts.iter_mut().zip(BUCKETS) {
            if seconds <= bound {
                *count += 1;
            }
        }
        histogram.sum += seconds;
        histogram.total += 1;
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

    /// One argon2 verification.
    pub fn argon2_verification(&self) {
        self.argon2_verifications.fetch_add(1, Relaxed);
    }

    /// The Prometheus text exposition. `extra` adds gauges/counters owned elsewhere.
    pub fn render(&self, extra: &[(&str, &str, &str, u64)]) -> String {
        let mut out = String::new();
        out.push_str("# HELP registry_http_requests_total HTTP requests by route, method and status.\n");
        out.push_str("# TYPE registry_http_requests_total counter\n");
        for ((route, method, status), n) in self.requests.lock().expect("metrics lock").iter() {
            let _ = writeln!(
                out,
                "registry_http_requests_total{{route=\"{route}\",method=\"{method}\",status=\"{status}\"}} {n}"
            );
        }
        out.push_str("# HELP registry_http_request_duration_seconds Request latency by route.\n");
        out.push_str("# TYPE registry_http_request_duration_seconds histogram\n");
        for (route, h) in self.latency.lock().expect("metrics lock").iter() {
            for (count, bound) in h.counts.iter().zip(BUCKETS) {
                let _ = writeln!(
                    out,
                    "registry_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"{bound}\"}} {count}"
                );
            }
            let _ = writeln!(
                out,
                "registry_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"+Inf\"}} {}\n\
                 registry_http_request_duration_seconds_sum{{route=\"{route}\"}} {}\n\
                 registry_http_request_duration_seconds_count{{route=\"{route}\"}} {}",
                h.total, h.sum, h.total
            );
        }
        let counters = [
            ("registry_hosting_cache_hits_total", "Public documents served from memory.", self.hosting_hits.load(Relaxed)),
            ("registry_hosting_cache_misses_total", "Public requests for unpublished issuers.", self.hosting_misses.load(Relaxed)),
            ("registry_token_cache_hits_total", "Secrets accepted from the verification cache.", self.token_cache_hits.load(Relaxed)),
            ("registry_argon2_verifications_total", "argon2 verifications run.", self.argon2_verifications.load(Relaxed)),
        ];
        for (name, help, value) in counters {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}");
        }
        for (name, kind, help, value) in extra {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
        }
        out
    }
}
