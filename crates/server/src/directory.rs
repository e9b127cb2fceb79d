//! What authentication needs from the database, held in memory: services by id and subdomain,
//! accounts by id, and which accounts trust an issuer, each with its policy parsed once.
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
use registry_domain::ports::{AccountStore, Change, ChangeFeed, ServiceStore, StoredCredential};
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
}

#[derive(Debug, Default)]
struct Entries {
    /// Bumped by every invalidation. A fill whose database read began before an invalidation is
    /// dropped: the row it read may be the one the invalidation was about.
    generation: u64,
    services: HashMap<Uuid, Arc<Service>>,
    subdomains: HashMap<String, Uuid>,
    accounts: HashMap<Uuid, Arc<ServiceAccount>>,
    /// Issuer → the accounts that trust it; emptied by any account change, since any account
    /// may have started or stopped trusting any issuer. Empty lists are kept too: that is exact
    /// for the same reason.
    trusting: HashMap<String, Trusting>,
}

fn bounded<K, V>(map: &mut HashMap<K, V>) -> &mut HashMap<K, V> {
    if map.len() >= MAX_ENTRIES {
        map.clear();
    }
    map
}

impl Directory {
    /// Records that the caches reflect the change log up to `seq` (the start-up load).
    pub fn caught_up_to(&self, seq: i64) {
        self.applied.fetch_max(seq, Ordering::AcqRel);
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

    fn forget(&self, change: Change) {
        let mut entries = self.entries.write().expect("directory lock");
        entries.generation += 1;
        match change {
            Change::Service(id) => {
                if let Some(service) = entries.services.remove(&id) {
                    entries.subdomains.remove(&service.subdomain);
                }
            }
            Change::Account(id) => {
                entries.accounts.remove(&id);
                entries.trusting.clear();
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

/// Applies the logged changes up to at least `latest` (everything there is, for `i64::MAX`).
pub async fn catch_up(state: &AppState, latest: i64) -> ApiResult<()> {
    let directory = &state.directory;
    if directory.applied() >= latest {
        return Ok(());
    }
    let _one_at_a_time = directory.applying.lock().await;
    loop {
        let after = directory.applied();
        if after >= latest {
            return Ok(());
        }
        let (last, changes) = state.db(move |s| s.changes_since(after, BATCH)).await?;
        let complete = changes.len() < BATCH;
        let mut services = Vec::new();
        for change in changes {
            directory.forget(change);
            if let Change::Service(id) = change {
                services.push(id);
            }
        }
        services.sort_unstable();
        services.dedup();
        for id in services {
            reload_hosted(state, id).await?;
        }
        directory.caught_up_to(last);
        if complete {
            return Ok(());
        }
    }
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

/// Reloads one service's public documents: public requests never read the database.
async fn reload_hosted(state: &AppState, id: Uuid) -> ApiResult<()> {
    match state
        .db(move |s| Ok((s.service(id)?, s.config(id)?)))
        .await?
    {
        (Some(service), Some(config)) => {
            state.hosting.remove(id);
            state.hosting.put(&service, &config);
        }
        _ => state.hosting.remove(id),
    }
    Ok(())
}

/// A service by subdomain (case folded) or id, as [`ServiceStore::find_service`] finds it.
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

/// The accounts (of any customer) with a rule whose `iss` is exactly `issuer`.
pub async fn accounts_trusting(state: &AppState, issuer: &str) -> ApiResult<Trusting> {
    let directory = &state.directory;
    if let Some(accounts) = directory.read().trusting.get(issuer) {
        return Ok(accounts.clone());
    }
    let generation = directory.generation();
    let key = issuer.to_owned();
    let found: Trusting = state
        .db(move |s| s.accounts_by_issuer(&key))
        .await?
        .into_iter()
        .map(Arc::new)
        .collect();
    directory.fill(generation, |entries| {
        bounded(&mut entries.trusting).insert(issuer.to_owned(), found.clone());
    });
    Ok(found)
}
