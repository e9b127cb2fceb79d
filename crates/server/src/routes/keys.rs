//! `/services/{subdomain}/keys…` and `/services/{subdomain}/federation`: the key inventory, the
//! withdrawal of a retired key, and what to register in a cloud to trust the issuer
//! (DECISIONS §11). Anonymous secrets may call them on their own service (§5).

use crate::audit;
use crate::auth::{self, ServiceCaller};
use crate::directory;
use crate::problem::{ApiError, ApiResult};
use crate::routes::services::gone_as_not_found;
use crate::state::AppState;
use actix_web::{web, HttpRequest, HttpResponse};
use registry_domain::audit::{Action, Resource};
use registry_domain::keys::KeyDeleteError;
use registry_domain::publishing::{wiring_guide, DEFAULT_WIRING_SUBJECT};
use registry_domain::service::PublishedConfig;
use serde::Deserialize;
use serde_json::json;

/// `GET /services/{subdomain}/keys`: every published key, current ones first.
pub async fn list(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let service = auth::service_caller(&state, &req, &path).await?.service;
    let id = service.id;
    let config = state.db(move |s| s.config(id)).await?;
    let now = state.now();
    let inventory = config.map(|c| c.keys).unwrap_or_default().inventory(now);
    Ok(HttpResponse::Ok().json(inventory))
}

/// `DELETE /services/{subdomain}/keys/{kid}`: withdraws a retired key at once (a compromised
/// key); a current key is a 409, an unknown one a 404.
pub async fn delete(
    req: HttpRequest,
    path: web::Path<(String, String)>,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let (key, kid) = path.into_inner();
    let ServiceCaller { service, who } = auth::service_caller(&state, &req, &key).await?;
    let id = service.id;
    let now = state.now();
    let withdrawn = kid.clone();
    let event = audit::event(
        &state,
        &req,
        &who.actor(),
        Action::KeyDelete,
        Resource::key(&kid, &service.subdomain),
        service.customer_id,
    );
    let outcome = state
        .db(move |s| {
            let mut outcome = Err(KeyDeleteError::Unknown);
            s.update_config(
                id,
                &mut |current| {
                    let config = current?;
                    outcome = config.keys.without_retired(&withdrawn, now);
                    let keys = outcome.clone().ok()?;
                    Some(PublishedConfig {
                        keys,
                        updated_at: now,
                        ..config
                    })
                },
                &event,
            )?;
            Ok(outcome)
        })
        .await
        .map_err(|e| gone_as_not_found(e, &key))?;
    outcome.map_err(|e| match e {
        KeyDeleteError::Current => ApiError::Conflict(format!(
            "key {kid:?} is current: upload a key set without it first, then delete it once it \
             is retired"
        )),
        KeyDeleteError::Unknown => unknown_key(&kid),
    })?;
    directory::settle_write(&state).await;
    Ok(HttpResponse::NoContent().finish())
}

fn unknown_key(kid: &str) -> ApiError {
    ApiError::NotFound(format!("no published key {kid:?}"))
}

/// The query of the wiring guide.
#[derive(Debug, Deserialize)]
pub struct WiringQuery {
    subject: Option<String>,
}

/// `GET /services/{subdomain}/federation[?subject=…]`: what to register in AWS, GCP and Azure.
pub async fn federation(
    req: HttpRequest,
    path: web::Path<String>,
    query: web::Query<WiringQuery>,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let service = auth::service_caller(&state, &req, &path).await?.service;
    let subject = query
        .subject
        .as_deref()
        .filter(|s| !s.is_empty())
        .unwrap_or(DEFAULT_WIRING_SUBJECT);
    let issuer = state.issuer_of(&service.subdomain);
    let mut guide = wiring_guide(&issuer, subject);
    guide["service"] = json!(service.subdomain);
    Ok(HttpResponse::Ok().json(guide))
}
