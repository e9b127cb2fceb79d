//! [`AccountStore`] on [`Store`].

use crate::error::{Failure, Res};
use crate::pool::Db;
use crate::rows::{id_text, millis, policy_text, AccountRow};
use crate::schema::{account_issuers, credentials, customers, service_accounts};
use crate::Store;
use diesel::prelude::*;
use registry_domain::audit::AuditEvent;
use registry_domain::policy::PolicyKind;
use registry_domain::ports::{
    AccountStore, Ceiling, Change, CredentialRecord, OthersCheck, StoreResult,
};
use registry_domain::{ServiceAccount, StoreError};
use std::collections::BTreeSet;
use uuid::Uuid;

/// Inserts an account, its issuer index and its token (inside the caller's transaction).
pub(crate) fn insert_account(
    conn: &mut Db,
    account: &ServiceAccount,
    token: Option<&CredentialRecord>,
) -> Res<()> {
    diesel::insert_into(service_accounts::table)
        .values((
            service_accounts::id.eq(id_text(account.id)),
            service_accounts::customer_id.eq(id_text(account.customer_id)),
            service_accounts::name.eq(&account.name),
            service_accounts::kind.eq(account.policy.kind().as_str()),
            service_accounts::policy.eq(policy_text(&account.policy)?),
            service_accounts::created_at.eq(millis(account.created_at)),
        ))
        .execute(conn)?;
    index_issuers(conn, account)?;
    if let Some(token) = token {
        insert_token(conn, account.id, token)?;
    }
    Ok(())
}

fn index_issuers(conn: &mut Db, account: &ServiceAccount) -> Res<()> {
    let issuers: BTreeSet<&str> = account.policy.issuers().into_iter().collect();
    for issuer in issuers {
        diesel::insert_into(account_issuers::table)
            .values((
                account_issuers::issuer.eq(issuer),
                account_issuers::account_id.eq(id_text(account.id)),
            ))
            .execute(conn)?;
    }
    Ok(())
}

fn insert_token(conn: &mut Db, account_id: Uuid, token: &CredentialRecord) -> Res<()> {
    diesel::insert_into(credentials::table)
        .values((
            credentials::lookup_id.eq(&token.lookup_id),
            credentials::hash.eq(&token.hash),
            credentials::account_id.eq(Some(id_text(account_id))),
        ))
        .execute(conn)?;
    Ok(())
}

/// How many accounts the customer has.
fn accounts_held(conn: &mut Db, customer_id: Uuid) -> Res<u64> {
    let held: i64 = service_accounts::table
        .filter(service_accounts::customer_id.eq(id_text(customer_id)))
        .count()
        .get_result(conn)?;
    Ok(u64::try_from(held).unwrap_or(0))
}

/// The lookup id of the token of the account `id`.
fn token_of(conn: &mut Db, id: &str) -> Res<Option<String>> {
    Ok(credentials::table
        .filter(credentials::account_id.eq(id))
        .select(credentials::lookup_id)
        .first::<String>(conn)
        .optional()?)
}

/// Runs `others` (when given) on the other accounts of `account`'s customer, as they are in
/// this transaction: its federated ones only (what the budget counts: issuers and their rules,
/// at most 20 × 200 rules in all), so that the writers' lock is held for no static account.
fn check_others(conn: &mut Db, account: &ServiceAccount, others: OthersCheck<'_>) -> Res<()> {
    let Some(check) = others else {
        return Ok(());
    };
    let rows = service_accounts::table
        .filter(service_accounts::customer_id.eq(id_text(account.customer_id)))
        .filter(service_accounts::id.ne(id_text(account.id)))
        .filter(service_accounts::kind.eq(PolicyKind::Oidc.as_str()))
        .load(conn)?;
    check(&load(rows)?).map_err(|v| StoreError::OverBudget(v).into())
}

/// The accounts of `rows`. A row that cannot be read is left out and logged with its id (asked
/// for by id, it is a 500): one corrupt row must not take a list, or a server's start, with it.
fn load(rows: Vec<AccountRow>) -> Res<Vec<ServiceAccount>> {
    let mut accounts = Vec::with_capacity(rows.len());
    for row in rows {
        match row.into_domain() {
            Ok(account) => accounts.push(account),
            Err(Failure(StoreError::Corrupt(row))) => {
                tracing::error!(%row, "left out a stored service account that cannot be read");
            }
            Err(other) => return Err(other),
        }
    }
    Ok(accounts)
}

/// The account `id`, unless its customer is disabled.
fn enabled_account(conn: &mut Db, id: &str) -> Res<Option<ServiceAccount>> {
    service_accounts::table
        .find(id)
        .filter(enabled!(service_accounts::customer_id))
        .get_result::<AccountRow>(conn)
        .optional()?
        .map(AccountRow::into_domain)
        .transpose()
}

