//! Connections: one diesel connection type for both backends, and an r2d2 pool of them.

use crate::target::Target;
use diesel::connection::{SimpleConnection, TransactionManager};
use diesel::{Connection, PgConnection, SqliteConnection};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

/// A connection to either backend. Queries written once against this type run on both; the
/// derive covers the SQL both have in common (no `ON CONFLICT`, no `RETURNING` of models).
#[derive(diesel::MultiConnection)]
pub(crate) enum Db {
    Sqlite(SqliteConnection),
    Postgres(PgConnection),
}

/// Runs `$body` with `$c` bound to the backend's own connection. diesel then prepares a
/// statement of a static type once and reuses it by its type; through `Db`'s multi-backend
/// layer it builds the statement's SQL text again at every call, which cost the statements of
/// every write a measurable share of their time (docs/benchmarks.md). For hot statements only.
macro_rules! on_backend {
    ($conn:expr, |$c:ident| $body:expr) => {
        match $conn {
            $crate::pool::Db::Sqlite($c) => $body,
            $crate::pool::Db::Postgres($c) => $body,
        }
    };
}
pub(crate) use on_backend;

/// Takes the PostgreSQL advisory lock `key` until the end of the current transaction:
/// `shared` with other shared holders, else alone. Each key is one constant, one purpose (the
/// migrations', the fetch evidence's).
pub(crate) fn advisory_xact_lock(
    conn: &mut PgConnection,
    key: i64,
    shared: bool,
) -> diesel::QueryResult<()> {
    let lock = match shared {
        true => "pg_advisory_xact_lock_shared",
        false => "pg_advisory_xact_lock",
    };
    conn.batch_execute(&format!("SELECT {lock}({key})"))
}

