//! The schema migrations, compiled into the binary, one set per backend (same folder names).

use crate::pool::Db;
use crate::SetupError;
use diesel::migration::MigrationSource;
use diesel::result::Error as DieselError;
use diesel::Connection;
use diesel::RunQueryDsl;
use diesel_migrations::{embed_migrations, EmbeddedMigrations, MigrationHarness};

const SQLITE: EmbeddedMigrations = embed_migrations!("../../migrations/sqlite");
const POSTGRES: EmbeddedMigrations = embed_migrations!("../../migrations/postgres");

/// Any constant will do, as long as nothing else in the database uses it.
const MIGRATION_LOCK: i64 = 0x7265_6769_7374_7279; // "registry"

/// Every migration this binary holds, oldest first (`2026-11-21-000001_init`): what a database
/// that does not exist yet has pending.
pub(crate) fn all() -> Vec<String> {
    names(&SQLITE).into_iter().map(|(name, _)| name).collect()
}

/// The name and the version of each migration of `migrations`, oldest first.
fn names(migrations: &EmbeddedMigrations) -> Vec<(String, String)> {
    MigrationSource::<diesel::pg::Pg>::migrations(migrations)
        .map(|all| {
            all.iter()
                .map(|m| (m.name().to_string(), m.name().version().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

fn embedded(conn: &Db) -> EmbeddedMigrations {
    match conn {
        Db::Sqlite(_) => SQLITE,
        Db::Postgres(_) => POSTGRES,
    }
}

/// Whether the registry's migrations table exists (a database without it holds no registry).
pub(crate) fn has_schema(conn: &mut Db) -> Result<bool, String> {
    #[derive(diesel::QueryableByName)]
    struct Count {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let query = match conn {
        Db::Sqlite(_) => {
            "SELECT COUNT(*) AS n FROM sqlite_master WHERE type = 'table' \
             AND name = '__diesel_schema_migrations'"
        }
        Db::Postgres(_) => {
            "SELECT COUNT(*) AS n FROM information_schema.tables \
             WHERE table_schema = current_schema() AND table_name = '__diesel_schema_migrations'"
        }
    };
    let counted: Count = diesel::sql_query(query)
        .get_result(conn)
        .map_err(|e| e.to_string())?;
    Ok(counted.n > 0)
}

/// The migrations not applied yet, oldest first. A version applied to the database that this
/// binary does not know (a newer binary migrated it) is [`SetupError::SchemaNewer`], naming the
/// first.
pub(crate) fn pending(conn: &mut Db) -> Result<Vec<String>, SetupError> {
    let known = names(&embedded(conn));
    let applied: Vec<String> = if has_schema(conn).map_err(SetupError::Migration)? {
        let versions = match conn {
            Db::Sqlite(c) => c.applied_migrations(),
            Db::Postgres(c) => c.applied_migrations(),
        };
        versions
            .map_err(|e| SetupError::Migration(e.to_string()))?
            .iter()
            .map(ToString::to_string)
            .collect()
    } else {
        Vec::new()
    };
    if let Some(unknown) = applied
        .iter()
        .find(|version| !known.iter().any(|(_, v)| v == *version))
    {
        return Err(SetupError::SchemaNewer(unknown.clone()));
    }
    Ok(known
        .into_iter()
        .filter(|(_, version)| !applied.contains(version))
        .map(|(name, _)| name)
        .collect())
}

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
            crate::pool::advisory_xact_lock(c, MIGRATION_LOCK, false)?;
            c.run_pending_migrations(POSTGRES)
                .map(|v| v.len())
                .map_err(boxed)
        }),
    };
    applied.map_err(|e| e.to_string())
}
