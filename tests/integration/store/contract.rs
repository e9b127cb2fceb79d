//! The storage contract: what the use cases rely on from the storage ports, written once and
//! checked on every store. Each case is a function of `&dyn Storage`; its test runs it on the
//! in-memory fake that the use cases' unit tests run over (`registry_domain::testing`), then on
//! the real store (SQLite, or PostgreSQL under `cargo xtask test`). The real store is the
//! truth: where the fake answered otherwise, the fake was fixed.
//!
//! What only the real store has (concurrency, connecting, migrations, corrupt rows, the clock
//! that dates its change log) is tested beside this file, on the real store alone.

use super::*;
use registry_domain::audit::{AuditQuery, Cursor, Trail};
use registry_domain::custom_domain::{
    CustomDomain, DomainCertificate, DomainProblem, DomainStatus, DomainWork, Schedule,
    CHALLENGE_KEPT, MAX_CHALLENGES_READ,
};
use registry_domain::keys::{KeyRecord, KeyState};
use registry_domain::policy::PolicyKind;
use registry_domain::ports::{
    AcmeOrder, AgentFetches, Change, CredentialOwner, DocumentFetches, FetchedDocument,
    NetworkFetch, RateCount, RateEvents, Storage, OTHER_AGENTS, STORED_AGENTS_PER_HOUR,
    STORED_AGENTS_PER_NETWORK, STORED_NETWORKS_PER_AGENT,
};
use registry_domain::signing::ManagedKey;
use registry_domain::testing::MemoryStore;
use registry_domain::StoreError;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use time::macros::datetime;

/// Runs `case` on a fresh in-memory store, then on a fresh real store; a failure says which.
fn on_every_store(case: fn(&dyn Storage)) {
    on("in-memory", &MemoryStore::default(), case);
    on(registry_tests::backend_name(), &store(), case);
}

fn on(name: &str, store: &dyn Storage, case: fn(&dyn Storage)) {
    if let Err(panic) = catch_unwind(AssertUnwindSafe(|| case(store))) {
        eprintln!("the contract case failed on the {name} store");
        resume_unwind(panic);
    }
}

fn all_changes(store: &dyn Storage) -> Vec<Change> {
    store.changes_since(0, 1000).unwrap().1
}

fn ids(accounts: &[ServiceAccount]) -> Vec<Uuid> {
    accounts.iter().map(|a| a.id).collect()
}

fn trail(store: &dyn Storage, trail: Trail) -> Vec<AuditEvent> {
    store
        .audit_events(&AuditQuery {
            trail,
            cursor: None,
            action: None,
            since: None,
            limit: 500,
        })
        .unwrap()
        .events
}

fn event(action: Action, customer: Option<Uuid>, at_seconds: i64) -> AuditEvent {
    AuditEvent::new(
        action,
        Resource::customer(Uuid::new_v4()),
        Actor::system(),
        customer,
        at(at_seconds),
    )
}

/// A retired key that leaves the public set at `until`.
fn retired(kid: &str, until: OffsetDateTime) -> KeyRecord {
    KeyRecord {
        kid: kid.into(),
        jwk: serde_json::Map::new(),
        thumbprint: kid.into(),
        first_published_at: at(0),
        retired_at: Some(at(1)),
        published_until: Some(until),
        lead_seconds: 600,
        source: registry_domain::keys::DEFAULT_SOURCE.into(),
        also_sources: Vec::new(),
        verifiers: None,
        dismissed_at: None,
    }
}

fn with_retired(mut config: PublishedConfig, kid: &str, until: OffsetDateTime) -> PublishedConfig {
    config.keys.keys.push(retired(kid, until));
    config
}

const GITHUB: &str = "https://token.actions.githubusercontent.com";
const GITLAB: &str = "https://gitlab.example.com";

// Customers.

#[test]
fn a_customer_is_created_with_its_first_account_and_token_on_every_store() {
    on_every_store(a_customer_is_created_with_its_first_account_and_token);
}

fn a_customer_is_created_with_its_first_account_and_token(store: &dyn Storage) {
    let (c, first, token) = seeded(store, "acme");

    assert_eq!(store.customer(c.id).unwrap(), Some(c.clone()));
    assert_eq!(store.customer_by_tenant("acme").unwrap(), Some(c.clone()));
    let accounts = store.accounts_of(c.id).unwrap();
    assert_eq!(accounts.len(), 1);
    assert_same_account(&accounts[0], &first);
    let stored = store.credential(&token.lookup_id).unwrap().unwrap();
    assert_eq!(stored.owner, CredentialOwner::Account(first.id));
    assert_eq!(stored.hash, token.hash);
    assert_eq!(all_changes(store), [Change::Account(first.id)]);
    assert_eq!(store.customer(Uuid::new_v4()).unwrap(), None);
    assert_eq!(store.customer_by_tenant("globex").unwrap(), None);
}

#[test]
fn a_taken_tenant_is_a_conflict_and_nothing_of_the_second_customer_remains_on_every_store() {
    on_every_store(a_taken_tenant_is_a_conflict_and_nothing_of_the_second_customer_remains);
}

fn a_taken_tenant_is_a_conflict_and_nothing_of_the_second_customer_remains(store: &dyn Storage) {
    let (original, ..) = seeded(store, "acme");
    let before = store.latest_change().unwrap();
    let intruder = customer("acme", 5);
    let account = account(intruder.id, "second", static_policy(&["*"]), 5);
    let token = record(&lookup(), "h");

    let err = store
        .create_customer(&intruder, &account, &token, &ev())
        .unwrap_err();

    assert_eq!(err, StoreError::Conflict("tenant suffix taken".into()));
    assert_eq!(store.customers().unwrap(), vec![original]);
    assert!(store.account(account.id).unwrap().is_none());
    assert_eq!(store.credential(&token.lookup_id).unwrap(), None);
    assert_eq!(store.latest_change().unwrap(), before);
}

#[test]
fn a_customer_whose_token_lookup_id_is_taken_leaves_nothing_behind_on_every_store() {
    on_every_store(a_customer_whose_token_lookup_id_is_taken_leaves_nothing_behind);
}

fn a_customer_whose_token_lookup_id_is_taken_leaves_nothing_behind(store: &dyn Storage) {
    let (_, _, taken) = seeded(store, "acme");
    let c = customer("globex", 1);
    let a = account(c.id, "first", static_policy(&["*"]), 1);

    let err = store.create_customer(&c, &a, &taken, &ev()).unwrap_err();

    assert_eq!(
        err,
        StoreError::Conflict("credential lookup id taken".into())
    );
    assert_eq!(store.customer_by_tenant("globex").unwrap(), None);
    assert!(store.account(a.id).unwrap().is_none());
}

#[test]
fn customers_are_listed_oldest_first_on_every_store() {
    on_every_store(customers_are_listed_oldest_first);
}

fn customers_are_listed_oldest_first(store: &dyn Storage) {
    for (tenant, second) in [("bravo", 30), ("alpha", 10), ("charlie", 20)] {
        let c = customer(tenant, second);
        let a = account(c.id, "first", static_policy(&["*"]), second);
        store
            .create_customer(&c, &a, &record(&lookup(), "h"), &ev())
            .unwrap();
    }
    let tenants: Vec<String> = store
        .customers()
        .unwrap()
        .into_iter()
        .map(|c| c.tenant)
        .collect();
    assert_eq!(tenants, ["alpha", "charlie", "bravo"]);
}

/// `customer.update` is written with a change of plan, and only then (docs/api.md, "Audit trail and last use"); a plan
/// is no change of the change log.
#[test]
fn a_plan_changes_for_its_tenant_only_with_its_event_only_when_it_differs_on_every_store() {
    on_every_store(a_plan_changes_for_its_tenant_only_with_its_event_only_when_it_differs);
}

fn a_plan_changes_for_its_tenant_only_with_its_event_only_when_it_differs(store: &dyn Storage) {
    let (acme, ..) = seeded(store, "acme");
    let (globex, ..) = seeded(store, "globex");
    let before = store.latest_change().unwrap();
    let event = |seconds| {
        AuditEvent::new(
            Action::CustomerUpdate,
            Resource::customer(acme.id),
            Actor::operator(),
            Some(acme.id),
            at(seconds),
        )
    };
    let updates = || {
        store
            .audit_events(&AuditQuery {
                trail: Trail::Customer(acme.id),
                cursor: None,
                action: Some(Action::CustomerUpdate),
                since: None,
                limit: 10,
            })
            .unwrap()
            .events
    };

    let changed = event(1);
    let updated = store.set_plan("acme", Plan::Free, &changed).unwrap();

    let free = Customer {
        plan: Plan::Free,
        ..acme.clone()
    };
    assert_eq!(updated, Some(free.clone()));
    assert_eq!(store.customer(acme.id).unwrap(), Some(free));
    assert_eq!(
        store.customer(globex.id).unwrap().unwrap().plan,
        Plan::Business
    );
    assert_eq!(updates(), vec![changed.clone()]);
    // The same plan again, and a tenant nobody has: nothing changes, no event.
    let same = store.set_plan("acme", Plan::Free, &event(2)).unwrap();
    assert_eq!(same.map(|c| c.plan), Some(Plan::Free));
    assert_eq!(
        store.set_plan("initech", Plan::Team, &event(3)).unwrap(),
        None
    );
    assert_eq!(updates(), vec![changed]);
    assert_eq!(store.latest_change().unwrap(), before);
}

#[test]
fn times_read_back_truncated_to_the_millisecond_on_every_store() {
    on_every_store(times_read_back_truncated_to_the_millisecond);
}

fn times_read_back_truncated_to_the_millisecond(store: &dyn Storage) {
    let precise = datetime!(2026-11-21 10:00:00.123_456_789 UTC);
    let kept = datetime!(2026-11-21 10:00:00.123 UTC);
    let c = Customer {
        created_at: precise,
        ..customer("acme", 0)
    };
    let first = ServiceAccount {
        created_at: precise,
        ..account(c.id, "first", static_policy(&["*"]), 0)
    };
    let created = AuditEvent::new(
        Action::CustomerCreate,
        Resource::customer(c.id),
        Actor::operator(),
        Some(c.id),
        precise,
    );
    store
        .create_customer(&c, &first, &record(&lookup(), "h"), &created)
        .unwrap();
    let s = Service {
        created_at: precise,
        expires_at: Some(precise + Duration::hours(1)),
        ..anonymous("abcdefghijkl-anon", 0, 0)
    };
    store
        .create_service(&s, Some(&record(&lookup(), "h")), Ceiling::NONE, &ev())
        .unwrap();
    let published = PublishedConfig {
        updated_at: precise,
        previous_change_at: Some(precise),
        dates: DocumentDates {
            discovery: Some(precise),
            jwks: Some(precise),
        },
        ..config(s.id, "http://abcdefghijkl-anon", 0)
    };
    store.put_config(&published, &ev()).unwrap();
    assert!(store.record_use(first.id, precise).unwrap());

    assert_eq!(store.customer(c.id).unwrap().unwrap().created_at, kept);
    let read = store.account(first.id).unwrap().unwrap();
    assert_eq!((read.created_at, read.last_used_at), (kept, Some(kept)));
    let read = store.service(s.id).unwrap().unwrap();
    assert_eq!(
        (read.created_at, read.expires_at),
        (kept, Some(kept + Duration::hours(1)))
    );
    let read = store.config(s.id).unwrap().unwrap();
    assert_eq!(
        (read.updated_at, read.previous_change_at),
        (kept, Some(kept))
    );
    assert_eq!(
        (read.dates.discovery, read.dates.jwks),
        (Some(kept), Some(kept))
    );
    assert_eq!(trail(store, Trail::Customer(c.id))[0].at, kept);
}

// Services.

#[test]
fn a_service_is_found_by_subdomain_in_any_case_and_by_id_on_every_store() {
    on_every_store(a_service_is_found_by_subdomain_in_any_case_and_by_id);
}

fn a_service_is_found_by_subdomain_in_any_case_and_by_id(store: &dyn Storage) {
    let (c, ..) = seeded(store, "acme");
    let s = registered(c.id, "api-acme", 1);
    store
        .create_service(&s, None, Ceiling::NONE, &ev())
        .unwrap();

    assert_eq!(store.find_service("api-acme").unwrap(), Some(s.clone()));
    assert_eq!(store.find_service("API-Acme").unwrap(), Some(s.clone()));
    assert_eq!(
        store.find_service(&s.id.to_string()).unwrap(),
        Some(s.clone())
    );
    let upper_id = s.id.hyphenated().to_string().to_uppercase();
    assert_eq!(store.find_service(&upper_id).unwrap(), Some(s.clone()));
    assert_eq!(store.service(s.id).unwrap(), Some(s.clone()));
    assert_eq!(store.find_service("web-acme").unwrap(), None);
    assert_eq!(store.find_service("api-acme\0").unwrap(), None);
    // Only ASCII folds, as in DNS: Unicode lower-cases KELVIN SIGN to `k`.
    let kelvin = registered(c.id, "k3s-acme", 2);
    store
        .create_service(&kelvin, None, Ceiling::NONE, &ev())
        .unwrap();
    assert_eq!(store.find_service("K3S-ACME").unwrap(), Some(kelvin));
    assert_eq!(store.find_service("\u{212A}3s-acme").unwrap(), None);
    assert_eq!(
        store.find_service(&Uuid::new_v4().to_string()).unwrap(),
        None
    );
    assert_eq!(store.service(Uuid::new_v4()).unwrap(), None);

    // Subdomains are kept in lower case; one that reads as a UUID is still found (Business
    // plans choose names).
    let mixed = registered(c.id, "Mixed-Acme", 2);
    let uuid_like = registered(c.id, "0123abcd-0123-0123-0123-0123456789ab", 3);
    for s in [&mixed, &uuid_like] {
        store.create_service(s, None, Ceiling::NONE, &ev()).unwrap();
    }
    assert_eq!(
        store.service(mixed.id).unwrap().unwrap().subdomain,
        "mixed-acme"
    );
    assert_eq!(
        store
            .find_service("0123ABCD-0123-0123-0123-0123456789AB")
            .unwrap(),
        Some(uuid_like)
    );
}

#[test]
fn a_taken_subdomain_is_a_conflict_whatever_its_case_on_every_store() {
    on_every_store(a_taken_subdomain_is_a_conflict_whatever_its_case);
}

fn a_taken_subdomain_is_a_conflict_whatever_its_case(store: &dyn Storage) {
    let (c, ..) = seeded(store, "acme");
    store
        .create_service(&registered(c.id, "api-acme", 1), None, Ceiling::NONE, &ev())
        .unwrap();
    let before = store.latest_change().unwrap();

    let again = registered(c.id, "API-ACME", 2);
    let err = store
        .create_service(&again, None, Ceiling::NONE, &ev())
        .unwrap_err();

    assert_eq!(err, StoreError::Conflict("subdomain taken".into()));
    assert_eq!(store.service(again.id).unwrap(), None);
    let anon = anonymous("api-acme", 3, 100);
    let secret = record(&lookup(), "h");
    let err = store
        .create_service(&anon, Some(&secret), Ceiling::NONE, &ev())
        .unwrap_err();
    assert_eq!(err, StoreError::Conflict("subdomain taken".into()));
    assert_eq!(store.credential(&secret.lookup_id).unwrap(), None);
    assert_eq!(store.latest_change().unwrap(), before);
}

#[test]
fn an_id_cannot_be_reused_on_every_store() {
    on_every_store(an_id_cannot_be_reused);
}

fn an_id_cannot_be_reused(store: &dyn Storage) {
    let (c, first, _) = seeded(store, "acme");
    let s = registered(c.id, "api-acme", 1);
    store
        .create_service(&s, None, Ceiling::NONE, &ev())
        .unwrap();

    let same_customer = Customer {
        tenant: "globex".into(),
        ..c.clone()
    };
    let other_first = account(c.id, "first", static_policy(&["*"]), 1);
    assert_eq!(
        store
            .create_customer(&same_customer, &other_first, &record(&lookup(), "h"), &ev())
            .unwrap_err(),
        StoreError::Conflict("customer id taken".into())
    );
    let same_service = Service {
        subdomain: "web-acme".into(),
        ..s
    };
    assert_eq!(
        store
            .create_service(&same_service, None, Ceiling::NONE, &ev())
            .unwrap_err(),
        StoreError::Conflict("service id taken".into())
    );
    assert_eq!(
        store
            .create_account(&first, None, Ceiling::NONE, None, &ev())
            .unwrap_err(),
        StoreError::Conflict("service account id taken".into())
    );
    assert_eq!(store.find_service("web-acme").unwrap(), None);
    assert_eq!(store.customer_by_tenant("globex").unwrap(), None);
}

#[test]
fn a_service_or_account_of_an_unknown_customer_is_not_found_on_every_store() {
    on_every_store(a_service_or_account_of_an_unknown_customer_is_not_found);
}

fn a_service_or_account_of_an_unknown_customer_is_not_found(store: &dyn Storage) {
    let ghost = Uuid::new_v4();
    let s = registered(ghost, "api-ghost", 1);
    assert_eq!(
        store
            .create_service(&s, None, Ceiling::NONE, &ev())
            .unwrap_err(),
        StoreError::NotFound
    );
    let a = account(ghost, "ghost", static_policy(&["*"]), 1);
    let token = record(&lookup(), "h");
    assert_eq!(
        store
            .create_account(&a, Some(&token), Ceiling::NONE, None, &ev())
            .unwrap_err(),
        StoreError::NotFound
    );
    assert_eq!(store.service(s.id).unwrap(), None);
    assert!(store.account(a.id).unwrap().is_none());
    assert_eq!(store.credential(&token.lookup_id).unwrap(), None);
    assert_eq!(store.latest_change().unwrap(), 0);
}

#[test]
fn services_of_lists_one_customers_services_oldest_first_on_every_store() {
    on_every_store(services_of_lists_one_customers_services_oldest_first);
}

