//! Remembered verifications, so that a client that repeats a bearer does not pay for its
//! verification again.
//!
//! * Static tokens and anonymous secrets: argon2 costs ~17 ms, so a verified secret is
//!   remembered by its lookup id together with the hash stored for it at the time. Every request
//!   still reads the stored hash (one indexed query), so regeneration (a new hash) or deletion (no
//!   row) fails the very next request on every replica; only the argon2 work is skipped.
//! * Identity tokens: checking a signature costs tens of microseconds (RS256 ~24 µs, ES256
//!   ~70 µs) plus parsing, so a verified token is remembered by the SHA-256 of its exact text,
//!   for at most [`IDENTITY_TTL`] and never past its `exp` (with the verifier's leeway). What
//!   the token may do is still decided on every request from the accounts' current policies;
//!   only the signature and time checks are skipped. A key an external issuer withdraws is
//!   already honoured for as long as the key cache keeps it (at least 5 minutes); this adds at
//!   most [`IDENTITY_TTL`] to that. A token of an issuer this registry hosts is remembered with
//!   the version (ETag) of the key set it verified against, and counts as verified only while
//!   that set is still the one published (a withdrawal applies at once: docs/api.md,
//!   "Authentication").
//!
//! Both are shared by the replica's workers, and each worker thread keeps its own copy of the
//! entries it used ([`Front`]): a request repeated on many workers reads no lock and writes no
//! line another worker reads. A copy is never trusted more than the shared entry was: a
//! secret's copy is checked against the stored hash the request just read, as the shared entry
//! is; an identity's copy ends at the same `until`.

use crossbeam_utils::CachePadded;
use moka::sync::Cache;
use registry_domain::ports::VerifiedToken;
use sha2::{Digest, Sha256};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use subtle::ConstantTimeEq;
use thread_local::ThreadLocal;
use time::{Duration, OffsetDateTime};

/// Most verifications of each kind remembered (the least recently used leave first).
const MAX_ENTRIES: u64 = 100_000;

/// Longest time a verified identity token is remembered.
pub const IDENTITY_TTL: Duration = Duration::seconds(60);

/// How long a verified secret is remembered without being used. Its next use after that pays
/// argon2 once more; meanwhile the secrets of deleted accounts and expired anonymous services,
/// and those of callers long gone, do not hold memory.
pub const SECRET_IDLE: Duration = Duration::minutes(10);

/// A verified identity token and when to stop trusting the verification (by the server's
/// clock, which tests move: the cache's own expiry only bounds memory).
#[derive(Debug, Clone)]
pub struct RememberedIdentity {
    /// The verification.
    pub token: Arc<VerifiedToken>,
    /// The version of the keys it verified against: for an issuer this registry hosts, its key
    /// set's; for one fetched over HTTP, the generation of the verifier's keys of that issuer
    /// then (`IdentityTokenVerifier::key_generation`).
    pub key_version: Option<KeyVersion>,
    until: OffsetDateTime,
    /// When this replica last granted a request with the token; `None` while it never did: a
    /// token that verifies but that no account accepts is no working credential, and must not
    /// pass the per-address limit on failed authentications.
    accepted_at: Option<OffsetDateTime>,
}

impl RememberedIdentity {
    /// Whether this replica ever granted a request with the token.
    pub fn accepted(&self) -> bool {
        self.accepted_at.is_some()
    }

    /// A copy in this thread's own allocations, for its [`Front`]: the clones a request makes of
    /// it then write no reference count that another thread writes.
    fn own_copy(&self) -> Self {
        Self {
            token: Arc::new(VerifiedToken::clone(&self.token)),
            key_version: (self.key_version.as_deref()).map(bytes::Bytes::copy_from_slice),
            until: self.until,
            accepted_at: self.accepted_at,
        }
    }
}

/// The version (ETag) of a hosted key set.
pub type KeyVersion = bytes::Bytes;

