//! The crate's one error type.

use crate::{Violation, Violations};

/// Why the engine could not do what it was asked: every fallible function of the crate answers
/// this type, but the parse of an action's name, which answers [`crate::UnknownAction`].
///
/// ```
/// use registry_policy::{Policy, PolicyError};
/// use serde_json::json;
///
/// let error = Policy::parse(&json!({"kind": "oidc", "rules": [{"services": ["*"],
///     "claims": {"iss": "https://ci.example", "aud": "registry"}}]}))
/// .unwrap_err();
/// assert!(matches!(error, PolicyError::Invalid(_)));
/// assert_eq!(error.violations()[0].pointer, "/rules/0/claims/sub");
/// assert!(error.to_string().starts_with("not a valid policy: /rules/0/claims/sub: "));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// The document is not a valid policy: every problem found, each with an RFC 6901 pointer
    /// into the document (never empty).
    #[error("not a valid policy: {}", summary(.0))]
    Invalid(Violations),
    /// A text that should hold a JSON document does not.
    #[error("not JSON: {0}")]
    Json(String),
    /// The part before any `/` of an `ip_allowlist` entry is not an IPv4 or IPv6 address.
    #[error("{0:?} is not an IPv4 or IPv6 address or CIDR range (e.g. 203.0.113.7, 203.0.113.0/24, 2001:db8::/32)")]
    Address(String),
    /// The prefix length after `/` of an `ip_allowlist` entry is not a number in range.
    #[error(
        "{entry:?} has an invalid prefix length: after \"/\" write a whole number from 0 to {max}"
    )]
    Prefix {
        /// The entry as written.
        entry: String,
        /// 32 for IPv4, 128 for IPv6.
        max: u8,
    },
    /// A list of policy test cases that is not one (see [`crate::parse_cases`]).
    #[error("{0}")]
    Cases(String),
}

impl PolicyError {
    /// The problems of an invalid document, each with its pointer; for the other errors, one
    /// problem at the document's root (`""`) saying what is wrong.
    pub fn violations(&self) -> Vec<Violation> {
        match self {
            PolicyError::Invalid(violations) => violations.clone(),
            other => vec![Violation::new("", other.to_string())],
        }
    }

    /// [`PolicyError::violations`], consuming the error.
    pub fn into_violations(self) -> Violations {
        match self {
            PolicyError::Invalid(violations) => violations,
            other => vec![Violation::new("", other.to_string())],
        }
    }
}

/// The first problem, and how many there are in all.
fn summary(violations: &[Violation]) -> String {
    match violations {
        [] => "no problem reported".to_owned(),
        [one] => one.to_string(),
        [first, rest @ ..] => format!("{first} (and {} more)", rest.len()),
    }
}
