use registry_tests::server::{assert_problem, json, pointers, ServerOptions, TestServer};
use reqwest::Method;
use serde_json::json;

#[test]
fn every_credential_failure_is_the_same_401() {
    let server = TestServer::start_binary(); // reads its log
    let acme = server.customer("acme", "business");
    let mut forged = acme.token.clone();
    forged.pop();
    forged.push(if acme.token.ends_with('a') { 'b' } else { 'a' });
    let unknown = format!("rgst_{}_{}", "0".repeat(16), "0".repeat(52));
    let attempts: Vec<Option<String>> = vec![
        None,
        Some("Basic dXNlcjpwYXNz".into()),
        Some("Bearer".into()),
        Some("Bearer not-a-token".into()),
        Some(format!("Bearer {forged}")),
        Some(format!("Bearer {unknown}")),
        Some("Bearer eyJhbGciOiJub25lIn0.eyJpc3MiOiJ4In0.".into()),
    ];
    let mut details = Vec::new();
    for authorization in attempts {
        let mut request = server.request(Method::GET, "/services");
        if let Some(value) = &authorization {
            request = request.header("authorization", value);
        }
        let response = request.send().unwrap();
        let challenge = response
            .headers()
            .get("www-authenticate")
            .map(|v| v.to_str().unwrap().to_owned());
        let body = assert_problem(response, 401, "unauthorized");
        assert!(
            challenge.unwrap_or_default().starts_with("Bearer"),
            "{authorization:?}"
        );
        details.push(body["detail"].as_str().unwrap().to_owned());
    }
    assert!(
        details.windows(2).all(|w| w[0] == w[1]),
        "details differ: {details:?}"
    );
    let log = server.final_log();
    assert!(!log.contains(&forged));
    assert!(!log.contains(&acme.token));
}

