//! The fetch evidence (docs/api.md, "Fetch evidence"): replicas' counts add up per hour bucket, the
//! last fetch only moves forward, and buckets older than a day go.

use super::store;
use registry_domain::ports::{AgentFetches, DocumentFetches, FetchLog, FetchedDocument};
use time::macros::datetime;
use time::{Duration, OffsetDateTime};
use uuid::Uuid;

const NOON: OffsetDateTime = datetime!(2026-11-25 12:00 UTC);

fn counts(service: Uuid, at: OffsetDateTime, agents: &[(&str, u64)]) -> DocumentFetches {
    DocumentFetches {
        service_id: service,
        document: FetchedDocument::Jwks,
        ok: 2,
        not_modified: 1,
        last_at: at,
        agents: agents
            .iter()
            .map(|(agent, count)| AgentFetches {
                agent: (*agent).into(),
                count: *count,
                last_at: at,
            })
            .collect(),
    }
}

#[test]
fn replicas_counts_add_up_per_hour_and_old_hours_are_pruned() {
    let store = store();
    let (service, other) = (Uuid::new_v4(), Uuid::new_v4());
    let later = NOON + Duration::minutes(10);
    // Two replicas flush in the same hour, the later fetch first.
    store
        .record_fetches(&[counts(service, later, &[("aws", 3), ("gcp", 1)])])
        .unwrap();
    store
        .record_fetches(&[
            counts(
                service,
                NOON + Duration::minutes(5),
                &[("aws", 2), ("azure", 4)],
            ),
            counts(other, NOON, &[("aws", 1)]),
        ])
        .unwrap();
    // A day and more ago.
    let old = NOON - Duration::hours(26);
    store
        .record_fetches(&[counts(service, old, &[("old", 50)])])
        .unwrap();

    let read = store
        .fetches(service, NOON - Duration::hours(24), 2)
        .unwrap();
    assert_eq!(read.len(), 1, "{read:?}");
    let jwks = &read[0];
    assert_eq!(jwks.document, FetchedDocument::Jwks);
    assert_eq!((jwks.ok, jwks.not_modified), (4, 2));
    assert_eq!(jwks.last_at, later, "the last fetch only moves forward");
    let agents: Vec<(&str, u64)> = jwks
        .agents
        .iter()
        .map(|a| (a.agent.as_str(), a.count))
        .collect();
    assert_eq!(
        agents,
        [("aws", 5), ("azure", 4)],
        "the most frequent first"
    );
    assert_eq!(jwks.agents[0].last_at, later);
    let all = store.fetches(service, old, 10).unwrap();
    assert_eq!(all[0].ok, 6);

    assert!(store.prune_fetches(NOON - Duration::hours(24)).unwrap() >= 2);
    let all = store.fetches(service, old, 10).unwrap();
    assert_eq!(all[0].ok, 4, "the old bucket went");
    assert_eq!(store.fetches(other, old, 10).unwrap()[0].ok, 2);
    assert!(store.fetches(Uuid::new_v4(), old, 10).unwrap().is_empty());
}
