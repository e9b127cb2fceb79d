//! Time and audience rules for a verified JWT's registered claims, and how a compact JWS's
//! header and payload are read.
//!
//! `exp` and `iat` are required; `exp`, `nbf` and `iat` are checked with [`LEEWAY`]; a token
//! whose `exp - iat` exceeds [`MAX_LIFETIME`] is refused; `aud` must be present and non-empty.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::{Map, Value};
use time::{Duration, OffsetDateTime};

/// Allowed clock skew between the issuer and the registry.
pub const LEEWAY: Duration = Duration::seconds(60);
/// Longest accepted token lifetime (`exp - iat`).
pub const MAX_LIFETIME: Duration = Duration::hours(24);

/// Why the claims were refused (for the server log only).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClaimProblem {
    /// A required claim is missing.
    #[error("claim {0} is missing")]
    Missing(&'static str),
    /// A time claim is present but no number (`"exp": "soon"`).
    #[error("claim {0} is not a number")]
    NotANumber(&'static str),
    /// `iss` is missing or not a string.
    #[error("claim iss is missing or not a string")]
    Issuer,
    /// `exp` is in the past.
    #[error("token expired")]
    Expired,
    /// `nbf` is in the future.
    #[error("token not yet valid (nbf)")]
    NotYetValid,
    /// `iat` is in the future.
    #[error("token issued in the future (iat)")]
    IssuedInFuture,
    /// `exp - iat` is too long.
    #[error("token lifetime exceeds 24 hours")]
    TooLongLived,
    /// `aud` is missing or empty.
    #[error("claim aud is missing or empty")]
    Audience,
}

/// Why a header or payload of a compact JWS cannot be read (each reader says which part).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwsPartError {
    /// The part is not base64url.
    #[error("is not base64url")]
    NotBase64,
    /// The part is not a JSON object.
    #[error("is not a JSON object")]
    NotObject,
    /// The part names a member twice.
    #[error("names a member twice: {0}")]
    NamedTwice(String),
}

/// A header or payload of a compact JWS (base64url without padding), read strictly: a member
/// named twice (two `sub`s, two `alg`s) has one meaning to one reader and another to the next,
/// so every reader of a token here (the verifier, the preflight, `registry policy explain
/// --token`) refuses it alike.
///
/// ```
/// use registry_domain::claims::{jws_part, JwsPartError};
/// assert_eq!(jws_part("eyJzdWIiOiJhIn0").unwrap()["sub"], "a");
/// // {"sub":"a","sub":"b"}
/// assert!(matches!(jws_part("eyJzdWIiOiJhIiwic3ViIjoiYiJ9"), Err(JwsPartError::NamedTwice(_))));
/// assert_eq!(jws_part("WzFd"), Err(JwsPartError::NotObject)); // [1]
/// assert_eq!(jws_part("!"), Err(JwsPartError::NotBase64));
/// ```
pub fn jws_part(part: &str) -> Result<Map<String, Value>, JwsPartError> {
    let bytes = URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|_| JwsPartError::NotBase64)?;
    match crate::json::parse_unique(&bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Err(twice) if crate::json::named_twice(&twice) => {
            Err(JwsPartError::NamedTwice(twice.to_string()))
        }
        _ => Err(JwsPartError::NotObject),
    }
}

/// A time claim as seconds since the epoch: an integer, or a finite number cut to one (RFC 7519's
/// NumericDate may have a fraction); `NotANumber` when it is present but no number.
pub(crate) fn seconds(
    claims: &Map<String, Value>,
    name: &'static str,
) -> Result<Option<i64>, ClaimProblem> {
    match claims.get(name) {
        None => Ok(None),
        Some(v) => v
            .as_i64()
            .or_else(|| v.as_f64().filter(|f| f.is_finite()).map(|f| f as i64))
            .map(Some)
            .ok_or(ClaimProblem::NotANumber(name)),
    }
}

