//! An issuer's key set, held as ready-to-use verifiers (building one costs ~120 µs; verifying
//! with it ~25–70 µs, so verifiers, not JWKs, are what is cached).

use crate::error::OidcError;
use josekit::jwk::Jwk;
use josekit::jws::{self, JwsVerifier};
use serde_json::Value;

/// Keys kept of one issuer's set.
const MAX_KEYS: usize = 100;

/// A signature algorithm the registry accepts. HMAC and `none` are deliberately absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Alg {
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    Rs256,
    /// RSASSA-PKCS1-v1_5 with SHA-384.
    Rs384,
    /// RSASSA-PKCS1-v1_5 with SHA-512.
    Rs512,
    /// RSASSA-PSS with SHA-256.
    Ps256,
    /// RSASSA-PSS with SHA-384.
    Ps384,
    /// RSASSA-PSS with SHA-512.
    Ps512,
    /// ECDSA on P-256 with SHA-256.
    Es256,
    /// ECDSA on P-384 with SHA-384.
    Es384,
    /// EdDSA (Ed25519 or Ed448).
    EdDsa,
}

impl Alg {
    /// Every accepted algorithm.
    pub const ALL: [Alg; 9] = [
        Alg::Rs256,
        Alg::Rs384,
        Alg::Rs512,
        Alg::Ps256,
        Alg::Ps384,
        Alg::Ps512,
        Alg::Es256,
        Alg::Es384,
        Alg::EdDsa,
    ];

    /// The JOSE name (`RS256`, …, `EdDSA`).
    pub fn name(self) -> &'static str {
        match self {
            Alg::Rs256 => "RS256",
            Alg::Rs384 => "RS384",
            Alg::Rs512 => "RS512",
            Alg::Ps256 => "PS256",
            Alg::Ps384 => "PS384",
            Alg::Ps512 => "PS512",
            Alg::Es256 => "ES256",
            Alg::Es384 => "ES384",
            Alg::EdDsa => "EdDSA",
        }
    }

    /// The accepted algorithm with this exact JOSE name.
    pub fn from_name(name: &str) -> Option<Alg> {
        Alg::ALL.into_iter().find(|alg| alg.name() == name)
    }

    /// Builds a verifier of this algorithm; josekit refuses a key of the wrong type or curve,
    /// a key whose own `alg` differs, a key not for signatures and RSA keys under 2048 bits.
    fn verifier(self, jwk: &Jwk) -> Result<Box<dyn JwsVerifier>, josekit::JoseError> {
        Ok(match self {
            Alg::Rs256 => Box::new(jws::RS256.verifier_from_jwk(jwk)?),
            Alg::Rs384 => Box::new(jws::RS384.verifier_from_jwk(jwk)?),
            Alg::Rs512 => Box::new(jws::RS512.verifier_from_jwk(jwk)?),
            Alg::Ps256 => Box::new(jws::PS256.verifier_from_jwk(jwk)?),
            Alg::Ps384 => Box::new(jws::PS384.verifier_from_jwk(jwk)?),
            Alg::Ps512 => Box::new(jws::PS512.verifier_from_jwk(jwk)?),
            Alg::Es256 => Box::new(jws::ES256.verifier_from_jwk(jwk)?),
            Alg::Es384 => Box::new(jws::ES384.verifier_from_jwk(jwk)?),
            Alg::EdDsa => Box::new(jws::EdDSA.verifier_from_jwk(jwk)?),
        })
    }

    /// The algorithms a key of this type and curve can serve.
    fn candidates(jwk: &Jwk) -> &'static [Alg] {
        match (jwk.key_type(), jwk.curve()) {
            ("RSA", _) => &Alg::ALL[..6],
            ("EC", Some("P-256")) => &[Alg::Es256],
            ("EC", Some("P-384")) => &[Alg::Es384],
            ("OKP", Some("Ed25519" | "Ed448")) => &[Alg::EdDsa],
            _ => &[],
        }
    }
}

/// One published key with a verifier per algorithm it may serve.
#[derive(Debug)]
struct Key {
    kid: Option<String>,
    verifiers: Vec<(Alg, Box<dyn JwsVerifier>)>,
}

impl Key {
    fn from_jwk(jwk: &Jwk) -> Option<Key> {
        let verifiers: Vec<_> = Alg::candidates(jwk)
            .iter()
            .filter_map(|alg| alg.verifier(jwk).ok().map(|v| (*alg, v)))
            .collect();
        (!verifiers.is_empty()).then(|| Key {
            kid: jwk.key_id().map(str::to_owned),
            verifiers,
        })
    }
}

/// Imports uploaded keys exactly as the verifier imports an issuer's keys: a key the registry
/// publishes is one that `OidcVerifier` (and so any verifier built on OpenSSL) can use. OpenSSL
/// refuses an EC point that is not on its curve.
#[derive(Debug, Clone, Copy, Default)]
pub struct VerifierKeyImport;

