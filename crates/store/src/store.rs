//! The [`Store`] handle: a connection pool plus the transaction discipline every write follows.

use crate::error::{map_diesel, Failure, Res, SetupError};
use crate::in_place::InPlace;
use crate::pool::{
    self, on_backend, ConnectGate, Db, Manager, Pool, Pooled, Pooling, Reachability,
};
use crate::rows::{id_text, millis};
use crate::schema::changes;
use crate::standby;
use crate::target::{self, Target};
use diesel::connection::{AnsiTransactionManager, SimpleConnection, TransactionManager};
use diesel::prelude::*;
use registry_domain::audit::AuditEvent;
use registry_domain::ports::{Change, StoreResult};
use registry_domain::StoreError;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use time::OffsetDateTime;

/// Which database engine a [`Store`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// A SQLite file (one writer at a time, WAL).
    Sqlite,
    /// A PostgreSQL database, possibly shared by several replicas.
    Postgres,
}

impl Backend {
    /// `"sqlite"` or `"postgres"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The registry's storage: implements every storage port of `registry_domain::ports` on SQLite
/// or PostgreSQL. Cloning is cheap (the clones share one connection pool).
///
/// Every call blocks the calling thread; async callers run it on a blocking pool.
#[derive(Clone)]
pub struct Store {
    pool: Pool,
    /// The hot standby that reads go to, when there is one (docs/api.md, "Read replicas and the
    /// primary down").
    replica: Option<ReadSide>,
    backend: Backend,
    reachability: Arc<Reachability>,
    gate: Arc<ConnectGate>,
    /// SQLite writers of this process, one at a time (see [`Store::write`]).
    writers: Arc<Mutex<()>>,
    /// A serving process's SQLite reads taken in place, on each thread's own connection.
    in_place: Option<Arc<InPlace>>,
}

/// A hot standby of the primary, read from: its pool, whether it answered last, and how far
/// it is behind.
#[derive(Clone)]
struct ReadSide {
    pool: Pool,
    reachability: Arc<Reachability>,
    lag: Arc<standby::Lag>,
}

impl ReadSide {
    /// A connection to the standby; none at once while its last connect or check failed, so
    /// that reads go to the primary without waiting, and none while it lags past the ceiling.
    /// The pool keeps reconnecting in the background (every 2.5 s at most) after a failed
    /// checkout, and its first success makes the standby reachable again.
    fn conn(&self) -> Option<Pooled> {
        if !self.reachability.is_reachable() || self.lag.is_lagging() {
            return None;
        }
        self.pool.get_timeout(pool::CHECKOUT_TIMEOUT).ok()
    }
}

/// How long [`Store::close`] waits for connects under way: longer than one connect may take
/// (`connect_timeout`, 5 s).
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

impl fmt::Debug for Store {
    // The URL may carry a password: never print it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.pool.state();
        f.debug_struct("Store")
            .field("backend", &self.backend)
            .field("connections", &state.connections)
            .field("idle", &state.idle_connections)
            .finish()
    }
}

impl Store {
    /// Opens a pool on `url`: `sqlite://PATH`, `sqlite:PATH` or a bare path for SQLite (the
    /// file is created when missing), `postgres://…` or `postgresql://…` for PostgreSQL. Any
    /// other scheme is refused. One connection is opened at once, so a wrong URL fails here.
    /// The schema is not touched: call [`Store::migrate`]. For a server; a command that runs
    /// and exits uses [`Store::connect_for_command`].
    pub fn connect(url: &str) -> Result<Store, SetupError> {
        Store::open(url, Pooling::Serving)
    }

    /// Like [`Store::connect`], with one connection, opened when a caller asks for it and never
    /// ahead of time: what a command that runs a few statements and exits needs.
    pub fn connect_for_command(url: &str) -> Result<Store, SetupError> {
        Store::open(url, Pooling::Command)
    }