fn services_of_lists_one_customers_services_oldest_first(store: &dyn Storage) {
    let (acme, ..) = seeded(store, "acme");
    let (globex, ..) = seeded(store, "globex");
    let later = registered(acme.id, "b-acme", 20);
    let earlier = registered(acme.id, "a-acme", 10);
    for s in [
        &later,
        &earlier,
        &registered(globex.id, "x-globex", 5),
        &anonymous("abcdefghijkl-anon", 1, 100),
    ] {
        store.create_service(s, None, Ceiling::NONE, &ev()).unwrap();
    }

    assert_eq!(store.services_of(acme.id).unwrap(), vec![earlier, later]);
    assert_eq!(store.count_services_of(acme.id).unwrap(), 2);
    assert_eq!(store.services_of(Uuid::new_v4()).unwrap(), vec![]);
    assert_eq!(store.count_services_of(Uuid::new_v4()).unwrap(), 0);
}

#[test]
fn owned_subdomains_answers_the_customers_own_in_the_order_asked_on_every_store() {
    on_every_store(owned_subdomains_answers_the_customers_own_in_the_order_asked);
}

fn owned_subdomains_answers_the_customers_own_in_the_order_asked(store: &dyn Storage) {
    let (acme, ..) = seeded(store, "acme");
    let (globex, ..) = seeded(store, "globex");
    for name in ["api-acme", "web-acme", "s7-acme"] {
        store
            .create_service(&registered(acme.id, name, 1), None, Ceiling::NONE, &ev())
            .unwrap();
    }
    store
        .create_service(
            &registered(globex.id, "api-globex", 1),
            None,
            Ceiling::NONE,
            &ev(),
        )
        .unwrap();

    let asked: Vec<String> = [
        "Web-Acme",
        "api-globex",
        "nope-acme",
        "api-acme",
        "web-acme",
        "Web-Acme",
    ]
    .map(String::from)
    .to_vec();
    let owned = store.owned_subdomains(acme.id, &asked).unwrap();

    assert_eq!(owned, ["Web-Acme", "api-acme", "web-acme"]);
    assert!(store.owned_subdomains(acme.id, &[]).unwrap().is_empty());
    assert!(store
        .owned_subdomains(Uuid::new_v4(), &asked)
        .unwrap()
        .is_empty());
    // Long lists too.
    let asked: Vec<String> = (0..1200).map(|i| format!("s{i}-acme")).collect();
    assert_eq!(
        store.owned_subdomains(acme.id, &asked).unwrap(),
        ["s7-acme"]
    );
}

#[test]
fn update_service_writes_title_and_description_only_on_every_store() {
    on_every_store(update_service_writes_title_and_description_only);
}

fn update_service_writes_title_and_description_only(store: &dyn Storage) {
    let (c, ..) = seeded(store, "acme");
    let s = registered(c.id, "api-acme", 1);
    store
        .create_service(&s, None, Ceiling::NONE, &ev())
        .unwrap();

    let edited = Service {
        title: Some("New title".into()),
        description: Some("What it does".into()),
        subdomain: "renamed-acme".into(),
        created_at: at(99),
        ..s.clone()
    };
    store.update_service(&s, &edited, &ev()).unwrap().unwrap();

    let read = store.service(s.id).unwrap().unwrap();
    assert_eq!(
        read,
        Service {
            subdomain: s.subdomain.clone(),
            created_at: s.created_at,
            ..edited
        }
    );
    let cleared = Service {
        title: None,
        description: None,
        ..read.clone()
    };
    store
        .update_service(&read, &cleared, &ev())
        .unwrap()
        .unwrap();
    assert_eq!(store.service(s.id).unwrap(), Some(cleared.clone()));
    let before = store.latest_change().unwrap();
    let ghost = registered(c.id, "ghost-acme", 1);
    assert_eq!(
        store.update_service(&ghost, &ghost, &ev()).unwrap_err(),
        StoreError::NotFound
    );
    // Read before another call changed it: its write would undo that change, so nothing is
    // written and the service as stored comes back to decide again from.
    let stale = (store.update_service(&read, &read, &ev())).unwrap();
    assert_eq!(stale, Err(cleared.clone()));
    assert_eq!(store.service(s.id).unwrap(), Some(cleared.clone()));
    assert_eq!(store.latest_change().unwrap(), before);
    // What is stored already: nothing written, nothing recorded.
    let events = trail(store, Trail::Anonymous).len();
    assert!(events > 0, "the updates above are recorded");
    assert_eq!(store.update_service(&cleared, &cleared, &ev()), Ok(Ok(())));
    assert_eq!(store.latest_change().unwrap(), before);
    assert_eq!(trail(store, Trail::Anonymous).len(), events);
}

#[test]
fn deleting_a_service_removes_its_configuration_and_secret_on_every_store() {
    on_every_store(deleting_a_service_removes_its_configuration_and_secret);
}

fn deleting_a_service_removes_its_configuration_and_secret(store: &dyn Storage) {
    let s = anonymous("abcdefghijkl-anon", 0, 3600);
    let secret = record(&lookup(), "$argon2id$anon");
    store
        .create_service(&s, Some(&secret), Ceiling::NONE, &ev())
        .unwrap();
    store
        .put_config(
            &config(s.id, "http://abcdefghijkl-anon.localhost:8080", 1),
            &ev(),
        )
        .unwrap();
    assert_eq!(
        store.credential(&secret.lookup_id).unwrap().unwrap().owner,
        CredentialOwner::AnonymousService(s.id)
    );
    let purged = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
    store.record_purge(s.id, purged).unwrap();

    assert!(store.delete_service(s.id, &ev()).unwrap());

    assert_eq!(store.service(s.id).unwrap(), None);
    assert_eq!(store.config(s.id).unwrap(), None);
    assert_eq!(
        store.purged_through(s.id).unwrap(),
        None,
        "its purge record"
    );
    assert_eq!(store.credential(&secret.lookup_id).unwrap(), None);
    assert_eq!(store.published_by_subdomain(&s.subdomain).unwrap(), None);
    assert!(!store.delete_service(s.id, &ev()).unwrap());
}

#[test]
fn expired_anonymous_lists_due_services_up_to_the_limit_soonest_first_on_every_store() {
    on_every_store(expired_anonymous_lists_due_services_up_to_the_limit_soonest_first);
}

fn expired_anonymous_lists_due_services_up_to_the_limit_soonest_first(store: &dyn Storage) {
    let (c, ..) = seeded(store, "acme");
    store
        .create_service(&registered(c.id, "api-acme", 0), None, Ceiling::NONE, &ev())
        .unwrap();
    let due_early = anonymous("aaaaaaaaaaaa-anon", 0, 50);
    let due_now = anonymous("bbbbbbbbbbbb-anon", 0, 100);
    let due_mid = anonymous("cccccccccccc-anon", 0, 70);
    let not_yet = anonymous("dddddddddddd-anon", 0, 101);
    for s in [&due_now, &not_yet, &due_early, &due_mid] {
        store
            .create_service(s, Some(&record(&lookup(), "h")), Ceiling::NONE, &ev())
            .unwrap();
    }
    let expired_ids = |now, limit| -> Vec<Uuid> {
        let expired = store.expired_anonymous(now, limit).unwrap();
        expired.iter().map(|s| s.id).collect()
    };

    assert_eq!(
        expired_ids(at(100), 10),
        vec![due_early.id, due_mid.id, due_now.id]
    );
    assert_eq!(expired_ids(at(100), 2), vec![due_early.id, due_mid.id]);
    assert_eq!(expired_ids(at(49), 10), Vec::<Uuid>::new());
    assert_eq!(expired_ids(at(100), 0), Vec::<Uuid>::new());
    assert_eq!(store.expired_anonymous(at(50), 1).unwrap(), vec![due_early]);
    // The reaper's next round: the first expiry after one time, by another.
    let next = |after, until| store.next_anonymous_expiry(at(after), at(until)).unwrap();
    assert_eq!(next(0, 200), Some(at(50)));
    assert_eq!(next(50, 200), Some(at(70)));
    assert_eq!(next(100, 101), Some(at(101)));
    assert_eq!(next(0, 49), None);
    assert_eq!(next(101, 500), None);
}

#[test]
fn live_anonymous_counts_the_anonymous_services_not_yet_expired_on_every_store() {
    on_every_store(live_anonymous_counts_the_anonymous_services_not_yet_expired);
}

fn live_anonymous_counts_the_anonymous_services_not_yet_expired(store: &dyn Storage) {
    let (c, ..) = seeded(store, "acme");
    store
        .create_service(&registered(c.id, "api-acme", 0), None, Ceiling::NONE, &ev())
        .unwrap();
    for s in [
        anonymous("aaaaaaaaaaaa-anon", 0, 100),
        anonymous("bbbbbbbbbbbb-anon", 0, 200),
    ] {
        store
            .create_service(&s, Some(&record(&lookup(), "h")), Ceiling::NONE, &ev())
            .unwrap();
    }

    let live = |seconds| store.live_anonymous(at(seconds)).unwrap();
    assert_eq!(
        [live(0), live(99), live(100), live(199), live(200)],
        [2, 2, 1, 1, 0]
    );
}

#[test]
fn publishing_inserts_then_replaces_and_unpublishing_removes_on_every_store() {
    on_every_store(publishing_inserts_then_replaces_and_unpublishing_removes);
}

fn publishing_inserts_then_replaces_and_unpublishing_removes(store: &dyn Storage) {
    let (c, ..) = seeded(store, "acme");
    let s = registered(c.id, "api-acme", 1);
    let other = registered(c.id, "web-acme", 2);
    for s in [&s, &other] {
        store.create_service(s, None, Ceiling::NONE, &ev()).unwrap();
    }
    assert_eq!(store.config(s.id).unwrap(), None);

    let first = config(s.id, "http://api-acme.localhost:8080", 10);
    store.put_config(&first, &ev()).unwrap();
    assert_eq!(store.config(s.id).unwrap(), Some(first));
    // Written as given: `put_config` keeps no history.
    let second = PublishedConfig {
        jwks: r#"{"keys":[]}"#.into(),
        previous_change_at: Some(at(3)),
        ..config(s.id, "http://x", 5)
    };
    store.put_config(&second, &ev()).unwrap();
    assert_eq!(store.config(s.id).unwrap(), Some(second.clone()));
    assert_eq!(store.config(other.id).unwrap(), None);

    // A configuration the write finds as one to keep stays (the check is the write's own).
    let kept = |c: &PublishedConfig| c.jwks == second.jwks;
    assert!(!store.delete_config(s.id, &kept, &ev()).unwrap());
    assert_eq!(store.config(s.id).unwrap(), Some(second.clone()));
    assert!(store.delete_config(s.id, &|_| false, &ev()).unwrap());
    assert_eq!(store.config(s.id).unwrap(), None);
    assert!(!store.delete_config(s.id, &|_| false, &ev()).unwrap());
    assert_eq!(store.service(s.id).unwrap(), Some(s), "the service stays");
    assert_eq!(
        store
            .put_config(&config(Uuid::new_v4(), "http://x", 1), &ev())
            .unwrap_err(),
        StoreError::NotFound
    );
}

/// What the key lifecycle and the reaper publish through: `make` sees what is published, and
/// the store dates the version it writes from the one it replaces (docs/api.md, "Limits that hold").
#[test]
fn update_config_writes_what_make_makes_of_the_current_configuration_on_every_store() {
    on_every_store(update_config_writes_what_make_makes_of_the_current_configuration);
}

fn update_config_writes_what_make_makes_of_the_current_configuration(store: &dyn Storage) {
    let (c, ..) = seeded(store, "acme");
    let s = registered(c.id, "api-acme", 1);
    store
        .create_service(&s, None, Ceiling::NONE, &ev())
        .unwrap();
    let read = || store.config(s.id).unwrap().unwrap();
    assert_eq!(
        store
            .update_config(Uuid::new_v4(), &mut |_| None, &ev())
            .unwrap_err(),
        StoreError::NotFound
    );

    // Nothing published: `make` sees nothing, and no earlier change is known.
    let mut seen = Vec::new();
    let first = PublishedConfig {
        previous_change_at: Some(at(1)),
        ..config(s.id, "http://first", 10)
    };
    let wrote = store
        .update_config(
            s.id,
            &mut |current| {
                seen.push(current);
                Some(first.clone())
            },
            &ev(),
        )
        .unwrap();
    assert!(wrote);
    let first = PublishedConfig {
        previous_change_at: None,
        dates: dates(10, 10),
        ..first
    };
    assert_eq!(read(), first);

    // `make` sees what is published; `None` writes nothing and logs nothing.
    let before = store.latest_change().unwrap();
    let wrote = store
        .update_config(
            s.id,
            &mut |current| {
                seen.push(current);
                None
            },
            &ev(),
        )
        .unwrap();
    assert!(!wrote);
    assert_eq!(seen, [None, Some(first.clone())]);
    assert_eq!(read(), first);
    assert_eq!(store.latest_change().unwrap(), before);

    // A new version records the one it replaces as the last change before it.
    let second = config(s.id, "http://second", 20);
    assert!(store
        .update_config(s.id, &mut |_| Some(second.clone()), &ev())
        .unwrap());
    assert_eq!(
        read(),
        PublishedConfig {
            previous_change_at: Some(at(10)),
            // A new discovery document; the key set as it was.
            dates: dates(20, 10),
            ..second
        }
    );
    // One dated before the version it replaces (a replica whose clock is behind) is dated as
    // that version.
    let behind = config(s.id, "http://behind", 15);
    store
        .update_config(s.id, &mut |_| Some(behind.clone()), &ev())
        .unwrap();
    assert_eq!(
        read(),
        PublishedConfig {
            updated_at: at(20),
            previous_change_at: Some(at(20)),
            dates: dates(20, 10),
            ..behind
        }
    );
    // The reaper writes the same version without a retired key whose time ran out: the version
    // is dated when the key left.
    let retiring = with_retired(config(s.id, "http://retiring", 30), "old", at(100));
    store
        .update_config(s.id, &mut |_| Some(retiring.clone()), &ev())
        .unwrap();
    assert_eq!(
        read().dates,
        dates(30, 30),
        "a retired key joined the key set"
    );
    let reaped = PublishedConfig {
        keys: KeyState {
            keys: retiring.keys.keys[..1].to_vec(),
            ..KeyState::default()
        },
        ..read()
    };
    store
        .update_config(s.id, &mut |_| Some(reaped.clone()), &ev())
        .unwrap();
    // The key that left is remembered, when it left (docs/api.md, "Key lifecycle").
    let left = retiring.keys.keys[1].withdrawn(at(100));
    assert_eq!(left.withdrawn_at, at(100));
    assert_eq!(
        read(),
        PublishedConfig {
            updated_at: at(100),
            previous_change_at: Some(at(30)),
            dates: dates(30, 100),
            keys: KeyState {
                withdrawn: vec![left],
                ..reaped.keys.clone()
            },
            ..reaped
        }
    );

    // A version after a deletion counts the deletion as the change before it: a client holding
    // the deleted version's date, in the same second, holds another version.
    let removed_at = AuditEvent {
        at: at(200),
        ..ev()
    };
    assert!(store.delete_config(s.id, &|_| false, &removed_at).unwrap());
    let again = config(s.id, "http://again", 200);
    assert!(store
        .update_config(s.id, &mut |_| Some(again.clone()), &ev())
        .unwrap());
    assert_eq!(
        read(),
        PublishedConfig {
            previous_change_at: Some(at(200)),
            dates: dates(200, 200),
            ..again
        }
    );
}

/// Both documents' dates, as seconds of [`at`].
fn dates(discovery: i64, jwks: i64) -> DocumentDates {
    DocumentDates {
        discovery: Some(at(discovery)),
        jwks: Some(at(jwks)),
    }
}

#[test]
fn configs_with_expired_keys_lists_due_services_soonest_first_on_every_store() {
    on_every_store(configs_with_expired_keys_lists_due_services_soonest_first);
}

fn configs_with_expired_keys_lists_due_services_soonest_first(store: &dyn Storage) {
    let (c, ..) = seeded(store, "acme");
    let services: Vec<Service> = (0..4)
        .map(|i| registered(c.id, &format!("s{i}-acme"), i))
        .collect();
    let leaving = [Some(50), Some(30), None, Some(200)];
    for (s, until) in services.iter().zip(leaving) {
        store.create_service(s, None, Ceiling::NONE, &ev()).unwrap();
        let published = config(s.id, "http://x", 10);
        let published = match until {
            Some(until) => with_retired(published, "old", at(until)),
            None => published,
        };
        store.put_config(&published, &ev()).unwrap();
    }

    let due = |now, limit| store.configs_with_expired_keys(at(now), limit).unwrap();
    assert_eq!(due(100, 10), [services[1].id, services[0].id]);
    assert_eq!(due(100, 1), [services[1].id]);
    assert_eq!(due(30, 10), [services[1].id]);
    assert!(due(29, 10).is_empty());
    assert!(due(100, 0).is_empty());
}

#[test]
fn published_by_subdomain_finds_what_a_service_publishes_on_every_store() {
    on_every_store(published_by_subdomain_finds_what_a_service_publishes);
}

fn published_by_subdomain_finds_what_a_service_publishes(store: &dyn Storage) {
    let (c, ..) = seeded(store, "acme");
    let a = registered(c.id, "a-acme", 1);
    let b = anonymous("bbbbbbbbbbbb-anon", 2, 1000);
    let unpublished = registered(c.id, "c-acme", 3);
    store
        .create_service(&a, None, Ceiling::NONE, &ev())
        .unwrap();
    store
        .create_service(&b, Some(&record(&lookup(), "h")), Ceiling::NONE, &ev())
        .unwrap();
    store
        .create_service(&unpublished, None, Ceiling::NONE, &ev())
        .unwrap();
    let ca = config(a.id, "http://a", 5);
    // A retired key with an end: the one case where the read parses the key state.
    let cb = with_retired(config(b.id, "http://b", 6), "old", at(900));
    store.put_config(&cb, &ev()).unwrap();
    store.put_config(&ca, &ev()).unwrap();

    let published = store.published_by_subdomain("a-acme").unwrap().unwrap();
    assert_eq!(published, Publication::of(&a, ca));
    assert!(published.retired.is_empty());
    // The subdomain is case folded, as `find_service` folds it.
    let published = store
        .published_by_subdomain("BBBBBBBBBBBB-anon")
        .unwrap()
        .unwrap();
    assert_eq!(published, Publication::of(&b, cb));
    assert_eq!(published.expires_at, b.expires_at);
    let retired: Vec<&str> = published.retired.iter().map(|k| k.kid.as_str()).collect();
    assert_eq!(retired, ["old"]);
    for nothing in ["c-acme", "nobody-acme", "a-acme\0", ""] {
        assert_eq!(
            store.published_by_subdomain(nothing).unwrap(),
            None,
            "{nothing:?}"
        );
    }
    assert!(store.delete_config(a.id, &|_| false, &ev()).unwrap());
    assert_eq!(store.published_by_subdomain("a-acme").unwrap(), None);
}

