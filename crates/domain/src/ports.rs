//! Ports: what the domain needs from the outside world, as traits the adapters implement.
//!
//! Storage is split by subject ([`CustomerStore`], [`ServiceStore`], [`AccountStore`],
//! [`CredentialStore`], [`ChangeFeed`], [`AuditLog`], [`RefusalLog`], [`ActivityLog`],
//! [`FetchLog`], [`ReadinessLog`], [`PurgeLog`], [`DomainStore`], [`SigningStore`]: together [`Storage`], what the use cases of
//! [`crate::app`] hold); one adapter (`registry-store`) implements them all. Outside the use
//! cases, each consumer holds the narrow role it needs: the replica a [`ReplicaSource`] (reads
//! only) and the [`Database`], the authenticator an [`ActivityLog`]. The
//! storage traits are synchronous: diesel is, and the server runs them on a blocking pool; so are
//! the ports of custom domains ([`CertificateAuthority`], [`OwnershipCheck`], [`Sealing`]), run
//! by the worker's step on that pool. [`IdentityTokenVerifier`] and [`CachePurger`] are
//! asynchronous: fetching an issuer's keys, and a purge's minute of retries, must hold no thread.
//! Time comes in as [`Clock`] (the time of day) and [`Ticks`] (monotonic time).

use crate::audit::{AuditEvent, AuditPage, AuditQuery};
use crate::custom_domain::{CustomDomain, DomainProblem, DomainWork};
/// The agents that may become a key's verifiers, as the fetch evidence reads them.
pub use crate::keys::{SeenNetwork, VerifierCandidate};
use crate::network::Network;
use crate::service::{Publication, PublishedConfig};
use crate::{Customer, Plan, Service, ServiceAccount, StoreError};
use std::future::Future;
use time::OffsetDateTime;
use uuid::Uuid;

/// The key-import port, defined beside the key lifecycle that calls it.
pub use crate::keys::KeyImport;

/// Checks a compact JWS's signature with one public key, for the preflight (docs/api.md,
/// "Preflight"): the JOSE code the domain leaves to an adapter (`registry-oidc` implements it with
/// the code that verifies identity tokens).
pub trait TokenSignatureCheck: Send + Sync {
    /// Whether `token`'s signature, made with the algorithm its header names, verifies with the
    /// public key `jwk`; false for a key that cannot verify that algorithm, and for an algorithm
    /// the registry does not verify (`none`, HMAC).
    fn verifies(&self, token: &str, jwk: &serde_json::Map<String, serde_json::Value>) -> bool;
}

/// Result of every storage call.
pub type StoreResult<T> = Result<T, StoreError>;

/// The time of day. Production reads the system clock; tests pin it.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current instant, UTC.
    fn now(&self) -> OffsetDateTime;
}

/// Monotonic time, which limits and caches count durations in (never the time of day: that is
/// [`Clock`]). Production reads the system's; tests move it when they like. Injected like the
/// clock, so that no limit or cache reads the time itself.
pub trait Ticks: Send + Sync + std::fmt::Debug {
    /// The current instant.
    fn now(&self) -> std::time::Instant;
}

/// A source of cryptographically secure random bytes.
pub trait Randomness: Send + Sync {
    /// Fills `buf` with random bytes.
    fn fill_bytes(&self, buf: &mut [u8]);
}

/// A slow, salted one-way hash for secrets (argon2id in production).
pub trait SecretHasher: Send + Sync {
    /// Hashes `secret` with a fresh salt, returning a self-describing string (PHC format).
    /// [`HasherBusy`] when the hasher refuses more work for now (its queue is full).
    fn hash(&self, secret: &str) -> Result<String, HasherBusy>;
    /// Whether `secret` matches `hash`, in time independent of where they differ.
    fn verify(&self, secret: &str, hash: &str) -> Result<bool, HasherBusy>;
}

/// A [`SecretHasher`] with too much work queued: nothing else is affected, and the caller
/// retries shortly (503).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the secret hasher is busy")]
pub struct HasherBusy;

/// A secret's public lookup id and its hash, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialRecord {
    /// The public lookup id embedded in the secret (see [`crate::credentials`]).
    pub lookup_id: String,
    /// The secret's [`SecretHasher`] hash.
    pub hash: String,
}

/// Who a stored credential belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CredentialOwner {
    /// The static token of a service account.
    Account(Uuid),
    /// The management secret of an anonymous service.
    AnonymousService(Uuid),
}

/// A credential found by its lookup id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCredential {
    /// Whose it is.
    pub owner: CredentialOwner,
    /// The stored hash; it changes whenever the secret is regenerated.
    pub hash: String,
}

/// Customers.
pub trait CustomerStore: Send + Sync {
    /// Creates a customer together with its first service account and that account's token, in
    /// one transaction. `Conflict` when the tenant suffix is taken.
    fn create_customer(
        &self,
        customer: &Customer,
        first_account: &ServiceAccount,
        token: &CredentialRecord,
        event: &AuditEvent,
    ) -> StoreResult<()>;
    /// A customer by id.
    fn customer(&self, id: Uuid) -> StoreResult<Option<Customer>>;
    /// A customer by tenant suffix.
    fn customer_by_tenant(&self, tenant: &str) -> StoreResult<Option<Customer>>;
    /// Every customer, oldest first.
    fn customers(&self) -> StoreResult<Vec<Customer>>;
    /// Changes a customer's plan, with `event` (`customer.update`) in the same transaction
    /// when, and only when, the plan was another one: setting the plan a customer already has
    /// changes nothing and writes no event. The customer as it is after the call; `None` when
    /// no customer has that tenant suffix.
    fn set_plan(
        &self,
        tenant: &str,
        plan: Plan,
        event: &AuditEvent,
    ) -> StoreResult<Option<Customer>>;
    /// Disables the customer (`disabled_at`: since when) or enables it (`None`), with `event`
    /// (`customer.update`) when, and only when, that changes it. While it is disabled,
    /// [`AccountStore::account`], [`AccountStore::accounts_by_issuer`],
    /// [`AccountStore::oidc_accounts`], [`ServiceStore::service`], [`ServiceStore::find_service`]
    /// and [`ServiceStore::published_by_subdomain`] answer as if its accounts and services did
    /// not exist; every one of them is logged as changed, so
    /// that replicas read them again. The customer as it is after the call; `None` when no
    /// customer has that tenant suffix.
    fn set_disabled(
        &self,
        tenant: &str,
        disabled_at: Option<OffsetDateTime>,
        event: &AuditEvent,
    ) -> StoreResult<Option<Customer>>;
    /// Deletes the customer and everything it holds (services, their configurations and secrets,
    /// accounts, their tokens, its audit trail), each service and account logged as changed, so
    /// that every replica stops serving them at its next request, and each subdomain noted as
    /// freed `at` (as [`ServiceStore::delete_service`] does). `false` when no customer has that
    /// tenant suffix.
    fn delete_customer(&self, tenant: &str, at: OffsetDateTime) -> StoreResult<bool>;
}

