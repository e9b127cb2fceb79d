//! In-memory adapters of the ports, for tests: a [`MemoryStore`] that keeps every storage
//! port's contract over plain collections, deterministic randomness ([`FixedRandomness`]), a
//! readable hasher ([`PlainHasher`]), a key import that accepts everything ([`AcceptAllKeys`]),
//! a signature check that reads the signature ([`GoodSignatures`]), and what custom domains reach
//! outside the process: a certificate authority ([`MemoryAuthority`]), DNS ([`MemoryDns`]) and
//! a sealing key ([`MarkSealing`]).
//!
//! The use cases' unit tests run over them. Other crates' tests get them from the cargo feature
//! `testing` (off by default: only test dev-dependencies enable it, never the server's build).
//! The integration suite holds [`MemoryStore`] and the real store (`registry-store`) to one
//! storage contract (`tests/integration/store/contract.rs`): the real store is the truth, and
//! the fake answers as it does, down to the millisecond its times are kept to, the order of its
//! lists and the conflicts its constraints raise.
//!
//! ```
//! use registry_domain::ports::{ChangeFeed, CustomerStore};
//! use registry_domain::testing::MemoryStore;
//!
//! let store = MemoryStore::default();
//! assert_eq!(store.latest_change().unwrap(), 0);
//! assert!(store.customers().unwrap().is_empty());
//! ```

use crate::audit::{Action, AuditEvent, AuditPage, AuditQuery, Cursor, Trail};
use crate::custom_domain::{CustomDomain, DomainProblem, DomainWork, CHALLENGE_KEPT};
use crate::network::Network;
use crate::policy::PolicyKind;
use crate::ports::{
    fetch_hour, AccountStore, AcmeChallenge, AcmeOrder, ActivityLog, AgentFetches, AgentHour,
    AuditLog, CachePurger, Ceiling, CertificateAuthority, Change, ChangeFeed, Clock, ConfigChange,
    CredentialOwner, CredentialRecord, CredentialStore, CustomerStore, Database, DatabaseSides,
    DocumentFetches, DomainStore, FetchLog, FetchedDocument, HasherBusy, IssuedCertificate,
    KeyImport, ManagedKeys, NetworkFetch, OthersCheck, OwnershipCheck, PoolUse, PurgeLog, Purging,
    Randomness, RateCount, RateCountLog, RateEvents, ReadinessLog, RefusalLog, Sealing,
    SecretHasher, SeenNetwork, ServiceStore, SignFailure, SigningChange, SigningStore, StoreResult,
    StoredCredential, Ticks, TokenSignatureCheck, VerifierCandidate, OTHER_AGENTS,
    STORED_AGENTS_PER_HOUR, STORED_AGENTS_PER_NETWORK, STORED_NETWORKS_PER_AGENT,
};
use crate::refusal::{is_near_record, KEPT_PER_ACCOUNT};
use crate::service::{DocumentDates, Publication, PublishedConfig, VersionHistory};
use crate::signing::Signing;
use crate::{Customer, Plan, Service, ServiceAccount, StoreError};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use time::OffsetDateTime;
use uuid::Uuid;

/// Every storage port over collections behind one mutex: each call is one transaction, which
/// checks everything before it changes anything (a failed call leaves no trace, as a rolled
/// back transaction leaves none).
///
/// What it keeps as the real store keeps it: times truncated toward the past to the millisecond,
/// subdomains in lower case, lists oldest first by creation time (then id), an account's last
/// use only through [`ActivityLog::record_use`], the rows a constraint would refuse refused with
/// the same [`StoreError`] (a taken id, tenant, subdomain or lookup id; a customer or account
/// that does not exist). One difference remains: the domain reads no clock, so a change of the
/// change log is dated by its audit event, where the real store dates it by the time of its
/// write ([`ChangeFeed::prune_changes`]).
#[derive(Debug, Default)]
pub struct MemoryStore {
    state: Mutex<State>,
    /// The [`Database`] side: reads "would wait" (not in place), the database "down".
    waits: AtomicBool,
    down: AtomicBool,
}

#[derive(Debug, Default)]
struct State {
    customers: Vec<Customer>,
    services: Vec<Service>,
    configs: BTreeMap<Uuid, PublishedConfig>,
    /// When each service's configuration was last deleted.
    configs_removed: BTreeMap<Uuid, OffsetDateTime>,
    /// When each subdomain a deleted service held was freed.
    subdomain_removals: BTreeMap<String, OffsetDateTime>,
    accounts: Vec<ServiceAccount>,
    credentials: HashMap<String, StoredCredential>,
    /// `(seq, change, when)`, oldest first.
    changes: Vec<(i64, Change, OffsetDateTime)>,
    /// Every audit event, in commit order.
    events: Vec<AuditEvent>,
    /// In the order recorded.
    refusals: Vec<Refused>,
    /// One bucket per service, document and hour.
    fetches: BTreeMap<(Uuid, FetchedDocument, i64), FetchBucket>,
    key_safe: BTreeMap<(Uuid, String), OffsetDateTime>,
    purges: BTreeMap<Uuid, OffsetDateTime>,
    /// The ACME orders placed: directory, customer, renewal, when.
    acme_orders: Vec<(String, Option<Uuid>, bool, OffsetDateTime)>,
    /// By service, with the ordering lock's end.
    domains: BTreeMap<Uuid, (CustomDomain, Option<OffsetDateTime>)>,
    /// `(domain, token)` → key authorization.
    challenges: BTreeMap<(String, String), (String, OffsetDateTime)>,
    acme_accounts: BTreeMap<String, String>,
    /// Managed signing by service, with when its step is due.
    signing: BTreeMap<Uuid, (Signing, Option<OffsetDateTime>)>,
    /// The rate limits' counts: `(limit, key, replica, minute)` → events, last written.
    rate_counts: BTreeMap<(String, String, Uuid, i64), (u64, OffsetDateTime)>,
}

#[derive(Debug)]
struct Refused {
    account: Uuid,
    at: OffsetDateTime,
    near: bool,
    record: Value,
}

/// The counts of one service's document in one hour, summed over every flush.
#[derive(Debug)]
struct FetchBucket {
    ok: u64,
    not_modified: u64,
    last_at: OffsetDateTime,
    /// Per agent: how many, the last one, and the last one from each network.
    agents: BTreeMap<String, AgentBucket>,
}

/// One agent's fetches of one document in one hour.
#[derive(Debug)]
struct AgentBucket {
    count: u64,
    last_at: OffsetDateTime,
    networks: BTreeMap<Network, OffsetDateTime>,
}

/// `t` as the store keeps it: unix milliseconds, truncated toward the past.
fn ms(t: OffsetDateTime) -> OffsetDateTime {
    let nanos = t.unix_timestamp_nanos();
    OffsetDateTime::from_unix_timestamp_nanos(nanos - nanos.rem_euclid(1_000_000)).unwrap_or(t)
}

fn stored_customer(customer: &Customer) -> Customer {
    Customer {
        created_at: ms(customer.created_at),
        ..customer.clone()
    }
}

fn stored_service(service: &Service) -> Service {
    Service {
        subdomain: service.subdomain.to_ascii_lowercase(),
        created_at: ms(service.created_at),
        expires_at: service.expires_at.map(ms),
        ..service.clone()
    }
}

/// An account as created: its last use is written only by `record_use`.
fn stored_account(account: &ServiceAccount) -> ServiceAccount {
    ServiceAccount {
        created_at: ms(account.created_at),
        last_used_at: None,
        ..account.clone()
    }
}

fn stored_config(config: PublishedConfig) -> PublishedConfig {
    PublishedConfig {
        updated_at: ms(config.updated_at),
        previous_change_at: config.previous_change_at.map(ms),
        dates: DocumentDates {
            discovery: config.dates.discovery.map(ms),
            jwks: config.dates.jwks.map(ms),
        },
        ..config
    }
}

fn stored_event(event: &AuditEvent) -> AuditEvent {
    AuditEvent {
        at: ms(event.at),
        ..event.clone()
    }
}

impl State {
    /// A change made: its audit event and its rows of the change log.
    fn commit(&mut self, event: &AuditEvent, changes: &[Change]) {
        self.events.push(stored_event(event));
        self.log(changes, event.at);
    }

    /// Rows of the change log without an event (a customer deleted), at `at`.
    fn log(&mut self, changes: &[Change], at: OffsetDateTime) {
        for change in changes {
            let seq = self.changes.last().map_or(0, |(seq, _, _)| *seq) + 1;
            self.changes.push((seq, *change, ms(at)));
        }
    }

    fn customer_exists(&self, id: Uuid) -> bool {
        self.customers.iter().any(|c| c.id == id)
    }

    /// Whether `customer` is disabled: the reads that serve requests leave out what it holds.
    fn disabled(&self, customer: Option<Uuid>) -> bool {
        customer.is_some_and(|id| {
            self.customers
                .iter()
                .any(|c| c.id == id && c.disabled_at.is_some())
        })
    }

    /// Every service and account of `customer`, as changes.
    fn holdings(&self, customer: Uuid) -> Vec<Change> {
        let services = self
            .services
            .iter()
            .filter(|x| x.customer_id == Some(customer));
        let accounts = self.accounts.iter().filter(|a| a.customer_id == customer);
        services
            .map(|x| Change::Service(x.id))
            .chain(accounts.map(|a| Change::Account(a.id)))
            .collect()
    }

    fn service_exists(&self, id: Uuid) -> bool {
        self.services.iter().any(|s| s.id == id)
    }

    /// What a write of `id`'s configuration replaces, as the real store reads it.
    fn history(&self, id: Uuid) -> Option<VersionHistory> {
        match self.configs.get(&id) {
            Some(current) => Some(VersionHistory::of(current)),
            None => self
                .configs_removed
                .get(&id)
                .copied()
                .map(VersionHistory::removed),
        }
    }

    /// Deletes `id`'s configuration at `at`.
    fn remove_config(&mut self, id: Uuid, at: OffsetDateTime) {
        self.configs.remove(&id);
        self.configs_removed.insert(id, at);
    }

    fn account_exists(&self, id: Uuid) -> bool {
        self.accounts.iter().any(|a| a.id == id)
    }

    /// The account `id`, unless its customer is disabled (as the store reads it).
    fn enabled_account(&self, id: Uuid) -> Option<&ServiceAccount> {
        (self.accounts.iter()).find(|a| a.id == id && !self.disabled(Some(a.customer_id)))
    }

    /// Drops `service`'s fetch evidence under its custom domain (as the real store does when
    /// the domain goes or is replaced).
    fn forget_domain_fetches(&mut self, service: Uuid) {
        (self.fetches)
            .retain(|(id, document, _), _| *id != service || !document.is_custom_domain());
    }

    /// `Conflict` when the lookup id is taken, as the credentials' primary key refuses it.
    fn lookup_id_free(&self, record: &CredentialRecord) -> StoreResult<()> {
        if self.credentials.contains_key(&record.lookup_id) {
            return Err(StoreError::Conflict("credential lookup id taken".into()));
        }
        Ok(())
    }

