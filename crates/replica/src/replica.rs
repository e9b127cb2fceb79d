//! The replica's view of the data: the directory (services, accounts, the trust index) and the
//! hosted documents, kept as fresh as the database by the change log (see `directory` for how),
//! with the one read every authenticated request makes. Handlers and the authenticator reach the
//! database's current state through it; it reads a [`ReplicaSource`] and writes nothing: the use
//! cases of `registry_domain::app` write, and then [`Replica::settle_write`].

use crate::directory::{bounded, Directory, BATCH};
use crate::domains::{DomainChanged, Domains};
use crate::hosting::{Generation, Hosted, HostingCache, Lookup};
use crate::ReplicaResult;
use registry_domain::ports::{
    Change, Clock, Database, DatabaseSides, ReplicaSource, StoreResult, StoredCredential,
};
use registry_domain::service::Publication;
use registry_domain::{Service, ServiceAccount};
use std::borrow::Cow;
use std::sync::{Arc, PoisonError};
use time::OffsetDateTime;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use uuid::Uuid;

/// The directory and the hosted documents of this replica, over the store and the clock.
#[derive(Debug)]
pub struct Replica {
    /// What it reads: the change log and the rows a change names.
    source: Arc<dyn ReplicaSource>,
    /// The same database, for the reads taken in place and its sides.
    database: Arc<dyn Database>,
    clock: Arc<dyn Clock>,
    /// Services and accounts, served from memory as fresh as the database.
    pub directory: Directory,
    /// Published documents, served from memory.
    pub hosting: HostingCache,
    /// Public fetches counted since the last flush (docs/api.md, "Fetch evidence").
    pub fetches: crate::fetches::Fetches,
    /// Custom domains served (docs/api.md, "Custom domains").
    pub domains: Domains,
    /// Who hears of the changes of public documents this replica applies (the purger).
    watcher: std::sync::Mutex<Option<UnboundedSender<DocumentsChanged>>>,
    /// Who hears of the changes of custom domains this replica applies (the TLS listener).
    domain_watcher: std::sync::Mutex<Option<UnboundedSender<DomainChanged>>>,
}

/// A change of a service's public documents, as this replica applied it: what the caches in
/// front of the registry must drop (docs/api.md, "Behind a CDN").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocumentsChanged {
    /// The service.
    pub service_id: Uuid,
    /// The subdomain its documents are (or were) served under.
    pub subdomain: String,
    /// When the documents changed.
    pub changed_at: OffsetDateTime,
    /// The custom domains this change stopped serving them under: caches may still hold their
    /// copies there.
    pub dropped_domains: Vec<String>,
}

impl Replica {
    /// A replica of `database` with empty caches ([`Replica::reload_everything`] fills them).
    pub fn new<S>(database: Arc<S>, clock: Arc<dyn Clock>, hosting: HostingCache) -> Self
    where
        S: ReplicaSource + Database + 'static,
    {
        Self {
            source: database.clone(),
            database,
            clock,
            directory: Directory::default(),
            hosting,
            fetches: crate::fetches::Fetches::default(),
            domains: Domains::default(),
            watcher: std::sync::Mutex::default(),
            domain_watcher: std::sync::Mutex::default(),
        }
    }

    /// From now on, every change of the custom domains served (a domain activated, a new
    /// certificate, a domain dropped) is sent to the receiver this answers. What is served
    /// already is in [`Domains::all`].
    pub fn watch_domains(&self) -> UnboundedReceiver<DomainChanged> {
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        *self
            .domain_watcher
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(sender);
        receiver
    }

    fn domains_changed(&self, changes: Vec<DomainChanged>) {
        let watcher = self
            .domain_watcher
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(watcher) = watcher.as_ref() {
            for change in changes {
                let _ = watcher.send(change);
            }
        }
    }

    /// From now on, every change of public documents this replica applies (a publication, a
    /// withdrawal, a retired key leaving the key set) is sent to the receiver this answers.
    pub fn watch_documents(&self) -> UnboundedReceiver<DocumentsChanged> {
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        *self.watcher.lock().unwrap_or_else(PoisonError::into_inner) = Some(sender);
        receiver
    }

    fn documents_changed(&self, change: DocumentsChanged) {
        let watcher = self.watcher.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(watcher) = watcher.as_ref() {
            let _ = watcher.send(change);
        }
    }