/// Services and their published configurations.
///
/// Every call that changes something takes the [`AuditEvent`] of that change and writes it in
/// the same transaction, when, and only when, the change is made (a delete of what is already
/// gone, or an [`ServiceStore::update_config`] that writes nothing, writes no event). The same
/// holds for [`CustomerStore`] and [`AccountStore`].
pub trait ServiceStore: Send + Sync {
    /// Creates a service (with the anonymous secret for anonymous ones). `Conflict` when the
    /// subdomain is taken; `CeilingReached` when the customer already holds `ceiling` services
    /// (for an anonymous service: when `ceiling` anonymous services are live at its
    /// `created_at`), counted in the same transaction as the insert.
    fn create_service(
        &self,
        service: &Service,
        secret: Option<&CredentialRecord>,
        ceiling: Ceiling,
        event: &AuditEvent,
    ) -> StoreResult<()>;
    /// A service by subdomain (case-insensitive) or by id (its UUID text).
    fn find_service(&self, subdomain_or_id: &str) -> StoreResult<Option<Service>>;
    /// A service by id.
    fn service(&self, id: Uuid) -> StoreResult<Option<Service>>;
    /// The services of a customer, oldest first.
    fn services_of(&self, customer_id: Uuid) -> StoreResult<Vec<Service>>;
    /// How many services a customer has (its quota: docs/api.md, "Errors").
    fn count_services_of(&self, customer_id: Uuid) -> StoreResult<u64>;
    /// Which of `subdomains` name services of `customer_id` (lower-case comparison).
    fn owned_subdomains(
        &self,
        customer_id: Uuid,
        subdomains: &[String],
    ) -> StoreResult<Vec<String>>;
    /// Writes a service's title and description, read as `before`, if they are still stored so
    /// (a change of either would be undone); otherwise writes nothing and answers `Err` with the
    /// service as stored now, read in the same transaction on the primary, to decide again
    /// from (what was read may come from a copy that lags). Nothing is written, nor `event`
    /// recorded, when `service` is what is stored. `NotFound` when it is gone.
    fn update_service(
        &self,
        before: &Service,
        service: &Service,
        event: &AuditEvent,
    ) -> StoreResult<Result<(), Service>>;
    /// Deletes a service, its published configuration and its secret; `false` when absent.
    fn delete_service(&self, id: Uuid, event: &AuditEvent) -> StoreResult<bool>;
    /// Up to `limit` anonymous services whose expiry is at or before `now`.
    fn expired_anonymous(&self, now: OffsetDateTime, limit: usize) -> StoreResult<Vec<Service>>;
    /// When the first anonymous service to expire after `after` expires, if one does by
    /// `until` (the reaper's next round: docs/api.md, "Behind a CDN").
    fn next_anonymous_expiry(
        &self,
        after: OffsetDateTime,
        until: OffsetDateTime,
    ) -> StoreResult<Option<OffsetDateTime>>;
    /// How many anonymous services are live at `now` (the ceiling: docs/api.md, "Errors").
    fn live_anonymous(&self, now: OffsetDateTime) -> StoreResult<u64>;
    /// Publishes (inserts or replaces) a configuration. `NotFound` when the service is gone.
    fn put_config(&self, config: &PublishedConfig, event: &AuditEvent) -> StoreResult<()>;
    /// Publishes a configuration made from the one published now, in one transaction: `make`
    /// gets the current configuration (`None` when nothing is published) and returns the one to
    /// write, or `None` to write nothing. `Ok(true)` when it wrote; `NotFound` when the service
    /// is gone. Two calls for one service run one after the other, the second seeing the
    /// first's result (a key retired by one upload is never lost by the next).
    fn update_config(
        &self,
        service_id: Uuid,
        make: &mut dyn FnMut(Option<PublishedConfig>) -> Option<PublishedConfig>,
        event: &AuditEvent,
    ) -> StoreResult<bool>;
    /// Up to `limit` services whose published key state holds a retired key whose time ran out
    /// at or before `now` (to withdraw it, with its `key.expire` event).
    fn configs_with_expired_keys(
        &self,
        now: OffsetDateTime,
        limit: usize,
    ) -> StoreResult<Vec<Uuid>>;
    /// The published configuration of a service.
    fn config(&self, service_id: Uuid) -> StoreResult<Option<PublishedConfig>>;
    /// Removes a published configuration unless `keep` holds of it as the write finds it;
    /// `false` when nothing was published or it was kept.
    fn delete_config(
        &self,
        service_id: Uuid,
        keep: &dyn Fn(&PublishedConfig) -> bool,
        event: &AuditEvent,
    ) -> StoreResult<bool>;
    /// What the service whose subdomain is `subdomain` (case folded) publishes, when it does:
    /// one indexed read, what a replica reads for a subdomain whose documents are not in memory.
    /// A row that cannot be read back is `None` (and logged).
    fn published_by_subdomain(&self, subdomain: &str) -> StoreResult<Option<Publication>>;
}

/// The most rows of one kind that may exist once a creation commits: a customer's services or
/// accounts (its quotas), or the live anonymous services (the registry's ceiling). The store
/// counts them in the creation's own transaction, so that creations racing each other never
/// pass the bound together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ceiling(pub u64);

impl Ceiling {
    /// No bound.
    pub const NONE: Ceiling = Ceiling(u64::MAX);

    /// Whether one more may be made when `held` exist.
    pub fn admits(self, held: u64) -> bool {
        held < self.0
    }
}

/// What a write of an account checks of its customer's other federated (`oidc`) accounts (all
/// of them but the one written), in the write's own transaction, so that concurrent writes
/// never pass it together: the issuers and rules one customer's accounts may hold together
/// ([`crate::limits::check_customer_budget`]). `Err` refuses the write with
/// [`StoreError::OverBudget`]; `None` checks nothing.
pub type OthersCheck<'a> = Option<&'a dyn Fn(&[ServiceAccount]) -> Result<(), crate::Violation>>;

