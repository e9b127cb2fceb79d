//! The key lifecycle (docs/api.md, "Key lifecycle"): retired keys stay in the public key set for
//! their retention, the inventory, the withdrawal of a retired key, the stricter key import, and
//! the wiring guide. Verification is done by josekit on the key set fetched over HTTP, as a
//! cloud's verifier would: never by the registry's own code.

use super::{cluster_discovery, register_service};
use registry_tests::issuer::{compact, KeyKind, SigningKey};
use registry_tests::server::{assert_problem, json, pointers, unix_now, ServerOptions, TestServer};
use registry_tests::wait::within;
use reqwest::Method;
use serde_json::{json, Value};
use std::time::Duration;

/// A server on a clock the test moves (every in-process server's is).
fn clocked_server() -> TestServer {
    TestServer::start()
}

fn put_keys(
    server: &TestServer,
    token: &str,
    subdomain: &str,
    keys: &[Value],
    retain: Option<Value>,
) -> reqwest::blocking::Response {
    put_keys_as(server, token, subdomain, None, keys, retain)
}

/// `PUT /services/{subdomain}/config[?source=…]` of `keys` with a cluster's discovery document.
pub fn put_keys_as(
    server: &TestServer,
    token: &str,
    subdomain: &str,
    source: Option<&str>,
    keys: &[Value],
    retain: Option<Value>,
) -> reqwest::blocking::Response {
    let mut body = json!({"openidConfiguration": cluster_discovery(), "jwks": {"keys": keys}});
    if let Some(retain) = retain {
        body["retainRemovedKeysHours"] = retain;
    }
    let query = source.map_or(String::new(), |s| format!("?source={s}"));
    server
        .authed(
            Method::PUT,
            &format!("/services/{subdomain}/config{query}"),
            token,
        )
        .json(&body)
        .send()
        .unwrap()
}

/// The public key set and its ETag, as any client fetches them.
pub fn public_keys(server: &TestServer, subdomain: &str) -> (Value, String) {
    let response = server
        .hosted(Method::GET, subdomain, "/openid/v1/jwks")
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    let etag = response.headers()["etag"].to_str().unwrap().to_owned();
    (json(response), etag)
}

/// The `kid`s of a key set, in order.
pub fn kids(set: &Value) -> Vec<String> {
    set["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kid"].as_str().unwrap().to_owned())
        .collect()
}

/// A token signed by `key` (ES256), as a cluster would issue it.
pub fn token(key: &SigningKey, issuer: &str) -> String {
    let now = unix_now();
    compact(
        &json!({"alg": "ES256", "typ": "JWT", "kid": key.kid()}),
        &json!({"iss": issuer, "sub": "system:serviceaccount:ci:deployer",
            "aud": "sts.amazonaws.com", "iat": now, "exp": now + 3600}),
        |m| key.sign("ES256", m),
    )
}

/// Whether josekit verifies `token` with the key of its `kid` in `set`.
pub fn verifies(set: &Value, token: &str) -> bool {
    let header = josekit::jwt::decode_header(token).unwrap();
    let kid = header
        .claim("kid")
        .and_then(Value::as_str)
        .unwrap()
        .to_owned();
    let Some(jwk) = set["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kid"] == kid.as_str())
    else {
        return false;
    };
    let jwk = josekit::jwk::Jwk::from_map(jwk.as_object().unwrap().clone()).unwrap();
    let verifier = josekit::jws::ES256.verifier_from_jwk(&jwk).unwrap();
    josekit::jwt::decode_with_verifier(token, &verifier).is_ok()
}

