//! Rate limits the replicas share (docs/api.md, "Limits"): writes per credential, explain and
//! preflight per customer, signatures per customer, anonymous creations per address, failed
//! secrets per lookup id. Each replica decides alone, on the request's path, from its own
//! limiter; about once a second it adds the events it let through to the store and takes in those
//! the others let through ([`Exchange`]), so that a key's allowance is one however many replicas
//! it calls, give or take the last second's events.

use crate::failures::SecretFailures;
use crate::rate_limit::RateLimiter;
use registry_domain::ports::{rate_minute, RateCount, RateEvents};
use std::collections::HashMap;
use std::fmt::Display;
use std::hash::Hash;
use std::str::FromStr;
use std::time::Duration;
use time::OffsetDateTime;
use uuid::Uuid;

/// A limit whose events the replicas share.
pub trait SharedLimit: Send + Sync {
    /// Its name among the shared counts.
    fn name(&self) -> &'static str;
    /// The events it let through since the last call, by key (less those given back).
    fn take_tally(&self) -> Vec<(String, i64)>;
    /// Counts `events` another replica let through for `key`, `ago`.
    fn absorb(&self, key: &str, events: u64, ago: Duration);
}

impl<K> SharedLimit for RateLimiter<K>
where
    K: Hash + Eq + Clone + Display + FromStr + Send + Sync,
{
    fn name(&self) -> &'static str {
        self.shared_name().unwrap_or("unshared")
    }

    fn take_tally(&self) -> Vec<(String, i64)> {
        (RateLimiter::take_tally(self).into_iter())
            .map(|(key, events)| (key.to_string(), events))
            .collect()
    }

    fn absorb(&self, key: &str, events: u64, ago: Duration) {
        // A key this replica cannot read (another version's) limits nothing here.
        if let Ok(key) = key.parse() {
            self.absorb_key(key, events, ago);
        }
    }
}

impl SharedLimit for SecretFailures {
    fn name(&self) -> &'static str {
        "secret-failures"
    }

    fn take_tally(&self) -> Vec<(String, i64)> {
        SecretFailures::take_tally(self).into_iter().collect()
    }

    fn absorb(&self, key: &str, events: u64, ago: Duration) {
        SecretFailures::absorb(self, key, events, ago);
    }
}

/// How far before the last exchange the next one reads: a count written by a replica whose
/// clock is behind, or committed after this replica's read began, is read once more rather than
/// missed (each event is taken in once: [`Exchange::absorb`] takes in what a count grew by).
const OVERLAP: time::Duration = time::Duration::seconds(5);

/// A replica's side of the exchange: who it is, and what it took in of each count of the
/// others.
#[derive(Debug)]
pub struct Exchange {
    replica: Uuid,
    /// `(limit, key, replica, minute)` → events taken in.
    seen: HashMap<(String, String, Uuid, i64), u64>,
    /// The last exchange that succeeded.
    last: Option<OffsetDateTime>,
    /// Events let through here and not added yet (an exchange failed), by limit, key and the
    /// minute they were let through in.
    unsent: HashMap<(&'static str, String, i64), u64>,
}

impl Exchange {
    /// The exchange of a replica that starts, under an id of its own.
    pub fn new() -> Self {
        Self {
            replica: Uuid::new_v4(),
            seen: HashMap::new(),
            last: None,
            unsent: HashMap::new(),
        }
    }

    /// This replica, as its counts name it.
    pub fn replica(&self) -> Uuid {
        self.replica
    }

    /// From when the exchange at `now` reads the others' counts: 5 s before the last
    /// exchange, or `window` back at the first.
    pub fn since(&self, now: OffsetDateTime, window: time::Duration) -> OffsetDateTime {
        match self.last {
            Some(last) => last - OVERLAP,
            None => now - window,
        }
    }

    /// What `limits` let through since the last exchange that succeeded, taken at `now`: the
    /// events to add, each with its minute. An event given back is taken off the newest of its
    /// key not added yet (one already added stays counted).
    pub fn to_add(&mut self, limits: &[&dyn SharedLimit], now: OffsetDateTime) -> Vec<RateEvents> {
        let minute = rate_minute(now);
        for limit in limits {
            for (key, events) in limit.take_tally() {
                match u64::try_from(events) {
                    Ok(events) => {
                        if self.unsent.len() >= crate::rate_limit::MAX_KEYS {
                            // The store away long, with that many keys: this replica's news is
                            // lost rather than its memory grown.
                            self.unsent.clear();
                        }
                        *self.unsent.entry((limit.name(), key, minute)).or_default() += events;
                    }
                    Err(_) => self.take_back(limit.name(), &key, events.unsigned_abs()),
                }
            }
        }
        (self.unsent.iter())
            .map(|((limit, key, minute), events)| RateEvents {
                limit: (*limit).to_owned(),
                key: key.clone(),
                events: *events,
                minute: *minute,
            })
            .collect()
    }

