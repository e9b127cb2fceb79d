//! The read model on the in-memory store, with a clock the tests move: catch-up, the settling of
//! a write, the generation that keeps a read older than a change out of the caches, revocation,
//! and the reload of a replica behind the change log's horizon.

use super::Replica;
use crate::hosting::{HostingCache, Lookup};
use registry_domain::app::{accounts, config, services, Caller, Registry};
use registry_domain::ports::{ChangeFeed, Clock, CredentialOwner, ServiceStore};
use registry_domain::testing::{self, ManualClock, MemoryStore, PlainHasher};
use registry_domain::Service;
use serde_json::json;
use std::sync::Arc;
use time::macros::datetime;
use time::Duration;
use time::OffsetDateTime;

const T0: OffsetDateTime = datetime!(2026-11-29 08:00 UTC);

/// A registry over one in-memory store, a replica of it, and a customer's first account.
struct World {
    store: Arc<MemoryStore>,
    clock: Arc<ManualClock>,
    registry: Registry,
    replica: Replica,
    caller: Caller,
    token: String,
}

/// The hosted issuers of these tests.
const TEMPLATE: (&str, &str) = ("https://{subdomain}.oidc.test", "https://registry.test");

fn world() -> World {
    let store = Arc::new(MemoryStore::default());
    let clock = Arc::new(ManualClock::at(T0));
    let tenant = testing::tenant(store.clone(), Arc::new(PlainHasher), TEMPLATE, T0);
    let issuers = tenant.registry.settings.issuers.clone();
    let hosting = HostingCache::new(issuers, 1 << 20, |at| bytes::Bytes::from(at.to_string()));
    let replica = Replica::new(store.clone(), clock.clone(), hosting);
    World {
        store,
        clock,
        registry: tenant.registry,
        replica,
        caller: tenant.caller,
        token: tenant.token,
    }
}

fn run<T>(work: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
        .block_on(work)
}

impl World {
    fn service(&self, name: &str) -> Service {
        let command = services::CreateService {
            service_name: Some(name.into()),
            ..Default::default()
        };
        services::create(&self.registry, &self.caller, command, T0).unwrap()
    }

    fn publish(&self, service: &Service, kid: &str) {
        let key = json!({"kty": "OKP", "crv": "Ed25519", "kid": kid,
            "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"});
        let body = testing::upload_of(key, "EdDSA");
        let command = config::PublishConfig {
            body,
            source: registry_domain::keys::DEFAULT_SOURCE.into(),
        };
        config::publish(
            &self.registry,
            &self.caller,
            service,
            command,
            self.clock.now(),
        )
        .unwrap();
    }

    fn lookup_id(&self) -> String {
        let parsed = registry_domain::credentials::parse(&self.token).unwrap();
        parsed.lookup_id.to_owned()
    }
}

#[test]
fn a_change_is_seen_at_the_next_read_that_catches_up() {
    let w = world();
    run(async {
        w.replica.reload_everything().await.unwrap();
        let api = w.service("api");
        let found = w.replica.service("api-acme").await.unwrap().unwrap();
        assert_eq!(found.title, api.title);
        let renamed = services::UpdateService {
            title: Some("Renamed".into()),
            description: None,
        };
        services::update(&w.registry, &w.caller, &api, renamed, T0).unwrap();
        // Memory answers what it holds until the change log is applied.
        let title = |s: Option<Arc<Service>>| s.unwrap().title.clone();
        assert_ne!(
            title(w.replica.service("api-acme").await.unwrap()).as_deref(),
            Some("Renamed")
        );
        w.replica.refresh().await.unwrap();
        assert_eq!(
            title(w.replica.service("api-acme").await.unwrap()).as_deref(),
            Some("Renamed")
        );
        assert_eq!(
            w.replica.directory.applied(),
            w.store.latest_change().unwrap()
        );
    });
}

#[test]
fn a_settled_write_is_served_at_once_and_a_withdrawal_too() {
    let w = world();
    run(async {
        w.replica.reload_everything().await.unwrap();
        let api = w.service("api");
        // Nothing published yet: remembered as missing for a while.
        assert!(w.replica.current("api-acme", T0).await.unwrap().is_none());
        w.publish(&api, "k1");
        w.replica.settle_write().await;
        let hosted = w.replica.current("api-acme", T0).await.unwrap().unwrap();
        assert!(std::str::from_utf8(&hosted.jwks.body)
            .unwrap()
            .contains("\"k1\""));
        config::withdraw(&w.registry, &w.caller, &api, T0).unwrap();
        w.replica.settle_write().await;
        assert!(w.replica.current("api-acme", T0).await.unwrap().is_none());
    });
}

