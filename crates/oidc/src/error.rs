//! Why a token or an issuer's keys were refused.

use registry_domain::claims::ClaimProblem;
use registry_domain::policy::ReasonCode;
use registry_domain::ports::{TokenRejection, VerifiedToken};

/// Everything that can go wrong while verifying a token. The text is for the server log.
#[derive(Debug, thiserror::Error)]
pub enum OidcError {
    /// The HTTP client could not be built (TLS backend initialisation).
    #[error("cannot build the HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    /// The token is not a well-formed compact JWS carrying a JSON object.
    #[error("malformed token: {0}")]
    Malformed(&'static str),
    /// The token exceeds the size limit.
    #[error("token longer than {0} bytes")]
    TooLarge(usize),
    /// The header's `alg` is not one of the accepted asymmetric algorithms.
    #[error("algorithm {0:?} is not accepted")]
    Algorithm(String),
    /// The header lists critical extensions, none of which is supported.
    #[error("critical header extensions are not supported")]
    Critical,
    /// The payload has no string `iss`.
    #[error("claim iss is missing or not a string")]
    MissingIssuer,
    /// A URL (issuer, `jwks_uri`, redirect target) is not one the guard lets through.
    #[error("refused URL {url}: {reason}")]
    RefusedUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The HTTP exchange failed (refused address, connect error, timeout, redirect refused).
    #[error("fetching {url} failed")]
    Fetch {
        /// The URL requested.
        url: String,
        /// The client's error, with its cause chain.
        #[source]
        source: reqwest::Error,
    },
    /// The server answered with a status other than 200.
    #[error("fetching {url} answered HTTP {status}")]
    Status {
        /// The URL requested.
        url: String,
        /// The status received.
        status: u16,
    },
    /// The response body exceeded the size limit.
    #[error("response of {url} exceeds {limit} bytes")]
    ResponseTooLarge {
        /// The URL requested.
        url: String,
        /// The limit in bytes.
        limit: usize,
    },
    /// A discovery document or key set is not the JSON expected.
    #[error("invalid document at {url}: {reason}")]
    Document {
        /// The URL requested.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The discovery document names another issuer.
    #[error("discovery document names issuer {found:?}, expected {expected:?}")]
    IssuerMismatch {
        /// The token's `iss`.
        expected: String,
        /// The document's `issuer`.
        found: String,
    },
    /// The key set holds no key this verifier can use.
    #[error("issuer {0} publishes no usable signing key")]
    NoKeys(String),
    /// The issuer publishes no key set now: one hosted by this registry (its configuration or
    /// service was deleted, or it expired), or another that answered moments ago that its keys
    /// are gone (until the next fetch may be tried).
    #[error("issuer {0} publishes no key set")]
    Withdrawn(String),
    /// A recent fetch failed and no good keys are cached; the next attempt waits.
    #[error("keys of issuer {0} are unavailable (a recent fetch failed)")]
    Unavailable(String),
    /// Discovery and key set together took longer than the request timeout.
    #[error("fetching the keys of issuer {0} timed out")]
    Timeout(String),
    /// No cached key has the token's `kid`.
    #[error("no key with kid {0:?}")]
    UnknownKid(String),
    /// The token has no `kid` but the issuer publishes several keys.
    #[error("kid is required: the issuer publishes {0} keys")]
    KidRequired(usize),
    /// The selected key cannot verify this algorithm (type, curve or `alg` mismatch).
    #[error("{} does not fit algorithm {alg}", key_named(kid.as_deref()))]
    KeyMismatch {
        /// The key's id, if any.
        kid: Option<String>,
        /// The header's algorithm.
        alg: &'static str,
    },
    /// The signature does not verify.
    #[error("invalid signature")]
    Signature,
    /// A registered claim is refused before the signature was checked (a token naming another
    /// issuer than the one whose keys were looked up).
    #[error(transparent)]
    Claims(#[from] ClaimProblem),
    /// The signature verified, but a registered claim is refused (expired, not yet valid, too
    /// long-lived, no audience).
    #[error("{problem}")]
    Refused {
        /// The claim refused.
        problem: ClaimProblem,
        /// The token, signed by its issuer: the refusal log records it.
        token: Box<VerifiedToken>,
    },
}

impl OidcError {
    /// The message with its cause chain, where transport errors keep their useful part (the
    /// refused address, the timeout).
    pub fn detail(&self) -> String {
        let mut text = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            source = cause.source();
        }
        text
    }
}

impl OidcError {
    /// Whether the issuer answered that its keys are gone (a 404 or 410 for its discovery
    /// document or key set, or a set with no usable key), as opposed to not answering (a
    /// time-out, a connection error, a 5xx): only the latter keeps stale keys in use.
    pub fn is_withdrawal(&self) -> bool {
        matches!(
            self,
            OidcError::Status {
                status: 404 | 410,
                ..
            } | OidcError::NoKeys(_)
                | OidcError::Withdrawn(_)
        )
    }

    /// Whether the issuer could not answer: a time-out, a connection error, a 5xx. Only then do
    /// its last good keys keep working past their freshness (docs/api.md, "Authentication"); an
    /// issuer that answers something else (a 403, a 429, a document that is not its own) gets
    /// no grace, and one that answers that its keys are gone withdrew them.
    pub fn is_outage(&self) -> bool {
        match self {
            OidcError::Timeout(_) | OidcError::Unavailable(_) => true,
            OidcError::Fetch { source, .. } => !source.is_redirect() && !source.is_builder(),
            OidcError::Status { status, .. } => (500..600).contains(status),
            _ => false,
        }
    }

    /// The reason code this failure is reported with (docs/api.md, "Explaining refusals").
    pub fn reason_code(&self) -> ReasonCode {
        match self {
            OidcError::Malformed(_)
            | OidcError::TooLarge(_)
            | OidcError::Critical
            | OidcError::Signature => ReasonCode::SignatureInvalid,
            OidcError::Algorithm(_) | OidcError::KeyMismatch { .. } => {
                ReasonCode::AlgorithmNotAllowed
            }
            OidcError::MissingIssuer | OidcError::Claims(ClaimProblem::Issuer) => {
                ReasonCode::IssuerUnknown
            }
            // An issuer that answers that its keys are gone knows the token's key no more (the
            // withdrawals of `is_withdrawal`).
            OidcError::UnknownKid(_)
            | OidcError::KidRequired(_)
            | OidcError::Withdrawn(_)
            | OidcError::NoKeys(_)
            | OidcError::Status {
                status: 404 | 410, ..
            } => ReasonCode::KeyUnknown,
            OidcError::Client(_)
            | OidcError::RefusedUrl { .. }
            | OidcError::Fetch { .. }
            | OidcError::Status { .. }
            | OidcError::ResponseTooLarge { .. }
            | OidcError::Document { .. }
            | OidcError::IssuerMismatch { .. }
            | OidcError::Unavailable(_)
            | OidcError::Timeout(_) => ReasonCode::IssuerUnreachable,
            OidcError::Claims(problem) | OidcError::Refused { problem, .. } => match problem {
                ClaimProblem::Expired => ReasonCode::TokenExpired,
                ClaimProblem::NotYetValid | ClaimProblem::IssuedInFuture => {
                    ReasonCode::TokenNotYetValid
                }
                ClaimProblem::TooLongLived => ReasonCode::TokenLifetimeTooLong,
                ClaimProblem::Audience => ReasonCode::AudienceMismatch,
                ClaimProblem::Missing(_) | ClaimProblem::Issuer => ReasonCode::ClaimMissing,
                ClaimProblem::NotANumber(_) => ReasonCode::ClaimTypeMismatch,
            },
        }
    }
}

impl From<OidcError> for TokenRejection {
    fn from(error: OidcError) -> Self {
        let (code, detail) = (error.reason_code(), error.detail());
        let signed = match error {
            OidcError::Refused { token, .. } => Some(token),
            _ => None,
        };
        TokenRejection {
            code,
            detail,
            signed,
        }
    }
}

/// A key as a message names it: by its `kid` in quotes, or as the one without.
fn key_named(kid: Option<&str>) -> String {
    match kid {
        Some(kid) => format!("the key {kid:?}"),
        None => "the key (which has no kid)".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A time claim that is there but no number is a claim of the wrong type, not a missing one.
    #[test]
    fn claim_problems_have_their_own_reason_codes() {
        for (problem, code) in [
            (ClaimProblem::Missing("exp"), ReasonCode::ClaimMissing),
            (
                ClaimProblem::NotANumber("exp"),
                ReasonCode::ClaimTypeMismatch,
            ),
            (ClaimProblem::Expired, ReasonCode::TokenExpired),
            (ClaimProblem::Audience, ReasonCode::AudienceMismatch),
        ] {
            assert_eq!(OidcError::Claims(problem).reason_code(), code);
        }
    }
}
