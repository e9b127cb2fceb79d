//! The schema migrations, compiled into the binary, one set per backend (same folder names).

use crate::pool::Db;
use diesel::connection::SimpleConnection;
use diesel::result::Error as DieselError;
use diesel::Connection;
use diesel_migrations::{embed_migrations, EmbeddedMigrations, MigrationHarness};

const SQLITE: EmbeddedMigrations = embed_migrations!("../../migrations/sqlite");
const POSTGRES: EmbeddedMigrations = embed_migrations!("../../migrations/postgres");

/// Any constant will do, as long as nothing else in the database uses it.
const MIGRATION_LOCK: i64 = 0x7265_6769_7374_7279; // "registry"

/// Applies pending migrations. Several processes may start at once on one database (the
/// server and `registry customer create`, or replicas): the work runs in one transaction that
/// first takes the database's write lock (SQLite `BEGIN IMMEDIATE`) or an advisory lock
/// (PostgreSQL), so the second process finds nothing left to do.
pub(crate) fn run(conn: &mut Db) -> Result<usize, String> {
    fn boxed(e: Box<dyn std::error::Error + Send + Sync>) -> DieselError {
        DieselError::QueryBuilderError(e)
    }
    let applied = match conn {
        Db::Sqlite(c) => c.immediate_transaction(|c| {
            c.run_pending_migrations(SQLITE)
                .map(|v| v.len())
                .map_err(boxed)
        }),
        Db::Postgres(c) => c.transaction(|c| {
            c.batch_execute(&format!("SELECT pg_advisory_xact_lock({MIGRATION_LOCK})"))?;
            c.run_pending_migrations(POSTGRES)
                .map(|v| v.len())
                .map_err(boxed)
        }),
    };
    applied.map_err(|e| e.to_string())
}
