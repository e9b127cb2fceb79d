//! One log line and one metrics sample per request, and the `X-Request-Id` echo.
//!
//! The line holds the method, the route pattern (never the query string, where a careless client
//! might put a secret), the status, the latency and the request id.

use crate::state::AppState;
use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use actix_web::web;
use std::time::Instant;

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

fn acceptable_id(value: &HeaderValue) -> Option<String> {
    let text = value.to_str().ok()?;
    let ok = !text.is_empty()
        && text.len() <= 128
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'));
    ok.then(|| text.to_owned())
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

/// The middleware.
pub async fn observe(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let started = Instant::now();
    let request_id = req
        .headers()
        .get(&REQUEST_ID)
        .and_then(acceptable_id)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let method = method_name(req.method());
    let state = req.app_data::<web::Data<AppState>>().cloned();
    let mut response = next.call(req).await?;
    let route = response
        .request()
        .match_pattern()
        .unwrap_or_else(|| "(unmatched)".to_owned());
    let status = response.status().as_u16();
    let elapsed = started.elapsed();
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
    if let Some(state) = state {
        state.metrics.request(&route, method, status, elapsed);
    }
    tracing::info!(
        method,
        route = %route,
        status,
        latency_ms = elapsed.as_secs_f64() * 1000.0,
        request_id = %request_id,
        "request"
    );
    Ok(response)
}
