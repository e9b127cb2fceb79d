//! The compact JWS, read without trusting it: only what is needed to find the key.

use crate::error::OidcError;
use crate::keys::Alg;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use registry_domain::claims::{jws_part, JwsPartError};
use serde_json::{Map, Value};

/// A compact JWS split into its parts, header and payload decoded but not yet verified.
#[derive(Debug)]
pub struct UnverifiedToken<'a> {
    /// The accepted algorithm named by the header.
    pub alg: Alg,
    /// The header's `kid`, if any.
    pub kid: Option<String>,
    /// The payload's claims.
    pub claims: Map<String, Value>,
    /// The payload's `iss`.
    pub issuer: String,
    /// `header.payload`, the bytes the signature covers.
    pub signing_input: &'a [u8],
    /// The decoded signature.
    pub signature: Vec<u8>,
}

fn decode_object(part: &str, what: &'static str) -> Result<Map<String, Value>, OidcError> {
    jws_part(part).map_err(|why| match why {
        JwsPartError::NamedTwice(_) => {
            OidcError::Malformed("a member is named twice in the header or the payload")
        }
        _ => OidcError::Malformed(what),
    })
}

/// Splits and decodes `token`, refusing anything but a compact JWS with an accepted algorithm.
///
/// Only `alg`, `kid` and `crit` of the header are read: `jku`, `x5u`, `jwk` and `x5c` would let
/// the token name its own key, so they are ignored.
pub fn parse(token: &str, max_bytes: usize) -> Result<UnverifiedToken<'_>, OidcError> {
    if token.len() > max_bytes {
        return Err(OidcError::TooLarge(max_bytes));
    }
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(OidcError::Malformed("not three dot-separated parts"));
    };
    let header = decode_object(header, "header is not a base64url JSON object")?;
    let alg = match header.get("alg") {
        Some(Value::String(name)) => {
            Alg::from_name(name).ok_or_else(|| OidcError::Algorithm(name.clone()))?
        }
        _ => {
            return Err(OidcError::Malformed(
                "header alg is missing or not a string",
            ))
        }
    };
    // RFC 7515 §4.1.11: extensions listed as critical must be understood; none are.
    if header.contains_key("crit") {
        return Err(OidcError::Critical);
    }
    let kid = match header.get("kid") {
        None => None,
        Some(Value::String(kid)) => Some(kid.clone()),
        Some(_) => return Err(OidcError::Malformed("header kid is not a string")),
    };
    let claims = decode_object(payload, "payload is not a base64url JSON object")?;
    let issuer = match claims.get("iss") {
        Some(Value::String(iss)) => iss.clone(),
        _ => return Err(OidcError::MissingIssuer),
    };
    let signature = URL_SAFE_NO_PAD
        .decode(signature)
        .map_err(|_| OidcError::Malformed("signature is not base64url"))?;
    if signature.is_empty() {
        return Err(OidcError::Malformed("empty signature"));
    }
    let signing_input = &token.as_bytes()[..header_len(token)];
    Ok(UnverifiedToken {
        alg,
        kid,
        claims,
        issuer,
        signing_input,
        signature,
    })
}

/// Length of `header.payload` in a token already known to hold exactly two dots.
fn header_len(token: &str) -> usize {
    token.rfind('.').unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(v: &str) -> String {
        URL_SAFE_NO_PAD.encode(v)
    }

    fn token(header: &str, payload: &str) -> String {
        format!("{}.{}.{}", b64(header), b64(payload), b64("sig"))
    }

    #[test]
    fn reads_alg_kid_iss() {
        let t = token(
            r#"{"alg":"ES256","kid":"k1","jku":"https://evil"}"#,
            r#"{"iss":"https://i"}"#,
        );
        let parsed = parse(&t, 16 * 1024).unwrap();
        assert_eq!(parsed.alg, Alg::Es256);
        assert_eq!(parsed.kid.as_deref(), Some("k1"));
        assert_eq!(parsed.issuer, "https://i");
        assert_eq!(parsed.signature, b"sig");
        assert_eq!(
            parsed.signing_input,
            t.rsplit_once('.').unwrap().0.as_bytes()
        );
    }

    #[test]
    fn refusals() {
        let payload = r#"{"iss":"https://i"}"#;
        let cases = [
            (token(r#"{"alg":"none"}"#, payload), "not accepted"),
            (token(r#"{"alg":"HS256"}"#, payload), "not accepted"),
            (
                token(r#"{"alg":"RS256","crit":["b64"],"b64":false}"#, payload),
                "critical",
            ),
            (token(r#"{"alg":"RS256","kid":7}"#, payload), "kid"),
            (token(r#"{"kid":"a"}"#, payload), "alg"),
            (token(r#"{"alg":"RS256"}"#, r#"{"iss":5}"#), "iss"),
            (token(r#"{"alg":"RS256"}"#, "[1]"), "payload"),
            (token("[]", payload), "header"),
            (
                token(
                    r#"{"alg":"RS256"}"#,
                    r#"{"iss":"https://i","sub":"a","sub":"b"}"#,
                ),
                "named twice",
            ),
            (
                token(r#"{"alg":"none","alg":"RS256"}"#, payload),
                "named twice",
            ),
            (
                format!("{}.{}", b64(r#"{"alg":"RS256"}"#), b64(payload)),
                "three",
            ),
            (
                format!("{}.{}.", b64(r#"{"alg":"RS256"}"#), b64(payload)),
                "empty signature",
            ),
            (
                format!("{}.{}.x.y", b64(r#"{"alg":"RS256"}"#), b64(payload)),
                "three",
            ),
        ];
        for (t, expected) in cases {
            let error = parse(&t, 16 * 1024).unwrap_err().to_string();
            assert!(error.contains(expected), "{t}: {error}");
        }
        let big = token(
            r#"{"alg":"RS256"}"#,
            &format!(r#"{{"iss":"{}"}}"#, "x".repeat(20_000)),
        );
        assert!(matches!(
            parse(&big, 16 * 1024),
            Err(OidcError::TooLarge(_))
        ));
    }
}