/// Service accounts, their policies and static tokens.
pub trait AccountStore: Send + Sync {
    /// Creates an account (and its token, for static ones), indexing its rules by issuer.
    /// `CeilingReached` when its customer already holds `ceiling` accounts, and `OverBudget`
    /// when `others` refuses its other accounts, each counted in the same transaction as the
    /// insert.
    fn create_account(
        &self,
        account: &ServiceAccount,
        token: Option<&CredentialRecord>,
        ceiling: Ceiling,
        others: OthersCheck<'_>,
        event: &AuditEvent,
    ) -> StoreResult<()>;
    /// An account by id.
    fn account(&self, id: Uuid) -> StoreResult<Option<ServiceAccount>>;
    /// A customer's accounts, oldest first.
    fn accounts_of(&self, customer_id: Uuid) -> StoreResult<Vec<ServiceAccount>>;
    /// How many accounts a customer has (its quota: docs/api.md, "Errors").
    fn count_accounts_of(&self, customer_id: Uuid) -> StoreResult<u64>;
    /// Writes name and policy (re-indexing issuers) of the account read as `before`, if its
    /// name and policy are still stored so (a change of either would be undone: a policy
    /// narrowed, widened again); otherwise writes nothing and answers `Err` with the account as
    /// stored now, read in the same transaction on the primary, to decide again from. Nothing
    /// is written, nor `event` recorded, when `account`'s name and policy are what is stored.
    /// `NotFound` when it is gone; `OverBudget` when `others` refuses its other accounts (read
    /// in the same transaction).
    fn update_account(
        &self,
        before: &ServiceAccount,
        account: &ServiceAccount,
        others: OthersCheck<'_>,
        event: &AuditEvent,
    ) -> StoreResult<Result<(), ServiceAccount>>;
    /// Deletes an account with its token and issuer index; `false` when absent.
    fn delete_account(&self, id: Uuid, event: &AuditEvent) -> StoreResult<bool>;
    /// The lookup id of an account's token (`None` for an account without one).
    fn token_lookup_id(&self, account_id: Uuid) -> StoreResult<Option<String>>;
    /// Replaces `account`'s token atomically, if its token is still `replaced` (a lookup id
    /// read by [`AccountStore::token_lookup_id`]) and its policy still `account`'s: of
    /// regenerations racing each other, one replaces the token and the others get `Conflict`,
    /// so that nobody is handed a token that never worked. A policy changed since `account` was
    /// read (widened after the caller was judged no narrower than it, or a lagging copy) writes
    /// nothing and answers `Err` with the account as stored now, read in the same transaction
    /// on the primary, to judge again from. `NotFound` when the account is gone.
    fn replace_token(
        &self,
        account: &crate::ServiceAccount,
        replaced: Option<&str>,
        token: &CredentialRecord,
        event: &AuditEvent,
    ) -> StoreResult<Result<(), crate::ServiceAccount>>;
    /// Accounts with at least one OIDC rule whose `iss` is exactly `issuer` (an indexed look-up).
    fn accounts_by_issuer(&self, issuer: &str) -> StoreResult<Vec<ServiceAccount>>;
    /// Every account whose policy is `oidc`, of every customer: the set of trusted issuers a
    /// server holds in memory, so that tokens of any other issuer cost nothing.
    fn oidc_accounts(&self) -> StoreResult<Vec<ServiceAccount>>;
}

/// Credential look-up by public lookup id.
pub trait CredentialStore: Send + Sync {
    /// The credential with this lookup id, if any.
    fn credential(&self, lookup_id: &str) -> StoreResult<Option<StoredCredential>>;
    /// The credential with this lookup id and the change log's newest sequence (0 when it is
    /// empty), read by one statement: the one read of a request with a static token. Whoever
    /// caches what the database holds compares that sequence with the one its caches reflect.
    fn credential_and_latest_change(
        &self,
        lookup_id: &str,
    ) -> StoreResult<Option<(StoredCredential, i64)>>;
}

/// What changed, for replicas' caches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Change {
    /// A service, its configuration or its secret changed (or it was deleted).
    Service(Uuid),
    /// A service account, its policy or its token changed (or it was deleted).
    Account(Uuid),
}

/// A log of changes, so that replicas sharing a database can refresh their caches.
pub trait ChangeFeed: Send + Sync {
    /// Changes after sequence number `after`, oldest first, with the sequence of the last one
    /// (`after` when there are none).
    fn changes_since(&self, after: i64, limit: usize) -> StoreResult<(i64, Vec<Change>)>;
    /// The sequence number of the newest change (0 when there is none).
    fn latest_change(&self) -> StoreResult<i64>;
    /// The oldest sequence number the log still holds (`None` when it is empty). The log is
    /// pruned by age, but always keeps its newest row.
    fn oldest_change(&self) -> StoreResult<Option<i64>>;
    /// Deletes changes logged before `older_than`, except the newest (so that the newest
    /// sequence never goes back); how many went. A replica whose position is older than what is
    /// left reloads everything.
    fn prune_changes(&self, older_than: OffsetDateTime) -> StoreResult<usize>;
}

/// The database behind the storage ports, as the read model and the readiness check see it: the
/// reads a request runs, taken in place when that cannot wait, and which sides answer. No use
/// case needs it, so it is not part of [`Storage`].
pub trait Database: Send + Sync + std::fmt::Debug {
    /// [`CredentialStore::credential_and_latest_change`] run in place, or `None` when that would
    /// wait (a network round trip, no idle connection): the caller then runs it where waiting
    /// is allowed.
    fn credential_and_latest_change_now(
        &self,
        lookup_id: &str,
    ) -> Option<StoreResult<Option<(StoredCredential, i64)>>>;
    /// [`ChangeFeed::latest_change`] run in place, or `None` when that would wait (see
    /// [`Database::credential_and_latest_change_now`]).
    fn latest_change_now(&self) -> Option<StoreResult<i64>>;
    /// [`ServiceStore::published_by_subdomain`] run in place, or `None` when that would wait
    /// (see [`Database::credential_and_latest_change_now`]): the first public fetch of an
    /// issuer a replica does not hold yet.
    fn published_by_subdomain_now(
        &self,
        subdomain: &str,
    ) -> Option<StoreResult<Option<Publication>>>;
    /// [`SigningStore::signing`] run in place, or `None` when that would wait (see
    /// [`Database::credential_and_latest_change_now`]): a signature then costs no hand-over to
    /// a thread where waiting is allowed.
    fn signing_now(&self, service_id: Uuid)
        -> Option<StoreResult<Option<crate::signing::Signing>>>;
    /// Whether the database answers (the primary: where writes go).
    fn ping(&self) -> StoreResult<()>;
    /// Which sides of the database answer now (docs/api.md, "Read replicas and the primary down").
    fn sides(&self) -> DatabaseSides;
    /// The connections of each side's pool now (the primary's first), for the metrics.
    fn pools(&self) -> Vec<PoolUse>;
}

/// The connections of one side's pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolUse {
    /// `"primary"` or `"read_replica"`.
    pub side: &'static str,
    /// Connections lent out.
    pub in_use: u32,
    /// Connections open and waiting.
    pub idle: u32,
}

/// Which sides of the database answer (docs/api.md, "Read replicas and the primary down").
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DatabaseSides {
    /// The primary, where writes go, and reads when there is no read replica.
    pub primary: bool,
    /// The read replica, when one is configured.
    pub read_replica: Option<ReadReplica>,
}

impl DatabaseSides {
    /// Whether requests that only read can be served: from the read replica, or from the
    /// primary, which reads fall back to.
    pub fn reads_work(&self) -> bool {
        self.primary || self.read_replica.is_some_and(|r| r.up)
    }
}

/// A read replica's state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReadReplica {
    /// Whether it answers.
    pub up: bool,
    /// How far its replay is behind what the primary wrote, in seconds (`None` when it does not
    /// answer).
    pub lag_seconds: Option<f64>,
    /// Whether that is past the ceiling, so that reads go to the primary.
    pub lagging: bool,
}

/// The audit trail (docs/api.md, "Audit trail and last use"). Events are written by the storage
/// calls that make changes, each in its change's transaction and only when the change happened;
/// this port reads and prunes them.
pub trait AuditLog: Send + Sync {
    /// A page of the trail, newest first, in the order the changes committed. A cursor whose
    /// event is not in the query's trail (another customer's, pruned, made up) is `NotFound`.
    fn audit_events(&self, query: &AuditQuery) -> StoreResult<AuditPage>;
    /// Deletes events older than `older_than`; how many went.
    fn prune_audit(&self, older_than: OffsetDateTime) -> StoreResult<usize>;
}

