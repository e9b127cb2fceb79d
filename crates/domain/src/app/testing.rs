//! In-memory ports for use-case unit tests: a [`MemoryStore`] that keeps each storage port's
//! contract over plain collections, deterministic randomness, a readable hasher, a key import
//! that accepts everything, and a [`registry`] holding one customer.

use crate::app::{Caller, Origin, Registry, Settings};
use crate::audit::{Action, Actor, AuditEvent, AuditPage, AuditQuery, Cursor, Resource, Trail};
use crate::policy::{Policy, PolicyKind};
use crate::ports::{
    AccountStore, AuditLog, Ceiling, Change, ChangeFeed, CredentialOwner, CredentialRecord,
    CredentialStore, CustomerStore, DocumentFetches, FetchLog, HasherBusy, KeyImport, Randomness,
    RefusalLog, SecretHasher, ServiceStore, StoreResult, StoredCredential, TokenSignatureCheck,
};
use crate::refusal::{is_near_record, KEPT_PER_ACCOUNT};
use crate::service::PublishedConfig;
use crate::{Customer, Plan, Service, ServiceAccount, StoreError};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use time::OffsetDateTime;
use uuid::Uuid;

/// Every storage port over collections behind one mutex: each call is one "transaction".
#[derive(Debug, Default)]
pub(crate) struct MemoryStore {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    customers: Vec<Customer>,
    /// In creation order: "oldest first" is this order.
    services: Vec<Service>,
    configs: BTreeMap<Uuid, PublishedConfig>,
    accounts: Vec<ServiceAccount>,
    credentials: HashMap<String, StoredCredential>,
    /// `(seq, change, when)`, oldest first: a change is dated by its event (the domain reads
    /// no clock), where the SQL store uses the time of the write.
    changes: Vec<(i64, Change, OffsetDateTime)>,
    /// Every audit event, in commit order.
    events: Vec<AuditEvent>,
    refusals: Vec<Refused>,
    /// Every flushed count, as recorded.
    fetches: Vec<DocumentFetches>,
}

#[derive(Debug)]
struct Refused {
    account: Uuid,
    at: OffsetDateTime,
    near: bool,
    record: Value,
}

impl State {
    /// A change made: its audit event and its row of the change log.
    fn commit(&mut self, event: &AuditEvent, change: Change) {
        self.events.push(event.clone());
        let seq = self.changes.last().map_or(0, |(seq, _, _)| *seq) + 1;
        self.changes.push((seq, change, event.at));
    }

    fn service_exists(&self, id: Uuid) -> bool {
        self.services.iter().any(|s| s.id == id)
    }

    fn account_mut(&mut self, id: Uuid) -> StoreResult<&mut ServiceAccount> {
        self.accounts
            .iter_mut()
            .find(|a| a.id == id)
            .ok_or(StoreError::NotFound)
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
}

impl MemoryStore {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every audit event stored, oldest first.
    pub(crate) fn events(&self) -> Vec<AuditEvent> {
        self.lock().events.clone()
    }

    /// The newest audit event stored.
    pub(crate) fn last_event(&self) -> Option<AuditEvent> {
        self.lock().events.last().cloned()
    }

    /// The stored events of `action`, oldest first.
    pub(crate) fn events_of(&self, action: Action) -> Vec<AuditEvent> {
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
        if s.customers.iter().any(|c| c.tenant == customer.tenant) {
            return Err(StoreError::Conflict("tenant".into()));
        }
        s.customers.push(customer.clone());
        s.accounts.push(first_account.clone());
        s.add_credential(token, CredentialOwner::Account(first_account.id));
        s.commit(event, Change::Account(first_account.id));
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
        Ok(self.lock().customers.clone())
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
        s.events.push(event.clone());
        Ok(Some(customer))
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
        let held = s
            .services
            .iter()
            .filter(|x| match service.customer_id {
                Some(_) => x.customer_id == service.customer_id,
                None => x.customer_id.is_none() && !x.is_expired_at(service.created_at),
            })
            .count();
        if !ceiling.admits(held as u64) {
            return Err(StoreError::CeilingReached(ceiling.0));
        }
        let subdomain = service.subdomain.to_lowercase();
        if s.services.iter().any(|x| x.subdomain == subdomain) {
            return Err(StoreError::Conflict("subdomain".into()));
        }
        s.services.push(Service {
            subdomain,
            ..service.clone()
        });
        if let Some(secret) = secret {
            s.add_credential(secret, CredentialOwner::AnonymousService(service.id));
        }
        s.commit(event, Change::Service(service.id));
        Ok(())
    }

