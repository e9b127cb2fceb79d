//! [`SealedKeys`]: the domain's [`ManagedKeys`] port on OpenSSL (docs/api.md, "Managed signing").
//!
//! A key is made here and its private half sealed at once (the [`Sealing`] port: AES-256-GCM
//! under `REGISTRY_DATA_KEY`), so that it leaves this module only sealed. Signing opens a sealed
//! key once per process and keeps the parsed key in memory by `kid` (a `kid` is the thumbprint
//! of its public key: one `kid`, one key), so that a signature costs the signature alone.

use openssl::bn::BigNumContext;
use openssl::ec::{EcGroup, EcKey};
use openssl::ecdsa::EcdsaSig;
use openssl::hash::{hash, MessageDigest};
use openssl::nid::Nid;
use openssl::pkey::{PKey, Private};
use openssl::rsa::Rsa;
use openssl::sign::Signer;
use registry_domain::ports::{ManagedKeys, Sealing, SignFailure};
use registry_domain::signing::{Algorithm, MadeKey};
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;

/// Opened keys kept at most; past it the memory starts over (keys are opened again).
const MAX_OPENED: usize = 10_000;

/// The bits of the RSA keys made.
const RSA_BITS: u32 = 2048;

/// Makes managed keys and signs with them (the [`ManagedKeys`] port).
pub struct SealedKeys {
    sealing: Arc<dyn Sealing>,
    opened: RwLock<HashMap<String, Arc<PKey<Private>>>>,
}

impl std::fmt::Debug for SealedKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealedKeys").finish_non_exhaustive()
    }
}

impl SealedKeys {
    /// Keys sealed by `sealing`.
    pub fn new(sealing: Arc<dyn Sealing>) -> Self {
        Self {
            sealing,
            opened: RwLock::new(HashMap::new()),
        }
    }

    /// The parsed private key `kid`, opened from `sealed` the first time.
    fn opened(&self, kid: &str, sealed: &str) -> Result<Arc<PKey<Private>>, SignFailure> {
        let known = self.opened.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(key) = known.get(kid) {
            return Ok(key.clone());
        }
        drop(known);
        let der = self.sealing.open(sealed).map_err(SignFailure::Sealed)?;
        let key = Arc::new(PKey::private_key_from_pkcs8(&der).map_err(|e| {
            SignFailure::Failed(format!("a sealed key opened but does not parse: {e}"))
        })?);
        let mut known = self.opened.write().unwrap_or_else(PoisonError::into_inner);
        if known.len() >= MAX_OPENED {
            known.clear();
        }
        known.insert(kid.to_owned(), key.clone());
        Ok(key)
    }
}

fn b64(bytes: &[u8]) -> Value {
    Value::String(URL_SAFE_NO_PAD.encode(bytes))
}

fn failed(what: &str) -> impl Fn(openssl::error::ErrorStack) -> String + '_ {
    move |e| format!("{what}: {e}")
}

fn sign_failed(what: &str) -> impl Fn(openssl::error::ErrorStack) -> SignFailure + '_ {
    move |e| SignFailure::Failed(format!("{what}: {e}"))
}

