use super::*;
use registry_domain::ports::{CredentialOwner, CredentialStore, ServiceStore};
use registry_domain::StoreError;

#[test]
fn a_service_is_found_by_subdomain_in_any_case_and_by_id() {
    let store = store();
    let (c, ..) = seeded(&store, "acme");
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
    assert_eq!(
        store.find_service(&Uuid::new_v4().to_string()).unwrap(),
        None
    );
    assert_eq!(store.service(Uuid::new_v4()).unwrap(), None);
}

#[test]
fn a_subdomain_that_reads_as_a_uuid_is_still_found() {
    let store = store();
    let (c, ..) = seeded(&store, "acme");
    // Business plans choose names; this one happens to be UUID-shaped.
    let s = registered(c.id, "0123abcd-0123-0123-0123-0123456789ab", 1);
    store
        .create_service(&s, None, Ceiling::NONE, &ev())
        .unwrap();
    assert_eq!(
        store
            .find_service("0123ABCD-0123-0123-0123-0123456789AB")
            .unwrap(),
        Some(s)
    );
}

#[test]
fn subdomains_are_stored_lower_case() {
    let store = store();
    let (c, ..) = seeded(&store, "acme");
    let s = registered(c.id, "Mixed-Acme", 1);
    store
        .create_service(&s, None, Ceiling::NONE, &ev())
        .unwrap();
    assert_eq!(
        store.service(s.id).unwrap().unwrap().subdomain,
        "mixed-acme"
    );
}

#[test]
fn a_taken_subdomain_is_a_conflict_whatever_its_case() {
    let store = store();
    let (c, ..) = seeded(&store, "acme");
    store
        .create_service(&registered(c.id, "api-acme", 1), None, Ceiling::NONE, &ev())
        .unwrap();

    let again = registered(c.id, "API-ACME", 2);
    let err = store
        .create_service(&again, None, Ceiling::NONE, &ev())
        .unwrap_err();

    assert_eq!(err, StoreError::Conflict("subdomain taken".into()));
    assert_eq!(store.service(again.id).unwrap(), None);
    let anon = anonymous("api-acme", 3, 100);
    let err = store
        .create_service(&anon, Some(&record(&lookup(), "h")), Ceiling::NONE, &ev())
        .unwrap_err();
    assert_eq!(err, StoreError::Conflict("subdomain taken".into()));
}

#[test]
fn a_service_of_an_unknown_customer_is_not_found() {
    let store = store();
    let err = store
        .create_service(
            &registered(Uuid::new_v4(), "api-ghost", 1),
            None,
            Ceiling::NONE,
            &ev(),
        )
        .unwrap_err();
    assert_eq!(err, StoreError::NotFound);
}

#[test]
fn services_of_lists_one_customers_services_oldest_first() {
    let store = store();
    let (acme, ..) = seeded(&store, "acme");
    let (globex, ..) = seeded(&store, "globex");
    let later = registered(acme.id, "b-acme", 20);
    let earlier = registered(acme.id, "a-acme", 10);
    store
        .create_service(&later, None, Ceiling::NONE, &ev())
        .unwrap();
    store
        .create_service(&earlier, None, Ceiling::NONE, &ev())
        .unwrap();
    store
        .create_service(
            &registered(globex.id, "x-globex", 5),
            None,
            Ceiling::NONE,
            &ev(),
        )
        .unwrap();
    store
        .create_service(
            &anonymous("abcdefghijkl-anon", 1, 100),
            Some(&record(&lookup(), "h")),
            Ceiling::NONE,
            &ev(),
        )
        .unwrap();

    assert_eq!(store.services_of(acme.id).unwrap(), vec![earlier, later]);
    assert_eq!(store.services_of(Uuid::new_v4()).unwrap(), vec![]);
}

