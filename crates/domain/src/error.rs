//! Errors that cross the storage port.

/// What a storage adapter reports. The server maps each to one problem response.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// A unique constraint refused the write (subdomain taken, tenant suffix taken…).
    #[error("conflict: {0}")]
    Conflict(String),
    /// The row the write depends on does not exist (any more).
    #[error("not found")]
    NotFound,
    /// The database could not be reached or failed; the caller answers 503 and retries later.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// A row cannot be read back (changed outside the registry): retrying will not help. The
    /// text names the row.
    #[error("corrupt row: {0}")]
    Corrupt(String),
    /// A creation would pass its [`crate::ports::Ceiling`]: counted in the creation's own
    /// transaction, so that concurrent creations never pass it together. Nothing was written.
    #[error("ceiling of {0} reached")]
    CeilingReached(u64),
    /// An account write's check of the customer's other accounts
    /// ([`crate::ports::OthersCheck`]) refused it, in the write's own transaction. Nothing was
    /// written.
    #[error("over the customer's budget: {0}")]
    OverBudget(crate::Violation),
}
