//! The customer's audit trail, newest first (docs/api.md, "Audit trail and last use"): `GET
//! /audit-events`.

use crate::app::{AppError, Caller, Registry};
use crate::audit::{
    Action, AuditPage, AuditQuery, BadCursor, Cursor, Trail, DEFAULT_PAGE, MAX_PAGE,
};
use crate::StoreError;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// `GET /audit-events`: the query parameters as the client wrote them; each is checked with a
/// sentence of its own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListEvents {
    /// How many events, from 1 to [`MAX_PAGE`] ([`DEFAULT_PAGE`] without it).
    pub limit: Option<String>,
    /// A `nextCursor` of a previous page.
    pub cursor: Option<String>,
    /// Only this action (e.g. `account.create`).
    pub action: Option<String>,
    /// Only events at or after this RFC 3339 time.
    pub since: Option<String>,
}

/// The 400 of a query parameter, with why.
fn bad(parameter: &str, why: impl std::fmt::Display) -> AppError {
    AppError::BadRequest(format!("query parameter {parameter}: {why}"))
}

impl ListEvents {
    /// The query of `trail` these parameters ask for, or the 400 of the first bad one.
    pub fn query(&self, trail: Trail) -> Result<AuditQuery, AppError> {
        let limit = match self.limit.as_deref() {
            None => DEFAULT_PAGE,
            Some(text) => text
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=MAX_PAGE).contains(n))
                .ok_or_else(|| bad("limit", format!("must be an integer from 1 to {MAX_PAGE}")))?,
        };
        let cursor = self
            .cursor
            .as_deref()
            .map(Cursor::decode)
            .transpose()
            .map_err(|e| bad("cursor", e))?;
        let action = self
            .action
            .as_deref()
            .map(str::parse::<Action>)
            .transpose()
            .map_err(|e| bad("action", e))?;
        let since = self
            .since
            .as_deref()
            .map(|t| OffsetDateTime::parse(t, &Rfc3339))
            .transpose()
            .map_err(|_| {
                bad(
                    "since",
                    "must be an RFC 3339 time such as 2026-11-23T10:00:00Z",
                )
            })?;
        Ok(AuditQuery {
            trail,
            cursor,
            action,
            since,
            limit,
        })
    }
}

/// A page of the caller's customer's trail; for callers that cover every service (their
/// patterns include `"*"`). A cursor that names no event of this customer's is a 400, like a forged one
/// (docs/api.md, "Audit trail and last use").
pub fn list(
    registry: &Registry,
    caller: &Caller,
    command: ListEvents,
) -> Result<AuditPage, AppError> {
    caller.covers_every_service("reading the audit trail")?;
    let query = command.query(Trail::Customer(caller.customer()?))?;
    match registry.store.audit_events(&query) {
        Err(StoreError::NotFound) if query.cursor.is_some() => Err(bad("cursor", BadCursor)),
        page => Ok(page?),
    }
}

/// The trail an operator reads (`registry audit`): one customer's, by its tenant suffix, or the
/// anonymous services' (`None`). No caller: the operator's access is the database's.
pub fn operator_trail(registry: &Registry, tenant: Option<&str>) -> Result<Trail, AppError> {
    let Some(tenant) = tenant else {
        return Ok(Trail::Anonymous);
    };
    let customer = (registry.store.customer_by_tenant(tenant)?).ok_or_else(|| {
        AppError::NotFound(format!("no customer has the tenant suffix {tenant:?}"))
    })?;
    Ok(Trail::Customer(customer.id))
}

