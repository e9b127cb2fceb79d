//! JSON representations of resources (docs/api.md, "Responses").

use crate::state::AppState;
use registry_domain::anonymous::remaining_seconds;
use registry_domain::app::anonymous::CreatedAnonymous;
use registry_domain::app::services::ServiceStatus;
use registry_domain::timestamp::rfc3339;
use registry_domain::{Service, ServiceAccount};
use serde_json::{json, Value};
use time::OffsetDateTime;

/// A service as the API shows it; anonymous ones add their name and lifetime.
pub fn service(state: &AppState, service: &Service, now: OffsetDateTime) -> Value {
    let mut body = json!({
        "id": service.id.to_string(),
        "subdomain": service.subdomain,
        "title": service.title,
        "description": service.description,
        "issuer": state.registry.issuer_of(&service.subdomain),
        "createdAt": rfc3339(service.created_at),
    });
    if let Some(expires_at) = service.expires_at {
        body["name"] = json!(service.subdomain);
        body["expiresAt"] = json!(rfc3339(expires_at));
        body["remainingSeconds"] = json!(remaining_seconds(expires_at, now));
    }
    body
}

/// What a list adds to a service with `?include=status`.
pub fn service_status(status: &ServiceStatus) -> Value {
    json!({
        "published": status.published,
        "keyCount": status.key_count,
        "lastFetchedAt": status.last_fetched_at.map(rfc3339),
        "domain": status.domain.as_ref().map(|(domain, state)| {
            json!({"domain": domain, "status": state.as_str()})
        }),
        "signing": status.signing.map(|signing| {
            json!({
                "algorithm": signing.algorithm.as_str(),
                "nextRotationAt": signing.next_rotation_at.map(rfc3339),
            })
        }),
    })
}

/// A service account, never with a token.
pub fn account(account: &ServiceAccount) -> Value {
    json!({
        "id": account.id.to_string(),
        "name": account.name,
        "policy": account.policy.document(),
        "createdAt": rfc3339(account.created_at),
        "lastUsedAt": account.last_used_at.map(rfc3339),
    })
}

/// The answer to `POST /anonymous/services`: the service, its secret (the one time it is
/// shown), the dashboard's link and the service's lifetime.
pub fn anonymous_created(
    state: &AppState,
    created: &CreatedAnonymous,
    now: OffsetDateTime,
) -> Value {
    let (service, secret) = (&created.service, &created.secret.plaintext);
    let expires_at = service.expires_at.unwrap_or(now);
    json!({
        "service": {
            "id": service.id.to_string(),
            "subdomain": service.subdomain,
            "name": service.subdomain,
            "title": service.title,
            "description": service.description,
            "issuer": state.registry.issuer_of(&service.subdomain),
        },
        "secret": secret,
        "dashboardUrl": format!(
            "{}/dashboard/anonymous/{}#secret={secret}",
            state.settings.base(),
            service.subdomain
        ),
        "expiresAt": rfc3339(expires_at),
        "remainingSeconds": remaining_seconds(expires_at, now),
    })
}