    /// Like [`Store::connect`], reading from the hot standby `read_url` names (PostgreSQL
    /// only, as the primary must be): what serves requests is read there, writes go to the
    /// primary, and reads fall back to the primary while the standby does not answer
    /// (docs/api.md, "Read replicas and the primary down"). A standby that does not answer now is
    /// no error: the server starts on the primary and uses the standby once it answers. While the
    /// standby's replay is more than `max_lag` behind the primary, reads go to the primary too (see
    /// `standby`): a credential deleted or regenerated is refused within that bound whatever the
    /// standby does.
    pub fn connect_with_read_replica(
        url: &str,
        read_url: &str,
        max_lag: std::time::Duration,
    ) -> Result<Store, SetupError> {
        let mut store = Store::open(url, Pooling::Serving)?;
        let target = target::parse(read_url)?;
        if store.backend != Backend::Postgres || !matches!(target, Target::Postgres(_)) {
            return Err(SetupError::UnsupportedUrl(
                "a read replica needs PostgreSQL: REGISTRY_DATABASE_URL and \
                 REGISTRY_DATABASE_READ_URL must both be postgres:// URLs"
                    .into(),
            ));
        }
        let reachability = Arc::new(Reachability::default());
        let manager = Manager::new(target, reachability.clone(), store.gate.clone());
        if let Err(error) = pool::probe(&manager) {
            tracing::warn!(%error, "the read replica does not answer: reading from the primary until it does");
        }
        let pool = pool::build(manager, Pooling::Serving);
        let lag = standby::watch(store.pool.clone(), pool.clone(), max_lag);
        store.replica = Some(ReadSide {
            pool,
            reachability,
            lag,
        });
        Ok(store)
    }

    fn open(url: &str, pooling: Pooling) -> Result<Store, SetupError> {
        let target = target::parse(url)?;
        let backend = match target {
            Target::Sqlite(_) => Backend::Sqlite,
            Target::Postgres(_) => Backend::Postgres,
        };
        let reachability = Arc::new(Reachability::default());
        let gate = Arc::new(ConnectGate::default());
        let manager = Manager::new(target, reachability.clone(), gate.clone());
        pool::probe(&manager).map_err(|e| SetupError::Unreachable {
            backend: backend.as_str(),
            reason: e.to_string(),
        })?;
        let in_place = (pooling == Pooling::Serving && manager.opens_sqlite_file())
            .then(|| Arc::new(InPlace::new(manager.clone(), manager.versioned_file())));
        Ok(Store {
            in_place,
            pool: pool::build(manager, pooling),
            replica: None,
            backend,
            reachability,
            gate,
            writers: Arc::default(),
        })
    }

    /// Opens no connection from now on, and waits (10 s at most) for the connects under way:
    /// call it last, before the process exits. The pool opens connections in the background,
    /// and a process that exits in the middle of a PostgreSQL connect can abort in libpq's
    /// Kerberos library. Calls that need a new connection afterwards get `Unavailable`.
    pub fn close(&self) {
        self.gate.close(CLOSE_WAIT);
    }

    /// The backend the URL named.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Like [`Store::connect_for_command`], for a command that uses a registry's database and
    /// must never create one: refuses a SQLite file that does not exist (before anything could
    /// create it) and a database without the registry's tables.
    pub fn connect_existing(url: &str) -> Result<Store, SetupError> {
        if let Some(file) = missing_file(url)? {
            return Err(SetupError::NoDatabase(file.display().to_string()));
        }
        // A SQLite file is looked at first over a bare connection: the pool's set each one up
        // (WAL), which would rewrite a file that is no registry's database, or an empty one.
        if let Target::Sqlite(path) = target::parse(url)? {
            let bare =
                diesel::SqliteConnection::establish(&path).map_err(|e| SetupError::Unreachable {
                    backend: Backend::Sqlite.as_str(),
                    reason: e.to_string(),
                });
            let has_schema = crate::migrate::has_schema(&mut Db::Sqlite(bare?));
            if !has_schema.map_err(SetupError::Migration)? {
                return Err(SetupError::NoSchema);
            }
        }
        let store = Store::open(url, Pooling::Command)?;
        let mut conn = store.setup_conn()?;
        let has_schema = crate::migrate::has_schema(&mut conn).map_err(SetupError::Migration)?;
        drop(conn);
        if !has_schema {
            store.close();
            return Err(SetupError::NoSchema);
        }
        Ok(store)
    }

    /// The migrations the database a URL names has not applied yet, oldest first, without
    /// changing or creating anything: every one of them for a SQLite file that does not exist
    /// (`registry migrate --check`). A database a newer registry migrated is
    /// [`SetupError::SchemaNewer`].
    pub fn pending_migrations(url: &str) -> Result<Vec<String>, SetupError> {
        if missing_file(url)?.is_some() {
            return Ok(crate::migrate::all());
        }
        let store = Store::connect_for_command(url)?;
        let pending = store
            .setup_conn()
            .and_then(|mut conn| crate::migrate::pending(&mut conn));
        store.close();
        pending
    }

