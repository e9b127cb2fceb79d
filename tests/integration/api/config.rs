use super::{cluster_discovery, rsa_key, upload};
use registry_tests::server::{assert_problem, json, pointers, Customer, TestServer};
use reqwest::Method;
use serde_json::{json, Value};

fn service(server: &TestServer, customer: &Customer, name: &str) -> String {
    let body = json(
        server
            .authed(Method::POST, "/services", &customer.token)
            .json(&json!({"title": name, "serviceName": name}))
            .send()
            .unwrap(),
    );
    body["subdomain"].as_str().unwrap().to_owned()
}

#[test]
fn publish_read_and_remove_a_configuration() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let sub = service(&server, &acme, "api");
    let path = format!("/services/{sub}/config");

    let none = server
        .authed(Method::GET, &path, &acme.token)
        .send()
        .unwrap();
    assert_problem(none, 404, "nothing-published");
    let none = server
        .authed(Method::DELETE, &path, &acme.token)
        .send()
        .unwrap();
    assert_problem(none, 404, "nothing-published");

    let put = server
        .authed(Method::PUT, &path, &acme.token)
        .json(&upload(&["k1"]))
        .send()
        .unwrap();
    assert_eq!(put.status(), 200);
    let put = json(put);
    let issuer = server.issuer(&sub);
    assert_eq!(put["openidConfiguration"]["issuer"], issuer.as_str());
    assert_eq!(
        put["openidConfiguration"]["jwks_uri"],
        format!("{issuer}/openid/v1/jwks")
    );
    assert_eq!(put["jwks"]["keys"][0], rsa_key("k1"));
    let warnings = put["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0]
        .as_str()
        .unwrap()
        .contains(&format!("--service-account-issuer={issuer}")));

    let got = json(
        server
            .authed(Method::GET, &path, &acme.token)
            .send()
            .unwrap(),
    );
    assert_eq!(got["openidConfiguration"], put["openidConfiguration"]);
    assert_eq!(got["jwks"], put["jwks"]);
    let order: Vec<&String> = got["openidConfiguration"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    let uploaded: Vec<String> = cluster_discovery()
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(order, uploaded.iter().collect::<Vec<_>>());

    // A rotation with no overlapping kid is allowed, with a warning.
    let mut rotated = upload(&["k2"]);
    rotated["openidConfiguration"]["issuer"] = json!(issuer);
    let put = json(
        server
            .authed(Method::PUT, &path, &acme.token)
            .json(&rotated)
            .send()
            .unwrap(),
    );
    let warnings = put["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].as_str().unwrap().contains("k1"));

    let removed = server
        .authed(Method::DELETE, &path, &acme.token)
        .send()
        .unwrap();
    assert_eq!(removed.status(), 204);
    assert_problem(
        server
            .authed(Method::GET, &path, &acme.token)
            .send()
            .unwrap(),
        404,
        "nothing-published",
    );
    // The service stays.
    let kept = server
        .authed(Method::GET, &format!("/services/{sub}"), &acme.token)
        .send()
        .unwrap();
    assert_eq!(kept.status(), 200);
}

/// An RSA key may name any RSA algorithm a verifier accepts: each one is published.
#[test]
fn rsa_keys_of_every_accepted_algorithm_are_published() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let sub = service(&server, &acme, "api");
    let algorithms = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512"];
    let keys: Vec<Value> = (algorithms.iter())
        .map(|alg| {
            let mut key = rsa_key(&format!("key-{alg}"));
            key["alg"] = json!(alg);
            key
        })
        .collect();
    let mut body = upload(&[]);
    body["jwks"]["keys"] = json!(keys);
    let put = server
        .authed(Method::PUT, &format!("/services/{sub}/config"), &acme.token)
        .json(&body)
        .send()
        .unwrap();
    assert_eq!(put.status(), 200, "{}", put.text().unwrap());
    let served = json(
        (server.hosted(Method::GET, &sub, "/openid/v1/jwks"))
            .send()
            .unwrap(),
    );
    assert_eq!(served["keys"], json!(keys));
}

