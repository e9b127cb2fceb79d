//! [`CustomerStore`] on [`Store`].

use crate::accounts::insert_account;
use crate::error::Res;
use crate::pool::Db;
use crate::rows::{id_text, millis, uuid, CustomerRow};
use crate::schema::{
    audit_events, customers, fetch_agents, fetch_counts, fetch_networks, key_readiness, purges,
    service_accounts, services,
};
use crate::Store;
use diesel::prelude::*;
use registry_domain::audit::AuditEvent;
use registry_domain::ports::{Change, CredentialRecord, CustomerStore, StoreResult};
use registry_domain::{Customer, Plan, ServiceAccount};
use time::OffsetDateTime;
use uuid::Uuid;

impl CustomerStore for Store {
    fn create_customer(
        &self,
        customer: &Customer,
        first_account: &ServiceAccount,
        token: &CredentialRecord,
        event: &AuditEvent,
    ) -> StoreResult<()> {
        self.write(Some(event), |conn, changed| {
            diesel::insert_into(customers::table)
                .values((
                    customers::id.eq(id_text(customer.id)),
                    customers::name.eq(&customer.name),
                    customers::tenant.eq(&customer.tenant),
                    customers::plan.eq(customer.plan.as_str()),
                    customers::created_at.eq(millis(customer.created_at)),
                ))
                .execute(conn)?;
            insert_account(conn, first_account, Some(token))?;
            changed.push(Change::Account(first_account.id));
            Ok(())
        })
    }

    fn customer(&self, id: Uuid) -> StoreResult<Option<Customer>> {
        self.read(|conn| {
            customers::table
                .find(id_text(id))
                .get_result::<CustomerRow>(conn)
                .optional()?
                .map(CustomerRow::into_domain)
                .transpose()
        })
    }

    fn customer_by_tenant(&self, tenant: &str) -> StoreResult<Option<Customer>> {
        self.read(|conn| {
            customers::table
                .filter(customers::tenant.eq(tenant))
                .get_result::<CustomerRow>(conn)
                .optional()?
                .map(CustomerRow::into_domain)
                .transpose()
        })
    }

    fn customers(&self) -> StoreResult<Vec<Customer>> {
        self.read(|conn| {
            customers::table
                .order((customers::created_at, customers::id))
                .load::<CustomerRow>(conn)?
                .into_iter()
                .map(CustomerRow::into_domain)
                .collect()
        })
    }

    fn set_plan(
        &self,
        tenant: &str,
        plan: Plan,
        event: &AuditEvent,
    ) -> StoreResult<Option<Customer>> {
        // A plan is no change of the change log (no cache holds it), so the event is written
        // here, in the transaction of the change, and only when the plan was another one. The
        // write still takes the log's lock, which orders the audit trail as writes commit.
        self.write(None, |conn, _| {
            let by_tenant = customers::table.filter(customers::tenant.eq(tenant));
            let Some(current) = by_tenant
                .select(customers::plan)
                .get_result::<String>(conn)
                .optional()?
            else {
                return Ok(None);
            };
            // Compared as stored: a row whose plan cannot be read is repaired by a new one.
            if current != plan.as_str() {
                diesel::update(by_tenant)
                    .set(customers::plan.eq(plan.as_str()))
                    .execute(conn)?;
                crate::audit::insert(conn, event)?;
            }
            by_tenant
                .get_result::<CustomerRow>(conn)?
                .into_domain()
                .map(Some)
        })
    }

    fn set_disabled(
        &self,
        tenant: &str,
        disabled_at: Option<OffsetDateTime>,
        event: &AuditEvent,
    ) -> StoreResult<Option<Customer>> {
        self.write(None, |conn, changed| {
            let by_tenant = customers::table.filter(customers::tenant.eq(tenant));
            let Some((id, current)) = by_tenant
                .select((customers::id, customers::disabled_at))
                .get_result::<(String, Option<i64>)>(conn)
                .optional()?
            else {
                return Ok(None);
            };
            if current.is_some() != disabled_at.is_some() {
                diesel::update(by_tenant)
                    .set(customers::disabled_at.eq(disabled_at.map(millis)))
                    .execute(conn)?;
                changed.extend(holdings(conn, &id)?);
                crate::audit::insert(conn, event)?;
            }
            by_tenant
                .get_result::<CustomerRow>(conn)?
                .into_domain()
                .map(Some)
        })
    }

    fn delete_customer(&self, tenant: &str, at: OffsetDateTime) -> StoreResult<bool> {
        self.write(None, |conn, changed| {
            let Some(id) = customers::table
                .filter(customers::tenant.eq(tenant))
                .select(customers::id)
                .get_result::<String>(conn)
                .optional()?
            else {
                return Ok(false);
            };
            changed.extend(holdings(conn, &id)?);
            diesel::delete(audit_events::table.filter(audit_events::customer_id.eq(&id)))
                .execute(conn)?;
            // The fetch evidence of its services (agents, networks, counts) goes at once, not
            // after its retention (docs/api.md, "Customer lifecycle"): no foreign key holds it.
            let services = services::table
                .filter(services::customer_id.eq(&id))
                .select(services::id);
            // A flush of fetch evidence in flight commits before the evidence below is
            // removed, and one after finds the services gone.
            crate::fetches::lock_evidence(conn, true)?;
            let held: Vec<(String, String)> = services::table
                .filter(services::customer_id.eq(&id))
                .select((services::id, services::subdomain))
                .load(conn)?;
            let (ids, subdomains): (Vec<String>, Vec<String>) = held.into_iter().unzip();
            crate::domains::forget_challenges_of(conn, &ids)?;
            crate::services::note_removals(conn, &subdomains, at)?;
            diesel::delete(
                fetch_networks::table.filter(fetch_networks::service_id.eq_any(services)),
            )
            .execute(conn)?;
            diesel::delete(fetch_agents::table.filter(fetch_agents::service_id.eq_any(services)))
                .execute(conn)?;
            diesel::delete(fetch_counts::table.filter(fetch_counts::service_id.eq_any(services)))
                .execute(conn)?;
            diesel::delete(key_readiness::table.filter(key_readiness::service_id.eq_any(services)))
                .execute(conn)?;
            diesel::delete(purges::table.filter(purges::service_id.eq_any(services)))
                .execute(conn)?;
            // Services, configurations, accounts and credentials go with it (ON DELETE CASCADE).
            diesel::delete(customers::table.find(&id)).execute(conn)?;
            Ok(true)
        })
    }
}

/// Every service and account of the customer `id`, as changes: what replicas must read again
/// when the customer is disabled, enabled or deleted.
fn holdings(conn: &mut Db, id: &str) -> Res<Vec<Change>> {
    let services = services::table
        .filter(services::customer_id.eq(id))
        .select(services::id)
        .load::<String>(conn)?;
    let accounts = service_accounts::table
        .filter(service_accounts::customer_id.eq(id))
        .select(service_accounts::id)
        .load::<String>(conn)?;
    let services = services.iter().map(|s| uuid(s).map(Change::Service));
    let accounts = accounts.iter().map(|a| uuid(a).map(Change::Account));
    services.chain(accounts).collect()
}
