//! Per-issuer key cache: freshness from `max-age`, stale keys as a fallback, single-flight
//! fetches and rate limits on refetching.
//!
//! At most `max_issuers` issuers are kept; a new one takes the place of the least recently used.
//! So an issuer that tokens keep coming for is never refused: one customer refreshing the keys
//! of many issuers of its own can slow others' next look-up by a fetch, not lock them out (the
//! server also trusts at most a few issuers per customer, and only issuers some policy names
//! ever reach this cache).

use crate::config::OidcConfig;
use crate::error::OidcError;
use crate::fetch::Fetcher;
use crate::keys::KeySet;
use registry_domain::ports::Ticks;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// Counters of the key cache, for tests and `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OidcMetrics {
    /// Key refreshes attempted (each is one discovery request and, when that succeeds, one key
    /// set request).
    pub key_fetches: u64,
    /// Refreshes that failed or answered no usable key.
    pub key_fetch_failures: u64,
    /// Look-ups answered from the cache without fetching.
    pub cache_hits: u64,
}

#[derive(Debug, Default)]
struct Counters {
    key_fetches: AtomicU64,
    key_fetch_failures: AtomicU64,
    cache_hits: AtomicU64,
}

/// Keys as fetched at one instant.
#[derive(Debug)]
pub struct CachedKeys {
    /// The verifiers.
    pub set: KeySet,
    fresh_until: Instant,
    usable_until: Instant,
}

#[derive(Debug, Default)]
struct State {
    /// The last good keys.
    keys: Option<Arc<CachedKeys>>,
    last_kid_refetch: Option<Instant>,
    failed_at: Option<Instant>,
    /// The last fetch failed with an answer that was not the issuer's keys (a 403, a 429, a
    /// document not its own): no outage, so its last good keys serve only while fresh.
    no_grace: bool,
    /// The last fetch failed because the issuer answered that its keys are gone: until the
    /// next fetch, its tokens are refused as of keys it no longer has, not as of an issuer out
    /// of reach.
    withdrawn: bool,
}

/// One issuer: its state, and a gate that lets one fetch run at a time (later callers wait for
/// it and reuse its result instead of fetching again).
#[derive(Debug)]
struct Issuer {
    state: Mutex<State>,
    gate: tokio::sync::Mutex<()>,
    /// The cache's use counter when this issuer was last looked up (least recently used goes).
    last_used: AtomicU64,
    /// Its keys' generation (see [`KeyCache::generation`]).
    generation: AtomicU64,
}

impl Issuer {
    fn new(generation: u64) -> Self {
        Self {
            state: Mutex::default(),
            gate: tokio::sync::Mutex::default(),
            last_used: AtomicU64::new(0),
            generation: AtomicU64::new(generation),
        }
    }
}

enum Decision {
    /// Use these keys (the token's `kid` may still be missing from them).
    Use(Arc<CachedKeys>),
    /// Fetch; `fallback` holds keys still usable if the fetch cannot be waited for or fails.
    Fetch { fallback: Option<Arc<CachedKeys>> },
    /// No usable keys and a fetch failed moments ago.
    Unavailable,
    /// No keys: the issuer answered moments ago that they are gone.
    Withdrawn,
}

fn elapsed_since(at: Option<Instant>, now: Instant) -> Duration {
    at.map_or(Duration::MAX, |at| now.saturating_duration_since(at))
}

/// The key cache of every issuer seen.
#[derive(Debug)]
pub struct KeyCache {
    fetcher: Fetcher,
    config: OidcConfig,
    /// The time freshness, grace and refetch intervals count in.
    ticks: Arc<dyn Ticks>,
    issuers: RwLock<HashMap<String, Arc<Issuer>>>,
    counters: Counters,
    /// Bumped by every look-up: a logical clock for least-recently-used eviction.
    uses: AtomicU64,
    /// The last generation given to an issuer's keys (see [`KeyCache::generation`]).
    generations: AtomicU64,
}

