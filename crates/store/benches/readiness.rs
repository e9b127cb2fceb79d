//! Key readiness on a service whose week of fetch evidence holds 100,000 distinct agents
//! (docs/api.md, "Key readiness"; docs/benchmarks.md, "Evidence no outsider can forge"): what
//! publishing a key costs (its verifiers are fixed from that week) and each readiness call's
//! latency, p50 and p99, on a real SQLite database.
//!
//! `cargo bench -p registry-store --bench readiness [-- AGENTS]` (100,000 by default).

use registry_domain::app::{config, readiness, services};
use registry_domain::network::Network;
use registry_domain::ports::{
    AgentFetches, DocumentFetches, FetchLog, FetchedDocument, NetworkFetch,
};
use registry_domain::testing::{self, PlainHasher, Tenant};
use serde_json::json;
use std::sync::Arc;
use std::time::Instant;
use time::{Duration, OffsetDateTime};

/// Agents a flush carries (a replica's space-saving bound).
const PER_FLUSH: usize = 32;

fn fetch(agent: String, network: Network, at: OffsetDateTime) -> AgentFetches {
    AgentFetches {
        agent,
        count: 1,
        last_at: at,
        networks: vec![NetworkFetch {
            network,
            last_at: at,
        }],
    }
}

mod common;

fn main() {
    let agents = common::count_argument(100_000);
    let scratch = common::Scratch::new("readiness");
    let store = &scratch.store;
    // 2026-11-29 12:00 UTC.
    let t0 = OffsetDateTime::from_unix_timestamp(1_795_953_600).unwrap();
    let template = ("http://{subdomain}.localhost:8080", "http://localhost:8080");
    let Tenant {
        registry, caller, ..
    } = testing::tenant(store.clone(), Arc::new(PlainHasher), template, t0);
    let command = services::CreateService::default();
    let service = services::create(&registry, &caller, command, t0).unwrap();

    // A week of evidence: `agents` distinct made-up agents, spread over every hour, in flushes
    // of 32, and one real verifier fetching every hour from its own network.
    let started = Instant::now();
    let hours = 7 * 24;
    let per_hour = agents.div_ceil(hours);
    let home = Network::of("203.0.113.9".parse().unwrap());
    for hour in 0..hours {
        let at = t0 - Duration::hours(hours as i64) + Duration::hours(hour as i64);
        let mut names: Vec<AgentFetches> = (0..per_hour)
            .map(|i| {
                let n = hour * per_hour + i;
                let network =
                    Network::of(format!("198.51.{}.{}", n % 250, n % 200).parse().unwrap());
                fetch(format!("made-up/{n}"), network, at)
            })
            .collect();
        names.push(fetch("AWS Security Token Service".into(), home, at));
        for flush in names.chunks(PER_FLUSH) {
            let counts = DocumentFetches {
                service_id: service.id,
                document: FetchedDocument::Jwks,
                ok: flush.len() as u64,
                not_modified: 0,
                last_at: at,
                agents: flush.to_vec(),
            };
            store.record_fetches(&[counts]).unwrap();
        }
    }
    println!(
        "evidence: {agents} agents over {hours} hours stored in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let key = json!({"kty": "OKP", "crv": "Ed25519", "kid": "k2",
        "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"});
    let mut body = testing::upload_of(key, "EdDSA");
    body["rotationLeadSeconds"] = json!(0);
    let command = config::PublishConfig {
        body,
        source: "default".into(),
    };
    let published = Instant::now();
    config::publish(&registry, &caller, &service, command, t0).unwrap();
    println!(
        "publication (its verifiers fixed from the week): {:.1} ms",
        published.elapsed().as_secs_f64() * 1e3
    );

    let now = t0 + Duration::minutes(1);
    let answer = readiness::readiness(&registry, &service, "k2", false, now).unwrap();
    assert_eq!(answer["safeToSign"], false, "{answer}");
    let verifiers = answer["verifiers"].as_array().map_or(0, Vec::len);
    let mut times: Vec<f64> = (0..1_000)
        .map(|_| {
            let one = Instant::now();
            readiness::readiness(&registry, &service, "k2", false, now).unwrap();
            one.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    println!(
        "readiness, 1,000 calls ({verifiers} verifiers): p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        times[499], times[989], times[999]
    );
}
