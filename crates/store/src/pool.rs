//! Connections: one diesel connection type for both backends, and an r2d2 pool of them.

use crate::target::Target;
use diesel::connection::{SimpleConnection, TransactionManager};
use diesel::{Connection, PgConnection, SqliteConnection};
use std::time::Duration;

/// A connection to either backend. Queries written once against this type run on both; the
/// derive covers the SQL both have in common (no `ON CONFLICT`, no `RETURNING` of models).
#[derive(diesel::MultiConnection)]
pub(crate) enum Db {
    Sqlite(SqliteConnection),
    Postgres(PgConnection),
}

/// Why the pool could not open or check a connection.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    #[error(transparent)]
    Connection(#[from] diesel::ConnectionError),
    #[error(transparent)]
    Query(#[from] diesel::result::Error),
}

/// Opens connections to one [`Target`], never guessing the backend.
#[derive(Debug)]
pub(crate) struct Manager {
    target: Target,
}

impl Manager {
    pub(crate) fn new(target: Target) -> Self {
        Manager { target }
    }
}

impl r2d2::ManageConnection for Manager {
    type Connection = Db;
    type Error = ConnectError;

    fn connect(&self) -> Result<Db, ConnectError> {
        Ok(match &self.target {
            Target::Sqlite(path) => Db::Sqlite(SqliteConnection::establish(path)?),
            Target::Postgres(url) => Db::Postgres(PgConnection::establish(url)?),
        })
    }

    fn is_valid(&self, conn: &mut Db) -> Result<(), ConnectError> {
        Ok(conn.batch_execute("SELECT 1")?)
    }

    fn has_broken(&self, conn: &mut Db) -> bool {
        <Db as Connection>::TransactionManager::is_broken_transaction_manager(conn)
    }
}

/// How long a SQLite writer waits for another one before giving up with "database is locked".
const SQLITE_BUSY_TIMEOUT_MS: u32 = 5_000;

/// Session settings every SQLite connection needs: foreign keys (for the cascades) are off by
/// default, and WAL lets readers run beside the single writer.
#[derive(Debug)]
struct SqlitePragmas;

impl r2d2::CustomizeConnection<Db, ConnectError> for SqlitePragmas {
    fn on_acquire(&self, conn: &mut Db) -> Result<(), ConnectError> {
        if let Db::Sqlite(conn) = conn {
            conn.batch_execute(&format!(
                "PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS};
                 PRAGMA journal_mode = WAL;
                 PRAGMA synchronous = NORMAL;
                 PRAGMA foreign_keys = ON;"
            ))?;
        }
        Ok(())
    }
}

pub(crate) type Pool = r2d2::Pool<Manager>;
pub(crate) type Pooled = r2d2::PooledConnection<Manager>;

/// How long a caller waits for a pooled connection before the store reports `Unavailable`.
const CHECKOUT_TIMEOUT: Duration = Duration::from_secs(5);

/// How a pool keeps its connections, after what its process does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pooling {
    /// A process that serves for a long time: a few connections are kept open, and replaced in
    /// the background as they are checked out, so that requests rarely wait for a connect.
    Serving,
    /// A command that runs a few statements and exits: one connection, opened only while a
    /// caller waits for it and never in the background. A PostgreSQL connect still running on
    /// r2d2's worker thread when the process exits races libpq's Kerberos library, whose exit
    /// handlers destroy the mutexes it is using: the process then aborts in `k5_mutex_lock`.
    Command,
}

/// A pool for `target`; nothing is opened yet.
pub(crate) fn build(target: Target, pooling: Pooling) -> Pool {
    let builder = r2d2::Pool::builder().connection_timeout(CHECKOUT_TIMEOUT);
    let builder = match &target {
        // Every connection to `:memory:` is a database of its own: keep exactly one, forever.
        Target::Sqlite(path) if path == ":memory:" => builder
            .max_size(1)
            .min_idle(Some(1))
            .idle_timeout(None)
            .max_lifetime(None)
            .connection_customizer(Box::new(SqlitePragmas)),
        _ if pooling == Pooling::Command => builder
            .max_size(1)
            .min_idle(Some(0))
            .connection_customizer(Box::new(SqlitePragmas)),
        // SQLite has one writer at a time anyway; a few connections serve the readers. A file
        // connection cannot go stale the way a network one can, so checkouts skip the
        // `SELECT 1` that would double the cost of the per-request credential read.
        Target::Sqlite(_) => builder
            .max_size(8)
            .test_on_check_out(false)
            .min_idle(Some(1))
            .connection_customizer(Box::new(SqlitePragmas)),
        Target::Postgres(_) => builder.max_size(16).min_idle(Some(2)),
    };
    builder.build_unchecked(Manager { target })
}
