//! `POST /anonymous/services`: a temporary service for anyone, managed with a one-time secret.
//! Parse, hold the per-address creation limit, call `registry_domain::app::anonymous::create`,
//! shape the answer. A creation that fails (the registry too full, the database away) does not
//! count against the address (docs/api.md, "Anonymous services").

use crate::body::{read_json, Fields};
use crate::client_ip::client_ip;
use crate::problem::{ApiError, ApiResult};
use crate::state::AppState;
use crate::views;
use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use registry_domain::anonymous::lifetime;
use registry_domain::app::anonymous::{self, CreateAnonymous, RequestSite};
use registry_domain::app::services::{MAX_DESCRIPTION, MAX_TITLE};
use registry_domain::app::Origin;
use registry_domain::text::TextKind;
use serde_json::Value;

/// Creates an anonymous service.
pub async fn create(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    anonymous::may_create(request_site(&req, &state.settings.origin()))?;
    let body = read_json(&req, payload, state.settings.max_body_bytes).await?;
    let command = command(body.as_ref())?;
    state.anon_full.still()?;
    let ip = client_ip(&req, &state.trusted_proxies);
    state
        .anon_limiter
        .hit(ip)
        .map_err(|retry| ApiError::RateLimited {
            retry_after_secs: retry.0.as_secs().max(1),
            detail: format!(
                "at most {} anonymous services per hour from one address",
                state.settings.anon_create_per_hour
            ),
        })?;
    let origin = Origin::new(ip, registry_auth::request_id());
    let clock = state.clone();
    let created = state
        .write(move |registry| anonymous::create(registry, origin, command, || clock.now()))
        .await
        .inspect_err(|error| {
            // Nothing was created (the registry full, the database away): the address keeps
            // its allowance, on every replica.
            state.anon_limiter.give_back(ip);
            if let ApiError::Capacity {
                retry_after_secs,
                detail,
            } = error
            {
                state.anon_full.found(*retry_after_secs, detail);
            }
        })?;
    state.anonymous_created.notify_one();
    let (secret, service) = (&created.secret, &created.service);
    let now = service.created_at;
    // The creator's first call should not pay for argon2 again.
    state
        .auth
        .tokens
        .remember(&secret.lookup_id, &created.hash, &secret.plaintext, now);
    let location = format!("{}/services/{}", state.settings.base(), service.subdomain);
    Ok(HttpResponse::Created()
        .insert_header((header::LOCATION, location))
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(views::anonymous_created(&state, &created, now)))
}

/// Where the browser says the request comes from: its `Sec-Fetch-Site`, or, from a browser
/// too old to send one, its `Origin` against the registry's own (`own`).
fn request_site(req: &HttpRequest, own: &str) -> RequestSite {
    let headers = req.headers();
    match headers.get("sec-fetch-site").map(|v| v.as_bytes()) {
        Some(b"same-origin" | b"none") => RequestSite::ThisSite,
        Some(_) => RequestSite::OtherSite,
        None => match headers.get(header::ORIGIN) {
            None => RequestSite::Unsaid,
            Some(origin) => match origin.as_bytes().eq_ignore_ascii_case(own.as_bytes()) {
                true => RequestSite::ThisSite,
                false => RequestSite::OtherSite,
            },
        },
    }
}

/// The body: `{title?, description?, ttlHours?}`, every problem reported at once.
fn command(body: Option<&Value>) -> ApiResult<CreateAnonymous> {
    let mut fields = Fields::new(body, &["title", "description", "ttlHours"])?;
    let title = fields.text("title", false, MAX_TITLE, TextKind::Line);
    let description = fields.text("description", false, MAX_DESCRIPTION, TextKind::Paragraph);
    let ttl = lifetime(fields.raw("ttlHours"))
        .map_err(|violation| fields.problems.push(violation))
        .ok();
    fields.finish()?;
    Ok(CreateAnonymous {
        title,
        description,
        ttl: ttl.ok_or(ApiError::Internal)?,
    })
}
