//! Every code of the preflight (docs/api.md, "Preflight"), for the clouds it concerns and not for
//! the others.

use super::*;
use serde_json::json;
use time::macros::datetime;

const ISSUER: &str = "https://k3s-acme.example.com";
const NOW: OffsetDateTime = datetime!(2026-11-25 10:00 UTC);

fn rsa(kid: &str) -> Value {
    json!({"kty": "RSA", "kid": kid, "alg": "RS256", "e": "AQAB", "n": "AQAB"})
}

fn ec(kid: &str, crv: &str) -> Value {
    json!({"kty": "EC", "kid": kid, "crv": crv, "x": "AA", "y": "AA"})
}

fn okp(kid: &str) -> Value {
    json!({"kty": "OKP", "kid": kid, "crv": "Ed25519", "x": "AA"})
}

fn documents(keys: Vec<Value>) -> (Value, Value) {
    (
        json!({"issuer": ISSUER, "jwks_uri": format!("{ISSUER}/openid/v1/jwks")}),
        json!({"keys": keys}),
    )
}

fn check(keys: Vec<Value>) -> Preflight {
    let (discovery, jwks) = documents(keys);
    let published = Published {
        openid_configuration: &discovery,
        jwks: &jwks,
    };
    check_documents(ISSUER, Some(&published))
}

/// The codes of `cloud`'s findings, in order.
fn codes_of(report: &Preflight, cloud: Cloud) -> Vec<&'static str> {
    report
        .cloud(cloud)
        .findings
        .iter()
        .map(|f| f.code)
        .collect()
}

fn finding<'r>(report: &'r Preflight, cloud: Cloud, code: &str) -> &'r Finding {
    report
        .cloud(cloud)
        .findings
        .iter()
        .find(|f| f.code == code)
        .unwrap_or_else(|| panic!("no {code} for {cloud:?}: {report:?}"))
}

fn claims() -> Value {
    let now = NOW.unix_timestamp();
    json!({"iss": ISSUER, "sub": "system:serviceaccount:ci:deployer",
        "aud": ["sts.amazonaws.com", "api://AzureADTokenExchange",
            "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p/providers/k"],
        "iat": now - 60, "exp": now + 3600})
}

fn jws(header: Value, claims: Value) -> Jws {
    Jws {
        header: header.as_object().unwrap().clone(),
        claims: claims.as_object().unwrap().clone(),
    }
}

fn check_with(keys: Vec<Value>, token: &Jws, signature: Signature) -> Preflight {
    let (discovery, jwks) = documents(keys);
    let published = Published {
        openid_configuration: &discovery,
        jwks: &jwks,
    };
    check_token(ISSUER, Some(&published), token, signature, NOW)
}

/// A good RS256 token with kid `k1`, verified by key 0.
fn rs256() -> Jws {
    jws(json!({"alg": "RS256", "kid": "k1"}), claims())
}

const VERIFIED: Signature = Signature::Verified { key: 0 };

#[test]
fn an_https_issuer_with_an_rsa_key_is_ready_everywhere() {
    let report = check(vec![rsa("k1")]);
    for cloud in Cloud::ALL {
        assert!(report.cloud(cloud).ready, "{cloud:?}");
        assert_eq!(codes_of(&report, cloud), Vec::<&str>::new());
    }
    let token = check_with(vec![rsa("k1")], &rs256(), VERIFIED);
    for cloud in Cloud::ALL {
        assert_eq!(codes_of(&token, cloud), Vec::<&str>::new(), "{cloud:?}");
    }
}

#[test]
fn not_published_is_an_error_everywhere() {
    let report = check_documents(ISSUER, None);
    assert!(!report.published);
    for cloud in Cloud::ALL {
        assert_eq!(codes_of(&report, cloud), [codes::NOT_PUBLISHED]);
        assert!(!report.cloud(cloud).ready);
    }
    let json = report.to_json();
    assert_eq!(json["clouds"]["aws"]["findings"][0]["severity"], "error");
    assert!(json["clouds"]["aws"]["findings"][0]
        .get("pointer")
        .is_none());
}

#[test]
fn an_http_issuer_is_an_error_everywhere() {
    let report = check_documents("http://k3s-acme.example.com", None);
    for cloud in Cloud::ALL {
        assert!(codes_of(&report, cloud).contains(&codes::ISSUER_NOT_HTTPS));
    }
    // A scheme is the same in any case (kube-apiserver reads `HTTPS://` as https too).
    let upper = check_documents("HTTPS://k3s-acme.example.com", None);
    for cloud in Cloud::ALL {
        assert!(!codes_of(&upper, cloud).contains(&codes::ISSUER_NOT_HTTPS));
    }
}

