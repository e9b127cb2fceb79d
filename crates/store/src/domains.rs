//! [`DomainStore`] on [`Store`]: custom domains, their HTTP-01 answers and the ACME accounts.
//! A domain's changes are logged as changes of its service, so that every replica reloads the
//! domain (and its certificate) with the service.

use crate::error::{Failure, Res};
use crate::pool::{on_backend, Db};
use crate::rows::{id_text, instant, millis, readable, uuid};
use crate::schema::{acme_accounts, acme_challenges, acme_orders, custom_domains, services};
use crate::Store;
use diesel::prelude::*;
use registry_domain::audit::AuditEvent;
use registry_domain::custom_domain::{
    CustomDomain, DomainCertificate, DomainProblem, DomainStatus, DomainWork, CHALLENGE_KEPT,
    MAX_CHALLENGES_READ,
};
use registry_domain::ports::{AcmeOrder, Ceiling, Change, DomainStore, StoreResult};
use registry_domain::StoreError;
use time::OffsetDateTime;
use uuid::Uuid;

#[derive(Queryable)]
struct DomainRow {
    service_id: String,
    domain: String,
    status: String,
    txt_token: String,
    created_at: i64,
    next_attempt_at: i64,
    attempts: i32,
    error_code: Option<String>,
    error_message: Option<String>,
    certificate_chain: Option<String>,
    certificate_key: Option<String>,
    not_before: Option<i64>,
    not_after: Option<i64>,
    certificate_issuer: Option<String>,
}

/// The columns of [`DomainRow`], in its order (the lock is not part of a domain).
macro_rules! domain_columns {
    () => {
        (
            custom_domains::service_id,
            custom_domains::domain,
            custom_domains::status,
            custom_domains::txt_token,
            custom_domains::created_at,
            custom_domains::next_attempt_at,
            custom_domains::attempts,
            custom_domains::error_code,
            custom_domains::error_message,
            custom_domains::certificate_chain,
            custom_domains::certificate_key,
            custom_domains::not_before,
            custom_domains::not_after,
            custom_domains::certificate_issuer,
        )
    };
}

impl DomainRow {
    fn into_domain(self) -> Res<CustomDomain> {
        let status = DomainStatus::parse(&self.status).ok_or_else(|| {
            Failure(StoreError::Corrupt(format!(
                "status {:?} of custom domain {}",
                self.status, self.domain
            )))
        })?;
        let problem = match (self.error_code, self.error_message) {
            (Some(code), Some(message)) => Some(DomainProblem { code, message }),
            _ => None,
        };
        let certificate = match (
            self.certificate_chain,
            self.certificate_key,
            self.not_before,
            self.not_after,
            self.certificate_issuer,
        ) {
            (Some(chain_pem), Some(sealed_key), Some(from), Some(to), Some(issuer)) => {
                Some(DomainCertificate {
                    chain_pem,
                    sealed_key,
                    not_before: instant(from)?,
                    not_after: instant(to)?,
                    issuer,
                })
            }
            _ => None,
        };
        Ok(CustomDomain {
            service_id: uuid(&self.service_id)?,
            domain: self.domain,
            status,
            txt_token: self.txt_token,
            created_at: instant(self.created_at)?,
            next_attempt_at: instant(self.next_attempt_at)?,
            attempts: u32::try_from(self.attempts).unwrap_or(0),
            problem,
            certificate,
        })
    }
}

