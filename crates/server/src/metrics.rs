//! Prometheus metrics on `prometheus-client` (the Prometheus project's Rust client): request
//! counts by route, method and status, a latency histogram per route, and a few counters. The
//! exposition is OpenMetrics text, which Prometheus scrapes as it does its own format; the
//! metric names and labels are the ones the hand-written exposition had.
//!
//! Every request records a sample in its own thread's counts, under a lock no other worker
//! takes (only a scrape visits every thread's counts, and adds them up): workers never share a
//! counter, so recording costs the same on 1 core or 16.

use crossbeam_utils::CachePadded;
use foldhash::HashMap;
use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;
use thread_local::ThreadLocal;

/// The latency buckets' upper bounds, in seconds (and `+Inf` after them).
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// The `Content-Type` of [`Metrics::render`].
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResponseLabels {
    route: String,
    method: &'static str,
    status: u16,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: String,
}

/// What one thread counted since the start.
#[derive(Debug, Default)]
struct Counts {
    routes: HashMap<Box<str>, RouteCounts>,
    hosting_hits: u64,
    hosting_misses: u64,
    token_cache_hits: u64,
    identity_token_cache_hits: u64,
    argon2_verifications: u64,
    signatures: [u64; SIGN_RESULTS.len()],
}

/// The outcomes of `POST /services/{s}/sign`, as `registry_signatures_total{result}` labels them
/// (docs/api.md, "Managed signing").
pub const SIGN_RESULTS: [&str; 5] = [
    "signed",
    "invalid_claims",
    "no_key_ready",
    "rate_limited",
    "refused",
];

/// One route's requests: latencies by bucket (the last is `+Inf`), their sum, and the
/// responses by (method, status), of which a route sees a handful.
#[derive(Debug, Default, Clone)]
struct RouteCounts {
    buckets: [u64; BUCKETS.len() + 1],
    sum: f64,
    responses: Vec<(&'static str, u16, u64)>,
}

impl RouteCounts {
    fn add(&mut self, other: &RouteCounts) {
        for (mine, theirs) in self.buckets.iter_mut().zip(other.buckets) {
            *mine += theirs;
        }
        self.sum += other.sum;
        for &(method, status, n) in &other.responses {
            *self.response(method, status) += n;
        }
    }

    fn response(&mut self, method: &'static str, status: u16) -> &mut u64 {
        let at = match (self.responses.iter()).position(|(m, s, _)| *m == method && *s == status) {
            Some(at) => at,
            None => {
                self.responses.push((method, status, 0));
                self.responses.len() - 1
            }
        };
        &mut self.responses[at].2
    }
}

/// A latency histogram added up from every thread's counts at scrape time.
#[derive(Debug, Default)]
struct SummedHistogram(OnceLock<RouteCounts>);

impl TypedMetric for SummedHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for SummedHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let counts = self.0.get().cloned().unwrap_or_default();
        let bounds = BUCKETS.iter().copied().chain([f64::INFINITY]);
        let buckets: Vec<(f64, u64)> = bounds.zip(counts.buckets).collect();
        let count = counts.buckets.iter().sum();
        encoder.encode_histogram::<NoLabelSet>(counts.sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// The registry's metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    per_thread: ThreadLocal<CachePadded<Mutex<Counts>>>,
}

/// A value owned elsewhere, read at scrape time: name, `"gauge"` or `"counter"`, help, value.
pub type Extra<'a> = (&'a str, &'a str, &'a str, u64);

/// A value measured in fractions (seconds, bytes), read at scrape time: name, help, value; a
/// gauge, or a counter when the name ends in `_total`.
pub type Measured<'a> = (&'a str, &'a str, f64);

/// One series of a labelled value read at scrape time: name, help, labels, value. Series of one
/// name make one family (the help of the first is the family's); a gauge, or a counter when the
/// name ends in `_total`.
pub type Labeled<'a> = (&'a str, &'a str, Vec<(&'static str, String)>, f64);

