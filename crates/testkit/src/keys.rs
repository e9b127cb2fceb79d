//! Signing keys of every kind the registry verifies (generated with josekit), their public JWKs
//! and key sets, and the compact JWS tokens they sign: exactly the header and claims given (for
//! the tests' attacks), or an identity token for an issuer (for the chores' federated callers).
//!
//! Generating a key of a fixed kind and signing with a key of the algorithm's kind fail only when
//! OpenSSL itself is broken: these functions panic then, rather than hand every caller a `Result`.
//!
//! ```
//! use registry_testkit::{KeyKind, SigningKey};
//! let key = SigningKey::generate(KeyKind::Rsa, "idp-1");
//! let set = key.jwks(); // {"keys": [{"kty": "RSA", "kid": "idp-1", "alg": "RS256", "use": "sig", …}]}
//! let token = key.mint("http://idp.localhost:8080");
//! assert_eq!(token.split('.').count(), 3);
//! # drop(set);
//! ```

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use josekit::jwk::alg::ec::EcCurve;
use josekit::jwk::alg::ed::EdCurve;
use josekit::jwk::alg::rsa::RsaKeyPair;
use josekit::jwk::{Jwk, KeyPair};
use josekit::jws::{self, JwsSigner};
use serde_json::{json, Value};

/// The audience identity tokens carry (what the registry's federated rules pin).
pub const AUDIENCE: &str = "registry";
/// The subject of the tokens [`SigningKey::mint`] signs (a CI job's).
pub const SUBJECT: &str = "repo:acme/app:ref:refs/heads/main";
/// How long a token of [`SigningKey::mint`] lives, in seconds.
const LIFETIME: i64 = 3600;

/// The kind of a signing key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// RSA 2048 (RS256/384/512, PS256/384/512).
    Rsa,
    /// EC P-256 (ES256).
    P256,
    /// EC P-384 (ES384).
    P384,
    /// Ed25519 (EdDSA).
    Ed25519,
}

impl KeyKind {
    /// The kind of key an algorithm signs with (RSA for anything not EC or EdDSA).
    pub fn for_alg(alg: &str) -> KeyKind {
        match alg {
            "ES256" => KeyKind::P256,
            "ES384" => KeyKind::P384,
            "EdDSA" => KeyKind::Ed25519,
            _ => KeyKind::Rsa,
        }
    }

    /// The algorithm a key of this kind signs with unless told otherwise, and the `alg` of its
    /// entry in [`SigningKey::jwks`]: RS256, ES256, ES384 or EdDSA.
    pub fn alg(self) -> &'static str {
        match self {
            KeyKind::Rsa => "RS256",
            KeyKind::P256 => "ES256",
            KeyKind::P384 => "ES384",
            KeyKind::Ed25519 => "EdDSA",
        }
    }
}

/// A private signing key with its `kid`.
#[derive(Debug, Clone)]
pub struct SigningKey {
    kind: KeyKind,
    private: Jwk,
}

impl SigningKey {
    /// A fresh key of `kind` named `kid`.
    pub fn generate(kind: KeyKind, kid: &str) -> SigningKey {
        let mut private = match kind {
            KeyKind::Rsa => Jwk::generate_rsa_key(2048),
            KeyKind::P256 => Jwk::generate_ec_key(EcCurve::P256),
            KeyKind::P384 => Jwk::generate_ec_key(EcCurve::P384),
            KeyKind::Ed25519 => Jwk::generate_ed_key(EdCurve::Ed25519),
        }
        .expect("key generation");
        private.set_key_id(kid);
        SigningKey { kind, private }
    }

    /// The key's `kid`.
    pub fn kid(&self) -> &str {
        self.private.key_id().unwrap_or_default()
    }

    /// The key's kind.
    pub fn kind(&self) -> KeyKind {
        self.kind
    }

    /// The public JWK, as an issuer publishes it: the key material and the `kid`.
    pub fn public_jwk(&self) -> Value {
        let mut public = self.private.to_public_key().expect("public key");
        // josekit's `to_public_key` keeps only the key material.
        public.set_key_id(self.kid());
        Value::Object(public.into())
    }

