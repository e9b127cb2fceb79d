//! Third security review (docs/api.md "Actions" and "Limits"): an account does what its policy's
//! actions allow and nothing else, no account mints or takes over one broader than itself, and
//! the limits that raced or cost too much hold.

use super::{create_service, server_with};
use registry_tests::server::{assert_problem, json, pointers, TestServer};
use reqwest::Method;
use serde_json::{json, Value};
use std::sync::Barrier;

const V2: &str = "http://localhost:8080/schemas/service-account-policy/v2.json";

/// A static version-2 account of `token`'s customer; its id and token.
fn account_v2(
    server: &TestServer,
    token: &str,
    services: &[&str],
    actions: &[&str],
) -> (String, String) {
    let policy = json!({"$schema": V2, "kind": "static", "services": services, "actions": actions});
    let response = server
        .authed(Method::POST, "/service-accounts", token)
        .json(&json!({"name": "scoped", "policy": policy}))
        .send()
        .unwrap();
    assert_eq!(response.status(), 201, "creating {policy}");
    let body = json(response);
    (
        body["id"].as_str().unwrap().to_owned(),
        body["token"].as_str().unwrap().to_owned(),
    )
}

/// A 403 `action-not-allowed` whose detail names `action`.
#[track_caller]
fn assert_action_refused(response: reqwest::blocking::Response, action: &str) {
    let problem = assert_problem(response, 403, "action-not-allowed");
    let detail = problem["detail"].as_str().unwrap();
    assert!(detail.contains(action), "{detail}");
}

/// The review's capture: an account scoped to one service (`registry sync`'s) could delete it.
/// With `config:read` and `config:write` it keeps the keys published and does nothing else; a
/// read-only account reads.
#[test]
fn an_account_takes_only_the_actions_its_policy_lists() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let (k3s, _) = create_service(&server, &acme, "k3s");
    let (_, sync) = account_v2(
        &server,
        &acme.token,
        &[&k3s],
        &["config:read", "config:write"],
    );

    let put = server
        .authed(Method::PUT, &format!("/services/{k3s}/config"), &sync)
        .json(&crate::api::upload(&["k1"]))
        .send()
        .unwrap();
    assert_eq!(put.status(), 200);
    assert_eq!(
        server.get(&format!("/services/{k3s}/keys"), &sync).status(),
        200
    );
    let delete = server
        .authed(Method::DELETE, &format!("/services/{k3s}"), &sync)
        .send()
        .unwrap();
    assert_action_refused(delete, "services:write");
    assert_action_refused(
        server.get(&format!("/services/{k3s}"), &sync),
        "services:read",
    );
    assert_action_refused(server.get("/services", &sync), "services:read");
    // A call on the whole customer needs "*" before it needs its action (docs/api.md's table).
    for path in ["/service-accounts", "/audit-events"] {
        assert_problem(server.get(path, &sync), 403, "forbidden");
    }
    // Another customer's service stays a 404, whatever the action.
    let other = server.customer("other", "business");
    let (theirs, _) = create_service(&server, &other, "web");
    assert_eq!(
        server
            .get(&format!("/services/{theirs}/keys"), &sync)
            .status(),
        404
    );
    // The service is still there.
    assert_eq!(
        server
            .get(&format!("/services/{k3s}"), &acme.token)
            .status(),
        200
    );

    let (_, reader) = account_v2(
        &server,
        &acme.token,
        &["*"],
        &["services:read", "config:read"],
    );
    assert_eq!(server.get("/services", &reader).status(), 200);
    assert_eq!(
        server
            .get(&format!("/services/{k3s}/config"), &reader)
            .status(),
        200
    );
    let put = server
        .authed(Method::PUT, &format!("/services/{k3s}/config"), &reader)
        .json(&crate::api::upload(&["k2"]))
        .send()
        .unwrap();
    assert_action_refused(put, "config:write");
    let create = server
        .authed(Method::POST, "/services", &reader)
        .json(&json!({"title": "x", "serviceName": "x"}))
        .send()
        .unwrap();
    assert_action_refused(create, "services:write");
    // services: ["*"] without accounts:* manages no account, and reads no audit trail.
    assert_action_refused(server.get("/service-accounts", &reader), "accounts:read");
    assert_action_refused(server.get("/audit-events", &reader), "audit:read");
}

