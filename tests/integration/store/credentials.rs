use super::*;
use registry_domain::ports::{CredentialOwner, CredentialStore, ServiceStore};
use registry_domain::StoreError;

#[test]
fn credentials_are_found_by_lookup_id_with_their_owner() {
    let store = store();
    let (_, first, token) = seeded(&store, "acme");
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
        (a.owner, a.hash),
        (CredentialOwner::AnonymousService(s.id), secret.hash)
    );
    assert_eq!(store.credential("no-such-lookup").unwrap(), None);
    assert_eq!(store.credential("").unwrap(), None);
}

#[test]
fn a_secret_whose_lookup_id_is_taken_leaves_no_service_behind() {
    let store = store();
    let (_, _, token) = seeded(&store, "acme");
    let s = anonymous("abcdefghijkl-anon", 0, 3600);

    let err = store
        .create_service(&s, Some(&token), Ceiling::NONE, &ev())
        .unwrap_err();

    assert_eq!(
        err,
        StoreError::Conflict("credential lookup id taken".into())
    );
    assert_eq!(store.find_service("abcdefghijkl-anon").unwrap(), None);
}
