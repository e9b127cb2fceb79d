//! HTTPS on the listener (the certificate files: registry-tls), and the plain-HTTP listener
//! beside it that only redirects there.

use crate::problem::ApiError;
use crate::settings::Settings;
use crate::state::AppState;
use actix_web::dev::ServiceRequest;
use actix_web::http::header;
use actix_web::{web, HttpResponse, ResponseError};
use anyhow::bail;
use registry_domain::app::domains;
use registry_tls::{CertificateFiles, Reloading, TlsError};
use std::sync::Arc;
use std::time::Duration;

/// How often the certificate files are read again: a renewal is served within this.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// The certificate of `REGISTRY_TLS_CERT` and `REGISTRY_TLS_KEY`, watched for renewals, or
/// `None` for plain HTTP; a warning for each of `names` it does not cover.
pub fn certificate(
    settings: &Settings,
    names: &[String],
) -> anyhow::Result<Option<Arc<Reloading>>> {
    let files = match (&settings.tls_cert, &settings.tls_key) {
        (Some(cert), Some(key)) => CertificateFiles {
            cert: cert.clone(),
            key: key.clone(),
        },
        (None, None) if settings.http_redirect_listen.is_some() => {
            bail!("REGISTRY_HTTP_REDIRECT_LISTEN redirects to HTTPS, which needs REGISTRY_TLS_CERT and REGISTRY_TLS_KEY")
        }
        (None, None) => return Ok(None),
        (Some(_), None) => bail!(
            "REGISTRY_TLS_CERT is set without REGISTRY_TLS_KEY: set both for HTTPS, or neither"
        ),
        (None, Some(_)) => bail!(
            "REGISTRY_TLS_KEY is set without REGISTRY_TLS_CERT: set both for HTTPS, or neither"
        ),
    };
    let reloading = Reloading::new(files).map_err(|error| {
        let setting = match &error {
            TlsError::Read { what, .. } | TlsError::Pem { what, .. } if *what == "certificate" => {
                "REGISTRY_TLS_CERT"
            }
            _ => "REGISTRY_TLS_KEY",
        };
        anyhow::anyhow!("{setting}: {error}")
    })?;
    for name in names.iter().filter(|name| !reloading.covers(name)) {
        tracing::warn!(
            name,
            "the TLS certificate does not cover this name: clients will refuse it"
        );
    }
    let urls = [
        ("REGISTRY_BASE_URL", &settings.base_url),
        (
            "REGISTRY_ISSUER_URL_TEMPLATE",
            &settings.issuer_url_template,
        ),
    ];
    let plain = |url: &str| registry_domain::issuer::has_scheme(url, "http");
    for (setting, _) in urls.iter().filter(|(_, url)| plain(url)) {
        tracing::warn!(
            setting,
            "the listener speaks HTTPS, but this setting says http://"
        );
    }
    reloading.watch(LOOK_EVERY);
    Ok(Some(reloading))
}

/// Where HTTP-01 challenges are asked for (RFC 8555 §8.3).
const ACME_CHALLENGE_PREFIX: &str = "/.well-known/acme-challenge/";

/// The answer of an ACME server's HTTP-01 request on the plain listener (docs/api.md, "Custom
/// domains"): the key authorization stored for the host's domain and the token, as every
/// replica reads it from the database, or a 404; `None` for any other path. Answered here, on
/// the plain listener only, rather than by a route every request would be matched against;
/// never redirected: the domain has no certificate yet.
pub async fn challenge(req: &ServiceRequest) -> Option<HttpResponse> {
    let token = req.path().strip_prefix(ACME_CHALLENGE_PREFIX)?.to_owned();
    let state = req
        .app_data::<web::Data<AppState>>()
        .expect("the app's state");
    let host = crate::public::host(req.head()).map(crate::public::name_of_host);
    let not_found = || ApiError::NotFound("no such challenge".into()).error_response();
    let (Some(host), Some(worker)) = (host, state.custom_domains.as_ref()) else {
        return Some(not_found());
    };
    // From memory: a host with no order under way has no answer, and the database is not read
    // for it (anyone can send these requests, as often as they like).
    if !state.replica.domains.order_pending(&host, state.now()) {
        return Some(not_found());
    }
    let answer = |answer: String| {
        HttpResponse::Ok()
            .content_type("application/octet-stream")
            .body(answer)
    };
    let name = host.clone();
    let read = || state.read(move |r| domains::challenges(r, &name));
    Some(match worker.answers.answer(&host, &token, read).await {
        Ok(Some(found)) => answer(found),
        Ok(None) => not_found(),
        Err(error) => error.error_response(),
    })
}

/// Whether `req` came to the plain-HTTP listener beside HTTPS.
pub fn is_plain(req: &ServiceRequest) -> bool {
    req.conn_data::<Plain>().is_some()
}

/// What the plain-HTTP listener beside HTTPS answers itself ([`is_plain`]), `None` for what it
/// runs (`/healthz`): an ACME server's HTTP-01 request ([`challenge`]), else a redirect
/// ([`redirect`]). Asked by `observe`, so that these answers carry a request id, and are logged
/// and counted, like any other.
pub async fn plain(req: &ServiceRequest) -> Option<HttpResponse> {
    match challenge(req).await {
        Some(response) => Some(response),
        None => redirect(req),
    }
}

/// The mark of a connection to the plain-HTTP listener beside HTTPS
/// (`REGISTRY_HTTP_REDIRECT_LISTEN`), set where actix accepts it.
#[derive(Debug, Clone, Copy)]
pub struct Plain;

/// What the plain-HTTP listener answers instead of running `req`: nothing for `/healthz`
/// (it runs), and for anything else a 308 to the same path on the HTTPS URL of the API or
/// issuer host it asked for, or a 404 for any other host.
pub fn redirect(req: &ServiceRequest) -> Option<HttpResponse> {
    if req.path() == "/healthz" {
        return None;
    }
    let state = req
        .app_data::<web::Data<AppState>>()
        .expect("the app's state");
    let host = crate::public::host(req.head());
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let issuers = state.replica.hosting.issuers();
    let custom = || {
        let served = crate::public::custom_domain(state, host?)?;
        Some(served.domain.issuer())
    };
    let location = host
        .and_then(|host| issuers.origin_of_host(host))
        .or_else(custom)
        .map(|origin| {
            // The origin's authority (its port included), over https.
            format!("https://{}{path}", crate::settings::authority(&origin))
        });
    Some(match location {
        Some(location) => HttpResponse::PermanentRedirect()
            .insert_header((header::LOCATION, location))
            .finish(),
        None => ApiError::NotFound(
            "plain HTTP redirects only the API's and the issuers' hosts to HTTPS".into(),
        )
        .error_response(),
    })
}