#[test]
fn a_port_is_a_warning_for_aws_only() {
    let issuer = "https://k3s-acme.example.com:8443";
    let (discovery, jwks) = documents(vec![rsa("k1")]);
    let published = Published {
        openid_configuration: &discovery,
        jwks: &jwks,
    };
    let report = check_documents(issuer, Some(&published));
    let port = finding(&report, Cloud::Aws, codes::ISSUER_HAS_PORT);
    assert_eq!(port.severity, Severity::Warning);
    assert_eq!(port.pointer.as_deref(), Some("/openidConfiguration/issuer"));
    assert!(report.cloud(Cloud::Aws).ready, "a warning leaves AWS ready");
    assert!(!report.cloud(Cloud::Gcp).has(codes::ISSUER_HAS_PORT));
    assert!(!report.cloud(Cloud::Azure).has(codes::ISSUER_HAS_PORT));
    assert_eq!(port_of("https://[::1]:8443/x"), Some("8443"));
    assert_eq!(port_of("https://[::1]/x"), None);
    assert_eq!(port_of("https://a.example/p:1"), None);
}

#[test]
fn okp_keys_are_ignored_by_every_cloud_with_a_pointer() {
    let report = check(vec![rsa("k1"), okp("ed")]);
    for cloud in Cloud::ALL {
        let unsupported = finding(&report, cloud, codes::KEY_UNSUPPORTED);
        assert_eq!(unsupported.severity, Severity::Warning);
        assert_eq!(unsupported.pointer.as_deref(), Some("/jwks/keys/1"));
        assert!(report.cloud(cloud).ready);
    }
}

#[test]
fn ec_keys_per_cloud() {
    let report = check(vec![rsa("k1"), ec("p256", "P-256"), ec("p384", "P-384")]);
    assert_eq!(codes_of(&report, Cloud::Aws), Vec::<&str>::new());
    let gcp: Vec<_> = report
        .cloud(Cloud::Gcp)
        .findings
        .iter()
        .map(|f| f.pointer.clone())
        .collect();
    assert_eq!(
        gcp,
        [Some("/jwks/keys/2".to_owned())],
        "GCP verifies P-256 only"
    );
    let azure: Vec<_> = report
        .cloud(Cloud::Azure)
        .findings
        .iter()
        .map(|f| f.pointer.clone())
        .collect();
    assert_eq!(
        azure,
        [
            Some("/jwks/keys/1".to_owned()),
            Some("/jwks/keys/2".to_owned())
        ],
        "Azure verifies RS256 only"
    );
}

#[test]
fn rsa_keys_for_another_alg_are_ignored_by_gcp_and_azure() {
    let mut ps = rsa("ps");
    ps["alg"] = json!("PS256");
    let report = check(vec![ps]);
    assert!(report.cloud(Cloud::Aws).ready);
    for cloud in [Cloud::Gcp, Cloud::Azure] {
        assert_eq!(
            codes_of(&report, cloud),
            [codes::KEY_UNSUPPORTED, codes::NO_USABLE_KEY]
        );
    }
}

#[test]
fn no_usable_key_is_an_error_pointing_at_the_set() {
    let report = check(vec![okp("ed")]);
    for cloud in Cloud::ALL {
        let none = finding(&report, cloud, codes::NO_USABLE_KEY);
        assert_eq!(none.severity, Severity::Error);
        assert_eq!(none.pointer.as_deref(), Some("/jwks/keys"));
        assert!(!report.cloud(cloud).ready);
    }
    let empty = check(vec![]);
    assert!(empty.cloud(Cloud::Aws).has(codes::NO_USABLE_KEY));
    let azure = check(vec![ec("p256", "P-256")]);
    assert!(azure.cloud(Cloud::Azure).has(codes::NO_USABLE_KEY));
    assert!(azure.cloud(Cloud::Gcp).ready);
}