/// What callers' requests leave behind as they are served, outside the change log (no cache
/// holds it): the last use of accounts and the refusals worth explaining. The authenticator's
/// one storage port.
pub trait ActivityLog: Send + Sync + std::fmt::Debug {
    /// Records a use of an account at `minute` (see [`crate::audit::last_used_minute`]) unless
    /// a later or equal one is recorded: replicas never move it backwards, and a minute is
    /// written once. `Ok(false)` when nothing changed. Not a change of the change log: no
    /// cache holds it.
    fn record_use(&self, account_id: Uuid, minute: OffsetDateTime) -> StoreResult<bool>;
    /// Appends `record` (see [`crate::refusal::record`]) to the log of each account given, in
    /// the class [`crate::refusal::is_near_record`] says, and keeps each class of each log to
    /// its newest `KEPT_PER_ACCOUNT`: records of one class never push out the other's.
    fn record_refusals(
        &self,
        records: &[(Uuid, serde_json::Value)],
        at: OffsetDateTime,
    ) -> StoreResult<()>;
}

/// The refusal log (docs/api.md, "Explaining refusals"): per account and class (near misses of its
/// rules, others), the newest [`crate::refusal::KEPT_PER_ACCOUNT`] records of federated requests
/// refused after their signature verified.
pub trait RefusalLog: Send + Sync {
    /// An account's refusals of both classes at or after `since`, newest first, `limit` at most.
    fn refusals(
        &self,
        account_id: Uuid,
        since: OffsetDateTime,
        limit: usize,
    ) -> StoreResult<Vec<serde_json::Value>>;
    /// Deletes refusals older than `older_than`; how many went.
    fn prune_refusals(&self, older_than: OffsetDateTime) -> StoreResult<usize>;
}

/// Which hosted document a public fetch was of (docs/api.md, "Fetch evidence"), under which of
/// the service's issuers: its subdomain's, or its custom domain's (counted apart).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FetchedDocument {
    /// `/.well-known/openid-configuration`.
    Discovery,
    /// The key set, `/openid/v1/jwks` (and its aliases).
    Jwks,
    /// The discovery document under the service's custom domain.
    DomainDiscovery,
    /// The key set under the service's custom domain.
    DomainJwks,
}

impl FetchedDocument {
    /// Every document, in the order the API lists them: the subdomain's, then the custom
    /// domain's.
    pub const ALL: [Self; 4] = [
        Self::Discovery,
        Self::Jwks,
        Self::DomainDiscovery,
        Self::DomainJwks,
    ];

    /// The path the API names it by.
    pub fn path(self) -> &'static str {
        match self {
            Self::Discovery | Self::DomainDiscovery => "/.well-known/openid-configuration",
            Self::Jwks | Self::DomainJwks => crate::publishing::JWKS_PATH,
        }
    }

    /// Whether it is a key set (under either issuer).
    pub fn is_jwks(self) -> bool {
        matches!(self, Self::Jwks | Self::DomainJwks)
    }

    /// Whether it was fetched under the custom domain.
    pub fn is_custom_domain(self) -> bool {
        matches!(self, Self::DomainDiscovery | Self::DomainJwks)
    }

    /// The same document under the custom domain.
    pub fn on_custom_domain(self) -> Self {
        match self {
            Self::Discovery | Self::DomainDiscovery => Self::DomainDiscovery,
            Self::Jwks | Self::DomainJwks => Self::DomainJwks,
        }
    }
}

/// One User-Agent's fetches of a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentFetches {
    /// The User-Agent, cut to 100 characters, control characters removed.
    pub agent: String,
    /// How many fetches.
    pub count: u64,
    /// The last one.
    pub last_at: OffsetDateTime,
    /// The networks it fetched from, each with its last fetch from there (a bounded few: the
    /// most frequent).
    pub networks: Vec<NetworkFetch>,
}

/// An agent's last fetch from one network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetworkFetch {
    /// Where from.
    pub network: Network,
    /// When, last.
    pub last_at: OffsetDateTime,
}

/// The stored name of the agents past [`STORED_AGENTS_PER_HOUR`] of one document, issuer and
/// hour, counted together (docs/api.md, "Fetch evidence"). A control character starts it, which
/// no counted User-Agent holds, so no client can send it.
pub const OTHER_AGENTS: &str = "\u{1}other";

/// Agents stored per document, issuer and hour, at most; the rest are [`OTHER_AGENTS`].
pub const STORED_AGENTS_PER_HOUR: usize = 64;

/// Networks stored per agent, document, issuer and hour, at most.
pub const STORED_NETWORKS_PER_AGENT: usize = 8;

/// Once an hour holds [`STORED_AGENTS_PER_HOUR`] agents, a network that brought this many
/// brings no new one (its new agents are [`OTHER_AGENTS`]): one network's made-up agents cannot
/// take the places of the hour's other agents (a verifier's among them). Below the bound every
/// agent is kept, whatever its network; past it, a crowd's agents (seen only from networks holding
/// more than this many) give their places first.
pub const STORED_AGENTS_PER_NETWORK: usize = 4;

/// One agent's fetches of a service's key set in one clock hour, summed over its issuers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentHour {
    /// The User-Agent as stored ([`OTHER_AGENTS`] for those past the bound).
    pub agent: String,
    /// The start of the hour.
    pub hour: OffsetDateTime,
    /// How many fetches.
    pub count: u64,
    /// The last one in that hour.
    pub last_at: OffsetDateTime,
}

/// A replica's fetches of one service's document in one clock hour since its last flush (or,
/// read back, the sum of every replica's over a period).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocumentFetches {
    /// The service.
    pub service_id: Uuid,
    /// The document.
    pub document: FetchedDocument,
    /// Answers 200.
    pub ok: u64,
    /// Answers 304.
    pub not_modified: u64,
    /// The last fetch.
    pub last_at: OffsetDateTime,
    /// The most frequent agents.
    pub agents: Vec<AgentFetches>,
}

