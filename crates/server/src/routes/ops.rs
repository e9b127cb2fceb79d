//! Operations: health, readiness, metrics, the OpenAPI description and the policy schema.

use crate::metrics::{Extra, Labeled, Measured};
use crate::problem::{ApiError, ApiResult};
use crate::state::AppState;
use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::{json, Value};

pub(crate) const OPENAPI: &str = include_str!("../openapi.json");

/// `GET /healthz`: the process answers.
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

/// `GET /readyz`: whether this replica serves (docs/api.md, "Readiness"). It answers only once
/// the replica has started (migrated, loaded), and 503 `draining` after SIGTERM until its
/// listeners close ([`crate::drain`]); while it serves, it is ready, whatever the shared
/// database does: with a side of the database down it is 200 `degraded` and says which, because
/// every replica shares that database, and taking them all out of service would stop the public
/// documents memory still serves.
pub async fn readyz(state: web::Data<AppState>) -> ApiResult<HttpResponse> {
    let sides = state.replica.sides().await?;
    let word = |up: bool| if up { "up" } else { "down" };
    let every_side_up = sides.primary && sides.read_replica.is_none_or(|r| r.up);
    let draining = state.drain.draining();
    let mut body = json!({
        "status": match (draining, every_side_up) {
            (true, _) => "draining",
            (false, true) => "ready",
            (false, false) => "degraded",
        },
        "primary": word(sides.primary),
        "readReplica": sides.read_replica.map_or("none", |r| match r {
            r if r.up && r.lagging => "lagging",
            r => word(r.up),
        }),
        "reads": word(sides.reads_work()),
    });
    if let Some(lag) = sides.read_replica.and_then(|r| r.lag_seconds) {
        body["readReplicaLagSeconds"] = json!(lag);
    }
    let mut response = if draining {
        HttpResponse::ServiceUnavailable()
    } else {
        HttpResponse::Ok()
    };
    Ok(response
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(body))
}

/// Whether the client may see `/metrics` at all (docs/api.md, "Responses"): its address, as the
/// trusted proxies tell it, is in `REGISTRY_METRICS_ALLOW`. The counters and cache sizes say how
/// busy the registry and its other customers are.
fn may_read_metrics(state: &AppState, req: &HttpRequest) -> bool {
    let client = crate::client_ip::client_ip(req, &state.trusted_proxies);
    state.metrics_allow.iter().any(|net| net.contains(client))
}

