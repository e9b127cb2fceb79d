//! The headers every answer of the API host carries, whichever route made it (a hosted issuer's
//! documents have their own, `public`): added once, in `observe`, not by each route.

use actix_web::dev::ServiceResponse;
use actix_web::http::header::{self, HeaderValue};

/// One year: what browsers' preload lists ask of a host, long enough that a visit a month
/// apart keeps the pin.
const HSTS: HeaderValue = HeaderValue::from_static("max-age=31536000");
const NO_STORE: HeaderValue = HeaderValue::from_static("no-store");
const NOSNIFF: HeaderValue = HeaderValue::from_static("nosniff");

/// Adds to an answer of the API host:
/// - `X-Content-Type-Options: nosniff`: a JSON body, which may echo what a client sent, is never
///   read by a browser as a script or a page;
/// - `Cache-Control: no-store` to the answer of a request that carried credentials, when its
///   route set none: an account's data, its services and their settings are kept in no cache,
///   a browser's own included, whatever a proxy makes of `Authorization`;
/// - over the registry's own HTTPS, `Strict-Transport-Security` (no `includeSubDomains`: the
///   hosts beside the registry's are not its to pin): a browser that reached the console once
///   never sends its token over plain HTTP to a look-alike of the redirect. Behind a proxy that
///   ends TLS, it is the proxy's to send.
pub fn add<B>(response: &mut ServiceResponse<B>) {
    let request = response.request();
    let credentials = request.headers().contains_key(header::AUTHORIZATION);
    let secure = request.app_config().secure();
    let headers = response.headers_mut();
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, NOSNIFF);
    if credentials && !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, NO_STORE);
    }
    if secure {
        headers.insert(header::STRICT_TRANSPORT_SECURITY, HSTS);
    }
}
