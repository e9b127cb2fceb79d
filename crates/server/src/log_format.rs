//! How `serve` formats its log: tracing's text or flattened JSON lines, and on each line written
//! while a request is served, that request's id.
//!
//! The id used to come from a tracing span around each API request (`request`, with the field
//! `request_id`). Making, entering, leaving and closing it cost every API request about 4,500
//! instructions, most of them formatting its field up front (docs/benchmarks.md), for lines
//! that almost no request writes. The id is already in the request's task-local
//! (`registry_auth::REQUEST_ID`, set around every request); [`WithRequestId`] reads it when a
//! line is written and adds what the span added: `request{request_id="…"}: ` before the target
//! in text, `"span"` and `"spans"` in JSON.

use crate::settings::LogFormat;
use std::fmt;
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{self, FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::registry::LookupSpan;

/// Installs `serve`'s log: `RUST_LOG`'s levels (default `info`), lines to the log buffer
/// ([`crate::log_line`]), in `format`; request lines follow the same format.
pub fn init(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(crate::log_line)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    crate::request_line::set_format(format);
    match format {
        LogFormat::Text => builder
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
        let Some(id) = registry_auth::request_id() else {
            return self.inner.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.inner
            .format_event(ctx, Writer::new(&mut line), event)?;
        let target = event.metadata().target();
        // Under a library's own span (debug levels) a JSON line already has "span": it keeps
        // that one.
        let own_spans = ctx.lookup_current().is_some();
        let line = match self.json {
            true if own_spans => line,
            true => json_with_id(line, &id),
            false => text_with_id(line, &id, target),
        };
        writer.write_str(&line)
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
        let out = Arc::new(Mutex::new(Vec::<u8>::new()));
        let sink = Arc::clone(&out);
        let make_writer = move || Sink(Arc::clone(&sink));
        let warn = || tracing::warn!(attempts = 3, "authentication failed");
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
                .event_format(WithRequestId::text(format::format()))
                .into()
        };
        tracing::dispatcher::with_default(&dispatch, || match id {
            Some(id) => registry_auth::REQUEST_ID.sync_scope(actix_web::web::Bytes::from(id), warn),
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
}