// Quotas and the anonymous ceiling (docs/api.md, "Limits").

#[test]
fn a_customers_services_past_its_quota_are_a_ceiling_reached_on_every_store() {
    on_every_store(a_customers_services_past_its_quota_are_a_ceiling_reached);
}

fn a_customers_services_past_its_quota_are_a_ceiling_reached(store: &dyn Storage) {
    let (acme, ..) = seeded(store, "acme");
    let (globex, ..) = seeded(store, "globex");
    store
        .create_service(
            &anonymous("abcdefghijkl-anon", 0, 100),
            None,
            Ceiling(2),
            &ev(),
        )
        .unwrap();
    for name in ["a-acme", "b-acme"] {
        store
            .create_service(&registered(acme.id, name, 1), None, Ceiling(2), &ev())
            .unwrap();
    }
    let before = store.latest_change().unwrap();

    let third = registered(acme.id, "c-acme", 2);
    assert_eq!(
        store
            .create_service(&third, None, Ceiling(2), &ev())
            .unwrap_err(),
        StoreError::CeilingReached(2)
    );
    assert_eq!(store.service(third.id).unwrap(), None);
    assert_eq!(store.count_services_of(acme.id).unwrap(), 2);
    assert_eq!(store.latest_change().unwrap(), before);
    // Another customer's quota is its own; no ceiling, no bound.
    store
        .create_service(
            &registered(globex.id, "a-globex", 2),
            None,
            Ceiling(2),
            &ev(),
        )
        .unwrap();
    store
        .create_service(&third, None, Ceiling::NONE, &ev())
        .unwrap();
    assert_eq!(store.count_services_of(acme.id).unwrap(), 3);
}

#[test]
fn anonymous_services_past_the_ceiling_live_at_their_creation_are_refused_on_every_store() {
    on_every_store(anonymous_services_past_the_ceiling_live_at_their_creation_are_refused);
}

fn anonymous_services_past_the_ceiling_live_at_their_creation_are_refused(store: &dyn Storage) {
    let (c, ..) = seeded(store, "acme");
    store
        .create_service(&registered(c.id, "api-acme", 0), None, Ceiling(2), &ev())
        .unwrap();
    let create =
        |s: &Service| store.create_service(s, Some(&record(&lookup(), "h")), Ceiling(2), &ev());
    create(&anonymous("aaaaaaaaaaaa-anon", 0, 100)).unwrap();
    create(&anonymous("bbbbbbbbbbbb-anon", 10, 50)).unwrap();

    let refused = anonymous("cccccccccccc-anon", 20, 200);
    assert_eq!(create(&refused), Err(StoreError::CeilingReached(2)));
    assert_eq!(store.service(refused.id).unwrap(), None);
    // At its expiry a service is no longer live: it leaves room.
    create(&anonymous("dddddddddddd-anon", 50, 300)).unwrap();
    assert_eq!(
        create(&anonymous("eeeeeeeeeeee-anon", 60, 300)),
        Err(StoreError::CeilingReached(2))
    );
}

#[test]
fn a_customers_accounts_past_its_quota_are_a_ceiling_reached_on_every_store() {
    on_every_store(a_customers_accounts_past_its_quota_are_a_ceiling_reached);
}

fn a_customers_accounts_past_its_quota_are_a_ceiling_reached(store: &dyn Storage) {
    let (acme, ..) = seeded(store, "acme");
    let (globex, ..) = seeded(store, "globex");
    for name in ["ci", "deploy"] {
        let a = account(acme.id, name, static_policy(&["*"]), 1);
        store
            .create_account(&a, None, Ceiling(3), None, &ev())
            .unwrap();
    }
    let before = store.latest_change().unwrap();

    let fourth = account(acme.id, "fourth", static_policy(&["*"]), 2);
    let token = record(&lookup(), "h");
    assert_eq!(
        store
            .create_account(&fourth, Some(&token), Ceiling(3), None, &ev())
            .unwrap_err(),
        StoreError::CeilingReached(3)
    );
    assert!(store.account(fourth.id).unwrap().is_none());
    assert_eq!(store.credential(&token.lookup_id).unwrap(), None);
    assert_eq!(store.count_accounts_of(acme.id).unwrap(), 3);
    assert_eq!(store.latest_change().unwrap(), before);
    let theirs = account(globex.id, "ci", static_policy(&["*"]), 2);
    store
        .create_account(&theirs, None, Ceiling(3), None, &ev())
        .unwrap();
    store
        .create_account(&fourth, None, Ceiling::NONE, None, &ev())
        .unwrap();
    assert_eq!(store.count_accounts_of(acme.id).unwrap(), 4);
}

// Accounts and their tokens.

#[test]
fn an_account_reads_back_with_its_policy_document_as_saved_on_every_store() {
    on_every_store(an_account_reads_back_with_its_policy_document_as_saved);
}

fn an_account_reads_back_with_its_policy_document_as_saved(store: &dyn Storage) {
    let (c, ..) = seeded(store, "acme");
    // Member order and the optional members survive the round trip.
    let document = json!({
        "services": ["api-acme", "web-*"],
        "kind": "static",
        "ip_allowlist": ["10.0.0.0/8"]
    });
    let a = ServiceAccount {
        // A last use is written by `record_use` only.
        last_used_at: Some(at(4)),
        ..account(c.id, "deployer", policy(document.clone()), 5)
    };
    store
        .create_account(
            &a,
            Some(&record(&lookup(), "h")),
            Ceiling::NONE,
            None,
            &ev(),
        )
        .unwrap();

    let read = store.account(a.id).unwrap().unwrap();
    assert_same_account(&read, &a);
    assert_eq!(read.last_used_at, None);
    assert_eq!(read.policy.kind(), PolicyKind::Static);
    assert_eq!(
        serde_json::to_string(read.policy.document()).unwrap(),
        serde_json::to_string(&document).unwrap()
    );
    assert!(store.account(Uuid::new_v4()).unwrap().is_none());
}

#[test]
fn accounts_of_lists_one_customers_accounts_oldest_first_on_every_store() {
    on_every_store(accounts_of_lists_one_customers_accounts_oldest_first);
}

fn accounts_of_lists_one_customers_accounts_oldest_first(store: &dyn Storage) {
    let (acme, first, _) = seeded(store, "acme");
    let (globex, ..) = seeded(store, "globex");
    let late = account(acme.id, "late", static_policy(&["*"]), 50);
    let mid = account(acme.id, "mid", oidc_policy(&[GITHUB]), 20);
    store
        .create_account(
            &late,
            Some(&record(&lookup(), "h")),
            Ceiling::NONE,
            None,
            &ev(),
        )
        .unwrap();
    store
        .create_account(&mid, None, Ceiling::NONE, None, &ev())
        .unwrap();
    store
        .create_account(
            &account(globex.id, "other", static_policy(&["*"]), 1),
            None,
            Ceiling::NONE,
            None,
            &ev(),
        )
        .unwrap();

    assert_eq!(
        ids(&store.accounts_of(acme.id).unwrap()),
        [first.id, mid.id, late.id]
    );
    assert_eq!(store.count_accounts_of(acme.id).unwrap(), 3);
    assert!(store.accounts_of(Uuid::new_v4()).unwrap().is_empty());
    assert_eq!(store.count_accounts_of(Uuid::new_v4()).unwrap(), 0);
}

#[test]
fn update_account_writes_name_and_policy_and_reindexes_issuers_on_every_store() {
    on_every_store(update_account_writes_name_and_policy_and_reindexes_issuers);
}

fn update_account_writes_name_and_policy_and_reindexes_issuers(store: &dyn Storage) {
    let (c, ..) = seeded(store, "acme");
    let a = account(c.id, "ci", oidc_policy(&[GITHUB]), 1);
    store
        .create_account(&a, None, Ceiling::NONE, None, &ev())
        .unwrap();
    assert!(store.record_use(a.id, at(60)).unwrap());

    let edited = ServiceAccount {
        name: "renamed".into(),
        policy: oidc_policy(&[GITLAB]),
        created_at: at(99),
        last_used_at: None,
        ..a.clone()
    };
    store
        .update_account(&a, &edited, None, &ev())
        .unwrap()
        .unwrap();

    let read = store.account(a.id).unwrap().unwrap();
    assert_same_account(
        &read,
        &ServiceAccount {
            created_at: a.created_at,
            ..edited
        },
    );
    assert_eq!(
        read.last_used_at,
        Some(at(60)),
        "an update keeps the last use"
    );
    assert!(store.accounts_by_issuer(GITHUB).unwrap().is_empty());
    assert_eq!(ids(&store.accounts_by_issuer(GITLAB).unwrap()), [a.id]);
    let before = store.latest_change().unwrap();
    let ghost = account(c.id, "ghost", static_policy(&["*"]), 1);
    assert_eq!(
        store
            .update_account(&ghost, &ghost, None, &ev())
            .unwrap_err(),
        StoreError::NotFound
    );
    // Read before another call changed it: a rename would put the old policy back.
    let rename = ServiceAccount {
        name: "again".into(),
        ..a.clone()
    };
    let stale = (store.update_account(&a, &rename, None, &ev())).unwrap();
    let Err(stored) = stale else {
        panic!("a stale account written: {stale:?}");
    };
    assert_same_account(&stored, &read);
    assert_eq!(ids(&store.accounts_by_issuer(GITLAB).unwrap()), [a.id]);
    assert_eq!(store.latest_change().unwrap(), before);
    // What is stored already: nothing written, nothing recorded.
    let events = trail(store, Trail::Anonymous).len();
    assert!(events > 0, "the updates above are recorded");
    let unchanged = store.update_account(&read, &read, None, &ev()).unwrap();
    assert!(unchanged.is_ok(), "{unchanged:?}");
    assert_eq!(store.latest_change().unwrap(), before);
    assert_eq!(trail(store, Trail::Anonymous).len(), events);
}

#[test]
fn deleting_an_account_removes_its_token_issuers_and_refusals_on_every_store() {
    on_every_store(deleting_an_account_removes_its_token_issuers_and_refusals);
}

fn deleting_an_account_removes_its_token_issuers_and_refusals(store: &dyn Storage) {
    let (c, first, token) = seeded(store, "acme");
    let ci = account(c.id, "ci", oidc_policy(&[GITHUB]), 1);
    store
        .create_account(&ci, None, Ceiling::NONE, None, &ev())
        .unwrap();
    store
        .record_refusals(&[(ci.id, json!({"n": 1}))], at(2))
        .unwrap();

    assert!(store.delete_account(first.id, &ev()).unwrap());
    assert!(store.delete_account(ci.id, &ev()).unwrap());

    assert!(store.account(first.id).unwrap().is_none());
    assert_eq!(store.credential(&token.lookup_id).unwrap(), None);
    assert_eq!(store.token_lookup_id(first.id).unwrap(), None);
    assert!(store.accounts_by_issuer(GITHUB).unwrap().is_empty());
    assert!(store.refusals(ci.id, at(0), 10).unwrap().is_empty());
    assert!(!store.delete_account(first.id, &ev()).unwrap());
}

#[test]
fn replacing_a_token_swaps_it_on_every_store() {
    on_every_store(replacing_a_token_swaps_it);
}

fn replacing_a_token_swaps_it(store: &dyn Storage) {
    let (c, first, old) = seeded(store, "acme");
    let new = record(&lookup(), "$argon2id$new");

    assert_eq!(
        store.token_lookup_id(first.id).unwrap().as_deref(),
        Some(&*old.lookup_id)
    );
    store
        .replace_token(&first, Some(&old.lookup_id), &new, &ev())
        .unwrap()
        .unwrap();

    assert_eq!(store.credential(&old.lookup_id).unwrap(), None);
    let stored = store.credential(&new.lookup_id).unwrap().unwrap();
    assert_eq!(stored.owner, CredentialOwner::Account(first.id));
    assert_eq!(stored.hash, new.hash);
    assert_eq!(
        store.token_lookup_id(first.id).unwrap().as_deref(),
        Some(&*new.lookup_id)
    );
    // An account without a token gets one.
    let tokenless = account(c.id, "ci", static_policy(&["*"]), 1);
    store
        .create_account(&tokenless, None, Ceiling::NONE, None, &ev())
        .unwrap();
    assert_eq!(store.token_lookup_id(tokenless.id).unwrap(), None);
    let given = record(&lookup(), "h");
    store
        .replace_token(&tokenless, None, &given, &ev())
        .unwrap()
        .unwrap();
    assert_eq!(
        store.token_lookup_id(tokenless.id).unwrap(),
        Some(given.lookup_id)
    );
}

/// Of regenerations racing each other, the one whose token is no longer the one it read is
/// told so (409), and the token that works stays.
#[test]
fn a_token_replaced_meanwhile_is_a_conflict_on_every_store() {
    on_every_store(a_token_replaced_meanwhile_is_a_conflict);
}

fn a_token_replaced_meanwhile_is_a_conflict(store: &dyn Storage) {
    let (_, first, old) = seeded(store, "acme");
    let winner = record(&lookup(), "$argon2id$winner");
    store
        .replace_token(&first, Some(&old.lookup_id), &winner, &ev())
        .unwrap()
        .unwrap();
    let before = store.latest_change().unwrap();

    for stale in [Some(old.lookup_id.as_str()), None] {
        let late = record(&lookup(), "$argon2id$late");
        let err = store
            .replace_token(&first, stale, &late, &ev())
            .unwrap_err();
        assert!(matches!(err, StoreError::Conflict(_)), "{err:?}");
        assert_eq!(store.credential(&late.lookup_id).unwrap(), None);
    }
    assert_eq!(
        store.token_lookup_id(first.id).unwrap(),
        Some(winner.lookup_id.clone())
    );
    assert!(store.credential(&winner.lookup_id).unwrap().is_some());
    assert_eq!(store.latest_change().unwrap(), before);

    // A policy changed since the account was read (who may regenerate it was judged on the
    // old one) writes nothing and answers the account as stored, to judge again from; a
    // change of another member is no change.
    let renamed = ServiceAccount {
        name: "renamed".into(),
        ..first.clone()
    };
    store
        .update_account(&first, &renamed, None, &ev())
        .unwrap()
        .unwrap();
    let again = record(&lookup(), "$argon2id$again");
    store
        .replace_token(&first, Some(&winner.lookup_id), &again, &ev())
        .unwrap()
        .unwrap();
    let changed = ServiceAccount {
        policy: static_policy(&["api-*"]),
        ..renamed.clone()
    };
    store
        .update_account(&renamed, &changed, None, &ev())
        .unwrap()
        .unwrap();
    let before = store.latest_change().unwrap();
    let late = record(&lookup(), "$argon2id$late");
    let stored = store
        .replace_token(&first, Some(&again.lookup_id), &late, &ev())
        .unwrap()
        .unwrap_err();
    assert_eq!(
        (&*stored.name, stored.policy.document()),
        (&*changed.name, changed.policy.document())
    );
    assert_eq!(store.credential(&late.lookup_id).unwrap(), None);
    assert_eq!(store.latest_change().unwrap(), before);
    store
        .replace_token(&stored, Some(&again.lookup_id), &late, &ev())
        .unwrap()
        .unwrap();
    assert!(store.credential(&late.lookup_id).unwrap().is_some());
}

#[test]
fn a_replacement_whose_lookup_id_is_taken_keeps_the_old_token_on_every_store() {
    on_every_store(a_replacement_whose_lookup_id_is_taken_keeps_the_old_token);
}

fn a_replacement_whose_lookup_id_is_taken_keeps_the_old_token(store: &dyn Storage) {
    let (_, first, old) = seeded(store, "acme");
    let (_, _, someone_elses) = seeded(store, "globex");

    let err = store
        .replace_token(&first, Some(&old.lookup_id), &someone_elses, &ev())
        .unwrap_err();

    assert_eq!(
        err,
        StoreError::Conflict("credential lookup id taken".into())
    );
    let kept = store.credential(&old.lookup_id).unwrap().unwrap();
    assert_eq!(kept.owner, CredentialOwner::Account(first.id));
    assert_eq!(kept.hash, old.hash);
    let theirs = store.credential(&someone_elses.lookup_id).unwrap().unwrap();
    assert_ne!(theirs.owner, CredentialOwner::Account(first.id));
}

#[test]
fn replacing_the_token_of_a_missing_account_is_not_found_on_every_store() {
    on_every_store(replacing_the_token_of_a_missing_account_is_not_found);
}

fn replacing_the_token_of_a_missing_account_is_not_found(store: &dyn Storage) {
    let t = record(&lookup(), "h");
    let gone = account(Uuid::new_v4(), "gone", static_policy(&["*"]), 9);
    assert_eq!(
        store.replace_token(&gone, None, &t, &ev()).unwrap_err(),
        StoreError::NotFound
    );
    assert_eq!(store.credential(&t.lookup_id).unwrap(), None);
    assert_eq!(store.latest_change().unwrap(), 0);
}

#[test]
fn accounts_are_found_by_the_exact_issuer_of_their_rules_on_every_store() {
    on_every_store(accounts_are_found_by_the_exact_issuer_of_their_rules);
}

