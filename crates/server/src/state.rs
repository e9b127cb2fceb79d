//! What every handler shares.

use crate::adapters::{HashingLanes, OsRandomness};
use crate::auth::{Attempts, SecretFailures, TokenCache};
use crate::directory::Directory;
use crate::hosting::HostingCache;
use crate::last_use::LastUse;
use crate::metrics::Metrics;
use crate::problem::{ApiError, ApiResult};
use crate::rate_limit::RateLimiter;
use crate::refusals::RefusalBudget;
use crate::settings::Settings;
use actix_web::web;
use ipnetwork::IpNetwork;
use registry_domain::app::{AppError, Registry};
use registry_domain::ports::{Clock, Storage, StoreResult};
use registry_oidc::{OidcVerifier, VerifierKeyImport};
use std::sync::Arc;
use time::OffsetDateTime;

/// Failed secrets for one lookup id per minute, from any address (DECISIONS §17).
const SECRET_FAILURES_PER_MINUTE: usize = 10;

/// The application: settings, adapters and caches.
#[derive(Debug)]
pub struct AppState {
    /// Settings as given.
    pub settings: Settings,
    /// Trusted proxy networks, parsed from the settings.
    pub trusted_proxies: Vec<IpNetwork>,
    /// The client networks that may read `/metrics` (DECISIONS §17).
    pub metrics_allow: Vec<IpNetwork>,
    /// The database, through the domain's ports.
    pub store: Arc<dyn Storage>,
    /// Published documents, served from memory.
    pub hosting: HostingCache,
    /// Services and accounts, served from memory as fresh as the database.
    pub directory: Directory,
    /// Remembered token verifications.
    pub tokens: TokenCache,
    /// argon2 checks under way, one at a time per lookup id.
    pub attempts: Attempts,
    /// Prometheus counters.
    pub metrics: Metrics,
    /// Verifier of federated identity tokens.
    pub verifier: OidcVerifier,
    /// Anonymous creations per client address.
    pub anon_limiter: RateLimiter,
    /// Failed authentications per client address.
    pub auth_failures: RateLimiter,
    /// Failed secrets per lookup id, from any address (DECISIONS §17).
    pub secret_failures: SecretFailures,
    /// Changing requests per credential: account, or anonymous service (DECISIONS §17).
    pub writes: RateLimiter<uuid::Uuid>,
    /// Explained tokens and claims per customer (DECISIONS §17).
    pub explains: RateLimiter<uuid::Uuid>,
    /// The minute each account's last use was written.
    pub last_use: LastUse,
    /// Refusals recorded per account this minute.
    pub refusal_budget: RefusalBudget,
    /// Secret hashing, on threads of its own.
    pub hasher: Arc<HashingLanes>,
    /// The use cases' ports and settings.
    pub registry: Arc<Registry>,
    clock: Arc<dyn Clock>,
}

impl AppState {
    /// Builds the state from settings and an open store.
    pub fn new(
        settings: Settings,
        store: Arc<dyn Storage>,
        verifier: OidcVerifier,
        clock: Arc<dyn Clock>,
    ) -> anyhow::Result<Self> {
        let trusted_proxies = settings.trusted_proxy_networks()?;
        let metrics_allow = settings.metrics_allow_networks()?;
        let hosting = HostingCache::new(
            &settings.issuer_url_template,
            &settings.base_url,
            settings.hosting_cache_bytes,
        )?;
        let anon_limiter = RateLimiter::per_hour(settings.anon_create_per_hour);
        let hasher = Arc::new(HashingLanes::start(
            std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
        )?);
        let registry = Arc::new(Registry {
            store: store.clone(),
            random: Arc::new(OsRandomness),
            hasher: hasher.clone(),
            key_import: Arc::new(VerifierKeyImport),
            settings: registry_domain::app::Settings {
                issuer_url_template: settings.issuer_url_template.clone(),
                max_services_per_customer: settings.max_services_per_customer,
                max_accounts_per_customer: settings.max_accounts_per_customer,
                anon_max_active: settings.anon_max_active,
            },
        });
        Ok(Self {
            trusted_proxies,
            metrics_allow,
            hosting,
            directory: Directory::default(),
            tokens: TokenCache::default(),
            attempts: Attempts::default(),
            metrics: Metrics::default(),
            verifier,
            anon_limiter,
            // Guessing a 268-bit secret is hopeless anyway; the limit bounds the argon2 work a
            // stranger can cause while staying far above what an honest client with a stale
            // token produces.
            auth_failures: RateLimiter::new(
                settings.auth_failures_per_minute,
                std::time::Duration::from_secs(60),
            ),
            secret_failures: SecretFailures::new(
                SECRET_FAILURES_PER_MINUTE,
                std::time::Duration::from_secs(60),
            ),
            writes: RateLimiter::per_minute(settings.writes_per_minute),
            explains: RateLimiter::per_minute(settings.explain_per_minute),
            last_use: LastUse::default(),
            refusal_budget: RefusalBudget::default(),
            hasher,
            registry,
            clock,
            store,
            settings,
        })
    }

    /// The current time.
    pub fn now(&self) -> OffsetDateTime {
        self.clock.now()
    }

    /// Runs a storage call on the blocking pool.
    pub async fn db<T, F>(&self, f: F) -> ApiResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&dyn Storage) -> StoreResult<T> + Send + 'static,
    {
        let store = self.store.clone();
        web::block(move || f(&*store))
            .await
            .map_err(|_| ApiError::Internal)?
            .map_err(ApiError::from)
    }

    /// Runs a use case on the blocking pool, where waiting for the database is allowed.
    pub async fn run<T, F>(&self, use_case: F) -> ApiResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Registry) -> Result<T, AppError> + Send + 'static,
    {
        let registry = self.registry.clone();
        web::block(move || use_case(&registry))
            .await
            .map_err(|_| ApiError::Internal)?
            .map_err(ApiError::from)
    }

    /// The hosted issuer URL of a subdomain.
    pub fn issuer_of(&self, subdomain: &str) -> String {
        registry_domain::publishing::hosted_issuer(&self.settings.issuer_url_template, subdomain)
    }
}
