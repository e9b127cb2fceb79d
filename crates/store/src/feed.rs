//! [`CredentialStore`] and [`ChangeFeed`] on [`Store`].

use crate::error::Failure;
use crate::rows::uuid;
use crate::schema::{changes, credentials};
use crate::store::{CHANGE_ACCOUNT, CHANGE_SERVICE};
use crate::Store;
use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use registry_domain::ports::{
    Change, ChangeFeed, CredentialOwner, CredentialStore, StoreResult, StoredCredential,
};
use registry_domain::StoreError;

impl CredentialStore for Store {
    fn credential(&self, lookup_id: &str) -> StoreResult<Option<StoredCredential>> {
        self.read(|conn| {
            let Some((hash, account, service)) = credentials::table
                .find(lookup_id)
                .select((
                    credentials::hash,
                    credentials::account_id,
                    credentials::service_id,
                ))
                .first::<(String, Option<String>, Option<String>)>(conn)
                .optional()?
            else {
                return Ok(None);
            };
            let owner = match (account, service) {
                (Some(a), None) => CredentialOwner::Account(uuid(&a)?),
                (None, Some(s)) => CredentialOwner::AnonymousService(uuid(&s)?),
                _ => {
                    return Err(Failure(StoreError::Unavailable(format!(
                        "corrupt credential {lookup_id:?}: not exactly one owner"
                    ))))
                }
            };
            Ok(Some(StoredCredential { owner, hash }))
        })
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
                    other => Err(Failure(StoreError::Unavailable(format!(
                        "corrupt change {seq}: unknown kind {other:?}"
                    )))),
                })
                .collect::<Result<_, _>>()?;
            Ok((last, changes))
        })
    }

    fn latest_change(&self) -> StoreResult<i64> {
        self.read(|conn| {
            Ok(changes::table
                .select(diesel::dsl::max(changes::seq))
                .first::<Option<i64>>(conn)?
                .unwrap_or(0))
        })
    }

    fn ping(&self) -> StoreResult<()> {
        self.read(|conn| Ok(conn.batch_execute("SELECT 1")?))
    }
}
