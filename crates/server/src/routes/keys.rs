//! `/services/{subdomain}/keys…` and `/services/{subdomain}/federation`: the key inventory, the
//! withdrawal of a retired key, whether a key is safe to sign with, and what to register in a
//! cloud to trust the issuer (docs/api.md, "Key lifecycle" and "Key readiness"). Anonymous
//! secrets may call them on their own service.

use crate::body::Bodiless;
use crate::caller::ServiceCaller;
use crate::problem::ApiResult;
use crate::state::AppState;
use actix_web::{web, HttpResponse};
use registry_domain::app::{keys, readiness, signing};
use registry_domain::Service;
use serde::Deserialize;
use time::OffsetDateTime;

/// `GET /services/{subdomain}/keys`: every published key, current ones first.
pub async fn list(
    ServiceCaller { service, .. }: ServiceCaller,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let now = state.now();
    let inventory = state
        .read(move |registry| keys::inventory(registry, &service, now))
        .await?;
    Ok(HttpResponse::Ok().json(inventory))
}

/// `DELETE /services/{subdomain}/keys/{kid}`: withdraws a retired key at once (a compromised
/// key); a current key is a 409, an unknown one a 404.
pub async fn delete(
    Bodiless(ServiceCaller { service, caller }): Bodiless<ServiceCaller>,
    path: web::Path<(String, String)>,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let (_, kid) = path.into_inner();
    let now = state.now();
    // The last key leaving may take the whole configuration with it.
    let (id, subdomain) = (service.id, service.subdomain.clone());
    state
        .write(move |registry| keys::withdraw(registry, &caller, &service, &kid, now))
        .await?;
    state.replica.documents_gone(id, &subdomain, Vec::new());
    Ok(HttpResponse::NoContent().finish())
}

/// `GET /services/{subdomain}/keys/{kid}/readiness`: whether the key is safe to sign with, and
/// what holds it back; an unknown kid is a 404.
pub async fn readiness(
    ServiceCaller { service, .. }: ServiceCaller,
    path: web::Path<(String, String)>,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let (_, kid) = path.into_inner();
    let now = state.now();
    let purging = state.purger.is_some();
    let read_service = service.clone();
    let (answer, switch) = state
        .read(move |registry| {
            let answer = readiness::readiness(registry, &read_service, &kid, purging, now)?;
            let safe = answer["safeToSign"] == true;
            let switch = safe && signing::is_next(registry, &read_service, &kid)?;
            Ok((answer, switch))
        })
        .await?;
    // A managed next key found safe signs from now on: whoever reads this signs with it next,
    // without waiting for the rotation step (which switches it should this write fail).
    if switch {
        switch_to_next(&state, service, purging, now, "its readiness call").await;
    }
    Ok(HttpResponse::Ok().json(answer))
}

/// Switches `service`'s managed signing to its next key when that key is safe at `now`, as the
/// rotation step would at its next look. Best effort: that look switches anyway, and the answer
/// of the call that asked (`at`) stands.
async fn switch_to_next(
    state: &AppState,
    service: std::sync::Arc<Service>,
    purging: bool,
    now: OffsetDateTime,
    at: &'static str,
) {
    let advanced =
        (state.write(move |registry| signing::advance(registry, &service, purging, now))).await;
    if let Err(error) = advanced {
        tracing::warn!(%error, "a safe next key was not switched to at {at}");
    }
}

/// `DELETE /services/{subdomain}/keys/{kid}/readiness/verifiers/{agent}`: the owner dismisses a
/// verifier of the key that will never come back (the agent percent-encoded, `/` as `%2F`;
/// empty for one that sent no User-Agent).
pub async fn dismiss_verifier(
    Bodiless(ServiceCaller { service, caller }): Bodiless<ServiceCaller>,
    path: web::Path<(String, String, String)>,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let (_, kid, agent) = path.into_inner();
    let now = state.now();
    let (dismissing, read_service) = (service.clone(), service.clone());
    let dismissed = kid.clone();
    state
        .write(move |registry| {
            readiness::dismiss_verifier(registry, &caller, &dismissing, &kid, &agent, now)
        })
        .await?;
    // The verifier may have been the last to hold a next key back: it signs from now on, as
    // after a readiness call that finds it safe (the step looks at its readiness first). Best
    // effort, as the switch is: the dismissal is done and answered whatever this read meets.
    let next = (state.read(move |registry| signing::is_next(registry, &read_service, &dismissed)))
        .await
        .unwrap_or(false);
    if next {
        switch_to_next(&state, service, state.purger.is_some(), now, "a dismissal").await;
    }
    Ok(HttpResponse::NoContent().finish())
}

/// The query of the wiring guide.
#[derive(Debug, Deserialize)]
pub struct WiringQuery {
    subject: Option<String>,
    /// Which of the service's issuers (docs/api.md, "Custom domains"); the subdomain's when
    /// absent.
    issuer: Option<String>,
}

/// `GET /services/{subdomain}/federation[?subject=…]`: what to register in AWS, GCP and Azure.
/// The query comes first: actix polls a handler's arguments together and answers the first
/// error, and a malformed query is a 400 before any authentication (as it always was).
pub async fn federation(
    query: web::Query<WiringQuery>,
    ServiceCaller { service, .. }: ServiceCaller,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let WiringQuery { subject, issuer } = query.into_inner();
    let guide = state
        .read(move |registry| {
            keys::wiring(registry, &service, subject.as_deref(), issuer.as_deref())
        })
        .await?;
    Ok(HttpResponse::Ok().json(guide))
}