/// `GET /metrics`: OpenMetrics text (Prometheus scrapes it), for allowed addresses only; others
/// get the 404 of a path no route serves, so the endpoint does not show from outside.
pub async fn metrics(req: HttpRequest, state: web::Data<AppState>) -> ApiResult<HttpResponse> {
    if !may_read_metrics(&state, &req) {
        return super::not_found().await;
    }
    let sides = state.replica.sides().await?;
    // Without an answer from the standby, its lag is unknown: the series is left out.
    let mut measured: Vec<Measured<'static>> = sides
        .read_replica
        .and_then(|r| r.lag_seconds)
        .map(|seconds| {
            (
                "registry_read_replica_lag_seconds",
                "How far the read replica's replay is behind what the primary wrote.",
                seconds,
            )
        })
        .into_iter()
        .collect();
    if let Some(process) = crate::process::figures() {
        measured.extend([
            (
                "process_resident_memory_bytes",
                "Resident memory of the process, in bytes.",
                process.resident_bytes,
            ),
            (
                "process_open_fds",
                "File descriptors the process holds open.",
                process.open_fds,
            ),
            (
                "process_start_time_seconds",
                "When the process started, in seconds since the Unix epoch.",
                process.start_time_seconds,
            ),
            (
                "process_cpu_seconds_total",
                "User and system CPU time the process used, in seconds.",
                process.cpu_seconds,
            ),
        ]);
    }
    let mut labeled: Vec<Labeled<'static>> = vec![(
        "registry_build_info",
        "The registry's version and the commit it was built from (always 1).",
        vec![
            ("version", env!("CARGO_PKG_VERSION").to_owned()),
            ("commit", env!("REGISTRY_COMMIT").to_owned()),
        ],
        1.0,
    )];
    let up = |side: &str, up: bool| {
        (
            "registry_database_up",
            "Whether each side of the database answers (1) or not (0).",
            vec![("side", side.to_owned())],
            if up { 1.0 } else { 0.0 },
        )
    };
    labeled.push(up("primary", sides.primary));
    if let Some(replica) = sides.read_replica {
        labeled.push(up("read_replica", replica.up));
    }
    if let Some(not_after) = state.certificate.as_ref().and_then(|c| c.not_after()) {
        // One certificate serves every name today; each name is a series of its own, so that
        // an alert names what breaks.
        for name in state.replica.hosting.issuers().hosts() {
            labeled.push((
                "registry_tls_certificate_not_after_seconds",
                "When the certificate served for each name stops being valid, in seconds since the Unix epoch.",
                vec![("name", name)],
                not_after as f64,
            ));
        }
    }
    for served in state.replica.domains.all() {
        if let Some(certificate) = &served.domain.certificate {
            labeled.push((
                "registry_domain_certificate_not_after_seconds",
                "When each custom domain's certificate stops being valid, in seconds since the Unix epoch (renewed at two thirds of its lifetime).",
                vec![("domain", served.domain.domain.clone())],
                certificate.not_after.unix_timestamp() as f64,
            ));
        }
    }
    if let Some(purger) = &state.purger {
        let (purged, failed) = purger.outcomes();
        for (result, count) in [("purged", purged), ("failed", failed)] {
            labeled.push((
                "registry_purges_total",
                "Paths the caches in front of the registry were asked to drop, by outcome (failed: after 60 s of retries).",
                vec![("result", result.to_owned())],
                count as f64,
            ));
        }
    }
    let signatures = state.metrics.signatures();
    for (result, count) in crate::metrics::SIGN_RESULTS.iter().zip(signatures) {
        labeled.push((
            "registry_signatures_total",
            "Calls of POST /services/{s}/sign by outcome (signed, invalid_claims, no_key_ready, rate_limited, refused: any other refusal).",
            vec![("result", (*result).to_owned())],
            count as f64,
        ));
    }
    for pool in state.replica.pools() {
        for (kind, count) in [("in_use", pool.in_use), ("idle", pool.idle)] {
            labeled.push((
                "registry_database_connections",
                "Connections of each side's pool, lent out (in_use) or waiting (idle).",
                vec![("side", pool.side.to_owned()), ("state", kind.to_owned())],
                f64::from(count),
            ));
        }
    }
    Ok(HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE))
        .body(state.metrics.render(&gauges(&state), &measured, &labeled)))
}

