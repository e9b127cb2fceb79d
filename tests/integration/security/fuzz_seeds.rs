//! Regenerates the seed tokens of the `jwt` fuzz target together with the key set that signs
//! them (`fuzz/keys/jwks.json`, `fuzz/keys/signed-inputs.txt`, `fuzz/corpus/jwt/`). The private
//! keys live only while this runs, so the committed files never hold one.
//!
//! ```text
//! cargo test -p registry-tests --test integration security::fuzz_seeds -- --ignored
//! ```
//!
//! `registry-oidc`'s `fuzzing` feature has a unit test that checks the committed seeds against
//! the committed keys (`cargo test -p registry-oidc --features fuzzing`).

use registry_tests::issuer::{compact, hmac_sha256, KeyKind, SigningKey};
use serde_json::{json, Value};
use std::path::Path;

/// `registry_oidc::fuzzing::FUZZ_NOW`.
const FUZZ_NOW: i64 = 1_800_000_000;
const ISSUER: &str = "https://issuer.fuzz.example";

#[test]
#[ignore = "rewrites fuzz/keys and fuzz/corpus/jwt; run by hand to regenerate the seeds"]
fn regenerate_jwt_fuzz_seeds() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let corpus = fuzz.join("corpus/jwt");
    if corpus.exists() {
        std::fs::remove_dir_all(&corpus).unwrap();
    }
    std::fs::create_dir_all(&corpus).unwrap();
    std::fs::create_dir_all(fuzz.join("keys")).unwrap();

    let rsa = SigningKey::generate(KeyKind::Rsa, "fuzz-rsa");
    let p256 = SigningKey::generate(KeyKind::P256, "fuzz-p256");
    let ed = SigningKey::generate(KeyKind::Ed25519, "fuzz-ed25519");
    let jwks = json!({"keys": [rsa.public_jwk(), p256.public_jwk(), ed.public_jwk()]});
    std::fs::write(
        fuzz.join("keys/jwks.json"),
        serde_json::to_string_pretty(&jwks).unwrap() + "\n",
    )
    .unwrap();

    let claims = |extra: Value| {
        let mut c = json!({"iss": ISSUER, "sub": "repo:acme/api:ref:refs/heads/main",
            "aud": ["registry", "other"], "iat": FUZZ_NOW - 60, "exp": FUZZ_NOW + 600});
        if let Value::Object(extra) = extra {
            c.as_object_mut().unwrap().extend(extra);
        }
        c
    };
    let sign = |key: &SigningKey, alg: &str, header: Value, claims: Value| {
        compact(&header, &claims, |m| key.sign(alg, m))
    };
    let mut signed_inputs = Vec::new();
    let mut write = |name: &str, token: String| {
        if name.starts_with("valid-") {
            signed_inputs.push(token.rsplit_once('.').unwrap().0.to_owned());
        }
        std::fs::write(corpus.join(name), token).unwrap();
    };
    for (name, key, alg) in [
        ("valid-rs256", &rsa, "RS256"),
        ("valid-ps384", &rsa, "PS384"),
        ("valid-es256", &p256, "ES256"),
        ("valid-eddsa", &ed, "EdDSA"),
    ] {
        let header = json!({"alg": alg, "typ": "JWT", "kid": key.kid()});
        write(name, sign(key, alg, header, claims(json!({}))));
    }
    write(
        "valid-nbf-and-groups",
        sign(
            &p256,
            "ES256",
            json!({"alg": "ES256", "kid": "fuzz-p256", "jku": "https://evil.example/jwks"}),
            claims(json!({"nbf": FUZZ_NOW - 5, "groups": ["a", 1, true, null, {"x": [1.5]}]})),
        ),
    );
    let header = json!({"alg": "ES256", "kid": "fuzz-p256"});
    write(
        "expired",
        sign(
            &p256,
            "ES256",
            header.clone(),
            claims(json!({"exp": FUZZ_NOW - 3600})),
        ),
    );
    write(
        "too-long-lived",
        sign(
            &p256,
            "ES256",
            header.clone(),
            claims(json!({"exp": FUZZ_NOW + 90_000})),
        ),
    );
    write(
        "no-aud",
        sign(
            &p256,
            "ES256",
            header.clone(),
            json!({"iss": ISSUER, "iat": FUZZ_NOW, "exp": FUZZ_NOW + 60}),
        ),
    );
    write(
        "unknown-kid",
        sign(
            &p256,
            "ES256",
            json!({"alg": "ES256", "kid": "../../etc/passwd"}),
            claims(json!({})),
        ),
    );
    write(
        "no-kid",
        sign(&p256, "ES256", json!({"alg": "ES256"}), claims(json!({}))),
    );
    write(
        "wrong-key-type",
        sign(
            &p256,
            "ES256",
            json!({"alg": "ES256", "kid": "fuzz-rsa"}),
            claims(json!({})),
        ),
    );
    write(
        "crit",
        sign(
            &rsa,
            "RS256",
            json!({"alg": "RS256", "kid": "fuzz-rsa", "crit": ["b64"], "b64": false}),
            claims(json!({})),
        ),
    );
    write(
        "alg-none",
        compact(&json!({"alg": "none"}), &claims(json!({})), |_| Vec::new()),
    );
    let pem = rsa.public_pem();
    write(
        "hs256-confusion",
        compact(
            &json!({"alg": "HS256", "kid": "fuzz-rsa"}),
            &claims(json!({})),
            |m| hmac_sha256(&pem, m),
        ),
    );
    write("malformed", "eyJhbGciOiJFUzI1NiJ9.e30".to_owned());
    std::fs::write(
        fuzz.join("keys/signed-inputs.txt"),
        signed_inputs.join("\n") + "\n",
    )
    .unwrap();
}