    fn setup_conn(&self) -> Result<Pooled, SetupError> {
        self.conn().map_err(|e| SetupError::Unreachable {
            backend: self.backend.as_str(),
            reason: e.0.to_string(),
        })
    }

    /// Applies the pending migrations and returns how many there were. Safe to run from
    /// several processes at once. Refuses a database a newer registry migrated
    /// ([`SetupError::SchemaNewer`]).
    pub fn migrate(&self) -> Result<usize, SetupError> {
        let mut conn = self.setup_conn()?;
        // Only for the check: the migrations below find what is pending themselves.
        crate::migrate::pending(&mut conn)?;
        let applied = crate::migrate::run(&mut conn).map_err(SetupError::Migration)?;
        tracing::info!(
            backend = self.backend.as_str(),
            applied,
            "database migrated"
        );
        Ok(applied)
    }

    pub(crate) fn conn(&self) -> Res<Pooled> {
        let timeout = if self.reachability.is_reachable() {
            pool::CHECKOUT_TIMEOUT
        } else {
            pool::OUTAGE_CHECKOUT_TIMEOUT
        };
        self.pool
            .get_timeout(timeout)
            .map_err(|e| Failure(StoreError::Unavailable(e.to_string())))
    }

    /// Runs read-only statements on a pooled connection: of the read replica when there is
    /// one and it answers, else (or when it fails under them) of the primary.
    pub(crate) fn read<T>(&self, mut f: impl FnMut(&mut Db) -> Res<T>) -> StoreResult<T> {
        if let Some(mut conn) = self.replica.as_ref().and_then(ReadSide::conn) {
            match f(&mut conn) {
                Err(Failure(StoreError::Unavailable(reason))) => {
                    tracing::debug!(%reason, "a read failed on the read replica: reading from the primary");
                }
                done => return done.map_err(|Failure(e)| e),
            }
        }
        let mut conn = self.conn()?;
        Ok(f(&mut conn)?)
    }

    /// Runs read-only statements on the primary, whatever reads usually use: what must see the
    /// primary itself (whether it answers).
    pub(crate) fn read_primary<T>(&self, f: impl FnOnce(&mut Db) -> Res<T>) -> StoreResult<T> {
        let mut conn = self.conn()?;
        Ok(f(&mut conn)?)
    }

    /// Whether the read replica answers now (one `SELECT 1` on it: the lag's watch looks only
    /// four times a second, and a readiness probe must not report a standby that just went
    /// down), how far behind the primary it replays, and whether that is past the ceiling;
    /// `None` without one.
    pub(crate) fn read_replica_state(&self) -> Option<registry_domain::ports::ReadReplica> {
        let side = self.replica.as_ref()?;
        let lag_seconds = side.lag.seconds();
        let answers = side.reachability.is_reachable()
            && side
                .pool
                .get_timeout(pool::OUTAGE_CHECKOUT_TIMEOUT)
                .is_ok_and(|mut conn| conn.batch_execute("SELECT 1").is_ok());
        Some(registry_domain::ports::ReadReplica {
            up: lag_seconds.is_some() && answers,
            lag_seconds,
            lagging: side.lag.is_lagging(),
        })
    }

    /// The connections of each pool now: the primary's, then the standby's.
    pub(crate) fn pool_use(&self) -> Vec<registry_domain::ports::PoolUse> {
        let usage = |side, pool: &Pool| {
            let state = pool.state();
            registry_domain::ports::PoolUse {
                side,
                in_use: state.connections.saturating_sub(state.idle_connections),
                idle: state.idle_connections,
            }
        };
        let mut pools = vec![usage("primary", &self.pool)];
        if let Some(side) = &self.replica {
            pools.push(usage("read_replica", &side.pool));
        }
        pools
    }

    /// Runs read-only statements in place, only when that cannot wait: the database is SQLite
    /// (in-process, so a point read on a warm page cache costs microseconds, less than handing it
    /// to another thread), on the thread's own connection in a serving process (`threads`, which
    /// may answer from what the thread read before), else `f` on a pooled connection idle now.
    /// `None` otherwise: the caller then uses the blocking path.
    pub(crate) fn read_now<T>(
        &self,
        threads: impl FnOnce(&InPlace) -> Option<StoreResult<T>>,
        f: impl FnOnce(&mut Db) -> Res<T>,
    ) -> Option<StoreResult<T>> {
        if self.backend != Backend::Sqlite {
            return None;
        }
        if let Some(in_place) = &self.in_place {
            return threads(in_place);
        }
        let mut conn = self.pool.try_get()?;
        Some(f(&mut conn).map_err(|Failure(e)| e))
    }