    /// Takes `events` given back off the newest events of `limit` and `key` not added yet.
    fn take_back(&mut self, limit: &'static str, key: &str, mut events: u64) {
        let mut minutes: Vec<i64> = (self.unsent.keys())
            .filter(|(l, k, _)| *l == limit && k == key)
            .map(|(.., minute)| *minute)
            .collect();
        minutes.sort_unstable_by(|a, b| b.cmp(a));
        for minute in minutes {
            let entry = (limit, key.to_owned(), minute);
            let Some(count) = self.unsent.get_mut(&entry) else {
                continue;
            };
            let taken = events.min(*count);
            *count -= taken;
            events -= taken;
            if *count == 0 {
                self.unsent.remove(&entry);
            }
            if events == 0 {
                break;
            }
        }
    }

    /// Takes in the others' `counts`, read at `now` by the exchange that added [`Self::to_add`]:
    /// what each count grew by since it was last seen, into the limit it names, as let through
    /// when the count was written.
    pub fn absorb(
        &mut self,
        counts: Vec<RateCount>,
        limits: &[&dyn SharedLimit],
        now: OffsetDateTime,
    ) {
        self.last = Some(now);
        self.unsent.clear();
        for count in counts {
            // A limit this replica does not know (another version's) limits nothing here.
            let Some(limit) = limits.iter().find(|l| l.name() == count.limit) else {
                continue;
            };
            // Let through within its minute, and no later than written (events held back
            // while the database was away keep their minute).
            let minute_end = OffsetDateTime::from_unix_timestamp_nanos(
                i128::from(count.minute.saturating_add(60_000)) * 1_000_000,
            )
            .unwrap_or(count.written_at);
            let at = count.written_at.min(minute_end);
            let ago = Duration::try_from(now - at).unwrap_or(Duration::ZERO);
            let seen = (self.seen)
                .entry((count.limit, count.key.clone(), count.replica, count.minute))
                .or_default();
            let grew = count.events.saturating_sub(*seen);
            *seen = (*seen).max(count.events);
            if grew > 0 {
                limit.absorb(&count.key, grew, ago);
            }
        }
        // Counts of minutes the reads no longer reach need no memory.
        let oldest = rate_minute(now - OVERLAP) - 60_000;
        self.seen.retain(|(.., minute), _| *minute >= oldest);
    }
}

impl Default for Exchange {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate_limit::RetryAfter;
    use registry_domain::testing::ManualTicks;
    use std::net::IpAddr;
    use std::sync::Arc;
    use time::macros::datetime;

    fn count(limit: &str, key: &str, replica: Uuid, events: u64, at: OffsetDateTime) -> RateCount {
        RateCount {
            limit: limit.into(),
            key: key.into(),
            replica,
            minute: registry_domain::ports::rate_minute(at),
            events,
            written_at: at,
        }
    }

    #[test]
    fn each_event_of_the_others_is_taken_in_once_into_the_limit_it_names() {
        let ticks = Arc::new(ManualTicks::default());
        let writes = RateLimiter::<Uuid>::per_minute(5, ticks.clone()).shared("writes");
        let anonymous = RateLimiter::<IpAddr>::per_hour(3, ticks.clone()).shared("anonymous");
        let limits: [&dyn SharedLimit; 2] = [&writes, &anonymous];
        let (account, other) = (Uuid::new_v4(), Uuid::new_v4());
        let t = datetime!(2026-12-04 10:00:10 UTC);
        let mut exchange = Exchange::new();
        assert_eq!(
            exchange.since(t, time::Duration::hours(1)),
            t - time::Duration::hours(1)
        );
        // Another replica's count of the minute grows from 2 to 4: 4 events in all.
        let account_key = account.to_string();
        exchange.absorb(vec![count("writes", &account_key, other, 2, t)], &limits, t);
        exchange.absorb(vec![count("writes", &account_key, other, 2, t)], &limits, t);
        assert_eq!(exchange.since(t, time::Duration::hours(1)), t - OVERLAP);
        exchange.absorb(vec![count("writes", &account_key, other, 4, t)], &limits, t);
        assert!(writes.hit_key(account).is_ok(), "the fifth");
        assert!(writes.hit_key(account).is_err());
        // Keys and limits are read as this replica names them; others limit nothing.
        exchange.absorb(
            vec![
                count("anonymous", "192.0.2.7", other, 3, t),
                count("anonymous", "not an address", other, 3, t),
                count("newer-limit", "x", other, 3, t),
            ],
            &limits,
            t,
        );
        assert!(anonymous.hit("192.0.2.7".parse().unwrap()).is_err());
        assert!(anonymous.hit("192.0.2.8".parse().unwrap()).is_ok());
    }

