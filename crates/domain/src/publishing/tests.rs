use super::*;
use serde_json::json;

const ISSUER: &str = "https://api-acme.oidc.example.com";
// A real P-256 public key (RFC 7515 appendix A.3).
const EC_X: &str = "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU";
const EC_Y: &str = "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0";

fn ec_key(kid: &str) -> Value {
    json!({"kty": "EC", "crv": "P-256", "kid": kid, "use": "sig", "alg": "ES256", "x": EC_X, "y": EC_Y})
}

fn rsa_key(kid: &str, bits: usize) -> Value {
    let mut n = vec![0xffu8; bits / 8];
    n[0] = 0xc1;
    json!({"kty": "RSA", "kid": kid, "alg": "RS256", "e": "AQAB", "n": URL_SAFE_NO_PAD.encode(n)})
}

fn discovery() -> Value {
    json!({
        "issuer": "https://kubernetes.default.svc.cluster.local",
        "jwks_uri": "https://172.18.0.2:6443/openid/v1/jwks",
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["RS256"]
    })
}

fn upload(keys: Vec<Value>) -> Value {
    json!({"openidConfiguration": discovery(), "jwks": {"keys": keys}})
}

fn pointers(result: Result<Publication, Violations>) -> Vec<String> {
    result.unwrap_err().into_iter().map(|v| v.pointer).collect()
}

#[test]
fn rewrites_issuer_and_jwks_uri_in_place_keeping_member_order() {
    let p = publish(&upload(vec![ec_key("a")]), ISSUER, None).unwrap();
    let keys: Vec<&String> = p.openid_configuration.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "issuer",
            "jwks_uri",
            "response_types_supported",
            "subject_types_supported",
            "id_token_signing_alg_values_supported"
        ]
    );
    assert_eq!(p.openid_configuration["issuer"], ISSUER);
    assert_eq!(
        p.openid_configuration["jwks_uri"],
        format!("{ISSUER}/openid/v1/jwks")
    );
    assert!(p.warnings[0].contains("--service-account-issuer=https://api-acme.oidc.example.com"));
}

#[test]
fn an_issuer_that_differs_only_by_a_trailing_slash_is_warned_of() {
    let with_issuer = |issuer: &str| {
        let mut doc = discovery();
        doc["issuer"] = json!(issuer);
        let upload = json!({"openidConfiguration": doc, "jwks": {"keys": [ec_key("a")]}});
        publish(&upload, ISSUER, None).unwrap().warnings
    };
    assert!(with_issuer(ISSUER).is_empty());
    let warned = with_issuer(&format!("{ISSUER}/"));
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(warned[0].contains("trailing slash"), "{warned:?}");
}

#[test]
fn adds_missing_issuer_and_jwks_uri_without_warning() {
    let mut doc = discovery();
    doc.as_object_mut().unwrap().remove("issuer");
    doc.as_object_mut().unwrap().remove("jwks_uri");
    let p = publish(
        &json!({"openidConfiguration": doc, "jwks": {"keys": [ec_key("a")]}}),
        ISSUER,
        None,
    )
    .unwrap();
    assert_eq!(p.openid_configuration["issuer"], ISSUER);
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
}

#[test]
fn keeps_unknown_members_of_the_discovery_document() {
    let mut doc = discovery();
    doc["claims_supported"] = json!(["sub", "iss"]);
    let p = publish(
        &json!({"openidConfiguration": doc, "jwks": {"keys": [ec_key("a")]}}),
        ISSUER,
        None,
    )
    .unwrap();
    assert_eq!(
        p.openid_configuration["claims_supported"],
        json!(["sub", "iss"])
    );
}

#[test]
fn requires_the_discovery_members_of_the_oidc_spec() {
    let mut doc = discovery();
    doc.as_object_mut()
        .unwrap()
        .remove("subject_types_supported");
    doc["response_types_supported"] = json!([]);
    let got = pointers(publish(
        &json!({"openidConfiguration": doc, "jwks": {"keys": [ec_key("a")]}}),
        ISSUER,
        None,
    ));
    assert_eq!(
        got,
        [
            "/openidConfiguration/response_types_supported",
            "/openidConfiguration/subject_types_supported"
        ]
    );
}

#[test]
fn refuses_private_and_symmetric_material_naming_rotation() {
    let mut private = ec_key("a");
    private["d"] = json!("jpsQnnGQmL-YBIffH1136cspYG6-0iY7X1fCE9-E9LI");
    let oct = json!({"kty": "oct", "kid": "h", "k": "c2VjcmV0"});
    let err = publish(&upload(vec![private, oct]), ISSUER, None).unwrap_err();
    assert_eq!(err.len(), 2);
    assert_eq!(err[0].pointer, "/jwks/keys/0");
    assert!(err[0].message.contains("rotate"), "{}", err[0].message);
    assert!(err[0].message.contains("(d)"));
    assert_eq!(err[1].pointer, "/jwks/keys/1");
}

