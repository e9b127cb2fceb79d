//! A row that cannot be read back (changed outside the registry, or written by a bug) is left
//! out of every list, and of the public path's read (`published_by_subdomain`, which reads the
//! key state only when a retired key has an end), and logged; asked for by id it is
//! `StoreError::Corrupt` naming the row. One corrupt row must not take a customer's list or the
//! reaper with it.

use super::*;
use registry_domain::keys::{KeyRecord, KeyState};
use registry_domain::ports::ServiceStore;
use registry_domain::StoreError;
use registry_tests::execute_sql;

/// A migrated store on a database of its own, and its URL for changing rows behind its back.
fn store_and_url() -> (Store, String) {
    let url = registry_tests::fresh_database_url();
    let store = Store::connect(&url).unwrap();
    store.migrate().unwrap();
    (store, url)
}

/// Beyond every date the registry can read (the columns are unix milliseconds).
const NO_DATE: i64 = i64::MAX;

fn assert_corrupt_naming<T: std::fmt::Debug>(read: Result<T, StoreError>, id: &str) {
    match read {
        Err(StoreError::Corrupt(what)) => assert!(what.contains(id), "{what} names {id}"),
        other => panic!("expected a corrupt row naming {id}, got {other:?}"),
    }
}

#[test]
fn a_corrupt_service_is_left_out_of_its_customers_list() {
    let (store, url) = store_and_url();
    let (c, ..) = seeded(&store, "acme");
    let [a, broken, b] = [1, 2, 3].map(|n| registered(c.id, &format!("s{n}-acme"), n));
    for s in [&a, &broken, &b] {
        store.create_service(s, None, Ceiling::NONE, &ev()).unwrap();
    }
    execute_sql(
        &url,
        &format!(
            "UPDATE services SET created_at = {NO_DATE} WHERE id = '{}'",
            broken.id
        ),
    );

    assert_eq!(store.services_of(c.id).unwrap(), vec![a.clone(), b.clone()]);
    assert_corrupt_naming(store.service(broken.id), &broken.id.to_string());
    assert_eq!(store.service(a.id).unwrap(), Some(a));
}

#[test]
fn a_service_is_published_only_while_what_it_serves_reads_back() {
    let (store, url) = store_and_url();
    let (c, ..) = seeded(&store, "acme");
    let [a, bad_keys, bad_expiry, bad_created, b, quiet] =
        [1, 2, 3, 4, 5, 6].map(|n| registered(c.id, &format!("p{n}-acme"), n));
    let all = [&a, &bad_keys, &bad_expiry, &bad_created, &b, &quiet];
    let mut expected = Vec::new();
    for s in all {
        store.create_service(s, None, Ceiling::NONE, &ev()).unwrap();
        let mut published = config(s.id, &format!("http://{}", s.subdomain), 10);
        if s.id == bad_keys.id {
            // A retired key with an end: the public path's read parses the key state.
            published.keys.keys.push(retired("old", at(900)));
        }
        store.put_config(&published, &ev()).unwrap();
        if [a.id, b.id, quiet.id, bad_created.id].contains(&s.id) {
            expected.push(Publication::of(s, published));
        }
    }
    for broken in [&bad_keys, &quiet] {
        execute_sql(
            &url,
            &format!(
                "UPDATE published_configs SET key_state = '{{\"keys\": 7}}' WHERE service_id = '{}'",
                broken.id
            ),
        );
    }
    for (column, broken) in [("expires_at", &bad_expiry), ("created_at", &bad_created)] {
        execute_sql(
            &url,
            &format!(
                "UPDATE services SET {column} = {NO_DATE} WHERE id = '{}'",
                broken.id
            ),
        );
    }

    // `quiet` retired no key and `bad_created`'s creation time is no part of what it serves:
    // what each serves reads back, so its issuer stays up; the API, which shows the key state
    // and the creation time, names the row. An expiry that cannot be read withholds the issuer.
    for s in all {
        let published = store.published_by_subdomain(&s.subdomain).unwrap();
        let wanted = expected.iter().find(|e| e.service_id == s.id).cloned();
        assert_eq!(published, wanted, "{}", s.subdomain);
    }
    assert_corrupt_naming(store.config(bad_keys.id), &bad_keys.id.to_string());
    assert_corrupt_naming(store.config(quiet.id), &quiet.id.to_string());
    for broken in [&bad_expiry, &bad_created] {
        assert_corrupt_naming(store.service(broken.id), &broken.id.to_string());
        assert!(store.config(broken.id).unwrap().is_some());
    }
}

/// A retired key that left the public set at `until` (the reaper withdraws it).
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

#[test]
fn the_reapers_lists_leave_a_corrupt_row_out() {
    let (store, url) = store_and_url();
    let early = anonymous("aaaaaaaaaaaa-anon", 0, 50);
    let late = anonymous("cccccccccccc-anon", 0, 70);
    for s in [&early, &late] {
        store
            .create_service(s, Some(&record(&lookup(), "h")), Ceiling::NONE, &ev())
            .unwrap();
        let mut published = config(s.id, "http://anon", 10);
        published.keys = KeyState {
            keys: vec![retired("old", at(30))],
            ..KeyState::default()
        };
        store.put_config(&published, &ev()).unwrap();
    }
    // An anonymous service whose id is no id, due between the two, with a key due too.
    execute_sql(
        &url,
        &format!(
            "INSERT INTO services (id, customer_id, subdomain, title, description, created_at, \
             expires_at) VALUES ('not-a-uuid', NULL, 'bbbbbbbbbbbb-anon', NULL, NULL, 0, {})",
            at(60).unix_timestamp() * 1000
        ),
    );
    execute_sql(
        &url,
        &format!(
            "INSERT INTO published_configs (service_id, openid_configuration, jwks, updated_at, \
             key_state, key_expires_at) VALUES ('not-a-uuid', '{{}}', '{{\"keys\":[]}}', 0, '', \
             {})",
            at(30).unix_timestamp() * 1000
        ),
    );

    let expired: Vec<Uuid> = store
        .expired_anonymous(at(100), 10)
        .unwrap()
        .iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(expired, [early.id, late.id]);
    let mut both = vec![early.id, late.id];
    both.sort();
    let mut due = store.configs_with_expired_keys(at(100), 10).unwrap();
    due.sort();
    assert_eq!(due, both);
    // The public path's read too.
    assert_eq!(
        store.published_by_subdomain("bbbbbbbbbbbb-anon").unwrap(),
        None
    );
    for s in [&early, &late] {
        assert_eq!(
            store
                .published_by_subdomain(&s.subdomain)
                .unwrap()
                .map(|p| p.service_id),
            Some(s.id)
        );
    }
}
