//! The application's components, built once at start-up and shared by every worker: the
//! replica's view of the data, the authenticator, the use cases' ports, the metrics and the
//! limits that belong to HTTP.

use crate::metrics::Metrics;
use crate::problem::{ApiError, ApiResult};
use crate::settings::Settings;
use crate::system::{OsRandomness, SystemTicks};
use ipnetwork::IpNetwork;
use registry_auth::rate_limit::RateLimiter;
use registry_auth::shared::SharedLimit;
use registry_auth::{Authenticator, Limits};
use registry_domain::app::{AppError, Caller, Registry};
use registry_domain::issuer::Issuers;
use registry_domain::ports::{Clock, Database, IdentityTokenVerifier, Storage, Ticks};
use registry_hasher::HashingLanes;
use registry_oidc::{OidcVerifier, VerifierKeyImport, VerifierSignatureCheck};
use registry_replica::hosting::HostingCache;
use registry_replica::Replica;
use registry_tls::Reloading;
use std::sync::Arc;
use time::OffsetDateTime;

/// The application: settings and components. Cloning is cheap (the components are shared):
/// each worker holds its own clone, so that the handle every request takes is no reference
/// count that every worker writes.
#[derive(Debug, Clone)]
pub struct AppState {
    /// Settings as given.
    pub settings: Settings,
    /// Trusted proxy networks, parsed from the settings.
    pub trusted_proxies: Vec<IpNetwork>,
    /// The client networks that may read `/metrics` (docs/api.md, "Responses").
    pub metrics_allow: Vec<IpNetwork>,
    /// The replica's view of the data: directory, hosted documents, catch-up.
    pub replica: Arc<Replica>,
    /// Who is calling.
    pub auth: Arc<Authenticator>,
    /// The use cases' ports and settings.
    pub registry: Arc<Registry>,
    /// Prometheus counters.
    pub metrics: Arc<Metrics>,
    /// The OIDC adapter behind the authenticator's verifier port, for its counters.
    pub oidc: OidcVerifier,
    /// Anonymous creations per client address.
    pub anon_limiter: Arc<RateLimiter>,
    /// The last creation that found the registry full of anonymous services.
    pub anon_full: Arc<crate::anonymous_ceiling::Full>,
    /// Explained tokens and claims, and tokens checked by preflight, per customer (an
    /// anonymous service is its own customer).
    explains: Arc<RateLimiter<uuid::Uuid>>,
    signs: Arc<RateLimiter<uuid::Uuid>>,
    clock: Arc<dyn Clock>,
    /// The certificate the HTTPS listener serves (re-read when its files change); `None` over
    /// plain HTTP.
    pub certificate: Option<Arc<Reloading>>,
    /// The caches in front of the registry to purge (`REGISTRY_PURGE_URLS`), if any.
    pub purger: Option<Arc<registry_cdn::Purger>>,
    /// Custom domains' ACME directory, sealing key and DNS lookups (`REGISTRY_ACME_DIRECTORY`),
    /// if custom domains are on.
    pub custom_domains: Option<Arc<crate::custom_domains::CustomDomains>>,
    /// Whether the replica drains, and the requests in flight.
    pub drain: Arc<crate::drain::Drain>,
    /// The accounts (by customer and id) whose token is being regenerated here (one call at a
    /// time each).
    pub regenerations: crate::one_at_a_time::InFlight<(uuid::Uuid, uuid::Uuid)>,
    /// Told of each anonymous service created here: the reaper plans its next round for the
    /// service's expiry, should that come first (its documents are purged as it expires).
    pub anonymous_created: Arc<tokio::sync::Notify>,
}