#[test]
fn key_set_rules() {
    let cases: Vec<(Vec<Value>, Vec<&str>)> = vec![
        (vec![], vec!["/jwks/keys"]),
        (
            (0..101).map(|i| ec_key(&format!("k{i}"))).collect(),
            vec!["/jwks/keys"],
        ),
        (vec![ec_key("a"), ec_key("a")], vec!["/jwks/keys/1/kid"]),
        (vec![ec_key("")], vec!["/jwks/keys/0/kid"]),
        (vec![ec_key("a"), ec_key("..")], vec!["/jwks/keys/1/kid"]),
        (vec![ec_key(".")], vec!["/jwks/keys/0/kid"]),
        (
            vec![json!({"kty": "EC", "crv": "P-256", "x": EC_X, "y": EC_Y})],
            vec!["/jwks/keys/0/kid"],
        ),
        (
            vec![
                json!({"kty": "EC", "crv": "P-256", "kid": "a", "use": "enc", "x": EC_X, "y": EC_Y}),
            ],
            vec!["/jwks/keys/0/use"],
        ),
        (
            vec![
                json!({"kty": "EC", "crv": "P-256", "kid": "a", "key_ops": ["sign"], "x": EC_X, "y": EC_Y}),
                json!({"kty": "EC", "crv": "P-256", "kid": "b", "key_ops": [], "x": EC_X, "y": EC_Y}),
                json!({"kty": "EC", "crv": "P-256", "kid": "c", "key_ops": ["verify", "verify"], "x": EC_X, "y": EC_Y}),
                json!({"kty": "EC", "crv": "P-256", "kid": "d", "key_ops": "verify", "x": EC_X, "y": EC_Y}),
                json!({"kty": "EC", "crv": "P-256", "kid": "e", "key_ops": ["verify", "sign"], "x": EC_X, "y": EC_Y}),
            ],
            vec![
                "/jwks/keys/0/key_ops",
                "/jwks/keys/1/key_ops",
                "/jwks/keys/2/key_ops",
                "/jwks/keys/3/key_ops",
            ],
        ),
        (
            vec![
                json!({"kty": "EC", "crv": "P-256", "kid": "a", "alg": "RS256", "x": EC_X, "y": EC_Y}),
            ],
            vec!["/jwks/keys/0/alg"],
        ),
        (
            vec![
                json!({"kty": "EC", "crv": "P-256", "kid": "a", "alg": "none", "x": EC_X, "y": EC_Y}),
            ],
            vec!["/jwks/keys/0/alg"],
        ),
        (
            vec![json!({"kty": "EC", "crv": "P-256", "kid": "a", "x": "!!", "y": EC_Y})],
            vec!["/jwks/keys/0/x"],
        ),
        (
            vec![json!({"kty": "EC", "crv": "P-384", "kid": "a", "x": EC_X, "y": EC_Y})],
            vec!["/jwks/keys/0/x", "/jwks/keys/0/y"],
        ),
        (
            vec![json!({"kty": "EC", "crv": "secp256k1", "kid": "a", "x": EC_X, "y": EC_Y})],
            vec!["/jwks/keys/0/crv"],
        ),
        (
            vec![json!({"kty": "RSA", "kid": "a", "n": "AQAB"})],
            vec!["/jwks/keys/0/n", "/jwks/keys/0/e"],
        ),
        (vec![rsa_key("a", 1024)], vec!["/jwks/keys/0/n"]),
        (
            vec![json!({"kty": "OKP", "crv": "X25519", "kid": "a", "x": EC_X})],
            vec!["/jwks/keys/0/crv"],
        ),
        (
            vec![json!({"kty": "XYZ", "kid": "a"})],
            vec!["/jwks/keys/0/kty"],
        ),
        (vec![json!({"kid": "a"})], vec!["/jwks/keys/0/kty"]),
        (vec![json!("key")], vec!["/jwks/keys/0"]),
    ];
    for (keys, expected) in cases {
        let got = pointers(publish(&upload(keys.clone()), ISSUER, None));
        assert_eq!(got, expected, "{}", json!(keys));
    }
    // Three dots are a name, not a step of a path.
    assert!(publish(&upload(vec![ec_key("...")]), ISSUER, None).is_ok());
}

