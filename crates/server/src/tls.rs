//! HTTPS on the listener (the certificate files: registry-tls), and the plain-HTTP listener
//! beside it that only redirects there.

use crate::problem::ApiError;
use crate::settings::Settings;
use crate::state::AppState;
use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header;
use actix_web::middleware::Next;
use actix_web::{web, HttpResponse, ResponseError};
use anyhow::bail;
use registry_tls::{CertificateFiles, Reloading};
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
    let reloading = Reloading::new(files)?;
    for name in names.iter().filter(|name| !reloading.covers(name)) {
        tracing::warn!(
            name,
            "the TLS certificate does not cover this name: clients will refuse it"
        );
    }
    reloading.watch(LOOK_EVERY);
    Ok(Some(reloading))
}

/// Beside HTTPS, the plain-HTTP listener: `/healthz` runs, and anything else is sent (308) to
/// the same path on the HTTPS URL of the API or issuer host it asked for.
pub async fn redirect_plain(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    if req.app_config().secure() || req.path() == "/healthz" {
        return next
            .call(req)
            .await
            .map(ServiceResponse::map_into_left_body);
    }
    let state = req
        .app_data::<web::Data<AppState>>()
        .expect("the app's state");
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok());
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let location = host
        .and_then(|host| (state.replica.hosting).https_location(host, path, state.settings.base()));
    let response = match location {
        Some(location) => HttpResponse::PermanentRedirect()
            .insert_header((header::LOCATION, location))
            .finish(),
        None => ApiError::NotFound(
            "plain HTTP redirects only the API's and the issuers' hosts to HTTPS".into(),
        )
        .error_response(),
    };
    Ok(req.into_response(response).map_into_right_body())
}
