//! HTTP dates (RFC 9110 §5.6.7): what `Date`, `Last-Modified` and `If-Modified-Since` carry.

use actix_web::http::header::HeaderValue;
use actix_web::web;
use time::format_description::FormatItem;
use time::macros::format_description;
use time::parsing::Parsed;
use time::{OffsetDateTime, PrimitiveDateTime};

/// The HTTP-date format (RFC 9110 §5.6.7), always GMT: the IMF-fixdate every date is written in.
pub const HTTP_DATE: &[FormatItem<'static>] = format_description!(
    "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
);

/// The obsolete RFC 850 form, with a two-digit year: `Sunday, 06-Nov-94 08:49:37 GMT`.
const RFC_850: &[FormatItem<'static>] = format_description!(
    "[weekday repr:long], [day]-[month repr:short]-[year repr:last_two] [hour]:[minute]:[second] GMT"
);

/// The obsolete form of C's `asctime()`: `Sun Nov  6 08:49:37 1994`.
const ASCTIME: &[FormatItem<'static>] = format_description!(
    "[weekday repr:short] [month repr:short] [day padding:space] [hour]:[minute]:[second] [year]"
);

/// An HTTP date as a client sends it (`If-Modified-Since`), in any of the three forms a
/// recipient must accept (RFC 9110 §5.6.7): the IMF-fixdate first, the one every client of
/// today sends. An RFC 850 date's two-digit year is the year within 50 years of `now` that
/// ends in those digits. `None`: not a date.
pub fn parse(value: &str, now: OffsetDateTime) -> Option<OffsetDateTime> {
    if let Ok(at) = PrimitiveDateTime::parse(value, HTTP_DATE) {
        return Some(at.assume_utc());
    }
    if let Ok(at) = PrimitiveDateTime::parse(value, ASCTIME) {
        return Some(at.assume_utc());
    }
    let mut parsed = Parsed::new();
    let rest = parsed.parse_items(value.as_bytes(), RFC_850).ok()?;
    if !rest.is_empty() {
        return None;
    }
    let this_year = now.year();
    let mut year = this_year - this_year.rem_euclid(100) + i32::from(parsed.year_last_two()?);
    if year > this_year + 50 {
        year -= 100;
    } else if year <= this_year - 50 {
        year += 100;
    }
    parsed.set_year(year)?;
    PrimitiveDateTime::try_from(parsed)
        .ok()
        .map(PrimitiveDateTime::assume_utc)
}

/// An HTTP date's length: `Sun, 06 Nov 1994 08:49:37 GMT`.
const LEN: usize = 29;

/// `at` as an HTTP date.
pub fn http_date(at: OffsetDateTime) -> HeaderValue {
    with_written(at, |date| {
        HeaderValue::from_bytes(date).unwrap_or_else(|_| HeaderValue::from_static(""))
    })
}

/// `at` as an HTTP date, in the bytes the replica keeps with each hosted entry
/// (`HostingCache`'s `DateText`): formatted once, when the entry is built.
pub fn http_date_bytes(at: OffsetDateTime) -> web::Bytes {
    with_written(at, web::Bytes::copy_from_slice)
}

