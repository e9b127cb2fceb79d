//! The audit trail and `lastUsedAt` (docs/api.md, "Audit trail and last use"), through the real
//! binary: every change writes exactly one event with who made it, failed changes write none, one
//! customer never sees another's, pages hold still while events are written.

use super::{register_service, upload};
use registry_tests::issuer::TestIssuer;
use registry_tests::server::{
    assert_problem, claims, json, run_cli, Customer, ServerOptions, TestServer, AUDIENCE,
};
use registry_tests::wait::within;
use reqwest::Method;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::time::Duration;

/// A server whose reaper runs every second on a clock the test moves, admitting the loopback
/// test issuer.
fn server() -> TestServer {
    TestServer::start_with(ServerOptions {
        env: vec![
            ("REGISTRY_OIDC_ALLOW_INSECURE_ISSUERS".into(), "true".into()),
            ("REGISTRY_TEST_REAP_EVERY_SECONDS".into(), "1".into()),
        ],
        ..ServerOptions::default()
    })
}

/// Behind a trusted proxy an event records the forwarded client; one the chain does not
/// reveal (an entry that is no address) is recorded as none, not as a made-up `0.0.0.0`.
#[test]
fn an_event_records_the_forwarded_client_or_no_address() {
    let server = TestServer::start_with(ServerOptions {
        env: vec![("REGISTRY_TRUSTED_PROXIES".into(), "127.0.0.1/32".into())],
        ..ServerOptions::default()
    });
    let acme = server.customer("acme", "business");
    let sub = register_service(&server, &acme, "api");
    for (forwarded, title) in [("203.0.113.5", "one"), ("garbage", "two")] {
        let patched = server
            .authed(Method::PATCH, &format!("/services/{sub}"), &acme.token)
            .header("x-forwarded-for", forwarded)
            .json(&json!({"title": title}))
            .send()
            .unwrap();
        assert_eq!(patched.status(), 200);
    }
    let events = all_events(&server, &acme.token, "&action=service.update", 10);
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[1]["ip"], "203.0.113.5", "{}", events[1]);
    assert!(events[0].get("ip").is_none(), "{}", events[0]);
}

/// Every event of the caller's customer, newest first, read page by page.
fn all_events(server: &TestServer, token: &str, query: &str, limit: usize) -> Vec<Value> {
    let mut events = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/audit-events?limit={limit}{query}");
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let response = server.get(&path, token);
        assert_eq!(response.status(), 200, "{path}");
        let page = json(response);
        events.extend(page["events"].as_array().unwrap().iter().cloned());
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => {
                assert!(page["nextCursor"].is_null());
                return events;
            }
        }
    }
}

fn actions(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect()
}

/// The request's response status and the `X-Request-Id` it was given.
fn send_with_id(request: reqwest::blocking::RequestBuilder, id: &str) -> u16 {
    request
        .header("x-request-id", id)
        .send()
        .unwrap()
        .status()
        .as_u16()
}

/// `registry audit` as JSON lines (one event a line, newest first).
pub(super) fn cli_audit(server: &TestServer, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["audit"];
    all.extend_from_slice(args);
    match run_cli(&all, &server.database_url) {
        Ok(Value::String(lines)) => lines
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect(),
        // One line parses as one JSON document.
        Ok(one) => vec![one],
        Err(stderr) => panic!("registry audit failed: {stderr}"),
    }
}

fn wait_for(what: &str, done: impl FnMut() -> bool) {
    assert!(
        within(Duration::from_secs(20), done),
        "timed out waiting for {what}"
    );
}