    /// Runs `others` (when given) on the other federated accounts of `account`'s customer, as
    /// the real store does in the write's transaction.
    fn check_others(&self, account: &ServiceAccount, others: OthersCheck<'_>) -> StoreResult<()> {
        let Some(check) = others else {
            return Ok(());
        };
        let theirs: Vec<ServiceAccount> = (self.accounts.iter())
            .filter(|a| a.customer_id == account.customer_id && a.id != account.id)
            .filter(|a| a.policy.kind() == crate::policy::PolicyKind::Oidc)
            .cloned()
            .collect();
        check(&theirs).map_err(StoreError::OverBudget)
    }

    /// The checks of inserting `account` (with `token`), in the order the database makes them.
    fn account_insertable(
        &self,
        account: &ServiceAccount,
        token: Option<&CredentialRecord>,
        customer_created: Option<Uuid>,
    ) -> StoreResult<()> {
        if self.account_exists(account.id) {
            return Err(StoreError::Conflict("service account id taken".into()));
        }
        let customer = account.customer_id;
        if !self.customer_exists(customer) && customer_created != Some(customer) {
            return Err(StoreError::NotFound);
        }
        token.map_or(Ok(()), |t| self.lookup_id_free(t))
    }

    fn add_credential(&mut self, record: &CredentialRecord, owner: CredentialOwner) {
        let stored = StoredCredential {
            owner,
            hash: record.hash.clone(),
        };
        self.credentials.insert(record.lookup_id.clone(), stored);
    }

    fn token_of(&self, account: Uuid) -> Option<String> {
        self.credentials
            .iter()
            .find(|(_, c)| c.owner == CredentialOwner::Account(account))
            .map(|(lookup_id, _)| lookup_id.clone())
    }

    fn remove_credentials_of(&mut self, owner: CredentialOwner) {
        self.credentials.retain(|_, c| c.owner != owner);
    }

    fn sorted_accounts(&self, keep: impl Fn(&ServiceAccount) -> bool) -> Vec<ServiceAccount> {
        let mut accounts: Vec<ServiceAccount> =
            self.accounts.iter().filter(|a| keep(a)).cloned().collect();
        // Oldest first, then by id: the order of the real store's lists.
        accounts.sort_by_key(|a| (a.created_at, a.id));
        accounts
    }

    fn live_anonymous_at(&self, now: OffsetDateTime) -> u64 {
        let now = ms(now);
        let live = self
            .services
            .iter()
            .filter(|x| x.customer_id.is_none() && x.expires_at.is_some_and(|at| at > now));
        live.count() as u64
    }
}

impl MemoryStore {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every audit event stored, oldest first.
    pub fn events(&self) -> Vec<AuditEvent> {
        self.lock().events.clone()
    }

    /// The newest audit event stored.
    pub fn last_event(&self) -> Option<AuditEvent> {
        self.lock().events.last().cloned()
    }

    /// The stored events of `action`, oldest first.
    pub fn events_of(&self, action: Action) -> Vec<AuditEvent> {
        let state = self.lock();
        state
            .events
            .iter()
            .filter(|e| e.action == action)
            .cloned()
            .collect()
    }
}

impl CustomerStore for MemoryStore {
    fn create_customer(
        &self,
        customer: &Customer,
        first_account: &ServiceAccount,
        token: &CredentialRecord,
        event: &AuditEvent,
    ) -> StoreResult<()> {
        let mut s = self.lock();
        if s.customer_exists(customer.id) {
            return Err(StoreError::Conflict("customer id taken".into()));
        }
        if s.customers.iter().any(|c| c.tenant == customer.tenant) {
            return Err(StoreError::Conflict("tenant suffix taken".into()));
        }
        s.account_insertable(first_account, Some(token), Some(customer.id))?;
        s.customers.push(stored_customer(customer));
        s.accounts.push(stored_account(first_account));
        s.add_credential(token, CredentialOwner::Account(first_account.id));
        s.commit(event, &[Change::Account(first_account.id)]);
        Ok(())
    }

    fn customer(&self, id: Uuid) -> StoreResult<Option<Customer>> {
        Ok(self.lock().customers.iter().find(|c| c.id == id).cloned())
    }

    fn customer_by_tenant(&self, tenant: &str) -> StoreResult<Option<Customer>> {
        let s = self.lock();
        Ok(s.customers.iter().find(|c| c.tenant == tenant).cloned())
    }

    fn customers(&self) -> StoreResult<Vec<Customer>> {
        let mut customers = self.lock().customers.clone();
        customers.sort_by_key(|c| (c.created_at, c.id));
        Ok(customers)
    }

    /// A plan is no change of the change log (no cache holds it); its event is stored only
    /// when the plan was another one.
    fn set_plan(
        &self,
        tenant: &str,
        plan: Plan,
        event: &AuditEvent,
    ) -> StoreResult<Option<Customer>> {
        let mut s = self.lock();
        let Some(customer) = s.customers.iter_mut().find(|c| c.tenant == tenant) else {
            return Ok(None);
        };
        if customer.plan == plan {
            return Ok(Some(customer.clone()));
        }
        customer.plan = plan;
        let customer = customer.clone();
        s.commit(event, &[]);
        Ok(Some(customer))
    }

    fn set_disabled(
        &self,
        tenant: &str,
        disabled_at: Option<OffsetDateTime>,
        event: &AuditEvent,
    ) -> StoreResult<Option<Customer>> {
        let mut s = self.lock();
        let Some(customer) = s.customers.iter_mut().find(|c| c.tenant == tenant) else {
            return Ok(None);
        };
        if customer.disabled_at.is_some() == disabled_at.is_some() {
            return Ok(Some(customer.clone()));
        }
        customer.disabled_at = disabled_at.map(ms);
        let customer = customer.clone();
        let changes = s.holdings(customer.id);
        s.commit(event, &changes);
        Ok(Some(customer))
    }

    fn delete_customer(&self, tenant: &str, at: OffsetDateTime) -> StoreResult<bool> {
        let mut s = self.lock();
        let Some(id) = s
            .customers
            .iter()
            .find(|c| c.tenant == tenant)
            .map(|c| c.id)
        else {
            return Ok(false);
        };
        let changes = s.holdings(id);
        let (services, freed): (Vec<Uuid>, Vec<String>) = s
            .services
            .iter()
            .filter(|x| x.customer_id == Some(id))
            .map(|x| (x.id, x.subdomain.clone()))
            .unzip();
        let accounts: Vec<Uuid> = s
            .accounts
            .iter()
            .filter(|a| a.customer_id == id)
            .map(|a| a.id)
            .collect();
        for subdomain in freed {
            s.subdomain_removals.insert(subdomain, at);
        }
        for service in &services {
            s.configs.remove(service);
            s.configs_removed.remove(service);
            s.remove_credentials_of(CredentialOwner::AnonymousService(*service));
            if let Some((gone, _)) = s.domains.remove(service) {
                if gone.is_held() {
                    s.challenges.retain(|(d, _), _| *d != gone.domain);
                }
            }
        }
        for account in &accounts {
            s.remove_credentials_of(CredentialOwner::Account(*account));
        }
        s.services.retain(|x| x.customer_id != Some(id));
        s.accounts.retain(|a| a.customer_id != id);
        s.refusals.retain(|r| !accounts.contains(&r.account));
        s.fetches
            .retain(|(service, _, _), _| !services.contains(service));
        s.key_safe
            .retain(|(service, _), _| !services.contains(service));
        s.purges.retain(|service, _| !services.contains(service));
        s.events.retain(|e| e.customer_id != Some(id));
        s.customers.retain(|c| c.id != id);
        s.log(&changes, at);
        Ok(true)
    }
}

impl ServiceStore for MemoryStore {
    fn create_service(
        &self,
        service: &Service,
        secret: Option<&CredentialRecord>,
        ceiling: Ceiling,
        event: &AuditEvent,
    ) -> StoreResult<()> {
        let mut s = self.lock();
        let held = match service.customer_id {
            Some(customer) => s
                .services
                .iter()
                .filter(|x| x.customer_id == Some(customer))
                .count() as u64,
            None => s.live_anonymous_at(service.created_at),
        };
        if !ceiling.admits(held) {
            return Err(StoreError::CeilingReached(ceiling.0));
        }
        let stored = stored_service(service);
        if s.service_exists(service.id) {
            return Err(StoreError::Conflict("service id taken".into()));
        }
        if s.services.iter().any(|x| x.subdomain == stored.subdomain) {
            return Err(StoreError::Conflict("subdomain taken".into()));
        }
        if service.customer_id.is_some_and(|c| !s.customer_exists(c)) {
            return Err(StoreError::NotFound);
        }
        if let Some(secret) = secret {
            s.lookup_id_free(secret)?;
        }
        if let Some(at) = s.subdomain_removals.get(&stored.subdomain).copied() {
            s.configs_removed.insert(service.id, at);
        }
        s.services.push(stored);
        if let Some(secret) = secret {
            s.add_credential(secret, CredentialOwner::AnonymousService(service.id));
        }
        s.commit(event, &[Change::Service(service.id)]);
        Ok(())
    }

    /// An id is tried first; a subdomain that happens to read as a UUID is still found.
    fn find_service(&self, subdomain_or_id: &str) -> StoreResult<Option<Service>> {
        let s = self.lock();
        let served = |x: &&Service| !s.disabled(x.customer_id);
        let by_id = Uuid::parse_str(subdomain_or_id)
            .ok()
            .and_then(|id| s.services.iter().filter(served).find(|x| x.id == id));
        let lower = subdomain_or_id.to_ascii_lowercase();
        Ok(by_id
            .or_else(|| {
                s.services
                    .iter()
                    .filter(served)
                    .find(|x| x.subdomain == lower)
            })
            .cloned())
    }

    fn service(&self, id: Uuid) -> StoreResult<Option<Service>> {
        let s = self.lock();
        Ok(s.services
            .iter()
            .find(|x| x.id == id && !s.disabled(x.customer_id))
            .cloned())
    }

    fn services_of(&self, customer_id: Uuid) -> StoreResult<Vec<Service>> {
        let s = self.lock();
        let mut services: Vec<Service> = s
            .services
            .iter()
            .filter(|x| x.customer_id == Some(customer_id))
            .cloned()
            .collect();
        services.sort_by_key(|x| (x.created_at, x.id));
        Ok(services)
    }

    fn count_services_of(&self, customer_id: Uuid) -> StoreResult<u64> {
        Ok(self.services_of(customer_id)?.len() as u64)
    }

    /// The entries of `subdomains` as given (first occurrence, input order) whose lower-case
    /// form names a service of the customer.
    fn owned_subdomains(
        &self,
        customer_id: Uuid,
        subdomains: &[String],
    ) -> StoreResult<Vec<String>> {
        let owned = self.services_of(customer_id)?;
        let mut found: Vec<String> = Vec::new();
        for wanted in subdomains {
            let lower = wanted.to_ascii_lowercase();
            if owned.iter().any(|x| x.subdomain == lower) && !found.contains(wanted) {
                found.push(wanted.clone());
            }
        }
        Ok(found)
    }

    fn update_service(
        &self,
        before: &Service,
        service: &Service,
        event: &AuditEvent,
    ) -> StoreResult<Result<(), Service>> {
        let mut s = self.lock();
        let stored = s
            .services
            .iter_mut()
            .find(|x| x.id == service.id)
            .ok_or(StoreError::NotFound)?;
        if (&stored.title, &stored.description) != (&before.title, &before.description) {
            return Ok(Err(stored.clone()));
        }
        if (&stored.title, &stored.description) == (&service.title, &service.description) {
            return Ok(Ok(()));
        }
        stored.title.clone_from(&service.title);
        stored.description.clone_from(&service.description);
        s.commit(event, &[Change::Service(service.id)]);
        Ok(Ok(()))
    }