/// Writes every column of `domain` but the lock (inserted, or replacing the service's row).
fn write_domain(conn: &mut Db, domain: &CustomDomain) -> Res<()> {
    let problem = domain.problem.as_ref();
    let certificate = domain.certificate.as_ref();
    let values = (
        custom_domains::service_id.eq(id_text(domain.service_id)),
        custom_domains::domain.eq(&domain.domain),
        custom_domains::status.eq(domain.status.as_str()),
        custom_domains::txt_token.eq(&domain.txt_token),
        custom_domains::created_at.eq(millis(domain.created_at)),
        custom_domains::next_attempt_at.eq(millis(domain.next_attempt_at)),
        custom_domains::attempts.eq(i32::try_from(domain.attempts).unwrap_or(i32::MAX)),
        custom_domains::error_code.eq(problem.map(|p| p.code.as_str())),
        custom_domains::error_message.eq(problem.map(|p| p.message.as_str())),
        custom_domains::certificate_chain.eq(certificate.map(|c| c.chain_pem.as_str())),
        custom_domains::certificate_key.eq(certificate.map(|c| c.sealed_key.as_str())),
        custom_domains::not_before.eq(certificate.map(|c| millis(c.not_before))),
        custom_domains::not_after.eq(certificate.map(|c| millis(c.not_after))),
        custom_domains::certificate_issuer.eq(certificate.map(|c| c.issuer.as_str())),
        // A domain's state written ends the step that held its ordering lock, if one did (only
        // the lock's holder writes a held domain's step; an owner's PUT starts over).
        custom_domains::locked_until.eq(None::<i64>),
    );
    let service = id_text(domain.service_id);
    let updated = diesel::update(custom_domains::table.find(&service))
        .set(values.clone())
        .execute(conn)?;
    if updated == 0 {
        on_backend!(&mut *conn, |c| diesel::insert_into(custom_domains::table)
            .values(values)
            .execute(c))?;
    }
    Ok(())
}

fn domain_row(conn: &mut Db, service_id: Uuid) -> Res<Option<CustomDomain>> {
    custom_domains::table
        .find(id_text(service_id))
        .select(domain_columns!())
        .get_result::<DomainRow>(conn)
        .optional()?
        .map(DomainRow::into_domain)
        .transpose()
}

/// Locks the service's domain row while it is still `was` as a step of the worker read it
/// ([`CustomDomain::is_still`]): `false` when it is not. The check is the `UPDATE`'s own
/// condition, so that on PostgreSQL a second step racing this one waits for the row and finds
/// it changed, rather than both reading it unchanged.
fn still(conn: &mut Db, was: &CustomDomain) -> Res<bool> {
    let next_attempt_at = millis(was.next_attempt_at);
    let locked = diesel::update(
        custom_domains::table
            .find(id_text(was.service_id))
            .filter(custom_domains::domain.eq(&was.domain))
            .filter(custom_domains::status.eq(was.status.as_str()))
            .filter(custom_domains::txt_token.eq(&was.txt_token))
            .filter(custom_domains::next_attempt_at.eq(next_attempt_at))
            .filter(custom_domains::attempts.eq(i32::try_from(was.attempts).unwrap_or(i32::MAX))),
    )
    .set(custom_domains::next_attempt_at.eq(next_attempt_at))
    .execute(conn)?;
    Ok(locked == 1)
}

/// Whether a service other than `service_id` holds `domain` proven (issuing or active).
fn held_by_another(conn: &mut Db, domain: &str, service_id: Uuid) -> Res<bool> {
    let held = [
        DomainStatus::Issuing.as_str(),
        DomainStatus::Active.as_str(),
    ];
    let holders = custom_domains::table
        .filter(custom_domains::domain.eq(domain))
        .filter(custom_domains::status.eq_any(held))
        .filter(custom_domains::service_id.ne(id_text(service_id)))
        .count()
        .get_result::<i64>(conn)?;
    Ok(holders > 0)
}

/// Forgets the challenges of the names `services` hold (before they go): challenges are kept
/// by name, and only a name's holder orders, so they are its.
pub(crate) fn forget_challenges_of(conn: &mut Db, services: &[String]) -> Res<()> {
    let held = [
        DomainStatus::Issuing.as_str(),
        DomainStatus::Active.as_str(),
    ];
    let names = custom_domains::table
        .filter(custom_domains::service_id.eq_any(services))
        .filter(custom_domains::status.eq_any(held))
        .select(custom_domains::domain)
        .load::<String>(conn)?;
    diesel::delete(acme_challenges::table.filter(acme_challenges::domain.eq_any(names)))
        .execute(conn)?;
    Ok(())
}

