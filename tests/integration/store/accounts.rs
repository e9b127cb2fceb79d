use super::*;
use registry_domain::policy::PolicyKind;
use registry_domain::ports::{AccountStore, Ceiling, CredentialOwner, CredentialStore};
use registry_domain::StoreError;

const GITHUB: &str = "https://token.actions.githubusercontent.com";
const GITLAB: &str = "https://gitlab.example.com";

fn ids(accounts: &[ServiceAccount]) -> Vec<Uuid> {
    accounts.iter().map(|a| a.id).collect()
}

#[test]
fn an_account_reads_back_with_its_policy_document_as_saved() {
    let store = store();
    let (c, ..) = seeded(&store, "acme");
    // Member order and the optional members survive the round trip.
    let document = json!({
        "services": ["api-acme", "web-*"],
        "kind": "static",
        "ip_allowlist": ["10.0.0.0/8"]
    });
    let a = account(c.id, "deployer", policy(document.clone()), 5);
    store
        .create_account(&a, Some(&record(&lookup(), "h")), Ceiling::NONE, &ev())
        .unwrap();

    let read = store.account(a.id).unwrap().unwrap();
    assert_same_account(&read, &a);
    assert_eq!(read.policy.kind(), PolicyKind::Static);
    assert_eq!(
        serde_json::to_string(read.policy.document()).unwrap(),
        serde_json::to_string(&document).unwrap()
    );
    assert!(store.account(Uuid::new_v4()).unwrap().is_none());
}

#[test]
fn accounts_of_lists_one_customers_accounts_oldest_first() {
    let store = store();
    let (acme, first, _) = seeded(&store, "acme");
    let (globex, ..) = seeded(&store, "globex");
    let late = account(acme.id, "late", static_policy(&["*"]), 50);
    let mid = account(acme.id, "mid", oidc_policy(&[GITHUB]), 20);
    store
        .create_account(&late, Some(&record(&lookup(), "h")), Ceiling::NONE, &ev())
        .unwrap();
    store
        .create_account(&mid, None, Ceiling::NONE, &ev())
        .unwrap();
    store
        .create_account(
            &account(globex.id, "other", static_policy(&["*"]), 1),
            None,
            Ceiling::NONE,
            &ev(),
        )
        .unwrap();

    assert_eq!(
        ids(&store.accounts_of(acme.id).unwrap()),
        [first.id, mid.id, late.id]
    );
    assert!(store.accounts_of(Uuid::new_v4()).unwrap().is_empty());
}

#[test]
fn an_account_of_an_unknown_customer_is_not_found() {
    let store = store();
    let a = account(Uuid::new_v4(), "ghost", static_policy(&["*"]), 1);
    assert_eq!(
        store
            .create_account(&a, None, Ceiling::NONE, &ev())
            .unwrap_err(),
        StoreError::NotFound
    );
}

#[test]
fn update_account_writes_name_and_policy() {
    let store = store();
    let (c, first, _) = seeded(&store, "acme");
    let edited = ServiceAccount {
        name: "renamed".into(),
        policy: static_policy(&["api-acme"]),
        ..first.clone()
    };
    store.update_account(&edited, &ev()).unwrap();
    assert_same_account(&store.account(first.id).unwrap().unwrap(), &edited);

    let ghost = account(c.id, "ghost", static_policy(&["*"]), 1);
    assert_eq!(
        store.update_account(&ghost, &ev()).unwrap_err(),
        StoreError::NotFound
    );
}

#[test]
fn deleting_an_account_removes_its_token() {
    let store = store();
    let (_, first, token) = seeded(&store, "acme");

    assert!(store.delete_account(first.id, &ev()).unwrap());

    assert!(store.account(first.id).unwrap().is_none());
    assert_eq!(store.credential(&token.lookup_id).unwrap(), None);
    assert!(!store.delete_account(first.id, &ev()).unwrap());
}

