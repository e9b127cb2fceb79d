//! The storage adapter against a real database: SQLite by default, PostgreSQL under
//! `cargo xtask test` (see `registry_tests::fresh_database_url`). What the storage ports promise
//! is `contract`, checked on the in-memory fake and on the real store alike; the other modules
//! test what only the real store has (concurrency, connecting, migrations, corrupt rows, the
//! change log's clock).

mod change_feed;
mod concurrency;
mod connect;
mod contract;
mod corrupt_rows;

use registry_domain::audit::{Action, Actor, AuditEvent, Resource};
use registry_domain::policy::Policy;
use registry_domain::ports::{Ceiling, CredentialRecord, CustomerStore};
use registry_domain::service::{DocumentDates, Publication, PublishedConfig};
use registry_domain::{Customer, Plan, Service, ServiceAccount};
use registry_store::Store;
use serde_json::{json, Value};
use time::{Duration, OffsetDateTime};
use uuid::Uuid;

/// A migrated store on a database of its own.
fn store() -> Store {
    let store = Store::connect(&registry_tests::fresh_database_url()).unwrap();
    store.migrate().unwrap();
    store
}

/// 2026-11-21 10:00:00 UTC plus `seconds`: whole milliseconds, which the store keeps exactly.
fn at(seconds: i64) -> OffsetDateTime {
    time::macros::datetime!(2026-11-21 10:00 UTC) + Duration::seconds(seconds)
}

fn customer(tenant: &str, created: i64) -> Customer {
    Customer {
        id: Uuid::new_v4(),
        name: format!("{tenant} Inc"),
        tenant: tenant.into(),
        plan: Plan::Business,
        created_at: at(created),
        disabled_at: None,
    }
}

fn policy(document: Value) -> Policy {
    Policy::parse(&document).unwrap().policy
}

fn static_policy(services: &[&str]) -> Policy {
    policy(json!({"kind": "static", "services": services}))
}

/// An OIDC policy with one rule per issuer.
fn oidc_policy(issuers: &[&str]) -> Policy {
    let rules: Vec<Value> = issuers
        .iter()
        .map(|iss| {
            json!({
                "services": ["*"],
                "claims": {"iss": iss, "aud": "registry", "sub": "repo:acme/*"}
            })
        })
        .collect();
    policy(json!({"kind": "oidc", "rules": rules}))
}

fn account(customer_id: Uuid, name: &str, policy: Policy, created: i64) -> ServiceAccount {
    ServiceAccount {
        id: Uuid::new_v4(),
        customer_id,
        name: name.into(),
        policy,
        created_at: at(created),
        last_used_at: None,
    }
}

/// An audit event for a write whose event is not what the test is about.
fn ev() -> AuditEvent {
    AuditEvent::new(
        Action::ServiceUpdate,
        Resource::customer(Uuid::nil()),
        Actor::operator(),
        None,
        at(0),
    )
}

fn record(lookup_id: &str, hash: &str) -> CredentialRecord {
    CredentialRecord {
        lookup_id: lookup_id.into(),
        hash: hash.into(),
    }
}

/// A unique lookup id (the store only needs uniqueness).
fn lookup() -> String {
    Uuid::new_v4().simple().to_string()[..16].to_owned()
}

fn registered(customer_id: Uuid, subdomain: &str, created: i64) -> Service {
    Service {
        id: Uuid::new_v4(),
        customer_id: Some(customer_id),
        subdomain: subdomain.into(),
        title: Some(format!("Title of {subdomain}")),
        description: None,
        created_at: at(created),
        expires_at: None,
    }
}

fn anonymous(subdomain: &str, created: i64, expires: i64) -> Service {
    Service {
        id: Uuid::new_v4(),
        customer_id: None,
        subdomain: subdomain.into(),
        title: None,
        description: None,
        created_at: at(created),
        expires_at: Some(at(expires)),
    }
}

fn config(service_id: Uuid, issuer: &str, updated: i64) -> PublishedConfig {
    let jwks = r#"{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"k1","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}"#;
    PublishedConfig {
        service_id,
        openid_configuration:
            json!({"issuer": issuer, "jwks_uri": format!("{issuer}/openid/v1/jwks")}).to_string(),
        jwks: jwks.into(),
        updated_at: at(updated),
        previous_change_at: None,
        dates: DocumentDates::default(),
        keys: registry_domain::keys::KeyState::of_uploaded(
            &serde_json::from_str(jwks).unwrap(),
            at(updated),
        ),
    }
}

/// A customer created with its first (static, `*`) account; returns both and the token record.
fn seeded<S: CustomerStore + ?Sized>(
    store: &S,
    tenant: &str,
) -> (Customer, ServiceAccount, CredentialRecord) {
    let c = customer(tenant, 0);
    let first = account(c.id, "bootstrap", static_policy(&["*"]), 0);
    let token = record(&lookup(), "$argon2id$first");
    store.create_customer(&c, &first, &token, &ev()).unwrap();
    (c, first, token)
}

/// Field-by-field equality (accounts hold a parsed policy, which has no `PartialEq`).
fn assert_same_account(actual: &ServiceAccount, expected: &ServiceAccount) {
    assert_eq!(actual.id, expected.id);
    assert_eq!(actual.customer_id, expected.customer_id);
    assert_eq!(actual.name, expected.name);
    assert_eq!(actual.created_at, expected.created_at);
    assert_eq!(actual.policy.kind(), expected.policy.kind());
    assert_eq!(actual.policy.document(), expected.policy.document());
}
