//! Test support for the fuzz targets in `fuzz/` (cargo feature `fuzzing`, never enabled by the
//! server).
//!
//! [`FixedKeys::verify`] is [`crate::OidcVerifier::verify_token`] without the network: the same
//! parsing of the untrusted token, the same claim checks and the same signature check, against a
//! key set given up front instead of one fetched from the token's issuer. Whatever input makes it
//! panic, hang or accept a token its keys did not sign is a bug of the real verifier too.
//!
//! ```
//! use registry_oidc::fuzzing::{FixedKeys, FUZZ_NOW};
//! let keys = FixedKeys::from_document(&serde_json::json!({"keys": []})).unwrap();
//! assert!(keys.verify("not.a.token", FUZZ_NOW).is_err());
//! ```

use crate::error::OidcError;
use crate::keys::KeySet;
use crate::token;
use registry_domain::ports::VerifiedToken;
use time::OffsetDateTime;

/// The instant the fuzz targets verify at (2027-01-15T08:00:00Z), so that seed tokens minted
/// for it stay valid forever.
pub const FUZZ_NOW: OffsetDateTime = match OffsetDateTime::from_unix_timestamp(1_800_000_000) {
    Ok(t) => t,
    Err(_) => panic!("a valid timestamp"),
};

/// The production token size limit ([`crate::OidcConfig::default`]).
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// A key set fixed in advance, standing in for the one an issuer would publish.
#[derive(Debug)]
pub struct FixedKeys {
    set: KeySet,
}

impl FixedKeys {
    /// Reads a JWKS document as the cache would (unusable keys are skipped).
    pub fn from_document(jwks: &serde_json::Value) -> Result<Self, String> {
        KeySet::from_document(jwks).map(|set| Self { set })
    }

    /// Verifies `token` at `now` exactly as the verifier does once it holds the issuer's keys.
    /// The token's `iss` is not compared with anything: every issuer is taken to publish these
    /// keys.
    pub fn verify(&self, token: &str, now: OffsetDateTime) -> Result<VerifiedToken, OidcError> {
        let token = token::parse(token, MAX_TOKEN_BYTES)?;
        crate::signed(token, &self.set, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// The committed seed tokens (`fuzz/corpus/jwt`) and key set (`fuzz/keys/jwks.json`) must
    /// agree, or the fuzzer never reaches the accepting path.
    #[test]
    fn committed_seeds_verify_with_the_committed_keys() {
        let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
        let jwks = std::fs::read_to_string(fuzz.join("keys/jwks.json")).unwrap();
        let keys = FixedKeys::from_document(&serde_json::from_str(&jwks).unwrap()).unwrap();
        let mut accepted = 0;
        for entry in std::fs::read_dir(fuzz.join("corpus/jwt")).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let token = std::fs::read_to_string(&path).unwrap();
            let result = keys.verify(token.trim(), FUZZ_NOW);
            if name.starts_with("valid-") {
                result.unwrap_or_else(|e| panic!("{name}: {e}"));
                accepted += 1;
            } else {
                assert!(result.is_err(), "{name} was accepted");
            }
        }
        assert!(accepted >= 3, "only {accepted} valid seeds");
    }
}