/// Checks `iss`, `exp`, `iat`, `nbf` and `aud` at `now`.
///
/// ```
/// use registry_domain::claims::{check, ClaimProblem};
/// use serde_json::json;
/// use time::macros::datetime;
/// let now = datetime!(2026-11-21 10:00 UTC);
/// let t = now.unix_timestamp();
/// let ok = json!({"iss": "https://i", "aud": "a", "iat": t, "exp": t + 600});
/// assert_eq!(check(ok.as_object().unwrap(), now), Ok(()));
/// let old = json!({"iss": "https://i", "aud": "a", "iat": t - 7200, "exp": t - 3600});
/// assert_eq!(check(old.as_object().unwrap(), now), Err(ClaimProblem::Expired));
/// ```
pub fn check(claims: &Map<String, Value>, now: OffsetDateTime) -> Result<(), ClaimProblem> {
    if !claims.get("iss").is_some_and(Value::is_string) {
        return Err(ClaimProblem::Issuer);
    }
    let now = now.unix_timestamp();
    let leeway = LEEWAY.whole_seconds();
    let exp = seconds(claims, "exp")?.ok_or(ClaimProblem::Missing("exp"))?;
    let iat = seconds(claims, "iat")?.ok_or(ClaimProblem::Missing("iat"))?;
    if now > exp.saturating_add(leeway) {
        return Err(ClaimProblem::Expired);
    }
    if iat > now.saturating_add(leeway) {
        return Err(ClaimProblem::IssuedInFuture);
    }
    if let Some(nbf) = seconds(claims, "nbf")? {
        if nbf > now.saturating_add(leeway) {
            return Err(ClaimProblem::NotYetValid);
        }
    }
    if exp.saturating_sub(iat) > MAX_LIFETIME.whole_seconds() {
        return Err(ClaimProblem::TooLongLived);
    }
    let audience_ok = match claims.get("aud") {
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(items)) => items
            .iter()
            .any(|a| a.as_str().is_some_and(|s| !s.is_empty())),
        _ => false,
    };
    if !audience_ok {
        return Err(ClaimProblem::Audience);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use time::macros::datetime;

    fn run(v: Value) -> Result<(), ClaimProblem> {
        check(v.as_object().unwrap(), datetime!(2026-11-21 10:00 UTC))
    }

    #[test]
    fn table() {
        let t = datetime!(2026-11-21 10:00 UTC).unix_timestamp();
        let cases = [
            (json!({"iss":"i","aud":"a","iat":t,"exp":t+60}), Ok(())),
            (json!({"iss":"i","aud":["a"],"iat":t,"exp":t+60}), Ok(())),
            (json!({"iss":"i","aud":"a","iat":t-100,"exp":t-30}), Ok(())),
            (
                json!({"iss":"i","aud":"a","iat":t-100,"exp":t-61}),
                Err(ClaimProblem::Expired),
            ),
            (json!({"iss":"i","aud":"a","iat":t+59,"exp":t+600}), Ok(())),
            (
                json!({"iss":"i","aud":"a","iat":t+61,"exp":t+600}),
                Err(ClaimProblem::IssuedInFuture),
            ),
            (
                json!({"iss":"i","aud":"a","iat":t,"nbf":t+61,"exp":t+600}),
                Err(ClaimProblem::NotYetValid),
            ),
            (
                json!({"iss":"i","aud":"a","iat":t,"nbf":t+60,"exp":t+600}),
                Ok(()),
            ),
            (
                json!({"iss":"i","aud":"a","exp":t+60}),
                Err(ClaimProblem::Missing("iat")),
            ),
            (
                json!({"iss":"i","aud":"a","iat":t}),
                Err(ClaimProblem::Missing("exp")),
            ),
            (
                json!({"iss":"i","aud":"a","iat":"x","exp":t}),
                Err(ClaimProblem::NotANumber("iat")),
            ),
            (
                json!({"iss":"i","aud":"a","iat":t,"exp":t+86401}),
                Err(ClaimProblem::TooLongLived),
            ),
            (json!({"iss":"i","aud":"a","iat":t,"exp":t+86400}), Ok(())),
            (
                json!({"iss":"i","iat":t,"exp":t+60}),
                Err(ClaimProblem::Audience),
            ),
            (
                json!({"iss":"i","aud":"","iat":t,"exp":t+60}),
                Err(ClaimProblem::Audience),
            ),
            (
                json!({"iss":"i","aud":[],"iat":t,"exp":t+60}),
                Err(ClaimProblem::Audience),
            ),
            (
                json!({"aud":"a","iat":t,"exp":t+60}),
                Err(ClaimProblem::Issuer),
            ),
        ];
        for (claims, expected) in cases {
            assert_eq!(run(claims.clone()), expected, "{claims}");
        }
    }
}
