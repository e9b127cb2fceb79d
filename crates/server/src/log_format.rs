//! How `serve` formats its log: tracing's text or flattened JSON lines, and on each line written
//! while a request is served, that request's id.
//!
//! The id used to come from a tracing span around each API request (`request`, with the field
//! `request_id`). Making, entering, leaving and closing it cost every API request about 4,500
//! instructions, most of them formatting its field up front (docs/benchmarks.md), for lines
//! that almost no request writes. The id is already in the request's task-local
//! (`registry_auth::REQUEST`, set around every request); [`WithRequestId`] reads it when a
//! line is written and adds what the span added: `request{request_id="…"}: ` before the target
//! in text, `"span"` and `"spans"` in JSON.

use crate::settings::LogFormat;
use std::fmt;
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{self, FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::registry::LookupSpan;

/// rustls's level unless `RUST_LOG` names it.
const QUIET_TLS: &str = "rustls=error";

/// Installs `serve`'s log: `RUST_LOG`'s levels (default `info`), lines to the log buffer
/// ([`crate::log_line`]), in `format`; request lines follow the same format.
pub fn init(format: LogFormat) {
    let mut filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // rustls warns, once per handshake, of what any client may send (an IP address as SNI, as
    // wrk and `openssl s_client` do): a line per connection, chosen by whoever connects. Its
    // errors stay; naming rustls in RUST_LOG sets its level as usual.
    if !std::env::var("RUST_LOG").is_ok_and(|levels| levels.contains("rustls")) {
        filter = filter.add_directive(QUIET_TLS.parse().expect("a valid directive"));
    }
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(crate::log_line)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    crate::request_line::set_format(format);
    match format {
        LogFormat::Text => builder
            .fmt_fields(QuotedFields)
            .event_format(WithRequestId::text(format::format()))
            .init(),
        LogFormat::Json => builder
            .json()
            .event_format(WithRequestId::json(
                format::format().json().flatten_event(true),
            ))
            .init(),
    }
}

/// An event format that adds the current request's id to what `F` writes.
#[derive(Debug)]
pub struct WithRequestId<F> {
    inner: F,
    json: bool,
}

impl<F> WithRequestId<F> {
    /// Around tracing's text format.
    pub fn text(inner: F) -> Self {
        WithRequestId { inner, json: false }
    }

    /// Around tracing's JSON format, flattened.
    pub fn json(inner: F) -> Self {
        WithRequestId { inner, json: true }
    }
}

impl<S, N, F> FormatEvent<S, N> for WithRequestId<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let id = registry_auth::request_id();
        if id.is_none() && !self.json {
            return self.inner.format_event(ctx, writer, event);
        }
        let mut line = String::new();
        self.inner
            .format_event(ctx, Writer::new(&mut line), event)?;
        let target = event.metadata().target();
        // Under a library's own span (debug levels) a JSON line already has "span": it keeps
        // that one.
        let own_spans = ctx.lookup_current().is_some();
        let line = match (self.json, id) {
            (true, Some(id)) if !own_spans => json_with_id(line, &id),
            (true, _) => line,
            (false, Some(id)) => text_with_id(line, &id, target),
            (false, None) => line,
        };
        if self.json {
            writer.write_str(&json_escape_separators(&line))
        } else {
            writer.write_str(&line)
        }
    }
}