    /// The key set that publishes this key alone, its entry also naming `alg` (the kind's) and
    /// `use` (`sig`).
    pub fn jwks(&self) -> Value {
        let mut jwk = self.public_jwk();
        jwk["alg"] = json!(self.kind.alg());
        jwk["use"] = json!("sig");
        json!({ "keys": [jwk] })
    }

    /// The public key as PEM (RSA keys only): the HMAC secret of the algorithm-confusion attack.
    pub fn public_pem(&self) -> Vec<u8> {
        RsaKeyPair::from_jwk(&self.private)
            .expect("an RSA key")
            .to_pem_public_key()
    }

    /// Signs `message` with `alg`, which must suit the key.
    pub fn sign(&self, alg: &str, message: &[u8]) -> Vec<u8> {
        let key = &self.private;
        let signer: Box<dyn JwsSigner> = match alg {
            "RS256" => Box::new(jws::RS256.signer_from_jwk(key).expect("RS256")),
            "RS384" => Box::new(jws::RS384.signer_from_jwk(key).expect("RS384")),
            "RS512" => Box::new(jws::RS512.signer_from_jwk(key).expect("RS512")),
            "PS256" => Box::new(jws::PS256.signer_from_jwk(key).expect("PS256")),
            "PS384" => Box::new(jws::PS384.signer_from_jwk(key).expect("PS384")),
            "PS512" => Box::new(jws::PS512.signer_from_jwk(key).expect("PS512")),
            "ES256" => Box::new(jws::ES256.signer_from_jwk(key).expect("ES256")),
            "ES384" => Box::new(jws::ES384.signer_from_jwk(key).expect("ES384")),
            "EdDSA" => Box::new(jws::EdDSA.signer_from_jwk(key).expect("EdDSA")),
            other => panic!("no asymmetric signer for {other}"),
        };
        signer.sign(message).expect("signing")
    }

    /// A token of `claims`, exactly as given, signed with `alg`; its header names `alg`, `typ`
    /// `JWT` and the key's `kid`.
    pub fn sign_claims(&self, alg: &str, claims: &Value) -> String {
        compact(
            &json!({"alg": alg, "typ": "JWT", "kid": self.kid()}),
            claims,
            |m| self.sign(alg, m),
        )
    }

    /// An identity token for `iss`: [`SUBJECT`], [`AUDIENCE`], issued now, living an hour (whole
    /// seconds, as issuers write them), signed with the kind's algorithm.
    pub fn mint(&self, iss: &str) -> String {
        self.mint_with_id(iss, None)
    }

    /// [`SigningKey::mint`] with a `jti`, so that tokens minted in the same second differ (as
    /// every CI job's token does).
    pub fn mint_with_id(&self, iss: &str, jti: Option<&str>) -> String {
        let now = crate::unix_now();
        let mut claims = json!({
            "iss": iss, "sub": SUBJECT, "aud": AUDIENCE, "iat": now, "exp": now + LIFETIME
        });
        if let Some(jti) = jti {
            claims["jti"] = json!(jti);
        }
        self.sign_claims(self.kind.alg(), &claims)
    }
}

/// A compact JWS of `header` and `claims`, exactly as given, signed by `sign`.
pub fn compact(header: &Value, claims: &Value, sign: impl FnOnce(&[u8]) -> Vec<u8>) -> String {
    let input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let signature = sign(input.as_bytes());
    format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature))
}

/// An HMAC-SHA256 signature.
pub fn hmac_sha256(secret: &[u8], message: &[u8]) -> Vec<u8> {
    jws::HS256
        .signer_from_bytes(secret)
        .expect("HMAC key")
        .sign(message)
        .expect("HMAC")
}

#[cfg(test)]
mod tests {
    use super::*;
    use josekit::jws::JwsVerifier;
    use josekit::jwt;

