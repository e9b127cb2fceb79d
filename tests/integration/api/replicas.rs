//! Several `registry serve` processes on one database (PostgreSQL in production; the same
//! mechanism works on one SQLite file).

use super::{create_account, publish_api};
use registry_tests::issuer::TestIssuer;
use registry_tests::server::{assert_problem, claims, json, ServerOptions, TestServer, AUDIENCE};
use registry_tests::wait::within;
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

/// docs/api.md, "Authentication": a service account is usable on every replica as soon as its
/// create answered, an `oidc` one too: its issuer, new to the other replica's trust index, enters
/// it at the request's one database read, before the follower's next tick. (The `cargo xtask bench`
/// P6 scenario: create on A, use on B at once.)
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

    // An issuer the other replica refused a moment before, as no policy named it then: its
    // account is usable there at once too (the probe of federation: a script that tried once
    // behind a load balancer, then made the account, got a 401 for half a second).
    let issuer = TestIssuer::start();
    let iss = issuer.url();
    let token = issuer.mint("RS256", claims(&iss, "repo:acme/api"));
    assert_eq!(status(&b, &token), 401);
    assert_eq!(status(&b, &token), 401);
    create_account(&a, &acme, "late", policy(&iss));
    assert_eq!(
        status(&b, &token),
        200,
        "refused after its account was created"
    );
}

