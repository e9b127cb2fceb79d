//! Second security review, finding 4 (docs/api.md, "Limits that hold (second security review)",
//! "Hosting memory"): the hosting cache's byte bound counts everything an entry keeps. One tenant
//! published 9,000 services of 64 KB: the cache said 512 MiB, resident memory was 1.20 GB and rose
//! to 1.68 GB under random public GETs (the uploaded key set kept per entry was not counted).
//! Scaled down: services of ~60 KB against a bound of 8 MiB, public GETs in random order; and the
//! same work on a server whose bound is nearly nothing: its memory is the fixed overhead. (Each
//! server publishes on its own fresh database, so that the two runs do the same work.)

use super::create_service;
use registry_tests::server::{json, Customer, ServerOptions, TestServer};
use reqwest::Method;
use serde_json::{json, Value};

const MIB: u64 = 1 << 20;
/// Bytes of the discovery document's padding, and of each key's `kid`.
const DOCUMENT_PADDING: usize = 8_000;
const KID_PADDING: usize = 420;
/// Keys per upload (the most a set may hold).
const KEYS: usize = 100;

/// RFC 8037's example Ed25519 key: valid material, repeated under different kids.
const ED25519_X: &str = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo";

/// An upload of about 60 KB (the review's size): a padded discovery document and 100 keys with
/// long kids.
fn large_upload(n: usize) -> Value {
    let keys: Vec<Value> = (0..KEYS)
        .map(|k| {
            json!({"kty": "OKP", "crv": "Ed25519", "use": "sig", "x": ED25519_X,
                   "kid": format!("{n}-{k}-{}", "k".repeat(KID_PADDING))})
        })
        .collect();
    json!({
        "openidConfiguration": {
            "issuer": "https://example.invalid",
            "jwks_uri": "https://example.invalid/keys",
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["EdDSA"],
            "x_padding": "p".repeat(DOCUMENT_PADDING),
        },
        "jwks": {"keys": keys},
    })
}

fn server(cache_bytes: u64, database_url: Option<String>) -> TestServer {
    TestServer::start_with(ServerOptions {
        env: vec![
            (
                "REGISTRY_HOSTING_CACHE_BYTES".into(),
                cache_bytes.to_string(),
            ),
            ("REGISTRY_MAX_BODY_BYTES".into(), (128 * 1024).to_string()),
            // The publications are the set-up, not what is measured.
            ("REGISTRY_WRITES_PER_MINUTE".into(), "1000000".into()),
            // Resident memory as close to what is kept as jemalloc allows: one arena, and freed
            // pages returned at once (by default they stay resident for seconds, and the bounded
            // server, which evicts, frees far more of them than the reference does).
            (
                "_RJEM_MALLOC_CONF".into(),
                "narenas:1,dirty_decay_ms:0,muzzy_decay_ms:0".into(),
            ),
        ],
        database_url,
        // Its memory is measured.
        binary: true,
        verifier: None,
    })
}

