//! Why was a token refused (DECISIONS §12): `POST /service-accounts/{id}/explain` judges a token
//! or a set of claims by the account's policy, and `GET /service-accounts/{id}/refusals` lists
//! the real requests refused after their signature verified. The same callers as the account's
//! other calls (§5): another customer's account is a 404, a caller without `"*"` a 403.

use crate::body::{read_json, Fields};
use crate::problem::{ApiError, ApiResult};
use crate::routes::accounts::{manager, owned_account};
use crate::state::AppState;
use actix_web::{web, HttpRequest, HttpResponse};
use registry_domain::policy::{Explanation, Reason, ReasonCode};
use registry_domain::refusal::{self, KEPT_FOR, KEPT_PER_ACCOUNT};
use registry_domain::{ServiceAccount, Violation};
use serde_json::Value;
use std::net::IpAddr;
use std::sync::Arc;

/// Longest token accepted (the verifier's own limit is lower).
const MAX_TOKEN: usize = 64 * 1024;

fn refused_token(code: ReasonCode, message: String) -> Explanation {
    Explanation {
        allowed: false,
        rule: None,
        reasons: vec![Reason {
            rule: None,
            pointer: None,
            code,
            message,
        }],
        hints: Vec::new(),
    }
}

/// A token judged like a real request: an issuer the account names, then keys, signature and
/// times, then the policy. The token is neither kept, logged nor echoed.
async fn explain_token(
    state: &AppState,
    account: &Arc<ServiceAccount>,
    token: &str,
    service: Option<String>,
    ip: Option<IpAddr>,
) -> ApiResult<String> {
    // As a real request: the keys of an issuer no rule names are never fetched. A token whose
    // issuer cannot be read fails verification before any fetch, with its precise code.
    if let Some(issuer) = state.verifier.unverified_issuer(token) {
        if !account.policy.issuers().contains(&issuer.as_str()) {
            return Ok(refused_token(
                ReasonCode::IssuerUnknown,
                format!("no rule of this service account names the issuer {issuer:?}"),
            )
            .to_json()
            .to_string());
        }
    }
    match crate::auth::verify_identity(state, token).await? {
        Ok(verified) => off_the_workers(account.clone(), Some(verified.claims), service, ip).await,
        Err(rejection) => Ok(refused_token(rejection.code, rejection.detail)
            .to_json()
            .to_string()),
    }
}

/// The policy's explanation as JSON text, computed on the blocking pool: with large array
/// claims it takes milliseconds, which the HTTP workers owe to every other request
/// (DECISIONS §17).
async fn off_the_workers(
    account: Arc<ServiceAccount>,
    claims: Option<serde_json::Map<String, Value>>,
    service: Option<String>,
    ip: Option<IpAddr>,
) -> ApiResult<String> {
    web::block(move || {
        account
            .policy
            .explain(claims.as_ref(), service.as_deref(), ip)
            .to_json()
            .to_string()
    })
    .await
    .map_err(|_| ApiError::Internal)
}

/// `POST /service-accounts/{id}/explain`: `{token, service?, ip?}` or `{claims, service?, ip?}`.
pub async fn explain(
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let caller = manager(&state, &req).await?;
    // Explaining costs more than any other read (every rule against every claim, reasons and
    // hints): a budget per customer (DECISIONS §17).
    state
        .explains
        .hit_key(caller.customer_id())
        .map_err(|retry| ApiError::RateLimited {
            retry_after_secs: retry.seconds(),
            detail: format!(
                "this customer explained more than {} tokens or claims in a minute; retry later",
                state.settings.explain_per_minute
            ),
        })?;
    let account = Arc::new(owned_account(&state, &caller, &path).await?);
    let body = read_json(&req, payload, state.settings.max_body_bytes).await?;
    let mut fields = Fields::new(body.as_ref(), &["token", "claims", "service", "ip"])?;
    let token = fields.string("token", false, MAX_TOKEN);
    let claims = fields.raw("claims").cloned();
    let service = fields.string("service", false, 253);
    let ip = fields.string("ip", false, 64);
    let ip = match ip.as_deref().map(str::parse::<IpAddr>) {
        Some(Err(_)) => {
            let problem = Violation::new("/ip", "ip must be an IPv4 or IPv6 address");
            fields.problems.push(problem);
            None
        }
        Some(Ok(ip)) => Some(ip),
        None => None,
    };
    let claims = match claims {
        Some(Value::Object(claims)) => Some(claims),
        Some(_) => {
            let problem = Violation::new("/claims", "claims must be a JSON object");
            fields.problems.push(problem);
            None
        }
        None => None,
    };
    let exactly_one = token.is_some() != fields.raw("claims").is_some();
    if !exactly_one && fields.problems.is_empty() {
        fields.problems.push(Violation::new(
            "",
            "give either token (a JWT, verified like a real request) or claims (judged by the \
             policy alone), not both",
        ));
    }
    fields.finish()?;
    let explanation = match (token, claims) {
        (Some(token), _) => explain_token(&state, &account, &token, service, ip).await?,
        (None, claims) => off_the_workers(account, claims, service, ip).await?,
    };
    Ok(HttpResponse::Ok()
        .insert_header((actix_web::http::header::CACHE_CONTROL, "no-store"))
        .body(explanation))
}

/// `GET /service-accounts/{id}/refusals`: of the last 7 days, the newest 100, near misses first
/// in line for a place (each record says which it is in `near`), newest first.
pub async fn list(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let caller = manager(&state, &req).await?;
    let account = owned_account(&state, &caller, &path).await?;
    let since = state.now() - KEPT_FOR;
    let id = account.id;
    let refusals = state
        .db(move |s| s.refusals(id, since, 2 * KEPT_PER_ACCOUNT))
        .await?;
    Ok(HttpResponse::Ok().json(refusal::shown(refusals, KEPT_PER_ACCOUNT)))
}
