//! The rate limits' counts shared by the replicas (docs/api.md, "Limits"): about once a second
//! each replica adds the events its limits let through and learns those of the others
//! ([`exchange`]), so that a credential or a customer has one allowance however many replicas
//! it calls.

use crate::app::{AppError, Registry};
use crate::ports::{RateCount, RateEvents};
use time::{Duration, OffsetDateTime};
use uuid::Uuid;

/// The longest window of a shared limit (anonymous creation, per hour): how far back a replica
/// that starts reads the others' counts.
pub const LONGEST_WINDOW: Duration = Duration::hours(1);

/// How long the store keeps counts: the longest window, and as much again.
pub const KEPT_FOR: Duration = Duration::hours(2);

/// Adds `added`, this replica's events since its last exchange, to its counts of the minutes
/// they were let through in (written at `now`), and reads the other replicas' counts last
/// written at `since` or later.
pub fn exchange(
    registry: &Registry,
    replica: Uuid,
    added: &[RateEvents],
    now: OffsetDateTime,
    since: OffsetDateTime,
) -> Result<Vec<RateCount>, AppError> {
    Ok((registry.store).exchange_rate_counts(replica, added, now, since)?)
}
