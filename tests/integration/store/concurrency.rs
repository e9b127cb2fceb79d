use super::*;
use registry_domain::ports::{Change, ChangeFeed, ServiceStore};
use registry_domain::StoreError;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

#[test]
fn of_two_writers_racing_for_a_subdomain_exactly_one_wins() {
    let url = registry_tests::fresh_database_url();
    let setup = Store::connect(&url).unwrap();
    setup.migrate().unwrap();
    let (c, ..) = seeded(&setup, "acme");
    // Two handles, as two replicas would have.
    let stores = [Store::connect(&url).unwrap(), Store::connect(&url).unwrap()];

    for round in 0..10 {
        let subdomain = format!("race{round}-acme");
        let barrier = Arc::new(Barrier::new(2));
        let results: Vec<Result<(), StoreError>> = thread::scope(|scope| {
            let handles: Vec<_> = stores
                .iter()
                .map(|store| {
                    let barrier = Arc::clone(&barrier);
                    let service = registered(c.id, &subdomain, round);
                    scope.spawn(move || {
                        barrier.wait();
                        store.create_service(&service, None, &ev())
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });

        let wins = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(wins, 1, "round {round}: {results:?}");
        assert!(
            results.contains(&Err(StoreError::Conflict("subdomain taken".into()))),
            "round {round}: {results:?}"
        );
        assert!(setup.find_service(&subdomain).unwrap().is_some());
    }
}

#[test]
fn parallel_writers_all_succeed_and_a_polling_replica_misses_no_change() {
    const WRITERS: usize = 4;
    const EACH: usize = 25;
    let url = registry_tests::fresh_database_url();
    let setup = Store::connect(&url).unwrap();
    setup.migrate().unwrap();
    let (c, ..) = seeded(&setup, "acme");
    let start = setup.latest_change().unwrap();
    let replica = Store::connect(&url).unwrap();
    let done = AtomicBool::new(false);

    let (created, observed) = thread::scope(|scope| {
        let poller = scope.spawn(|| {
            let mut cursor = start;
            let mut seen = Vec::new();
            loop {
                // Read the flag before polling: the last poll then starts after every write.
                let finished = done.load(Ordering::SeqCst);
                let (next, page) = replica.changes_since(cursor, 7).unwrap();
                cursor = next;
                let empty = page.is_empty();
                seen.extend(page);
                if finished && empty {
                    return seen;
                }
            }
        });
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let store = Store::connect(&url).unwrap();
                scope.spawn(move || {
                    (0..EACH)
                        .map(|i| {
                            let s = registered(c.id, &format!("w{w}n{i}-acme"), i as i64);
                            store.create_service(&s, None, &ev()).unwrap();
                            s.id
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let created: Vec<Uuid> = writers
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        done.store(true, Ordering::SeqCst);
        (created, poller.join().unwrap())
    });

    assert_eq!(created.len(), WRITERS * EACH);
    assert_eq!(setup.services_of(c.id).unwrap().len(), WRITERS * EACH);
    let expected: HashSet<Change> = created.into_iter().map(Change::Service).collect();
    assert_eq!(observed.len(), expected.len(), "every change exactly once");
    assert_eq!(observed.into_iter().collect::<HashSet<_>>(), expected);
}

#[test]
fn processes_migrating_at_once_apply_each_migration_once() {
    let url = registry_tests::fresh_database_url();
    let stores: Vec<Store> = (0..3).map(|_| Store::connect(&url).unwrap()).collect();
    let barrier = Barrier::new(stores.len());

    let applied: Vec<usize> = thread::scope(|scope| {
        let handles: Vec<_> = stores
            .iter()
            .map(|store| {
                let barrier = &barrier;
                scope.spawn(move || {
                    barrier.wait();
                    store.migrate().unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });

    assert_eq!(applied.iter().filter(|&&n| n > 0).count(), 1, "{applied:?}");
    assert_eq!(stores[2].migrate().unwrap(), 0);
    seeded(&stores[0], "acme");
}
