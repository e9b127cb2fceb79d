use super::cache::{Document, HTTP_DATE};
use crate::problem::ApiError;
use crate::state::AppState;
use actix_web::http::{header, Method, StatusCode};
use actix_web::{web, HttpRequest, HttpResponse};
use time::PrimitiveDateTime;

const DISCOVERY_PATH: &str = "/.well-known/openid-configuration";
const JWKS_PATHS: [&str; 4] = [
    registry_domain::publishing::JWKS_PATH,
    "/.well-known/jwks.json",
    "/keys",
    "/keys.json",
];

/// Whether the request is for a hosted issuer (its `Host` names a subdomain).
pub fn hosted_request(state: &AppState, req: &actix_web::dev::RequestHead) -> bool {
    req.headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .is_some_and(|host| state.hosting.subdomain_for_host(host).is_some())
}

/// Serves a hosted issuer's discovery document or key set: public, cacheable, no redirects.
pub async fn serve(req: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let host = req.connection_info().host().to_owned();
    let subdomain = state
        .hosting
        .subdomain_for_host(&host)
        .ok_or_else(|| ApiError::NotFound("no such issuer".into()))?;
    let path = req.path();
    let is_discovery = path == DISCOVERY_PATH;
    if !is_discovery && !JWKS_PATHS.contains(&path) {
        return Err(ApiError::NotFound(format!(
            "issuer hosts serve only {DISCOVERY_PATH} and {}",
            JWKS_PATHS[0]
        )));
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return Err(ApiError::MethodNotAllowed("GET, HEAD"));
    }
    let now = state.now();
    let Some(hosted) = state
        .hosting
        .get(&subdomain)
        .filter(|h| h.expires_at.is_none_or(|at| now < at))
    else {
        state.metrics.hosting_miss();
        return Err(ApiError::NotFound(format!(
            "nothing is published for {subdomain:?}"
        )));
    };
    state.metrics.hosting_hit();
    let (document, content_type): (&Document, &str) = if is_discovery {
        (&hosted.discovery, "application/json")
    } else {
        (&hosted.jwks, "application/jwk-set+json")
    };
    let not_modified = match req.headers().get(header::IF_NONE_MATCH) {
        Some(value) => etag_matches(value.to_str().unwrap_or(""), &document.etag),
        None => req
            .headers()
            .get(header::IF_MODIFIED_SINCE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| PrimitiveDateTime::parse(v, HTTP_DATE).ok())
            .is_some_and(|since| hosted.modified_at <= since.assume_utc()),
    };
    let mut response = HttpResponse::build(if not_modified {
        StatusCode::NOT_MODIFIED
    } else {
        StatusCode::OK
    });
    response
        .insert_header((header::CACHE_CONTROL, "public, max-age=30"))
        .insert_header((header::ETAG, document.etag.as_str()))
        .insert_header((header::LAST_MODIFIED, hosted.last_modified.as_str()))
        .insert_header((header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"));
    if not_modified {
        return Ok(response.finish());
    }
    response.insert_header((header::CONTENT_TYPE, content_type));
    Ok(response.body(document.body.clone()))
}

/// `If-None-Match` uses the weak comparison (RFC 9110 §13.1.2).
fn etag_matches(header_value: &str, etag: &str) -> bool {
    header_value.split(',').map(str::trim).any(|candidate| {
        candidate == "*" || candidate.strip_prefix("W/").unwrap_or(candidate) == etag
    })
}

#[cfg(test)]
mod tests {
    use super::etag_matches;

    #[test]
    fn if_none_match_lists_and_weak_tags() {
        assert!(etag_matches("\"a\"", "\"a\""));
        assert!(etag_matches("\"x\", W/\"a\"", "\"a\""));
        assert!(etag_matches("*", "\"a\""));
        assert!(!etag_matches("\"b\"", "\"a\""));
        assert!(!etag_matches("", "\"a\""));
    }
}
