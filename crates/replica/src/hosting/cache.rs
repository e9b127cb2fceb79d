//! The documents of the subdomains in memory, bounded in bytes, with the misses remembered and
//! the generation that keeps a read begun before a change from being kept after it.

use super::hosted::{DateText, Hosted};
use super::hosts::Hosts;
use crate::absent::Absent;
use crate::near::Near;
use registry_domain::issuer::Issuers;
use registry_domain::service::Publication;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use time::OffsetDateTime;
use uuid::Uuid;

/// Subdomain → published documents, plus how to recognise a hosted `Host`.
///
/// Only what is in memory is known: nothing is loaded at start-up (docs/api.md, "Limits that hold
/// (second security review)", "Hosting memory"), and a subdomain that is not in memory is read from
/// the database ([`Lookup::Unknown`], one indexed read, the caller's) and kept. The documents held
/// are bounded in bytes (`REGISTRY_HOSTING_CACHE_BYTES`): past the bound, the least recently served
/// leave memory altogether. A subdomain the database said publishes nothing is remembered for 10 s
/// (a keyed hash of it, at most `absent::MAX_ABSENT`), so a flood of made-up hosts costs at most one read
/// per name per 10 s and no memory beyond that bound. Every change is made under one lock: a reader
/// sees a service's old documents or its new ones, never none.
///
/// Each worker thread serves its own copy of the documents it served before (see `near`), at
/// most 1 MiB of them per thread (`NEAR_BYTES`) beside the bound: serving a popular subdomain on
/// many workers takes no lock and writes no reference count another worker writes.
#[derive(Debug)]
pub struct HostingCache {
    hosts: RwLock<Hosts>,
    near: Near<String, Hosted>,
    misses: Absent,
    /// Bumped by every change of what is served (a change applied from the change log, an entry
    /// rebuilt, a reload of everything), under both locks. A read of the database begun before
    /// a change is not kept: it may be older than what the change brought; and the workers'
    /// copies are checked again.
    generation: AtomicU64,
    /// Database reads for subdomains that were not in memory.
    reads: AtomicU64,
    max_bytes: usize,
    /// A logical clock for least-recently-served eviction, moved by every insertion.
    served: AtomicU64,
    issuers: Issuers,
    date_text: DateText,
}

impl HostingCache {
    /// An empty cache for the documents of `issuers`, holding at most `max_bytes`, their last
    /// change written by `date_text`.
    pub fn new(issuers: Issuers, max_bytes: usize, date_text: DateText) -> Self {
        Self {
            hosts: RwLock::default(),
            near: Near::new(NEAR_BYTES),
            misses: Absent::default(),
            generation: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            max_bytes,
            served: AtomicU64::new(0),
            issuers,
            date_text,
        }
    }