/// Why the pool could not open or check a connection.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    #[error(transparent)]
    Connection(#[from] diesel::ConnectionError),
    #[error(transparent)]
    Query(#[from] diesel::result::Error),
    #[error("the store is closed: the process is exiting")]
    Closed,
}

/// Whether the database answered the last connect or connection check. The manager records
/// it; the store reads it to choose how long a caller may wait for a connection.
#[derive(Debug, Default)]
pub(crate) struct Reachability {
    unreachable: AtomicBool,
}

impl Reachability {
    pub(crate) fn is_reachable(&self) -> bool {
        !self.unreachable.load(Ordering::Relaxed)
    }

    fn record<T, E>(&self, outcome: &Result<T, E>) {
        self.unreachable.store(outcome.is_err(), Ordering::Relaxed);
    }
}

/// The connects under way, and whether more may start. libpq links the Kerberos library, whose
/// exit handlers destroy mutexes that a connect in progress uses: a process that exits while
/// r2d2's worker thread is inside a connect aborts in `k5_mutex_lock` (CI saw it, about one
/// command in fifty). [`ConnectGate::close`], before the process exits, lets no connect start
/// and waits for those under way.
#[derive(Debug, Default)]
pub(crate) struct ConnectGate {
    state: Mutex<GateState>,
    settled: Condvar,
}

#[derive(Debug, Default)]
struct GateState {
    closed: bool,
    running: usize,
}

impl ConnectGate {
    fn state(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a connect may start; it then counts until [`ConnectGate::leave`].
    fn enter(&self) -> bool {
        let mut state = self.state();
        if state.closed {
            return false;
        }
        state.running += 1;
        true
    }

    fn leave(&self) {
        let mut state = self.state();
        state.running -= 1;
        if state.running == 0 {
            self.settled.notify_all();
        }
    }

    /// Lets no connect start from now on and waits, at most `wait`, for those under way.
    pub(crate) fn close(&self, wait: Duration) {
        let mut state = self.state();
        state.closed = true;
        let _ = self
            .settled
            .wait_timeout_while(state, wait, |state| state.running > 0);
    }
}

/// Opens connections to one [`Target`], never guessing the backend.
#[derive(Debug, Clone)]
pub(crate) struct Manager {
    target: Target,
    reachability: Arc<Reachability>,
    gate: Arc<ConnectGate>,
}

impl Manager {
    pub(crate) fn new(
        target: Target,
        reachability: Arc<Reachability>,
        gate: Arc<ConnectGate>,
    ) -> Self {
        Manager {
            target,
            reachability,
            gate,
        }
    }

    /// A connection outside any pool, with the session settings a pooled one gets.
    pub(crate) fn open(&self) -> Result<Db, ConnectError> {
        let mut conn = r2d2::ManageConnection::connect(self)?;
        r2d2::CustomizeConnection::on_acquire(&SqlitePragmas, &mut conn)?;
        Ok(conn)
    }

    /// Whether connections open a SQLite file (not `:memory:`, where each is a database of its
    /// own).
    pub(crate) fn opens_sqlite_file(&self) -> bool {
        matches!(&self.target, Target::Sqlite(path) if path != ":memory:")
    }

    /// The SQLite file whose WAL index tells its version (`wal_index`): one named by a plain
    /// path. A `file:` URI may choose a VFS that keeps the index in memory, and a stale `-shm`
    /// file beside it would then seem never to change.
    pub(crate) fn versioned_file(&self) -> Option<std::path::PathBuf> {
        match &self.target {
            Target::Sqlite(name) if !name.starts_with("file:") => self.target.sqlite_file(),
            _ => None,
        }
    }
}

impl r2d2::ManageConnection for Manager {
    type Connection = Db;
    type Error = ConnectError;

    fn connect(&self) -> Result<Db, ConnectError> {
        if !self.gate.enter() {
            return Err(ConnectError::Closed);
        }
        let connected = match &self.target {
            Target::Sqlite(path) => SqliteConnection::establish(path).map(Db::Sqlite),
            Target::Postgres(url) => PgConnection::establish(url).map(Db::Postgres),
        };
        self.gate.leave();
        self.reachability.record(&connected);
        Ok(connected?)
    }

    fn is_valid(&self, conn: &mut Db) -> Result<(), ConnectError> {
        let checked = conn.batch_execute("SELECT 1");
        self.reachability.record(&checked);
        Ok(checked?)
    }

    fn has_broken(&self, conn: &mut Db) -> bool {
        <Db as Connection>::TransactionManager::is_broken_transaction_manager(conn)
    }
}

/// Opens one connection outside any pool, so that a wrong URL fails at once with the driver's
/// own error (a pool would retry until its checkout timeout and report only that). A SQLite file
/// is switched to WAL here: the mode is kept in the file, and switching needs the file to
/// itself, which the pool's first connection, opened in the background while the migrations
/// write, did not always get ("database is locked" in the log at start-up).
pub(crate) fn probe(manager: &Manager) -> Result<(), ConnectError> {
    manager.open().map(drop)
}

/// How much of a SQLite file each connection reads through a memory map. The kernel's page cache
/// holds the pages, but each connection maps the file on its own, and a page read through a
/// map counts in the process's resident memory once per map: eight connections of 1 GiB took a
/// replica of a million services past 1 GiB resident (docs/api.md's bound) after 38,000
/// distinct GETs. 32 MiB a connection keeps the maps within 256 MiB; a small database is read
/// through the map whole, a large one past its first 32 MiB with `pread`.
const SQLITE_MMAP_BYTES: u64 = 32 << 20;

/// How long a SQLite writer waits for another one before giving up with "database is locked".
pub(crate) const SQLITE_BUSY_TIMEOUT_MS: u32 = 5_000;

/// Session settings every SQLite connection needs: foreign keys (for the cascades) are off by
/// default, and WAL lets readers run beside the single writer. Reads go through a map of the
/// file ([`SQLITE_MMAP_BYTES`]) rather than a `pread` and a copy per page: the first fetch of
/// each of a million issuers reads pages no connection's page cache holds.
#[derive(Debug)]
struct SqlitePragmas;

impl r2d2::CustomizeConnection<Db, ConnectError> for SqlitePragmas {
    fn on_acquire(&self, conn: &mut Db) -> Result<(), ConnectError> {
        if let Db::Sqlite(conn) = conn {
            conn.batch_execute(&format!(
                "PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS};
                 PRAGMA journal_mode = WAL;
                 PRAGMA synchronous = NORMAL;
                 PRAGMA foreign_keys = ON;
                 PRAGMA mmap_size = {SQLITE_MMAP_BYTES};"
            ))?;
        }
        Ok(())
    }
}

pub(crate) type Pool = r2d2::Pool<Manager>;
pub(crate) type Pooled = r2d2::PooledConnection<Manager>;

/// Rows a statement writes or keys it reads, at most: at six columns a row, well under the
/// parameters SQLite and PostgreSQL accept in one statement (32,766 and 65,535).
pub(crate) const ROWS_A_STATEMENT: usize = 1_000;

/// How long a caller waits for a pooled connection before the store reports `Unavailable`.
pub(crate) const CHECKOUT_TIMEOUT: Duration = Duration::from_secs(5);

/// The same while the last connect or check failed: during an outage each request gets its
/// 503 at once instead of after 5 s, while the pool keeps trying in the background (every
/// 2.5 s at most) and the first connect that works ends the outage.
pub(crate) const OUTAGE_CHECKOUT_TIMEOUT: Duration = Duration::from_millis(500);

/// How a pool keeps its connections, after what its process does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pooling {
    /// A process that serves for a long time: a few connections are kept open, and replaced in
    /// the background as they are checked out, so that requests rarely wait for a connect.
    Serving,
    /// A command that runs a few statements and exits: one connection, opened when a caller
    /// asks for it (on r2d2's worker, while the caller waits), never ahead of time.
    Command,
}

/// A pool for `target`; nothing is opened yet.
pub(crate) fn build(manager: Manager, pooling: Pooling) -> Pool {
    let target = &manager.target;
    let builder = r2d2::Pool::builder().connection_timeout(CHECKOUT_TIMEOUT);
    let builder = match target {
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
    builder
        .error_handler(Box::new(ConnectFailures::default()))
        .build_unchecked(manager)
}

/// How often a pool logs its failures to connect, at most.
const FAILURES_LOGGED_EVERY: Duration = Duration::from_secs(10);

/// Logs a pool's failures to connect (or to check a connection) as warnings, one per
/// [`FAILURES_LOGGED_EVERY`] with the count of those left out since: during an outage the pool
/// retries in the background many times a second, and r2d2's own handler logs every failure as
/// an error line.
#[derive(Debug, Default)]
struct ConnectFailures {
    /// When the last line was logged, and the failures left out since.
    logged: Mutex<(Option<std::time::Instant>, u64)>,
}

impl ConnectFailures {
    /// Whether a failure at `now` is logged, with how many were left out before it.
    fn log_at(&self, now: std::time::Instant) -> Option<u64> {
        let mut logged = self.logged.lock().unwrap_or_else(PoisonError::into_inner);
        match logged.0 {
            Some(at) if now.duration_since(at) < FAILURES_LOGGED_EVERY => {
                logged.1 += 1;
                None
            }
            _ => {
                let left_out = std::mem::take(&mut logged.1);
                logged.0 = Some(now);
                Some(left_out)
            }
        }
    }
}

impl r2d2::HandleError<ConnectError> for ConnectFailures {
    fn handle_error(&self, error: ConnectError) {
        if let Some(left_out) = self.log_at(std::time::Instant::now()) {
            tracing::warn!(%error, failures_not_logged = left_out, "a database connection failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_failures_are_logged_once_per_ten_seconds_with_the_count_left_out() {
        let failures = ConnectFailures::default();
        let start = std::time::Instant::now();
        assert_eq!(failures.log_at(start), Some(0));
        for ms in [100, 2_000, 9_000] {
            assert_eq!(failures.log_at(start + Duration::from_millis(ms)), None);
        }
        assert_eq!(failures.log_at(start + Duration::from_secs(10)), Some(3));
        assert_eq!(failures.log_at(start + Duration::from_secs(11)), None);
    }
}
