//! Rate limits (GCRA, the generic cell rate algorithm): per client address, keyed as docs/api.md
//! says ("Limits"; [`rate_limit_key`]: an IPv4 address alone, IPv4-mapped as IPv4, IPv6 by its
//! /64), and per credential, lookup id or customer (docs/api.md, "Authentication" and "Errors").
//!
//! A key's state is one time, its theoretical arrival time: every event moves it one emission
//! interval (the window over the limit) later, and an event is let through while it stays within
//! one window of now. Our own rather than a crate's, because the replicas share their limits
//! ([`crate::shared`]): another replica's events move it too, dated when they happened, and
//! beyond the allowance (a debt that the allowance pays back as it comes back), which no
//! off-the-shelf limiter allows.
//!
//! Memory is bounded under spraying: the keyed state holds at most [`MAX_KEYS`] keys (about
//! 64 bytes each for an address: a 16-byte key, 8 bytes of state, the map's overhead).
//! Past it, the keys whose limit has fully recovered are dropped, and if that is not enough,
//! every key starts again from a full allowance. Spraying can then reset limits, but never grow
//! memory; an attacker with that many addresses had as many allowances anyway.

use registry_domain::limits::rate_limit_key;
use registry_domain::ports::Ticks;
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Most keys whose state a limiter keeps (about 6.4 MB of addresses).
pub const MAX_KEYS: usize = 100_000;

/// Where the limiter's time starts, in nanoseconds: a day, the longest an event another replica
/// let through before this one started can matter (a window of an hour).
const EPOCH: u64 = 86_400 * 1_000_000_000;

/// The key state's shards: workers counting different keys rarely wait for each other.
const SHARDS: usize = 16;

/// How far another replica's events can push a key's state beyond now, in windows: a bound on
/// the debt, however many replicas a client reaches at once.
const MOST_DEBT_WINDOWS: u64 = 8;

/// At most `limit` events per `window` for each key (a client address unless said otherwise),
/// refilled continuously.
#[derive(Debug)]
pub struct RateLimiter<K: Hash + Eq + Clone = IpAddr> {
    /// The emission interval: the time one event takes to come back, in nanoseconds.
    interval: u64,
    /// Events at once at most: the limit.
    burst: u32,
    ticks: Arc<dyn Ticks>,
    /// Each key's theoretical arrival time, on the limiter's scale (`nanos_at`); a key not here
    /// has its whole allowance. At most [`MAX_KEYS`] keys over all shards.
    shards: Box<[Mutex<HashMap<K, u64>>]>,
    hasher: RandomState,
    /// Keys refused by [`RateLimiter::hit_key`], and until when: what
    /// [`RateLimiter::check_key`] reads. Only keys over their limit are here, at most
    /// [`MAX_KEYS`].
    refused: Mutex<HashMap<K, Instant>>,
    /// When the last refusal ends, on the limiter's scale (`nanos_at`): until then some key may be
    /// refused. Every authenticated request asks [`RateLimiter::check_key`]; past that moment it
    /// answers from this one value, which only a refusal writes, without the map's lock (a lock
    /// every worker took on every request).
    refusals_end: AtomicU64,
    created: Instant,
    /// Events given back by [`RateLimiter::give_back_key`] (counted, then found not to count),
    /// by key, each with when it was given back: the key's next events spend them before its
    /// allowance. Each lasts the time one event takes to come back (after it the allowance has
    /// that one back anyway), and a key holds at most its burst of them: given back or not, a
    /// key never has more than its allowance. At most [`MAX_KEYS`] keys.
    given_back: Mutex<HashMap<K, std::collections::VecDeque<Instant>>>,
    /// Whether `given_back` holds anything: every hit asks, and only reads this while it is
    /// empty.
    any_given_back: std::sync::atomic::AtomicBool,
    /// For a limit the replicas share ([`RateLimiter::shared`]): its name there, and the events
    /// let through since the last exchange, by key.
    tally: Option<(&'static str, Tally<K>)>,
}

/// Events let through since the last exchange with the other replicas, by key; an event given
/// back counts −1 (netted against those not added yet: [`crate::shared::Exchange`]).
#[derive(Debug)]
pub(crate) struct Tally<K>(Mutex<HashMap<K, i64>>);

impl<K> Default for Tally<K> {
    fn default() -> Self {
        Self(Mutex::default())
    }
}

impl<K: Hash + Eq + Clone> Tally<K> {
    /// Adds `n` events of `key`.
    pub(crate) fn add(&self, key: &K, n: i64) {
        let mut tally = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if tally.len() >= MAX_KEYS && !tally.contains_key(key) {
            // More keys in one second than a limiter keeps: dropping this second's news keeps
            // memory bounded, as a limiter's own state does.
            tally.clear();
        }
        let count = tally.entry(key.clone()).or_default();
        *count += n;
        if *count == 0 {
            tally.remove(key);
        }
    }

