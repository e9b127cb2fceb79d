//! Public keys as kube-apiserver reads them: a JWK (RFC 7517) of an uploaded key source, or the
//! registry's base64 of a managed key, as a DER SubjectPublicKeyInfo, made and checked with
//! OpenSSL.

use base64::alphabet;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use base64::engine::DecodePaddingMode;
use base64::Engine as _;
use openssl::bn::BigNum;
use openssl::ec::{EcGroup, EcKey};
use openssl::nid::Nid;
use openssl::pkey::PKey;
use openssl::rsa::Rsa;
use serde_json::Value;

/// base64url, with or without padding (RFC 7518 wants none; a padded member costs nothing).
const BASE64URL: GeneralPurpose = GeneralPurpose::new(
    &alphabet::URL_SAFE,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The DER SubjectPublicKeyInfo of the public JWK `jwk`: RSA (`n`, `e`) or EC on P-256, P-384 or
/// P-521 (`crv`, `x`, `y`, a point on the curve). Any other key (`OKP`, `oct`) is an error that
/// says why: kube-apiserver verifies with RSA and ECDSA keys only.
pub(crate) fn spki_of_jwk(jwk: &Value) -> Result<Vec<u8>, String> {
    let pkey = match jwk.get("kty").and_then(Value::as_str) {
        Some("RSA") => {
            let rsa = Rsa::from_public_components(number(jwk, "n")?, number(jwk, "e")?)
                .map_err(|e| format!("not an RSA public key: {e}"))?;
            PKey::from_rsa(rsa)
        }
        Some("EC") => {
            let nid = match jwk.get("crv").and_then(Value::as_str) {
                Some("P-256") => Nid::X9_62_PRIME256V1,
                Some("P-384") => Nid::SECP384R1,
                Some("P-521") => Nid::SECP521R1,
                other => {
                    return Err(format!(
                        "an EC key on {}, not P-256, P-384 or P-521",
                        other.unwrap_or("no curve")
                    ))
                }
            };
            let group = EcGroup::from_curve_name(nid).map_err(|e| e.to_string())?;
            let (x, y) = (number(jwk, "x")?, number(jwk, "y")?);
            let key = EcKey::from_public_key_affine_coordinates(&group, &x, &y)
                .map_err(|e| format!("not a point of its curve: {e}"))?;
            PKey::from_ec_key(key)
        }
        Some(kty) => return Err(format!("a key of type {kty}, neither RSA nor EC")),
        None => return Err("a key with no kty".to_owned()),
    };
    pkey.and_then(|key| key.public_key_to_der())
        .map_err(|e| e.to_string())
}

/// The DER of the registry's `publicKey` (standard base64, padded), checked to be a public key.
pub(crate) fn spki_of_base64(text: &str) -> Result<Vec<u8>, String> {
    let der = STANDARD
        .decode(text)
        .map_err(|e| format!("publicKey is not base64: {e}"))?;
    PKey::public_key_from_der(&der)
        .map_err(|e| format!("publicKey is not a SubjectPublicKeyInfo: {e}"))?;
    Ok(der)
}

/// The unsigned big-endian integer of the base64url member `name`.
fn number(jwk: &Value, name: &str) -> Result<BigNum, String> {
    let text = (jwk.get(name).and_then(Value::as_str)).ok_or_else(|| format!("no {name}"))?;
    let bytes = BASE64URL
        .decode(text)
        .map_err(|e| format!("{name} is not base64url: {e}"))?;
    BigNum::from_slice(&bytes).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use openssl::bn::BigNumContext;
    use serde_json::json;

    fn b64url(bytes: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(bytes)
    }

    #[test]
    fn an_rsa_jwk_is_openssl_s_own_subject_public_key_info() {
        let rsa = Rsa::generate(2048).unwrap();
        let jwk = json!({
            "kty": "RSA", "kid": "r1", "alg": "RS256", "use": "sig",
            "n": b64url(&rsa.n().to_vec()),
            "e": b64url(&rsa.e().to_vec()),
        });
        let expected = PKey::from_rsa(rsa).unwrap().public_key_to_der().unwrap();
        assert_eq!(spki_of_jwk(&jwk).unwrap(), expected);
    }

    #[test]
    fn ec_jwks_of_every_curve_are_openssl_s_own_subject_public_key_info() {
        for (crv, nid, size) in [
            ("P-256", Nid::X9_62_PRIME256V1, 32),
            ("P-384", Nid::SECP384R1, 48),
            ("P-521", Nid::SECP521R1, 66),
        ] {
            let group = EcGroup::from_curve_name(nid).unwrap();
            let key = EcKey::generate(&group).unwrap();
            let (mut x, mut y) = (BigNum::new().unwrap(), BigNum::new().unwrap());
            let mut ctx = BigNumContext::new().unwrap();
            key.public_key()
                .affine_coordinates(&group, &mut x, &mut y, &mut ctx)
                .unwrap();
            // JWK coordinates have the curve's full size, leading zeros kept (RFC 7518 §6.2.1.2).
            let jwk = json!({
                "kty": "EC", "crv": crv, "kid": crv,
                "x": b64url(&x.to_vec_padded(size).unwrap()),
                "y": b64url(&y.to_vec_padded(size).unwrap()),
            });
            let expected = PKey::from_ec_key(key).unwrap().public_key_to_der().unwrap();
            assert_eq!(spki_of_jwk(&jwk).unwrap(), expected, "{crv}");
        }
    }

    #[test]
    fn keys_kube_apiserver_cannot_verify_with_are_refused_with_a_reason() {
        let okp = json!({"kty": "OKP", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"});
        assert_eq!(
            spki_of_jwk(&okp).unwrap_err(),
            "a key of type OKP, neither RSA nor EC"
        );
        let oct = json!({"kty": "oct", "k": "c2VjcmV0"});
        assert!(spki_of_jwk(&oct).is_err());
        let secp256k1 = json!({"kty": "EC", "crv": "secp256k1", "x": "AA", "y": "AA"});
        assert!(spki_of_jwk(&secp256k1).unwrap_err().contains("secp256k1"));
        let off_curve =
            json!({"kty": "EC", "crv": "P-256", "x": b64url(&[1; 32]), "y": b64url(&[2; 32])});
        assert!(spki_of_jwk(&off_curve)
            .unwrap_err()
            .starts_with("not a point of its curve"));
        assert_eq!(
            spki_of_jwk(&json!({"kty": "RSA", "e": "AQAB"})).unwrap_err(),
            "no n"
        );
    }

    #[test]
    fn a_managed_key_s_base64_is_checked_to_be_a_public_key() {
        let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap();
        let der = PKey::from_ec_key(EcKey::generate(&group).unwrap())
            .unwrap()
            .public_key_to_der()
            .unwrap();
        assert_eq!(spki_of_base64(&STANDARD.encode(&der)).unwrap(), der);
        assert!(spki_of_base64("not base64!").is_err());
        assert!(spki_of_base64(&STANDARD.encode(b"not a key")).is_err());
    }
}