#[test]
fn owned_subdomains_answers_the_customers_own_in_the_order_asked() {
    let store = store();
    let (acme, ..) = seeded(&store, "acme");
    let (globex, ..) = seeded(&store, "globex");
    for name in ["api-acme", "web-acme"] {
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
    ]
    .map(String::from)
    .to_vec();
    let owned = store.owned_subdomains(acme.id, &asked).unwrap();

    assert_eq!(owned, ["Web-Acme", "api-acme", "web-acme"]);
    assert_eq!(
        store.owned_subdomains(acme.id, &[]).unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(
        store.owned_subdomains(Uuid::new_v4(), &asked).unwrap(),
        Vec::<String>::new()
    );
}

#[test]
fn owned_subdomains_handles_long_lists() {
    let store = store();
    let (acme, ..) = seeded(&store, "acme");
    store
        .create_service(
            &registered(acme.id, "s7-acme", 1),
            None,
            Ceiling::NONE,
            &ev(),
        )
        .unwrap();
    let asked: Vec<String> = (0..1200).map(|i| format!("s{i}-acme")).collect();
    assert_eq!(
        store.owned_subdomains(acme.id, &asked).unwrap(),
        ["s7-acme"]
    );
}

#[test]
fn update_service_writes_title_and_description_only() {
    let store = store();
    let (c, ..) = seeded(&store, "acme");
    let s = registered(c.id, "api-acme", 1);
    store
        .create_service(&s, None, Ceiling::NONE, &ev())
        .unwrap();

    let edited = Service {
        title: Some("New title".into()),
        description: Some("What it does".into()),
        subdomain: "renamed-acme".into(),
        ..s.clone()
    };
    store.update_service(&edited, &ev()).unwrap();

    let read = store.service(s.id).unwrap().unwrap();
    assert_eq!(
        read,
        Service {
            subdomain: s.subdomain.clone(),
            ..edited
        }
    );
    let cleared = Service {
        title: None,
        description: None,
        ..read
    };
    store.update_service(&cleared, &ev()).unwrap();
    assert_eq!(store.service(s.id).unwrap(), Some(cleared));
    let ghost = registered(c.id, "ghost-acme", 1);
    assert_eq!(
        store.update_service(&ghost, &ev()).unwrap_err(),
        StoreError::NotFound
    );
}

#[test]
fn deleting_a_service_removes_its_configuration_and_secret() {
    let store = store();
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

    assert!(store.delete_service(s.id, &ev()).unwrap());

    assert_eq!(store.service(s.id).unwrap(), None);
    assert_eq!(store.config(s.id).unwrap(), None);
    assert_eq!(store.credential(&secret.lookup_id).unwrap(), None);
    assert_eq!(store.published_by_subdomain(&s.subdomain).unwrap(), None);
    assert!(!store.delete_service(s.id, &ev()).unwrap());
}

#[test]
fn expired_anonymous_lists_due_services_up_to_the_limit_soonest_first() {
    let store = store();
    let (c, ..) = seeded(&store, "acme");
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

    assert_eq!(
        expired_ids(&store, at(100), 10),
        vec![due_early.id, due_mid.id, due_now.id]
    );
    assert_eq!(
        expired_ids(&store, at(100), 2),
        vec![due_early.id, due_mid.id]
    );
    assert_eq!(expired_ids(&store, at(49), 10), Vec::<Uuid>::new());
    assert_eq!(expired_ids(&store, at(100), 0), Vec::<Uuid>::new());
}

#[test]
fn publishing_inserts_then_replaces_and_unpublishing_removes() {
    let store = store();
    let (c, ..) = seeded(&store, "acme");
    let s = registered(c.id, "api-acme", 1);
    let other = registered(c.id, "web-acme", 2);
    store
        .create_service(&s, None, Ceiling::NONE, &ev())
        .unwrap();
    store
        .create_service(&other, None, Ceiling::NONE, &ev())
        .unwrap();
    assert_eq!(store.config(s.id).unwrap(), None);

    let first = config(s.id, "http://api-acme.localhost:8080", 10);
    store.put_config(&first, &ev()).unwrap();
    assert_eq!(store.config(s.id).unwrap(), Some(first));
    let second = PublishedConfig {
        jwks: r#"{"keys":[]}"#.into(),
        ..config(s.id, "http://x", 20)
    };
    store.put_config(&second, &ev()).unwrap();
    assert_eq!(store.config(s.id).unwrap(), Some(second.clone()));
    assert_eq!(
        store.published_by_subdomain("api-acme").unwrap(),
        Some((s.clone(), second))
    );

    assert!(store.delete_config(s.id, &ev()).unwrap());
    assert_eq!(store.config(s.id).unwrap(), None);
    assert_eq!(store.published_by_subdomain("api-acme").unwrap(), None);
    assert!(!store.delete_config(s.id, &ev()).unwrap());
    assert_eq!(store.service(s.id).unwrap(), Some(s), "the service stays");
}

#[test]
fn publishing_for_a_missing_service_is_not_found() {
    let store = store();
    let err = store
        .put_config(&config(Uuid::new_v4(), "http://x", 1), &ev())
        .unwrap_err();
    assert_eq!(err, StoreError::NotFound);
}

#[test]
fn published_by_subdomain_finds_a_published_service_with_its_configuration() {
    let store = store();
    let (c, ..) = seeded(&store, "acme");
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
    let cb = config(b.id, "http://b", 6);
    store.put_config(&cb, &ev()).unwrap();
    store.put_config(&ca, &ev()).unwrap();

    assert_eq!(
        store.published_by_subdomain("a-acme").unwrap(),
        Some((a, ca))
    );
    // The subdomain is case folded, as `find_service` folds it.
    assert_eq!(
        store.published_by_subdomain("BBBBBBBBBBBB-anon").unwrap(),
        Some((b, cb))
    );
    for nothing in ["c-acme", "nobody-acme", "a-acme\0", ""] {
        assert_eq!(
            store.published_by_subdomain(nothing).unwrap(),
            None,
            "{nothing:?}"
        );
    }
}

fn expired_ids(store: &Store, now: OffsetDateTime, limit: usize) -> Vec<Uuid> {
    let expired = store.expired_anonymous(now, limit).unwrap();
    expired.iter().map(|s| s.id).collect()
}