#[test]
fn malformed_bodies_are_problems() {
    let server = TestServer::start_with(ServerOptions {
        env: vec![("REGISTRY_MAX_BODY_BYTES".into(), "1024".into())],
        ..ServerOptions::default()
    });
    let acme = server.customer("acme", "business");
    let syntax = server
        .authed(Method::POST, "/services", &acme.token)
        .header("content-type", "application/json")
        .body("{\"title\": ")
        .send()
        .unwrap();
    let problem = assert_problem(syntax, 400, "invalid-json");
    assert_eq!(pointers(&problem), [""], "{problem}");
    let reason = problem["errors"][0]["message"].as_str().unwrap();
    assert!(
        !reason.is_empty() && problem["detail"].as_str().unwrap().contains(reason),
        "{problem}"
    );
    let not_object = server
        .authed(Method::POST, "/services", &acme.token)
        .json(&json!(["x"]))
        .send()
        .unwrap();
    assert_problem(not_object, 400, "validation-failed");
    let media = server
        .authed(Method::POST, "/services", &acme.token)
        .header("content-type", "text/plain")
        .body("title=x")
        .send()
        .unwrap();
    assert_problem(media, 415, "unsupported-media-type");
    let undeclared = server
        .authed(Method::POST, "/services", &acme.token)
        .body("{\"title\": \"x\"}")
        .send()
        .unwrap();
    assert_problem(undeclared, 415, "unsupported-media-type");
    let large = server
        .authed(Method::POST, "/services", &acme.token)
        .json(&json!({"title": "x".repeat(2000)}))
        .send()
        .unwrap();
    assert_problem(large, 413, "payload-too-large");
    let deep = format!("{}{}", "[".repeat(500), "]".repeat(500));
    let nested = server
        .authed(Method::POST, "/services", &acme.token)
        .header("content-type", "application/json")
        .body(deep)
        .send()
        .unwrap();
    assert_problem(nested, 400, "invalid-json");
    // A member named twice has no one meaning (serde_json would keep the last, others the first).
    let twice = server
        .authed(Method::POST, "/services", &acme.token)
        .header("content-type", "application/json")
        .body(r#"{"title": "first", "title": "second"}"#)
        .send()
        .unwrap();
    let problem = assert_problem(twice, 400, "invalid-json");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains(r#"the member "title" appears twice"#)),
        "{problem}"
    );
    assert!(
        problem["errors"][0]["message"]
            .as_str()
            .is_some_and(|d| d.contains(r#"the member "title" appears twice"#)),
        "{problem}"
    );
    // Nothing was created by any of it.
    let list: serde_json::Value = server
        .authed(Method::GET, "/services", &acme.token)
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(list, json!([]));
}

/// A call that takes no body refuses one it cannot take, as any body is refused, rather than
/// ignore it: another type (415), text that is not JSON (400), a member (400, its pointer).
/// Nothing, or `{}`, is taken.
#[test]
fn calls_without_a_body_refuse_one() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let id = acme.account_id.clone();
    let regenerate = format!("/service-accounts/{id}/regenerate-token");
    let post = |content_type: Option<&str>, body: &str| {
        let mut request = server.authed(Method::POST, &regenerate, &acme.token);
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        request.body(body.to_owned()).send().unwrap()
    };
    assert_problem(post(Some("text/plain"), "x"), 415, "unsupported-media-type");
    assert_problem(
        post(Some("application/json"), "not json"),
        400,
        "invalid-json",
    );
    let member = assert_problem(
        post(Some("application/json"), "{\"x\": 1}"),
        400,
        "validation-failed",
    );
    assert_eq!(member["errors"][0]["pointer"], "/x", "{member}");
    let message = member["errors"][0]["message"].as_str().unwrap();
    assert!(message.contains("takes no member"), "{member}");
    // A DELETE given a body it cannot take deletes nothing (the probe's `{"confirm": false}`
    // deleted the account); without credentials it is a 401 whatever its body.
    let sub = super::register_service(&server, &acme, "api");
    let created = server
        .authed(Method::POST, "/service-accounts", &acme.token)
        .json(&json!({"name": "other", "policy": {"kind": "static", "services": ["*"]}}))
        .send()
        .unwrap();
    let other = json(created)["id"].as_str().unwrap().to_owned();
    let published = server
        .authed(Method::PUT, &format!("/services/{sub}/config"), &acme.token)
        .json(&super::upload(&["k1"]))
        .send()
        .unwrap();
    assert_eq!(published.status(), 200);
    for path in [
        format!("/services/{sub}"),
        format!("/services/{sub}/domain"),
        format!("/services/{sub}/config?source=default"),
        format!("/services/{sub}/keys/k1"),
        format!("/service-accounts/{other}"),
    ] {
        let delete = |token: &str, content_type: &str, body: &str| {
            server
                .authed(Method::DELETE, &path, token)
                .header("content-type", content_type)
                .body(body.to_owned())
                .send()
                .unwrap()
        };
        let member = assert_problem(
            delete(&acme.token, "application/json", "{\"confirm\": false}"),
            400,
            "validation-failed",
        );
        assert_eq!(pointers(&member), ["/confirm"], "{path}");
        assert_problem(
            delete(&acme.token, "application/json", "{bad"),
            400,
            "invalid-json",
        );
        assert_problem(
            delete(&acme.token, "application/xml", "<x/>"),
            415,
            "unsupported-media-type",
        );
        let large = format!("\"{}\"", "x".repeat(70_000));
        assert_problem(
            delete(&acme.token, "application/json", &large),
            413,
            "payload-too-large",
        );
        assert_problem(
            delete("rgst_nope_nope", "application/xml", "<x/>"),
            401,
            "unauthorized",
        );
    }
    // All of it still there.
    assert_eq!(
        server
            .get(&format!("/services/{sub}/config"), &acme.token)
            .status(),
        200
    );
    assert_eq!(
        server
            .get(&format!("/services/{sub}"), &acme.token)
            .status(),
        200
    );
    assert_eq!(
        server
            .get(&format!("/service-accounts/{other}"), &acme.token)
            .status(),
        200
    );
    let deleted = server
        .authed(Method::DELETE, &format!("/services/{sub}"), &acme.token)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .unwrap();
    assert_eq!(deleted.status(), 204);
    // The token still works: nothing was regenerated.
    assert_eq!(server.get("/services", &acme.token).status(), 200);
    let taken = post(Some("application/json"), "{}");
    assert_eq!(taken.status(), 200);
}

/// A query string a route cannot read is a problem too, naming what is wrong (actix alone
/// answers it in plain text).
#[test]
fn unreadable_query_strings_are_problems() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let sub = super::register_service(&server, &acme, "api");
    let rotate = format!("/services/{sub}/signing/rotate?compromised=yes");
    let not_a_bool = server
        .authed(Method::POST, &rotate, &acme.token)
        .send()
        .unwrap();
    let body = assert_problem(not_a_bool, 400, "validation-failed");
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.contains("compromised") && detail.contains("\"yes\""),
        "{body}"
    );
    // A mistyped parameter is no ordinary rotation.
    let typo = format!("/services/{sub}/signing/rotate?compromized=true");
    let refused = server
        .authed(Method::POST, &typo, &acme.token)
        .send()
        .unwrap();
    let body = assert_problem(refused, 400, "validation-failed");
    let detail = body["detail"].as_str().unwrap();
    assert!(detail.contains("compromized"), "{body}");
    // In the parser's words, not the framework's.
    assert!(!detail.contains("deserialize error"), "{body}");
    let twice = server
        .authed(
            Method::GET,
            "/services?include=status&include=status",
            &acme.token,
        )
        .send()
        .unwrap();
    assert_problem(twice, 400, "validation-failed");
}