/// The unproven claims (verifying) of the services of `service_id`'s customer, that service's
/// own left out (a claim replaces it).
fn pending_claims(conn: &mut Db, service_id: Uuid) -> Res<u64> {
    let customer = services::table
        .find(id_text(service_id))
        .select(services::customer_id)
        .get_result::<Option<String>>(conn)
        .optional()?
        .flatten();
    let Some(customer) = customer else {
        return Ok(0);
    };
    let services = services::table
        .filter(services::customer_id.eq(customer))
        .select(services::id);
    let pending = custom_domains::table
        .filter(custom_domains::service_id.eq_any(services))
        .filter(custom_domains::service_id.ne(id_text(service_id)))
        .filter(custom_domains::status.eq(DomainStatus::Verifying.as_str()))
        .count()
        .get_result::<i64>(conn)?;
    Ok(u64::try_from(pending).unwrap_or(u64::MAX))
}

/// The orders of `directory`'s account: `customer_id`'s new orders (not renewals) since
/// `customer_since`, and all of them since `account_since`.
fn order_counts(
    conn: &mut Db,
    directory: &str,
    customer_id: Option<Uuid>,
    customer_since: OffsetDateTime,
    account_since: OffsetDateTime,
) -> Res<(usize, usize)> {
    let of_account = acme_orders::table.filter(acme_orders::directory.eq(directory));
    let account = of_account
        .filter(acme_orders::at.ge(millis(account_since)))
        .count()
        .get_result::<i64>(conn)?;
    let customer = match customer_id {
        Some(customer) => of_account
            .filter(acme_orders::customer_id.eq(id_text(customer)))
            .filter(acme_orders::renewal.eq(false))
            .filter(acme_orders::at.ge(millis(customer_since)))
            .count()
            .get_result::<i64>(conn)?,
        None => 0,
    };
    let count = |n: i64| usize::try_from(n).unwrap_or(usize::MAX);
    Ok((count(customer), count(account)))
}

/// Challenges are kept by name: only the name's holder orders, so they are its.
fn forget_challenges(conn: &mut Db, domain: &str) -> Res<()> {
    diesel::delete(acme_challenges::table.filter(acme_challenges::domain.eq(domain)))
        .execute(conn)?;
    Ok(())
}

impl DomainStore for Store {
    fn domain_of(&self, service_id: Uuid) -> StoreResult<Option<CustomDomain>> {
        self.read(|conn| domain_row(conn, service_id))
    }

    fn domain_named(&self, domain: &str) -> StoreResult<Option<CustomDomain>> {
        self.read(|conn| {
            // The holder when there is one; else the oldest claim.
            let held = [
                DomainStatus::Issuing.as_str(),
                DomainStatus::Active.as_str(),
            ];
            let held_first = custom_domains::status.eq_any(held).desc();
            custom_domains::table
                .filter(custom_domains::domain.eq(domain))
                .order((
                    held_first,
                    custom_domains::created_at,
                    custom_domains::service_id,
                ))
                .select(domain_columns!())
                .first::<DomainRow>(conn)
                .optional()?
                .map(DomainRow::into_domain)
                .transpose()
        })
    }

    fn put_domain(
        &self,
        domain: &CustomDomain,
        was: Option<&CustomDomain>,
        pending: Ceiling,
        event: &AuditEvent,
    ) -> StoreResult<Result<(), Option<CustomDomain>>> {
        self.write(Some(event), |conn, changed| {
            if held_by_another(conn, &domain.domain, domain.service_id)? {
                return Err(Failure(StoreError::Conflict(format!(
                    "{:?} is held by another service",
                    domain.domain
                ))));
            }
            let current = domain_row(conn, domain.service_id)?;
            if !CustomDomain::still_as_read(current.as_ref(), was) {
                return Ok(Err(current));
            }
            if domain.status == DomainStatus::Verifying && pending != Ceiling::NONE {
                let others = pending_claims(conn, domain.service_id)?;
                if !pending.admits(others) {
                    return Err(Failure(StoreError::CeilingReached(pending.0)));
                }
            }
            if current
                .as_ref()
                .is_some_and(|old| old.domain != domain.domain)
            {
                crate::fetches::forget_domain_fetches(conn, &id_text(domain.service_id))?;
            }
            if let Some(old) = current.filter(CustomDomain::is_held) {
                forget_challenges(conn, &old.domain)?;
            }
            // A new name starts over: no lock of the old one's order (`write_domain` ends it).
            write_domain(conn, domain)?;
            changed.push(Change::Service(domain.service_id));
            Ok(Ok(()))
        })
    }