/// How long after its last verification a credential still counts as one this replica
/// verified "recently": such a credential is never refused by the per-address limit on failed
/// authentications or the per-lookup-id limit on failed secrets (docs/api.md, "Authentication").
pub const RECENTLY: Duration = Duration::minutes(1);

/// A verified secret: the hash stored for it then, its SHA-256, and when this replica last
/// accepted it (Unix seconds, by the server's clock).
#[derive(Debug)]
struct RememberedSecret {
    stored_hash: String,
    digest: [u8; 32],
    accepted_at: std::sync::atomic::AtomicI64,
}

impl RememberedSecret {
    fn is(&self, secret: &str) -> bool {
        let digest = Sha256::digest(secret.as_bytes());
        bool::from(self.digest.ct_eq(digest.as_slice()))
    }
}

/// Remembered verifications: secrets on a `moka` cache bounded in entries with idle expiry;
/// identity tokens in a map bounded in entries, each kept until its own time.
#[derive(Debug)]
pub struct TokenCache {
    /// lookup id → the verified secret.
    secrets: Cache<String, Arc<RememberedSecret>>,
    /// Each thread's copies of the secrets it found in `secrets`.
    secrets_seen: Front<String, Arc<RememberedSecret>>,
    /// SHA-256 of the token → the verification. A map under a lock rather than a `moka` cache:
    /// every federated request reads it, a `moka` read cost P3 about 5 % (docs/benchmarks.md),
    /// and its expiry is the server's clock anyway.
    identities: Mutex<HashMap<[u8; 32], RememberedIdentity>>,
    /// Each thread's copies of the identities it found in `identities`.
    identities_seen: Front<[u8; 32], RememberedIdentity>,
}

/// Entries each worker thread copied from a shared map, read without a lock; at most
/// [`FRONT_ENTRIES`] per thread (then the thread starts again from the shared map).
#[derive(Debug)]
struct Front<K: Send, V: Send>(ThreadLocal<CachePadded<RefCell<HashMap<K, V>>>>);

/// Entries a thread keeps in a [`Front`].
const FRONT_ENTRIES: usize = 4096;

impl<K: Send + Eq + std::hash::Hash, V: Send> Front<K, V> {
    fn new() -> Self {
        Self(ThreadLocal::new())
    }

    /// This thread's copies.
    fn with<R>(&self, f: impl FnOnce(&mut HashMap<K, V>) -> R) -> R {
        f(&mut self.0.get_or_default().borrow_mut())
    }

    /// Keeps a copy in this thread's entries.
    fn keep(&self, key: K, value: V) {
        self.with(|entries| {
            if entries.len() >= FRONT_ENTRIES {
                entries.clear();
            }
            entries.insert(key, value);
        });
    }
}

/// How often a thread that accepts a remembered identity from its own copy tells the shared
/// entry (which [`TokenCache::recently_verified_identity`] asks on any thread).
const SHARE_ACCEPTANCE_EVERY: Duration = Duration::seconds(10);

fn std_duration(d: Duration) -> std::time::Duration {
    std::time::Duration::try_from(d).unwrap_or_default()
}

impl Default for TokenCache {
    fn default() -> Self {
        Self {
            secrets: Cache::builder()
                .max_capacity(MAX_ENTRIES)
                .time_to_idle(std_duration(SECRET_IDLE))
                .build(),
            secrets_seen: Front::new(),
            identities: Default::default(),
            identities_seen: Front::new(),
        }
    }
}

