use super::{create_account, register_service};
use registry_tests::server::{assert_problem, json, pointers, Customer, ServerOptions, TestServer};
use reqwest::Method;
use serde_json::{json, Value};

fn named_service(server: &TestServer, customer: &Customer, name: &str) {
    register_service(server, customer, name);
}

fn account(server: &TestServer, customer: &Customer, policy: Value) -> Value {
    create_account(server, customer, "ci", policy)
}

#[test]
fn crud_of_service_accounts_with_a_one_time_token() {
    let server = TestServer::start_binary(); // reads its log
    let acme = server.customer("acme", "business");
    named_service(&server, &acme, "api");
    let created = server
        .authed(Method::POST, "/service-accounts", &acme.token)
        .json(&json!({"name": "deployer", "policy": {"kind": "static", "services": ["api-acme"]}}))
        .send()
        .unwrap();
    assert_eq!(created.status(), 201);
    let location = created.headers()["location"].to_str().unwrap().to_owned();
    let created = json(created);
    let id = created["id"].as_str().unwrap();
    assert_eq!(location, format!("{}/service-accounts/{id}", server.base));
    assert_eq!(created["name"], "deployer");
    assert_eq!(
        created["policy"],
        json!({"kind": "static", "services": ["api-acme"]})
    );
    let token = created["token"].as_str().unwrap();
    assert!(token.starts_with("rgst_"));

    let list = json(
        server
            .authed(Method::GET, "/service-accounts", &acme.token)
            .send()
            .unwrap(),
    );
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 2);
    assert!(list.iter().all(|a| a.get("token").is_none()));
    let one = json(
        server
            .authed(Method::GET, &format!("/service-accounts/{id}"), &acme.token)
            .send()
            .unwrap(),
    );
    assert_eq!(one["policy"], created["policy"]);
    assert!(one.get("token").is_none());

    let renamed = server
        .authed(
            Method::PATCH,
            &format!("/service-accounts/{id}"),
            &acme.token,
        )
        .json(&json!({"name": "deployer-2"}))
        .send()
        .unwrap();
    assert_eq!(json(renamed)["name"], "deployer-2");

    assert_eq!(
        server
            .authed(Method::GET, "/services/api-acme", token)
            .send()
            .unwrap()
            .status(),
        200
    );
    let deleted = server
        .authed(
            Method::DELETE,
            &format!("/service-accounts/{id}"),
            &acme.token,
        )
        .send()
        .unwrap();
    assert_eq!(deleted.status(), 204);
    assert_problem(
        server
            .authed(Method::GET, "/services/api-acme", token)
            .send()
            .unwrap(),
        401,
        "unauthorized",
    );
    assert_problem(
        server
            .authed(Method::GET, &format!("/service-accounts/{id}"), &acme.token)
            .send()
            .unwrap(),
        404,
        "not-found",
    );
    assert!(!server.final_log().contains(token));
}

/// A rename and a narrowing of one account sent at once: both answer 200 and both are in effect,
/// neither undone by the other's write (the one that read the account before the other wrote
/// is made again over what is stored).
#[test]
fn patches_at_once_never_undo_each_other() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    named_service(&server, &acme, "api");
    for round in 0..12 {
        let created = create_account(
            &server,
            &acme,
            &format!("r{round}"),
            json!({"kind": "static", "services": ["*"]}),
        );
        let path = format!("/service-accounts/{}", created["id"].as_str().unwrap());
        let name = format!("renamed-{round}");
        let patch = |body: Value| {
            let sent = server.authed(Method::PATCH, &path, &acme.token).json(&body);
            let answer = sent.send().unwrap();
            (answer.status().as_u16(), answer.json::<Value>().unwrap())
        };
        let narrowing = json!({"kind": "static", "services": ["api-acme"]});
        let (renamed, narrowed) = std::thread::scope(|scope| {
            let rename = scope.spawn(|| patch(json!({"name": name})));
            let narrow = scope.spawn(|| patch(json!({"policy": narrowing})));
            (rename.join().unwrap(), narrow.join().unwrap())
        });
        assert_eq!(
            (renamed.0, narrowed.0),
            (200, 200),
            "{renamed:?} {narrowed:?}"
        );
        assert_eq!(renamed.1["name"], json!(name), "round {round}");
        assert_eq!(narrowed.1["policy"], narrowing, "round {round}");
        let stored = json(server.get(&path, &acme.token));
        assert_eq!(stored["name"], json!(name), "round {round}: {stored}");
        assert_eq!(stored["policy"], narrowing, "round {round}: {stored}");
    }
}

