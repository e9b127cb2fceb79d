//! [`ServiceStore`] on [`Store`].

use crate::error::Res;
use crate::pool::{on_backend, Db};
use crate::rows::{
    id_text, instant, key_state_text, millis, readable, ConfigRow, HostRow, ServiceRow,
};
use crate::schema::{
    credentials, customers, published_configs, purges, services, subdomain_removals,
};
use crate::Store;
use diesel::prelude::*;
use diesel::upsert::excluded;
use registry_domain::audit::AuditEvent;
use registry_domain::ports::{Ceiling, Change, CredentialRecord, ServiceStore, StoreResult};
use registry_domain::service::{Publication, PublishedConfig, VersionHistory};
use registry_domain::{Service, StoreError};
use std::collections::HashSet;
use time::OffsetDateTime;
use uuid::Uuid;

/// Bound parameters per `IN (…)` query, far below every backend's limit.
const IN_CHUNK: usize = 500;

/// A service by id, unless its customer is disabled.
fn by_id(conn: &mut Db, id: &str) -> Res<Option<Service>> {
    services::table
        .find(id)
        .filter(enabled!(services::customer_id))
        .select(ServiceRow::as_select())
        .get_result::<ServiceRow>(conn)
        .optional()?
        .map(ServiceRow::into_domain)
        .transpose()
}

pub(crate) fn exists(conn: &mut Db, id: &str) -> Res<bool> {
    let query = services::table.find(id).select(services::id);
    Ok(on_backend!(conn, |c| query.get_result::<String>(c))
        .optional()?
        .is_some())
}

/// What a write of the configuration of the service `id` replaces (`current`: the stored
/// version, read by the caller), for [`VersionHistory::date`]: that version's history, or with
/// none stored, the deletion of the last one (`DELETE …/config`), which the next version counts
/// as the change before it.
pub(crate) fn history(
    conn: &mut Db,
    id: &str,
    current: Option<&PublishedConfig>,
) -> Res<Option<VersionHistory>> {
    if let Some(current) = current {
        return Ok(Some(VersionHistory::of(current)));
    }
    let query = services::table.find(id).select(services::config_removed_at);
    let removed = on_backend!(conn, |c| query.get_result::<Option<i64>>(c)).optional()?;
    (removed.flatten())
        .map(|at| instant(at).map(VersionHistory::removed))
        .transpose()
}

/// Notes that `subdomains` were freed at `at`: a service created again under one counts that as
/// its configuration's deletion ([`history`]).
pub(crate) fn note_removals(conn: &mut Db, subdomains: &[String], at: OffsetDateTime) -> Res<()> {
    let rows: Vec<_> = (subdomains.iter())
        .map(|subdomain| {
            (
                subdomain_removals::subdomain.eq(subdomain.as_str()),
                subdomain_removals::removed_at.eq(millis(at)),
            )
        })
        .collect();
    for chunk in rows.chunks(crate::pool::ROWS_A_STATEMENT) {
        on_backend!(&mut *conn, |c| diesel::insert_into(
            subdomain_removals::table
        )
        .values(chunk)
        .on_conflict(subdomain_removals::subdomain)
        .do_update()
        .set(subdomain_removals::removed_at.eq(excluded(subdomain_removals::removed_at)))
        .execute(c))?;
    }
    Ok(())
}

/// Deletes the configuration of the service `id`, noting when ([`history`]).
pub(crate) fn remove_config(conn: &mut Db, id: &str, at: OffsetDateTime) -> Res<()> {
    let row = published_configs::table.find(id);
    on_backend!(&mut *conn, |c| diesel::delete(row).execute(c))?;
    let service = services::table.find(id);
    let noted = diesel::update(service).set(services::config_removed_at.eq(millis(at)));
    on_backend!(conn, |c| noted.execute(c))?;
    Ok(())
}

