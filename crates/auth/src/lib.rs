//! `registry-auth`: the authenticator, who is calling. It turns what a request presents
//! ([`Presented`]: the client's address, the `Authorization` and `X-Service-Account` headers'
//! bytes, the call's action) into the inputs of the domain's one access decision
//! (`registry_domain::access::decide`: the verified credential, the account, the service) and
//! its grant into the domain's `Caller`, or into an [`AuthError`].
//!
//! What it verifies with, and the side effects of authenticating, are behind interfaces the
//! server wires: the replica's data (`registry-replica`), the secret hasher
//! (`registry-hasher`), the identity-token verifier port, the storage ports for last use and
//! the refusal log, and [`Counters`] for the metrics. Its limits on failures and writes are its
//! own ([`rate_limit`]). It knows nothing of HTTP.

mod attempts;
mod authenticator;
mod error;
mod failures;
pub mod last_use;
pub mod rate_limit;
mod refusals;
mod request;
pub mod shared;
mod token_cache;

pub use authenticator::federation::verify_identity;
pub use authenticator::{
    auditor, collection_caller, manager, service_caller, shipper, Authenticator, Limits,
};
pub use error::{AuthError, AuthResult};
pub use request::{request_id, Presented, RequestScope, REQUEST};
pub use token_cache::TokenCache;

/// What authentication counts, for the metrics the server exposes.
pub trait Counters: Send + Sync + std::fmt::Debug {
    /// A secret or token was found verified in the cache (no argon2).
    fn token_cache_hit(&self);
    /// A secret was verified with argon2.
    fn argon2_verification(&self);
    /// An identity token was found verified in the cache (no signature check).
    fn identity_token_cache_hit(&self);
}