impl KeyCache {
    /// An empty cache fetching with `fetcher`, its keys' ages counted in `ticks`.
    pub fn new(fetcher: Fetcher, config: OidcConfig, ticks: Arc<dyn Ticks>) -> Self {
        Self {
            fetcher,
            config,
            ticks,
            issuers: RwLock::default(),
            counters: Counters::default(),
            uses: AtomicU64::new(0),
            generations: AtomicU64::new(0),
        }
    }

    /// The generation of `iss`'s keys: a number that changes when the issuer answers that its
    /// keys are gone (404, 410, an empty set) and its cached keys are dropped, when it answers
    /// a set without one of the keys cached before, and when its entry is made anew (after an
    /// eviction): a verification remembered under another generation may rest on a withdrawn
    /// key (docs/api.md, "Authentication"). Never 0, the answer for an issuer that cannot be
    /// cached. One issuer's rotation leaves the others' remembered verifications alone.
    pub fn generation(&self, iss: &str) -> u64 {
        self.issuer(iss)
            .map_or(0, |issuer| issuer.generation.load(Ordering::Acquire))
    }

    fn next_generation(&self) -> u64 {
        self.generations.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// A snapshot of the counters.
    pub fn metrics(&self) -> OidcMetrics {
        OidcMetrics {
            key_fetches: self.counters.key_fetches.load(Ordering::Relaxed),
            key_fetch_failures: self.counters.key_fetch_failures.load(Ordering::Relaxed),
            cache_hits: self.counters.cache_hits.load(Ordering::Relaxed),
        }
    }

    /// The keys of `iss` to verify a token naming `kid`, fetching when there are none, they are
    /// stale, or `kid` is unknown (at most once per refetch interval).
    pub async fn keys(&self, iss: &str, kid: Option<&str>) -> Result<Arc<CachedKeys>, OidcError> {
        let issuer = self.issuer(iss)?;
        let fallback = match self.decide(&issuer, kid, self.ticks.now(), false) {
            Decision::Use(keys) => return Ok(self.hit(keys)),
            Decision::Unavailable => return Err(OidcError::Unavailable(iss.to_owned())),
            Decision::Withdrawn => return Err(OidcError::Withdrawn(iss.to_owned())),
            Decision::Fetch { fallback } => fallback,
        };
        // Keys that are merely past their max-age (and know the kid) are good enough while
        // another caller refreshes them: do not queue behind a possibly slow issuer.
        let _gate = match fallback {
            Some(keys) if kid.is_none_or(|k| keys.set.has_kid(k)) => match issuer.gate.try_lock() {
                Ok(gate) => gate,
                Err(_) => return Ok(self.hit(keys)),
            },
            _ => issuer.gate.lock().await,
        };
        // Decided again behind the gate: the fetch this caller waited for may have settled it.
        let fallback = match self.decide(&issuer, kid, self.ticks.now(), true) {
            Decision::Use(keys) => return Ok(self.hit(keys)),
            Decision::Unavailable => return Err(OidcError::Unavailable(iss.to_owned())),
            Decision::Withdrawn => return Err(OidcError::Withdrawn(iss.to_owned())),
            Decision::Fetch { fallback } => fallback,
        };
        self.counters.key_fetches.fetch_add(1, Ordering::Relaxed);
        let fetched = match tokio::time::timeout(self.config.request_timeout, self.fetch(iss)).await
        {
            Ok(result) => result,
            Err(_) => Err(OidcError::Timeout(iss.to_owned())),
        };
        let now = self.ticks.now();
        let mut state = issuer.state.lock().unwrap_or_else(|e| e.into_inner());
        match fetched {
            Ok((set, max_age)) => {
                if (state.keys.as_ref()).is_some_and(|old| set.drops_any_of(&old.set)) {
                    (issuer.generation).store(self.next_generation(), Ordering::Release);
                }
                let ttl = max_age
                    .unwrap_or(self.config.default_key_ttl)
                    .clamp(self.config.min_key_ttl, self.config.max_key_ttl);
                let keys = Arc::new(CachedKeys {
                    set,
                    fresh_until: now + ttl,
                    usable_until: now + ttl.max(self.config.stale_key_grace),
                });
                state.keys = Some(keys.clone());
                state.failed_at = None;
                state.no_grace = false;
                state.withdrawn = false;
                Ok(keys)
            }
            Err(error) => {
                self.counters
                    .key_fetch_failures
                    .fetch_add(1, Ordering::Relaxed);
                state.failed_at = Some(now);
                state.withdrawn = error.is_withdrawal();
                // The grace of stale keys is for an issuer that cannot answer; one that answers
                // that its keys are gone has withdrawn them (docs/api.md, "Authentication").
                if error.is_withdrawal() {
                    tracing::warn!(
                        issuer = iss,
                        error = error.detail(),
                        "the issuer withdrew its keys: its cached keys are dropped"
                    );
                    state.keys = None;
                    (issuer.generation).store(self.next_generation(), Ordering::Release);
                    return Err(error);
                }
                tracing::warn!(
                    issuer = iss,
                    error = error.detail(),
                    "fetching issuer keys failed"
                );
                // An issuer that answers, but not with its keys, gets no grace: its last good
                // keys serve while they are fresh, never after (until a later fetch says more).
                state.no_grace = !error.is_outage();
                match state.no_grace {
                    false => fallback.ok_or(error),
                    true => fallback.filter(|keys| now < keys.fresh_until).ok_or(error),
                }
            }
        }
    }

    fn hit(&self, keys: Arc<CachedKeys>) -> Arc<CachedKeys> {
        self.counters.cache_hits.fetch_add(1, Ordering::Relaxed);
        keys
    }

    /// What to do for `kid` at `now`; with `commit`, a refetch for an unknown kid is recorded
    /// (only the caller holding the gate commits).
    fn decide(&self, issuer: &Issuer, kid: Option<&str>, now: Instant, commit: bool) -> Decision {
        let mut state = issuer.state.lock().unwrap_or_else(|e| e.into_inner());
        let no_grace = state.no_grace;
        let usable = (state.keys.clone()).filter(|k| {
            now < if no_grace {
                k.fresh_until
            } else {
                k.usable_until
            }
        });
        let recently_failed = elapsed_since(state.failed_at, now) < self.config.retry_after_failure;
        match usable {
            Some(keys) if now < keys.fresh_until => {
                let kid_known = kid.is_none_or(|k| keys.set.has_kid(k));
                let may_refetch = elapsed_since(state.last_kid_refetch, now)
                    >= self.config.unknown_kid_refetch_interval;
                // A refetch started by another caller may be about to bring this kid: wait for it
                // (behind the gate) rather than refuse the token on keys about to be replaced.
                let in_flight = !commit && issuer.gate.try_lock().is_err();
                if kid_known || recently_failed || (!may_refetch && !in_flight) {
                    return Decision::Use(keys);
                }
                if commit {
                    state.last_kid_refetch = Some(now);
                }
                Decision::Fetch {
                    fallback: Some(keys),
                }
            }
            Some(keys) if recently_failed => Decision::Use(keys),
            None if recently_failed && state.withdrawn => Decision::Withdrawn,
            None if recently_failed => Decision::Unavailable,
            fallback => Decision::Fetch { fallback },
        }
    }

    /// The entry of `iss`, created on first sight once the issuer URL passes the guard; when the
    /// cache is full, the least recently used issuer makes room.
    fn issuer(&self, iss: &str) -> Result<Arc<Issuer>, OidcError> {
        let tick = self.uses.fetch_add(1, Ordering::Relaxed);
        if let Some(issuer) = self
            .issuers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(iss)
        {
            issuer.last_used.store(tick, Ordering::Relaxed);
            return Ok(issuer.clone());
        }
        let url = self.fetcher.url(iss)?;
        if url.query().is_some() || url.fragment().is_some() {
            return Err(OidcError::RefusedUrl {
                url: iss.to_owned(),
                reason: "an issuer has no query or fragment",
            });
        }
        let mut issuers = self.issuers.write().unwrap_or_else(|e| e.into_inner());
        if issuers.len() >= self.config.max_issuers.max(1) && !issuers.contains_key(iss) {
            let least_recent = issuers
                .iter()
                .min_by_key(|(_, issuer)| issuer.last_used.load(Ordering::Relaxed))
                .map(|(name, _)| name.clone());
            if let Some(name) = least_recent {
                issuers.remove(&name);
            }
        }
        let generation = self.next_generation();
        let issuer = (issuers.entry(iss.to_owned()))
            .or_insert_with(|| Arc::new(Issuer::new(generation)))
            .clone();
        issuer.last_used.store(tick, Ordering::Relaxed);
        Ok(issuer)
    }

    /// How many issuers are cached.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.issuers.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Discovery, then the key set, both through the guarded client.
    async fn fetch(&self, iss: &str) -> Result<(KeySet, Option<Duration>), OidcError> {
        let base = iss.strip_suffix('/').unwrap_or(iss);
        let discovery_url = self
            .fetcher
            .url(&format!("{base}/.well-known/openid-configuration"))?;
        let discovery = self.fetcher.json(&discovery_url).await?.document;
        let document_error = |url: &url::Url, reason: &str| OidcError::Document {
            url: url.to_string(),
            reason: reason.to_owned(),
        };
        match discovery.get("issuer") {
            Some(Value::String(found)) if found == iss => {}
            Some(Value::String(found)) => {
                return Err(OidcError::IssuerMismatch {
                    expected: iss.to_owned(),
                    found: found.clone(),
                })
            }
            _ => {
                return Err(document_error(
                    &discovery_url,
                    "issuer is missing or not a string",
                ))
            }
        }
        let jwks_uri = discovery
            .get("jwks_uri")
            .and_then(Value::as_str)
            .ok_or_else(|| document_error(&discovery_url, "jwks_uri is missing or not a string"))?;
        let jwks_url = self.fetcher.url(jwks_uri)?;
        let fetched = self.fetcher.json(&jwks_url).await?;
        let set = KeySet::from_document(&fetched.document)
            .map_err(|reason| document_error(&jwks_url, &reason))?;
        if set.is_empty() {
            return Err(OidcError::NoKeys(iss.to_owned()));
        }
        Ok((set, fetched.max_age))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(max_issuers: usize) -> KeyCache {
        let config = OidcConfig {
            allow_insecure_issuers: true,
            max_issuers,
            ..OidcConfig::default()
        };
        let ticks = Arc::new(registry_domain::testing::ManualTicks::default());
        KeyCache::new(Fetcher::new(&config).unwrap(), config, ticks)
    }

    /// Each issuer's keys have their own generation (one issuer's rotation leaves the others'
    /// remembered verifications alone); an entry made anew after an eviction has a new one.
    #[tokio::test]
    async fn each_issuer_has_its_own_generation() {
        let cache = cache(2);
        let a = cache.generation("http://a.test");
        assert!(a != 0 && a == cache.generation("http://a.test"));
        let b = cache.generation("http://b.test");
        assert_ne!(a, b);
        assert_eq!(cache.generation("http://b.test"), b);
        cache.generation("http://c.test");
        assert_ne!(
            cache.generation("http://a.test"),
            a,
            "evicted, then cached anew"
        );
        assert_eq!(
            cache.generation("http://a.test?x"),
            0,
            "an issuer that cannot be cached"
        );
    }

    /// One customer's many issuers (the probe: 1,000 of them, each kept fresh) never lock
    /// another issuer out: it takes the place of the least recently used.
    #[tokio::test]
    async fn a_full_cache_makes_room_for_a_new_issuer() {
        let cache = cache(3);
        for iss in ["http://a.test", "http://b.test", "http://c.test"] {
            cache.issuer(iss).unwrap();
        }
        cache.issuer("http://a.test").unwrap();
        cache.issuer("http://d.test").unwrap();
        assert_eq!(cache.len(), 3);
        let held: Vec<String> = {
            let issuers = cache.issuers.read().unwrap();
            let mut held: Vec<String> = issuers.keys().cloned().collect();
            held.sort();
            held
        };
        assert_eq!(held, ["http://a.test", "http://c.test", "http://d.test"]);
        // An attacker's steady stream of its own issuers only ever evicts its own.
        for round in 0..100 {
            cache.issuer("http://victim.test").unwrap();
            cache
                .issuer(&format!("http://attacker{round}.test"))
                .unwrap();
            assert!(cache
                .issuers
                .read()
                .unwrap()
                .contains_key("http://victim.test"));
        }
    }
}
