//! Hostile bodies on every endpoint that reads one: larger than `REGISTRY_MAX_BODY_BYTES`
//! (declared by Content-Length or streamed in chunks) → 413; nested past the JSON parser's depth
//! limit → 400; deep but parseable values inside real fields → 400. Nothing is created or changed.

use super::{create_service, static_account};
use crate::api::upload;
use registry_tests::server::{assert_problem, json, pointers, TestServer};
use reqwest::blocking::{Body, RequestBuilder};
use reqwest::Method;
use serde_json::{json, Value};

const LIMIT: usize = 65_536;

/// `{"title": "ppp…"}`, exactly `size` bytes of valid JSON.
fn padded(size: usize) -> String {
    let frame = r#"{"title":""}"#.len();
    format!(r#"{{"title":"{}"}}"#, "p".repeat(size - frame))
}

fn nested_value(depth: usize) -> Value {
    let mut value = json!("bottom");
    for i in 0..depth {
        value = if i % 2 == 0 {
            json!([value])
        } else {
            json!({"a": value})
        };
    }
    value
}

#[test]
fn oversized_and_deeply_nested_bodies_are_refused_on_every_endpoint() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let (api, _) = create_service(&server, &acme, "api");
    let (account, _) = static_account(&server, &acme, &["*"]);
    let endpoints: Vec<(Method, String, bool)> = vec![
        (Method::POST, "/services".into(), true),
        (Method::PATCH, format!("/services/{api}"), true),
        (Method::PUT, format!("/services/{api}/config"), true),
        (Method::POST, "/anonymous/services".into(), false),
        (Method::POST, "/service-accounts".into(), true),
        (Method::PATCH, format!("/service-accounts/{account}"), true),
    ];
    // The services and accounts, without the accounts' `lastUsedAt`: the requests below pass
    // authentication, which records the token's use (once a minute), whatever their bodies.
    let state = || {
        let mut accounts = json(
            server
                .authed(Method::GET, "/service-accounts", &acme.token)
                .send()
                .unwrap(),
        );
        for account in accounts.as_array_mut().expect("a list of accounts") {
            account.as_object_mut().unwrap().remove("lastUsedAt");
        }
        let services = json(
            server
                .authed(Method::GET, "/services", &acme.token)
                .send()
                .unwrap(),
        );
        (services, accounts)
    };
    let before = state();
    let deep_arrays = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let deep_objects = format!("{}1{}", r#"{"a":"#.repeat(5_000), "}".repeat(5_000));
    let mut cases = 0;
    for (method, path, authenticated) in &endpoints {
        let request = || {
            let r = server
                .request(method.clone(), path)
                .header("content-type", "application/json");
            if *authenticated {
                r.bearer_auth(&acme.token)
            } else {
                r
            }
        };
        let check = |r: RequestBuilder, status: u16, slug: &str, what: &str| {
            let response = r
                .send()
                .unwrap_or_else(|e| panic!("{method} {path} {what}: {e}"));
            assert_eq!(response.status().as_u16(), status, "{method} {path} {what}");
            assert_problem(response, status, slug);
        };
        // Over the limit by one byte, declared, then streamed without a length; then far over.
        check(
            request().body(padded(LIMIT + 1)),
            413,
            "payload-too-large",
            "limit + 1",
        );
        let chunked = Body::new(std::io::Cursor::new(padded(LIMIT + 1).into_bytes()));
        check(
            request().body(chunked),
            413,
            "payload-too-large",
            "chunked limit + 1",
        );
        check(
            request().body(padded(4 * LIMIT)),
            413,
            "payload-too-large",
            "4 × limit",
        );
        // At the limit: read and judged on its content (a title is not a valid body everywhere).
        let at_limit = request().body(padded(LIMIT)).send().unwrap();
        assert_ne!(
            at_limit.status().as_u16(),
            413,
            "{method} {path}: exactly the limit"
        );
        assert!(
            at_limit.status().as_u16() < 500,
            "{method} {path}: {}",
            at_limit.status()
        );
        // Past the parser's depth limit.
        check(
            request().body(deep_arrays.clone()),
            400,
            "invalid-json",
            "10,000 nested arrays",
        );
        check(
            request().body(deep_objects.clone()),
            400,
            "invalid-json",
            "5,000 nested objects",
        );
        cases += 6;
    }
    // Deep but parseable values inside the fields each endpoint reads.
    let deep = nested_value(100);
    let mut bad_upload = upload(&["k1"]);
    bad_upload["jwks"]["keys"][0]["kid"] = deep.clone();
    bad_upload["openidConfiguration"]["response_types_supported"] = deep.clone();
    let policy = json!({"kind": "oidc", "rules": [{"services": ["*"],
        "claims": {"iss": "https://ci.example", "aud": "x", "sub": deep}}]});
    let fields: Vec<(Method, String, Value)> = vec![
        (Method::POST, "/services".into(), json!({"title": deep})),
        (
            Method::PATCH,
            format!("/services/{api}"),
            json!({"description": deep}),
        ),
        (Method::PUT, format!("/services/{api}/config"), bad_upload),
        (
            Method::POST,
            "/anonymous/services".into(),
            json!({"ttlHours": deep}),
        ),
        (
            Method::POST,
            "/service-accounts".into(),
            json!({"name": "x", "policy": policy}),
        ),
        (
            Method::PATCH,
            format!("/service-accounts/{account}"),
            json!({"policy": {"kind": "static", "services": deep}}),
        ),
    ];
    for (method, path, body) in fields {
        let response = server
            .authed(method.clone(), &path, &acme.token)
            .json(&body)
            .send()
            .unwrap();
        assert_eq!(response.status(), 400, "{method} {path}: deep field");
        assert_problem(response, 400, "validation-failed");
        cases += 1;
    }
    assert_eq!(cases, 6 * 6 + 6);
    let after = state();
    assert_eq!(after, before, "a refused body changed something");
    assert_problem(
        server
            .authed(Method::GET, &format!("/services/{api}/config"), &acme.token)
            .send()
            .unwrap(),
        404,
        "nothing-published",
    );
    assert_eq!(
        server
            .request(Method::GET, "/healthz")
            .send()
            .unwrap()
            .status(),
        200
    );
}

/// PostgreSQL refuses NUL in text columns; a NUL a client sends must be a 400 on every backend,
/// never a 503 that blames the database.
#[test]
fn nul_characters_in_text_fields_are_refused_on_every_backend() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let (api, _) = create_service(&server, &acme, "api");
    let (account, _) = static_account(&server, &acme, &["*"]);
    let nul = "before\u{0}after";
    let cases: Vec<(Method, String, Value)> = vec![
        (Method::POST, "/services".into(), json!({"title": nul})),
        (
            Method::POST,
            "/services".into(),
            json!({"title": "t", "description": nul}),
        ),
        (
            Method::PATCH,
            format!("/services/{api}"),
            json!({"title": nul}),
        ),
        (
            Method::PATCH,
            format!("/services/{api}"),
            json!({"description": nul}),
        ),
        (
            Method::POST,
            "/anonymous/services".into(),
            json!({"title": nul}),
        ),
        (
            Method::POST,
            "/service-accounts".into(),
            json!({"name": nul, "policy": {"kind": "static", "services": ["*"]}}),
        ),
        (
            Method::PATCH,
            format!("/service-accounts/{account}"),
            json!({"name": nul}),
        ),
    ];
    for (method, path, body) in cases {
        let response = server
            .authed(method.clone(), &path, &acme.token)
            .json(&body)
            .send()
            .unwrap();
        assert_eq!(response.status(), 400, "{method} {path} {body}");
        assert_problem(response, 400, "validation-failed");
    }
    // Every NUL of a body is named at once (they are refused before the other checks).
    let response = server
        .authed(Method::POST, "/services", &acme.token)
        .json(&json!({"title": nul, "description": nul, "foo": 1}))
        .send()
        .unwrap();
    let problem = assert_problem(response, 400, "validation-failed");
    assert_eq!(pointers(&problem), ["/title", "/description"], "{problem}");
    // In a path, NUL names nothing: 404, as any missing service.
    for path in ["/services/api%00-acme", "/services/api-acme%00/config"] {
        let response = server
            .authed(Method::GET, path, &acme.token)
            .send()
            .unwrap();
        assert_problem(response, 404, "not-found");
    }
}
