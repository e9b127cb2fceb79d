//! The authenticator over the in-memory store, a replica of it and a clock the tests move:
//! a static token is accepted, stops at the next request once regenerated or its account
//! deleted, an unknown secret is a 401, and the last use goes to the activity log once a minute.

use super::{collection_caller, service_caller, shipper, Authenticator, Limits};
use crate::{AuthError, Counters, Presented};
use registry_domain::app::{accounts, services, Caller, Registry};
use registry_domain::policy::Action;
use registry_domain::ports::{AccountStore, IdentityTokenVerifier, IssuerKeys, Verification};
use registry_domain::testing::{self, ManualClock, ManualTicks, MemoryStore};
use registry_hasher::HashingLanes;
use registry_replica::hosting::HostingCache;
use registry_replica::Replica;
use std::sync::Arc;
use time::macros::datetime;
use time::{Duration, OffsetDateTime};

const T0: OffsetDateTime = datetime!(2026-11-29 08:00 UTC);

#[derive(Debug)]
struct NoIdentityTokens;

impl IdentityTokenVerifier for NoIdentityTokens {
    fn unverified_issuer(&self, _token: &str) -> Option<String> {
        None
    }

    fn verify<'a>(&'a self, _: &'a str, _: IssuerKeys<'a>, _: OffsetDateTime) -> Verification<'a> {
        unreachable!("these tests present no identity token")
    }
}

#[derive(Debug, Default)]
struct NoCounters;

impl Counters for NoCounters {
    fn token_cache_hit(&self) {}
    fn argon2_verification(&self) {}
    fn identity_token_cache_hit(&self) {}
}

struct World {
    store: Arc<MemoryStore>,
    clock: Arc<ManualClock>,
    registry: Registry,
    auth: Authenticator,
    caller: Caller,
    token: String,
}