    fn find_service(&self, subdomain_or_id: &str) -> StoreResult<Option<Service>> {
        let s = self.lock();
        let by_id = Uuid::parse_str(subdomain_or_id)
            .ok()
            .and_then(|id| s.services.iter().find(|x| x.id == id));
        let lower = subdomain_or_id.to_lowercase();
        Ok(by_id
            .or_else(|| s.services.iter().find(|x| x.subdomain == lower))
            .cloned())
    }

    fn service(&self, id: Uuid) -> StoreResult<Option<Service>> {
        Ok(self.lock().services.iter().find(|x| x.id == id).cloned())
    }

    fn services_of(&self, customer_id: Uuid) -> StoreResult<Vec<Service>> {
        let s = self.lock();
        Ok(s.services
            .iter()
            .filter(|x| x.customer_id == Some(customer_id))
            .cloned()
            .collect())
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
            let lower = wanted.to_lowercase();
            if owned.iter().any(|x| x.subdomain == lower) && !found.contains(wanted) {
                found.push(wanted.clone());
            }
        }
        Ok(found)
    }

    fn update_service(&self, service: &Service, event: &AuditEvent) -> StoreResult<()> {
        let mut s = self.lock();
        let stored = s
            .services
            .iter_mut()
            .find(|x| x.id == service.id)
            .ok_or(StoreError::NotFound)?;
        stored.title.clone_from(&service.title);
        stored.description.clone_from(&service.description);
        s.commit(event, Change::Service(service.id));
        Ok(())
    }

    fn delete_service(&self, id: Uuid, event: &AuditEvent) -> StoreResult<bool> {
        let mut s = self.lock();
        if !s.service_exists(id) {
            return Ok(false);
        }
        s.services.retain(|x| x.id != id);
        s.configs.remove(&id);
        s.remove_credentials_of(CredentialOwner::AnonymousService(id));
        s.commit(event, Change::Service(id));
        Ok(true)
    }

    fn expired_anonymous(&self, now: OffsetDateTime, limit: usize) -> StoreResult<Vec<Service>> {
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

    fn live_anonymous(&self, now: OffsetDateTime) -> StoreResult<u64> {
        let s = self.lock();
        let live = s
            .services
            .iter()
            .filter(|x| x.customer_id.is_none() && x.expires_at.is_some_and(|at| at > now));
        Ok(live.count() as u64)
    }

    fn put_config(&self, config: &PublishedConfig, event: &AuditEvent) -> StoreResult<()> {
        let mut s = self.lock();
        if !s.service_exists(config.service_id) {
            return Err(StoreError::NotFound);
        }
        s.configs.insert(config.service_id, config.clone());
        s.commit(event, Change::Service(config.service_id));
        Ok(())
    }

    /// Writes what `make` returns as it is (the SQL store also dates `previous_change_at` from
    /// the version it replaces). `make` runs under the store's lock: it must not call the store.
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
        let Some(config) = make(s.configs.get(&service_id).cloned()) else {
            return Ok(false);
        };
        s.configs.insert(service_id, config);
        s.commit(event, Change::Service(service_id));
        Ok(true)
    }

    fn configs_with_expired_keys(
        &self,
        now: OffsetDateTime,
        limit: usize,
    ) -> StoreResult<Vec<Uuid>> {
        let s = self.lock();
        Ok(s.configs
            .values()
            .filter(|c| c.keys.next_expiry().is_some_and(|at| at <= now))
            .map(|c| c.service_id)
            .take(limit)
            .collect())
    }