#[test]
fn policies_naming_services_the_customer_does_not_own_are_refused() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let other = server.customer("other", "business");
    named_service(&server, &acme, "api");
    named_service(&server, &other, "web");
    let response = server
        .authed(Method::POST, "/service-accounts", &acme.token)
        .json(&json!({"name": "x", "policy": {"kind": "static", "services": ["api-acme", "typo-acme", "web-other", "api-*"]}}))
        .send()
        .unwrap();
    let problem = assert_problem(response, 400, "unknown-services");
    assert_eq!(
        pointers(&problem),
        ["/policy/services/1", "/policy/services/2"]
    );
    let oidc = server
        .authed(Method::POST, "/service-accounts", &acme.token)
        .json(&json!({"name": "x", "policy": {"kind": "oidc", "rules": [
            {"services": ["*"], "claims": {"iss": "https://token.actions.githubusercontent.com", "aud": "registry", "sub": "repo:acme/*"}},
            {"services": ["nope-acme"], "claims": {"iss": "https://gitlab.com", "aud": "registry", "sub": "x"}}
        ]}}))
        .send()
        .unwrap();
    let problem = assert_problem(oidc, 400, "unknown-services");
    assert_eq!(pointers(&problem), ["/policy/rules/1/services/0"]);
    // The same check on PATCH.
    let created = account(
        &server,
        &acme,
        json!({"kind": "static", "services": ["api-acme"]}),
    );
    let patch = server
        .authed(
            Method::PATCH,
            &format!("/service-accounts/{}", created["id"].as_str().unwrap()),
            &acme.token,
        )
        .json(&json!({"policy": {"kind": "static", "services": ["web-other"]}}))
        .send()
        .unwrap();
    assert_problem(patch, 400, "unknown-services");
}

#[test]
fn invalid_policies_report_every_problem_under_policy() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let response = server
        .authed(Method::POST, "/service-accounts", &acme.token)
        .json(&json!({"policy": {"kind": "static", "services": [], "rules": [], "color": "red"}}))
        .send()
        .unwrap();
    let problem = assert_problem(response, 400, "validation-failed");
    let got = pointers(&problem);
    for expected in [
        "/name",
        "/policy/services",
        "/policy/rules",
        "/policy/color",
    ] {
        assert!(
            got.iter().any(|p| p == expected),
            "{expected} missing in {got:?}"
        );
    }
    let missing_sub = server
        .authed(Method::POST, "/service-accounts", &acme.token)
        .json(&json!({"name": "x", "policy": {"kind": "oidc", "rules": [{"services": ["*"], "claims": {"iss": "https://x", "aud": "a"}}]}}))
        .send()
        .unwrap();
    let problem = assert_problem(missing_sub, 400, "validation-failed");
    assert_eq!(pointers(&problem), ["/policy/rules/0/claims/sub"]);
    // Unique as matched: one name in two cases, one address in two spellings.
    let repeated = server
        .authed(Method::POST, "/service-accounts", &acme.token)
        .json(
            &json!({"name": "x", "policy": {"kind": "static", "services": ["ci-*", "CI-*"],
            "ip_allowlist": ["2001:db8::1", "2001:DB8::1/128"]}}),
        )
        .send()
        .unwrap();
    let problem = assert_problem(repeated, 400, "validation-failed");
    assert_eq!(
        pointers(&problem),
        ["/policy/services/1", "/policy/ip_allowlist/1"]
    );
}

#[test]
fn kind_cannot_change_and_oidc_accounts_have_no_token() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let oidc = account(
        &server,
        &acme,
        json!({"kind": "oidc", "rules": [
            {"services": ["*"], "claims": {"iss": "https://issuer.example", "aud": "registry", "sub": "*"}}
        ]}),
    );
    assert!(oidc.get("token").is_none());
    let warnings = oidc["warnings"].as_array().expect("a warning for sub *");
    assert!(warnings[0].as_str().unwrap().contains("sub"));
    let id = oidc["id"].as_str().unwrap();
    let change = server
        .authed(
            Method::PATCH,
            &format!("/service-accounts/{id}"),
            &acme.token,
        )
        .json(&json!({"policy": {"kind": "static", "services": ["*"]}}))
        .send()
        .unwrap();
    let problem = assert_problem(change, 400, "kind-immutable");
    assert_eq!(pointers(&problem), ["/policy/kind"]);
    let regenerate = server
        .authed(
            Method::POST,
            &format!("/service-accounts/{id}/regenerate-token"),
            &acme.token,
        )
        .send()
        .unwrap();
    assert_problem(regenerate, 400, "validation-failed");
}

