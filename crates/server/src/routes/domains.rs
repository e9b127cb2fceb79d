//! `/services/{subdomain}/domain`: a service's custom domain (docs/api.md, "Custom domains").
//! The HTTP-01 answers of its certificate orders are the plain listener's (`tls::challenge`).

use crate::body::{read_json, Bodiless, Fields};
use crate::caller::ServiceCaller;
use crate::problem::ApiResult;
use crate::state::AppState;
use actix_web::{web, HttpRequest, HttpResponse};
use registry_domain::app::domains;
use registry_domain::custom_domain::{check_domain, CustomDomain};

/// The answer of the domain calls: the domain, its status, the records to set.
fn answer(state: &AppState, subdomain: &str, domain: &CustomDomain) -> serde_json::Value {
    domain.view(&state.replica.hosting.issuers().host_of_issuer(subdomain))
}

/// `PUT /services/{subdomain}/domain` `{domain}`: 202, verifying until the TXT record is seen.
pub async fn put(
    ServiceCaller { service, caller }: ServiceCaller,
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    // Who may ask is answered before what was asked is read.
    domains::registered_only(&service)?;
    let body = read_json(&req, payload, state.settings.max_body_bytes).await?;
    let mut fields = Fields::new(body.as_ref(), &["domain"])?;
    let domain = fields.string("domain", true, 1024);
    // The name's own problems are reported with the body's others, all at once.
    if let Some(Err(problem)) =
        (domain.as_deref()).map(|d| check_domain(d, &state.registry.settings.issuers))
    {
        fields.problems.push(problem);
    }
    fields.finish()?;
    let domain = domain.unwrap_or_default();
    let now = state.now();
    let subdomain = service.subdomain.clone();
    let set = state
        .write(move |registry| domains::set(registry, &caller, &service, &domain, now))
        .await?;
    Ok(HttpResponse::Accepted().json(answer(&state, &subdomain, &set)))
}

/// `GET /services/{subdomain}/domain`.
pub async fn get(
    ServiceCaller { service, .. }: ServiceCaller,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let subdomain = service.subdomain.clone();
    let domain = state
        .read(move |registry| domains::get(registry, &service))
        .await?;
    Ok(HttpResponse::Ok().json(answer(&state, &subdomain, &domain)))
}

/// `DELETE /services/{subdomain}/domain`: 204; no longer served, its certificate deleted.
pub async fn delete(
    Bodiless(ServiceCaller { service, caller }): Bodiless<ServiceCaller>,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let now = state.now();
    state
        .write(move |registry| domains::remove(registry, &caller, &service, now))
        .await?;
    Ok(HttpResponse::NoContent().finish())
}