    /// Runs `f` in one write transaction and appends the changes it reports to the change log
    /// in the same transaction, with `event` in the audit trail when it reported any (no
    /// change, no event).
    ///
    /// Writers are serialized: SQLite's `BEGIN IMMEDIATE` takes the write lock up front (a
    /// deferred transaction that reads first could not upgrade and would fail instead of
    /// waiting), and on PostgreSQL every writer first locks the change log. That lock is what
    /// makes sequence numbers become visible in increasing order, so a replica that has read
    /// up to N never later finds a smaller number committed; it also makes check-then-write
    /// sequences (publish = update or insert) free of races.
    pub(crate) fn write<T>(
        &self,
        event: Option<&AuditEvent>,
        f: impl FnOnce(&mut Db, &mut Vec<Change>) -> Res<T>,
    ) -> StoreResult<T> {
        self.transaction(|conn| in_transaction(conn, event, f))
    }

    /// Runs `f` in one write transaction that no cache needs to hear of (no change log, no
    /// audit event): records kept beside the data, such as the refusal log and last uses. On
    /// PostgreSQL it does not lock the change log, so it never holds up the writes replicas
    /// follow.
    pub(crate) fn write_aside<T>(&self, f: impl FnOnce(&mut Db) -> Res<T>) -> StoreResult<T> {
        self.transaction(f)
    }

    fn transaction<T>(&self, f: impl FnOnce(&mut Db) -> Res<T>) -> StoreResult<T> {
        // SQLite has one writer at a time anyway; a writer that finds the database locked sleeps
        // in SQLite's busy handler (1 ms, then longer), while one waiting here wakes the moment
        // the previous writer is done. Other processes (a command) still meet the busy handler.
        let _one_writer = (self.backend == Backend::Sqlite)
            .then(|| self.writers.lock().unwrap_or_else(PoisonError::into_inner));
        let mut pooled = self.conn()?;
        let conn: &mut Db = &mut pooled;
        match conn {
            Db::Sqlite(c) => AnsiTransactionManager::begin_transaction_sql(c, "BEGIN IMMEDIATE"),
            Db::Postgres(c) => AnsiTransactionManager::begin_transaction(c),
        }
        .map_err(map_diesel)?;
        match f(conn) {
            Ok(value) => {
                <Db as Connection>::TransactionManager::commit_transaction(conn)
                    .map_err(map_diesel)?;
                Ok(value)
            }
            Err(Failure(e)) => {
                // A failed rollback leaves the transaction manager broken; the pool then
                // discards the connection.
                let _ = <Db as Connection>::TransactionManager::rollback_transaction(conn);
                Err(e)
            }
        }
    }
}

fn in_transaction<T>(
    conn: &mut Db,
    event: Option<&AuditEvent>,
    f: impl FnOnce(&mut Db, &mut Vec<Change>) -> Res<T>,
) -> Res<T> {
    if let Db::Postgres(c) = conn {
        // SHARE ROW EXCLUSIVE conflicts with itself and with writes, not with reads.
        c.batch_execute("LOCK TABLE changes IN SHARE ROW EXCLUSIVE MODE")?;
    }
    let mut changed = Vec::new();
    let value = f(conn, &mut changed)?;
    if let Some(event) = event.filter(|_| !changed.is_empty()) {
        crate::audit::insert(conn, event)?;
    }
    let now = millis(OffsetDateTime::now_utc());
    for change in changed {
        let (kind, subject) = match change {
            Change::Service(id) => (CHANGE_SERVICE, id),
            Change::Account(id) => (CHANGE_ACCOUNT, id),
        };
        let values = (
            changes::kind.eq(kind),
            changes::subject_id.eq(id_text(subject)),
            changes::created_at.eq(now),
        );
        on_backend!(&mut *conn, |c| diesel::insert_into(changes::table)
            .values(values)
            .execute(c))?;
    }
    Ok(value)
}

/// The file a SQLite URL names, when it does not exist; `None` for one that does, and for
/// PostgreSQL.
fn missing_file(url: &str) -> Result<Option<std::path::PathBuf>, SetupError> {
    Ok(target::parse(url)?
        .sqlite_file()
        .filter(|file| !file.exists()))
}

pub(crate) const CHANGE_SERVICE: &str = "service";
pub(crate) const CHANGE_ACCOUNT: &str = "account";