#[test]
fn the_signature_is_checked_against_the_keys_of_the_kid_or_all() {
    let (discovery, jwks) = documents(vec![rsa("a"), rsa("b"), rsa("retired")]);
    let published = Published {
        openid_configuration: &discovery,
        jwks: &jwks,
    };
    let kid = |kid: &str| jws(json!({"alg": "RS256", "kid": kid}), claims());
    let only = |wanted: &'static str| move |jwk: &Map<String, Value>| jwk["kid"] == wanted;
    assert_eq!(
        check_signature(&published, &kid("retired"), only("retired")),
        Signature::Verified { key: 2 }
    );
    assert_eq!(
        check_signature(&published, &kid("b"), only("a")),
        Signature::Invalid { key: 1 }
    );
    assert_eq!(
        check_signature(&published, &kid("c"), |_| true),
        Signature::Unknown
    );
    let no_kid = jws(json!({"alg": "RS256"}), claims());
    assert_eq!(
        check_signature(&published, &no_kid, only("b")),
        Signature::Verified { key: 1 }
    );
    assert_eq!(
        check_signature(&published, &no_kid, |_| false),
        Signature::Unknown
    );
    // Without a kid, only keys that can sign with the token's alg are tried.
    let es256 = jws(json!({"alg": "ES256"}), claims());
    assert_eq!(
        check_signature(&published, &es256, |_| true),
        Signature::Unknown
    );
}

/// A token without `kid` costs a bounded amount of signature work, however many keys a set
/// publishes: a set of 100 large RSA keys is not verified 100 times.
#[test]
fn the_signature_work_of_a_token_without_kid_is_bounded() {
    let big = |kid: &str| {
        let mut key = rsa(kid);
        // 4096 bits: four units each.
        key["n"] = json!("A".repeat(683));
        key
    };
    let keys: Vec<Value> = (0..100).map(|i| big(&format!("k{i}"))).collect();
    let (discovery, jwks) = documents(keys);
    let published = Published {
        openid_configuration: &discovery,
        jwks: &jwks,
    };
    let tried = std::cell::Cell::new(0);
    let counting = |_: &Map<String, Value>| {
        tried.set(tried.get() + 1);
        false
    };
    let no_kid = jws(json!({"alg": "RS256"}), claims());
    assert_eq!(
        check_signature(&published, &no_kid, counting),
        Signature::Unknown
    );
    assert_eq!(tried.get(), SIGNATURE_BUDGET / 4);
    // A key whose own alg is another one is no candidate.
    tried.set(0);
    let rs512 = jws(json!({"alg": "RS512"}), claims());
    let mut keys: Vec<Value> = (0..3).map(|i| rsa(&format!("r{i}"))).collect();
    keys[1]["alg"] = json!("RS512");
    let (discovery, jwks) = documents(keys);
    let published = Published {
        openid_configuration: &discovery,
        jwks: &jwks,
    };
    let only_r1 = |jwk: &Map<String, Value>| {
        tried.set(tried.get() + 1);
        jwk["kid"] == "r1"
    };
    assert_eq!(
        check_signature(&published, &rs512, only_r1),
        Signature::Verified { key: 1 }
    );
    assert_eq!(tried.get(), 1);
    // The key a kid names is always tried, whatever its size.
    let mut huge = rsa("huge");
    huge["n"] = json!("A".repeat(2731));
    let (discovery, jwks) = documents(vec![huge]);
    let published = Published {
        openid_configuration: &discovery,
        jwks: &jwks,
    };
    assert_eq!(
        check_signature(
            &published,
            &jws(json!({"alg": "RS256", "kid": "huge"}), claims()),
            |_| true
        ),
        Signature::Verified { key: 0 }
    );
}

#[test]
fn signature_invalid_and_key_unknown_are_errors_everywhere() {
    let invalid = check_with(vec![rsa("k1")], &rs256(), Signature::Invalid { key: 0 });
    let unknown = check_with(vec![rsa("k1")], &rs256(), Signature::Unknown);
    for cloud in Cloud::ALL {
        let f = finding(&invalid, cloud, codes::SIGNATURE_INVALID);
        assert_eq!(f.pointer.as_deref(), Some("/jwks/keys/0"));
        assert!(!invalid.cloud(cloud).ready);
        let f = finding(&unknown, cloud, codes::KEY_UNKNOWN);
        assert!(f.message.contains("\"k1\""), "{}", f.message);
        assert!(!unknown.cloud(cloud).ready);
    }
}

#[test]
fn issuer_mismatch_says_trailing_slash_or_case() {
    let with_iss = |iss: &str| {
        let mut claims = claims();
        claims["iss"] = json!(iss);
        let token = jws(json!({"alg": "RS256", "kid": "k1"}), claims);
        check_with(vec![rsa("k1")], &token, VERIFIED)
    };
    let slash = with_iss(&format!("{ISSUER}/"));
    let case = with_iss(&ISSUER.to_uppercase());
    let other = with_iss("https://kubernetes.default.svc");
    for cloud in Cloud::ALL {
        let f = finding(&slash, cloud, codes::ISSUER_MISMATCH);
        assert!(f.message.contains("trailing slash"), "{}", f.message);
        assert!(!f.message.contains("case"), "{}", f.message);
        assert_eq!(f.pointer.as_deref(), Some("/openidConfiguration/issuer"));
        let f = finding(&case, cloud, codes::ISSUER_MISMATCH);
        assert!(f.message.contains("case"), "{}", f.message);
        assert!(!f.message.contains("trailing slash"), "{}", f.message);
        let f = finding(&other, cloud, codes::ISSUER_MISMATCH);
        assert!(!f.message.contains("case") && !f.message.contains("trailing slash"));
    }
    let both = with_iss(&format!("{}/", ISSUER.to_uppercase()));
    let f = finding(&both, Cloud::Aws, codes::ISSUER_MISMATCH);
    assert!(f.message.contains("trailing slash") && f.message.contains("case"));
}

