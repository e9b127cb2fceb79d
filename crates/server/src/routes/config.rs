//! `/services/{subdomain}/config`: the published discovery document and key set.

use crate::body::read_json;
use crate::caller::ServiceCaller;
use crate::problem::{ApiError, ApiResult};
use crate::public;
use crate::state::AppState;
use actix_web::{web, HttpRequest, HttpResponse};
use registry_domain::app::config::{self, PublishConfig};
use serde_json::json;

/// `GET /services/{subdomain}/config`: what is published, as served.
pub async fn get(
    ServiceCaller { service, .. }: ServiceCaller,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    // Authentication brought the hosting cache up to date with the database; documents not in
    // memory are read from it (one indexed read).
    let hosted = state
        .replica
        .current(&service.subdomain)
        .await?
        .ok_or_else(|| config::nothing_published(&service.subdomain))?;
    Ok(HttpResponse::Ok()
        .content_type("application/json")
        .body(public::config_body(&hosted)))
}

/// `PUT /services/{subdomain}/config`: check, rewrite, store, and serve at once.
pub async fn put(
    ServiceCaller { service, caller }: ServiceCaller,
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let body = read_json(&req, payload, state.settings.max_body_bytes)
        .await?
        .ok_or_else(|| {
            ApiError::Validation(vec![registry_domain::Violation::new(
                "",
                "the body must be {\"openidConfiguration\": {...}, \"jwks\": {\"keys\": [...]}}",
            )])
        })?;
    let now = state.now();
    let command = PublishConfig { body };
    let publication = state
        .write(move |registry| config::publish(registry, &caller, &service, command, now))
        .await?;
    Ok(HttpResponse::Ok().json(json!({
        "openidConfiguration": publication.openid_configuration,
        "jwks": publication.jwks,
        "warnings": publication.warnings,
    })))
}

/// `DELETE /services/{subdomain}/config`: stop publishing; the service stays.
pub async fn delete(
    ServiceCaller { service, caller }: ServiceCaller,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let now = state.now();
    state
        .write(move |registry| config::withdraw(registry, &caller, &service, now))
        .await?;
    Ok(HttpResponse::NoContent().finish())
}
