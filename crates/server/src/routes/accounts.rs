//! `/service-accounts…`: parse, call the use case of `registry_domain::app::accounts`, shape
//! the answer (tokens are shown once, with `Cache-Control: no-store`).

use crate::body::{read_json, Bodiless, Fields};
use crate::caller::Manager;
use crate::problem::{ApiError, ApiResult};
use crate::state::AppState;
use crate::views;
use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use registry_domain::app::accounts::{self, CreateAccount, NewToken, UpdateAccount, MAX_NAME};
use registry_domain::text::TextKind;
use registry_domain::Violation;
use serde_json::Value;

/// Remembers a token just made, so that its first use skips the slow hash.
fn remember(state: &AppState, token: &NewToken) {
    let now = state.now();
    state
        .auth
        .tokens
        .remember(&token.lookup_id, &token.hash, &token.plaintext, now);
}

fn with_warnings(mut body: Value, warnings: Vec<String>) -> Value {
    if !warnings.is_empty() {
        body["warnings"] = warnings.into();
    }
    body
}

/// The `name` and `policy` of an account body, with the problems of its shape (a use case
/// adds the policy's own, so that one 400 reports them all).
async fn account_body(
    req: &HttpRequest,
    payload: web::Payload,
    state: &AppState,
) -> ApiResult<(Option<String>, Option<Value>, Vec<Violation>)> {
    let body = read_json(req, payload, state.settings.max_body_bytes).await?;
    let mut fields = Fields::new(body.as_ref(), &["name", "policy"])?;
    let name = fields.text("name", false, MAX_NAME, TextKind::Line);
    let policy = fields.raw("policy").cloned();
    Ok((name, policy, fields.problems))
}

/// `POST /service-accounts`.
pub async fn create(
    Manager(caller): Manager,
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let (name, policy, problems) = account_body(&req, payload, &state).await?;
    let command = CreateAccount {
        name,
        policy,
        problems,
    };
    let now = state.now();
    let created = state
        .write(move |registry| accounts::create(registry, &caller, command, now))
        .await?;
    // The issuers it trusts are in this node's trust index before the answer.
    let mut body = views::account(&created.account);
    if let Some(token) = &created.token {
        body["token"] = token.plaintext.clone().into();
        remember(&state, token);
    }
    let location = format!(
        "{}/service-accounts/{}",
        state.settings.base(),
        created.account.id
    );
    Ok(HttpResponse::Created()
        .insert_header((header::LOCATION, location))
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(with_warnings(body, created.warnings)))
}

/// `GET /service-accounts`: never with tokens.
pub async fn list(Manager(caller): Manager, state: web::Data<AppState>) -> ApiResult<HttpResponse> {
    let accounts = state
        .read(move |registry| accounts::list(registry, &caller))
        .await?;
    Ok(HttpResponse::Ok().json(accounts.iter().map(views::account).collect::<Vec<_>>()))
}

/// `GET /service-accounts/{id}`.
pub async fn get(
    Manager(caller): Manager,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let account = state
        .read(move |registry| accounts::get(registry, &caller, &path))
        .await?;
    Ok(HttpResponse::Ok().json(views::account(&account)))
}

/// `PATCH /service-accounts/{id}`: name and/or policy; the kind never changes. The account is
/// found (404, 403) before the body is read.
pub async fn patch(
    Manager(caller): Manager,
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let found = caller.clone();
    let account = state
        .read(move |registry| accounts::managed(registry, &found, &path))
        .await?;
    let (name, policy, problems) = account_body(&req, payload, &state).await?;
    let command = UpdateAccount {
        name,
        policy,
        problems,
    };
    let now = state.now();
    let updated = state
        .write(move |registry| accounts::update(registry, &caller, account, command, now))
        .await?;
    Ok(HttpResponse::Ok().json(with_warnings(
        views::account(&updated.account),
        updated.warnings,
    )))
}

/// `DELETE /service-accounts/{id}`: its token stops working at once.
pub async fn delete(
    Bodiless(Manager(caller)): Bodiless<Manager>,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let now = state.now();
    state
        .write(move |registry| accounts::delete(registry, &caller, &path, now))
        .await?;
    Ok(HttpResponse::NoContent().finish())
}

/// `POST /service-accounts/{id}/regenerate-token`: the old token fails from now on.
pub async fn regenerate_token(
    Bodiless(Manager(caller)): Bodiless<Manager>,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    // Until its write has settled on this replica and its answer is made: a call that
    // overlaps it would otherwise replace the token it answers. Keyed by the caller's customer
    // too, so that no one else's calls can hold a customer's account.
    let _in_flight = match (path.parse::<uuid::Uuid>(), caller.customer_id()) {
        (Ok(id), Some(customer)) => {
            Some(state.regenerations.enter((customer, id)).ok_or_else(|| {
                ApiError::Conflict(
                    "the token is being regenerated by another call: use the token that call \
                     answers"
                        .into(),
                )
            })?)
        }
        _ => None,
    };
    let now = state.now();
    let regenerated = state
        .write(move |registry| accounts::regenerate_token(registry, &caller, &path, now))
        .await?;
    remember(&state, &regenerated.token);
    Ok(HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(serde_json::json!({
            "id": regenerated.account.id.to_string(),
            "token": regenerated.token.plaintext,
        })))
}