/// Inserts or replaces a configuration (inside the caller's transaction, whose write lock makes
/// update-else-insert race free: there is no portable upsert). `stored_expiry`: the
/// `key_expires_at` of the row being replaced, when the caller read it.
pub(crate) fn write_config(
    conn: &mut Db,
    config: &PublishedConfig,
    stored_expiry: Option<Option<i64>>,
) -> Res<()> {
    let id = id_text(config.service_id);
    let key_state = key_state_text(&config.keys)?;
    let expiry = config.keys.next_expiry().map(millis);
    let content = (
        published_configs::openid_configuration.eq(&config.openid_configuration),
        published_configs::jwks.eq(&config.jwks),
        published_configs::updated_at.eq(millis(config.updated_at)),
        published_configs::key_state.eq(&key_state),
        published_configs::previous_change_at.eq(config.previous_change_at.map(millis)),
        published_configs::discovery_changed_at.eq(config.dates.discovery.map(millis)),
        published_configs::jwks_changed_at.eq(config.dates.jwks.map(millis)),
    );
    let row = published_configs::table.find(&id);
    let updated = if stored_expiry == Some(expiry) {
        // SQLite rewrites an index's entry whenever its column is set, even to the value it
        // holds: leaving the expiry out spares most uploads a page of the expiry index.
        let update = diesel::update(row).set(content);
        on_backend!(&mut *conn, |c| update.execute(c))?
    } else {
        let update =
            diesel::update(row).set((content, published_configs::key_expires_at.eq(expiry)));
        on_backend!(&mut *conn, |c| update.execute(c))?
    };
    if updated == 0 {
        let insert = diesel::insert_into(published_configs::table).values((
            published_configs::service_id.eq(&id),
            content,
            published_configs::key_expires_at.eq(expiry),
        ));
        on_backend!(conn, |c| insert.execute(c))?;
    }
    Ok(())
}

/// How many services the customer has.
fn services_held(conn: &mut Db, customer_id: Uuid) -> Res<u64> {
    let held: i64 = services::table
        .filter(services::customer_id.eq(id_text(customer_id)))
        .count()
        .get_result(conn)?;
    Ok(u64::try_from(held).unwrap_or(0))
}

/// How many anonymous services are live at `now`.
fn live_anonymous_at(conn: &mut Db, now: OffsetDateTime) -> Res<u64> {
    let live: i64 = services::table
        .filter(services::customer_id.is_null())
        .filter(services::expires_at.gt(millis(now)))
        .count()
        .get_result(conn)?;
    Ok(u64::try_from(live).unwrap_or(0))
}

impl ServiceStore for Store {
    fn create_service(
        &self,
        service: &Service,
        secret: Option<&CredentialRecord>,
        ceiling: Ceiling,
        event: &AuditEvent,
    ) -> StoreResult<()> {
        self.write(Some(event), |conn, changed| {
            // Writers are serialised (`Store::write`): the count and the insert are one step.
            if ceiling != Ceiling::NONE {
                let held = match service.customer_id {
                    Some(customer) => services_held(conn, customer)?,
                    None => live_anonymous_at(conn, service.created_at)?,
                };
                if !ceiling.admits(held) {
                    return Err(StoreError::CeilingReached(ceiling.0).into());
                }
            }
            let id = id_text(service.id);
            let subdomain = service.subdomain.to_ascii_lowercase();
            // A service deleted a moment ago under this name published the issuer's last
            // version ([`history`]).
            let removed = subdomain_removals::table
                .find(&subdomain)
                .select(subdomain_removals::removed_at)
                .get_result::<i64>(conn)
                .optional()?;
            diesel::insert_into(services::table)
                .values((
                    services::id.eq(&id),
                    services::customer_id.eq(service.customer_id.map(id_text)),
                    services::subdomain.eq(&subdomain),
                    services::title.eq(&service.title),
                    services::description.eq(&service.description),
                    services::created_at.eq(millis(service.created_at)),
                    services::expires_at.eq(service.expires_at.map(millis)),
                    services::config_removed_at.eq(removed),
                ))
                .execute(conn)?;
            if let Some(secret) = secret {
                diesel::insert_into(credentials::table)
                    .values((
                        credentials::lookup_id.eq(&secret.lookup_id),
                        credentials::hash.eq(&secret.hash),
                        credentials::service_id.eq(Some(&id)),
                    ))
                    .execute(conn)?;
            }
            changed.push(Change::Service(service.id));
            Ok(())
        })
    }

    /// An id is tried first; a subdomain that happens to read as a UUID is still found.
    fn find_service(&self, subdomain_or_id: &str) -> StoreResult<Option<Service>> {
        // PostgreSQL text cannot hold NUL, so no subdomain has one; asking would be an error
        // there (a 503 for a client's typo), so the answer is known without asking.
        if subdomain_or_id.contains('\0') {
            return Ok(None);
        }
        self.read(|conn| {
            if let Ok(id) = Uuid::parse_str(subdomain_or_id) {
                if let Some(service) = by_id(conn, &id_text(id))? {
                    return Ok(Some(service));
                }
            }
            services::table
                .filter(services::subdomain.eq(subdomain_or_id.to_ascii_lowercase()))
                .filter(enabled!(services::customer_id))
                .select(ServiceRow::as_select())
                .get_result::<ServiceRow>(conn)
                .optional()?
                .map(ServiceRow::into_domain)
                .transpose()
        })
    }