/// What the components count besides the per-route series: cache sizes, key fetches, limits.
fn gauges(state: &AppState) -> [Extra<'static>; 13] {
    let oidc = state.oidc.metrics();
    // The caches count lazily: let them settle first.
    state.auth.tokens.sweep(state.now());
    let (secrets, identities) = state.auth.tokens.len();
    [
        (
            "registry_hosted_issuers",
            "gauge",
            "Hosted issuers whose documents are held in memory (the others are read from the database when asked for).",
            state.replica.hosting.in_memory() as u64,
        ),
        (
            "registry_hosting_reads_total",
            "counter",
            "Database reads of public requests for a host whose documents were not in memory (a host that publishes nothing is read at most once per 10 s).",
            state.replica.hosting.reads(),
        ),
        (
            "registry_hosting_remembered_misses",
            "gauge",
            "Hosts that published nothing at their last database read, remembered for 10 s (at most 100000).",
            state.replica.hosting.misses() as u64,
        ),
        (
            "registry_hosted_bytes",
            "gauge",
            "Bytes of published documents held in memory (bounded by REGISTRY_HOSTING_CACHE_BYTES).",
            state.replica.hosting.bytes() as u64,
        ),
        (
            "registry_trusted_issuers",
            "gauge",
            "Issuers that some service account's policy trusts (held in memory).",
            state.replica.directory.trusted_issuers() as u64,
        ),
        (
            "registry_remembered_secrets",
            "gauge",
            "Verified static tokens and anonymous secrets remembered (used in the last 10 minutes).",
            secrets,
        ),
        (
            "registry_remembered_identity_tokens",
            "gauge",
            "Verified identity tokens remembered (each for at most a minute).",
            identities,
        ),
        (
            "registry_oidc_key_fetches_total",
            "counter",
            "Refreshes of issuers' discovery documents and key sets.",
            oidc.key_fetches,
        ),
        (
            "registry_oidc_key_fetch_failures_total",
            "counter",
            "Key refreshes that failed or found no usable key.",
            oidc.key_fetch_failures,
        ),
        // A remembered verification was made with cached keys too, and fetched nothing.
        (
            "registry_oidc_key_cache_hits_total",
            "counter",
            "Federated tokens verified with cached keys.",
            oidc.cache_hits + state.metrics.identity_token_cache_hits(),
        ),
        (
            "registry_rate_limited_addresses",
            "gauge",
            "Client addresses whose failed authentications and anonymous creations are counted (each limiter keeps at most 100000).",
            (state.auth.auth_failures.tracked_keys() + state.anon_limiter.tracked_keys()) as u64,
        ),
        (
            "registry_last_used_statements_total",
            "counter",
            "Writes of accounts' lastUsedAt sent to the database (at most one a minute per account).",
            state.auth.last_use.statements(),
        ),
        (
            "registry_last_used_rows_written_total",
            "counter",
            "Of those, the ones that changed the row (another replica may have written the minute).",
            state.auth.last_use.rows_written(),
        ),
    ]
}

/// `/metrics` with a method other than GET or HEAD: 405 for allowed addresses, and for the
/// others the same 404 as [`metrics`], which a 405 would contradict.
pub async fn metrics_other_method(
    req: HttpRequest,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    if !may_read_metrics(&state, &req) {
        return super::not_found().await;
    }
    Err(ApiError::MethodNotAllowed("GET, HEAD"))
}

/// The OpenAPI document with this server's base URL and issuer URL template.
pub fn openapi_document(base_url: &str, issuer_url_template: &str) -> ApiResult<Value> {
    let mut doc: Value = serde_json::from_str(OPENAPI).map_err(|_| ApiError::Internal)?;
    doc["servers"] = json!([{"url": base_url}]);
    doc["x-public-hosting"]["issuerUrlTemplate"] = json!(issuer_url_template);
    Ok(doc)
}

/// `GET /openapi.json`.
pub async fn openapi(state: web::Data<AppState>) -> ApiResult<HttpResponse> {
    let settings = &state.settings;
    Ok(HttpResponse::Ok().json(openapi_document(
        settings.base(),
        &settings.issuer_url_template,
    )?))
}

/// `GET /schemas/service-account-policy/v1.json`: the `{schema_url}` of the spec.
pub async fn policy_schema(state: web::Data<AppState>) -> ApiResult<HttpResponse> {
    // The very document the domain validates with, parsed once there.
    Ok(served_schema(
        registry_domain::policy::schema(),
        "v1",
        &state,
    ))
}

/// `GET /schemas/service-account-policy/v2.json`: version 2, with `actions`.
pub async fn policy_schema_v2(state: web::Data<AppState>) -> ApiResult<HttpResponse> {
    Ok(served_schema(
        registry_domain::policy::schema_v2(),
        "v2",
        &state,
    ))
}

/// A policy schema with this registry's address as its `$id`.
fn served_schema(schema: &Value, version: &str, state: &AppState) -> HttpResponse {
    let mut schema = schema.clone();
    schema["$id"] = json!(format!(
        "{}/schemas/service-account-policy/{version}.json",
        state.settings.base()
    ));
    HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, "application/schema+json"))
        .insert_header((header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"))
        .insert_header((header::CACHE_CONTROL, "public, max-age=3600"))
        .json(schema)
}
