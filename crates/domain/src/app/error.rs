//! What a use case answers when it does not do what was asked.

use crate::naming::NamingError;
use crate::ports::HasherBusy;
use crate::{StoreError, Violation};

/// Why a use case refused or failed. The server maps each variant to one problem response
/// (docs/api.md, "Errors"): the variant decides the status, the text is the detail the client
/// reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AppError {
    /// The command breaks the rules (400), every problem with its JSON pointer.
    #[error("the request body is invalid")]
    Invalid(Vec<Violation>),
    /// A policy names services the customer does not own (400, `unknown-services`).
    #[error("the policy names services that do not exist in your account")]
    UnknownServices(Vec<Violation>),
    /// A change of a policy's kind (400, `kind-immutable`).
    #[error("a policy's kind cannot change")]
    KindImmutable(Violation),
    /// A `kid` published now came back with other key material (400, `kid-reused`).
    #[error("a key id is already published with other key material")]
    KidReused(Vec<Violation>),
    /// A naming rule was broken (400; 403 for a plan that may not choose names).
    #[error(transparent)]
    Naming(#[from] NamingError),
    /// Any other bad request, with a sentence.
    #[error("{0}")]
    BadRequest(String),
    /// The credential no longer names a caller (401): the reason is for the log, never the
    /// client.
    #[error("{0}")]
    Unauthenticated(&'static str),
    /// The caller may not do this (403), with a sentence.
    #[error("{0}")]
    Forbidden(String),
    /// The caller's patterns do not cover the subdomain the new service would get (403): the
    /// one refusal of a use case that a federated caller's refusal log records (docs/api.md,
    /// "Explaining refusals"), hence the subdomain.
    #[error("this service account's policy does not cover the subdomain {subdomain:?}")]
    NotCovered {
        /// The subdomain the service would have had.
        subdomain: String,
    },
    /// No such thing for this caller (404), with a sentence.
    #[error("{0}")]
    NotFound(String),
    /// The service publishes nothing, or nothing under the key source named (404,
    /// `nothing-published`): a client tells it from a missing service by its slug.
    #[error("{0}")]
    NothingPublished(String),
    /// The state forbids it (409), with a sentence.
    #[error("{0}")]
    Conflict(String),
    /// Another service holds the domain (409, `domain-taken`).
    #[error("{0}")]
    DomainTaken(String),
    /// No ACME directory is configured (409, `custom-domains-disabled`).
    #[error("{0}")]
    CustomDomainsDisabled(String),
    /// The customer has as many unproven domain claims as it may (409,
    /// `too-many-pending-domains`).
    #[error("{0}")]
    TooManyPendingDomains(String),
    /// The service has as many key sources as it may (409, `too-many-sources`).
    #[error("{0}")]
    TooManySources(String),
    /// Managed signing needs the data key, which is not set (409, `signing-disabled`).
    #[error("{0}")]
    SigningDisabled(String),
    /// No managed key is safe to sign with yet (409, `no-key-ready`, with `Retry-After`).
    #[error("{detail}")]
    NoKeyReady {
        /// When to try again.
        retry_after_secs: u64,
        /// A sentence for the client.
        detail: String,
    },
    /// A next managed key exists already (409, `rotation-in-progress`).
    #[error("{0}")]
    RotationInProgress(String),
    /// Making or using a managed key failed (500): the sentence is for the log.
    #[error("{0}")]
    Keys(String),
    /// The claims to sign break a rule (400, `invalid-claims`), naming the claim.
    #[error("{0}")]
    InvalidClaims(String),
    /// What the change would store is larger than the registry keeps (413, with a sentence).
    #[error("{0}")]
    TooLarge(String),
    /// A per-customer quota is reached (403, `quota-exceeded`).
    #[error("{0}")]
    QuotaExceeded(String),
    /// A ceiling shared by every client is reached (503 with `Retry-After`).
    #[error("{detail}")]
    Capacity {
        /// When to try again.
        retry_after_secs: u64,
        /// A sentence for the client.
        detail: String,
    },
    /// Too much secret hashing is queued (503).
    #[error("the server is busy hashing secrets")]
    Busy,
    /// The database refused or failed.
    #[error(transparent)]
    Store(StoreError),
}

impl From<StoreError> for AppError {
    fn from(error: StoreError) -> Self {
        AppError::Store(error)
    }
}

impl From<HasherBusy> for AppError {
    fn from(_: HasherBusy) -> Self {
        AppError::Busy
    }
}

impl AppError {
    /// A storage `NotFound` (the row vanished between the read and the write) as the 404 the
    /// caller would have had a moment earlier.
    pub fn gone(what: impl FnOnce() -> String) -> impl FnOnce(StoreError) -> AppError {
        move |error| match error {
            StoreError::NotFound => AppError::NotFound(what()),
            other => AppError::Store(other),
        }
    }
}
