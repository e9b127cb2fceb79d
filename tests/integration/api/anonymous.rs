use super::upload;
use registry_tests::server::{assert_problem, json, ServerOptions, TestServer};
use registry_tests::wait::within;
use reqwest::Method;
use serde_json::{json, Value};
use std::time::Duration;

fn create(server: &TestServer, body: Value) -> Value {
    let response = server
        .request(Method::POST, "/anonymous/services")
        .json(&body)
        .send()
        .unwrap();
    assert_eq!(response.status(), 201);
    json(response)
}

#[test]
fn create_returns_the_secret_once_with_a_working_dashboard_url() {
    let server = TestServer::start_binary(); // reads its log
    let created = create(&server, json!({"title": "Try", "ttlHours": 2}));
    let sub = created["service"]["subdomain"].as_str().unwrap();
    let (random, suffix) = sub.rsplit_once('-').unwrap();
    assert_eq!(suffix, "anon");
    assert!(
        random.len() >= 12
            && random
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    );
    assert_eq!(created["service"]["name"], sub);
    assert!(uuid::Uuid::parse_str(created["service"]["id"].as_str().unwrap()).is_ok());
    let secret = created["secret"].as_str().unwrap();
    assert!(secret.starts_with("rgan_"));
    assert_eq!(
        created["dashboardUrl"],
        format!("{}/dashboard/anonymous/{sub}#secret={secret}", server.base)
    );
    let remaining = created["remainingSeconds"].as_i64().unwrap();
    assert!((7190..=7200).contains(&remaining), "{remaining}");
    let expires = created["expiresAt"].as_str().unwrap();
    assert!(expires.ends_with('Z'), "{expires}");

    let got = json(
        server
            .authed(Method::GET, &format!("/services/{sub}"), secret)
            .send()
            .unwrap(),
    );
    assert_eq!(got["subdomain"], sub);
    assert_eq!(got["title"], "Try");
    assert_eq!(got["expiresAt"], expires);
    assert!(got["remainingSeconds"].as_i64().unwrap() <= remaining);
    assert!(got.get("secret").is_none());
    assert!(
        !server.final_log().contains(secret),
        "the secret reached the log"
    );
}

#[test]
fn another_sites_page_may_not_create_one() {
    let server = TestServer::start();
    // What a field-less form on another site sends: no script needed, and the visitor's
    // browser would show the secret.
    for site in ["cross-site", "same-site"] {
        let refused = server
            .request(Method::POST, "/anonymous/services")
            .header("Sec-Fetch-Site", site)
            .header("Origin", "https://elsewhere.example")
            .header("Content-Type", "application/x-www-form-urlencoded")
            .send()
            .unwrap();
        let problem = assert_problem(refused, 403, "forbidden");
        assert!(
            problem["detail"].as_str().unwrap().contains("another site"),
            "{problem}"
        );
    }
    // A browser too old to say `Sec-Fetch-Site` still says `Origin`.
    let refused = server
        .request(Method::POST, "/anonymous/services")
        .header("Origin", "https://elsewhere.example")
        .json(&json!({}))
        .send()
        .unwrap();
    assert_problem(refused, 403, "forbidden");
    // The registry's own page, and an address typed in, may.
    for site in ["same-origin", "none"] {
        let created = server
            .request(Method::POST, "/anonymous/services")
            .header("Sec-Fetch-Site", site)
            .json(&json!({}))
            .send()
            .unwrap();
        assert_eq!(created.status(), 201, "{site}");
    }
    let created = server
        .request(Method::POST, "/anonymous/services")
        .header("Origin", server.base.as_str())
        .json(&json!({}))
        .send()
        .unwrap();
    assert_eq!(created.status(), 201, "its own origin");
}