/// Version 2's schema: `actions` is required where it belongs, refused elsewhere, and each
/// value is known; the schema is served beside version 1.
#[test]
fn version_2_documents_are_checked_with_pointers() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let create = |policy: Value| {
        server
            .authed(Method::POST, "/service-accounts", &acme.token)
            .json(&json!({"name": "x", "policy": policy}))
            .send()
            .unwrap()
    };
    let unknown = create(json!({"$schema": V2, "kind": "static", "services": ["*"],
        "actions": ["config:read", "config:delete"]}));
    let problem = assert_problem(unknown, 400, "validation-failed");
    assert_eq!(pointers(&problem), ["/policy/actions/1"], "{problem}");
    let missing = create(json!({"$schema": V2, "kind": "static", "services": ["*"]}));
    let problem = assert_problem(missing, 400, "validation-failed");
    assert_eq!(pointers(&problem), ["/policy/actions"], "{problem}");
    let misplaced = create(
        json!({"$schema": V2, "kind": "oidc", "actions": ["*"], "rules": [
        {"services": ["*"], "actions": ["config:read"],
         "claims": {"iss": "https://ci.example", "aud": "registry", "sub": "repo:acme/*"}}]}),
    );
    let problem = assert_problem(misplaced, 400, "validation-failed");
    assert_eq!(pointers(&problem), ["/policy/actions"], "{problem}");

    let schema = server
        .request(Method::GET, "/schemas/service-account-policy/v2.json")
        .send()
        .unwrap();
    assert_eq!(schema.status(), 200);
    let schema = json(schema);
    assert!(
        schema["$id"]
            .as_str()
            .unwrap()
            .ends_with("/schemas/service-account-policy/v2.json"),
        "{}",
        schema["$id"]
    );
    assert!(!schema["$id"].as_str().unwrap().contains("registry.invalid"));
}

/// No account mints, widens or re-keys an account broader than itself: actions count like
/// addresses.
#[test]
fn a_manager_cannot_mint_widen_or_take_over_a_broader_account() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let (k3s, _) = create_service(&server, &acme, "k3s");
    let (_, manager) = account_v2(
        &server,
        &acme.token,
        &["*"],
        &["accounts:read", "accounts:write", "config:read"],
    );
    let create = |actions: &[&str]| {
        server
            .authed(Method::POST, "/service-accounts", &manager)
            .json(
                &json!({"name": "minted", "policy": {"$schema": V2, "kind": "static",
                "services": [&k3s], "actions": actions}}),
            )
            .send()
            .unwrap()
    };
    assert_eq!(create(&["config:read"]).status(), 201);
    let problem = assert_problem(create(&["config:read", "config:write"]), 403, "forbidden");
    assert!(
        problem["detail"].as_str().unwrap().contains("config:write"),
        "{problem}"
    );
    assert_problem(create(&["*"]), 403, "forbidden");
    let v1 = server
        .authed(Method::POST, "/service-accounts", &manager)
        .json(&json!({"name": "v1", "policy": {"kind": "static", "services": [&k3s]}}))
        .send()
        .unwrap();
    assert_problem(v1, 403, "forbidden");

    // A narrow account it made may not be widened by it.
    let (narrow, _) = account_v2(&server, &manager, &[&k3s], &["config:read"]);
    let widen = server
        .authed(
            Method::PATCH,
            &format!("/service-accounts/{narrow}"),
            &manager,
        )
        .json(
            &json!({"policy": {"$schema": V2, "kind": "static", "services": [&k3s],
            "actions": ["config:read", "services:write"]}}),
        )
        .send()
        .unwrap();
    assert_problem(widen, 403, "forbidden");
    // Nor may it take the token of a broader account (the bootstrap one, version 1).
    let accounts = json(server.get("/service-accounts", &acme.token));
    let bootstrap = accounts
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["policy"].get("$schema").is_none())
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let take = server
        .authed(
            Method::POST,
            &format!("/service-accounts/{bootstrap}/regenerate-token"),
            &manager,
        )
        .send()
        .unwrap();
    assert_problem(take, 403, "forbidden");
    let delete = server
        .authed(
            Method::DELETE,
            &format!("/service-accounts/{bootstrap}"),
            &manager,
        )
        .send()
        .unwrap();
    assert_problem(delete, 403, "forbidden");
}

