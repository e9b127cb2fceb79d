//! How a read of the replica fails.

use registry_domain::StoreError;

/// A read of the replica's data that failed.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A blocking task did not finish (it panicked).
    #[error("a blocking task failed")]
    Interrupted,
}

/// The result of a read of the replica.
pub type ReplicaResult<T> = Result<T, ReplicaError>;