    /// The claims of `token` if josekit verifies it with the key of its `kid` in `set`.
    fn verified(token: &str, set: &Value) -> Option<Value> {
        let header = jwt::decode_header(token).ok()?;
        let kid = header.claim("kid")?.as_str()?.to_owned();
        let entry = set["keys"]
            .as_array()?
            .iter()
            .find(|k| k["kid"] == kid.as_str())?;
        let jwk = Jwk::from_map(entry.as_object()?.clone()).ok()?;
        let verifier: Box<dyn JwsVerifier> = match entry["alg"].as_str()? {
            "RS256" => Box::new(jws::RS256.verifier_from_jwk(&jwk).ok()?),
            "ES256" => Box::new(jws::ES256.verifier_from_jwk(&jwk).ok()?),
            "ES384" => Box::new(jws::ES384.verifier_from_jwk(&jwk).ok()?),
            "EdDSA" => Box::new(jws::EdDSA.verifier_from_jwk(&jwk).ok()?),
            _ => return None,
        };
        let (payload, _) = jwt::decode_with_verifier(token, &*verifier).ok()?;
        Some(Value::Object(payload.into()))
    }

    #[test]
    fn a_minted_token_verifies_against_the_keys_own_set() {
        let key = SigningKey::generate(KeyKind::Rsa, "idp-1");
        let set = key.jwks();
        let entry = &set["keys"][0];
        assert_eq!(
            (&entry["kty"], &entry["kid"], &entry["alg"], &entry["use"]),
            (
                &json!("RSA"),
                &json!("idp-1"),
                &json!("RS256"),
                &json!("sig")
            )
        );
        assert!(entry.get("d").is_none(), "the set is public: {entry}");

        let claims = verified(&key.mint("http://idp.localhost:1"), &set).expect("it verifies");
        assert_eq!(claims["iss"], "http://idp.localhost:1");
        assert_eq!(
            (&claims["sub"], &claims["aud"]),
            (&json!(SUBJECT), &json!(AUDIENCE))
        );
        let (iat, exp) = (claims["iat"].as_i64(), claims["exp"].as_i64());
        let iat = iat.expect("whole seconds");
        assert_eq!(exp, Some(iat + LIFETIME));
        assert!((iat - crate::unix_now()).abs() <= 1);
        assert!(claims.get("jti").is_none());

        let with_id = verified(&key.mint_with_id("i", Some("job-7")), &set).unwrap();
        assert_eq!(with_id["jti"], "job-7");

        // Another key of the same name does not verify against it.
        let stranger = SigningKey::generate(KeyKind::Rsa, "idp-1");
        assert!(verified(&stranger.mint("i"), &set).is_none());
    }

    #[test]
    fn every_kind_signs_with_its_algorithm() {
        for kind in [KeyKind::P256, KeyKind::P384, KeyKind::Ed25519] {
            let key = SigningKey::generate(kind, "k");
            assert_eq!(KeyKind::for_alg(kind.alg()), kind);
            assert_eq!(key.kind(), kind);
            let claims = verified(&key.mint("iss"), &key.jwks()).expect("it verifies");
            assert_eq!(claims["iss"], "iss");
        }
        assert_eq!(KeyKind::for_alg("PS384"), KeyKind::Rsa);
    }

    #[test]
    fn compact_tokens_are_exactly_what_they_are_given() {
        const SECRET: &[u8] = b"a secret of thirty-two bytes ...";
        let header = json!({"alg": "HS256", "typ": "JWT"});
        let token = compact(&header, &json!({"a": 1}), |m| hmac_sha256(SECRET, m));
        let verifier = jws::HS256.verifier_from_bytes(SECRET).unwrap();
        let (payload, read) = jwt::decode_with_verifier(&token, &verifier).unwrap();
        assert_eq!(payload.claim("a"), Some(&json!(1)));
        assert_eq!(read.claim("typ"), Some(&json!("JWT")));

        let unsigned = compact(&json!({"alg": "none"}), &json!({}), |_| Vec::new());
        assert!(unsigned.ends_with('.'));
    }
}
