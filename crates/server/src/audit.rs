//! `registry audit` (docs/api.md, "Audit trail and last use"): an operator's read of the audit
//! trail. The events themselves are written by the storage calls that make the changes, in their
//! transactions.

use anyhow::Context;
use registry_domain::audit::{Action, AuditQuery, Trail, MAX_PAGE};
use registry_domain::ports::{AuditLog, CustomerStore};
use time::OffsetDateTime;

/// `registry audit`: every event of the trail asked for, newest first, one JSON object a line.
pub fn print_trail<S: AuditLog + CustomerStore>(
    store: &S,
    tenant: Option<&str>,
    action: Option<Action>,
    since: Option<OffsetDateTime>,
    out: &mut impl std::io::Write,
) -> anyhow::Result<()> {
    let trail = match tenant {
        Some(tenant) => {
            let customer = store
                .customer_by_tenant(tenant)
                .context("could not read the customers")?
                .with_context(|| format!("no customer has the tenant suffix {tenant:?}"))?;
            Trail::Customer(customer.id)
        }
        None => Trail::Anonymous,
    };
    let mut query = AuditQuery {
        trail,
        cursor: None,
        action,
        since,
        limit: MAX_PAGE,
    };
    loop {
        let page = store
            .audit_events(&query)
            .context("could not read the audit trail")?;
        for event in &page.events {
            writeln!(out, "{}", event.to_json())?;
        }
        match page.next {
            Some(next) => query.cursor = Some(next),
            None => return Ok(()),
        }
    }
}