/// Publishes `count` large services, from three clients; returns their subdomains.
fn publish_many(server: &TestServer, customer: &Customer, count: usize) -> Vec<String> {
    let mut subdomains: Vec<String> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..3)
            .map(|worker| {
                scope.spawn(move || {
                    (worker..count)
                        .step_by(3)
                        .map(|n| {
                            let (subdomain, _) = create_service(server, customer, &format!("m{n}"));
                            let response = server
                                .authed(
                                    Method::PUT,
                                    &format!("/services/{subdomain}/config"),
                                    &customer.token,
                                )
                                .json(&large_upload(n))
                                .send()
                                .unwrap();
                            assert_eq!(response.status(), 200, "publishing {subdomain}");
                            subdomain
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    subdomains.sort();
    subdomains
}

/// A deterministic shuffle (xorshift): the same random order on every run.
fn random_order(len: usize, rounds: usize) -> Vec<usize> {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..len * rounds)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % len as u64) as usize
        })
        .collect()
}

/// What one run measured.
struct Run {
    /// The most `registry_hosted_bytes` said.
    most_hosted: u64,
    /// Resident memory at its highest sample, in bytes.
    peak_rss: u64,
}

/// Publishes `count` services, then GETs them publicly in random order (and, now and then, their
/// configuration through the API), sampling the metric and resident memory.
fn churn(server: &TestServer, count: usize) -> Run {
    let acme = server.customer("acme", "enterprise");
    let subdomains = publish_many(server, &acme, count);
    let token = acme.token.as_str();
    let mut run = Run {
        most_hosted: 0,
        peak_rss: 0,
    };
    let sample = |run: &mut Run| {
        run.most_hosted = run.most_hosted.max(server.metric("registry_hosted_bytes"));
        run.peak_rss = run.peak_rss.max(server.rss_kib() * 1024);
    };
    sample(&mut run);
    for (i, n) in random_order(subdomains.len(), 3).into_iter().enumerate() {
        let subdomain = &subdomains[n];
        let path = if i % 2 == 0 {
            "/openid/v1/jwks"
        } else {
            "/.well-known/openid-configuration"
        };
        let response = server.hosted(Method::GET, subdomain, path).send().unwrap();
        assert_eq!(response.status(), 200, "GET {subdomain}{path}");
        let body = response.bytes().unwrap();
        assert!(body.len() > DOCUMENT_PADDING, "{subdomain}{path}");
        if i % 25 == 0 {
            // The owner's view of a configuration that left memory is read back too.
            let config = server.get(&format!("/services/{subdomain}/config"), token);
            assert_eq!(config.status(), 200, "GET /services/{subdomain}/config");
            assert_eq!(
                json(config)["jwks"]["keys"].as_array().map(Vec::len),
                Some(KEYS)
            );
            sample(&mut run);
        }
    }
    sample(&mut run);
    run
}

#[test]
fn the_hosting_bound_counts_everything_an_entry_keeps_under_churn() {
    const BOUND: u64 = 8 * MIB;
    // About 18 MiB published: more than twice the bound.
    const SERVICES: usize = 300;
    // Before the fix each entry kept its key set twice, one copy uncounted: resident memory grew
    // by twice the bound and more (2.1 times in the probe of docs/hosting-memory-probe.py), on
    // every run. Now it grows by the bound and the allocator's fragmentation: 1.0 to 1.7 times
    // (debug build), which puts single runs near the limit now and then. A measurement is
    // repeated, on two fresh servers, up to three times: the uncounted copy fails all three.
    const ATTEMPTS: usize = 3;
    let limit = BOUND + BOUND / 2 + 2 * MIB;
    let mut seen = Vec::new();
    for _ in 0..ATTEMPTS {
        let grown = growth_under_churn(BOUND, SERVICES);
        seen.push(format!("{} MiB", grown / MIB));
        if grown <= limit {
            return;
        }
    }
    panic!(
        "resident memory grew by more than {} MiB over a server keeping almost nothing, with a \
         {} MiB bound, in every attempt: {}",
        limit / MIB,
        BOUND / MIB,
        seen.join(", ")
    );
}

/// How much more resident memory the same churn takes on a server whose hosting bound is
/// `bound` than on one whose bound is nearly nothing (the fixed overhead), at their peaks.
fn growth_under_churn(bound: u64, services: usize) -> u64 {
    let reference = server(64 * 1024, None);
    let baseline = churn(&reference, services);
    drop(reference);

    let bounded = server(bound, None);
    let measured = churn(&bounded, services);
    assert!(
        measured.most_hosted <= bound,
        "registry_hosted_bytes reached {} for a bound of {bound}",
        measured.most_hosted
    );
    assert!(
        measured.most_hosted >= bound - bound / 16,
        "the cache held only {} bytes of {bound}: the measurement needs it full",
        measured.most_hosted
    );
    eprintln!(
        "peak VmRSS {} KiB with a {bound}-byte bound, {} KiB with 64 KiB; \
         registry_hosted_bytes at most {}",
        measured.peak_rss / 1024,
        baseline.peak_rss / 1024,
        measured.most_hosted
    );
    measured.peak_rss.saturating_sub(baseline.peak_rss)
}

#[test]
fn the_count_is_honest_for_documents_kept_whole() {
    // One large service in a cache that holds everything: the count covers its two documents,
    // once each (the served key set is the uploaded one, not a copy), and little more.
    let server = server(64 * MIB, None);
    let acme = server.customer("acme", "enterprise");
    let subdomains = publish_many(&server, &acme, 3);
    let mut documents = 0;
    for subdomain in &subdomains {
        for path in ["/.well-known/openid-configuration", "/openid/v1/jwks"] {
            let response = server.hosted(Method::GET, subdomain, path).send().unwrap();
            assert_eq!(response.status(), 200);
            documents += response.bytes().unwrap().len() as u64;
        }
    }
    let hosted = server.metric("registry_hosted_bytes");
    assert!(
        hosted >= documents && hosted <= documents + 3 * 2048,
        "registry_hosted_bytes {hosted} for {documents} bytes of documents"
    );
}
