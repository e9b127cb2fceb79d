//! Every way authentication refuses or fails a call; the server answers each as a problem.

use registry_domain::ports::HasherBusy;
use registry_replica::ReplicaError;

/// A refusal or failure of authentication, authorization or a read of the replica's data.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// Missing, malformed, unknown, revoked or expired credentials. The detail is generic unless
    /// it helps an honest caller (X-Service-Account); the reason went to the log.
    #[error("authentication required")]
    Unauthorized {
        /// What an honest caller can do about it, when there is something.
        detail: Option<String>,
    },
    /// Valid credentials, but not for this.
    #[error("{0}")]
    Forbidden(String),
    /// Valid credentials for what the call acts on, but not for its action (the detail names
    /// it).
    #[error("{0}")]
    ActionNotAllowed(String),
    /// The service does not exist, or is not the caller's.
    #[error("{0}")]
    NotFound(String),
    /// Too many failed authentications or writes.
    #[error("{detail}")]
    RateLimited {
        /// When to try again.
        retry_after_secs: u64,
        /// Which limit.
        detail: String,
    },
    /// Too much secret hashing is queued; nothing else is affected.
    #[error("the server is busy checking credentials")]
    Busy,
    /// The replica's read failed (the database, or its blocking task).
    #[error(transparent)]
    Replica(#[from] ReplicaError),
    /// The replica did not give what a grant names (a service granted but not found).
    #[error("a granted service was not found")]
    Internal,
}

impl From<HasherBusy> for AuthError {
    fn from(_: HasherBusy) -> Self {
        AuthError::Busy
    }
}

/// The result of authentication.
pub type AuthResult<T> = Result<T, AuthError>;