#[test]
fn a_write_on_one_replica_is_served_by_the_other_within_seconds() {
    let a = TestServer::start();
    let b = replica_of(&a);
    let acme = a.customer("acme", "business");
    publish_api(&a, &acme);
    let jwks = || {
        (b.hosted(Method::GET, "api-acme", "/openid/v1/jwks"))
            .send()
            .unwrap()
    };
    let mut served = None;
    let published = within(Duration::from_secs(5), || {
        let response = jwks();
        let found = response.status() == 200;
        served = found.then(|| json(response));
        found
    });
    assert!(published, "not propagated within 5 s");
    assert_eq!(served.unwrap()["keys"][0]["kid"], "k1");
    // Removal propagates the same way.
    a.authed(Method::DELETE, "/services/api-acme", &acme.token)
        .send()
        .unwrap();
    assert!(
        within(Duration::from_secs(5), || jwks().status() == 404),
        "removal not propagated within 5 s"
    );
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

/// Waits until `server` publicly serves `kid` for `subdomain`; how long it took. Its own loop,
/// asking every 20 ms: it measures, and `within`'s 50 ms steps would round the time up.
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

/// The public documents' ETags, Last-Modified and bodies of `subdomain` on `server`.
fn served(server: &TestServer, subdomain: &str) -> Vec<(u16, String, String, String)> {
    ["/.well-known/openid-configuration", "/openid/v1/jwks"]
        .iter()
        .map(|path| {
            let response = server.hosted(Method::GET, subdomain, path).send().unwrap();
            let header = |name: &str| {
                response
                    .headers()
                    .get(name)
                    .map(|v| v.to_str().unwrap().to_owned())
                    .unwrap_or_default()
            };
            let (etag, modified) = (header("etag"), header("last-modified"));
            (
                response.status().as_u16(),
                etag,
                modified,
                response.text().unwrap(),
            )
        })
        .collect()
}

/// docs/api.md, "Limits that hold (second security review)": a replica loads no hosted document at
/// start-up, and serves every published service correctly at its first request (one indexed read),
/// with the ETags of the replica that took the write.
#[test]
fn a_replica_started_on_published_services_serves_them_at_their_first_request() {
    // One issuer template for every replica (each listens on a port of its own), as in
    // production: the same documents everywhere.
    let start = |database_url: Option<String>| {
        TestServer::start_with(ServerOptions {
            env: vec![(
                "REGISTRY_ISSUER_URL_TEMPLATE".into(),
                "http://{subdomain}.localhost".into(),
            )],
            database_url,
            ..ServerOptions::default()
        })
    };
    let a = start(None);
    let acme = a.customer("acme", "business");
    let api = publish_api(&a, &acme);
    let web = super::register_service(&a, &acme, "web");
    super::publish_kids(&a, &acme.token, &web, &["w1", "w2"]);
    let b = start(Some(a.database_url.clone()));
    assert_eq!(b.metric("registry_hosted_issuers"), 0, "nothing loaded");
    assert_eq!(b.metric("registry_hosting_reads_total"), 0);
    for subdomain in [&api, &web] {
        let on_a = served(&a, subdomain);
        assert!(on_a.iter().all(|(status, ..)| *status == 200), "{on_a:?}");
        assert_eq!(
            served(&b, subdomain),
            on_a,
            "{subdomain} at its first request"
        );
    }
    // One read for each service (its two documents come from one entry), then memory.
    assert_eq!(b.metric("registry_hosting_reads_total"), 2);
    assert_eq!(b.metric("registry_hosted_issuers"), 2);
    served(&b, &api);
    assert_eq!(b.metric("registry_hosting_reads_total"), 2);
    // The config GET and hosted issuers go the same way.
    let c = start(Some(a.database_url.clone()));
    let config = json(c.get(&format!("/services/{web}/config"), &acme.token));
    assert_eq!(config["jwks"]["keys"][1]["kid"], "w2");
    assert_eq!(c.metric("registry_hosting_reads_total"), 1);
}

/// docs/api.md, "Responses": a host that names no published service reads the database at most once
/// per name per 10 s, and the names remembered are bounded.
#[test]
fn a_made_up_host_reads_the_database_at_most_once_per_10_s() {
    let server = TestServer::start();
    let status = |subdomain: &str| jwks_status(&server, subdomain);
    let reads = || server.metric("registry_hosting_reads_total");
    let started = std::time::Instant::now();
    assert_eq!(status("made-up-x"), 404);
    assert_eq!(reads(), 1);
    for _ in 0..5 {
        assert_eq!(status("made-up-x"), 404);
        assert_eq!(status("MADE-UP-X"), 404);
    }
    assert_eq!(reads(), 1, "within 10 s, answered from memory");
    // The test clock runs with the real one: to 9 s after the first read, less the whole
    // seconds the calls above took (a slow machine's), then past 10 s.
    let spent = started.elapsed().as_secs() as i64;
    server.advance_clock(8 - spent);
    assert_eq!(status("made-up-x"), 404);
    assert_eq!(reads(), 1);
    server.advance_clock(3 + spent);
    assert_eq!(status("made-up-x"), 404);
    assert_eq!(reads(), 2, "read again after 10 s");
    for n in 0..20 {
        assert_eq!(status(&format!("other-{n}-x")), 404);
        assert_eq!(status(&format!("other-{n}-x")), 404);
    }
    assert_eq!(reads(), 22, "one read per name");
    assert_eq!(server.metric("registry_hosting_remembered_misses"), 21);
    assert_eq!(server.metric("registry_hosted_issuers"), 0);
}

/// A name the other replica answered 404 for (and remembers for 10 s) is served there within
/// the 5 s of docs/api.md, "Public hosting", once it is published: the publication's change clears
/// the remembered miss.
#[test]
fn a_publication_after_a_404_on_the_other_replica_is_served_there_within_5_s() {
    let a = TestServer::start();
    let b = replica_of(&a);
    let acme = a.customer("acme", "business");
    let subdomain = super::register_service(&a, &acme, "api");
    let status = |server: &TestServer| {
        server
            .hosted(Method::GET, &subdomain, "/openid/v1/jwks")
            .send()
            .unwrap()
            .status()
    };
    assert_eq!(status(&b), 404);
    assert_eq!(status(&a), 404);
    super::publish_kids(&a, &acme.token, &subdomain, &["k1"]);
    assert_eq!(status(&a), 200, "at once on the node that took it");
    served_within(&b, &subdomain, "k1", Duration::from_secs(5));
    // A name never registered, asked for on b, then registered and published on a.
    assert_eq!(
        b.hosted(Method::GET, "web-acme", "/keys")
            .send()
            .unwrap()
            .status(),
        404
    );
    let web = super::register_service(&a, &acme, "web");
    assert_eq!(web, "web-acme");
    super::publish_kids(&a, &acme.token, &web, &["w1"]);
    served_within(&b, &web, "w1", Duration::from_secs(5));
}

/// A deletion or a withdrawal is a 404 at once on the node that took it, whether the
/// documents were in its memory or not, and on the other replica within 5 s.
#[test]
fn a_deletion_is_a_404_at_once_on_the_node_that_took_it() {
    let a = TestServer::start();
    let b = replica_of(&a);
    let acme = a.customer("acme", "business");
    let api = publish_api(&a, &acme);
    let web = super::register_service(&a, &acme, "web");
    super::publish_kids(&a, &acme.token, &web, &["w1"]);
    served_within(&b, &api, "k1", Duration::from_secs(5));
    served_within(&b, &web, "w1", Duration::from_secs(5));
    let status = jwks_status;
    // Deleted on b, which holds it.
    let deleted = b
        .authed(Method::DELETE, &format!("/services/{api}"), &acme.token)
        .send()
        .unwrap();
    assert_eq!(deleted.status(), 204);
    assert_eq!(status(&b, &api), 404);
    // Withdrawn on a third replica, which never read it.
    let c = replica_of(&a);
    let withdrawn = c
        .authed(
            Method::DELETE,
            &format!("/services/{web}/config"),
            &acme.token,
        )
        .send()
        .unwrap();
    assert_eq!(withdrawn.status(), 204);
    assert_eq!(status(&c, &web), 404);
    assert!(
        within(Duration::from_secs(5), || {
            status(&a, &api) == 404 && status(&a, &web) == 404
        }),
        "not propagated"
    );
}

/// docs/api.md, "Customers": an operator disables a customer (its tokens 401, its documents 404),
/// enables it again, mints a new token after a lost one, and deletes it, each on every replica
/// from its next request, and other customers never notice.
#[test]
fn a_customers_lifecycle_holds_on_every_replica_at_once() {
    let (a, b) = federating_replicas();
    let acme = a.customer("acme", "business");
    let other = a.customer("other", "business");
    let api = publish_api(&a, &acme);
    let others = publish_api(&a, &other);
    let jwks = jwks_status;
    // Both replicas have the customer's account and documents in memory.
    for server in [&a, &b] {
        assert_eq!(status(server, &acme.token), 200);
        assert_eq!(jwks(server, &api), 200);
    }
    let cli = |args: &[&str]| registry_tests::server::run_cli(args, &a.database_url);

    let disabled = cli(&["customer", "disable", "--tenant", "acme"]).unwrap();
    assert!(disabled["disabledAt"].is_string(), "{disabled}");
    for server in [&a, &b] {
        assert_problem(server.get("/services", &acme.token), 401, "unauthorized");
        // The public path reads no database: each replica's follower applies the change
        // within half a second, and every replica within the 5 s documented (a loaded
        // machine's included).
        jwks_status_within(server, &api, 404, Duration::from_secs(5));
        assert_problem(
            server
                .hosted(Method::GET, &api, "/openid/v1/jwks")
                .send()
                .unwrap(),
            404,
            "not-found",
        );
        assert_eq!(status(server, &other.token), 200);
        assert_eq!(jwks(server, &others), 200);
    }
    let listed = cli(&["customer", "list"]).unwrap();
    assert!(listed[0]["disabledAt"].is_string() && listed[1]["disabledAt"].is_null());

    let enabled = cli(&["customer", "enable", "--tenant", "acme"]).unwrap();
    assert!(enabled["disabledAt"].is_null(), "{enabled}");
    for server in [&a, &b] {
        assert_eq!(status(server, &acme.token), 200);
        jwks_status_within(server, &api, 200, Duration::from_secs(5));
    }
    // The audit trail says the operator did both.
    for action in ["customer.disable", "customer.enable"] {
        let events = json(a.get(&format!("/audit-events?action={action}"), &acme.token));
        assert_eq!(events["events"].as_array().unwrap().len(), 1, "{events}");
        assert_eq!(events["events"][0]["actor"]["kind"], "operator");
    }

    // A lost token: the operator mints another, which works everywhere at once.
    let minted = cli(&["customer", "token", "--tenant", "acme"]).unwrap();
    let token = minted["token"].as_str().unwrap();
    assert_eq!(minted["serviceAccount"]["policy"]["services"], json!(["*"]));
    for server in [&a, &b] {
        assert_eq!(status(server, token), 200);
    }

    // Deleting needs --yes, then takes everything, on both replicas.
    let (code, _, refused) = registry_tests::server::run_registry(
        &["customer", "delete", "--tenant", "acme"],
        &[("REGISTRY_DATABASE_URL", &a.database_url)],
    );
    assert_eq!(code, Some(2), "a usage error: {refused}");
    assert!(refused.contains("--yes"), "{refused}");
    assert_eq!(status(&b, &acme.token), 200);
    cli(&["customer", "delete", "--tenant", "acme", "--yes"]).unwrap();
    for server in [&a, &b] {
        assert_eq!(status(server, &acme.token), 401);
        assert_eq!(status(server, token), 401);
        jwks_status_within(server, &api, 404, Duration::from_secs(5));
        assert_eq!(status(server, &other.token), 200);
    }
    let unknown = cli(&["customer", "disable", "--tenant", "acme"]).unwrap_err();
    assert!(
        unknown.contains("no customer has the tenant suffix"),
        "{unknown}"
    );
    // Its name is free again.
    a.customer("acme", "business");
}

/// The status of `subdomain`'s public key set on `server`.
fn jwks_status(server: &TestServer, subdomain: &str) -> u16 {
    server
        .hosted(Method::GET, subdomain, "/openid/v1/jwks")
        .send()
        .unwrap()
        .status()
        .as_u16()
}

/// Waits until `subdomain`'s public key set answers `want` on `server`, at most `limit`.
fn jwks_status_within(server: &TestServer, subdomain: &str, want: u16, limit: Duration) {
    let mut status = 0;
    let answered = within(limit, || {
        status = jwks_status(server, subdomain);
        status == want
    });
    assert!(
        answered,
        "{subdomain} answers {status}, not {want}, after {limit:?}"
    );
}
