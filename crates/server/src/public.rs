//! The public path: a service's discovery document and key set, chosen by `Host`
//! (docs/api.md, "Public hosting"), from the replica's memory; and the configuration body of the
//! API's GET.

use crate::http_date::{self, http_date};
use crate::problem::ApiError;
use crate::state::AppState;
use actix_web::dev::{RequestHead, ServiceRequest, ServiceResponse};
use actix_web::http::header::{self, HeaderName, HeaderValue};
use actix_web::http::{Method, StatusCode};
use actix_web::ResponseError;
use actix_web::{web, HttpRequest, HttpResponse};
use registry_domain::issuer::Label;
use registry_domain::network::Network;
use registry_domain::ports::FetchedDocument;
use registry_replica::domains::Served;
use registry_replica::hosting::{Document, Hosted};
use std::cell::RefCell;
use std::sync::Arc;
use time::OffsetDateTime;

/// A header value of bytes the replica keeps: shared, not copied.
fn shared_header(bytes: &web::Bytes) -> HeaderValue {
    HeaderValue::from_maybe_shared(bytes.clone()).unwrap_or_else(|_| HeaderValue::from_static(""))
}

const DISCOVERY_PATH: &str = "/.well-known/openid-configuration";
/// Every path a hosted issuer serves: the discovery document, the key set and its aliases.
pub const PUBLIC_PATHS: [&str; 5] = [
    DISCOVERY_PATH,
    JWKS_PATHS[0],
    JWKS_PATHS[1],
    JWKS_PATHS[2],
    JWKS_PATHS[3],
];
const JWKS_PATHS: [&str; 4] = [
    registry_domain::publishing::JWKS_PATH,
    "/.well-known/jwks.json",
    "/keys",
    "/keys.json",
];

/// 30 s fresh, 30 s more served stale while a cache revalidates, and a day stale while the
/// registry cannot be reached (docs/api.md, "Behind a CDN").
const CACHE_CONTROL: HeaderValue =
    HeaderValue::from_static("public, max-age=30, stale-while-revalidate=30, stale-if-error=86400");
/// The header that names a response's purge key for CDNs that purge by key (a name made once:
/// parsing a header name that is not a standard one costs an allocation per response).
const SURROGATE_KEY: HeaderName = HeaderName::from_static("surrogate-key");
const ANY_ORIGIN: HeaderValue = HeaderValue::from_static("*");
const JSON: HeaderValue = HeaderValue::from_static("application/json");
const JWK_SET: HeaderValue = HeaderValue::from_static("application/jwk-set+json");

/// The host a request names: its `Host` header, or over HTTP/2 its `:authority` (which takes
/// the place of `Host` there). Only this chooses the issuer (never `X-Forwarded-Host`), for the
/// public path and the log alike.
pub fn host(req: &RequestHead) -> Option<&str> {
    match req.headers().get(header::HOST) {
        Some(host) => host.to_str().ok(),
        None => req.uri.authority().map(|authority| authority.as_str()),
    }
}

/// A `Host` as a name: without its port and a final dot, lower case.
pub fn name_of_host(host: &str) -> String {
    registry_domain::issuer::name_of(host).to_ascii_lowercase()
}

/// The custom domain a `Host` names, when it is served (docs/api.md, "Custom domains").
pub fn custom_domain(state: &AppState, host: &str) -> Option<Arc<Served>> {
    let domains = &state.replica.domains;
    // Before making the name: most hosts asked for are no custom domain's.
    if domains.is_empty() {
        return None;
    }
    domains.get(&name_of_host(host))
}

/// The hosted issuer a request's host names: a subdomain's, or a custom domain served.
pub enum Named {
    Subdomain(Label),
    Domain(Arc<Served>),
}

impl Named {
    /// What the request's host names, if it is a hosted issuer's.
    pub fn of(state: &AppState, req: &RequestHead) -> Option<Self> {
        let host = host(req)?;
        match state.replica.hosting.issuers().subdomain_of_host(host) {
            Some(label) => Some(Named::Subdomain(label)),
            None => custom_domain(state, host).map(Named::Domain),
        }
    }
}