#[test]
fn a_verifier_keeps_the_old_key_for_the_retention_and_loses_it_after() {
    let server = clocked_server();
    let acme = server.customer("acme", "business");
    let sub = register_service(&server, &acme, "k3s");
    let issuer = server.issuer(&sub);
    let old = SigningKey::generate(KeyKind::P256, "old");
    let new = SigningKey::generate(KeyKind::P256, "new");
    assert_eq!(
        put_keys(&server, &acme.token, &sub, &[old.public_jwk()], None).status(),
        200
    );
    let old_token = token(&old, &issuer);
    let (set, _) = public_keys(&server, &sub);
    assert!(verifies(&set, &old_token));

    // A rotation with no overlap: the old key is retired and kept for 2 hours.
    let rotated = put_keys(
        &server,
        &acme.token,
        &sub,
        &[new.public_jwk()],
        Some(json!(2)),
    );
    assert_eq!(rotated.status(), 200);
    let body = json(rotated);
    assert_eq!(
        kids(&body["jwks"]),
        ["new"],
        "the response holds the set as uploaded"
    );
    let warnings = body["warnings"].to_string();
    assert!(
        warnings.contains("keeps the old keys published until"),
        "{warnings}"
    );
    let (set, etag) = public_keys(&server, &sub);
    assert_eq!(kids(&set), ["new", "old"]);
    assert!(
        verifies(&set, &old_token),
        "an old token verifies through the retention"
    );
    assert!(
        verifies(&set, &token(&new, &issuer)),
        "a new token verifies at once"
    );
    let config = json(server.get(&format!("/services/{sub}/config"), &acme.token));
    assert_eq!(kids(&config["jwks"]), ["new"]);
    let inventory = json(server.get(&format!("/services/{sub}/keys"), &acme.token));
    let states: Vec<(&str, &str)> = inventory["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| (k["kid"].as_str().unwrap(), k["state"].as_str().unwrap()))
        .collect();
    assert_eq!(states, [("new", "current"), ("old", "retired")]);
    let retired = &inventory["keys"][1];
    assert!(retired["publishedUntil"].is_string() && retired["retiredAt"].is_string());
    assert_eq!(retired["thumbprint"].as_str().unwrap().len(), 43);

    // Just before the end it is still there; just after, it has left, with a new ETag.
    server.advance_clock(2 * 3600 - 30);
    assert_eq!(kids(&public_keys(&server, &sub).0), ["new", "old"]);
    server.advance_clock(60);
    let (set, later_etag) = public_keys(&server, &sub);
    assert_eq!(kids(&set), ["new"]);
    assert_ne!(later_etag, etag);
    assert!(
        !verifies(&set, &old_token),
        "the old key is gone after its retention"
    );
    let inventory = json(server.get(&format!("/services/{sub}/keys"), &acme.token));
    assert_eq!(inventory["keys"].as_array().unwrap().len(), 1);
}

/// The warning of an upload that keeps no key of the previous set is for a rotation that
/// breaks a verifier holding the cached set: a retired key still published comes back without
/// it (the probe's false warning), a set none of whose keys was published before warns.
#[test]
fn a_retired_key_brought_back_keeps_the_overlap() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let sub = register_service(&server, &acme, "k3s");
    let [r1, r3, r4] = ["r1", "r3", "r4"].map(|kid| SigningKey::generate(KeyKind::P256, kid));
    let warnings = |keys: &[Value]| {
        let response = put_keys(&server, &acme.token, &sub, keys, None);
        assert_eq!(response.status(), 200);
        json(response)["warnings"].to_string()
    };
    const NO_OVERLAP: &str = "no key of the previously published set";
    assert!(!warnings(&[r1.public_jwk()]).contains(NO_OVERLAP));
    assert!(warnings(&[r3.public_jwk()]).contains(NO_OVERLAP));
    assert_eq!(kids(&public_keys(&server, &sub).0), ["r3", "r1"]);
    let back = warnings(&[r1.public_jwk()]);
    assert!(!back.contains(NO_OVERLAP), "{back}");
    assert_eq!(kids(&public_keys(&server, &sub).0), ["r1", "r3"]);
    // A retired key brought back beside a new one: the new one is unknown to a cached set.
    let r5 = SigningKey::generate(KeyKind::P256, "r5");
    let mixed = warnings(&[r3.public_jwk(), r5.public_jwk()]);
    assert!(
        mixed.contains(NO_OVERLAP) && mixed.contains("(r1)"),
        "{mixed}"
    );
    let fresh = warnings(&[r4.public_jwk()]);
    assert!(
        fresh.contains(NO_OVERLAP) && fresh.contains("(r3, r5)"),
        "{fresh}"
    );
}

