//! What the registry does by itself as time passes: anonymous services expire, retired keys
//! leave the stored state once their time ran out, and old rows of the change log, the audit
//! trail and the refusal log go (docs/api.md: "Public hosting", "Key lifecycle", "Audit trail
//! and last use", "Explaining refusals"). Each change is written with
//! its audit event, by the system actor, like every other change.
//!
//! A retired key leaves the public key set on time whether or not this ran (the set is computed
//! for the instant it is served): upkeep makes the stored state, and the trail, say so.

use crate::app::Registry;
use crate::audit::{Action, Actor, AuditEvent, Resource};
use crate::service::PublishedConfig;
use crate::StoreError;
use time::{Duration, OffsetDateTime};
use uuid::Uuid;

/// Rows read per storage call.
const BATCH: usize = 500;
/// How long change-log rows are kept: far longer than any replica lags behind.
pub const KEEP_CHANGES: Duration = Duration::hours(1);

/// What a round of [`expire`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expired {
    /// Anonymous services deleted.
    pub services: usize,
    /// Those of them that published documents (caches in front may hold them): id, subdomain.
    pub published: Vec<(uuid::Uuid, String)>,
    /// Retired keys withdrawn.
    pub keys: usize,
}

/// Deletes the anonymous services expired at `now` (`anonymous.expire`) and withdraws the
/// retired keys whose time ran out (`key.expire`). A failed write is left for the next round.
///
/// ```
/// # use registry_domain::app::{upkeep, Registry};
/// # fn round(registry: &Registry) {
/// let now = time::OffsetDateTime::now_utc();
/// let expired = upkeep::expire(registry, now);
/// println!("{} services and {} keys expired", expired.services, expired.keys);
/// # }
/// ```
pub fn expire(registry: &Registry, now: OffsetDateTime) -> Expired {
    let (services, published) = expire_anonymous(registry, now);
    Expired {
        services,
        published,
        keys: expire_keys(registry, now),
    }
}

/// When the first anonymous service to expire after `after` (the last round's time: those
/// expired by then were that round's to delete, however it went) expires, if one does by
/// `until`: the reaper's next round is then, so that its documents leave the caches in front
/// of the registry as it expires (docs/api.md, "Behind a CDN"), not up to a round later.
pub fn next_expiry(
    registry: &Registry,
    after: OffsetDateTime,
    until: OffsetDateTime,
) -> Result<Option<OffsetDateTime>, StoreError> {
    registry.store.next_anonymous_expiry(after, until)
}

/// Deletes the change-log rows older than [`KEEP_CHANGES`], audit events older than
/// `audit_retention`, refusal records past [`KEPT_FOR`](crate::refusal::KEPT_FOR), and the
/// fetch counts (and key readiness) older than [8 days](crate::app::fetches::KEPT_FOR), and the
/// rate limits' counts older than [2 hours](crate::app::rate_counts::KEPT_FOR).
pub fn prune(
    registry: &Registry,
    now: OffsetDateTime,
    audit_retention: Duration,
) -> Result<(), StoreError> {
    let store = &*registry.store;
    store.prune_changes(now - KEEP_CHANGES)?;
    store.prune_audit(now - audit_retention)?;
    store.prune_refusals(now - crate::refusal::KEPT_FOR)?;
    store.prune_fetches(now - crate::app::fetches::KEPT_FOR)?;
    store.prune_rate_counts(now - crate::app::rate_counts::KEPT_FOR)?;
    Ok(())
}

/// Batch after batch: a burst of creations an hour ago must not take hours to clear.
/// How many it deleted, and those of them that published documents: id, subdomain.
fn expire_anonymous(
    registry: &Registry,
    now: OffsetDateTime,
) -> (usize, Vec<(uuid::Uuid, String)>) {
    let store = &*registry.store;
    let (mut total, mut published) = (0, Vec::new());
    while let Ok(expired) = store.expired_anonymous(now, BATCH) {
        // A corrupt row is left out of the batch (and logged by the store), so a short batch
        // does not mean the last one: go on until a batch deletes nothing.
        let mut deleted = 0;
        for service in expired {
            let event = AuditEvent::new(
                Action::AnonymousExpire,
                Resource::service(service.id, &service.subdomain),
                Actor::system(),
                None,
                now,
            );
            // Read before it goes: only what was published can be in a cache.
            let had_documents = matches!(store.config(service.id), Ok(Some(_)));
            if let Ok(true) = store.delete_service(service.id, &event) {
                deleted += 1;
                if had_documents {
                    published.push((service.id, service.subdomain));
                }
            }
        }
        if deleted == 0 {
            break;
        }
        total += deleted;
    }
    (total, published)
}

fn expire_keys(registry: &Registry, now: OffsetDateTime) -> usize {
    let Ok(due) = registry.store.configs_with_expired_keys(now, BATCH) else {
        return 0;
    };
    due.into_iter()
        .map(|id| expire_keys_of(registry, id, now).unwrap_or(0))
        .sum()
}