#[test]
fn every_change_writes_one_event_with_its_actor_and_failed_ones_none() {
    let server = server();
    let acme = server.customer("acme", "business");
    let token = &acme.token;

    // Static token: services, configurations, keys, accounts.
    let sub = register_service(&server, &acme, "api");
    let path = format!("/services/{sub}");
    let ok = |status: u16, what: &str| assert!((200..300).contains(&status), "{what}: {status}");
    ok(
        send_with_id(
            server
                .authed(Method::PATCH, &path, token)
                .json(&json!({"title": "API"})),
            "req-patch",
        ),
        "patch",
    );
    for kids in [["k1"], ["k2"]] {
        let put = server
            .authed(Method::PUT, &format!("{path}/config"), token)
            .json(&upload(&kids))
            .send()
            .unwrap();
        assert_eq!(put.status(), 200);
    }
    ok(
        server
            .authed(Method::DELETE, &format!("{path}/keys/k1"), token)
            .send()
            .unwrap()
            .status()
            .as_u16(),
        "key delete",
    );
    let created = server
        .authed(Method::POST, "/service-accounts", token)
        .json(&json!({"name": "ci", "policy": {"kind": "static", "services": ["*"]}}))
        .send()
        .unwrap();
    assert_eq!(created.status(), 201);
    let account = json(created)["id"].as_str().unwrap().to_owned();
    let account_path = format!("/service-accounts/{account}");
    ok(
        server
            .authed(Method::PATCH, &account_path, token)
            .json(&json!({"name": "ci-2"}))
            .send()
            .unwrap()
            .status()
            .as_u16(),
        "account patch",
    );
    ok(
        server
            .authed(
                Method::POST,
                &format!("{account_path}/regenerate-token"),
                token,
            )
            .send()
            .unwrap()
            .status()
            .as_u16(),
        "regenerate",
    );

    // Changes that fail write nothing: a 400, a 409, a 404.
    let bad = server
        .authed(Method::PUT, &format!("{path}/config"), token)
        .json(&json!({"openidConfiguration": {}}))
        .send()
        .unwrap();
    assert_eq!(bad.status(), 400);
    let taken = server
        .authed(Method::POST, "/services", token)
        .json(&json!({"title": "again", "serviceName": "api"}))
        .send()
        .unwrap();
    assert_eq!(taken.status(), 409);
    let unknown_key = server
        .authed(Method::DELETE, &format!("{path}/keys/nope"), token)
        .send()
        .unwrap();
    assert_eq!(unknown_key.status(), 404);

    ok(
        server
            .authed(Method::DELETE, &account_path, token)
            .send()
            .unwrap()
            .status()
            .as_u16(),
        "account delete",
    );
    ok(
        server
            .authed(Method::DELETE, &format!("{path}/config"), token)
            .send()
            .unwrap()
            .status()
            .as_u16(),
        "config delete",
    );
    // Deleting what is already gone changes nothing, and writes nothing.
    let again = server
        .authed(Method::DELETE, &format!("{path}/config"), token)
        .send()
        .unwrap();
    assert_eq!(again.status(), 404);
    // The last change a few seconds later, so that `since` below has events on both sides
    // (in-process, the whole sequence fits in one second).
    server.advance_clock(3);
    ok(
        server
            .authed(Method::DELETE, &path, token)
            .send()
            .unwrap()
            .status()
            .as_u16(),
        "service delete",
    );

    let events = all_events(&server, token, "", 100);
    assert_eq!(
        actions(&events),
        [
            "service.delete",
            "config.delete",
            "account.delete",
            "account.regenerate-token",
            "account.update",
            "account.create",
            "key.delete",
            "config.put",
            "config.put",
            "service.update",
            "service.create",
            "customer.create",
        ]
    );
    let ids: HashSet<&str> = events.iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), events.len(), "event ids are unique");
    for event in &events[..events.len() - 1] {
        assert_eq!(event["actor"]["kind"], "static", "{event}");
        assert_eq!(event["actor"]["accountId"], acme.account_id.as_str());
        assert_eq!(event["ip"], "127.0.0.1", "{event}");
        assert!(event["requestId"].is_string(), "{event}");
        assert!(event["at"].as_str().unwrap().ends_with('Z'));
    }
    let patch = &events[9];
    assert_eq!(patch["requestId"], "req-patch");
    assert_eq!(
        patch["resource"],
        json!({"type": "service", "id": patch["resource"]["id"], "subdomain": sub})
    );
    assert_eq!(
        events[6]["resource"],
        json!({"type": "key", "id": "k1", "subdomain": sub})
    );
    assert_eq!(events[2]["resource"]["type"], "account");
    assert_eq!(events[2]["resource"]["id"], account.as_str());
    let customer = &events[11];
    assert_eq!(customer["actor"], json!({"kind": "operator"}));
    assert_eq!(customer["resource"]["type"], "customer");
    assert!(customer.get("ip").is_none() && customer.get("requestId").is_none());
    // Never a token or a secret.
    let text = serde_json::to_string(&events).unwrap();
    assert!(!text.contains("rgst_"), "{text}");

    // The filters.
    let puts = all_events(&server, token, "&action=config.put", 100);
    assert_eq!(actions(&puts), ["config.put", "config.put"]);
    let newest_at = events[0]["at"].as_str().unwrap();
    let since = all_events(&server, token, &format!("&since={newest_at}"), 100);
    assert!(!since.is_empty() && since.len() < events.len());
    assert!(since.iter().all(|e| e["at"].as_str().unwrap() >= newest_at));
    // Pages of one event each hold the same events in the same order.
    assert_eq!(all_events(&server, token, "", 1), events);

    // The command line prints the same events.
    let printed = cli_audit(&server, &["--tenant", "acme"]);
    assert_eq!(printed, events);
    let printed = cli_audit(&server, &["--tenant", "acme", "--action", "key.delete"]);
    assert_eq!(actions(&printed), ["key.delete"]);
}