    /// The events since the last call, by key.
    pub(crate) fn take(&self) -> HashMap<K, i64> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Refused: retry after this long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryAfter(pub Duration);

impl RetryAfter {
    /// Whole seconds for a `Retry-After` header, at least 1.
    pub fn seconds(self) -> u64 {
        self.0.as_secs_f64().ceil().max(1.0) as u64
    }
}

impl<K: Hash + Eq + Clone> RateLimiter<K> {
    /// `limit` events per `window`, all of them at once if need be, counted in `ticks`.
    pub fn new(limit: u32, window: Duration, ticks: Arc<dyn Ticks>) -> Self {
        let burst = limit.max(1);
        let interval = u64::try_from(window.as_nanos() / u128::from(burst)).unwrap_or(u64::MAX);
        Self {
            interval: interval.max(1),
            burst,
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
            refused: Mutex::default(),
            refusals_end: AtomicU64::new(0),
            created: ticks.now(),
            ticks,
            given_back: Mutex::default(),
            any_given_back: std::sync::atomic::AtomicBool::new(false),
            tally: None,
        }
    }

    /// The same limit, shared by the replicas under `name` ([`crate::shared`]): it counts the
    /// events it lets through for the others, and the others' events against its keys.
    #[must_use]
    pub fn shared(self, name: &'static str) -> Self {
        Self {
            tally: Some((name, Tally::default())),
            ..self
        }
    }

    /// Counts `n` events of `key` for the other replicas (−1: an event given back).
    fn tell(&self, key: &K, n: i64) {
        if let Some((_, tally)) = &self.tally {
            tally.add(key, n);
        }
    }

    /// Its name among the shared limits, if the replicas share it.
    pub(crate) fn shared_name(&self) -> Option<&'static str> {
        self.tally.as_ref().map(|(name, _)| *name)
    }

    /// The events let through since the last call, by key, for the other replicas.
    pub(crate) fn take_tally(&self) -> HashMap<K, i64> {
        (self.tally.as_ref()).map_or_else(HashMap::new, |(_, tally)| tally.take())
    }

    /// Counts `events` of another replica for `key`, which it let through `ago`: what they
    /// still weigh now (dated then, what came back since is paid) adds to the key's own, beyond
    /// the allowance if need be (a debt the allowance pays as it comes back). The two streams
    /// add up as two limiters' would: neither is charged for the other's past.
    pub fn absorb_key(&self, key: K, events: u64, ago: Duration) {
        let now_at = self.ticks.now();
        let now = self.nanos_at(now_at);
        let at = now.saturating_sub(u64::try_from(ago.as_nanos()).unwrap_or(u64::MAX));
        let most = now.saturating_add(MOST_DEBT_WINDOWS.saturating_mul(self.window()));
        let state = {
            let mut shard = self.shard(&key, now);
            let owed =
                (at.saturating_add(events.saturating_mul(self.interval))).saturating_sub(now);
            let state = (shard.get(&key).copied().unwrap_or(0).max(now))
                .saturating_add(owed)
                .min(most);
            if state <= now {
                // Every one of them has come back already.
                return;
            }
            shard.insert(key.clone(), state);
            state
        };
        self.note_refusal_after(key, now_at, now, state);
    }

    /// The time one event takes to come back.
    fn replenish_interval(&self) -> Duration {
        Duration::from_nanos(self.interval)
    }

    /// The window, in nanoseconds: the allowance's worth of intervals.
    fn window(&self) -> u64 {
        self.interval.saturating_mul(u64::from(self.burst))
    }