    /// The issuers whose documents these are.
    pub fn issuers(&self) -> &Issuers {
        &self.issuers
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Hosts> {
        self.hosts.read().expect("hosting cache lock")
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Hosts> {
        self.hosts.write().expect("hosting cache lock")
    }

    /// What a subdomain serves, as far as memory knows at `now`: this thread's copy when no
    /// change was made since it was checked.
    pub fn lookup(&self, subdomain: &str, now: OffsetDateTime) -> Lookup {
        let changes = self.generation.load(Ordering::Acquire);
        let seen = |hosted: &Hosted| self.served(hosted);
        if let Some(own) = self
            .near
            .get(subdomain, changes, seen, || self.get(subdomain))
        {
            return Lookup::Hit(own);
        }
        let misses = self.misses.lock();
        if misses.recently(subdomain, now) {
            return Lookup::Missing;
        }
        // Read under the misses' lock, which every change holds while it bumps it.
        Lookup::Unknown(Generation(self.generation.load(Ordering::Acquire)))
    }

    /// What a subdomain serves, when the shared map holds it.
    fn get(&self, subdomain: &str) -> Option<Arc<Hosted>> {
        let hosts = self.read();
        let hosted = hosts.by_subdomain.get(subdomain)?;
        self.served(hosted);
        Some(hosted.clone())
    }

    /// Counts `hosted` as served last. The tick moves at each insertion, not at each request (a
    /// counter every worker wrote on every request): an entry served since the last insertion
    /// counts as served last, and it is written once per insertion, not at every request.
    fn served(&self, hosted: &Hosted) {
        let tick = self.served.load(Ordering::Relaxed);
        if hosted.last_served.load(Ordering::Relaxed) != tick {
            hosted.last_served.store(tick, Ordering::Relaxed);
        }
    }

    /// Keeps what the database said at a read begun at `generation` for `subdomain` (the
    /// service and its configuration, or nothing published), unless a change was applied since;
    /// answers what the read found, to serve. Counts the read.
    pub fn fill(
        &self,
        generation: Generation,
        subdomain: &str,
        found: Option<Publication>,
        now: OffsetDateTime,
    ) -> Option<Arc<Hosted>> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        let Some(publication) = found else {
            let mut misses = self.misses.lock();
            if self.generation.load(Ordering::Acquire) == generation.0 {
                misses.remember(subdomain, now);
            }
            return None;
        };
        let (subdomain, hosted) = self.entry(publication, now);
        let mut hosts = self.write();
        if self.generation.load(Ordering::Acquire) == generation.0 {
            self.insert(&mut hosts, &subdomain, hosted.clone());
        }
        Some(hosted)
    }

    /// Publishes a service's documents as of `now`, replacing what it served before in one
    /// step: a change applied from the change log.
    pub fn put(&self, publication: Publication, now: OffsetDateTime) {
        let (subdomain, hosted) = self.entry(publication, now);
        let mut hosts = self.write();
        self.applied(Some(&subdomain));
        self.insert(&mut hosts, &subdomain, hosted);
    }

    /// The entry `publication` makes at `now`, with its subdomain (outside the lock: building
    /// it hashes and copies the documents).
    fn entry(&self, publication: Publication, now: OffsetDateTime) -> (String, Arc<Hosted>) {
        let issuer = self.issuers.issuer_of(&publication.subdomain);
        let subdomain = publication.subdomain.clone();
        let hosted = Hosted::new(publication, &issuer, now, self.date_text);
        (subdomain, Arc::new(hosted))
    }

    /// Builds a subdomain's entry again from what it keeps, once its key set changed by itself
    /// (a retired key's time ran out): no database read, and every replica computes the same
    /// documents and ETag. The caller orders it with the other changes (the catch-up lock).
    /// Answers the service whose documents changed, when they did.
    pub fn refresh(&self, subdomain: &str, now: OffsetDateTime) -> Option<Uuid> {
        let stale = self.get(subdomain).filter(|h| h.is_stale_at(now));
        let rebuilt = stale.and_then(|h| h.rebuilt(subdomain, now))?;
        let mut hosts = self.write();
        // Only while the entry is still the one rebuilt (a change may have replaced it).
        let current = (hosts.by_subdomain.get(subdomain))
            .is_some_and(|h| h.service_id == rebuilt.service_id && h.is_stale_at(now));
        if !current {
            return None;
        }
        let service_id = rebuilt.service_id;
        self.applied(None);
        self.insert(&mut hosts, subdomain, Arc::new(rebuilt));
        Some(service_id)
    }

    /// A change applied (the caller holds the hosts' write lock): reads begun before it are not
    /// kept, and `subdomain`, just published, is no longer a miss.
    fn applied(&self, subdomain: Option<&str>) {
        let mut misses = self.misses.lock();
        self.generation.fetch_add(1, Ordering::AcqRel);
        if let Some(subdomain) = subdomain {
            misses.forget(subdomain);
        }
    }

    fn insert(&self, hosts: &mut Hosts, subdomain: &str, hosted: Arc<Hosted>) {
        let service_id = hosted.service_id;
        // Larger than the bound by itself: served from the read that built it, never kept (nor
        // making room, which would empty the cache at each read of it); what the name or the
        // service kept before is stale.
        if hosted.footprint > self.max_bytes {
            hosts.forget(service_id);
            if let Some(old) = hosts.by_subdomain.remove(subdomain) {
                hosts.bytes -= old.footprint;
                hosts.subdomain_of.remove(&old.service_id);
            }
            return;
        }
        hosted.last_served.store(
            self.served.fetch_add(1, Ordering::Relaxed),
            Ordering::Relaxed,
        );
        if hosts
            .subdomain_of
            .get(&service_id)
            .is_some_and(|s| s != subdomain)
        {
            hosts.forget(service_id);
        }
        hosts.bytes += hosted.footprint;
        if let Some(old) = hosts.by_subdomain.insert(subdomain.to_owned(), hosted) {
            hosts.bytes -= old.footprint;
            if old.service_id != service_id {
                // The name passed to a new service: the old one no longer serves anything.
                hosts.subdomain_of.remove(&old.service_id);
            }
        }
        hosts.subdomain_of.insert(service_id, subdomain.to_owned());
        hosts.evict_down_to(self.max_bytes, subdomain);
    }

    /// Whether a service's documents are in memory.
    pub fn holds(&self, service_id: Uuid) -> bool {
        self.read().subdomain_of.contains_key(&service_id)
    }

    /// Stops serving a service's documents: a change applied from the change log.
    pub fn remove(&self, service_id: Uuid) -> Option<String> {
        let mut hosts = self.write();
        self.applied(None);
        hosts.forget(service_id)
    }

    /// Forgets everything, documents and misses (start-up, and a replica that fell behind the
    /// change log's horizon): every subdomain is read again when asked for.
    pub fn clear(&self) {
        let mut hosts = self.write();
        let mut misses = self.misses.lock();
        self.generation.fetch_add(1, Ordering::AcqRel);
        misses.clear();
        *hosts = Hosts::default();
    }

    /// How many subdomains' documents are in memory.
    pub fn in_memory(&self) -> usize {
        self.read().by_subdomain.len()
    }

    /// Bytes the entries held in memory keep, everything counted (`Hosted::footprint`).
    pub fn bytes(&self) -> usize {
        self.read().bytes
    }

    /// Subdomains remembered as publishing nothing (some may be older than 10 s).
    pub fn misses(&self) -> usize {
        self.misses.lock().len()
    }

    /// Database reads made for subdomains that were not in memory, since start.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }
}

/// Bytes of documents each worker thread keeps its own copies of, beside the cache's bound.
const NEAR_BYTES: usize = 1 << 20;

/// The cache's change count when a database read began (see [`HostingCache::fill`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Generation(u64);

/// What memory knows of a subdomain.
#[derive(Debug)]
pub enum Lookup {
    /// Its documents.
    Hit(Arc<Hosted>),
    /// Nothing was published there when the database was read for it, less than 10 s ago.
    Missing,
    /// Not in memory: the database is to be read, then [`HostingCache::fill`] given what it said.
    Unknown(Generation),
}

#[cfg(test)]
mod tests {
    use super::super::hosted::{Source, MAP_SLOTS_PER_ENTRY};
    use super::*;
    use bytes::Bytes;
    use registry_domain::keys::{KeyRecord, KeyState};
    use registry_domain::publishing::point_at;
    use registry_domain::service::PublishedConfig;
    use registry_domain::timestamp::whole_second;
    use registry_domain::Service;

