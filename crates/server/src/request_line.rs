//! The log line of each request, written without tracing's field machinery.
//!
//! Every request, the public documents included, logs one line of ten fields. Through
//! `tracing::info!` each field is a visitor call, a `fmt::Arguments` and a `Debug` or `Display`
//! formatting: 14,000 instructions a request, more than half of what the public path costs
//! (docs/benchmarks.md). Written here, field by field into a buffer the thread keeps, the same
//! line costs a fraction of that. It keeps the shape of the other lines (tracing-subscriber's
//! text and flattened JSON formats, with `message` = `request` and the target of this module),
//! and it obeys `RUST_LOG` like them: it is written only where an `info` event of this module
//! would be.

use crate::settings::LogFormat;
use std::cell::RefCell;
use std::io::Write as _;
use std::net::IpAddr;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

/// How `serve` writes its log, set once by the binary when it installs the log. Unset (a server
/// run inside another program, which installs no log): no request line.
static FORMAT: OnceLock<LogFormat> = OnceLock::new();

/// Makes request lines follow `format`, the format of the rest of the log.
pub(crate) fn set_format(format: LogFormat) {
    let _ = FORMAT.set(format);
}

/// One request, as its line tells it.
#[derive(Debug)]
pub struct RequestLine<'a> {
    /// `GET`, `PUT`…
    pub method: &'static str,
    /// The route's pattern, `(hosted)` or `(unmatched)`.
    pub route: &'a str,
    /// The path, where no route pattern names the request.
    pub path: Option<&'a str>,
    /// The response's status.
    pub status: u16,
    /// From the request's arrival to its response.
    pub latency: Duration,
    /// Its `X-Request-Id`.
    pub request_id: &'a str,
    /// The client's address, after trusted proxies.
    pub client: Option<IpAddr>,
    /// Its `Host`.
    pub host: Option<&'a str>,
    /// Its `User-Agent`, cut to 100 characters.
    pub user_agent: Option<&'a str>,
}

thread_local! {
    /// The second whose timestamp prefix is kept, and that prefix (`YYYY-MM-DDTHH:MM:SS.`).
    static PREFIX: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

/// The log's format, when it takes request lines (`info` lines of this module); `None`
/// otherwise, and then nothing of the line need be read.
pub fn enabled() -> Option<LogFormat> {
    FORMAT
        .get()
        .copied()
        .filter(|_| tracing::enabled!(tracing::Level::INFO))
}

impl RequestLine<'_> {
    /// Writes the line to the log, in `format` (what [`enabled`] answered): straight into this
    /// thread's log buffer.
    pub fn write(&self, format: LogFormat) {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        PREFIX.with(|cell| {
            let (second, prefix) = &mut *cell.borrow_mut();
            if now.as_secs() != *second {
                *second = now.as_secs();
                *prefix = second_prefix(now.as_secs());
            }
            let mut log = crate::log_buffer::log_line();
            let line = log.bytes();
            match format {
                LogFormat::Json => self.json(line, prefix, now.subsec_micros()),
                LogFormat::Text => self.text(line, prefix, now.subsec_micros()),
            }
            line.push(b'\n');
        });
    }

    fn text(&self, line: &mut Vec<u8>, prefix: &str, micros: u32) {
        line.extend_from_slice(prefix.as_bytes());
        push_padded(line, micros.into(), 6);
        line.extend_from_slice(concat!("Z  INFO ", module_path!(), ": request method=").as_bytes());
        line.extend_from_slice(self.method.as_bytes());
        line.extend_from_slice(b" route=");
        push_value(line, self.route);
        if let Some(path) = self.path {
            line.extend_from_slice(b" path=");
            push_value(line, path);
        }
        line.extend_from_slice(b" status=");
        push_decimal(line, self.status.into());
        line.extend_from_slice(b" latency_ms=");
        latency_ms(line, self.latency);
        line.extend_from_slice(b" request_id=");
        push_value(line, self.request_id);
        if let Some(client) = self.client {
            line.extend_from_slice(b" client=");
            push_ip(line, client);
        }
        for (name, value) in [(" host=", self.host), (" user_agent=", self.user_agent)] {
            if let Some(value) = value {
                line.extend_from_slice(name.as_bytes());
                push_quoted(line, value);
            }
        }
    }

    fn json(&self, line: &mut Vec<u8>, prefix: &str, micros: u32) {
        line.extend_from_slice(b"{\"timestamp\":\"");
        line.extend_from_slice(prefix.as_bytes());
        push_padded(line, micros.into(), 6);
        line.extend_from_slice(b"Z\",\"level\":\"INFO\",\"message\":\"request\",\"method\":\"");
        line.extend_from_slice(self.method.as_bytes());
        line.extend_from_slice(b"\",\"route\":");
        json_string(line, self.route);
        if let Some(path) = self.path {
            line.extend_from_slice(b",\"path\":");
            json_string(line, path);
        }
        line.extend_from_slice(b",\"status\":");
        push_decimal(line, self.status.into());
        line.extend_from_slice(b",\"latency_ms\":");
        latency_ms(line, self.latency);
        line.extend_from_slice(b",\"request_id\":");
        json_string(line, self.request_id);
        if let Some(client) = self.client {
            line.extend_from_slice(b",\"client\":\"");
            push_ip(line, client);
            line.push(b'"');
        }
        for (name, value) in [
            (",\"host\":", self.host),
            (",\"user_agent\":", self.user_agent),
        ] {
            if let Some(value) = value {
                line.extend_from_slice(name.as_bytes());
                json_string(line, value);
            }
        }
        line.extend_from_slice(concat!(",\"target\":\"", module_path!(), "\"}").as_bytes());
    }
}

