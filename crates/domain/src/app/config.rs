//! A service's published configuration: publish (with the key lifecycle: docs/api.md, "Key
//! lifecycle"), read, withdraw.

use crate::app::{services, AppError, Caller, Registry};
use crate::audit::Action;
use crate::keys::{self, KeyState};
use crate::publishing::Publication;
use crate::service::PublishedConfig;
use crate::Service;
use serde_json::Value;
use time::OffsetDateTime;

/// The 404 of a service with nothing published.
pub fn nothing_published(subdomain: &str) -> AppError {
    AppError::NotFound(format!("nothing is published for {subdomain:?}"))
}

/// `PUT /services/{s}/config`: the whole body, `{"openidConfiguration": {...}, "jwks": {...},
/// "retainRemovedKeysHours"?}`.
#[derive(Debug, Clone, PartialEq)]
pub struct PublishConfig {
    /// The request body.
    pub body: Value,
}

/// Checks, rewrites and publishes an upload for `service` (granted to the caller): the key state
/// is read, rotated and written in one transaction, so that concurrent uploads to one service
/// see each other's retired keys.
pub fn publish(
    registry: &Registry,
    caller: &Caller,
    service: &Service,
    command: PublishConfig,
    now: OffsetDateTime,
) -> Result<Publication, AppError> {
    let issuer = registry.issuer_of(&service.subdomain);
    let event = caller.service_event(Action::ConfigPut, service, now);
    let mut outcome = None;
    registry
        .store
        .update_config(
            service.id,
            &mut |current| {
                let previous = current.map(|c| c.keys).unwrap_or_default();
                match keys::upload(
                    &command.body,
                    &issuer,
                    &previous,
                    &*registry.key_import,
                    now,
                    service.expires_at,
                ) {
                    Ok(upload) => {
                        let publication = upload.publication;
                        let config = PublishedConfig {
                            service_id: service.id,
                            openid_configuration: publication.openid_configuration.to_string(),
                            jwks: publication.jwks.to_string(),
                            updated_at: now,
                            // Recorded by the store, which reads the version replaced.
                            previous_change_at: None,
                            keys: upload.rotation.state,
                        };
                        outcome = Some(Ok(publication));
                        Some(config)
                    }
                    Err(refused) => {
                        outcome = Some(Err(refused));
                        None
                    }
                }
            },
            &event,
        )
        .map_err(AppError::gone(|| {
            format!("no service {:?}", service.subdomain)
        }))?;
    match outcome {
        Some(Ok(publication)) => Ok(publication),
        Some(Err(refused)) if refused.kid_reused => Err(AppError::KidReused(refused.violations)),
        Some(Err(refused)) => Err(AppError::Invalid(refused.violations)),
        // The store calls `make` once for a service that exists.
        None => Err(services::not_found(&service.subdomain)),
    }
}

/// Stops publishing `service`'s documents; the service stays.
pub fn withdraw(
    registry: &Registry,
    caller: &Caller,
    service: &Service,
    now: OffsetDateTime,
) -> Result<(), AppError> {
    let event = caller.service_event(Action::ConfigDelete, service, now);
    if registry.store.delete_config(service.id, &event)? {
        Ok(())
    } else {
        Err(nothing_published(&service.subdomain))
    }
}

/// The key state of what `service` publishes (empty when nothing is).
pub fn key_state(registry: &Registry, service: &Service) -> Result<KeyState, AppError> {
    Ok(registry
        .store
        .config(service.id)?
        .map(|c| c.keys)
        .unwrap_or_default())
}