#[test]
fn unknown_routes_and_methods_are_problems() {
    let server = TestServer::start();
    let unknown = server.request(Method::GET, "/nope").send().unwrap();
    assert_problem(unknown, 404, "not-found");
    let method = server.request(Method::PUT, "/services").send().unwrap();
    assert_eq!(method.headers()["allow"], "GET, HEAD, POST");
    assert_problem(method, 405, "method-not-allowed");
}

#[test]
fn request_ids_are_echoed_or_made() {
    let server = TestServer::start_binary(); // reads its log
    let echoed = server
        .request(Method::GET, "/healthz")
        .header("x-request-id", "abc-123")
        .send()
        .unwrap();
    assert_eq!(echoed.headers()["x-request-id"], "abc-123");
    let made = server.request(Method::GET, "/healthz").send().unwrap();
    let id = made.headers()["x-request-id"].to_str().unwrap().to_owned();
    assert!(uuid::Uuid::parse_str(&id).is_ok());
    let logged = |log: &str| log.contains("abc-123") && log.contains(&id);
    let log = server.log_when(logged);
    assert!(logged(&log), "{log}");
}

#[test]
fn repeated_failed_authentication_is_rate_limited_per_address() {
    let server = TestServer::start();
    let unknown = format!("rgst_{}_{}", "0".repeat(16), "0".repeat(52));
    // 1,000 at once, then one more every 60 ms (GCRA): the 1001st failure is refused, give or
    // take those that came back while the loop ran. The bound follows the clock, so a slow
    // machine (a loaded CI runner) neither fails the test nor runs it past the limiter's refusal.
    let started = std::time::Instant::now();
    let came_back = || (started.elapsed().as_millis() / 60) as usize + 1;
    let mut failures = 0;
    let first_429 = loop {
        let response = server
            .authed(Method::GET, "/services", &unknown)
            .send()
            .unwrap();
        if response.status() == 429 {
            assert!(response.headers().contains_key("retry-after"));
            break failures;
        }
        assert_eq!(response.status(), 401);
        failures += 1;
        assert!(
            failures <= 1000 + came_back() && failures < 10_000,
            "failure {failures} was not refused, {} came back meanwhile",
            came_back()
        );
    };
    assert!(first_429 >= 1000, "refused at failure {first_429}");
    // While limited, even the healthz endpoint still answers (only authentication is limited).
    assert_eq!(
        server
            .request(Method::GET, "/healthz")
            .send()
            .unwrap()
            .status(),
        200
    );
}
