//! What authentication needs from the database, held in memory: services by id and subdomain,
//! accounts by id, and every OIDC account indexed by the issuers it trusts, each with its policy
//! parsed once.
//!
//! The trust index is exact, not a cache: loaded whole at start-up and changed only by the
//! change log, so a token whose issuer no policy names is refused from memory, before any key
//! fetch, database read or allocation in here (a stranger's made-up issuers cost nothing). Each
//! account is one `Arc`, shared by every issuer it trusts; its size is bounded when it is saved
//! (`registry_domain::limits`).
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
//! same changes every half second, so that public documents (which never touch the database)
//! follow too.

use crate::problem::ApiResult;
use crate::state::AppState;
use registry_domain::ports::{Change, StoredCredential};
use registry_domain::{Service, ServiceAccount};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};
use uuid::Uuid;

/// Changes read from the log per query.
const BATCH: usize = 500;
/// Entries per map before it is emptied (memory stays bounded whatever the callers send).
const MAX_ENTRIES: usize = 100_000;

/// The accounts whose rules name one issuer.
pub type Trusting = Arc<[Arc<ServiceAccount>]>;

/// The cached entries and the sequence number they reflect.
#[derive(Debug, Default)]
pub struct Directory {
    /// The newest change-log sequence whose changes these entries and the hosting cache reflect.
    applied: AtomicI64,
    /// Changes are applied by one task at a time, in order.
    applying: tokio::sync::Mutex<()>,
    entries: RwLock<Entries>,
    trust: RwLock<TrustIndex>,
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
struct Entries {
    /// Bumped by every invalidation. A fill whose database read began before an invalidation is
    /// dropped: the row it read may be the one the invalidation was about.
    generation: u64,
    services: HashMap<Uuid, Arc<Service>>,
    subdomains: HashMap<String, Uuid>,
    accounts: HashMap<Uuid, Arc<ServiceAccount>>,
}

fn bounded<K, V>(map: &mut HashMap<K, V>) -> &mut HashMap<K, V> {
    if map.len() >= MAX_ENTRIES {
        map.clear();
    }
    map
}

impl Directory {
    /// Loads the trust index whole (start-up: with the change sequence read before it, so that
    /// a change racing with the load is replayed).
    pub fn load_trust(&self, oidc_accounts: Vec<ServiceAccount>) {
        *self.trust.write().expect("trust lock") = TrustIndex::build(oidc_accounts);
    }

    /// The OIDC accounts (of any customer) with a rule whose `iss` is exactly `issuer`; `None`
    /// when no policy names it. Never reads the database.
    pub fn accounts_trusting(&self, issuer: &str) -> Option<Trusting> {
        self.trust
            .read()
            .expect("trust lock")
            .by_issuer
            .get(issuer)
            .cloned()
    }

    /// How many issuers some policy trusts.
    pub fn trusted_issuers(&self) -> usize {
        self.trust.read().expect("trust lock").by_issuer.len()
    }