// The line is written field by field with the helpers below rather than `write!`: each `write!`
// goes through `fmt::Arguments`, a formatter and its padding logic, which cost more than the
// rest of the line together (docs/benchmarks.md).

/// `n` in decimal.
fn push_decimal(line: &mut Vec<u8>, n: u64) {
    push_padded(line, n, 1);
}

/// `n` in decimal, with leading zeros to at least `width` digits.
fn push_padded(line: &mut Vec<u8>, n: u64, width: usize) {
    let mut buffer = itoa::Buffer::new();
    let digits = buffer.format(n);
    line.resize(line.len() + width.saturating_sub(digits.len()), b'0');
    line.extend_from_slice(digits.as_bytes());
}

/// An address as `Display` writes it (IPv6 through `Display` itself: rare, and its
/// shortening rules are not worth repeating).
fn push_ip(line: &mut Vec<u8>, ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => {
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    line.push(b'.');
                }
                push_decimal(line, octet.into());
            }
        }
        IpAddr::V6(v6) => {
            let _ = write!(line, "{v6}");
        }
    }
}

/// A value of the text line that a client may choose (the path, the request id): as it is when
/// it is printable ASCII without a space, a quote, a backslash or `=`, as almost every path is;
/// else quoted ([`push_quoted`]), so that `/x" route=/services` cannot pass for a field of its
/// own (docs/api.md, "Text people read").
fn push_value(line: &mut Vec<u8>, text: &str) {
    // Every byte looked at without a branch, so that the compiler compares many at once: the
    // path, the route and the request id are checked on every request (a branch per byte cost
    // about 700 instructions of a public request, callgrind).
    let needs_quotes = text.bytes().fold(0u8, |seen, b| {
        seen | u8::from(b.wrapping_sub(0x21) > 0x7e - 0x21)
            | u8::from(b == b'"')
            | u8::from(b == b'\\')
            | u8::from(b == b'=')
    });
    let plain = !text.is_empty() && needs_quotes == 0;
    if plain {
        line.extend_from_slice(text.as_bytes());
    } else {
        push_quoted(line, text);
    }
}

/// `text` quoted as `{:?}` quotes it (as tracing writes a string field): as it is between
/// quotes when it is printable ASCII without quotes or backslashes, as almost every header is.
fn push_quoted(line: &mut Vec<u8>, text: &str) {
    if text
        .bytes()
        .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
    {
        line.push(b'"');
        line.extend_from_slice(text.as_bytes());
        line.push(b'"');
    } else {
        let _ = write!(line, "{text:?}");
    }
}

