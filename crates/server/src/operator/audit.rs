//! `registry audit` (docs/api.md, "Audit trail and last use"): an operator's read of the audit
//! trail. The events themselves are written by the storage calls that make the changes, in their
//! transactions.

use anyhow::Context;
use registry_domain::app::{audit, Registry};
use registry_domain::audit::{Action, AuditQuery, MAX_PAGE};
use time::OffsetDateTime;

/// `registry audit`: every event of the trail asked for, newest first, one JSON object a line
/// on stdout (`crate::stdout`: a reader that goes away ends it quietly).
pub fn print_trail(
    registry: &Registry,
    tenant: Option<&str>,
    action: Option<Action>,
    since: Option<OffsetDateTime>,
) -> anyhow::Result<()> {
    let trail = audit::operator_trail(registry, tenant).map_err(|e| match e {
        registry_domain::app::AppError::NotFound(why) => anyhow::anyhow!(why),
        other => anyhow::Error::new(other).context("could not read the customers"),
    })?;
    let mut query = AuditQuery {
        trail,
        cursor: None,
        action,
        since,
        limit: MAX_PAGE,
    };
    loop {
        let page =
            audit::operator_page(registry, &query).context("could not read the audit trail")?;
        for event in &page.events {
            crate::stdout::line(event.to_json());
        }
        match page.next {
            Some(next) => query.cursor = Some(next),
            None => return Ok(()),
        }
    }
}
