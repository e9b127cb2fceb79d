//! HTTP dates (RFC 9110 §5.6.7): what `Date`, `Last-Modified` and `If-Modified-Since` carry.

use actix_web::http::header::HeaderValue;
use actix_web::web;
use time::format_description::FormatItem;
use time::macros::format_description;
use time::OffsetDateTime;

/// The HTTP-date format (RFC 9110 §5.6.7), always GMT: how `If-Modified-Since` is read.
pub const HTTP_DATE: &[FormatItem<'static>] = format_description!(
    "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
);

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