/// `at` as an HTTP date's bytes, given to `with`. Written here rather than by `time`'s
/// formatting, which walks [`HTTP_DATE`] item by item (about 2,000 instructions): each issuer's
/// first fetch dates its entry. A year of other than four digits (before 0 or after 9999,
/// which no stored time holds) is left to `time`.
fn with_written<T>(at: OffsetDateTime, with: impl FnOnce(&[u8]) -> T) -> T {
    const DAYS: [&[u8; 3]; 7] = [b"Mon", b"Tue", b"Wed", b"Thu", b"Fri", b"Sat", b"Sun"];
    const MONTHS: [&[u8; 3]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    fn two(to: &mut [u8], n: u8) {
        to[0] = b'0' + n / 10;
        to[1] = b'0' + n % 10;
    }
    let at = at.to_offset(time::UtcOffset::UTC);
    let (year, month, day) = at.to_calendar_date();
    let Some(year) = u16::try_from(year).ok().filter(|year| *year <= 9999) else {
        return with(at.format(HTTP_DATE).unwrap_or_default().as_bytes());
    };
    let (hour, minute, second) = at.to_hms();
    let mut out: [u8; LEN] = *b"Mon, 00 Jan 0000 00:00:00 GMT";
    out[..3].copy_from_slice(DAYS[usize::from(at.weekday().number_days_from_monday())]);
    two(&mut out[5..7], day);
    out[8..11].copy_from_slice(MONTHS[usize::from(u8::from(month) - 1)]);
    // Both below 100: a year of at most 9999.
    two(&mut out[12..14], (year / 100) as u8);
    two(&mut out[14..16], (year % 100) as u8);
    two(&mut out[17..19], hour);
    two(&mut out[20..22], minute);
    two(&mut out[23..25], second);
    with(&out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn the_three_forms_of_an_http_date_are_read() {
        let now = datetime!(2026-11-30 12:00 UTC);
        let example = datetime!(1994-11-06 08:49:37 UTC);
        assert_eq!(parse("Sun, 06 Nov 1994 08:49:37 GMT", now), Some(example));
        assert_eq!(parse("Sunday, 06-Nov-94 08:49:37 GMT", now), Some(example));
        assert_eq!(parse("Sun Nov  6 08:49:37 1994", now), Some(example));
        // A two-digit year is the one within 50 years of now.
        assert_eq!(
            parse("Monday, 30-Nov-26 12:00:00 GMT", now),
            Some(datetime!(2026-11-30 12:00 UTC))
        );
        assert_eq!(
            parse("Wednesday, 01-Jan-76 00:00:00 GMT", now),
            Some(datetime!(2076-01-01 00:00 UTC))
        );
        assert_eq!(
            parse("Saturday, 01-Jan-77 00:00:00 GMT", now),
            Some(datetime!(1977-01-01 00:00 UTC))
        );
        for not_a_date in [
            "",
            "yesterday",
            "Sun, 06 Nov 1994 08:49:37 GMT trailing",
            "Sunday, 06-Nov-94 08:49:37 GMT trailing",
            "Sun, 06 Nov 1994 08:49:37 CET",
            "Sun, 31 Feb 1994 08:49:37 GMT",
        ] {
            assert_eq!(parse(not_a_date, now), None, "{not_a_date:?}");
        }
    }

    #[test]
    fn dates_are_written_as_the_format_writes_them() {
        let written = |at: OffsetDateTime| with_written(at, <[u8]>::to_vec);
        let formatted = |at: OffsetDateTime| at.format(HTTP_DATE).unwrap().into_bytes();
        // RFC 9110's example, then every 7,919 s (a prime: every hour, weekday and day of the
        // month comes round) from 1970 to 2100, then the ends of the years written here.
        let example = OffsetDateTime::from_unix_timestamp(784_111_777).unwrap();
        assert_eq!(written(example), b"Sun, 06 Nov 1994 08:49:37 GMT");
        let mut checked = 0;
        for t in (0..4_102_444_800_i64).step_by(7_919) {
            let at = OffsetDateTime::from_unix_timestamp(t).unwrap();
            assert_eq!(written(at), formatted(at), "{at}");
            checked += 1;
        }
        assert!(checked > 500_000);
        let first = time::macros::datetime!(0000-01-01 00:00:00 UTC);
        let last = time::macros::datetime!(9999-12-31 23:59:59.999 UTC);
        for at in [first, last] {
            assert_eq!(written(at), formatted(at), "{at}");
            assert_eq!(written(at).len(), LEN);
        }
        // Another offset is written in GMT; a year `time` writes otherwise is left to it.
        let paris = example.to_offset(time::macros::offset!(+1));
        assert_eq!(written(paris), written(example));
        let before = first - time::Duration::SECOND;
        assert_eq!(written(before), formatted(before));
    }
}
