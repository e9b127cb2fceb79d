//! Failed secrets per lookup id, from any address (docs/api.md, "Authentication"): at most
//! [`SecretFailures::limit`] in any sliding minute. A lookup id is public (it is inside every
//! token), so without this bound strangers spread over many addresses could make the registry
//! run argon2 for one credential as often as their per-address allowances add up to.
//!
//! Exact rather than a token bucket: a bucket refills while slow checks run, and the contract
//! counts failures in a minute.

use crate::rate_limit::{RetryAfter, Tally, MAX_KEYS};
use registry_domain::ports::Ticks;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The failures of each lookup id within the last window.
#[derive(Debug)]
pub struct SecretFailures {
    limit: usize,
    window: Duration,
    ticks: Arc<dyn Ticks>,
    ids: Mutex<HashMap<String, VecDeque<Instant>>>,
    /// The failures recorded since the last exchange with the other replicas, by lookup id
    /// ([`crate::shared`]).
    tally: Tally<String>,
}

impl SecretFailures {
    /// At most `limit` failures per lookup id in any `window`, counted in `ticks`.
    pub fn new(limit: usize, window: Duration, ticks: Arc<dyn Ticks>) -> Self {
        Self {
            limit: limit.max(1),
            window,
            ticks,
            ids: Mutex::default(),
            tally: Tally::default(),
        }
    }

    /// The failures recorded since the last call, by lookup id, for the other replicas.
    pub(crate) fn take_tally(&self) -> HashMap<String, i64> {
        self.tally.take()
    }

    /// Counts `failures` another replica recorded for `lookup_id`, `ago`.
    pub(crate) fn absorb(&self, lookup_id: &str, failures: u64, ago: Duration) {
        let Some(at) = self.ticks.now().checked_sub(ago) else {
            return;
        };
        let mut ids = self.room_for(lookup_id);
        let kept = ids.entry(lookup_id.to_owned()).or_default();
        for _ in 0..failures.min(self.limit as u64) {
            // In time order: the oldest leaves the window first.
            let place = kept.partition_point(|t| *t <= at);
            kept.insert(place, at);
            if kept.len() > self.limit {
                kept.pop_front();
            }
        }
    }

    /// Whether a secret for `lookup_id` may be checked now; refused while `limit` failures fell
    /// within the window, until the oldest of them leaves it.
    pub fn check(&self, lookup_id: &str) -> Result<(), RetryAfter> {
        let now = self.ticks.now();
        let mut ids = self.ids.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(failures) = ids.get_mut(lookup_id) else {
            return Ok(());
        };
        while failures
            .front()
            .is_some_and(|at| now.duration_since(*at) >= self.window)
        {
            failures.pop_front();
        }
        match failures.front() {
            Some(oldest) if failures.len() >= self.limit => {
                Err(RetryAfter(self.window - now.duration_since(*oldest)))
            }
            _ => Ok(()),
        }
    }

    /// The failures by lookup id, with room for `lookup_id`: memory stays bounded, ids whose
    /// failures all left the window go first, and if that is not enough every id starts again
    /// (spraying ids only resets counts).
    fn room_for(
        &self,
        lookup_id: &str,
    ) -> std::sync::MutexGuard<'_, HashMap<String, VecDeque<Instant>>> {
        let now = self.ticks.now();
        let mut ids = self.ids.lock().unwrap_or_else(PoisonError::into_inner);
        if ids.len() >= MAX_KEYS && !ids.contains_key(lookup_id) {
            ids.retain(|_, failures| {
                failures
                    .back()
                    .is_some_and(|at| now.duration_since(*at) < self.window)
            });
            if ids.len() >= MAX_KEYS {
                ids.clear();
            }
        }
        ids
    }

    /// Counts a failed secret for `lookup_id`.
    pub fn record(&self, lookup_id: &str) {
        let now = self.ticks.now();
        let mut ids = self.room_for(lookup_id);
        let failures = ids.entry(lookup_id.to_owned()).or_default();
        if failures.len() >= self.limit {
            failures.pop_front();
        }
        failures.push_back(now);
        drop(ids);
        self.tally.add(&lookup_id.to_owned(), 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use registry_domain::testing::ManualTicks;

    #[test]
    fn the_limit_holds_in_any_window_and_comes_back() {
        let ticks = Arc::new(ManualTicks::default());
        let failures = SecretFailures::new(3, Duration::from_secs(60), ticks.clone());
        for _ in 0..3 {
            assert!(failures.check("a").is_ok());
            failures.record("a");
            ticks.advance(Duration::from_secs(10));
        }
        // The oldest failure, 30 s ago, leaves the window in 30 s.
        let RetryAfter(wait) = failures.check("a").unwrap_err();
        assert_eq!(wait, Duration::from_secs(30));
        assert!(failures.check("b").is_ok());
        ticks.advance(Duration::from_secs(29));
        assert!(failures.check("a").is_err());
        ticks.advance(Duration::from_secs(1));
        assert!(failures.check("a").is_ok());
    }

    #[test]
    fn sprayed_ids_stay_within_the_bound() {
        let ticks = Arc::new(ManualTicks::default());
        let failures = SecretFailures::new(10, Duration::from_secs(60), ticks);
        for n in 0..(MAX_KEYS + 10) {
            failures.record(&n.to_string());
        }
        assert!(failures.ids.lock().unwrap().len() <= MAX_KEYS);
    }
}