impl TokenCache {
    fn identities(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], RememberedIdentity>> {
        self.identities
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether `secret` was verified before against exactly `stored_hash`; if so, it counts as
    /// accepted at `now`.
    pub fn verified(
        &self,
        lookup_id: &str,
        stored_hash: &str,
        secret: &str,
        now: OffsetDateTime,
    ) -> bool {
        let matches =
            |entry: &RememberedSecret| entry.stored_hash == stored_hash && entry.is(secret);
        let second = now.unix_timestamp();
        // Written once a second at most: every thread that accepts the secret reads this line.
        let accepted = |entry: &Arc<RememberedSecret>| {
            if entry.accepted_at.load(Relaxed) != second {
                entry.accepted_at.store(second, Relaxed);
                // A use the shared cache sees, for its idle expiry. An entry it let go (idle
                // while this thread's copy served) is this one again: the shared entry is what
                // says, on every thread, when the secret was last accepted.
                match self.secrets.get(lookup_id) {
                    Some(shared) if Arc::ptr_eq(&shared, entry) => {}
                    _ => self.secrets.insert(lookup_id.to_owned(), Arc::clone(entry)),
                }
            }
        };
        // Read in place: a clone of the entry would write its reference count, which every
        // thread's copy shares.
        let seen = self.secrets_seen.with(|seen| {
            let entry = seen.get(lookup_id).filter(|entry| matches(entry))?;
            accepted(entry);
            Some(())
        });
        if seen.is_some() {
            return true;
        }
        // Not seen by this thread, or seen before the secret changed.
        let Some(entry) = self.secrets.get(lookup_id).filter(|e| matches(e)) else {
            return false;
        };
        accepted(&entry);
        self.secrets_seen.keep(lookup_id.to_owned(), entry);
        true
    }

    /// Whether this replica accepted exactly `secret` for `lookup_id` within `RECENTLY` of
    /// `now`, from memory alone (no database read, no hashing): what lets a working credential
    /// through limits that strangers' failures set off. The request is still authenticated in
    /// full afterwards.
    pub fn recently_verified_secret(
        &self,
        lookup_id: &str,
        secret: &str,
        now: OffsetDateTime,
    ) -> bool {
        self.secrets.get(lookup_id).is_some_and(|entry| {
            let at = entry.accepted_at.load(Relaxed);
            now.unix_timestamp() - at <= RECENTLY.whole_seconds() && entry.is(secret)
        })
    }

    /// Remembers a successful verification at `now`.
    pub fn remember(&self, lookup_id: &str, stored_hash: &str, secret: &str, now: OffsetDateTime) {
        let digest: [u8; 32] = Sha256::digest(secret.as_bytes()).into();
        self.secrets.insert(
            lookup_id.to_owned(),
            Arc::new(RememberedSecret {
                stored_hash: stored_hash.to_owned(),
                digest,
                accepted_at: now.unix_timestamp().into(),
            }),
        );
    }

    /// Lets the secrets cache drop what has expired (it also does it as it is used), and forgets
    /// the identity verifications that no longer hold at `now`.
    pub fn sweep(&self, now: OffsetDateTime) {
        self.secrets.run_pending_tasks();
        // Kept a minute past their end: [`TokenCache::recently_verified_identity`] reads them.
        self.identities().retain(|_, entry| {
            let recent = entry.accepted_at.map(|at| at + RECENTLY);
            now <= entry.until.max(recent.unwrap_or(entry.until))
        });
    }

    /// How many verifications are remembered: secrets, identity tokens.
    pub fn len(&self) -> (u64, u64) {
        (self.secrets.entry_count(), self.identities().len() as u64)
    }

    /// The earlier verification of exactly this identity token, if it still holds at `now`.
    pub fn verified_identity(
        &self,
        token: &str,
        now: OffsetDateTime,
    ) -> Option<RememberedIdentity> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        // A thread's copy holds in `accepted_at` when it last told the shared entry.
        let seen = self.identities_seen.with(|seen| {
            let entry = seen.get_mut(&digest).filter(|entry| now <= entry.until)?;
            let tell = (entry.accepted_at).is_some_and(|at| now - at >= SHARE_ACCEPTANCE_EVERY);
            if tell {
                entry.accepted_at = Some(now);
            }
            Some((entry.clone(), tell))
        });
        if let Some((mut entry, tell)) = seen {
            if tell {
                let forgotten = match self.identities().get_mut(&digest) {
                    Some(RememberedIdentity {
                        accepted_at: Some(at),
                        ..
                    }) => {
                        *at = (*at).max(now);
                        false
                    }
                    // Another thread saw it refused since ([`TokenCache::forget_acceptance`]).
                    Some(_) => true,
                    None => false,
                };
                if forgotten {
                    entry.accepted_at = None;
                    self.identities_seen.with(|seen| {
                        if let Some(copy) = seen.get_mut(&digest) {
                            copy.accepted_at = None;
                        }
                    });
                }
            }
            return Some(entry);
        }
        let entry = {
            let mut entries = self.identities();
            let entry = entries
                .get_mut(&digest)
                .filter(|entry| now <= entry.until)?;
            if entry.accepted_at.is_some() {
                entry.accepted_at = Some(now);
            }
            entry.own_copy()
        };
        self.identities_seen.keep(digest, entry.clone());
        Some(entry)
    }