/// Explain names the action a policy does not allow.
#[test]
fn explain_takes_an_action() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let (k3s, _) = create_service(&server, &acme, "k3s");
    let policy = json!({"$schema": V2, "kind": "oidc", "rules": [{"services": [&k3s],
        "actions": ["config:read", "config:write"],
        "claims": {"iss": "https://ci.example", "aud": "registry", "sub": "repo:acme/infra:*"}}]});
    let created = server
        .authed(Method::POST, "/service-accounts", &acme.token)
        .json(&json!({"name": "ci", "policy": policy}))
        .send()
        .unwrap();
    let id = json(created)["id"].as_str().unwrap().to_owned();
    let claims = json!({"iss": "https://ci.example", "aud": "registry",
        "sub": "repo:acme/infra:ref:refs/heads/main"});
    let explain = |action: Value| {
        let response = server
            .authed(
                Method::POST,
                &format!("/service-accounts/{id}/explain"),
                &acme.token,
            )
            .json(&json!({"claims": claims, "service": k3s, "action": action}))
            .send()
            .unwrap();
        response
    };
    let allowed = json(explain(json!("config:write")));
    assert_eq!(allowed["decision"], "allow", "{allowed}");
    let refused = json(explain(json!("services:write")));
    assert_eq!(refused["decision"], "deny", "{refused}");
    let reason = &refused["reasons"][0];
    assert_eq!(reason["code"], "action-not-allowed", "{refused}");
    // A code the published schema lists, for the explanation and for the refusal log alike.
    let openapi = json(server.request(Method::GET, "/openapi.json").send().unwrap());
    let schemas = &openapi["components"]["schemas"];
    for codes in [
        &schemas["Explanation"]["properties"]["reasons"]["items"]["properties"]["code"]["enum"],
        &schemas["Refusal"]["properties"]["code"]["enum"],
    ] {
        let codes = codes.as_array().unwrap();
        assert!(codes.contains(&reason["code"]), "{codes:?}");
    }
    assert!(
        reason["message"]
            .as_str()
            .unwrap()
            .contains("services:write"),
        "{refused}"
    );
    let problem = assert_problem(explain(json!("services:delete")), 400, "validation-failed");
    assert_eq!(pointers(&problem), ["/action"]);
    // `"*"` is what a policy grants, not an action a call needs: refused, by a sentence that
    // does not offer it.
    let problem = assert_problem(explain(json!("*")), 400, "validation-failed");
    assert_eq!(pointers(&problem), ["/action"]);
    let detail = problem["errors"][0]["message"].as_str().unwrap_or_default();
    assert!(detail.contains("\"tokens:sign\""), "{problem}");
    assert!(!detail.contains("every action"), "{problem}");
}

