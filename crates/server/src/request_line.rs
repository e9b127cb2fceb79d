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
use std::fmt::Write as _;
use std::io::Write as _;
use std::net::IpAddr;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

/// How `serve` writes its log, set once by the binary when it installs the log. Unset (a server
/// run inside another program, which installs no log): no request line.
static FORMAT: OnceLock<LogFormat> = OnceLock::new();

/// Makes request lines follow `format`, the format of the rest of the log.
pub fn set_format(format: LogFormat) {
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
    /// The line being written, and the second whose timestamp prefix it holds.
    static SCRATCH: RefCell<(String, u64, String)> = const { RefCell::new((String::new(), u64::MAX, String::new())) };
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
    /// Writes the line to the log, in `format` (what [`enabled`] answered).
    pub fn write(&self, format: LogFormat) {
        SCRATCH.with(|scratch| {
            let (line, second, prefix) = &mut *scratch.borrow_mut();
            line.clear();
            let now = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default();
            if now.as_secs() != *second {
                *second = now.as_secs();
                *prefix = second_prefix(now.as_secs());
            }
            match format {
                LogFormat::Json => self.json(line, prefix, now.subsec_micros()),
                LogFormat::Text => self.text(line, prefix, now.subsec_micros()),
            }
            line.push('\n');
            let _ = crate::log_buffer::log_line().write_all(line.as_bytes());
        });
    }

    fn text(&self, line: &mut String, prefix: &str, micros: u32) {
        let _ = write!(
            line,
            "{prefix}{micros:06}Z  INFO {}: request method={} route={}",
            module_path!(),
            self.method,
            self.route
        );
        if let Some(path) = self.path {
            line.push_str(" path=");
            line.push_str(path);
        }
        let _ = write!(line, " status={} latency_ms=", self.status);
        latency_ms(line, self.latency);
        line.push_str(" request_id=");
        line.push_str(self.request_id);
        if let Some(client) = self.client {
            let _ = write!(line, " client={client}");
        }
        for (name, value) in [("host", self.host), ("user_agent", self.user_agent)] {
            if let Some(value) = value {
                let _ = write!(line, " {name}={value:?}");
            }
        }
    }

    fn json(&self, line: &mut String, prefix: &str, micros: u32) {
        let _ = write!(line, "{{\"timestamp\":\"{prefix}{micros:06}Z\",\"level\":\"INFO\",\"message\":\"request\",\"method\":\"{}\",\"route\":", self.method);
        json_string(line, self.route);
        if let Some(path) = self.path {
            line.push_str(",\"path\":");
            json_string(line, path);
        }
        let _ = write!(line, ",\"status\":{},\"latency_ms\":", self.status);
        latency_ms(line, self.latency);
        line.push_str(",\"request_id\":");
        json_string(line, self.request_id);
        if let Some(client) = self.client {
            let _ = write!(line, ",\"client\":\"{client}\"");
        }
        for (name, value) in [("host", self.host), ("user_agent", self.user_agent)] {
            if let Some(value) = value {
                let _ = write!(line, ",\"{name}\":");
                json_string(line, value);
            }
        }
        let _ = write!(line, ",\"target\":\"{}\"}}", module_path!());
    }
}

/// Milliseconds to the microsecond, as a number (`0.125`).
fn latency_ms(line: &mut String, latency: Duration) {
    let micros = latency.as_micros();
    let _ = write!(line, "{}.{:03}", micros / 1000, micros % 1000);
}

/// `text` as a JSON string.
fn json_string(line: &mut String, text: &str) {
    line.push('"');
    for c in text.chars() {
        match c {
            '"' => line.push_str("\\\""),
            '\\' => line.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(line, "\\u{:04x}", u32::from(c));
            }
            c => line.push(c),
        }
    }
    line.push('"');
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
        let mut text = String::new();
        line().json(&mut text, "2026-11-26T12:00:00.", 42);
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
        let mut text = String::new();
        RequestLine {
            path: None,
            client: None,
            user_agent: None,
            ..line()
        }
        .text(&mut text, "2026-11-26T12:00:00.", 7);
        assert_eq!(
            text,
            "2026-11-26T12:00:00.000007Z  INFO registry_server::request_line: request method=GET \
             route=(hosted) status=200 latency_ms=1.234 request_id=abc-1 host=\"api-acme.example\""
        );
    }

    #[test]
    fn a_second_is_written_in_utc() {
        assert_eq!(second_prefix(0), "1970-01-01T00:00:00.");
        assert_eq!(second_prefix(1_795_000_000), "2026-11-18T11:06:40.");
    }
}
