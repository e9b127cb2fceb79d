//! Prometheus metrics on `prometheus-client` (the Prometheus project's Rust client): request
//! counts by route, method and status, a latency histogram per route, and a few counters. The
//! exposition is OpenMetrics text, which Prometheus scrapes as it does its own format; the
//! metric names and labels are the ones the hand-written exposition had.
//!
//! Every request records a sample: a family finds its series under a read lock (shared by all
//! workers) and only adds to atomics; a new series is created once.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// The `Content-Type` of [`Metrics::render`].
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResponseLabels {
    route: Cow<'static, str>,
    method: &'static str,
    status: u16,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: Cow<'static, str>,
}

fn latency_histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

/// The registry's metrics.
#[derive(Debug)]
pub struct Metrics {
    requests: Family<ResponseLabels, Counter>,
    latency: Family<RouteLabels, Histogram, fn() -> Histogram>,
    hosting_hits: Counter,
    hosting_misses: Counter,
    token_cache_hits: Counter,
    identity_token_cache_hits: Counter,
    argon2_verifications: Counter,
    /// Each route's series, found with one look-up per request.
    routes: RwLock<HashMap<String, Arc<RouteSeries>>>,
}

/// The series of one route (handles shared with the families).
#[derive(Debug)]
struct RouteSeries {
    route: Cow<'static, str>,
    latency: Histogram,
    /// By (method, status): a route sees a handful.
    responses: RwLock<Vec<(&'static str, u16, Counter)>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            hosting_hits: Counter::default(),
            hosting_misses: Counter::default(),
            token_cache_hits: Counter::default(),
            identity_token_cache_hits: Counter::default(),
            argon2_verifications: Counter::default(),
            routes: RwLock::default(),
        }
    }
}

/// A value owned elsewhere, read at scrape time: name, `"gauge"` or `"counter"`, help, value.
pub type Extra<'a> = (&'a str, &'a str, &'a str, u64);

/// A value measured in fractions (seconds, bytes), read at scrape time: name, help, value; a
/// gauge, or a counter when the name ends in `_total`.
pub type Measured<'a> = (&'a str, &'a str, f64);

/// One series of a labelled gauge read at scrape time: name, help, labels, value. Series of one
/// name make one family (the help of the first is the family's).
pub type Labeled<'a> = (&'a str, &'a str, Vec<(&'static str, String)>, f64);

impl Metrics {
    /// Counts one finished request: one look-up of the route (its series handles are kept
    /// beside the families, which stay what the exposition reads), atomics after that.
    pub fn request(&self, route: &str, method: &'static str, status: u16, elapsed: Duration) {
        let known = self
            .routes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(route)
            .cloned();
        let series = match known {
            Some(series) => series,
            None => {
                let route: Cow<'static, str> = Cow::Owned(route.to_owned());
                let series = Arc::new(RouteSeries {
                    route: route.clone(),
                    latency: self.latency.get_or_create(&RouteLabels { route }).clone(),
                    responses: RwLock::default(),
                });
                self.routes
                    .write()
                    .unwrap_or_else(PoisonError::into_inner)
                    .entry(series.route.to_string())
                    .or_insert(series)
                    .clone()
            }
        };
        series.latency.observe(elapsed.as_secs_f64());
        let counted = series
            .responses
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .find(|(m, s, _)| *m == method && *s == status)
            .map(|(_, _, counter)| counter.inc())
            .is_some();
        if !counted {
            let counter = self
                .requests
                .get_or_create(&ResponseLabels {
                    route: series.route.clone(),
                    method,
                    status,
                })
                .clone();
            counter.inc();
            series
                .responses
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .push((method, status, counter));
        }
    }

    /// A public document served from memory.
    pub fn hosting_hit(&self) {
        self.hosting_hits.inc();
    }

    /// A public request for something not published.
    pub fn hosting_miss(&self) {
        self.hosting_misses.inc();
    }

    /// Identity tokens accepted without checking their signature again, so far.
    pub fn identity_token_cache_hits(&self) -> u64 {
        self.identity_token_cache_hits.get()
    }

    /// The OpenMetrics text exposition ([`CONTENT_TYPE`]). `extra` adds values owned elsewhere.
    pub fn render(
        &self,
        extra: &[Extra<'_>],
        measured: &[Measured<'_>],
        labeled: &[Labeled<'_>],
    ) -> String {
        let mut registry = Registry::default();
        // A counter's family is named without `_total`; the exposition adds it.
        registry.register(
            "registry_http_requests",
            "HTTP requests by route, method and status",
            self.requests.clone(),
        );
        registry.register(
            "registry_http_request_duration_seconds",
            "Request latency by route",
            self.latency.clone(),
        );
        let counters = [
            (
                "registry_hosting_cache_hits",
                "Public documents served from memory",
                &self.hosting_hits,
            ),
            (
                "registry_hosting_cache_misses",
                "Public requests for unpublished issuers",
                &self.hosting_misses,
            ),
            (
                "registry_token_cache_hits",
                "Secrets accepted from the verification cache",
                &self.token_cache_hits,
            ),
            (
                "registry_identity_token_cache_hits",
                "Identity tokens accepted from the verification cache",
                &self.identity_token_cache_hits,
            ),
            (
                "registry_argon2_verifications",
                "argon2 verifications run",
                &self.argon2_verifications,
            ),
        ];
        for (name, help, counter) in counters {
            registry.register(name, help, counter.clone());
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
        type LabeledFamily = Family<Vec<(&'static str, String)>, Gauge<f64, AtomicU64>>;
        let mut families: Vec<(&str, &str, LabeledFamily)> = Vec::new();
        for (name, help, labels, value) in labeled {
            let at = match families.iter().position(|(n, _, _)| n == name) {
                Some(at) => at,
                None => {
                    families.push((name, help, Family::default()));
                    families.len() - 1
                }
            };
            families[at].2.get_or_create(labels).set(*value);
        }
        for (name, help, family) in families {
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
        self.token_cache_hits.inc();
    }

    fn argon2_verification(&self) {
        self.argon2_verifications.inc();
    }

    fn identity_token_cache_hit(&self) {
        self.identity_token_cache_hits.inc();
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
}