#[test]
fn regeneration_invalidates_the_old_token_at_once() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let created = account(&server, &acme, json!({"kind": "static", "services": ["*"]}));
    let id = created["id"].as_str().unwrap();
    let old = created["token"].as_str().unwrap().to_owned();
    assert_eq!(
        server
            .authed(Method::GET, "/services", &old)
            .send()
            .unwrap()
            .status(),
        200
    );

    // Hammer the API with the old token while regenerating: once the regeneration has
    // returned, no request sent afterwards may succeed.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let regenerated_at = std::sync::Arc::new(std::sync::Mutex::new(None::<std::time::Instant>));
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let (stop, regenerated_at, old) = (stop.clone(), regenerated_at.clone(), old.clone());
            let client = reqwest::blocking::Client::new();
            let url = format!("{}/services", server.base);
            std::thread::spawn(move || {
                let mut late_successes = 0;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let sent = std::time::Instant::now();
                    let status = client.get(&url).bearer_auth(&old).send().unwrap().status();
                    let after_regeneration =
                        regenerated_at.lock().unwrap().is_some_and(|at| sent > at);
                    if after_regeneration && status == 200 {
                        late_successes += 1;
                    }
                }
                late_successes
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let response = server
        .authed(
            Method::POST,
            &format!("/service-accounts/{id}/regenerate-token"),
            &acme.token,
        )
        .send()
        .unwrap();
    *regenerated_at.lock().unwrap() = Some(std::time::Instant::now());
    assert_eq!(response.status(), 200);
    let body = json(response);
    assert_eq!(body["id"], id);
    let new = body["token"].as_str().unwrap();
    assert_ne!(new, old);
    std::thread::sleep(std::time::Duration::from_millis(100));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let late: i32 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert_eq!(
        late, 0,
        "requests with the old token succeeded after regeneration"
    );
    assert_problem(
        server
            .authed(Method::GET, "/services", &old)
            .send()
            .unwrap(),
        401,
        "unauthorized",
    );
    assert_eq!(
        server
            .authed(Method::GET, "/services", new)
            .send()
            .unwrap()
            .status(),
        200
    );
}

/// The authorization matrix: caller scope × endpoint × owner (docs/api.md, "Authentication").
#[test]
fn authorization_matrix() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let other = server.customer("other", "business");
    for name in ["web-1", "db"] {
        named_service(&server, &acme, name);
    }
    named_service(&server, &other, "web-9");
    let scoped = account(
        &server,
        &acme,
        json!({"kind": "static", "services": ["web-*"]}),
    );
    let scoped = scoped["token"].as_str().unwrap();

    // (caller, method, path, body, expected status)
    let cases: Vec<(&str, Method, &str, Value, u16)> = vec![
        (
            scoped,
            Method::GET,
            "/services/web-1-acme",
            json!(null),
            200,
        ),
        (
            scoped,
            Method::PATCH,
            "/services/web-1-acme",
            json!({"title": "t"}),
            200,
        ),
        (scoped, Method::GET, "/services/db-acme", json!(null), 403),
        (
            scoped,
            Method::PATCH,
            "/services/db-acme",
            json!({"title": "t"}),
            403,
        ),
        (
            scoped,
            Method::DELETE,
            "/services/db-acme",
            json!(null),
            403,
        ),
        (
            scoped,
            Method::PUT,
            "/services/db-acme/config",
            super::upload(&["k"]),
            403,
        ),
        (
            scoped,
            Method::GET,
            "/services/web-9-other",
            json!(null),
            404,
        ),
        (
            scoped,
            Method::GET,
            "/services/missing-acme",
            json!(null),
            404,
        ),
        (
            scoped,
            Method::POST,
            "/services",
            json!({"title": "t", "serviceName": "web-2"}),
            201,
        ),
        (
            scoped,
            Method::POST,
            "/services",
            json!({"title": "t", "serviceName": "api"}),
            403,
        ),
        (
            scoped,
            Method::POST,
            "/services",
            json!({"title": "t"}),
            403,
        ),
        (scoped, Method::GET, "/service-accounts", json!(null), 403),
        (
            scoped,
            Method::POST,
            "/service-accounts",
            json!({"name": "x", "policy": {"kind": "static", "services": ["*"]}}),
            403,
        ),
        (
            &acme.token,
            Method::GET,
            "/services/db-acme",
            json!(null),
            200,
        ),
        (
            &acme.token,
            Method::GET,
            "/services/web-9-other",
            json!(null),
            404,
        ),
        (
            &other.token,
            Method::GET,
            "/services/web-1-acme",
            json!(null),
            404,
        ),
    ];
    for (token, method, path, body, expected) in cases {
        let mut request = server.authed(method.clone(), path, token);
        if !body.is_null() {
            request = request.json(&body);
        }
        let status = request.send().unwrap().status().as_u16();
        assert_eq!(status, expected, "{method} {path}");
    }
    let visible = json(
        server
            .authed(Method::GET, "/services", scoped)
            .send()
            .unwrap(),
    );
    let mut names: Vec<&str> = visible
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["subdomain"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["web-1-acme", "web-2-acme"]);
}

