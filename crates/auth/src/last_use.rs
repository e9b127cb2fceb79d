//! `lastUsedAt` of service accounts (docs/api.md, "Audit trail and last use"): written at most once
//! a minute per account and replica, off the request's path, never once per request.
//!
//! Each replica remembers the minute it last wrote for each account; a request in a later
//! minute schedules one guarded write (`ActivityLog::record_use`), which never moves the value
//! backwards, so two replicas in the same minute change the row once.
//!
//! Each worker thread also remembers the minutes it has seen, and asks the replica's map (under
//! its lock) only once a minute per account: the requests of a busy account on many workers do
//! not queue on that lock.

use crossbeam_utils::CachePadded;
use registry_domain::audit::last_used_minute;
use registry_domain::ports::ActivityLog;
use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use thread_local::ThreadLocal;
use time::OffsetDateTime;
use uuid::Uuid;

/// Accounts remembered before the map starts again: far more than any replica serves in a
/// minute, and a bound on memory whatever the number of accounts.
const MAX_REMEMBERED: usize = 100_000;

/// The minute each account was last written by this replica.
#[derive(Debug, Default)]
pub struct LastUse {
    written: Mutex<Minutes>,
    /// Each thread's own memory of the minutes it found written (a subset of `written`).
    seen: ThreadLocal<CachePadded<RefCell<Minutes>>>,
    counts: Arc<Counts>,
}

/// The last minute written, by account.
type Minutes = HashMap<Uuid, i64, BuildHasherDefault<UuidHasher>>;

/// Account ids are random version-4 UUIDs the registry drew: their own bits are a good hash
/// (SipHash cost about as much as the rest of the bookkeeping of a request's last use).
#[derive(Debug, Default)]
struct UuidHasher(u64);

impl Hasher for UuidHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = self.0.rotate_left(5) ^ u64::from_ne_bytes(word);
        }
    }
}

#[derive(Debug, Default)]
struct Counts {
    statements: AtomicU64,
    rows_written: AtomicU64,
}

impl LastUse {
    /// Whether a use in `minute` (Unix seconds / 60) is news to this replica (and is now
    /// remembered as written).
    fn due(&self, account: Uuid, minute: i64) -> bool {
        let mut seen = self.seen.get_or_default().borrow_mut();
        if seen.get(&account).is_some_and(|last| *last >= minute) {
            return false;
        }
        if seen.len() >= MAX_REMEMBERED {
            seen.clear();
        }
        seen.insert(account, minute);
        let mut written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(last) = written.get_mut(&account) {
            if *last >= minute {
                return false;
            }
            *last = minute;
            return true;
        }
        if written.len() >= MAX_REMEMBERED {
            // Forgetting costs one extra guarded write per account, nothing more.
            written.clear();
        }
        written.insert(account, minute);
        true
    }

    /// Writes sent to the database so far.
    pub fn statements(&self) -> u64 {
        self.counts.statements.load(Relaxed)
    }

    /// Writes that changed the row so far.
    pub fn rows_written(&self) -> u64 {
        self.counts.rows_written.load(Relaxed)
    }

    /// Records that `account` made a successful request at `now`: a write to the database in
    /// the background when this minute is news.
    pub fn used(&self, activity: &Arc<dyn ActivityLog>, account: Uuid, now: OffsetDateTime) {
        if !self.due(account, now.unix_timestamp().div_euclid(60)) {
            return;
        }
        let minute = last_used_minute(now);
        let activity = Arc::clone(activity);
        let counts = Arc::clone(&self.counts);
        counts.statements.fetch_add(1, Relaxed);
        tokio::spawn(async move {
            let written =
                registry_replica::blocking(move || activity.record_use(account, minute)).await;
            match written {
                Ok(Ok(true)) => {
                    counts.rows_written.fetch_add(1, Relaxed);
                }
                Ok(Err(error)) => {
                    tracing::warn!(%error, %account, "could not record an account's last use");
                }
                _ => {}
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn one_write_a_minute_per_account() {
        let uses = LastUse::default();
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let t = datetime!(2026-11-23 12:00 UTC).unix_timestamp() / 60;
        assert!(uses.due(a, t));
        assert!(!uses.due(a, t));
        assert!(uses.due(b, t));
        assert!(uses.due(a, t + 1));
        // A clock that steps back writes nothing.
        assert!(!uses.due(a, t));
        // Another thread, which has not seen this minute, still finds it written.
        std::thread::scope(|scope| {
            scope.spawn(|| {
                assert!(!uses.due(a, t + 1));
                assert!(uses.due(a, t + 2));
            });
        });
        assert!(!uses.due(a, t + 2));
    }
}