#[test]
fn an_issuer_not_in_memory_is_read_in_place_or_through_the_blocking_pool() {
    let w = world();
    run(async {
        w.replica.reload_everything().await.unwrap();
        let (api, web) = (w.service("api"), w.service("web"));
        w.publish(&api, "k1");
        w.publish(&web, "k2");
        w.replica.settle_write().await;
        for (service, kid, waits) in [(&api, "\"k1\"", false), (&web, "\"k2\"", true)] {
            w.replica.hosting.remove(service.id);
            // `waits`: the store cannot read without waiting, and the read goes to the pool.
            w.store.set_waits(waits);
            let hosted = w.replica.current(&service.subdomain, T0).await.unwrap();
            let body = hosted.expect("published").jwks.body.clone();
            assert!(std::str::from_utf8(&body).unwrap().contains(kid));
            assert!(matches!(
                w.replica.hosting.lookup(&service.subdomain, T0),
                Lookup::Hit(_)
            ));
        }
        w.store.set_waits(false);
    });
}

#[test]
fn a_read_older_than_a_change_applied_meanwhile_is_not_kept() {
    let w = world();
    run(async {
        w.replica.reload_everything().await.unwrap();
        let api = w.service("api");
        w.publish(&api, "k1");
        w.replica.settle_write().await;
        let evicted = w.replica.hosting.remove(api.id);
        assert_eq!(evicted.as_deref(), Some("api-acme"));
        // A read begins: not in memory, its generation taken, the database read...
        let Lookup::Unknown(generation) = w.replica.hosting.lookup("api-acme", T0) else {
            panic!("not in memory")
        };
        let old = w.store.published_by_subdomain("api-acme").unwrap();
        // ...while the service publishes anew and the change is applied.
        w.publish(&api, "k2");
        w.replica.settle_write().await;
        // The older read is answered to its own caller, but not kept.
        w.replica.hosting.fill(generation, "api-acme", old, T0);
        let hosted = w.replica.current("api-acme", T0).await.unwrap().unwrap();
        assert!(std::str::from_utf8(&hosted.jwks.body)
            .unwrap()
            .contains("\"k2\""));
    });
}

#[test]
fn a_regenerated_token_and_a_deleted_account_stop_at_the_next_request() {
    let w = world();
    run(async {
        w.replica.reload_everything().await.unwrap();
        let old = w.lookup_id();
        let found = w.replica.credential(&old).await.unwrap().unwrap();
        let id = match found.owner {
            CredentialOwner::Account(id) => id,
            other => panic!("{other:?}"),
        };
        assert!(w.replica.account(id).await.unwrap().is_some());
        let regenerated =
            accounts::regenerate_token(&w.registry, &w.caller, &id.to_string(), T0).unwrap();
        // The request's one read brings the caches up to date as it finds the credential.
        assert!(w.replica.credential(&old).await.unwrap().is_none());
        let new = regenerated.token.lookup_id;
        // Through the blocking pool as well as in place.
        w.store.set_waits(true);
        assert!(w.replica.credential(&new).await.unwrap().is_some());
        w.store.set_waits(false);
        let other = accounts::create(
            &w.registry,
            &w.caller,
            accounts::CreateAccount {
                name: Some("ci".into()),
                policy: Some(json!({"kind": "static", "services": ["*"]})),
                problems: Vec::new(),
            },
            T0,
        )
        .unwrap();
        accounts::delete(&w.registry, &w.caller, &other.account.id.to_string(), T0).unwrap();
        w.replica.refresh().await.unwrap();
        assert!(w.replica.account(other.account.id).await.unwrap().is_none());
    });
}

#[test]
fn a_replica_behind_the_log_horizon_reloads_everything() {
    let w = world();
    run(async {
        w.replica.reload_everything().await.unwrap();
        let api = w.service("api");
        w.replica.refresh().await.unwrap();
        assert!(w.replica.service("api-acme").await.unwrap().is_some());
        let position = w.replica.directory.applied();
        // Two changes later, the log keeps only its newest row: the replica's position is gone.
        services::delete(&w.registry, &w.caller, &api, T0).unwrap();
        w.service("web");
        w.clock.advance(Duration::days(30));
        w.store.prune_changes(w.clock.now()).unwrap();
        assert!(w.store.oldest_change().unwrap() > Some(position + 1));
        w.replica.refresh().await.unwrap();
        assert!(w.replica.service("api-acme").await.unwrap().is_none());
        assert!(w.replica.service("web-acme").await.unwrap().is_some());
        assert_eq!(
            w.replica.directory.applied(),
            w.store.latest_change().unwrap()
        );
    });
}

#[test]
fn the_database_sides_are_the_stores() {
    let w = world();
    run(async {
        assert!(w.replica.sides().await.unwrap().primary);
        w.store.set_down(true);
        assert!(!w.replica.sides().await.unwrap().reads_work());
        assert_eq!(w.replica.pools()[0].side, "primary");
    });
}
