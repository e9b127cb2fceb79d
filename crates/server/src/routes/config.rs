//! `/services/{subdomain}/config`: the published discovery document and key set.

use crate::audit;
use crate::auth::{self, ServiceCaller};
use crate::body::read_json;
use crate::directory;
use crate::hosting;
use crate::problem::{ApiError, ApiResult};
use crate::routes::services::gone_as_not_found;
use crate::state::AppState;
use actix_web::{web, HttpRequest, HttpResponse};
use registry_domain::audit::Action;
use registry_domain::keys;
use registry_domain::service::PublishedConfig;
use registry_oidc::VerifierKeyImport;
use serde_json::json;

pub(crate) fn nothing_published(subdomain: &str) -> ApiError {
    ApiError::NotFound(format!("nothing is published for {subdomain:?}"))
}

/// `GET /services/{subdomain}/config`: what is published, as served.
pub async fn get(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let service = auth::service_caller(&state, &req, &path).await?.service;
    // Authentication brought the hosting cache up to date with the database; documents that
    // left memory (its byte bound) are read back.
    let hosted = hosting::current(&state, &service.subdomain)
        .await?
        .ok_or_else(|| nothing_published(&service.subdomain))?;
    Ok(HttpResponse::Ok()
        .content_type("application/json")
        .body(hosting::config_body(&hosted)))
}

/// `PUT /services/{subdomain}/config`: check, rewrite, store, and serve at once.
pub async fn put(
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let ServiceCaller { service, who } = auth::service_caller(&state, &req, &path).await?;
    let body = read_json(&req, payload, state.settings.max_body_bytes)
        .await?
        .ok_or_else(|| {
            ApiError::Validation(vec![registry_domain::Violation::new(
                "",
                "the body must be {\"openidConfiguration\": {...}, \"jwks\": {\"keys\": [...]}}",
            )])
        })?;
    let id = service.id;
    let issuer = state.issuer_of(&service.subdomain);
    let now = state.now();
    let expires_at = service.expires_at;
    let event = audit::service_event(&state, &req, &who.actor(), Action::ConfigPut, &service);
    // Read the key state, rotate, write: one transaction, so that concurrent uploads to one
    // service see each other's retired keys. (Rotating before the transaction and checking the
    // state in it costs a second read and parse of the key state: slower on the one core the
    // benchmark gives a server, docs/benchmarks.md.)
    let outcome = state
        .db(move |s| {
            let mut outcome = None;
            s.update_config(
                id,
                &mut |current| {
                    let previous = current.map(|c| c.keys).unwrap_or_default();
                    match keys::upload(
                        &body,
                        &issuer,
                        &previous,
                        &VerifierKeyImport,
                        now,
                        expires_at,
                    ) {
                        Ok(upload) => {
                            let publication = upload.publication;
                            let config = PublishedConfig {
                                service_id: id,
                                openid_configuration: publication.openid_configuration.to_string(),
                                jwks: publication.jwks.to_string(),
                                updated_at: now,
                                // Recorded by the store, which reads the version replaced.
                                previous_change_at: None,
                                keys: upload.rotation.state,
                            };
                            outcome = Some(Ok(publication));
                            Some(config)
                        }
                        Err(refused) => {
                            outcome = Some(Err(refused));
                            None
                        }
                    }
                },
                &event,
            )?;
            Ok(outcome)
        })
        .await
        .map_err(|e| gone_as_not_found(e, &path))?;
    let publication = match outcome {
        Some(Ok(publication)) => publication,
        Some(Err(refused)) if refused.kid_reused => {
            return Err(ApiError::KidReused(refused.violations))
        }
        Some(Err(refused)) => return Err(ApiError::Validation(refused.violations)),
        None => return Err(ApiError::Internal),
    };
    directory::settle_write(&state).await;
    Ok(HttpResponse::Ok().json(json!({
        "openidConfiguration": publication.openid_configuration,
        "jwks": publication.jwks,
        "warnings": publication.warnings,
    })))
}

/// `DELETE /services/{subdomain}/config`: stop publishing; the service stays.
pub async fn delete(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let ServiceCaller { service, who } = auth::service_caller(&state, &req, &path).await?;
    let id = service.id;
    let event = audit::service_event(&state, &req, &who.actor(), Action::ConfigDelete, &service);
    let removed = state.db(move |s| s.delete_config(id, &event)).await?;
    directory::settle_write(&state).await;
    if !removed {
        return Err(nothing_published(&service.subdomain));
    }
    Ok(HttpResponse::NoContent().finish())
}
