//! How far the hot standby is behind the primary, measured in the background, and the ceiling
//! past which reads leave it (`REGISTRY_READ_REPLICA_MAX_LAG_SECONDS`, docs/api.md).
//!
//! The lag is measured on the primary's clock, by write-ahead log position: every tick the
//! watch notes when the primary's WAL first reached each position, and asks the standby how far
//! it has replayed. The standby's lag is the age of the oldest position the primary had written
//! that the standby has not replayed yet. That holds whatever the standby does: replay paused,
//! the stream stalled, or both (a standby's own view, `pg_last_xact_replay_timestamp`, sees
//! nothing wrong while it receives nothing). An idle primary writes nothing, so a standby that
//! caught up has no lag, however old its last replayed transaction.

use crate::pool::{Db, Pool, CHECKOUT_TIMEOUT};
use diesel::prelude::*;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// How often the lag is measured: a deleted credential is refused within the ceiling plus this.
const TICK: Duration = Duration::from_millis(250);

/// Positions noted, at most: one per tick for ten minutes; a standby further behind is lagging
/// anyway, and its lag is then counted from the oldest position kept.
const MAX_SAMPLES: usize = 2_400;

/// The shared state of one standby's lag: written by its watch thread, read by every read.
#[derive(Debug)]
pub(crate) struct Lag {
    ceiling: Duration,
    /// The last lag measured, in milliseconds; `u64::MAX` while the standby did not answer.
    millis: AtomicU64,
    lagging: AtomicBool,
}

impl Lag {
    /// Whether reads should leave the standby: its lag reached the ceiling less the time a
    /// change takes to be noticed (one tick of this watch, and one poll of the replica's change
    /// feed), so that what it has not replayed is read from the primary within the ceiling.
    pub(crate) fn is_lagging(&self) -> bool {
        self.lagging.load(Ordering::Relaxed)
    }

    /// The last lag measured; `None` while the standby does not answer.
    pub(crate) fn seconds(&self) -> Option<f64> {
        match self.millis.load(Ordering::Relaxed) {
            u64::MAX => None,
            millis => Some(millis as f64 / 1000.0),
        }
    }

    fn record(&self, lag: Option<Duration>) {
        let millis = lag.map_or(u64::MAX, |lag| {
            u64::try_from(lag.as_millis()).unwrap_or(u64::MAX - 1)
        });
        self.millis.store(millis, Ordering::Relaxed);
        let margin = TICK + Duration::from_secs(1);
        let lagging = lag.is_some_and(|lag| lag + margin > self.ceiling);
        if lagging != self.lagging.swap(lagging, Ordering::Relaxed) {
            if lagging {
                tracing::warn!(
                    lag_seconds = self.seconds(),
                    ceiling_seconds = self.ceiling.as_secs_f64(),
                    "the read replica lags: reading from the primary until it catches up"
                );
            } else {
                tracing::info!("the read replica caught up: reading from it again");
            }
        }
    }
}

/// Starts measuring the lag of the standby `standby` behind `primary`, on a thread of its own
/// that ends once the returned [`Lag`] is dropped (with the last clone of the store).
pub(crate) fn watch(primary: Pool, standby: Pool, ceiling: Duration) -> Arc<Lag> {
    let lag = Arc::new(Lag {
        ceiling,
        millis: AtomicU64::new(u64::MAX),
        lagging: AtomicBool::new(false),
    });
    let weak = Arc::downgrade(&lag);
    let spawned = std::thread::Builder::new()
        .name("registry-standby-lag".into())
        .spawn(move || run(&weak, &primary, &standby));
    if let Err(error) = spawned {
        tracing::error!(%error, "cannot watch the read replica's lag");
    }
    lag
}

fn run(lag: &Weak<Lag>, primary: &Pool, standby: &Pool) {
    let mut written: VecDeque<(Instant, f64)> = VecDeque::new();
    loop {
        let Some(lag) = lag.upgrade() else { return };
        let now = Instant::now();
        // The primary first: a position it wrote before the standby is asked counts.
        if let Some(position) = position(primary, CURRENT) {
            if written.back().is_none_or(|(_, last)| position > *last) {
                if written.len() == MAX_SAMPLES {
                    written.pop_front();
                }
                written.push_back((now, position));
            }
        }
        let behind = position(standby, REPLAYED).map(|replayed| {
            while written.front().is_some_and(|(_, p)| *p <= replayed) {
                written.pop_front();
            }
            written
                .front()
                .map_or(Duration::ZERO, |(since, _)| now.duration_since(*since))
        });
        lag.record(behind);
        drop(lag);
        std::thread::sleep(TICK);
    }
}

/// The primary's current WAL position, in bytes.
const CURRENT: &str =
    "SELECT CAST(pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0') AS DOUBLE PRECISION) AS bytes";

/// How far a standby has replayed, in bytes; a primary (a standby promoted by a fail-over, the
/// read URL still naming it) has all it wrote: its current position.
const REPLAYED: &str = "SELECT CAST(pg_wal_lsn_diff(CASE WHEN pg_is_in_recovery() \
     THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END, '0/0') \
     AS DOUBLE PRECISION) AS bytes";

#[derive(diesel::QueryableByName)]
struct Position {
    #[diesel(sql_type = diesel::sql_types::Double)]
    bytes: f64,
}

fn position(pool: &Pool, query: &str) -> Option<f64> {
    let mut conn = pool.get_timeout(CHECKOUT_TIMEOUT.min(TICK * 4)).ok()?;
    match &mut *conn {
        Db::Postgres(c) => diesel::sql_query(query)
            .get_result::<Position>(c)
            .ok()
            .map(|p| p.bytes),
        Db::Sqlite(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lag(ceiling: u64) -> Lag {
        Lag {
            ceiling: Duration::from_secs(ceiling),
            millis: AtomicU64::new(u64::MAX),
            lagging: AtomicBool::new(false),
        }
    }

    #[test]
    fn lagging_starts_before_the_ceiling_by_the_time_a_change_takes_to_be_seen() {
        let lag = lag(5);
        assert_eq!(lag.seconds(), None);
        lag.record(Some(Duration::from_millis(3_500)));
        assert!(!lag.is_lagging());
        assert_eq!(lag.seconds(), Some(3.5));
        lag.record(Some(Duration::from_millis(3_800)));
        assert!(lag.is_lagging());
        lag.record(Some(Duration::ZERO));
        assert!(!lag.is_lagging());
        // A standby that does not answer is not read anyway (its pool says so).
        lag.record(None);
        assert!(!lag.is_lagging());
        assert_eq!(lag.seconds(), None);
    }
}