#[test]
fn ip_allowlists_apply_to_every_call_v4_and_v6() {
    let server = TestServer::start_with(ServerOptions {
        env: vec![("REGISTRY_TRUSTED_PROXIES".into(), "127.0.0.1/32".into())],
        ..ServerOptions::default()
    });
    let acme = server.customer("acme", "business");
    let v4 = account(
        &server,
        &acme,
        json!({"kind": "static", "services": ["*"], "ip_allowlist": ["203.0.113.0/24"]}),
    );
    let v6 = account(
        &server,
        &acme,
        json!({"kind": "static", "services": ["*"], "ip_allowlist": ["2001:db8::/32", "198.51.100.7"]}),
    );
    let (v4, v6) = (v4["token"].as_str().unwrap(), v6["token"].as_str().unwrap());
    let call = |token: &str, forwarded: Option<&str>| {
        let mut request = server.authed(Method::GET, "/services", token);
        if let Some(f) = forwarded {
            request = request.header("x-forwarded-for", f);
        }
        request.send().unwrap().status().as_u16()
    };
    assert_eq!(call(v4, None), 403);
    assert_eq!(call(v4, Some("203.0.113.44")), 200);
    assert_eq!(call(v4, Some("203.0.113.44, 192.0.2.1")), 403);
    assert_eq!(call(v6, Some("2001:db8::1")), 200);
    assert_eq!(call(v6, Some("198.51.100.7")), 200);
    assert_eq!(call(v6, Some("2001:db9::1")), 403);
    let forbidden = server.authed(Method::GET, "/services", v4).send().unwrap();
    assert_problem(forbidden, 403, "forbidden");
}

