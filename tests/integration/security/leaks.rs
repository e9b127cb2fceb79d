//! Second security review, findings 11 and 12 and the key bounds of finding 5 (docs/api.md, "Limits
//! that hold (second security review)"): request ids and audit cursors tell an outsider nothing of
//! the registry's traffic or of other customers' volume, `/metrics` answers only allowed addresses,
//! `registry policy …` reads at most 1 MiB of a file, and uploads refuse RSA keys a verifier cannot
//! afford.

use super::create_service;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use registry_tests::issuer::{KeyKind, SigningKey};
use registry_tests::server::{
    assert_problem, json, pointers, registry_binary, Customer, ServerOptions, TempDir, TestServer,
};
use reqwest::Method;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::process::Command;
use std::time::{Duration, Instant};
use uuid::Uuid;

/// Finding 11: `X-Request-Id` was a fixed per-process prefix followed by a counter, so any
/// client could count the requests the server answered between two of its own.
#[test]
fn request_ids_are_random_not_a_counter() {
    let server = TestServer::start();
    let ids: Vec<Uuid> = (0..40)
        .map(|_| {
            let response = server.request(Method::GET, "/healthz").send().unwrap();
            assert_eq!(response.status(), 200);
            let id = response.headers()["x-request-id"]
                .to_str()
                .unwrap()
                .to_owned();
            Uuid::parse_str(&id).unwrap_or_else(|e| panic!("{id}: {e}"))
        })
        .collect();
    for id in &ids {
        assert_eq!(id.get_version(), Some(uuid::Version::Random), "{id}");
    }
    // Neither half repeats (the old prefix did), and consecutive ids are not near each other
    // (a counter's are 1 apart): chance alone puts two random 64-bit halves within 2^40 of each
    // other once in 2^23 pairs.
    let halves: Vec<(u64, u64)> = ids.iter().map(Uuid::as_u64_pair).collect();
    assert_eq!(
        halves.iter().map(|h| h.0).collect::<HashSet<_>>().len(),
        ids.len()
    );
    assert_eq!(
        halves.iter().map(|h| h.1).collect::<HashSet<_>>().len(),
        ids.len()
    );
    for pair in halves.windows(2) {
        for (a, b) in [(pair[0].0, pair[1].0), (pair[0].1, pair[1].1)] {
            assert!(a.abs_diff(b) > 1 << 40, "{:?} then {:?}", pair[0], pair[1]);
        }
    }
    // An id the client sends is still echoed.
    let echoed = server
        .request(Method::GET, "/healthz")
        .header("x-request-id", "trace-42")
        .send()
        .unwrap();
    assert_eq!(echoed.headers()["x-request-id"], "trace-42");
}

/// An account's answers are kept by no cache, a browser's own included, and no JSON answer of
/// the API host is read by a browser as anything but JSON; a hosted issuer's documents keep
/// their public caching.
#[test]
fn an_accounts_answers_are_stored_by_no_cache_and_sniffed_by_no_browser() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let (subdomain, _) = create_service(&server, &acme, "k3s");
    let header = |response: &reqwest::blocking::Response, name: &str| {
        (response.headers().get(name)).map(|v| v.to_str().unwrap().to_owned())
    };
    for path in [
        "/services",
        &format!("/services/{subdomain}"),
        "/service-accounts",
    ] {
        let response = server.get(path, &acme.token);
        assert_eq!(response.status(), 200, "{path}");
        assert_eq!(
            header(&response, "cache-control").as_deref(),
            Some("no-store"),
            "{path}"
        );
        assert_eq!(
            header(&response, "x-content-type-options").as_deref(),
            Some("nosniff")
        );
        // Over plain HTTP, nothing is pinned.
        assert_eq!(
            header(&response, "strict-transport-security"),
            None,
            "{path}"
        );
    }
    // Without credentials: never sniffed, its caching left to its route.
    let open = server.request(Method::GET, "/openapi.json").send().unwrap();
    assert_eq!(open.status(), 200);
    assert_eq!(
        header(&open, "x-content-type-options").as_deref(),
        Some("nosniff")
    );
    assert_eq!(header(&open, "cache-control"), None);
    // The documents a verifier fetches are still public and cached for 30 s.
    let put = server
        .authed(
            Method::PUT,
            &format!("/services/{subdomain}/config"),
            &acme.token,
        )
        .json(&crate::api::upload(&["k1"]))
        .send()
        .unwrap();
    assert_eq!(put.status(), 200, "{}", put.text().unwrap());
    let hosted = server
        .hosted(Method::GET, &subdomain, "/openid/v1/jwks")
        .send()
        .unwrap();
    assert_eq!(hosted.status(), 200);
    let cached = header(&hosted, "cache-control").unwrap();
    assert!(cached.starts_with("public, max-age=30"), "{cached}");
}

