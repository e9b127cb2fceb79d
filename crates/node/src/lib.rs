//! `registry-node`: what one registry process holds between requests, over the domain's ports
//! and without HTTP: the replica's view of the data ([`Replica`]: the directory of services,
//! accounts and trusted issuers, the hosted documents, the change-log catch-up), who is
//! calling ([`Authenticator`]: the credential caches, the limits on failures and writes, the
//! hashing lanes and the identity-token verifier port), and the counters ([`Metrics`]).
//!
//! The server gives it what a request presents ([`Presented`]: the client's address and the
//! headers authentication reads) and maps its [`NodeError`]s to HTTP answers.

pub mod adapters;
mod auth;
pub mod connections;
mod directory;
mod error;
pub mod fetches;
pub mod hosting;
pub mod last_use;
pub mod metrics;
pub mod rate_limit;
mod refusals;
mod replica;
mod request;

pub use auth::{
    auditor, collection_caller, manager, service_caller, verify_identity, Authenticator, Limits,
};
pub use directory::Directory;
pub use error::{NodeError, NodeResult};
pub use metrics::Metrics;
pub use replica::Replica;
pub use request::{request_id, Presented, REQUEST_ID};