    #[test]
    fn what_was_let_through_is_added_until_an_exchange_succeeds_each_in_its_minute() {
        let ticks = Arc::new(ManualTicks::default());
        let signs = RateLimiter::<Uuid>::per_minute(100, ticks.clone()).shared("sign");
        let anonymous = RateLimiter::<IpAddr>::per_hour(10, ticks.clone()).shared("anonymous");
        let failures = SecretFailures::new(10, Duration::from_secs(60), ticks.clone());
        let limits: [&dyn SharedLimit; 3] = [&signs, &anonymous, &failures];
        let customer = Uuid::new_v4();
        let address: IpAddr = "192.0.2.1".parse().unwrap();
        let t = datetime!(2026-12-04 10:00:10 UTC);
        let minute = |at: OffsetDateTime| rate_minute(at);
        let mut exchange = Exchange::new();
        signs.hit_key(customer).unwrap();
        anonymous.hit(address).unwrap();
        failures.record("rgsa_abc");
        let sorted = |mut added: Vec<RateEvents>| {
            added.sort_by(|a, b| (&a.limit, a.minute).cmp(&(&b.limit, b.minute)));
            (added.into_iter())
                .map(|a| (a.limit, a.key, a.events, a.minute))
                .collect::<Vec<_>>()
        };
        let first = vec![
            ("anonymous".to_owned(), address.to_string(), 1, minute(t)),
            (
                "secret-failures".to_owned(),
                "rgsa_abc".to_owned(),
                1,
                minute(t),
            ),
            ("sign".to_owned(), customer.to_string(), 1, minute(t)),
        ];
        assert_eq!(sorted(exchange.to_add(&limits, t)), first);
        // That exchange failed (the database away): its events are added with the next ones,
        // in their own minute; the anonymous creation failed too and was given back.
        let later = t + time::Duration::minutes(1);
        signs.hit_key(customer).unwrap();
        anonymous.give_back(address);
        let second = vec![
            (
                "secret-failures".to_owned(),
                "rgsa_abc".to_owned(),
                1,
                minute(t),
            ),
            ("sign".to_owned(), customer.to_string(), 1, minute(t)),
            ("sign".to_owned(), customer.to_string(), 1, minute(later)),
        ];
        assert_eq!(sorted(exchange.to_add(&limits, later)), second);
        exchange.absorb(Vec::new(), &limits, later);
        assert_eq!(sorted(exchange.to_add(&limits, later)), []);
    }

    #[test]
    fn a_count_held_back_by_an_outage_is_dated_in_its_minute() {
        let ticks = Arc::new(ManualTicks::default());
        let writes = RateLimiter::<Uuid>::per_minute(10, ticks.clone()).shared("writes");
        let limits: [&dyn SharedLimit; 1] = [&writes];
        let account = Uuid::new_v4();
        let t = datetime!(2026-12-04 10:00:10 UTC);
        // Ten let through elsewhere at 10:00, written at 10:05 when the database came back:
        // they all came back by now.
        let held = RateCount {
            written_at: t + time::Duration::minutes(5),
            ..count("writes", &account.to_string(), Uuid::new_v4(), 10, t)
        };
        Exchange::new().absorb(vec![held], &limits, t + time::Duration::minutes(5));
        assert!(writes.hit_key(account).is_ok());
    }

    #[test]
    fn the_others_failed_secrets_count_within_the_minute_they_fell_in() {
        let ticks = Arc::new(ManualTicks::default());
        ticks.advance(Duration::from_secs(3600));
        let failures = SecretFailures::new(3, Duration::from_secs(60), ticks.clone());
        failures.absorb("rgsa_abc", 2, Duration::from_secs(50));
        failures.record("rgsa_abc");
        let RetryAfter(wait) = failures.check("rgsa_abc").unwrap_err();
        assert_eq!(
            wait,
            Duration::from_secs(10),
            "the two of 50 s ago leave first"
        );
        ticks.advance(Duration::from_secs(10));
        assert!(failures.check("rgsa_abc").is_ok());
        // Failures elsewhere long ago count for nothing; a flood no more than the limit.
        failures.absorb("rgsa_def", 1_000_000, Duration::from_secs(120));
        assert!(failures.check("rgsa_def").is_ok());
        failures.absorb("rgsa_def", 1_000_000, Duration::ZERO);
        assert!(failures.check("rgsa_def").is_err());
    }
}
