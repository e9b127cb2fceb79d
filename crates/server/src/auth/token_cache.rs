//! Remembered static-token and anonymous-secret verifications.
//!
//! argon2 costs ~17 ms, so a verified secret is remembered by its lookup id together with the
//! hash stored for it at the time. Every request still reads the stored hash (one indexed query),
//! so regeneration (a new hash) or deletion (no row) fails the very next request on every
//! replica; only the argon2 work is skipped.

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;
use subtle::ConstantTimeEq;

const MAX_ENTRIES: usize = 100_000;

/// lookup id → (stored hash, SHA-256 of the verified secret).
#[derive(Debug, Default)]
pub struct TokenCache {
    entries: Mutex<HashMap<String, (String, [u8; 32])>>,
}

impl TokenCache {
    /// Whether `secret` was verified before against exactly `stored_hash`.
    pub fn verified(&self, lookup_id: &str, stored_hash: &str, secret: &str) -> bool {
        let digest = Sha256::digest(secret.as_bytes());
        let entries = self.entries.lock().expect("token cache lock");
        entries.get(lookup_id).is_some_and(|(hash, remembered)| {
            hash == stored_hash && bool::from(remembered.ct_eq(digest.as_slice()))
        })
    }

    /// Remembers a successful verification.
    pub fn remember(&self, lookup_id: &str, stored_hash: &str, secret: &str) {
        let digest: [u8; 32] = Sha256::digest(secret.as_bytes()).into();
        let mut entries = self.entries.lock().expect("token cache lock");
        if entries.len() >= MAX_ENTRIES {
            entries.clear();
        }
        entries.insert(lookup_id.to_owned(), (stored_hash.to_owned(), digest));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_stored_hash_or_another_secret_misses() {
        let cache = TokenCache::default();
        cache.remember("id", "hash-1", "secret");
        assert!(cache.verified("id", "hash-1", "secret"));
        assert!(!cache.verified("id", "hash-2", "secret"));
        assert!(!cache.verified("id", "hash-1", "secreT"));
        assert!(!cache.verified("other", "hash-1", "secret"));
    }
}