/// The event of an update says which members changed, with their old and new values, and a
/// token's regeneration shows no secret (docs/api.md, "Audit trail and last use").
#[test]
fn an_update_event_says_which_members_changed_and_never_a_secret() {
    let server = server();
    let acme = server.customer("acme", "business");
    let sub = register_service(&server, &acme, "api");
    let patched = server
        .authed(Method::PATCH, &format!("/services/{sub}"), &acme.token)
        .json(&json!({"title": "API v2", "description": "Public keys"}))
        .send()
        .unwrap();
    assert_eq!(patched.status(), 200);
    let account = super::create_account(
        &server,
        &acme,
        "deployer",
        json!({"kind": "static", "services": ["*"]}),
    );
    let id = account["id"].as_str().unwrap();
    let renamed = server
        .authed(
            Method::PATCH,
            &format!("/service-accounts/{id}"),
            &acme.token,
        )
        .json(&json!({"name": "deployer-2"}))
        .send()
        .unwrap();
    assert_eq!(renamed.status(), 200);
    let regenerated = server
        .authed(
            Method::POST,
            &format!("/service-accounts/{id}/regenerate-token"),
            &acme.token,
        )
        .send()
        .unwrap();
    assert_eq!(regenerated.status(), 200);
    let token = json(regenerated)["token"].as_str().unwrap().to_owned();

    let page = json(server.get("/audit-events?action=service.update", &acme.token));
    assert_eq!(
        page["events"][0]["changes"],
        json!({"title": {"old": "api", "new": "API v2"}, "description": {"old": null, "new": "Public keys"}}),
        "{page}"
    );
    let page = json(server.get("/audit-events?action=account.update", &acme.token));
    assert_eq!(
        page["events"][0]["changes"],
        json!({"name": {"old": "deployer", "new": "deployer-2"}}),
        "{page}"
    );
    let page = json(server.get("/audit-events?action=account.regenerate-token", &acme.token));
    assert!(page["events"][0].get("changes").is_none(), "{page}");
    let everything = json(server.get("/audit-events", &token)).to_string();
    assert!(
        !everything.contains(&token[token.len() - 16..]),
        "{everything}"
    );
}

