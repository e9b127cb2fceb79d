//! `POST /fetch-log`: fetch evidence from the cache in front of the registry (docs/api.md, "Behind
//! a CDN"). Behind a cache the registry sees only the cache's misses; the cache's access log, as
//! JSON lines (`registry fetch-log` ships `varnishncsa`'s), counts every fetch a verifier made,
//! exactly as a fetch the registry answered itself would count.

use crate::body::{content_type, read_bytes};
use crate::caller::Shipper;
use crate::client_ip;
use crate::problem::{ApiError, ApiResult};
use crate::public::{custom_domain, served_document};
use crate::state::AppState;
use actix_web::{web, HttpRequest, HttpResponse};
use registry_domain::network::Network;
use registry_domain::ports::FetchedDocument;
use registry_domain::Violation;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::net::IpAddr;
use time::format_description::well_known::Rfc3339;
use time::{Duration, OffsetDateTime};

/// The media type of the body: one JSON object a line.
pub const NDJSON: &str = "application/x-ndjson";

/// One line of a cache's access log. Other members a log format adds (a size, a duration) are
/// not read: a cache writes what it writes.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Line {
    time: String,
    host: String,
    path: String,
    /// A number, or the text of one (log formats write either); read in [`parse`], so that any
    /// other value is named in the problem.
    status: Value,
    method: String,
    user_agent: String,
    /// The client's address as the cache saw it (docs/api.md, "Key readiness"): what
    /// recognises a verifier by its network.
    #[serde(default)]
    client_address: Option<String>,
}

/// A fetch the line records: when, of what, by whom, and whether it was a 304.
#[derive(Debug)]
struct Fetch {
    at: OffsetDateTime,
    host: String,
    document: FetchedDocument,
    not_modified: bool,
    agent: String,
    network: Option<Network>,
}

/// How much older than the batch's arrival a line may be and still count (docs/api.md, "Behind
/// a CDN"): a cache ships its log within seconds, and an old line could only forge evidence.
const OLDEST_LINE: Duration = Duration::minutes(10);
/// How much newer than the batch's arrival a line may be (the cache's clock may run ahead).
const NEWEST_LINE: Duration = Duration::minutes(1);
/// The largest batch, whatever `REGISTRY_MAX_BODY_BYTES` says (docs/api.md, "Behind a CDN").
pub const MAX_BATCH_BYTES: usize = 1 << 20;

/// Reads line `number` (1-based); `Ok(None)` for a line that is not a counted fetch (another
/// method or status, a path that is not a document).
fn parse(number: usize, text: &str) -> Result<Option<Fetch>, Violation> {
    let malformed =
        |why: String| Violation::new(format!("/{}", number - 1), format!("line {number}: {why}"));
    let line: Line = serde_json::from_str(text).map_err(|e| malformed(e.to_string()))?;
    let at = OffsetDateTime::parse(&line.time, &Rfc3339)
        .map_err(|_| malformed(format!("time {:?} is not an RFC 3339 time", line.time)))?;
    let status = match &line.status {
        Value::Number(n) => n.as_u64().and_then(|n| u16::try_from(n).ok()),
        Value::String(text) => text.parse().ok(),
        _ => None,
    }
    .ok_or_else(|| {
        // Not all of it: a shipper's line may be long, and the answer need not repeat it.
        let shown: String = line.status.to_string().chars().take(40).collect();
        malformed(format!(
            "status {shown} is not an HTTP status (an integer, or its text)"
        ))
    })?;
    // Without the client's address a line still counts as a fetch, but from no network: it
    // recognises no verifier (docs/api.md, "Key readiness").
    let network = match line.client_address.as_deref() {
        None | Some("-") => None,
        Some(text) => {
            let address = text
                .parse::<IpAddr>()
                .map_err(|_| malformed(format!("clientAddress {text:?} is not an IP address")))?;
            (address != client_ip::UNKNOWN).then(|| Network::of(address))
        }
    };
    let counted = matches!(line.method.as_str(), "GET" | "HEAD") && matches!(status, 200 | 304);
    // A log that writes the query (not varnishncsa's `%U`) names the document a direct fetch
    // with that query got, and counts as it.
    let path = line
        .path
        .split_once('?')
        .map_or(line.path.as_str(), |(path, _)| path);
    let document = served_document(path).filter(|_| counted);
    Ok(document.map(|document| Fetch {
        network,
        at,
        host: line.host,
        document,
        not_modified: status == 304,
        // A log writes `-` for a header the request did not have.
        agent: if line.user_agent == "-" {
            String::new()
        } else {
            line.user_agent
        },
    }))
}

/// `/fetch-log` with a method other than POST: 405 when the endpoint is served, and without
/// `REGISTRY_FETCH_LOG_TOKEN` the 404 of any unknown path, which a 405 would contradict.
pub async fn other_method(state: web::Data<AppState>) -> ApiResult<HttpResponse> {
    if state.settings.fetch_log_token.is_none() {
        return super::not_found().await;
    }
    Err(ApiError::MethodNotAllowed("POST"))
}