impl registry_domain::ports::KeyImport for VerifierKeyImport {
    fn import(&self, jwk: &serde_json::Map<String, Value>) -> Result<(), String> {
        let parsed = Jwk::from_map(jwk.clone()).map_err(|e| format!("not a JSON Web Key: {e}"))?;
        // One verifier proves the material imports: the others differ only in the hash.
        let imports = Alg::candidates(&parsed)
            .first()
            .is_some_and(|alg| alg.verifier(&parsed).is_ok());
        match imports {
            true => Ok(()),
            false => Err(match jwk.get("kty").and_then(Value::as_str) {
                Some("EC") => "the key does not import: its point is not on its curve".into(),
                Some(kty) => format!("the key does not import as a {kty} signing key"),
                None => "the key does not import".into(),
            }),
        }
    }
}

/// The usable signing keys of one issuer.
#[derive(Debug)]
pub struct KeySet {
    keys: Vec<Key>,
}

impl KeySet {
    /// Reads a JWKS document, keeping the keys that can verify an accepted algorithm and
    /// skipping the rest (encryption keys, unknown types, malformed entries).
    pub fn from_document(document: &Value) -> Result<KeySet, String> {
        let entries = document
            .get("keys")
            .and_then(Value::as_array)
            .ok_or("no keys array")?;
        // The first usable keys only: what one issuer holds in the cache stays small, whatever
        // its key set document says (a published set never has more, DECISIONS §8).
        let keys = entries
            .iter()
            .filter_map(Value::as_object)
            .filter_map(|map| Jwk::from_map(map.clone()).ok())
            .filter_map(|jwk| Key::from_jwk(&jwk))
            .take(MAX_KEYS)
            .collect();
        Ok(KeySet { keys })
    }

    /// Number of usable keys.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no key is usable.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Whether a key has this `kid`.
    pub fn has_kid(&self, kid: &str) -> bool {
        self.keys.iter().any(|k| k.kid.as_deref() == Some(kid))
    }

    /// The verifier for a token's `kid` and `alg`: by `kid` when the token names one, else the
    /// set's only key. A `kid` may be shared by keys of different types, so every key with it
    /// is tried for the algorithm.
    pub fn verifier(&self, kid: Option<&str>, alg: Alg) -> Result<&dyn JwsVerifier, OidcError> {
        let mismatch = || OidcError::KeyMismatch {
            kid: kid.map(str::to_owned),
            alg: alg.name(),
        };
        let candidates: Vec<&Key> = match kid {
            Some(kid) => self
                .keys
                .iter()
                .filter(|k| k.kid.as_deref() == Some(kid))
                .collect(),
            None if self.keys.len() == 1 => self.keys.iter().collect(),
            None => return Err(OidcError::KidRequired(self.keys.len())),
        };
        if candidates.is_empty() {
            return Err(OidcError::UnknownKid(kid.unwrap_or_default().to_owned()));
        }
        candidates
            .iter()
            .flat_map(|k| k.verifiers.iter())
            .find(|(a, _)| *a == alg)
            .map(|(_, v)| v.as_ref())
            .ok_or_else(mismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn public(jwk: &Jwk, kid: &str) -> Value {
        let mut public = jwk.to_public_key().unwrap();
        public.set_key_id(kid);
        Value::Object(public.into())
    }

    #[test]
    fn builds_verifiers_per_type_and_alg() {
        let rsa = Jwk::generate_rsa_key(2048).unwrap();
        let ec = Jwk::generate_ec_key(josekit::jwk::alg::ec::EcCurve::P256).unwrap();
        let mut pinned = public(
            &Jwk::generate_ec_key(josekit::jwk::alg::ec::EcCurve::P384).unwrap(),
            "p384",
        );
        pinned["alg"] = json!("ES256"); // contradicts the curve: unusable
        let mut enc = public(&rsa, "enc");
        enc["use"] = json!("enc");
        let doc = json!({"keys": [public(&rsa, "rsa"), public(&ec, "ec"), pinned, enc,
            {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"}, "junk"]});
        let set = KeySet::from_document(&doc).unwrap();
        assert_eq!(set.len(), 2);
        for alg in &Alg::ALL[..6] {
            assert!(set.verifier(Some("rsa"), *alg).is_ok(), "{alg:?}");
        }
        assert!(set.verifier(Some("ec"), Alg::Es256).is_ok());
        assert!(matches!(
            set.verifier(Some("ec"), Alg::Es384),
            Err(OidcError::KeyMismatch { .. })
        ));
        assert!(matches!(
            set.verifier(Some("rsa"), Alg::Es256),
            Err(OidcError::KeyMismatch { .. })
        ));
        assert!(matches!(
            set.verifier(Some("hmac"), Alg::Rs256),
            Err(OidcError::UnknownKid(_))
        ));
        assert!(matches!(
            set.verifier(None, Alg::Rs256),
            Err(OidcError::KidRequired(2))
        ));
    }

    #[test]
    fn a_key_alg_restricts_it() {
        let rsa = Jwk::generate_rsa_key(2048).unwrap();
        let mut key = public(&rsa, "only");
        key["alg"] = json!("PS256");
        let set = KeySet::from_document(&json!({"keys": [key]})).unwrap();
        assert!(set.verifier(None, Alg::Ps256).is_ok());
        assert!(set.verifier(None, Alg::Rs256).is_err());
        assert!(KeySet::from_document(&json!({"nokeys": []})).is_err());
        assert!(KeySet::from_document(&json!({"keys": []}))
            .unwrap()
            .is_empty());
    }
}
