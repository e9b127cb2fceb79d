//! Calls on one resource that must not overlap on a replica (docs/api.md, `conflict`): while
//! one is in flight, until its write has settled and its answer is made, another on the same
//! resource is refused (409) rather than run after it.
//!
//! The store's check (the token replaced is the one read before hashing) orders calls whose
//! reads and writes interleave; it cannot see a call that reads after another's write but
//! before that other's answer is made (a write's answer waits for the replica to settle): both
//! would succeed one after the other, and the first caller would hold a token that never worked.
//! Across replicas only the store's check holds.

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};

/// The resources with a call in flight (clones share them).
#[derive(Debug, Clone)]
pub struct InFlight<K: Eq + Hash> {
    busy: Arc<Mutex<HashSet<K>>>,
}

impl<K: Eq + Hash> Default for InFlight<K> {
    fn default() -> Self {
        Self {
            busy: Arc::default(),
        }
    }
}

/// A call in flight on a resource; dropping it ends the call.
#[derive(Debug)]
pub struct Entered<K: Eq + Hash> {
    busy: Arc<Mutex<HashSet<K>>>,
    key: K,
}

impl<K: Eq + Hash + Clone> InFlight<K> {
    /// Enters a call on `key`, or `None` while another is in flight on it.
    pub fn enter(&self, key: K) -> Option<Entered<K>> {
        let mut busy = self.busy.lock().unwrap_or_else(PoisonError::into_inner);
        busy.insert(key.clone()).then(|| Entered {
            busy: Arc::clone(&self.busy),
            key,
        })
    }
}

impl<K: Eq + Hash> Drop for Entered<K> {
    fn drop(&mut self) {
        let mut busy = self.busy.lock().unwrap_or_else(PoisonError::into_inner);
        busy.remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_call_on_one_key_is_refused_until_the_first_ends() {
        let calls = InFlight::default();
        let first = calls.enter(1).expect("nothing in flight");
        assert!(calls.enter(1).is_none(), "the first is in flight");
        let other = calls.enter(2);
        assert!(other.is_some(), "another resource is free");
        drop(first);
        assert!(calls.enter(1).is_some(), "the first ended");
    }
}