/// The fetch evidence (docs/api.md, "Fetch evidence"): public fetches per service, document and
/// hour, summed over every replica; kept 24 hours.
pub trait FetchLog: Send + Sync {
    /// Adds each replica count to the hour bucket of its `last_at` (per document and per agent).
    fn record_fetches(&self, counts: &[DocumentFetches]) -> StoreResult<()>;
    /// A service's fetches in the hour buckets from `since`'s on, one per document fetched,
    /// with its `agents` most frequent agents, most frequent first.
    fn fetches(
        &self,
        service_id: Uuid,
        since: OffsetDateTime,
        agents: usize,
    ) -> StoreResult<Vec<DocumentFetches>>;
    /// The agents that fetched `service_id`'s key set (under any of its issuers) in the hours
    /// from `since`'s up to `until`, counting only hours whose fetches all came before `until`,
    /// each with its networks; [`OTHER_AGENTS`] is left out.
    fn verifier_candidates(
        &self,
        service_id: Uuid,
        since: OffsetDateTime,
        until: OffsetDateTime,
    ) -> StoreResult<Vec<VerifierCandidate>>;
    /// The last fetch of `service_id`'s key set (under any of its issuers) by each of `agents`
    /// from each network it fetched from, in the hours from `since`'s on.
    fn verifier_fetches(
        &self,
        service_id: Uuid,
        agents: &[String],
        since: OffsetDateTime,
    ) -> StoreResult<Vec<(String, NetworkFetch)>>;
    /// Each agent's fetches of `service_id`'s key set (under any of its issuers) per clock hour,
    /// from `since`'s hour on ([`OTHER_AGENTS`] included), in no particular order.
    fn key_set_hours(&self, service_id: Uuid, since: OffsetDateTime)
        -> StoreResult<Vec<AgentHour>>;
    /// The last fetch of each of `service_ids`' key sets (under any of their issuers) from
    /// `since`'s hour on; a service whose key set nobody fetched is left out.
    fn last_key_set_fetches(
        &self,
        service_ids: &[Uuid],
        since: OffsetDateTime,
    ) -> StoreResult<Vec<(Uuid, OffsetDateTime)>>;
    /// Deletes the buckets of hours before `older_than`'s, and the readiness of keys found safe
    /// before it; how many went.
    fn prune_fetches(&self, older_than: OffsetDateTime) -> StoreResult<usize>;
}

/// Key readiness as found (docs/api.md, "Key readiness"): when each key became safe to sign
/// with, recorded once, whichever replica finds it first.
pub trait ReadinessLog: Send + Sync {
    /// When key `kid` of `service_id`, first published at `published_at`, was found safe to
    /// sign with (docs/api.md, "Key readiness"), if it was: once safe, a key stays safe. A time
    /// before `published_at` (to the millisecond) is not its own: an earlier key under the same
    /// `kid`, withdrawn since, and is not answered.
    fn key_safe_at(
        &self,
        service_id: Uuid,
        kid: &str,
        published_at: OffsetDateTime,
    ) -> StoreResult<Option<OffsetDateTime>>;
    /// Records that key `kid` of `service_id`, first published at `published_at`, became safe
    /// to sign with at `at`, unless a time of its own is recorded already (one of an earlier
    /// key under that `kid` is replaced); answers the time recorded (the first one, when
    /// replicas race).
    fn record_key_safe(
        &self,
        service_id: Uuid,
        kid: &str,
        published_at: OffsetDateTime,
        at: OffsetDateTime,
    ) -> StoreResult<OffsetDateTime>;
}

/// The purges of the caches in front of the registry that succeeded (docs/api.md, "Behind a
/// CDN"), which key readiness waits for.
pub trait PurgeLog: Send + Sync {
    /// Records that every cache in front of the registry dropped its copies of `service_id`'s
    /// documents as of their change at `changed_at` (docs/api.md, "Behind a CDN"); a later
    /// change recorded before stays.
    fn record_purge(&self, service_id: Uuid, changed_at: OffsetDateTime) -> StoreResult<()>;
    /// The newest change of `service_id`'s documents whose purge succeeded, if one did.
    fn purged_through(&self, service_id: Uuid) -> StoreResult<Option<OffsetDateTime>>;
    /// The services whose published documents changed at `since` or later, and after the newest
    /// change whose purge succeeded (or with none recorded): each with its subdomain and that
    /// change, oldest first. A replica that starts purges them again: a purge lost with the
    /// process that was retrying it would otherwise hold a key's readiness back until the next
    /// change.
    fn unpurged(&self, since: OffsetDateTime) -> StoreResult<Vec<(Uuid, String, OffsetDateTime)>>;
}

/// The start of `at`'s hour, in Unix milliseconds: the bucket a fetch counts in.
pub fn fetch_hour(at: OffsetDateTime) -> i64 {
    at.unix_timestamp().div_euclid(3600) * 3_600_000
}

/// An ACME order a worker is about to place, and the windows its budget counts in
/// ([`DomainStore::take_acme_order`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcmeOrder<'a> {
    /// The ACME directory, whose account places it.
    pub directory: &'a str,
    /// The domain it is for.
    pub domain: &'a str,
    /// The customer whose service holds the domain.
    pub customer_id: Option<Uuid>,
    /// A renewal (else a new order, counted against the customer).
    pub renewal: bool,
    /// When it is placed.
    pub at: OffsetDateTime,
    /// Since when the customer's new orders count.
    pub customer_since: OffsetDateTime,
    /// Since when the account's orders count.
    pub account_since: OffsetDateTime,
}

