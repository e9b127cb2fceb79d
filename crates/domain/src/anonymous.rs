//! Lifetime of anonymous services.

use crate::Violation;
use time::{Duration, OffsetDateTime};

/// The longest (and default) lifetime of an anonymous service.
pub const MAX_LIFETIME: Duration = Duration::hours(24);

/// Reads `ttlHours` from a creation request: absent means 24 hours; a number above 24
/// is clamped to 24; zero, negative or anything that is not a number is refused.
///
/// ```
/// use registry_domain::anonymous::lifetime;
/// use serde_json::json;
/// use time::Duration;
/// assert_eq!(lifetime(None).unwrap(), Duration::hours(24));
/// assert_eq!(lifetime(Some(&json!(1.5))).unwrap(), Duration::minutes(90));
/// assert_eq!(lifetime(Some(&json!(100))).unwrap(), Duration::hours(24));
/// assert_eq!(lifetime(Some(&json!(0.0005))).unwrap(), Duration::seconds(2)); // 1.8 s
/// assert_eq!(lifetime(Some(&json!(1e-9))).unwrap(), Duration::seconds(1));
/// assert!(lifetime(Some(&json!(0))).is_err());
/// assert!(lifetime(Some(&json!("2"))).is_err());
/// assert!(lifetime(Some(&json!(null))).is_err());
/// ```
pub fn lifetime(ttl_hours: Option<&serde_json::Value>) -> Result<Duration, Violation> {
    let hours = match ttl_hours {
        None => return Ok(MAX_LIFETIME),
        Some(v) => v.as_f64(),
    };
    match hours {
        Some(h) if h > 0.0 && h.is_finite() => {
            let seconds = (h * 3600.0).min(MAX_LIFETIME.whole_seconds() as f64);
            // Below one second the service would be born expired; a part of a second asked
            // for is given whole.
            Ok(Duration::seconds(seconds.max(1.0).ceil() as i64))
        }
        _ => Err(Violation::new(
            "/ttlHours",
            "ttlHours must be a number greater than 0 (at most 24; larger values are reduced to 24)",
        )),
    }
}

/// Whole seconds from `now` until `expires_at`, never negative.
///
/// ```
/// use registry_domain::anonymous::remaining_seconds;
/// use time::macros::datetime;
/// let at = datetime!(2026-11-21 11:00 UTC);
/// assert_eq!(remaining_seconds(at, datetime!(2026-11-21 10:59:58.5 UTC)), 1);
/// assert_eq!(remaining_seconds(at, datetime!(2026-11-21 12:00 UTC)), 0);
/// ```
pub fn remaining_seconds(expires_at: OffsetDateTime, now: OffsetDateTime) -> i64 {
    (expires_at - now).whole_seconds().max(0)
}