fn accounts_are_found_by_the_exact_issuer_of_their_rules(store: &dyn Storage) {
    let (acme, ..) = seeded(store, "acme");
    let (globex, ..) = seeded(store, "globex");
    let both = account(acme.id, "both", oidc_policy(&[GITHUB, GITLAB, GITHUB]), 1);
    let github = account(globex.id, "gh", oidc_policy(&[GITHUB]), 2);
    let gitlab = account(acme.id, "gl", oidc_policy(&[GITLAB]), 3);
    for a in [&gitlab, &github, &both] {
        store
            .create_account(a, None, Ceiling::NONE, None, &ev())
            .unwrap();
    }

    assert_eq!(
        ids(&store.accounts_by_issuer(GITHUB).unwrap()),
        [both.id, github.id]
    );
    assert_eq!(
        ids(&store.accounts_by_issuer(GITLAB).unwrap()),
        [both.id, gitlab.id]
    );
    for other in [
        format!("{GITHUB}/"),
        GITHUB.to_uppercase(),
        String::new(),
        format!("{GITHUB}\0"),
    ] {
        assert!(
            store.accounts_by_issuer(&other).unwrap().is_empty(),
            "{other:?}"
        );
    }
    // Every OIDC account of every customer, oldest first; static ones are not.
    assert_eq!(
        ids(&store.oidc_accounts().unwrap()),
        [both.id, github.id, gitlab.id]
    );
}

#[test]
fn a_last_use_never_moves_backwards_and_a_minute_is_written_once_on_every_store() {
    on_every_store(a_last_use_never_moves_backwards_and_a_minute_is_written_once);
}

fn a_last_use_never_moves_backwards_and_a_minute_is_written_once(store: &dyn Storage) {
    let (_, boot, _) = seeded(store, "acme");
    let before = store.latest_change().unwrap();
    assert_eq!(store.account(boot.id).unwrap().unwrap().last_used_at, None);

    assert!(store.record_use(boot.id, at(120)).unwrap());
    // Another replica in the same minute, or one whose clock is behind: no write.
    assert!(!store.record_use(boot.id, at(120)).unwrap());
    assert!(!store.record_use(boot.id, at(60)).unwrap());
    assert_eq!(
        store.account(boot.id).unwrap().unwrap().last_used_at,
        Some(at(120))
    );
    assert!(store.record_use(boot.id, at(180)).unwrap());
    assert!(!store.record_use(Uuid::new_v4(), at(180)).unwrap());
    assert_eq!(
        store.account(boot.id).unwrap().unwrap().last_used_at,
        Some(at(180))
    );
    // No cache holds it: no change of the change log.
    assert_eq!(store.latest_change().unwrap(), before);
}

// Credentials.

#[test]
fn credentials_are_found_by_lookup_id_with_their_owner_on_every_store() {
    on_every_store(credentials_are_found_by_lookup_id_with_their_owner);
}

fn credentials_are_found_by_lookup_id_with_their_owner(store: &dyn Storage) {
    let (_, first, token) = seeded(store, "acme");
    let s = anonymous("abcdefghijkl-anon", 0, 3600);
    let secret = record(&lookup(), "$argon2id$anon");
    store
        .create_service(&s, Some(&secret), Ceiling::NONE, &ev())
        .unwrap();

    let t = store.credential(&token.lookup_id).unwrap().unwrap();
    assert_eq!(
        (t.owner, t.hash),
        (CredentialOwner::Account(first.id), token.hash)
    );
    let a = store.credential(&secret.lookup_id).unwrap().unwrap();
    assert_eq!(
        (a.owner, a.hash.clone()),
        (CredentialOwner::AnonymousService(s.id), secret.hash)
    );
    assert_eq!(store.credential("no-such-lookup").unwrap(), None);
    assert_eq!(store.credential("").unwrap(), None);
    // With the change log's newest sequence, read at once.
    let latest = store.latest_change().unwrap();
    assert_eq!(
        store
            .credential_and_latest_change(&secret.lookup_id)
            .unwrap(),
        Some((a, latest))
    );
    assert_eq!(
        store
            .credential_and_latest_change("no-such-lookup")
            .unwrap(),
        None
    );
}

#[test]
fn a_secret_whose_lookup_id_is_taken_leaves_no_service_behind_on_every_store() {
    on_every_store(a_secret_whose_lookup_id_is_taken_leaves_no_service_behind);
}

fn a_secret_whose_lookup_id_is_taken_leaves_no_service_behind(store: &dyn Storage) {
    let (c, _, token) = seeded(store, "acme");
    let s = anonymous("abcdefghijkl-anon", 0, 3600);

    let err = store
        .create_service(&s, Some(&token), Ceiling::NONE, &ev())
        .unwrap_err();

    assert_eq!(
        err,
        StoreError::Conflict("credential lookup id taken".into())
    );
    assert_eq!(store.find_service("abcdefghijkl-anon").unwrap(), None);
    // Nor an account whose token's lookup id is taken.
    let a = account(c.id, "ci", static_policy(&["*"]), 1);
    assert_eq!(
        store
            .create_account(&a, Some(&token), Ceiling::NONE, None, &ev())
            .unwrap_err(),
        StoreError::Conflict("credential lookup id taken".into())
    );
    assert!(store.account(a.id).unwrap().is_none());
}

// The change log.

#[test]
fn an_empty_log_starts_at_zero_on_every_store() {
    on_every_store(an_empty_log_starts_at_zero);
}

fn an_empty_log_starts_at_zero(store: &dyn Storage) {
    assert_eq!(store.latest_change().unwrap(), 0);
    assert_eq!(store.oldest_change().unwrap(), None);
    assert_eq!(store.changes_since(0, 10).unwrap(), (0, vec![]));
    assert_eq!(store.changes_since(7, 10).unwrap(), (7, vec![]));
    assert_eq!(store.prune_changes(at(1_000_000)).unwrap(), 0);
}

#[test]
fn every_write_to_services_and_accounts_is_logged_in_order_on_every_store() {
    on_every_store(every_write_to_services_and_accounts_is_logged_in_order);
}

fn every_write_to_services_and_accounts_is_logged_in_order(store: &dyn Storage) {
    let (c, first, _) = seeded(store, "acme");
    let s = registered(c.id, "api-acme", 1);
    store
        .create_service(&s, None, Ceiling::NONE, &ev())
        .unwrap();
    store
        .update_service(
            &s,
            &Service {
                title: Some("t".into()),
                ..s.clone()
            },
            &ev(),
        )
        .unwrap()
        .unwrap();
    store
        .put_config(&config(s.id, "http://api-acme", 2), &ev())
        .unwrap();
    store
        .update_config(
            s.id,
            &mut |_| Some(config(s.id, "http://api-acme", 3)),
            &ev(),
        )
        .unwrap();
    store.delete_config(s.id, &|_| false, &ev()).unwrap();
    let a = account(c.id, "ci", static_policy(&["*"]), 3);
    store
        .create_account(
            &a,
            Some(&record(&lookup(), "h")),
            Ceiling::NONE,
            None,
            &ev(),
        )
        .unwrap();
    store
        .update_account(
            &a,
            &ServiceAccount {
                name: "ci2".into(),
                ..a.clone()
            },
            None,
            &ev(),
        )
        .unwrap()
        .unwrap();
    let replaced = store.token_lookup_id(a.id).unwrap();
    store
        .replace_token(&a, replaced.as_deref(), &record(&lookup(), "h2"), &ev())
        .unwrap()
        .unwrap();
    store.delete_account(a.id, &ev()).unwrap();
    store.delete_service(s.id, &ev()).unwrap();

    use Change::{Account, Service as Svc};
    assert_eq!(
        all_changes(store),
        [
            Account(first.id),
            Svc(s.id),
            Svc(s.id),
            Svc(s.id),
            Svc(s.id),
            Svc(s.id),
            Account(a.id),
            Account(a.id),
            Account(a.id),
            Account(a.id),
            Svc(s.id),
        ]
    );
    let (last, _) = store.changes_since(0, 1000).unwrap();
    assert_eq!(last, store.latest_change().unwrap());
    let (first_seq, _) = store.changes_since(0, 1).unwrap();
    assert_eq!(store.oldest_change().unwrap(), Some(first_seq));
}

#[test]
fn failed_and_empty_writes_log_nothing_on_every_store() {
    on_every_store(failed_and_empty_writes_log_nothing);
}

fn failed_and_empty_writes_log_nothing(store: &dyn Storage) {
    let (c, first, _) = seeded(store, "acme");
    let s = registered(c.id, "api-acme", 1);
    store
        .create_service(&s, None, Ceiling::NONE, &ev())
        .unwrap();
    let before = store.latest_change().unwrap();

    assert!(store
        .create_service(&registered(c.id, "api-acme", 2), None, Ceiling::NONE, &ev())
        .is_err());
    assert!(store
        .create_service(&registered(c.id, "web-acme", 2), None, Ceiling(1), &ev())
        .is_err());
    assert!(!store.delete_service(Uuid::new_v4(), &ev()).unwrap());
    assert!(!store.delete_config(s.id, &|_| false, &ev()).unwrap());
    assert!(!store.update_config(s.id, &mut |_| None, &ev()).unwrap());
    assert!(!store.delete_account(Uuid::new_v4(), &ev()).unwrap());
    assert!(store
        .put_config(&config(Uuid::new_v4(), "http://x", 1), &ev())
        .is_err());
    assert!(store
        .replace_token(
            &account(Uuid::new_v4(), "gone", static_policy(&["*"]), 9),
            None,
            &record(&lookup(), "h"),
            &ev(),
        )
        .is_err());
    // Writes no cache needs to hear of.
    store.set_plan("acme", Plan::Team, &ev()).unwrap();
    store.record_use(first.id, at(60)).unwrap();
    store
        .record_refusals(&[(first.id, json!({"n": 1}))], at(60))
        .unwrap();
    store
        .record_fetches(&[DocumentFetches {
            service_id: s.id,
            document: FetchedDocument::Discovery,
            ok: 1,
            not_modified: 0,
            last_at: at(60),
            agents: Vec::new(),
        }])
        .unwrap();

    assert_eq!(store.latest_change().unwrap(), before);
}

#[test]
fn changes_are_read_in_pages_on_every_store() {
    on_every_store(changes_are_read_in_pages);
}

fn changes_are_read_in_pages(store: &dyn Storage) {
    let (c, ..) = seeded(store, "acme");
    let services: Vec<Service> = (0..5)
        .map(|i| registered(c.id, &format!("s{i}-acme"), i))
        .collect();
    for s in &services {
        store.create_service(s, None, Ceiling::NONE, &ev()).unwrap();
    }
    let (start, _) = store.changes_since(0, 1).unwrap();

    let mut seen = Vec::new();
    let mut cursor = start;
    loop {
        let (next, page) = store.changes_since(cursor, 2).unwrap();
        assert!(page.len() <= 2);
        if page.is_empty() {
            assert_eq!(next, cursor);
            break;
        }
        assert!(next > cursor);
        seen.extend(page);
        cursor = next;
    }
    assert_eq!(
        seen,
        services
            .iter()
            .map(|s| Change::Service(s.id))
            .collect::<Vec<_>>()
    );
    assert_eq!(cursor, store.latest_change().unwrap());
}

/// The real store dates a change when it is written, the fake by its event: the bounds are far
/// on either side of both.
#[test]
fn pruning_keeps_the_newest_change_and_its_number_on_every_store() {
    on_every_store(pruning_keeps_the_newest_change_and_its_number);
}

fn pruning_keeps_the_newest_change_and_its_number(store: &dyn Storage) {
    let long_ago = datetime!(2000-01-01 00:00 UTC);
    let far_ahead = datetime!(2100-01-01 00:00 UTC);
    let (c, ..) = seeded(store, "acme");
    let last = registered(c.id, "api-acme", 1);
    store
        .create_service(&last, None, Ceiling::NONE, &ev())
        .unwrap();
    let latest = store.latest_change().unwrap();

    assert_eq!(store.prune_changes(long_ago).unwrap(), 0);
    assert_eq!(all_changes(store).len(), 2);
    assert_eq!(store.prune_changes(far_ahead).unwrap(), 1);

    assert_eq!(store.latest_change().unwrap(), latest);
    assert_eq!(store.oldest_change().unwrap(), Some(latest));
    assert_eq!(all_changes(store), [Change::Service(last.id)]);
    assert_eq!(store.prune_changes(far_ahead).unwrap(), 0);
    store.delete_service(last.id, &ev()).unwrap();
    assert!(
        store.latest_change().unwrap() > latest,
        "numbers are never reused"
    );
}

// The audit trail (docs/api.md, "Audit trail and last use").

#[test]
fn events_are_written_with_their_change_and_only_with_it_on_every_store() {
    on_every_store(events_are_written_with_their_change_and_only_with_it);
}

fn events_are_written_with_their_change_and_only_with_it(store: &dyn Storage) {
    let acme = customer("acme", 0);
    let first = account(acme.id, "boot", static_policy(&["*"]), 0);
    let created = event(Action::CustomerCreate, Some(acme.id), 0);
    store
        .create_customer(&acme, &first, &record(&lookup(), "h"), &created)
        .unwrap();
    let service = registered(acme.id, "api-acme", 1);
    let made = event(Action::ServiceCreate, Some(acme.id), 1);
    store
        .create_service(&service, None, Ceiling::NONE, &made)
        .unwrap();
    // A conflict, a ceiling, a delete of nothing, an update that writes nothing: no event.
    let again = Service {
        id: Uuid::new_v4(),
        ..service.clone()
    };
    let conflict = event(Action::ServiceCreate, Some(acme.id), 2);
    assert!(store
        .create_service(&again, None, Ceiling::NONE, &conflict)
        .is_err());
    let refused = event(Action::ServiceCreate, Some(acme.id), 2);
    let over = registered(acme.id, "web-acme", 2);
    assert!(store
        .create_service(&over, None, Ceiling(1), &refused)
        .is_err());
    let nothing = event(Action::ConfigDelete, Some(acme.id), 3);
    assert!(!store
        .delete_config(service.id, &|_| false, &nothing)
        .unwrap());
    let unwritten = event(Action::ConfigPut, Some(acme.id), 4);
    assert!(!store
        .update_config(service.id, &mut |_| None, &unwritten)
        .unwrap());
    let gone = event(Action::AccountDelete, Some(acme.id), 4);
    assert!(!store.delete_account(Uuid::new_v4(), &gone).unwrap());
    let deleted = event(Action::ServiceDelete, Some(acme.id), 5);
    assert!(store.delete_service(service.id, &deleted).unwrap());

    let events = trail(store, Trail::Customer(acme.id));
    assert_eq!(events, [deleted, made, created]);
    assert!(trail(store, Trail::Anonymous).is_empty());
    assert!(trail(store, Trail::Customer(Uuid::new_v4())).is_empty());
}

#[test]
fn the_trail_is_read_in_pages_newest_first_filtered_and_pruned_by_age_on_every_store() {
    on_every_store(the_trail_is_read_in_pages_newest_first_filtered_and_pruned_by_age);
}

fn the_trail_is_read_in_pages_newest_first_filtered_and_pruned_by_age(store: &dyn Storage) {
    let acme = customer("acme", 0);
    let boot = account(acme.id, "boot", static_policy(&["*"]), 0);
    store
        .create_customer(
            &acme,
            &boot,
            &record(&lookup(), "h"),
            &event(Action::CustomerCreate, Some(acme.id), 0),
        )
        .unwrap();
    // Events are written in time order (each dated by its write).
    let anonymous_one = event(Action::ServiceCreate, None, 30);
    store
        .create_service(
            &anonymous("abcdefghijkl-anon", 30, 100),
            None,
            Ceiling::NONE,
            &anonymous_one,
        )
        .unwrap();
    let mut named = boot.clone();
    for i in 1..=9 {
        let before = named.clone();
        named.name = format!("n{i}");
        store
            .update_account(
                &before,
                &named,
                None,
                &event(Action::AccountUpdate, Some(acme.id), i * 60),
            )
            .unwrap()
            .unwrap();
    }
    let mut query = AuditQuery {
        trail: Trail::Customer(acme.id),
        cursor: None,
        action: None,
        since: None,
        limit: 4,
    };
    let mut seen = Vec::new();
    loop {
        let page = store.audit_events(&query).unwrap();
        assert!(page.events.len() <= 4);
        seen.extend(page.events.iter().map(|e| e.at));
        match page.next {
            Some(next) => query.cursor = Some(next),
            None => break,
        }
    }
    let expected: Vec<_> = (0..=9).rev().map(|i| at(i * 60)).collect();
    assert_eq!(seen, expected, "newest first, each once");
    // A cursor of another trail, or made up, is not found.
    let elsewhere = Some(Cursor {
        after: anonymous_one.id,
    });
    for cursor in [
        elsewhere,
        Some(Cursor {
            after: Uuid::new_v4(),
        }),
    ] {
        query.cursor = cursor;
        assert_eq!(
            store.audit_events(&query).unwrap_err(),
            StoreError::NotFound
        );
    }
    assert_eq!(trail(store, Trail::Anonymous), [anonymous_one]);

    query.cursor = None;
    query.action = Some(Action::CustomerCreate);
    assert_eq!(store.audit_events(&query).unwrap().events.len(), 1);
    query.action = None;
    query.since = Some(at(8 * 60));
    query.limit = 500;
    assert_eq!(store.audit_events(&query).unwrap().events.len(), 2);
    // The events before 5 minutes go, of every trail (the anonymous one at 30 s too).
    assert_eq!(store.prune_audit(at(5 * 60)).unwrap(), 6);
    assert_eq!(trail(store, Trail::Customer(acme.id)).len(), 5);
    assert!(trail(store, Trail::Anonymous).is_empty());
}

// The refusal log (docs/api.md, "Explaining refusals").

#[test]
fn the_refusal_log_keeps_the_newest_hundred_per_account_and_class_on_every_store() {
    on_every_store(the_refusal_log_keeps_the_newest_hundred_per_account_and_class);
}

