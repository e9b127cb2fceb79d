//! Why was a token refused (docs/api.md, "Explaining refusals"): `POST
//! /service-accounts/{id}/explain` and `GET /service-accounts/{id}/refusals`, over
//! `registry_domain::app::explain`. Verifying a token is this module's part (it is I/O); judging it
//! is the use case's.

use crate::body::{read_json, Fields};
use crate::caller::Manager;
use crate::problem::ApiResult;
use crate::state::AppState;
use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use registry_domain::app::explain::{self, Evidence, Explain};
use registry_domain::policy::Action;
use registry_domain::{ServiceAccount, Violation};
use serde_json::{Map, Value};
use std::net::IpAddr;

/// Longest token accepted (the verifier's own limit is lower).
const MAX_TOKEN: usize = 64 * 1024;

/// `POST /service-accounts/{id}/explain`: `{token, service?, ip?, action?}` or `{claims,
/// service?, ip?, action?}`.
/// A token is judged like a real request: an issuer the account names, then keys, signature
/// and times, then the policy. It is neither kept, logged nor echoed.
pub async fn explain(
    Manager(caller): Manager,
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    // The account first: another customer's is a 404 like on the account's other calls,
    // whatever the budget says.
    let charged = caller.clone();
    let account = state
        .read(move |registry| explain::account(registry, &caller, &path))
        .await?;
    state.within_explain_budget(&charged, None)?;
    let body = read_json(&req, payload, state.settings.max_body_bytes).await?;
    let ExplainBody {
        token,
        claims,
        service,
        ip,
        action,
    } = ExplainBody::parse(body.as_ref())?;
    let evidence = match token {
        Some(token) => verified(&state, &account, &token).await?,
        None => Evidence::Claims(claims),
    };
    let command = Explain {
        account,
        evidence,
        service,
        ip,
        action,
    };
    // On the blocking pool: with large array claims it takes milliseconds
    // (docs/api.md, "Limits that hold (second security review)").
    let explanation = state
        .read(move |registry| explain::explain(registry, command))
        .await?;
    Ok(HttpResponse::Ok()
        .content_type("application/json")
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .body(explanation))
}

/// A token as verification leaves it, unless the use case refuses it first: the keys of an
/// issuer no rule of the account names are never fetched.
async fn verified(state: &AppState, account: &ServiceAccount, token: &str) -> ApiResult<Evidence> {
    let issuer = state.auth.verifier().unverified_issuer(token);
    Ok(match explain::screen_token(account, issuer) {
        Some(refused) => refused,
        None => Evidence::Token(registry_auth::verify_identity(&state.auth, token).await?),
    })
}

/// The explain body, every problem in one 400.
struct ExplainBody {
    token: Option<String>,
    claims: Option<Map<String, Value>>,
    service: Option<String>,
    ip: Option<IpAddr>,
    action: Option<Action>,
}

impl ExplainBody {
    fn parse(body: Option<&Value>) -> ApiResult<Self> {
        let mut fields = Fields::new(body, &["token", "claims", "service", "ip", "action"])?;
        let token = fields.string("token", false, MAX_TOKEN);
        let service = fields.string("service", false, 253);
        let ip = match fields
            .string("ip", false, 64)
            .map(|ip| ip.parse::<IpAddr>())
        {
            Some(Err(_)) => {
                let problem = Violation::new("/ip", "ip must be an IPv4 or IPv6 address");
                fields.problems.push(problem);
                None
            }
            parsed => parsed.and_then(Result::ok),
        };
        let claims = match fields.raw("claims") {
            Some(Value::Object(claims)) => Some(claims.clone()),
            Some(_) => {
                let problem = Violation::new("/claims", "claims must be a JSON object");
                fields.problems.push(problem);
                None
            }
            None => None,
        };
        // Of the members given, not of those that parsed: a token that is no string is its own
        // problem, reported with the others.
        let exactly_one = fields.raw("token").is_some() != fields.raw("claims").is_some();
        if !exactly_one {
            fields.problems.push(Violation::new(
                "",
                "give either token (a JWT, verified like a real request) or claims (judged by \
                 the policy alone), not both",
            ));
        }
        let action = match fields
            .string("action", false, 64)
            .map(|a| a.parse::<Action>())
        {
            Some(Ok(action)) => Some(action),
            Some(Err(unknown)) => {
                fields
                    .problems
                    .push(Violation::new("/action", unknown.to_string()));
                None
            }
            None => None,
        };
        fields.finish()?;
        Ok(Self {
            token,
            claims,
            service,
            ip,
            action,
        })
    }
}

/// `GET /service-accounts/{id}/refusals`: of the last 7 days, the newest 100, near misses first
/// in line for a place (each record says which it is in `near`), newest first.
pub async fn list(
    Manager(caller): Manager,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let now = state.now();
    let refusals = state
        .read(move |registry| explain::refusals(registry, &caller, &path, now))
        .await?;
    Ok(HttpResponse::Ok().json(refusals))
}