    fn delete_service(&self, id: Uuid, event: &AuditEvent) -> StoreResult<bool> {
        let mut s = self.lock();
        if !s.service_exists(id) {
            return Ok(false);
        }
        if let Some(gone) = (s.services.iter()).find(|x| x.id == id && x.customer_id.is_some()) {
            let subdomain = gone.subdomain.clone();
            s.subdomain_removals.insert(subdomain, event.at);
        }
        s.services.retain(|x| x.id != id);
        s.configs.remove(&id);
        s.configs_removed.remove(&id);
        s.signing.remove(&id);
        s.purges.remove(&id);
        if let Some((gone, _)) = s.domains.remove(&id).filter(|(d, _)| d.is_held()) {
            s.challenges.retain(|(domain, _), _| *domain != gone.domain);
        }
        s.remove_credentials_of(CredentialOwner::AnonymousService(id));
        s.commit(event, &[Change::Service(id)]);
        Ok(true)
    }

    fn expired_anonymous(&self, now: OffsetDateTime, limit: usize) -> StoreResult<Vec<Service>> {
        let now = ms(now);
        let s = self.lock();
        let mut expired: Vec<Service> = s
            .services
            .iter()
            .filter(|x| x.customer_id.is_none() && x.expires_at.is_some_and(|at| at <= now))
            .cloned()
            .collect();
        expired.sort_by_key(|x| x.expires_at);
        expired.truncate(limit);
        Ok(expired)
    }

    fn next_anonymous_expiry(
        &self,
        after: OffsetDateTime,
        until: OffsetDateTime,
    ) -> StoreResult<Option<OffsetDateTime>> {
        let (after, until) = (ms(after), ms(until));
        let s = self.lock();
        let expiries = (s.services.iter()).filter(|x| x.customer_id.is_none());
        Ok((expiries.filter_map(|x| x.expires_at))
            .filter(|at| after < *at && *at <= until)
            .min())
    }

    fn live_anonymous(&self, now: OffsetDateTime) -> StoreResult<u64> {
        Ok(self.lock().live_anonymous_at(now))
    }

    fn put_config(&self, config: &PublishedConfig, event: &AuditEvent) -> StoreResult<()> {
        let mut s = self.lock();
        if !s.service_exists(config.service_id) {
            return Err(StoreError::NotFound);
        }
        s.configs
            .insert(config.service_id, stored_config(config.clone()));
        s.commit(event, &[Change::Service(config.service_id)]);
        Ok(())
    }

    /// Dates the version written from the one it replaces, as the real store does. `make`
    /// runs under the store's lock: it must not call the store.
    fn update_config(
        &self,
        service_id: Uuid,
        make: &mut dyn FnMut(Option<PublishedConfig>) -> Option<PublishedConfig>,
        event: &AuditEvent,
    ) -> StoreResult<bool> {
        let mut s = self.lock();
        if !s.service_exists(service_id) {
            return Err(StoreError::NotFound);
        }
        let current = s.configs.get(&service_id).cloned();
        let history = s.history(service_id);
        let Some(config) = make(current) else {
            return Ok(false);
        };
        let config = VersionHistory::date(history.as_ref(), config);
        s.configs.insert(service_id, stored_config(config));
        s.commit(event, &[Change::Service(service_id)]);
        Ok(true)
    }

    /// Soonest expiry first.
    fn configs_with_expired_keys(
        &self,
        now: OffsetDateTime,
        limit: usize,
    ) -> StoreResult<Vec<Uuid>> {
        let now = ms(now);
        let s = self.lock();
        let mut due: Vec<(OffsetDateTime, Uuid)> = s
            .configs
            .values()
            .filter_map(|c| Some((ms(c.keys.next_expiry()?), c.service_id)))
            .filter(|(at, _)| *at <= now)
            .collect();
        due.sort();
        Ok(due.into_iter().take(limit).map(|(_, id)| id).collect())
    }

    fn config(&self, service_id: Uuid) -> StoreResult<Option<PublishedConfig>> {
        Ok(self.lock().configs.get(&service_id).cloned())
    }

    fn delete_config(
        &self,
        service_id: Uuid,
        keep: &dyn Fn(&PublishedConfig) -> bool,
        event: &AuditEvent,
    ) -> StoreResult<bool> {
        let mut s = self.lock();
        if s.configs.get(&service_id).is_none_or(keep) {
            return Ok(false);
        }
        s.remove_config(service_id, event.at);
        s.commit(event, &[Change::Service(service_id)]);
        Ok(true)
    }

    fn published_by_subdomain(&self, subdomain: &str) -> StoreResult<Option<Publication>> {
        let s = self.lock();
        let subdomain = subdomain.to_ascii_lowercase();
        Ok(s.services
            .iter()
            .filter(|x| x.subdomain == subdomain && !s.disabled(x.customer_id))
            .find_map(|x| Some(Publication::of(x, s.configs.get(&x.id)?.clone()))))
    }
}

impl AccountStore for MemoryStore {
    fn create_account(
        &self,
        account: &ServiceAccount,
        token: Option<&CredentialRecord>,
        ceiling: Ceiling,
        others: OthersCheck<'_>,
        event: &AuditEvent,
    ) -> StoreResult<()> {
        let mut s = self.lock();
        let held = s
            .accounts
            .iter()
            .filter(|a| a.customer_id == account.customer_id)
            .count();
        if !ceiling.admits(held as u64) {
            return Err(StoreError::CeilingReached(ceiling.0));
        }
        s.check_others(account, others)?;
        s.account_insertable(account, token, None)?;
        s.accounts.push(stored_account(account));
        if let Some(token) = token {
            s.add_credential(token, CredentialOwner::Account(account.id));
        }
        s.commit(event, &[Change::Account(account.id)]);
        Ok(())
    }

    fn account(&self, id: Uuid) -> StoreResult<Option<ServiceAccount>> {
        Ok(self.lock().enabled_account(id).cloned())
    }

    fn accounts_of(&self, customer_id: Uuid) -> StoreResult<Vec<ServiceAccount>> {
        Ok(self
            .lock()
            .sorted_accounts(|a| a.customer_id == customer_id))
    }

    fn count_accounts_of(&self, customer_id: Uuid) -> StoreResult<u64> {
        Ok(self.accounts_of(customer_id)?.len() as u64)
    }

    fn update_account(
        &self,
        before: &ServiceAccount,
        account: &ServiceAccount,
        others: OthersCheck<'_>,
        event: &AuditEvent,
    ) -> StoreResult<Result<(), ServiceAccount>> {
        let mut s = self.lock();
        let stored = s.enabled_account(account.id).ok_or(StoreError::NotFound)?;
        if stored.name != before.name || stored.policy.document() != before.policy.document() {
            return Ok(Err(stored.clone()));
        }
        if stored.name == account.name && stored.policy.document() == account.policy.document() {
            return Ok(Ok(()));
        }
        s.check_others(account, others)?;
        let stored = s
            .accounts
            .iter_mut()
            .find(|a| a.id == account.id)
            .ok_or(StoreError::NotFound)?;
        stored.name.clone_from(&account.name);
        stored.policy = account.policy.clone();
        s.commit(event, &[Change::Account(account.id)]);
        Ok(Ok(()))
    }

    /// Its token and its refusal log go with it.
    fn delete_account(&self, id: Uuid, event: &AuditEvent) -> StoreResult<bool> {
        let mut s = self.lock();
        if !s.account_exists(id) {
            return Ok(false);
        }
        s.accounts.retain(|a| a.id != id);
        s.remove_credentials_of(CredentialOwner::Account(id));
        s.refusals.retain(|r| r.account != id);
        s.commit(event, &[Change::Account(id)]);
        Ok(true)
    }

    fn token_lookup_id(&self, account_id: Uuid) -> StoreResult<Option<String>> {
        Ok(self.lock().token_of(account_id))
    }

    fn replace_token(
        &self,
        account: &ServiceAccount,
        replaced: Option<&str>,
        token: &CredentialRecord,
        event: &AuditEvent,
    ) -> StoreResult<Result<(), ServiceAccount>> {
        let account_id = account.id;
        let mut s = self.lock();
        let Some(stored) = s.enabled_account(account_id) else {
            return Err(StoreError::NotFound);
        };
        if stored.policy.document() != account.policy.document() {
            return Ok(Err(stored.clone()));
        }
        let current = s.token_of(account_id);
        if current.as_deref() != replaced {
            return Err(StoreError::Conflict(
                "the token was regenerated by another call meanwhile".into(),
            ));
        }
        // The old token goes first: the new one may reuse its lookup id, not another's.
        if current.as_deref() != Some(token.lookup_id.as_str()) {
            s.lookup_id_free(token)?;
        }
        s.remove_credentials_of(CredentialOwner::Account(account_id));
        s.add_credential(token, CredentialOwner::Account(account_id));
        s.commit(event, &[Change::Account(account_id)]);
        Ok(Ok(()))
    }

    fn accounts_by_issuer(&self, issuer: &str) -> StoreResult<Vec<ServiceAccount>> {
        let s = self.lock();
        Ok(s.sorted_accounts(|a| {
            a.policy.issuers().contains(&issuer) && !s.disabled(Some(a.customer_id))
        }))
    }

    fn oidc_accounts(&self) -> StoreResult<Vec<ServiceAccount>> {
        let s = self.lock();
        Ok(s.sorted_accounts(|a| {
            a.policy.kind() == PolicyKind::Oidc && !s.disabled(Some(a.customer_id))
        }))
    }
}

impl MemoryStore {
    /// From now on the reads taken in place answer that they would wait (`true`: the caller
    /// reads where waiting is allowed), as the real store does on PostgreSQL.
    pub fn set_waits(&self, waits: bool) {
        self.waits.store(waits, Ordering::Relaxed);
    }

    /// From now on [`Database::ping`] fails (`true`), or answers again.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::Relaxed);
    }
}

/// The operational side, in memory: reads in place answer at once (unless
/// [`MemoryStore::set_waits`]), one primary that answers (unless [`MemoryStore::set_down`]), no
/// pool.
impl Database for MemoryStore {
    fn credential_and_latest_change_now(
        &self,
        lookup_id: &str,
    ) -> Option<StoreResult<Option<(StoredCredential, i64)>>> {
        (!self.waits.load(Ordering::Relaxed))
            .then(|| CredentialStore::credential_and_latest_change(self, lookup_id))
    }

    fn latest_change_now(&self) -> Option<StoreResult<i64>> {
        (!self.waits.load(Ordering::Relaxed)).then(|| ChangeFeed::latest_change(self))
    }

    fn published_by_subdomain_now(
        &self,
        subdomain: &str,
    ) -> Option<StoreResult<Option<Publication>>> {
        (!self.waits.load(Ordering::Relaxed))
            .then(|| ServiceStore::published_by_subdomain(self, subdomain))
    }