fn the_refusal_log_keeps_the_newest_hundred_per_account_and_class(store: &dyn Storage) {
    let (acme, boot, _) = seeded(store, "acme");
    let other = account(acme.id, "other", static_policy(&["*"]), 0);
    store
        .create_account(&other, None, Ceiling::NONE, None, &ev())
        .unwrap();
    for i in 0..105 {
        store
            .record_refusals(
                &[
                    (boot.id, json!({"n": i})),
                    (other.id, json!({"n": i, "other": true})),
                ],
                at(i),
            )
            .unwrap();
    }
    let kept = store.refusals(boot.id, at(0), 500).unwrap();
    assert_eq!(kept.len(), 100);
    assert_eq!(kept[0], json!({"n": 104}));
    assert_eq!(kept[99], json!({"n": 5}));
    assert_eq!(store.refusals(other.id, at(0), 500).unwrap().len(), 100);
    assert_eq!(store.refusals(boot.id, at(100), 500).unwrap().len(), 5);
    assert_eq!(store.refusals(boot.id, at(0), 3).unwrap().len(), 3);
    assert_eq!(store.prune_refusals(at(50)).unwrap(), 90);

    // Near misses are a class of their own: a hundred others do not push them out.
    let near = [
        json!({"n": "a", "near": true}),
        json!({"n": "b", "near": true}),
    ];
    for (record, second) in near.iter().zip([200, 201]) {
        store
            .record_refusals(&[(boot.id, record.clone())], at(second))
            .unwrap();
    }
    let far: Vec<(Uuid, Value)> = (0..100).map(|i| (boot.id, json!({"far": i}))).collect();
    store.record_refusals(&far, at(300)).unwrap();
    let kept = store.refusals(boot.id, at(0), 500).unwrap();
    assert_eq!(kept.len(), 102);
    assert_eq!(kept[0], json!({"far": 99}));
    assert_eq!(kept[100..], [near[1].clone(), near[0].clone()]);

    // One transaction: an account that does not exist fails it all.
    let err = store
        .record_refusals(
            &[(boot.id, json!({"n": "c"})), (Uuid::new_v4(), json!({}))],
            at(400),
        )
        .unwrap_err();
    assert_eq!(err, StoreError::NotFound);
    assert_eq!(store.refusals(boot.id, at(0), 500).unwrap().len(), 102);
}

// The fetch evidence (docs/api.md, "Fetch evidence").

/// `n` services that exist: fetch evidence is kept for existing services only.
fn existing_services(store: &dyn Storage, n: usize) -> Vec<Uuid> {
    let (c, ..) = seeded(store, "fetched");
    (0..n)
        .map(|i| {
            let s = registered(c.id, &format!("f{i}-fetched"), 1);
            store
                .create_service(&s, None, Ceiling::NONE, &ev())
                .unwrap();
            s.id
        })
        .collect()
}

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
                networks: Vec::new(),
            })
            .collect(),
    }
}

/// A fetch of `service`'s key set by `agent` from each of `networks` at `at`.
fn fetched_from(
    service: Uuid,
    at: OffsetDateTime,
    agent: &str,
    networks: &[&str],
) -> DocumentFetches {
    let mut fetched = counts(service, at, &[(agent, 1)]);
    fetched.agents[0].networks = (networks.iter())
        .map(|n| NetworkFetch {
            network: n.parse().unwrap(),
            last_at: at,
        })
        .collect();
    fetched
}

#[test]
fn key_set_fetches_are_summed_per_agent_and_hour_on_every_store() {
    on_every_store(key_set_fetches_are_summed_per_agent_and_hour);
}

fn key_set_fetches_are_summed_per_agent_and_hour(store: &dyn Storage) {
    const NOON: OffsetDateTime = datetime!(2026-11-25 12:00 UTC);
    let [service, other] = existing_services(store, 2)[..] else {
        unreachable!()
    };
    let at = |minutes: i64| NOON + Duration::minutes(minutes);
    store
        .record_fetches(&[counts(service, at(5), &[("aws", 2), ("gcp", 1)])])
        .unwrap();
    // The custom domain's key set is the same key set; the discovery document is not one.
    let domain = CustomDomain::new(service, "login.acme.com".into(), "t".into(), at(-60 * 24));
    assert!(put_domain(store, &domain).unwrap());
    let mut on_domain = counts(service, at(40), &[("aws", 3)]);
    on_domain.document = FetchedDocument::DomainJwks;
    let mut discovery = counts(service, at(50), &[("aws", 7)]);
    discovery.document = FetchedDocument::Discovery;
    store.record_fetches(&[on_domain, discovery]).unwrap();
    store
        .record_fetches(&[counts(service, at(75), &[("aws", 1)])])
        .unwrap();
    store
        .record_fetches(&[counts(service, at(-60 * 24 * 9), &[("ancient", 1)])])
        .unwrap();
    store
        .record_fetches(&[counts(other, at(-30), &[("aws", 1)])])
        .unwrap();

    let mut hours: Vec<(String, OffsetDateTime, u64, OffsetDateTime)> = store
        .key_set_hours(service, NOON - Duration::days(8))
        .unwrap()
        .into_iter()
        .map(|h| (h.agent, h.hour, h.count, h.last_at))
        .collect();
    hours.sort();
    assert_eq!(
        hours,
        [
            ("aws".into(), NOON, 5, at(40)),
            ("aws".into(), at(60), 1, at(75)),
            ("gcp".into(), NOON, 1, at(5)),
        ]
    );

    let mut last = store
        .last_key_set_fetches(&[service, other, Uuid::new_v4()], NOON - Duration::days(8))
        .unwrap();
    last.sort();
    let mut expected = vec![(service, at(75)), (other, at(-30))];
    expected.sort();
    assert_eq!(
        last, expected,
        "the last key set fetch of each service fetched"
    );
    assert!(store
        .last_key_set_fetches(&[service], at(120))
        .unwrap()
        .is_empty());
}

#[test]
fn verifiers_are_found_by_their_hours_and_networks_on_every_store() {
    on_every_store(verifiers_are_found_by_their_hours_and_networks);
}

fn verifiers_are_found_by_their_hours_and_networks(store: &dyn Storage) {
    const NOON: OffsetDateTime = datetime!(2026-11-25 12:00 UTC);
    let service = existing_services(store, 1)[0];
    let (aws, bot) = ("10.0.1.0/24", "192.0.2.0/24");
    let hours = |h: i64| NOON - Duration::hours(h);
    store
        .record_fetches(&[fetched_from(service, hours(30), "aws", &[aws])])
        .unwrap();
    store
        .record_fetches(&[fetched_from(service, hours(2), "aws", &[aws, bot])])
        .unwrap();
    // The custom domain's key set counts as the same key set.
    let domain = CustomDomain::new(service, "login.acme.com".into(), "t".into(), hours(48));
    assert!(put_domain(store, &domain).unwrap());
    let mut on_domain = fetched_from(service, hours(3), "aws", &[aws]);
    on_domain.document = FetchedDocument::DomainJwks;
    store.record_fetches(&[on_domain]).unwrap();
    // After the publication (in its hour): not before it.
    store
        .record_fetches(&[fetched_from(
            service,
            NOON + Duration::minutes(5),
            "late",
            &[bot],
        )])
        .unwrap();
    store
        .record_fetches(&[fetched_from(service, hours(9 * 24), "ancient", &[aws])])
        .unwrap();
    let mut found = store
        .verifier_candidates(service, NOON - Duration::days(7), NOON)
        .unwrap();
    found.sort_by(|a, b| a.agent.cmp(&b.agent));
    assert_eq!(found.len(), 1, "{found:?}");
    let candidate = &found[0];
    assert_eq!(
        (candidate.agent.as_str(), candidate.count, candidate.hours),
        ("aws", 3, 3)
    );
    assert_eq!(candidate.last_at, hours(2));
    let networks: Vec<(String, u32)> = (candidate.networks.iter())
        .map(|n| (n.network.to_string(), n.hours))
        .collect();
    assert_eq!(
        networks,
        [(aws.to_owned(), 3), (bot.to_owned(), 1)],
        "the most seen first, with their hours"
    );

    // Since the publication: the last fetch of each agent from each network.
    let after = |m: i64| NOON + Duration::minutes(m);
    store
        .record_fetches(&[fetched_from(service, after(10), "aws", &[bot])])
        .unwrap();
    store
        .record_fetches(&[fetched_from(service, after(70), "aws", &[bot])])
        .unwrap();
    store
        .record_fetches(&[fetched_from(service, after(20), "gcp", &[aws])])
        .unwrap();
    let mut seen = store
        .verifier_fetches(service, &["aws".into(), "late".into()], NOON)
        .unwrap();
    seen.sort_by(|a, b| (&a.0, a.1.network).cmp(&(&b.0, b.1.network)));
    let seen: Vec<(String, String, OffsetDateTime)> = (seen.into_iter())
        .map(|(agent, f)| (agent, f.network.to_string(), f.last_at))
        .collect();
    assert_eq!(
        seen,
        [
            ("aws".into(), bot.into(), after(70)),
            ("late".into(), bot.into(), after(5)),
        ]
    );
    // The networks go with their hours.
    let pruned = store.prune_fetches(NOON + Duration::days(1)).unwrap();
    assert!(pruned > 0);
    assert!(store
        .verifier_fetches(service, &["aws".into()], NOON)
        .unwrap()
        .is_empty());
}

#[test]
fn stored_evidence_is_bounded_per_hour_on_every_store() {
    on_every_store(stored_evidence_is_bounded_per_hour);
}