#[test]
fn algorithm_unsupported_per_cloud() {
    let with_alg = |alg: &str| {
        let token = jws(json!({"alg": alg, "kid": "k1"}), claims());
        check_with(vec![rsa("k1")], &token, VERIFIED)
    };
    let expect = |alg: &str, aws: bool, gcp: bool, azure: bool| {
        let report = with_alg(alg);
        let has = |cloud| report.cloud(cloud).has(codes::ALGORITHM_UNSUPPORTED);
        assert_eq!(
            (has(Cloud::Aws), has(Cloud::Gcp), has(Cloud::Azure)),
            (aws, gcp, azure),
            "{alg}"
        );
    };
    expect("RS256", false, false, false);
    expect("ES256", false, false, true);
    expect("ES384", false, true, true);
    expect("PS256", false, true, true);
    expect("EdDSA", true, true, true);
    expect("HS256", true, true, true);
}

#[test]
fn kid_missing_is_an_error_for_gcp_only() {
    let token = jws(json!({"alg": "RS256"}), claims());
    let report = check_with(vec![rsa("k1")], &token, VERIFIED);
    assert_eq!(codes_of(&report, Cloud::Gcp), [codes::KID_MISSING]);
    assert!(!report.cloud(Cloud::Gcp).ready);
    assert!(report.cloud(Cloud::Aws).ready);
    assert!(report.cloud(Cloud::Azure).ready);
}

#[test]
fn audience_mismatch_warns_for_aws_and_azure_and_refuses_for_gcp() {
    let with_aud = |aud: Value| {
        let mut claims = claims();
        claims["aud"] = aud;
        let token = jws(json!({"alg": "RS256", "kid": "k1"}), claims);
        check_with(vec![rsa("k1")], &token, VERIFIED)
    };
    let report = with_aud(json!("vault"));
    for (cloud, severity) in [
        (Cloud::Aws, Severity::Warning),
        (Cloud::Azure, Severity::Warning),
        (Cloud::Gcp, Severity::Error),
    ] {
        assert_eq!(
            finding(&report, cloud, codes::AUDIENCE_MISMATCH).severity,
            severity
        );
    }
    assert!(report.cloud(Cloud::Aws).ready);
    let report = with_aud(json!("sts.amazonaws.com"));
    assert!(!report.cloud(Cloud::Aws).has(codes::AUDIENCE_MISMATCH));
    assert!(report.cloud(Cloud::Azure).has(codes::AUDIENCE_MISMATCH));
    let report = with_aud(json!(["x", "api://AzureADTokenExchange"]));
    assert!(!report.cloud(Cloud::Azure).has(codes::AUDIENCE_MISMATCH));
    let report = with_aud(json!("https://iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p/providers/k"));
    assert!(!report.cloud(Cloud::Gcp).has(codes::AUDIENCE_MISMATCH));
    // The host alone, or a path that names no provider, is no provider's audience.
    for aud in [
        "//iam.googleapis.com/",
        "//iam.googleapis.com/projects/1",
        "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p/providers/",
        "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p/providers/k/x",
    ] {
        let report = with_aud(json!(aud));
        assert!(
            report.cloud(Cloud::Gcp).has(codes::AUDIENCE_MISMATCH),
            "{aud}"
        );
    }
    let report = with_aud(json!(
        "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p/providers/k"
    ));
    assert!(!report.cloud(Cloud::Gcp).has(codes::AUDIENCE_MISMATCH));
}

#[test]
fn token_expired_everywhere() {
    let mut expired = claims();
    expired["exp"] = json!(NOW.unix_timestamp());
    let mut none = claims();
    none.as_object_mut().unwrap().remove("exp");
    for claims in [expired, none] {
        let token = jws(json!({"alg": "RS256", "kid": "k1"}), claims);
        let report = check_with(vec![rsa("k1")], &token, VERIFIED);
        for cloud in Cloud::ALL {
            assert_eq!(
                codes_of(&report, cloud),
                [codes::TOKEN_EXPIRED],
                "{cloud:?}"
            );
        }
    }
}