    fn service(&self, id: Uuid) -> StoreResult<Option<Service>> {
        self.read(|conn| by_id(conn, &id_text(id)))
    }

    fn services_of(&self, customer_id: Uuid) -> StoreResult<Vec<Service>> {
        self.read(|conn| {
            let rows = services::table
                .filter(services::customer_id.eq(id_text(customer_id)))
                .order((services::created_at, services::id))
                .select(ServiceRow::as_select())
                .load::<ServiceRow>(conn)?;
            readable("service", rows, ServiceRow::into_domain)
        })
    }

    /// Answers with the entries of `subdomains` as given (first occurrence, input order) whose
    /// lower-case form names a service of the customer.
    fn owned_subdomains(
        &self,
        customer_id: Uuid,
        subdomains: &[String],
    ) -> StoreResult<Vec<String>> {
        if subdomains.is_empty() {
            return Ok(Vec::new());
        }
        self.read(|conn| {
            let wanted: Vec<String> = subdomains
                .iter()
                .map(|s| s.to_ascii_lowercase())
                .collect::<HashSet<_>>()
                .into_iter()
                .collect();
            let mut owned = HashSet::new();
            for chunk in wanted.chunks(IN_CHUNK) {
                owned.extend(
                    services::table
                        .filter(services::customer_id.eq(id_text(customer_id)))
                        .filter(services::subdomain.eq_any(chunk))
                        .select(services::subdomain)
                        .load::<String>(conn)?,
                );
            }
            let mut seen = HashSet::new();
            Ok(subdomains
                .iter()
                .filter(|s| owned.contains(&s.to_ascii_lowercase()) && seen.insert(s.as_str()))
                .cloned()
                .collect())
        })
    }

    fn update_service(
        &self,
        before: &Service,
        service: &Service,
        event: &AuditEvent,
    ) -> StoreResult<Result<(), Service>> {
        self.write(Some(event), |conn, changed| {
            let id = id_text(service.id);
            let stored = by_id(conn, &id)?.ok_or(StoreError::NotFound)?;
            // Writers are serialised, so this read and the write are one step.
            if (&stored.title, &stored.description) != (&before.title, &before.description) {
                return Ok(Err(stored));
            }
            if (&stored.title, &stored.description) == (&service.title, &service.description) {
                return Ok(Ok(()));
            }
            diesel::update(services::table.find(&id))
                .set((
                    services::title.eq(&service.title),
                    services::description.eq(&service.description),
                ))
                .execute(conn)?;
            changed.push(Change::Service(service.id));
            Ok(Ok(()))
        })
    }

    fn delete_service(&self, id: Uuid, event: &AuditEvent) -> StoreResult<bool> {
        self.write(Some(event), |conn, changed| {
            // Its configuration, secret and domain go with it (ON DELETE CASCADE); the HTTP-01
            // answers of the name it holds are kept by name.
            crate::domains::forget_challenges_of(conn, &[id_text(id)])?;
            // Its purge record has no key left to wait for it.
            diesel::delete(purges::table.filter(purges::service_id.eq(id_text(id))))
                .execute(conn)?;
            let held = (services::table.find(id_text(id)))
                .select((services::subdomain, services::customer_id))
                .get_result::<(String, Option<String>)>(conn)
                .optional()?;
            let deleted = diesel::delete(services::table.find(id_text(id))).execute(conn)?;
            if let Some((subdomain, customer)) = held.filter(|_| deleted > 0) {
                // An anonymous service's random name is never taken again.
                if customer.is_some() {
                    note_removals(conn, &[subdomain], event.at)?;
                }
                changed.push(Change::Service(id));
            }
            Ok(deleted > 0)
        })
    }

    /// A corrupt row is left out (and stays: nothing can name it for deletion), so a batch can
    /// come back shorter than `limit` while more are due.
    fn expired_anonymous(&self, now: OffsetDateTime, limit: usize) -> StoreResult<Vec<Service>> {
        self.read(|conn| {
            let rows = services::table
                .filter(services::customer_id.is_null())
                .filter(services::expires_at.le(millis(now)))
                .order(services::expires_at)
                .limit(i64::try_from(limit).unwrap_or(i64::MAX))
                .select(ServiceRow::as_select())
                .load::<ServiceRow>(conn)?;
            readable("anonymous service", rows, ServiceRow::into_domain)
        })
    }