#[test]
fn federated_anonymous_and_system_actors() {
    let server = server();
    let issuer = TestIssuer::start();
    let acme = server.customer("acme", "business");
    let created = server
        .authed(Method::POST, "/service-accounts", &acme.token)
        .json(
            &json!({"name": "gha", "policy": {"kind": "oidc", "rules": [{
                "services": ["*"],
                "claims": {"iss": issuer.url(), "aud": AUDIENCE, "sub": "repo:acme/*"}
            }]}}),
        )
        .send()
        .unwrap();
    assert_eq!(created.status(), 201);
    let federated_id = json(created)["id"].as_str().unwrap().to_owned();
    let jwt = issuer.mint("RS256", claims(&issuer.url(), "repo:acme/api"));
    let made = server
        .authed(Method::POST, "/services", &jwt)
        .json(&json!({"title": "by ci", "serviceName": "ci"}))
        .send()
        .unwrap();
    assert_eq!(made.status(), 201);
    let events = all_events(&server, &acme.token, "&action=service.create", 10);
    assert_eq!(
        events[0]["actor"],
        json!({"kind": "oidc", "accountId": federated_id, "iss": issuer.url(), "sub": "repo:acme/api"})
    );

    // Anonymous services: their events belong to no customer.
    let anon = json(
        server
            .request(Method::POST, "/anonymous/services")
            .json(&json!({"ttlHours": 1}))
            .send()
            .unwrap(),
    );
    let sub = anon["service"]["subdomain"].as_str().unwrap().to_owned();
    let secret = anon["secret"].as_str().unwrap().to_owned();
    let put = server
        .authed(Method::PUT, &format!("/services/{sub}/config"), &secret)
        .json(&upload(&["a"]))
        .send()
        .unwrap();
    assert_eq!(put.status(), 200);
    let patched = server
        .authed(Method::PATCH, &format!("/services/{sub}"), &secret)
        .json(&json!({"title": "t"}))
        .send()
        .unwrap();
    assert_eq!(patched.status(), 200);
    let anonymous = cli_audit(&server, &["--anonymous"]);
    assert_eq!(
        actions(&anonymous),
        ["anonymous.update", "config.put", "anonymous.create"]
    );
    assert!(anonymous
        .iter()
        .all(|e| e["actor"] == json!({"kind": "anonymous"})));
    let customer_actions = actions(&all_events(&server, &acme.token, "", 100))
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>();
    assert!(!customer_actions.iter().any(|a| a.starts_with("anonymous.")));

    // A retired key's time runs out, then the anonymous service's: the reaper's events.
    let sub2 = register_service(&server, &acme, "keys");
    for kids in [["old"], ["new"]] {
        let put = server
            .authed(Method::PUT, &format!("/services/{sub2}/config"), &acme.token)
            .json(&json!({"retainRemovedKeysHours": 1, "openidConfiguration": upload(&kids)["openidConfiguration"], "jwks": upload(&kids)["jwks"]}))
            .send()
            .unwrap();
        assert_eq!(put.status(), 200);
    }
    server.advance_clock(3700);
    wait_for("key.expire", || {
        !all_events(&server, &acme.token, "&action=key.expire", 10).is_empty()
    });
    let expired = all_events(&server, &acme.token, "&action=key.expire", 10);
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0]["actor"], json!({"kind": "system"}));
    assert_eq!(
        expired[0]["resource"],
        json!({"type": "key", "id": "old", "subdomain": sub2})
    );
    wait_for("anonymous.expire", || {
        actions(&cli_audit(&server, &["--anonymous"]))[0] == "anonymous.expire"
    });
    let anonymous = cli_audit(&server, &["--anonymous", "--action", "anonymous.expire"]);
    assert_eq!(anonymous.len(), 1);
    assert_eq!(anonymous[0]["actor"], json!({"kind": "system"}));
    assert_eq!(anonymous[0]["resource"]["subdomain"], sub.as_str());
    // The reaper keeps at it every second: still exactly one event each.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        all_events(&server, &acme.token, "&action=key.expire", 10).len(),
        1
    );
}