#[test]
fn retired_keys_can_be_withdrawn_and_retention_zero_drops_them() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let sub = register_service(&server, &acme, "k3s");
    let a = SigningKey::generate(KeyKind::P256, "a");
    let b = SigningKey::generate(KeyKind::P256, "b");
    let c = SigningKey::generate(KeyKind::P256, "c");
    assert_eq!(
        put_keys(&server, &acme.token, &sub, &[a.public_jwk()], None).status(),
        200
    );
    assert_eq!(
        put_keys(&server, &acme.token, &sub, &[b.public_jwk()], None).status(),
        200
    );
    assert_eq!(kids(&public_keys(&server, &sub).0), ["b", "a"]);
    // A current key cannot be withdrawn; an unknown one is not found.
    let current = server
        .authed(
            Method::DELETE,
            &format!("/services/{sub}/keys/b"),
            &acme.token,
        )
        .send()
        .unwrap();
    assert_problem(current, 409, "conflict");
    let unknown = server
        .authed(
            Method::DELETE,
            &format!("/services/{sub}/keys/zzz"),
            &acme.token,
        )
        .send()
        .unwrap();
    assert_problem(unknown, 404, "not-found");
    let listed = json(server.get(&format!("/services/{sub}/keys"), &acme.token));
    let a_thumbprint = listed["keys"][1]["thumbprint"].clone();
    assert_eq!(listed["keys"][1]["kid"], "a");
    let withdrawn = server
        .authed(
            Method::DELETE,
            &format!("/services/{sub}/keys/a"),
            &acme.token,
        )
        .send()
        .unwrap();
    assert_eq!(withdrawn.status(), 204);
    assert_eq!(kids(&public_keys(&server, &sub).0), ["b"]);
    // The key set remembers it: when it was published, retired and withdrawn.
    let inventory = json(server.get(&format!("/services/{sub}/keys"), &acme.token));
    let gone = &inventory["withdrawn"];
    assert_eq!(gone.as_array().unwrap().len(), 1, "{inventory}");
    assert_eq!(gone[0]["kid"], "a");
    assert_eq!(gone[0]["thumbprint"], a_thumbprint);
    assert!(gone[0]["retiredAt"].as_str().unwrap() <= gone[0]["withdrawnAt"].as_str().unwrap());
    let gone_at = gone[0]["withdrawnAt"].clone();
    // A retired kid that comes back with its own material is current again.
    assert_eq!(
        put_keys(&server, &acme.token, &sub, &[c.public_jwk()], None).status(),
        200
    );
    assert_eq!(
        put_keys(
            &server,
            &acme.token,
            &sub,
            &[b.public_jwk(), c.public_jwk()],
            None
        )
        .status(),
        200
    );
    assert_eq!(kids(&public_keys(&server, &sub).0), ["b", "c"]);
    // With no retention, a dropped key leaves at once, and the warning is as before.
    let dropped = put_keys(
        &server,
        &acme.token,
        &sub,
        &[a.public_jwk()],
        Some(json!(0)),
    );
    assert_eq!(dropped.status(), 200);
    let dropped = json(dropped);
    let warnings = dropped["warnings"].to_string();
    assert!(
        warnings.contains("no key of the previously published set"),
        "{warnings}"
    );
    assert!(!warnings.contains("keeps the old keys"), "{warnings}");
    // `a` was withdrawn (a compromised key, say, that a stale source still lists): it is
    // published again, with a warning naming it and when it was withdrawn.
    let warned = (dropped["warnings"].as_array().unwrap().iter())
        .filter_map(|w| w.as_str())
        .find(|w| w.starts_with(r#"key "a" was withdrawn from the public key set at "#))
        .unwrap_or_else(|| panic!("no warning of the withdrawn key: {warnings}"))
        .to_owned();
    let withdrawn_at = gone_at.as_str().unwrap();
    assert!(warned.contains(withdrawn_at), "{warned}");
    assert_eq!(kids(&public_keys(&server, &sub).0), ["a"]);
    // `a` is published again: no longer withdrawn; `b` and `c` left at once.
    let inventory = json(server.get(&format!("/services/{sub}/keys"), &acme.token));
    let gone: Vec<&str> = (inventory["withdrawn"].as_array().unwrap().iter())
        .map(|w| w["kid"].as_str().unwrap())
        .collect();
    assert_eq!(gone, ["b", "c"], "{inventory}");
    // Deleting the configuration removes everything.
    let deleted = server
        .authed(
            Method::DELETE,
            &format!("/services/{sub}/config"),
            &acme.token,
        )
        .send()
        .unwrap();
    assert_eq!(deleted.status(), 204);
    let gone = server
        .hosted(Method::GET, &sub, "/openid/v1/jwks")
        .send()
        .unwrap();
    assert_eq!(gone.status(), 404);
    let inventory = json(server.get(&format!("/services/{sub}/keys"), &acme.token));
    assert_eq!(inventory, json!({"keys": [], "withdrawn": []}));
}

#[test]
fn keys_that_would_not_import_or_reuse_a_kid_are_refused_and_change_nothing() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let sub = register_service(&server, &acme, "k3s");
    let good = SigningKey::generate(KeyKind::P256, "good");
    assert_eq!(
        put_keys(&server, &acme.token, &sub, &[good.public_jwk()], None).status(),
        200
    );
    let before = public_keys(&server, &sub);

    let mut off_curve = SigningKey::generate(KeyKind::P256, "off").public_jwk();
    let y = off_curve["y"].as_str().unwrap().to_owned();
    let flipped = if y.starts_with('A') { "B" } else { "A" };
    off_curve["y"] = json!(format!("{flipped}{}", &y[1..]));
    let mut short_rsa = SigningKey::generate(KeyKind::Rsa, "short").public_jwk();
    short_rsa["n"] = json!(short_rsa["n"].as_str().unwrap()[..171].to_owned()); // 1,024 bits
    let mut short_x = SigningKey::generate(KeyKind::Ed25519, "ed").public_jwk();
    short_x["x"] = json!(short_x["x"].as_str().unwrap()[..41].to_owned()); // 30 bytes
    let mut even_e = SigningKey::generate(KeyKind::Rsa, "even").public_jwk();
    even_e["e"] = json!("AQAA");
    let p521 = json!({"kty": "EC", "crv": "P-521", "kid": "p521",
        "x": "AHKZLLOsCOzz5cY97ewNUajB957y-C-U88c3v13nmGZx6sYl_oJXu9A5RkTKqjqvjyekWF-7ytDyRXYgCF5cj0Kt",
        "y": "AdymlHvOiLxXkEhayXQnNCvDX4h9htZaCJN34kfmC6pV5OhQHiraVySsUdaQkAgDPrwQrJmbnX9cwlGfP-HqHZR1"});
    let cases: [(Value, &str); 5] = [
        (off_curve, "/jwks/keys/0"),
        (short_rsa, "/jwks/keys/0/n"),
        (short_x, "/jwks/keys/0/x"),
        (even_e, "/jwks/keys/0/e"),
        (p521, "/jwks/keys/0/crv"),
    ];
    for (key, pointer) in cases {
        let refused = put_keys(&server, &acme.token, &sub, std::slice::from_ref(&key), None);
        let problem = assert_problem(refused, 400, "validation-failed");
        assert_eq!(pointers(&problem), [pointer], "{key}");
    }
    // The same kid with other material, current or retired: kid-reused.
    let impostor = SigningKey::generate(KeyKind::P256, "good");
    let reused = put_keys(&server, &acme.token, &sub, &[impostor.public_jwk()], None);
    assert_eq!(
        pointers(&assert_problem(reused, 400, "kid-reused")),
        ["/jwks/keys/0"]
    );
    for retain in [json!(null), json!("24"), json!(1.5), json!(-1), json!(169)] {
        let refused = put_keys(
            &server,
            &acme.token,
            &sub,
            &[good.public_jwk()],
            Some(retain),
        );
        let problem = assert_problem(refused, 400, "validation-failed");
        assert_eq!(pointers(&problem), ["/retainRemovedKeysHours"]);
    }
    assert_eq!(public_keys(&server, &sub), before, "nothing changed");
}

