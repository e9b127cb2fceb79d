use super::*;
use registry_domain::ports::{ChangeFeed, CustomerStore, Database, ServiceStore};
use registry_domain::StoreError;
use registry_store::SetupError;

#[test]
fn the_backend_is_the_one_the_environment_asks_for() {
    assert_eq!(store().backend().as_str(), registry_tests::backend_name());
}

#[test]
fn migrating_again_applies_nothing() {
    let store = store();
    assert_eq!(store.migrate().unwrap(), 0);
    seeded(&store, "acme");
    assert_eq!(store.migrate().unwrap(), 0);
    assert!(store.customer_by_tenant("acme").unwrap().is_some());
}

#[test]
fn urls_of_other_databases_are_refused() {
    for url in [
        "mysql://root@localhost/registry",
        "redis://localhost",
        "postgres:registry",
    ] {
        let err = Store::connect(url).unwrap_err();
        assert!(
            matches!(err, SetupError::UnsupportedUrl(_)),
            "{url}: {err:?}"
        );
    }
}

#[test]
fn an_unreachable_database_fails_at_connect() {
    let err = Store::connect("postgres://postgres@127.0.0.1:1/registry").unwrap_err();
    assert!(
        matches!(
            err,
            SetupError::Unreachable {
                backend: "postgres",
                ..
            }
        ),
        "{err:?}"
    );
    let missing_dir = std::env::temp_dir().join("registry-no-such-dir/x/registry.db");
    let err = Store::connect(&format!("sqlite://{}", missing_dir.display())).unwrap_err();
    assert!(
        matches!(
            err,
            SetupError::Unreachable {
                backend: "sqlite",
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn an_unmigrated_database_answers_unavailable_not_a_panic() {
    let store = Store::connect(&registry_tests::fresh_database_url()).unwrap();
    assert!(matches!(store.customers(), Err(StoreError::Unavailable(_))));
    assert!(matches!(
        store.find_service("api-acme"),
        Err(StoreError::Unavailable(_))
    ));
    assert!(matches!(
        store.latest_change(),
        Err(StoreError::Unavailable(_))
    ));
    store.ping().unwrap();
}

#[test]
fn the_store_debug_output_shows_no_url() {
    let url = registry_tests::fresh_database_url();
    let printed = format!("{:?}", Store::connect(&url).unwrap());
    assert!(!printed.contains(&url), "{printed}");
    assert!(printed.contains("Store"), "{printed}");
}
