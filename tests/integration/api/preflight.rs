//! Before a cloud refuses (docs/api.md, "Preflight"): `GET` and `POST /services/{s}/preflight`,
//! with real keys and real signed tokens (RSA, EC P-256 and P-384, Ed25519), checked against the
//! keys the registry publishes, current and retired.

use super::{cluster_discovery, register_service};
use registry_tests::issuer::{compact, KeyKind, SigningKey};
use registry_tests::server::{assert_problem, json, pointers, unix_now, ServerOptions, TestServer};
use reqwest::Method;
use serde_json::{json, Value};

/// A server whose issuers are `https://{subdomain}.example.com`, as in production.
fn https_server() -> TestServer {
    TestServer::start_with(ServerOptions {
        env: vec![(
            "REGISTRY_ISSUER_URL_TEMPLATE".into(),
            "https://{subdomain}.example.com".into(),
        )],
        ..ServerOptions::default()
    })
}

fn put_keys(server: &TestServer, token: &str, subdomain: &str, keys: &[Value]) {
    let body = json!({"openidConfiguration": cluster_discovery(), "jwks": {"keys": keys}});
    let put = server
        .authed(Method::PUT, &format!("/services/{subdomain}/config"), token)
        .json(&body)
        .send()
        .unwrap();
    assert_eq!(put.status(), 200, "{}", put.text().unwrap());
}

fn preflight(server: &TestServer, secret: &str, subdomain: &str) -> reqwest::blocking::Response {
    server.get(&format!("/services/{subdomain}/preflight"), secret)
}

fn preflight_token(
    server: &TestServer,
    secret: &str,
    subdomain: &str,
    token: &str,
) -> reqwest::blocking::Response {
    server
        .authed(
            Method::POST,
            &format!("/services/{subdomain}/preflight"),
            secret,
        )
        .json(&json!({ "token": token }))
        .send()
        .unwrap()
}

/// The codes of a cloud's findings.
fn codes(answer: &Value, cloud: &str) -> Vec<String> {
    answer["clouds"][cloud]["findings"]
        .as_array()
        .unwrap_or_else(|| panic!("no {cloud} in {answer}"))
        .iter()
        .map(|f| f["code"].as_str().unwrap().to_owned())
        .collect()
}

/// The finding of `code` for `cloud`.
fn finding(answer: &Value, cloud: &str, code: &str) -> Value {
    answer["clouds"][cloud]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["code"] == code)
        .cloned()
        .unwrap_or_else(|| panic!("no {code} for {cloud} in {answer}"))
}

/// A token signed by `key` with `alg`, `kid` in its header when given, for `iss`.
fn signed(key: &SigningKey, alg: &str, kid: Option<&str>, iss: &str) -> String {
    let now = unix_now();
    let mut header = json!({"alg": alg, "typ": "JWT"});
    if let Some(kid) = kid {
        header["kid"] = json!(kid);
    }
    compact(
        &header,
        &json!({"iss": iss, "sub": "system:serviceaccount:ci:deployer",
            "aud": ["sts.amazonaws.com", "api://AzureADTokenExchange",
                "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p/providers/k"],
            "iat": now, "exp": now + 3600, "jti": "not-shown"}),
        |m| key.sign(alg, m),
    )
}

struct Keys {
    rsa: SigningKey,
    p256: SigningKey,
    p384: SigningKey,
    ed: SigningKey,
    old: SigningKey,
}

/// A service of acme that published `old` (P-256), then rsa, p256, p384 and ed: `old` is
/// retired and still published, after the others.
fn published(server: &TestServer) -> (registry_tests::server::Customer, String, String, Keys) {
    let acme = server.customer("acme", "business");
    let sub = register_service(server, &acme, "k3s");
    let keys = Keys {
        rsa: SigningKey::generate(KeyKind::Rsa, "rsa"),
        p256: SigningKey::generate(KeyKind::P256, "p256"),
        p384: SigningKey::generate(KeyKind::P384, "p384"),
        ed: SigningKey::generate(KeyKind::Ed25519, "ed"),
        old: SigningKey::generate(KeyKind::P256, "old"),
    };
    put_keys(server, &acme.token, &sub, &[keys.old.public_jwk()]);
    let current: Vec<Value> = [&keys.rsa, &keys.p256, &keys.p384, &keys.ed]
        .iter()
        .map(|k| k.public_jwk())
        .collect();
    put_keys(server, &acme.token, &sub, &current);
    let issuer = json(preflight(server, &acme.token, &sub))["issuer"]
        .as_str()
        .unwrap()
        .to_owned();
    (acme, sub, issuer, keys)
}

