//! Rate limits on `governor` (GCRA): per client address, keyed as docs/api.md says
//! ("Limits"; [`rate_limit_key`]: an IPv4 address alone, IPv4-mapped as IPv4, IPv6 by its /64), and
//! per credential, lookup id or customer (docs/api.md, "Authentication" and "Errors").
//!
//! Memory is bounded under spraying: the keyed state holds at most [`MAX_KEYS`] keys (about
//! 64 bytes each for an address: a 16-byte key, 8 bytes of GCRA state, the map's overhead).
//! Past it, the keys whose limit has fully recovered are dropped, and if that is not enough,
//! every key starts again from a full allowance. Spraying can then reset limits, but never grow
//! memory; an attacker with that many addresses had as many allowances anyway.

use governor::state::keyed::DashMapStateStore;
use governor::Quota;
use registry_domain::limits::rate_limit_key;
use registry_domain::ports::Ticks;
use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

/// The injected monotonic time, as governor's clock: the limits and their refusals count in one
/// time, which tests move.
#[derive(Debug, Clone)]
struct TicksClock(Arc<dyn Ticks>);

impl governor::clock::Clock for TicksClock {
    type Instant = Instant;

    fn now(&self) -> Instant {
        self.0.now()
    }
}

/// The keyed GCRA state, on the injected time.
type Keyed<K> = governor::RateLimiter<
    K,
    DashMapStateStore<K>,
    TicksClock,
    governor::middleware::StateInformationMiddleware,
>;

/// The keyed state of `quota`, on `clock`, each event's outcome with the state it left.
fn keyed<K: Hash + Eq + Clone>(quota: Quota, clock: &TicksClock) -> Keyed<K> {
    governor::RateLimiter::dashmap_with_clock(quota, clock.clone())
        .with_middleware::<governor::middleware::StateInformationMiddleware>()
}

/// Most keys whose state a limiter keeps (about 6.4 MB of addresses).
pub const MAX_KEYS: usize = 100_000;

/// At most `limit` events per `window` for each key (a client address unless said otherwise),
/// refilled continuously.
#[derive(Debug)]
pub struct RateLimiter<K: Hash + Eq + Clone = IpAddr> {
    quota: Quota,
    clock: TicksClock,
    limiter: RwLock<Keyed<K>>,
    /// Keys refused by [`RateLimiter::hit_key`], and until when: what
    /// [`RateLimiter::check_key`] reads (governor has no look without counting). Only keys over
    /// their limit are here, at most [`MAX_KEYS`].
    refused: Mutex<HashMap<K, Instant>>,
    /// When the last refusal ends, in nanoseconds after `created`: until then some key may be
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
    tally: Option<(&'static str, Mutex<HashMap<K, u64>>)>,
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
        let burst = NonZeroU32::new(limit.max(1)).unwrap_or(NonZeroU32::MIN);
        let quota = Quota::with_period(window / burst.get())
            .unwrap_or_else(|| Quota::per_second(burst))
            .allow_burst(burst);
        let clock = TicksClock(ticks);
        Self {
            quota,
            limiter: RwLock::new(keyed(quota, &clock)),
            refused: Mutex::default(),
            refusals_end: AtomicU64::new(0),
            created: clock.0.now(),
            clock,
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
            tally: Some((name, Mutex::default())),
            ..self
        }
    }

    /// Counts `n` events of `key` for the other replicas (`n` may be negative: an event given
    /// back, as long as it was not told yet).
    fn tell(&self, key: &K, n: i8) {
        let Some((_, tally)) = &self.tally else {
            return;
        };
        let mut tally = tally.lock().unwrap_or_else(PoisonError::into_inner);
        if n > 0 {
            if tally.len() >= MAX_KEYS && !tally.contains_key(key) {
                // An exchange that keeps failing: the oldest news is no worse to lose.
                tally.clear();
            }
            *tally.entry(key.clone()).or_default() += n.unsigned_abs() as u64;
        } else if let Some(count) = tally.get_mut(key) {
            *count = count.saturating_sub(n.unsigned_abs() as u64);
            if *count == 0 {
                tally.remove(key);
            }
        }
    }