/// The `nextCursor` of a page of `limit` events of `customer`, with the page's last event id.
fn cursor_of_first_page(server: &TestServer, customer: &Customer, limit: usize) -> (String, Uuid) {
    let page = json(server.get(&format!("/audit-events?limit={limit}"), &customer.token));
    let events = page["events"].as_array().unwrap();
    assert_eq!(events.len(), limit, "{page}");
    let last = Uuid::parse_str(events[limit - 1]["id"].as_str().unwrap()).unwrap();
    (page["nextCursor"].as_str().unwrap().to_owned(), last)
}

/// Finding 11: the audit cursor was the global event number in base64 (`a1.<seq>`), so two
/// cursors of one customer told how many events every other customer wrote in between.
#[test]
fn audit_cursors_carry_nothing_of_other_customers_volume() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let globex = server.customer("globex", "business");
    create_service(&server, &acme, "a1");
    let (before, before_event) = cursor_of_first_page(&server, &acme, 1);
    // globex is busy; acme writes one event more.
    for i in 0..25 {
        create_service(&server, &globex, &format!("g{i}"));
    }
    create_service(&server, &acme, "a2");
    let (after, after_event) = cursor_of_first_page(&server, &acme, 1);

    // The same form and length whatever happened in between, and nothing but the id of the
    // page's last event (a random UUID the page itself shows) behind a version tag.
    assert_eq!(before.len(), after.len());
    for (cursor, event) in [(&before, before_event), (&after, after_event)] {
        let bytes = URL_SAFE_NO_PAD.decode(cursor).unwrap();
        assert_eq!(&bytes[..2], b"a2", "{cursor}");
        assert_eq!(&bytes[2..], event.as_bytes(), "{cursor}");
        assert_eq!(event.get_version(), Some(uuid::Version::Random));
    }

    // Pages still follow on.
    let next = json(server.get(&format!("/audit-events?cursor={after}"), &acme.token));
    let actions: Vec<&str> = next["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["service.create", "customer.create"]);

    // Another customer's cursor, a made-up one, and one of the old form: 400, no events.
    let forged = {
        let mut bytes = b"a2".to_vec();
        bytes.extend_from_slice(Uuid::new_v4().as_bytes());
        URL_SAFE_NO_PAD.encode(bytes)
    };
    let old_form = URL_SAFE_NO_PAD.encode("a1.3");
    for cursor in [&after, &forged, &old_form] {
        let problem = assert_problem(
            server.get(&format!("/audit-events?cursor={cursor}"), &globex.token),
            400,
            "validation-failed",
        );
        assert!(
            problem["detail"].as_str().unwrap().contains("cursor"),
            "{problem}"
        );
    }
}

fn not_found_body(response: reqwest::blocking::Response) -> Value {
    let mut body = assert_problem(response, 404, "not-found");
    // Whatever names the path itself may differ; the rest must not.
    if let Some(body) = body.as_object_mut() {
        body.remove("instance");
    }
    body
}

