use super::*;
use registry_domain::ports::{AccountStore, Change, ChangeFeed, ServiceStore};

fn all_changes(store: &Store) -> Vec<Change> {
    store.changes_since(0, 1000).unwrap().1
}

#[test]
fn an_empty_log_starts_at_zero() {
    let store = store();
    assert_eq!(store.latest_change().unwrap(), 0);
    assert_eq!(store.changes_since(0, 10).unwrap(), (0, vec![]));
    assert_eq!(store.changes_since(7, 10).unwrap(), (7, vec![]));
    store.ping().unwrap();
}

#[test]
fn every_write_to_services_and_accounts_is_logged_in_order() {
    let store = store();
    let (c, first, _) = seeded(&store, "acme");
    let s = registered(c.id, "api-acme", 1);
    store
        .create_service(&s, None, Ceiling::NONE, &ev())
        .unwrap();
    store
        .update_service(
            &Service {
                title: Some("t".into()),
                ..s.clone()
            },
            &ev(),
        )
        .unwrap();
    store
        .put_config(&config(s.id, "http://api-acme", 2), &ev())
        .unwrap();
    store.delete_config(s.id, &ev()).unwrap();
    let a = account(c.id, "ci", static_policy(&["*"]), 3);
    store
        .create_account(&a, Some(&record(&lookup(), "h")), Ceiling::NONE, &ev())
        .unwrap();
    store
        .update_account(
            &ServiceAccount {
                name: "ci2".into(),
                ..a.clone()
            },
            &ev(),
        )
        .unwrap();
    let replaced = store.token_lookup_id(a.id).unwrap();
    store
        .replace_token(a.id, replaced.as_deref(), &record(&lookup(), "h2"), &ev())
        .unwrap();
    store.delete_account(a.id, &ev()).unwrap();
    store.delete_service(s.id, &ev()).unwrap();

    use Change::{Account, Service as Svc};
    assert_eq!(
        all_changes(&store),
        [
            Account(first.id),
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
    assert_eq!(
        store.changes_since(0, 1000).unwrap().0,
        store.latest_change().unwrap()
    );
}

#[test]
fn failed_and_empty_writes_log_nothing() {
    let store = store();
    let (c, ..) = seeded(&store, "acme");
    let s = registered(c.id, "api-acme", 1);
    store
        .create_service(&s, None, Ceiling::NONE, &ev())
        .unwrap();
    let before = store.latest_change().unwrap();

    assert!(store
        .create_service(&registered(c.id, "api-acme", 2), None, Ceiling::NONE, &ev())
        .is_err());
    assert!(!store.delete_service(Uuid::new_v4(), &ev()).unwrap());
    assert!(!store.delete_config(s.id, &ev()).unwrap());
    assert!(!store.delete_account(Uuid::new_v4(), &ev()).unwrap());
    assert!(store
        .put_config(&config(Uuid::new_v4(), "http://x", 1), &ev())
        .is_err());
    assert!(store
        .replace_token(Uuid::new_v4(), None, &record(&lookup(), "h"), &ev())
        .is_err());
    store.set_plan("acme", Plan::Team, &ev()).unwrap();

    assert_eq!(store.latest_change().unwrap(), before);
}

#[test]
fn changes_are_read_in_pages() {
    let store = store();
    let (c, ..) = seeded(&store, "acme");
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

#[test]
fn pruning_keeps_the_newest_change_and_its_number() {
    let store = store();
    let (c, ..) = seeded(&store, "acme");
    let last = registered(c.id, "api-acme", 1);
    store
        .create_service(&last, None, Ceiling::NONE, &ev())
        .unwrap();
    let latest = store.latest_change().unwrap();

    assert_eq!(
        store
            .prune_changes(OffsetDateTime::now_utc() - Duration::hours(1))
            .unwrap(),
        0
    );
    assert_eq!(all_changes(&store).len(), 2);
    let pruned = store
        .prune_changes(OffsetDateTime::now_utc() + Duration::hours(1))
        .unwrap();

    assert_eq!(pruned, 1);
    assert_eq!(store.latest_change().unwrap(), latest);
    assert_eq!(all_changes(&store), [Change::Service(last.id)]);
    store.delete_service(last.id, &ev()).unwrap();
    assert!(
        store.latest_change().unwrap() > latest,
        "numbers are never reused"
    );
}

#[test]
fn a_second_handle_on_the_same_database_sees_the_changes() {
    let url = registry_tests::fresh_database_url();
    let writer = Store::connect(&url).unwrap();
    writer.migrate().unwrap();
    let replica = Store::connect(&url).unwrap();
    let cursor = replica.latest_change().unwrap();
    let (c, ..) = seeded(&writer, "acme");
    let s = registered(c.id, "api-acme", 1);
    writer
        .create_service(&s, None, Ceiling::NONE, &ev())
        .unwrap();
    writer
        .put_config(&config(s.id, "http://api-acme", 2), &ev())
        .unwrap();

    let (_, changes) = replica.changes_since(cursor, 100).unwrap();

    assert!(changes.ends_with(&[Change::Service(s.id), Change::Service(s.id)]));
    assert_eq!(replica.config(s.id).unwrap(), writer.config(s.id).unwrap());
}