    /// Whether this replica granted a request with exactly this identity token within
    /// `RECENTLY` of `now` (see [`TokenCache::recently_verified_secret`]).
    pub fn recently_verified_identity(&self, token: &str, now: OffsetDateTime) -> bool {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        self.identities()
            .get(&digest)
            .and_then(|entry| entry.accepted_at)
            .is_some_and(|at| now <= at + RECENTLY)
    }

    /// Forgets that requests with this identity token were granted (no account accepts it any
    /// more: deleted, or its trust narrowed), in the shared entry and this thread's copy: the
    /// per-address limit no longer spares it until a request with it is granted again.
    pub fn forget_acceptance(&self, token: &str) {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(shared) = self.identities().get_mut(&digest) {
            shared.accepted_at = None;
        }
        self.identities_seen.with(|seen| {
            if let Some(copy) = seen.get_mut(&digest) {
                copy.accepted_at = None;
            }
        });
    }

    /// Records that a request with this remembered identity token was granted at `now`, in the
    /// shared entry and this thread's copy: from then on, finding it remembered counts as
    /// accepting it ([`TokenCache::verified_identity`]). Called once per copy, when
    /// `RememberedIdentity::accepted` says it was never granted.
    pub fn accept_identity(&self, token: &str, now: OffsetDateTime) {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(shared) = self.identities().get_mut(&digest) {
            shared.accepted_at = shared.accepted_at.max(Some(now));
        }
        self.identities_seen.with(|seen| {
            if let Some(copy) = seen.get_mut(&digest) {
                copy.accepted_at = copy.accepted_at.max(Some(now));
            }
        });
    }

