//! `registry_oidc::OidcVerifier` against a real issuer (`registry_tests::issuer::TestIssuer`)
//! over real sockets: algorithms and attacks, the key cache, and the SSRF guard.

mod cache;
mod guard;
mod tokens;

use registry_domain::ports::VerifiedToken;
use registry_domain::testing::ManualTicks;
use registry_oidc::{OidcConfig, OidcError, OidcVerifier};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use time::OffsetDateTime;

/// A verifier admitting the loopback test issuer.
fn verifier() -> OidcVerifier {
    OidcVerifier::new(
        OidcConfig::insecure(),
        Arc::new(registry_server::SystemTicks),
    )
    .unwrap()
}

/// A verifier with production settings (https and public addresses only).
fn secure_verifier() -> OidcVerifier {
    OidcVerifier::new(
        OidcConfig::default(),
        Arc::new(registry_server::SystemTicks),
    )
    .unwrap()
}

fn now() -> OffsetDateTime {
    OffsetDateTime::now_utc()
}

/// Valid claims for `iss`, issued now, living ten minutes.
fn claims(iss: &str) -> Value {
    let t = now().unix_timestamp();
    json!({"iss": iss, "sub": "repo:acme/api:ref:refs/heads/main", "aud": "registry", "iat": t, "exp": t + 600})
}

async fn verify(verifier: &OidcVerifier, token: &str) -> Result<VerifiedToken, OidcError> {
    verifier.verify_token(token, now()).await
}

/// Asserts a refusal whose reason (with its cause chain) contains `expected`.
#[track_caller]
fn assert_refused(result: Result<VerifiedToken, OidcError>, expected: &str) {
    match result {
        Ok(token) => panic!("accepted, expected a refusal containing {expected:?}: {token:?}"),
        Err(error) => {
            let reason = registry_domain::ports::TokenRejection::from(error).detail;
            assert!(
                reason.contains(expected),
                "reason {reason:?} lacks {expected:?}"
            );
        }
    }
}

/// Runs `f`, returning its output and how long it took.
async fn timed<T>(f: impl std::future::Future<Output = T>) -> (T, Duration) {
    let start = Instant::now();
    let out = f.await;
    (out, start.elapsed())
}