#[test]
fn the_secret_manages_its_own_service_and_nothing_else() {
    let server = TestServer::start();
    let mine = create(&server, json!({}));
    let other = create(&server, json!({}));
    let sub = mine["service"]["subdomain"].as_str().unwrap();
    let secret = mine["secret"].as_str().unwrap();
    let path = format!("/services/{sub}");

    let patched = server
        .authed(Method::PATCH, &path, secret)
        .json(&json!({"title": "T", "description": "D"}))
        .send()
        .unwrap();
    assert_eq!(patched.status(), 200);
    assert_eq!(json(patched)["description"], "D");
    let put = server
        .authed(Method::PUT, &format!("{path}/config"), secret)
        .json(&upload(&["a"]))
        .send()
        .unwrap();
    assert_eq!(put.status(), 200);
    assert_eq!(
        server
            .hosted(Method::GET, sub, "/.well-known/openid-configuration")
            .send()
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        server
            .authed(Method::GET, &format!("{path}/config"), secret)
            .send()
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        server
            .authed(Method::DELETE, &format!("{path}/config"), secret)
            .send()
            .unwrap()
            .status(),
        204
    );

    let other_sub = other["service"]["subdomain"].as_str().unwrap();
    let foreign = server
        .authed(Method::GET, &format!("/services/{other_sub}"), secret)
        .send()
        .unwrap();
    assert_problem(foreign, 404, "not-found");
    for (method, path) in [
        (Method::GET, "/services"),
        (Method::POST, "/services"),
        (Method::GET, "/service-accounts"),
        (Method::POST, "/service-accounts"),
    ] {
        let response = server
            .authed(method, path, secret)
            .json(&json!({"title": "x"}))
            .send()
            .unwrap();
        assert_problem(response, 403, "forbidden");
    }
    assert_eq!(
        server
            .authed(Method::DELETE, &path, secret)
            .send()
            .unwrap()
            .status(),
        204
    );
    // Deleted: the secret no longer opens anything, and its service is not found.
    let after = server.authed(Method::GET, &path, secret).send().unwrap();
    assert_problem(after, 404, "not-found");
}

#[test]
fn ttl_hours_is_validated_and_clamped() {
    let server = TestServer::start();
    for bad in [
        json!(0),
        json!(-1),
        json!("2"),
        json!(true),
        json!({}),
        json!(null),
    ] {
        let response = server
            .request(Method::POST, "/anonymous/services")
            .json(&json!({"ttlHours": bad}))
            .send()
            .unwrap();
        let body = assert_problem(response, 400, "validation-failed");
        assert_eq!(body["errors"][0]["pointer"], "/ttlHours", "{bad}");
    }
    let clamped = create(&server, json!({"ttlHours": 100}));
    assert!(clamped["remainingSeconds"].as_i64().unwrap() <= 86400);
    assert!(clamped["remainingSeconds"].as_i64().unwrap() > 86300);
    let default = server
        .request(Method::POST, "/anonymous/services")
        .send()
        .unwrap();
    assert_eq!(default.status(), 201);
    assert!(json(default)["remainingSeconds"].as_i64().unwrap() > 86300);
    let unknown = server
        .request(Method::POST, "/anonymous/services")
        .json(&json!({"owner": "me"}))
        .send()
        .unwrap();
    assert_problem(unknown, 400, "validation-failed");
}

#[test]
fn an_expired_service_answers_404_everywhere_at_once() {
    let server = TestServer::start();
    let started = std::time::Instant::now();
    let created = create(&server, json!({"ttlHours": 1}));
    let sub = created["service"]["subdomain"].as_str().unwrap();
    let secret = created["secret"].as_str().unwrap();
    let put = server
        .authed(Method::PUT, &format!("/services/{sub}/config"), secret)
        .json(&upload(&["a"]))
        .send()
        .unwrap();
    assert_eq!(put.status(), 200);
    assert_eq!(
        server
            .hosted(Method::GET, sub, "/keys")
            .send()
            .unwrap()
            .status(),
        200
    );
    // To a second or two before the hour is over, less the whole seconds the calls above took
    // (a slow machine's), then past it.
    let spent = started.elapsed().as_secs() as i64;
    server.advance_clock(3598 - spent);
    assert_eq!(
        server.get(&format!("/services/{sub}"), secret).status(),
        200
    );
    server.advance_clock(3 + spent);
    assert_problem(
        server
            .authed(Method::GET, &format!("/services/{sub}"), secret)
            .send()
            .unwrap(),
        404,
        "not-found",
    );
    assert_problem(
        server
            .authed(Method::GET, &format!("/services/{sub}/config"), secret)
            .send()
            .unwrap(),
        404,
        "not-found",
    );
    assert_eq!(
        server
            .hosted(Method::GET, sub, "/keys")
            .send()
            .unwrap()
            .status(),
        404
    );
}

