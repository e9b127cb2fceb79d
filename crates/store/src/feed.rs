//! [`CredentialStore`], [`ChangeFeed`] and [`Database`] on [`Store`]: what a replica reads to
//! keep its caches as fresh as the database, and whether the database answers.

use crate::error::{Failure, Res};
use crate::pool::{on_backend, Db, SQLITE_BUSY_TIMEOUT_MS};
use crate::rows::uuid;
use crate::schema::{changes, credentials, subdomain_removals};
use crate::store::{CHANGE_ACCOUNT, CHANGE_SERVICE};
use crate::Store;
use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use registry_domain::ports::{
    Change, ChangeFeed, CredentialOwner, CredentialStore, Database, DatabaseSides, PoolUse,
    StoreResult, StoredCredential,
};
use registry_domain::service::Publication;
use registry_domain::signing::Signing;
use registry_domain::StoreError;

/// How long the database's readiness check waits for a SQLite file's lock.
const PING_BUSY_TIMEOUT_MS: u32 = 500;

/// The credential row of a lookup id, with the change log's newest sequence read by the same
/// statement (a sub-select), so that the caller knows how fresh its caches must be.
fn credential_with_latest_change(
    conn: &mut Db,
    lookup_id: &str,
) -> Res<Option<(StoredCredential, i64)>> {
    let latest = changes::table
        .select(diesel::dsl::max(changes::seq))
        .single_value();
    let query = credentials::table.find(lookup_id).select((
        credentials::hash,
        credentials::account_id,
        credentials::service_id,
        latest,
    ));
    // Every request with a secret asks: on the backend's own connection (`on_backend`).
    let Some((hash, account, service, latest)) = on_backend!(conn, |c| query.get_result::<(
        String,
        Option<String>,
        Option<String>,
        Option<i64>
    )>(c))
    .optional()?
    else {
        return Ok(None);
    };
    let owner = match (account, service) {
        (Some(a), None) => CredentialOwner::Account(uuid(&a)?),
        (None, Some(s)) => CredentialOwner::AnonymousService(uuid(&s)?),
        _ => {
            return Err(Failure(StoreError::Corrupt(format!(
                "credential {lookup_id:?}: not exactly one owner"
            ))))
        }
    };
    Ok(Some((
        StoredCredential { owner, hash },
        latest.unwrap_or(0),
    )))
}

fn latest_change(conn: &mut Db) -> Res<i64> {
    // Every federated request asks: on the backend's own connection (`on_backend`).
    let query = changes::table.select(diesel::dsl::max(changes::seq));
    Ok(on_backend!(conn, |c| query.get_result::<Option<i64>>(c))?.unwrap_or(0))
}

impl CredentialStore for Store {
    fn credential(&self, lookup_id: &str) -> StoreResult<Option<StoredCredential>> {
        Ok(self
            .credential_and_latest_change(lookup_id)?
            .map(|(credential, _)| credential))
    }

    fn credential_and_latest_change(
        &self,
        lookup_id: &str,
    ) -> StoreResult<Option<(StoredCredential, i64)>> {
        self.read(|conn| credential_with_latest_change(conn, lookup_id))
    }
}

impl ChangeFeed for Store {
    fn changes_since(&self, after: i64, limit: usize) -> StoreResult<(i64, Vec<Change>)> {
        self.read(|conn| {
            let rows = changes::table
                .filter(changes::seq.gt(after))
                .order(changes::seq)
                .limit(i64::try_from(limit).unwrap_or(i64::MAX))
                .select((changes::seq, changes::kind, changes::subject_id))
                .load::<(i64, String, String)>(conn)?;
            let last = rows.last().map_or(after, |(seq, _, _)| *seq);
            let changes = rows
                .into_iter()
                .map(|(seq, kind, subject)| match kind.as_str() {
                    CHANGE_SERVICE => Ok(Change::Service(uuid(&subject)?)),
                    CHANGE_ACCOUNT => Ok(Change::Account(uuid(&subject)?)),
                    other => Err(Failure(StoreError::Corrupt(format!(
                        "change {seq}: unknown kind {other:?}"
                    )))),
                })
                .collect::<Result<_, _>>()?;
            Ok((last, changes))
        })
    }