    /// The current time.
    pub fn now(&self) -> OffsetDateTime {
        self.clock.now()
    }

    /// Runs reads of the replica's source on the blocking pool.
    async fn db<T, F>(&self, f: F) -> ReplicaResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&dyn ReplicaSource) -> StoreResult<T> + Send + 'static,
    {
        let source = self.source.clone();
        Ok(crate::blocking(move || f(&*source)).await??)
    }

    /// The connections of each side's pool now.
    pub fn pools(&self) -> Vec<registry_domain::ports::PoolUse> {
        self.database.pools()
    }

    /// Which sides of the database answer now (docs/api.md, "Read replicas and the primary
    /// down"), asked on the blocking pool.
    pub async fn sides(&self) -> ReplicaResult<DatabaseSides> {
        let database = self.database.clone();
        crate::blocking(move || database.sides()).await
    }

    /// The credential with this lookup id, after bringing every cache up to date with the database
    /// as of the same read: the one statement a request with a static token or secret runs. It
    /// runs in place when the store can do that without waiting (SQLite, an idle connection), else
    /// on the blocking pool.
    pub async fn credential(&self, lookup_id: &str) -> ReplicaResult<Option<StoredCredential>> {
        let found = match self.database.credential_and_latest_change_now(lookup_id) {
            Some(found) => found?,
            None => {
                let lookup_id = lookup_id.to_owned();
                self.db(move |s| s.credential_and_latest_change(&lookup_id))
                    .await?
            }
        };
        let Some((credential, latest)) = found else {
            return Ok(None);
        };
        self.catch_up(latest).await?;
        Ok(Some(credential))
    }

    /// Brings every cache up to date with the database as of now: the one statement a request with
    /// an identity token runs (in place when it can, like [`Replica::credential`]).
    pub async fn refresh(&self) -> ReplicaResult<()> {
        let latest = match self.database.latest_change_now() {
            Some(latest) => latest?,
            None => self.db(|s| s.latest_change()).await?,
        };
        self.catch_up(latest).await
    }

    /// Applies the logged changes up to at least `latest` (everything there is, for `i64::MAX`),
    /// in log order. When the log no longer holds every change after this node's position (it was
    /// paused or cut off for longer than the log is kept), it reloads everything instead.
    pub async fn catch_up(&self, latest: i64) -> ReplicaResult<()> {
        let directory = &self.directory;
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
            let (oldest, (last, changes)) = self
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
                self.reload_everything().await?;
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
                    Change::Service(id) => self.reload_hosted(id).await?,
                    Change::Account(id) => {
                        let found = self.db(move |s| s.account(id)).await?;
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

    /// Starts again from the database: the trust index read whole, every cache emptied (hosted
    /// documents are read when first asked for), then the position read before them (changes
    /// racing with the load are replayed). Costs the same whatever the number of published
    /// services (docs/api.md, "Limits that hold (second security review)"). The start-up load, and
    /// a replica behind the change log's horizon.
    pub async fn reload_everything(&self) -> ReplicaResult<()> {
        let (latest, oidc_accounts, domains) = self
            .db(|s| {
                let latest = s.latest_change()?;
                let mut domains = Vec::new();
                for domain in s.held_domains()? {
                    if let Some(service) = s.service(domain.service_id)? {
                        domains.push((domain, service.subdomain));
                    }
                }
                Ok((latest, s.oidc_accounts()?, domains))
            })
            .await?;
        let changes = self.domains.load(domains);
        self.domains_changed(changes);
        self.hosting.clear();
        self.directory.load_trust(oidc_accounts);
        self.directory.forget_all();
        self.directory.caught_up_to(latest);
        Ok(())
    }

    /// Makes the node that took a write to a service's documents serve the result at once, before
    /// the write is acknowledged: applies the change log through the caller's own (committed)
    /// change. Updating the hosting cache directly is not enough: a catch-up already under way may
    /// have read the service before the write committed and would store that older state after it
    /// (a just-published document answering 404, or a deleted one served again). Taking the same
    /// lock orders this catch-up after that one, and it reads the database after the commit.
    /// Should the database fail right now, the follower applies the change within half a second.
    pub async fn settle_write(&self) {
        if let Err(error) = self.catch_up(i64::MAX).await {
            tracing::warn!(%error, "a write is served from the next change-log catch-up");
        }
    }

    /// The custom domain under which this replica serves `service_id`'s documents, if any: read
    /// before a deletion, for [`Self::documents_gone`].
    pub fn served_domains(&self, service_id: Uuid) -> Vec<String> {
        (self.domains.of_service(service_id))
            .map(|served| vec![served.domain.domain.clone()])
            .unwrap_or_default()
    }

    /// Documents of service `service_id` at `subdomain` (and under `domains`, a custom domain
    /// the deletion dropped) may have been deleted here, by a call or the reaper, after the
    /// write's own application: each replica purges what it held as it applies a change, and
    /// none knows what it no longer holds, so unless this replica holds the service's
    /// documents now (the change kept some, and its application purged them), the caches in
    /// front are purged here.
    pub fn documents_gone(&self, service_id: Uuid, subdomain: &str, domains: Vec<String>) {
        if self.hosting.holds(service_id) {
            return;
        }
        self.documents_changed(DocumentsChanged {
            service_id,
            subdomain: subdomain.to_owned(),
            changed_at: self.now(),
            dropped_domains: domains,
        });
    }

    /// Builds a hosted entry again from what it was built from, once its key set changed by itself
    /// (a retired key's time ran out): no database read, and every replica computes the same
    /// documents and ETag. Under the catch-up lock, so a newer configuration applied meanwhile wins.
    pub async fn refresh_hosted(&self, subdomain: &str) {
        let _one_at_a_time = self.directory.one_at_a_time().await;
        let now = self.now();
        if let Some(service_id) = self.hosting.refresh(subdomain, now) {
            self.documents_changed(DocumentsChanged {
                service_id,
                subdomain: subdomain.to_owned(),
                changed_at: now,
                dropped_domains: Vec::new(),
            });
        }
    }

    /// Applies a change of one service to the hosted documents: its current documents (a
    /// publication is served at once, and clears its name's remembered miss), or none.
    async fn reload_hosted(&self, id: Uuid) -> ReplicaResult<()> {
        let (service, config, domain) = self
            .db(move |s| Ok((s.service(id)?, s.config(id)?, s.domain_of(id)?)))
            .await?;
        let served = domain.zip(service.as_ref().map(|s| s.subdomain.clone()));
        let changes = self.domains.apply(id, served);
        let dropped_domains: Vec<String> = (changes.iter())
            .filter_map(|change| match change {
                DomainChanged::Dropped(name) => Some(name.clone()),
                DomainChanged::Served(_) => None,
            })
            .collect();
        self.domains_changed(changes);
        match (service, config) {
            // Replaced in one step: a public GET in between sees the old documents or the new.
            (Some(service), Some(config)) => {
                let changed_at = config.updated_at;
                self.hosting
                    .put(Publication::of(&service, config), self.now());
                self.documents_changed(DocumentsChanged {
                    service_id: id,
                    subdomain: service.subdomain,
                    changed_at,
                    dropped_domains,
                });
            }
            // Documents this replica holds are purged; a cache may also hold documents that no
            // replica does any more (dropped for room): the replica whose call or reaper
            // deleted them purges those ([`Self::documents_gone`]). (Errors, 404s included, are
            // never cached: they say `no-store`.)
            _ => {
                if let Some(subdomain) = self.hosting.remove(id) {
                    self.documents_changed(DocumentsChanged {
                        service_id: id,
                        subdomain,
                        changed_at: self.now(),
                        dropped_domains,
                    });
                }
            }
        }
        Ok(())
    }

    /// A service's managed signing, read in place ([`Database::signing_now`]), or `None` when
    /// that would wait: the caller then reads it where waiting is allowed. Kept by nothing here,
    /// and by the store only while the database is unchanged: a rotation or a compromise
    /// applies to the next signature on every replica.
    pub fn signing_now(
        &self,
        service_id: Uuid,
    ) -> Option<ReplicaResult<Option<registry_domain::signing::Signing>>> {
        let read = self.database.signing_now(service_id)?;
        Some(read.map_err(Into::into))
    }

    /// A service by subdomain (case folded) or id, as
    /// [`ServiceStore::find_service`](registry_domain::ports::ServiceStore::find_service) finds it.
    pub async fn service(&self, subdomain_or_id: &str) -> ReplicaResult<Option<Arc<Service>>> {
        let directory = &self.directory;
        let by_id = Uuid::parse_str(subdomain_or_id).ok();
        let subdomain: Cow<'_, str> = if subdomain_or_id.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Owned(subdomain_or_id.to_ascii_lowercase())
        } else {
            Cow::Borrowed(subdomain_or_id)
        };
        if let Some(service) = directory.service(&subdomain, by_id) {
            return Ok(Some(service));
        }
        let generation = directory.generation();
        let key = subdomain_or_id.to_owned();
        let Some(found) = self.db(move |s| s.find_service(&key)).await? else {
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
    pub async fn account(&self, id: Uuid) -> ReplicaResult<Option<Arc<ServiceAccount>>> {
        let directory = &self.directory;
        if let Some(account) = directory.account(id) {
            return Ok(Some(account));
        }
        let generation = directory.generation();
        let Some(found) = self.db(move |s| s.account(id)).await? else {
            return Ok(None);
        };
        let found = Arc::new(found);
        directory.fill(generation, |entries| {
            bounded(&mut entries.accounts).insert(id, found.clone());
        });
        Ok(Some(found))
    }

    /// What a subdomain serves now: from memory, built again when its key set changed by itself,
    /// or read from the database (one indexed read) when it is not in memory, and kept; a
    /// subdomain that published nothing at a read less than 10 s ago is answered from memory.
    /// Nothing once an anonymous service has expired at `now` (the request's time), even before
    /// the reaper deletes it.
    pub async fn current(
        &self,
        subdomain: &str,
        now: OffsetDateTime,
    ) -> ReplicaResult<Option<Arc<Hosted>>> {
        let hosted = match self.hosting.lookup(subdomain, now) {
            Lookup::Hit(hosted) if hosted.is_stale_at(now) => {
                self.refresh_hosted(subdomain).await;
                match self.hosting.lookup(subdomain, now) {
                    Lookup::Hit(hosted) => Some(hosted),
                    Lookup::Missing => None,
                    // Changed and evicted meanwhile.
                    Lookup::Unknown(generation) => {
                        self.read_hosted(subdomain, generation, now).await?
                    }
                }
            }
            Lookup::Hit(hosted) => Some(hosted),
            Lookup::Missing => None,
            Lookup::Unknown(generation) => self.read_hosted(subdomain, generation, now).await?,
        };
        Ok(hosted.filter(|h| h.expires_at.is_none_or(|at| now < at)))
    }

    /// Reads a subdomain's documents from the database (one indexed read, outside the catch-up
    /// lock: made-up names must not queue behind each other; in place when the store can do
    /// that without waiting, like [`Replica::credential`]) and keeps them, or keeps that
    /// nothing is published there, unless a change was applied since `generation`: the read
    /// may be older than that change.
    async fn read_hosted(
        &self,
        subdomain: &str,
        generation: Generation,
        now: OffsetDateTime,
    ) -> ReplicaResult<Option<Arc<Hosted>>> {
        let found = match self.database.published_by_subdomain_now(subdomain) {
            Some(found) => found?,
            None => {
                let key = subdomain.to_owned();
                self.db(move |s| s.published_by_subdomain(&key)).await?
            }
        };
        Ok(self.hosting.fill(generation, subdomain, found, now))
    }

    /// The documents an issuer this registry hosts publishes now: `None` when the issuer is not
    /// one of its own (its keys are fetched over HTTP), `Some(None)` when it is but publishes
    /// nothing at `now` (no configuration, deleted, expired). Read from the registry's own data, never over
    /// HTTP, so that a withdrawal applies to the next token
    /// (docs/api.md, "Authentication").
    pub async fn hosted_issuer(
        &self,
        issuer: &str,
        now: OffsetDateTime,
    ) -> ReplicaResult<Option<Option<Arc<Hosted>>>> {
        // A custom domain's issuer is exactly `https://<domain>` (docs/api.md, "Custom domains").
        if let Some(served) = issuer
            .strip_prefix("https://")
            .and_then(|name| self.domains.get(name))
        {
            return Ok(Some(self.current(&served.subdomain, now).await?));
        }
        match self.hosting.issuers().hosted(issuer) {
            None => Ok(None),
            Some(None) => Ok(Some(None)),
            Some(Some(subdomain)) => Ok(Some(self.current(&subdomain, now).await?)),
        }
    }
}

#[cfg(test)]
mod tests;