#[test]
fn the_wiring_guide_names_the_issuer_and_pins_aud_and_sub() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let sub = register_service(&server, &acme, "k3s");
    let guide = json(server.get(
        &format!("/services/{sub}/federation?subject=system:serviceaccount:ci:deployer"),
        &acme.token,
    ));
    let issuer = server.issuer(&sub);
    assert_eq!(guide["issuer"], issuer.as_str());
    assert_eq!(guide["jwksUri"], format!("{issuer}/openid/v1/jwks"));
    assert_eq!(guide["aws"]["audience"], "sts.amazonaws.com");
    let host = issuer.trim_start_matches("http://");
    let condition = &guide["aws"]["trustPolicy"]["Statement"][0]["Condition"]["StringEquals"];
    assert_eq!(condition[format!("{host}:aud")], "sts.amazonaws.com");
    assert_eq!(
        condition[format!("{host}:sub")],
        "system:serviceaccount:ci:deployer"
    );
    assert_eq!(guide["azure"]["audience"], "api://AzureADTokenExchange");
    assert_eq!(guide["gcp"]["issuerUri"], issuer.as_str());
    // IAM's wildcards in the subject: `StringLike`, where they are wildcards.
    let any = json(server.get(
        &format!("/services/{sub}/federation?subject=system:serviceaccount:ci:*"),
        &acme.token,
    ));
    let condition = &any["aws"]["trustPolicy"]["Statement"][0]["Condition"];
    assert_eq!(
        condition["StringLike"][format!("{host}:sub")],
        "system:serviceaccount:ci:*",
        "{condition}"
    );
    assert_eq!(
        condition["StringEquals"],
        json!({format!("{host}:aud"): "sts.amazonaws.com"})
    );
    let default = json(server.get(&format!("/services/{sub}/federation"), &acme.token));
    assert_eq!(
        default["azure"]["subjectExample"],
        "system:serviceaccount:default:default"
    );
    // IAM reads `${…}` as a policy variable: a `$` is written as IAM's escape for it.
    let dollar = json(server.get(
        &format!("/services/{sub}/federation?subject=repo:a/b:env:%24%7Bx%7D"),
        &acme.token,
    ));
    let condition = &dollar["aws"]["trustPolicy"]["Statement"][0]["Condition"]["StringEquals"];
    assert_eq!(condition[format!("{host}:sub")], "repo:a/b:env:${$}{x}");
    assert_eq!(dollar["azure"]["subjectExample"], "repo:a/b:env:${x}");
    let refused = server.get(
        &format!("/services/{sub}/federation?subject=system:serviceaccount:ci:a%00b"),
        &acme.token,
    );
    let problem = assert_problem(refused, 400, "validation-failed");
    assert!(
        problem["detail"].as_str().unwrap().contains("subject"),
        "{problem}"
    );
    // An anonymous secret may use the key and wiring calls of its own service only.
    let (anon, secret) = server.anonymous_service();
    let (anon, secret) = (anon.as_str(), secret.as_str());
    assert_eq!(
        server
            .get(&format!("/services/{anon}/federation"), secret)
            .status(),
        200
    );
    assert_eq!(
        server
            .get(&format!("/services/{anon}/keys"), secret)
            .status(),
        200
    );
    assert_eq!(
        server
            .get(&format!("/services/{sub}/keys"), secret)
            .status(),
        404
    );
}

