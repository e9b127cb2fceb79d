//! `/services/{subdomain}/signing` and `/services/{subdomain}/sign`: managed signing
//! (docs/api.md, "Managed signing").

use crate::body::{read_json, Fields};
use crate::caller::ServiceCaller;
use crate::metrics::SIGN_RESULTS;
use crate::problem::{ApiError, ApiResult};
use crate::state::AppState;
use actix_web::{web, HttpRequest, HttpResponse};
use registry_domain::app::signing;
use serde::Deserialize;
use serde_json::{json, Value};

/// The longest `claims` read: its decoded payload is checked against 16 KB by the use case.
const MAX_CLAIMS_TEXT: usize = 32 * 1024;

/// `PUT /services/{subdomain}/signing`: turn on, or change the settings.
pub async fn put(
    ServiceCaller { service, caller }: ServiceCaller,
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    // Every member is optional: no body is the defaults.
    let body = (read_json(&req, payload, state.settings.max_body_bytes).await?)
        .unwrap_or_else(|| json!({}));
    let (now, purging) = (state.now(), state.purging());
    let view = state
        .write(move |registry| signing::put(registry, &caller, &service, &body, purging, now))
        .await?;
    Ok(HttpResponse::Ok().json(view))
}

/// `GET /services/{subdomain}/signing`: the settings and the keys.
pub async fn get(
    ServiceCaller { service, .. }: ServiceCaller,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let view = state
        .read(move |registry| signing::get(registry, &service))
        .await?;
    Ok(HttpResponse::Ok().json(view))
}

/// `DELETE /services/{subdomain}/signing`: 204; nothing signs from now on.
pub async fn delete(
    ServiceCaller { service, caller }: ServiceCaller,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let now = state.now();
    state
        .write(move |registry| signing::delete(registry, &caller, &service, now))
        .await?;
    Ok(HttpResponse::NoContent().finish())
}

/// `?compromised=true`.
#[derive(Debug, Deserialize)]
pub struct RotateQuery {
    #[serde(default)]
    compromised: bool,
}

/// `POST /services/{subdomain}/signing/rotate[?compromised=true]`.
pub async fn rotate(
    query: web::Query<RotateQuery>,
    ServiceCaller { service, caller }: ServiceCaller,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let compromised = query.into_inner().compromised;
    let (now, purging) = (state.now(), state.purging());
    let view = state
        .write(move |registry| {
            signing::rotate(registry, &caller, &service, compromised, purging, now)
        })
        .await?;
    Ok(HttpResponse::Ok().json(view))
}

/// `POST /services/{subdomain}/sign` `{claims}`: `{header, signature, kid}`. Counted in
/// `registry_signatures_total{result}`.
pub async fn sign(
    ServiceCaller { service, caller }: ServiceCaller,
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let outcome = signed(service, caller, req, payload, &state).await;
    let result = match &outcome {
        Ok(_) => "signed",
        Err(ApiError::InvalidClaims(_)) => "invalid_claims",
        Err(ApiError::NoKeyReady { .. }) => "no_key_ready",
        Err(ApiError::RateLimited { .. }) => "rate_limited",
        Err(_) => "refused",
    };
    if let Some(at) = SIGN_RESULTS.iter().position(|r| *r == result) {
        state.metrics.signature(at);
    }
    outcome.map(|signed| HttpResponse::Ok().json(signed))
}

async fn signed(
    service: std::sync::Arc<registry_domain::Service>,
    caller: registry_domain::app::Caller,
    req: HttpRequest,
    payload: web::Payload,
    state: &AppState,
) -> ApiResult<Value> {
    let body = read_json(&req, payload, state.settings.max_body_bytes).await?;
    let mut fields = Fields::new(body.as_ref(), &["claims"])?;
    let claims = fields.string("claims", true, MAX_CLAIMS_TEXT);
    fields.finish()?;
    state.within_sign_budget(&caller, service.id)?;
    let (claims, now) = (claims.unwrap_or_default(), state.now());
    let signed = state
        .read(move |registry| signing::sign(registry, &service, &claims, now))
        .await?;
    Ok(json!({
        "header": signed.header,
        "signature": signed.signature,
        "kid": signed.kid,
    }))
}