#[test]
fn customers_see_only_their_own_trail_and_only_with_a_star() {
    let server = server();
    let acme = server.customer("acme", "business");
    let globex = server.customer("globex", "business");
    for i in 0..5 {
        register_service(&server, &acme, &format!("a{i}"));
    }
    register_service(&server, &globex, "g");
    let first_page = json(server.get("/audit-events?limit=2", &acme.token));
    let acme_cursor = first_page["nextCursor"].as_str().unwrap().to_owned();
    // globex with acme's cursor: a 400, as for a forged one (docs/api.md, "Audit trail and last
    // use"), never acme's events.
    assert_problem(
        server.get(
            &format!("/audit-events?cursor={acme_cursor}"),
            &globex.token,
        ),
        400,
        "validation-failed",
    );
    let globex_all = all_events(&server, &globex.token, "", 100);
    assert_eq!(actions(&globex_all), ["service.create", "customer.create"]);
    let acme_ids: HashSet<String> = all_events(&server, &acme.token, "", 100)
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect();
    for action in ["service.create", "customer.create"] {
        for event in all_events(&server, &globex.token, &format!("&action={action}"), 1) {
            assert!(!acme_ids.contains(event["id"].as_str().unwrap()));
        }
    }

    // A caller without "*" gets 403, an anonymous secret too; no token 401.
    let narrow = json(
        server
            .authed(Method::POST, "/service-accounts", &acme.token)
            .json(&json!({"name": "narrow", "policy": {"kind": "static", "services": ["a0-acme"]}}))
            .send()
            .unwrap(),
    );
    let narrow_token = narrow["token"].as_str().unwrap();
    let refused = assert_problem(server.get("/audit-events", narrow_token), 403, "forbidden");
    assert!(
        refused["detail"]
            .as_str()
            .unwrap()
            .starts_with("reading the audit trail needs"),
        "the detail names what was asked: {refused}"
    );
    let anon = json(
        server
            .request(Method::POST, "/anonymous/services")
            .json(&json!({}))
            .send()
            .unwrap(),
    );
    assert_problem(
        server.get("/audit-events", anon["secret"].as_str().unwrap()),
        403,
        "forbidden",
    );
    assert_problem(
        server.request(Method::GET, "/audit-events").send().unwrap(),
        401,
        "unauthorized",
    );

    // Forged and garbage parameters are 400s naming the parameter, never 500s.
    for query in [
        "cursor=garbage",
        "cursor=YTEuMA",
        "cursor=%00",
        "limit=0",
        "limit=501",
        "limit=x",
        "action=config.post",
        "since=yesterday",
    ] {
        let problem = assert_problem(
            server.get(&format!("/audit-events?{query}"), &acme.token),
            400,
            "validation-failed",
        );
        let name = query.split('=').next().unwrap();
        assert!(
            problem["detail"].as_str().unwrap().contains(name),
            "{query}: {problem}"
        );
    }

    // The command line: a tenant that does not exist is one sentence and exit 1.
    let err = run_cli(&["audit", "--tenant", "nobody"], &server.database_url).unwrap_err();
    assert!(err.contains("no customer has the tenant suffix"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn pages_hold_still_while_events_are_written() {
    let server = server();
    let acme = server.customer("acme", "business");
    let sub = register_service(&server, &acme, "busy");
    for i in 0..30 {
        let patched = server
            .authed(Method::PATCH, &format!("/services/{sub}"), &acme.token)
            .json(&json!({"title": format!("t{i}")}))
            .send()
            .unwrap();
        assert_eq!(patched.status(), 200);
    }
    let stop = std::sync::atomic::AtomicBool::new(false);
    let paged = std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = server
                    .authed(Method::PATCH, &format!("/services/{sub}"), &acme.token)
                    .json(&json!({"title": format!("w{i}")}))
                    .send();
                i += 1;
            }
            i
        });
        // Give the writer a head start, then page slowly through the trail.
        std::thread::sleep(Duration::from_millis(200));
        let mut paged = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut path = "/audit-events?limit=4".to_owned();
            if let Some(c) = &cursor {
                path.push_str(&format!("&cursor={c}"));
            }
            let page = json(server.get(&path, &acme.token));
            paged.extend(page["events"].as_array().unwrap().iter().cloned());
            std::thread::sleep(Duration::from_millis(30));
            match page["nextCursor"].as_str() {
                Some(next) => cursor = Some(next.to_owned()),
                None => break,
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(writer.join().unwrap() > 0, "the writer wrote while paging");
        paged
    });
    // What was paged is exactly the trail from the first page's newest event down: no
    // duplicates, no gaps.
    let everything = all_events(&server, &acme.token, "", 500);
    let start = everything
        .iter()
        .position(|e| e["id"] == paged[0]["id"])
        .unwrap();
    assert_eq!(paged, everything[start..]);
    assert!(start > 0, "events were written after the first page");
}

