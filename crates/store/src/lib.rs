//! # registry-store
//!
//! The storage adapter of the registry: one [`Store`] that implements every storage port of
//! [`registry_domain::ports`] (`CustomerStore`, `ServiceStore`, `AccountStore`,
//! `CredentialStore`, `ChangeFeed`, `AuditLog`, `RefusalLog`, `ActivityLog`, `FetchLog`,
//! `ReadinessLog`, `PurgeLog`, `DomainStore`, `SigningStore`, and `Database`) on SQLite or PostgreSQL, chosen by the
//! database URL.
//!
//! * One schema for both backends (`migrations/{sqlite,postgres}`, same folder names),
//!   embedded in the binary and applied by [`Store::migrate`]. Ids and JSON are text, times
//!   are unix milliseconds: what is read back is what was written, truncated to the
//!   millisecond.
//! * Every multi-row change runs in one transaction, and every change to a service (its
//!   configuration, its secret) or to an account (its policy, its token) appends to the
//!   change log in that same transaction, so replicas can refresh their caches; the change's
//!   audit event goes in that transaction too, when (and only when) the change was made.
//! * Writers are serialized (SQLite has one writer anyway; on PostgreSQL the change log is
//!   locked first), so the log's sequence numbers become visible in order.
//! * Unique violations become `StoreError::Conflict` naming what is taken ("subdomain
//!   taken", "tenant suffix taken"), a missing parent row `NotFound`, anything else
//!   (including an unreachable database or an exhausted pool) `Unavailable`.
//!
//! * Single-row reads use `get_result` on a unique key, never `first`: `first` adds a bound
//!   `LIMIT ?`, and SQLite re-prepares a statement whose `LIMIT` parameter is bound
//!   again, so diesel's prepared-statement cache would never be used for them.
//!
//! No diesel type appears in the public API.
//!
//! ```
//! use registry_domain::ports::ChangeFeed;
//! use registry_store::{Backend, Store};
//!
//! let store = Store::connect("sqlite::memory:").unwrap();
//! assert_eq!(store.backend(), Backend::Sqlite);
//! store.migrate().unwrap();
//! assert_eq!(store.latest_change().unwrap(), 0);
//! ```

/// Whether the customer of a row (`$customer_id`, its `customer_id` column) is not disabled, or
/// the row has none (an anonymous service): the reads that serve requests leave out what
/// disabled customers hold (docs/api.md, "Customers"). A correlated `NOT EXISTS`, one lookup of
/// the customer's primary key per row: `customer_id NOT IN (SELECT id FROM customers WHERE …)`,
/// the form it replaced, made SQLite read every customer at each execution, so that a cold
/// issuer's first fetch read all of them (`services::tests` checks the plan).
macro_rules! enabled {
    ($customer_id:expr) => {
        diesel::dsl::not(diesel::dsl::exists(
            customers::table
                .select(customers::id)
                .filter(customers::id.nullable().eq($customer_id.nullable()))
                .filter(customers::disabled_at.is_not_null()),
        ))
    };
}

mod accounts;
mod audit;
mod customers;
mod domains;
mod error;
mod feed;
mod fetches;
mod in_place;
mod migrate;
mod pool;
mod rate_counts;
mod readiness;
mod rows;
mod schema;
mod services;
mod signing;
mod standby;
mod store;
mod target;
mod wal_index;

pub use error::SetupError;
pub use store::{Backend, Store};
