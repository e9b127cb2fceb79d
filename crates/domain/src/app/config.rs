//! A service's published configuration: publish (with the key lifecycle: docs/api.md, "Key
//! lifecycle"), read, withdraw.

use crate::app::{services, AppError, Caller, Registry};
use crate::audit::Action;
use crate::keys::{self, KeyState};
use crate::publishing::Publication;
use crate::service::{DocumentDates, PublishedConfig};
use crate::signing::Signing;
use crate::Service;
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

/// The 404 of a service with nothing published.
pub fn nothing_published(subdomain: &str) -> AppError {
    AppError::NothingPublished(format!("nothing is published for {subdomain:?}"))
}

/// The 404 of a key source that has no current key.
pub fn no_source(subdomain: &str, source: &str) -> AppError {
    AppError::NothingPublished(format!("{subdomain:?} has no key source {source:?}"))
}

/// The key source a request names (`?source=`), checked; absent: the default source.
pub fn source_of(name: Option<&str>) -> Result<String, AppError> {
    keys::source_name(name)
        .map(str::to_owned)
        .map_err(|why| AppError::BadRequest(format!("query parameter source: {why}")))
}

/// The key source an upload or a removal names, which may not be the registry's own
/// (`managed`: docs/api.md, "Managed signing").
pub fn upload_source_of(name: Option<&str>) -> Result<String, AppError> {
    let source = source_of(name)?;
    if source == crate::signing::MANAGED_SOURCE {
        return Err(AppError::BadRequest(format!(
            "query parameter source: {source:?} is the registry's own key source (managed \
             signing: PUT or DELETE /services/{{s}}/signing); name another"
        )));
    }
    Ok(source)
}

