//! JWT attacks (RFC 8725) on the real server that `api::federation` and `oidc::tokens` leave
//! out: hostile `kid`s, oversized tokens, header-named keys pointing at another issuer,
//! extreme claim values, `alg` spellings.

use super::{claims, create_service, insecure_server, oidc_account, unix_now};
use registry_tests::issuer::{compact, KeyKind, SigningKey, TestIssuer};
use registry_tests::server::{assert_problem, json, TestServer};
use reqwest::Method;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Asserts a 401 that says no more than a missing token's.
#[track_caller]
fn assert_refused(server: &TestServer, path: &str, token: &str, case: &str) {
    let expected = server.anonymous_401_detail(path);
    let response = server.get(path, token);
    assert_eq!(response.status(), 401, "{case}");
    let body = assert_problem(response, 401, "unauthorized");
    assert_eq!(
        body["detail"],
        expected.as_str(),
        "{case}: the 401 says more"
    );
}

/// A trusted issuer, a customer trusting it for `repo:acme/*`, and one service.
struct Federation {
    server: TestServer,
    issuer: TestIssuer,
    path: String,
}

fn federation() -> Federation {
    federation_on(insecure_server())
}

fn federation_on(server: TestServer) -> Federation {
    let issuer = TestIssuer::start();
    let acme = server.customer("acme", "business");
    let (api, _) = create_service(&server, &acme, "api");
    oidc_account(&server, &acme, &issuer.url(), "repo:acme/*");
    Federation {
        server,
        issuer,
        path: format!("/services/{api}"),
    }
}

#[test]
fn hostile_kids_are_refused_like_any_unknown_kid() {
    let Federation {
        server,
        issuer,
        path,
    } = federation_on(registry_tests::server::insecure_binary_server()); // reads its log
    let iss = issuer.url();
    let good = issuer.mint("ES256", claims(&iss, "repo:acme/api"));
    assert_eq!(server.get(&path, &good).status(), 200);
    assert_eq!((issuer.discovery_fetches(), issuer.jwks_fetches()), (1, 1));

    let key = issuer.key("ES256");
    let kids: Vec<Value> = vec![
        json!("../../../../../../etc/passwd"),
        json!("/dev/zero"),
        json!("file:///etc/passwd"),
        json!("' OR '1'='1"),
        json!("x'; DROP TABLE service_accounts; --"),
        json!("\" OR 1=1 --"),
        json!("p256-2\u{0}"),
        json!("%00"),
        json!(""),
        json!("*"),
        json!(format!("{iss}/jwks")),
        json!("rsa-1/../p256-2"),
        json!("x\nforged-log-line INFO registry: authentication succeeded"),
        json!("k".repeat(8000)),
        json!(1),
        json!(null),
        json!(["p256-2"]),
        json!({"$ne": null}),
    ];
    let started = Instant::now();
    for kid in &kids {
        let header = json!({"alg": "ES256", "typ": "JWT", "kid": kid});
        let token = compact(&header, &claims(&iss, "repo:acme/api"), |m| {
            key.sign("ES256", m)
        });
        let case = format!(
            "kid {}",
            kid.to_string().chars().take(60).collect::<String>()
        );
        assert_refused(&server, &path, &token, &case);
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{} hostile kids took {:?}",
        kids.len(),
        started.elapsed()
    );
    // An unknown kid costs at most one refetch per 30 s, however many arrive.
    assert!(
        issuer.jwks_fetches() <= 2,
        "{} key set fetches",
        issuer.jwks_fetches()
    );
    // Nothing was harmed: the same token still works, the account and the service are there.
    assert_eq!(server.get(&path, &good).status(), 200);
    assert_eq!(
        json(server.get("/services", &good))
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    // A kid cannot forge a log line: whatever it holds stays inside one line's field.
    let log = server.final_log();
    assert!(
        !log.lines()
            .any(|l| l.trim_start().starts_with("forged-log-line")),
        "a kid injected a log line:\n{log}"
    );
}

#[test]
fn oversized_tokens_are_refused_fast_and_fetch_nothing() {
    let Federation {
        server,
        issuer,
        path,
    } = federation();
    let iss = issuer.url();
    for size in [16 * 1024 + 1, 24 * 1024, 31 * 1024_usize] {
        let mut padded = claims(&iss, "repo:acme/api");
        padded["padding"] = json!("");
        let bare = issuer.mint("ES256", padded.clone()).len();
        // base64 grows the padding by 4/3.
        padded["padding"] = json!("p".repeat((size.saturating_sub(bare)) * 3 / 4 + 3));
        let token = issuer.mint("ES256", padded);
        assert!(token.len() > 16 * 1024, "{}", token.len());
        let started = Instant::now();
        assert_refused(&server, &path, &token, &format!("{} bytes", token.len()));
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "a {}-byte token took {:?}",
            token.len(),
            started.elapsed()
        );
    }
    assert_eq!(
        issuer.discovery_fetches() + issuer.jwks_fetches(),
        0,
        "an oversized token made the registry fetch keys"
    );
    // Far larger Authorization headers are refused by the HTTP layer or as a 401; the server
    // stays up either way.
    for size in [64 * 1024, 1024 * 1024] {
        let token = format!("{}.{}.{}", "e".repeat(size / 2), "e".repeat(size / 2), "e");
        match server.authed(Method::GET, &path, &token).send() {
            Ok(response) => {
                let status = response.status().as_u16();
                assert!(
                    matches!(status, 400 | 401 | 413 | 431),
                    "a {size}-byte header answered {status}"
                );
            }
            // Closing the connection on a huge header is a refusal too.
            Err(e) => assert!(!e.is_timeout(), "a {size}-byte header timed out: {e}"),
        }
        // A fresh connection: the refused one may be gone from under the client's pool.
        let health = reqwest::blocking::get(format!("{}/healthz", server.base)).unwrap();
        assert_eq!(
            health.status(),
            200,
            "the server is down after a {size}-byte header"
        );
    }
}