    fn next_anonymous_expiry(
        &self,
        after: OffsetDateTime,
        until: OffsetDateTime,
    ) -> StoreResult<Option<OffsetDateTime>> {
        self.read(|conn| {
            let next: Option<i64> = services::table
                .filter(services::customer_id.is_null())
                .filter(services::expires_at.gt(millis(after)))
                .filter(services::expires_at.le(millis(until)))
                .select(diesel::dsl::min(services::expires_at))
                .get_result(conn)?;
            next.map(instant).transpose()
        })
    }

    fn count_services_of(&self, customer_id: Uuid) -> StoreResult<u64> {
        self.read(|conn| services_held(conn, customer_id))
    }

    fn live_anonymous(&self, now: OffsetDateTime) -> StoreResult<u64> {
        self.read(|conn| live_anonymous_at(conn, now))
    }

    fn put_config(&self, config: &PublishedConfig, event: &AuditEvent) -> StoreResult<()> {
        self.write(Some(event), |conn, changed| {
            if !exists(conn, &id_text(config.service_id))? {
                return Err(StoreError::NotFound.into());
            }
            write_config(conn, config, None)?;
            changed.push(Change::Service(config.service_id));
            Ok(())
        })
    }

    fn update_config(
        &self,
        service_id: Uuid,
        make: &mut dyn FnMut(Option<PublishedConfig>) -> Option<PublishedConfig>,
        event: &AuditEvent,
    ) -> StoreResult<bool> {
        self.write(Some(event), |conn, changed| {
            let id = id_text(service_id);
            if !exists(conn, &id)? {
                return Err(StoreError::NotFound.into());
            }
            let query = published_configs::table.find(&id);
            let row = on_backend!(&mut *conn, |c| query.get_result::<ConfigRow>(c)).optional()?;
            let stored_expiry = row.as_ref().map(ConfigRow::key_expires_at);
            let current = row.map(ConfigRow::into_domain).transpose()?;
            let history = history(conn, &id, current.as_ref())?;
            let Some(mut config) = make(current) else {
                return Ok(false);
            };
            config = VersionHistory::date(history.as_ref(), config);
            write_config(conn, &config, stored_expiry)?;
            changed.push(Change::Service(service_id));
            Ok(true)
        })
    }

    fn configs_with_expired_keys(
        &self,
        now: OffsetDateTime,
        limit: usize,
    ) -> StoreResult<Vec<Uuid>> {
        self.read(|conn| {
            let ids = published_configs::table
                .filter(published_configs::key_expires_at.le(millis(now)))
                .order(published_configs::key_expires_at)
                .limit(i64::try_from(limit).unwrap_or(i64::MAX))
                .select(published_configs::service_id)
                .load::<String>(conn)?;
            readable("published configuration", ids, |id| crate::rows::uuid(&id))
        })
    }

    fn config(&self, service_id: Uuid) -> StoreResult<Option<PublishedConfig>> {
        self.read(|conn| {
            published_configs::table
                .find(id_text(service_id))
                .get_result::<ConfigRow>(conn)
                .optional()?
                .map(ConfigRow::into_domain)
                .transpose()
        })
    }

    fn delete_config(
        &self,
        service_id: Uuid,
        keep: &dyn Fn(&PublishedConfig) -> bool,
        event: &AuditEvent,
    ) -> StoreResult<bool> {
        let id = id_text(service_id);
        self.write(Some(event), |conn, changed| {
            let stored = (published_configs::table.find(&id))
                .get_result::<ConfigRow>(conn)
                .optional()?;
            match stored.map(ConfigRow::into_domain).transpose()? {
                Some(config) if !keep(&config) => {}
                _ => return Ok(false),
            }
            remove_config(conn, &id, event.at)?;
            changed.push(Change::Service(service_id));
            Ok(true)
        })
    }

    /// One indexed read (the unique, lower-case subdomain), services joined with their
    /// configuration: what the public path reads for a subdomain that is not in memory. A row
    /// that cannot be read back is left out (`None`) and logged, as lists leave it out.
    fn published_by_subdomain(&self, subdomain: &str) -> StoreResult<Option<Publication>> {
        self.read(|conn| published_by_subdomain(conn, subdomain))
    }
}

