//! One log line (`request_line`) and one metrics sample per request, the `X-Request-Id` echo
//! and the API host's headers (`answer_headers`); and, since it reads the host first, the turn
//! of a hosted issuer's request to the public path (`public::answer`) ahead of the router.
//!
//! The line holds the method, the route pattern (for hosted documents and paths no route serves,
//! the path; never the query string, where a careless client might put a secret), the status,
//! the latency, the request id, the client's address (after trusted proxies), the `Host` and the
//! User-Agent (cut to 100 characters). Every other line logged while a request is served
//! carries its request id too (`log_format`).
//!
//! This runs on every request, the public documents included, so it avoids work that does not
//! change the outcome: request ids come from a per-thread generator seeded from the system's
//! random source, not from a system call each; hosted documents are labelled without matching
//! the path against every API route; and log lines go to a buffer that a background thread
//! writes out, not one `write(2)` per request.

use crate::public;
use crate::state::AppState;
use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{self, HeaderName, HeaderValue};
use actix_web::http::ConnectionType;
use actix_web::middleware::Next;
use actix_web::web;
use registry_auth::RequestScope;
use registry_domain::credentials::redact_secrets;
use std::borrow::Cow;
use std::time::Instant;

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The route label of public documents (they are chosen by `Host`, not by a route pattern).
const HOSTED_ROUTE: &str = "(hosted)";
const UNMATCHED_ROUTE: &str = "(unmatched)";

/// A client's request id the log and the answer may carry: 1–128 characters of
/// `[A-Za-z0-9._:-]`, and no token (a careless client's id would write it to the log).
fn acceptable_id(value: &HeaderValue) -> bool {
    value.to_str().is_ok_and(|text| {
        !text.is_empty()
            && text.len() <= 128
            && text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
            && matches!(redact_secrets(text), Cow::Borrowed(_))
    })
}

/// A version-4 UUID of 122 random bits. Ids correlate log lines with responses, and they are
/// shown to clients: a counter would tell anyone how many requests the server answered between
/// two of theirs (docs/api.md, "Responses"). The bits come from `rand`'s per-thread ChaCha
/// generator, seeded (and periodically reseeded) from the operating system: unpredictable, without
/// a system call per request.
fn new_request_id() -> web::Bytes {
    // One u128 is two draws of the generator; an array of bytes would be sixteen.
    let id = uuid::Builder::from_random_bytes(rand::random::<u128>().to_ne_bytes()).into_uuid();
    let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
    web::Bytes::copy_from_slice(id.hyphenated().encode_lower(&mut text).as_bytes())
}

fn method_name(method: &actix_web::http::Method) -> &'static str {
    use actix_web::http::Method;
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        _ => "OTHER",
    }
}