fn world() -> World {
    let store = Arc::new(MemoryStore::default());
    let clock = Arc::new(ManualClock::at(T0));
    // Secrets hashed for real: the authenticator verifies them with argon2.
    let hasher = Arc::new(HashingLanes::start(1).unwrap());
    let template = ("https://{subdomain}.oidc.test", "https://registry.test");
    let tenant = testing::tenant(store.clone(), hasher.clone(), template, T0);
    let issuers = tenant.registry.settings.issuers.clone();
    let hosting = HostingCache::new(issuers, 1 << 20, |at| bytes::Bytes::from(at.to_string()));
    let replica = Arc::new(Replica::new(store.clone(), clock.clone(), hosting));
    let limits = Limits {
        auth_failures_per_minute: 100,
        writes_per_minute: 100,
        ticks: Arc::new(ManualTicks::default()),
    };
    let auth = Authenticator::new(
        limits,
        replica,
        store.clone(),
        Arc::new(NoIdentityTokens),
        hasher,
        Arc::new(NoCounters),
    );
    World {
        store,
        clock,
        registry: tenant.registry,
        auth,
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

fn presented(authorization: &str, action: Action) -> Presented<'_> {
    Presented {
        ip: "192.0.2.7".parse().unwrap(),
        authorization: Some(authorization.as_bytes()),
        service_account: None,
        changes: false,
        action,
    }
}

impl World {
    fn bearer(&self) -> String {
        format!("Bearer {}", self.token)
    }

    fn last_used(&self) -> Option<OffsetDateTime> {
        let id = self.caller.acting_account().unwrap().id;
        self.store.account(id).unwrap().unwrap().last_used_at
    }
}

/// Waits for the background write of a last use (a task on the runtime).
async fn settled<T>(mut read: impl FnMut() -> Option<T>) -> Option<T> {
    for _ in 0..200 {
        if let Some(found) = read() {
            return Some(found);
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    None
}

#[test]
fn a_static_token_is_accepted_and_its_use_recorded_once_a_minute() {
    let w = world();
    run(async {
        w.auth.replica.reload_everything().await.unwrap();
        let bearer = w.bearer();
        let caller = collection_caller(&w.auth, &presented(&bearer, Action::ServicesRead))
            .await
            .unwrap();
        assert_eq!(caller.customer_id(), w.caller.customer_id());
        let first = settled(|| w.last_used())
            .await
            .expect("the first use is recorded");
        assert_eq!(first, T0);
        // Within the minute, no second write; the next minute, one.
        w.clock.advance(Duration::seconds(20));
        collection_caller(&w.auth, &presented(&bearer, Action::ServicesRead))
            .await
            .unwrap();
        assert_eq!(w.auth.last_use.statements(), 1);
        w.clock.advance(Duration::seconds(60));
        collection_caller(&w.auth, &presented(&bearer, Action::ServicesRead))
            .await
            .unwrap();
        let later = settled(|| w.last_used().filter(|at| *at > T0)).await;
        assert_eq!(later, Some(T0 + Duration::minutes(1)));
        assert_eq!(w.auth.last_use.statements(), 2);
    });
}

#[test]
fn a_regenerated_token_and_a_deleted_account_are_refused_at_the_next_request() {
    let w = world();
    run(async {
        w.auth.replica.reload_everything().await.unwrap();
        let bearer = w.bearer();
        let read = |bearer| presented(bearer, Action::ServicesRead);
        collection_caller(&w.auth, &read(&bearer)).await.unwrap();
        let id = w.caller.acting_account().unwrap().id.to_string();
        // Use cases wait for the hasher: where the server runs them, off the runtime's threads.
        let regenerated = tokio::task::block_in_place(|| {
            accounts::regenerate_token(&w.registry, &w.caller, &id, T0)
        });
        let regenerated = regenerated.unwrap();
        let refused = collection_caller(&w.auth, &read(&bearer)).await;
        assert!(
            matches!(refused, Err(AuthError::Unauthorized { .. })),
            "{refused:?}"
        );
        let new = format!("Bearer {}", regenerated.token.plaintext);
        let caller = collection_caller(&w.auth, &read(&new)).await.unwrap();
        let service = tokio::task::block_in_place(|| {
            services::create(&w.registry, &caller, Default::default(), T0)
        });
        let service = service.unwrap();
        let (_, found) = service_caller(&w.auth, &read(&new), &service.subdomain)
            .await
            .unwrap();
        assert_eq!(found.id, service.id);
        tokio::task::block_in_place(|| accounts::delete(&w.registry, &caller, &id, T0)).unwrap();
        let refused = collection_caller(&w.auth, &read(&new)).await;
        assert!(
            matches!(refused, Err(AuthError::Unauthorized { .. })),
            "{refused:?}"
        );
    });
}

#[test]
fn an_unknown_or_malformed_secret_is_refused() {
    let w = world();
    run(async {
        w.auth.replica.reload_everything().await.unwrap();
        let parsed = registry_domain::credentials::parse(&w.token).unwrap();
        let wrong = format!("Bearer rgst_{}_{}", parsed.lookup_id, "0".repeat(40));
        for bearer in [wrong.as_str(), "Bearer nonsense", "Basic eDp5"] {
            let refused =
                collection_caller(&w.auth, &presented(bearer, Action::ServicesRead)).await;
            assert!(
                matches!(refused, Err(AuthError::Unauthorized { .. })),
                "{bearer}: {refused:?}"
            );
        }
    });
}

#[test]
fn a_log_shipper_presents_the_fetch_log_token_and_wrong_ones_count_as_failures() {
    let w = world();
    let expected = "a-fetch-log-token-of-thirty-two-chars";
    let with = |bearer: &'static str| presented(bearer, Action::ConfigRead);
    assert!(shipper(
        &w.auth,
        &with("Bearer a-fetch-log-token-of-thirty-two-chars"),
        expected
    )
    .is_ok());
    for wrong in [
        "Bearer a-fetch-log-token-of-thirty-two-char",
        "Bearer ",
        "Basic eDp5",
    ] {
        let refused = shipper(&w.auth, &with(wrong), expected);
        assert!(
            matches!(refused, Err(AuthError::Unauthorized { .. })),
            "{wrong}: {refused:?}"
        );
    }
    assert_eq!(
        w.auth.auth_failures.tracked_keys(),
        1,
        "the address's failures were counted"
    );
}

/// An expired anonymous service answers 404 to an anonymous secret it does not know, though
/// this replica has not yet learned of its deletion: another replica's reaper may have deleted
/// the service, and its secret with it, as it expired.
#[test]
fn an_expired_anonymous_service_is_a_404_to_a_secret_before_this_replica_learns_it_is_gone() {
    let w = world();
    let command = registry_domain::app::anonymous::CreateAnonymous {
        title: None,
        description: None,
        ttl: Duration::hours(1),
    };
    let origin = registry_domain::app::Origin::new("192.0.2.1".parse().unwrap(), None);
    let created =
        registry_domain::app::anonymous::create(&w.registry, origin, command, || T0).unwrap();
    run(async {
        w.auth.replica.reload_everything().await.unwrap();
        use registry_domain::credentials::{LOOKUP_LEN, SECRET_LEN};
        let made_up = format!(
            "Bearer rgan_{}_{}",
            "a".repeat(LOOKUP_LEN),
            "b".repeat(SECRET_LEN)
        );
        let sub = created.service.subdomain.clone();
        let request = presented(&made_up, Action::ServicesRead);
        let live = service_caller(&w.auth, &request, &sub).await;
        assert!(
            matches!(live, Err(AuthError::Unauthorized { .. })),
            "{live:?}"
        );
        w.clock.advance(Duration::hours(1));
        let expired = service_caller(&w.auth, &request, &sub).await;
        assert!(
            matches!(expired, Err(AuthError::NotFound(_))),
            "{expired:?}"
        );
    });
}
