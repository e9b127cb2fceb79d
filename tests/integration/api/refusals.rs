//! Explaining refusals over HTTP (docs/api.md, "Explaining refusals"): `POST
//! /service-accounts/{id}/explain` with real signed tokens agrees with what the real request did,
//! names every token and policy reason code and the near-miss hints, and the refusal log records
//! verified-but-refused requests for their owner only.

use super::{create_account, register_service};
use registry_tests::issuer::{compact, KeyKind, SigningKey, TestIssuer};
use registry_tests::server::{
    assert_problem, claims, insecure_server, json, unix_now, Customer, ServerOptions, TestServer,
    AUDIENCE,
};
use reqwest::Method;
use serde_json::{json, Value};

fn account(server: &TestServer, customer: &Customer, policy: Value) -> String {
    let body = create_account(server, customer, "federated", policy);
    body["id"].as_str().unwrap().to_owned()
}

fn explain(server: &TestServer, customer: &Customer, id: &str, body: Value) -> Value {
    let response = server
        .authed(
            Method::POST,
            &format!("/service-accounts/{id}/explain"),
            &customer.token,
        )
        .json(&body)
        .send()
        .unwrap();
    assert_eq!(response.status(), 200, "{body}");
    assert_eq!(
        response.headers()["content-type"],
        "application/json",
        "an explanation is JSON"
    );
    json(response)
}