/// Finding 7: regenerations at once: one token, the others 409, and the token handed out
/// works; round after round (a call that reads the token after another's write, while that
/// other's answer waits for the write to settle, was once a second 200). The database's write
/// lock is held by the test while the calls arrive, so that they do overlap: on a loaded
/// machine, a call whose thread started late could otherwise begin after another had answered,
/// and a second 200 would then be right. The losers are answered while the winner still waits to
/// write (the registry's guard of a regeneration in flight, not the store's compare of the token
/// read, which would hold them until the write).
#[test]
fn regenerations_at_once_hand_out_one_token() {
    const CALLS: usize = 8;
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let (id, mut old) = super::static_account(&server, &acme, &["*"]);
    for round in 0..6 {
        let barrier = Barrier::new(CALLS);
        let (sender, answered) = std::sync::mpsc::channel::<(u16, Value)>();
        let lock = registry_tests::hold_write_lock(&server.database_url);
        let answers: Vec<(u16, Value)> = std::thread::scope(|scope| {
            for _ in 0..CALLS {
                let (server, barrier, id, token) = (&server, &barrier, &id, &acme.token);
                let sender = sender.clone();
                scope.spawn(move || {
                    barrier.wait();
                    let response = server
                        .authed(
                            Method::POST,
                            &format!("/service-accounts/{id}/regenerate-token"),
                            token,
                        )
                        .send()
                        .unwrap();
                    let status = response.status().as_u16();
                    sender.send((status, json(response))).unwrap();
                });
            }
            drop(sender);
            // The calls that lose answer without writing, while the winner waits for the lock,
            // which is let go once they have (or after 4.5 s, within SQLite's busy timeout).
            let deadline = std::time::Instant::now() + std::time::Duration::from_millis(4500);
            let mut answers = Vec::new();
            while answers.len() < CALLS - 1 {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                match answered.recv_timeout(left) {
                    Ok(answer) => answers.push(answer),
                    Err(_) => break,
                }
            }
            let before_the_write = answers.len();
            drop(lock);
            answers.extend(answered.iter());
            assert_eq!(
                before_the_write,
                CALLS - 1,
                "round {round}: the losing calls waited for the winner's write"
            );
            answers
        });
        let statuses: Vec<u16> = answers.iter().map(|(s, _)| *s).collect();
        assert_eq!(
            statuses.iter().filter(|s| **s == 200).count(),
            1,
            "round {round}: {statuses:?}"
        );
        assert_eq!(
            statuses.iter().filter(|s| **s == 409).count(),
            CALLS - 1,
            "round {round}: {statuses:?}"
        );
        for (_, body) in answers.iter().filter(|(s, _)| *s == 409) {
            assert!(
                body["type"].as_str().unwrap().ends_with("/conflict"),
                "{body}"
            );
            // Told to use the winner's token, which it answers while they are refused.
            let detail = body["detail"].as_str().unwrap();
            assert!(
                detail.contains("being regenerated by another call"),
                "{body}"
            );
        }
        let (_, won) = answers.iter().find(|(s, _)| *s == 200).unwrap();
        let token = won["token"].as_str().unwrap().to_owned();
        assert_eq!(server.get("/services", &token).status(), 200);
        assert_eq!(server.get("/services", &old).status(), 401);
        old = token;
    }
}