#[test]
fn the_published_documents_are_checked_per_cloud() {
    let server = https_server();
    let (acme, sub, issuer, _) = published(&server);
    assert_eq!(issuer, format!("https://{sub}.example.com"));
    let answer = json(preflight(&server, &acme.token, &sub));
    assert_eq!(answer["published"], true);
    // Keys as served: rsa, p256, p384, ed, then the retired old (P-256).
    assert_eq!(codes(&answer, "aws"), ["key-unsupported"]);
    assert_eq!(
        finding(&answer, "aws", "key-unsupported")["pointer"],
        "/jwks/keys/3"
    );
    assert_eq!(answer["clouds"]["aws"]["ready"], true);
    let gcp: Vec<Value> = answer["clouds"]["gcp"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["pointer"].clone())
        .collect();
    assert_eq!(gcp, [json!("/jwks/keys/2"), json!("/jwks/keys/3")]);
    assert_eq!(answer["clouds"]["gcp"]["ready"], true);
    assert_eq!(codes(&answer, "azure").len(), 4, "{answer}");
    assert_eq!(
        answer["clouds"]["azure"]["ready"], true,
        "the RSA key serves Azure"
    );

    // Only an Ed25519 key: no cloud has a key it verifies with.
    let ed_only = register_service(&server, &acme, "edonly");
    let ed = SigningKey::generate(KeyKind::Ed25519, "e");
    put_keys(&server, &acme.token, &ed_only, &[ed.public_jwk()]);
    let answer = json(preflight(&server, &acme.token, &ed_only));
    for cloud in ["aws", "gcp", "azure"] {
        assert_eq!(codes(&answer, cloud), ["key-unsupported", "no-usable-key"]);
        assert_eq!(answer["clouds"][cloud]["ready"], false);
    }

    // Nothing published.
    let empty = register_service(&server, &acme, "empty");
    let answer = json(preflight(&server, &acme.token, &empty));
    assert_eq!(answer["published"], false);
    for cloud in ["aws", "gcp", "azure"] {
        assert_eq!(codes(&answer, cloud), ["not-published"]);
    }
}

#[test]
fn an_http_issuer_with_a_port_is_refused_everywhere_and_warned_for_aws() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let sub = super::publish_api(&server, &acme);
    let answer = json(preflight(&server, &acme.token, &sub));
    assert_eq!(answer["issuer"], server.issuer(&sub).as_str());
    assert_eq!(
        codes(&answer, "aws"),
        ["issuer-not-https", "issuer-has-port"]
    );
    assert_eq!(
        finding(&answer, "aws", "issuer-has-port")["severity"],
        "warning"
    );
    for cloud in ["gcp", "azure"] {
        assert_eq!(codes(&answer, cloud), ["issuer-not-https"]);
        assert_eq!(answer["clouds"][cloud]["ready"], false);
    }
}

