//! Key sources (docs/api.md, "Key sources"): one uploaded key set per source under one issuer,
//! the public key set their union then the retired keys, one source retired while the others
//! stay. Tokens are verified by josekit on the key set fetched over HTTP, as a cloud would.

use super::keys::{kids, public_keys, put_keys_as, token, verifies};
use super::{cluster_discovery, register_service};
use registry_tests::issuer::{KeyKind, SigningKey};
use registry_tests::server::{assert_problem, json, ServerOptions, TestServer};
use reqwest::Method;
use serde_json::{json, Value};

fn config_of(server: &TestServer, token: &str, path: &str) -> reqwest::blocking::Response {
    server.authed(Method::GET, path, token).send().unwrap()
}

#[test]
fn two_clusters_publish_under_one_issuer_and_one_retires_while_the_other_stays() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let sub = register_service(&server, &acme, "k3s");
    let issuer = server.issuer(&sub);
    let blue = SigningKey::generate(KeyKind::P256, "blue-1");
    let green = SigningKey::generate(KeyKind::P256, "green-1");
    let put = |source: Option<&str>, key: &SigningKey, retain: Option<Value>| {
        put_keys_as(
            &server,
            &acme.token,
            &sub,
            source,
            &[key.public_jwk()],
            retain,
        )
    };

    // Blue publishes as the default source, green as its own: both verify under one issuer.
    assert_eq!(put(None, &blue, Some(json!(2))).status(), 200);
    let mut green_discovery = cluster_discovery();
    green_discovery["claims_supported"] = json!(["sub", "iss"]);
    let green_put = server
        .authed(
            Method::PUT,
            &format!("/services/{sub}/config?source=green"),
            &acme.token,
        )
        .json(&json!({"openidConfiguration": green_discovery, "jwks": {"keys": [green.public_jwk()]}}))
        .send()
        .unwrap();
    assert_eq!(green_put.status(), 200);
    let green_body = json(green_put);
    assert_eq!(
        kids(&green_body["jwks"]),
        ["green-1"],
        "the answer is the source's upload"
    );
    assert!(
        green_body["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .all(|w| !w.to_string().contains("overlap")),
        "another source's keys are no rotation: {green_body}"
    );
    let (set, _) = public_keys(&server, &sub);
    // By source name ("default" < "green"), each in upload order.
    assert_eq!(kids(&set), ["blue-1", "green-1"]);
    assert!(verifies(&set, &token(&blue, &issuer)));
    assert!(verifies(&set, &token(&green, &issuer)));
    // The discovery document is the latest upload's, with the registry's issuer.
    let discovery = json(
        server
            .hosted(Method::GET, &sub, "/.well-known/openid-configuration")
            .send()
            .unwrap(),
    );
    assert_eq!(discovery["claims_supported"], json!(["sub", "iss"]));
    assert_eq!(discovery["issuer"], issuer.as_str());

    // Each source's own upload, and the inventory naming each key's source.
    let blue_upload = json(config_of(
        &server,
        &acme.token,
        &format!("/services/{sub}/config?source=default"),
    ));
    assert_eq!(kids(&blue_upload["jwks"]), ["blue-1"]);
    assert!(
        blue_upload["openidConfiguration"]
            .get("claims_supported")
            .is_none(),
        "its own document"
    );
    assert_eq!(
        blue_upload["openidConfiguration"]["issuer"],
        issuer.as_str()
    );
    let green_upload = json(config_of(
        &server,
        &acme.token,
        &format!("/services/{sub}/config?source=green"),
    ));
    assert_eq!(kids(&green_upload["jwks"]), ["green-1"]);
    assert_eq!(
        green_upload["openidConfiguration"]["claims_supported"],
        json!(["sub", "iss"])
    );
    let all = json(config_of(
        &server,
        &acme.token,
        &format!("/services/{sub}/config"),
    ));
    assert_eq!(kids(&all["jwks"]), ["blue-1", "green-1"]);
    let inventory = json(server.get(&format!("/services/{sub}/keys"), &acme.token));
    let sources: Vec<(&str, &str)> = inventory["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| (k["kid"].as_str().unwrap(), k["source"].as_str().unwrap()))
        .collect();
    assert_eq!(sources, [("blue-1", "default"), ("green-1", "green")]);

    // A kid another source publishes, with other material: kid-reused, nothing changes.
    let impostor = SigningKey::generate(KeyKind::P256, "blue-1");
    let reused = put(Some("green"), &impostor, None);
    let problem = assert_problem(reused, 400, "kid-reused");
    assert!(
        problem["detail"].to_string().contains("default"),
        "{problem}"
    );
    assert_eq!(kids(&public_keys(&server, &sub).0), ["blue-1", "green-1"]);

    // Green rotates: only green's old key retires; blue's stays current.
    let green2 = SigningKey::generate(KeyKind::P256, "green-2");
    assert_eq!(put(Some("green"), &green2, Some(json!(1))).status(), 200);
    assert_eq!(
        kids(&public_keys(&server, &sub).0),
        ["blue-1", "green-2", "green-1"]
    );

    // The blue cluster goes away: its keys retire for its retention (2 h), the rest stays.
    let removed = server
        .authed(
            Method::DELETE,
            &format!("/services/{sub}/config?source=default"),
            &acme.token,
        )
        .send()
        .unwrap();
    assert_eq!(removed.status(), 204);
    let (set, _) = public_keys(&server, &sub);
    assert_eq!(kids(&set), ["green-2", "green-1", "blue-1"]);
    assert!(
        verifies(&set, &token(&blue, &issuer)),
        "blue's tokens verify through the retention"
    );
    let inventory = json(server.get(&format!("/services/{sub}/keys"), &acme.token));
    assert_eq!(inventory["keys"][2]["state"], "retired");
    assert_problem(
        config_of(
            &server,
            &acme.token,
            &format!("/services/{sub}/config?source=default"),
        ),
        404,
        "nothing-published",
    );
    assert_problem(
        server
            .authed(
                Method::DELETE,
                &format!("/services/{sub}/config?source=default"),
                &acme.token,
            )
            .send()
            .unwrap(),
        404,
        "nothing-published",
    );
    server.advance_clock(2 * 3600 + 60);
    let (set, _) = public_keys(&server, &sub);
    assert_eq!(kids(&set), ["green-2"]);
    assert!(verifies(&set, &token(&green2, &issuer)));
    assert!(!verifies(&set, &token(&blue, &issuer)));
}

#[test]
fn source_names_are_checked_and_the_cap_counts_every_source() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let sub = register_service(&server, &acme, "k3s");
    let key = SigningKey::generate(KeyKind::P256, "k1");
    for bad in ["Blue", "", "a_b", &"x".repeat(33)] {
        let path = format!("/services/{sub}/config?source={bad}");
        let refused = put_keys_as(
            &server,
            &acme.token,
            &sub,
            Some(bad),
            &[key.public_jwk()],
            None,
        );
        let problem = assert_problem(refused, 400, "validation-failed");
        assert!(
            problem["detail"]
                .to_string()
                .contains("query parameter source"),
            "{path}: {problem}"
        );
        assert_problem(
            config_of(&server, &acme.token, &path),
            400,
            "validation-failed",
        );
    }
    // A mistyped parameter neither uploads to, nor removes, the whole configuration.
    let other = register_service(&server, &acme, "other");
    put_keys_as(
        &server,
        &acme.token,
        &other,
        None,
        &[key.public_jwk()],
        None,
    );
    let typo = format!("/services/{other}/config?sourc=blue");
    let deleted = server
        .authed(Method::DELETE, &typo, &acme.token)
        .send()
        .unwrap();
    let problem = assert_problem(deleted, 400, "validation-failed");
    assert!(problem["detail"].to_string().contains("sourc"), "{problem}");
    let path = format!("/services/{other}/config");
    assert_eq!(config_of(&server, &acme.token, &path).status(), 200);
    // 60 keys in one source and 41 in another: the union would hold 101.
    let many = |prefix: &str, n: usize| -> Vec<Value> {
        (0..n)
            .map(|i| SigningKey::generate(KeyKind::Ed25519, &format!("{prefix}{i}")).public_jwk())
            .collect()
    };
    assert_eq!(
        put_keys_as(&server, &acme.token, &sub, Some("a"), &many("a", 60), None).status(),
        200
    );
    let refused = put_keys_as(&server, &acme.token, &sub, Some("b"), &many("b", 41), None);
    let problem = assert_problem(refused, 400, "validation-failed");
    assert!(problem.to_string().contains("101 keys"), "{problem}");
    // The way out names the other source's keys; nothing is retired, so no retention helps.
    let detail = problem["errors"][0]["message"].as_str().unwrap_or_default();
    assert!(
        detail.contains("60 of them are other sources'"),
        "{problem}"
    );
    assert!(!detail.contains("retainRemovedKeysHours"), "{problem}");
    assert_eq!(
        put_keys_as(&server, &acme.token, &sub, Some("b"), &many("b", 40), None).status(),
        200
    );
    assert_eq!(kids(&public_keys(&server, &sub).0).len(), 100);
}

