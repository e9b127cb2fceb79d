//! The audit trail's server side (DECISIONS §13): the event of a change made over HTTP, and the
//! request id it carries. The events themselves are written by the storage calls that make the
//! changes, in their transactions.

use anyhow::Context;
use registry_domain::audit::{Action, AuditQuery, Trail, MAX_PAGE};
use registry_domain::ports::{AuditLog, CustomerStore};
use time::OffsetDateTime;

tokio::task_local! {
    /// The `X-Request-Id` of the API request being handled: `observe` sets it around the
    /// handler, where audit events and refusal records are built. A task-local rather than a
    /// request extension, which cost every federated read about 1 % (docs/benchmarks.md).
    pub static REQUEST_ID: actix_web::http::header::HeaderValue;
}

/// The `X-Request-Id` of the API request being handled, if `observe` gave it one.
pub fn request_id() -> Option<String> {
    REQUEST_ID
        .try_with(|id| id.to_str().ok().map(str::to_owned))
        .ok()
        .flatten()
}

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
