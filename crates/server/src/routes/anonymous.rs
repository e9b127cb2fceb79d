//! `POST /anonymous/services`: a temporary service for anyone, managed with a one-time secret.

use crate::audit;
use crate::body::{read_json, Fields};
use crate::client_ip::client_ip;
use crate::problem::{ApiError, ApiResult};
use crate::routes::services::{MAX_DESCRIPTION, MAX_TITLE};
use crate::state::AppState;
use crate::views;
use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use registry_domain::anonymous::{lifetime, remaining_seconds};
use registry_domain::audit::{Action, Actor};
use registry_domain::credentials::{self, CredentialKind};
use registry_domain::naming::anonymous_subdomain;
use registry_domain::ports::CredentialRecord;
use registry_domain::Service;
use serde_json::json;

/// Creates an anonymous service.
pub async fn create(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let body = read_json(&req, payload, state.settings.max_body_bytes).await?;
    let mut fields = Fields::new(body.as_ref(), &["title", "description", "ttlHours"])?;
    let title = fields.string("title", false, MAX_TITLE);
    let description = fields.string("description", false, MAX_DESCRIPTION);
    let ttl = match lifetime(fields.raw("ttlHours")) {
        Ok(ttl) => Some(ttl),
        Err(violation) => {
            fields.problems.push(violation);
            None
        }
    };
    fields.finish()?;
    let ttl = ttl.ok_or(ApiError::Internal)?;

    let ip = client_ip(&req, &state.trusted_proxies);
    state
        .anon_limiter
        .hit(ip)
        .map_err(|retry| ApiError::RateLimited {
            retry_after_secs: retry.0.as_secs().max(1),
            detail: format!(
                "at most {} anonymous services per hour from one address",
                state.settings.anon_create_per_hour
            ),
        })?;

    let now = state.now();
    let live = state.db(move |s| s.live_anonymous(now)).await?;
    if live >= state.settings.anon_max_active {
        return Err(ApiError::Capacity {
            retry_after_secs: 60,
            detail: format!(
                "the registry holds {} live anonymous services, the most it keeps; retry later, \
                 when some have expired",
                state.settings.anon_max_active
            ),
        });
    }

    let secret = credentials::generate(CredentialKind::AnonymousSecret, &state.rng);
    let hash = state.hasher.hash(secret.plaintext.clone()).await?;
    let record = CredentialRecord {
        lookup_id: secret.lookup_id.clone(),
        hash: hash.clone(),
    };
    let now = state.now();
    let service = Service {
        id: uuid::Uuid::new_v4(),
        customer_id: None,
        subdomain: anonymous_subdomain(&state.rng),
        title,
        description,
        created_at: now,
        expires_at: Some(now + ttl),
    };
    let row = service.clone();
    let event = audit::service_event(
        &state,
        &req,
        &Actor::anonymous(),
        Action::AnonymousCreate,
        &service,
    );
    state
        .db(move |s| s.create_service(&row, Some(&record), &event))
        .await?;
    // The creator's first call should not pay for argon2 again.
    state
        .tokens
        .remember(&secret.lookup_id, &hash, &secret.plaintext, now);

    let expires_at = service.expires_at.unwrap_or(now);
    let base = state.settings.base();
    Ok(HttpResponse::Created()
        .insert_header((
            header::LOCATION,
            format!("{base}/services/{}", service.subdomain),
        ))
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(json!({
            "service": {
                "id": service.id.to_string(),
                "subdomain": service.subdomain,
                "name": service.subdomain,
                "title": service.title,
                "description": service.description,
                "issuer": state.issuer_of(&service.subdomain),
            },
            "secret": secret.plaintext,
            "dashboardUrl": format!(
                "{base}/dashboard/anonymous/{}#secret={}",
                service.subdomain, secret.plaintext
            ),
            "expiresAt": views::timestamp(expires_at),
            "remainingSeconds": remaining_seconds(expires_at, now),
        })))
}
