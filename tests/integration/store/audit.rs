//! The audit trail and `lastUsedAt` in the storage adapter (docs/api.md, "Audit trail and last
//! use"): an event is written with its change and only with it, pages are newest first, retention
//! prunes by age, and a last use never moves backwards.

use super::*;
use registry_domain::audit::{AuditQuery, Trail};
use registry_domain::ports::{AccountStore, AuditLog, ServiceStore};

fn event(action: Action, customer: Option<Uuid>, at_seconds: i64) -> AuditEvent {
    AuditEvent::new(
        action,
        Resource::customer(Uuid::new_v4()),
        Actor::system(),
        customer,
        at(at_seconds),
    )
}

fn trail(store: &Store, trail: Trail) -> Vec<AuditEvent> {
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

#[test]
fn events_are_written_with_their_change_and_only_with_it() {
    let store = store();
    let acme = customer("acme", 0);
    let first = account(acme.id, "boot", static_policy(&["*"]), 0);
    let created = event(Action::CustomerCreate, Some(acme.id), 0);
    store
        .create_customer(&acme, &first, &record("l1", "h"), &created)
        .unwrap();
    let service = Service {
        id: Uuid::new_v4(),
        customer_id: Some(acme.id),
        subdomain: "api-acme".into(),
        title: None,
        description: None,
        created_at: at(1),
        expires_at: None,
    };
    let made = event(Action::ServiceCreate, Some(acme.id), 1);
    store
        .create_service(&service, None, Ceiling::NONE, &made)
        .unwrap();
    // A conflict, a delete of nothing, an update that writes nothing: no event.
    let again = Service {
        id: Uuid::new_v4(),
        ..service.clone()
    };
    let conflict = event(Action::ServiceCreate, Some(acme.id), 2);
    assert!(store
        .create_service(&again, None, Ceiling::NONE, &conflict)
        .is_err());
    let nothing = event(Action::ConfigDelete, Some(acme.id), 3);
    assert!(!store.delete_config(service.id, &nothing).unwrap());
    let unwritten = event(Action::ConfigPut, Some(acme.id), 4);
    assert!(!store
        .update_config(service.id, &mut |_| None, &unwritten)
        .unwrap());
    let deleted = event(Action::ServiceDelete, Some(acme.id), 5);
    assert!(store.delete_service(service.id, &deleted).unwrap());

    let events = trail(&store, Trail::Customer(acme.id));
    assert_eq!(events, [deleted, made, created]);
    assert!(trail(&store, Trail::Anonymous).is_empty());
    assert!(trail(&store, Trail::Customer(Uuid::new_v4())).is_empty());
}

#[test]
fn pages_filters_and_retention() {
    let store = store();
    let acme = customer("acme", 0);
    let boot = account(acme.id, "boot", static_policy(&["*"]), 0);
    store
        .create_customer(
            &acme,
            &boot,
            &record("l1", "h"),
            &event(Action::CustomerCreate, Some(acme.id), 0),
        )
        .unwrap();
    let mut named = boot.clone();
    for i in 1..=9 {
        named.name = format!("n{i}");
        store
            .update_account(&named, &event(Action::AccountUpdate, Some(acme.id), i * 60))
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
    query.cursor = None;
    query.action = Some(Action::CustomerCreate);
    assert_eq!(store.audit_events(&query).unwrap().events.len(), 1);
    query.action = None;
    query.since = Some(at(8 * 60));
    query.limit = 500;
    assert_eq!(store.audit_events(&query).unwrap().events.len(), 2);
    assert_eq!(store.prune_audit(at(5 * 60)).unwrap(), 5);
    assert_eq!(trail(&store, Trail::Customer(acme.id)).len(), 5);
}

#[test]
fn a_last_use_never_moves_backwards_and_a_minute_is_written_once() {
    let store = store();
    let acme = customer("acme", 0);
    let boot = account(acme.id, "boot", static_policy(&["*"]), 0);
    store
        .create_customer(&acme, &boot, &record("l1", "h"), &ev())
        .unwrap();
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
    // An update of the account keeps it.
    let mut renamed = store.account(boot.id).unwrap().unwrap();
    renamed.name = "renamed".into();
    store.update_account(&renamed, &ev()).unwrap();
    assert_eq!(
        store.account(boot.id).unwrap().unwrap().last_used_at,
        Some(at(180))
    );
}

#[test]
fn the_refusal_log_keeps_the_newest_hundred_per_account_for_seven_days() {
    use registry_domain::ports::RefusalLog;
    let store = store();
    let acme = customer("acme", 0);
    let boot = account(acme.id, "boot", static_policy(&["*"]), 0);
    let other = account(acme.id, "other", static_policy(&["*"]), 0);
    store
        .create_customer(&acme, &boot, &record("l1", "h"), &ev())
        .unwrap();
    store
        .create_account(&other, None, Ceiling::NONE, &ev())
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
    assert_eq!(store.prune_refusals(at(50)).unwrap(), 90);
    // Deleting the account deletes its log.
    assert!(store.delete_account(boot.id, &ev()).unwrap());
    assert!(store.refusals(boot.id, at(0), 500).unwrap().is_empty());
}