/// Custom domains (docs/api.md, "Custom domains"): one per service at most, a name held by one
/// service at a time. Every change is logged as a change of its service, so that replicas reload
/// the domain with the service's documents.
pub trait DomainStore: Send + Sync {
    /// The service's domain, if it has one.
    fn domain_of(&self, service_id: Uuid) -> StoreResult<Option<CustomDomain>>;
    /// The domain with this name (lower case), whatever its status.
    fn domain_named(&self, domain: &str) -> StoreResult<Option<CustomDomain>>;
    /// Adds the service's claim of a domain, or replaces it (another name starts over), with
    /// `event`, when the service's domain is still `was` as the caller read it (`None`: it had
    /// none; [`CustomDomain::is_still`]): `Ok(Err(now))`, nothing written, when it is not (another
    /// write changed it since, or the caller read a lagging copy), with what the transaction
    /// found, for the caller to decide again. `Conflict` when another service holds the name
    /// proven (issuing or active); another service's unproven claim of it is no conflict;
    /// `NotFound` when the service is gone; `CeilingReached` when a claim would leave its
    /// customer's services more than `pending` unproven claims, counted in the same
    /// transaction. Another name than the one it had takes the old one's fetch evidence with
    /// it (docs/api.md, "Fetch evidence").
    fn put_domain(
        &self,
        domain: &CustomDomain,
        was: Option<&CustomDomain>,
        pending: Ceiling,
        event: &AuditEvent,
    ) -> StoreResult<Result<(), Option<CustomDomain>>>;
    /// Takes `order` when `admits(the customer's new orders since order.customer_since, the
    /// account's orders since order.account_since)` says the budget has room: counted and
    /// recorded in one transaction, which every other replica's waits for, so that orders at
    /// once never pass the budget together. `false`: the budget is spent, nothing recorded.
    /// Orders before `account_since` are forgotten.
    fn take_acme_order(
        &self,
        order: &AcmeOrder<'_>,
        admits: &dyn Fn(usize, usize) -> bool,
    ) -> StoreResult<bool>;
    /// Records that `proven` (its TXT record found, now issuing) holds its name, and turns every
    /// other service's claim of the name failed with `taken`; `false`, nothing written, when
    /// another service holds the name already or the service's domain is no longer `was`, the
    /// claim as the worker looked it up (as [`DomainStore::update_domain`] says).
    fn hold_domain(
        &self,
        was: &CustomDomain,
        proven: &CustomDomain,
        taken: &DomainProblem,
    ) -> StoreResult<bool>;
    /// Removes the service's domain, its certificate, its challenges and its fetch evidence,
    /// when it is still `was` (`None`: whatever it is); `false`, nothing removed, when it has
    /// none or another.
    fn delete_domain(
        &self,
        service_id: Uuid,
        was: Option<&CustomDomain>,
        event: &AuditEvent,
    ) -> StoreResult<bool>;
    /// Records the worker's step on a domain (no audit event) from `was`, the domain as the
    /// worker read it, to `next`, unless the service's domain is no longer `was` (the same
    /// name, status, TXT token, next attempt to the millisecond and attempt count): another
    /// replica's step, or its owner's PUT or DELETE, came first, and a step decided on what was
    /// read before it never undoes it. `false` then, nothing written. A step written releases
    /// the domain's ordering lock ([`DomainStore::lock_domain`]): only its holder writes a
    /// held domain's step, and once it has, the order is over (a failed order's retry waits
    /// for its own time, not for the lock's end).
    fn update_domain(&self, was: &CustomDomain, next: &CustomDomain) -> StoreResult<bool>;
    /// Every domain held (proven: issuing, or active): what a replica loads at start (it serves
    /// the active ones with their certificate, and answers HTTP-01 for the ones ordering).
    fn held_domains(&self) -> StoreResult<Vec<CustomDomain>>;
    /// Up to `limit` domains with `work` to do at `now`, as the primary has them (a step
    /// decided on a lagging copy would be refused): orders with renewals first, then each kind
    /// most overdue first.
    fn domains_due(
        &self,
        now: OffsetDateTime,
        work: DomainWork,
        limit: usize,
    ) -> StoreResult<Vec<CustomDomain>>;
    /// Takes the ordering lock of the domain `was` (as the worker read it) until `until`, when
    /// nobody holds it at `now` and the domain is still `was` ([`DomainStore::update_domain`]):
    /// one replica orders for a domain at a time, and never on a copy another step made stale
    /// (an order placed on it would be thrown away, its budget spent).
    fn lock_domain(
        &self,
        was: &CustomDomain,
        until: OffsetDateTime,
        now: OffsetDateTime,
    ) -> StoreResult<bool>;
    /// Keeps an HTTP-01 challenge's answer for `domain`, for every replica to serve.
    fn put_challenge(
        &self,
        domain: &str,
        token: &str,
        key_authorization: &str,
        now: OffsetDateTime,
    ) -> StoreResult<()>;
    /// The challenges kept for `domain` (token, answer), the newest first, at most
    /// [`crate::custom_domain::MAX_CHALLENGES_READ`]: a replica reads them all at once, so that
    /// one read answers every token an ACME server asks for (docs/api.md, "Custom domains").
    fn challenges(&self, domain: &str) -> StoreResult<Vec<(String, String)>>;
    /// The ACME account of `directory` (its credentials, sealed), if one was made.
    fn acme_account(&self, directory: &str) -> StoreResult<Option<String>>;
    /// Keeps the ACME account of `directory`, unless one is kept already (another replica made
    /// one first): the one kept, which the caller then uses.
    fn put_acme_account(&self, directory: &str, sealed: &str) -> StoreResult<String>;
}

/// An HTTP-01 challenge of an ACME order: `GET /.well-known/acme-challenge/{token}` on the
/// domain, on port 80, answers `key_authorization`.
#[derive(Clone, PartialEq, Eq)]
pub struct AcmeChallenge {
    /// The token, the last path segment.
    pub token: String,
    /// The body to answer.
    pub key_authorization: String,
}

impl std::fmt::Debug for AcmeChallenge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcmeChallenge")
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

/// A certificate as a certificate authority issued it, with its new private key.
#[derive(Clone, PartialEq, Eq)]
pub struct IssuedCertificate {
    /// The chain, leaf first (PEM).
    pub chain_pem: String,
    /// The leaf's private key (PKCS#8 PEM), for [`Sealing::seal`] at once.
    pub key_pem: String,
    /// The leaf's first valid instant.
    pub not_before: OffsetDateTime,
    /// The leaf's last valid instant.
    pub not_after: OffsetDateTime,
    /// The issuer's distinguished name (RFC 4514 text).
    pub issuer: String,
}

impl std::fmt::Debug for IssuedCertificate {
    // Never the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuedCertificate")
            .field("not_after", &self.not_after)
            .field("issuer", &self.issuer)
            .finish_non_exhaustive()
    }
}

/// The certificate authority of custom domains (docs/api.md, "Custom domains"): an ACME directory
/// with HTTP-01. Synchronous, like storage: the worker's step runs where waiting is allowed.
/// `Err` is the sentence a domain's `error.message` shows.
pub trait CertificateAuthority: Send + Sync {
    /// The directory orders go to (one account each).
    fn directory(&self) -> &str;
    /// A new account: its credentials, for the caller to keep (sealed) and use.
    fn new_account(&self) -> Result<String, String>;
    /// A certificate for `domain`, ordered under the account whose credentials are `account`:
    /// each HTTP-01 challenge goes to `publish` (which makes every replica answer it) before the
    /// authority is told to validate; the certificate comes with a new key.
    fn order(
        &self,
        account: &str,
        domain: &str,
        publish: &mut dyn FnMut(&AcmeChallenge) -> Result<(), String>,
    ) -> Result<IssuedCertificate, String>;
}

/// The proof of a custom domain's ownership: its TXT record, looked up in DNS, never cached.
pub trait OwnershipCheck: Send + Sync {
    /// Whether a TXT record of `name` holds `token`; `Err` the sentence of a failed lookup (not
    /// an absent record: that is `Ok(false)`).
    fn holds(&self, name: &str, token: &str) -> Result<bool, String>;
}

/// What is stored sealed under `REGISTRY_DATA_KEY`: ACME accounts and certificates' keys.
pub trait Sealing: Send + Sync {
    /// `plain`, sealed (text to store).
    fn seal(&self, plain: &[u8]) -> String;
    /// What `sealed` holds; `Err` when it does not open under this key.
    fn open(&self, sealed: &str) -> Result<Vec<u8>, String>;
}

/// The keys of managed signing (docs/api.md, "Managed signing"): made here, their private half
/// sealed under the data key at once, so that it never reaches the domain nor storage in clear.
/// Synchronous and CPU-bound, and never waits: an ES256 signature (tens of microseconds, a key's
/// first use opening it once) is made where the request is served, the rest where waiting is
/// allowed.
pub trait ManagedKeys: Send + Sync {
    /// A new key pair of `algorithm` (P-256 for ES256, a 2048-bit modulus for RS256): its public
    /// JWK and DER, its private key sealed.
    fn make(&self, algorithm: crate::signing::Algorithm)
        -> Result<crate::signing::MadeKey, String>;
    /// The JWS signature of `message` (the header and the claims, as a JWT joins them) with the
    /// sealed key `kid` of `algorithm`: ES256's is `R || S`, 64 bytes. The adapter may keep the
    /// opened key in memory, by `kid`.
    fn sign(
        &self,
        kid: &str,
        algorithm: crate::signing::Algorithm,
        sealed: &str,
        message: &[u8],
    ) -> Result<Vec<u8>, SignFailure>;
    /// Whether the sealed key `kid` opens here (not under another data key): checked before a
    /// key is made beside it, so that every key of a service opens on the same replicas.
    fn opens(&self, kid: &str, sealed: &str) -> Result<(), SignFailure>;
}