/// The public path's read of an enabled service's configuration by subdomain, with what it needs
/// of the service (a macro: the query's type is diesel's to name, and a test checks its plan).
macro_rules! published_read {
    ($subdomain:expr) => {
        services::table
            .inner_join(published_configs::table)
            .filter(services::subdomain.eq($subdomain))
            .filter(enabled!(services::customer_id))
            .select((
                (services::subdomain, services::expires_at),
                (
                    published_configs::service_id,
                    published_configs::openid_configuration,
                    published_configs::jwks,
                    published_configs::updated_at,
                    // Read only where it is parsed (`ConfigRow::into_publication`).
                    diesel::dsl::case_when(
                        published_configs::key_expires_at.is_not_null(),
                        published_configs::key_state,
                    )
                    .otherwise(""),
                    published_configs::key_expires_at,
                    published_configs::previous_change_at,
                    published_configs::discovery_changed_at,
                    published_configs::jwks_changed_at,
                ),
            ))
    };
}

/// The published service whose subdomain is `subdomain`, with its configuration: one indexed
/// read (`ServiceStore::published_by_subdomain`, and in place `Database::published_by_subdomain_now`).
/// Of the service it reads only what the index `services_published` holds: the service's row
/// is not visited (a first fetch of each of many issuers reads pages no cache holds).
pub(crate) fn published_by_subdomain(conn: &mut Db, subdomain: &str) -> Res<Option<Publication>> {
    // PostgreSQL text cannot hold NUL, so no subdomain has one (see `find_service`).
    if subdomain.contains('\0') {
        return Ok(None);
    }
    let query = published_read!(subdomain.to_ascii_lowercase());
    let row = on_backend!(conn, |c| query
        .get_result::<(HostRow, ConfigRow)>(c)
        .optional())?;
    Ok(readable("published service", row, |(host, config)| {
        config.into_publication(host)
    })?
    .pop())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Store;
    use diesel::query_builder::QueryId;

    #[derive(QueryableByName)]
    struct Step {
        #[diesel(sql_type = diesel::sql_types::Text)]
        detail: String,
    }

    /// What SQLite plans for a read of one enabled service by its subdomain.
    fn plan() -> Vec<String> {
        plan_of(
            services::table
                .filter(services::subdomain.eq("api-acme"))
                .filter(enabled!(services::customer_id))
                .select(services::id),
        )
    }

    /// What SQLite plans for `query`, whose one bind is a subdomain.
    fn plan_of<Q>(query: Q) -> Vec<String>
    where
        Q: diesel::query_builder::QueryFragment<diesel::sqlite::Sqlite>,
    {
        let store = Store::connect("sqlite::memory:").unwrap();
        store.migrate().unwrap();
        let sql = diesel::debug_query::<diesel::sqlite::Sqlite, _>(&query).to_string();
        let sql = sql.split(" -- binds").next().unwrap().to_owned();
        store
            .read(|conn| {
                let Db::Sqlite(conn) = conn else {
                    unreachable!("a SQLite store")
                };
                let steps = diesel::sql_query(format!("EXPLAIN QUERY PLAN {sql}"))
                    .bind::<diesel::sql_types::Text, _>("api-acme")
                    .load::<Step>(conn)?;
                Ok(steps.into_iter().map(|s| s.detail).collect())
            })
            .unwrap()
    }

    #[test]
    fn a_services_customer_is_looked_up_by_its_key_not_scanned() {
        let plan = plan();
        assert!(
            plan.iter()
                .any(|step| step.starts_with("SEARCH customers USING")),
            "{plan:?}"
        );
        assert!(
            !plan.iter().any(|step| step.contains("SCAN customers")),
            "{plan:?}"
        );
    }

    #[test]
    fn the_public_read_finds_the_service_in_one_index_without_its_row() {
        let plan = plan_of(published_read!("api-acme"));
        assert!(
            plan.iter().any(|step| step
                == "SEARCH services USING COVERING INDEX services_published (subdomain=?)"),
            "{plan:?}"
        );
        assert!(
            plan.iter()
                .any(|step| step.starts_with("SEARCH published_configs USING")),
            "{plan:?}"
        );
    }

    #[test]
    fn a_read_of_enabled_services_stays_in_the_connections_statement_cache() {
        // Diesel keeps a prepared statement by its query's type only when the type fixes the
        // SQL; a query with SQL text in it is prepared again at every execution.
        fn kept<Q: QueryId>(_: &Q) -> bool {
            Q::HAS_STATIC_QUERY_ID
        }
        let query = services::table
            .filter(services::subdomain.eq("api-acme"))
            .filter(enabled!(services::customer_id));
        assert!(kept(&query));
        assert!(kept(&published_read!("api-acme")), "the public path's read");
        let text = services::table.filter(diesel::dsl::sql::<diesel::sql_types::Bool>("1"));
        assert!(!kept(&text), "the test can tell");
    }
}