impl AccountStore for Store {
    fn create_account(
        &self,
        account: &ServiceAccount,
        token: Option<&CredentialRecord>,
        ceiling: Ceiling,
        others: OthersCheck<'_>,
        event: &AuditEvent,
    ) -> StoreResult<()> {
        self.write(Some(event), |conn, changed| {
            // Writers are serialised (`Store::write`): the count and the insert are one step.
            if ceiling != Ceiling::NONE
                && !ceiling.admits(accounts_held(conn, account.customer_id)?)
            {
                return Err(StoreError::CeilingReached(ceiling.0).into());
            }
            check_others(conn, account, others)?;
            insert_account(conn, account, token)?;
            changed.push(Change::Account(account.id));
            Ok(())
        })
    }

    fn account(&self, id: Uuid) -> StoreResult<Option<ServiceAccount>> {
        self.read(|conn| enabled_account(conn, &id_text(id)))
    }

    fn count_accounts_of(&self, customer_id: Uuid) -> StoreResult<u64> {
        self.read(|conn| accounts_held(conn, customer_id))
    }

    fn accounts_of(&self, customer_id: Uuid) -> StoreResult<Vec<ServiceAccount>> {
        self.read(|conn| {
            load(
                service_accounts::table
                    .filter(service_accounts::customer_id.eq(id_text(customer_id)))
                    .order((service_accounts::created_at, service_accounts::id))
                    .load(conn)?,
            )
        })
    }

    fn update_account(
        &self,
        before: &ServiceAccount,
        account: &ServiceAccount,
        others: OthersCheck<'_>,
        event: &AuditEvent,
    ) -> StoreResult<Result<(), ServiceAccount>> {
        self.write(Some(event), |conn, changed| {
            let id = id_text(account.id);
            // Writers are serialised, so this read and the write are one step.
            let stored = enabled_account(conn, &id)?.ok_or(StoreError::NotFound)?;
            if stored.name != before.name || stored.policy.document() != before.policy.document() {
                return Ok(Err(stored));
            }
            if stored.name == account.name && stored.policy.document() == account.policy.document()
            {
                return Ok(Ok(()));
            }
            check_others(conn, account, others)?;
            diesel::update(service_accounts::table.find(&id))
                .set((
                    service_accounts::name.eq(&account.name),
                    service_accounts::kind.eq(account.policy.kind().as_str()),
                    service_accounts::policy.eq(policy_text(&account.policy)?),
                ))
                .execute(conn)?;
            diesel::delete(account_issuers::table.filter(account_issuers::account_id.eq(&id)))
                .execute(conn)?;
            index_issuers(conn, account)?;
            changed.push(Change::Account(account.id));
            Ok(Ok(()))
        })
    }

    fn delete_account(&self, id: Uuid, event: &AuditEvent) -> StoreResult<bool> {
        self.write(Some(event), |conn, changed| {
            // The token and the issuer index go with it (ON DELETE CASCADE).
            let deleted =
                diesel::delete(service_accounts::table.find(id_text(id))).execute(conn)?;
            if deleted > 0 {
                changed.push(Change::Account(id));
            }
            Ok(deleted > 0)
        })
    }

    fn token_lookup_id(&self, account_id: Uuid) -> StoreResult<Option<String>> {
        self.read_primary(|conn| token_of(conn, &id_text(account_id)))
    }

    fn replace_token(
        &self,
        account: &ServiceAccount,
        replaced: Option<&str>,
        token: &CredentialRecord,
        event: &AuditEvent,
    ) -> StoreResult<Result<(), ServiceAccount>> {
        let account_id = account.id;
        self.write(Some(event), |conn, changed| {
            let id = id_text(account_id);
            // Writers are serialised, so these reads and the replacement are one step.
            let stored = enabled_account(conn, &id)?.ok_or(StoreError::NotFound)?;
            if stored.policy.document() != account.policy.document() {
                return Ok(Err(stored));
            }
            if token_of(conn, &id)?.as_deref() != replaced {
                return Err(StoreError::Conflict(
                    "the token was regenerated by another call meanwhile".into(),
                )
                .into());
            }
            diesel::delete(credentials::table.filter(credentials::account_id.eq(&id)))
                .execute(conn)?;
            insert_token(conn, account_id, token)?;
            changed.push(Change::Account(account_id));
            Ok(Ok(()))
        })
    }

    fn accounts_by_issuer(&self, issuer: &str) -> StoreResult<Vec<ServiceAccount>> {
        // No stored issuer holds NUL (PostgreSQL text cannot), and the issuer comes from an
        // unauthenticated token: answer without a query PostgreSQL would fail.
        if issuer.contains('\0') {
            return Ok(Vec::new());
        }
        self.read(|conn| {
            load(
                service_accounts::table
                    .inner_join(account_issuers::table)
                    .filter(account_issuers::issuer.eq(issuer))
                    .filter(enabled!(service_accounts::customer_id))
                    .select(service_accounts::all_columns)
                    .order((service_accounts::created_at, service_accounts::id))
                    .load(conn)?,
            )
        })
    }

    fn oidc_accounts(&self) -> StoreResult<Vec<ServiceAccount>> {
        self.read(|conn| {
            load(
                service_accounts::table
                    .filter(service_accounts::kind.eq("oidc"))
                    .filter(enabled!(service_accounts::customer_id))
                    .order((service_accounts::created_at, service_accounts::id))
                    .load(conn)?,
            )
        })
    }
}