/// docs/api.md, "Authentication": no account can mint an account broader than itself, and addresses
/// are part of an account's reach: one limited to an office network must not create, widen or take
/// over the token of an account usable from anywhere.
#[test]
fn an_address_limited_account_only_manages_accounts_inside_its_addresses() {
    let server = TestServer::start_with(ServerOptions {
        env: vec![("REGISTRY_TRUSTED_PROXIES".into(), "127.0.0.1/32".into())],
        ..ServerOptions::default()
    });
    let acme = server.customer("acme", "business");
    let office = account(
        &server,
        &acme,
        json!({"kind": "static", "services": ["*"], "ip_allowlist": ["203.0.113.0/24"]}),
    );
    let office_id = office["id"].as_str().unwrap().to_owned();
    let office = office["token"].as_str().unwrap();
    let from_office = |method: Method, path: &str| {
        server
            .authed(method, path, office)
            .header("x-forwarded-for", "203.0.113.44")
    };
    let create = |allowlist: Option<Value>| {
        let mut policy = json!({"kind": "static", "services": ["*"]});
        if let Some(list) = allowlist {
            policy["ip_allowlist"] = list;
        }
        from_office(Method::POST, "/service-accounts")
            .json(&json!({"name": "made", "policy": policy}))
            .send()
            .unwrap()
    };
    assert_problem(create(None), 403, "forbidden");
    assert_problem(create(Some(json!(["198.51.100.0/24"]))), 403, "forbidden");
    assert_problem(
        create(Some(json!(["203.0.113.7", "192.0.2.1"]))),
        403,
        "forbidden",
    );
    let made = create(Some(json!(["203.0.113.7", "::ffff:203.0.113.8"])));
    assert_eq!(made.status(), 201);
    let made = json(made);
    let made_path = format!("/service-accounts/{}", made["id"].as_str().unwrap());

    let widened = from_office(Method::PATCH, &made_path)
        .json(&json!({"policy": {"kind": "static", "services": ["*"]}}))
        .send()
        .unwrap();
    assert_problem(widened, 403, "forbidden");
    let kept = json(server.get(&made_path, &acme.token));
    assert_eq!(kept["policy"]["ip_allowlist"][0], "203.0.113.7", "{kept}");

    // Accounts usable from anywhere are out of its reach: not re-keyed, renamed, narrowed (then
    // re-keyed) or deleted.
    let bootstrap = format!("/service-accounts/{}", acme.account_id);
    let taken = from_office(Method::POST, &format!("{bootstrap}/regenerate-token"))
        .send()
        .unwrap();
    assert_problem(taken, 403, "forbidden");
    for body in [
        json!({"name": "renamed"}),
        json!({"policy": {"kind": "static", "services": ["*"], "ip_allowlist": ["203.0.113.9"]}}),
    ] {
        let changed = from_office(Method::PATCH, &bootstrap)
            .json(&body)
            .send()
            .unwrap();
        assert_problem(changed, 403, "forbidden");
    }
    let deleted = from_office(Method::DELETE, &bootstrap).send().unwrap();
    assert_problem(deleted, 403, "forbidden");
    let untouched = json(server.get(&bootstrap, &acme.token));
    assert_eq!(
        untouched["policy"],
        json!({"kind": "static", "services": ["*"]})
    );
    assert_eq!(server.get("/services", &acme.token).status(), 200);
    // Nor can it free itself.
    let own = format!("/service-accounts/{office_id}");
    let freed = from_office(Method::PATCH, &own)
        .json(&json!({"policy": {"kind": "static", "services": ["*"]}}))
        .send()
        .unwrap();
    assert_problem(freed, 403, "forbidden");
    let rekeyed = from_office(Method::POST, &format!("{made_path}/regenerate-token"))
        .send()
        .unwrap();
    assert_eq!(rekeyed.status(), 200);
    let removed = from_office(Method::DELETE, &made_path).send().unwrap();
    assert_eq!(removed.status(), 204);
    let made = create(Some(json!(["203.0.113.7"])));
    let made_path = format!("/service-accounts/{}", json(made)["id"].as_str().unwrap());

    // The unlimited bootstrap account still grants any addresses.
    let unlimited = server
        .authed(Method::PATCH, &made_path, &acme.token)
        .json(&json!({"policy": {"kind": "static", "services": ["*"]}}))
        .send()
        .unwrap();
    assert_eq!(unlimited.status(), 200);
}

/// A stored policy is read back without the upload schema (a stricter schema later must not
/// lock accounts out), and one that cannot be read at all is a 500 for that account alone: the
/// list, the other accounts and a server starting on the database are not affected.
#[test]
fn a_corrupt_stored_policy_is_a_500_for_that_account_only() {
    let server = TestServer::start_binary(); // reads its log
    let acme = server.customer("acme", "business");
    let broken = account(
        &server,
        &acme,
        json!({"kind": "oidc", "rules": [{"services": ["*"],
            "claims": {"iss": "https://ci.example", "aud": "registry", "sub": "x"}}]}),
    )["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let legacy = account(&server, &acme, json!({"kind": "static", "services": ["*"]}))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    registry_tests::execute_sql(
        &server.database_url,
        &format!(
            "UPDATE service_accounts SET policy = '{{\"kind\":\"oidc\",\"rules\":[{{\"claims\":{{\"iss\":7}}}}]}}' WHERE id = '{broken}'"
        ),
    );
    registry_tests::execute_sql(
        &server.database_url,
        &format!(
            "UPDATE service_accounts SET policy = '{{\"kind\":\"static\",\"services\":[\"*\"],\"note\":\"older\"}}' WHERE id = '{legacy}'"
        ),
    );
    let one = server.get(&format!("/service-accounts/{broken}"), &acme.token);
    assert_problem(one, 500, "internal");
    let log = server.log_when(|log| log.contains(&broken));
    assert!(log.contains(&broken), "the log names the row:\n{log}");
    let other = server.get(&format!("/service-accounts/{legacy}"), &acme.token);
    assert_eq!(other.status(), 200);
    assert_eq!(json(other)["policy"]["note"], "older");
    let list = server.get("/service-accounts", &acme.token);
    assert_eq!(list.status(), 200);
    let ids: Vec<String> = json(list)
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap().to_owned())
        .collect();
    assert!(ids.contains(&legacy) && !ids.contains(&broken), "{ids:?}");
    // A server starting on this database loads every other account.
    let replica = TestServer::start_with(ServerOptions {
        database_url: Some(server.database_url.clone()),
        ..ServerOptions::default()
    });
    assert_eq!(replica.get("/services", &acme.token).status(), 200);
}
