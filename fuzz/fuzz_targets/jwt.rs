//! Bearer tokens: the verifier's parsing, claim checks and signature check
//! (`registry_oidc::fuzzing::FixedKeys`, the network-free half of `OidcVerifier::verify_token`),
//! against the fixed key set `fuzz/keys/jwks.json` (RSA, P-256, Ed25519; regenerated together
//! with the seed tokens, see docs/reliability.md).
//!
//! Input: the token's bytes. Checked: no panic or hang, and nothing is accepted that the keys did
//! not sign: an accepted token's `header.payload` must be one of the committed valid seeds'
//! (`keys/signed-inputs.txt`), since the private keys are gone and nobody can sign anew.
#![no_main]

use libfuzzer_sys::fuzz_target;
use registry_oidc::fuzzing::{FixedKeys, FUZZ_NOW};
use std::sync::OnceLock;

const JWKS: &str = include_str!("../keys/jwks.json");

fn keys() -> &'static FixedKeys {
    static KEYS: OnceLock<FixedKeys> = OnceLock::new();
    KEYS.get_or_init(|| {
        FixedKeys::from_document(&serde_json::from_str(JWKS).expect("keys/jwks.json is JSON"))
            .expect("keys/jwks.json is a key set")
    })
}

/// Signed header.payload pairs of the committed seeds; anything else accepted is a forgery.
fn known_signed_inputs() -> &'static Vec<String> {
    static KNOWN: OnceLock<Vec<String>> = OnceLock::new();
    KNOWN.get_or_init(|| {
        include_str!("../keys/signed-inputs.txt")
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect()
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(token) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(verified) = keys().verify(token, FUZZ_NOW) {
        let signed = token.rsplit_once('.').map_or("", |(input, _)| input);
        assert!(
            known_signed_inputs().iter().any(|k| k == signed),
            "accepted a token whose header.payload was never signed: {token:?} ({verified:?})"
        );
    }
});