    fn take_acme_order(
        &self,
        order: &AcmeOrder<'_>,
        admits: &dyn Fn(usize, usize) -> bool,
    ) -> StoreResult<bool> {
        // A write: on PostgreSQL it waits for every other replica's (the change log's lock),
        // so the count it reads is the one its record joins.
        self.write(None, |conn, _| {
            let (customer, account) = order_counts(
                conn,
                order.directory,
                order.customer_id,
                order.customer_since,
                order.account_since,
            )?;
            if !admits(customer, account) {
                return Ok(false);
            }
            let old = acme_orders::at.lt(millis(order.account_since));
            diesel::delete(acme_orders::table.filter(old)).execute(conn)?;
            let row = (
                acme_orders::directory.eq(order.directory),
                acme_orders::domain.eq(order.domain),
                acme_orders::at.eq(millis(order.at)),
                acme_orders::customer_id.eq(order.customer_id.map(id_text)),
                acme_orders::renewal.eq(order.renewal),
            );
            on_backend!(&mut *conn, |c| diesel::insert_into(acme_orders::table)
                .values(row)
                .on_conflict_do_nothing()
                .execute(c))?;
            Ok(true)
        })
    }

    fn hold_domain(
        &self,
        was: &CustomDomain,
        proven: &CustomDomain,
        taken: &DomainProblem,
    ) -> StoreResult<bool> {
        self.write(None, |conn, changed| {
            if held_by_another(conn, &proven.domain, proven.service_id)? || !still(conn, was)? {
                return Ok(false);
            }
            write_domain(conn, proven)?;
            changed.push(Change::Service(proven.service_id));
            let others = custom_domains::table
                .filter(custom_domains::domain.eq(&proven.domain))
                .filter(custom_domains::service_id.ne(id_text(proven.service_id)))
                .select(custom_domains::service_id)
                .load::<String>(conn)?;
            diesel::update(
                custom_domains::table.filter(custom_domains::service_id.eq_any(&others)),
            )
            .set((
                custom_domains::status.eq(DomainStatus::Failed.as_str()),
                custom_domains::error_code.eq(&taken.code),
                custom_domains::error_message.eq(&taken.message),
            ))
            .execute(conn)?;
            for other in &others {
                changed.push(Change::Service(uuid(other)?));
            }
            Ok(true)
        })
    }

    fn delete_domain(
        &self,
        service_id: Uuid,
        was: Option<&CustomDomain>,
        event: &AuditEvent,
    ) -> StoreResult<bool> {
        self.write(Some(event), |conn, changed| {
            if let Some(was) = was {
                if was.service_id != service_id || !still(conn, was)? {
                    return Ok(false);
                }
            }
            let Some(old) = domain_row(conn, service_id)? else {
                return Ok(false);
            };
            if old.is_held() {
                forget_challenges(conn, &old.domain)?;
            }
            crate::fetches::forget_domain_fetches(conn, &id_text(service_id))?;
            diesel::delete(custom_domains::table.find(id_text(service_id))).execute(conn)?;
            changed.push(Change::Service(service_id));
            Ok(true)
        })
    }

    fn update_domain(&self, was: &CustomDomain, domain: &CustomDomain) -> StoreResult<bool> {
        self.write(None, |conn, changed| {
            if was.service_id != domain.service_id || !still(conn, was)? {
                return Ok(false);
            }
            // The step is over: its ordering lock, if it held one, goes with it.
            write_domain(conn, domain)?;
            changed.push(Change::Service(domain.service_id));
            Ok(true)
        })
    }

    fn held_domains(&self) -> StoreResult<Vec<CustomDomain>> {
        self.read(|conn| {
            let held = [
                DomainStatus::Issuing.as_str(),
                DomainStatus::Active.as_str(),
            ];
            let rows = custom_domains::table
                .filter(custom_domains::status.eq_any(held))
                .order(custom_domains::service_id)
                .select(domain_columns!())
                .load::<DomainRow>(conn)?;
            readable("custom domain", rows, DomainRow::into_domain)
        })
    }