#[test]
fn accepts_rsa_ec_and_okp_keys() {
    let ed = json!({"kty": "OKP", "crv": "Ed25519", "kid": "e", "alg": "EdDSA", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"});
    let p = publish(
        &upload(vec![rsa_key("r", 2048), ec_key("c"), ed]),
        ISSUER,
        None,
    )
    .unwrap();
    assert_eq!(key_ids(&p.jwks), ["r", "c", "e"]);
}

#[test]
fn reports_every_problem_of_the_body_at_once() {
    let body = json!({"openidConfiguration": [], "jwks": {"keys": [], "extra": 1}, "other": true});
    let got = pointers(publish(&body, ISSUER, None));
    assert_eq!(
        got,
        [
            "/other",
            "/openidConfiguration",
            "/jwks/extra",
            "/jwks/keys"
        ]
    );
    assert_eq!(
        pointers(publish(&json!({}), ISSUER, None)),
        ["/openidConfiguration", "/jwks"]
    );
    assert_eq!(pointers(publish(&json!([1]), ISSUER, None)), [""]);
}

#[test]
fn warns_on_rotation_without_overlap_and_on_alg_none() {
    let mut doc = discovery();
    doc["issuer"] = json!(ISSUER);
    doc["id_token_signing_alg_values_supported"] = json!(["RS256", "none"]);
    let body = json!({"openidConfiguration": doc, "jwks": {"keys": [ec_key("new")]}});
    let previous = vec!["old".to_owned()];
    let p = publish(&body, ISSUER, Some(&previous)).unwrap();
    assert_eq!(p.warnings.len(), 2, "{:?}", p.warnings);
    assert!(p.warnings.iter().any(|w| w.contains("\"none\"")));
    assert!(p.warnings.iter().any(|w| w.contains("old")));
    let overlap = vec!["new".to_owned(), "old".to_owned()];
    assert_eq!(
        publish(&body, ISSUER, Some(&overlap))
            .unwrap()
            .warnings
            .len(),
        1
    );
}

#[test]
fn rsa_keys_are_bounded_in_modulus_and_exponent() {
    let with_e = |bits: usize, e: &[u8]| {
        let mut key = rsa_key("r", bits);
        key["e"] = json!(URL_SAFE_NO_PAD.encode(e));
        key
    };
    let even_n = |bits: usize| {
        let mut n = vec![0xffu8; bits / 8];
        *n.last_mut().unwrap() = 0xfe;
        let mut key = rsa_key("r", bits);
        key["n"] = json!(URL_SAFE_NO_PAD.encode(n));
        key
    };
    // An exponent as large as the modulus (the review's n − 2) makes verification cost what
    // signing does.
    let huge_e = vec![0xffu8; 256];
    let refused = [
        (rsa_key("r", 16384), "/jwks/keys/0/n"),
        (rsa_key("r", 8200), "/jwks/keys/0/n"),
        (rsa_key("r", 1024), "/jwks/keys/0/n"),
        (even_n(2048), "/jwks/keys/0/n"),
        (with_e(2048, &[1]), "/jwks/keys/0/e"),
        (with_e(2048, &[0, 0, 1]), "/jwks/keys/0/e"),
        (with_e(2048, &[2]), "/jwks/keys/0/e"),
        (with_e(2048, &[1, 0, 0]), "/jwks/keys/0/e"),
        (with_e(2048, &[0x80, 0, 0, 1]), "/jwks/keys/0/e"),
        (with_e(2048, &[1, 0, 0, 0, 1]), "/jwks/keys/0/e"),
        (with_e(2048, &huge_e), "/jwks/keys/0/e"),
    ];
    for (key, pointer) in refused {
        let problems = publish(&upload(vec![key.clone()]), ISSUER, None).unwrap_err();
        assert_eq!(
            problems
                .iter()
                .map(|v| v.pointer.as_str())
                .collect::<Vec<_>>(),
            [pointer],
            "{key}"
        );
    }
    for key in [
        rsa_key("r", 2048),
        rsa_key("r", 8192),
        with_e(4096, &[3]),
        with_e(2048, &[0x7f, 0xff, 0xff, 0xff]),
        with_e(2048, &[0, 1, 0, 1]),
    ] {
        assert!(
            publish(&upload(vec![key.clone()]), ISSUER, None).is_ok(),
            "{key}"
        );
    }
    assert_eq!(rsa_modulus_bits(&[]), Err(RsaBound::ModulusBits(0)));
    assert_eq!(rsa_exponent(&[]), Err(RsaBound::Exponent));
    assert_eq!(
        rsa_exponent(&[0x7f, 0xff, 0xff, 0xff]),
        Ok(MAX_RSA_EXPONENT)
    );
}