fn codes(explained: &Value) -> Vec<String> {
    explained["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["code"].as_str().unwrap().to_owned())
        .collect()
}

fn refusals(server: &TestServer, customer: &Customer, id: &str) -> Vec<Value> {
    let response = server.get(&format!("/service-accounts/{id}/refusals"), &customer.token);
    assert_eq!(response.status(), 200);
    json(response).as_array().unwrap().clone()
}

#[test]
fn explain_with_real_tokens_agrees_with_the_real_request_and_names_the_reason() {
    let server = insecure_server();
    let issuer = TestIssuer::start();
    let iss = issuer.url();
    let acme = server.customer("acme", "business");
    let api = register_service(&server, &acme, "api");
    let web = register_service(&server, &acme, "web");
    let id = account(
        &server,
        &acme,
        json!({"kind": "oidc", "rules": [{"services": [api], "claims": {
            "iss": iss, "aud": AUDIENCE, "sub": "repo:acme/app:ref:refs/heads/main",
            "run_attempt": "1"}}]}),
    );
    let now = unix_now();
    let base = || {
        let mut c = claims(&iss, "repo:acme/app:ref:refs/heads/main");
        c["run_attempt"] = json!("1");
        c
    };
    let with = |edit: &dyn Fn(&mut Value)| {
        let mut c = base();
        edit(&mut c);
        c
    };
    let es = |c: Value| issuer.mint("ES256", c);
    let stranger = SigningKey::generate(KeyKind::P256, "stranger");
    // The discard port: nothing listens there.
    let unreachable_iss = "http://127.0.0.1:9".to_owned();
    // The account also trusts an issuer that does not answer.
    let patched = server
        .authed(
            Method::PATCH,
            &format!("/service-accounts/{id}"),
            &acme.token,
        )
        .json(&json!({"policy": {"kind": "oidc", "rules": [
            {"services": [api], "claims": {"iss": iss, "aud": AUDIENCE,
                "sub": "repo:acme/app:ref:refs/heads/main", "run_attempt": "1"}},
            {"services": [api], "claims": {"iss": unreachable_iss, "aud": AUDIENCE, "sub": "x"}}]}}))
        .send()
        .unwrap();
    assert_eq!(patched.status(), 200);

    // (case, token, service, the code explain must give first, or None for allow)
    let cases: Vec<(&str, String, &str, Option<&str>)> = vec![
        ("good", es(base()), &api, None),
        (
            "other service",
            es(base()),
            &web,
            Some("service-not-allowed"),
        ),
        (
            "sub mismatch",
            es(with(&|c| {
                c["sub"] = json!("repo:evil/app:ref:refs/heads/main")
            })),
            &api,
            Some("claim-mismatch"),
        ),
        (
            "claim missing",
            es(with(&|c| {
                c.as_object_mut().unwrap().remove("run_attempt");
            })),
            &api,
            Some("claim-missing"),
        ),
        (
            "claim type",
            es(with(&|c| c["run_attempt"] = json!({"n": 1}))),
            &api,
            Some("claim-type-mismatch"),
        ),
        (
            "audience",
            es(with(&|c| c["aud"] = json!("someone-else"))),
            &api,
            Some("audience-mismatch"),
        ),
        (
            "expired",
            es(with(&|c| {
                c["iat"] = json!(now - 7200);
                c["exp"] = json!(now - 3600);
            })),
            &api,
            Some("token-expired"),
        ),
        (
            "not yet valid",
            es(with(&|c| c["nbf"] = json!(now + 3600))),
            &api,
            Some("token-not-yet-valid"),
        ),
        (
            "lives too long",
            es(with(&|c| c["exp"] = json!(now + 48 * 3600))),
            &api,
            Some("token-lifetime-too-long"),
        ),
        (
            "signed by a stranger",
            compact(
                &json!({"alg": "ES256", "typ": "JWT", "kid": issuer.key("ES256").kid()}),
                &base(),
                |m| stranger.sign("ES256", m),
            ),
            &api,
            Some("signature-invalid"),
        ),
        (
            "unknown kid",
            compact(
                &json!({"alg": "ES256", "typ": "JWT", "kid": "stranger"}),
                &base(),
                |m| stranger.sign("ES256", m),
            ),
            &api,
            Some("key-unknown"),
        ),
        (
            "alg none",
            issuer.mint_with_header(json!({"alg": "none", "typ": "JWT"}), base()),
            &api,
            Some("algorithm-not-allowed"),
        ),
        (
            "issuer no rule names",
            es(with(&|c| c["iss"] = json!("https://elsewhere.example"))),
            &api,
            Some("issuer-unknown"),
        ),
        (
            "issuer unreachable",
            compact(
                &json!({"alg": "ES256", "typ": "JWT", "kid": "k"}),
                &claims(&unreachable_iss, "x"),
                |m| stranger.sign("ES256", m),
            ),
            &api,
            Some("issuer-unreachable"),
        ),
    ];
    for (case, token, service, expected) in &cases {
        let real = server.get(&format!("/services/{service}"), token).status();
        let explained = explain(
            &server,
            &acme,
            &id,
            json!({"token": token, "service": service}),
        );
        let allowed = explained["decision"] == "allow";
        assert_eq!(
            allowed,
            real == 200,
            "{case}: explain {explained} but the request got {real}"
        );
        match expected {
            None => {
                assert!(allowed, "{case}: {explained}");
                assert_eq!(
                    explained["rule"],
                    json!({"index": 0, "pointer": "/rules/0"})
                );
            }
            Some(code) => assert_eq!(
                codes(&explained).first().map(String::as_str),
                Some(*code),
                "{case}: {explained}"
            ),
        }
        // The token is never echoed.
        assert!(!explained.to_string().contains(token.as_str()), "{case}");
    }

    // Claims alone: no signature, no times; the address against the allowlist.
    let explained = explain(
        &server,
        &acme,
        &id,
        json!({"claims": with(&|c| c["exp"] = json!(0)), "service": api}),
    );
    assert_eq!(explained["decision"], "allow", "{explained}");
    let limited = account(
        &server,
        &acme,
        json!({"kind": "oidc", "ip_allowlist": ["10.0.0.0/8"], "rules": [{"services": ["*"],
            "claims": {"iss": iss, "aud": AUDIENCE, "sub": "*"}}]}),
    );
    let explained = explain(
        &server,
        &acme,
        &limited,
        json!({"claims": base(), "ip": "192.0.2.1"}),
    );
    assert_eq!(codes(&explained), ["address-not-allowed"]);
    assert_eq!(explained["reasons"][0]["pointer"], "/ip_allowlist");
}

/// An account authorizes only against its own customer's services, even with `"*"`: explain
/// refuses another customer's service, or none at all, as the real request gets a 404.
#[test]
fn explain_refuses_a_service_that_is_not_the_accounts_customers() {
    let server = insecure_server();
    let acme = server.customer("acme", "business");
    let globex = server.customer("globex", "business");
    let api = register_service(&server, &acme, "api");
    let theirs = register_service(&server, &globex, "web");
    let api_id = json(server.get(&format!("/services/{api}"), &acme.token))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let decision = |service: &str| {
        let body = json!({"claims": {}, "service": service});
        explain(&server, &acme, &acme.account_id, body)
    };
    for own in [api.clone(), api.to_uppercase(), api_id] {
        assert_eq!(decision(&own)["decision"], "allow", "{own}");
    }
    for foreign in [theirs.as_str(), "does-not-exist"] {
        let explained = decision(foreign);
        assert_eq!(explained["decision"], "deny", "{foreign}: {explained}");
        assert_eq!(codes(&explained), ["service-not-allowed"], "{explained}");
        let real = server.get(&format!("/services/{foreign}"), &acme.token);
        assert_eq!(real.status(), 404);
    }
}

#[test]
fn hints_name_the_near_misses() {
    let server = insecure_server();
    let issuer = TestIssuer::start();
    let iss = issuer.url();
    let acme = server.customer("acme", "business");
    let id = account(
        &server,
        &acme,
        json!({"kind": "oidc", "rules": [
            {"services": ["*"], "claims": {"iss": iss, "aud": AUDIENCE, "sub": "repo:acme/app:ref:refs/heads/main"}},
            {"services": ["*"], "claims": {"iss": iss, "aud": AUDIENCE, "sub": "team/deploy"}}]}),
    );
    let hint_messages = |claims: Value| -> Vec<(u64, String, String)> {
        let token = issuer.mint("ES256", claims);
        let explained = explain(&server, &acme, &id, json!({"token": token}));
        assert_eq!(explained["decision"], "deny");
        explained["hints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| {
                (
                    h["rule"].as_u64().unwrap(),
                    h["pointer"].as_str().unwrap().to_owned(),
                    h["message"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let case = hint_messages(claims(&iss, "repo:Acme/App:ref:refs/heads/main"));
    assert!(
        case.iter()
            .any(|(r, p, m)| *r == 0 && p == "/rules/0/claims/sub" && m.contains("only in case")),
        "{case:?}"
    );
    let slash = hint_messages(claims(&iss, "team/deploy/"));
    assert!(
        slash
            .iter()
            .any(|(r, _, m)| *r == 1 && m.contains("trailing slash")),
        "{slash:?}"
    );
    let environment = hint_messages(claims(&iss, "repo:acme/app:environment:production"));
    assert!(
        environment
            .iter()
            .any(|(r, _, m)| *r == 0 && m.contains("environment")),
        "{environment:?}"
    );
    let mut listed = claims(&iss, "repo:acme/app:ref:refs/heads/main");
    listed["aud"] = json!(["sts.amazonaws.com", "other"]);
    let audience = hint_messages(listed);
    assert!(
        audience
            .iter()
            .any(|(_, p, m)| p == "/rules/0/claims/aud" && m.contains("list of 2")),
        "{audience:?}"
    );
}

/// Past the customer's explain budget, another customer's account is still a 404, as on the
/// account's other calls; only an explanation the caller may have is refused for the budget.
#[test]
fn explain_answers_a_foreign_account_as_not_found_before_its_budget() {
    let server = TestServer::start_with(ServerOptions {
        env: vec![("REGISTRY_EXPLAIN_PER_MINUTE".into(), "1".into())],
        ..ServerOptions::default()
    });
    let acme = server.customer("acme", "business");
    let globex = server.customer("globex", "business");
    let body = json!({"claims": {"iss": "https://ci.example", "aud": AUDIENCE, "sub": "x"}});
    let explain = |token: &str, id: &str| {
        let path = format!("/service-accounts/{id}/explain");
        server
            .authed(Method::POST, &path, token)
            .json(&body)
            .send()
            .unwrap()
    };
    assert_eq!(explain(&acme.token, &acme.account_id).status(), 200);
    assert_problem(explain(&acme.token, &globex.account_id), 404, "not-found");
    assert_problem(explain(&acme.token, &acme.account_id), 429, "rate-limited");
}

#[test]
fn explain_answers_like_the_accounts_other_calls() {
    let server = insecure_server();
    let acme = server.customer("acme", "business");
    let globex = server.customer("globex", "business");
    let id = account(
        &server,
        &acme,
        json!({"kind": "oidc", "rules": [{"services": ["*"], "claims": {
            "iss": "https://ci.example", "aud": AUDIENCE, "sub": "*"}}]}),
    );
    let path = format!("/service-accounts/{id}/explain");
    let body = json!({"claims": {"iss": "https://ci.example", "aud": AUDIENCE, "sub": "x"}});
    let foreign = server
        .authed(Method::POST, &path, &globex.token)
        .json(&body)
        .send()
        .unwrap();
    assert_problem(foreign, 404, "not-found");
    let narrow = json(
        server
            .authed(Method::POST, "/service-accounts", &acme.token)
            .json(&json!({"name": "n", "policy": {"kind": "static", "services": ["none-*"]}}))
            .send()
            .unwrap(),
    );
    let narrow = narrow["token"].as_str().unwrap();
    let forbidden = server
        .authed(Method::POST, &path, narrow)
        .json(&body)
        .send()
        .unwrap();
    assert_problem(forbidden, 403, "forbidden");
    for (bad, pointer) in [
        (json!({}), ""),
        (json!({"token": "a.b.c", "claims": {"iss": "x"}}), ""),
        (json!({"claims": "iss"}), "/claims"),
        (json!({"claims": {}, "ip": "not-an-ip"}), "/ip"),
        (json!({"claims": {}, "extra": 1}), "/extra"),
    ] {
        let response = server
            .authed(Method::POST, &path, &acme.token)
            .json(&bad)
            .send()
            .unwrap();
        let problem = assert_problem(response, 400, "validation-failed");
        assert_eq!(problem["errors"][0]["pointer"], pointer, "{bad}: {problem}");
    }
    // Every problem at once: an unknown member and the missing token or claims.
    let response = server
        .authed(Method::POST, &path, &acme.token)
        .json(&json!({"foo": 1}))
        .send()
        .unwrap();
    let problem = assert_problem(response, 400, "validation-failed");
    let pointers: Vec<&str> = (problem["errors"].as_array().unwrap().iter())
        .map(|e| e["pointer"].as_str().unwrap())
        .collect();
    assert_eq!(pointers, ["/foo", ""], "{problem}");
    let refusals_of_other = server.get(&format!("/service-accounts/{id}/refusals"), &globex.token);
    assert_problem(refusals_of_other, 404, "not-found");
}

#[test]
fn refused_requests_are_recorded_for_their_owner_only() {
    let server = insecure_server();
    let issuer = TestIssuer::start();
    let iss = issuer.url();
    let acme = server.customer("acme", "business");
    let globex = server.customer("globex", "business");
    let api = register_service(&server, &acme, "api");
    let id = account(
        &server,
        &acme,
        json!({"kind": "oidc", "rules": [{"services": [api], "claims": {
            "iss": iss, "aud": AUDIENCE, "sub": "repo:acme/app:ref:refs/heads/main"}}]}),
    );
    let path = format!("/services/{api}");
    let good = issuer.mint("ES256", claims(&iss, "repo:acme/app:ref:refs/heads/main"));
    assert_eq!(server.get(&path, &good).status(), 200);
    assert!(
        refusals(&server, &acme, &id).is_empty(),
        "an accepted request is no refusal"
    );

    let mut env = claims(&iss, "repo:acme/app:environment:prod");
    env["secret_looking_claim"] = json!("do-not-keep");
    let refused = issuer.mint("ES256", env);
    let before = server.anonymous_401_detail(&path);
    let body = assert_problem(
        server
            .request(Method::GET, &path)
            .bearer_auth(&refused)
            .header("x-request-id", "refused-1")
            .send()
            .unwrap(),
        401,
        "unauthorized",
    );
    assert_eq!(body["detail"], before.as_str(), "the 401 says nothing more");
    // A forged token (a stranger's signature) is never recorded.
    let forged = compact(
        &json!({"alg": "ES256", "typ": "JWT", "kid": issuer.key("ES256").kid()}),
        &claims(&iss, "repo:acme/app:environment:prod"),
        |m| SigningKey::generate(KeyKind::P256, "x").sign("ES256", m),
    );
    assert_eq!(server.get(&path, &forged).status(), 401);

    let log = refusals(&server, &acme, &id);
    assert_eq!(log.len(), 1, "{log:?}");
    let record = &log[0];
    assert_eq!(record["code"], "claim-mismatch");
    assert_eq!(record["rule"], 0);
    assert_eq!(record["service"], api.as_str());
    assert_eq!(record["ip"], "127.0.0.1");
    assert_eq!(record["requestId"], "refused-1");
    assert_eq!(record["claims"]["sub"], "repo:acme/app:environment:prod");
    assert!(record["claims"].get("secret_looking_claim").is_none());
    assert!(record["hints"][0]["message"]
        .as_str()
        .unwrap()
        .contains("environment"));
    assert!(!record.to_string().contains(&refused));

    // Another customer trusting the same issuer: a refusal on a service of acme goes to acme
    // only; one on no service, with two customers trusting the issuer, goes nowhere.
    let theirs = account(
        &server,
        &globex,
        json!({"kind": "oidc", "rules": [{"services": ["*"], "claims": {
            "iss": iss, "aud": AUDIENCE, "sub": "repo:globex/*"}}]}),
    );
    assert_eq!(server.get(&path, &refused).status(), 401);
    assert_eq!(server.get("/services", &refused).status(), 401);
    assert!(refusals(&server, &globex, &theirs).is_empty());
    assert_eq!(refusals(&server, &acme, &id).len(), 2);

    // At most 100 kept, newest first.
    for i in 0..25 {
        let response = server
            .request(Method::GET, &path)
            .bearer_auth(&refused)
            .header("x-request-id", format!("flood-{i}"))
            .send()
            .unwrap();
        assert_eq!(response.status(), 401);
    }
    let log = refusals(&server, &acme, &id);
    assert_eq!(log[0]["requestId"], "flood-24");
    assert!(log.len() <= 100);
}

/// `POST /services` outside the caller's patterns is refused by the use case (the subdomain is
/// known only there), after the token verified: recorded like a refusal of the policies.
#[test]
fn a_service_created_outside_the_rules_patterns_is_recorded() {
    let server = insecure_server();
    let issuer = TestIssuer::start();
    let iss = issuer.url();
    let acme = server.customer("acme", "business");
    let sub = "repo:acme/app:ref:refs/heads/main";
    let id = account(
        &server,
        &acme,
        json!({"kind": "oidc", "rules": [{"services": ["web-*"], "claims": {
            "iss": iss, "aud": AUDIENCE, "sub": sub}}]}),
    );
    let token = issuer.mint("ES256", claims(&iss, sub));
    let created = server
        .request(Method::POST, "/services")
        .bearer_auth(&token)
        .header("x-request-id", "outside-1")
        .json(&json!({"title": "API", "serviceName": "api"}))
        .send()
        .unwrap();
    assert_problem(created, 403, "forbidden");
    let log = refusals(&server, &acme, &id);
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0]["code"], "service-not-allowed");
    assert_eq!(log[0]["rule"], 0);
    assert_eq!(log[0]["service"], "api-acme");
    assert_eq!(log[0]["requestId"], "outside-1");
    // Inside them, nothing is refused and nothing recorded.
    let inside = server
        .request(Method::POST, "/services")
        .bearer_auth(&token)
        .json(&json!({"title": "Web", "serviceName": "web-1"}))
        .send()
        .unwrap();
    assert_eq!(inside.status(), 201);
    assert_eq!(refusals(&server, &acme, &id).len(), 1);
}

#[test]
fn an_ambiguous_token_is_recorded_on_each_account_that_accepts_it() {
    let server = insecure_server();
    let issuer = TestIssuer::start();
    let iss = issuer.url();
    let acme = server.customer("acme", "business");
    let policy = json!({"kind": "oidc", "rules": [{"services": ["*"], "claims": {
        "iss": iss, "aud": AUDIENCE, "sub": "repo:acme/*"}}]});
    let first = account(&server, &acme, policy.clone());
    let second = account(&server, &acme, policy);
    let token = issuer.mint("ES256", claims(&iss, "repo:acme/app"));
    let refused = server.get("/services", &token);
    assert_eq!(refused.status(), 401);
    for id in [&first, &second] {
        let log = refusals(&server, &acme, id);
        assert_eq!(log.len(), 1, "{log:?}");
        assert_eq!(log[0]["code"], "account-ambiguous");
        assert_eq!(log[0]["rule"], 0);
        assert!(log[0].get("service").is_none());
    }
    // Chosen with X-Service-Account, the same token is accepted, and nothing more is recorded.
    let chosen = server
        .authed(Method::GET, "/services", &token)
        .header("x-service-account", &first)
        .send()
        .unwrap();
    assert_eq!(chosen.status(), 200);
    assert_eq!(refusals(&server, &acme, &first).len(), 1);
}

/// A token its issuer signed but its times refuse (the CI job's token expired, the cluster's
/// clock runs ahead) is recorded with its reason code and the rule that would have admitted it;
/// one with a stranger's signature is not, whatever its times.
#[test]
fn a_token_refused_for_its_times_is_recorded_once_its_signature_verified() {
    let server = insecure_server();
    let issuer = TestIssuer::start();
    let iss = issuer.url();
    let acme = server.customer("acme", "business");
    let api = register_service(&server, &acme, "api");
    let sub = "repo:acme/app:ref:refs/heads/main";
    let id = account(
        &server,
        &acme,
        json!({"kind": "oidc", "rules": [{"services": [api], "claims": {
            "iss": iss, "aud": AUDIENCE, "sub": sub}}]}),
    );
    let path = format!("/services/{api}");
    let now = unix_now();
    let with = |change: &dyn Fn(&mut Value)| {
        let mut c = claims(&iss, sub);
        change(&mut c);
        c
    };
    let forged = compact(
        &json!({"alg": "ES256", "typ": "JWT", "kid": issuer.key("ES256").kid()}),
        &with(&|c| c["exp"] = json!(now - 3600)),
        |m| SigningKey::generate(KeyKind::P256, "x").sign("ES256", m),
    );
    let before = server.anonymous_401_detail(&path);
    let body = assert_problem(server.get(&path, &forged), 401, "unauthorized");
    assert_eq!(body["detail"], before.as_str(), "the 401 says nothing more");
    assert!(refusals(&server, &acme, &id).is_empty(), "a forged token");

    let cases = [
        ("token-expired", with(&|c| c["exp"] = json!(now - 3600))),
        (
            "token-not-yet-valid",
            with(&|c| c["nbf"] = json!(now + 3600)),
        ),
        (
            "token-lifetime-too-long",
            with(&|c| c["exp"] = json!(now + 48 * 3600)),
        ),
    ];
    for (code, claims) in &cases {
        let token = issuer.mint("ES256", claims.clone());
        let body = assert_problem(server.get(&path, &token), 401, "unauthorized");
        assert_eq!(body["detail"], before.as_str(), "{code}: says nothing more");
        let log = refusals(&server, &acme, &id);
        let record = &log[0];
        assert_eq!(record["code"], *code, "{log:?}");
        assert_eq!(record["rule"], 0, "the rule that would have admitted it");
        assert_eq!(record["service"], api.as_str());
        assert_eq!(record["claims"]["sub"], sub);
        assert!(!record.to_string().contains(&token));
    }
    assert_eq!(refusals(&server, &acme, &id).len(), cases.len());
    // A path naming no service is no one's refusal, as a policy's is not.
    let expired = issuer.mint("ES256", cases[0].1.clone());
    assert_eq!(server.get("/services/missing-acme", &expired).status(), 401);
    assert_eq!(refusals(&server, &acme, &id).len(), cases.len());
}
