//! The one way async code waits for the database: on tokio's blocking pool.

use crate::ReplicaError;

/// Runs `work` (a storage call, a use case) on the blocking pool, where waiting for the
/// database is allowed; [`ReplicaError::Interrupted`] when it panicked.
pub async fn blocking<T, F>(work: F) -> Result<T, ReplicaError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|_| ReplicaError::Interrupted)
}