fn stored_evidence_is_bounded_per_hour(store: &dyn Storage) {
    const NOON: OffsetDateTime = datetime!(2026-11-25 12:00 UTC);
    let service = existing_services(store, 1)[0];
    // Two flushes, 50 agents each, all different: 64 kept; past the bound the least frequent
    // gives its place to the new one, which keeps its own count, and its fetches are the
    // others' from then on: nothing is lost.
    for flush in 0..2 {
        let agents: Vec<(String, u64)> = (0..50).map(|i| (format!("bot {flush}-{i}"), 1)).collect();
        let agents: Vec<(&str, u64)> = agents.iter().map(|(a, n)| (a.as_str(), *n)).collect();
        store
            .record_fetches(&[counts(service, NOON, &agents)])
            .unwrap();
    }
    let read = store.fetches(service, NOON, 1000).unwrap();
    let agents = &read[0].agents;
    assert_eq!(agents.len(), STORED_AGENTS_PER_HOUR + 1);
    let others = agents.iter().find(|a| a.agent == OTHER_AGENTS);
    assert_eq!(others.map(|a| a.count), Some(100 - 64), "{agents:?}");
    assert!(
        (agents.iter())
            .filter(|a| a.agent != OTHER_AGENTS)
            .all(|a| a.count == 1),
        "{agents:?}"
    );
    // A frequent agent arriving late takes a place and keeps it while one-off agents churn.
    store
        .record_fetches(&[counts(service, NOON, &[("verifier", 5)])])
        .unwrap();
    for i in 0..30 {
        let one_off = format!("late {i}");
        store
            .record_fetches(&[counts(service, NOON, &[(one_off.as_str(), 1)])])
            .unwrap();
    }
    let read = store.fetches(service, NOON, 1000).unwrap();
    let kept = read[0].agents.iter().find(|a| a.agent == "verifier");
    assert!(kept.is_some_and(|a| a.count >= 5), "{:?}", read[0].agents);
    // While the hour has room, one network brings any number of agents (clients behind one
    // address, a test on one host); once it is full, a network holding 4 brings no new agent,
    // its new ones are the others, while another network's new agent still takes a place.
    let later = NOON + Duration::hours(1);
    let from = |agent: &str, network: &str| fetched_from(service, later, agent, &[network]);
    let crowd: Vec<DocumentFetches> = (0..STORED_AGENTS_PER_HOUR)
        .map(|i| from(&format!("crowd {i}"), "192.0.2.0/24"))
        .collect();
    store.record_fetches(&crowd).unwrap();
    let hour = || {
        let read = store.fetches(service, later, 1000).unwrap();
        read[0].agents.clone()
    };
    let named = |agents: &[AgentFetches], prefix: &str| {
        (agents.iter())
            .filter(|a| a.agent.starts_with(prefix))
            .count()
    };
    assert_eq!(named(&hour(), "crowd"), STORED_AGENTS_PER_HOUR);
    let more: Vec<DocumentFetches> = (0..6)
        .map(|i| from(&format!("more {i}"), "192.0.2.0/24"))
        .collect();
    store.record_fetches(&more).unwrap();
    let agents = hour();
    assert_eq!(named(&agents, "more"), 0, "{agents:?}");
    let others = agents.iter().find(|a| a.agent == OTHER_AGENTS);
    assert_eq!(others.map(|a| a.count), Some(6), "{agents:?}");
    // Another network, up to its bound: each new agent takes the least frequent one's place.
    let verifiers: Vec<DocumentFetches> = (0..=STORED_AGENTS_PER_NETWORK)
        .map(|i| from(&format!("verifier {i}"), "198.51.100.0/24"))
        .collect();
    store.record_fetches(&verifiers).unwrap();
    let agents = hour();
    assert_eq!(
        named(&agents, "verifier"),
        STORED_AGENTS_PER_NETWORK,
        "{agents:?}"
    );
    assert_eq!(
        named(&agents, "crowd"),
        STORED_AGENTS_PER_HOUR - STORED_AGENTS_PER_NETWORK
    );
    // The others: the 6 above, the 4 crowd agents pushed out and the fifth verifier.
    let others = agents.iter().find(|a| a.agent == OTHER_AGENTS);
    assert_eq!(others.map(|a| a.count), Some(11), "{agents:?}");
    // A crowd that filled an hour while it had room gives its places first: a new agent from
    // a network of its own takes a crowd agent's place, never a verifier's seen from a network
    // of its own, however rare that verifier's fetches.
    let third = NOON + Duration::hours(2);
    let at_third = |agent: &str, network: &str, n: u64| {
        let mut fetched = fetched_from(service, third, agent, &[network]);
        fetched.agents[0].count = n;
        fetched
    };
    let mut crowd = vec![at_third("rare verifier", "203.0.113.0/24", 1)];
    crowd.extend(
        (1..STORED_AGENTS_PER_HOUR).map(|i| at_third(&format!("crowd {i}"), "192.0.2.0/24", 5)),
    );
    store.record_fetches(&crowd).unwrap();
    let newcomers: Vec<DocumentFetches> = (0..3)
        .map(|i| at_third(&format!("newcomer {i}"), &format!("10.9.{i}.0/24"), 1))
        .collect();
    store.record_fetches(&newcomers).unwrap();
    let agents = store.fetches(service, third, 1000).unwrap()[0]
        .agents
        .clone();
    let rare = agents.iter().find(|a| a.agent == "rare verifier");
    assert_eq!(rare.map(|a| a.count), Some(1), "{agents:?}");
    let newcomers: Vec<&AgentFetches> = (agents.iter())
        .filter(|a| a.agent.starts_with("newcomer"))
        .collect();
    assert_eq!(newcomers.len(), 3, "{agents:?}");
    // Each with its own fetch, not the 5 of the crowd agent it pushed out: a count taken over
    // would rank agents made up with a fetch or two above a verifier's real fetches (the probe
    // of 2026-12-04: 31 of a key's 32 verifiers were such agents).
    assert!(newcomers.iter().all(|a| a.count == 1), "{newcomers:?}");
    // A replica's own others (agents that gave their place there) are the others here: on a
    // full hour they take no one's place nor count.
    // (The hours from NOON's on, read together.)
    let before = store.fetches(service, NOON, 1000).unwrap()[0]
        .agents
        .clone();
    store
        .record_fetches(&[counts(service, NOON, &[(OTHER_AGENTS, 10)])])
        .unwrap();
    let after = store.fetches(service, NOON, 1000).unwrap()[0]
        .agents
        .clone();
    let others = |agents: &[AgentFetches]| {
        (agents.iter())
            .find(|a| a.agent == OTHER_AGENTS)
            .map(|a| a.count)
    };
    assert_eq!(others(&after), others(&before).map(|n| n + 10), "{after:?}");
    let named =
        |agents: &[AgentFetches]| (agents.iter()).filter(|a| a.agent != OTHER_AGENTS).count();
    assert_eq!(named(&after), named(&before), "no agent gave its place");
    let total = |agents: &[AgentFetches]| agents.iter().map(|a| a.count).sum::<u64>();
    assert_eq!(total(&after), total(&before) + 10);
    // Networks per agent and hour are bounded too.
    let many: Vec<String> = (0..40).map(|i| format!("10.0.{i}.0/24")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    store
        .record_fetches(&[fetched_from(service, NOON, "bot 0-1", &many)])
        .unwrap();
    let seen = store
        .verifier_fetches(service, &["bot 0-1".into()], NOON)
        .unwrap();
    assert_eq!(seen.len(), STORED_NETWORKS_PER_AGENT);
}

#[test]
fn agents_new_to_the_week_push_out_no_regular_one_on_every_store() {
    on_every_store(agents_new_to_the_week_push_out_no_regular_one);
}

/// The probe of §24 (F2): agents made up on many networks, 4 each (no crowd), busier than a
/// verifier in its hour, used to push it out of the hour's 64 places.
fn agents_new_to_the_week_push_out_no_regular_one(store: &dyn Storage) {
    const NOON: OffsetDateTime = datetime!(2026-11-25 12:00 UTC);
    let service = existing_services(store, 1)[0];
    let verifier = "203.0.113.0/24";
    // Seen in two hours before.
    for hours_before in [3, 2] {
        let at = NOON - Duration::hours(hours_before);
        store
            .record_fetches(&[fetched_from(service, at, "aws", &[verifier])])
            .unwrap();
    }
    // A flood that was seen once an hour before: more regular than agents new to the week,
    // less than the verifier.
    let flood = |round: u8, n: u64, at: OffsetDateTime| -> Vec<DocumentFetches> {
        (0..STORED_AGENTS_PER_HOUR as u8)
            .map(|i| {
                let network = format!("10.{round}.{}.0/24", i / 4);
                let mut one = fetched_from(service, at, &format!("bot {round}-{i}"), &[&network]);
                one.agents[0].count = n;
                one
            })
            .collect()
    };
    store
        .record_fetches(&flood(0, 1, NOON - Duration::hours(1)))
        .unwrap();
    // This hour: the verifier once, then three floods, busier each.
    store
        .record_fetches(&[fetched_from(service, NOON, "aws", &[verifier])])
        .unwrap();
    for (round, n) in [(0, 2), (1, 3), (2, 5)] {
        store.record_fetches(&flood(round, n, NOON)).unwrap();
    }
    let agents = store.fetches(service, NOON, 1000).unwrap()[0]
        .agents
        .clone();
    let aws = agents.iter().find(|a| a.agent == "aws");
    assert_eq!(aws.map(|a| a.count), Some(1), "{agents:?}");
    assert_eq!(agents.len(), STORED_AGENTS_PER_HOUR + 1, "{agents:?}");
    // Agents new to the week take no place of the regular flood's either: they are the others.
    let regular_flood = (agents.iter()).filter(|a| a.agent.starts_with("bot 0-"));
    assert_eq!(
        regular_flood.count(),
        STORED_AGENTS_PER_HOUR - 1,
        "{agents:?}"
    );
    // Every fetch counted once.
    let fetched = 1 + 64 * (2 + 3 + 5);
    assert_eq!(agents.iter().map(|a| a.count).sum::<u64>(), fetched);
}

#[test]
fn a_flush_of_many_documents_adds_up_as_small_ones_do_on_every_store() {
    on_every_store(a_flush_of_many_documents_adds_up_as_small_ones_do);
}

/// A flush larger than one statement's rows (the store writes known rows a thousand a
/// statement), where the same document and agent come twice, agents known and new side by side,
/// and a known agent brings more networks than it may keep.
fn a_flush_of_many_documents_adds_up_as_small_ones_do(store: &dyn Storage) {
    const NOON: OffsetDateTime = datetime!(2026-11-25 12:00 UTC);
    let services = existing_services(store, 1_200);
    let at = |minutes: i64| NOON + Duration::minutes(minutes);
    let home = "10.0.0.0/24";
    let first: Vec<DocumentFetches> = (services.iter())
        .map(|s| fetched_from(*s, at(10), "aws", &[home]))
        .collect();
    store.record_fetches(&first).unwrap();
    let mut second: Vec<DocumentFetches> = (services.iter())
        .map(|s| fetched_from(*s, at(20), "aws", &[home]))
        .collect();
    // The first service: twice in one flush, once with an older fetch, and a new agent.
    second.push(fetched_from(services[0], at(5), "aws", &[home]));
    second.push(fetched_from(services[0], at(15), "gcp", &[home]));
    // The last: its known agent from 12 new networks at once, 7 of which it may keep.
    let many: Vec<String> = (1..=12).map(|i| format!("10.0.{i}.0/24")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    second.push(fetched_from(services[1_199], at(25), "aws", &many));
    store.record_fetches(&second).unwrap();

    let read = |service: Uuid| store.fetches(service, NOON, 10).unwrap().remove(0);
    let middle = read(services[600]);
    assert_eq!(
        (middle.ok, middle.not_modified, middle.last_at),
        (4, 2, at(20))
    );
    let agents: Vec<(&str, u64, OffsetDateTime)> = (middle.agents.iter())
        .map(|a| (a.agent.as_str(), a.count, a.last_at))
        .collect();
    assert_eq!(agents, [("aws", 2, at(20))]);

    let first = read(services[0]);
    assert_eq!(
        (first.ok, first.last_at),
        (8, at(20)),
        "summed; the latest kept"
    );
    let agents: Vec<(&str, u64, OffsetDateTime)> = (first.agents.iter())
        .map(|a| (a.agent.as_str(), a.count, a.last_at))
        .collect();
    assert_eq!(agents, [("aws", 3, at(20)), ("gcp", 1, at(15))]);
    let seen = store
        .verifier_fetches(services[0], &["aws".into(), "gcp".into()], NOON)
        .unwrap();
    let seen: Vec<(String, String, OffsetDateTime)> = (seen.into_iter())
        .map(|(agent, f)| (agent, f.network.to_string(), f.last_at))
        .collect();
    assert_eq!(
        seen.len(),
        2,
        "one network each, its last fetch the latest: {seen:?}"
    );
    assert!(
        seen.contains(&("aws".into(), home.into(), at(20))),
        "{seen:?}"
    );
    assert!(
        seen.contains(&("gcp".into(), home.into(), at(15))),
        "{seen:?}"
    );

    let last = store
        .verifier_fetches(services[1_199], &["aws".into()], NOON)
        .unwrap();
    assert_eq!(last.len(), STORED_NETWORKS_PER_AGENT, "{last:?}");
    let at_home = last.iter().find(|(_, f)| f.network.to_string() == home);
    assert_eq!(at_home.map(|(_, f)| f.last_at), Some(at(20)), "{last:?}");
}

#[test]
fn replicas_fetch_counts_add_up_per_hour_and_old_hours_are_pruned_on_every_store() {
    on_every_store(replicas_fetch_counts_add_up_per_hour_and_old_hours_are_pruned);
}

fn replicas_fetch_counts_add_up_per_hour_and_old_hours_are_pruned(store: &dyn Storage) {
    const NOON: OffsetDateTime = datetime!(2026-11-25 12:00 UTC);
    let [service, other] = existing_services(store, 2)[..] else {
        unreachable!()
    };
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
    assert_eq!(
        (jwks.service_id, jwks.document),
        (service, FetchedDocument::Jwks)
    );
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
    assert_eq!(all[0].agents.len(), 4);

    // The old hour's bucket and its one agent.
    assert_eq!(store.prune_fetches(NOON - Duration::hours(24)).unwrap(), 2);
    let all = store.fetches(service, old, 10).unwrap();
    assert_eq!(all[0].ok, 4, "the old bucket went");
    assert_eq!(store.fetches(other, old, 10).unwrap()[0].ok, 2);
    assert!(store.fetches(Uuid::new_v4(), old, 10).unwrap().is_empty());
}

#[test]
fn the_first_time_a_key_is_found_safe_stays_on_every_store() {
    on_every_store(the_first_time_a_key_is_found_safe_stays);
}

fn the_first_time_a_key_is_found_safe_stays(store: &dyn Storage) {
    const NOON: OffsetDateTime = datetime!(2026-11-25 12:00 UTC);
    let published = NOON - Duration::minutes(10);
    let service = Uuid::new_v4();
    assert_eq!(store.key_safe_at(service, "k2", published).unwrap(), None);
    let at = NOON + Duration::milliseconds(1234) + Duration::nanoseconds(999);
    let kept = NOON + Duration::milliseconds(1234);
    assert_eq!(
        store.record_key_safe(service, "k2", published, at).unwrap(),
        kept,
        "to the millisecond"
    );
    // Another replica found it safe later: the first time stays.
    let later = NOON + Duration::minutes(5);
    let recorded = store.record_key_safe(service, "k2", published, later);
    assert_eq!(recorded.unwrap(), kept);
    assert_eq!(
        store.key_safe_at(service, "k2", published).unwrap(),
        Some(kept)
    );
    assert_eq!(store.key_safe_at(service, "k3", published).unwrap(), None);
    assert_eq!(
        store.key_safe_at(Uuid::new_v4(), "k2", published).unwrap(),
        None
    );
    // A key published under the same kid after that one was withdrawn is not safe by it.
    let again = NOON + Duration::hours(1);
    assert_eq!(store.key_safe_at(service, "k2", again).unwrap(), None);
    let its_own = again + Duration::minutes(10);
    let recorded = store.record_key_safe(service, "k2", again, its_own);
    assert_eq!(recorded.unwrap(), its_own);
    assert_eq!(
        store.key_safe_at(service, "k2", again).unwrap(),
        Some(its_own)
    );
    // Kept as long as the evidence it came from.
    store.prune_fetches(NOON).unwrap();
    assert_eq!(
        store.key_safe_at(service, "k2", again).unwrap(),
        Some(its_own)
    );
    assert_eq!(
        store.prune_fetches(its_own + Duration::minutes(1)).unwrap(),
        1
    );
    assert_eq!(store.key_safe_at(service, "k2", again).unwrap(), None);
}

#[test]
fn a_purge_recorded_only_moves_forward_per_service_on_every_store() {
    on_every_store(a_purge_recorded_only_moves_forward_per_service);
}

fn a_purge_recorded_only_moves_forward_per_service(store: &dyn Storage) {
    const NOON: OffsetDateTime = datetime!(2026-11-25 12:00 UTC);
    let (service, other) = (Uuid::new_v4(), Uuid::new_v4());
    assert_eq!(store.purged_through(service).unwrap(), None);
    let at = NOON + Duration::milliseconds(1234) + Duration::nanoseconds(999);
    store.record_purge(service, at).unwrap();
    let kept = NOON + Duration::milliseconds(1234);
    assert_eq!(
        store.purged_through(service).unwrap(),
        Some(kept),
        "to the millisecond"
    );
    // A purge of an earlier change, recorded late, leaves the later one.
    store.record_purge(service, NOON).unwrap();
    assert_eq!(store.purged_through(service).unwrap(), Some(kept));
    let later = NOON + Duration::minutes(5);
    store.record_purge(service, later).unwrap();
    assert_eq!(store.purged_through(service).unwrap(), Some(later));
    assert_eq!(store.purged_through(other).unwrap(), None);
}

#[test]
fn the_published_documents_changed_since_their_last_purge_are_unpurged_on_every_store() {
    on_every_store(the_published_documents_changed_since_their_last_purge_are_unpurged);
}

fn the_published_documents_changed_since_their_last_purge_are_unpurged(store: &dyn Storage) {
    let made = |subdomain: &str, published: Option<i64>| {
        let s = anonymous(subdomain, 0, 1_000_000);
        let secret = record(&lookup(), "$argon2id$anon");
        (store.create_service(&s, Some(&secret), Ceiling::NONE, &ev())).unwrap();
        if let Some(updated) = published {
            let issuer = format!("http://{subdomain}.localhost:8080");
            store
                .put_config(&config(s.id, &issuer, updated), &ev())
                .unwrap();
        }
        s
    };
    let later = made("bbbbbbbbbbbb-anon", Some(200));
    let earlier = made("aaaaaaaaaaaa-anon", Some(100));
    let _unpublished = made("cccccccccccc-anon", None);
    let purged = made("dddddddddddd-anon", Some(100));
    store.record_purge(purged.id, at(100)).unwrap();
    // Purged before its last change: owed again.
    store.record_purge(later.id, at(150)).unwrap();
    let owed = |s: &registry_domain::Service, updated| (s.id, s.subdomain.clone(), at(updated));
    assert_eq!(
        store.unpurged(at(100)).unwrap(),
        [owed(&earlier, 100), owed(&later, 200)],
        "oldest first"
    );
    assert_eq!(
        store.unpurged(at(101)).unwrap(),
        [owed(&later, 200)],
        "changed since"
    );
    store.record_purge(later.id, at(200)).unwrap();
    assert_eq!(store.unpurged(at(0)).unwrap(), [owed(&earlier, 100)]);
}

#[test]
fn the_first_acme_account_and_challenge_answer_kept_are_everyones_on_every_store() {
    on_every_store(the_first_acme_account_and_challenge_answer_kept_are_everyones);
}

fn the_first_acme_account_and_challenge_answer_kept_are_everyones(store: &dyn Storage) {
    const NOON: OffsetDateTime = datetime!(2026-11-25 12:00 UTC);
    let directory = "https://ca.test/directory";
    assert_eq!(store.acme_account(directory).unwrap(), None);
    assert_eq!(
        store.put_acme_account(directory, "sealed-a").unwrap(),
        "sealed-a"
    );
    // Another replica made one meanwhile: the first kept is the one every replica uses.
    assert_eq!(
        store.put_acme_account(directory, "sealed-b").unwrap(),
        "sealed-a"
    );
    assert_eq!(
        store.acme_account(directory).unwrap().as_deref(),
        Some("sealed-a")
    );
    assert_eq!(store.acme_account("https://other.test/dir").unwrap(), None);

    assert_eq!(answer(store, "login.acme.com", "t1"), None);
    store
        .put_challenge("login.acme.com", "t1", "t1.answer", NOON)
        .unwrap();
    store
        .put_challenge("login.acme.com", "t1", "t1.other", NOON)
        .unwrap();
    store
        .put_challenge("www.acme.com", "t1", "t1.www", NOON)
        .unwrap();
    assert_eq!(
        answer(store, "login.acme.com", "t1").as_deref(),
        Some("t1.answer"),
        "the first answer stays"
    );
    assert_eq!(
        answer(store, "www.acme.com", "t1").as_deref(),
        Some("t1.www")
    );
    assert_eq!(answer(store, "login.acme.com", "t2"), None);

    // A host's answers come in one read, the newest first, at most MAX_CHALLENGES_READ; a
    // day-old answer goes when the next is stored.
    for i in 0..=MAX_CHALLENGES_READ {
        let at = NOON + time::Duration::minutes(i as i64);
        store
            .put_challenge("login.acme.com", &format!("n{i:02}"), "k", at)
            .unwrap();
    }
    let read = store.challenges("login.acme.com").unwrap();
    assert_eq!(read.len(), MAX_CHALLENGES_READ);
    assert_eq!(read[0].0, format!("n{MAX_CHALLENGES_READ:02}"));
    let later = NOON + CHALLENGE_KEPT + time::Duration::minutes(1);
    store
        .put_challenge("login.acme.com", "late", "late.k", later)
        .unwrap();
    let read = store.challenges("login.acme.com").unwrap();
    let tokens: Vec<&str> = read.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(tokens[..3], ["late", "n16", "n15"], "{tokens:?}");
    assert_eq!(answer(store, "login.acme.com", "t1"), None, "a day old");
    assert_eq!(
        answer(store, "www.acme.com", "t1").as_deref(),
        Some("t1.www")
    );
}

/// A custom domain's fetch evidence was its issuer's: once the service's domain is replaced by
/// another name, or removed, it is gone (it would be shown and counted as the next domain's);
/// the same name asked for again, and the subdomain's evidence, keep theirs; counts arriving
/// late for a domain gone are dropped.
#[test]
fn a_domain_replaced_or_removed_takes_its_fetch_evidence_on_every_store() {
    on_every_store(a_domain_replaced_or_removed_takes_its_fetch_evidence);
}

fn a_domain_replaced_or_removed_takes_its_fetch_evidence(store: &dyn Storage) {
    const NOON: OffsetDateTime = datetime!(2026-11-25 12:00 UTC);
    let service = existing_services(store, 1)[0];
    let documents = |store: &dyn Storage| -> Vec<FetchedDocument> {
        let mut read: Vec<_> = (store
            .fetches(service, NOON - Duration::days(1), 10)
            .unwrap())
        .into_iter()
        .map(|f| f.document)
        .collect();
        read.sort_by_key(|d| d.path().to_owned() + if d.is_custom_domain() { "@" } else { "" });
        read.dedup();
        read
    };
    let fetched_on_domain = |store: &dyn Storage| {
        let mut on_domain = fetched_from(service, NOON, "aws", &["10.0.1.0/24"]);
        on_domain.document = FetchedDocument::DomainJwks;
        let direct = fetched_from(service, NOON, "aws", &["10.0.1.0/24"]);
        store.record_fetches(&[on_domain, direct]).unwrap();
    };
    let claim = |name: &str| CustomDomain::new(service, name.into(), "t".into(), NOON);
    assert!(put_domain(store, &claim("old.acme.com")).unwrap());
    fetched_on_domain(store);
    let both = [FetchedDocument::Jwks, FetchedDocument::DomainJwks];
    assert_eq!(documents(store), both);
    // The same name again keeps it.
    assert!(put_domain(store, &claim("old.acme.com")).unwrap());
    assert_eq!(documents(store), both);
    let later = CustomDomain::new(
        service,
        "new.acme.com".into(),
        "t".into(),
        NOON + Duration::hours(1),
    );
    assert!(put_domain(store, &later).unwrap());
    assert_eq!(documents(store), [FetchedDocument::Jwks]);
    // The old domain's count arriving late (a replica's, a cache's log) is not the new one's.
    fetched_on_domain(store);
    let found = store
        .verifier_candidates(service, NOON - Duration::days(1), NOON + Duration::hours(2))
        .unwrap();
    assert_eq!(found[0].count, 2, "only the subdomain's fetches: {found:?}");
    let mut current = fetched_from(service, NOON + Duration::hours(1), "aws", &["10.0.1.0/24"]);
    current.document = FetchedDocument::DomainJwks;
    store.record_fetches(&[current]).unwrap();
    assert_eq!(documents(store), both);
    assert!(store.delete_domain(service, None, &ev()).unwrap());
    assert_eq!(documents(store), [FetchedDocument::Jwks]);
    // With no domain, a count under one is no one's.
    fetched_on_domain(store);
    assert_eq!(documents(store), [FetchedDocument::Jwks]);
}

/// `domain` put as the service's domain over what it has now, with no bound on claims: whether
/// it was written.
fn put_domain(store: &dyn Storage, domain: &CustomDomain) -> Result<bool, StoreError> {
    let was = store.domain_of(domain.service_id)?;
    let put = store.put_domain(domain, was.as_ref(), Ceiling::NONE, &ev())?;
    Ok(put.is_ok())
}

/// The answer kept for `domain`'s challenge `token`, as a replica finds it in its read.
fn answer(store: &dyn Storage, domain: &str, token: &str) -> Option<String> {
    let answers = store.challenges(domain).unwrap();
    answers
        .into_iter()
        .find(|(t, _)| t == token)
        .map(|(_, a)| a)
}

/// `api-acme`, a service of `customer` with a published configuration.
fn published_api(store: &dyn Storage, customer: Uuid) -> Service {
    let s = registered(customer, "api-acme", 1);
    store
        .create_service(&s, None, Ceiling::NONE, &ev())
        .unwrap();
    store
        .put_config(&config(s.id, "https://api-acme.example", 2), &ev())
        .unwrap();
    s
}

/// Asserts that the change log holds exactly `expected` after `before`, each once, in any order.
fn logged_since(store: &dyn Storage, before: i64, expected: &[Change]) {
    let (_, logged) = store.changes_since(before, 100).unwrap();
    assert_eq!(logged.len(), expected.len(), "{logged:?}");
    for change in expected {
        assert!(logged.contains(change), "{change:?} not in {logged:?}");
    }
}

#[test]
fn a_disabled_customers_holdings_are_not_read_until_it_is_enabled_on_every_store() {
    on_every_store(a_disabled_customers_holdings_are_not_read_until_it_is_enabled);
}

fn a_disabled_customers_holdings_are_not_read_until_it_is_enabled(store: &dyn Storage) {
    let (c, first, _) = seeded(store, "acme");
    let (other, other_first, _) = seeded(store, "globex");
    let federated = account(c.id, "ci", oidc_policy(&["https://ci.example"]), 1);
    store
        .create_account(&federated, None, Ceiling::NONE, None, &ev())
        .unwrap();
    let s = published_api(store, c.id);
    let before = store.latest_change().unwrap();

    let disabled = store
        .set_disabled(
            "acme",
            Some(at(10)),
            &event(Action::CustomerUpdate, Some(c.id), 10),
        )
        .unwrap()
        .unwrap();
    assert_eq!(disabled.disabled_at, Some(at(10)));
    assert_eq!(store.customer(c.id).unwrap(), Some(disabled.clone()));
    assert!(store.account(first.id).unwrap().is_none());
    // Nor written: its accounts are gone to a rename and a new token alike.
    let renamed = ServiceAccount {
        name: "renamed".into(),
        ..first.clone()
    };
    let update = store.update_account(&first, &renamed, None, &ev());
    assert_eq!(update.unwrap_err(), StoreError::NotFound);
    let token = record(&lookup(), "h");
    let replaced = store.replace_token(&first, None, &token, &ev());
    assert_eq!(replaced.unwrap_err(), StoreError::NotFound);
    assert!(store
        .accounts_by_issuer("https://ci.example")
        .unwrap()
        .is_empty());
    assert!(ids(&store.oidc_accounts().unwrap()).is_empty());
    assert_eq!(store.service(s.id).unwrap(), None);
    assert_eq!(store.find_service("api-acme").unwrap(), None);
    assert_eq!(store.published_by_subdomain("api-acme").unwrap(), None);
    // Every service and account is logged, once, for the replicas; one event.
    logged_since(
        store,
        before,
        &[
            Change::Service(s.id),
            Change::Account(first.id),
            Change::Account(federated.id),
        ],
    );
    let events = trail(store, Trail::Customer(c.id)).len();
    // Again: no change, no event, no change logged.
    let again = store
        .set_disabled(
            "acme",
            Some(at(20)),
            &event(Action::CustomerUpdate, Some(c.id), 20),
        )
        .unwrap()
        .unwrap();
    assert_eq!(again.disabled_at, Some(at(10)));
    assert_eq!(trail(store, Trail::Customer(c.id)).len(), events);
    assert_eq!(store.changes_since(before, 100).unwrap().1.len(), 3);
    // Other customers are untouched.
    assert_same_account(
        &store.account(other_first.id).unwrap().unwrap(),
        &other_first,
    );
    assert_eq!(store.customer(other.id).unwrap().unwrap().disabled_at, None);

    let enabled = store
        .set_disabled("acme", None, &event(Action::CustomerUpdate, Some(c.id), 30))
        .unwrap()
        .unwrap();
    assert_eq!(enabled.disabled_at, None);
    assert_same_account(&store.account(first.id).unwrap().unwrap(), &first);
    assert_eq!(
        ids(&store.accounts_by_issuer("https://ci.example").unwrap()),
        [federated.id]
    );
    assert_eq!(store.service(s.id).unwrap(), Some(s.clone()));
    assert!(store.published_by_subdomain("api-acme").unwrap().is_some());
    assert_eq!(trail(store, Trail::Customer(c.id)).len(), events + 1);
    assert_eq!(
        store
            .set_disabled(
                "nobody",
                Some(at(40)),
                &event(Action::CustomerUpdate, None, 40)
            )
            .unwrap(),
        None
    );
}

#[test]
fn a_deleted_customer_leaves_nothing_behind_on_every_store() {
    on_every_store(a_deleted_customer_leaves_nothing_behind);
}

fn a_deleted_customer_leaves_nothing_behind(store: &dyn Storage) {
    let (c, first, token) = seeded(store, "acme");
    let (_, other_first, other_token) = seeded(store, "globex");
    let s = published_api(store, c.id);
    // Its services' fetch evidence goes with it at once (fourth security review).
    let now = at(0);
    store
        .record_fetches(&[fetched_from(s.id, now, "aws", &["10.0.1.0/24"])])
        .unwrap();
    store.record_key_safe(s.id, "k1", now, now).unwrap();
    store.record_purge(s.id, now).unwrap();
    let before = store.latest_change().unwrap();

    assert!(store.delete_customer("acme", at(50)).unwrap());
    assert!(store.fetches(s.id, now, 10).unwrap().is_empty());
    let agents = ["aws".to_owned()];
    assert!(store
        .verifier_fetches(s.id, &agents, now)
        .unwrap()
        .is_empty());
    assert_eq!(store.key_safe_at(s.id, "k1", now).unwrap(), None);
    assert_eq!(store.purged_through(s.id).unwrap(), None);
    // A replica's flush of fetches it counted before the deletion writes none of them back.
    store
        .record_fetches(&[
            fetched_from(s.id, now, "aws", &["10.0.1.0/24"]),
            fetched_from(s.id, now, "gcp", &["10.0.2.0/24"]),
        ])
        .unwrap();
    assert!(store.fetches(s.id, now, 10).unwrap().is_empty());
    let late = ["aws".to_owned(), "gcp".to_owned()];
    assert!(store.verifier_fetches(s.id, &late, now).unwrap().is_empty());
    assert_eq!(store.customer(c.id).unwrap(), None);
    assert_eq!(store.customer_by_tenant("acme").unwrap(), None);
    assert!(store.account(first.id).unwrap().is_none());
    assert_eq!(store.credential(&token.lookup_id).unwrap(), None);
    assert_eq!(store.service(s.id).unwrap(), None);
    assert_eq!(store.config(s.id).unwrap(), None);
    assert!(trail(store, Trail::Customer(c.id)).is_empty());
    logged_since(
        store,
        before,
        &[Change::Service(s.id), Change::Account(first.id)],
    );
    // The other customer keeps everything; the tenant and the subdomain are free again.
    assert!(store.credential(&other_token.lookup_id).unwrap().is_some());
    assert!(store.account(other_first.id).unwrap().is_some());
    assert!(!store.delete_customer("acme", at(50)).unwrap());
    seeded(store, "acme");
    let again = registered(
        store.customer_by_tenant("acme").unwrap().unwrap().id,
        "api-acme",
        3,
    );
    store
        .create_service(&again, None, Ceiling::NONE, &ev())
        .unwrap();
    // Its subdomain was noted as freed: the new service's first version counts the deletion
    // as the change before it (as after `delete_service`).
    store
        .update_config(
            again.id,
            &mut |_| Some(config(again.id, "http://again", 50)),
            &ev(),
        )
        .unwrap();
    let published = store.config(again.id).unwrap().unwrap();
    assert_eq!(published.previous_change_at, Some(at(50)));
}

/// A domain of `service` added at `created`.
fn domain_of(service: Uuid, name: &str, created: i64) -> CustomDomain {
    CustomDomain::new(service, name.into(), format!("token-{name}"), at(created))
}

#[test]
fn a_custom_domain_is_held_by_one_service_and_goes_with_it_on_every_store() {
    on_every_store(a_custom_domain_is_held_by_one_service_and_goes_with_it);
}

fn a_custom_domain_is_held_by_one_service_and_goes_with_it(store: &dyn Storage) {
    let a = anonymous("aaaaaaaaaaaa-anon", 0, 3600);
    let b = anonymous("bbbbbbbbbbbb-anon", 0, 3600);
    for s in [&a, &b] {
        store.create_service(s, None, Ceiling::NONE, &ev()).unwrap();
    }
    let before = all_changes(store).len();
    let added = domain_of(a.id, "login.acme.com", 10);
    assert!(put_domain(store, &added).unwrap());
    assert_eq!(store.domain_of(a.id).unwrap(), Some(added.clone()));
    assert_eq!(
        store.domain_named("login.acme.com").unwrap(),
        Some(added.clone())
    );
    assert_eq!(all_changes(store)[before..], [Change::Service(a.id)]);
    // Another service may claim the name while it is unproven; the first proven holds it, and
    // the other claim fails with the problem given.
    let claim_b = domain_of(b.id, "login.acme.com", 11);
    assert!(put_domain(store, &claim_b).unwrap());
    let taken = DomainProblem {
        code: "domain-taken".into(),
        message: "taken".into(),
    };
    let proven = CustomDomain {
        status: DomainStatus::Issuing,
        ..added.clone()
    };
    assert!(store.hold_domain(&added, &proven, &taken).unwrap());
    let lost = store.domain_of(b.id).unwrap().unwrap();
    assert_eq!(
        (lost.status, lost.problem.clone().map(|p| p.code)),
        (DomainStatus::Failed, Some("domain-taken".into()))
    );
    let late = CustomDomain {
        status: DomainStatus::Issuing,
        ..claim_b.clone()
    };
    assert!(
        !store.hold_domain(&claim_b, &late, &taken).unwrap(),
        "held already"
    );
    // A lookup of b's claim that began before a proved the name ends after: its outcome, decided
    // on the claim as it was, is not written over the failure.
    let looked_late = claim_b.clone().checked(false, &Schedule::default(), at(12));
    assert!(!store.update_domain(&claim_b, &looked_late).unwrap());
    let deleted_late = store.delete_domain(b.id, Some(&claim_b), &ev()).unwrap();
    assert!(
        !deleted_late,
        "a claim that changed is not deleted as it was"
    );
    assert_eq!(store.domain_of(b.id).unwrap(), Some(lost));
    assert_eq!(
        store.domain_named("login.acme.com").unwrap(),
        Some(proven.clone())
    );
    // Held: another service's claim of it is a conflict now.
    let again = put_domain(store, &domain_of(b.id, "login.acme.com", 11));
    assert!(matches!(again, Err(StoreError::Conflict(_))), "{again:?}");
    let gone = put_domain(store, &domain_of(Uuid::new_v4(), "x.acme.com", 11));
    assert_eq!(gone, Err(StoreError::NotFound));
    let added = proven;
    // Another name replaces the service's domain; its challenges go with the old name.
    store
        .put_challenge("login.acme.com", "t", "t.k", at(12))
        .unwrap();
    assert_eq!(answer(store, "login.acme.com", "t").as_deref(), Some("t.k"));
    assert!(put_domain(store, &domain_of(a.id, "id.acme.com", 13)).unwrap());
    assert_eq!(answer(store, "login.acme.com", "t"), None);
    assert_eq!(
        store
            .domain_named("login.acme.com")
            .unwrap()
            .map(|d| d.service_id),
        Some(b.id),
        "only b's failed claim is left"
    );
    // The worker's progress on a replaced name is not written.
    assert!(!store.update_domain(&added, &added).unwrap());
    // The service goes, and its domain and the challenges of the name it holds with it.
    let held = CustomDomain {
        status: DomainStatus::Issuing,
        ..domain_of(a.id, "id.acme.com", 13)
    };
    let claim = domain_of(a.id, "id.acme.com", 13);
    assert!(store.hold_domain(&claim, &held, &taken).unwrap());
    store
        .put_challenge("id.acme.com", "u", "u.k", at(14))
        .unwrap();
    assert!(store.delete_service(a.id, &ev()).unwrap());
    assert_eq!(store.domain_of(a.id).unwrap(), None);
    assert_eq!(answer(store, "id.acme.com", "u"), None);
    assert!(!store.delete_domain(a.id, None, &ev()).unwrap());
}

#[test]
fn unproven_claims_are_counted_per_customer_and_acme_orders_per_account_on_every_store() {
    on_every_store(unproven_claims_are_counted_per_customer_and_acme_orders_per_account);
}

fn unproven_claims_are_counted_per_customer_and_acme_orders_per_account(store: &dyn Storage) {
    let (customer, _, _) = seeded(store, "acme");
    let mine: Vec<Service> = (0..3)
        .map(|i| registered(customer.id, &format!("d{i}-acme"), 3))
        .collect();
    for s in &mine {
        store.create_service(s, None, Ceiling::NONE, &ev()).unwrap();
    }
    for (i, s) in mine.iter().enumerate() {
        let name = format!("d{i}.acme.com");
        assert!(put_domain(store, &domain_of(s.id, &name, 10)).unwrap());
    }
    let proven = CustomDomain {
        status: DomainStatus::Issuing,
        ..domain_of(mine[0].id, "d0.acme.com", 10)
    };
    let taken = DomainProblem {
        code: "domain-taken".into(),
        message: "taken".into(),
    };
    let claim = domain_of(mine[0].id, "d0.acme.com", 10);
    assert!(store.hold_domain(&claim, &proven, &taken).unwrap());
    // The bound is counted in the write (two claims wait: d1 and d2; d0 is held): a claim that
    // would make a third is refused, one that replaces its own service's claim is not, and
    // nothing is written on a refusal.
    let fourth = registered(customer.id, "d3-acme", 3);
    store
        .create_service(&fourth, None, Ceiling::NONE, &ev())
        .unwrap();
    let claim = domain_of(fourth.id, "d3.acme.com", 11);
    let refused = store.put_domain(&claim, None, Ceiling(2), &ev());
    assert_eq!(refused, Err(StoreError::CeilingReached(2)));
    assert_eq!(store.domain_of(fourth.id).unwrap(), None);
    let mine_1 = store.domain_of(mine[1].id).unwrap();
    let again = domain_of(mine[1].id, "d1-again.acme.com", 11);
    assert_eq!(
        store.put_domain(&again, mine_1.as_ref(), Ceiling(2), &ev()),
        Ok(Ok(()))
    );
    // Written by another request since it was read: nothing written, and what is there now
    // (as the write found it) for the caller to decide again.
    let stale = domain_of(mine[1].id, "d1-stale.acme.com", 12);
    assert_eq!(
        store.put_domain(&stale, mine_1.as_ref(), Ceiling::NONE, &ev()),
        Ok(Err(Some(again.clone())))
    );
    assert_eq!(
        store.put_domain(&stale, None, Ceiling::NONE, &ev()),
        Ok(Err(Some(again.clone())))
    );
    assert_eq!(store.domain_of(mine[1].id).unwrap(), Some(again));

    let directory = "https://acme.example/dir";
    let customer_id = Some(customer.id);
    let order = |directory: &'static str, domain: &'static str, renewal, when, since| AcmeOrder {
        directory,
        domain,
        customer_id,
        renewal,
        at: at(when),
        customer_since: at(since),
        account_since: at(since),
    };
    let record = |domain: &'static str, renewal: bool, when: i64, forget: i64| {
        let taken = store
            .take_acme_order(&order(directory, domain, renewal, when, forget), &|_, _| {
                true
            });
        assert!(taken.unwrap());
    };
    record("d0.acme.com", false, 100, 0);
    record("d1.acme.com", true, 200, 0);
    let elsewhere = AcmeOrder {
        customer_id: None,
        ..order("https://other/dir", "x.com", false, 200, 0)
    };
    assert!(store.take_acme_order(&elsewhere, &|_, _| true).unwrap());
    // The budget is asked with the counts the order would join, in its transaction: spent,
    // nothing is recorded.
    let asked = std::cell::Cell::new((usize::MAX, usize::MAX));
    let spent = |customer, account| {
        asked.set((customer, account));
        false
    };
    // The counts an order would be judged by, since `since` (nothing recorded: refused).
    let orders = |since: i64| {
        let refused =
            store.take_acme_order(&order(directory, "d9.acme.com", false, 250, since), &spent);
        assert!(!refused.unwrap());
        asked.get()
    };
    assert_eq!(
        orders(0),
        (1, 2),
        "renewals are no new orders; one directory"
    );
    assert_eq!(orders(0), (1, 2), "a refused order is not recorded");
    assert_eq!(orders(150), (0, 1));
    // Older orders are forgotten when one is recorded.
    record("d2.acme.com", false, 300, 150);
    assert_eq!(orders(0), (1, 2));
}

#[test]
fn the_worker_finds_due_domains_locks_one_at_a_time_and_loads_served_ones_on_every_store() {
    on_every_store(the_worker_finds_due_domains_locks_one_at_a_time_and_loads_served_ones);
}

fn the_worker_finds_due_domains_locks_one_at_a_time_and_loads_served_ones(store: &dyn Storage) {
    let services: Vec<Service> = (0..3)
        .map(|i| {
            anonymous(
                &format!("{i}{i}{i}{i}{i}{i}{i}{i}{i}{i}{i}{i}-anon"),
                0,
                3600,
            )
        })
        .collect();
    for s in &services {
        store.create_service(s, None, Ceiling::NONE, &ev()).unwrap();
    }
    let schedule = Schedule::default();
    let names = ["a.example.com", "b.example.com", "c.example.com"];
    for (s, name) in services.iter().zip(names) {
        assert!(put_domain(store, &domain_of(s.id, name, 0)).unwrap());
    }
    // a: looked at, next in 10 s; b: failed; c: due now.
    let a = store.domain_of(services[0].id).unwrap().unwrap();
    let looked = a.clone().checked(false, &schedule, at(0));
    assert!(store.update_domain(&a, &looked).unwrap());
    // The same step again (another replica's, decided on the same read): refused.
    let again = a.clone().checked(false, &schedule, at(1));
    assert!(!store.update_domain(&a, &again).unwrap());
    assert_eq!(store.domain_of(services[0].id).unwrap(), Some(looked));
    let b = store.domain_of(services[1].id).unwrap().unwrap();
    let failed = b
        .clone()
        .checked(false, &schedule, at(0) + time::Duration::hours(72));
    assert!(store.update_domain(&b, &failed).unwrap());
    let due = |now: i64, work: DomainWork, limit: usize| -> Vec<String> {
        let due = store.domains_due(at(now), work, limit).unwrap();
        due.into_iter().map(|d| d.domain).collect()
    };
    assert_eq!(due(5, DomainWork::Lookup, 10), ["c.example.com"]);
    assert_eq!(due(10, DomainWork::Lookup, 10).len(), 2, "a's time came");
    assert_eq!(due(10, DomainWork::Lookup, 1).len(), 1);
    assert!(due(10, DomainWork::Order, 10).is_empty(), "none is held");
    assert_eq!(store.domain_of(services[1].id).unwrap().unwrap(), failed);

    // One lock holder at a time, until its lock ends; never on a copy made stale.
    let c = services[2].id;
    let read = store.domain_of(c).unwrap().unwrap();
    assert!(store.lock_domain(&read, at(300), at(0)).unwrap());
    assert!(!store.lock_domain(&read, at(600), at(299)).unwrap());
    assert!(store.lock_domain(&read, at(900), at(300)).unwrap());
    let stale = CustomDomain {
        attempts: read.attempts + 1,
        ..read.clone()
    };
    assert!(!store.lock_domain(&stale, at(2000), at(1000)).unwrap());
    let elsewhere = CustomDomain {
        service_id: Uuid::new_v4(),
        ..read.clone()
    };
    assert!(!store.lock_domain(&elsewhere, at(300), at(0)).unwrap());
    // A step written (the lock holder's, its order over) releases the lock at once.
    let stepped = read.clone().postponed(at(400));
    assert!(store.update_domain(&read, &stepped).unwrap());
    assert!(store.lock_domain(&stepped, at(1300), at(400)).unwrap());
    assert!(store.update_domain(&stepped, &read).unwrap());

    // Served once active with a certificate, which reads back as written.
    assert!(store.held_domains().unwrap().is_empty());
    let claim_c = store.domain_of(c).unwrap().unwrap();
    let issuing = claim_c.clone().checked(true, &schedule, at(1));
    let certificate = DomainCertificate {
        chain_pem: "-----BEGIN CERTIFICATE-----".into(),
        sealed_key: "sealed".into(),
        not_before: at(1),
        not_after: at(1) + time::Duration::days(90),
        issuer: "CN=Pebble".into(),
    };
    let active = issuing.ordered(Ok(certificate), &schedule, at(2));
    assert!(store.update_domain(&claim_c, &active).unwrap());
    assert_eq!(store.held_domains().unwrap(), std::slice::from_ref(&active));
    // Orders apart from lookups, renewals first: a's first order, due long before c's renewal,
    // comes after it.
    let claim_a = store.domain_of(services[0].id).unwrap().unwrap();
    let issuing_a = claim_a.clone().checked(true, &schedule, at(20));
    let taken = DomainProblem {
        code: "domain-taken".into(),
        message: "taken".into(),
    };
    assert!(store.hold_domain(&claim_a, &issuing_a, &taken).unwrap());
    let renewal = (active.next_attempt_at - at(0)).whole_seconds();
    assert_eq!(
        due(renewal, DomainWork::Order, 10),
        ["c.example.com", "a.example.com"]
    );
    assert_eq!(due(renewal, DomainWork::Order, 1), ["c.example.com"]);
    assert_eq!(due(renewal - 1, DomainWork::Order, 10), ["a.example.com"]);
    assert!(due(renewal, DomainWork::Lookup, 10).is_empty());

    // ACME accounts: the first kept wins.
    assert_eq!(store.acme_account("https://acme/dir").unwrap(), None);
    assert_eq!(
        store.put_acme_account("https://acme/dir", "first").unwrap(),
        "first"
    );
    assert_eq!(
        store
            .put_acme_account("https://acme/dir", "second")
            .unwrap(),
        "first"
    );
    assert_eq!(
        store.acme_account("https://acme/dir").unwrap().as_deref(),
        Some("first")
    );
}

/// A managed key of `n`, made at `at`.
fn managed_key(n: u8, stage: registry_domain::signing::Stage, at: OffsetDateTime) -> ManagedKey {
    let jwk = serde_json::json!({"kty": "EC", "crv": "P-256", "x": format!("x{n}"), "y": "y"});
    let made = registry_domain::signing::MadeKey {
        jwk: jwk.as_object().unwrap().clone(),
        public_key_der: vec![n],
        sealed: format!("sealed:{n:02x}"),
    };
    ManagedKey::new(made, registry_domain::signing::Algorithm::Es256, stage, at).unwrap()
}

#[test]
fn other_signing_finds_another_services_keys_on_every_store() {
    on_every_store(other_signing_finds_another_services_keys);
}

fn other_signing_finds_another_services_keys(store: &dyn Storage) {
    use registry_domain::ports::{ConfigChange, SigningChange};
    use registry_domain::signing::{Signing, SigningSettings, Stage};
    let (a, b) = (
        anonymous("abcdefghijkl-anon", 0, 3600),
        anonymous("mnopqrstuvwx-anon", 0, 3600),
    );
    for s in [&a, &b] {
        store.create_service(s, None, Ceiling::NONE, &ev()).unwrap();
    }
    assert_eq!(store.other_signing(b.id).unwrap(), None);
    let t0 = datetime!(2026-11-30 10:00:00 UTC);
    let signing = Signing::new(
        SigningSettings::default(),
        managed_key(1, Stage::Current, t0),
    );
    let write = |signing: Option<Signing>| {
        store
            .update_signing(
                a.id,
                &mut |_, _| {
                    Some(SigningChange {
                        signing: signing.clone(),
                        due_at: None,
                        config: ConfigChange::Keep,
                    })
                },
                None,
            )
            .unwrap()
    };
    write(Some(signing.clone()));
    assert_eq!(store.other_signing(b.id).unwrap(), Some(signing.clone()));
    assert_eq!(
        store.other_signing(a.id).unwrap(),
        None,
        "its own is no other's"
    );
    // A state kept for its memory of withdrawals holds no key: none to open.
    let mut kept = signing;
    kept.keys.clear();
    write(Some(kept));
    assert_eq!(store.other_signing(b.id).unwrap(), None);
}

#[test]
fn update_signing_writes_the_signing_with_its_key_set_once_on_every_store() {
    on_every_store(update_signing_writes_the_signing_with_its_key_set_once);
}

fn update_signing_writes_the_signing_with_its_key_set_once(store: &dyn Storage) {
    use registry_domain::ports::{ConfigChange, SigningChange};
    use registry_domain::signing::{Signing, SigningSettings, Stage};
    let s = anonymous("abcdefghijkl-anon", 0, 3600);
    store
        .create_service(&s, None, Ceiling::NONE, &ev())
        .unwrap();
    let t0 = datetime!(2026-11-30 10:00:00.123 UTC);
    assert_eq!(store.signing(s.id).unwrap(), None);
    let first = Signing::new(
        SigningSettings::default(),
        managed_key(1, Stage::Current, t0),
    );
    let published = config(s.id, "http://abcdefghijkl-anon.localhost:8080", 1);
    let changes_before = all_changes(store).len();
    // Nothing decided: nothing written, no event, no change.
    let written = store
        .update_signing(
            s.id,
            &mut |stored, config| {
                assert_eq!((stored, config), (None, None));
                None
            },
            Some(&ev()),
        )
        .unwrap();
    assert!(!written);
    assert_eq!(all_changes(store).len(), changes_before);
    // The signing and the configuration, in one write, with the event and one change.
    let due = t0 + time::Duration::hours(1);
    let written = store
        .update_signing(
            s.id,
            &mut |_, _| {
                Some(SigningChange {
                    signing: Some(first.clone()),
                    due_at: Some(due),
                    config: ConfigChange::Write(published.clone()),
                })
            },
            Some(&ev()),
        )
        .unwrap();
    assert!(written);
    assert_eq!(store.signing(s.id).unwrap(), Some(first.clone()));
    assert_eq!(store.config(s.id).unwrap().unwrap().jwks, published.jwks);
    assert_eq!(
        all_changes(store)[changes_before..],
        [Change::Service(s.id)]
    );
    // The change sees what is stored; a step with no event moves the due time only.
    let written = store
        .update_signing(
            s.id,
            &mut |stored, config| {
                assert_eq!(stored.as_ref(), Some(&first));
                assert!(config.is_some());
                Some(SigningChange {
                    signing: stored,
                    due_at: Some(t0),
                    config: ConfigChange::Keep,
                })
            },
            None,
        )
        .unwrap();
    assert!(written);
    assert_eq!(all_changes(store).len(), changes_before + 1);
    // Due: at or before now, most overdue first, up to the limit.
    assert_eq!(
        store
            .signing_due(t0 - time::Duration::seconds(1), 10)
            .unwrap(),
        Vec::<Uuid>::new()
    );
    assert_eq!(store.signing_due(t0, 10).unwrap(), [s.id]);
    assert_eq!(store.signing_due(t0, 0).unwrap(), Vec::<Uuid>::new());
    // A failed step is put off, only while it is due, its state untouched.
    let minute = t0 + time::Duration::seconds(60);
    let before = t0 - time::Duration::seconds(1);
    store.postpone_signing(s.id, minute, before).unwrap();
    assert_eq!(store.signing_due(t0, 10).unwrap(), [s.id]);
    store.postpone_signing(s.id, minute, t0).unwrap();
    assert_eq!(store.signing_due(t0, 10).unwrap(), Vec::<Uuid>::new());
    assert_eq!(store.signing_due(minute, 10).unwrap(), [s.id]);
    assert_eq!(store.signing(s.id).unwrap(), Some(first.clone()));
    // A signature is recorded (no change, no event), on the key it names; the step stays put
    // off.
    assert!(store
        .record_signature(s.id, &first.keys[0].kid, t0)
        .unwrap());
    let signed = store.signing(s.id).unwrap().unwrap();
    assert_eq!(signed.keys[0].last_signed_at, Some(t0));
    assert_eq!(store.signing_due(t0, 10).unwrap(), Vec::<Uuid>::new());
    assert_eq!(all_changes(store).len(), changes_before + 1);
    // A transition with its event and the key set unchanged: the event, and one change.
    let written = store
        .update_signing(
            s.id,
            &mut |stored, _| {
                Some(SigningChange {
                    signing: stored,
                    due_at: Some(t0),
                    config: ConfigChange::Keep,
                })
            },
            Some(&ev()),
        )
        .unwrap();
    assert!(written);
    assert_eq!(all_changes(store).len(), changes_before + 2);
    // A signature by a key the service no longer holds is not recorded, and says so.
    assert!(!store.record_signature(s.id, "no-such-kid", t0).unwrap());
    // No key left: removed, and with it the configuration it alone published.
    store
        .update_signing(
            s.id,
            &mut |_, _| {
                Some(SigningChange {
                    signing: None,
                    due_at: None,
                    config: ConfigChange::Remove(t0),
                })
            },
            Some(&ev()),
        )
        .unwrap();
    assert_eq!(store.signing(s.id).unwrap(), None);
    assert_eq!(store.config(s.id).unwrap(), None);
    assert_eq!(all_changes(store).len(), changes_before + 3);
    // The next version counts the removal as the change before it.
    store
        .update_config(s.id, &mut |_| Some(config(s.id, "http://next", 0)), &ev())
        .unwrap();
    assert_eq!(
        store.config(s.id).unwrap().unwrap().previous_change_at,
        Some(t0)
    );
    assert!(store.delete_config(s.id, &|_| false, &ev()).unwrap());
    assert!(!store
        .record_signature(s.id, &first.keys[0].kid, t0)
        .unwrap());
    assert_eq!(store.signing_due(t0, 10).unwrap(), Vec::<Uuid>::new());
    // A service gone: not found; deleting a service removes its signing.
    let gone = Uuid::new_v4();
    let refused = store
        .update_signing(gone, &mut |_, _| None, None)
        .unwrap_err();
    assert_eq!(refused, StoreError::NotFound);
    store
        .update_signing(
            s.id,
            &mut |_, _| {
                Some(SigningChange {
                    signing: Some(first.clone()),
                    due_at: Some(t0),
                    config: ConfigChange::Keep,
                })
            },
            Some(&ev()),
        )
        .unwrap();
    assert!(store.delete_service(s.id, &ev()).unwrap());
    assert_eq!(store.signing(s.id).unwrap(), None);
    assert_eq!(store.signing_due(t0, 10).unwrap(), Vec::<Uuid>::new());
}

/// The rate limits' counts shared by the replicas (docs/api.md, "Limits"): each replica's
/// events add up in its count of the minute, and a replica reads the others' counts written
/// since its last look, never its own.
#[test]
fn rate_counts_add_up_per_replica_and_minute_and_each_reads_the_others_on_every_store() {
    on_every_store(rate_counts_add_up_per_replica_and_minute_and_each_reads_the_others);
}

fn rate_counts_add_up_per_replica_and_minute_and_each_reads_the_others(store: &dyn Storage) {
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    // Let through in `t`'s minute unless said otherwise.
    let events = |limit: &str, key: &str, events: u64| RateEvents {
        limit: limit.into(),
        key: key.into(),
        events,
        minute: registry_domain::ports::rate_minute(at(0)),
    };
    // `at` is a minute's start: 10:00:00.
    let t = at(0);
    let seen = |counts: Vec<RateCount>| -> Vec<(String, String, Uuid, i64, u64)> {
        let mut seen: Vec<_> = (counts.into_iter())
            .map(|c| (c.limit, c.key, c.replica, c.minute, c.events))
            .collect();
        seen.sort();
        seen
    };
    let minute = |at: OffsetDateTime| registry_domain::ports::rate_minute(at);
    let read = store
        .exchange_rate_counts(a, &[events("writes", "k1", 3)], t, t)
        .unwrap();
    assert_eq!(seen(read), [], "nothing of the others yet");
    let read = store
        .exchange_rate_counts(
            b,
            &[events("writes", "k1", 2), events("sign", "c", 1)],
            t + Duration::seconds(1),
            t,
        )
        .unwrap();
    assert_eq!(
        seen(read),
        [("writes".into(), "k1".into(), a, minute(t), 3)],
        "b reads a's count, not its own"
    );
    // a's events of the same minute add up to its count; a reads b's.
    let later = t + Duration::seconds(2);
    let read = store
        .exchange_rate_counts(a, &[events("writes", "k1", 4)], later, t)
        .unwrap();
    let b_counts = [
        ("sign".into(), "c".into(), b, minute(t), 1),
        ("writes".into(), "k1".into(), b, minute(t), 2),
    ];
    assert_eq!(seen(read), b_counts);
    let read = store.exchange_rate_counts(b, &[], later, later).unwrap();
    assert_eq!(
        seen(read),
        [("writes".into(), "k1".into(), a, minute(t), 7)]
    );
    assert_eq!(read_written(store, b, later), [later]);
    // Counts written before `since` are not read again.
    let read = (store.exchange_rate_counts(a, &[], later, later)).unwrap();
    assert_eq!(seen(read), []);
    // The next minute is a count of its own.
    let next = t + Duration::seconds(61);
    store
        .exchange_rate_counts(
            a,
            &[RateEvents {
                minute: minute(next),
                ..events("writes", "k1", 1)
            }],
            next,
            next,
        )
        .unwrap();
    let read = store.exchange_rate_counts(b, &[], next, t).unwrap();
    assert_eq!(
        seen(read),
        [
            ("writes".into(), "k1".into(), a, minute(t), 7),
            ("writes".into(), "k1".into(), a, minute(next), 1),
        ]
    );
    // Pruned by when they were last written.
    assert_eq!(store.prune_rate_counts(later).unwrap(), 2, "b's two counts");
    let read = store.exchange_rate_counts(b, &[], next, t).unwrap();
    assert_eq!(seen(read).len(), 2, "a's counts stay");
    let read = store.exchange_rate_counts(a, &[], next, t).unwrap();
    assert_eq!(seen(read), []);
}

/// When the counts `reader` reads from `since` on were last written.
fn read_written(store: &dyn Storage, reader: Uuid, since: OffsetDateTime) -> Vec<OffsetDateTime> {
    (store.exchange_rate_counts(reader, &[], since, since))
        .unwrap()
        .into_iter()
        .map(|c| c.written_at)
        .collect()
}

/// A service created again under a subdomain freed a moment ago: its first version counts the
/// deletion as the change before it (`If-Modified-Since` with the deleted service's date, in
/// the same second, is not the new version's), and a service under a new name knows of none.
#[test]
fn a_service_created_again_under_a_freed_subdomain_dates_its_first_version_after_the_deletion_on_every_store(
) {
    on_every_store(
        a_service_created_again_under_a_freed_subdomain_dates_its_first_version_after_the_deletion,
    );
}

fn a_service_created_again_under_a_freed_subdomain_dates_its_first_version_after_the_deletion(
    store: &dyn Storage,
) {
    let (c, ..) = seeded(store, "acme");
    let first = registered(c.id, "api-acme", 1);
    store
        .create_service(&first, None, Ceiling::NONE, &ev())
        .unwrap();
    store
        .put_config(&config(first.id, "http://api", 5), &ev())
        .unwrap();
    let deleted = AuditEvent { at: at(10), ..ev() };
    assert!(store.delete_service(first.id, &deleted).unwrap());
    let publish = |service: &Service| {
        store
            .update_config(
                service.id,
                &mut |_| Some(config(service.id, "http://api", 10)),
                &ev(),
            )
            .unwrap();
        store
            .config(service.id)
            .unwrap()
            .unwrap()
            .previous_change_at
    };
    let again = registered(c.id, "API-acme", 10);
    store
        .create_service(&again, None, Ceiling::NONE, &ev())
        .unwrap();
    assert_eq!(publish(&again), Some(at(10)));
    let other = registered(c.id, "web-acme", 10);
    store
        .create_service(&other, None, Ceiling::NONE, &ev())
        .unwrap();
    assert_eq!(publish(&other), None);
    // Freed again later: the later deletion counts.
    assert!(store
        .delete_service(again.id, &AuditEvent { at: at(11), ..ev() })
        .unwrap());
    let fourth = registered(c.id, "api-acme", 11);
    store
        .create_service(&fourth, None, Ceiling::NONE, &ev())
        .unwrap();
    assert_eq!(publish(&fourth), Some(at(11)));
    // An anonymous service's name is never taken again: nothing is noted.
    let anon = anonymous("abcdefghijklmnop-anon", 11, 1000);
    store
        .create_service(&anon, None, Ceiling::NONE, &ev())
        .unwrap();
    assert!(store.delete_service(anon.id, &deleted).unwrap());
    let again_anon = anonymous("abcdefghijklmnop-anon", 12, 1000);
    store
        .create_service(&again_anon, None, Ceiling::NONE, &ev())
        .unwrap();
    assert_eq!(publish(&again_anon), None);
    // Forgotten with the change log.
    store.prune_changes(at(12)).unwrap();
    assert!(store.delete_service(fourth.id, &deleted).unwrap());
    store.prune_changes(at(12)).unwrap();
    let third = registered(c.id, "api-acme", 12);
    store
        .create_service(&third, None, Ceiling::NONE, &ev())
        .unwrap();
    assert_eq!(publish(&third), None);
}
