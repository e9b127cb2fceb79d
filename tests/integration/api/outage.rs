//! The database going away under a running server (503, the process stays up and recovers by
//! itself: docs/api.md, "Errors"). PostgreSQL only: the outage is a proxy between the server and
//! its database that the test cuts.

use super::publish_api;
use registry_tests::proxy::Proxy;
use registry_tests::server::{assert_problem, json, ServerOptions, TestServer};
use registry_tests::wait::within;
use reqwest::Method;
use std::time::{Duration, Instant};

#[test]
#[ignore = "PostgreSQL only: `cargo xtask test` runs it on its PostgreSQL pass (`--ignored api::outage`)"]
fn an_outage_is_a_503_at_once_and_the_server_recovers_by_itself() {
    assert_eq!(
        registry_tests::backend_name(),
        "postgres",
        "the outage is made on PostgreSQL: set {}",
        registry_tests::POSTGRES_URL_VAR
    );
    let (proxy, through) = Proxy::in_front_of(&registry_tests::fresh_database_url());
    let server = TestServer::start_with(ServerOptions {
        database_url: Some(through),
        env: vec![("REGISTRY_ANON_CREATE_PER_HOUR".into(), "2".into())],
        ..ServerOptions::default()
    });
    let acme = server.customer("acme", "business");
    publish_api(&server, &acme);
    assert_eq!(server.get("/services", &acme.token).status(), 200);
    let create_anonymous = || {
        (server.request(Method::POST, "/anonymous/services"))
            .json(&serde_json::json!({}))
            .send()
            .unwrap()
    };

    proxy.cut();
    let mut waits = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        assert_problem(
            server.get("/services", &acme.token),
            503,
            "database-unavailable",
        );
        waits.push(started.elapsed());
    }
    // The first call may wait out the pool's 5 s checkout while it finds the outage; once a
    // connect has failed, calls are told at once.
    assert!(
        waits[1..].iter().all(|w| *w < Duration::from_secs(2)),
        "waits during the outage: {waits:?}"
    );
    // A creation the outage refused costs no allowance (the shared probe: four 503s left the
    // address locked out for a quarter of an hour once the database was back).
    for _ in 0..3 {
        assert_problem(create_anonymous(), 503, "database-unavailable");
    }
    // The replica still serves (what it holds in memory): ready, degraded, naming the side.
    let ready = server.request(Method::GET, "/readyz").send().unwrap();
    assert_eq!(ready.status(), 200);
    let ready = json(ready);
    assert_eq!(ready["status"], "degraded", "{ready}");
    assert_eq!(ready["primary"], "down", "{ready}");
    assert_eq!(ready["reads"], "down", "{ready}");
    let jwks = server
        .hosted(Method::GET, "api-acme", "/openid/v1/jwks")
        .send()
        .unwrap();
    assert_eq!(
        jwks.status(),
        200,
        "public documents are served from memory"
    );

    proxy.restore();
    let ready = || json(server.request(Method::GET, "/readyz").send().unwrap());
    assert!(
        within(Duration::from_secs(10), || ready()["status"] == "ready"),
        "not ready 10 s after the database came back: {}",
        ready()
    );
    let listed = json(server.get("/services", &acme.token));
    assert_eq!(listed[0]["subdomain"], "api-acme", "{listed}");
    for n in 0..2 {
        assert_eq!(
            create_anonymous().status(),
            201,
            "creation {n} after the outage"
        );
    }
    assert_problem(create_anonymous(), 429, "rate-limited");
}

/// A replica started while its database does not answer waits for it, its port answering 503
/// meanwhile, and serves once it comes back (docs/api.md, "Operations").
#[test]
#[ignore = "PostgreSQL only: `cargo xtask test` runs it on its PostgreSQL pass (`--ignored api::outage`)"]
fn a_replica_started_while_its_database_is_down_waits_for_it() {
    assert_eq!(registry_tests::backend_name(), "postgres");
    let (proxy, through) = Proxy::in_front_of(&registry_tests::fresh_database_url());
    // Built first: the wait below is the database's, not the build's.
    registry_tests::server::registry_binary();
    proxy.cut();
    let back = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(4));
        proxy.restore();
        proxy
    });
    let started = Instant::now();
    let server = TestServer::start_with(ServerOptions {
        database_url: Some(through),
        ..ServerOptions::binary(&[])
    });
    let _proxy = back.join().unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(4),
        "it did not wait"
    );
    let log = server.log();
    assert!(
        log.contains("the database does not answer: trying again"),
        "{log}"
    );
    let acme = server.customer("acme", "business");
    publish_api(&server, &acme);
    assert_eq!(server.get("/services", &acme.token).status(), 200);
}
