//! An issuer's key set, held as ready-to-use verifiers (building one costs ~120 µs; verifying
//! with it ~25–70 µs, so verifiers, not JWKs, are what is cached).

use crate::error::OidcError;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use josekit::jwk::Jwk;
use josekit::jws::{self, JwsVerifier};
use registry_domain::publishing::{rsa_exponent, rsa_modulus_bits};
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
    /// The key's `kid` and RFC 7638 thumbprint: what tells a key dropped from a set, or
    /// replaced under its `kid`, from one still in it, whatever the order of its members.
    material: String,
    verifiers: Vec<(Alg, Box<dyn JwsVerifier>)>,
}

/// Whether verifying with this key costs what the registry allows (docs/api.md, "Key lifecycle"):
/// an RSA key needs a modulus of 2048 to 8192 bits and an odd exponent from 3 to 2^31 − 1, the
/// bounds the domain puts on uploads. OpenSSL itself imports moduli of up to 16,384 bits and any
/// exponent, and a forged token against such a key costs milliseconds of a worker's time.
/// Other key types have a fixed size.
fn affordable(jwk: &Jwk) -> bool {
    if jwk.key_type() != "RSA" {
        return true;
    }
    let member = |name: &str| {
        jwk.parameter(name)
            .and_then(Value::as_str)
            .and_then(|text| URL_SAFE_NO_PAD.decode(text.trim_end_matches('=')).ok())
    };
    match (member("n"), member("e")) {
        (Some(n), Some(e)) => rsa_modulus_bits(&n).is_ok() && rsa_exponent(&e).is_ok(),
        _ => false,
    }
}