    fn published(subdomain: &str, padding: usize) -> (Service, PublishedConfig) {
        let now = OffsetDateTime::now_utc();
        let service = Service {
            id: Uuid::new_v4(),
            customer_id: None,
            subdomain: subdomain.into(),
            title: None,
            description: None,
            created_at: now,
            expires_at: None,
        };
        let config = PublishedConfig {
            service_id: service.id,
            openid_configuration: format!(r#"{{"issuer":"x","pad":"{}"}}"#, "p".repeat(padding)),
            jwks: r#"{"keys":[]}"#.into(),
            updated_at: now,
            previous_change_at: None,
            dates: Default::default(),
            keys: registry_domain::keys::KeyState::default(),
        };
        (service, config)
    }

    fn text(at: OffsetDateTime) -> Bytes {
        Bytes::from(at.to_string())
    }

    fn issuers() -> Issuers {
        Issuers::new("http://{subdomain}.localhost", "http://api.localhost").unwrap()
    }

    /// A configuration as the registry stores it: a discovery document of about `document`
    /// bytes, and `keys` keys with long `kid`s, the last `retired` of them retired and still
    /// published (for an hour from `now`).
    fn large(
        subdomain: &str,
        document: usize,
        keys: usize,
        retired: usize,
        now: OffsetDateTime,
    ) -> (Service, PublishedConfig) {
        let (service, mut config) = published(subdomain, 0);
        let issuer = issuers().issuer_of(subdomain);
        let mut doc = serde_json::Map::new();
        point_at(&mut doc, &issuer);
        doc.insert("pad".into(), "p".repeat(document).into());
        config.openid_configuration = serde_json::Value::Object(doc).to_string();
        let key = |i: usize| {
            let jwk = serde_json::json!({"kty": "OKP", "crv": "Ed25519",
                "kid": format!("{i}-{}", "k".repeat(500)),
                "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"});
            KeyRecord {
                kid: jwk["kid"].as_str().unwrap_or_default().to_owned(),
                jwk: jwk.as_object().cloned().unwrap_or_default(),
                thumbprint: "t".into(),
                first_published_at: now - time::Duration::hours(2),
                retired_at: (i >= keys - retired).then(|| now - time::Duration::hours(1)),
                published_until: (i >= keys - retired).then(|| now + time::Duration::hours(1)),
                lead_seconds: 600,
                source: registry_domain::keys::DEFAULT_SOURCE.into(),
                also_sources: Vec::new(),
                verifiers: None,
                dismissed_at: None,
            }
        };
        let records: Vec<KeyRecord> = (0..keys).map(key).collect();
        let uploaded: Vec<serde_json::Value> = records[..keys - retired]
            .iter()
            .map(|k| serde_json::Value::Object(k.jwk.clone()))
            .collect();
        config.jwks = serde_json::json!({ "keys": uploaded }).to_string();
        config.keys = KeyState {
            keys: records,
            ..Default::default()
        };
        config.updated_at = now - time::Duration::minutes(30);
        (service, config)
    }

    /// The sizes of everything `hosted` keeps, read from what it holds (not from how it
    /// counts): the entry, its documents and headers, the uploaded key set when it is a copy of
    /// its own, its source, and its key in the cache's map.
    fn sizes_of(hosted: &Hosted, subdomain: &str) -> usize {
        let uploaded = if hosted.uploaded_jwks.as_ptr() == hosted.jwks.body.as_ptr() {
            0
        } else {
            hosted.uploaded_jwks.len()
        };
        let source = hosted.source.as_ref().map_or(0, |source| {
            std::mem::size_of::<Source>() + source.retired.len()
        });
        std::mem::size_of::<Hosted>()
            + hosted.discovery.body.len()
            + hosted.discovery.etag.len()
            + hosted.jwks.body.len()
            + hosted.jwks.etag.len()
            + uploaded
            + hosted.last_modified.len()
            + hosted.surrogate_key.len()
            + source
            + 2 * subdomain.len()
            + std::mem::size_of::<(String, Arc<Hosted>)>()
            + std::mem::size_of::<(Uuid, String)>()
    }

    /// What counting adds to the sizes at most: the allocator's headers and rounding of the
    /// few allocations an entry makes, the shared header of its buffer, map slots.
    const OVERHEAD: usize = 1024;

    #[test]
    fn an_entry_counts_everything_it_keeps() {
        let now = OffsetDateTime::now_utc();
        for (what, (service, config), issuer) in [
            ("plain", large("a-x", 30_000, 100, 0, now), None),
            ("retired keys", large("b-x", 1_000, 100, 40, now), None),
            (
                "re-pointed",
                large("c-x", 30_000, 20, 0, now),
                Some("https://c-x.new"),
            ),
        ] {
            let issuer =
                issuer.map_or_else(|| issuers().issuer_of(&service.subdomain), str::to_owned);
            let hosted = Hosted::new(Publication::of(&service, config), &issuer, now, text);
            let sizes = sizes_of(&hosted, &service.subdomain);
            assert!(
                sizes <= hosted.footprint && hosted.footprint <= sizes + OVERHEAD,
                "{what}: keeps {sizes} bytes, counts {}",
                hosted.footprint
            );
            assert_eq!(hosted.source.is_some(), what == "retired keys", "{what}");
            // One copy of the key set while the served one is the uploaded one.
            assert_eq!(
                hosted.uploaded_jwks.as_ptr() == hosted.jwks.body.as_ptr(),
                what != "retired keys",
                "{what}"
            );
        }
    }

    #[test]
    fn an_entrys_documents_and_headers_are_slices_of_one_buffer_and_a_copys_of_its_own() {
        use crate::near::Copied;
        let now = OffsetDateTime::now_utc();
        // Retired keys still published: the served key set is not the uploaded one.
        let (service, config) = large("s-x", 1_000, 4, 2, now);
        let issuer = issuers().issuer_of("s-x");
        let hosted = Hosted::new(Publication::of(&service, config), &issuer, now, text);
        let parts = |h: &Hosted| {
            [
                h.discovery.body.clone(),
                h.discovery.etag.clone(),
                h.jwks.body.clone(),
                h.jwks.etag.clone(),
                h.uploaded_jwks.clone(),
                h.last_modified.clone(),
                h.surrogate_key.clone(),
            ]
        };
        let in_its_buffer = |h: &Hosted| {
            let buffer = h.text.as_ptr_range();
            parts(h).iter().all(|part| {
                let part = part.as_ptr_range();
                buffer.start <= part.start && part.end <= buffer.end
            })
        };
        assert!(in_its_buffer(&hosted));
        assert_ne!(hosted.jwks.body, hosted.uploaded_jwks);
        assert_eq!(hosted.surrogate_key, service.id.to_string().as_bytes());
        assert_eq!(hosted.jwks.etag.len(), 34);

        let copy = hosted.copied();
        assert!(in_its_buffer(&copy));
        assert_ne!(
            copy.text.as_ptr(),
            hosted.text.as_ptr(),
            "a buffer of its own"
        );
        assert_eq!(parts(&copy), parts(&hosted), "the same bytes");
    }

    #[test]
    fn a_rebuilt_entry_counts_what_it_keeps_and_serves_what_a_fresh_one_would() {
        let now = OffsetDateTime::now_utc();
        let (service, config) = large("r-x", 2_000, 10, 3, now);
        let issuer = issuers().issuer_of("r-x");
        let hosted = Hosted::new(
            Publication::of(&service, config.clone()),
            &issuer,
            now,
            text,
        );
        let later = now + time::Duration::hours(2);
        assert!(hosted.is_stale_at(later));
        let rebuilt = hosted.rebuilt("r-x", later).expect("a source is kept");
        let fresh = Hosted::new(
            Publication::of(&service, config.clone()),
            &issuer,
            later,
            text,
        );
        assert_eq!(rebuilt.jwks.body, fresh.jwks.body);
        assert_eq!(rebuilt.jwks.etag, fresh.jwks.etag);
        assert_eq!(rebuilt.last_modified, fresh.last_modified);
        assert_eq!(rebuilt.footprint, fresh.footprint);
        assert!(rebuilt.source.is_none() && rebuilt.refresh_at.is_none());
        // The retired keys left: the set is the uploaded one, and dated when they left.
        assert_eq!(rebuilt.jwks.body, config.jwks.as_bytes());
        assert_eq!(
            rebuilt.modified_at,
            whole_second(now + time::Duration::hours(1))
        );
    }

    #[test]
    fn the_bound_holds_under_churn_and_counts_what_entries_keep() {
        const BOUND: usize = 1 << 20;
        const SERVICES: usize = 60;
        let now = OffsetDateTime::now_utc();
        // About 90 KB each, 5 MB in all: five times the bound.
        let services: Vec<(Service, PublishedConfig)> = (0..SERVICES)
            .map(|i| {
                large(
                    &format!("s{i}-x"),
                    30_000,
                    100,
                    usize::from(i % 5 == 0) * 10,
                    now,
                )
            })
            .collect();
        let cache = HostingCache::new(issuers(), BOUND, text);
        let mut order: Vec<usize> = (0..SERVICES).collect();
        for round in 0..6 {
            for (step, &i) in order.iter().enumerate() {
                let (service, config) = &services[i];
                if let Lookup::Unknown(generation) = cache.lookup(&service.subdomain, now) {
                    // What the handler does: read it, then serve it.
                    let found = Some(Publication::of(service, config.clone()));
                    assert!(cache
                        .fill(generation, &service.subdomain, found, now)
                        .is_some());
                }
                let hosts = cache.read();
                let kept: usize = hosts
                    .by_subdomain
                    .iter()
                    .map(|(subdomain, hosted)| sizes_of(hosted, subdomain))
                    .sum();
                assert!(
                    kept <= hosts.bytes && hosts.bytes <= BOUND,
                    "round {round}, step {step}: entries keep {kept} bytes, counted {} \
                     (bound {BOUND})",
                    hosts.bytes
                );
                assert!(
                    hosts.by_subdomain.capacity()
                        <= MAP_SLOTS_PER_ENTRY * hosts.by_subdomain.len() + 16
                );
            }
            // A different order each round, the same on every run.
            order.rotate_left(7 + round);
            order.swap(round, SERVICES - 1 - round);
        }
        // Only what is in memory is known.
        assert!(cache.in_memory() < SERVICES);
        assert_eq!(cache.in_memory(), cache.read().subdomain_of.len());
    }

    #[test]
    fn a_second_shared_by_two_changes_is_known() {
        let second = time::macros::datetime!(2026-11-25 10:00:00 UTC);
        let at = |ms: i64| second + time::Duration::milliseconds(ms);
        let (service, mut config) = published("v-x", 10);
        let issuer = issuers().issuer_of("v-x");
        let build = |config: &PublishedConfig, now| {
            Hosted::new(
                Publication::of(&service, config.clone()),
                &issuer,
                now,
                text,
            )
        };
        config.updated_at = at(900);
        // A lone version, or one whose predecessor is a second older: the date decides.
        for previous in [None, Some(at(-100))] {
            config.previous_change_at = previous;
            let hosted = build(&config, at(950));
            assert_eq!(hosted.modified_at, second);
            assert!(!hosted.modified_second_shared, "{previous:?}");
        }
        config.previous_change_at = Some(at(100));
        assert!(build(&config, at(950)).modified_second_shared);
        // A retired key leaving in the second of the publication is a second change in it.
        let (_, with_retired) = large("v-x", 10, 3, 1, at(0));
        config.previous_change_at = None;
        config.keys = with_retired.keys;
        config.keys.keys[2].published_until = Some(at(950));
        let left = build(&config, at(990));
        assert_eq!(left.modified_at, second);
        assert!(left.modified_second_shared);
        // ... and not when it leaves in a later second, alone.
        config.keys.keys[2].published_until = Some(at(1500));
        let later = build(&config, at(2500));
        assert_eq!(later.modified_at, second + time::Duration::seconds(1));
        assert!(!later.modified_second_shared);
    }

    #[test]
    fn forgetting_a_deleted_service_spares_the_new_one_of_the_same_name() {
        let cache = HostingCache::new(issuers(), 1 << 20, text);
        let old = published("api-x", 10);
        let new = published("api-x", 20);
        cache.put(Publication::of(&old.0, old.1), OffsetDateTime::now_utc());
        cache.put(Publication::of(&new.0, new.1), OffsetDateTime::now_utc());
        // The old id's removal arrives after the new service was published (log order).
        cache.remove(old.0.id);
        let served = cache.get("api-x").expect("the new service is still served");
        assert_eq!(served.service_id, new.0.id);
        cache.remove(new.0.id);
        assert!(cache.get("api-x").is_none());
        assert_eq!(cache.bytes(), 0);
    }

    #[test]
    fn memory_is_bounded_and_the_least_recently_served_leave_it() {
        let (a, b, c) = (
            published("a-x", 1000),
            published("b-x", 1000),
            published("c-x", 1000),
        );
        let each = Hosted::new(
            Publication::of(&a.0, a.1.clone()),
            "http://a-x.localhost",
            OffsetDateTime::now_utc(),
            text,
        )
        .footprint;
        // Two fit, three do not.
        let bound = 2 * each + each / 2;
        let cache = HostingCache::new(issuers(), bound, text);
        cache.put(
            Publication::of(&a.0, a.1.clone()),
            OffsetDateTime::now_utc(),
        );
        cache.put(
            Publication::of(&b.0, b.1.clone()),
            OffsetDateTime::now_utc(),
        );
        assert!(cache.get("a-x").is_some()); // a is served after b was published
        cache.put(Publication::of(&c.0, c.1), OffsetDateTime::now_utc());
        assert!(cache.bytes() <= bound, "{}", cache.bytes());
        let now = OffsetDateTime::now_utc();
        // b left memory altogether: it is read again when asked for.
        assert!(matches!(cache.lookup("b-x", now), Lookup::Unknown(_)));
        assert!(matches!(cache.lookup("a-x", now), Lookup::Hit(_)));
        assert!(matches!(cache.lookup("nobody-x", now), Lookup::Unknown(_)));
        assert_eq!(cache.in_memory(), 2);
        // Read again, it comes back and something else leaves.
        let Lookup::Unknown(generation) = cache.lookup("b-x", now) else {
            panic!("b is not in memory");
        };
        assert!(cache
            .fill(
                generation,
                "b-x",
                Some(Publication::of(&b.0, b.1.clone())),
                now
            )
            .is_some());
        assert!(matches!(cache.lookup("b-x", now), Lookup::Hit(_)));
        assert!(cache.bytes() <= bound);
        cache.remove(b.0.id);
        assert!(matches!(cache.lookup("b-x", now), Lookup::Unknown(_)));
        // A republication replaces in one step, and the bytes follow.
        let before = cache.bytes();
        cache.put(
            Publication::of(&a.0, a.1.clone()),
            OffsetDateTime::now_utc(),
        );
        assert_eq!(cache.bytes(), before);
        assert_eq!(cache.read().subdomain_of.len(), cache.in_memory());

        // Documents larger than the bound by themselves are served, never kept, and take no
        // one else's place; what their name kept before goes (it is stale).
        let small = published("s-x", 10);
        let big = |subdomain| published(subdomain, 4 * each);
        let held = |cache: &HostingCache| cache.read().by_subdomain.len();
        let shared = HostingCache::new(issuers(), bound, text);
        shared.put(Publication::of(&small.0, small.1.clone()), now);
        shared.put(Publication::of(&a.0, a.1.clone()), now);
        let before = shared.bytes();
        let d = big("d-x");
        shared.put(Publication::of(&d.0, d.1), now);
        let Lookup::Unknown(generation) = shared.lookup("e-x", now) else {
            panic!("e is not in memory");
        };
        let e = big("e-x");
        let served = shared.fill(generation, "e-x", Some(Publication::of(&e.0, e.1)), now);
        assert_eq!(served.map(|h| h.service_id), Some(e.0.id));
        assert_eq!((shared.bytes(), held(&shared)), (before, 2));
        assert!(shared.holds(small.0.id) && shared.holds(a.0.id));
        assert!(!shared.holds(d.0.id) && !shared.holds(e.0.id));
        // The small service's upload grows past the bound: its old documents leave.
        let grown = PublishedConfig {
            service_id: small.0.id,
            ..published("s-x", 4 * each).1
        };
        shared.put(Publication::of(&small.0, grown), now);
        assert!(!shared.holds(small.0.id));
        assert!(matches!(shared.lookup("s-x", now), Lookup::Unknown(_)));
        assert_eq!(held(&shared), 1);
    }

    #[test]
    fn a_subdomain_that_publishes_nothing_is_remembered_for_10_s_until_it_is_published() {
        let cache = HostingCache::new(issuers(), 1 << 20, text);
        let now = OffsetDateTime::now_utc();
        let Lookup::Unknown(generation) = cache.lookup("n-x", now) else {
            panic!("nothing is known at first");
        };
        assert!(cache.fill(generation, "n-x", None, now).is_none());
        assert_eq!(cache.reads(), 1);
        let later = |s: i64| now + time::Duration::milliseconds(s);
        assert!(matches!(cache.lookup("n-x", later(9_999)), Lookup::Missing));
        assert!(matches!(cache.lookup("other-x", now), Lookup::Unknown(_)));
        assert!(matches!(
            cache.lookup("n-x", later(10_000)),
            Lookup::Unknown(_)
        ));
        // A publication applied clears the miss at once.
        let (service, config) = published("n-x", 10);
        cache.put(Publication::of(&service, config), now);
        assert!(matches!(cache.lookup("n-x", now), Lookup::Hit(_)));
        cache.remove(service.id);
        assert!(matches!(cache.lookup("n-x", now), Lookup::Unknown(_)));
        // At most MAX_ABSENT names are kept, whatever the callers send.
        for i in 0..crate::absent::MAX_ABSENT + 10 {
            let name = format!("made-up-{i}");
            let Lookup::Unknown(generation) = cache.lookup(&name, now) else {
                panic!("{name} is not known");
            };
            cache.fill(generation, &name, None, now);
        }
        assert!(cache.misses() <= crate::absent::MAX_ABSENT);
        cache.clear();
        assert_eq!(cache.misses(), 0);
    }

    #[test]
    fn a_read_begun_before_a_change_is_applied_is_not_kept() {
        let cache = HostingCache::new(issuers(), 1 << 20, text);
        let now = OffsetDateTime::now_utc();
        let (service, old) = published("g-x", 10);
        let new = PublishedConfig {
            jwks: r#"{"keys":[{"kid":"new"}]}"#.into(),
            ..old.clone()
        };
        // A read of the old version, then the new one applied before the read is kept.
        let Lookup::Unknown(before) = cache.lookup("g-x", now) else {
            panic!("not in memory");
        };
        cache.put(Publication::of(&service, new.clone()), now);
        let served = cache.fill(before, "g-x", Some(Publication::of(&service, old)), now);
        assert!(served.is_some(), "the read still answers its own request");
        let kept = cache.get("g-x").expect("the applied version");
        assert_eq!(kept.uploaded_jwks, new.jwks.as_bytes());
        // A read that found nothing, then a publication: no miss is remembered.
        cache.remove(service.id);
        let Lookup::Unknown(before) = cache.lookup("g-x", now) else {
            panic!("removed");
        };
        cache.put(Publication::of(&service, new), now);
        cache.remove(service.id);
        cache.fill(before, "g-x", None, now);
        assert!(matches!(cache.lookup("g-x", now), Lookup::Unknown(_)));
    }

    fn hit(cache: &HostingCache, subdomain: &str, now: OffsetDateTime) -> Arc<Hosted> {
        match cache.lookup(subdomain, now) {
            Lookup::Hit(hosted) => hosted,
            other => panic!("{subdomain} not served: {other:?}"),
        }
    }

    #[test]
    fn each_thread_serves_its_own_copy_and_every_change_reaches_it() {
        let cache = HostingCache::new(issuers(), 1 << 20, text);
        let now = OffsetDateTime::now_utc();
        let (service, old) = published("n-x", 10);
        cache.put(Publication::of(&service, old.clone()), now);
        let shared = cache.get("n-x").expect("in memory");
        assert!(
            Arc::ptr_eq(&hit(&cache, "n-x", now), &shared),
            "the first use is served the shared entry"
        );
        let first = hit(&cache, "n-x", now);
        assert!(
            !Arc::ptr_eq(&first, &shared),
            "a copy of its own from the second use"
        );
        assert_ne!(first.jwks.body.as_ptr(), shared.jwks.body.as_ptr());
        assert_eq!(first.jwks.body, shared.jwks.body);
        assert_eq!(first.discovery.etag, shared.discovery.etag);
        assert!(
            Arc::ptr_eq(&hit(&cache, "n-x", now), &first),
            "served again"
        );
        std::thread::scope(|scope| {
            scope.spawn(|| {
                hit(&cache, "n-x", now);
                assert!(!Arc::ptr_eq(&hit(&cache, "n-x", now), &first));
            });
        });
        // A change of another service: the copy is checked, and kept.
        let (other, config) = published("o-x", 10);
        cache.put(Publication::of(&other, config), now);
        assert!(Arc::ptr_eq(&hit(&cache, "n-x", now), &first));
        // A new configuration is served at once, and so is a withdrawal.
        let new = PublishedConfig {
            jwks: r#"{"keys":[{"kid":"new"}]}"#.into(),
            ..old.clone()
        };
        cache.put(Publication::of(&service, new.clone()), now);
        assert_eq!(hit(&cache, "n-x", now).uploaded_jwks, new.jwks.as_bytes());
        cache.remove(service.id);
        assert!(matches!(cache.lookup("n-x", now), Lookup::Unknown(_)));
        // A rebuilt entry (a retired key's time ran out) is served at once too.
        let (service, config) = large("r-x", 100, 3, 1, now);
        cache.put(Publication::of(&service, config), now);
        let before = hit(&cache, "r-x", now);
        let later = now + time::Duration::hours(2);
        assert!(before.is_stale_at(later));
        assert_eq!(cache.refresh("r-x", later), Some(service.id));
        let after = hit(&cache, "r-x", later);
        assert!(!after.is_stale_at(later));
        assert_ne!(after.jwks.etag, before.jwks.etag);
    }
}