/// Milliseconds to the microsecond, as a number (`0.125`).
fn latency_ms(line: &mut Vec<u8>, latency: Duration) {
    let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
    push_decimal(line, micros / 1000);
    line.push(b'.');
    push_padded(line, micros % 1000, 3);
}

/// `text` as a JSON string: the runs that need no escape are copied whole. Besides what JSON
/// requires, DEL, the C1 controls and U+2028/U+2029 are escaped (`\\u0085`): a log viewer or a
/// JavaScript reader of the line must not meet them raw (docs/api.md, "Text people read").
fn json_string(line: &mut Vec<u8>, text: &str) {
    line.push(b'"');
    let mut rest = text.as_bytes();
    // 0xC2 leads the UTF-8 of U+0080–U+00BF (the C1 controls among them), 0xE2 that of
    // U+2000–U+2FFF (the separators among them): only those lead bytes are looked at again.
    while let Some(at) = rest
        .iter()
        .position(|&b| b == b'"' || b == b'\\' || b < 0x20 || b == 0x7f || b == 0xc2 || b == 0xe2)
    {
        line.extend_from_slice(&rest[..at]);
        let (escape, width) = match rest[at..] {
            [b'"', ..] => (None, 1),
            [b'\\', ..] => (None, 1),
            [0xc2, second @ 0x80..=0x9f, ..] => (Some(u16::from(second)), 2),
            [0xe2, 0x80, third @ (0xa8 | 0xa9), ..] => (Some(0x2028 + u16::from(third - 0xa8)), 3),
            [lead @ (0xc2 | 0xe2), ..] => {
                // Another character: copied, and the search goes on after its lead byte.
                line.push(lead);
                rest = &rest[at + 1..];
                continue;
            }
            [control, ..] => (Some(u16::from(control)), 1),
            [] => break,
        };
        match (escape, rest[at]) {
            (None, b'"') => line.extend_from_slice(b"\\\""),
            (None, _) => line.extend_from_slice(b"\\\\"),
            (Some(code), _) => push_unicode_escape(line, code),
        }
        rest = &rest[at + width..];
    }
    line.extend_from_slice(rest);
    line.push(b'"');
}

/// `\\u` and four lower-case hex digits.
fn push_unicode_escape(line: &mut Vec<u8>, code: u16) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    line.extend_from_slice(b"\\u");
    for shift in [12, 8, 4, 0] {
        line.push(HEX[usize::from((code >> shift) & 0xf)]);
    }
}