    /// The shard of `key`'s state, with room for it: past its share of [`MAX_KEYS`], the keys
    /// whose allowance is whole again at `now` go, and if that is not enough all of them.
    fn shard(&self, key: &K, now: u64) -> MutexGuard<'_, HashMap<K, u64>> {
        let index = usize::try_from(self.hasher.hash_one(key)).unwrap_or(0) % SHARDS;
        let mut shard = (self.shards[index].lock()).unwrap_or_else(PoisonError::into_inner);
        if shard.len() >= MAX_KEYS / SHARDS && !shard.contains_key(key) {
            shard.retain(|_, state| *state > now);
            if shard.len() >= MAX_KEYS / SHARDS / 2 {
                shard.clear();
            }
            shard.shrink_to_fit();
        }
        shard
    }

    /// After `key`'s state became `state` at `now`: when its next event would be refused,
    /// notes until when ([`RateLimiter::check_key`] reads it).
    fn note_refusal_after(&self, key: K, now_at: Instant, now: u64, state: u64) {
        let next_allowed = state
            .saturating_add(self.interval)
            .saturating_sub(self.window());
        if next_allowed > now {
            self.refuse(key, now_at, Duration::from_nanos(next_allowed - now));
        }
    }

    /// Gives back an event of `key` that [`RateLimiter::hit_key`] counted but that turned out
    /// not to count (a creation refused because the registry is full): the key's next event
    /// within the time one event takes to come back spends it instead of its allowance, and a
    /// refusal it caused is lifted.
    pub fn give_back_key(&self, key: K) {
        self.tell(&key, -1);
        let now = self.ticks.now();
        (self.refused.lock().unwrap_or_else(PoisonError::into_inner)).remove(&key);
        let mut back = (self.given_back.lock()).unwrap_or_else(PoisonError::into_inner);
        if back.len() >= MAX_KEYS {
            // Credits last one emission interval: those of addresses that never came back go
            // first, and all of them only if every one still lasts.
            let lasts = self.replenish_interval();
            back.retain(|_, credits| {
                (credits.back()).is_some_and(|at| now.saturating_duration_since(*at) < lasts)
            });
            if back.len() >= MAX_KEYS {
                back.clear();
            }
        }
        let credits = back.entry(key).or_default();
        if credits.len() >= self.burst as usize {
            credits.pop_front();
        }
        credits.push_back(now);
        self.any_given_back.store(true, Ordering::Release);
    }

    /// Spends an event given back to `key`, if one is there and still lasts: `true` when it did.
    fn spend_given_back(&self, key: &K) -> bool {
        if !self.any_given_back.load(Ordering::Acquire) {
            return false;
        }
        let now = self.ticks.now();
        let lasts = self.replenish_interval();
        let mut back = (self.given_back.lock()).unwrap_or_else(PoisonError::into_inner);
        let Some(credits) = back.get_mut(key) else {
            return false;
        };
        credits.retain(|at| now.saturating_duration_since(*at) < lasts);
        let spent = credits.pop_front().is_some();
        if credits.is_empty() {
            back.remove(key);
        }
        if back.is_empty() {
            self.any_given_back.store(false, Ordering::Release);
        }
        spent
    }

    /// `limit` events per minute.
    pub fn per_minute(limit: u32, ticks: Arc<dyn Ticks>) -> Self {
        Self::new(limit, Duration::from_secs(60), ticks)
    }

    /// `limit` events per hour.
    pub fn per_hour(limit: u32, ticks: Arc<dyn Ticks>) -> Self {
        Self::new(limit, Duration::from_secs(3600), ticks)
    }

    /// Counts one event for `key`; refuses when its allowance is used up.
    pub fn hit_key(&self, key: K) -> Result<(), RetryAfter> {
        if self.spend_given_back(&key) {
            self.tell(&key, 1);
            return Ok(());
        }
        let now_at = self.ticks.now();
        let now = self.nanos_at(now_at);
        let outcome = {
            let mut shard = self.shard(&key, now);
            let next =
                (shard.get(&key).copied().unwrap_or(0).max(now)).saturating_add(self.interval);
            let latest = now.saturating_add(self.window());
            match next <= latest {
                true => {
                    shard.insert(key.clone(), next);
                    Ok(next)
                }
                false => Err(Duration::from_nanos(next - latest)),
            }
        };
        match outcome {
            // The event that used the last of the allowance: the key is over its limit until
            // one comes back, so that [`RateLimiter::check_key`] refuses the next event (a
            // limit of N lets N through, not N + 1).
            Ok(state) => {
                self.tell(&key, 1);
                self.note_refusal_after(key, now_at, now, state);
                Ok(())
            }
            Err(wait) => {
                self.refuse(key, now_at, wait);
                Err(RetryAfter(wait))
            }
        }
    }

