use super::*;
use registry_domain::ports::{
    AccountStore, Change, ChangeFeed, CredentialStore, ServiceStore, StoreResult,
};
use registry_domain::{ServiceAccount, StoreError, Violation};
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
                        store.create_service(&service, None, Ceiling::NONE, &ev())
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

/// The services quota and the anonymous ceiling are counted in the insert's transaction: 30
/// creations racing on two handles (two replicas) with room for 3 make exactly 3.
#[test]
fn quotas_and_the_anonymous_ceiling_hold_when_creations_race() {
    let url = registry_tests::fresh_database_url();
    let setup = Store::connect(&url).unwrap();
    setup.migrate().unwrap();
    let (c, ..) = seeded(&setup, "acme");
    let stores = [Store::connect(&url).unwrap(), Store::connect(&url).unwrap()];
    let race = |make: &(dyn Fn(usize) -> Service + Sync)| -> Vec<Result<(), StoreError>> {
        let barrier = Barrier::new(30);
        thread::scope(|scope| {
            let handles: Vec<_> = (0..30)
                .map(|i| {
                    let (store, barrier, service) = (&stores[i % 2], &barrier, make(i));
                    scope.spawn(move || {
                        barrier.wait();
                        store.create_service(&service, None, Ceiling(3), &ev())
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    };
    let counted = |results: &[Result<(), StoreError>]| {
        assert!(
            results
                .iter()
                .all(|r| r.is_ok() || *r == Err(StoreError::CeilingReached(3))),
            "{results:?}"
        );
        results.iter().filter(|r| r.is_ok()).count()
    };

    let registered_ones = race(&|i| registered(c.id, &format!("q{i}-acme"), 1));
    assert_eq!(counted(&registered_ones), 3);
    assert_eq!(setup.count_services_of(c.id).unwrap(), 3);

    let anonymous_ones = race(&|i| anonymous(&format!("anon{i}"), 10, 1_000));
    assert_eq!(counted(&anonymous_ones), 3);
    assert_eq!(setup.live_anonymous(at(10)).unwrap(), 3);
    // Expired ones do not count.
    let later = anonymous("anon-late", 2_000, 3_000);
    setup
        .create_service(&later, None, Ceiling(3), &ev())
        .unwrap();
}

/// Regenerations that race read the same token: the first to write replaces it, the others
/// are told it changed meanwhile, and the winner's token is the one kept.
#[test]
fn a_token_is_replaced_only_if_it_is_still_the_one_read() {
    let store = store();
    let (_, first, old) = seeded(&store, "acme");
    let replacements: Vec<_> = (0..5)
        .map(|i| record(&lookup(), &format!("$argon2id$n{i}")))
        .collect();
    let outcomes: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = replacements
            .iter()
            .map(|new| {
                let (store, old, first) = (&store, &old, &first);
                scope.spawn(move || store.replace_token(first, Some(&old.lookup_id), new, &ev()))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // One replaced the token; every other was told so (none found the policy changed).
    let won = |o: &StoreResult<Result<(), ServiceAccount>>| matches!(o, Ok(Ok(())));
    assert_eq!(
        outcomes.iter().filter(|o| won(o)).count(),
        1,
        "{outcomes:?}"
    );
    for outcome in outcomes.iter().filter(|o| !won(o)) {
        assert!(
            matches!(outcome, Err(StoreError::Conflict(_))),
            "{outcome:?}"
        );
    }
    let winner = outcomes.iter().position(won).unwrap();
    assert_eq!(
        store.token_lookup_id(first.id).unwrap().as_deref(),
        Some(&*replacements[winner].lookup_id)
    );
    for (i, new) in replacements.iter().enumerate() {
        assert_eq!(
            store.credential(&new.lookup_id).unwrap().is_some(),
            i == winner
        );
    }
}

/// Twelve creations of an account of `customer` at once, each federated on its own issuer,
/// each by `create`: their outcomes.
fn creations_racing(
    customer: Uuid,
    create: impl Fn(&ServiceAccount) -> StoreResult<()> + Sync,
) -> Vec<StoreResult<()>> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..12)
            .map(|i| {
                let create = &create;
                scope.spawn(move || {
                    let issuer = format!("https://idp{i}.example");
                    let a = account(customer, &format!("ci{i}"), oidc_policy(&[&issuer]), 5);
                    create(&a)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Asserts that three of `outcomes` succeeded and every other was `refused`.
fn three_won(outcomes: &[StoreResult<()>], refused: impl Fn(&StoreError) -> bool) {
    assert_eq!(
        outcomes.iter().filter(|o| o.is_ok()).count(),
        3,
        "{outcomes:?}"
    );
    let errors = outcomes.iter().filter_map(|o| o.as_ref().err());
    assert!(errors.clone().all(refused), "{outcomes:?}");
}

/// The quota is counted in the insert's transaction: creations racing each other never pass it.
#[test]
fn an_account_quota_holds_when_creations_race() {
    let store = store();
    let (customer, _, _) = seeded(&store, "acme");
    let outcomes = creations_racing(customer.id, |a| {
        store.create_account(a, None, Ceiling(4), None, &ev())
    });
    three_won(&outcomes, |e| *e == StoreError::CeilingReached(4));
    assert_eq!(store.count_accounts_of(customer.id).unwrap(), 4);
}

/// An account write's check of the customer's other federated accounts (the issuers one
/// customer may trust together) reads them in the write's transaction: creations and updates
/// racing each other never pass it together.
#[test]
fn a_check_of_the_other_accounts_holds_when_writes_race() {
    let store = store();
    let (customer, _, _) = seeded(&store, "acme");
    // Three federated accounts at most (the static one `seeded` made is not counted).
    let at_most = |others: &[ServiceAccount]| match others.len() >= 3 {
        true => Err(Violation::new("/rules/0/claims/iss", "too many")),
        false => Ok(()),
    };
    let outcomes = creations_racing(customer.id, |a| {
        let check: &dyn Fn(&[ServiceAccount]) -> Result<(), Violation> = &at_most;
        store.create_account(a, None, Ceiling::NONE, Some(check), &ev())
    });
    three_won(
        &outcomes,
        |e| matches!(e, StoreError::OverBudget(v) if v.pointer == "/rules/0/claims/iss"),
    );
    let accounts = store.accounts_of(customer.id).unwrap();
    let federated: Vec<&ServiceAccount> = (accounts.iter())
        .filter(|a| a.policy.kind() == registry_domain::policy::PolicyKind::Oidc)
        .collect();
    assert_eq!(federated.len(), 3);
    // An update sees the others but itself: at the most, renaming one passes the check.
    let last = federated[2];
    let renamed = ServiceAccount {
        name: "renamed".into(),
        ..last.clone()
    };
    let check: &dyn Fn(&[ServiceAccount]) -> Result<(), Violation> = &at_most;
    store
        .update_account(last, &renamed, Some(check), &ev())
        .unwrap()
        .unwrap();
    let refused = |others: &[ServiceAccount]| match others.is_empty() {
        true => Ok(()),
        false => Err(Violation::new("", "not alone")),
    };
    let refused: &dyn Fn(&[ServiceAccount]) -> Result<(), Violation> = &refused;
    let again = ServiceAccount {
        name: "again".into(),
        ..last.clone()
    };
    let outcome = store.update_account(&renamed, &again, Some(refused), &ev());
    assert!(
        matches!(outcome, Err(StoreError::OverBudget(_))),
        "{outcome:?}"
    );
    let stored = store.account(again.id).unwrap().unwrap();
    assert_eq!(stored.name, "renamed", "a refused update writes nothing");
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
                            store
                                .create_service(&s, None, Ceiling::NONE, &ev())
                                .unwrap();
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