    fn domains_due(
        &self,
        now: OffsetDateTime,
        work: DomainWork,
        limit: usize,
    ) -> StoreResult<Vec<CustomDomain>> {
        // Each status apart, in the order served (renewals first): a query ordered by status
        // would rest on how the names sort.
        let mut left = limit;
        let mut due = Vec::new();
        for status in work.statuses() {
            let rows = self.read_primary(|conn| {
                let rows = custom_domains::table
                    .filter(custom_domains::status.eq(status.as_str()))
                    .filter(custom_domains::next_attempt_at.le(millis(now)))
                    .order((custom_domains::next_attempt_at, custom_domains::service_id))
                    .limit(i64::try_from(left).unwrap_or(i64::MAX))
                    .select(domain_columns!())
                    .load::<DomainRow>(conn)?;
                readable("custom domain", rows, DomainRow::into_domain)
            })?;
            left -= rows.len();
            due.extend(rows);
        }
        Ok(due)
    }

    fn lock_domain(
        &self,
        was: &CustomDomain,
        until: OffsetDateTime,
        now: OffsetDateTime,
    ) -> StoreResult<bool> {
        self.write_aside(|conn| {
            if !still(conn, was)? {
                return Ok(false);
            }
            let free = custom_domains::locked_until
                .is_null()
                .or(custom_domains::locked_until.le(millis(now)));
            let taken = diesel::update(
                custom_domains::table
                    .find(id_text(was.service_id))
                    .filter(free),
            )
            .set(custom_domains::locked_until.eq(millis(until)))
            .execute(conn)?;
            Ok(taken == 1)
        })
    }

    fn put_challenge(
        &self,
        domain: &str,
        token: &str,
        key_authorization: &str,
        now: OffsetDateTime,
    ) -> StoreResult<()> {
        self.write_aside(|conn| {
            // A day's challenges are all an order can still be answering.
            let old = millis(now - CHALLENGE_KEPT);
            diesel::delete(
                acme_challenges::table
                    .filter(acme_challenges::domain.eq(domain))
                    .filter(acme_challenges::created_at.lt(old)),
            )
            .execute(conn)?;
            let row = (
                acme_challenges::domain.eq(domain),
                acme_challenges::token.eq(token),
                acme_challenges::key_authorization.eq(key_authorization),
                acme_challenges::created_at.eq(millis(now)),
            );
            on_backend!(&mut *conn, |c| diesel::insert_into(acme_challenges::table)
                .values(row)
                .on_conflict((acme_challenges::domain, acme_challenges::token))
                .do_nothing()
                .execute(c))?;
            Ok(())
        })
    }

    fn challenges(&self, domain: &str) -> StoreResult<Vec<(String, String)>> {
        // From the primary: the ACME server asks moments after the ordering replica wrote it.
        self.read_primary(|conn| {
            Ok(acme_challenges::table
                .filter(acme_challenges::domain.eq(domain))
                .order((acme_challenges::created_at.desc(), acme_challenges::token))
                .limit(MAX_CHALLENGES_READ as i64)
                .select((acme_challenges::token, acme_challenges::key_authorization))
                .load::<(String, String)>(conn)?)
        })
    }

    fn acme_account(&self, directory: &str) -> StoreResult<Option<String>> {
        self.read_primary(|conn| {
            Ok(acme_accounts::table
                .find(directory)
                .select(acme_accounts::credentials)
                .get_result::<String>(conn)
                .optional()?)
        })
    }

    fn put_acme_account(&self, directory: &str, sealed: &str) -> StoreResult<String> {
        self.write_aside(|conn| {
            let row = (
                acme_accounts::directory.eq(directory),
                acme_accounts::credentials.eq(sealed),
            );
            on_backend!(&mut *conn, |c| diesel::insert_into(acme_accounts::table)
                .values(row)
                .on_conflict(acme_accounts::directory)
                .do_nothing()
                .execute(c))?;
            Ok(acme_accounts::table
                .find(directory)
                .select(acme_accounts::credentials)
                .get_result::<String>(conn)?)
        })
    }
}
