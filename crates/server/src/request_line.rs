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
        line.extend_from_slice(self.route.as_bytes());
        if let Some(path) = self.path {
            line.extend_from_slice(b" path=");
            line.extend_from_slice(path.as_bytes());
        }
        line.extend_from_slice(b" status=");
        push_decimal(line, self.status.into());
        line.extend_from_slice(b" latency_ms=");
        latency_ms(line, self.latency);
        line.extend_from_slice(b" request_id=");
        line.extend_from_slice(self.request_id.as_bytes());
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

/// `text` as a JSON string: the runs that need no escape are copied whole.
fn json_string(line: &mut Vec<u8>, text: &str) {
    line.push(b'"');
    let mut rest = text.as_bytes();
    while let Some(at) = rest
        .iter()
        .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
    {
        line.extend_from_slice(&rest[..at]);
        match rest[at] {
            b'"' => line.extend_from_slice(b"\\\""),
            b'\\' => line.extend_from_slice(b"\\\\"),
            control => {
                let _ = write!(line, "\\u{control:04x}");
            }
        }
        rest = &rest[at + 1..];
    }
    line.extend_from_slice(rest);
    line.push(b'"');
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
    fn a_second_is_written_in_utc() {
        assert_eq!(second_prefix(0), "1970-01-01T00:00:00.");
        assert_eq!(second_prefix(1_795_000_000), "2026-11-18T11:06:40.");
    }
}
