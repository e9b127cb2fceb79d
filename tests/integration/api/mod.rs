//! The HTTP API, driven through the real binary (docs/api.md).

mod accounts;
mod anonymous;
mod audit;
mod cdn;
mod client;
mod config;
mod dashboard;
mod domains;
mod errors;
mod federation;
mod fetches;
mod hosting;
mod key_sources;
pub mod keys;
mod ops;
mod outage;
mod policy_fixtures;
mod preflight;
mod readiness;
mod refusals;
mod replicas;
mod services;
pub mod signing;
mod workers;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use registry_tests::server::{Customer, TestServer};
use reqwest::Method;
use serde_json::{json, Value};

/// A discovery document as a kind/k3s cluster serves it.
pub fn cluster_discovery() -> Value {
    json!({
        "issuer": "https://kubernetes.default.svc.cluster.local",
        "jwks_uri": "https://172.18.0.2:6443/openid/v1/jwks",
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["RS256"]
    })
}

/// A well-formed 2048-bit RSA public key.
pub fn rsa_key(kid: &str) -> Value {
    let mut n = vec![0xa5u8; 256];
    n[0] = 0xc3;
    json!({"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256", "e": "AQAB", "n": URL_SAFE_NO_PAD.encode(&n)})
}

/// Registers the service named `name` of `customer`; returns its subdomain.
pub fn register_service(server: &TestServer, customer: &Customer, name: &str) -> String {
    let created = server
        .authed(Method::POST, "/services", &customer.token)
        .json(&json!({"title": name, "serviceName": name}))
        .send()
        .unwrap();
    assert_eq!(created.status(), 201, "registering {name}");
    registry_tests::server::json(created)["subdomain"]
        .as_str()
        .expect("subdomain")
        .to_owned()
}

/// Creates the service account `{name, policy}` of `customer`; returns the 201's body.
pub fn create_account(
    server: &TestServer,
    customer: &Customer,
    name: &str,
    policy: Value,
) -> Value {
    let created = server
        .authed(Method::POST, "/service-accounts", &customer.token)
        .json(&json!({"name": name, "policy": policy}))
        .send()
        .unwrap();
    assert_eq!(created.status(), 201, "creating {name}: {policy}");
    registry_tests::server::json(created)
}

/// Publishes [`upload`] of `kids` on `subdomain`.
pub fn publish_kids(server: &TestServer, token: &str, subdomain: &str, kids: &[&str]) {
    let put = server
        .authed(Method::PUT, &format!("/services/{subdomain}/config"), token)
        .json(&upload(kids))
        .send()
        .unwrap();
    assert_eq!(put.status(), 200, "publishing on {subdomain}");
}

/// Registers the service `api-{tenant}` of `customer` and publishes [`upload`] with key `k1`;
/// returns the subdomain.
pub fn publish_api(server: &TestServer, customer: &Customer) -> String {
    let subdomain = register_service(server, customer, "api");
    publish_kids(server, &customer.token, &subdomain, &["k1"]);
    subdomain
}

/// A valid upload body.
pub fn upload(kids: &[&str]) -> Value {
    json!({
        "openidConfiguration": cluster_discovery(),
        "jwks": {"keys": kids.iter().map(|k| rsa_key(k)).collect::<Vec<_>>()}
    })
}
