//! What authentication needs from the database, held in memory: services by id and subdomain,
//! accounts by id, and every OIDC account indexed by the issuers it trusts, each with its policy
//! parsed once.
//!
//! The trust index is exact, not a cache: loaded whole at start-up and changed only by the
//! change log. A token whose issuer the index does not name costs the request's one database
//! read (an account created on another replica a moment ago is in the change log: it is
//! usable at once, docs/api.md, "Authentication"); if no policy names it then either, that issuer
//! is refused from memory for the next 10 s (a keyed hash of it, bounded), before any key fetch.
//! Each account is one `Arc`, shared by every issuer it trusts; its size is bounded when it is
//! saved (`registry_domain::limits`).
//!
//! Every change to a service (its configuration, its secret) or to an account (its policy, its
//! token) appends to the change log in the same transaction. Each authenticated request reads the
//! log's newest sequence number in the one statement it runs anyway (with the credential, for a
//! static token or secret; alone, for an identity token). When that number is ahead of what the
//! caches reflect, the request first applies the changes in between: it drops the entries they
//! name and reloads the hosted documents of changed services. So a request never acts on
//! anything older than the database at the moment of its read: a regenerated token, a deleted
//! account or service, a narrowed policy take effect on the next request, on every replica, as
//! if every request read everything from the database. The follower in `background` applies the
//! same changes every half second, so that public documents (served from memory once read)
//! follow too.
//!
//! Each worker thread reads its own copies of the services, accounts and trust lists it used
//! (see `near`), checked against the shared maps again after any change: a request repeated on
//! many workers takes no lock and writes no reference count that another worker writes.

use crate::near::{Copied, Near};
use registry_domain::ports::Change;
use registry_domain::{Service, ServiceAccount};
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use uuid::Uuid;

/// Changes read from the log per query.
pub(crate) const BATCH: usize = 500;
/// Entries per map before it is emptied (memory stays bounded whatever the callers send).
const MAX_ENTRIES: usize = 100_000;

/// The accounts whose rules name one issuer.
pub type Trusting = Arc<[Arc<ServiceAccount>]>;

/// Services each worker thread keeps its own copies of.
const NEAR_SERVICES: usize = 4096;
/// Accounts each worker thread keeps its own copies of, alone or in trust lists.
const NEAR_ACCOUNTS: usize = 1024;

impl Copied for Service {
    fn copied(&self) -> Arc<Self> {
        Arc::new(self.clone())
    }
}

/// A copy of the account shares its compiled policy, which requests only read.
impl Copied for ServiceAccount {
    fn copied(&self) -> Arc<Self> {
        Arc::new(self.clone())
    }
}

/// A trust list's copy holds copies of its accounts: a caller keeps the account it acts as.
impl Copied for [Arc<ServiceAccount>] {
    fn copied(&self) -> Arc<Self> {
        self.iter().map(|account| account.copied()).collect()
    }

    fn weight(&self) -> usize {
        self.len()
    }
}

/// The cached entries and the sequence number they reflect.
#[derive(Debug)]
pub struct Directory {
    /// The newest change-log sequence whose changes these entries and the hosting cache reflect.
    applied: AtomicI64,
    /// Changes are applied by one task at a time, in order.
    pub(crate) applying: tokio::sync::Mutex<()>,
    entries: RwLock<Entries>,
    /// Bumped, under the entries' write lock, by every invalidation. A fill whose database read
    /// began before an invalidation is dropped: the row it read may be the one the invalidation
    /// was about. The workers' copies of entries are checked again.
    generation: AtomicU64,
    services_near: Near<String, Service>,
    accounts_near: Near<Uuid, ServiceAccount>,
    trust: RwLock<TrustIndex>,
    /// Bumped, under the trust index's write lock, by every change of it.
    trust_changes: AtomicU64,
    trust_near: Near<String, [Arc<ServiceAccount>]>,
}

impl Default for Directory {
    fn default() -> Self {
        Self {
            applied: AtomicI64::default(),
            applying: tokio::sync::Mutex::default(),
            entries: RwLock::default(),
            generation: AtomicU64::default(),
            services_near: Near::new(NEAR_SERVICES),
            accounts_near: Near::new(NEAR_ACCOUNTS),
            trust: RwLock::default(),
            trust_changes: AtomicU64::default(),
            trust_near: Near::new(NEAR_ACCOUNTS),
        }
    }
}

/// Every OIDC account, and the accounts trusting each issuer.
#[derive(Debug, Default)]
struct TrustIndex {
    accounts: HashMap<Uuid, Arc<ServiceAccount>>,
    by_issuer: HashMap<Box<str>, Trusting>,
}