#[test]
fn retirement_expiry_and_withdrawal_reach_the_other_replica() {
    // Its upkeep drops a key whose time ran out within a second.
    let a = TestServer::start_with(ServerOptions {
        env: vec![("REGISTRY_TEST_REAP_EVERY_SECONDS".into(), "1".into())],
        ..ServerOptions::default()
    });
    let b = TestServer::start_with(ServerOptions {
        database_url: Some(a.database_url.clone()),
        ..ServerOptions::default()
    });
    let acme = a.customer("acme", "business");
    let sub = register_service(&a, &acme, "k3s");
    let keys: Vec<SigningKey> = ["k1", "k2", "k3"]
        .iter()
        .map(|kid| SigningKey::generate(KeyKind::P256, kid))
        .collect();
    for key in &keys {
        assert_eq!(
            put_keys(&a, &acme.token, &sub, &[key.public_jwk()], Some(json!(1))).status(),
            200
        );
    }
    let until = |server: &TestServer, expected: &[&str]| {
        let served = || {
            let response = server
                .hosted(Method::GET, &sub, "/openid/v1/jwks")
                .send()
                .unwrap();
            (response.status() == 200).then(|| kids(&json(response)))
        };
        assert!(
            within(Duration::from_secs(5), || {
                served().is_some_and(|found| found == expected)
            }),
            "{expected:?} not served: {:?}",
            served()
        );
    };
    until(&b, &["k3", "k2", "k1"]);
    let withdrawn = a
        .authed(
            Method::DELETE,
            &format!("/services/{sub}/keys/k2"),
            &acme.token,
        )
        .send()
        .unwrap();
    assert_eq!(withdrawn.status(), 204);
    until(&b, &["k3", "k1"]);
    let inventory =
        |server: &TestServer| json(server.get(&format!("/services/{sub}/keys"), &acme.token));
    let k1_until = inventory(&a)["keys"][1]["publishedUntil"].clone();
    a.advance_clock(3601);
    b.advance_clock(3601);
    until(&b, &["k3"]);
    until(&a, &["k3"]);
    // Once the upkeep dropped k1, every replica still lists it as withdrawn, when its time ran out.
    let expired = || {
        let page = json(a.get("/audit-events?action=key.expire", &acme.token));
        !page["events"].as_array().unwrap().is_empty()
    };
    assert!(within(Duration::from_secs(10), expired), "k1 not dropped");
    for server in [&a, &b] {
        let gone = inventory(server)["withdrawn"].clone();
        let kids: Vec<&str> = (gone.as_array().unwrap().iter())
            .map(|w| w["kid"].as_str().unwrap())
            .collect();
        assert_eq!(kids, ["k1", "k2"], "{gone}");
        assert_eq!(gone[0]["withdrawnAt"], k1_until);
    }
}
