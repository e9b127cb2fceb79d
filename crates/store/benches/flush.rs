//! What a replica's flush of fetch evidence costs the database (docs/api.md, "Fetch evidence"):
//! the key sets of DOCUMENTS services, each fetched by one agent from one network since the last
//! flush, as the wide verifiers' scenario makes them (`cargo xtask bench --verifiers`). First in
//! an hour that holds none of them (every row new), then again in the same hour (every row
//! known: a busy replica's usual flush), on a real SQLite database.
//!
//! `cargo bench -p registry-store --bench flush [-- DOCUMENTS]` (16,384 by default: the most
//! services a replica counts between two flushes).

use registry_domain::audit::{Action, Actor, AuditEvent, Resource};
use registry_domain::network::Network;
use registry_domain::ports::{
    AgentFetches, Ceiling, DocumentFetches, FetchLog, FetchedDocument, NetworkFetch, ServiceStore,
};
use registry_domain::Service;
use std::time::Instant;
use time::{Duration, OffsetDateTime};
use uuid::Uuid;

/// Flushes of known rows measured (the median is shown).
const AGAIN: usize = 5;

fn flush(services: &[Uuid], at: OffsetDateTime) -> Vec<DocumentFetches> {
    let network = Network::of("203.0.113.9".parse().unwrap());
    services
        .iter()
        .map(|&service_id| DocumentFetches {
            service_id,
            document: FetchedDocument::Jwks,
            ok: 3,
            not_modified: 0,
            last_at: at,
            agents: vec![AgentFetches {
                agent: "wrk".into(),
                count: 3,
                last_at: at,
                networks: vec![NetworkFetch {
                    network,
                    last_at: at,
                }],
            }],
        })
        .collect()
}

/// `n` anonymous services that exist at `at`: a flush keeps the counts of existing services
/// only (those of a service deleted since are dropped).
fn existing(store: &dyn ServiceStore, n: usize, at: OffsetDateTime) -> Vec<Uuid> {
    (0..n)
        .map(|i| {
            let service = Service {
                id: Uuid::new_v4(),
                customer_id: None,
                subdomain: format!("flush{i:07}-anon"),
                title: None,
                description: None,
                created_at: at,
                expires_at: Some(at + Duration::days(1)),
            };
            let resource = Resource::service(service.id, &service.subdomain);
            let event = AuditEvent::new(
                Action::AnonymousCreate,
                resource,
                Actor::anonymous(),
                None,
                at,
            );
            store
                .create_service(&service, None, Ceiling::NONE, &event)
                .unwrap();
            service.id
        })
        .collect()
}

mod common;

fn main() {
    let documents = common::count_argument(16_384);
    let scratch = common::Scratch::new("flush");
    let store = &scratch.store;
    // 2026-11-29 12:00 UTC: every flush below falls in that hour.
    let t0 = OffsetDateTime::from_unix_timestamp(1_795_953_600).unwrap();
    let services = existing(&**store, documents, t0 - Duration::hours(1));

    let timed = |at: OffsetDateTime| {
        let counts = flush(&services, at);
        let started = Instant::now();
        store.record_fetches(&counts).unwrap();
        started.elapsed().as_secs_f64()
    };
    let per_document = |seconds: f64| seconds * 1e6 / documents as f64;
    let new = timed(t0);
    let mut known: Vec<f64> = (1..=AGAIN)
        .map(|i| timed(t0 + Duration::seconds(30 * i as i64)))
        .collect();
    known.sort_by(f64::total_cmp);
    let median = known[AGAIN / 2];
    println!(
        "flush of {documents} documents, every row new: {:.0} ms, {:.1} µs a document",
        new * 1e3,
        per_document(new)
    );
    println!(
        "flush of {documents} documents, every row known (median of {AGAIN}): {:.0} ms, {:.1} µs a document",
        median * 1e3,
        per_document(median)
    );
}