/// A JSON line with DEL, the C1 controls and U+2028/U+2029 escaped (`\u0085`), which serde_json
/// writes raw: in a JSON text they can only stand inside a string, where the escape means the
/// same character (docs/api.md, "Text people read").
fn json_escape_separators(line: &str) -> std::borrow::Cow<'_, str> {
    let escaped = |c: char| {
        c == '\u{7f}' || ('\u{80}'..='\u{9f}').contains(&c) || c == '\u{2028}' || c == '\u{2029}'
    };
    if !line.chars().any(escaped) {
        return std::borrow::Cow::Borrowed(line);
    }
    let mut out = String::with_capacity(line.len() + 12);
    for c in line.chars() {
        if escaped(c) {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// The fields of a text line, written as tracing's default writes them (the message first,
/// then `name=value` separated by spaces) except that a value that may hold a space, a quote,
/// `=` or a control character is quoted as `{:?}` quotes it, whatever way it was recorded
/// (`%value` writes it with `Display`, unquoted), and the message has its control characters
/// escaped: a client's text in a field (an agent, a refused call's detail) cannot pass for
/// fields of its own (docs/api.md, "Text people read").
#[derive(Debug, Clone, Copy, Default)]
pub struct QuotedFields;

impl<'writer> FormatFields<'writer> for QuotedFields {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(
        &self,
        writer: Writer<'writer>,
        fields: R,
    ) -> fmt::Result {
        let mut visitor = QuotingVisitor {
            writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

/// Writes one line's fields for [`QuotedFields`].
struct QuotingVisitor<'writer> {
    writer: Writer<'writer>,
    first: bool,
    result: fmt::Result,
}

impl QuotingVisitor<'_> {
    fn write(&mut self, field: &tracing::field::Field, value: &str, quote_always: bool) {
        let name = field.name();
        // The fields tracing-log adds to a `log` record: tracing's own format leaves them out.
        if self.result.is_err() || name.starts_with("log.") {
            return;
        }
        let separator = if self.first { "" } else { " " };
        self.first = false;
        let plain = |v: &str| {
            !v.is_empty()
                && v.chars().all(|c| {
                    !c.is_whitespace()
                        && !registry_domain::text::is_control(c)
                        && !matches!(c, '"' | '\\' | '=')
                })
        };
        self.result = if name == "message" {
            write!(
                self.writer,
                "{separator}{}",
                registry_domain::text::escape_controls(value)
            )
        } else if !quote_always && plain(value) {
            write!(
                self.writer,
                "{separator}{}={value}",
                name.trim_start_matches("r#")
            )
        } else {
            write!(
                self.writer,
                "{separator}{}={value:?}",
                name.trim_start_matches("r#")
            )
        };
    }
}

impl tracing::field::Visit for QuotingVisitor<'_> {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        // As tracing writes a string: always quoted.
        self.write(field, value, true);
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        self.write(field, &format!("{value:?}"), false);
    }
}

/// `request{request_id="…"}: ` before the target, where tracing writes its spans.
fn text_with_id(mut line: String, id: &str, target: &str) -> String {
    if let Some(at) = line.find(target) {
        line.insert_str(at, &format!("request{{request_id={id:?}}}: "));
    }
    line
}

/// `"span"` and `"spans"` last in the object, as tracing writes them.
fn json_with_id(mut line: String, id: &str) -> String {
    let span = serde_json::json!({"request_id": id, "name": "request"});
    if let Some(end) = line.rfind('}') {
        line.insert_str(end, &format!(",\"span\":{span},\"spans\":[{span}]"));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// What a subscriber with `format` writes for one warning, inside a request whose id is
    /// `id` (when there is one).
    fn logged(json: bool, id: Option<&'static str>) -> String {
        logged_event(json, id, || {
            tracing::warn!(attempts = 3, "authentication failed")
        })
    }

    /// What a subscriber with `format` writes for the events of `warn`, inside a request whose
    /// id is `id` (when there is one).
    fn logged_event(json: bool, id: Option<&'static str>, warn: fn()) -> String {
        let out = Arc::new(Mutex::new(Vec::<u8>::new()));
        let sink = Arc::clone(&out);
        let make_writer = move || Sink(Arc::clone(&sink));
        let builder = tracing_subscriber::fmt()
            .with_writer(make_writer)
            .with_ansi(false);
        let dispatch: tracing::Dispatch = if json {
            builder
                .json()
                .event_format(WithRequestId::json(
                    format::format().json().flatten_event(true),
                ))
                .into()
        } else {
            builder
                .fmt_fields(QuotedFields)
                .event_format(WithRequestId::text(format::format()))
                .into()
        };
        tracing::dispatcher::with_default(&dispatch, || match id {
            Some(id) => registry_auth::REQUEST.sync_scope(
                registry_auth::RequestScope::new(actix_web::web::Bytes::from(id)),
                warn,
            ),
            None => warn(),
        });
        let bytes = out.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_text_line_in_a_request_names_it_where_the_span_did() {
        let line = logged(false, Some("refused-1"));
        let target = module_path!();
        assert!(
            line.contains(&format!(
                " WARN request{{request_id=\"refused-1\"}}: {target}: authentication failed attempts=3"
            )),
            "{line}"
        );
        let outside = logged(false, None);
        assert!(
            outside.contains(&format!(" WARN {target}: authentication failed")),
            "{outside}"
        );
        assert!(!outside.contains("request{"), "{outside}");
    }

    #[test]
    fn a_json_line_in_a_request_has_the_span_and_stays_json() {
        let line = logged(true, Some("refused-1"));
        let value: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
        assert_eq!(value["message"], "authentication failed", "{line}");
        assert_eq!(value["attempts"], 3, "{line}");
        assert_eq!(value["span"]["request_id"], "refused-1", "{line}");
        assert_eq!(value["span"]["name"], "request", "{line}");
        assert_eq!(value["spans"][0]["request_id"], "refused-1", "{line}");
        assert!(line.ends_with("}\n"), "{line:?}");
        let outside = logged(true, None);
        let value: serde_json::Value = serde_json::from_str(outside.trim()).unwrap();
        assert!(value.get("span").is_none(), "{outside}");
    }

    #[test]
    fn a_text_value_that_could_forge_a_field_is_quoted_and_controls_are_escaped() {
        for id in [None, Some("r-1")] {
            let line = logged_event(false, id, || {
                let agent = "curl x=1 \"y\"";
                tracing::warn!(
                    agent = %agent,
                    path = "/a b",
                    plain = %"ok",
                    count = 2,
                    "refused \u{1b}[2J"
                )
            });
            assert!(
                line.contains(
                    "refused \\u{1b}[2J agent=\"curl x=1 \\\"y\\\"\" path=\"/a b\" plain=ok count=2"
                ),
                "{line}"
            );
            assert!(!line.contains('\u{1b}'), "{line:?}");
        }
    }

    #[test]
    fn a_json_line_escapes_c1_del_and_the_separators() {
        for id in [None, Some("r-1")] {
            let line = logged_event(true, id, || {
                tracing::warn!(agent = "a\u{85}b\u{2028}\u{7f}", "m\u{2029}é")
            });
            for raw in ['\u{85}', '\u{2028}', '\u{2029}', '\u{7f}'] {
                assert!(!line.contains(raw), "{line:?}");
            }
            assert!(line.contains("a\\u0085b\\u2028\\u007f"), "{line}");
            let value: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
            assert_eq!(value["agent"], "a\u{85}b\u{2028}\u{7f}", "{line}");
            assert_eq!(value["message"], "m\u{2029}é", "{line}");
        }
    }
}
