//! Each HTTP worker reads its own copies of what it served before: hosted documents, services,
//! accounts, trust lists, verified credentials (docs/benchmarks.md, "Every core counts"). A change
//! made through one worker holds on every worker at its next request, as if every request read
//! the database.

use super::{create_account, publish_kids, register_service};
use registry_tests::issuer::{compact, KeyKind, SigningKey};
use registry_tests::server::{claims, insecure_server, TestServer};
use reqwest::blocking::Client;
use reqwest::Method;
use serde_json::{json, Value};

/// Connections kept open at once: the server hands them to its two workers in turn, so every
/// worker holds some.
const CONNECTIONS: usize = 6;

/// One client per connection (each keeps its own).
fn connections() -> Vec<Client> {
    (0..CONNECTIONS)
        .map(|_| {
            Client::builder()
                .pool_max_idle_per_host(1)
                .build()
                .expect("a client")
        })
        .collect()
}

/// `GET path` with a bearer token on `client`'s connection: the status and body.
fn get(server: &TestServer, client: &Client, path: &str, token: &str) -> (u16, Value) {
    let response = client
        .get(format!("{}{path}", server.base))
        .bearer_auth(token)
        .send()
        .expect("GET");
    let status = response.status().as_u16();
    (status, response.json().unwrap_or(Value::Null))
}

/// A public GET of `subdomain`'s key set on `client`'s connection: the status and the kids.
fn public_kids(server: &TestServer, client: &Client, subdomain: &str) -> (u16, Vec<String>) {
    let response = client
        .get(format!("{}/openid/v1/jwks", server.base))
        .header("host", format!("{subdomain}.localhost:{}", server.port))
        .send()
        .expect("GET");
    let status = response.status().as_u16();
    let body: Value = response.json().unwrap_or(Value::Null);
    (status, kids(&body))
}

/// `DELETE path` through the server's own connection answers 204.
#[track_caller]
fn delete(server: &TestServer, path: &str, token: &str) {
    let deleted = server.authed(Method::DELETE, path, token).send().unwrap();
    assert_eq!(deleted.status(), 204, "DELETE {path}");
}

fn kids(jwks: &Value) -> Vec<String> {
    (jwks["keys"].as_array().into_iter().flatten())
        .filter_map(|key| key["kid"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn a_change_through_one_worker_holds_on_every_worker_at_its_next_request() {
    let server = insecure_server();
    let acme = server.customer("acme", "business");
    let api = register_service(&server, &acme, "api");
    publish_kids(&server, &acme.token, &api, &["k1"]);
    // A hosted issuer, trusted by an oidc account for `api`.
    let idp = register_service(&server, &acme, "idp");
    let hosted = server.issuer(&idp);
    let key = SigningKey::generate(KeyKind::P256, "idp-1");
    let published = server
        .authed(Method::PUT, &format!("/services/{idp}/config"), &acme.token)
        .json(&json!({
            "openidConfiguration": {"issuer": hosted, "jwks_uri": "https://idp.example/jwks",
                "response_types_supported": ["id_token"], "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["ES256"]},
            "jwks": {"keys": [key.public_jwk()]}
        }))
        .send()
        .unwrap();
    assert_eq!(published.status(), 200);
    let rule = |service: &str| {
        json!({"kind": "oidc", "rules": [{"services": [service],
            "claims": {"iss": hosted, "aud": registry_tests::server::AUDIENCE, "sub": "ci"}}]})
    };
    let federated = create_account(&server, &acme, "federated", rule(&api));
    let identity = compact(
        &json!({"alg": "ES256", "typ": "JWT", "kid": key.kid()}),
        &claims(&hosted, "ci"),
        |m| key.sign("ES256", m),
    );
    let reader = create_account(
        &server,
        &acme,
        "reader",
        json!({"kind": "static", "services": [api]}),
    );
    let reader_token = reader["token"].as_str().expect("a token").to_owned();

    let clients = connections();
    let config = format!("/services/{api}/config");
    let service = format!("/services/{api}");
    // Every worker serves and remembers each of them.
    for client in &clients {
        assert_eq!(public_kids(&server, client, &api), (200, vec!["k1".into()]));
        let (status, body) = get(&server, client, &config, &reader_token);
        assert_eq!((status, kids(&body["jwks"])), (200, vec!["k1".into()]));
        assert_eq!(get(&server, client, &service, &identity).0, 200);
    }

    // A new key set: every worker serves it, publicly and through the API.
    publish_kids(&server, &acme.token, &api, &["k2"]);
    for client in &clients {
        let (status, kids_served) = public_kids(&server, client, &api);
        assert_eq!(status, 200);
        assert!(kids_served.contains(&"k2".to_owned()), "{kids_served:?}");
        let (status, body) = get(&server, client, &config, &reader_token);
        assert_eq!((status, kids(&body["jwks"])), (200, vec!["k2".into()]));
    }

    // A narrowed policy: the identity token no longer reaches `api` on any worker.
    let id = federated["id"].as_str().expect("an id");
    let narrowed = server
        .authed(
            Method::PATCH,
            &format!("/service-accounts/{id}"),
            &acme.token,
        )
        .json(&json!({"policy": rule(&idp)}))
        .send()
        .unwrap();
    assert_eq!(narrowed.status(), 200);
    for client in &clients {
        assert_eq!(get(&server, client, &service, &identity).0, 403);
    }

    // A withdrawn key set: the hosted issuer's tokens fail on every worker.
    delete(&server, &format!("/services/{idp}/config"), &acme.token);
    for client in &clients {
        assert_eq!(
            get(&server, client, &format!("/services/{idp}"), &identity).0,
            401
        );
    }

    // A deleted account: its token fails on every worker.
    let id = reader["id"].as_str().expect("an id");
    delete(&server, &format!("/service-accounts/{id}"), &acme.token);
    for client in &clients {
        assert_eq!(get(&server, client, &config, &reader_token).0, 401);
    }

    // A withdrawn configuration: no worker serves it any more.
    delete(&server, &config, &acme.token);
    for client in &clients {
        assert_eq!(public_kids(&server, client, &api).0, 404);
    }
}