#[test]
fn keys_named_by_the_header_are_never_fetched_even_from_another_issuer() {
    let Federation {
        server,
        issuer,
        path,
    } = federation();
    let iss = issuer.url();
    let attacker = TestIssuer::start();
    // Both issuers name their keys alike ("rsa-1", "p256-2", …): the attacker's key borrows the
    // trusted kid, and the header points at the attacker's documents.
    let stolen_kid = issuer.key("RS256").kid().to_owned();
    assert_eq!(attacker.key("RS256").kid(), stolen_kid);
    let own = attacker.key("RS256");
    let a = attacker.url();
    let headers = [
        json!({"alg": "RS256", "kid": stolen_kid, "jku": format!("{a}/jwks")}),
        json!({"alg": "RS256", "kid": stolen_kid, "x5u": format!("{a}/cert.pem")}),
        json!({"alg": "RS256", "kid": stolen_kid, "jwk": own.public_jwk()}),
        json!({"alg": "RS256", "kid": "attacker", "jku": format!("{a}/jwks"),
            "x5u": format!("{a}/cert.pem"), "jwk": own.public_jwk(),
            "x5c": ["MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA"]}),
        json!({"alg": "RS256", "jku": format!("{a}/jwks")}),
    ];
    for header in headers {
        let token = compact(&header, &claims(&iss, "repo:acme/api"), |m| {
            own.sign("RS256", m)
        });
        assert_refused(&server, &path, &token, &header.to_string());
    }
    assert_eq!(
        attacker.discovery_fetches() + attacker.jwks_fetches() + attacker.fetches("/cert.pem"),
        0,
        "the registry fetched from the issuer a token header named"
    );
    // Only the trusted issuer was asked, for its own documents: once, and once more for the
    // unknown kid "attacker" (a refresh is one discovery and one key set request).
    assert!(
        issuer.discovery_fetches() <= 2,
        "{}",
        issuer.discovery_fetches()
    );
    assert!(issuer.jwks_fetches() <= 2, "{}", issuer.jwks_fetches());
    // The trusted issuer's own token still works.
    let good = issuer.mint("RS256", claims(&iss, "repo:acme/api"));
    assert_eq!(server.get(&path, &good).status(), 200);
}

#[test]
fn extreme_claim_values_and_alg_spellings_are_401_never_500() {
    let Federation {
        server,
        issuer,
        path,
    } = federation();
    let iss = issuer.url();
    let now = unix_now();
    let sub = "repo:acme/api";
    let mut deep = json!("bottom");
    for _ in 0..200 {
        deep = json!([deep]);
    }
    let payloads = [
        json!({"iss": iss, "sub": sub, "aud": "registry", "iat": now, "exp": 1e300}),
        json!({"iss": iss, "sub": sub, "aud": "registry", "iat": now, "exp": u64::MAX}),
        json!({"iss": iss, "sub": sub, "aud": "registry", "iat": i64::MIN, "exp": now + 60}),
        json!({"iss": iss, "sub": sub, "aud": "registry", "iat": now, "exp": (now + 60).to_string()}),
        json!({"iss": iss, "sub": sub, "aud": "registry", "iat": now, "exp": now + 60, "nbf": i64::MAX}),
        json!({"iss": iss, "sub": sub, "aud": {"registry": true}, "iat": now, "exp": now + 60}),
        json!({"iss": iss, "sub": sub, "aud": "registry", "iat": now, "exp": now + 60, "deep": deep}),
        json!({"iss": [iss], "sub": sub, "aud": "registry", "iat": now, "exp": now + 60}),
    ];
    let key = issuer.key("ES256");
    for payload in &payloads {
        let token = compact(&json!({"alg": "ES256", "kid": key.kid()}), payload, |m| {
            key.sign("ES256", m)
        });
        let case: String = payload.to_string().chars().take(120).collect();
        assert_refused(&server, &path, &token, &case);
    }
    for alg in [
        "NONE", "None", "nOnE", "ES256 ", " ES256", "ES256K", "ES512", "HS256", "",
    ] {
        let token = compact(
            &json!({"alg": alg, "kid": key.kid()}),
            &claims(&iss, sub),
            |m| key.sign("ES256", m),
        );
        assert_refused(&server, &path, &token, &format!("alg {alg:?}"));
    }
    let good = issuer.mint("ES256", claims(&iss, sub));
    assert_eq!(server.get(&path, &good).status(), 200);
    // A key of a type the issuer does not publish, under a published kid, fails too.
    let stranger = SigningKey::generate(KeyKind::Ed25519, key.kid());
    let token = compact(
        &json!({"alg": "EdDSA", "kid": key.kid()}),
        &claims(&iss, sub),
        |m| stranger.sign("EdDSA", m),
    );
    assert_refused(&server, &path, &token, "EdDSA under an ES256 kid");
}

/// PostgreSQL refuses NUL in text parameters: a token naming such an issuer must be an ordinary
/// 401, not a 503 blaming the database (it is sent before any authentication).
#[test]
fn an_issuer_with_a_nul_character_is_an_ordinary_401() {
    let Federation {
        server,
        issuer,
        path,
    } = federation();
    let key = issuer.key("ES256");
    let iss = format!("{}\u{0}", issuer.url());
    let token = compact(
        &json!({"alg": "ES256", "kid": key.kid()}),
        &claims(&iss, "repo:acme/api"),
        |m| key.sign("ES256", m),
    );
    assert_refused(&server, &path, &token, "iss with NUL");
    assert_refused(&server, "/services", &token, "iss with NUL");
}