/// Finding 3: quotas and the anonymous ceiling are exact when creations race (the review saw 17
/// accounts for a quota of 3, and 20 anonymous services for a ceiling of 3).
#[test]
fn quotas_and_the_anonymous_ceiling_are_exact_under_concurrency() {
    let server = server_with(&[
        ("REGISTRY_MAX_ACCOUNTS_PER_CUSTOMER", "3"),
        ("REGISTRY_ANON_MAX_ACTIVE", "3"),
        ("REGISTRY_ANON_CREATE_PER_HOUR", "1000"),
        ("REGISTRY_WRITES_PER_MINUTE", "1000"),
    ]);
    let acme = server.customer("acme", "business");
    let race = |n: usize, send: &(dyn Fn(usize) -> u16 + Sync)| -> Vec<u16> {
        let barrier = Barrier::new(n);
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..n)
                .map(|i| {
                    let barrier = &barrier;
                    scope.spawn(move || {
                        barrier.wait();
                        send(i)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    };
    // The token verified once, as a working client's is: the race is the creations'.
    assert_eq!(server.get("/service-accounts", &acme.token).status(), 200);
    let accounts = race(30, &|i| {
        server
            .authed(Method::POST, "/service-accounts", &acme.token)
            // Federated accounts: no token to hash, so every request reaches the quota.
            .json(
                &json!({"name": format!("a{i}"), "policy": {"kind": "oidc", "rules": [
                {"services": ["*"], "claims": {"iss": "https://ci.example", "aud": "registry",
                    "sub": format!("repo:acme/r{i}:*")}}]}}),
            )
            .send()
            .unwrap()
            .status()
            .as_u16()
    });
    // The bootstrap account counts.
    assert_eq!(
        accounts.iter().filter(|s| **s == 201).count(),
        2,
        "{accounts:?}"
    );
    assert!(
        accounts.iter().all(|s| *s == 201 || *s == 403),
        "{accounts:?}"
    );
    let listed = json(server.get("/service-accounts", &acme.token));
    assert_eq!(listed.as_array().unwrap().len(), 3);

    let anonymous = race(20, &|_| {
        server
            .request(Method::POST, "/anonymous/services")
            .json(&json!({"title": "race"}))
            .send()
            .unwrap()
            .status()
            .as_u16()
    });
    assert_eq!(
        anonymous.iter().filter(|s| **s == 201).count(),
        3,
        "{anonymous:?}"
    );
    assert!(
        anonymous.iter().all(|s| *s == 201 || *s == 503),
        "{anonymous:?}"
    );
}

/// Finding 6: checking tokens by preflight counts against the customer's explain budget (an
/// anonymous service is its own customer).
#[test]
fn preflight_token_checks_count_against_the_explain_budget() {
    let server = server_with(&[("REGISTRY_EXPLAIN_PER_MINUTE", "3")]);
    let (subdomain, secret) = server.anonymous_service();
    let check = |token: &str| {
        server
            .authed(
                Method::POST,
                &format!("/services/{subdomain}/preflight"),
                token,
            )
            .json(&json!({"token": "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"}))
            .send()
            .unwrap()
    };
    for _ in 0..3 {
        assert_eq!(check(&secret).status(), 200);
    }
    let limited = check(&secret);
    assert!(limited.headers().contains_key("retry-after"));
    assert_problem(limited, 429, "rate-limited");
    // Another anonymous service has its own budget.
    let (other, other_secret) = server.anonymous_service();
    let response = server
        .authed(
            Method::POST,
            &format!("/services/{other}/preflight"),
            &other_secret,
        )
        .json(&json!({"token": "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"}))
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
}

/// Finding 1: a policy refused for its size costs no pattern compilation. The review's body: a
/// claim pattern of `*` and thousands of distinct characters interleaved with `?`, 32 at once
/// (before: 24 → 2,911 MiB resident). Now a 400 naming the size, and memory as it was.
#[test]
fn policies_refused_for_their_size_compile_nothing() {
    let server = TestServer::start_binary();
    let acme = server.customer("acme", "business");
    // About 60 KB of JSON: under the body limit, over the policy's.
    let pattern: String = std::iter::once('*')
        .chain((0..10_000u32).flat_map(|i| [char::from_u32(0x4E00 + i).unwrap(), '?']))
        .collect();
    let body = json!({"name": "huge", "policy": {"kind": "oidc", "rules": [{"services": ["*"],
        "claims": {"iss": "https://ci.example", "aud": "registry", "sub": pattern}}]}});
    let send = || {
        server
            .authed(Method::POST, "/service-accounts", &acme.token)
            .json(&body)
            .send()
            .unwrap()
    };
    let first = assert_problem(send(), 400, "validation-failed");
    assert!(
        pointers(&first).contains(&"/policy".to_owned())
            || pointers(&first).contains(&"/policy/rules/0/claims/sub".to_owned()),
        "{first}"
    );
    let before = server.rss_kib();
    let statuses: Vec<u16> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..32)
            .map(|_| scope.spawn(|| send().status().as_u16()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(statuses.iter().all(|s| *s == 400), "{statuses:?}");
    let grown = server.rss_kib().saturating_sub(before);
    eprintln!("finding 1: 32 policies refused at once, resident memory +{grown} KiB");
    assert!(grown < 16 * 1024, "resident memory grew by {grown} KiB");
}
