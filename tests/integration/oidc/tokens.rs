//! What a token must be: algorithms, keys, issuer and registered claims.

use super::*;
use registry_domain::ports::{IdentityTokenVerifier, IssuerKeys};
use registry_tests::issuer::{compact, KeyKind, SigningKey, TestIssuer};

#[tokio::test]
async fn every_accepted_algorithm_verifies_with_one_fetch() {
    let issuer = TestIssuer::start();
    let verifier = verifier();
    for alg in [
        "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
    ] {
        let token = issuer.mint(alg, claims(&issuer.url()));
        let verified = verify(&verifier, &token)
            .await
            .unwrap_or_else(|e| panic!("{alg}: {e}"));
        assert_eq!(verified.issuer, issuer.url());
        assert_eq!(verified.claims["aud"], "registry", "{alg}");
        assert_eq!(verified.claims["sub"], "repo:acme/api:ref:refs/heads/main");
    }
    assert_eq!((issuer.discovery_fetches(), issuer.jwks_fetches()), (1, 1));
    assert_eq!(verifier.fetch_count(), 1);
}

#[tokio::test]
async fn the_port_trait_returns_a_rejection_with_the_reason() {
    let issuer = TestIssuer::start();
    let verifier = verifier();
    let good = issuer.mint("ES256", claims(&issuer.url()));
    let verified = IdentityTokenVerifier::verify(&verifier, &good, IssuerKeys::Fetched, now())
        .await
        .unwrap();
    assert_eq!(verified.issuer, issuer.url());
    // Same header and signature, another subject.
    let (header, rest) = good.split_once('.').unwrap();
    let signature = rest.split_once('.').unwrap().1;
    let mut forged_claims = claims(&issuer.url());
    forged_claims["sub"] = json!("repo:evil/api");
    let payload = registry_tests::issuer::compact(&json!({}), &forged_claims, |_| Vec::new());
    let payload = payload.split('.').nth(1).unwrap();
    let tampered = format!("{header}.{payload}.{signature}");
    let rejection = IdentityTokenVerifier::verify(&verifier, &tampered, IssuerKeys::Fetched, now())
        .await
        .unwrap_err();
    assert!(
        rejection.detail.contains("invalid signature"),
        "{rejection}"
    );
    assert_eq!(rejection.code.as_str(), "signature-invalid");
}

#[tokio::test]
async fn unsigned_and_hmac_tokens_are_refused_before_any_fetch() {
    let issuer = TestIssuer::start();
    let verifier = verifier();
    let iss = issuer.url();
    let none = issuer.mint_with_header(json!({"alg": "none", "typ": "JWT"}), claims(&iss));
    assert_refused(verify(&verifier, &none).await, "\"none\" is not accepted");
    let rsa = issuer.key("RS256");
    for header in [
        json!({"alg": "HS256", "kid": rsa.kid()}),
        json!({"alg": "HS256"}),
        json!({"alg": "HS512"}),
    ] {
        let confused = issuer.mint_with_header(header, claims(&iss));
        assert_refused(verify(&verifier, &confused).await, "is not accepted");
    }
    // The same confusion attempted with the JWK text as the secret.
    let secret = rsa.public_jwk().to_string();
    let confused = compact(
        &json!({"alg": "HS256", "kid": rsa.kid()}),
        &claims(&iss),
        |m| registry_tests::issuer::hmac_sha256(secret.as_bytes(), m),
    );
    assert_refused(
        verify(&verifier, &confused).await,
        "\"HS256\" is not accepted",
    );
    let lowercase = compact(
        &json!({"alg": "rs256", "kid": rsa.kid()}),
        &claims(&iss),
        |m| rsa.sign("RS256", m),
    );
    assert_refused(verify(&verifier, &lowercase).await, "not accepted");
    assert_eq!(issuer.discovery_fetches() + issuer.jwks_fetches(), 0);
}

