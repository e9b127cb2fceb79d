//! `/services/{subdomain}/config`: the published discovery document and key set.

use crate::body::{read_json, Bodiless};
use crate::caller::ServiceCaller;
use crate::problem::{ApiError, ApiResult};
use crate::public;
use crate::state::AppState;
use actix_web::{web, HttpRequest, HttpResponse};
use registry_domain::app::config::{self, PublishConfig};
use serde::Deserialize;
use serde_json::json;

/// `?source=`: the key source a call reads, uploads or removes (docs/api.md, "Key sources").
/// Any other parameter is a 400: a mistyped `?source=` must not upload to, or remove, the
/// whole configuration.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceQuery {
    source: Option<String>,
}

/// `GET /services/{subdomain}/config[?source=…]`: what is published, as served; with a source,
/// that source's latest upload. The query comes first: a malformed one is a 400 before any
/// authentication, as for every query of the API.
pub async fn get(
    query: web::Query<SourceQuery>,
    ServiceCaller { service, .. }: ServiceCaller,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    if let Some(name) = query.into_inner().source {
        let source = config::source_of(Some(&name))?;
        let upload = state
            .read(move |registry| config::source_upload(registry, &service, &source))
            .await?;
        return Ok(HttpResponse::Ok().json(upload));
    }
    // Authentication brought the hosting cache up to date with the database; documents not in
    // memory are read from it (one indexed read).
    let hosted = state
        .replica
        .current(&service.subdomain, state.now())
        .await?
        .ok_or_else(|| config::nothing_published(&service.subdomain))?;
    Ok(HttpResponse::Ok()
        .content_type("application/json")
        .body(public::config_body(&hosted)))
}

/// `PUT /services/{subdomain}/config[?source=…]`: check, rewrite, store, and serve at once.
pub async fn put(
    query: web::Query<SourceQuery>,
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
    let source = config::upload_source_of(query.into_inner().source.as_deref())?;
    let now = state.now();
    let command = PublishConfig { body, source };
    let publication = state
        .write(move |registry| config::publish(registry, &caller, &service, command, now))
        .await?;
    Ok(HttpResponse::Ok().json(json!({
        "openidConfiguration": publication.openid_configuration,
        "jwks": publication.jwks,
        "warnings": publication.warnings,
    })))
}

/// `DELETE /services/{subdomain}/config[?source=…]`: stop publishing, the service stays; with
/// a source, retire that source's keys and keep the rest.
pub async fn delete(
    query: web::Query<SourceQuery>,
    Bodiless(ServiceCaller { service, caller }): Bodiless<ServiceCaller>,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let now = state.now();
    let (id, subdomain) = (service.id, service.subdomain.clone());
    match query.into_inner().source {
        None => {
            state
                .write(move |registry| config::withdraw(registry, &caller, &service, now))
                .await?
        }
        Some(name) => {
            let source = config::upload_source_of(Some(&name))?;
            state
                .write(move |registry| {
                    config::withdraw_source(registry, &caller, &service, &source, now)
                })
                .await?
        }
    }
    // The service's custom domain stays served (by what is left, or nothing): the purge's
    // own look at the replica's domains names it.
    state.replica.documents_gone(id, &subdomain, Vec::new());
    Ok(HttpResponse::NoContent().finish())
}