fn last_used(server: &TestServer, customer: &Customer) -> Value {
    json(server.get(
        &format!("/service-accounts/{}", customer.account_id),
        &customer.token,
    ))["lastUsedAt"]
        .clone()
}

#[test]
fn last_used_at_moves_with_use_and_is_written_once_a_minute() {
    let server = server();
    let acme = server.customer("acme", "business");
    let listed = json(server.get("/service-accounts", &acme.token));
    assert!(listed[0].get("lastUsedAt").is_some());
    // The GET above was a use; the minute it fell in is visible at once.
    wait_for("lastUsedAt", || last_used(&server, &acme).is_string());
    let first = last_used(&server, &acme);
    assert!(first.as_str().unwrap().ends_with(":00Z"), "{first}");
    let statements = server.metric("registry_last_used_statements_total");
    for _ in 0..50 {
        assert_eq!(server.get("/services", &acme.token).status(), 200);
    }
    // 50 requests within (at most) the next minute: at most one more statement.
    let after = server.metric("registry_last_used_statements_total");
    assert!(after - statements <= 1, "{statements} → {after}");

    server.advance_clock(120);
    assert_eq!(server.get("/services", &acme.token).status(), 200);
    wait_for("lastUsedAt to move", || last_used(&server, &acme) != first);
    let later = last_used(&server, &acme);
    assert!(later.as_str().unwrap() > first.as_str().unwrap());
    assert!(
        server.metric("registry_last_used_rows_written_total")
            <= server.metric("registry_last_used_statements_total")
    );

    // Only a successful request is a use: a call its account may make but that fails (a body
    // the handler refuses, a key that is not there) leaves `lastUsedAt` as it was.
    let account = super::create_account(
        &server,
        &acme,
        "deployer",
        json!({"kind": "static", "services": ["*"]}),
    );
    let (id, token) = (
        account["id"].as_str().unwrap(),
        account["token"].as_str().unwrap(),
    );
    let deployer =
        || json(server.get(&format!("/service-accounts/{id}"), &acme.token))["lastUsedAt"].clone();
    let refused = (server.authed(Method::POST, "/services", token))
        .json(&json!({"serviceName": "Not A Name"}))
        .send()
        .unwrap();
    assert_eq!(refused.status(), 400);
    let sub = register_service(&server, &acme, "api");
    let missing = server.get(&format!("/services/{sub}/keys/nope/readiness"), token);
    assert_eq!(missing.status(), 404);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(deployer(), Value::Null, "failed requests are no use");
    assert_eq!(server.get("/services", token).status(), 200);
    wait_for("the deployer's lastUsedAt", || deployer().is_string());
}