/// A page of the trail `query` names, for the operator (see [`operator_trail`]).
pub fn operator_page(registry: &Registry, query: &AuditQuery) -> Result<AuditPage, AppError> {
    Ok(registry.store.audit_events(query)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::accounts::{self, CreateAccount};
    use crate::app::testing::{add_account, caller, registry};
    use crate::audit::Resource;
    use crate::Plan;
    use serde_json::json;
    use time::macros::datetime;
    use uuid::Uuid;

    const NOW: OffsetDateTime = datetime!(2026-11-23 10:00 UTC);

    fn params(limit: Option<&str>, cursor: Option<&str>, action: Option<&str>) -> ListEvents {
        ListEvents {
            limit: limit.map(Into::into),
            cursor: cursor.map(Into::into),
            action: action.map(Into::into),
            since: None,
        }
    }

    fn refusal(command: ListEvents) -> String {
        match command.query(Trail::Anonymous) {
            Err(AppError::BadRequest(why)) => why,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn each_parameter_is_checked_with_a_sentence_of_its_own() {
        let query = ListEvents::default().query(Trail::Anonymous).unwrap();
        assert_eq!(query.limit, DEFAULT_PAGE);
        assert_eq!(query.trail, Trail::Anonymous);
        let most = MAX_PAGE.to_string();
        assert_eq!(
            params(Some(&most), None, None)
                .query(Trail::Anonymous)
                .unwrap()
                .limit,
            MAX_PAGE
        );
        let limit = format!("query parameter limit: must be an integer from 1 to {MAX_PAGE}");
        assert_eq!(refusal(params(Some("0"), None, None)), limit);
        assert_eq!(
            refusal(params(Some(&(MAX_PAGE + 1).to_string()), None, None)),
            limit
        );
        assert_eq!(refusal(params(Some("ten"), None, None)), limit);
        let cursor = refusal(params(None, Some("garbage!"), None));
        assert_eq!(cursor, format!("query parameter cursor: {BadCursor}"));
        let action = refusal(params(None, None, Some("account.explode")));
        assert!(
            action.starts_with("query parameter action: unknown action"),
            "{action}"
        );
        let since = ListEvents {
            since: Some("yesterday".into()),
            ..ListEvents::default()
        };
        assert!(refusal(since).starts_with("query parameter since: must be an RFC 3339 time"));
        let since = ListEvents {
            since: Some("2026-11-23T09:00:00Z".into()),
            ..ListEvents::default()
        };
        let query = since.query(Trail::Anonymous).unwrap();
        assert_eq!(query.since, Some(datetime!(2026-11-23 09:00 UTC)));
    }

    #[test]
    fn the_trail_is_the_caller_s_customer_s_newest_first() {
        let (registry, customer, admin) = registry(Plan::Free, NOW);
        let admin = caller(admin);
        let command = CreateAccount {
            name: Some("ci".into()),
            policy: Some(json!({"kind": "static", "services": ["*"]})),
            problems: Vec::new(),
        };
        let created = accounts::create(&registry, &admin, command, NOW).unwrap();
        let page = list(&registry, &admin, ListEvents::default()).unwrap();
        assert!(page
            .events
            .iter()
            .all(|e| e.customer_id == Some(customer.id)));
        assert_eq!(page.events[0].action, Action::AccountCreate);
        assert_eq!(
            page.events[0].resource,
            Resource::account(created.account.id)
        );
        assert!(page.events.len() >= 2, "the customer's own creation too");
        let only = params(None, None, Some("customer.create"));
        let page = list(&registry, &admin, only).unwrap();
        assert!(page
            .events
            .iter()
            .all(|e| e.action == Action::CustomerCreate));
        assert_eq!(page.events.len(), 1);
        let first = params(Some("1"), None, None);
        let page = list(&registry, &admin, first).unwrap();
        assert_eq!(page.events.len(), 1);
        let next = page.next.expect("more follow").encode();
        let rest = list(&registry, &admin, params(None, Some(&next), None)).unwrap();
        assert_eq!(rest.events[0].action, Action::CustomerCreate);
    }

    #[test]
    fn a_cursor_naming_no_event_of_this_customer_is_a_400() {
        let (registry, _, admin) = registry(Plan::Free, NOW);
        let forged = Cursor {
            after: Uuid::new_v4(),
        }
        .encode();
        let refused = list(&registry, &caller(admin), params(None, Some(&forged), None));
        assert_eq!(
            refused.unwrap_err(),
            AppError::BadRequest(format!("query parameter cursor: {BadCursor}"))
        );
    }

    #[test]
    fn only_callers_that_manage_accounts_read_the_trail() {
        let (registry, customer, _) = registry(Plan::Free, NOW);
        let policy = json!({"kind": "static", "services": ["api-*"]});
        let narrow = caller(add_account(&registry, &customer, policy, NOW));
        let refused = list(&registry, &narrow, ListEvents::default()).unwrap_err();
        assert!(matches!(refused, AppError::Forbidden(_)), "{refused:?}");
    }
}