#[test]
fn invalid_uploads_are_refused_with_pointers_and_change_nothing() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let sub = service(&server, &acme, "api");
    let path = format!("/services/{sub}/config");
    server
        .authed(Method::PUT, &path, &acme.token)
        .json(&upload(&["good"]))
        .send()
        .unwrap();

    let mut private = rsa_key("leaked");
    private["d"] = json!("c2VjcmV0");
    let mut discovery = cluster_discovery();
    discovery
        .as_object_mut()
        .unwrap()
        .remove("subject_types_supported");
    let body = json!({"openidConfiguration": discovery, "jwks": {"keys": [private, rsa_key("x"), rsa_key("x")]}});
    let response = server
        .authed(Method::PUT, &path, &acme.token)
        .json(&body)
        .send()
        .unwrap();
    let problem = assert_problem(response, 400, "validation-failed");
    let errors = problem["errors"].as_array().unwrap();
    assert_eq!(
        pointers(&problem),
        [
            "/openidConfiguration/subject_types_supported",
            "/jwks/keys/0",
            "/jwks/keys/2/kid"
        ]
    );
    assert!(errors[1]["message"].as_str().unwrap().contains("rotate"));

    let kept = json(
        server
            .authed(Method::GET, &path, &acme.token)
            .send()
            .unwrap(),
    );
    assert_eq!(kept["jwks"]["keys"][0]["kid"], "good");

    let empty = server
        .authed(Method::PUT, &path, &acme.token)
        .json(&json!({"openidConfiguration": cluster_discovery(), "jwks": {"keys": []}}))
        .send()
        .unwrap();
    assert_problem(empty, 400, "validation-failed");
    let oct = server
        .authed(Method::PUT, &path, &acme.token)
        .json(&json!({"openidConfiguration": cluster_discovery(), "jwks": {"keys": [{"kty": "oct", "kid": "h", "k": "c2VjcmV0"}]}}))
        .send()
        .unwrap();
    assert_problem(oct, 400, "validation-failed");
}

/// Every member of the discovery document other than `issuer` and `jwks_uri` is served as
/// uploaded: a number the registry could not give back as sent is refused, naming it, rather
/// than served as another number; one written otherwise (`1e2`) is served as the same number.
#[test]
fn a_number_is_served_as_sent_or_refused() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let sub = service(&server, &acme, "api");
    let path = format!("/services/{sub}/config");
    let with = |member: &str| {
        let text = upload(&["k1"]).to_string();
        let text = text.replacen(
            "\"openidConfiguration\":{",
            &format!("\"openidConfiguration\":{{{member},"),
            1,
        );
        server
            .authed(Method::PUT, &path, &acme.token)
            .header("content-type", "application/json")
            .body(text)
            .send()
            .unwrap()
    };
    for number in ["18446744073709551616", "0.10000000000000000001", "1.5e-400"] {
        let problem = assert_problem(with(&format!("\"big\":{number}")), 400, "validation-failed");
        assert_eq!(
            pointers(&problem),
            ["/openidConfiguration/big"],
            "{problem}"
        );
        assert!(
            problem["detail"]
                .as_str()
                .is_some_and(|d| d.contains(&format!("the number {number} (line 1, column"))),
            "{problem}"
        );
        let none = server
            .authed(Method::GET, &path, &acme.token)
            .send()
            .unwrap();
        assert_problem(none, 404, "nothing-published");
    }
    let kept = with(
        "\"hundred\":1e2,\"large\":18446744073709551615,\"tenth\":0.1,\"huge\":100000000000000000000",
    );
    assert_eq!(kept.status(), 200);
    let served: Value = json(
        server
            .hosted(Method::GET, &sub, "/.well-known/openid-configuration")
            .send()
            .unwrap(),
    );
    assert_eq!(served["hundred"], json!(100.0), "{served}");
    assert_eq!(served["large"], json!(18446744073709551615u64), "{served}");
    assert_eq!(served["tenth"], json!(0.1), "{served}");
    assert_eq!(served["huge"], json!(1e20), "{served}");
}

/// `key_ops` is checked before the verifiers' import: a key that may verify is published, one
/// that may not is refused at its `key_ops`.
#[test]
fn a_key_whose_operations_leave_out_verify_is_refused_there() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let sub = service(&server, &acme, "api");
    let path = format!("/services/{sub}/config");
    let with_ops = |ops: Value| {
        let mut body = upload(&["k1"]);
        body["jwks"]["keys"][0]["key_ops"] = ops;
        server
            .authed(Method::PUT, &path, &acme.token)
            .json(&body)
            .send()
            .unwrap()
    };
    let refused = assert_problem(with_ops(json!(["sign"])), 400, "validation-failed");
    assert_eq!(pointers(&refused), ["/jwks/keys/0/key_ops"], "{refused}");
    assert_eq!(with_ops(json!(["verify"])).status(), 200);
}