    fn latest_change(&self) -> StoreResult<i64> {
        self.read(latest_change)
    }

    fn oldest_change(&self) -> StoreResult<Option<i64>> {
        self.read(|conn| {
            Ok(changes::table
                .select(diesel::dsl::min(changes::seq))
                .get_result::<Option<i64>>(conn)?)
        })
    }

    fn prune_changes(&self, older_than: time::OffsetDateTime) -> StoreResult<usize> {
        self.write_aside(|conn| {
            // Freed subdomains are kept as long as the change log.
            diesel::delete(
                subdomain_removals::table
                    .filter(subdomain_removals::removed_at.lt(crate::rows::millis(older_than))),
            )
            .execute(conn)?;
            let Some(latest) = changes::table
                .select(diesel::dsl::max(changes::seq))
                .get_result::<Option<i64>>(conn)?
            else {
                return Ok(0);
            };
            Ok(diesel::delete(
                changes::table
                    .filter(changes::created_at.lt(crate::rows::millis(older_than)))
                    .filter(changes::seq.lt(latest)),
            )
            .execute(conn)?)
        })
    }
}

impl Database for Store {
    /// In place on SQLite with an idle pooled connection; never on PostgreSQL (a network round
    /// trip would hold an HTTP worker).
    fn credential_and_latest_change_now(
        &self,
        lookup_id: &str,
    ) -> Option<StoreResult<Option<(StoredCredential, i64)>>> {
        let read = |conn: &mut Db| credential_with_latest_change(conn, lookup_id);
        self.read_now(|threads| threads.credential(lookup_id, read), read)
    }

    /// In place as [`Database::credential_and_latest_change_now`] is.
    fn latest_change_now(&self) -> Option<StoreResult<i64>> {
        self.read_now(
            |threads| threads.latest_change(latest_change),
            latest_change,
        )
    }

    /// In place as [`Database::credential_and_latest_change_now`] is: on SQLite the first
    /// fetch of an issuer reads its row on the worker, which costs less than handing the read
    /// to the blocking pool and waking the worker again.
    fn published_by_subdomain_now(
        &self,
        subdomain: &str,
    ) -> Option<StoreResult<Option<Publication>>> {
        let read = |conn: &mut Db| crate::services::published_by_subdomain(conn, subdomain);
        self.read_now(|threads| threads.read(read), read)
    }

    /// In place as [`Database::credential_and_latest_change_now`] is, and kept by each thread
    /// as credentials are: while the database is unchanged, a signature reads no row.
    fn signing_now(&self, service_id: uuid::Uuid) -> Option<StoreResult<Option<Signing>>> {
        let read = |conn: &mut Db| crate::signing::stored(conn, &crate::rows::id_text(service_id));
        self.read_now(|threads| threads.signing(service_id, read), read)
    }

    fn ping(&self) -> StoreResult<()> {
        // SQLite answers `SELECT 1` without reading the database file: the check reads its
        // schema table, which a file locked by another process refuses, waiting half a second
        // for the lock (a probe must not wait out every read's 5 s). PostgreSQL's `SELECT 1`
        // is the server's answer, and waits for no table lock.
        self.read_primary(|conn| match conn {
            Db::Sqlite(_) => {
                conn.batch_execute(&format!("PRAGMA busy_timeout = {PING_BUSY_TIMEOUT_MS}"))?;
                let read = conn.batch_execute("SELECT 1 FROM sqlite_master LIMIT 1");
                conn.batch_execute(&format!("PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}"))?;
                Ok(read?)
            }
            Db::Postgres(_) => Ok(conn.batch_execute("SELECT 1")?),
        })
    }

    fn sides(&self) -> DatabaseSides {
        DatabaseSides {
            primary: self.ping().is_ok(),
            read_replica: self.read_replica_state(),
        }
    }

    fn pools(&self) -> Vec<PoolUse> {
        self.pool_use()
    }
}
