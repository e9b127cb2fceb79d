//! HTTP dates (RFC 9110 §5.6.7): what `Date`, `Last-Modified` and `If-Modified-Since` carry.

use actix_web::http::header::HeaderValue;
use actix_web::web;
use time::format_description::FormatItem;
use time::macros::format_description;
use time::OffsetDateTime;

/// The HTTP-date format (RFC 9110 §5.6.7), always GMT.
pub const HTTP_DATE: &[FormatItem<'static>] = format_description!(
    "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
);

/// `at` as an HTTP date.
pub fn http_date(at: OffsetDateTime) -> HeaderValue {
    at.to_offset(time::UtcOffset::UTC)
        .format(HTTP_DATE)
        .ok()
        .and_then(|date| HeaderValue::from_str(&date).ok())
        .unwrap_or_else(|| HeaderValue::from_static(""))
}

/// `at` as an HTTP date, in the bytes the replica keeps with each hosted entry
/// (`HostingCache`'s `DateText`): formatted once, when the entry is built.
pub fn http_date_bytes(at: OffsetDateTime) -> web::Bytes {
    web::Bytes::copy_from_slice(http_date(at).as_bytes())
}