    fn signing_now(&self, service_id: Uuid) -> Option<StoreResult<Option<Signing>>> {
        (!self.waits.load(Ordering::Relaxed)).then(|| SigningStore::signing(self, service_id))
    }

    fn ping(&self) -> StoreResult<()> {
        if self.down.load(Ordering::Relaxed) {
            return Err(StoreError::Unavailable(
                "the in-memory store is down".into(),
            ));
        }
        Ok(())
    }

    fn sides(&self) -> DatabaseSides {
        DatabaseSides {
            primary: self.ping().is_ok(),
            read_replica: None,
        }
    }

    fn pools(&self) -> Vec<PoolUse> {
        vec![PoolUse {
            side: "primary",
            in_use: 0,
            idle: 0,
        }]
    }
}

impl CredentialStore for MemoryStore {
    fn credential(&self, lookup_id: &str) -> StoreResult<Option<StoredCredential>> {
        Ok(self.lock().credentials.get(lookup_id).cloned())
    }

    fn credential_and_latest_change(
        &self,
        lookup_id: &str,
    ) -> StoreResult<Option<(StoredCredential, i64)>> {
        let s = self.lock();
        let latest = s.changes.last().map_or(0, |(seq, _, _)| *seq);
        Ok(s.credentials.get(lookup_id).map(|c| (c.clone(), latest)))
    }
}

impl ChangeFeed for MemoryStore {
    fn changes_since(&self, after: i64, limit: usize) -> StoreResult<(i64, Vec<Change>)> {
        let s = self.lock();
        let newer: Vec<_> = s
            .changes
            .iter()
            .filter(|(seq, _, _)| *seq > after)
            .take(limit)
            .collect();
        let last = newer.last().map_or(after, |(seq, _, _)| *seq);
        Ok((last, newer.into_iter().map(|(_, c, _)| *c).collect()))
    }

    fn latest_change(&self) -> StoreResult<i64> {
        Ok(self.lock().changes.last().map_or(0, |(seq, _, _)| *seq))
    }

    fn oldest_change(&self) -> StoreResult<Option<i64>> {
        Ok(self.lock().changes.first().map(|(seq, _, _)| *seq))
    }

    /// Changes are dated by their event (see [`MemoryStore`]).
    fn prune_changes(&self, older_than: OffsetDateTime) -> StoreResult<usize> {
        let older_than = ms(older_than);
        let mut s = self.lock();
        let latest = s.changes.last().map_or(0, |(seq, _, _)| *seq);
        let before = s.changes.len();
        s.changes
            .retain(|(seq, _, at)| *at >= older_than || *seq == latest);
        s.subdomain_removals.retain(|_, at| *at >= older_than);
        Ok(before - s.changes.len())
    }
}

impl AuditLog for MemoryStore {
    /// The trail newest first, after the cursor's event (`NotFound` when it is not in the
    /// trail), filtered by action and `since`; `next` names the page's last event when more
    /// follow.
    fn audit_events(&self, query: &AuditQuery) -> StoreResult<AuditPage> {
        let s = self.lock();
        let owner = match query.trail {
            Trail::Customer(id) => Some(id),
            Trail::Anonymous => None,
        };
        let trail: Vec<&AuditEvent> = s
            .events
            .iter()
            .rev()
            .filter(|e| e.customer_id == owner)
            .collect();
        let start = match query.cursor {
            None => 0,
            Some(cursor) => {
                trail
                    .iter()
                    .position(|e| e.id == cursor.after)
                    .ok_or(StoreError::NotFound)?
                    + 1
            }
        };
        let since = query.since.map(ms);
        let mut events: Vec<AuditEvent> = trail[start..]
            .iter()
            .filter(|e| query.action.is_none_or(|a| e.action == a))
            .filter(|e| since.is_none_or(|since| e.at >= since))
            .take(query.limit.saturating_add(1))
            .map(|e| (*e).clone())
            .collect();
        let more = events.len() > query.limit;
        events.truncate(query.limit);
        let next = more
            .then(|| events.last().map(|e| Cursor { after: e.id }))
            .flatten();
        Ok(AuditPage { events, next })
    }

    /// Events are written in time order: everything before the first event young enough to
    /// keep goes (as the real store prunes, in commit order).
    fn prune_audit(&self, older_than: OffsetDateTime) -> StoreResult<usize> {
        let older_than = ms(older_than);
        let mut s = self.lock();
        let first_kept = s
            .events
            .iter()
            .position(|e| e.at >= older_than)
            .unwrap_or(s.events.len());
        s.events.drain(..first_kept);
        Ok(first_kept)
    }
}

impl ActivityLog for MemoryStore {
    fn record_use(&self, account_id: Uuid, minute: OffsetDateTime) -> StoreResult<bool> {
        let minute = ms(minute);
        let mut s = self.lock();
        let Some(account) = s.accounts.iter_mut().find(|a| a.id == account_id) else {
            return Ok(false);
        };
        if account.last_used_at.is_some_and(|at| at >= minute) {
            return Ok(false);
        }
        account.last_used_at = Some(minute);
        Ok(true)
    }

    /// One transaction: an account that does not exist fails the whole call (`NotFound`).
    fn record_refusals(&self, records: &[(Uuid, Value)], at: OffsetDateTime) -> StoreResult<()> {
        let mut s = self.lock();
        if records
            .iter()
            .any(|(account, _)| !s.account_exists(*account))
        {
            return Err(StoreError::NotFound);
        }
        for (account, record) in records {
            let near = is_near_record(record);
            s.refusals.push(Refused {
                account: *account,
                at: ms(at),
                near,
                record: record.clone(),
            });
            // The oldest of this account's class beyond its newest KEPT_PER_ACCOUNT go.
            let same = |r: &Refused| r.account == *account && r.near == near;
            let held = s.refusals.iter().filter(|r| same(r)).count();
            let mut excess = held.saturating_sub(KEPT_PER_ACCOUNT);
            s.refusals.retain(|r| {
                let drop = excess > 0 && same(r);
                excess -= usize::from(drop);
                !drop
            });
        }
        Ok(())
    }
}

impl RefusalLog for MemoryStore {
    fn refusals(
        &self,
        account_id: Uuid,
        since: OffsetDateTime,
        limit: usize,
    ) -> StoreResult<Vec<Value>> {
        let since = ms(since);
        let s = self.lock();
        Ok(s.refusals
            .iter()
            .rev()
            .filter(|r| r.account == account_id && r.at >= since)
            .take(limit)
            .map(|r| r.record.clone())
            .collect())
    }

    fn prune_refusals(&self, older_than: OffsetDateTime) -> StoreResult<usize> {
        let older_than = ms(older_than);
        let mut s = self.lock();
        let before = s.refusals.len();
        s.refusals.retain(|r| r.at >= older_than);
        Ok(before - s.refusals.len())
    }
}

/// A domain as the store keeps it: times to the millisecond.
fn stored_domain(domain: &CustomDomain) -> CustomDomain {
    let mut kept = domain.clone();
    kept.created_at = ms(kept.created_at);
    kept.next_attempt_at = ms(kept.next_attempt_at);
    if let Some(certificate) = &mut kept.certificate {
        certificate.not_before = ms(certificate.not_before);
        certificate.not_after = ms(certificate.not_after);
    }
    kept
}

impl SigningStore for MemoryStore {
    fn signing(&self, service_id: Uuid) -> StoreResult<Option<Signing>> {
        Ok(self.lock().signing.get(&service_id).map(|(s, _)| s.clone()))
    }

    fn other_signing(&self, besides: Uuid) -> StoreResult<Option<Signing>> {
        let s = self.lock();
        let mut others = (s.signing.iter())
            .filter(|(id, (signing, _))| **id != besides && !signing.keys.is_empty());
        Ok(others.next().map(|(_, (signing, _))| signing.clone()))
    }

    fn update_signing(
        &self,
        service_id: Uuid,
        change: &mut dyn FnMut(Option<Signing>, Option<PublishedConfig>) -> Option<SigningChange>,
        event: Option<&AuditEvent>,
    ) -> StoreResult<bool> {
        let mut s = self.lock();
        if !s.service_exists(service_id) {
            return Err(StoreError::NotFound);
        }
        let stored = s.signing.get(&service_id).map(|(s, _)| s.clone());
        let config = s.configs.get(&service_id).cloned();
        let history = s.history(service_id);
        let Some(written) = change(stored, config) else {
            return Ok(false);
        };
        match written.signing {
            Some(signing) => {
                s.signing
                    .insert(service_id, (signing, written.due_at.map(ms)));
            }
            None => {
                s.signing.remove(&service_id);
            }
        }
        let published = match written.config {
            ConfigChange::Keep => None,
            ConfigChange::Write(config) => {
                let config = VersionHistory::date(history.as_ref(), config);
                s.configs.insert(service_id, stored_config(config.clone()));
                Some(config.updated_at)
            }
            ConfigChange::Remove(at) => {
                s.remove_config(service_id, at);
                event.map(|event| event.at)
            }
        };
        // As the real store: a transition is logged as a change of its service even when the key
        // set stays, since the change log is what carries its audit event.
        let changes: &[Change] = match published.is_some() || event.is_some() {
            true => &[Change::Service(service_id)],
            false => &[],
        };
        match (event, published) {
            (Some(event), _) => s.commit(event, changes),
            (None, Some(at)) => s.log(changes, at),
            (None, None) => {}
        }
        Ok(true)
    }

    fn record_signature(
        &self,
        service_id: Uuid,
        kid: &str,
        at: OffsetDateTime,
    ) -> StoreResult<bool> {
        let mut s = self.lock();
        let Some((signing, _)) = s.signing.get_mut(&service_id) else {
            return Ok(false);
        };
        if !signing.keys.iter().any(|key| key.kid == kid) {
            return Ok(false);
        }
        signing.record_signature(kid, at);
        Ok(true)
    }

    fn postpone_signing(
        &self,
        service_id: Uuid,
        until: OffsetDateTime,
        now: OffsetDateTime,
    ) -> StoreResult<()> {
        if let Some((_, due)) = self.lock().signing.get_mut(&service_id) {
            if due.is_some_and(|at| at <= now) {
                *due = Some(ms(until));
            }
        }
        Ok(())
    }

    fn signing_due(&self, now: OffsetDateTime, limit: usize) -> StoreResult<Vec<Uuid>> {
        let s = self.lock();
        let mut due: Vec<(OffsetDateTime, Uuid)> = (s.signing.iter())
            .filter_map(|(id, (_, at))| Some(((*at)?, *id)))
            .filter(|(at, _)| *at <= now)
            .collect();
        due.sort();
        Ok(due.into_iter().take(limit).map(|(_, id)| id).collect())
    }
}

/// Managed keys without cryptography, for use-case tests: each key a distinct fake EC public
/// key, its "private key" sealed by [`MarkSealing`]'s rule, and a "signature" the SHA-256 of
/// the kid and the message, so a test can tell which key signed what.
#[derive(Debug, Default)]
pub struct CountingKeys {
    made: std::sync::atomic::AtomicU32,
}

impl CountingKeys {
    /// The signature [`CountingKeys::sign`] makes of `message` with `kid`.
    pub fn signature_of(kid: &str, message: &[u8]) -> Vec<u8> {
        use sha2::Digest;
        let mut hash = sha2::Sha256::new();
        hash.update(kid.as_bytes());
        hash.update(b".");
        hash.update(message);
        hash.finalize().to_vec()
    }
}