    fn config(&self, service_id: Uuid) -> StoreResult<Option<PublishedConfig>> {
        Ok(self.lock().configs.get(&service_id).cloned())
    }

    fn delete_config(&self, service_id: Uuid, event: &AuditEvent) -> StoreResult<bool> {
        let mut s = self.lock();
        if s.configs.remove(&service_id).is_none() {
            return Ok(false);
        }
        s.commit(event, Change::Service(service_id));
        Ok(true)
    }

    fn published_by_subdomain(
        &self,
        subdomain: &str,
    ) -> StoreResult<Option<(Service, PublishedConfig)>> {
        let s = self.lock();
        let subdomain = subdomain.to_lowercase();
        Ok(s.services
            .iter()
            .filter(|x| x.subdomain == subdomain)
            .find_map(|x| Some((x.clone(), s.configs.get(&x.id)?.clone()))))
    }
}

impl AccountStore for MemoryStore {
    fn create_account(
        &self,
        account: &ServiceAccount,
        token: Option<&CredentialRecord>,
        ceiling: Ceiling,
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
        s.accounts.push(account.clone());
        if let Some(token) = token {
            s.add_credential(token, CredentialOwner::Account(account.id));
        }
        s.commit(event, Change::Account(account.id));
        Ok(())
    }

    fn account(&self, id: Uuid) -> StoreResult<Option<ServiceAccount>> {
        Ok(self.lock().accounts.iter().find(|a| a.id == id).cloned())
    }

    fn accounts_of(&self, customer_id: Uuid) -> StoreResult<Vec<ServiceAccount>> {
        let s = self.lock();
        Ok(s.accounts
            .iter()
            .filter(|a| a.customer_id == customer_id)
            .cloned()
            .collect())
    }

    fn count_accounts_of(&self, customer_id: Uuid) -> StoreResult<u64> {
        Ok(self.accounts_of(customer_id)?.len() as u64)
    }

    fn update_account(&self, account: &ServiceAccount, event: &AuditEvent) -> StoreResult<()> {
        let mut s = self.lock();
        let stored = s.account_mut(account.id)?;
        stored.name.clone_from(&account.name);
        stored.policy = account.policy.clone();
        s.commit(event, Change::Account(account.id));
        Ok(())
    }

    fn delete_account(&self, id: Uuid, event: &AuditEvent) -> StoreResult<bool> {
        let mut s = self.lock();
        if s.account_mut(id).is_err() {
            return Ok(false);
        }
        s.accounts.retain(|a| a.id != id);
        s.remove_credentials_of(CredentialOwner::Account(id));
        s.commit(event, Change::Account(id));
        Ok(true)
    }

    fn token_lookup_id(&self, account_id: Uuid) -> StoreResult<Option<String>> {
        Ok(self.lock().token_of(account_id))
    }

    fn replace_token(
        &self,
        account_id: Uuid,
        replaced: Option<&str>,
        token: &CredentialRecord,
        event: &AuditEvent,
    ) -> StoreResult<()> {
        let mut s = self.lock();
        s.account_mut(account_id)?;
        if s.token_of(account_id).as_deref() != replaced {
            return Err(StoreError::Conflict(
                "the token was regenerated by another call meanwhile".into(),
            ));
        }
        s.remove_credentials_of(CredentialOwner::Account(account_id));
        s.add_credential(token, CredentialOwner::Account(account_id));
        s.commit(event, Change::Account(account_id));
        Ok(())
    }

    fn accounts_by_issuer(&self, issuer: &str) -> StoreResult<Vec<ServiceAccount>> {
        let s = self.lock();
        Ok(s.accounts
            .iter()
            .filter(|a| a.policy.issuers().contains(&issuer))
            .cloned()
            .collect())
    }

