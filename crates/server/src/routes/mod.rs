//! HTTP routes. Handlers parse, call the domain and the store, and shape responses; the rules
//! they apply live in `registry-domain`.

pub mod accounts;
pub mod anonymous;
pub mod audit;
pub mod config;
pub mod domains;
pub mod fetch_log;
pub mod keys;
pub mod ops;
pub mod preflight;
pub mod refusals;
pub mod services;

use crate::dashboard;
use crate::problem::ApiError;
use actix_web::{guard, web};

/// Registers every API route. Each resource answers 405 (problem+json, with `Allow`) for the
/// methods it does not serve; those that serve GET serve HEAD too.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/services")
            .route(web::post().to(services::create))
            .route(get_or_head().to(services::list))
            .default_service(web::to(|| not_allowed("GET, HEAD, POST"))),
    )
    // One scope per service and per account: the router matches the path's `{subdomain}` (or
    // `{id}`) once, then the rest of it against fixed names; flat resources matched each
    // pattern in turn, a regular expression each.
    .service(
        web::scope("/services/{subdomain}")
            .service(
                web::resource("")
                    .route(get_or_head().to(services::get))
                    .route(web::patch().to(services::patch))
                    .route(web::delete().to(services::delete))
                    .default_service(web::to(|| not_allowed("GET, HEAD, PATCH, DELETE"))),
            )
            .service(
                web::resource("/config")
                    .route(get_or_head().to(config::get))
                    .route(web::put().to(config::put))
                    .route(web::delete().to(config::delete))
                    .default_service(web::to(|| not_allowed("GET, HEAD, PUT, DELETE"))),
            )
            .service(
                web::resource("/domain")
                    .route(get_or_head().to(domains::get))
                    .route(web::put().to(domains::put))
                    .route(web::delete().to(domains::delete))
                    .default_service(web::to(|| not_allowed("GET, HEAD, PUT, DELETE"))),
            )
            .service(get_and_head("/keys", keys::list))
            .service(
                web::resource("/keys/{kid}")
                    .route(web::delete().to(keys::delete))
                    .default_service(web::to(|| not_allowed("DELETE"))),
            )
            .service(get_and_head("/keys/{kid}/readiness", keys::readiness))
            .service(
                web::resource("/keys/{kid}/readiness/verifiers/{agent}")
                    .route(web::delete().to(keys::dismiss_verifier))
                    .default_service(web::to(|| not_allowed("DELETE"))),
            )
            .service(get_and_head("/federation", keys::federation))
            .service(
                web::resource("/preflight")
                    .route(get_or_head().to(preflight::documents))
                    .route(web::post().to(preflight::token))
                    .default_service(web::to(|| not_allowed("GET, HEAD, POST"))),
            )
            .service(get_and_head("/fetches", preflight::fetches)),
    )
    .service(
        web::resource("/anonymous/services")
            .route(web::post().to(anonymous::create))
            .default_service(web::to(|| not_allowed("POST"))),
    )
    .service(
        web::resource("/service-accounts")
            .route(web::post().to(accounts::create))
            .route(get_or_head().to(accounts::list))
            .default_service(web::to(|| not_allowed("GET, HEAD, POST"))),
    )
    .service(
        web::scope("/service-accounts/{id}")
            .service(
                web::resource("")
                    .route(get_or_head().to(accounts::get))
                    .route(web::patch().to(accounts::patch))
                    .route(web::delete().to(accounts::delete))
                    .default_service(web::to(|| not_allowed("GET, HEAD, PATCH, DELETE"))),
            )
            .service(
                web::resource("/regenerate-token")
                    .route(web::post().to(accounts::regenerate_token))
                    .default_service(web::to(|| not_allowed("POST"))),
            )
            .service(
                web::resource("/explain")
                    .route(web::post().to(refusals::explain))
                    .default_service(web::to(|| not_allowed("POST"))),
            )
            .service(get_and_head("/refusals", refusals::list)),
    )
    .service(get_and_head("/audit-events", audit::list))
    .service(
        web::resource("/fetch-log")
            .route(web::post().to(fetch_log::post))
            .default_service(web::to(|| not_allowed("POST"))),
    )
    // The browser pages (not part of the API, so not in openapi.json).
    .service(get_and_head("/", dashboard::landing))
    .service(get_and_head(
        "/dashboard/anonymous/{subdomain}",
        dashboard::anonymous,
    ))
    .service(get_and_head("/healthz", ops::healthz))
    .service(get_and_head("/readyz", ops::readyz))
    .service(
        web::resource("/metrics")
            .route(get_or_head().to(ops::metrics))
            .default_service(web::to(ops::metrics_other_method)),
    )
    .service(get_and_head("/openapi.json", ops::openapi))
    .service(get_and_head(
        "/problems/{slug}",
        crate::problem::pages::page,
    ))
    .service(get_and_head(
        "/schemas/service-account-policy/v1.json",
        ops::policy_schema,
    ))
    .service(get_and_head(
        "/schemas/service-account-policy/v2.json",
        ops::policy_schema_v2,
    ));
}

/// GET, and HEAD with the same status and headers but no body (RFC 9110 §9.3.2: a server
/// answers HEAD wherever it answers GET; actix leaves the body out of a response to HEAD).
fn get_or_head() -> actix_web::Route {
    web::route().guard(guard::Any(guard::Get()).or(guard::Head()))
}

fn get_and_head<F, Args>(path: &str, handler: F) -> actix_web::Resource
where
    F: actix_web::Handler<Args>,
    Args: actix_web::FromRequest + 'static,
    F::Output: actix_web::Responder + 'static,
{
    web::resource(path)
        .route(get_or_head().to(handler))
        .default_service(web::to(|| not_allowed("GET, HEAD")))
}

async fn not_allowed(allowed: &'static str) -> Result<actix_web::HttpResponse, ApiError> {
    Err(ApiError::MethodNotAllowed(allowed))
}

/// The answer to a path no route serves.
pub async fn not_found() -> Result<actix_web::HttpResponse, ApiError> {
    Err(ApiError::NotFound("no such endpoint".into()))
}