/// Why a managed key did not sign.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignFailure {
    /// Its sealed private key does not open here: sealed under another data key than this
    /// registry's (a replica started with another `REGISTRY_DATA_KEY`), or altered.
    Sealed(String),
    /// Anything else (the cryptographic library's error).
    Failed(String),
}

/// Managed signing's state (docs/api.md, "Managed signing"): one row per service that turned it
/// on, its settings and keys (each private key sealed), and when the rotation step is due.
pub trait SigningStore: Send + Sync {
    /// The service's managed signing, if it was turned on and has keys left; as the primary
    /// has it (a signature follows every change at once).
    fn signing(&self, service_id: Uuid) -> StoreResult<Option<crate::signing::Signing>>;
    /// The managed signing of one service other than `besides` that holds a key, any of them
    /// (among the first few read), if some other service has one: its keys tell whether this
    /// replica's data key is the one the others seal under, before it makes a service's first
    /// key.
    fn other_signing(&self, besides: Uuid) -> StoreResult<Option<crate::signing::Signing>>;
    /// Changes the service's signing and, with it, its published configuration, in one
    /// transaction: `change` gets both as stored and answers what to write (`None`: nothing).
    /// The configuration's change is logged for the replicas; `event` (none for a step that only
    /// moves the due time) is recorded when something was written. The row is locked for the
    /// transaction: replicas racing for one rotation write it once. `NotFound` when the service
    /// is gone.
    fn update_signing(
        &self,
        service_id: Uuid,
        change: &mut dyn FnMut(
            Option<crate::signing::Signing>,
            Option<PublishedConfig>,
        ) -> Option<SigningChange>,
        event: Option<&AuditEvent>,
    ) -> StoreResult<bool>;
    /// Records a signature by `kid` at `at` (no audit event, no change log: no cache holds it).
    /// `false`: the service holds no key `kid` any more (withdrawn since the signature was
    /// made), so the signature must not be handed out.
    fn record_signature(
        &self,
        service_id: Uuid,
        kid: &str,
        at: OffsetDateTime,
    ) -> StoreResult<bool>;
    /// Puts the next step of `service_id` off until `until`, if it is due at `now` (after a
    /// failed step), without reading or writing its state (which may be what failed).
    fn postpone_signing(
        &self,
        service_id: Uuid,
        until: OffsetDateTime,
        now: OffsetDateTime,
    ) -> StoreResult<()>;
    /// Up to `limit` services whose rotation step is due at `now`, most overdue first.
    fn signing_due(&self, now: OffsetDateTime, limit: usize) -> StoreResult<Vec<Uuid>>;
}

/// What one change of managed signing writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SigningChange {
    /// The signing after the change; `None` removes it (no key left).
    pub signing: Option<crate::signing::Signing>,
    /// When its rotation step is due next.
    pub due_at: Option<OffsetDateTime>,
    /// What becomes of the published configuration (its managed keys).
    pub config: ConfigChange,
}

/// What a change of managed signing does to the service's published configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigChange {
    /// It stays as it is.
    Keep,
    /// It is written: the key set changed.
    Write(PublishedConfig),
    /// It is removed: the last managed key left and no other key is published (nothing
    /// uploaded, no removed source's key still retained), so nothing is published any more
    /// (`published: false`, the documents 404). The time of the removal, which the next
    /// version counts as the change before it (as `ServiceStore::delete_config`'s).
    Remove(OffsetDateTime),
}

/// A purge under way: whether every cache dropped its copies.
pub type Purging<'a> = std::pin::Pin<Box<dyn Future<Output = bool> + Send + 'a>>;

/// The caches in front of the registry (docs/api.md, "Behind a CDN"). Asynchronous, like the
/// verifier of identity tokens: a purge retries for up to a minute, and holds no thread
/// meanwhile.
pub trait CachePurger: Send + Sync + std::fmt::Debug {
    /// Drops every cache's copies of `paths` under each host of `authorities` (each retried
    /// with backoff, none waiting for another); whether every cache dropped every one.
    fn purge<'a>(&'a self, authorities: &'a [String], paths: &'a [&'a str]) -> Purging<'a>;
}

/// What a replica reads to keep its caches as fresh as the database (docs/api.md, "Consistency"):
/// the change log, and the rows a change names. Reads only: a replica writes nothing, the use
/// cases do. Every adapter of the storage ports has it.
pub trait ReplicaSource: Send + Sync + std::fmt::Debug {
    /// See [`CredentialStore::credential_and_latest_change`].
    fn credential_and_latest_change(
        &self,
        lookup_id: &str,
    ) -> StoreResult<Option<(StoredCredential, i64)>>;
    /// See [`ChangeFeed::changes_since`].
    fn changes_since(&self, after: i64, limit: usize) -> StoreResult<(i64, Vec<Change>)>;
    /// See [`ChangeFeed::latest_change`].
    fn latest_change(&self) -> StoreResult<i64>;
    /// See [`ChangeFeed::oldest_change`].
    fn oldest_change(&self) -> StoreResult<Option<i64>>;
    /// See [`AccountStore::account`].
    fn account(&self, id: Uuid) -> StoreResult<Option<ServiceAccount>>;
    /// See [`AccountStore::oidc_accounts`].
    fn oidc_accounts(&self) -> StoreResult<Vec<ServiceAccount>>;
    /// See [`ServiceStore::service`].
    fn service(&self, id: Uuid) -> StoreResult<Option<Service>>;
    /// See [`ServiceStore::find_service`].
    fn find_service(&self, subdomain_or_id: &str) -> StoreResult<Option<Service>>;
    /// See [`ServiceStore::config`].
    fn config(&self, service_id: Uuid) -> StoreResult<Option<PublishedConfig>>;
    /// See [`ServiceStore::published_by_subdomain`].
    fn published_by_subdomain(&self, subdomain: &str) -> StoreResult<Option<Publication>>;
    /// See [`DomainStore::domain_of`].
    fn domain_of(&self, service_id: Uuid) -> StoreResult<Option<CustomDomain>>;
    /// See [`DomainStore::held_domains`].
    fn held_domains(&self) -> StoreResult<Vec<CustomDomain>>;
}

impl<T: Storage> ReplicaSource for T {
    fn credential_and_latest_change(
        &self,
        lookup_id: &str,
    ) -> StoreResult<Option<(StoredCredential, i64)>> {
        CredentialStore::credential_and_latest_change(self, lookup_id)
    }
    fn changes_since(&self, after: i64, limit: usize) -> StoreResult<(i64, Vec<Change>)> {
        ChangeFeed::changes_since(self, after, limit)
    }
    fn latest_change(&self) -> StoreResult<i64> {
        ChangeFeed::latest_change(self)
    }
    fn oldest_change(&self) -> StoreResult<Option<i64>> {
        ChangeFeed::oldest_change(self)
    }
    fn account(&self, id: Uuid) -> StoreResult<Option<ServiceAccount>> {
        AccountStore::account(self, id)
    }
    fn oidc_accounts(&self) -> StoreResult<Vec<ServiceAccount>> {
        AccountStore::oidc_accounts(self)
    }
    fn service(&self, id: Uuid) -> StoreResult<Option<Service>> {
        ServiceStore::service(self, id)
    }
    fn find_service(&self, subdomain_or_id: &str) -> StoreResult<Option<Service>> {
        ServiceStore::find_service(self, subdomain_or_id)
    }
    fn config(&self, service_id: Uuid) -> StoreResult<Option<PublishedConfig>> {
        ServiceStore::config(self, service_id)
    }
    fn published_by_subdomain(&self, subdomain: &str) -> StoreResult<Option<Publication>> {
        ServiceStore::published_by_subdomain(self, subdomain)
    }
    fn domain_of(&self, service_id: Uuid) -> StoreResult<Option<CustomDomain>> {
        DomainStore::domain_of(self, service_id)
    }
    fn held_domains(&self) -> StoreResult<Vec<CustomDomain>> {
        DomainStore::held_domains(self)
    }
}

/// Events one replica's rate limit let through for one key, to add to the shared counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateEvents {
    /// The limit's name (`writes`, `explain`, `sign`, `anonymous`, `secret-failures`).
    pub limit: String,
    /// What the limit counts by: a credential, a customer, an address, a lookup id.
    pub key: String,
    /// How many.
    pub events: u64,
    /// The clock minute they were let through in ([`rate_minute`]): events held back while
    /// the database was away keep their minute.
    pub minute: i64,
}