/// A service's stored key state is at most 1 MiB, the discovery documents counted: the latest
/// upload's too, which is published beside the key state rather than in it.
#[test]
fn discovery_documents_count_toward_the_key_states_bound() {
    let server = TestServer::start_with(ServerOptions {
        env: vec![("REGISTRY_MAX_BODY_BYTES".into(), "3000000".into())],
        ..ServerOptions::default()
    });
    let acme = server.customer("acme", "business");
    let sub = register_service(&server, &acme, "big");
    let put = |source: &str, padding: usize| {
        let mut body = super::upload(&[&format!("k-{source}")]);
        body["openidConfiguration"]["x_padding"] = json!("x".repeat(padding));
        server
            .authed(
                Method::PUT,
                &format!("/services/{sub}/config?source={source}"),
                &acme.token,
            )
            .json(&body)
            .send()
            .unwrap()
    };
    assert_problem(put("one", 1_100_000), 413, "payload-too-large");
    assert_eq!(put("p1", 400_000).status(), 200);
    assert_eq!(put("p2", 400_000).status(), 200);
    let third = assert_problem(put("p3", 400_000), 413, "payload-too-large");
    assert!(
        third["detail"]
            .as_str()
            .unwrap()
            .contains("discovery documents"),
        "{third}"
    );
}