    /// Notes that `key` is over its limit for `wait` from `now` (what
    /// [`RateLimiter::check_key`] reads).
    fn refuse(&self, key: K, now: Instant, wait: Duration) {
        let mut refused = self.refused.lock().unwrap_or_else(PoisonError::into_inner);
        if refused.len() >= MAX_KEYS {
            refused.retain(|_, until| now < *until);
            if refused.len() >= MAX_KEYS {
                refused.clear();
            }
        }
        refused.insert(key, now + wait);
        self.refusals_end
            .fetch_max(self.nanos_at(now + wait), Ordering::Relaxed);
    }

    /// Whether `key` is over its limit now (its allowance is used up and has not come back
    /// yet), without counting an event.
    pub fn check_key(&self, key: &K) -> Result<(), RetryAfter> {
        let now = self.ticks.now();
        if self.nanos_at(now) >= self.refusals_end.load(Ordering::Relaxed) {
            return Ok(());
        }
        let refused = self.refused.lock().unwrap_or_else(PoisonError::into_inner);
        if refused.is_empty() {
            return Ok(());
        }
        match refused.get(key) {
            Some(until) => match until.checked_duration_since(now) {
                Some(wait) if !wait.is_zero() => Err(RetryAfter(wait)),
                _ => Ok(()),
            },
            None => Ok(()),
        }
    }

    /// `at` in nanoseconds on the limiter's scale: after `created`, plus [`EPOCH`] so that
    /// another replica's events from before this limiter existed still have a time.
    fn nanos_at(&self, at: Instant) -> u64 {
        let nanos = at.saturating_duration_since(self.created).as_nanos();
        u64::try_from(nanos)
            .unwrap_or(u64::MAX)
            .saturating_add(EPOCH)
    }

    /// Keys whose state is kept now.
    pub fn tracked_keys(&self) -> usize {
        (self.shards.iter())
            .map(|shard| shard.lock().unwrap_or_else(PoisonError::into_inner).len())
            .sum()
    }
}

impl RateLimiter<IpAddr> {
    /// Counts one event for the client address `ip`; refuses when its allowance is used up.
    pub fn hit(&self, ip: IpAddr) -> Result<(), RetryAfter> {
        self.hit_key(rate_limit_key(ip))
    }

    /// Whether the client address `ip` is over its limit now, without counting an event.
    pub fn check(&self, ip: IpAddr) -> Result<(), RetryAfter> {
        self.check_key(&rate_limit_key(ip))
    }