/// One replica's count of one limit's events for one key in one clock minute, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateCount {
    /// As [`RateEvents::limit`].
    pub limit: String,
    /// As [`RateEvents::key`].
    pub key: String,
    /// The replica that counted them.
    pub replica: Uuid,
    /// The minute (its start, in milliseconds since the epoch, by that replica's clock).
    pub minute: i64,
    /// Its events in that minute so far: a count only grows.
    pub events: u64,
    /// When it last grew.
    pub written_at: OffsetDateTime,
}

/// The start of `at`'s clock minute, in milliseconds since the epoch: a [`RateCount`]'s bucket.
pub fn rate_minute(at: OffsetDateTime) -> i64 {
    let ms = at.unix_timestamp() * 1000;
    ms - ms.rem_euclid(60_000)
}

/// The rate limits' counts shared by the replicas (docs/api.md, "Limits"): each replica adds the
/// events it let through, and reads what the others let through, so that a credential or a
/// customer has one allowance however many replicas it calls.
pub trait RateCountLog: Send + Sync {
    /// Adds `added` to `replica`'s counts of their minutes (written at `now`), then reads the
    /// counts of every other replica last written at `since` or later.
    fn exchange_rate_counts(
        &self,
        replica: Uuid,
        added: &[RateEvents],
        now: OffsetDateTime,
        since: OffsetDateTime,
    ) -> StoreResult<Vec<RateCount>>;
    /// Forgets the counts last written before `before`; how many.
    fn prune_rate_counts(&self, before: OffsetDateTime) -> StoreResult<usize>;
}

/// Every storage port at once: what a server holds (as `Arc<dyn Storage>`), so that it depends
/// on the ports, not on one adapter.
pub trait Storage:
    CustomerStore
    + ServiceStore
    + AccountStore
    + CredentialStore
    + ChangeFeed
    + AuditLog
    + RefusalLog
    + ActivityLog
    + FetchLog
    + ReadinessLog
    + PurgeLog
    + DomainStore
    + SigningStore
    + RateCountLog
    + std::fmt::Debug
{
}

impl<T> Storage for T where
    T: CustomerStore
        + ServiceStore
        + AccountStore
        + CredentialStore
        + ChangeFeed
        + AuditLog
        + RefusalLog
        + ActivityLog
        + FetchLog
        + ReadinessLog
        + PurgeLog
        + DomainStore
        + SigningStore
        + RateCountLog
        + std::fmt::Debug
{
}

/// A JWT whose signature has been verified (and its registered claims, unless a
/// [`TokenRejection`] carries it).
#[derive(Debug, Clone, PartialEq)]
pub struct VerifiedToken {
    /// The `iss` claim.
    pub issuer: String,
    /// Every claim of the payload.
    pub claims: serde_json::Map<String, serde_json::Value>,
}

/// Why a presented JWT was not accepted: the text goes to the server log, never to the client;
/// the code goes to the owner of the account, through explain (docs/api.md, "Explaining refusals").
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{detail}")]
pub struct TokenRejection {
    /// Which of the token checks failed.
    pub code: crate::policy::ReasonCode,
    /// What exactly, in a sentence.
    pub detail: String,
    /// The token, when its signature verified and only a registered claim refused it (its
    /// times, its audience): such a refusal goes to the refusal log.
    pub signed: Option<Box<VerifiedToken>>,
}

/// Where the keys of a token's issuer come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IssuerKeys<'a> {
    /// An issuer outside the registry: its keys are fetched from its discovery document.
    Fetched,
    /// An issuer this registry hosts, as its own data says: never fetched over HTTP.
    Hosted {
        /// The issuer the keys were looked up for; a token naming another is refused.
        issuer: &'a str,
        /// A tag that changes whenever `jwks` does (its ETag).
        version: &'a [u8],
        /// The key set document it publishes now (`{"keys": [...]}`).
        jwks: &'a [u8],
    },
    /// An issuer this registry hosts that publishes nothing now (deleted, withdrawn, expired).
    Withdrawn {
        /// The issuer.
        issuer: &'a str,
    },
}

/// What [`IdentityTokenVerifier::verify`] answers, later.
pub type Verification<'a> =
    std::pin::Pin<Box<dyn Future<Output = Result<VerifiedToken, TokenRejection>> + Send + 'a>>;

/// Verifies identity tokens (the key source port). Object-safe: the server holds an
/// `Arc<dyn IdentityTokenVerifier>`, and tests may give it another.
pub trait IdentityTokenVerifier: Send + Sync + std::fmt::Debug {
    /// The `iss` a token claims, read without verifying anything (`None` when the token is not
    /// a well-formed compact JWS with an accepted algorithm): callers refuse tokens of issuers
    /// no policy trusts before any key is fetched.
    fn unverified_issuer(&self, token: &str) -> Option<String>;

    /// The generation of the keys this verifier holds for `issuer`: it changes when the issuer
    /// withdraws its keys or drops one of them, and a verification of its tokens remembered
    /// under another generation is done again. A verifier that never drops keys answers 0.
    fn key_generation(&self, issuer: &str) -> u64 {
        let _ = issuer;
        0
    }

    /// Verifies `token` at `now` with the keys `keys` says: signature, algorithm rules, and the
    /// registered claims (see [`crate::claims`]).
    fn verify<'a>(
        &'a self,
        token: &'a str,
        keys: IssuerKeys<'a>,
        now: OffsetDateTime,
    ) -> Verification<'a>;
}