#[test]
fn real_tokens_are_checked_against_current_and_retired_keys() {
    let server = https_server();
    let (acme, sub, issuer, keys) = published(&server);
    let check = |token: &str| {
        let response = preflight_token(&server, &acme.token, &sub, token);
        assert_eq!(response.status(), 200);
        json(response)
    };

    // RS256 with kid: every cloud is ready.
    let answer = check(&signed(&keys.rsa, "RS256", Some("rsa"), &issuer));
    for cloud in ["aws", "gcp", "azure"] {
        let token_codes: Vec<String> = codes(&answer, cloud)
            .into_iter()
            .filter(|c| c != "key-unsupported")
            .collect();
        assert!(token_codes.is_empty(), "{cloud}: {answer}");
        assert_eq!(answer["clouds"][cloud]["ready"], true);
    }
    assert_eq!(
        answer["token"],
        json!({"header": {"alg": "RS256", "kid": "rsa"},
            "claims": {"iss": issuer, "sub": "system:serviceaccount:ci:deployer",
                "aud": answer["token"]["claims"]["aud"].clone(),
                "exp": answer["token"]["claims"]["exp"].clone(),
                "iat": answer["token"]["claims"]["iat"].clone(), "nbf": null}})
    );
    assert!(!answer.to_string().contains("not-shown"), "no other claim");

    // ES256 (P-256): Azure verifies RS256 only.
    let answer = check(&signed(&keys.p256, "ES256", Some("p256"), &issuer));
    assert!(codes(&answer, "azure").contains(&"algorithm-unsupported".to_owned()));
    assert!(!codes(&answer, "gcp").contains(&"algorithm-unsupported".to_owned()));
    assert_eq!(answer["clouds"]["aws"]["ready"], true);

    // ES384 (P-384): GCP and Azure refuse it, AWS verifies it.
    let answer = check(&signed(&keys.p384, "ES384", Some("p384"), &issuer));
    assert_eq!(answer["clouds"]["aws"]["ready"], true);
    for cloud in ["gcp", "azure"] {
        assert!(codes(&answer, cloud).contains(&"algorithm-unsupported".to_owned()));
    }

    // EdDSA (Ed25519): the signature verifies, but no cloud accepts the algorithm.
    let answer = check(&signed(&keys.ed, "EdDSA", Some("ed"), &issuer));
    for cloud in ["aws", "gcp", "azure"] {
        let found = codes(&answer, cloud);
        assert!(
            found.contains(&"algorithm-unsupported".to_owned()),
            "{cloud}"
        );
        assert!(!found.contains(&"key-unknown".to_owned()), "{cloud}");
        assert!(!found.contains(&"signature-invalid".to_owned()), "{cloud}");
    }

    // Without kid: the key is found among all, but GCP requires a kid.
    let answer = check(&signed(&keys.rsa, "RS256", None, &issuer));
    assert!(codes(&answer, "gcp").contains(&"kid-missing".to_owned()));
    assert!(!codes(&answer, "aws").contains(&"kid-missing".to_owned()));
    assert_eq!(answer["clouds"]["aws"]["ready"], true);
    assert_eq!(
        answer["token"]["header"],
        json!({"alg": "RS256", "kid": null})
    );

    // The retired key still verifies: it is published until its retention ends.
    let answer = check(&signed(&keys.old, "ES256", Some("old"), &issuer));
    assert_eq!(answer["clouds"]["aws"]["ready"], true, "{answer}");
    assert!(!codes(&answer, "gcp").contains(&"key-unknown".to_owned()));

    // A key never uploaded: under a kid of its own, and under a published kid.
    let stranger = SigningKey::generate(KeyKind::Rsa, "stranger");
    let answer = check(&signed(&stranger, "RS256", Some("stranger"), &issuer));
    for cloud in ["aws", "gcp", "azure"] {
        assert!(codes(&answer, cloud).contains(&"key-unknown".to_owned()));
        assert_eq!(answer["clouds"][cloud]["ready"], false);
    }
    let answer = check(&signed(&stranger, "RS256", Some("rsa"), &issuer));
    let invalid = finding(&answer, "aws", "signature-invalid");
    assert_eq!(invalid["pointer"], "/jwks/keys/0");
    let answer = check(&signed(&stranger, "RS256", None, &issuer));
    assert!(codes(&answer, "azure").contains(&"key-unknown".to_owned()));

    // A trailing slash on the token's iss.
    let answer = check(&signed(
        &keys.rsa,
        "RS256",
        Some("rsa"),
        &format!("{issuer}/"),
    ));
    for cloud in ["aws", "gcp", "azure"] {
        let mismatch = finding(&answer, cloud, "issuer-mismatch");
        assert!(
            mismatch["message"]
                .as_str()
                .unwrap()
                .contains("trailing slash"),
            "{mismatch}"
        );
        assert_eq!(mismatch["pointer"], "/openidConfiguration/issuer");
    }
}

