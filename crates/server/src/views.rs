//! JSON representations of resources (DECISIONS §3).

use crate::state::AppState;
use registry_domain::anonymous::remaining_seconds;
use registry_domain::{Service, ServiceAccount};
use serde_json::{json, Value};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// RFC 3339 UTC, whole seconds (`2026-11-21T10:00:00Z`).
pub fn timestamp(at: OffsetDateTime) -> String {
    at.replace_nanosecond(0)
        .unwrap_or(at)
        .format(&Rfc3339)
        .unwrap_or_default()
}

/// A service as the API shows it; anonymous ones add their name and lifetime.
pub fn service(state: &AppState, service: &Service, now: OffsetDateTime) -> Value {
    let mut body = json!({
        "id": service.id.to_string(),
        "subdomain": service.subdomain,
        "title": service.title,
        "description": service.description,
        "issuer": state.issuer_of(&service.subdomain),
        "createdAt": timestamp(service.created_at),
    });
    if let Some(expires_at) = service.expires_at {
        body["name"] = json!(service.subdomain);
        body["expiresAt"] = json!(timestamp(expires_at));
        body["remainingSeconds"] = json!(remaining_seconds(expires_at, now));
    }
    body
}

/// A service account, never with a token.
pub fn account(account: &ServiceAccount) -> Value {
    json!({
        "id": account.id.to_string(),
        "name": account.name,
        "policy": account.policy.document(),
        "createdAt": timestamp(account.created_at),
        "lastUsedAt": account.last_used_at.map(timestamp),
    })
}
