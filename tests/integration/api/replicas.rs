//! Several `registry serve` processes on one database (PostgreSQL in production; the same
//! mechanism works on one SQLite file).

use super::{create_account, publish_api};
use registry_tests::issuer::TestIssuer;
use registry_tests::server::{assert_problem, claims, json, ServerOptions, TestServer, AUDIENCE};
use reqwest::Method;
use serde_json::json;
use std::time::{Duration, Instant};

fn replica_of(primary: &TestServer) -> TestServer {
    TestServer::start_with(ServerOptions {
        database_url: Some(primary.database_url.clone()),
        ..ServerOptions::default()
    })
}

/// Two replicas on one database that accept the loopback test issuers.
fn federating_replicas() -> (TestServer, TestServer) {
    let insecure = vec![("REGISTRY_OIDC_ALLOW_INSECURE_ISSUERS".into(), "true".into())];
    let a = TestServer::start_with(ServerOptions {
        env: insecure.clone(),
        ..ServerOptions::default()
    });
    let b = TestServer::start_with(ServerOptions {
        env: insecure,
        database_url: Some(a.database_url.clone()),
        ..ServerOptions::default()
    });
    (a, b)
}

fn status(server: &TestServer, token: &str) -> u16 {
    server
        .authed(Method::GET, "/services", token)
        .send()
        .unwrap()
        .status()
        .as_u16()
}

/// DECISIONS §14: a service account is usable on every replica as soon as its create answered,
/// an `oidc` one too: its issuer, new to the other replica's trust index, enters it at the
/// request's one database read, before the follower's next tick. (The `cargo xtask bench` P6
/// scenario: create on A, use on B at once.)
#[test]
fn a_new_account_is_usable_on_every_replica_as_soon_as_it_is_created() {
    let (a, b) = federating_replicas();
    let acme = a.customer("acme", "business");
    let policy = |iss: &str| {
        json!({"kind": "oidc", "rules": [
            {"services": ["*"], "claims": {"iss": iss, "aud": AUDIENCE, "sub": "repo:acme/api"}}
        ]})
    };
    // Several new issuers in a row: the follower (every half second) cannot be what lets
    // each of them in.
    for n in 0..4 {
        let issuer = TestIssuer::start();
        let iss = issuer.url();
        let token = issuer.mint("RS256", claims(&iss, "repo:acme/api"));
        create_account(&a, &acme, &format!("ci{n}"), policy(&iss));
        assert_eq!(status(&b, &token), 200, "issuer {n} on the other replica");
    }
    let created = create_account(
        &a,
        &acme,
        "deployer",
        json!({"kind": "static", "services": ["*"]}),
    );
    assert_eq!(status(&b, created["token"].as_str().unwrap()), 200);

    // An issuer the other replica was asked about before any policy named it is refused from
    // memory for 10 s; the account's change, once applied there, lifts that at once.
    let issuer = TestIssuer::start();
    let iss = issuer.url();
    let token = issuer.mint("RS256", claims(&iss, "repo:acme/api"));
    assert_eq!(status(&b, &token), 401);
    assert_eq!(status(&b, &token), 401, "refused from memory");
    create_account(&a, &acme, "late", policy(&iss));
    let start = Instant::now();
    while status(&b, &token) != 200 {
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "a known-unknown issuer stays refused after its account's change was applied"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
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

/// Deletes `api-{tenant}`, registers it again and publishes `kid`, on `server`.
fn republish(server: &TestServer, customer: &registry_tests::server::Customer, kid: &str) {
    let subdomain = format!("api-{}", customer.tenant);
    let deleted = server
        .authed(
            Method::DELETE,
            &format!("/services/{subdomain}"),
            &customer.token,
        )
        .send()
        .unwrap();
    assert_eq!(deleted.status(), 204);
    super::register_service(server, customer, "api");
    super::publish_kids(server, &customer.token, &subdomain, &[kid]);
}

/// Waits until `server` publicly serves `kid` for `subdomain`; how long it took.
fn served_within(server: &TestServer, subdomain: &str, kid: &str, limit: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let response = server
            .hosted(Method::GET, subdomain, "/openid/v1/jwks")
            .send()
            .unwrap();
        if response.status() == 200 && json(response)["keys"][0]["kid"] == kid {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < limit,
            "{subdomain} does not serve {kid} within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A service deleted, created again and republished within one follower tick: the other
/// replica applies the changes in log order, and forgetting the old service (its id) never
/// takes the new one's documents or its authenticated calls (once: 404 in 6 rounds of 13).
#[test]
fn a_service_deleted_and_created_again_is_served_anew_by_the_other_replica() {
    let a = TestServer::start();
    let b = replica_of(&a);
    let acme = a.customer("acme", "business");
    publish_api(&a, &acme);
    served_within(&b, "api-acme", "k1", Duration::from_secs(5));
    let mut slowest = Duration::ZERO;
    for round in 0..50 {
        let kid = format!("round-{round}");
        republish(&a, &acme, &kid);
        slowest = slowest.max(served_within(&b, "api-acme", &kid, Duration::from_secs(5)));
        let config = b.get("/services/api-acme/config", &acme.token);
        assert_eq!(config.status(), 200, "round {round}");
        assert_eq!(json(config)["jwks"]["keys"][0]["kid"], kid.as_str());
    }
    eprintln!("slowest propagation of 50 delete-create-publish rounds: {slowest:?}");
}

/// A replica paused past the change log's horizon (here: the log pruned to its newest row
/// while it was stopped) cannot replay what it missed, and reloads everything instead.
#[test]
fn a_replica_behind_the_logs_horizon_reloads_everything() {
    let a = TestServer::start();
    // Stopped and continued with signals: the binary.
    let b = TestServer::start_with(ServerOptions {
        database_url: Some(a.database_url.clone()),
        binary: true,
        ..ServerOptions::default()
    });
    let acme = a.customer("acme", "business");
    publish_api(&a, &acme);
    served_within(&b, "api-acme", "k1", Duration::from_secs(5));
    let signal = |name: &str| {
        let status = std::process::Command::new("kill")
            .args([name, &b.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    };
    signal("-STOP");
    republish(&a, &acme, "k2");
    let web = super::register_service(&a, &acme, "web");
    super::publish_kids(&a, &acme.token, &web, &["w1"]);
    use registry_domain::ports::ChangeFeed as _;
    let store = registry_store::Store::connect(&a.database_url).unwrap();
    let pruned = store
        .prune_changes(time::OffsetDateTime::now_utc() + time::Duration::hours(2))
        .unwrap();
    store.close();
    assert!(pruned > 0);
    signal("-CONT");
    served_within(&b, "api-acme", "k2", Duration::from_secs(5));
    served_within(&b, "web-acme", "w1", Duration::from_secs(5));
}