#[test]
fn token_lifetime_too_long_for_gcp_only() {
    let mut long = claims();
    let iat = NOW.unix_timestamp() - 60;
    long["exp"] = json!(iat + GCP_MAX_LIFETIME_SECS);
    let token = jws(json!({"alg": "RS256", "kid": "k1"}), long.clone());
    let report = check_with(vec![rsa("k1")], &token, VERIFIED);
    assert_eq!(
        codes_of(&report, Cloud::Gcp),
        [codes::TOKEN_LIFETIME_TOO_LONG]
    );
    assert!(report.cloud(Cloud::Aws).ready);
    assert!(report.cloud(Cloud::Azure).ready);
    long["exp"] = json!(iat + GCP_MAX_LIFETIME_SECS - 1);
    let token = jws(json!({"alg": "RS256", "kid": "k1"}), long);
    let report = check_with(vec![rsa("k1")], &token, VERIFIED);
    assert!(report.cloud(Cloud::Gcp).ready);
}

#[test]
fn times_at_the_far_ends_of_i64_are_judged_not_overflowed() {
    // 1e20 reads as i64::MAX and -1e20 as i64::MIN: every difference saturates, so the
    // answer is a finding (not a panic, nor a wrapped lifetime that GCP would pass).
    let at = |exp: Value, iat: Value| {
        let mut claims = claims();
        claims["exp"] = exp;
        claims["iat"] = iat;
        check_with(
            vec![rsa("k1")],
            &jws(json!({"alg": "RS256", "kid": "k1"}), claims),
            VERIFIED,
        )
    };
    for (exp, iat) in [
        (json!(1e20), json!(-5)),
        (json!(i64::MAX), json!(i64::MIN)),
        (json!(1e20), json!(-1e20)),
    ] {
        let report = at(exp, iat);
        assert_eq!(
            codes_of(&report, Cloud::Gcp),
            [codes::TOKEN_LIFETIME_TOO_LONG]
        );
        assert!(report.cloud(Cloud::Aws).ready);
    }
    for exp in [json!(-1e20), json!(i64::MIN)] {
        let report = at(exp, json!(NOW.unix_timestamp()));
        for cloud in Cloud::ALL {
            assert_eq!(
                codes_of(&report, cloud),
                [codes::TOKEN_EXPIRED],
                "{cloud:?}"
            );
        }
    }
}

#[test]
fn a_token_for_nothing_published_is_judged_on_its_claims_only() {
    let report = check_token(ISSUER, None, &rs256(), Signature::Unknown, NOW);
    for cloud in Cloud::ALL {
        assert_eq!(codes_of(&report, cloud), [codes::NOT_PUBLISHED]);
    }
}

#[test]
fn jws_parsing_and_the_summary() {
    let part = |v: Value| URL_SAFE_NO_PAD.encode(v.to_string());
    let good = format!(
        "{}.{}.{}",
        part(json!({"alg": "ES256", "kid": "a", "typ": "JWT"})),
        part(json!({"iss": ISSUER, "sub": "s", "jti": "j"})),
        URL_SAFE_NO_PAD.encode("sig")
    );
    let parsed = Jws::parse(&good).unwrap();
    assert_eq!((parsed.alg(), parsed.kid()), ("ES256", Some("a")));
    assert_eq!(
        parsed.summary(),
        json!({"header": {"alg": "ES256", "kid": "a"},
            "claims": {"iss": ISSUER, "sub": "s", "aud": null, "exp": null, "iat": null, "nbf": null}})
    );
    let no_alg = format!("{}.{}.c2ln", part(json!({"kid": "a"})), part(json!({})));
    for bad in ["", "a.b", "a.b.c.d", "!!.e30.c2ln", "e30.W10.c2ln", &no_alg] {
        assert!(Jws::parse(bad).is_err(), "{bad}");
    }
    let unsigned = format!("{}.{}.", part(json!({"alg": "none"})), part(json!({})));
    assert!(Jws::parse(&unsigned).is_err());
    // Two `sub`s: refused as the verifier refuses it, not judged on the last.
    let twice = format!(
        "{}.{}.c2ln",
        part(json!({"alg": "ES256"})),
        URL_SAFE_NO_PAD.encode(r#"{"sub":"repo:evil/x","sub":"s"}"#)
    );
    let refused = Jws::parse(&twice).unwrap_err();
    assert!(
        refused.starts_with("the token's payload names a member twice"),
        "{refused}"
    );
}
