//! # registry-domain
//!
//! The pure core of the registry: everything that decides, nothing that does I/O.
//!
//! * [`access`]: the one access decision: may this credential make this call, from this
//!   address, now (401, 403 or 404 otherwise), and the rules of managing service accounts.
//! * [`policy`]: the policy engine, re-exported from the crate `registry-policy`: the
//!   service-account policy document (version 1), its checks, evaluation, explanation, lint,
//!   policy tests and comparison.
//! * [`naming`]: tenant suffixes and service subdomains (`{name}-{tenant}`, `{random}-anon`).
//! * [`publishing`]: the rewrite of an uploaded discovery document to the hosted issuer and the
//!   checks of the uploaded key set.
//! * [`limits`]: what one customer may make every request pay for (policy sizes, issuers per
//!   customer), and the keys of per-address limits.
//! * [`keys`]: the key lifecycle of a published service: retired keys that stay published for
//!   a while, thumbprints, the key inventory.
//! * [`withdrawn`]: what a service remembers of the keys that left its key set, for eight days.
//! * [`anonymous`]: lifetime of anonymous services.
//! * [`credentials`]: the shape of static tokens and anonymous secrets.
//! * [`claims`]: time-based checks of a verified JWT's registered claims.
//! * [`signing`]: managed signing: the keys the registry holds for a service, their rotation,
//!   the checks of the claims it signs.
//! * [`ports`]: the traits the adapters implement (storage, clock, randomness, hashing, tokens).
//! * `testing` (the cargo feature `testing`, off by default): in-memory adapters of the ports
//!   for tests, `MemoryStore` first, held to the real store's contract by the integration suite.
//!
//! The crate never reads the clock or the network: time arrives as a parameter, so every rule can
//! be tested at any instant.
//!
//! ```
//! use registry_domain::policy::Policy;
//! use serde_json::json;
//!
//! let parsed = Policy::parse(&json!({"kind": "static", "services": ["*"]})).unwrap();
//! assert!(parsed.policy.static_scope().unwrap().matches("api-acme"));
//! ```

#![warn(missing_docs)]

/// The examples of the crate's README, run with the doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;

pub mod access;
pub mod account;
pub mod anonymous;
pub mod app;
pub mod audit;
pub mod claims;
pub mod credentials;
pub mod custom_domain;
pub mod customer;
pub mod error;
pub mod issuer;
pub mod keys;
pub mod limits;
pub mod naming;
pub mod network;
pub mod ports;
pub mod preflight;
pub mod publishing;
pub mod refusal;
pub mod segment;
pub mod service;
pub mod signing;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod text;
pub mod timestamp;
pub mod withdrawn;

/// The policy engine, the crate `registry-policy`: documents, claim patterns, `evaluate`,
/// `explain`, lint, policy tests and `compare`. Re-exported here so that the registry's code
/// (and code written against earlier versions of this crate) keeps its paths.
pub use registry_policy as policy;
/// JSON text read strictly (no member named twice), as the policy engine reads its documents.
pub use registry_policy::json;
/// Problems that point into a document ([`Violation`]), from `registry-policy`.
pub use registry_policy::violation;

pub use account::ServiceAccount;
pub use customer::{Customer, Plan};
pub use error::StoreError;
pub use service::Service;
pub use violation::{Violation, Violations};
