//! `/services/{subdomain}/preflight` and `…/fetches`: what AWS, GCP and Azure would refuse of the published
//! documents, and of a token (docs/api.md, "Preflight" and "Fetch evidence"). Open to the callers
//! of `…/federation`, anonymous secrets on their own service included. The token is never stored
//! nor logged.

use crate::body::read_json;
use crate::caller::ServiceCaller;
use crate::problem::ApiResult;
use crate::state::AppState;
use actix_web::{web, HttpRequest, HttpResponse};
use registry_domain::app::fetches::{self, IssuerServed};
use registry_domain::app::preflight::{self, CheckDocuments, CheckToken};
use serde::Deserialize;

/// `?issuer=`: which of the service's issuers a call describes (docs/api.md, "Custom domains").
#[derive(Debug, Deserialize)]
pub struct IssuerQuery {
    /// The issuer URL; the subdomain's when absent.
    pub issuer: Option<String>,
}

/// `GET /services/{subdomain}/preflight[?issuer=…]`: the published documents, checked per cloud.
pub async fn documents(
    query: web::Query<IssuerQuery>,
    ServiceCaller { service, .. }: ServiceCaller,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let now = state.now();
    let command = CheckDocuments {
        issuer: query.into_inner().issuer,
    };
    let answer = state
        .read(move |registry| preflight::documents(registry, &service, command, now))
        .await?;
    Ok(HttpResponse::Ok().json(answer))
}

/// `POST /services/{subdomain}/preflight` with `{"token"}`: the documents and the token,
/// checked per cloud.
pub async fn token(
    query: web::Query<IssuerQuery>,
    ServiceCaller { service, caller }: ServiceCaller,
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    state.within_explain_budget(&caller, Some(service.id))?;
    let body = read_json(&req, payload, state.settings.max_body_bytes).await?;
    let command = CheckToken {
        body: body.unwrap_or_else(|| serde_json::json!({})),
        issuer: query.into_inner().issuer,
    };
    let now = state.now();
    let answer = state
        .read(move |registry| preflight::token(registry, &service, command, now))
        .await?;
    Ok(HttpResponse::Ok().json(answer))
}

/// `GET /services/{subdomain}/fetches`: who fetched the documents, and since they changed.
pub async fn fetches(
    ServiceCaller { service, .. }: ServiceCaller,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let hosted = state
        .replica
        .current(&service.subdomain, state.now())
        .await?;
    let mut issuers = vec![IssuerServed {
        issuer: state.registry.issuer_of(&service.subdomain),
        custom_domain: false,
        current: registry_replica::fetches::served(hosted.as_deref()),
    }];
    // The custom domain's documents, counted apart, while it is served.
    if let Some(domain) = state.replica.domains.of_service(service.id) {
        let current = hosted.as_deref().and_then(|hosted| {
            let discovery = domain.discovery(hosted);
            registry_replica::fetches::served_as(hosted, &discovery)
        });
        issuers.push(IssuerServed {
            issuer: domain.domain.issuer(),
            custom_domain: true,
            current,
        });
    }
    let now = state.now();
    let answer = state
        .read(move |registry| fetches::evidence(registry, &service, &issuers, now))
        .await?;
    Ok(HttpResponse::Ok().json(answer))
}

/// `GET /services/{subdomain}/fetches/history`: who fetched the key set, per clock hour, over
/// the 8 days the evidence is kept (what the console's timeline draws).
pub async fn history(
    ServiceCaller { service, .. }: ServiceCaller,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let now = state.now();
    let answer = state
        .read(move |registry| fetches::history(registry, &service, now))
        .await?;
    Ok(HttpResponse::Ok().json(answer))
}