/// `POST /fetch-log` (bearer `REGISTRY_FETCH_LOG_TOKEN`): counts each `GET`/`HEAD` line answered
/// 200 or 304 for a hosted document, at its time; every other line is skipped. A malformed line
/// is a 400 naming it, and nothing of the batch is counted.
pub async fn post(
    _shipper: Shipper,
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let body = read_bytes(&req, payload, MAX_BATCH_BYTES).await?;
    if content_type(&req) != NDJSON {
        return Err(ApiError::UnsupportedMediaType(NDJSON));
    }
    let text = std::str::from_utf8(&body)
        .map_err(|_| ApiError::BadRequest("the body is not UTF-8 text".into()))?;
    let mut fetches = Vec::new();
    let mut problems = Vec::new();
    let mut lines = 0;
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        lines += 1;
        match parse(i + 1, line) {
            Ok(fetch) => fetches.extend(fetch),
            Err(problem) => problems.push(problem),
        }
    }
    if !problems.is_empty() {
        return Err(ApiError::Validation(problems));
    }
    // The service a host publishes for, and, when the host is its custom domain, when the
    // domain was asked for, looked up once per host of the batch.
    let mut services: HashMap<String, Option<(uuid::Uuid, Option<OffsetDateTime>)>> =
        HashMap::new();
    let mut accepted = 0;
    let now = state.now();
    for fetch in fetches {
        if fetch.at < now - OLDEST_LINE || fetch.at > now + NEWEST_LINE {
            continue;
        }
        if !services.contains_key(&fetch.host) {
            let issuers = state.replica.hosting.issuers();
            let named = match issuers.subdomain_of_host(&fetch.host) {
                Some(subdomain) => Some((subdomain.to_string(), None)),
                None => custom_domain(&state, &fetch.host)
                    .map(|served| (served.subdomain.to_string(), Some(served.domain.created_at))),
            };
            let service = match named {
                Some((subdomain, on_domain)) => (state.replica.current(&subdomain, now).await?)
                    .map(|hosted| (hosted.service_id(), on_domain)),
                None => None,
            };
            services.insert(fetch.host.clone(), service);
        }
        if let Some(Some((service, domain_since))) = services.get(&fetch.host) {
            let document = match domain_since {
                // A line from before the domain was asked for was another owner's fetch.
                Some(since) if fetch.at < *since => continue,
                Some(_) => fetch.document.on_custom_domain(),
                None => fetch.document,
            };
            (state.replica.fetches).record(
                *service,
                document,
                fetch.not_modified,
                fetch.agent.as_bytes(),
                fetch.network,
                fetch.at,
            );
            accepted += 1;
        }
    }
    Ok(HttpResponse::Ok().json(json!({"accepted": accepted, "skipped": lines - accepted})))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counted_lines_skipped_lines_and_malformed_ones() {
        let line = |method: &str, path: &str, status: &str| {
            format!(
                r#"{{"time":"2026-11-26T12:00:01.250Z","host":"api-acme.example.com","path":"{path}","status":{status},"method":"{method}","userAgent":"aws"}}"#
            )
        };
        let fetch = parse(1, &line("GET", "/keys.json", "304"))
            .unwrap()
            .unwrap();
        assert_eq!(fetch.document, FetchedDocument::Jwks);
        assert!(fetch.not_modified);
        assert_eq!(fetch.at.millisecond(), 250);
        assert_eq!(fetch.network, None, "no address: no network");
        assert!(parse(
            1,
            &line("HEAD", "/.well-known/openid-configuration", "\"200\"")
        )
        .unwrap()
        .is_some());
        let queried = parse(1, &line("GET", "/openid/v1/jwks?x=1", "200")).unwrap();
        assert_eq!(
            queried.unwrap().document,
            FetchedDocument::Jwks,
            "as a direct GET"
        );
        assert!(parse(1, &line("POST", "/keys", "200")).unwrap().is_none());
        assert!(parse(1, &line("GET", "/other", "200")).unwrap().is_none());
        assert!(parse(1, &line("GET", "/keys", "404")).unwrap().is_none());
        let bad = parse(3, r#"{"time":"yesterday"}"#).unwrap_err();
        assert_eq!(bad.pointer, "/2");
        assert!(bad.message.starts_with("line 3: "), "{}", bad.message);
        let with_address = r#"{"time":"2026-11-26T12:00:01Z","host":"h","path":"/keys","status":200,"method":"GET","userAgent":"aws","clientAddress":"203.0.113.9"}"#;
        let fetch = parse(1, with_address).unwrap().unwrap();
        assert_eq!(fetch.network.unwrap().to_string(), "203.0.113.0/24");
        let bad = parse(1, &with_address.replace("203.0.113.9", "here")).unwrap_err();
        assert!(bad.message.contains("clientAddress"), "{}", bad.message);
        let bad = parse(1, &line("GET", "/keys", "\"two hundred\"")).unwrap_err();
        assert!(bad.message.contains("status"), "{}", bad.message);
        // Any other value is named, in words (not the parser's "untagged enum").
        for status in ["200.0", "-1", "1e30", "70000", "null", "[200]"] {
            let bad = parse(1, &line("GET", "/keys", status)).unwrap_err();
            assert!(
                bad.message.contains("status") && !bad.message.contains("enum"),
                "{status}: {}",
                bad.message
            );
        }
        assert!(parse(1, &line("GET", "/keys", "\"304\""))
            .unwrap()
            .is_some());
    }
}