/// The fourth security review (docs/api.md, "Key sources"): a key two sources upload belongs to
/// each, so removing one source's sync keeps it published (it removed it before); a service has
/// at most 8 sources, an anonymous one 1.
#[test]
fn a_shared_key_stays_while_a_source_has_it_and_sources_are_bounded() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let sub = register_service(&server, &acme, "k3s");
    let shared = SigningKey::generate(KeyKind::P256, "shared");
    let (b1, g1) = (
        SigningKey::generate(KeyKind::P256, "b1"),
        SigningKey::generate(KeyKind::P256, "g1"),
    );
    let put = |source: &str, keys: &[&SigningKey]| {
        let jwks: Vec<Value> = keys.iter().map(|k| k.public_jwk()).collect();
        put_keys_as(&server, &acme.token, &sub, Some(source), &jwks, None)
    };
    assert_eq!(put("blue", &[&b1, &shared]).status(), 200);
    assert_eq!(put("green", &[&g1, &shared]).status(), 200);
    // Each source's upload as it was uploaded, in its order; the key set in each source's.
    for (source, own) in [("blue", &b1), ("green", &g1)] {
        let upload = json(config_of(
            &server,
            &acme.token,
            &format!("/services/{sub}/config?source={source}"),
        ));
        let uploaded = json!({"keys": [own.public_jwk(), shared.public_jwk()]});
        assert_eq!(upload["jwks"], uploaded, "{source}");
    }
    assert_eq!(kids(&public_keys(&server, &sub).0), ["b1", "shared", "g1"]);
    // Each drops its own key, at once (retained 0 hours): `shared` alone is left, both sources'.
    for source in ["blue", "green"] {
        let jwks = [shared.public_jwk()];
        let answer = put_keys_as(
            &server,
            &acme.token,
            &sub,
            Some(source),
            &jwks,
            Some(json!(0)),
        );
        assert_eq!(answer.status(), 200, "{source}");
    }
    let inventory = json(server.get(&format!("/services/{sub}/keys"), &acme.token));
    assert_eq!(inventory["keys"][0]["sources"], json!(["blue", "green"]));
    let removed = server
        .authed(
            Method::DELETE,
            &format!("/services/{sub}/config?source=blue"),
            &acme.token,
        )
        .send()
        .unwrap();
    assert_eq!(removed.status(), 204);
    let inventory = json(server.get(&format!("/services/{sub}/keys"), &acme.token));
    assert_eq!(inventory["keys"][0]["state"], "current", "{inventory}");
    assert_eq!(inventory["keys"][0]["source"], "green");
    assert_eq!(kids(&public_keys(&server, &sub).0), ["shared"]);

    // Eight sources; a ninth is refused, and nothing changes.
    for i in 1..8 {
        let key = SigningKey::generate(KeyKind::P256, &format!("k{i}"));
        assert_eq!(put(&format!("s{i}"), &[&key]).status(), 200, "source {i}");
    }
    let ninth = SigningKey::generate(KeyKind::P256, "k9");
    let problem = assert_problem(put("s9", &[&ninth]), 409, "too-many-sources");
    assert!(problem["detail"].to_string().contains('8'), "{problem}");
    assert!(!kids(&public_keys(&server, &sub).0).contains(&"k9".to_owned()));

    // An anonymous service publishes from one source.
    let (anon, secret) = server.anonymous_service();
    let key = SigningKey::generate(KeyKind::P256, "a1");
    let anonymous_put = |source: &str| {
        put_keys_as(
            &server,
            &secret,
            &anon,
            Some(source),
            &[key.public_jwk()],
            None,
        )
    };
    assert_eq!(anonymous_put("default").status(), 200);
    assert_problem(anonymous_put("other"), 409, "too-many-sources");
}