    /// Its name among the shared limits, if the replicas share it.
    pub(crate) fn shared_name(&self) -> Option<&'static str> {
        self.tally.as_ref().map(|(name, _)| *name)
    }

    /// The events let through since the last call, by key, for the other replicas.
    pub(crate) fn take_tally(&self) -> HashMap<K, u64> {
        match &self.tally {
            Some((_, tally)) => {
                std::mem::take(&mut *tally.lock().unwrap_or_else(PoisonError::into_inner))
            }
            None => HashMap::new(),
        }
    }

    /// Counts `events` of another replica for `key`, which it let through `ago`: those its
    /// allowance has not had back since are spent here (at most all of it).
    pub fn absorb_key(&self, key: K, events: u64, ago: Duration) {
        let interval = self.quota.replenish_interval().as_nanos().max(1);
        let back = u64::try_from(ago.as_nanos() / interval).unwrap_or(u64::MAX);
        let burst = self.quota.burst_size().get();
        let mut left = u32::try_from(events.saturating_sub(back))
            .unwrap_or(u32::MAX)
            .min(burst);
        let mut n = left;
        let mut used_up = None;
        {
            let limiter = self.limiter.read().unwrap_or_else(PoisonError::into_inner);
            // As many as the allowance holds now: all of them, or halves until one does not
            // fit either.
            while let Some(take) = NonZeroU32::new(n.min(left)) {
                match limiter.check_key_n(&key, take) {
                    Ok(Ok(state)) => {
                        left -= take.get();
                        if state.remaining_burst_capacity() == 0 {
                            used_up = Some(self.quota.replenish_interval());
                            break;
                        }
                    }
                    Ok(Err(not_until)) if take.get() == 1 => {
                        used_up = Some(not_until.wait_time_from(self.clock.0.now()));
                        break;
                    }
                    Ok(Err(_)) | Err(_) => n = take.get() / 2,
                }
            }
        }
        // Used up: [`RateLimiter::check_key`] refuses the key too, as after a hit.
        if let Some(wait) = used_up {
            self.refuse(key, self.clock.0.now(), wait);
        }
    }

    /// Gives back an event of `key` that [`RateLimiter::hit_key`] counted but that turned out
    /// not to count (a creation refused because the registry is full): the key's next event
    /// within the time one event takes to come back spends it instead of its allowance, and a
    /// refusal it caused is lifted.
    pub fn give_back_key(&self, key: K) {
        self.tell(&key, -1);
        let now = self.clock.0.now();
        (self.refused.lock().unwrap_or_else(PoisonError::into_inner)).remove(&key);
        let mut back = (self.given_back.lock()).unwrap_or_else(PoisonError::into_inner);
        if back.len() >= MAX_KEYS {
            // Credits last one emission interval: those of addresses that never came back go
            // first, and all of them only if every one still lasts.
            let lasts = self.quota.replenish_interval();
            back.retain(|_, credits| {
                (credits.back()).is_some_and(|at| now.saturating_duration_since(*at) < lasts)
            });
            if back.len() >= MAX_KEYS {
                back.clear();
            }
        }
        let credits = back.entry(key).or_default();
        if credits.len() >= self.quota.burst_size().get() as usize {
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
        let now = self.clock.0.now();
        let lasts = self.quota.replenish_interval();
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
        let (outcome, over_bound) = {
            let limiter = self.limiter.read().unwrap_or_else(PoisonError::into_inner);
            (limiter.check_key(&key), limiter.len() > MAX_KEYS)
        };
        if over_bound {
            self.bound();
        }
        let now = self.clock.0.now();
        match outcome {
            // The event that used the last of the allowance: the key is over its limit until
            // one comes back, so that [`RateLimiter::check_key`] refuses the next event (a
            // limit of N lets N through, not N + 1).
            Ok(state) => {
                self.tell(&key, 1);
                if state.remaining_burst_capacity() == 0 {
                    self.refuse(key, now, self.quota.replenish_interval());
                }
                Ok(())
            }
            Err(not_until) => {
                let wait = not_until.wait_time_from(now);
                self.refuse(key, now, wait);
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
        let now = self.clock.0.now();
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

    fn nanos_at(&self, at: Instant) -> u64 {
        let nanos = at.saturating_duration_since(self.created).as_nanos();
        u64::try_from(nanos).unwrap_or(u64::MAX)
    }

    /// Keys whose state is kept now.
    pub fn tracked_keys(&self) -> usize {
        self.limiter
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Keeps the state within [`MAX_KEYS`] keys.
    fn bound(&self) {
        let mut limiter = self.limiter.write().unwrap_or_else(PoisonError::into_inner);
        if limiter.len() <= MAX_KEYS {
            return;
        }
        limiter.retain_recent();
        if limiter.len() > MAX_KEYS / 2 {
            *limiter = keyed(self.quota, &self.clock);
        }
        limiter.shrink_to_fit();
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
        // More than the allowance spends it all, no more.
        let b = ip("192.0.2.2");
        limiter.absorb_key(b, 1_000, Duration::ZERO);
        assert!(limiter.hit(b).is_err());
        ticks.advance(Duration::from_secs(6));
        assert!(limiter.hit(b).is_ok());
        // Seven let through 30 s ago: five of them have come back since.
        let c = ip("192.0.2.3");
        limiter.absorb_key(c, 7, Duration::from_secs(30));
        for n in 0..8 {
            assert!(limiter.hit(c).is_ok(), "event {n}");
        }
        assert!(limiter.hit(c).is_err());
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