impl Metrics {
    /// This thread's counts.
    fn mine(&self) -> MutexGuard<'_, Counts> {
        let counts = self.per_thread.get_or_default();
        counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every thread's counts added up.
    fn total(&self) -> Counts {
        let mut total = Counts::default();
        for counts in &self.per_thread {
            let counts = counts.lock().unwrap_or_else(PoisonError::into_inner);
            for (route, route_counts) in &counts.routes {
                match total.routes.get_mut(route) {
                    Some(sum) => sum.add(route_counts),
                    None => {
                        total.routes.insert(route.clone(), route_counts.clone());
                    }
                }
            }
            total.hosting_hits += counts.hosting_hits;
            total.hosting_misses += counts.hosting_misses;
            total.token_cache_hits += counts.token_cache_hits;
            total.identity_token_cache_hits += counts.identity_token_cache_hits;
            total.argon2_verifications += counts.argon2_verifications;
            for (sum, n) in total.signatures.iter_mut().zip(counts.signatures) {
                *sum += n;
            }
        }
        total
    }

    /// Counts one `POST …/sign` with its outcome (an index into [`SIGN_RESULTS`]).
    pub fn signature(&self, result: usize) {
        if let Some(n) = self.mine().signatures.get_mut(result) {
            *n += 1;
        }
    }

    /// The signatures counted by outcome, in the order of [`SIGN_RESULTS`].
    pub fn signatures(&self) -> [u64; SIGN_RESULTS.len()] {
        self.total().signatures
    }

    /// Counts one finished request, in this thread's counts.
    pub fn request(&self, route: &str, method: &'static str, status: u16, elapsed: Duration) {
        let mut counts = self.mine();
        let route_counts = match counts.routes.get_mut(route) {
            Some(known) => known,
            None => counts.routes.entry(route.into()).or_default(),
        };
        let seconds = elapsed.as_secs_f64();
        let bucket = BUCKETS.iter().position(|le| seconds <= *le);
        route_counts.buckets[bucket.unwrap_or(BUCKETS.len())] += 1;
        route_counts.sum += seconds;
        *route_counts.response(method, status) += 1;
    }

    /// A public document served from memory.
    pub fn hosting_hit(&self) {
        self.mine().hosting_hits += 1;
    }

    /// A public request for something not published.
    pub fn hosting_miss(&self) {
        self.mine().hosting_misses += 1;
    }

    /// Identity tokens accepted without checking their signature again, so far.
    pub fn identity_token_cache_hits(&self) -> u64 {
        (self.per_thread.iter())
            .map(|c| c.lock().unwrap_or_else(PoisonError::into_inner))
            .map(|c| c.identity_token_cache_hits)
            .sum()
    }