    fn retrust(&self, id: Uuid, account: Option<ServiceAccount>) {
        let account = account
            .filter(|a| a.policy.kind() == registry_domain::policy::PolicyKind::Oidc)
            .map(Arc::new);
        self.trust.write().expect("trust lock").replace(id, account);
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

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Entries> {
        self.entries.read().expect("directory lock")
    }

    fn generation(&self) -> u64 {
        self.read().generation
    }

    /// Stores what a database read found, unless something was invalidated since `generation`.
    fn fill(&self, generation: u64, f: impl FnOnce(&mut Entries)) {
        let mut entries = self.entries.write().expect("directory lock");
        if entries.generation == generation {
            f(&mut entries);
        }
    }

    /// Empties the caches (a reload of everything follows).
    fn forget_all(&self) {
        let mut entries = self.entries.write().expect("directory lock");
        entries.generation += 1;
        entries.services.clear();
        entries.subdomains.clear();
        entries.accounts.clear();
    }

    fn forget(&self, change: Change) {
        let mut entries = self.entries.write().expect("directory lock");
        entries.generation += 1;
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

/// The credential with this lookup id, after bringing every cache up to date with the database
/// as of the same read: the one statement a request with a static token or secret runs. It
/// runs in place when the store can do that without waiting (SQLite, an idle connection), else
/// on the blocking pool.
pub async fn credential(state: &AppState, lookup_id: &str) -> ApiResult<Option<StoredCredential>> {
    let found = match state.store.credential_and_latest_change_now(lookup_id) {
        Some(found) => found?,
        None => {
            let lookup_id = lookup_id.to_owned();
            state
                .db(move |s| s.credential_and_latest_change(&lookup_id))
                .await?
        }
    };
    let Some((credential, latest)) = found else {
        return Ok(None);
    };
    catch_up(state, latest).await?;
    Ok(Some(credential))
}

/// Brings every cache up to date with the database as of now: the one statement a request with
/// an identity token runs (in place when it can, like [`credential`]).
pub async fn refresh(state: &AppState) -> ApiResult<()> {
    let latest = match state.store.latest_change_now() {
        Some(latest) => latest?,
        None => state.db(|s| s.latest_change()).await?,
    };
    catch_up(state, latest).await
}

/// Applies the logged changes up to at least `latest` (everything there is, for `i64::MAX`),
/// in log order. When the log no longer holds every change after this node's position (it was
/// paused or cut off for longer than the log is kept), it reloads everything instead.
pub async fn catch_up(state: &AppState, latest: i64) -> ApiResult<()> {
    let directory = &state.directory;
    if directory.applied() >= latest {
        return Ok(());
    }
    let _one_at_a_time = directory.applying.lock().await;
    let mut first = true;
    loop {
        let after = directory.applied();
        if after >= latest {
            return Ok(());
        }
        let check_horizon = std::mem::take(&mut first);
        let (oldest, (last, changes)) = state
            .db(move |s| {
                let oldest = if check_horizon {
                    s.oldest_change()?
                } else {
                    None
                };
                Ok((oldest, s.changes_since(after, BATCH)?))
            })
            .await?;
        // The log keeps its newest row, so `oldest - 1` is the last position it can replay
        // from; a position before it may have missed pruned changes.
        if oldest.is_some_and(|oldest| after < oldest - 1) {
            tracing::warn!(
                position = after,
                oldest = oldest.unwrap_or_default(),
                "behind the change log's horizon: reloading everything"
            );
            reload_everything(state).await?;
            continue;
        }
        let complete = changes.len() < BATCH;
        // Each subject once, at its last place in the log: a reload reads its current state.
        let mut seen = std::collections::HashSet::with_capacity(changes.len());
        let mut ordered: Vec<Change> = changes
            .into_iter()
            .rev()
            .filter(|change| seen.insert(*change))
            .collect();
        ordered.reverse();
        for change in ordered {
            directory.forget(change);
            match change {
                Change::Service(id) => reload_hosted(state, id).await?,
                Change::Account(id) => {
                    let found = state.db(move |s| s.account(id)).await?;
                    directory.retrust(id, found);
                }
            }
        }
        directory.caught_up_to(last);
        if complete {
            return Ok(());
        }
    }
}

/// Everything from the database at once: the hosted documents, the trust index, and empty
/// caches; then the position read before them (changes racing with the load are replayed). The
/// start-up load, and a replica behind the change log's horizon.
pub async fn reload_everything(state: &AppState) -> ApiResult<()> {
    let (latest, published, oidc_accounts) = state
        .db(|s| {
            let latest = s.latest_change()?;
            Ok((latest, s.published()?, s.oidc_accounts()?))
        })
        .await?;
    state.hosting.load(&published, state.now());
    state.directory.load_trust(oidc_accounts);
    state.directory.forget_all();
    state.directory.caught_up_to(latest);
    Ok(())
}

/// Makes the node that took a write to a service's documents serve the result at once, before
/// the write is acknowledged: applies the change log through the caller's own (committed)
/// change. Updating the hosting cache directly is not enough: a catch-up already under way may
/// have read the service before the write committed and would store that older state after it
/// (a just-published document answering 404, or a deleted one served again). Taking the same
/// lock orders this catch-up after that one, and it reads the database after the commit.
/// Should the database fail right now, the follower applies the change within half a second.
pub async fn settle_write(state: &AppState) {
    if let Err(error) = catch_up(state, i64::MAX).await {
        tracing::warn!(%error, "a write is served from the next change-log catch-up");
    }
}

/// Reads back the documents of a published service that left memory (the hosting cache's byte
/// bound). Under the catch-up lock, like every other reload: a deletion committed after this
/// read is applied after this reload, not before it.
pub async fn reload_evicted(state: &AppState, id: Uuid) -> ApiResult<()> {
    let _one_at_a_time = state.directory.one_at_a_time().await;
    reload_hosted(state, id).await
}

/// Builds a hosted entry again from what it was built from, once its key set changed by itself
/// (a retired key's time ran out): no database read, and every replica computes the same
/// documents and ETag. Under the catch-up lock, so a newer configuration applied meanwhile wins.
pub async fn refresh_hosted(state: &AppState, subdomain: &str) {
    let _one_at_a_time = state.directory.one_at_a_time().await;
    state.hosting.refresh(subdomain, state.now());
}

/// Reloads one service's public documents: public requests never read the database.
async fn reload_hosted(state: &AppState, id: Uuid) -> ApiResult<()> {
    match state
        .db(move |s| Ok((s.service(id)?, s.config(id)?)))
        .await?
    {
        // Replaced in one step: a public GET in between sees the old documents or the new.
        (Some(service), Some(config)) => state.hosting.put(&service, &config, state.now()),
        _ => state.hosting.remove(id),
    }
    Ok(())
}

/// A service by subdomain (case folded) or id, as [`ServiceStore::find_service`](registry_domain::ports::ServiceStore::find_service) finds it.
pub async fn service(state: &AppState, subdomain_or_id: &str) -> ApiResult<Option<Arc<Service>>> {
    let directory = &state.directory;
    let by_id = Uuid::parse_str(subdomain_or_id).ok();
    let subdomain: Cow<'_, str> = if subdomain_or_id.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(subdomain_or_id.to_ascii_lowercase())
    } else {
        Cow::Borrowed(subdomain_or_id)
    };
    {
        let entries = directory.read();
        let cached = match by_id {
            // The store tries the id first: a miss must ask it, not the subdomain map.
            Some(id) => entries.services.get(&id),
            None => entries
                .subdomains
                .get(subdomain.as_ref())
                .and_then(|id| entries.services.get(id)),
        };
        if let Some(service) = cached {
            return Ok(Some(service.clone()));
        }
    }
    let generation = directory.generation();
    let key = subdomain_or_id.to_owned();
    let Some(found) = state.db(move |s| s.find_service(&key)).await? else {
        return Ok(None);
    };
    let found = Arc::new(found);
    directory.fill(generation, |entries| {
        bounded(&mut entries.subdomains).insert(found.subdomain.clone(), found.id);
        bounded(&mut entries.services).insert(found.id, found.clone());
    });
    Ok(Some(found))
}

/// An account by id.
pub async fn account(state: &AppState, id: Uuid) -> ApiResult<Option<Arc<ServiceAccount>>> {
    let directory = &state.directory;
    if let Some(account) = directory.read().accounts.get(&id) {
        return Ok(Some(account.clone()));
    }
    let generation = directory.generation();
    let Some(found) = state.db(move |s| s.account(id)).await? else {
        return Ok(None);
    };
    let found = Arc::new(found);
    directory.fill(generation, |entries| {
        bounded(&mut entries.accounts).insert(id, found.clone());
    });
    Ok(Some(found))
}