    /// Remembers the verification of an identity token at `now`, against the hosted key set of
    /// `key_version` when its issuer is one this registry hosts. The version is copied: the
    /// caller's bytes may be a slice of a hosted entry's buffer, which a remembered slice would
    /// keep in memory after the hosting cache let the entry go.
    pub fn remember_identity(
        &self,
        token: &str,
        verified: Arc<VerifiedToken>,
        key_version: Option<&[u8]>,
        now: OffsetDateTime,
    ) {
        // A NumericDate may have a fraction (RFC 7519 §2); rounding down stops trusting early.
        let expires = verified
            .claims
            .get("exp")
            .and_then(serde_json::Value::as_f64)
            .and_then(|exp| OffsetDateTime::from_unix_timestamp(exp.floor() as i64).ok());
        let Some(expires) = expires else {
            return; // the verifier requires `exp`; without one there is nothing safe to keep
        };
        let until = (expires + registry_domain::claims::LEEWAY).min(now + IDENTITY_TTL);
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut entries = self.identities();
        if entries.len() >= MAX_ENTRIES as usize {
            entries.retain(|_, entry| now <= entry.until);
            if entries.len() >= MAX_ENTRIES as usize {
                entries.clear();
            }
        }
        // A token granted before stays a working credential when it verifies again.
        let accepted_at = entries.get(&digest).and_then(|e| e.accepted_at);
        let entry = RememberedIdentity {
            token: verified,
            key_version: key_version.map(KeyVersion::copy_from_slice),
            until,
            accepted_at,
        };
        let own = entry.own_copy();
        entries.insert(digest, entry);
        drop(entries);
        // This thread's copy, if any, may be of an earlier verification (an older key set).
        self.identities_seen.keep(digest, own);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_new_stored_hash_or_another_secret_misses() {
        let cache = TokenCache::default();
        let now = OffsetDateTime::from_unix_timestamp(1_000_000).unwrap();
        cache.remember("id", "hash-1", "secret", now);
        assert!(cache.verified("id", "hash-1", "secret", now));
        assert!(!cache.verified("id", "hash-2", "secret", now));
        assert!(!cache.verified("id", "hash-1", "secreT", now));
        assert!(!cache.verified("other", "hash-1", "secret", now));
    }

    #[test]
    fn recently_means_accepted_within_the_last_minute() {
        let cache = TokenCache::default();
        let now = OffsetDateTime::from_unix_timestamp(1_000_000).unwrap();
        cache.remember("id", "hash-1", "secret", now);
        assert!(cache.recently_verified_secret("id", "secret", now + RECENTLY));
        assert!(!cache.recently_verified_secret("id", "secreT", now));
        assert!(!cache.recently_verified_secret("other", "secret", now));
        let later = now + RECENTLY + Duration::seconds(1);
        assert!(!cache.recently_verified_secret("id", "secret", later));
        // Accepted again from memory: recent again.
        assert!(cache.verified("id", "hash-1", "secret", later));
        assert!(cache.recently_verified_secret("id", "secret", later));
        // The shared cache let the entry go (idle) while this thread's copy kept accepting it:
        // the next acceptance puts it back, and it is recent again on every thread.
        cache.secrets.invalidate("id");
        let again = later + Duration::seconds(1);
        assert!(cache.verified("id", "hash-1", "secret", again));
        assert!(cache.recently_verified_secret("id", "secret", again));
    }

    #[test]
    fn entries_stay_within_the_bound() {
        let cache = TokenCache::default();
        for n in 0..(MAX_ENTRIES + 5_000) {
            cache.remember(&n.to_string(), "h", "s", OffsetDateTime::UNIX_EPOCH);
        }
        let now = OffsetDateTime::from_unix_timestamp(1_000_000).unwrap();
        for n in 0..(MAX_ENTRIES + 5_000) {
            cache.remember_identity(&n.to_string(), token(1_000_000 + 3600), None, now);
        }
        cache.sweep(now);
        let (secrets, identities) = cache.len();
        assert!(
            secrets <= MAX_ENTRIES && identities <= MAX_ENTRIES,
            "{:?}",
            cache.len()
        );
        cache.sweep(now + IDENTITY_TTL + Duration::seconds(1));
        assert_eq!(cache.len().1, 0, "lapsed verifications are forgotten");
    }

    #[test]
    fn each_threads_copies_follow_the_shared_entries() {
        let cache = TokenCache::default();
        let now = OffsetDateTime::from_unix_timestamp(1_000_000).unwrap();
        cache.remember("id", "hash-1", "old", now);
        assert!(cache.verified("id", "hash-1", "old", now), "copied here");
        // The token regenerated, and its new secret verified, on another worker.
        std::thread::scope(|scope| {
            scope.spawn(|| cache.remember("id", "hash-2", "new", now));
        });
        assert!(cache.verified("id", "hash-2", "new", now));
        assert!(!cache.verified("id", "hash-2", "old", now));
        assert!(!cache.verified("id", "hash-1", "new", now));

        let version = |v: &'static str| Some(bytes::Bytes::from_static(v.as_bytes()));
        let entry = Some(bytes::Bytes::from_static(
            b"an entry's buffer: v1, and more",
        ));
        let v1 = entry.as_ref().map(|buffer| buffer.slice(19..21));
        cache.remember_identity("a.b.c", token(1_000_000 + 3600), v1.as_deref(), now);
        // Verified, but no request was granted with it yet: not a working credential.
        assert!(!cache.verified_identity("a.b.c", now).unwrap().accepted());
        assert!(!cache.recently_verified_identity("a.b.c", now));
        cache.accept_identity("a.b.c", now);
        assert!(cache.recently_verified_identity("a.b.c", now));
        // Refused since (its account deleted): not spared until granted again.
        cache.forget_acceptance("a.b.c");
        assert!(!cache.recently_verified_identity("a.b.c", now));
        assert!(!cache.verified_identity("a.b.c", now).unwrap().accepted());
        cache.accept_identity("a.b.c", now);
        assert!(cache.recently_verified_identity("a.b.c", now));
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let seen = cache.verified_identity("a.b.c", now).unwrap();
                assert_eq!(seen.key_version, version("v1"));
                let kept = seen.key_version.as_ref().unwrap().as_ptr_range();
                let buffer = entry.as_ref().unwrap().as_ptr_range();
                assert!(
                    kept.end <= buffer.start || buffer.end <= kept.start,
                    "a copy, not a slice of the entry's buffer"
                );
                // Verified again there against a newer key set.
                cache.remember_identity("a.b.c", token(1_000_000 + 3600), Some(&b"v2"[..]), now);
                let later = now + Duration::seconds(30);
                assert!(cache.verified_identity("a.b.c", later).is_some());
            });
        });
        let seen = cache.verified_identity("a.b.c", now).unwrap();
        assert_eq!(seen.key_version, version("v1"), "this thread's copy");
        cache.remember_identity("a.b.c", token(1_000_000 + 3600), Some(&b"v2"[..]), now);
        let seen = cache.verified_identity("a.b.c", now).unwrap();
        assert_eq!(
            seen.key_version,
            version("v2"),
            "replaced by its own verification"
        );
        // Accepted from a copy 30 s later, on the other thread: the shared entry heard of it.
        let later = now + Duration::seconds(30) + RECENTLY;
        assert!(cache.recently_verified_identity("a.b.c", later));
        assert!(cache
            .verified_identity("a.b.c", now + IDENTITY_TTL + Duration::SECOND)
            .is_none());
    }

    fn token(exp: i64) -> Arc<VerifiedToken> {
        token_with_exp(json!(exp))
    }

    fn token_with_exp(exp: serde_json::Value) -> Arc<VerifiedToken> {
        let claims = json!({"iss": "https://issuer.example", "exp": exp});
        Arc::new(VerifiedToken {
            issuer: "https://issuer.example".into(),
            claims: claims.as_object().unwrap().clone(),
        })
    }

    #[test]
    fn identity_tokens_are_remembered_briefly_and_never_past_their_expiry() {
        let cache = TokenCache::default();
        let now = OffsetDateTime::from_unix_timestamp(1_000_000).unwrap();
        cache.remember_identity("a.b.c", token(1_000_000 + 3600), None, now);
        assert!(cache.verified_identity("a.b.c", now).is_some());
        assert!(cache.verified_identity("a.b.C", now).is_none());
        assert!(cache
            .verified_identity("a.b.c", now + IDENTITY_TTL)
            .is_some());
        assert!(cache
            .verified_identity("a.b.c", now + IDENTITY_TTL + Duration::seconds(1))
            .is_none());

        // A fractional `exp` counts too.
        cache.remember_identity(
            "j.k.l",
            token_with_exp(json!(1_000_000.5 + 3600.0)),
            None,
            now,
        );
        assert!(cache.verified_identity("j.k.l", now).is_some());

        // Expiring in 10 s: kept until exp + leeway (70 s) would exceed the TTL, so 60 s...
        cache.remember_identity("d.e.f", token(1_000_000 + 10), None, now);
        assert!(cache
            .verified_identity("d.e.f", now + Duration::seconds(60))
            .is_some());
        // ...and one that expired long ago (a clock jump) is not kept past exp + leeway.
        cache.remember_identity("g.h.i", token(1_000_000 - 50), None, now);
        assert!(cache
            .verified_identity("g.h.i", now + Duration::seconds(10))
            .is_some());
        assert!(cache
            .verified_identity("g.h.i", now + Duration::seconds(11))
            .is_none());
    }
}