impl ManagedKeys for CountingKeys {
    fn make(
        &self,
        algorithm: crate::signing::Algorithm,
    ) -> Result<crate::signing::MadeKey, String> {
        let n = self.made.fetch_add(1, Ordering::SeqCst);
        let jwk = match algorithm {
            crate::signing::Algorithm::Es256 => {
                serde_json::json!({"kty": "EC", "crv": "P-256", "x": format!("x-{n}"), "y": "y"})
            }
            crate::signing::Algorithm::Rs256 => {
                serde_json::json!({"kty": "RSA", "n": format!("n-{n}"), "e": "AQAB"})
            }
        };
        Ok(crate::signing::MadeKey {
            jwk: jwk.as_object().cloned().unwrap_or_default(),
            public_key_der: n.to_be_bytes().to_vec(),
            sealed: MarkSealing.seal(format!("private-{n}").as_bytes()),
        })
    }

    fn sign(
        &self,
        kid: &str,
        _algorithm: crate::signing::Algorithm,
        sealed: &str,
        message: &[u8],
    ) -> Result<Vec<u8>, SignFailure> {
        self.opens(kid, sealed)?;
        Ok(Self::signature_of(kid, message))
    }

    fn opens(&self, _kid: &str, sealed: &str) -> Result<(), SignFailure> {
        MarkSealing
            .open(sealed)
            .map(|_| ())
            .map_err(SignFailure::Sealed)
    }
}

impl DomainStore for MemoryStore {
    fn domain_of(&self, service_id: Uuid) -> StoreResult<Option<CustomDomain>> {
        Ok(self.lock().domains.get(&service_id).map(|(d, _)| d.clone()))
    }

    fn domain_named(&self, domain: &str) -> StoreResult<Option<CustomDomain>> {
        let s = self.lock();
        let mut named: Vec<&CustomDomain> = (s.domains.values())
            .map(|(d, _)| d)
            .filter(|d| d.domain == domain)
            .collect();
        // The holder when there is one; else the oldest claim.
        named.sort_by_key(|d| (!d.is_held(), d.created_at, d.service_id));
        Ok(named.first().map(|d| (*d).clone()))
    }

    fn take_acme_order(
        &self,
        order: &AcmeOrder<'_>,
        admits: &dyn Fn(usize, usize) -> bool,
    ) -> StoreResult<bool> {
        // Counted and recorded under one lock, as the real store does in one transaction.
        let mut s = self.lock();
        let of_account = || (s.acme_orders.iter()).filter(|o| o.0 == order.directory);
        let account = of_account()
            .filter(|o| o.3 >= ms(order.account_since))
            .count();
        let customer = of_account()
            .filter(|o| order.customer_id.is_some() && o.1 == order.customer_id && !o.2)
            .filter(|o| o.3 >= ms(order.customer_since))
            .count();
        if !admits(customer, account) {
            return Ok(false);
        }
        s.acme_orders.retain(|o| o.3 >= ms(order.account_since));
        let row = (order.directory.to_owned(), order.customer_id);
        s.acme_orders
            .push((row.0, row.1, order.renewal, ms(order.at)));
        Ok(true)
    }

    fn hold_domain(
        &self,
        was: &CustomDomain,
        proven: &CustomDomain,
        taken: &DomainProblem,
    ) -> StoreResult<bool> {
        let mut s = self.lock();
        let mine = s.domains.get(&proven.service_id);
        if mine.is_none_or(|(d, _)| !d.is_still(was)) {
            return Ok(false);
        }
        let held_by_another = (s.domains.values()).any(|(d, _)| {
            d.domain == proven.domain && d.service_id != proven.service_id && d.is_held()
        });
        if held_by_another {
            return Ok(false);
        }
        let mut changed = vec![Change::Service(proven.service_id)];
        for (other, _) in s.domains.values_mut() {
            if other.domain == proven.domain && other.service_id != proven.service_id {
                other.status = crate::custom_domain::DomainStatus::Failed;
                other.problem = Some(taken.clone());
                changed.push(Change::Service(other.service_id));
            }
        }
        if let Some((kept, _)) = s.domains.get_mut(&proven.service_id) {
            *kept = stored_domain(proven);
        }
        let at = proven.created_at;
        s.log(&changed, at);
        Ok(true)
    }

    fn put_domain(
        &self,
        domain: &CustomDomain,
        was: Option<&CustomDomain>,
        pending: Ceiling,
        event: &AuditEvent,
    ) -> StoreResult<Result<(), Option<CustomDomain>>> {
        let mut s = self.lock();
        if !s.service_exists(domain.service_id) {
            return Err(StoreError::NotFound);
        }
        let taken = (s.domains.values()).any(|(d, _)| {
            d.domain == domain.domain && d.service_id != domain.service_id && d.is_held()
        });
        if taken {
            return Err(StoreError::Conflict("domain taken".into()));
        }
        let current = s.domains.get(&domain.service_id).map(|(d, _)| d.clone());
        if !CustomDomain::still_as_read(current.as_ref(), was) {
            return Ok(Err(current));
        }
        let customer = (s.services.iter())
            .find(|x| x.id == domain.service_id)
            .and_then(|x| x.customer_id);
        let others = (s.domains.values())
            .filter(|(d, _)| d.service_id != domain.service_id)
            .filter(|(d, _)| d.status == crate::custom_domain::DomainStatus::Verifying)
            .filter(|(d, _)| {
                (s.services.iter()).any(|x| x.id == d.service_id && x.customer_id == customer)
            })
            .count() as u64;
        let claim = domain.status == crate::custom_domain::DomainStatus::Verifying;
        if claim && customer.is_some() && !pending.admits(others) {
            return Err(StoreError::CeilingReached(pending.0));
        }
        if let Some((old, _)) = s.domains.get(&domain.service_id) {
            let (old, held) = (old.domain.clone(), old.is_held());
            if old != domain.domain {
                s.forget_domain_fetches(domain.service_id);
            }
            if held {
                s.challenges.retain(|(d, _), _| *d != old);
            }
        }
        s.domains
            .insert(domain.service_id, (stored_domain(domain), None));
        s.commit(event, &[Change::Service(domain.service_id)]);
        Ok(Ok(()))
    }

    fn delete_domain(
        &self,
        service_id: Uuid,
        was: Option<&CustomDomain>,
        event: &AuditEvent,
    ) -> StoreResult<bool> {
        let mut s = self.lock();
        let changed = |(d, _): &(CustomDomain, _)| was.is_some_and(|was| !d.is_still(was));
        if s.domains.get(&service_id).is_none_or(changed) {
            return Ok(false);
        }
        let Some((gone, _)) = s.domains.remove(&service_id) else {
            return Ok(false);
        };
        if gone.is_held() {
            s.challenges.retain(|(d, _), _| *d != gone.domain);
        }
        s.forget_domain_fetches(service_id);
        s.commit(event, &[Change::Service(service_id)]);
        Ok(true)
    }

    fn update_domain(&self, was: &CustomDomain, domain: &CustomDomain) -> StoreResult<bool> {
        let mut s = self.lock();
        let Some((kept, lock)) = s.domains.get_mut(&domain.service_id) else {
            return Ok(false);
        };
        if !kept.is_still(was) {
            return Ok(false);
        }
        *kept = stored_domain(domain);
        *lock = None;
        let at = kept.created_at;
        s.log(&[Change::Service(domain.service_id)], at);
        Ok(true)
    }

    fn held_domains(&self) -> StoreResult<Vec<CustomDomain>> {
        let s = self.lock();
        Ok(s.domains
            .values()
            .map(|(d, _)| d)
            .filter(|d| d.is_held())
            .cloned()
            .collect())
    }

    fn domains_due(
        &self,
        now: OffsetDateTime,
        work: DomainWork,
        limit: usize,
    ) -> StoreResult<Vec<CustomDomain>> {
        let s = self.lock();
        let statuses = work.statuses();
        let mut due: Vec<CustomDomain> = s
            .domains
            .values()
            .map(|(d, _)| d)
            .filter(|d| d.is_due(now) && statuses.contains(&d.status))
            .cloned()
            .collect();
        let rank = |d: &CustomDomain| statuses.iter().position(|s| *s == d.status);
        due.sort_by_key(|d| (rank(d), d.next_attempt_at, d.service_id));
        due.truncate(limit);
        Ok(due)
    }

    fn lock_domain(
        &self,
        was: &CustomDomain,
        until: OffsetDateTime,
        now: OffsetDateTime,
    ) -> StoreResult<bool> {
        let mut s = self.lock();
        let Some((domain, lock)) = s.domains.get_mut(&was.service_id) else {
            return Ok(false);
        };
        if !domain.is_still(was) || lock.is_some_and(|end| now < end) {
            return Ok(false);
        }
        *lock = Some(ms(until));
        Ok(true)
    }

    fn put_challenge(
        &self,
        domain: &str,
        token: &str,
        key_authorization: &str,
        now: OffsetDateTime,
    ) -> StoreResult<()> {
        let mut s = self.lock();
        // A day's challenges are all an order can still be answering.
        (s.challenges).retain(|(d, _), (_, at)| d != domain || *at > now - CHALLENGE_KEPT);
        // The first answer stays, as the real store's `ON CONFLICT DO NOTHING` keeps it.
        (s.challenges)
            .entry((domain.to_owned(), token.to_owned()))
            .or_insert_with(|| (key_authorization.to_owned(), now));
        Ok(())
    }

    fn challenges(&self, domain: &str) -> StoreResult<Vec<(String, String)>> {
        let s = self.lock();
        // Newest first, then by token, as the real store orders them.
        let mut kept: Vec<(OffsetDateTime, String, String)> = (s.challenges.iter())
            .filter(|((d, _), _)| d == domain)
            .map(|((_, token), (answer, at))| (*at, token.clone(), answer.clone()))
            .collect();
        kept.sort_by(|a, b| (b.0.cmp(&a.0)).then(a.1.cmp(&b.1)));
        Ok((kept.into_iter())
            .take(crate::custom_domain::MAX_CHALLENGES_READ)
            .map(|(_, token, answer)| (token, answer))
            .collect())
    }

    fn acme_account(&self, directory: &str) -> StoreResult<Option<String>> {
        Ok(self.lock().acme_accounts.get(directory).cloned())
    }

    fn put_acme_account(&self, directory: &str, sealed: &str) -> StoreResult<String> {
        let mut s = self.lock();
        Ok(s.acme_accounts
            .entry(directory.to_owned())
            .or_insert_with(|| sealed.to_owned())
            .clone())
    }
}

impl RateCountLog for MemoryStore {
    fn exchange_rate_counts(
        &self,
        replica: Uuid,
        added: &[RateEvents],
        now: OffsetDateTime,
        since: OffsetDateTime,
    ) -> StoreResult<Vec<RateCount>> {
        let mut s = self.lock();
        for a in added {
            let count = (s.rate_counts)
                .entry((a.limit.clone(), a.key.clone(), replica, a.minute))
                .or_insert((0, now));
            *count = (count.0.saturating_add(a.events), now);
        }
        Ok((s.rate_counts.iter())
            .filter(|((.., from, _), (_, written))| *from != replica && *written >= since)
            .map(
                |((limit, key, from, minute), (events, written_at))| RateCount {
                    limit: limit.clone(),
                    key: key.clone(),
                    replica: *from,
                    minute: *minute,
                    events: *events,
                    written_at: *written_at,
                },
            )
            .collect())
    }

