//! Several `registry serve` processes on one database (PostgreSQL in production; the same
//! mechanism works on one SQLite file).

use super::publish_api;
use registry_tests::server::{assert_problem, json, ServerOptions, TestServer};
use reqwest::Method;
use serde_json::json;
use std::time::{Duration, Instant};

fn replica_of(primary: &TestServer) -> TestServer {
    TestServer::start_with(ServerOptions {
        database_url: Some(primary.database_url.clone()),
        ..ServerOptions::default()
    })
}

#[test]
fn a_write_on_one_replica_is_served_by_the_other_within_seconds() {
    let a = TestServer::start();
    let b = replica_of(&a);
    let acme = a.customer("acme", "business");
    publish_api(&a, &acme);
    let published_at = Instant::now();
    loop {
        let response = b
            .hosted(Method::GET, "api-acme", "/openid/v1/jwks")
            .send()
            .unwrap();
        if response.status() == 200 {
            assert_eq!(json(response)["keys"][0]["kid"], "k1");
            break;
        }
        assert!(
            published_at.elapsed() < Duration::from_secs(5),
            "not propagated within 5 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Removal propagates the same way.
    a.authed(Method::DELETE, "/services/api-acme", &acme.token)
        .send()
        .unwrap();
    let removed_at = Instant::now();
    while b
        .hosted(Method::GET, "api-acme", "/openid/v1/jwks")
        .send()
        .unwrap()
        .status()
        != 404
    {
        assert!(
            removed_at.elapsed() < Duration::from_secs(5),
            "removal not propagated within 5 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn revocation_on_one_replica_holds_on_the_other_at_once() {
    let a = TestServer::start();
    let b = replica_of(&a);
    let acme = a.customer("acme", "business");
    let account = json(
        a.authed(Method::POST, "/service-accounts", &acme.token)
            .json(&json!({"name": "ci", "policy": {"kind": "static", "services": ["*"]}}))
            .send()
            .unwrap(),
    );
    let token = account["token"].as_str().unwrap();
    let id = account["id"].as_str().unwrap();
    // Warm b's verification cache with the token.
    assert_eq!(
        b.authed(Method::GET, "/services", token)
            .send()
            .unwrap()
            .status(),
        200
    );
    let regenerated = json(
        a.authed(
            Method::POST,
            &format!("/service-accounts/{id}/regenerate-token"),
            &acme.token,
        )
        .send()
        .unwrap(),
    );
    assert_problem(
        b.authed(Method::GET, "/services", token).send().unwrap(),
        401,
        "unauthorized",
    );
    let new = regenerated["token"].as_str().unwrap();
    assert_eq!(
        b.authed(Method::GET, "/services", new)
            .send()
            .unwrap()
            .status(),
        200
    );
    let deleted = a
        .authed(
            Method::DELETE,
            &format!("/service-accounts/{id}"),
            &acme.token,
        )
        .send()
        .unwrap();
    assert_eq!(deleted.status(), 204);
    assert_problem(
        b.authed(Method::GET, "/services", new).send().unwrap(),
        401,
        "unauthorized",
    );
}

#[test]
fn documents_follow_a_change_of_the_issuer_url_template() {
    let first = TestServer::start();
    let acme = first.customer("acme", "business");
    publish_api(&first, &acme);
    // Another port means another REGISTRY_ISSUER_URL_TEMPLATE for the same database.
    let moved = replica_of(&first);
    drop(first);
    let issuer = moved.issuer("api-acme");
    let doc = json(
        moved
            .hosted(Method::GET, "api-acme", "/.well-known/openid-configuration")
            .send()
            .unwrap(),
    );
    assert_eq!(doc["issuer"], issuer.as_str());
    assert_eq!(doc["jwks_uri"], format!("{issuer}/openid/v1/jwks"));
    let config = json(
        moved
            .authed(Method::GET, "/services/api-acme/config", &acme.token)
            .send()
            .unwrap(),
    );
    assert_eq!(config["openidConfiguration"]["issuer"], issuer.as_str());
}