#[test]
fn claims_per_cloud_audience_expiry_and_lifetime() {
    let server = https_server();
    let (acme, sub, issuer, keys) = published(&server);
    let now = unix_now();
    let token = |claims: Value| keys.rsa.sign_claims("RS256", &claims);
    let answer = json(preflight_token(
        &server,
        &acme.token,
        &sub,
        &token(
            json!({"iss": issuer, "sub": "s", "aud": "vault", "iat": now - 7200, "exp": now - 60}),
        ),
    ));
    for cloud in ["aws", "gcp", "azure"] {
        assert!(codes(&answer, cloud).contains(&"token-expired".to_owned()));
        assert!(codes(&answer, cloud).contains(&"audience-mismatch".to_owned()));
    }
    assert_eq!(
        finding(&answer, "aws", "audience-mismatch")["severity"],
        "warning"
    );
    assert_eq!(
        finding(&answer, "azure", "audience-mismatch")["severity"],
        "warning"
    );
    assert_eq!(
        finding(&answer, "gcp", "audience-mismatch")["severity"],
        "error"
    );

    let long = token(
        json!({"iss": issuer, "sub": "s", "aud": "sts.amazonaws.com",
        "iat": now, "exp": now + 72 * 3600}),
    );
    let answer = json(preflight_token(&server, &acme.token, &sub, &long));
    assert!(codes(&answer, "gcp").contains(&"token-lifetime-too-long".to_owned()));
    assert!(!codes(&answer, "aws").contains(&"token-lifetime-too-long".to_owned()));
    assert!(!codes(&answer, "azure").contains(&"token-lifetime-too-long".to_owned()));
}

#[test]
fn a_token_that_is_not_a_jws_is_a_400_at_token() {
    let server = https_server();
    let (acme, sub, _, _) = published(&server);
    for token in ["", "opaque-secret", "a.b", "e30.e30.c2ln.x"] {
        let response = preflight_token(&server, &acme.token, &sub, token);
        let problem = assert_problem(response, 400, "validation-failed");
        assert_eq!(pointers(&problem), ["/token"], "{token:?}");
        assert!(!problem.to_string().contains("opaque-secret"));
    }
    let missing = server
        .authed(
            Method::POST,
            &format!("/services/{sub}/preflight"),
            &acme.token,
        )
        .json(&json!({}))
        .send()
        .unwrap();
    let problem = assert_problem(missing, 400, "validation-failed");
    assert_eq!(pointers(&problem), ["/token"]);
}

#[test]
fn anonymous_secrets_preflight_their_own_service_and_no_other() {
    let server = https_server();
    let (acme, sub, _, keys) = published(&server);
    let (anon, secret) = server.anonymous_service();
    let (anon, secret) = (anon.as_str(), secret.as_str());
    let answer = json(preflight(&server, secret, anon));
    assert_eq!(answer["published"], false);
    let issuer = answer["issuer"].as_str().unwrap().to_owned();
    let token = signed(&keys.rsa, "RS256", Some("rsa"), &issuer);
    let response = preflight_token(&server, secret, anon, &token);
    assert_eq!(response.status(), 200);
    assert_eq!(json(response)["token"]["claims"]["iss"], issuer.as_str());
    // Another service, the anonymous secret's or another customer's: 404.
    assert_eq!(preflight(&server, secret, &sub).status(), 404);
    assert_eq!(preflight_token(&server, secret, &sub, &token).status(), 404);
    let globex = server.customer("globex", "business");
    assert_eq!(preflight(&server, &globex.token, &sub).status(), 404);
    assert_eq!(
        preflight_token(&server, &globex.token, &sub, &token).status(),
        404
    );
    assert_eq!(preflight(&server, &acme.token, anon).status(), 404);
}