/// The last step of the way in (`way_in`). It reads the host first: a hosted issuer's
/// request is answered here (`public::answer`); any other goes on to the router.
pub async fn observe(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    let started = Instant::now();
    let request_id = match req.headers().get(&REQUEST_ID) {
        Some(given) if acceptable_id(given) => web::Bytes::copy_from_slice(given.as_bytes()),
        _ => new_request_id(),
    };
    let method = method_name(req.method());
    let state = req.app_data::<web::Data<AppState>>().cloned();
    // Until answered or its client goes: a drain waits for it.
    let _in_flight = state.as_ref().map(|state| state.drain.enter());
    let named = (state.as_ref()).and_then(|state| public::Named::of(state, req.head()));
    let hosted = named.is_some();
    let answered = async {
        // The plain listener beside HTTPS answers most requests itself (a redirect). Boxed: its
        // future would otherwise widen every request's, the public path's included.
        if crate::tls::is_plain(&req) {
            if let Some(response) = Box::pin(crate::tls::plain(&req)).await {
                return Ok(req.into_response(response).map_into_right_body());
            }
        }
        match (named, &state) {
            (Some(named), Some(state)) => Ok(public::answer(req, state, named)
                .await
                .map_into_right_body()),
            _ => (next.call(req).await).map(ServiceResponse::map_into_left_body),
        }
    };
    // For audit events, refusal records, problems' `instance` and every line logged meanwhile
    // (`log_format`), in a task-local for the handler's duration (no allocation in the
    // request's extensions, no copy of the id, no tracing span).
    let call = registry_auth::REQUEST.scope(RequestScope::new(request_id), answered);
    let mut scoped = std::pin::pin!(call);
    let mut response = (&mut scoped).await?;
    let scope = scoped.as_mut().take_value();
    let status = response.status();
    // A service account's request counts as its use once it succeeded (`lastUsedAt`).
    if let (Some((account, at)), Some(state)) =
        (scope.as_ref().and_then(RequestScope::used_by), &state)
    {
        if status.is_success() || status.is_redirection() {
            state.auth.used(account, at);
        }
    }
    let request_id = scope.map_or_else(new_request_id, |scope| scope.id().clone());
    let request = response.request();
    let pattern = if hosted {
        None
    } else {
        request.match_pattern()
    };
    let route: Cow<'static, str> = match pattern {
        Some(pattern) => Cow::Owned(crate::route::named_segments(pattern)),
        None if hosted => Cow::Borrowed(HOSTED_ROUTE),
        None => Cow::Borrowed(UNMATCHED_ROUTE),
    };
    let status = status.as_u16();
    let elapsed = started.elapsed();
    // The line's fields are read only when it is written.
    if let Some(format) = crate::request_line::enabled() {
        // The path itself only where no route pattern names the request (never the query
        // string).
        let path =
            matches!(route, Cow::Borrowed(_)).then(|| redact_secrets(cut(request.path(), 200)));
        // Borrowed from the request: nothing is copied for the line (one that is not text,
        // rare, is made text).
        let header = |name: header::HeaderName, most: usize| {
            request
                .headers()
                .get(name)
                .map(|value| match value.to_str() {
                    Ok(text) => Cow::Borrowed(cut(text, most)),
                    Err(_) => {
                        Cow::Owned(cut(&String::from_utf8_lossy(value.as_bytes()), most).to_owned())
                    }
                })
        };
        // HTTP/2 names the host in `:authority`, which is the URI's.
        let host = header(header::HOST, 255).or_else(|| {
            (request.uri().authority()).map(|authority| Cow::Borrowed(cut(authority.as_str(), 255)))
        });
        // A token a careless client put where the line shows it is not written (docs/api.md,
        // "Operations").
        let host = host.map(redact_secrets);
        let user_agent = header(header::USER_AGENT, 100).map(redact_secrets);
        let client = state
            .as_ref()
            .map_or_else(
                || request.peer_addr().map(|a| a.ip()),
                |state| Some(crate::client_ip::client_ip(request, &state.trusted_proxies)),
            )
            .and_then(registry_domain::app::Origin::revealed);
        crate::request_line::RequestLine {
            method,
            route: &route,
            path: path.as_deref(),
            status,
            latency: elapsed,
            request_id: std::str::from_utf8(&request_id).unwrap_or_default(),
            client,
            host: host.as_deref(),
            user_agent: user_agent.as_deref(),
        }
        .write(format);
    }
    if let Some(state) = &state {
        state.metrics.request(&route, method, status, elapsed);
        // While the replica drains, keep-alive clients are sent elsewhere (HTTP/1.1).
        if state.drain.draining() {
            (response.response_mut().head_mut()).set_connection_type(ConnectionType::Close);
        }
    }
    if !hosted {
        crate::answer_headers::add(&mut response);
    }
    // Visible ASCII only: made here or checked by `acceptable_id`.
    if let Ok(request_id) = HeaderValue::from_maybe_shared(request_id) {
        response.headers_mut().insert(REQUEST_ID, request_id);
    }
    Ok(response)
}

/// `text` cut to at most `most` characters (a header is the client's to make as long as it likes).
fn cut(text: &str, most: usize) -> &str {
    // No more bytes than `most`, no more characters either: the usual header is not walked.
    if text.len() <= most {
        return text;
    }
    text.char_indices()
        .nth(most)
        .map_or(text, |(end, _)| &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_ids_are_distinct_uuids_and_given_ones_are_checked() {
        let a = new_request_id();
        let b = new_request_id();
        assert_ne!(a, b);
        for id in [&a, &b] {
            let id = uuid::Uuid::parse_str(std::str::from_utf8(id).unwrap()).unwrap();
            assert_eq!(id.get_version(), Some(uuid::Version::Random));
            assert_eq!(id.get_variant(), uuid::Variant::RFC4122);
        }
        // Random in both halves: neither a fixed prefix nor a counter.
        let halves: Vec<(u64, u64)> = (0..1000)
            .map(|_| {
                uuid::Uuid::parse_str(std::str::from_utf8(&new_request_id()).unwrap()).unwrap()
            })
            .map(|id| id.as_u64_pair())
            .collect();
        let distinct = |half: fn(&(u64, u64)) -> u64| {
            halves
                .iter()
                .map(half)
                .collect::<std::collections::HashSet<_>>()
                .len()
        };
        assert_eq!(distinct(|h| h.0), 1000);
        assert_eq!(distinct(|h| h.1), 1000);
        assert!(acceptable_id(&HeaderValue::from_static("abc-123:x.y_z")));
        assert!(!acceptable_id(&HeaderValue::from_static("")));
        assert!(!acceptable_id(&HeaderValue::from_static("a b")));
        assert!(!acceptable_id(
            &HeaderValue::from_str(&"a".repeat(129)).unwrap()
        ));
    }

    #[test]
    fn a_header_is_cut_to_characters_not_bytes() {
        assert_eq!(cut("curl/8.0", 100), "curl/8.0");
        assert_eq!(cut("abcdef", 4), "abcd");
        // Six bytes, three characters: within a limit of four characters.
        assert_eq!(cut("ééé", 4), "ééé");
        assert_eq!(cut("éééé", 2), "éé");
    }
}
