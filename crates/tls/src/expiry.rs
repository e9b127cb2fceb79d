//! When a certificate stops being valid: its `notAfter`, read from the DER by walking the few
//! fields before it (RFC 5280, 4.1). rustls checks certificates but does not say when they end;
//! the metrics do (`registry_tls_certificate_not_after_seconds`), so that an alert fires before
//! a renewal that did not happen breaks every client.

/// One DER element at the start of `input`: its tag, its content and what follows it.
fn element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (length, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let octets = usize::from(first & 0x7f);
        if octets == 0 || octets > 4 || rest.len() < octets {
            return None;
        }
        let length = rest[..octets]
            .iter()
            .fold(0usize, |length, &byte| (length << 8) | usize::from(byte));
        (length, &rest[octets..])
    };
    (rest.len() >= length).then(|| (tag, &rest[..length], &rest[length..]))
}

const SEQUENCE: u8 = 0x30;
const VERSION: u8 = 0xa0;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// The `notAfter` of a DER certificate, in seconds since the Unix epoch; `None` when it cannot
/// be read.
pub fn not_after(certificate: &[u8]) -> Option<i64> {
    let (SEQUENCE, certificate, _) = element(certificate)? else {
        return None;
    };
    let (SEQUENCE, mut tbs, _) = element(certificate)? else {
        return None;
    };
    if let Some((VERSION, _, rest)) = element(tbs) {
        tbs = rest;
    }
    // serialNumber, signature, issuer.
    for _ in 0..3 {
        tbs = element(tbs)?.2;
    }
    let (SEQUENCE, validity, _) = element(tbs)? else {
        return None;
    };
    let not_before_rest = element(validity)?.2;
    let (tag, time, _) = element(not_before_rest)?;
    parse_time(tag, std::str::from_utf8(time).ok()?)
}

/// `YYMMDDHHMMSSZ` (UTCTime: 50–99 are the 1900s) or `YYYYMMDDHHMMSSZ` (GeneralizedTime).
fn parse_time(tag: u8, text: &str) -> Option<i64> {
    let digits = text.strip_suffix('Z')?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let number = |range: std::ops::Range<usize>| digits.get(range)?.parse::<i64>().ok();
    let (year, rest) = match (tag, digits.len()) {
        (UTC_TIME, 12) => {
            let short = number(0..2)?;
            (
                if short < 50 {
                    2000 + short
                } else {
                    1900 + short
                },
                2,
            )
        }
        (GENERALIZED_TIME, 14) => (number(0..4)?, 4),
        _ => return None,
    };
    let field = |at: usize| number(rest + at..rest + at + 2);
    let (month, day) = (field(0)?, field(2)?);
    let (hour, minute, second) = (field(4)?, field(6)?, field(8)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + hour * 3_600 + minute * 60 + second)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_not_after_of_a_certificate_is_read() {
        let mut params = rcgen::CertificateParams::new(vec!["a.example".to_owned()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2026, 1, 2);
        params.not_after = rcgen::date_time_ymd(2027, 3, 4);
        let key = rcgen::KeyPair::generate().unwrap();
        let made = params.self_signed(&key).unwrap();
        // 2027-03-04T00:00:00Z
        assert_eq!(not_after(made.der()), Some(1_804_118_400));
        // GeneralizedTime, after 2049.
        params.not_after = rcgen::date_time_ymd(2051, 1, 1);
        let made = params.self_signed(&key).unwrap();
        assert_eq!(not_after(made.der()), Some(2_556_144_000));
        assert_eq!(not_after(b"\x30\x03\x02\x01\x01"), None);
        assert_eq!(not_after(&made.der()[..40]), None);
    }

    #[test]
    fn times_are_read_as_utc() {
        assert_eq!(parse_time(UTC_TIME, "700101000000Z"), Some(0));
        assert_eq!(parse_time(UTC_TIME, "491231235959Z"), Some(2_524_607_999));
        assert_eq!(parse_time(UTC_TIME, "500101000000Z"), Some(-631_152_000));
        assert_eq!(
            parse_time(GENERALIZED_TIME, "20000229120000Z"),
            Some(951_825_600)
        );
        assert_eq!(parse_time(UTC_TIME, "20000229120000Z"), None);
        assert_eq!(parse_time(UTC_TIME, "701301000000Z"), None);
        assert_eq!(parse_time(UTC_TIME, "700101000000"), None);
    }
}
