//! The application layer: one function per use case, over the [ports](crate::ports).
//!
//! A use case takes the [`Registry`] (the ports and the settings it applies), the [`Caller`]
//! that [`access::decide`](crate::access::decide) granted the call to, a command, and `now`;
//! it applies every rule of the use case, writes the change with its audit event in one
//! storage call, and answers a typed outcome or an [`AppError`]. It never reads the clock nor
//! does I/O of its own: the server runs it on a thread where waiting for the database is
//! allowed, and tests run it against in-memory ports.
//!
//! ```
//! use registry_domain::app::{AppError, Caller, Origin};
//!
//! // An anonymous secret's caller acts for no customer: collection use cases refuse it.
//! let caller = Caller::anonymous(Origin::new("192.0.2.1".parse().unwrap(), None));
//! assert_eq!(caller.customer_id(), None);
//! assert!(matches!(caller.may_manage(None), Err(AppError::Forbidden(_))));
//! ```

mod caller;
mod error;
#[cfg(test)]
mod testing;

pub mod accounts;
pub mod anonymous;
pub mod audit;
pub mod config;
pub mod customers;
pub mod domains;
pub mod explain;
pub mod fetches;
pub mod keys;
pub mod preflight;
pub mod rate_counts;
pub mod readiness;
pub mod services;
pub mod signing;
pub mod upkeep;

pub use caller::{registered_only, Caller, Origin};
pub use error::AppError;

use crate::issuer::Issuers;
use crate::ports::{
    KeyImport, ManagedKeys, Randomness, SecretHasher, Storage, TokenSignatureCheck,
};
use std::sync::Arc;

/// The settings the use cases apply (docs/api.md, "Errors"): the server reads them from its
/// own settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The hosted issuers' URLs (`REGISTRY_ISSUER_URL_TEMPLATE`).
    pub issuers: Issuers,
    /// How many services one customer may hold.
    pub max_services_per_customer: u64,
    /// How many service accounts one customer may hold.
    pub max_accounts_per_customer: u64,
    /// How many anonymous services may live at once, of everyone's.
    pub anon_max_active: u64,
    /// Whether custom domains are taken (an ACME directory is configured).
    pub custom_domains: bool,
    /// In how many distinct clock hours an agent must have fetched a key set to be a verifier of
    /// the next key ([`crate::keys::VERIFIER_HOURS`]; only tests that cannot wait an hour set
    /// less).
    pub verifier_hours: u32,
    /// How many unproven custom domain claims one customer may have at once
    /// (`REGISTRY_MAX_PENDING_DOMAINS`).
    pub max_pending_domains: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            issuers: Issuers::new("http://{subdomain}.localhost:8080", "http://localhost:8080")
                .expect("the default template is usable"),
            max_services_per_customer: 10_000,
            max_accounts_per_customer: 1_000,
            anon_max_active: 100_000,
            custom_domains: false,
            verifier_hours: crate::keys::VERIFIER_HOURS,
            max_pending_domains: 5,
        }
    }
}

/// What every use case works with: the ports and the settings.
#[derive(Clone)]
pub struct Registry {
    /// The database.
    pub store: Arc<dyn Storage>,
    /// Random names and secrets.
    pub random: Arc<dyn Randomness>,
    /// Hashes of new secrets.
    pub hasher: Arc<dyn SecretHasher>,
    /// The check that an uploaded key is usable by a verifier.
    pub key_import: Arc<dyn KeyImport>,
    /// The check of a preflight token's signature against one published key (docs/api.md,
    /// "Preflight").
    pub signatures: Arc<dyn TokenSignatureCheck>,
    /// The keys of managed signing (docs/api.md, "Managed signing"); `None` without a data key
    /// to seal them under: signing is then refused (`signing-disabled`).
    pub managed_keys: Option<Arc<dyn ManagedKeys>>,
    /// The settings.
    pub settings: Settings,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("store", &self.store)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Registry {
    /// The hosted issuer URL of a subdomain.
    pub fn issuer_of(&self, subdomain: &str) -> String {
        self.settings.issuers.issuer_of(subdomain)
    }
}
