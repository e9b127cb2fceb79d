//! Managed signing (docs/api.md, "Managed signing"): keys the registry makes, publishes as the key
//! source `managed`, signs with only once safe, and rotates itself. Tokens are assembled from
//! what `POST …/sign` answers and verified by josekit against the key set served over HTTP, as a
//! relying party would.

use super::{create_account, register_service};
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use registry_tests::server::{assert_problem, json, pointers, Customer, ServerOptions, TestServer};
use registry_tests::wait::within;
use reqwest::Method;
use serde_json::{json, Value};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The data key managed keys are sealed under.
pub const DATA_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// The version-2 policy schema.
const V2: &str = "http://localhost:8080/schemas/service-account-policy/v2.json";

fn options(more: &[(&str, &str)]) -> ServerOptions {
    let mut env = vec![("REGISTRY_DATA_KEY".to_owned(), DATA_KEY.to_owned())];
    env.extend(more.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    ServerOptions {
        env,
        ..ServerOptions::default()
    }
}

/// A server holding keys (`REGISTRY_DATA_KEY` set).
pub fn signing_server() -> TestServer {
    TestServer::start_with(options(&[]))
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// A token's payload for `issuer`, living `life` seconds from `iat`, as base64url.
pub fn payload(issuer: &str, iat: i64, life: i64) -> String {
    let claims = json!({"iss": issuer, "sub": "system:serviceaccount:default:default",
        "aud": ["sts.amazonaws.com"], "iat": iat, "nbf": iat, "exp": iat + life});
    URL_SAFE_NO_PAD.encode(claims.to_string())
}

/// `PUT …/signing` with `body`; the answer.
pub fn turn_on(server: &TestServer, token: &str, sub: &str, body: Value) -> Value {
    let response = server
        .authed(Method::PUT, &format!("/services/{sub}/signing"), token)
        .json(&body)
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    json(response)
}

/// `DELETE …/signing`, answered 204.
fn turn_off(server: &TestServer, token: &str, sub: &str) {
    let path = format!("/services/{sub}/signing");
    let deleted = server.authed(Method::DELETE, &path, token).send().unwrap();
    assert_eq!(deleted.status(), 204);
}

/// `POST …/signing/rotate`, compromised or not: the response.
pub fn rotate(
    server: &TestServer,
    token: &str,
    sub: &str,
    compromised: bool,
) -> reqwest::blocking::Response {
    let query = if compromised { "?compromised=true" } else { "" };
    let path = format!("/services/{sub}/signing/rotate{query}");
    server.authed(Method::POST, &path, token).send().unwrap()
}

/// A server holding keys, a customer, its service `k3s` with managed signing turned on with
/// `settings`: the customer, the subdomain, its issuer and the signing's first state.
fn signing_service(server: &TestServer, settings: Value) -> (Customer, String, String, Value) {
    let acme = server.customer("acme", "business");
    let sub = register_service(server, &acme, "k3s");
    let issuer = server.issuer(&sub);
    let state = turn_on(server, &acme.token, &sub, settings);
    (acme, sub, issuer, state)
}

/// `POST …/sign` of `claims`: the status and the body.
pub fn sign(server: &TestServer, token: &str, sub: &str, claims: &str) -> (u16, Value) {
    let response = server
        .authed(Method::POST, &format!("/services/{sub}/sign"), token)
        .json(&json!({"claims": claims}))
        .send()
        .unwrap();
    let status = response.status().as_u16();
    (status, json(response))
}

/// The compact JWT of a signature answer and its claims.
pub fn token_of(signed: &Value, claims: &str) -> String {
    format!(
        "{}.{claims}.{}",
        signed["header"].as_str().unwrap(),
        signed["signature"].as_str().unwrap()
    )
}

/// The service's key set as served publicly.
pub fn hosted_keys(server: &TestServer, sub: &str) -> Value {
    let response = server
        .hosted(Method::GET, sub, "/openid/v1/jwks")
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    json(response)
}

/// Whether josekit verifies `token` with the key of its `kid` in `set`, whatever its algorithm.
pub fn verifies(set: &Value, token: &str) -> bool {
    let header = josekit::jwt::decode_header(token).unwrap();
    let kid = header.claim("kid").and_then(Value::as_str).unwrap();
    let Some(jwk) = (set["keys"].as_array().unwrap().iter()).find(|k| k["kid"] == kid) else {
        return false;
    };
    let jwk = josekit::jwk::Jwk::from_map(jwk.as_object().unwrap().clone()).unwrap();
    let verified = match header.claim("alg").and_then(Value::as_str) {
        Some("ES256") => josekit::jwt::decode_with_verifier(
            token,
            &josekit::jws::ES256.verifier_from_jwk(&jwk).unwrap(),
        ),
        Some("RS256") => josekit::jwt::decode_with_verifier(
            token,
            &josekit::jws::RS256.verifier_from_jwk(&jwk).unwrap(),
        ),
        other => panic!("unexpected alg {other:?}"),
    };
    verified.is_ok()
}

/// An account of `customer` whose version-2 policy allows `actions` on `sub`; its token.
pub fn account_for(
    server: &TestServer,
    customer: &Customer,
    sub: &str,
    actions: &[&str],
) -> String {
    let policy = json!({"$schema": V2, "kind": "static", "services": [sub], "actions": actions});
    let created = create_account(
        server,
        customer,
        &format!("signer-{}", actions.len()),
        policy,
    );
    created["token"].as_str().unwrap().to_owned()
}

/// Waits until `holds` holds of the service's signing state (the rotation step runs every 2 s).
pub fn signing_once(
    server: &TestServer,
    token: &str,
    sub: &str,
    holds: impl Fn(&Value) -> bool,
) -> Value {
    let mut state = Value::Null;
    let held = within(Duration::from_secs(30), || {
        state = json(server.get(&format!("/services/{sub}/signing"), token));
        holds(&state)
    });
    assert!(held, "{state}");
    state
}

fn kids(state: &Value, stage: &str) -> Vec<String> {
    (state["keys"].as_array().unwrap().iter())
        .filter(|k| k["state"] == stage)
        .map(|k| k["kid"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn without_a_data_key_signing_is_refused_with_signing_disabled() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let sub = register_service(&server, &acme, "k3s");
    let refused = server
        .authed(
            Method::PUT,
            &format!("/services/{sub}/signing"),
            &acme.token,
        )
        .json(&json!({}))
        .send()
        .unwrap();
    assert_problem(refused, 409, "signing-disabled");
    let unknown = server.get(&format!("/services/{sub}/signing"), &acme.token);
    assert_problem(unknown, 404, "not-found");
}

#[test]
fn settings_out_of_range_or_unknown_are_refused_with_their_pointers() {
    let server = signing_server();
    let acme = server.customer("acme", "business");
    let sub = register_service(&server, &acme, "k3s");
    let refused = server
        .authed(
            Method::PUT,
            &format!("/services/{sub}/signing"),
            &acme.token,
        )
        .json(&json!({"algorithm": "HS256", "rotationPeriodSeconds": 60,
            "maxTokenSeconds": 31_536_001, "leadSeconds": -1, "colour": "blue"}))
        .send()
        .unwrap();
    let mut found = pointers(&assert_problem(refused, 400, "validation-failed"));
    found.sort();
    assert_eq!(
        found,
        [
            "/algorithm",
            "/colour",
            "/leadSeconds",
            "/maxTokenSeconds",
            "/rotationPeriodSeconds"
        ]
    );
    // Nothing was turned on.
    assert_eq!(
        server
            .get(&format!("/services/{sub}/signing"), &acme.token)
            .status(),
        404
    );
}

#[test]
fn managed_keys_are_published_sign_only_for_tokens_sign_and_verify_with_the_hosted_set() {
    let server = signing_server();
    // A first key with no lead and no verifier is safe at once.
    let (acme, sub, issuer, state) = signing_service(&server, json!({"leadSeconds": 0}));
    assert_eq!(state["algorithm"], "ES256");
    assert_eq!(state["rotationPeriodSeconds"], 2_592_000);
    assert_eq!(state["maxTokenSeconds"], 86_400);
    assert_eq!(state["leadSeconds"], 0);
    assert!(state["nextRotationAt"].is_string(), "{state}");
    let key = &state["keys"][0];
    assert_eq!(key["state"], "current", "{state}");
    for member in [
        "kid",
        "createdAt",
        "safeToSignAt",
        "signingSince",
        "publicKey",
    ] {
        assert!(key[member].is_string(), "{member} in {state}");
    }
    assert!(key["withdrawAt"].is_null() && key["lastSignedAt"].is_null());
    let der = STANDARD.decode(key["publicKey"].as_str().unwrap()).unwrap();
    assert!(openssl::pkey::PKey::public_key_from_der(&der).is_ok());
    let kid = key["kid"].as_str().unwrap();
    // The list shows it, in one request.
    let listed = json(server.get("/services?include=status", &acme.token));
    assert_eq!(
        listed[0]["status"]["signing"],
        json!({"algorithm": "ES256", "nextRotationAt": state["nextRotationAt"]})
    );
    assert_eq!(listed[0]["status"]["keyCount"], 1);
    assert_eq!(listed[0]["status"]["published"], true);

    // The key set and the discovery document, written by the registry (nothing was uploaded).
    let set = hosted_keys(&server, &sub);
    assert_eq!(set["keys"][0]["kid"], kid);
    assert!(set["keys"][0].get("d").is_none());
    let discovery = json(
        server
            .hosted(Method::GET, &sub, "/.well-known/openid-configuration")
            .send()
            .unwrap(),
    );
    assert_eq!(discovery["issuer"], issuer.as_str());
    assert_eq!(discovery["jwks_uri"], format!("{issuer}/openid/v1/jwks"));
    assert_eq!(
        discovery["id_token_signing_alg_values_supported"],
        json!(["ES256"])
    );
    assert_eq!(discovery["response_types_supported"], json!(["id_token"]));
    assert_eq!(discovery["subject_types_supported"], json!(["public"]));
    let listed = json(server.get(&format!("/services/{sub}/keys"), &acme.token));
    assert_eq!(listed["keys"][0]["source"], "managed", "{listed}");

    // Minting is never implied: not by the customer's first account ("*"), nor by "*" in v2.
    let claims = payload(&issuer, now(), 600);
    let (status, body) = sign(&server, &acme.token, &sub, &claims);
    assert_eq!(
        (
            status,
            body["type"]
                .as_str()
                .unwrap()
                .ends_with("action-not-allowed")
        ),
        (403, true),
        "{body}"
    );
    let everything = account_for(&server, &acme, &sub, &["*"]);
    assert_eq!(sign(&server, &everything, &sub, &claims).0, 403);
    // The first account grants it though (it manages every service), without holding it.
    let signer = account_for(&server, &acme, &sub, &["tokens:sign", "config:read"]);
    let (status, signed) = sign(&server, &signer, &sub, &claims);
    assert_eq!(status, 200, "{signed}");
    assert_eq!(signed["kid"], kid);
    let header: Value = serde_json::from_slice(
        &URL_SAFE_NO_PAD
            .decode(signed["header"].as_str().unwrap())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(header, json!({"alg": "ES256", "kid": kid, "typ": "JWT"}));
    assert_eq!(
        signed["header"].as_str().unwrap(),
        URL_SAFE_NO_PAD.encode(format!(r#"{{"alg":"ES256","kid":"{kid}","typ":"JWT"}}"#)),
        "exactly alg, kid, typ"
    );
    let token = token_of(&signed, &claims);
    assert!(verifies(&hosted_keys(&server, &sub), &token), "{token}");
    // A signer without config:write cannot change signing.
    let refused = rotate(&server, &signer, &sub, false);
    assert_problem(refused, 403, "action-not-allowed");
    // The signature is counted, and so are the two callers refused before the call; the last
    // signature recorded.
    let metrics = server.metrics_text();
    assert!(metrics.contains("registry_signatures_total{result=\"signed\"} 1"));
    assert!(
        metrics.contains("registry_signatures_total{result=\"refused\"} 2"),
        "{metrics}"
    );
    let state = json(server.get(&format!("/services/{sub}/signing"), &acme.token));
    assert!(state["keys"][0]["lastSignedAt"].is_string(), "{state}");
    // The registry's own key source may not be uploaded to.
    let refused = server
        .authed(
            Method::PUT,
            &format!("/services/{sub}/config?source=managed"),
            &acme.token,
        )
        .json(&super::upload(&["k1"]))
        .send()
        .unwrap();
    assert_problem(refused, 400, "validation-failed");
    // An upload as the source `green`.
    let to_green = |body: &Value| {
        let path = format!("/services/{sub}/config?source=green");
        let request = server.authed(Method::PUT, &path, &acme.token);
        request.json(body).send().unwrap()
    };
    // Nor may a managed key be uploaded under another source: its copy there would outlive
    // the key's withdrawal (a compromise must end every token it signed).
    let mut copied = super::upload(&["k1"]);
    let keys = copied["jwks"]["keys"].as_array_mut().unwrap();
    keys.push(listed["keys"][0]["jwk"].clone());
    let refused = to_green(&copied);
    let problem = assert_problem(refused, 400, "validation-failed");
    assert_eq!(pointers(&problem), ["/jwks/keys/1"], "{problem}");
    // Its kid with other material is kid-reused, as any other source's.
    let mut reused = super::upload(&["k1"]);
    reused["jwks"]["keys"][0]["kid"] = listed["keys"][0]["kid"].clone();
    let refused = to_green(&reused);
    assert_problem(refused, 400, "kid-reused");
    // Nor its material under another kid.
    let mut renamed = super::upload(&["k1"]);
    let mut material = listed["keys"][0]["jwk"].clone();
    material["kid"] = json!("a-copy");
    renamed["jwks"]["keys"]
        .as_array_mut()
        .unwrap()
        .push(material);
    let refused = to_green(&renamed);
    let problem = assert_problem(refused, 400, "validation-failed");
    assert_eq!(pointers(&problem), ["/jwks/keys/1"], "{problem}");
    // Once withdrawn by a compromise, a stale copy of the key list cannot bring it back.
    let response = rotate(&server, &acme.token, &sub, true);
    assert_eq!(response.status(), 200);
    let refused = to_green(&copied);
    let problem = assert_problem(refused, 400, "validation-failed");
    assert_eq!(pointers(&problem), ["/jwks/keys/1"], "{problem}");
    assert!(problem.to_string().contains("withdrawn"), "{problem}");
}

#[test]
fn claims_are_checked_and_a_refusal_names_the_claim() {
    let server = signing_server();
    let (acme, sub, issuer, _) =
        signing_service(&server, json!({"leadSeconds": 0, "maxTokenSeconds": 600}));
    let signer = account_for(&server, &acme, &sub, &["tokens:sign"]);
    let t = now();
    let encode = |v: Value| URL_SAFE_NO_PAD.encode(v.to_string());
    let cases = [
        (payload(&issuer, t, 601), "exp"),
        (payload(&issuer, t - 700, 600), "exp"),
        (payload(&issuer, t + 120, 300), "iat"),
        (payload("https://elsewhere.example", t, 60), "iss"),
        (
            encode(json!({"iss": issuer, "iat": "now", "exp": t + 60})),
            "iat",
        ),
        (encode(json!([1, 2, 3])), "JSON object"),
        ("not base64url!".to_owned(), "base64url"),
        (
            encode(json!({"iss": issuer, "iat": t, "exp": t + 60, "pad": "x".repeat(17_000)})),
            "bytes",
        ),
        // Longer than any payload read before (40 KB: its base64url is past 32 KiB), still
        // within the body's limit: the same problem, not a malformed field.
        (
            encode(json!({"iss": issuer, "iat": t, "exp": t + 60, "pad": "x".repeat(40_000)})),
            "bytes",
        ),
    ];
    for (claims, named) in cases {
        let (status, body) = sign(&server, &signer, &sub, &claims);
        assert_eq!(status, 400, "{body}");
        assert!(
            body["type"].as_str().unwrap().ends_with("/invalid-claims"),
            "{body}"
        );
        assert!(
            body["detail"].as_str().unwrap().contains(named),
            "{named}: {body}"
        );
    }
    // A body without claims is a validation error pointing at it.
    let refused = server
        .authed(Method::POST, &format!("/services/{sub}/sign"), &signer)
        .json(&json!({}))
        .send()
        .unwrap();
    assert_eq!(
        pointers(&assert_problem(refused, 400, "validation-failed")),
        ["/claims"]
    );
    assert!(server
        .metrics_text()
        .contains("registry_signatures_total{result=\"invalid_claims\"} 9"));
}

#[test]
fn signatures_are_limited_per_customer_and_an_anonymous_secret_signs_for_its_own_service() {
    let server = TestServer::start_with(options(&[("REGISTRY_SIGN_PER_MINUTE", "2")]));
    let (anon, secret) = server.anonymous_service();
    let issuer = server.issuer(&anon);
    turn_on(
        &server,
        &secret,
        &anon,
        json!({"leadSeconds": 0, "maxTokenSeconds": 600}),
    );
    let claims = payload(&issuer, now(), 600);
    for _ in 0..2 {
        let (status, body) = sign(&server, &secret, &anon, &claims);
        assert_eq!(status, 200, "{body}");
    }
    let limited = server
        .authed(Method::POST, &format!("/services/{anon}/sign"), &secret)
        .json(&json!({"claims": claims}))
        .send()
        .unwrap();
    assert!(limited.headers().contains_key("retry-after"));
    assert_problem(limited, 429, "rate-limited");
    // No token of an anonymous service outlives it.
    let service = json(server.get(&format!("/services/{anon}"), &secret));
    let expires = time::OffsetDateTime::parse(
        service["expiresAt"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap()
    .unix_timestamp();
    let server = TestServer::start_with(options(&[]));
    let (anon, secret) = server.anonymous_service();
    let issuer = server.issuer(&anon);
    turn_on(
        &server,
        &secret,
        &anon,
        json!({"leadSeconds": 0, "maxTokenSeconds": 31_536_000}),
    );
    let service = json(server.get(&format!("/services/{anon}"), &secret));
    let expires_here = time::OffsetDateTime::parse(
        service["expiresAt"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap()
    .unix_timestamp();
    assert!(expires_here >= expires - 60);
    let t = now();
    let (status, body) = sign(
        &server,
        &secret,
        &anon,
        &payload(&issuer, t, expires_here - t + 10),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("exp"), "{body}");
}

#[test]
fn a_rotation_signs_with_the_old_key_until_the_new_is_safe_and_a_compromise_withdraws_at_once() {
    let server = signing_server();
    let (acme, sub, issuer, first) =
        signing_service(&server, json!({"leadSeconds": 0, "maxTokenSeconds": 600}));
    let first = kids(&first, "current")[0].clone();
    let signer = account_for(&server, &acme, &sub, &["tokens:sign"]);
    let claims = || payload(&issuer, now(), 600);
    let signed_by = |claims: &str| {
        let (status, signed) = sign(&server, &signer, &sub, claims);
        assert_eq!(status, 200, "{signed}");
        signed
    };
    signed_by(&claims());
    // The next key gets a lead the test moves the clock past.
    turn_on(&server, &acme.token, &sub, json!({"leadSeconds": 60}));
    // The update's event says what changed (the other members were kept).
    let page = json(server.get("/audit-events?action=signing.update", &acme.token));
    assert_eq!(
        page["events"][0]["changes"],
        json!({"leadSeconds": {"old": 0, "new": 60}}),
        "{page}"
    );
    let rotated = rotate(&server, &acme.token, &sub, false);
    assert_eq!(rotated.status(), 200);
    let rotated = json(rotated);
    let next = kids(&rotated, "next")[0].clone();
    assert_eq!(rotated["nextRotationAt"], Value::Null);
    let again = rotate(&server, &acme.token, &sub, false);
    assert_problem(again, 409, "rotation-in-progress");
    // Published at once, beside the current key, which still signs.
    let set = hosted_keys(&server, &sub);
    let published: Vec<&str> = set["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kid"].as_str().unwrap())
        .collect();
    assert!(published.contains(&first.as_str()) && published.contains(&next.as_str()));
    let c = claims();
    let signed = signed_by(&c);
    assert_eq!(signed["kid"], first.as_str());
    let before_switch = token_of(&signed, &c);
    let readiness = json(server.get(
        &format!("/services/{sub}/keys/{next}/readiness"),
        &acme.token,
    ));
    assert_eq!(readiness["safeToSign"], false, "{readiness}");
    // Once the lead is over, the next key signs: at once for whoever reads its readiness say
    // so (the step, on a timer, would switch within seconds), and the old one retires.
    server.advance_clock(61);
    let readiness = json(server.get(
        &format!("/services/{sub}/keys/{next}/readiness"),
        &acme.token,
    ));
    assert_eq!(readiness["safeToSign"], true, "{readiness}");
    let c = claims();
    assert_eq!(signed_by(&c)["kid"], next.as_str(), "safe, so it signs");
    let state = signing_once(&server, &acme.token, &sub, |s| {
        kids(s, "current") == [next.clone()]
    });
    assert_eq!(kids(&state, "retiring"), [first.as_str()]);
    let retiring = &state["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kid"] == first.as_str())
        .unwrap()
        .clone();
    assert!(retiring["withdrawAt"].is_string(), "{state}");
    // The inventory lists it as retired, after the keys that may sign, until its withdrawal.
    let listed = json(server.get(&format!("/services/{sub}/keys"), &acme.token));
    let states: Vec<(&str, &str)> = (listed["keys"].as_array().unwrap().iter())
        .map(|k| (k["kid"].as_str().unwrap(), k["state"].as_str().unwrap()))
        .collect();
    assert_eq!(
        states,
        [(next.as_str(), "current"), (first.as_str(), "retired")],
        "{listed}"
    );
    assert_eq!(
        listed["keys"][1]["publishedUntil"], retiring["withdrawAt"],
        "{listed}"
    );
    assert!(listed["keys"][1]["retiredAt"].is_string(), "{listed}");
    let readiness = json(server.get(
        &format!("/services/{sub}/keys/{first}/readiness"),
        &acme.token,
    ));
    assert_eq!(readiness["state"], "retired", "{readiness}");
    let c = claims();
    let signed = signed_by(&c);
    assert_eq!(signed["kid"], next.as_str());
    let set = hosted_keys(&server, &sub);
    assert!(verifies(&set, &token_of(&signed, &c)));
    assert!(
        verifies(&set, &before_switch),
        "the retiring key still verifies its tokens"
    );
    // A compromise: a new key signs at once, every other leaves the key set at once.
    let compromised = rotate(&server, &acme.token, &sub, true);
    assert_eq!(compromised.status(), 200);
    let state = json(compromised);
    assert_eq!(state["keys"].as_array().unwrap().len(), 1, "{state}");
    let newest = kids(&state, "current")[0].clone();
    let set = hosted_keys(&server, &sub);
    assert!(!verifies(&set, &before_switch));
    // Listed as withdrawn: the retiring one with when it stopped signing, the one that
    // signed until the compromise without.
    let listed = json(server.get(&format!("/services/{sub}/keys"), &acme.token));
    let withdrawn = |kid: &str| {
        (listed["withdrawn"].as_array().unwrap().iter())
            .find(|w| w["kid"] == kid)
            .cloned()
            .unwrap_or_else(|| panic!("{kid} is not listed: {listed}"))
    };
    assert!(withdrawn(&first)["retiredAt"].is_string(), "{listed}");
    assert!(withdrawn(&next).get("retiredAt").is_none(), "{listed}");
    let c = claims();
    assert_eq!(signed_by(&c)["kid"], newest.as_str());
    // Each transition is in the audit trail; no signature is.
    let trail = json(server.get("/audit-events", &acme.token));
    let actions: Vec<&str> = (trail["events"].as_array().unwrap().iter())
        .filter_map(|e| e["action"].as_str())
        .filter(|a| a.starts_with("signing."))
        .collect();
    for action in [
        "signing.enable",
        "signing.update",
        "signing.rotate",
        "signing.switch",
    ] {
        assert!(actions.contains(&action), "{actions:?}");
    }
    assert_eq!(
        actions.iter().filter(|a| **a == "signing.rotate").count(),
        2,
        "{actions:?}"
    );
}

/// A compromised key stays refused once the service publishes nothing: its withdrawal is
/// remembered though the key state went with the last key (a copy of it published again
/// would make every token it signed verify again).
#[test]
fn a_compromised_key_stays_refused_after_the_service_stopped_publishing() {
    let server = signing_server();
    let settings = json!({"leadSeconds": 0, "maxTokenSeconds": 600, "algorithm": "RS256"});
    let (acme, sub, issuer, state) = signing_service(&server, settings);
    let compromised = kids(&state, "current")[0].clone();
    let signer = account_for(&server, &acme, &sub, &["tokens:sign"]);
    let claims = payload(&issuer, now(), 600);
    let (status, signed) = sign(&server, &signer, &sub, &claims);
    assert_eq!(status, 200, "{signed}");
    let set = hosted_keys(&server, &sub);
    let jwk = set["keys"][0].clone();
    assert_eq!(jwk["kid"], compromised.as_str());
    assert_eq!(rotate(&server, &acme.token, &sub, true).status(), 200);
    // Signing off: the new key, which never signed, leaves with the answer; nothing is
    // published, and the event says which key left.
    turn_off(&server, &acme.token, &sub);
    let jwks = server.hosted(Method::GET, &sub, "/openid/v1/jwks").send();
    assert_eq!(jwks.unwrap().status(), 404, "the service still publishes");
    let page = json(server.get("/audit-events?action=signing.disable", &acme.token));
    let left = &page["events"][0]["changes"]["withdrawnKids"]["new"];
    assert_eq!(left.as_array().map(Vec::len), Some(1), "{page}");
    let listed = json(server.get(&format!("/services/{sub}/keys"), &acme.token));
    let withdrawn: Vec<&str> = (listed["withdrawn"].as_array().unwrap().iter())
        .filter_map(|w| w["kid"].as_str())
        .collect();
    assert!(withdrawn.contains(&compromised.as_str()), "{listed}");
    // Its copy, under its kid or another, or written another way (its numbers with a leading
    // zero octet, which verifiers read as the same key), is refused; the token it signed stays
    // refused.
    let zero_led = |number: &Value| {
        let bytes = URL_SAFE_NO_PAD.decode(number.as_str().unwrap()).unwrap();
        Value::from(URL_SAFE_NO_PAD.encode([&[0][..], &bytes].concat()))
    };
    for (kid, n, e) in [
        (compromised.as_str(), jwk["n"].clone(), jwk["e"].clone()),
        ("copy", jwk["n"].clone(), jwk["e"].clone()),
        ("zero-led", zero_led(&jwk["n"]), zero_led(&jwk["e"])),
    ] {
        let mut copy = jwk.clone();
        copy["kid"] = kid.into();
        (copy["n"], copy["e"]) = (n, e);
        let put = (server.authed(
            Method::PUT,
            &format!("/services/{sub}/config?source=blue"),
            &acme.token,
        ))
        .json(&json!({
            "openidConfiguration": {"issuer": issuer, "jwks_uri": format!("{issuer}/openid/v1/jwks"),
                "response_types_supported": ["id_token"], "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256"]},
            "jwks": {"keys": [copy]},
        }))
        .send()
        .unwrap();
        let problem = assert_problem(put, 400, "validation-failed");
        assert!(
            problem.to_string().contains("withdrawn"),
            "{kid}: {problem}"
        );
    }
    // Still refused once something else is published again (the key state written then
    // remembers nothing of its own), and still listed.
    let other = (server.authed(
        Method::PUT,
        &format!("/services/{sub}/config?source=green"),
        &acme.token,
    ))
    .json(&super::upload(&["green-1"]))
    .send()
    .unwrap();
    assert_eq!(other.status(), 200);
    let mut copy = jwk.clone();
    copy["kid"] = "copy".into();
    let mut body = super::upload(&["green-1"]);
    body["jwks"]["keys"].as_array_mut().unwrap().push(copy);
    let put = (server.authed(
        Method::PUT,
        &format!("/services/{sub}/config?source=green"),
        &acme.token,
    ))
    .json(&body)
    .send()
    .unwrap();
    assert_problem(put, 400, "validation-failed");
    let listed = json(server.get(&format!("/services/{sub}/keys"), &acme.token));
    assert!(
        (listed["withdrawn"].as_array().unwrap().iter()).any(|w| w["kid"] == compromised.as_str()),
        "{listed}"
    );
}

/// First PUTs at once make one first key: one turns signing on, the others update it, and
/// every answer names the key that stays.
#[test]
fn first_puts_at_once_turn_signing_on_once() {
    let server = signing_server();
    let acme = server.customer("acme", "business");
    let sub = register_service(&server, &acme, "k3s");
    let answers: Vec<Value> = std::thread::scope(|scope| {
        let puts: Vec<_> = (0..8)
            .map(|_| scope.spawn(|| turn_on(&server, &acme.token, &sub, json!({"leadSeconds": 0}))))
            .collect();
        puts.into_iter().map(|put| put.join().unwrap()).collect()
    });
    let state = json(server.get(&format!("/services/{sub}/signing"), &acme.token));
    assert_eq!(state["keys"].as_array().unwrap().len(), 1, "{state}");
    let kid = kids(&state, "current");
    for answer in &answers {
        assert_eq!(kids(answer, "current"), kid, "{answer}");
    }
    let enabled = json(server.get("/audit-events?action=signing.enable", &acme.token));
    assert_eq!(enabled["events"].as_array().unwrap().len(), 1, "{enabled}");
}

#[test]
fn turned_off_nothing_signs_and_the_keys_stay_until_their_tokens_expire() {
    let server = signing_server();
    let (acme, sub, issuer, state) = signing_service(
        &server,
        json!({"leadSeconds": 0, "maxTokenSeconds": 600, "algorithm": "RS256"}),
    );
    let kid = kids(&state, "current")[0].clone();
    let signer = account_for(&server, &acme, &sub, &["tokens:sign"]);
    let claims = payload(&issuer, now(), 600);
    let (status, signed) = sign(&server, &signer, &sub, &claims);
    assert_eq!(status, 200);
    let token = token_of(&signed, &claims);
    assert!(
        verifies(&hosted_keys(&server, &sub), &token),
        "RS256 verifies"
    );
    turn_off(&server, &acme.token, &sub);
    assert_eq!(sign(&server, &signer, &sub, &claims).0, 404);
    assert_eq!(
        server
            .get(&format!("/services/{sub}/signing"), &acme.token)
            .status(),
        404
    );
    assert!(
        verifies(&hosted_keys(&server, &sub), &token),
        "published until its tokens expire"
    );
    // 600 s of token and 300 s more: then it leaves, and with it everything the service
    // published (nothing was uploaded): no empty key set is left behind.
    server.advance_clock(901);
    let jwks_status = || {
        let response = server.hosted(Method::GET, &sub, "/openid/v1/jwks").send();
        response.unwrap().status().as_u16()
    };
    let left = within(Duration::from_secs(30), || jwks_status() == 404);
    assert!(left, "{kid} never left: {}", jwks_status());
    let config = server.get(&format!("/services/{sub}/config"), &acme.token);
    assert_eq!(config.status(), 404);
}

/// A manager of every service grants signing without holding it, but not for a service whose
/// issuer a federated account broader than the manager trusts: the signer would mint that
/// account's tokens, and reach further than the manager.
#[test]
fn signing_is_granted_only_by_an_account_no_narrower_than_the_federation_it_reaches() {
    let server = signing_server();
    let acme = server.customer("acme", "business");
    let k3s = register_service(&server, &acme, "k3s");
    let web = register_service(&server, &acme, "web");
    let manager = create_account(
        &server,
        &acme,
        "manager",
        json!({"$schema": V2, "kind": "static", "services": ["*"],
            "actions": ["services:read", "accounts:read", "accounts:write"]}),
    );
    let me = manager["id"].as_str().unwrap().to_owned();
    let manager = manager["token"].as_str().unwrap().to_owned();
    let signer_on = |token: &str, sub: &str, name: &str| {
        let policy =
            json!({"$schema": V2, "kind": "static", "services": [sub], "actions": ["tokens:sign"]});
        (server.authed(Method::POST, "/service-accounts", token))
            .json(&json!({"name": name, "policy": policy}))
            .send()
            .unwrap()
    };
    // No federated account trusts k3s's issuer yet: the manager grants signing there.
    let first = signer_on(&manager, &k3s, "first");
    assert_eq!(first.status(), 201);
    let first = json(first)["id"].as_str().unwrap().to_owned();
    // The cluster's administrator, federated on k3s's own issuer, with every action.
    let admin = json!({"kind": "oidc", "rules": [{"services": ["*"], "claims": {
        "iss": server.issuer(&k3s), "aud": "registry",
        "sub": "system:serviceaccount:kube-system:registry-admin"}}]});
    create_account(&server, &acme, "cluster-admin", admin);
    let problem = assert_problem(signer_on(&manager, &k3s, "second"), 403, "forbidden");
    let detail = problem["detail"].as_str().unwrap();
    assert!(detail.contains("\"cluster-admin\""), "{detail}");
    // Nor may it hand out a new token of the signer it made before.
    let path = format!("/service-accounts/{first}/regenerate-token");
    let regenerated = server.authed(Method::POST, &path, &manager).send().unwrap();
    assert_problem(regenerated, 403, "forbidden");
    // But a change that gives it no new reach (its name, the same signing) is the manager's.
    let policy =
        json!({"$schema": V2, "kind": "static", "services": [k3s], "actions": ["tokens:sign"]});
    let renamed = (server.authed(
        Method::PATCH,
        &format!("/service-accounts/{first}"),
        &manager,
    ))
    .json(&json!({"name": "first-renamed", "policy": policy}))
    .send()
    .unwrap();
    assert_eq!(renamed.status(), 200);
    // Elsewhere, and by an account as broad as the administrator, signing is granted.
    assert_eq!(signer_on(&manager, &web, "third").status(), 201);
    assert_eq!(signer_on(&acme.token, &k3s, "fourth").status(), 201);
    // Never to itself: it cannot sign, so it cannot make itself sign (the probe of
    // 2026-12-04: a PATCH of its own policy, then a signature, answered 200).
    let widened = json!({"$schema": V2, "kind": "static", "services": [web],
        "actions": ["services:read", "accounts:read", "accounts:write", "tokens:sign"]});
    let patched = (server.authed(Method::PATCH, &format!("/service-accounts/{me}"), &manager))
        .json(&json!({"policy": widened}))
        .send()
        .unwrap();
    let problem = assert_problem(patched, 403, "forbidden");
    let detail = problem["detail"].as_str().unwrap();
    assert!(detail.contains("itself"), "{detail}");
    // Another account as broad grants it.
    let patched = (server.authed(
        Method::PATCH,
        &format!("/service-accounts/{me}"),
        &acme.token,
    ))
    .json(&json!({"policy": widened}))
    .send()
    .unwrap();
    assert_eq!(patched.status(), 200);
}

/// The rotation step's withdrawal of the last key a service published removes its documents in
/// the background: caches in front are purged of them even when no replica holds them in memory
/// any more (dropped for room).
#[test]
fn the_last_managed_keys_withdrawal_is_purged_though_no_replica_holds_the_documents() {
    let (address, seen) = super::cdn::cache();
    let server = TestServer::start_with(options(&[
        ("REGISTRY_PURGE_URLS", &address),
        ("REGISTRY_HOSTING_CACHE_BYTES", "2500"),
        // The upkeep would drop the retired key too: the step is the one that withdraws it here.
        ("REGISTRY_TEST_REAP_EVERY_SECONDS", "3600"),
    ]));
    let (acme, sub, issuer, _) = signing_service(
        &server,
        json!({"leadSeconds": 0, "maxTokenSeconds": 600, "algorithm": "RS256"}),
    );
    let authority = server.issuer(&sub).split_once("://").unwrap().1.to_owned();
    let purge = format!("PURGE /openid/v1/jwks {authority}");
    let purges = || seen.lock().unwrap().iter().filter(|l| **l == purge).count();
    // It signed: turned off, it stays published until that token has expired.
    let signer = account_for(&server, &acme, &sub, &["tokens:sign"]);
    assert_eq!(
        sign(&server, &signer, &sub, &payload(&issuer, now(), 600)).0,
        200
    );
    turn_off(&server, &acme.token, &sub);
    // Other services published after it leave it out of the hosting cache.
    for tenant in ["two", "three", "four", "five"] {
        let customer = server.customer(tenant, "business");
        super::publish_api(&server, &customer);
    }
    let held = server.metric("registry_hosted_issuers");
    assert!(held < 5, "{held} issuers held: none was dropped for room");
    let settled = within(Duration::from_secs(10), || purges() >= 1);
    assert!(settled, "{:?}", seen.lock().unwrap());
    let before = purges();
    // 600 s of token and 300 s more: the retiring key leaves, and with it the configuration.
    server.advance_clock(901);
    let config_status = || {
        let path = format!("/services/{sub}/config");
        server.get(&path, &acme.token).status().as_u16()
    };
    assert!(within(Duration::from_secs(30), || config_status() == 404));
    let purged = within(Duration::from_secs(10), || purges() > before);
    assert!(
        purged,
        "{before} purges, none after: {:?}",
        seen.lock().unwrap()
    );
}

/// A first key with a lead is not safe at once: signing answers 409 `no-key-ready` with a
/// `Retry-After` until the lead is over, then signs.
#[test]
fn while_no_key_is_safe_signing_answers_no_key_ready_with_retry_after() {
    let server = signing_server();
    let (acme, sub, issuer, state) = signing_service(&server, json!({"leadSeconds": 120}));
    assert_eq!(kids(&state, "current"), Vec::<String>::new(), "{state}");
    assert_eq!(kids(&state, "next").len(), 1, "{state}");
    let signer = account_for(&server, &acme, &sub, &["tokens:sign"]);
    let claims = payload(&issuer, now(), 600);
    let refused = server
        .authed(Method::POST, &format!("/services/{sub}/sign"), &signer)
        .json(&json!({"claims": claims}))
        .send()
        .unwrap();
    let retry_after: u64 = (refused.headers().get("retry-after"))
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or_else(|| panic!("no Retry-After in {:?}", refused.headers()));
    assert!(
        (1..=120).contains(&retry_after),
        "Retry-After {retry_after}"
    );
    assert_problem(refused, 409, "no-key-ready");
    // The lead over, the step switches the key in and it signs.
    server.advance_clock(121);
    signing_once(&server, &acme.token, &sub, |s| {
        kids(s, "current").len() == 1
    });
    let (status, signed) = sign(&server, &signer, &sub, &claims);
    assert_eq!(status, 200, "{signed}");
}

/// Dismissing the last verifier that held a next key back switches to it at once, as a
/// readiness call that finds it safe does: the very next signature uses it.
#[test]
fn dismissing_the_verifier_that_held_a_next_key_back_switches_to_it_at_once() {
    let server = TestServer::start_with(options(&[("REGISTRY_FETCH_FLUSH_SECONDS", "1")]));
    let (acme, sub, issuer, first) = signing_service(&server, json!({"leadSeconds": 0}));
    let first = kids(&first, "current")[0].clone();
    // A verifier: it fetched the key set in two distinct hours before the next key.
    let fetched_in_hours = |hours: usize| {
        let response = (server.hosted(Method::GET, &sub, "/openid/v1/jwks"))
            .header("user-agent", "aws-sts")
            .send()
            .unwrap();
        assert_eq!(response.status(), 200);
        super::readiness::wait_for_hours(&server, &acme.token, &sub, &["aws-sts"], hours);
    };
    fetched_in_hours(1);
    server.advance_clock(3600);
    fetched_in_hours(2);
    let next = kids(&json(rotate(&server, &acme.token, &sub, false)), "next")[0].clone();
    let signer = account_for(&server, &acme, &sub, &["tokens:sign"]);
    // The server's clock is an hour ahead of this one.
    let claims = payload(&issuer, now() + 3600, 600);
    let (status, signed) = sign(&server, &signer, &sub, &claims);
    assert_eq!((status, &signed["kid"]), (200, &json!(first)), "{signed}");
    let path = format!("/services/{sub}/keys/{next}/readiness/verifiers/aws-sts");
    let dismissed = server
        .authed(Method::DELETE, &path, &acme.token)
        .send()
        .unwrap();
    assert_eq!(dismissed.status(), 204);
    let (status, signed) = sign(&server, &signer, &sub, &claims);
    assert_eq!((status, &signed["kid"]), (200, &json!(next)), "{signed}");
}

/// Lowering `maxTokenSeconds` never withdraws a key before the longer tokens it signed expire.
#[test]
fn a_lowered_token_lifetime_keeps_a_retiring_key_until_its_longer_tokens_expire() {
    let server = signing_server();
    let (acme, sub, issuer, first) = signing_service(&server, json!({"leadSeconds": 0}));
    let first = kids(&first, "current")[0].clone();
    let signer = account_for(&server, &acme, &sub, &["tokens:sign"]);
    // A token of a day (the default bound), then the bound lowered to ten minutes.
    let claims = payload(&issuer, now(), 86_400);
    let (status, signed) = sign(&server, &signer, &sub, &claims);
    assert_eq!(status, 200, "{signed}");
    let token = token_of(&signed, &claims);
    let lowered = turn_on(&server, &acme.token, &sub, json!({"maxTokenSeconds": 600}));
    assert_eq!(lowered["maxTokenSeconds"], 600);
    assert_eq!(rotate(&server, &acme.token, &sub, false).status(), 200);
    // Lead 0 and no verifier: the step switches at once.
    let state = signing_once(&server, &acme.token, &sub, |s| {
        kids(s, "retiring") == [first.clone()]
    });
    let retiring = (state["keys"].as_array().unwrap().iter())
        .find(|k| k["kid"] == first.as_str())
        .unwrap();
    let at = |member: &str| {
        let text = retiring[member]
            .as_str()
            .unwrap_or_else(|| panic!("{member}: {state}"));
        time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).unwrap()
    };
    assert!(
        at("withdrawAt") - at("lastSignedAt") >= time::Duration::seconds(86_400 + 300),
        "withdrawn before the day-long token expires: {state}"
    );
    // Past the lowered bound and its margin, the day-long token still verifies.
    server.advance_clock(901);
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        verifies(&hosted_keys(&server, &sub), &token),
        "the retiring key left with a token of its still valid"
    );
}

/// The README's move from file keys to the signer: the file keys published as their own source,
/// signing turned on, then that source removed. The discovery document becomes the registry's
/// own, as for a service that never had an upload, naming the managed key's algorithm.
#[test]
fn removing_the_last_uploaded_source_leaves_the_registrys_own_discovery_document() {
    let server = signing_server();
    let acme = server.customer("acme", "business");
    let sub = register_service(&server, &acme, "k3s");
    let issuer = server.issuer(&sub);
    let uploaded = server
        .authed(
            Method::PUT,
            &format!("/services/{sub}/config?source=files"),
            &acme.token,
        )
        .json(&super::upload(&["file-key"]))
        .send()
        .unwrap();
    assert!(uploaded.status().is_success(), "{}", uploaded.status());
    turn_on(&server, &acme.token, &sub, json!({"leadSeconds": 0}));
    let discovery = || {
        let served = server
            .hosted(Method::GET, &sub, "/.well-known/openid-configuration")
            .send()
            .unwrap();
        assert_eq!(served.status(), 200);
        json(served)
    };
    assert_eq!(
        discovery()["id_token_signing_alg_values_supported"],
        json!(["RS256"]),
        "the cluster's document while its file keys are current"
    );
    let removed = server
        .authed(
            Method::DELETE,
            &format!("/services/{sub}/config?source=files"),
            &acme.token,
        )
        .send()
        .unwrap();
    assert_eq!(removed.status(), 204);
    let written = discovery();
    assert_eq!(written["issuer"], issuer.as_str(), "{written}");
    assert_eq!(written["jwks_uri"], format!("{issuer}/openid/v1/jwks"));
    assert_eq!(written["response_types_supported"], json!(["id_token"]));
    assert_eq!(written["subject_types_supported"], json!(["public"]));
    // Every published key's algorithm: the file key stays in the key set, retired, for its
    // source's retention.
    assert_eq!(
        written["id_token_signing_alg_values_supported"],
        json!(["ES256", "RS256"]),
        "{written}"
    );
    let set = hosted_keys(&server, &sub);
    assert!(
        (set["keys"].as_array().unwrap().iter()).any(|k| k["kid"] == "file-key"),
        "{set}"
    );
    // Once it leaves, the document names the managed key's algorithm alone.
    let gone = server
        .authed(
            Method::DELETE,
            &format!("/services/{sub}/keys/file-key"),
            &acme.token,
        )
        .send()
        .unwrap();
    assert_eq!(gone.status(), 204);
    assert_eq!(
        discovery()["id_token_signing_alg_values_supported"],
        json!(["ES256"])
    );
}

/// The `signing.*` actions of the customer's trail, oldest first, with their actors' kinds.
fn signing_events(server: &TestServer, token: &str) -> Vec<(String, String)> {
    let trail = json(server.get("/audit-events?limit=500", token));
    let mut events: Vec<(String, String)> = (trail["events"].as_array().unwrap().iter())
        .filter(|e| e["action"].as_str().unwrap().starts_with("signing."))
        .map(|e| {
            (
                e["action"].as_str().unwrap().to_owned(),
                e["actor"]["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    events.reverse();
    events
}

#[test]
fn two_replicas_racing_for_one_rotation_write_each_transition_once() {
    let a = signing_server();
    let b = TestServer::start_with(ServerOptions {
        database_url: Some(a.database_url.clone()),
        ..options(&[])
    });
    let acme = a.customer("acme", "business");
    let sub = register_service(&a, &acme, "k3s");
    let first = turn_on(
        &a,
        &acme.token,
        &sub,
        json!({"leadSeconds": 0, "rotationPeriodSeconds": 3600}),
    );
    let first = kids(&first, "current");
    // The period is over on both replicas at once: each one's step finds the rotation due.
    a.advance_clock(3601);
    b.advance_clock(3601);
    // The first key (which never signed) leaves once the second signs.
    let state = signing_once(&b, &acme.token, &sub, |s| {
        s["keys"].as_array().unwrap().len() == 1 && kids(s, "current") != first
    });
    // Rotated by the registry, switched at once (lead 0, no verifier), the first key withdrawn
    // (it never signed): each transition once, by the system, whichever replica wrote it.
    std::thread::sleep(Duration::from_secs(5));
    let events = signing_events(&a, &acme.token);
    let count = |action: &str| events.iter().filter(|(e, _)| e == action).count();
    assert_eq!(count("signing.enable"), 1, "{events:?}");
    assert_eq!(count("signing.rotate"), 1, "{events:?}");
    assert_eq!(count("signing.switch"), 2, "{events:?}");
    assert_eq!(count("signing.withdraw"), 1, "{events:?}");
    assert!(
        events.iter().skip(2).all(|(_, actor)| actor == "system"),
        "{events:?}"
    );
    assert_eq!(kids(&state, "current").len(), 1);
    // Both replicas serve the same key set.
    assert_eq!(hosted_keys(&a, &sub), hosted_keys(&b, &sub));
}

#[test]
fn a_rotation_started_before_a_restart_finishes_after_it() {
    let first = signing_server();
    let (acme, sub, _, _) = signing_service(&first, json!({"leadSeconds": 0}));
    turn_on(&first, &acme.token, &sub, json!({"leadSeconds": 30}));
    let rotated = json(rotate(&first, &acme.token, &sub, false));
    let next = kids(&rotated, "next");
    assert_eq!(next.len(), 1, "{rotated}");
    let database_url = first.database_url.clone();
    drop(first);
    // Another process on the same database: the state it reads is where the first stopped.
    let second = TestServer::start_with(ServerOptions {
        database_url: Some(database_url),
        ..options(&[])
    });
    let state = json(second.get(&format!("/services/{sub}/signing"), &acme.token));
    assert_eq!(kids(&state, "next"), next);
    second.advance_clock(31);
    // The next key signs, and the first, which never signed, leaves at the step after.
    signing_once(&second, &acme.token, &sub, |s| {
        kids(s, "current") == next && s["keys"].as_array().unwrap().len() == 1
    });
}

/// A key published while no cache was purged waits for no purge once `REGISTRY_PURGE_URLS` is
/// set: the probe's first key, which waited for ever and left signing stuck.
#[test]
fn a_key_published_before_caches_were_purged_waits_for_no_purge() {
    let first = signing_server();
    let (acme, sub, _, state) = signing_service(&first, json!({"leadSeconds": 30}));
    let next = kids(&state, "next");
    assert_eq!(next.len(), 1, "{state}");
    // The change is recorded in the background, as a purge is (within milliseconds; longer on
    // a loaded machine).
    let database_url = first.database_url.clone();
    assert!(
        registry_tests::wait::within(Duration::from_secs(30), || {
            registry_tests::query_sql(&database_url, "SELECT count(*) FROM purges") != ["0"]
        }),
        "the change that left nothing to purge was not recorded"
    );
    drop(first);
    let (address, _) = super::cdn::cache();
    let second = TestServer::start_with(ServerOptions {
        database_url: Some(database_url),
        ..options(&[("REGISTRY_PURGE_URLS", &address)])
    });
    second.advance_clock(31);
    let path = format!("/services/{sub}/keys/{}/readiness", next[0]);
    let readiness = json(second.get(&path, &acme.token));
    assert_eq!(readiness["safeToSign"], true, "{readiness}");
    signing_once(&second, &acme.token, &sub, |s| kids(s, "current") == next);
}

#[test]
fn retiring_keys_leave_on_a_registry_started_without_the_data_key() {
    let first = signing_server();
    let (acme, sub, issuer, _) =
        signing_service(&first, json!({"leadSeconds": 0, "maxTokenSeconds": 600}));
    let signer = account_for(&first, &acme, &sub, &["tokens:sign"]);
    let (status, signed) = sign(&first, &signer, &sub, &payload(&issuer, now(), 600));
    assert_eq!(status, 200, "{signed}");
    let response = (first.authed(
        Method::DELETE,
        &format!("/services/{sub}/signing"),
        &acme.token,
    ))
    .send()
    .unwrap();
    assert_eq!(response.status(), 204);
    let database_url = first.database_url.clone();
    drop(first);
    // Withdrawing a key needs no private key: a registry without the data key still does it.
    let second = TestServer::start_with(ServerOptions {
        database_url: Some(database_url),
        ..ServerOptions::default()
    });
    let managed = |server: &TestServer| {
        let listed = json(server.get(&format!("/services/{sub}/keys"), &acme.token));
        (listed["keys"].as_array().unwrap().iter())
            .filter(|k| k["source"] == "managed")
            .count()
    };
    assert_eq!(managed(&second), 1);
    // Its tokens expire 600 s after it last signed; 300 s more, and it leaves.
    second.advance_clock(600 + 300 + 61);
    let left = within(Duration::from_secs(30), || managed(&second) == 0);
    assert!(left, "the retiring key stayed published");
}
