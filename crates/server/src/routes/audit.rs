//! `GET /audit-events`: the customer's audit trail, newest first (docs/api.md, "Audit trail and
//! last use"), over `registry_domain::app::audit`.

use crate::caller::Auditor;
use crate::problem::ApiResult;
use crate::state::AppState;
use actix_web::{web, HttpResponse};
use registry_domain::app::audit::{self, ListEvents};
use registry_domain::audit::Cursor;
use serde::Deserialize;
use serde_json::json;

/// The query string, as text: the use case checks each parameter with a sentence of its own.
#[derive(Debug, Deserialize)]
pub struct Params {
    limit: Option<String>,
    cursor: Option<String>,
    action: Option<String>,
    since: Option<String>,
}

/// `GET /audit-events`: for callers whose patterns include `"*"`; only their customer's events.
pub async fn list(
    Auditor(caller): Auditor,
    params: web::Query<Params>,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let params = params.into_inner();
    let command = ListEvents {
        limit: params.limit,
        cursor: params.cursor,
        action: params.action,
        since: params.since,
    };
    let page = state
        .read(move |registry| audit::list(registry, &caller, command))
        .await?;
    let events: Vec<_> = page.events.iter().map(|e| e.to_json()).collect();
    Ok(HttpResponse::Ok().json(json!({
        "events": events,
        "nextCursor": page.next.map(Cursor::encode),
    })))
}
