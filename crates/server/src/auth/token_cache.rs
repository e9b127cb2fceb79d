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
//!   only the signature and time checks are skipped. A key the issuer withdraws is already
//!   honoured for as long as the key cache keeps it (at least 5 minutes); this adds at most
//!   [`IDENTITY_TTL`] to that.

use moka::sync::Cache;
use registry_domain::ports::VerifiedToken;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use subtle::ConstantTimeEq;
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
type RememberedIdentity = (Arc<VerifiedToken>, OffsetDateTime);

/// A verified secret: the hash stored for it then, and its SHA-256.
#[derive(Debug)]
struct RememberedSecret {
    stored_hash: String,
    digest: [u8; 32],
}

/// Remembered verifications: secrets on a `moka` cache bounded in entries with idle expiry;
/// identity tokens in a map bounded in entries, each kept until its own time.
#[derive(Debug)]
pub struct TokenCache {
    /// lookup id → the verified secret.
    secrets: Cache<String, Arc<RememberedSecret>>,
    /// SHA-256 of the token → the verification. A map under a lock rather than a `moka` cache:
    /// every federated request reads it, a `moka` read cost P3 about 5 % (docs/benchmarks.md),
    /// and its expiry is the server's clock anyway.
    identities: Mutex<HashMap<[u8; 32], RememberedIdentity>>,
}

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
            identities: Default::default(),
        }
    }
}

impl TokenCache {
    fn identities(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], RememberedIdentity>> {
        self.identities
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether `secret` was verified before against exactly `stored_hash`.
    pub fn verified(&self, lookup_id: &str, stored_hash: &str, secret: &str) -> bool {
        let Some(entry) = self.secrets.get(lookup_id) else {
            return false;
        };
        let digest = Sha256::digest(secret.as_bytes());
        entry.stored_hash == stored_hash && bool::from(entry.digest.ct_eq(digest.as_slice()))
    }

    /// Remembers a successful verification.
    pub fn remember(&self, lookup_id: &str, stored_hash: &str, secret: &str) {
        let digest: [u8; 32] = Sha256::digest(secret.as_bytes()).into();
        self.secrets.insert(
            lookup_id.to_owned(),
            Arc::new(RememberedSecret {
                stored_hash: stored_hash.to_owned(),
                digest,
            }),
        );
    }

    /// Lets the secrets cache drop what has expired (it also does it as it is used), and forgets
    /// the identity verifications that no longer hold at `now`.
    pub fn sweep(&self, now: OffsetDateTime) {
        self.secrets.run_pending_tasks();
        self.identities().retain(|_, (_, until)| now <= *until);
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
    ) -> Option<Arc<VerifiedToken>> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        self.identities()
            .get(&digest)
            .filter(|(_, until)| now <= *until)
            .map(|(verified, _)| verified.clone())
    }

    /// Remembers the verification of an identity token at `now`.
    pub fn remember_identity(
        &self,
        token: &str,
        verified: Arc<VerifiedToken>,
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
            entries.retain(|_, (_, until)| now <= *until);
            if entries.len() >= MAX_ENTRIES as usize {
                entries.clear();
            }
        }
        entries.insert(digest, (verified, until));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_new_stored_hash_or_another_secret_misses() {
        let cache = TokenCache::default();
        cache.remember("id", "hash-1", "secret");
        assert!(cache.verified("id", "hash-1", "secret"));
        assert!(!cache.verified("id", "hash-2", "secret"));
        assert!(!cache.verified("id", "hash-1", "secreT"));
        assert!(!cache.verified("other", "hash-1", "secret"));
    }

    #[test]
    fn entries_stay_within_the_bound() {
        let cache = TokenCache::default();
        for n in 0..(MAX_ENTRIES + 5_000) {
            cache.remember(&n.to_string(), "h", "s");
        }
        let now = OffsetDateTime::from_unix_timestamp(1_000_000).unwrap();
        for n in 0..(MAX_ENTRIES + 5_000) {
            cache.remember_identity(&n.to_string(), token(1_000_000 + 3600), now);
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
        cache.remember_identity("a.b.c", token(1_000_000 + 3600), now);
        assert!(cache.verified_identity("a.b.c", now).is_some());
        assert!(cache.verified_identity("a.b.C", now).is_none());
        assert!(cache
            .verified_identity("a.b.c", now + IDENTITY_TTL)
            .is_some());
        assert!(cache
            .verified_identity("a.b.c", now + IDENTITY_TTL + Duration::seconds(1))
            .is_none());

        // A fractional `exp` counts too.
        cache.remember_identity("j.k.l", token_with_exp(json!(1_000_000.5 + 3600.0)), now);
        assert!(cache.verified_identity("j.k.l", now).is_some());

        // Expiring in 10 s: kept until exp + leeway (70 s) would exceed the TTL, so 60 s...
        cache.remember_identity("d.e.f", token(1_000_000 + 10), now);
        assert!(cache
            .verified_identity("d.e.f", now + Duration::seconds(60))
            .is_some());
        // ...and one that expired long ago (a clock jump) is not kept past exp + leeway.
        cache.remember_identity("g.h.i", token(1_000_000 - 50), now);
        assert!(cache
            .verified_identity("g.h.i", now + Duration::seconds(10))
            .is_some());
        assert!(cache
            .verified_identity("g.h.i", now + Duration::seconds(11))
            .is_none());
    }
}