impl ManagedKeys for SealedKeys {
    fn make(&self, algorithm: Algorithm) -> Result<MadeKey, String> {
        let (key, jwk) = match algorithm {
            Algorithm::Es256 => {
                let group =
                    EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).map_err(failed("P-256"))?;
                let ec = EcKey::generate(&group).map_err(failed("making a P-256 key"))?;
                let mut ctx = BigNumContext::new().map_err(failed("P-256"))?;
                let (mut x, mut y) = (
                    openssl::bn::BigNum::new().map_err(failed("P-256"))?,
                    openssl::bn::BigNum::new().map_err(failed("P-256"))?,
                );
                ec.public_key()
                    .affine_coordinates(&group, &mut x, &mut y, &mut ctx)
                    .map_err(failed("P-256"))?;
                let jwk = json!({
                    "kty": "EC",
                    "crv": "P-256",
                    "x": b64(&x.to_vec_padded(32).map_err(failed("P-256"))?),
                    "y": b64(&y.to_vec_padded(32).map_err(failed("P-256"))?),
                });
                (PKey::from_ec_key(ec).map_err(failed("P-256"))?, jwk)
            }
            Algorithm::Rs256 => {
                let rsa = Rsa::generate(RSA_BITS).map_err(failed("making an RSA key"))?;
                let jwk = json!({
                    "kty": "RSA",
                    "n": b64(&rsa.n().to_vec()),
                    "e": b64(&rsa.e().to_vec()),
                });
                (PKey::from_rsa(rsa).map_err(failed("RSA"))?, jwk)
            }
        };
        let private = key.private_key_to_pkcs8().map_err(failed("PKCS#8"))?;
        let sealed = self.sealing.seal(&private);
        drop(private);
        Ok(MadeKey {
            jwk: match jwk {
                Value::Object(members) => members,
                _ => Map::new(),
            },
            public_key_der: key.public_key_to_der().map_err(failed("the public key"))?,
            sealed,
        })
    }

    fn opens(&self, kid: &str, sealed: &str) -> Result<(), SignFailure> {
        self.opened(kid, sealed).map(|_| ())
    }

    fn sign(
        &self,
        kid: &str,
        algorithm: Algorithm,
        sealed: &str,
        message: &[u8],
    ) -> Result<Vec<u8>, SignFailure> {
        let key = self.opened(kid, sealed)?;
        match algorithm {
            Algorithm::Es256 => {
                let ec = key.ec_key().map_err(sign_failed("not an EC key"))?;
                let digest =
                    hash(MessageDigest::sha256(), message).map_err(sign_failed("SHA-256"))?;
                let signature = EcdsaSig::sign(&digest, &ec).map_err(sign_failed("ECDSA"))?;
                // JWS (RFC 7518 §3.4): R and S, 32 bytes each, not DER.
                let mut joined = signature
                    .r()
                    .to_vec_padded(32)
                    .map_err(sign_failed("ECDSA"))?;
                joined.extend(
                    signature
                        .s()
                        .to_vec_padded(32)
                        .map_err(sign_failed("ECDSA"))?,
                );
                Ok(joined)
            }
            Algorithm::Rs256 => {
                let mut signer =
                    Signer::new(MessageDigest::sha256(), &key).map_err(sign_failed("RSA"))?;
                signer.update(message).map_err(sign_failed("RSA"))?;
                signer.sign_to_vec().map_err(sign_failed("RSA"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use josekit::jws::{ES256, RS256};
    use registry_domain::testing::MarkSealing;

    #[test]
    fn made_keys_sign_what_their_published_jwk_verifies_and_stay_sealed() {
        let keys = SealedKeys::new(Arc::new(MarkSealing));
        for algorithm in [Algorithm::Es256, Algorithm::Rs256] {
            let made = keys.make(algorithm).unwrap();
            assert!(made.sealed.starts_with("sealed:"), "sealed at once");
            assert!(!made.jwk.contains_key("d"), "no private member");
            let message = b"eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ4In0";
            let signature = keys
                .sign(algorithm.as_str(), algorithm, &made.sealed, message)
                .unwrap();
            let jwk = josekit::jwk::Jwk::from_map(made.jwk.clone()).unwrap();
            match algorithm {
                Algorithm::Es256 => {
                    assert_eq!(signature.len(), 64);
                    ES256
                        .verifier_from_jwk(&jwk)
                        .unwrap()
                        .verify(message, &signature)
                        .unwrap();
                }
                Algorithm::Rs256 => {
                    RS256
                        .verifier_from_jwk(&jwk)
                        .unwrap()
                        .verify(message, &signature)
                        .unwrap();
                }
            }
            // The DER is the same public key.
            let public = PKey::public_key_from_der(&made.public_key_der).unwrap();
            assert_eq!(
                public.bits(),
                if algorithm == Algorithm::Es256 {
                    256
                } else {
                    2048
                }
            );
            // A key sealed otherwise does not open.
            assert!(keys.sign("other", algorithm, "plain", message).is_err());
        }
    }
}
