//! `registry-replica`: the replica, this process's read model of the database. It keeps the
//! services, the accounts, the trust index (every `oidc` account by the issuers it trusts) and
//! the hosted documents in memory, exact as of the change log's position it has applied, and
//! counts the public fetches it serves. Every read of the current state of the data by an
//! authenticated request, a public GET or a hosted issuer goes through [`Replica`].
//!
//! It speaks the domain's ports only (storage and clock) and knows nothing of HTTP: documents
//! are kept as the bytes a response carries, and the server decides how they are sent.

mod absent;
mod blocking;
mod directory;
pub mod domains;
mod error;
pub mod fetches;
pub mod hosting;
mod near;
mod replica;

pub use blocking::blocking;
pub use directory::{Directory, Trusting};
pub use error::{ReplicaError, ReplicaResult};
pub use replica::{DocumentsChanged, Replica};