    /// Gives back an event the client address `ip` was counted for
    /// ([`RateLimiter::give_back_key`]).
    pub fn give_back(&self, ip: IpAddr) {
        self.give_back_key(rate_limit_key(ip));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use registry_domain::testing::ManualTicks;

    /// A limiter of `limit` per `window` on time that moves only when told.
    fn limiter(limit: u32, window: Duration) -> (RateLimiter, Arc<ManualTicks>) {
        let ticks = Arc::new(ManualTicks::default());
        (RateLimiter::new(limit, window, ticks.clone()), ticks)
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn counts_per_address() {
        let (limiter, _) = limiter(2, Duration::from_secs(3600));
        assert!(limiter.hit(ip("192.0.2.1")).is_ok());
        assert!(limiter.check(ip("192.0.2.1")).is_ok());
        assert!(limiter.hit(ip("192.0.2.1")).is_ok());
        // The allowance is used up: the next event is refused before it is counted.
        assert!(limiter.check(ip("192.0.2.1")).is_err());
        let RetryAfter(wait) = limiter.hit(ip("192.0.2.1")).unwrap_err();
        // One event comes back every half hour.
        assert!(wait > Duration::from_secs(1790) && wait <= Duration::from_secs(1800));
        assert!(limiter.check(ip("192.0.2.1")).is_err());
        assert!(limiter.hit(ip("192.0.2.2")).is_ok());
        assert!(limiter.check(ip("192.0.2.2")).is_ok());
    }

    #[test]
    fn an_event_given_back_is_spent_first_and_lasts_as_long_as_one_takes_to_come_back() {
        let (limiter, ticks) = limiter(2, Duration::from_secs(3600));
        let a = ip("192.0.2.1");
        assert!(limiter.hit(a).is_ok());
        assert!(limiter.hit(a).is_ok());
        assert!(limiter.check(a).is_err());
        // The second did not count after all: the address may try again at once, once.
        limiter.give_back(a);
        assert!(limiter.check(a).is_ok());
        assert!(limiter.hit(a).is_ok());
        assert!(limiter.hit(a).is_err());
        // Another address's events are its own.
        limiter.give_back(ip("192.0.2.2"));
        assert!(limiter.hit(a).is_err());
        // One given back lasts the half hour one event takes to come back: then the allowance
        // has it back anyway, and the two never add up.
        limiter.give_back(a);
        ticks.advance(Duration::from_secs(1800));
        assert!(limiter.hit(a).is_ok());
        assert!(limiter.hit(a).is_err());
        // Given back more often than counted (requests at once, all refused): never more than
        // the burst.
        let b = ip("192.0.2.3");
        for _ in 0..5 {
            limiter.give_back(b);
        }
        assert!(limiter.hit(b).is_ok());
        assert!(limiter.hit(b).is_ok());
        assert!(limiter.hit(b).is_ok());
        assert!(limiter.hit(b).is_ok());
        assert!(
            limiter.hit(b).is_err(),
            "two given back, and the allowance of two"
        );
    }

    #[test]
    fn another_replicas_events_spend_the_allowance_less_what_came_back_since() {
        let (limiter, ticks) = limiter(10, Duration::from_secs(60));
        let a = ip("192.0.2.1");
        for _ in 0..4 {
            assert!(limiter.hit(a).is_ok());
        }
        // Six let through elsewhere just now: the allowance is used up, here too.
        limiter.absorb_key(a, 6, Duration::ZERO);
        assert!(
            limiter.check(a).is_err(),
            "the check before authentication refuses too"
        );
        let RetryAfter(wait) = limiter.hit(a).unwrap_err();
        assert_eq!(wait, Duration::from_secs(6), "one comes back every 6 s");
        // More than the allowance: a debt, paid as the allowance comes back (at most eight
        // windows of it).
        let b = ip("192.0.2.2");
        limiter.absorb_key(b, 12, Duration::ZERO);
        let RetryAfter(wait) = limiter.hit(b).unwrap_err();
        assert_eq!(
            wait,
            Duration::from_secs(18),
            "two owed, then one to come back"
        );
        ticks.advance(Duration::from_secs(18));
        assert!(limiter.hit(b).is_ok());
        assert!(limiter.hit(b).is_err());
        let flood = ip("192.0.2.9");
        limiter.absorb_key(flood, 1_000_000, Duration::ZERO);
        let RetryAfter(wait) = limiter.hit(flood).unwrap_err();
        assert_eq!(wait, Duration::from_secs(8 * 60 - 60 + 6));
        // Seven let through 30 s ago: five of them have come back since.
        let c = ip("192.0.2.3");
        limiter.absorb_key(c, 7, Duration::from_secs(30));
        for n in 0..8 {
            assert!(limiter.hit(c).is_ok(), "event {n}");
        }
        assert!(limiter.hit(c).is_err());
    }

    /// The shared limits probe: two replicas each refilling at the full rate let a client that
    /// kept calling both through twice as often, since each dropped the other's events beyond an
    /// empty allowance. Counted as a debt, the two let through one allowance and one rate.
    #[test]
    fn two_replicas_called_without_pause_let_through_one_rate() {
        let ticks = Arc::new(ManualTicks::default());
        let replica = || RateLimiter::<IpAddr>::new(10, Duration::from_secs(60), ticks.clone());
        let (a, b) = (replica(), replica());
        let client = ip("192.0.2.1");
        let mut allowed = 0;
        for _ in 0..120 {
            // A call to each replica every second; each learns of the other's a second later.
            let on_a = u64::from(a.hit(client).is_ok());
            let on_b = u64::from(b.hit(client).is_ok());
            allowed += on_a + on_b;
            ticks.advance(Duration::from_secs(1));
            b.absorb_key(client, on_a, Duration::from_secs(1));
            a.absorb_key(client, on_b, Duration::from_secs(1));
        }
        // Ten at once, then one every 6 s for two minutes: 30, and what crossed in the last
        // second of news.
        assert!((30..=32).contains(&allowed), "{allowed} let through");
    }

    #[test]
    fn a_shared_limit_tells_what_it_let_through_and_what_it_gave_back() {
        let ticks = Arc::new(ManualTicks::default());
        let shared = RateLimiter::<IpAddr>::new(2, Duration::from_secs(60), ticks.clone())
            .shared("anonymous");
        let (a, b) = (ip("192.0.2.1"), ip("2001:db8::1"));
        assert!(shared.hit(a).is_ok());
        assert!(shared.hit(a).is_ok());
        assert!(shared.hit(a).is_err(), "a refusal is not an event");
        assert!(shared.hit(b).is_ok());
        shared.give_back(b);
        assert_eq!(shared.shared_name(), Some("anonymous"));
        let tally = shared.take_tally();
        assert_eq!(tally, HashMap::from([(a, 2)]), "b's one was given back");
        assert!(shared.take_tally().is_empty(), "told once");
        // An event given back is spent as an event.
        assert!(shared.hit(b).is_ok());
        assert_eq!(shared.take_tally().get(&rate_limit_key(b)), Some(&1));
        // An unshared limit keeps no tally.
        let (alone, _) = limiter(2, Duration::from_secs(60));
        assert!(alone.hit(a).is_ok());
        assert!(alone.take_tally().is_empty());
        assert_eq!(alone.shared_name(), None);
    }

    #[test]
    fn the_allowance_comes_back() {
        let (limiter, ticks) = limiter(2, Duration::from_secs(60));
        assert!(limiter.hit(ip("192.0.2.1")).is_ok());
        assert!(limiter.hit(ip("192.0.2.1")).is_ok());
        let RetryAfter(wait) = limiter.hit(ip("192.0.2.1")).unwrap_err();
        assert_eq!(
            wait,
            Duration::from_secs(30),
            "one event comes back every 30 s"
        );
        ticks.advance(Duration::from_secs(29));
        assert!(limiter.check(ip("192.0.2.1")).is_err(), "not yet");
        ticks.advance(Duration::from_secs(1));
        assert!(limiter.check(ip("192.0.2.1")).is_ok());
        assert!(limiter.hit(ip("192.0.2.1")).is_ok());
        assert!(
            limiter.hit(ip("192.0.2.1")).is_err(),
            "one came back, not two"
        );
    }

    #[test]
    fn ipv6_counts_by_64_and_mapped_ipv4_as_ipv4() {
        let (limiter, _) = limiter(2, Duration::from_secs(10));
        assert!(limiter.hit(ip("2001:db8:0:1::1")).is_ok());
        assert!(limiter.hit(ip("2001:db8:0:1:ffff::2")).is_ok());
        assert!(limiter.hit(ip("2001:db8:0:1::3")).is_err());
        assert!(limiter.check(ip("2001:db8:0:1:abcd::9")).is_err());
        assert!(limiter.hit(ip("2001:db8:0:2::1")).is_ok());
        assert!(limiter.hit(ip("192.0.2.9")).is_ok());
        assert!(limiter.hit(ip("::ffff:192.0.2.9")).is_ok());
        assert!(limiter.hit(ip("192.0.2.9")).is_err());
        assert!(limiter.check(ip("::ffff:192.0.2.9")).is_err());
    }

    #[test]
    fn a_million_sprayed_addresses_stay_within_the_bound() {
        let (limiter, _) = limiter(1, Duration::from_secs(3600));
        let victim = ip("192.0.2.1");
        assert!(limiter.hit(victim).is_ok());
        let mut most = 0;
        for n in 0..1_000_000u32 {
            // A different /64 each time (the attacker's best case).
            let sprayed = IpAddr::from([0x2001, 0xdb8, (n >> 16) as u16, n as u16, 0, 0, 0, 1]);
            assert!(limiter.hit(sprayed).is_ok());
            most = most.max(limiter.tracked_keys());
        }
        assert!(most <= MAX_KEYS + 1, "{most} addresses kept");
        assert!(limiter.refused.lock().unwrap().len() <= MAX_KEYS);
    }
}
