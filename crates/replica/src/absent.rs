//! Names the database said have nothing (a subdomain that publishes nothing, an issuer no
//! policy names), remembered for a while so that a flood of made-up names costs at most one
//! read per name per window. The names are the client's: they are kept as a keyed hash, and at
//! most a bounded number of them.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Mutex, MutexGuard, PoisonError};
use time::OffsetDateTime;

/// How long a name is answered from memory after the database said it has nothing.
const WINDOW_MILLIS: i64 = 10_000;
/// Names remembered, at most.
pub(crate) const MAX_ABSENT: usize = 100_000;

/// Names remembered as having nothing, by a keyed hash, with the millisecond of the read that
/// said so.
#[derive(Debug, Default)]
pub(crate) struct Absent {
    keys: RandomState,
    seen: Mutex<HashMap<u64, i64>>,
}

/// The remembered names, locked: a caller that must order its look-up with other state (the
/// hosting cache's generation) holds this while it reads that state.
pub(crate) struct Locked<'a> {
    keys: &'a RandomState,
    seen: MutexGuard<'a, HashMap<u64, i64>>,
}

impl Absent {
    /// The remembered names, locked.
    pub(crate) fn lock(&self) -> Locked<'_> {
        Locked {
            keys: &self.keys,
            seen: self.seen.lock().unwrap_or_else(PoisonError::into_inner),
        }
    }
}

impl Locked<'_> {
    fn key(&self, name: &str) -> u64 {
        self.keys.hash_one(name)
    }

    /// Whether the database said `name` has nothing within the window before `now`.
    pub(crate) fn recently(&self, name: &str, now: OffsetDateTime) -> bool {
        self.seen
            .get(&self.key(name))
            .is_some_and(|&at| (0..WINDOW_MILLIS).contains(&(millis(now) - at)))
    }

    /// Remembers that the database said `name` has nothing at `now`. Past the bound, names
    /// older than the window go first, and everything if that is not enough.
    pub(crate) fn remember(&mut self, name: &str, now: OffsetDateTime) {
        let now = millis(now);
        if self.seen.len() >= MAX_ABSENT {
            self.seen
                .retain(|_, at| (0..WINDOW_MILLIS).contains(&(now - *at)));
            if self.seen.len() >= MAX_ABSENT {
                self.seen.clear();
            }
        }
        let key = self.key(name);
        self.seen.insert(key, now);
    }

    /// Forgets `name`: it has something now.
    pub(crate) fn forget(&mut self, name: &str) {
        let key = self.key(name);
        self.seen.remove(&key);
    }

    /// Forgets every name, and the memory they took.
    pub(crate) fn clear(&mut self) {
        self.seen.clear();
        self.seen.shrink_to_fit();
    }

    /// How many names are remembered (some may be older than the window).
    pub(crate) fn len(&self) -> usize {
        self.seen.len()
    }
}

fn millis(at: OffsetDateTime) -> i64 {
    i64::try_from(at.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::Duration;

    #[test]
    fn a_name_is_absent_for_10_s_until_forgotten_and_the_names_stay_bounded() {
        let absent = Absent::default();
        let now = OffsetDateTime::now_utc();
        let mut names = absent.lock();
        assert!(!names.recently("x", now));
        names.remember("x", now);
        assert!(names.recently("x", now + Duration::milliseconds(9_999)));
        assert!(!names.recently("x", now + Duration::seconds(10)));
        assert!(!names.recently("x", now - Duration::seconds(1)));
        names.forget("x");
        assert!(!names.recently("x", now));
        for i in 0..MAX_ABSENT + 10 {
            names.remember(&i.to_string(), now);
        }
        assert!(names.len() <= MAX_ABSENT);
        names.clear();
        assert_eq!(names.len(), 0);
    }
}
