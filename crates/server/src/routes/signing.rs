//! `/services/{subdomain}/signing` and `/services/{subdomain}/sign`: managed signing
//! (docs/api.md, "Managed signing").

use crate::body::{read_json, Bodiless, Fields};
use crate::caller::ServiceCaller;
use crate::metrics::SIGN_RESULTS;
use crate::problem::{ApiError, ApiResult};
use crate::state::AppState;
use actix_web::{web, HttpRequest, HttpResponse};
use registry_domain::app::signing;
use serde::Deserialize;
use serde_json::{json, Value};

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
    let (now, purging) = (state.now(), state.purging());
    let view = state
        .read(move |registry| signing::get(registry, &service, purging, now))
        .await?;
    Ok(HttpResponse::Ok().json(view))
}

/// `DELETE /services/{subdomain}/signing`: 204; nothing signs from now on.
pub async fn delete(
    Bodiless(ServiceCaller { service, caller }): Bodiless<ServiceCaller>,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let now = state.now();
    state
        .write(move |registry| signing::delete(registry, &caller, &service, now))
        .await?;
    Ok(HttpResponse::NoContent().finish())
}

/// `?compromised=true`. Any other parameter is a 400: a mistyped `?compromized=true` must not
/// leave a compromised key signing behind an ordinary rotation.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RotateQuery {
    compromised: Option<String>,
}

impl RotateQuery {
    /// Whether the rotation replaces a compromised key: `true` or `false`, nothing else.
    fn compromised(&self) -> ApiResult<bool> {
        match self.compromised.as_deref() {
            None | Some("false") => Ok(false),
            Some("true") => Ok(true),
            Some(other) => Err(ApiError::BadRequest(format!(
                "the query parameter compromised is true or false, not {other:?}"
            ))),
        }
    }
}

/// `POST /services/{subdomain}/signing/rotate[?compromised=true]`, with no body.
pub async fn rotate(
    query: web::Query<RotateQuery>,
    Bodiless(ServiceCaller { service, caller }): Bodiless<ServiceCaller>,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let compromised = query.compromised()?;
    let (now, purging) = (state.now(), state.purging());
    let view = state
        .write(move |registry| {
            signing::rotate(registry, &caller, &service, compromised, purging, now)
        })
        .await?;
    Ok(HttpResponse::Ok().json(view))
}

/// `POST /services/{subdomain}/sign` `{claims}`: `{header, signature, kid}`. Counted in
/// `registry_signatures_total{result}`, a caller refused before the call (401, 403, 404)
/// included: the extractor's refusal comes here to be counted.
pub async fn sign(
    called: Result<ServiceCaller, ApiError>,
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let outcome = match called {
        Ok(ServiceCaller { service, caller }) => {
            signed(service, caller, req, payload, &state).await
        }
        Err(refused) => Err(refused),
    };
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
    // Any length the body's limit lets through: a payload past 16 KB is the use case's
    // `invalid-claims`, as any other broken rule of the claims, found from its length alone.
    let claims = fields.string("claims", true, usize::MAX);
    fields.finish()?;
    state.within_sign_budget(&caller, service.id)?;
    let (claims, now) = (claims.unwrap_or_default(), state.now());
    let signed = match on_the_worker(state, &service, &claims, now) {
        Some(made) => {
            let (signed, record) = made?;
            if record {
                let kid = signed.kid.clone();
                state
                    .read(move |registry| signing::record_use(registry, &service, &kid, now))
                    .await?;
            }
            signed
        }
        None => {
            state
                .read(move |registry| signing::sign(registry, &service, &claims, now))
                .await?
        }
    };
    Ok(json!({
        "header": signed.header,
        "signature": signed.signature,
        "kid": signed.kid,
    }))
}

/// The signature made where the request is served, or `None` when it is made on the blocking
/// pool instead. On SQLite an ES256 signature is made here: the signing read in place and one
/// signature (about 25 µs) cost less than handing the request to another thread and back. An
/// RSA signature (about 350 µs) would hold this worker's other connections that long, and a token
/// naming another issuer than the subdomain's needs the custom domain read: those, and
/// everything on PostgreSQL (a network round trip), go to the pool. `true`: the key's use is
/// due to be recorded.
fn on_the_worker(
    state: &AppState,
    service: &registry_domain::Service,
    claims: &str,
    now: time::OffsetDateTime,
) -> Option<ApiResult<(signing::Signed, bool)>> {
    // Without a data key `signing::sign` answers `signing-disabled`, before any read.
    state.registry.managed_keys.as_ref()?;
    let signing = match state.replica.signing_now(service.id)? {
        Ok(signing) => signing,
        Err(e) => return Some(Err(e.into())),
    };
    let current = signing.as_ref().and_then(|s| s.current());
    if !current.is_some_and(|key| key.algorithm.signs_quickly()) {
        return None;
    }
    let domain = signing::CustomIssuer::Unread;
    match signing::signature(
        &state.registry,
        service,
        signing.as_ref(),
        &domain,
        claims,
        now,
    ) {
        Ok(signing::Signature::Made { signed, record }) => Some(Ok((signed, record))),
        Ok(signing::Signature::NeedsDomain) => None,
        Err(e) => Some(Err(e.into())),
    }
}
