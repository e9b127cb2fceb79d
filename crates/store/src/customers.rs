//! [`CustomerStore`] on [`Store`].

use crate::accounts::insert_account;
use crate::rows::{id_text, millis, CustomerRow};
use crate::schema::customers;
use crate::Store;
use diesel::prelude::*;
use registry_domain::audit::AuditEvent;
use registry_domain::ports::{Change, CredentialRecord, CustomerStore, StoreResult};
use registry_domain::{Customer, Plan, ServiceAccount};
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
}