    fn prune_rate_counts(&self, before: OffsetDateTime) -> StoreResult<usize> {
        let mut s = self.lock();
        let count = s.rate_counts.len();
        s.rate_counts.retain(|_, (_, written)| *written >= before);
        Ok(count - s.rate_counts.len())
    }
}

impl FetchLog for MemoryStore {
    /// Each count adds to its hour's bucket; the last fetch only moves forward.
    fn record_fetches(&self, counts: &[DocumentFetches]) -> StoreResult<()> {
        let mut s = self.lock();
        // A service deleted since gets no counts back, as in the real store; nor a domain
        // asked for after the count's last fetch (or none now).
        let current = |f: &DocumentFetches| {
            !f.document.is_custom_domain()
                || (s.domains.get(&f.service_id)).is_some_and(|(d, _)| f.last_at >= d.created_at)
        };
        let live: Vec<&DocumentFetches> = (counts.iter())
            .filter(|f| s.service_exists(f.service_id) && current(f))
            .collect();
        // In how many hours of the week before its bucket each agent fetched the document, of
        // the store before this call, as the real store reads it.
        let week = crate::keys::VERIFIER_WINDOW.whole_milliseconds() as i64;
        let regulars: Vec<BTreeMap<String, i64>> = (live.iter())
            .map(|f| {
                let (service, document, hour) = (f.service_id, f.document, fetch_hour(f.last_at));
                let mut regular = BTreeMap::new();
                let week_before = (service, document, hour - week)..(service, document, hour);
                for earlier in s.fetches.range(week_before).map(|(_, bucket)| bucket) {
                    for agent in earlier.agents.keys().filter(|a| *a != OTHER_AGENTS) {
                        *regular.entry(agent.clone()).or_default() += 1;
                    }
                }
                regular
            })
            .collect();
        for (f, regular) in live.into_iter().zip(regulars) {
            let last = ms(f.last_at);
            let key = (f.service_id, f.document, fetch_hour(f.last_at));
            let hours = |agent: &str| regular.get(agent).copied().unwrap_or(0);
            let bucket = s.fetches.entry(key).or_insert(FetchBucket {
                ok: 0,
                not_modified: 0,
                last_at: last,
                agents: BTreeMap::new(),
            });
            bucket.ok += f.ok;
            bucket.not_modified += f.not_modified;
            bucket.last_at = bucket.last_at.max(last);
            for a in &f.agents {
                let at = ms(a.last_at);
                // Past the bound, a new agent counts as one of the others, as the real store does.
                let from = |network: &Network| {
                    (bucket.agents.values())
                        .filter(|b| b.networks.contains_key(network))
                        .count()
                };
                let full = bucket.agents.len() >= STORED_AGENTS_PER_HOUR;
                let crowded = full
                    && !a.networks.is_empty()
                    && (a.networks.iter()).all(|n| from(&n.network) >= STORED_AGENTS_PER_NETWORK);
                let known = bucket.agents.contains_key(&a.agent);
                // As the real store: past the bound the least frequent agent (the others aside)
                // gives its place, and the new agent starts from its own count.
                let name = if known || !full {
                    a.agent.clone()
                } else if crowded || a.agent == OTHER_AGENTS {
                    OTHER_AGENTS.to_owned()
                } else {
                    // The least regular, then least frequent, of the agents no network of
                    // their own vouches for (seen from none, or only from networks of more
                    // than the bound), else of all; past those, only an agent at least as
                    // regular takes a place, as the real store.
                    let exposed = |b: &AgentBucket| {
                        (b.networks.keys()).all(|n| from(n) > STORED_AGENTS_PER_NETWORK)
                    };
                    let least = |only_exposed: bool| {
                        (bucket.agents.iter())
                            .filter(|(name, _)| *name != OTHER_AGENTS)
                            .filter(|(_, b)| !only_exposed || exposed(b))
                            .min_by_key(|(name, b)| (hours(name), b.count, b.last_at))
                            .map(|(name, b)| (name.clone(), exposed(b)))
                    };
                    let least = (least(true).or_else(|| least(false)))
                        .filter(|(name, exposed)| *exposed || hours(&a.agent) >= hours(name))
                        .map(|(name, _)| name);
                    match least.and_then(|name| bucket.agents.remove(&name)) {
                        Some(gone) => {
                            // Its fetches are the others' from now on.
                            let others = (bucket.agents.entry(OTHER_AGENTS.to_owned())).or_insert(
                                AgentBucket {
                                    count: 0,
                                    last_at: gone.last_at,
                                    networks: BTreeMap::new(),
                                },
                            );
                            others.count += gone.count;
                            others.last_at = others.last_at.max(gone.last_at);
                            a.agent.clone()
                        }
                        None => OTHER_AGENTS.to_owned(),
                    }
                };
                let is_other = name == OTHER_AGENTS;
                let agent = bucket.agents.entry(name).or_insert(AgentBucket {
                    count: 0,
                    last_at: at,
                    networks: BTreeMap::new(),
                });
                agent.count += a.count;
                agent.last_at = agent.last_at.max(at);
                // The others' row keeps no networks.
                let networks = match is_other {
                    true => &[][..],
                    false => a.networks.as_slice(),
                };
                for n in networks {
                    let known = agent.networks.len();
                    let at = ms(n.last_at);
                    match agent.networks.get_mut(&n.network) {
                        Some(last) => *last = (*last).max(at),
                        None if known < STORED_NETWORKS_PER_AGENT => {
                            agent.networks.insert(n.network, at);
                        }
                        None => {}
                    }
                }
            }
        }
        Ok(())
    }

    fn verifier_candidates(
        &self,
        service_id: Uuid,
        since: OffsetDateTime,
        until: OffsetDateTime,
    ) -> StoreResult<Vec<VerifierCandidate>> {
        let (from, to, until) = (fetch_hour(since), fetch_hour(until), ms(until));
        let s = self.lock();
        // Per agent: the candidate, its distinct hours, and each network's distinct hours (both
        // issuers' key sets in one hour are one hour), as the real store counts them.
        type Seen = (
            VerifierCandidate,
            BTreeSet<i64>,
            BTreeMap<Network, BTreeSet<i64>>,
        );
        let mut by_agent: BTreeMap<&str, Seen> = BTreeMap::new();
        let buckets = s.fetches.iter().filter(|((service, document, hour), _)| {
            *service == service_id && document.is_jwks() && (from..=to).contains(hour)
        });
        for ((_, _, hour), bucket) in buckets {
            for (agent, fetched) in &bucket.agents {
                if agent == OTHER_AGENTS || fetched.last_at >= until {
                    continue;
                }
                let (candidate, hours, networks) = by_agent.entry(agent).or_insert_with(|| {
                    let candidate = VerifierCandidate {
                        agent: agent.clone(),
                        count: 0,
                        hours: 0,
                        last_at: fetched.last_at,
                        networks: Vec::new(),
                    };
                    (candidate, BTreeSet::new(), BTreeMap::new())
                });
                candidate.count += fetched.count;
                candidate.last_at = candidate.last_at.max(fetched.last_at);
                hours.insert(*hour);
                for (network, _) in fetched.networks.iter().filter(|(_, at)| **at < until) {
                    networks.entry(*network).or_default().insert(*hour);
                }
            }
        }
        Ok(by_agent
            .into_values()
            .map(|(mut candidate, hours, networks)| {
                candidate.hours = u32::try_from(hours.len()).unwrap_or(u32::MAX);
                let mut networks: Vec<(Network, usize)> =
                    (networks.into_iter()).map(|(n, h)| (n, h.len())).collect();
                networks.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
                candidate.networks = (networks.into_iter())
                    .map(|(network, hours)| SeenNetwork {
                        network,
                        hours: u32::try_from(hours).unwrap_or(u32::MAX),
                    })
                    .collect();
                candidate
            })
            .collect())
    }

    fn verifier_fetches(
        &self,
        service_id: Uuid,
        agents: &[String],
        since: OffsetDateTime,
    ) -> StoreResult<Vec<(String, NetworkFetch)>> {
        let since = fetch_hour(since);
        let s = self.lock();
        let mut last: BTreeMap<(&str, Network), OffsetDateTime> = BTreeMap::new();
        let buckets = s.fetches.iter().filter(|((service, document, hour), _)| {
            *service == service_id && document.is_jwks() && *hour >= since
        });
        for (_, bucket) in buckets {
            for agent in agents {
                let Some(fetched) = bucket.agents.get(agent) else {
                    continue;
                };
                for (network, at) in &fetched.networks {
                    let entry = last.entry((agent, *network)).or_insert(*at);
                    *entry = (*entry).max(*at);
                }
            }
        }
        Ok(last
            .into_iter()
            .map(|((agent, network), last_at)| {
                (agent.to_owned(), NetworkFetch { network, last_at })
            })
            .collect())
    }

    fn key_set_hours(
        &self,
        service_id: Uuid,
        since: OffsetDateTime,
    ) -> StoreResult<Vec<AgentHour>> {
        let since = fetch_hour(since);
        let s = self.lock();
        // Both issuers' key sets in one hour are one hour, as the real store sums them.
        let mut by_hour: BTreeMap<(&str, i64), (u64, OffsetDateTime)> = BTreeMap::new();
        let buckets = s.fetches.iter().filter(|((service, document, hour), _)| {
            *service == service_id && document.is_jwks() && *hour >= since
        });
        for ((_, _, hour), bucket) in buckets {
            for (agent, fetched) in &bucket.agents {
                let entry = by_hour
                    .entry((agent, *hour))
                    .or_insert((0, fetched.last_at));
                entry.0 += fetched.count;
                entry.1 = entry.1.max(fetched.last_at);
            }
        }
        Ok(by_hour
            .into_iter()
            .map(|((agent, hour), (count, last_at))| AgentHour {
                agent: agent.to_owned(),
                hour: OffsetDateTime::from_unix_timestamp(hour / 1000)
                    .expect("an hour the store made"),
                count,
                last_at,
            })
            .collect())
    }

    fn last_key_set_fetches(
        &self,
        service_ids: &[Uuid],
        since: OffsetDateTime,
    ) -> StoreResult<Vec<(Uuid, OffsetDateTime)>> {
        let since = fetch_hour(since);
        let s = self.lock();
        let mut last: BTreeMap<Uuid, OffsetDateTime> = BTreeMap::new();
        for ((service, document, hour), bucket) in &s.fetches {
            if service_ids.contains(service) && document.is_jwks() && *hour >= since {
                let entry = last.entry(*service).or_insert(bucket.last_at);
                *entry = (*entry).max(bucket.last_at);
            }
        }
        Ok(last.into_iter().collect())
    }

