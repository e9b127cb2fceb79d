//! Security tests against the real binary: JWT attacks of RFC 8725 that the federation and
//! verifier suites do not already cover, cross-customer access on every endpoint, secrets in
//! logs, bodies and the database, and hostile request bodies. See docs/reliability.md.

mod bodies;
mod fuzz_seeds;
mod hosting_bounds;
mod inert_text;
mod jwt;
mod leaks;
mod least_privilege;
mod managed_keys;
mod rates;
mod refusal_budget;
mod review;
pub(super) mod secrets;
mod shared_issuer;
mod slow_clients;
mod tenancy;
mod validators;

use registry_tests::server::{
    claims, insecure_server, json, unix_now, Customer, ServerOptions, TestServer, AUDIENCE,
};
use reqwest::Method;
use serde_json::json;

/// A server (in the test process) with these settings.
fn server_with(env: &[(&str, &str)]) -> TestServer {
    TestServer::start_with(ServerOptions {
        env: env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        ..ServerOptions::default()
    })
}

/// Registers `{name}-{tenant}`; returns its subdomain and id.
fn create_service(server: &TestServer, customer: &Customer, name: &str) -> (String, String) {
    let response = server
        .authed(Method::POST, "/services", &customer.token)
        .json(&json!({"title": name, "serviceName": name}))
        .send()
        .unwrap();
    assert_eq!(response.status(), 201, "creating {name}");
    let body = json(response);
    (
        body["subdomain"].as_str().unwrap().to_owned(),
        body["id"].as_str().unwrap().to_owned(),
    )
}

/// A static account of `customer` over `services`; its id and token.
fn static_account(server: &TestServer, customer: &Customer, services: &[&str]) -> (String, String) {
    let response = server
        .authed(Method::POST, "/service-accounts", &customer.token)
        .json(&json!({"name": "deployer", "policy": {"kind": "static", "services": services}}))
        .send()
        .unwrap();
    assert_eq!(response.status(), 201);
    let body = json(response);
    (
        body["id"].as_str().unwrap().to_owned(),
        body["token"].as_str().unwrap().to_owned(),
    )
}

/// An oidc account of `customer` trusting `iss` for subjects matching `sub`, on every service;
/// its id.
fn oidc_account(server: &TestServer, customer: &Customer, iss: &str, sub: &str) -> String {
    oidc_account_for(server, customer, iss, AUDIENCE, sub)
}

/// [`oidc_account`] for audiences matching `aud`.
fn oidc_account_for(
    server: &TestServer,
    customer: &Customer,
    iss: &str,
    aud: &str,
    sub: &str,
) -> String {
    let policy = json!({"kind": "oidc", "rules": [
        {"services": ["*"], "claims": {"iss": iss, "aud": aud, "sub": sub}}
    ]});
    let response = server
        .authed(Method::POST, "/service-accounts", &customer.token)
        .json(&json!({"name": "federated", "policy": policy}))
        .send()
        .unwrap();
    assert_eq!(response.status(), 201);
    json(response)["id"].as_str().unwrap().to_owned()
}

/// The part of a secret that proves possession: everything after the public lookup id of a
/// `rgst_`/`rgan_` credential, the signature of a JWS; else the whole text.
fn secret_part(secret: &str) -> &str {
    if secret.starts_with("rgst_") || secret.starts_with("rgan_") {
        secret.rsplit('_').next().unwrap_or(secret)
    } else if secret.matches('.').count() == 2 {
        secret.rsplit('.').next().unwrap_or(secret)
    } else {
        secret
    }
}

/// Asserts that `text` holds no secret, nor any 12-character piece of one's secret part.
#[track_caller]
fn assert_no_secret(what: &str, text: &str, secrets: &[String]) {
    for secret in secrets {
        assert!(
            !text.contains(secret.as_str()),
            "{what} contains a secret ({}…)",
            &secret[..8]
        );
        let part: Vec<char> = secret_part(secret).chars().collect();
        for window in part.windows(12) {
            let piece: String = window.iter().collect();
            assert!(
                !text.contains(&piece),
                "{what} contains a piece of a secret ({}…): {piece}",
                &secret[..8]
            );
        }
    }
}