/// Once the reaper has deleted an expired service, and its secret with it, the secret still
/// gets the 404 the expired service answered, not a 401; a secret of that shape that never
/// existed gets 404 there too (an anonymous name is random), and 401 on a service that exists
/// and on any registered service's path.
#[test]
fn a_reaped_services_secret_still_gets_404() {
    let server = TestServer::start_with(ServerOptions {
        env: vec![("REGISTRY_TEST_REAP_EVERY_SECONDS".into(), "1".into())],
        ..ServerOptions::default()
    });
    let created = create(&server, json!({"ttlHours": 1}));
    let sub = created["service"]["subdomain"].as_str().unwrap();
    let secret = created["secret"].as_str().unwrap();
    let other = create(&server, json!({}));
    let other_sub = other["service"]["subdomain"].as_str().unwrap();
    server.advance_clock(3700);
    assert!(
        within(Duration::from_secs(30), || {
            super::audit::cli_audit(&server, &["--anonymous", "--action", "anonymous.expire"]).len()
                == 1
        }),
        "the reaper deleted the expired service"
    );
    for path in [
        format!("/services/{sub}"),
        format!("/services/{sub}/config"),
    ] {
        let gone = server.authed(Method::GET, &path, secret).send().unwrap();
        assert_problem(gone, 404, "not-found");
    }
    use registry_domain::credentials::{LOOKUP_LEN, SECRET_LEN};
    let made_up = format!("rgan_{}_{}", "a".repeat(LOOKUP_LEN), "b".repeat(SECRET_LEN));
    assert_eq!(
        registry_domain::credentials::parse(&made_up).map(|p| p.kind),
        Some(registry_domain::credentials::CredentialKind::AnonymousSecret),
        "the made-up secret has the shape of one"
    );
    let nowhere = server
        .authed(Method::GET, &format!("/services/{sub}"), &made_up)
        .send()
        .unwrap();
    assert_problem(nowhere, 404, "not-found");
    for wrong in [&made_up, secret] {
        let exists = server
            .authed(Method::GET, &format!("/services/{other_sub}"), wrong)
            .send()
            .unwrap();
        assert_problem(exists, 401, "unauthorized");
    }
    // A registered service's name can be guessed: a made-up secret gets 401 whether it exists
    // or not, and tells no one which.
    let acme = server.customer("acme", "business");
    let registered = super::register_service(&server, &acme, "api");
    for name in [registered.as_str(), "nothing-acme"] {
        let answer = server
            .authed(Method::GET, &format!("/services/{name}"), &made_up)
            .send()
            .unwrap();
        assert_problem(answer, 401, "unauthorized");
    }
}

#[test]
fn creation_is_rate_limited_per_client_address() {
    let server = TestServer::start_with(ServerOptions {
        env: vec![("REGISTRY_ANON_CREATE_PER_HOUR".into(), "2".into())],
        ..ServerOptions::default()
    });
    create(&server, json!({}));
    create(&server, json!({}));
    let limited = server
        .request(Method::POST, "/anonymous/services")
        .json(&json!({}))
        .send()
        .unwrap();
    let retry_after: u64 = limited.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry_after > 0 && retry_after <= 3600);
    assert_problem(limited, 429, "rate-limited");
}

/// Creations refused because the registry holds as many anonymous services as it keeps do not
/// count against the address: once a place is free, it gets one (it got 429 for up to an hour).
#[test]
fn creations_the_registry_is_too_full_for_do_not_count_against_the_address() {
    let server = TestServer::start_with(ServerOptions {
        env: vec![
            ("REGISTRY_ANON_CREATE_PER_HOUR".into(), "1".into()),
            ("REGISTRY_ANON_MAX_ACTIVE".into(), "1".into()),
            ("REGISTRY_TRUSTED_PROXIES".into(), "127.0.0.1/32".into()),
        ],
        ..ServerOptions::default()
    });
    let from = |address: &str| {
        server
            .request(Method::POST, "/anonymous/services")
            .header("x-forwarded-for", address)
            .json(&json!({}))
            .send()
            .unwrap()
    };
    let first = from("198.51.100.1");
    assert_eq!(first.status(), 201);
    let first = json(first);
    for _ in 0..3 {
        assert_problem(from("198.51.100.2"), 503, "capacity");
    }
    let subdomain = first["service"]["subdomain"].as_str().unwrap();
    let secret = first["secret"].as_str().unwrap();
    let deleted = server
        .authed(Method::DELETE, &format!("/services/{subdomain}"), secret)
        .send()
        .unwrap();
    assert_eq!(deleted.status(), 204);
    // The last refusal is repeated from memory for a second.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert_eq!(from("198.51.100.2").status(), 201);
    assert_problem(from("198.51.100.3"), 503, "capacity");
    // Its one creation an hour is spent now.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert_problem(from("198.51.100.2"), 429, "rate-limited");
}