#[tokio::test]
async fn a_claim_named_twice_is_refused_though_its_signature_holds() {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;
    let issuer = TestIssuer::start();
    let verifier = verifier();
    let key = issuer.key("ES256");
    let b64 = |text: &str| URL_SAFE_NO_PAD.encode(text);
    // The genuine subject last: a reader keeping the last member sees it, one keeping the
    // first sees `repo:evil/api`. The issuer signed both, so the signature holds.
    let payload = claims(&issuer.url())
        .to_string()
        .replacen('{', r#"{"sub":"repo:evil/api","#, 1);
    let header = json!({"alg": "ES256", "kid": key.kid()}).to_string();
    let input = format!("{}.{}", b64(&header), b64(&payload));
    let signature = URL_SAFE_NO_PAD.encode(key.sign("ES256", input.as_bytes()));
    let token = format!("{input}.{signature}");
    assert_refused(verify(&verifier, &token).await, "named twice");
    // So is a header naming `alg` twice.
    let header = format!(r#"{{"alg":"none","alg":"ES256","kid":"{}"}}"#, key.kid());
    let input = format!(
        "{}.{}",
        b64(&header),
        b64(&claims(&issuer.url()).to_string())
    );
    let signature = URL_SAFE_NO_PAD.encode(key.sign("ES256", input.as_bytes()));
    assert_refused(
        verify(&verifier, &format!("{input}.{signature}")).await,
        "named twice",
    );
    // Refused as it is read, before any fetch.
    assert_eq!(issuer.discovery_fetches() + issuer.jwks_fetches(), 0);
    // The same token without the twin is accepted.
    let payload = claims(&issuer.url()).to_string();
    let input = format!(
        "{}.{}",
        b64(&json!({"alg": "ES256", "kid": key.kid()}).to_string()),
        b64(&payload)
    );
    let signature = URL_SAFE_NO_PAD.encode(key.sign("ES256", input.as_bytes()));
    verify(&verifier, &format!("{input}.{signature}"))
        .await
        .unwrap();
}

#[tokio::test]
async fn keys_named_by_the_header_are_ignored() {
    let issuer = TestIssuer::start();
    let verifier = verifier();
    let attacker = SigningKey::generate(KeyKind::Rsa, "attacker");
    let iss = issuer.url();
    // jku/x5u point at a key set the attacker controls; jwk embeds the attacker's key.
    let own_kid = json!({"alg": "RS256", "kid": "attacker", "jwk": attacker.public_jwk(),
        "jku": format!("{iss}/attacker-jwks"), "x5u": format!("{iss}/attacker.pem")});
    let token = compact(&own_kid, &claims(&iss), |m| attacker.sign("RS256", m));
    assert_refused(
        verify(&verifier, &token).await,
        "no key with kid \"attacker\"",
    );
    // Borrowing the issuer's kid does not help: the signature is checked with the issuer's key.
    let rsa_kid = issuer.key("RS256").kid().to_owned();
    let borrowed = json!({"alg": "RS256", "kid": rsa_kid, "jwk": attacker.public_jwk()});
    let token = compact(&borrowed, &claims(&iss), |m| attacker.sign("RS256", m));
    assert_refused(verify(&verifier, &token).await, "invalid signature");
    assert_eq!(
        issuer.fetches("/attacker-jwks") + issuer.fetches("/attacker.pem"),
        0
    );
}

#[tokio::test]
async fn unknown_kid_and_mismatched_key_type_are_refused() {
    let issuer = TestIssuer::start();
    let verifier = verifier();
    let iss = issuer.url();
    let unknown = issuer.mint_with_header(json!({"alg": "ES256", "kid": "nope"}), claims(&iss));
    assert_refused(
        verify(&verifier, &unknown).await,
        "no key with kid \"nope\"",
    );
    // ES256 naming the RSA key's kid (signed with the P-256 key): the key does not fit.
    let rsa_kid = issuer.key("RS256").kid().to_owned();
    let crossed = issuer.mint_with_header(json!({"alg": "ES256", "kid": rsa_kid}), claims(&iss));
    assert_refused(
        verify(&verifier, &crossed).await,
        "does not fit algorithm ES256",
    );
    // ES384 naming the P-256 key: right type, wrong curve.
    let p256_kid = issuer.key("ES256").kid().to_owned();
    let curve = issuer.mint_with_header(json!({"alg": "ES384", "kid": p256_kid}), claims(&iss));
    assert_refused(
        verify(&verifier, &curve).await,
        "does not fit algorithm ES384",
    );
}

#[tokio::test]
async fn kid_is_required_when_the_issuer_has_several_keys() {
    let several = TestIssuer::start();
    let verifier = verifier();
    let token = several.mint_with_header(json!({"alg": "RS256"}), claims(&several.url()));
    assert_refused(
        verify(&verifier, &token).await,
        "kid is required: the issuer publishes 4 keys",
    );

    let single = TestIssuer::start_with(&[KeyKind::P256]);
    let token =
        single.mint_with_header(json!({"alg": "ES256", "typ": "JWT"}), claims(&single.url()));
    let verified = verify(&verifier, &token).await.unwrap();
    assert_eq!(verified.issuer, single.url());
}

#[tokio::test]
async fn a_token_is_verified_with_the_keys_of_the_issuer_it_names() {
    let a = TestIssuer::start();
    let b = TestIssuer::start();
    let verifier = verifier();
    // Both issuers name their RSA key "rsa-1"; A's signature under B's name must fail.
    assert_eq!(a.key("RS256").kid(), b.key("RS256").kid());
    let forged = a.mint("RS256", claims(&b.url()));
    assert_refused(verify(&verifier, &forged).await, "invalid signature");
    assert_eq!((a.jwks_fetches(), b.jwks_fetches()), (0, 1));
}

#[tokio::test]
async fn the_discovery_document_must_name_the_same_issuer() {
    let issuer = TestIssuer::start();
    let verifier = verifier();
    issuer.set_discovery_issuer(Some("http://127.0.0.1:1"));
    let token = issuer.mint("RS256", claims(&issuer.url()));
    assert_refused(
        verify(&verifier, &token).await,
        "names issuer \"http://127.0.0.1:1\"",
    );
    assert_eq!(issuer.jwks_fetches(), 0);

    // One trailing slash of `iss` is dropped to find the document, whose issuer must then
    // still be the exact `iss`.
    let other = TestIssuer::start();
    let slashed = format!("{}/", other.url());
    let token = other.mint("RS256", claims(&slashed));
    assert_refused(
        verify(&verifier, &token).await,
        "expected \"http://127.0.0.1",
    );
    other.set_discovery_issuer(Some(&slashed));
    let fresh = super::verifier();
    assert_eq!(verify(&fresh, &token).await.unwrap().issuer, slashed);
}

#[tokio::test]
async fn registered_claims_are_enforced() {
    let issuer = TestIssuer::start();
    let verifier = verifier();
    let iss = issuer.url();
    let t = now().unix_timestamp();
    let cases = [
        (
            json!({"iss": iss, "aud": "a", "iat": t - 7200, "exp": t - 3600}),
            "token expired",
        ),
        (
            json!({"iss": iss, "aud": "a", "iat": t, "nbf": t + 600, "exp": t + 1200}),
            "not yet valid",
        ),
        (
            json!({"iss": iss, "aud": "a", "iat": t + 600, "exp": t + 1200}),
            "issued in the future",
        ),
        (
            json!({"iss": iss, "aud": "a", "iat": t, "exp": t + 86_400 + 60}),
            "exceeds 24 hours",
        ),
        (
            json!({"iss": iss, "iat": t, "exp": t + 600}),
            "aud is missing",
        ),
        (
            json!({"iss": iss, "aud": [], "iat": t, "exp": t + 600}),
            "aud is missing",
        ),
        (json!({"iss": iss, "aud": "a", "iat": t}), "exp is missing"),
        (
            json!({"iss": iss, "aud": "a", "exp": t + 600}),
            "iat is missing",
        ),
        (
            json!({"aud": "a", "iat": t, "exp": t + 600}),
            "iss is missing",
        ),
        (
            json!({"iss": 42, "aud": "a", "iat": t, "exp": t + 600}),
            "iss is missing",
        ),
    ];
    for (claims, expected) in cases {
        let token = issuer.mint("ES256", claims.clone());
        assert_refused(verify(&verifier, &token).await, expected);
    }
    // Within the 60 s leeway.
    let token = issuer.mint(
        "ES256",
        json!({"iss": iss, "aud": "a", "iat": t - 700, "exp": t - 30}),
    );
    verify(&verifier, &token).await.unwrap();
}

#[tokio::test]
async fn oversized_and_malformed_tokens_are_refused_before_any_fetch() {
    let issuer = TestIssuer::start();
    let verifier = verifier();
    let mut big = claims(&issuer.url());
    big["padding"] = json!("x".repeat(16 * 1024));
    let token = issuer.mint("ES256", big);
    assert_refused(
        verify(&verifier, &token).await,
        "token longer than 16384 bytes",
    );
    for junk in ["", "a.b", "a.b.c.d", "not a token at all", "e30.e30.e30"] {
        assert!(verify(&verifier, junk).await.is_err(), "{junk}");
    }
    assert_eq!(issuer.discovery_fetches(), 0);
}