fn expire_keys_of(registry: &Registry, id: Uuid, now: OffsetDateTime) -> Result<usize, StoreError> {
    let store = &*registry.store;
    let (Some(service), Some(config)) = (store.service(id)?, store.config(id)?) else {
        return Ok(0);
    };
    let kids: Vec<String> = config.keys.expired(now).map(|k| k.kid.clone()).collect();
    let mut withdrawn = 0;
    for kid in kids {
        let event = AuditEvent::new(
            Action::KeyExpire,
            Resource::key(&kid, &service.subdomain),
            Actor::system(),
            service.customer_id,
            now,
        );
        // Read, withdraw, write in one transaction: an upload meanwhile may have dropped the
        // key already, and then nothing is written (and no event).
        let written = store.update_config(
            id,
            &mut |current: Option<PublishedConfig>| {
                let config = current?;
                // The version stays (it is dated when the key left, which the row no longer
                // tells): a document the registry writes is written again at its next change.
                let keys = config.keys.without_expired(&kid, now)?;
                Some(PublishedConfig { keys, ..config })
            },
            &event,
        )?;
        withdrawn += usize::from(written);
    }
    Ok(withdrawn)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::anonymous::{self, CreateAnonymous};
    use crate::app::testing::{origin, registry_over, MemoryStore};
    use crate::audit::{AuditQuery, Trail};
    use crate::keys::{KeyRecord, KeyState};
    use crate::ports::{AuditLog, ServiceStore};
    use crate::Plan;
    use std::sync::Arc;
    use time::macros::datetime;

    const NOW: OffsetDateTime = datetime!(2026-11-25 12:00 UTC);

    fn key(kid: &str, published_until: Option<OffsetDateTime>) -> KeyRecord {
        KeyRecord {
            kid: kid.into(),
            jwk: serde_json::Map::new(),
            thumbprint: kid.into(),
            first_published_at: NOW,
            retired_at: published_until.map(|_| NOW),
            published_until,
            lead_seconds: 600,
            source: crate::keys::DEFAULT_SOURCE.into(),
            also_sources: Vec::new(),
            verifiers: None,
            dismissed_at: None,
        }
    }

    fn actions(store: &MemoryStore, trail: Trail) -> Vec<Action> {
        let query = AuditQuery {
            trail,
            cursor: None,
            action: None,
            since: None,
            limit: 100,
        };
        let page = store.audit_events(&query).unwrap();
        page.events.iter().map(|e| e.action).collect()
    }

    /// `service` publishes `keys` (written as the store takes it, by the system).
    fn publish(store: &MemoryStore, service: &crate::Service, keys: KeyState) {
        let config = PublishedConfig {
            service_id: service.id,
            openid_configuration: "{}".into(),
            jwks: r#"{"keys":[]}"#.into(),
            updated_at: NOW,
            previous_change_at: None,
            dates: Default::default(),
            keys,
        };
        let event = AuditEvent::new(
            Action::ConfigPut,
            Resource::service(service.id, &service.subdomain),
            Actor::system(),
            service.customer_id,
            NOW,
        );
        store.put_config(&config, &event).unwrap();
    }

    #[test]
    fn an_anonymous_service_is_deleted_once_it_expired_and_not_before() {
        let store = Arc::new(MemoryStore::default());
        let (registry, ..) = registry_over(store.clone(), Plan::Business, NOW);
        let command = CreateAnonymous {
            title: None,
            description: None,
            ttl: Duration::hours(2),
        };
        let created = anonymous::create(&registry, origin(), command, || NOW).unwrap();
        let id = created.service.id;

        // The reaper's next round is planned for the expiry, when it comes within the period.
        let next = |after, until| next_expiry(&registry, NOW + after, NOW + until).unwrap();
        let two_hours = Some(NOW + Duration::hours(2));
        assert_eq!(next(Duration::ZERO, Duration::hours(3)), two_hours);
        assert_eq!(next(Duration::ZERO, Duration::hours(2)), two_hours);
        assert_eq!(next(Duration::ZERO, Duration::hours(1)), None);
        let after_it = next(Duration::hours(2), Duration::hours(3));
        assert_eq!(after_it, None, "expired by the last round: not next");
        assert_eq!(expire(&registry, NOW + Duration::minutes(119)).services, 0);
        assert!(store.service(id).unwrap().is_some());

        // It published nothing: no cache can hold its documents.
        let expired = expire(&registry, NOW + Duration::hours(2));
        assert_eq!((expired.services, expired.published), (1, Vec::new()));
        assert_eq!(store.service(id).unwrap(), None);
        let trail = actions(&store, Trail::Anonymous);
        assert_eq!(trail.first(), Some(&Action::AnonymousExpire), "{trail:?}");

        // One that published: a cache may hold its documents, and the reaper says which.
        let command = CreateAnonymous {
            title: None,
            description: None,
            ttl: Duration::hours(2),
        };
        let published = anonymous::create(&registry, origin(), command, || NOW).unwrap();
        let service = published.service;
        publish(&store, &service, KeyState::default());
        let expired = expire(&registry, NOW + Duration::hours(3));
        assert_eq!(expired.published, [(service.id, service.subdomain)]);
    }

    #[test]
    fn a_retired_key_is_withdrawn_with_its_event_once_its_time_ran_out() {
        let store = Arc::new(MemoryStore::default());
        let (registry, customer, account) = registry_over(store.clone(), Plan::Business, NOW);
        let caller = crate::app::testing::caller(account);
        let service = crate::app::services::create(
            &registry,
            &caller,
            crate::app::services::CreateService::default(),
            NOW,
        )
        .unwrap();
        let until = NOW + Duration::hours(24);
        let keys = KeyState {
            keys: vec![key("current", None), key("old", Some(until))],
            ..KeyState::default()
        };
        publish(&store, &service, keys);

        assert_eq!(expire(&registry, until - Duration::seconds(1)).keys, 0);
        assert_eq!(expire(&registry, until).keys, 1);

        let kept = store.config(service.id).unwrap().unwrap().keys;
        let kids: Vec<&str> = kept.keys.iter().map(|k| k.kid.as_str()).collect();
        assert_eq!(kids, ["current"]);
        let trail = actions(&store, Trail::Customer(customer.id));
        assert_eq!(trail.first(), Some(&Action::KeyExpire), "{trail:?}");
        assert_eq!(expire(&registry, until).keys, 0, "withdrawn once");
    }
}
