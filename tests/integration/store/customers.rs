use super::*;
use registry_domain::ports::{AccountStore, CredentialOwner, CredentialStore};
use registry_domain::StoreError;

#[test]
fn a_customer_is_created_with_its_first_account_and_token() {
    let store = store();
    let (c, first, token) = seeded(&store, "acme");

    assert_eq!(store.customer(c.id).unwrap(), Some(c.clone()));
    assert_eq!(store.customer_by_tenant("acme").unwrap(), Some(c.clone()));
    let accounts = store.accounts_of(c.id).unwrap();
    assert_eq!(accounts.len(), 1);
    assert_same_account(&accounts[0], &first);
    let stored = store.credential(&token.lookup_id).unwrap().unwrap();
    assert_eq!(stored.owner, CredentialOwner::Account(first.id));
    assert_eq!(stored.hash, token.hash);
}

#[test]
fn unknown_customers_are_none() {
    let store = store();
    seeded(&store, "acme");
    assert_eq!(store.customer(Uuid::new_v4()).unwrap(), None);
    assert_eq!(store.customer_by_tenant("globex").unwrap(), None);
}

#[test]
fn a_taken_tenant_is_a_conflict_and_nothing_of_the_second_customer_remains() {
    let store = store();
    let (original, ..) = seeded(&store, "acme");
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
}

#[test]
fn a_failure_after_the_customer_row_rolls_the_customer_back() {
    let store = store();
    let (_, _, taken) = seeded(&store, "acme");
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
fn customers_are_listed_oldest_first() {
    let store = store();
    let mut created = Vec::new();
    for (tenant, second) in [("bravo", 30), ("alpha", 10), ("charlie", 20)] {
        let c = customer(tenant, second);
        let a = account(c.id, "first", static_policy(&["*"]), second);
        store
            .create_customer(&c, &a, &record(&lookup(), "h"), &ev())
            .unwrap();
        created.push(c);
    }
    let tenants: Vec<String> = store
        .customers()
        .unwrap()
        .into_iter()
        .map(|c| c.tenant)
        .collect();
    assert_eq!(tenants, ["alpha", "charlie", "bravo"]);
}

#[test]
fn set_plan_changes_the_plan_of_that_tenant_only() {
    let store = store();
    let (acme, ..) = seeded(&store, "acme");
    let (globex, ..) = seeded(&store, "globex");

    let updated = store.set_plan("acme", Plan::Free, &ev()).unwrap().unwrap();

    assert_eq!(
        updated,
        Customer {
            plan: Plan::Free,
            ..acme.clone()
        }
    );
    assert_eq!(store.customer(acme.id).unwrap().unwrap().plan, Plan::Free);
    assert_eq!(
        store.customer(globex.id).unwrap().unwrap().plan,
        Plan::Business
    );
    assert_eq!(store.set_plan("initech", Plan::Team, &ev()).unwrap(), None);
}

/// `customer.update` is written with a change of plan, and only then (docs/api.md, "Audit trail and
/// last use").
#[test]
fn set_plan_writes_its_event_only_when_the_plan_changes() {
    use registry_domain::audit::{AuditQuery, Trail};
    use registry_domain::ports::AuditLog;
    let store = store();
    let (acme, ..) = seeded(&store, "acme");
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
    store.set_plan("acme", Plan::Team, &changed).unwrap();
    assert_eq!(updates(), vec![changed.clone()]);

    // The same plan again, and a tenant nobody has: nothing changes, no event.
    let same = store.set_plan("acme", Plan::Team, &event(2)).unwrap();
    assert_eq!(same.map(|c| c.plan), Some(Plan::Team));
    assert_eq!(
        store.set_plan("initech", Plan::Free, &event(3)).unwrap(),
        None
    );
    assert_eq!(updates(), vec![changed]);
}

#[test]
fn times_are_kept_to_the_millisecond() {
    let store = store();
    let mut c = customer("acme", 0);
    c.created_at = time::macros::datetime!(2026-11-21 10:00:00.123_456_789 UTC);
    let a = account(c.id, "first", static_policy(&["*"]), 0);
    store
        .create_customer(&c, &a, &record(&lookup(), "h"), &ev())
        .unwrap();

    let read = store.customer(c.id).unwrap().unwrap();
    assert_eq!(
        read.created_at,
        time::macros::datetime!(2026-11-21 10:00:00.123 UTC)
    );
}