/// `YYYY-MM-DDTHH:MM:SS.` of a second since the Unix epoch (UTC), as the other lines start.
fn second_prefix(second: u64) -> String {
    let at = time::OffsetDateTime::from_unix_timestamp(i64::try_from(second).unwrap_or(0))
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `write` puts in a line.
    fn written(write: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut line = Vec::new();
        write(&mut line);
        String::from_utf8(line).unwrap()
    }

    fn line() -> RequestLine<'static> {
        RequestLine {
            method: "GET",
            route: "(hosted)",
            path: Some("/.well-known/openid-configuration"),
            status: 200,
            latency: Duration::from_micros(1_234),
            request_id: "abc-1",
            client: Some("203.0.113.7".parse().unwrap()),
            host: Some("api-acme.example"),
            user_agent: Some("curl/8.0 \"quoted\" \\ \u{1}"),
        }
    }

    #[test]
    fn the_json_line_is_json_with_plain_values() {
        let text = written(|l| line().json(l, "2026-11-26T12:00:00.", 42));
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["timestamp"], "2026-11-26T12:00:00.000042Z");
        assert_eq!(value["message"], "request");
        assert_eq!(value["route"], "(hosted)");
        assert_eq!(value["path"], "/.well-known/openid-configuration");
        assert_eq!(value["status"], 200);
        assert_eq!(value["latency_ms"], 1.234);
        assert_eq!(value["client"], "203.0.113.7");
        assert_eq!(value["user_agent"], "curl/8.0 \"quoted\" \\ \u{1}");
        assert_eq!(value["target"], "registry_server::request_line");
    }

    #[test]
    fn the_text_line_reads_like_the_others() {
        let text = written(|l| {
            RequestLine {
                path: None,
                client: None,
                user_agent: None,
                ..line()
            }
            .text(l, "2026-11-26T12:00:00.", 7)
        });
        assert_eq!(
            text,
            "2026-11-26T12:00:00.000007Z  INFO registry_server::request_line: request method=GET \
             route=(hosted) status=200 latency_ms=1.234 request_id=abc-1 host=\"api-acme.example\""
        );
    }

    #[test]
    fn numbers_addresses_and_quoted_values_read_as_display_and_debug_write_them() {
        for (n, width) in [(0, 1), (7, 1), (42, 6), (1_234_567, 3), (u64::MAX, 1)] {
            let text = written(|l| push_padded(l, n, width));
            assert_eq!(text, format!("{n:0width$}"));
        }
        for latency in [0, 999, 1_000, 1_234, 61_000_005] {
            let text = written(|l| latency_ms(l, Duration::from_micros(latency)));
            assert_eq!(text, format!("{}.{:03}", latency / 1000, latency % 1000));
        }
        for ip in [
            "0.0.0.0",
            "203.0.113.7",
            "255.255.255.255",
            "2001:db8::1",
            "::ffff:1.2.3.4",
        ] {
            assert_eq!(written(|l| push_ip(l, ip.parse().unwrap())), ip);
        }
        for value in [
            "api-acme.example:8080",
            "it's",
            "a \"b\"",
            "c\\d",
            "tab\there",
            "é",
            "\u{7f}",
            "\u{1}",
        ] {
            assert_eq!(written(|l| push_quoted(l, value)), format!("{value:?}"));
            let text = written(|l| json_string(l, value));
            assert_eq!(
                serde_json::from_str::<String>(&text).unwrap(),
                value,
                "{text}"
            );
        }
    }

    #[test]
    fn a_path_that_could_forge_a_field_is_quoted_and_a_plain_one_is_not() {
        let text_of = |path: &'static str| {
            written(|l| {
                RequestLine {
                    route: "(unmatched)",
                    path: Some(path),
                    client: None,
                    host: None,
                    user_agent: None,
                    ..line()
                }
                .text(l, "2026-11-26T12:00:00.", 7)
            })
        };
        let forged = text_of("/x\" route=/services status=200");
        assert!(
            forged.contains(
                " route=(unmatched) path=\"/x\\\" route=/services status=200\" status=200 "
            ),
            "{forged}"
        );
        assert_eq!(forged.matches(" route=").count(), 2, "{forged}");
        assert!(text_of("/a=b").contains(" path=\"/a=b\" "));
        assert!(text_of("/a\u{1b}[2J").contains(" path=\"/a\\u{1b}[2J\" "));
        assert!(text_of("/services/api-acme").contains(" path=/services/api-acme "));
        for (value, shown) in [
            ("", "\"\""),
            ("a b", "\"a b\""),
            ("a\\b", "\"a\\\\b\""),
            ("r-1", "r-1"),
        ] {
            assert_eq!(written(|l| push_value(l, value)), shown);
        }
    }

    #[test]
    fn json_strings_escape_c1_del_and_the_separators_and_nothing_printable() {
        for (value, shown) in [
            ("a\u{85}b", "\"a\\u0085b\""),
            ("\u{80}\u{9f}", "\"\\u0080\\u009f\""),
            ("x\u{2028}y\u{2029}", "\"x\\u2028y\\u2029\""),
            ("\u{7f}", "\"\\u007f\""),
            ("\u{1b}]52;c;aGk=\u{7}", "\"\\u001b]52;c;aGk=\\u0007\""),
            ("é\u{a0}€\u{2027}\u{202a}ÿ", "\"é\u{a0}€\u{2027}\u{202a}ÿ\""),
            ("\u{c2}", "\"\u{c2}\""),
        ] {
            let text = written(|l| json_string(l, value));
            assert_eq!(text, shown, "{value:?}");
            assert_eq!(serde_json::from_str::<String>(&text).unwrap(), value);
        }
    }

    #[test]
    fn a_second_is_written_in_utc() {
        assert_eq!(second_prefix(0), "1970-01-01T00:00:00.");
        assert_eq!(second_prefix(1_795_000_000), "2026-11-18T11:06:40.");
    }
}