impl TrustIndex {
    /// Puts `account` in place of the account with `id` (`None`: it is gone, or not `oidc`).
    /// Costs the lists of the issuers the two versions trust, not the whole index.
    fn replace(&mut self, id: Uuid, account: Option<Arc<ServiceAccount>>) {
        if let Some(old) = self.accounts.remove(&id) {
            for issuer in old.policy.issuers() {
                let Some(list) = self.by_issuer.get(issuer) else {
                    continue;
                };
                let rest: Vec<Arc<ServiceAccount>> =
                    list.iter().filter(|a| a.id != id).cloned().collect();
                if rest.is_empty() {
                    self.by_issuer.remove(issuer);
                } else {
                    self.by_issuer.insert(issuer.into(), rest.into());
                }
            }
        }
        if let Some(new) = account {
            for issuer in new.policy.issuers() {
                let mut list: Vec<Arc<ServiceAccount>> = self
                    .by_issuer
                    .get(issuer)
                    .map(|l| l.to_vec())
                    .unwrap_or_default();
                list.push(new.clone());
                list.sort_by_key(|a| (a.created_at, a.id));
                self.by_issuer.insert(issuer.into(), list.into());
            }
            self.accounts.insert(id, new);
        }
    }

    /// The whole index at once (start-up).
    fn build(oidc_accounts: Vec<ServiceAccount>) -> Self {
        let mut lists: HashMap<Box<str>, Vec<Arc<ServiceAccount>>> = HashMap::new();
        let mut accounts = HashMap::new();
        for account in oidc_accounts {
            let account = Arc::new(account);
            for issuer in account.policy.issuers() {
                lists
                    .entry(issuer.into())
                    .or_default()
                    .push(account.clone());
            }
            accounts.insert(account.id, account);
        }
        let by_issuer = lists
            .into_iter()
            .map(|(issuer, mut list)| {
                list.sort_by_key(|a| (a.created_at, a.id));
                (issuer, list.into())
            })
            .collect();
        Self {
            accounts,
            by_issuer,
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Entries {
    pub(crate) services: HashMap<Uuid, Arc<Service>>,
    pub(crate) subdomains: HashMap<String, Uuid>,
    pub(crate) accounts: HashMap<Uuid, Arc<ServiceAccount>>,
}

pub(crate) fn bounded<K, V>(map: &mut HashMap<K, V>) -> &mut HashMap<K, V> {
    if map.len() >= MAX_ENTRIES {
        map.clear();
    }
    map
}

impl Directory {
    /// Loads the trust index whole (start-up: with the change sequence read before it, so that
    /// a change racing with the load is replayed).
    pub fn load_trust(&self, oidc_accounts: Vec<ServiceAccount>) {
        let mut trust = self.trust.write().expect("trust lock");
        *trust = TrustIndex::build(oidc_accounts);
        self.trust_changes.fetch_add(1, Ordering::Release);
    }

    /// The OIDC accounts (of any customer) with a rule whose `iss` is exactly `issuer`; `None`
    /// when no policy names it. Never reads the database.
    pub fn accounts_trusting(&self, issuer: &str) -> Option<Trusting> {
        let changes = self.trust_changes.load(Ordering::Acquire);
        let shared = || {
            let trust = self.trust.read().expect("trust lock");
            trust.by_issuer.get(issuer).cloned()
        };
        self.trust_near.get(issuer, changes, |_| {}, shared)
    }

    /// How many issuers some policy trusts.
    pub fn trusted_issuers(&self) -> usize {
        self.trust.read().expect("trust lock").by_issuer.len()
    }

    pub(crate) fn retrust(&self, id: Uuid, account: Option<ServiceAccount>) {
        let account = account
            .filter(|a| a.policy.kind() == registry_domain::policy::PolicyKind::Oidc)
            .map(Arc::new);
        let mut trust = self.trust.write().expect("trust lock");
        trust.replace(id, account);
        self.trust_changes.fetch_add(1, Ordering::Release);
    }

    /// Records that the caches reflect the change log up to `seq` (the start-up load).
    pub fn caught_up_to(&self, seq: i64) {
        self.applied.fetch_max(seq, Ordering::AcqRel);
    }

    /// Takes the catch-up lock: changes are applied, and reloads made, one at a time.
    pub async fn one_at_a_time(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.applying.lock().await
    }

    /// The change-log sequence the caches reflect.
    pub fn applied(&self) -> i64 {
        self.applied.load(Ordering::Acquire)
    }

    /// The count of invalidations: a database read begun now is kept by [`Directory::fill`]
    /// only while it has not moved.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The service in memory under `key` (a subdomain, lower case, or an id as text; `id` when
    /// it is one): this thread's copy while nothing was invalidated since it was checked.
    pub(crate) fn service(&self, key: &str, id: Option<Uuid>) -> Option<Arc<Service>> {
        let shared = || {
            let entries = self.entries.read().expect("directory lock");
            match id {
                // The store tries the id first: a miss must ask it, not the subdomain map.
                Some(id) => entries.services.get(&id),
                None => (entries.subdomains.get(key)).and_then(|id| entries.services.get(id)),
            }
            .cloned()
        };
        (self.services_near).get(key, self.generation(), |_| {}, shared)
    }

    /// The account in memory with this id, as [`Directory::service`] finds a service.
    pub(crate) fn account(&self, id: Uuid) -> Option<Arc<ServiceAccount>> {
        let shared = || {
            let entries = self.entries.read().expect("directory lock");
            entries.accounts.get(&id).cloned()
        };
        (self.accounts_near).get(&id, self.generation(), |_| {}, shared)
    }

    /// Stores what a database read found, unless something was invalidated since `generation`.
    pub(crate) fn fill(&self, generation: u64, f: impl FnOnce(&mut Entries)) {
        let mut entries = self.entries.write().expect("directory lock");
        if self.generation() == generation {
            f(&mut entries);
        }
    }

    /// Empties the caches (a reload of everything follows).
    pub(crate) fn forget_all(&self) {
        let mut entries = self.entries.write().expect("directory lock");
        entries.services.clear();
        entries.subdomains.clear();
        entries.accounts.clear();
        self.generation.fetch_add(1, Ordering::Release);
    }

    pub(crate) fn forget(&self, change: Change) {
        let mut entries = self.entries.write().expect("directory lock");
        self.generation.fetch_add(1, Ordering::Release);
        match change {
            Change::Service(id) => {
                if let Some(service) = entries.services.remove(&id) {
                    // Only while the name still points at this id (see `HostingCache`).
                    if entries.subdomains.get(&service.subdomain) == Some(&id) {
                        entries.subdomains.remove(&service.subdomain);
                    }
                }
            }
            Change::Account(id) => {
                entries.accounts.remove(&id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use registry_domain::policy::Policy;
    use time::OffsetDateTime;

    fn service(subdomain: &str) -> Service {
        Service {
            id: Uuid::new_v4(),
            customer_id: None,
            subdomain: subdomain.into(),
            title: None,
            description: None,
            created_at: OffsetDateTime::UNIX_EPOCH,
            expires_at: None,
        }
    }

    fn account(issuer: &str) -> ServiceAccount {
        let policy = serde_json::json!({"kind": "oidc", "rules": [{"services": ["a-x"],
            "claims": {"iss": issuer, "aud": "https://registry.example", "sub": "ci"}}]});
        ServiceAccount {
            id: Uuid::new_v4(),
            customer_id: Uuid::new_v4(),
            name: "ci".into(),
            policy: Policy::parse(&policy).expect("a valid policy").policy,
            created_at: OffsetDateTime::UNIX_EPOCH,
            last_used_at: None,
        }
    }

    #[test]
    fn each_thread_reads_its_own_copies_and_every_change_reaches_them() {
        let directory = Directory::default();
        let a = Arc::new(service("a-x"));
        let reader = Arc::new(account("https://ci.example"));
        directory.fill(directory.generation(), |entries| {
            entries.subdomains.insert(a.subdomain.clone(), a.id);
            entries.services.insert(a.id, a.clone());
            entries.accounts.insert(reader.id, reader.clone());
        });
        let once = directory.service("a-x", None).expect("in memory");
        assert!(
            Arc::ptr_eq(&once, &a),
            "the first use is served the shared entry"
        );
        let first = directory.service("a-x", None).expect("in memory");
        assert!(
            !Arc::ptr_eq(&first, &a),
            "a copy of its own from the second use"
        );
        assert_eq!(*first, *a);
        assert!(Arc::ptr_eq(
            &directory.service("a-x", None).unwrap(),
            &first
        ));
        directory.account(reader.id).expect("in memory");
        let mine = directory.account(reader.id).expect("in memory");
        assert!(!Arc::ptr_eq(&mine, &reader));
        std::thread::scope(|scope| {
            scope.spawn(|| {
                directory.service("a-x", None).expect("in memory");
                let theirs = directory.service("a-x", None).expect("in memory");
                assert!(!Arc::ptr_eq(&theirs, &first), "each thread has its own");
            });
        });
        // A change of another account: the copies are checked, and kept.
        directory.forget(Change::Account(Uuid::new_v4()));
        assert!(Arc::ptr_eq(
            &directory.service("a-x", None).unwrap(),
            &first
        ));
        // The changed ones are gone at once.
        directory.forget(Change::Service(a.id));
        assert!(directory.service("a-x", None).is_none());
        directory.forget(Change::Account(reader.id));
        assert!(directory.account(reader.id).is_none());
    }

    #[test]
    fn trust_lists_are_copied_whole_and_follow_every_change() {
        let directory = Directory::default();
        let issuer = "https://ci.example";
        let first = account(issuer);
        directory.load_trust(vec![first.clone()]);
        directory.accounts_trusting(issuer).expect("trusted");
        let trusting = directory.accounts_trusting(issuer).expect("trusted");
        assert_eq!(trusting.len(), 1);
        let again = directory.accounts_trusting(issuer).expect("trusted");
        assert!(Arc::ptr_eq(&again, &trusting), "this thread's copy");
        let second = account(issuer);
        directory.retrust(second.id, Some(second.clone()));
        let both = directory.accounts_trusting(issuer).expect("trusted");
        assert_eq!(both.len(), 2, "a new account trusts the issuer at once");
        directory.retrust(first.id, None);
        directory.retrust(second.id, None);
        assert!(directory.accounts_trusting(issuer).is_none());
    }
}