/// Answers a request for the hosted issuer it `named` (docs/api.md, "Public hosting"), ahead of
/// the router: an issuer's host serves its documents and nothing else, so the API's routes are
/// never matched against its requests. `observe` calls it, having read the host: the request is
/// logged and counted, and its body held to its deadline, as any other (`serve` never reads it).
pub async fn answer(req: ServiceRequest, state: &AppState, named: Named) -> ServiceResponse {
    let (request, _unread) = req.into_parts();
    let response = serve(&request, state, named).await.unwrap_or_else(|error| {
        // Open to every origin like the documents: a page reading an issuer learns it is
        // unknown (404), not that the browser hid the answer.
        let mut response = error.error_response();
        let headers = response.headers_mut();
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, ANY_ORIGIN);
        response
    });
    ServiceResponse::new(request, response)
}

/// The document a public path serves: the discovery document, or the key set (at its path or one
/// of its aliases).
pub fn served_document(path: &str) -> Option<FetchedDocument> {
    if path == DISCOVERY_PATH {
        Some(FetchedDocument::Discovery)
    } else if JWKS_PATHS.contains(&path) {
        Some(FetchedDocument::Jwks)
    } else {
        None
    }
}

/// Whether this request's fetch arrives in a cache's log instead (docs/api.md, "Behind a CDN"):
/// the log is taken (`REGISTRY_FETCH_LOG_TOKEN`) and the request came from a trusted proxy.
fn counted_from_the_log(req: &HttpRequest, state: &AppState) -> bool {
    state.settings.fetch_log_token.is_some()
        && crate::client_ip::from_trusted_proxy(req, &state.trusted_proxies)
}

/// Serves a hosted issuer's discovery document or key set: public, cacheable, no redirects.
async fn serve(
    req: &HttpRequest,
    state: &AppState,
    named: Named,
) -> Result<HttpResponse, ApiError> {
    let (subdomain, domain): (&str, Option<&Served>) = match &named {
        Named::Subdomain(label) => (label, None),
        Named::Domain(served) => (&served.subdomain, Some(served)),
    };
    let Some(fetched) = served_document(req.path()) else {
        return Err(ApiError::NotFound(format!(
            "issuer hosts serve only {DISCOVERY_PATH} and {}",
            JWKS_PATHS[0]
        )));
    };
    let is_discovery = fetched == FetchedDocument::Discovery;
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return Err(ApiError::MethodNotAllowed("GET, HEAD"));
    }
    let now = state.now();
    let hosted = state.replica.current(subdomain, now).await?;
    let Some(hosted) = hosted else {
        state.metrics.hosting_miss();
        return Err(ApiError::NotFound(format!(
            "nothing is published for {:?}",
            subdomain
        )));
    };
    state.metrics.hosting_hit();
    // Under a custom domain, the discovery document names the domain's issuer; the key set is
    // the same bytes.
    let renamed = domain
        .filter(|_| is_discovery)
        .map(|served| served.discovery(&hosted));
    let document = match (&renamed, is_discovery) {
        (Some(renamed), _) => (renamed, JSON),
        (None, true) => (&hosted.discovery, JSON),
        (None, false) => (&hosted.jwks, JWK_SET),
    };
    let since = domain.map(|served| served.modified_since());
    let response = respond(req, &hosted, document, since, now);
    if req.method() == Method::GET && !counted_from_the_log(req, state) {
        let agent = req.headers().get(header::USER_AGENT);
        let not_modified = response.status() == StatusCode::NOT_MODIFIED;
        let agent = agent.map_or(&b""[..], HeaderValue::as_bytes);
        // A custom domain's fetches are counted apart (docs/api.md, "Fetch evidence").
        let fetched = match domain {
            Some(_) => fetched.on_custom_domain(),
            None => fetched,
        };
        // Key readiness recognises a verifier by its networks too (docs/api.md, "Key
        // readiness").
        // An address the forwarding chain does not reveal is no network: it recognises no one.
        let address = crate::client_ip::client_ip(req, &state.trusted_proxies);
        let network = (address != crate::client_ip::UNKNOWN).then(|| Network::of(address));
        let service = hosted.service_id();
        (state.replica.fetches).record(service, fetched, not_modified, agent, network, now);
    }
    Ok(response)
}

