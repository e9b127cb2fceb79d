//! How the API writes an instant (docs/api.md, "Responses"): RFC 3339 in UTC, whole seconds
//! (`2026-11-21T10:00:00Z`), but for the fetch evidence and key readiness, whose times keep
//! their milliseconds (`2026-11-25T12:03:10.5Z`): a fetch is "since the key" to the
//! millisecond, and a client comparing the two times must see what the registry compared.
//! Every time a response, an audit event or a warning names is written here.

use serde_json::Value;
use time::format_description::well_known::Rfc3339;
use time::{OffsetDateTime, UtcOffset};

/// `at` cut to its second: what [`rfc3339`] writes of it.
pub fn whole_second(at: OffsetDateTime) -> OffsetDateTime {
    at.replace_nanosecond(0).unwrap_or(at)
}

/// `at` as RFC 3339 in UTC, whole seconds.
///
/// ```
/// use registry_domain::timestamp::rfc3339;
/// let at = time::macros::datetime!(2026-11-21 10:00:00.75 +01:00);
/// assert_eq!(rfc3339(at), "2026-11-21T09:00:00Z");
/// ```
pub fn rfc3339(at: OffsetDateTime) -> String {
    whole_second(at.to_offset(UtcOffset::UTC))
        .format(&Rfc3339)
        .unwrap_or_default()
}

/// `at` as RFC 3339 in UTC, its fraction of a second kept (the fetch evidence's times, stored
/// to the millisecond).
///
/// ```
/// use registry_domain::timestamp::rfc3339_exact;
/// let at = time::macros::datetime!(2026-11-25 12:03:10.5 UTC);
/// assert_eq!(rfc3339_exact(at), "2026-11-25T12:03:10.5Z");
/// ```
pub fn rfc3339_exact(at: OffsetDateTime) -> String {
    at.to_offset(UtcOffset::UTC)
        .format(&Rfc3339)
        .unwrap_or_default()
}

/// [`rfc3339`] as a JSON string; `null` for what has not happened.
pub fn rfc3339_or_null(at: Option<OffsetDateTime>) -> Value {
    at.map_or(Value::Null, |at| Value::String(rfc3339(at)))
}