    /// The OpenMetrics text exposition ([`CONTENT_TYPE`]). `extra` adds values owned elsewhere.
    pub fn render(
        &self,
        extra: &[Extra<'_>],
        measured: &[Measured<'_>],
        labeled: &[Labeled<'_>],
    ) -> String {
        let total = self.total();
        let mut registry = Registry::default();
        let requests = Family::<ResponseLabels, Counter>::default();
        let latency = Family::<RouteLabels, SummedHistogram>::default();
        for (route, counts) in &total.routes {
            for &(method, status, n) in &counts.responses {
                let labels = ResponseLabels {
                    route: route.to_string(),
                    method,
                    status,
                };
                requests.get_or_create(&labels).inc_by(n);
            }
            let labels = RouteLabels {
                route: route.to_string(),
            };
            let _ = latency.get_or_create(&labels).0.set(counts.clone());
        }
        // A counter's family is named without `_total`; the exposition adds it.
        registry.register(
            "registry_http_requests",
            "HTTP requests by route, method and status",
            requests,
        );
        registry.register(
            "registry_http_request_duration_seconds",
            "Request latency by route",
            latency,
        );
        let counters = [
            (
                "registry_hosting_cache_hits",
                "Public documents served from memory",
                total.hosting_hits,
            ),
            (
                "registry_hosting_cache_misses",
                "Public requests for unpublished issuers",
                total.hosting_misses,
            ),
            (
                "registry_token_cache_hits",
                "Secrets accepted from the verification cache",
                total.token_cache_hits,
            ),
            (
                "registry_identity_token_cache_hits",
                "Identity tokens accepted from the verification cache",
                total.identity_token_cache_hits,
            ),
            (
                "registry_argon2_verifications",
                "argon2 verifications run",
                total.argon2_verifications,
            ),
        ];
        for (name, help, value) in counters {
            let counter = Counter::<u64>::default();
            counter.inc_by(value);
            registry.register(name, help, counter);
        }
        for (name, kind, help, value) in extra {
            let help = help.trim_end_matches('.');
            if *kind == "counter" {
                let counter = Counter::<u64>::default();
                counter.inc_by(*value);
                registry.register(name.trim_end_matches("_total"), help, counter);
            } else {
                let gauge = Gauge::<i64>::default();
                gauge.set(i64::try_from(*value).unwrap_or(i64::MAX));
                registry.register(*name, help, gauge);
            }
        }
        for (name, help, value) in measured {
            let help = help.trim_end_matches('.');
            // A name in `_total` is a counter read elsewhere (the process's CPU seconds).
            if let Some(family) = name.strip_suffix("_total") {
                let counter = Counter::<f64, AtomicU64>::default();
                counter.inc_by(*value);
                registry.register(family, help, counter);
            } else {
                let gauge = Gauge::<f64, AtomicU64>::default();
                gauge.set(*value);
                registry.register(*name, help, gauge);
            }
        }
        type Labels = Vec<(&'static str, String)>;
        type Named<'a, M> = (&'a str, &'a str, Family<Labels, M>);
        let mut gauges: Vec<Named<'_, Gauge<f64, AtomicU64>>> = Vec::new();
        let mut counters: Vec<Named<'_, Counter<f64, AtomicU64>>> = Vec::new();
        for (name, help, labels, value) in labeled {
            // A name in `_total` is a counter (its family is named without it).
            if let Some(family) = name.strip_suffix("_total") {
                let at = match counters.iter().position(|(n, _, _)| *n == family) {
                    Some(at) => at,
                    None => {
                        counters.push((family, help, Family::default()));
                        counters.len() - 1
                    }
                };
                counters[at].2.get_or_create(labels).inc_by(*value);
                continue;
            }
            let at = match gauges.iter().position(|(n, _, _)| n == name) {
                Some(at) => at,
                None => {
                    gauges.push((name, help, Family::default()));
                    gauges.len() - 1
                }
            };
            gauges[at].2.get_or_create(labels).set(*value);
        }
        for (name, help, family) in gauges {
            registry.register(name, help.trim_end_matches('.'), family);
        }
        for (name, help, family) in counters {
            registry.register(name, help.trim_end_matches('.'), family);
        }
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }
}

impl registry_auth::Counters for Metrics {
    fn token_cache_hit(&self) {
        self.mine().token_cache_hits += 1;
    }

    fn argon2_verification(&self) {
        self.mine().argon2_verifications += 1;
    }

    fn identity_token_cache_hit(&self) {
        self.mine().identity_token_cache_hits += 1;
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
        let text = metrics.render(&[], &[], &[]);
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
                "registry_http_request_duration_seconds_bucket{le=\"0.0005\",route=\"/a\"} 1\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "registry_http_request_duration_seconds_bucket{le=\"0.005\",route=\"/a\"} 3\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "registry_http_request_duration_seconds_bucket{le=\"2.5\",route=\"/b\"} 0\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("registry_http_request_duration_seconds_count{route=\"/b\"} 1\n"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
        let labeled = [
            ("x_up", "Up.", vec![("side", "primary".to_owned())], 1.0),
            (
                "x_up",
                "Up.",
                vec![("side", "read_replica".to_owned())],
                0.0,
            ),
        ];
        let text = metrics.render(&[], &[], &labeled);
        assert!(text.contains("# HELP x_up Up"), "{text}");
        assert!(text.contains("x_up{side=\"primary\"} 1.0\n"), "{text}");
        assert!(text.contains("x_up{side=\"read_replica\"} 0.0\n"), "{text}");
        assert!(
            text.contains("registry_http_request_duration_seconds_sum{route=\"/b\"} 5.0\n"),
            "{text}"
        );
    }

    #[test]
    fn every_threads_counts_are_added_up() {
        use registry_auth::Counters;
        let metrics = Metrics::default();
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for _ in 0..250 {
                        metrics.request("/a", "GET", 200, Duration::from_millis(2));
                    }
                    metrics.identity_token_cache_hit();
                });
            }
        });
        metrics.identity_token_cache_hit();
        let text = metrics.render(&[], &[], &[]);
        assert!(
            text.contains(
                "registry_http_requests_total{route=\"/a\",method=\"GET\",status=\"200\"} 1000\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("registry_http_request_duration_seconds_count{route=\"/a\"} 1000\n"),
            "{text}"
        );
        assert!(
            text.contains("registry_identity_token_cache_hits_total 5\n"),
            "{text}"
        );
        assert_eq!(metrics.identity_token_cache_hits(), 5);
    }
}