#[test]
fn replacing_a_token_swaps_it_atomically() {
    let store = store();
    let (_, first, old) = seeded(&store, "acme");
    let new = record(&lookup(), "$argon2id$new");

    assert_eq!(
        store.token_lookup_id(first.id).unwrap().as_deref(),
        Some(&*old.lookup_id)
    );
    store
        .replace_token(first.id, Some(&old.lookup_id), &new, &ev())
        .unwrap();

    assert_eq!(store.credential(&old.lookup_id).unwrap(), None);
    let stored = store.credential(&new.lookup_id).unwrap().unwrap();
    assert_eq!(stored.owner, CredentialOwner::Account(first.id));
    assert_eq!(stored.hash, new.hash);
    assert_eq!(
        store.token_lookup_id(first.id).unwrap().as_deref(),
        Some(&*new.lookup_id)
    );
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
                let (store, old) = (&store, &old);
                scope.spawn(move || store.replace_token(first.id, Some(&old.lookup_id), new, &ev()))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let won: Vec<_> = outcomes.iter().filter(|o| o.is_ok()).collect();
    assert_eq!(won.len(), 1, "{outcomes:?}");
    for outcome in outcomes.iter().filter(|o| o.is_err()) {
        assert!(
            matches!(outcome, Err(StoreError::Conflict(_))),
            "{outcome:?}"
        );
    }
    let winner = outcomes.iter().position(Result::is_ok).unwrap();
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

/// The quota is counted in the insert's transaction: creations racing each other never pass it.
#[test]
fn an_account_quota_holds_when_creations_race() {
    let store = store();
    let (customer, _, _) = seeded(&store, "acme");
    let outcomes: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..12)
            .map(|i| {
                let store = &store;
                scope.spawn(move || {
                    let a = account(customer.id, &format!("ci{i}"), static_policy(&["*"]), 5);
                    store.create_account(&a, None, Ceiling(4), &ev())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(
        outcomes.iter().filter(|o| o.is_ok()).count(),
        3,
        "{outcomes:?}"
    );
    assert!(outcomes
        .iter()
        .filter_map(|o| o.as_ref().err())
        .all(|e| *e == StoreError::CeilingReached(4)));
    assert_eq!(store.count_accounts_of(customer.id).unwrap(), 4);
}

#[test]
fn a_failed_token_replacement_keeps_the_old_token() {
    let store = store();
    let (_, first, old) = seeded(&store, "acme");
    let (_, _, someone_elses) = seeded(&store, "globex");

    let err = store
        .replace_token(first.id, Some(&old.lookup_id), &someone_elses, &ev())
        .unwrap_err();

    assert_eq!(
        err,
        StoreError::Conflict("credential lookup id taken".into())
    );
    let kept = store.credential(&old.lookup_id).unwrap().unwrap();
    assert_eq!(kept.owner, CredentialOwner::Account(first.id));
    assert_eq!(kept.hash, old.hash);
}

#[test]
fn replacing_the_token_of_a_missing_account_is_not_found() {
    let store = store();
    let t = record(&lookup(), "h");
    assert_eq!(
        store
            .replace_token(Uuid::new_v4(), None, &t, &ev())
            .unwrap_err(),
        StoreError::NotFound
    );
    assert_eq!(store.credential(&t.lookup_id).unwrap(), None);
}

#[test]
fn an_account_id_cannot_be_reused() {
    let store = store();
    let (_, first, _) = seeded(&store, "acme");
    let err = store
        .create_account(&first, None, Ceiling::NONE, &ev())
        .unwrap_err();
    assert_eq!(err, StoreError::Conflict("service account id taken".into()));
}

// The issuer index: these need `Policy::issuers()` of the real policy parser.

#[test]
fn accounts_are_found_by_the_exact_issuer_of_their_rules() {
    let store = store();
    let (acme, ..) = seeded(&store, "acme");
    let (globex, ..) = seeded(&store, "globex");
    let both = account(acme.id, "both", oidc_policy(&[GITHUB, GITLAB, GITHUB]), 1);
    let github = account(globex.id, "gh", oidc_policy(&[GITHUB]), 2);
    let gitlab = account(acme.id, "gl", oidc_policy(&[GITLAB]), 3);
    for a in [&gitlab, &github, &both] {
        store.create_account(a, None, Ceiling::NONE, &ev()).unwrap();
    }

    assert_eq!(
        ids(&store.accounts_by_issuer(GITHUB).unwrap()),
        [both.id, github.id]
    );
    assert_eq!(
        ids(&store.accounts_by_issuer(GITLAB).unwrap()),
        [both.id, gitlab.id]
    );
    assert!(store
        .accounts_by_issuer(&format!("{GITHUB}/"))
        .unwrap()
        .is_empty());
    assert!(store
        .accounts_by_issuer(&GITHUB.to_uppercase())
        .unwrap()
        .is_empty());
    assert!(store.accounts_by_issuer("").unwrap().is_empty());
}

#[test]
fn updating_an_account_reindexes_its_issuers() {
    let store = store();
    let (acme, ..) = seeded(&store, "acme");
    let a = account(acme.id, "ci", oidc_policy(&[GITHUB]), 1);
    store
        .create_account(&a, None, Ceiling::NONE, &ev())
        .unwrap();

    store
        .update_account(
            &ServiceAccount {
                policy: oidc_policy(&[GITLAB]),
                ..a.clone()
            },
            &ev(),
        )
        .unwrap();

    assert!(store.accounts_by_issuer(GITHUB).unwrap().is_empty());
    assert_eq!(ids(&store.accounts_by_issuer(GITLAB).unwrap()), [a.id]);
}

#[test]
fn deleting_an_account_removes_it_from_the_issuer_index() {
    let store = store();
    let (acme, ..) = seeded(&store, "acme");
    let a = account(acme.id, "ci", oidc_policy(&[GITHUB]), 1);
    store
        .create_account(&a, None, Ceiling::NONE, &ev())
        .unwrap();
    assert_eq!(ids(&store.accounts_by_issuer(GITHUB).unwrap()), [a.id]);

    assert!(store.delete_account(a.id, &ev()).unwrap());

    assert!(store.accounts_by_issuer(GITHUB).unwrap().is_empty());
}