/// `PUT /services/{s}/config[?source=…]`: the whole body, `{"openidConfiguration": {...},
/// "jwks": {...}, "retainRemovedKeysHours"?, "rotationLeadSeconds"?}`, uploaded as `source`.
#[derive(Debug, Clone, PartialEq)]
pub struct PublishConfig {
    /// The request body.
    pub body: Value,
    /// The key source it uploads (checked by [`source_of`]).
    pub source: String,
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
    // The verifiers of any key this upload publishes first, fixed now (docs/api.md, "Key
    // readiness"): read before the transaction, which holds the service's row.
    let verifiers = verifiers_at(registry, service.id, now)?;
    // The managed keys withdrawn in the last eight days, as managed signing remembers them
    // (a compromised key's copy stays refused, whatever the key state still remembers: it
    // forgets when the service publishes nothing).
    let signing = registry.store.signing(service.id)?;
    let mut outcome = None;
    registry
        .store
        .update_config(
            service.id,
            &mut |current| {
                let (previous, published_before) = match current {
                    Some(c) => (c.keys, serde_json::from_str(&c.openid_configuration).ok()),
                    None => (KeyState::default(), None),
                };
                let previous = with_remembered(previous, signing.as_ref(), now);
                match keys::upload(
                    &command.body,
                    &issuer,
                    &command.source,
                    &previous,
                    &*registry.key_import,
                    now,
                    service.expires_at,
                ) {
                    Ok(upload) => {
                        let publication = upload.publication;
                        let mut keys = upload.rotation.state.with_upload(
                            &previous,
                            published_before,
                            &command.source,
                            upload.retain_hours,
                            upload.rotation.uploaded,
                        );
                        for key in &mut keys.keys {
                            if upload.rotation.added.contains(&key.kid) {
                                key.verifiers = Some(verifiers.clone());
                            }
                        }
                        let discovery = publication.openid_configuration.to_string();
                        if let Err(refused) = within_bounds(service, &keys, discovery.len()) {
                            outcome = Some(Err(refused));
                            return None;
                        }
                        let config = PublishedConfig {
                            service_id: service.id,
                            openid_configuration: discovery,
                            jwks: keys.current_set().to_string(),
                            updated_at: now,
                            // Recorded by the store, which reads the version replaced.
                            previous_change_at: None,
                            dates: DocumentDates::default(),
                            keys,
                        };
                        outcome = Some(Ok(publication));
                        Some(config)
                    }
                    Err(refused) => {
                        outcome = Some(Err(match refused.kid_reused {
                            true => AppError::KidReused(refused.violations),
                            false => AppError::Invalid(refused.violations),
                        }));
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
        Some(outcome) => outcome,
        // The store calls `make` once for a service that exists.
        None => Err(services::not_found(&service.subdomain)),
    }
}

/// Key sources a registered service may publish from (docs/api.md, "Key sources").
pub const MAX_SOURCES: usize = 8;
/// Key sources an anonymous service may publish from.
pub const MAX_ANONYMOUS_SOURCES: usize = 1;
/// The most a service's key state may take, stored (every source's keys, the retired ones,
/// each source's discovery document; the verifiers the registry records aside): whatever is
/// uploaded, what one service costs every replica is bounded.
pub const MAX_KEY_STATE_BYTES: usize = 1 << 20;

/// Refuses a key state past the bounds: more sources than the service may have (409
/// `too-many-sources`), or more than [`MAX_KEY_STATE_BYTES`] stored (413), with the discovery
/// document published beside it (`discovery` bytes: the latest upload's, which the key state
/// does not hold).
fn within_bounds(service: &Service, keys: &KeyState, discovery: usize) -> Result<(), AppError> {
    let most = match service.customer_id {
        Some(_) => MAX_SOURCES,
        None => MAX_ANONYMOUS_SOURCES,
    };
    let mut sources = keys.sources();
    // The registry's own keys are no upload: they count against no limit of sources.
    sources.remove(crate::signing::MANAGED_SOURCE);
    if sources.len() > most {
        let names: Vec<&str> = sources.keys().map(String::as_str).collect();
        return Err(AppError::TooManySources(format!(
            "{:?} would publish keys from {} key sources ({}); it may have {most}: remove one \
             first (DELETE /services/{{s}}/config?source=NAME)",
            service.subdomain,
            sources.len(),
            names.join(", ")
        )));
    }
    // What uploads made: the verifiers the registry records (at most 32 a key) are its own,
    // and no outsider's fetches may push an owner's upload over the bound; nor may the memory
    // of withdrawn keys (at most 100, eight days), which no upload can clear.
    let mut uploaded = keys.clone();
    for key in &mut uploaded.keys {
        key.verifiers = None;
    }
    uploaded.withdrawn = Vec::new();
    let size = serde_json::to_vec(&uploaded).map_or(0, |bytes| bytes.len()) + discovery;
    if size > MAX_KEY_STATE_BYTES {
        return Err(AppError::TooLarge(format!(
            "{:?}'s key state would take {size} bytes stored, every source's keys, the \
             retired ones and the discovery documents; at most {MAX_KEY_STATE_BYTES} are kept: \
             upload fewer or smaller keys or documents, or delete retired keys (DELETE \
             /services/{{s}}/keys/{{kid}})",
            service.subdomain
        )));
    }
    Ok(())
}

/// Stops publishing `service`'s documents; the service stays. The keys of managed signing
/// (docs/api.md, "Managed signing") are not an upload: they stay, alone, with the discovery
/// document the registry writes for them, until managed signing withdraws them itself.
pub fn withdraw(
    registry: &Registry,
    caller: &Caller,
    service: &Service,
    now: OffsetDateTime,
) -> Result<(), AppError> {
    let event = caller.service_event(Action::ConfigDelete, service, now);
    let managed = crate::signing::MANAGED_SOURCE;
    let holds_managed = |config: &PublishedConfig| {
        (config.keys.keys.iter()).any(|k| k.retired_at.is_none() && k.held_by(managed))
    };
    // A managed key published meanwhile (signing turned on) is kept: withdraw again.
    for _ in 0..WITHDRAW_ATTEMPTS {
        match withdraw_uploads(registry, service, &holds_managed, &event, now)? {
            Some(true) => return Ok(()),
            // Nothing managed: the whole configuration goes, as it always did.
            Some(false)
                if (registry.store).delete_config(service.id, &holds_managed, &event)? =>
            {
                return Ok(())
            }
            Some(false) => continue,
            None => return Err(nothing_published(&service.subdomain)),
        }
    }
    Err(AppError::Conflict(
        "managed signing kept changing the key set meanwhile: try again".to_owned(),
    ))
}

/// How many times [`withdraw`] reads again when managed signing changed the key set in between.
const WITHDRAW_ATTEMPTS: usize = 8;

/// Withdraws the uploaded keys of `service`'s configuration when it `holds_managed` keys (they
/// stay): `None` when nothing is published, else whether it holds them.
fn withdraw_uploads(
    registry: &Registry,
    service: &Service,
    holds_managed: &dyn Fn(&PublishedConfig) -> bool,
    event: &crate::audit::AuditEvent,
    now: OffsetDateTime,
) -> Result<Option<bool>, AppError> {
    let managed = crate::signing::MANAGED_SOURCE;
    let mut managed_kept = None;
    registry
        .store
        .update_config(
            service.id,
            &mut |current| {
                let current = current?;
                managed_kept = Some(holds_managed(&current));
                if managed_kept == Some(false) {
                    return None;
                }
                let keys = KeyState {
                    keys: (current.keys.keys.iter())
                        .filter(|k| k.retired_at.is_none() && k.held_by(managed))
                        .map(|k| keys::KeyRecord {
                            source: managed.to_owned(),
                            also_sources: Vec::new(),
                            ..k.clone()
                        })
                        .collect(),
                    sources: (current.keys.sources.iter())
                        .filter(|(name, _)| *name == managed)
                        .map(|(name, upload)| (name.clone(), upload.clone()))
                        .collect(),
                    withdrawn: current.keys.withdrawn.clone(),
                };
                let document = written_discovery(registry, service, &keys, now);
                // Nothing uploaded is left to stop publishing: nothing changes, no event.
                if keys == current.keys && document == current.openid_configuration {
                    return None;
                }
                Some(PublishedConfig {
                    openid_configuration: document,
                    jwks: keys.current_set().to_string(),
                    updated_at: now,
                    previous_change_at: None,
                    keys,
                    ..current
                })
            },
            event,
        )
        .map_err(AppError::gone(|| {
            format!("no service {:?}", service.subdomain)
        }))?;
    Ok(managed_kept)
}

/// `config` with `keys` instead of its own (a source removed, a retired key withdrawn: a new
/// version): a discovery document the registry writes (only managed keys current) follows the
/// algorithms they publish.
pub(crate) fn rekeyed(
    registry: &Registry,
    service: &Service,
    config: PublishedConfig,
    keys: KeyState,
    now: OffsetDateTime,
) -> PublishedConfig {
    let openid_configuration = match keys.only_managed() {
        true => written_discovery(registry, service, &keys, now),
        false => config.openid_configuration,
    };
    PublishedConfig {
        keys,
        openid_configuration,
        ..config
    }
}

/// The discovery document the registry writes for a service whose current keys are all managed
/// (docs/api.md, "Managed signing"): the algorithms of every key it publishes at `now` (retired
/// uploaded keys still published included), as kube-apiserver writes its own.
fn written_discovery(
    registry: &Registry,
    service: &Service,
    keys: &KeyState,
    now: OffsetDateTime,
) -> String {
    let issuer = registry.issuer_of(&service.subdomain);
    crate::signing::discovery_document(&issuer, &keys.algorithms(now)).to_string()
}

/// `DELETE /services/{s}/config?source=…`: `source`'s keys retire (for its upload's
/// retention), every other source's stay, and so does the discovery document, unless only
/// managed keys are left current: then the registry writes it, as for a service that never had
/// an upload.
pub fn withdraw_source(
    registry: &Registry,
    caller: &Caller,
    service: &Service,
    source: &str,
    now: OffsetDateTime,
) -> Result<(), AppError> {
    let event = caller.service_event(Action::ConfigDelete, service, now);
    let mut found = None;
    registry
        .store
        .update_config(
            service.id,
            &mut |current| {
                let current = current?;
                found = Some(false);
                let keys = current
                    .keys
                    .without_source(source, now, service.expires_at)?;
                found = Some(true);
                let config = PublishedConfig {
                    jwks: keys.current_set().to_string(),
                    updated_at: now,
                    previous_change_at: None,
                    ..current
                };
                Some(rekeyed(registry, service, config, keys, now))
            },
            &event,
        )
        .map_err(AppError::gone(|| {
            format!("no service {:?}", service.subdomain)
        }))?;
    match found {
        Some(true) => Ok(()),
        Some(false) => Err(no_source(&service.subdomain, source)),
        None => Err(nothing_published(&service.subdomain)),
    }
}

/// `GET /services/{s}/config?source=…`: that source's latest upload,
/// `{openidConfiguration, jwks}` (its current keys).
pub fn source_upload(
    registry: &Registry,
    service: &Service,
    source: &str,
) -> Result<Value, AppError> {
    let config = registry
        .store
        .config(service.id)?
        .ok_or_else(|| nothing_published(&service.subdomain))?;
    let published: Value = serde_json::from_str(&config.openid_configuration).unwrap_or_default();
    config
        .keys
        .source_upload(source, &published)
        .ok_or_else(|| no_source(&service.subdomain, source))
}

/// The verifiers a key of `service_id` first published at `published` gets (docs/api.md, "Key
/// readiness"): the agents that fetched the key set in the week before, as
/// [`keys::verifiers_of`] chooses them.
pub fn verifiers_at(
    registry: &Registry,
    service_id: Uuid,
    published: OffsetDateTime,
) -> Result<Vec<keys::KeyVerifier>, AppError> {
    let since = published - keys::VERIFIER_WINDOW;
    let candidates = (registry.store).verifier_candidates(service_id, since, published)?;
    Ok(keys::verifiers_of(
        &candidates,
        registry.settings.verifier_hours,
    ))
}

/// `keys` remembering, besides its own withdrawn keys, the managed keys `signing` withdrew in
/// the last eight days before `now`, each with when it stopped signing: a key state forgets
/// its withdrawals when the service publishes nothing, and knew a managed key current to the
/// end; managed signing does neither (the one listed for a `kid` is the latest).
pub fn with_remembered(
    mut keys: KeyState,
    signing: Option<&Signing>,
    now: OffsetDateTime,
) -> KeyState {
    if let Some(signing) = signing {
        let remembered = crate::withdrawn::remembered(
            signing.remembered(now),
            &keys.withdrawn,
            |kid| keys.keys.iter().any(|k| k.kid == kid),
            now,
        );
        keys.withdrawn = remembered;
        signing.date_withdrawals(&mut keys.withdrawn);
    }
    keys
}

/// The key state of what `service` publishes (empty when nothing is).
pub fn key_state(registry: &Registry, service: &Service) -> Result<KeyState, AppError> {
    Ok(registry
        .store
        .config(service.id)?
        .map(|c| c.keys)
        .unwrap_or_default())
}