impl AppState {
    /// Builds the components from settings, the issuers they name, the certificate served
    /// for them and what custom domains need (all checked before the database), an open store, the OIDC adapter (for its counters) and the verifier of identity
    /// tokens (the adapter itself, unless a test injects another).
    pub fn new<S: Storage + Database + 'static>(
        settings: Settings,
        (issuers, certificate, custom_domains): (
            Issuers,
            Option<Arc<Reloading>>,
            Option<crate::custom_domains::CustomDomains>,
        ),
        store: Arc<S>,
        (oidc, verifier): (OidcVerifier, Arc<dyn IdentityTokenVerifier>),
        clock: Arc<dyn Clock>,
    ) -> anyhow::Result<Self> {
        let hosting = HostingCache::new(
            issuers.clone(),
            settings.hosting_cache_bytes,
            crate::http_date::http_date_bytes,
        );
        let replica = Arc::new(Replica::new(store.clone(), clock.clone(), hosting));
        let hasher = Arc::new(HashingLanes::start(
            std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
        )?);
        let metrics = Arc::new(Metrics::default());
        let trusted_proxies = settings.trusted_proxy_networks()?;
        let purger = settings.purger()?.map(Arc::new);
        let custom_domains = custom_domains.map(Arc::new);
        let ticks: Arc<dyn Ticks> = Arc::new(SystemTicks);
        let limits = Limits {
            auth_failures_per_minute: settings.auth_failures_per_minute,
            writes_per_minute: settings.writes_per_minute,
            ticks: ticks.clone(),
        };
        let auth = Arc::new(Authenticator::new(
            limits,
            replica.clone(),
            store.clone(),
            verifier,
            hasher.clone(),
            metrics.clone(),
        ));
        let registry = Arc::new(Registry {
            store,
            random: Arc::new(OsRandomness),
            hasher,
            key_import: Arc::new(VerifierKeyImport),
            signatures: Arc::new(VerifierSignatureCheck),
            managed_keys: managed_keys(&settings)?,
            settings: registry_domain::app::Settings {
                issuers,
                max_services_per_customer: settings.max_services_per_customer,
                max_accounts_per_customer: settings.max_accounts_per_customer,
                anon_max_active: settings.anon_max_active,
                custom_domains: custom_domains.is_some(),
                verifier_hours: settings.verifier_hours,
                max_pending_domains: usize::try_from(settings.max_pending_domains)
                    .unwrap_or(usize::MAX),
            },
        });
        Ok(Self {
            trusted_proxies,
            metrics_allow: settings.metrics_allow_networks()?,
            replica,
            auth,
            registry,
            metrics,
            oidc,
            anon_limiter: Arc::new(
                RateLimiter::per_hour(settings.anon_create_per_hour, ticks.clone())
                    .shared("anonymous"),
            ),
            anon_full: Default::default(),
            explains: Arc::new(
                RateLimiter::per_minute(settings.explain_per_minute, ticks.clone())
                    .shared("explain"),
            ),
            signs: Arc::new(
                RateLimiter::per_minute(settings.sign_per_minute, ticks).shared("sign"),
            ),
            clock,
            settings,
            certificate,
            purger,
            custom_domains,
            drain: Arc::default(),
            regenerations: Default::default(),
            anonymous_created: Arc::default(),
        })
    }

    /// Every limit the replicas share (docs/api.md, "Limits"): writes, failed secrets, anonymous
    /// creations, explain and preflight, signatures.
    pub fn shared_limits(&self) -> [&dyn SharedLimit; 5] {
        let [writes, secret_failures] = self.auth.shared_limits();
        [
            writes,
            secret_failures,
            &*self.anon_limiter,
            &*self.explains,
            &*self.signs,
        ]
    }

    /// Counts one explained token or claims, or one token checked by preflight, against the
    /// caller's budget per minute (`REGISTRY_EXPLAIN_PER_MINUTE`): both cost more than any other
    /// read. The budget is the customer's; an anonymous secret's is its service's (`service`).
    pub fn within_explain_budget(
        &self,
        caller: &Caller,
        service: Option<uuid::Uuid>,
    ) -> ApiResult<()> {
        let key = match (caller.customer_id(), service) {
            (Some(customer), _) => customer,
            (None, Some(service)) => service,
            (None, None) => caller.customer()?,
        };
        let limit = self.settings.explain_per_minute;
        self.explains
            .hit_key(key)
            .map_err(|retry| ApiError::RateLimited {
                retry_after_secs: retry.seconds(),
                detail: format!(
                    "this customer explained or checked more than {limit} tokens or claims in a \
                     minute; retry later"
                ),
            })
    }

    /// Counts one signature against the customer's budget per minute
    /// (`REGISTRY_SIGN_PER_MINUTE`); an anonymous secret's is its service's (docs/api.md,
    /// "Managed signing").
    pub fn within_sign_budget(&self, caller: &Caller, service: uuid::Uuid) -> ApiResult<()> {
        let key = caller.customer_id().unwrap_or(service);
        let limit = self.settings.sign_per_minute;
        self.signs
            .hit_key(key)
            .map_err(|retry| ApiError::RateLimited {
                retry_after_secs: retry.seconds(),
                detail: format!(
                    "this customer asked for more than {limit} signatures in a minute \
                 (REGISTRY_SIGN_PER_MINUTE); retry later"
                ),
            })
    }

    /// Whether caches in front of the registry are purged: key readiness then waits for the
    /// purge of the change that published a key.
    pub fn purging(&self) -> bool {
        self.purger.is_some()
    }

    /// The current time.
    pub fn now(&self) -> OffsetDateTime {
        self.clock.now()
    }

    /// Runs a use case that only reads, on the blocking pool (`registry_replica::blocking`, the
    /// one wrapper), where waiting for the database is allowed.
    pub async fn read<T, F>(&self, use_case: F) -> ApiResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Registry) -> Result<T, AppError> + Send + 'static,
    {
        let registry = self.registry.clone();
        Ok(registry_replica::blocking(move || use_case(&registry)).await??)
    }

    /// The one write path: runs a use case that changes something (it writes the change with
    /// its audit event in one storage call), then settles it, making it visible on this replica
    /// before the answer leaves (`Replica::settle_write`). It settles even when the use case
    /// failed: a failure after a commit (a lost connection) must not leave the caches behind.
    pub async fn write<T, F>(&self, use_case: F) -> ApiResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Registry) -> Result<T, AppError> + Send + 'static,
    {
        let written = self.read(use_case).await;
        self.replica.settle_write().await;
        written
    }
}

/// The keys of managed signing, sealed under `REGISTRY_DATA_KEY` (docs/api.md, "Managed
/// signing"); `None` without it (signing is refused, `signing-disabled`).
fn managed_keys(
    settings: &Settings,
) -> anyhow::Result<Option<Arc<dyn registry_domain::ports::ManagedKeys>>> {
    let Some(key) = &settings.data_key else {
        return Ok(None);
    };
    let sealing: Arc<dyn registry_domain::ports::Sealing> =
        Arc::new(registry_acme::DataKey::from_base64(key)?);
    Ok(Some(Arc::new(registry_oidc::SealedKeys::new(sealing))))
}