impl Key {
    /// The key with its verifiers; `None` when no accepted algorithm can use it, or when it is
    /// an RSA key beyond the bounds (skipped, like any other unusable key of a set). `map` is
    /// the JWK as the set holds it.
    fn from_jwk(jwk: &Jwk, map: &serde_json::Map<String, Value>) -> Option<Key> {
        if !affordable(jwk) {
            return None;
        }
        let verifiers: Vec<_> = Alg::candidates(jwk)
            .iter()
            .filter_map(|alg| alg.verifier(jwk).ok().map(|v| (*alg, v)))
            .collect();
        let material = format!(
            "{:?} {}",
            jwk.key_id(),
            registry_domain::keys::thumbprint(map).unwrap_or_default()
        );
        (!verifiers.is_empty()).then(|| Key {
            kid: jwk.key_id().map(str::to_owned),
            material,
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
        if !affordable(&parsed) {
            // The domain's checks name the member; this is for callers that skip them.
            return Err("the RSA key's modulus or exponent is out of bounds".into());
        }
        // One verifier proves the material imports: the others differ only in the hash. The
        // first that takes it, since a key's `alg` (RS384, PS256…) admits its own alone.
        let imports = (Alg::candidates(&parsed).iter()).any(|alg| alg.verifier(&parsed).is_ok());
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

/// Checks a preflight token's signature with one published key (docs/api.md, "Preflight"), with the
/// very verifiers that check identity tokens: the algorithm the token's header names, a key
/// within the registry's bounds, josekit's verification.
#[derive(Debug, Clone, Copy, Default)]
pub struct VerifierSignatureCheck;

impl registry_domain::ports::TokenSignatureCheck for VerifierSignatureCheck {
    fn verifies(&self, token: &str, jwk: &serde_json::Map<String, Value>) -> bool {
        let Some((input, signature)) = token.trim().rsplit_once('.') else {
            return false;
        };
        let header = input
            .split_once('.')
            .and_then(|(header, _)| registry_domain::claims::jws_part(header).ok());
        let alg = header
            .as_ref()
            .and_then(|h| h.get("alg"))
            .and_then(Value::as_str)
            .and_then(Alg::from_name);
        let (Some(alg), Ok(signature), Ok(jwk)) = (
            alg,
            URL_SAFE_NO_PAD.decode(signature),
            Jwk::from_map(jwk.clone()),
        ) else {
            return false;
        };
        affordable(&jwk)
            && alg
                .verifier(&jwk)
                .is_ok_and(|v| v.verify(input.as_bytes(), &signature).is_ok())
    }
}

/// The usable signing keys of one issuer.
#[derive(Debug)]
pub struct KeySet {
    keys: Vec<Key>,
    /// How many keys the document held, usable or not: a token without `kid` is refused when
    /// it held more than one (docs/api.md, "Authentication").
    published: usize,
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
        // its key set document says (a published set never has more: docs/api.md,
        // "Key lifecycle").
        let keys = entries
            .iter()
            .filter_map(Value::as_object)
            .filter_map(|map| Key::from_jwk(&Jwk::from_map(map.clone()).ok()?, map))
            .take(MAX_KEYS)
            .collect();
        Ok(KeySet {
            keys,
            published: entries.iter().filter(|e| e.is_object()).count(),
        })
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

    /// Whether a key of `earlier` is not in this set (its `kid` and material compared): a
    /// token it verified may no longer verify.
    pub fn drops_any_of(&self, earlier: &KeySet) -> bool {
        (earlier.keys.iter()).any(|old| !self.keys.iter().any(|k| k.material == old.material))
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
            None if self.published <= 1 => self.keys.iter().collect(),
            None => return Err(OidcError::KidRequired(self.published)),
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
        // Said in words, as explain shows it (no `Some("…")`).
        assert_eq!(
            set.verifier(Some("ec"), Alg::Es384)
                .unwrap_err()
                .to_string(),
            r#"the key "ec" does not fit algorithm ES384"#
        );
        assert!(matches!(
            set.verifier(Some("hmac"), Alg::Rs256),
            Err(OidcError::UnknownKid(_))
        ));
        assert!(matches!(
            set.verifier(None, Alg::Rs256),
            Err(OidcError::KidRequired(5))
        ));
    }

    /// `kid` is required when the set holds more than one key, usable or not: a signing key
    /// beside an encryption key is no exception.
    #[test]
    fn kid_is_required_whenever_the_set_holds_several_keys() {
        let rsa = Jwk::generate_rsa_key(2048).unwrap();
        let mut enc = public(&Jwk::generate_rsa_key(2048).unwrap(), "enc");
        enc["use"] = json!("enc");
        let alone = KeySet::from_document(&json!({"keys": [public(&rsa, "sig")]})).unwrap();
        assert!(alone.verifier(None, Alg::Rs256).is_ok());
        let both = KeySet::from_document(&json!({"keys": [public(&rsa, "sig"), enc]})).unwrap();
        assert!(matches!(
            both.verifier(None, Alg::Rs256),
            Err(OidcError::KidRequired(2))
        ));
        assert!(both.verifier(Some("sig"), Alg::Rs256).is_ok());
    }

    /// A set drops a key of an earlier one when that key's `kid` or material is gone from it;
    /// order, other members and their order do not count.
    #[test]
    fn a_set_drops_a_key_by_its_kid_and_material() {
        let (a, b) = (
            public(
                &Jwk::generate_ec_key(josekit::jwk::alg::ec::EcCurve::P256).unwrap(),
                "a",
            ),
            public(
                &Jwk::generate_ec_key(josekit::jwk::alg::ec::EcCurve::P256).unwrap(),
                "b",
            ),
        );
        let set = |keys: Vec<Value>| KeySet::from_document(&json!({ "keys": keys })).unwrap();
        let before = set(vec![a.clone(), b.clone()]);
        // The same keys, reordered, their members in another order, one with `use` added.
        let mut shuffled = serde_json::Map::new();
        for (name, value) in a.as_object().unwrap().iter().rev() {
            shuffled.insert(name.clone(), value.clone());
        }
        shuffled.insert("use".into(), json!("sig"));
        assert!(!set(vec![b.clone(), Value::Object(shuffled)]).drops_any_of(&before));
        assert!(!set(vec![
            a.clone(),
            b.clone(),
            public(
                &Jwk::generate_ec_key(josekit::jwk::alg::ec::EcCurve::P256).unwrap(),
                "c"
            )
        ])
        .drops_any_of(&before));
        assert!(set(vec![b.clone()]).drops_any_of(&before));
        let mut renamed = a.clone();
        renamed["kid"] = json!("a2");
        assert!(set(vec![renamed, b.clone()]).drops_any_of(&before));
        let mut replaced = public(
            &Jwk::generate_ec_key(josekit::jwk::alg::ec::EcCurve::P256).unwrap(),
            "a",
        );
        replaced["kid"] = json!("a");
        assert!(set(vec![replaced, b]).drops_any_of(&before));
    }

    #[test]
    fn rsa_keys_beyond_the_bounds_are_skipped() {
        use registry_domain::ports::KeyImport;
        let with = |n: Vec<u8>, e: &[u8], kid: &str| {
            json!({"kty": "RSA", "kid": kid, "n": URL_SAFE_NO_PAD.encode(n),
                "e": URL_SAFE_NO_PAD.encode(e)})
        };
        let modulus = |bits: usize| {
            let mut n = vec![0xa5u8; bits / 8];
            n[0] = 0xc3;
            n
        };
        let doc = json!({"keys": [
            with(modulus(2048), &[1, 0, 1], "ok"),
            with(modulus(8192), &[1, 0, 1], "ok-large"),
            with(modulus(16384), &[1, 0, 1], "too-large"),
            with(modulus(2048), &[0x80, 0, 0, 1], "big-e"),
            with(modulus(2048), &modulus(2048), "e-like-n"),
        ]});
        let set = KeySet::from_document(&doc).unwrap();
        assert_eq!(set.len(), 2);
        assert!(set.has_kid("ok") && set.has_kid("ok-large"));
        assert!(!set.has_kid("too-large") && !set.has_kid("big-e") && !set.has_kid("e-like-n"));
        let big = with(modulus(16384), &[1, 0, 1], "k");
        assert!(VerifierKeyImport.import(big.as_object().unwrap()).is_err());
        let fine = with(modulus(4096), &[1, 0, 1], "k");
        assert!(VerifierKeyImport.import(fine.as_object().unwrap()).is_ok());
    }

    #[test]
    fn a_key_alg_restricts_it() {
        let rsa = Jwk::generate_rsa_key(2048).unwrap();
        let mut key = public(&rsa, "only");
        key["alg"] = json!("PS256");
        let set = KeySet::from_document(&json!({"keys": [key.clone()]})).unwrap();
        assert!(set.verifier(None, Alg::Ps256).is_ok());
        assert!(set.verifier(None, Alg::Rs256).is_err());
        // An upload of such a key imports, whatever RSA algorithm it names.
        use registry_domain::ports::KeyImport;
        for alg in ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512"] {
            key["alg"] = json!(alg);
            assert_eq!(
                VerifierKeyImport.import(key.as_object().unwrap()),
                Ok(()),
                "{alg}"
            );
        }
        assert!(KeySet::from_document(&json!({"nokeys": []})).is_err());
        assert!(KeySet::from_document(&json!({"keys": []}))
            .unwrap()
            .is_empty());
    }
}

#[cfg(test)]
mod signature_check {
    use super::*;
    use registry_domain::ports::TokenSignatureCheck;
    use serde_json::json;

    fn token(alg: &str, signer: &dyn jws::JwsSigner) -> String {
        let part = |v: Value| URL_SAFE_NO_PAD.encode(v.to_string());
        let input = format!(
            "{}.{}",
            part(json!({"alg": alg, "kid": "k"})),
            part(json!({"iss": "https://i.example"}))
        );
        let signature = signer.sign(input.as_bytes()).unwrap();
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature))
    }

    fn public(jwk: &Jwk) -> serde_json::Map<String, Value> {
        jwk.to_public_key().unwrap().into()
    }

    #[test]
    fn verifies_with_the_signing_key_only() {
        let ec = Jwk::generate_ec_key(josekit::jwk::alg::ec::EcCurve::P256).unwrap();
        let other = Jwk::generate_ec_key(josekit::jwk::alg::ec::EcCurve::P256).unwrap();
        let signed = token("ES256", &jws::ES256.signer_from_jwk(&ec).unwrap());
        let check = VerifierSignatureCheck;
        assert!(check.verifies(&signed, &public(&ec)));
        assert!(!check.verifies(&signed, &public(&other)));
        let rsa = Jwk::generate_rsa_key(2048).unwrap();
        assert!(!check.verifies(&signed, &public(&rsa)), "wrong key type");
        let rs = token("RS256", &jws::RS256.signer_from_jwk(&rsa).unwrap());
        assert!(check.verifies(&rs, &public(&rsa)));
        let forged = rs.replace(".ey", ".eX");
        assert!(!check.verifies(&forged, &public(&rsa)));
        assert!(!check.verifies("not-a-token", &public(&rsa)));
    }
}