/// The answer with `document` (and its content type): 304 when the client's copy is current.
/// `since`: the earliest date the documents may have (a custom domain's, `Served::modified_since`).
fn respond(
    req: &HttpRequest,
    hosted: &Hosted,
    (document, content_type): (&Document, HeaderValue),
    since: Option<OffsetDateTime>,
    now: OffsetDateTime,
) -> HttpResponse {
    let modified = match since.filter(|since| *since > hosted.modified_at) {
        // No other change falls in the second: it begins after the claim.
        Some(since) => Modified {
            at: since,
            second_shared: false,
            text: None,
        },
        None => Modified {
            at: hosted.modified_at,
            // A change in the floor's own second: a client may hold that date from before it.
            second_shared: hosted.modified_second_shared || since == Some(hosted.modified_at),
            text: Some(&hosted.last_modified),
        },
    };
    let not_modified = match req.headers().get(header::IF_NONE_MATCH) {
        Some(value) => etag_matches(
            value.to_str().unwrap_or(""),
            std::str::from_utf8(&document.etag).unwrap_or_default(),
        ),
        None => req
            .headers()
            .get(header::IF_MODIFIED_SINCE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| http_date::parse(v, now))
            .is_some_and(|held| modified.unchanged_since(held)),
    };
    let (date_at, date) = date(now);
    // A replica whose clock is behind the one that took the write would otherwise date the
    // document after its own Date (RFC 9110 §8.8.2.1); the earlier date only costs a 200.
    let last_modified = match modified.text {
        _ if modified.at > date_at => date.clone(),
        Some(text) => shared_header(text),
        None => http_date::http_date(modified.at),
    };
    // The head's map filled directly, without the builder's conversion and pending-error check
    // around each header.
    let mut response = if not_modified {
        HttpResponse::new(StatusCode::NOT_MODIFIED)
    } else {
        HttpResponse::with_body(StatusCode::OK, document.body.clone()).map_into_boxed_body()
    };
    let headers = response.headers_mut();
    headers.insert(header::DATE, date);
    headers.insert(header::CACHE_CONTROL, CACHE_CONTROL);
    headers.insert(header::ETAG, shared_header(&document.etag));
    headers.insert(header::LAST_MODIFIED, last_modified);
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, ANY_ORIGIN);
    headers.insert(SURROGATE_KEY, shared_header(&hosted.surrogate_key));
    if !not_modified {
        headers.insert(header::CONTENT_TYPE, content_type);
    }
    response
}

/// The `Last-Modified` of an answer.
struct Modified<'a> {
    /// When the documents last changed (whole seconds).
    at: OffsetDateTime,
    /// Whether another change of the documents falls in that second.
    second_shared: bool,
    /// `at` as the header says it, when made already.
    text: Option<&'a web::Bytes>,
}

impl Modified<'_> {
    /// Whether a client holding `held` as `Last-Modified` holds the current documents (RFC
    /// 9110 §13.1.3). Dates have whole seconds: when the second of the last change saw another
    /// one, a client holding that date may hold the older version, so only a later date
    /// answers 304 (docs/api.md, "Public hosting").
    fn unchanged_since(&self, held: OffsetDateTime) -> bool {
        self.at < held || (self.at == held && !self.second_shared)
    }
}

/// The `Date` header at `now`, and its second. Sent by this handler rather than by the server,
/// whose date is refreshed every 500 ms and may still name the second before a change that
/// `Last-Modified` already names; formatted once a second by each worker (per thread: a value
/// every worker read from one place would be one more cache line they pass around).
fn date(now: OffsetDateTime) -> (OffsetDateTime, HeaderValue) {
    thread_local! {
        static DATE: RefCell<(i64, HeaderValue)> =
            const { RefCell::new((i64::MIN, HeaderValue::from_static(""))) };
    }
    let second = now.unix_timestamp();
    let at = OffsetDateTime::from_unix_timestamp(second).unwrap_or(now);
    DATE.with(|cached| {
        let mut cached = cached.borrow_mut();
        if cached.0 != second {
            *cached = (second, http_date(at));
        }
        (at, cached.1.clone())
    })
}

/// The body of `GET /services/{s}/config`, `{"openidConfiguration": …, "jwks": …}` (the key
/// set as uploaded, without the retired keys): the
/// published documents are already compact JSON, so the body is their bytes joined, exactly what
/// serialising the parsed documents again would give, without parsing them.
pub fn config_body(hosted: &Hosted) -> web::Bytes {
    const OPEN: &[u8] = br#"{"openidConfiguration":"#;
    const BETWEEN: &[u8] = br#","jwks":"#;
    let mut body = Vec::with_capacity(
        OPEN.len() + hosted.discovery.body.len() + BETWEEN.len() + hosted.uploaded_jwks.len() + 1,
    );
    body.extend_from_slice(OPEN);
    body.extend_from_slice(&hosted.discovery.body);
    body.extend_from_slice(BETWEEN);
    body.extend_from_slice(&hosted.uploaded_jwks);
    body.push(b'}');
    body.into()
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
