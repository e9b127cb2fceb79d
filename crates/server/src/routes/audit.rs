//! `GET /audit-events`: the customer's audit trail, newest first (DECISIONS §13).

use crate::problem::{ApiError, ApiResult};
use crate::routes::accounts::manager;
use crate::state::AppState;
use actix_web::{web, HttpRequest, HttpResponse};
use registry_domain::audit::{
    Action, AuditQuery, BadCursor, Cursor, Trail, DEFAULT_PAGE, MAX_PAGE,
};
use serde::Deserialize;
use serde_json::json;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// The query string, as text: each parameter is checked with a sentence of its own.
#[derive(Debug, Deserialize)]
pub struct Params {
    limit: Option<String>,
    cursor: Option<String>,
    action: Option<String>,
    since: Option<String>,
}

fn bad(parameter: &str, why: impl std::fmt::Display) -> ApiError {
    ApiError::BadRequest(format!("query parameter {parameter}: {why}"))
}

fn query_of(params: &Params, trail: Trail) -> ApiResult<AuditQuery> {
    let limit = match params.limit.as_deref() {
        None => DEFAULT_PAGE,
        Some(text) => text
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_PAGE).contains(n))
            .ok_or_else(|| bad("limit", format!("must be an integer from 1 to {MAX_PAGE}")))?,
    };
    let cursor = params
        .cursor
        .as_deref()
        .map(Cursor::decode)
        .transpose()
        .map_err(|e| bad("cursor", e))?;
    let action = params
        .action
        .as_deref()
        .map(str::parse::<Action>)
        .transpose()
        .map_err(|e| bad("action", e))?;
    let since = params
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

/// `GET /audit-events`: for callers whose patterns include `"*"`; only their customer's events.
pub async fn list(req: HttpRequest, state: web::Data<AppState>) -> ApiResult<HttpResponse> {
    let caller = manager(&state, &req).await?;
    let params = web::Query::<Params>::from_query(req.query_string())
        .map_err(|e| ApiError::BadRequest(format!("query string: {e}")))?;
    let query = query_of(&params, Trail::Customer(caller.customer_id()))?;
    let cursor_given = query.cursor.is_some();
    let page = match state.db(move |s| s.audit_events(&query)).await {
        // The cursor names no event of this customer's (DECISIONS §17): a 400, like a forged one.
        Err(ApiError::NotFound(_)) if cursor_given => return Err(bad("cursor", BadCursor)),
        page => page?,
    };
    let events: Vec<_> = page.events.iter().map(|e| e.to_json()).collect();
    Ok(HttpResponse::Ok().json(json!({
        "events": events,
        "nextCursor": page.next.map(Cursor::encode),
    })))
}