    fn fetches(
        &self,
        service_id: Uuid,
        since: OffsetDateTime,
        agents: usize,
    ) -> StoreResult<Vec<DocumentFetches>> {
        let since = fetch_hour(since);
        let s = self.lock();
        let mut sums: Vec<DocumentFetches> = Vec::new();
        let mut by_agent: BTreeMap<(FetchedDocument, &str), (u64, OffsetDateTime)> =
            BTreeMap::new();
        let kept = s
            .fetches
            .iter()
            .filter(|((service, _, hour), _)| *service == service_id && *hour >= since);
        for ((_, document, _), bucket) in kept {
            match sums.iter_mut().find(|d| d.document == *document) {
                Some(sum) => {
                    sum.ok += bucket.ok;
                    sum.not_modified += bucket.not_modified;
                    sum.last_at = sum.last_at.max(bucket.last_at);
                }
                None => sums.push(DocumentFetches {
                    service_id,
                    document: *document,
                    ok: bucket.ok,
                    not_modified: bucket.not_modified,
                    last_at: bucket.last_at,
                    agents: Vec::new(),
                }),
            }
            for (agent, fetched) in &bucket.agents {
                let entry = by_agent
                    .entry((*document, agent.as_str()))
                    .or_insert((0, fetched.last_at));
                entry.0 += fetched.count;
                entry.1 = entry.1.max(fetched.last_at);
            }
        }
        for sum in &mut sums {
            let mut list: Vec<AgentFetches> = by_agent
                .iter()
                .filter(|((document, _), _)| *document == sum.document)
                .map(|((_, agent), (count, last))| AgentFetches {
                    agent: (*agent).to_owned(),
                    count: *count,
                    last_at: *last,
                    networks: Vec::new(),
                })
                .collect();
            list.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.agent.cmp(&b.agent)));
            list.truncate(agents);
            sum.agents = list;
        }
        Ok(sums)
    }

    /// How many rows went, as the real store counts them: each hour's bucket, and each of its
    /// agents.
    fn prune_fetches(&self, older_than: OffsetDateTime) -> StoreResult<usize> {
        let hour = fetch_hour(older_than);
        let mut s = self.lock();
        let mut pruned = 0;
        s.fetches.retain(|(_, _, bucket_hour), bucket| {
            let goes = *bucket_hour < hour;
            if goes {
                let networks: usize = bucket.agents.values().map(|a| a.networks.len()).sum();
                pruned += 1 + bucket.agents.len() + networks;
            }
            !goes
        });
        let before = s.key_safe.len();
        s.key_safe.retain(|_, at| *at >= older_than);
        Ok(pruned + before - s.key_safe.len())
    }
}

impl ReadinessLog for MemoryStore {
    fn key_safe_at(
        &self,
        service_id: Uuid,
        kid: &str,
        published_at: OffsetDateTime,
    ) -> StoreResult<Option<OffsetDateTime>> {
        let s = self.lock();
        let at = s.key_safe.get(&(service_id, kid.to_owned())).copied();
        Ok(at.filter(|at| *at >= ms(published_at)))
    }

    fn record_key_safe(
        &self,
        service_id: Uuid,
        kid: &str,
        published_at: OffsetDateTime,
        at: OffsetDateTime,
    ) -> StoreResult<OffsetDateTime> {
        let mut s = self.lock();
        let recorded = s
            .key_safe
            .entry((service_id, kid.to_owned()))
            .or_insert(ms(at));
        if *recorded < ms(published_at) {
            *recorded = ms(at);
        }
        Ok(*recorded)
    }
}

impl PurgeLog for MemoryStore {
    fn record_purge(&self, service_id: Uuid, changed_at: OffsetDateTime) -> StoreResult<()> {
        let mut s = self.lock();
        let purged = s.purges.entry(service_id).or_insert(ms(changed_at));
        *purged = (*purged).max(ms(changed_at));
        Ok(())
    }

    fn purged_through(&self, service_id: Uuid) -> StoreResult<Option<OffsetDateTime>> {
        Ok(self.lock().purges.get(&service_id).copied())
    }

    fn unpurged(&self, since: OffsetDateTime) -> StoreResult<Vec<(Uuid, String, OffsetDateTime)>> {
        let s = self.lock();
        let mut owed: Vec<(Uuid, String, OffsetDateTime)> = (s.configs.values())
            .filter(|c| ms(c.updated_at) >= ms(since))
            .filter(|c| (s.purges.get(&c.service_id)).is_none_or(|at| *at < ms(c.updated_at)))
            .filter_map(|c| {
                let service = s.services.iter().find(|v| v.id == c.service_id)?;
                Some((c.service_id, service.subdomain.clone(), ms(c.updated_at)))
            })
            .collect();
        owed.sort_by_key(|(_, _, at)| *at);
        Ok(owed)
    }
}

/// Deterministic bytes that differ from call to call (each call's bytes come from its call
/// number), so that random names differ; [`FixedRandomness::rewind`] makes the next calls
/// repeat the first ones, to provoke name collisions.
#[derive(Debug, Default)]
pub struct FixedRandomness {
    calls: AtomicU64,
}

impl FixedRandomness {
    /// The next calls give the bytes the first calls gave, in the same order.
    pub fn rewind(&self) {
        self.calls.store(0, Ordering::SeqCst);
    }
}

impl Randomness for FixedRandomness {
    fn fill_bytes(&self, buf: &mut [u8]) {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        for (i, chunk) in (0u64..).zip(buf.chunks_mut(8)) {
            let bytes = splitmix64((call << 32) | i).to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }
}

/// The SplitMix64 output function: well-spread bytes from a counter.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A hasher whose hash reads `plain:{secret}`; never busy.
#[derive(Debug, Default)]
pub struct PlainHasher;

impl SecretHasher for PlainHasher {
    fn hash(&self, secret: &str) -> Result<String, HasherBusy> {
        Ok(format!("plain:{secret}"))
    }

    fn verify(&self, secret: &str, hash: &str) -> Result<bool, HasherBusy> {
        Ok(hash.strip_prefix("plain:") == Some(secret))
    }
}

/// A key import that accepts every key.
#[derive(Debug, Default)]
pub struct AcceptAllKeys;

impl KeyImport for AcceptAllKeys {
    fn import(&self, _jwk: &serde_json::Map<String, Value>) -> Result<(), String> {
        Ok(())
    }
}

/// A signature check that accepts a signature reading `good` with any key whose `kid` is the
/// token's (or any key, for a token without one).
#[derive(Debug, Default)]
pub struct GoodSignatures;

impl TokenSignatureCheck for GoodSignatures {
    fn verifies(&self, token: &str, jwk: &serde_json::Map<String, Value>) -> bool {
        use base64::Engine;
        let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let mut parts = token.split('.');
        let header = parts.next().and_then(|h| engine.decode(h).ok());
        let header: Option<Value> = header.and_then(|h| serde_json::from_slice(&h).ok());
        let kid = header.as_ref().and_then(|h| h.get("kid"));
        let signature = parts.nth(1).and_then(|s| engine.decode(s).ok());
        signature.as_deref() == Some(b"good".as_slice())
            && kid.is_none_or(|k| jwk.get("kid") == Some(k))
    }
}

/// A certificate authority in memory: accounts numbered, each order's one HTTP-01 challenge
/// handed to `publish` and recorded, a certificate valid for 90 days from the clock it is given
/// (`set_now`), or the failure set with [`MemoryAuthority::fail_with`].
#[derive(Debug)]
pub struct MemoryAuthority {
    directory: String,
    state: Mutex<AuthorityState>,
}

#[derive(Debug, Default)]
struct AuthorityState {
    accounts: u64,
    now: Option<OffsetDateTime>,
    failure: Option<String>,
    /// (account, domain, challenge token) of each order, in order.
    orders: Vec<(String, String, String)>,
}

impl MemoryAuthority {
    /// An authority whose directory is `directory`.
    pub fn new(directory: &str) -> Self {
        Self {
            directory: directory.to_owned(),
            state: Mutex::default(),
        }
    }

    /// Certificates issued from now on are valid from `now`.
    pub fn set_now(&self, now: OffsetDateTime) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .now = Some(now);
    }

    /// Orders fail with `why` from now on (`None`: they succeed again).
    pub fn fail_with(&self, why: Option<&str>) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .failure = why.map(str::to_owned);
    }

    /// How many accounts were made.
    pub fn accounts_made(&self) -> u64 {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .accounts
    }

    /// (account, domain, challenge token) of each order placed, oldest first.
    pub fn orders(&self) -> Vec<(String, String, String)> {
        (self
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .orders)
            .clone()
    }
}

impl CertificateAuthority for MemoryAuthority {
    fn directory(&self) -> &str {
        &self.directory
    }

    fn new_account(&self) -> Result<String, String> {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        s.accounts += 1;
        Ok(format!("{{\"account\":{}}}", s.accounts))
    }

    fn order(
        &self,
        account: &str,
        domain: &str,
        publish: &mut dyn FnMut(&AcmeChallenge) -> Result<(), String>,
    ) -> Result<IssuedCertificate, String> {
        let (n, now, failure, accounts) = {
            let s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            (s.orders.len(), s.now, s.failure.clone(), s.accounts)
        };
        let made_here = (1..=accounts).any(|a| account == format!("{{\"account\":{a}}}"));
        if !made_here {
            return Err(format!(
                "the stored ACME account: {account:?} is no account of this authority"
            ));
        }
        let challenge = AcmeChallenge {
            token: format!("token-{n}"),
            key_authorization: format!("token-{n}.thumbprint"),
        };
        publish(&challenge)?;
        (self
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .orders)
            .push((account.to_owned(), domain.to_owned(), challenge.token));
        if let Some(why) = failure {
            return Err(why);
        }
        let not_before = now.unwrap_or(OffsetDateTime::UNIX_EPOCH);
        Ok(IssuedCertificate {
            chain_pem: format!(
                "-----BEGIN CERTIFICATE-----\n{domain} {n}\n-----END CERTIFICATE-----\n"
            ),
            key_pem: format!("-----BEGIN PRIVATE KEY-----\n{n}\n-----END PRIVATE KEY-----\n"),
            not_before,
            not_after: not_before + time::Duration::days(90),
            issuer: "CN=Memory CA".to_owned(),
        })
    }
}

/// A DNS name as one spelling: with its final dot.
fn fqdn(name: &str) -> String {
    format!("{}.", name.trim_end_matches('.'))
}

/// The contract of an [`OwnershipCheck`], written once: the domain's tests run it on
/// [`MemoryDns`], and `cargo xtask acme` on `registry-acme`'s DNS lookup against
/// pebble-challtestsrv (`crates/acme/tests/contract.rs`): where they differ, the fake is wrong.
/// `put(name, value)` adds `value` to the TXT records of `name`.
pub fn ownership_contract(check: &dyn OwnershipCheck, put: &mut dyn FnMut(&str, &str)) {
    let name = "_registry-challenge.contract.example.test";
    assert_eq!(
        check.holds(name, "token-1"),
        Ok(false),
        "no record is no proof"
    );
    put(name, "token-1");
    assert_eq!(check.holds(name, "token-1"), Ok(true));
    assert_eq!(
        check.holds(&format!("{name}."), "token-1"),
        Ok(true),
        "the same name"
    );
    assert_eq!(
        check.holds(name, "token-2"),
        Ok(false),
        "another token is no proof"
    );
    assert_eq!(
        check.holds(name, "token-"),
        Ok(false),
        "nor is a part of it"
    );
    let other = "_registry-challenge.other.example.test";
    assert_eq!(
        check.holds(other, "token-1"),
        Ok(false),
        "another name is no proof"
    );
}