/// Finding 11: `/metrics` (cache sizes, request counts by route, key fetches) was public.
#[test]
fn metrics_answer_only_allowed_addresses() {
    // 127.0.0.1 outside the allowlist: the very 404 of a path nothing serves, whatever the method.
    let closed = TestServer::start_with(ServerOptions {
        env: vec![("REGISTRY_METRICS_ALLOW".into(), "10.0.0.0/8".into())],
        ..ServerOptions::default()
    });
    let unknown = not_found_body(
        closed
            .request(Method::GET, "/no-such-endpoint")
            .send()
            .unwrap(),
    );
    for method in [Method::GET, Method::POST, Method::DELETE] {
        let response = closed.request(method.clone(), "/metrics").send().unwrap();
        assert_eq!(not_found_body(response), unknown, "{method}");
    }
    let head = closed.request(Method::HEAD, "/metrics").send().unwrap();
    assert_eq!(head.status(), 404);

    // Behind a trusted proxy the client's address decides, with the default allowlist
    // (loopback and private ranges).
    let proxied = TestServer::start_with(ServerOptions {
        env: vec![("REGISTRY_TRUSTED_PROXIES".into(), "127.0.0.1/32".into())],
        ..ServerOptions::default()
    });
    let from = |client: Option<&str>| {
        let mut request = proxied.request(Method::GET, "/metrics");
        if let Some(client) = client {
            request = request.header("x-forwarded-for", client);
        }
        request.send().unwrap()
    };
    for outside in ["203.0.113.7", "2001:db8::1", "10.0.0.1, 198.51.100.2"] {
        let unknown = not_found_body(proxied.request(Method::GET, "/nothing").send().unwrap());
        assert_eq!(not_found_body(from(Some(outside))), unknown, "{outside}");
    }
    for inside in [None, Some("10.1.2.3"), Some("192.168.0.9"), Some("fd00::5")] {
        let response = from(inside);
        assert_eq!(response.status(), 200, "{inside:?}");
        assert!(response.text().unwrap().contains("registry_hosted_bytes"));
    }
    // RFC 7239 `Forwarded` is read the same way; with `X-Forwarded-For` beside it, both must
    // name the same client (one of them would be the client's own invention).
    let headers = |pairs: &[(&str, &str)]| {
        let mut request = proxied.request(Method::GET, "/metrics");
        for (name, value) in pairs {
            request = request.header(*name, *value);
        }
        request.send().unwrap().status()
    };
    for (pairs, status) in [
        (vec![("forwarded", "for=10.1.2.3;proto=https")], 200),
        (vec![("forwarded", r#"for="[fd00::5]:4711""#)], 200),
        (vec![("forwarded", "for=10.0.0.1, for=203.0.113.7")], 404),
        (vec![("forwarded", "for=unknown")], 404),
        // A chain of trusted entries only gives its left-most: a client inside the ranges.
        (vec![("x-forwarded-for", "127.0.0.1")], 200),
        (
            vec![
                ("forwarded", "for=203.0.113.7"),
                ("x-forwarded-for", "10.1.2.3"),
            ],
            404,
        ),
        (
            vec![
                ("forwarded", "for=10.1.2.3"),
                ("x-forwarded-for", "10.1.2.3"),
            ],
            200,
        ),
    ] {
        assert_eq!(headers(&pairs), status, "{pairs:?}");
    }
    // An allowed client with a method /metrics does not serve: 405, as before.
    let post = proxied.request(Method::POST, "/metrics").send().unwrap();
    assert_eq!(post.status(), 405);
}

/// Runs `registry policy ARGS`; its exit code, stderr and how long it took.
fn policy(args: &[&str]) -> (Option<i32>, String, Duration) {
    let started = Instant::now();
    let output = Command::new(registry_binary())
        .arg("policy")
        .args(args)
        .output()
        .expect("run registry policy");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
        started.elapsed(),
    )
}

/// Finding 12: `registry policy check /dev/zero` read until memory ran out (2.7 GB in 2 s).
#[test]
fn policy_commands_read_at_most_a_mebibyte_per_file() {
    let dir = TempDir::new("policy-files");
    let valid = json!({"kind": "static", "services": ["*"]}).to_string();
    let write = |name: &str, text: &str| {
        let path = dir.0.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    // A valid policy padded to exactly 1 MiB is read; one byte more is not.
    let limit = 1024 * 1024;
    let padded = |size: usize| format!("{valid}{}", " ".repeat(size - valid.len()));
    let at_limit = write("at-limit.json", &padded(limit));
    let over = write("over.json", &padded(limit + 1));
    let two_mib = write("two.json", &padded(2 * limit));
    let cases = write("cases.json", "[]");
    let (code, stderr, _) = policy(&["check", &at_limit]);
    assert_eq!(code, Some(0), "{stderr}");

    let refused: [Vec<&str>; 8] = [
        vec!["check", &over],
        vec!["check", &two_mib],
        vec!["check", "/dev/zero"],
        vec!["explain", &at_limit, "--claims", "/dev/zero"],
        vec!["test", &at_limit, "/dev/zero"],
        vec!["test", "/dev/zero", &cases],
        vec!["compare", &over, &at_limit],
        vec!["compare", &at_limit, "/dev/zero"],
    ];
    for args in refused {
        let (code, stderr, took) = policy(&args);
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
        assert!(took < Duration::from_secs(5), "{args:?} took {took:?}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains("larger than 1 MiB"), "{args:?}: {stderr}");
    }
}

/// The public part of an RSA key with this modulus and exponent (big-endian bytes). The
/// registry never sees a private key, so computed moduli stand for real ones of their size.
fn rsa_with(kid: &str, n: &[u8], e: &[u8]) -> Value {
    json!({"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
        "n": URL_SAFE_NO_PAD.encode(n), "e": URL_SAFE_NO_PAD.encode(e)})
}

fn modulus(bits: usize) -> Vec<u8> {
    let mut n = vec![0xa5u8; bits / 8];
    n[0] = 0xc3;
    n
}

fn put_keys(
    server: &TestServer,
    token: &str,
    subdomain: &str,
    keys: &[Value],
) -> reqwest::blocking::Response {
    let discovery = json!({
        "issuer": "https://kubernetes.default.svc.cluster.local",
        "jwks_uri": "https://172.18.0.2:6443/openid/v1/jwks",
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["RS256"]
    });
    server
        .authed(Method::PUT, &format!("/services/{subdomain}/config"), token)
        .json(&json!({"openidConfiguration": discovery, "jwks": {"keys": keys}}))
        .send()
        .unwrap()
}

/// Finding 5 (keys): uploads took RSA keys of 16,384 bits and an exponent of n − 2, against
/// which one forged token costs a verifier 6.4 ms.
#[test]
fn rsa_keys_a_verifier_cannot_afford_are_refused_with_their_pointer() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let (subdomain, _) = create_service(&server, &acme, "k3s");
    let real = SigningKey::generate(KeyKind::Rsa, "real").public_jwk();
    let real_n = URL_SAFE_NO_PAD.decode(real["n"].as_str().unwrap()).unwrap();
    let f4 = [1u8, 0, 1];
    // n − 2 of the real key: odd, as large as the modulus.
    let mut n_minus_2 = real_n.clone();
    let mut take = 2;
    for byte in n_minus_2.iter_mut().rev() {
        // With the borrow: a modulus may end in the byte 1 (one key in 128).
        let (rest, borrowed) = byte.overflowing_sub(take);
        *byte = rest;
        if !borrowed {
            break;
        }
        take = 1;
    }
    let mut even_n = real_n.clone();
    *even_n.last_mut().unwrap() &= 0xfe;
    let refused = [
        (rsa_with("big", &modulus(16384), &f4), "/jwks/keys/1/n"),
        (rsa_with("small", &modulus(1024), &f4), "/jwks/keys/1/n"),
        (rsa_with("one", &real_n, &[1]), "/jwks/keys/1/e"),
        (rsa_with("even", &real_n, &[1, 0, 0]), "/jwks/keys/1/e"),
        (
            rsa_with("large-e", &real_n, &[0x80, 0, 0, 1]),
            "/jwks/keys/1/e",
        ),
        (rsa_with("n-2", &real_n, &n_minus_2), "/jwks/keys/1/e"),
        // An even modulus is no RSA key's (Go's verifier refuses to import one).
        (rsa_with("even-n", &even_n, &f4), "/jwks/keys/1/n"),
    ];
    for (key, pointer) in refused {
        // After a good key, so that the pointer names the bad one.
        let response = put_keys(
            &server,
            &acme.token,
            &subdomain,
            &[real.clone(), key.clone()],
        );
        let problem = assert_problem(response, 400, "validation-failed");
        assert_eq!(pointers(&problem), [pointer], "{}", key["kid"]);
    }
    for (kid, n, e) in [
        ("2048", modulus(2048), f4.to_vec()),
        ("8192", modulus(8192), f4.to_vec()),
        ("e3", real_n.clone(), vec![3]),
        ("e-max", real_n.clone(), vec![0x7f, 0xff, 0xff, 0xff]),
    ] {
        let response = put_keys(&server, &acme.token, &subdomain, &[rsa_with(kid, &n, &e)]);
        assert_eq!(
            response.status(),
            200,
            "{kid}: {}",
            response.text().unwrap()
        );
    }
}