    fn record_use(&self, account_id: Uuid, minute: OffsetDateTime) -> StoreResult<bool> {
        let mut s = self.lock();
        let Ok(account) = s.account_mut(account_id) else {
            return Ok(false);
        };
        if account.last_used_at.is_some_and(|at| at >= minute) {
            return Ok(false);
        }
        account.last_used_at = Some(minute);
        Ok(true)
    }

    fn oidc_accounts(&self) -> StoreResult<Vec<ServiceAccount>> {
        let s = self.lock();
        Ok(s.accounts
            .iter()
            .filter(|a| a.policy.kind() == PolicyKind::Oidc)
            .cloned()
            .collect())
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
        let latest = self.latest_change()?;
        Ok(self.credential(lookup_id)?.map(|c| (c, latest)))
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

    fn prune_changes(&self, older_than: OffsetDateTime) -> StoreResult<usize> {
        let mut s = self.lock();
        let latest = s.changes.last().map_or(0, |(seq, _, _)| *seq);
        let before = s.changes.len();
        s.changes
            .retain(|(seq, _, at)| *at >= older_than || *seq == latest);
        Ok(before - s.changes.len())
    }

    fn ping(&self) -> StoreResult<()> {
        Ok(())
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
        let mut events: Vec<AuditEvent> = trail[start..]
            .iter()
            .filter(|e| query.action.is_none_or(|a| e.action == a))
            .filter(|e| query.since.is_none_or(|since| e.at >= since))
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

    fn prune_audit(&self, older_than: OffsetDateTime) -> StoreResult<usize> {
        let mut s = self.lock();
        let before = s.events.len();
        s.events.retain(|e| e.at >= older_than);
        Ok(before - s.events.len())
    }
}

impl RefusalLog for MemoryStore {
    fn record_refusals(&self, records: &[(Uuid, Value)], at: OffsetDateTime) -> StoreResult<()> {
        let mut s = self.lock();
        for (account, record) in records {
            let near = is_near_record(record);
            s.refusals.push(Refused {
                account: *account,
                at,
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

    fn refusals(
        &self,
        account_id: Uuid,
        since: OffsetDateTime,
        limit: usize,
    ) -> StoreResult<Vec<Value>> {
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
        let mut s = self.lock();
        let before = s.refusals.len();
        s.refusals.retain(|r| r.at >= older_than);
        Ok(before - s.refusals.len())
    }
}

/// Deterministic bytes that differ from call to call (each call's bytes come from its call
/// number), so that random names differ; [`FixedRandomness::rewind`] makes the next calls
/// repeat the first ones, to provoke name collisions.
#[derive(Debug, Default)]
pub(crate) struct FixedRandomness {
    calls: AtomicU64,
}

impl FixedRandomness {
    /// The next calls give the bytes the first calls gave, in the same order.
    pub(crate) fn rewind(&self) {
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
pub(crate) struct PlainHasher;

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
pub(crate) struct AcceptAllKeys;

impl KeyImport for AcceptAllKeys {
    fn import(&self, _jwk: &serde_json::Map<String, Value>) -> Result<(), String> {
        Ok(())
    }
}

/// A signature check that accepts a signature reading `good` with any key whose `kid` is the
/// token's (or any key, for a token without one).
#[derive(Debug, Default)]
pub(crate) struct GoodSignatures;

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

impl FetchLog for MemoryStore {
    fn record_fetches(&self, counts: &[DocumentFetches]) -> StoreResult<()> {
        self.lock().fetches.extend_from_slice(counts);
        Ok(())
    }

    fn fetches(
        &self,
        service_id: Uuid,
        since: OffsetDateTime,
        agents: usize,
    ) -> StoreResult<Vec<DocumentFetches>> {
        let since = crate::ports::fetch_hour(since);
        let s = self.lock();
        let mut sums: Vec<DocumentFetches> = Vec::new();
        let kept = s
            .fetches
            .iter()
            .filter(|f| f.service_id == service_id && crate::ports::fetch_hour(f.last_at) >= since);
        for f in kept {
            let sum = match sums.iter_mut().position(|d| d.document == f.document) {
                Some(i) => &mut sums[i],
                None => {
                    sums.push(DocumentFetches {
                        ok: 0,
                        not_modified: 0,
                        agents: Vec::new(),
                        ..f.clone()
                    });
                    sums.last_mut().unwrap()
                }
            };
            sum.ok += f.ok;
            sum.not_modified += f.not_modified;
            sum.last_at = sum.last_at.max(f.last_at);
            for a in &f.agents {
                match sum.agents.iter_mut().find(|b| b.agent == a.agent) {
                    Some(b) => {
                        b.count += a.count;
                        b.last_at = b.last_at.max(a.last_at);
                    }
                    None => sum.agents.push(a.clone()),
                }
            }
        }
        for sum in &mut sums {
            sum.agents
                .sort_by(|a, b| b.count.cmp(&a.count).then(a.agent.cmp(&b.agent)));
            sum.agents.truncate(agents);
        }
        Ok(sums)
    }

    fn prune_fetches(&self, older_than: OffsetDateTime) -> StoreResult<usize> {
        let since = crate::ports::fetch_hour(older_than);
        let mut s = self.lock();
        let before = s.fetches.len();
        s.fetches
            .retain(|f| crate::ports::fetch_hour(f.last_at) >= since);
        Ok(before - s.fetches.len())
    }
}

/// [`registry_over`] a fresh store.
pub(crate) fn registry(
    plan: Plan,
    now: OffsetDateTime,
) -> (Registry, Customer, Arc<ServiceAccount>) {
    registry_over(Arc::new(MemoryStore::default()), plan, now)
}

/// A registry over `store` (which the test keeps, to look at what was written) and the other
/// fakes, with default settings, holding one customer of tenant `acme` on `plan`, created with
/// its bootstrap account (static policy, every service) as an operator would.
pub(crate) fn registry_over(
    store: Arc<MemoryStore>,
    plan: Plan,
    now: OffsetDateTime,
) -> (Registry, Customer, Arc<ServiceAccount>) {
    let registry = Registry {
        store: store.clone(),
        random: Arc::new(FixedRandomness::default()),
        hasher: Arc::new(PlainHasher),
        key_import: Arc::new(AcceptAllKeys),
        signatures: Arc::new(GoodSignatures),
        settings: Settings::default(),
    };
    let command = super::customers::CreateCustomer {
        tenant: "acme".into(),
        plan: plan.as_str().into(),
        name: "Acme".into(),
    };
    let created = super::customers::create(&registry, command, now).unwrap();
    let (customer, account) = (created.customer, created.account);
    (registry, customer, Arc::new(account))
}

fn new_account(
    customer: &Customer,
    name: &str,
    policy: Value,
    now: OffsetDateTime,
) -> ServiceAccount {
    ServiceAccount {
        id: Uuid::new_v4(),
        customer_id: customer.id,
        name: name.into(),
        policy: Policy::parse(&policy).expect("a valid policy").policy,
        created_at: now,
        last_used_at: None,
    }
}

/// Adds an account of `customer` with `policy` (without a token) to the registry's store, as an
/// operator would: the store gets its `account.create` event.
pub(crate) fn add_account(
    registry: &Registry,
    customer: &Customer,
    policy: Value,
    now: OffsetDateTime,
) -> Arc<ServiceAccount> {
    let account = new_account(customer, "added", policy, now);
    let event = AuditEvent::new(
        Action::AccountCreate,
        Resource::account(account.id),
        Actor::operator(),
        Some(customer.id),
        now,
    );
    registry
        .store
        .create_account(&account, None, Ceiling::NONE, &event)
        .unwrap();
    Arc::new(account)
}

/// The origin of every test call: 192.0.2.1, request `req-1`.
pub(crate) fn origin() -> Origin {
    Origin::new("192.0.2.1".parse().unwrap(), Some("req-1".into()))
}

/// `account` calling with its static token from [`origin`].
pub(crate) fn caller(account: Arc<ServiceAccount>) -> Caller {
    Caller::account(account, None, None, origin())
}