/// The contract of a [`CertificateAuthority`], written once: the domain's tests run it on
/// [`MemoryAuthority`], and `cargo xtask acme` on `registry-acme`'s ACME client against Pebble
/// (`crates/acme/tests/contract.rs`). `domain` is a name the authority validates by HTTP-01;
/// `answer(challenge)` makes the domain answer the challenge.
pub fn authority_contract(
    authority: &dyn CertificateAuthority,
    domain: &str,
    answer: &mut dyn FnMut(&AcmeChallenge) -> Result<(), String>,
) {
    assert!(
        authority.directory().starts_with("http"),
        "{}",
        authority.directory()
    );
    let account = authority.new_account().expect("an account is made");
    let mut answered = 0;
    let issued = authority.order(&account, domain, &mut |challenge| {
        answered += 1;
        answer(challenge)
    });
    let issued = issued.expect("a certificate is issued");
    assert!(
        answered >= 1,
        "each authorization's challenge is handed over"
    );
    assert!(
        issued.chain_pem.contains("-----BEGIN CERTIFICATE-----"),
        "a PEM chain"
    );
    assert!(
        issued.key_pem.contains("PRIVATE KEY-----"),
        "with its new key"
    );
    assert!(issued.not_before < issued.not_after);
    assert!(!issued.issuer.is_empty());
    // A challenge that cannot be answered: no certificate, and the sentence says why. (Another
    // name than the one just validated: an authority may reuse that name's valid authorization,
    // as Pebble does now and then, and then asks for no answer at all.)
    let unanswered = format!("unanswered.{domain}");
    let refused = authority.order(&account, &unanswered, &mut |_| {
        Err("the answer is not stored".into())
    });
    assert!(
        matches!(&refused, Err(why) if why.contains("the answer is not stored")),
        "{refused:?}"
    );
    // Credentials the authority did not make: no certificate.
    let stranger = authority.order("{}", domain, &mut |challenge| answer(challenge));
    assert!(stranger.is_err(), "{stranger:?}");
}

/// DNS in memory: the TXT records set with [`MemoryDns::put`], or every lookup failing.
#[derive(Debug, Default)]
pub struct MemoryDns {
    records: Mutex<HashMap<String, Vec<String>>>,
    down: AtomicBool,
}

impl MemoryDns {
    /// Adds a TXT record `value` to `name`.
    pub fn put(&self, name: &str, value: &str) {
        let mut records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        records
            .entry(fqdn(name))
            .or_default()
            .push(value.to_owned());
    }

    /// Every lookup fails from now on (`true`), or answers again.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::Relaxed);
    }
}

impl OwnershipCheck for MemoryDns {
    fn holds(&self, name: &str, token: &str) -> Result<bool, String> {
        if self.down.load(Ordering::Relaxed) {
            return Err(format!("DNS lookup of {name} failed: no answer"));
        }
        let records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(records
            .get(&fqdn(name))
            .is_some_and(|values| values.iter().any(|v| v == token)))
    }
}

/// Sealing that marks instead of encrypting: `sealed:` and the bytes as hex. Tests read what
/// was sealed; nothing opens that was not sealed here.
#[derive(Debug, Default)]
pub struct MarkSealing;

impl Sealing for MarkSealing {
    fn seal(&self, plain: &[u8]) -> String {
        let hex: String = plain.iter().map(|b| format!("{b:02x}")).collect();
        format!("sealed:{hex}")
    }

    fn open(&self, sealed: &str) -> Result<Vec<u8>, String> {
        let hex = sealed
            .strip_prefix("sealed:")
            .ok_or_else(|| "not sealed under this key".to_owned())?;
        (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(hex.get(i..i + 2).unwrap_or("zz"), 16))
            .collect::<Result<_, _>>()
            .map_err(|_| "not sealed under this key".to_owned())
    }
}

/// A clock that stands still until told: [`ManualClock::set`], [`ManualClock::advance`].
#[derive(Debug)]
pub struct ManualClock(Mutex<OffsetDateTime>);

impl ManualClock {
    /// A clock at `now`.
    pub fn at(now: OffsetDateTime) -> Self {
        Self(Mutex::new(now))
    }

    /// Moves it to `now`.
    pub fn set(&self, now: OffsetDateTime) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = now;
    }

    /// Moves it on by `by`.
    pub fn advance(&self, by: time::Duration) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> OffsetDateTime {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Monotonic time that stands still until told ([`ManualTicks::advance`]).
#[derive(Debug)]
pub struct ManualTicks(Mutex<std::time::Instant>);

impl Default for ManualTicks {
    // An `Instant` has no constructor: the fake starts at the real one, and moves only when told.
    #[allow(clippy::disallowed_methods)]
    fn default() -> Self {
        Self(Mutex::new(std::time::Instant::now()))
    }
}

impl ManualTicks {
    /// Moves it on by `by`.
    pub fn advance(&self, by: std::time::Duration) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) += by;
    }
}

impl Ticks for ManualTicks {
    fn now(&self) -> std::time::Instant {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The caches in front of the registry, in memory: what a GET through them would find cached
/// ([`MemoryPurger::get`]), every purge recorded as `(host, path)`, and the hosts whose purges
/// fail ([`MemoryPurger::fail`]).
#[derive(Debug, Default)]
pub struct MemoryPurger {
    cached: Mutex<BTreeSet<(String, String)>>,
    purged: Mutex<Vec<(String, String)>>,
    failing: Mutex<BTreeSet<String>>,
}

impl MemoryPurger {
    /// Purges of `host` fail from now on.
    pub fn fail(&self, host: &str) {
        (self.failing.lock().unwrap_or_else(PoisonError::into_inner)).insert(host.to_owned());
    }

    /// Every purge that succeeded, oldest first.
    pub fn purged(&self) -> Vec<(String, String)> {
        self.purged
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// A GET of `path` under `host` through the caches: whether a cache answered it (a miss
    /// keeps the answer, as a cache does).
    pub fn get(&self, host: &str, path: &str) -> bool {
        let mut cached = self.cached.lock().unwrap_or_else(PoisonError::into_inner);
        !cached.insert((host.to_owned(), path.to_owned()))
    }
}

impl CachePurger for MemoryPurger {
    fn purge<'a>(&'a self, authorities: &'a [String], paths: &'a [&'a str]) -> Purging<'a> {
        let mut all = true;
        for authority in authorities {
            let fails =
                (self.failing.lock().unwrap_or_else(PoisonError::into_inner)).contains(authority);
            all &= !fails;
            if fails {
                continue;
            }
            let mut cached = self.cached.lock().unwrap_or_else(PoisonError::into_inner);
            let mut purged = self.purged.lock().unwrap_or_else(PoisonError::into_inner);
            for path in paths {
                cached.remove(&(authority.clone(), (*path).to_owned()));
                purged.push((authority.clone(), (*path).to_owned()));
            }
        }
        Box::pin(std::future::ready(all))
    }
}

/// The contract of a [`CachePurger`], written once: the domain's tests run it on
/// [`MemoryPurger`], and `cargo xtask cdn` on `registry-cdn`'s purger against Varnish
/// (`crates/cdn/tests/contract.rs`). `host` serves `path` through the caches;
/// `from_cache(host, path)` makes a GET through them and answers whether a cache answered it.
pub async fn purger_contract(
    purger: &dyn CachePurger,
    host: &str,
    path: &str,
    from_cache: &mut dyn FnMut(&str, &str) -> bool,
) {
    from_cache(host, path);
    assert!(
        from_cache(host, path),
        "a second GET is answered by the cache"
    );
    assert!(
        purger.purge(&[host.to_owned()], &[path]).await,
        "the caches took the purge"
    );
    assert!(
        !from_cache(host, path),
        "the purge dropped the cache's copy"
    );
    assert!(from_cache(host, path), "and the next GET kept the new one");
    // Under another host, the same path is another copy: purging it is a success that leaves
    // this one.
    assert!(
        purger
            .purge(&["other.example.test".to_owned()], &[path])
            .await
    );
    assert!(
        from_cache(host, path),
        "another host's purge leaves this host's copy"
    );
}

/// The output of a future that is ready at its first poll (the in-memory ports' futures): the
/// use cases' unit tests need no runtime. Panics on a future that is not ready.
pub fn ready<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut context) {
        std::task::Poll::Ready(output) => output,
        std::task::Poll::Pending => panic!("an in-memory future waited"),
    }
}

/// A customer created as an operator creates one, with its first account: what tests of the
/// layers above the use cases start from.
#[derive(Debug)]
pub struct Tenant {
    /// The use cases' ports and settings.
    pub registry: crate::app::Registry,
    /// The customer's first account (static, on every service), as a caller.
    pub caller: crate::app::Caller,
    /// That account's static token.
    pub token: String,
}

/// The use cases over `store` with the in-memory ports (secrets hashed by `hasher`:
/// [`PlainHasher`], unless the test verifies them for real), the hosted issuers of `template`
/// under the API's `base_url`, and the business customer `acme` created at `now`.
pub fn tenant(
    store: std::sync::Arc<dyn crate::ports::Storage>,
    hasher: std::sync::Arc<dyn SecretHasher>,
    (template, base_url): (&str, &str),
    now: OffsetDateTime,
) -> Tenant {
    use crate::app::{customers, Caller, Origin, Registry, Settings};
    use std::sync::Arc;
    let registry = Registry {
        store,
        random: Arc::new(FixedRandomness::default()),
        hasher,
        key_import: Arc::new(AcceptAllKeys),
        signatures: Arc::new(GoodSignatures),
        managed_keys: Some(Arc::new(CountingKeys::default())),
        settings: Settings {
            issuers: crate::issuer::Issuers::new(template, base_url).expect("a usable template"),
            ..Settings::default()
        },
    };
    let command = customers::CreateCustomer {
        tenant: "acme".into(),
        plan: "business".into(),
        name: "Acme".into(),
    };
    let created = customers::create(&registry, command, now).expect("acme is created");
    let origin = Origin::new(std::net::IpAddr::from([192, 0, 2, 1]), None);
    Tenant {
        caller: Caller::account(Arc::new(created.account), None, None, origin),
        registry,
        token: created.token,
    }
}

/// One fetch of `service_id`'s key set by `agent` from `address` at `at`: the fetch evidence the
/// tests above the use cases record.
pub fn key_set_fetch(
    service_id: Uuid,
    agent: &str,
    address: &str,
    at: OffsetDateTime,
) -> DocumentFetches {
    DocumentFetches {
        service_id,
        document: FetchedDocument::Jwks,
        ok: 1,
        not_modified: 0,
        last_at: at,
        agents: vec![AgentFetches {
            agent: agent.into(),
            count: 1,
            last_at: at,
            networks: vec![NetworkFetch {
                network: Network::of(address.parse().expect("an IP address")),
                last_at: at,
            }],
        }],
    }
}

/// The body of `PUT /services/{s}/config` that publishes `key` (a JWK) under a minimal discovery
/// document whose signing algorithm is `alg`: what the tests above the use cases publish.
pub fn upload_of(key: Value, alg: &str) -> Value {
    serde_json::json!({
        "openidConfiguration": {"issuer": "https://k.example",
            "jwks_uri": "https://k.example/jwks", "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": [alg]},
        "jwks": {"keys": [key]}})
}
