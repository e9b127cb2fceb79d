//! Managed signing (docs/api.md, "Managed signing"): turning it on, changing it, turning it off,
//! a rotation asked for, a signature, and the rotation step that runs by itself.
//!
//! Every change writes the signing's state and the service's published key set in one
//! transaction ([`SigningStore::update_signing`](crate::ports::SigningStore::update_signing)),
//! so that a managed key is published exactly while its state says so. The rotation step
//! ([`advance`]) runs on whichever replica gets there first: it reads the state, decides, and
//! writes only when the state it decided on is still the one stored, so one transition is
//! written once however many replicas race for it, and a restart at any point resumes from what
//! is stored.

use crate::app::{config, readiness, AppError, Caller, Registry};
use crate::audit::{Action, Actor, AuditEvent, Resource};
use crate::custom_domain::DomainStatus;
use crate::keys::{KeyVerifier, MAX_PUBLISHED_KEYS};
use crate::ports::{ConfigChange, ManagedKeys, SignFailure, SigningChange};
use crate::service::{DocumentDates, PublishedConfig};
use crate::signing::{
    self, check_claims, discovery_document, ClaimRules, ManagedKey, Signing, SigningSettings,
    Stage, Transition,
};
use crate::Service;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

/// A signature made (`POST /services/{s}/sign`'s answer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    /// The JWS header, base64url.
    pub header: String,
    /// The signature of `header.claims`, base64url.
    pub signature: String,
    /// The key that signed.
    pub kid: String,
}

fn keys_of(registry: &Registry) -> Result<&dyn ManagedKeys, AppError> {
    registry.managed_keys.as_deref().ok_or_else(|| {
        AppError::SigningDisabled(
            "managed signing needs REGISTRY_DATA_KEY, the key its private keys are sealed under: \
             the operator has not set it"
                .to_owned(),
        )
    })
}

/// The answer when a managed key of `whose` (`"k3s-acme"`, "other services") could not be
/// used here.
fn sign_failure(whose: &str, failure: SignFailure) -> AppError {
    match failure {
        SignFailure::Sealed(why) => AppError::SigningDisabled(format!(
            "the managed keys of {whose} do not open on this registry ({why}): it was started \
             with another REGISTRY_DATA_KEY than the one they were sealed under; the operator \
             starts every replica with the same key"
        )),
        SignFailure::Failed(why) => AppError::Keys(format!("signing: {why}")),
    }
}

/// A service's subdomain as the sentences quote it.
fn quoted(service: &Service) -> String {
    format!("{:?}", service.subdomain)
}

fn not_on(service: &Service) -> AppError {
    AppError::NotFound(format!(
        "managed signing is not turned on for {:?} (PUT /services/{{s}}/signing)",
        service.subdomain
    ))
}

/// A new key of `algorithm`, at `stage`.
fn make(
    registry: &Registry,
    service: &Service,
    beside: Option<&Signing>,
    settings: &SigningSettings,
    stage: Stage,
    now: OffsetDateTime,
) -> Result<ManagedKey, AppError> {
    let keys = keys_of(registry)?;
    // A replica started with another data key would add a key the others cannot open (and
    // take over signing with it): the keys already there must open here first; for a
    // service's first key, another service's (a first key sealed under the wrong data key
    // would leave the service unable to sign or rotate on every other replica).
    let elsewhere;
    let (whose, key) = match beside.and_then(|signing| signing.keys.first()) {
        Some(key) => (quoted(service), Some(key)),
        None => {
            elsewhere = registry.store.other_signing(service.id)?;
            let key = elsewhere.as_ref().and_then(|s| s.keys.first());
            ("other services".to_owned(), key)
        }
    };
    if let Some(key) = key {
        keys.opens(&key.kid, &key.sealed)
            .map_err(|failure| sign_failure(&whose, failure))?;
    }
    let made = keys
        .make(settings.algorithm)
        .map_err(|why| AppError::Keys(format!("making a key: {why}")))?;
    let mut key = ManagedKey::new(made, settings.algorithm, stage, now)
        .ok_or_else(|| AppError::Keys("the key made has no thumbprint".to_owned()))?;
    key.lead_seconds = Some(settings.lead_seconds);
    Ok(key)
}

/// The service's published configuration with its managed keys as `signing` lists them: keys new
/// to the key set are first published now (with the signing's lead and the verifiers of now);
/// the discovery document is the registry's own while every current key is managed. Kept when
/// the key set does not change; removed when the last managed key left and no other key is
/// published (nothing uploaded, no removed source's key still retained).
fn publish(
    registry: &Registry,
    service: &Service,
    signing: &Signing,
    stored: Option<PublishedConfig>,
    verifiers: &[KeyVerifier],
    now: OffsetDateTime,
) -> ConfigChange {
    let before = stored.as_ref().map(|c| c.keys.clone()).unwrap_or_default();
    let keys = before.with_managed(
        &signing.published(),
        signing.settings.lead_seconds,
        verifiers,
        now,
    );
    if stored.is_some() && keys == before {
        return ConfigChange::Keep;
    }
    // Nothing left to publish: every key gone, or only retired ones whose time ran out and
    // that the upkeep has not dropped yet.
    if keys.published(now).next().is_none() {
        return match stored {
            Some(_) => ConfigChange::Remove(now),
            None => ConfigChange::Keep,
        };
    }
    let document = match (keys.only_managed(), &stored) {
        (false, Some(stored)) => stored.openid_configuration.clone(),
        _ => {
            let issuer = registry.issuer_of(&service.subdomain);
            discovery_document(&issuer, &keys.algorithms(now)).to_string()
        }
    };
    ConfigChange::Write(PublishedConfig {
        service_id: service.id,
        openid_configuration: document,
        jwks: keys.current_set().to_string(),
        updated_at: now,
        // Recorded by the store, which reads the version replaced.
        previous_change_at: None,
        dates: DocumentDates::default(),
        keys,
    })
}

/// Writes `signing` (changed by `apply` from the state stored, which must be `expected` when
/// given: otherwise another replica changed it first and nothing is written) with the key set
/// it publishes; `adds_key`: `apply` adds a key made for this write; `held_until`: a rotation
/// that has to wait is looked at again no earlier. Whether it was written, and whether it left
/// the service publishing nothing.
#[allow(clippy::too_many_arguments)]
fn write(
    registry: &Registry,
    service: &Service,
    expected: Option<&Signing>,
    adds_key: bool,
    apply: &mut dyn FnMut(Option<Signing>) -> Option<Signing>,
    event: Option<&AuditEvent>,
    held_until: Option<OffsetDateTime>,
    now: OffsetDateTime,
) -> Result<Written, AppError> {
    // The verifiers of a key first published now read a week of fetch evidence: only when this
    // write may publish one (a key made for it, or a managed key the key set lacks, as the
    // write finds the key set: then it is written again with them).
    let first_publication = adds_key || expected.is_none();
    let verifiers = match first_publication {
        true => config::verifiers_at(registry, service.id, now)?,
        false => Vec::new(),
    };
    let mut lacks_verifiers = false;
    let mut removed = false;
    let mut change = |stored: Option<Signing>, config: Option<PublishedConfig>| {
        if expected.is_some() && stored.as_ref() != expected {
            return None;
        }
        if !first_publication
            && stored
                .as_ref()
                .is_some_and(|s| unpublished(config.as_ref(), s))
        {
            lacks_verifiers = true;
            return None;
        }
        let signing = apply(stored)?;
        let config = publish(registry, service, &signing, config, &verifiers, now);
        removed = matches!(config, ConfigChange::Remove(_));
        Some(SigningChange {
            config,
            due_at: signing.due_at_holding_rotation(now, held_until),
            // Kept without keys while it remembers withdrawn ones: a service that publishes
            // nothing any more must still refuse a compromised key's copy.
            signing: signing.worth_keeping(now).then_some(signing),
        })
    };
    let written = (registry.store)
        .update_signing(service.id, &mut change, event)
        .map_err(AppError::gone(|| {
            format!("no service {:?}", service.subdomain)
        }))?;
    match (lacks_verifiers, written, removed) {
        (true, ..) => write(
            registry, service, expected, true, apply, event, held_until, now,
        ),
        (false, false, _) => Ok(Written::No),
        (false, true, false) => Ok(Written::Yes),
        (false, true, true) => Ok(Written::Unpublished),
    }
}

/// What [`write`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Written {
    /// Nothing: the state was not the one expected (another change came first).
    No,
    /// The new state, with the key set it publishes.
    Yes,
    /// The new state, and the service publishes nothing any more: its configuration was
    /// removed (the last managed key withdrawn, nothing else published).
    Unpublished,
}

impl Written {
    /// Whether anything was written.
    fn any(self) -> bool {
        self != Written::No
    }
}

/// Whether the service's key set has room for one more key: its cap counts every source's keys,
/// the managed ones and the retired ones still published included.
fn room_for_a_key(
    registry: &Registry,
    service: &Service,
    now: OffsetDateTime,
) -> Result<bool, AppError> {
    let keys = config::key_state(registry, service)?;
    Ok(keys.published(now).count() < MAX_PUBLISHED_KEYS)
}

/// The refusal of a new managed key the key set has no room for.
fn key_set_full() -> AppError {
    AppError::Conflict(format!(
        "the key set already holds {MAX_PUBLISHED_KEYS} keys (every source's, the managed and \
         the retired ones still published included), its most: delete retired keys first \
         (DELETE /services/{{s}}/keys/{{kid}}) or wait until retiring ones leave"
    ))
}

/// Whether a managed key of `signing` is missing from the service's key set (`config`).
fn unpublished(config: Option<&PublishedConfig>, signing: &Signing) -> bool {
    let current = |kid: &str| {
        config.is_some_and(|c| (c.keys.keys.iter()).any(|k| k.kid == kid && k.retired_at.is_none()))
    };
    (signing.keys.iter()).any(|managed| !current(&managed.kid))
}

/// The event of a transition the registry makes by itself (a rotation at the end of the period,
/// a switch, a withdrawal).
fn system_event(action: Action, service: &Service, now: OffsetDateTime) -> AuditEvent {
    AuditEvent::new(
        action,
        Resource::service(service.id, &service.subdomain),
        Actor::system(),
        service.customer_id,
        now,
    )
}

/// `GET /services/{s}/signing` at `now`: the settings and the keys (404 when it is not turned
/// on).
pub fn get(
    registry: &Registry,
    service: &Service,
    purging: bool,
    now: OffsetDateTime,
) -> Result<Value, AppError> {
    let signing = match registry.store.signing(service.id)? {
        Some(signing) if signing.enabled => signing,
        _ => return Err(not_on(service)),
    };
    let mut view = signing.view(now, service.expires_at);
    // A key not known safe (the next one; one that signs at once after a compromise) is as
    // Key readiness reports it: a key that signed before it was safe becomes safe later.
    let unknown: Vec<&ManagedKey> = (signing.keys.iter())
        .filter(|k| k.safe_at.is_none())
        .collect();
    if unknown.is_empty() {
        return Ok(view);
    }
    let keys = config::key_state(registry, service)?;
    for key in unknown {
        let Some(record) = keys.published(now).find(|r| r.kid == key.kid) else {
            continue;
        };
        let purging = purging && !key.first_of_all;
        let safe_at = readiness::assess_key(registry, service, record, purging, now)?.1;
        let listed = (view["keys"].as_array_mut().into_iter().flatten())
            .find(|listed| listed["kid"] == key.kid.as_str());
        if let (Some(listed), Some(at)) = (listed, safe_at) {
            listed["safeToSignAt"] = crate::timestamp::rfc3339(at).into();
        }
    }
    Ok(view)
}

/// `PUT /services/{s}/signing`: turns it on (its first key made, published as `next`, signing
/// once safe) or changes its settings (a new algorithm or lead applies from the next key). The
/// state after it, and after the rotation step it may allow at once (a first key with a lead of
/// 0 and no verifier signs at once). PUTs at once are applied one after the other: of two first
/// PUTs, one turns signing on and the other, reading again, updates its settings.
pub fn put(
    registry: &Registry,
    caller: &Caller,
    service: &Service,
    body: &Value,
    purging: bool,
    now: OffsetDateTime,
) -> Result<Value, AppError> {
    keys_of(registry)?;
    for _ in 0..WRITE_ATTEMPTS {
        if let Some(now) = put_once(registry, caller, service, body, now)? {
            // A step another request wrote meanwhile is read again: a first key with no lead
            // answers `current` even when another PUT changed the settings in between.
            let settle = || -> Result<(), AppError> {
                for _ in 0..WRITE_ATTEMPTS {
                    match step(registry, service, purging, now) {
                        Ok(Step::Lost) => continue,
                        // The settings are written; a rotation due that this replica cannot
                        // make (another data key) is the step's, failing there, logged, once
                        // a minute.
                        Ok(_) | Err(AppError::SigningDisabled(_)) => break,
                        Err(other) => return Err(other),
                    }
                }
                Ok(())
            };
            settle()?;
            let view = get(registry, service, purging, now)?;
            // The first key another PUT made may have turned safe since this one's step looked
            // (that PUT's purge done meanwhile): it takes its turn now, so that the answer names
            // the key that signs, as the other PUT's does.
            let safe_next = (view["keys"].as_array().into_iter().flatten())
                .any(|k| k["state"] == "next" && !k["safeToSignAt"].is_null());
            if !safe_next {
                return Ok(view);
            }
            settle()?;
            return get(registry, service, purging, now);
        }
    }
    Err(AppError::Conflict(
        "managed signing kept changing meanwhile (other requests or the rotation step): try \
         again"
            .to_owned(),
    ))
}

/// How far ahead of a request's clock another's write may move it ([`put_once`]): more than a
/// write's own duration, less than anything a rotation measures.
const CLOCK_AHEAD_AT_MOST: time::Duration = time::Duration::seconds(2);

/// One attempt of [`put`] from a fresh read: `None` when another change was written first;
/// otherwise the moment it acted at, `now` or, when another PUT wrote a key later by this
/// clock, that key's making (its lead of 0 would not be over at `now`).
fn put_once(
    registry: &Registry,
    caller: &Caller,
    service: &Service,
    body: &Value,
    now: OffsetDateTime,
) -> Result<Option<OffsetDateTime>, AppError> {
    let stored = registry.store.signing(service.id)?;
    // A replica whose clock runs ahead moves this one's by no more than a moment.
    let written = stored.as_ref().and_then(Signing::written_through);
    let now = written.map_or(now, |at| at.clamp(now, now + CLOCK_AHEAD_AT_MOST));
    let on = stored.as_ref().filter(|s| s.enabled);
    let settings =
        SigningSettings::parse(body, on.map(|s| &s.settings)).map_err(AppError::Invalid)?;
    // Turning it on makes a key: how many the key set publishes now, read once, says whether it
    // has room for one and whether it is the service's first.
    let published = match on {
        None => Some(config::key_state(registry, service)?.published(now).count()),
        Some(_) => None,
    };
    if published.is_some_and(|n| n >= MAX_PUBLISHED_KEYS) {
        return Err(key_set_full());
    }
    let (action, made) = match on {
        Some(_) => (Action::SigningUpdate, None),
        None => {
            let mut made = make(
                registry,
                service,
                stored.as_ref(),
                &settings,
                Stage::Next,
                now,
            )?;
            let alone = published == Some(0);
            made.first_of_all = first_of_all(registry, service, stored.as_ref(), alone, now)?;
            (Action::SigningEnable, Some(made))
        }
    };
    let event = caller.service_event(action, service, now);
    let event = match on {
        None => Some(event),
        Some(on) => {
            // An update records each member it changed, as every update's event does, and one
            // that changes nothing writes no event, as no other update does.
            let (old, new) = (on.settings, settings);
            let changed = event
                .with_change(
                    "algorithm",
                    old.algorithm.as_str().into(),
                    new.algorithm.as_str().into(),
                )
                .with_change(
                    "rotationPeriodSeconds",
                    old.rotation_period_seconds.into(),
                    new.rotation_period_seconds.into(),
                )
                .with_change(
                    "maxTokenSeconds",
                    old.max_token_seconds.into(),
                    new.max_token_seconds.into(),
                )
                .with_change(
                    "leadSeconds",
                    old.lead_seconds.into(),
                    new.lead_seconds.into(),
                );
            (!changed.changes.is_empty()).then_some(changed)
        }
    };
    let read = stored.clone();
    let mut apply = |stored: Option<Signing>| match (stored, &made) {
        // Another PUT (or the step) wrote since the read: this one starts over from what it
        // wrote. (`write` compares only a state that was read, not its absence.)
        (stored, _) if stored != read => None,
        (Some(mut on), None) => {
            on.change(settings);
            Some(on)
        }
        (Some(mut off), Some(made)) => {
            off.enable(settings, made.clone());
            Some(off)
        }
        (None, Some(made)) => Some(Signing::new(settings, made.clone())),
        (None, None) => None,
    };
    let written = write(
        registry,
        service,
        stored.as_ref(),
        made.is_some(),
        &mut apply,
        event.as_ref(),
        None,
        now,
    )?;
    Ok(written.any().then_some(now))
}

/// Whether a key made now would be `service`'s very first ([`ManagedKey::first_of_all`]): no
/// managed key before it (`stored`), nothing published (`alone`), and no key set of the service
/// fetched in the week before (directly or through a cache's log).
fn first_of_all(
    registry: &Registry,
    service: &Service,
    stored: Option<&Signing>,
    alone: bool,
    now: OffsetDateTime,
) -> Result<bool, AppError> {
    if !alone || stored.is_some_and(|s| !s.keys.is_empty()) {
        return Ok(false);
    }
    let since = now - crate::keys::VERIFIER_WINDOW;
    Ok((registry.store)
        .last_key_set_fetches(&[service.id], since)?
        .is_empty())
}

/// `DELETE /services/{s}/keys/{kid}` of a managed key: a retiring one (it signs no more:
/// replaced, or signing turned off) is withdrawn at once, as a retired upload's key is, so that
/// a compromised key need not wait out its tokens; the key that signs, or the next one, is a
/// 409 (a compromised rotation replaces them at once). `None` when `kid` is no managed key of
/// the service.
pub fn withdraw_key(
    registry: &Registry,
    caller: &Caller,
    service: &Service,
    kid: &str,
    now: OffsetDateTime,
) -> Result<Option<()>, AppError> {
    // A signature recorded meanwhile (`lastSignedAt`) changes the state: read it again.
    for _ in 0..WRITE_ATTEMPTS {
        if let Some(done) = try_withdraw_key(registry, caller, service, kid, now)? {
            return Ok(done);
        }
    }
    Err(changed_meanwhile())
}

/// How many times a call that writes over the managed signing it read tries, when another
/// write (a signature recorded, the step, another request) changed it in between.
const WRITE_ATTEMPTS: usize = 8;

fn changed_meanwhile() -> AppError {
    AppError::Conflict("managed signing changed meanwhile: try again".to_owned())
}

/// One attempt of [`withdraw_key`]: `None` when the state changed since it was read.
fn try_withdraw_key(
    registry: &Registry,
    caller: &Caller,
    service: &Service,
    kid: &str,
    now: OffsetDateTime,
) -> Result<Option<Option<()>>, AppError> {
    let Some(stored) = registry.store.signing(service.id)? else {
        return Ok(Some(None));
    };
    let Some(key) = stored.keys.iter().find(|k| k.kid == kid) else {
        return Ok(Some(None));
    };
    if key.stage != Stage::Retiring {
        return Err(AppError::Conflict(format!(
            "key {kid:?} is managed signing's {} key: a compromised rotation (POST \
             /services/{{s}}/signing/rotate?compromised=true) replaces it at once",
            key.stage.as_str()
        )));
    }
    let event = caller.event(
        Action::KeyDelete,
        Resource::key(kid, &service.subdomain),
        service.customer_id,
        now,
    );
    let kids = [kid.to_owned()];
    let mut apply = |stored: Option<Signing>| {
        let mut signing = stored?;
        signing.withdraw(&kids, now);
        Some(signing)
    };
    let written = write(
        registry,
        service,
        Some(&stored),
        false,
        &mut apply,
        Some(&event),
        None,
        now,
    )?;
    Ok(written.any().then_some(Some(())))
}

/// `DELETE /services/{s}/signing`: nothing signs from now on; every managed key stays published
/// until the tokens it signed have expired, then leaves.
pub fn delete(
    registry: &Registry,
    caller: &Caller,
    service: &Service,
    now: OffsetDateTime,
) -> Result<(), AppError> {
    // Off, and without the keys that never signed: they leave with the answer, not at the
    // rotation step's next turn (no token of theirs needs them).
    let off = |mut signing: Signing| {
        signing.disable(now);
        let leaving: Vec<String> = (signing.keys.iter())
            .filter(|k| k.withdraw_at.is_some_and(|at| at <= now))
            .map(|k| k.kid.clone())
            .collect();
        signing.withdraw(&leaving, now);
        (signing, leaving)
    };
    let mut apply = |stored: Option<Signing>| Some(off(stored?).0);
    // A signature recorded meanwhile (`lastSignedAt`) changes the state: read it again.
    for _ in 0..WRITE_ATTEMPTS {
        let stored = registry.store.signing(service.id)?;
        let Some(on) = stored.filter(|s| s.enabled) else {
            return Err(not_on(service));
        };
        let leaving = off(on.clone()).1;
        let event = caller.service_event(Action::SigningDisable, service, now);
        let event = match leaving.is_empty() {
            true => event,
            false => event.with_change(
                "withdrawnKids",
                Value::Null,
                leaving.into_iter().map(Value::String).collect(),
            ),
        };
        if write(
            registry,
            service,
            Some(&on),
            false,
            &mut apply,
            Some(&event),
            None,
            now,
        )?
        .any()
        {
            return Ok(());
        }
    }
    Err(changed_meanwhile())
}

/// `POST /services/{s}/signing/rotate[?compromised=true]`: a next key is made and published;
/// it signs once safe (409 `rotation-in-progress` while a next key exists). Compromised: the new
/// key signs at once and every other managed key leaves the key set at once. The state after.
pub fn rotate(
    registry: &Registry,
    caller: &Caller,
    service: &Service,
    compromised: bool,
    purging: bool,
    now: OffsetDateTime,
) -> Result<Value, AppError> {
    // A compromise's event names the keys it withdraws: it writes only over the state it read,
    // read again when another write (a signature recorded, the step) changed it in between.
    for _ in 0..WRITE_ATTEMPTS {
        if try_rotate(registry, caller, service, compromised, now)? {
            advance(registry, service, purging, now)?;
            return get(registry, service, purging, now);
        }
    }
    Err(changed_meanwhile())
}

/// One attempt of [`rotate`]: whether it was written (`false`: a compromise's state changed
/// since it was read).
fn try_rotate(
    registry: &Registry,
    caller: &Caller,
    service: &Service,
    compromised: bool,
    now: OffsetDateTime,
) -> Result<bool, AppError> {
    let stored = registry.store.signing(service.id)?;
    let Some(on) = stored.filter(|s| s.enabled) else {
        return Err(not_on(service));
    };
    if let (Some(next), false) = (on.next(), compromised) {
        return Err(in_progress(next));
    }
    let stage = match compromised {
        true => Stage::Current,
        false => Stage::Next,
    };
    // A compromise withdraws every other managed key: it never grows the key set.
    if !compromised && !room_for_a_key(registry, service, now)? {
        return Err(key_set_full());
    }
    let made = make(registry, service, Some(&on), &on.settings, stage, now)?;
    let event = caller.service_event(Action::SigningRotate, service, now);
    let new_kid = Value::String(made.kid.clone());
    let event = match compromised {
        false => event.with_change("nextKid", Value::Null, new_kid),
        // The new key signs at once, and every other key is withdrawn at once: the one event
        // says both, as a switch's and a withdrawal's would.
        true => {
            let current = on.current().map_or(Value::Null, |k| k.kid.clone().into());
            let withdrawn: Vec<Value> = on.keys.iter().map(|k| k.kid.clone().into()).collect();
            event
                .with_change("currentKid", current, new_kid)
                .with_change("withdrawnKids", Value::Null, withdrawn.into())
                .with_change("compromised", Value::Bool(false), Value::Bool(true))
        }
    };
    let mut refused = None;
    let mut apply = |stored: Option<Signing>| {
        // Signing may have been turned off since the read above: then nothing is rotated.
        let mut signing = stored.filter(|s| s.enabled)?;
        if compromised {
            signing.replace_compromised(made.clone());
        } else if let Err(next) = signing.rotate(made.clone()) {
            refused = Some(in_progress(next));
            return None;
        }
        Some(signing)
    };
    let expected = compromised.then_some(&on);
    let written = write(
        registry,
        service,
        expected,
        true,
        &mut apply,
        Some(&event),
        None,
        now,
    )?;
    if let Some(refused) = refused {
        return Err(refused);
    }
    match (written.any(), compromised) {
        (true, _) => Ok(true),
        (false, true) => Ok(false),
        (false, false) => Err(not_on(service)),
    }
}

fn in_progress(next: &ManagedKey) -> AppError {
    AppError::RotationInProgress(format!(
        "a rotation is in progress: key {:?} is published as next and signs once it is safe \
         (GET /services/{{s}}/keys/{}/readiness)",
        next.kid, next.kid
    ))
}

/// The rotation step of `service` at `now` (`purging`: caches in front of the registry are
/// purged): the one transition due, if any (a safe next key switches, retiring keys past their
/// time leave, the period over starts a rotation), written once whichever replica gets there
/// first. When nothing is due, only the time of the next look is written.
pub fn advance(
    registry: &Registry,
    service: &Service,
    purging: bool,
    now: OffsetDateTime,
) -> Result<Option<Transition>, AppError> {
    Ok(match step(registry, service, purging, now)? {
        Step::Written(transition, _) => Some(transition),
        Step::Nothing | Step::Lost | Step::HeldBack => None,
    })
}

/// Whether `kid` is the next managed key of `service`: the one its rotation switches to once it
/// is safe (then [`advance`] switches at once).
pub fn is_next(registry: &Registry, service: &Service, kid: &str) -> Result<bool, AppError> {
    let signing = registry.store.signing(service.id)?;
    Ok(signing.is_some_and(|s| s.next().is_some_and(|next| next.kid == kid)))
}

/// What one step of a service's signing did.
enum Step {
    /// A transition was written (with what the write did: a withdrawal may have left the
    /// service publishing nothing).
    Written(Transition, Written),
    /// Nothing was due.
    Nothing,
    /// Another change was written since the step read the state: nothing was.
    Lost,
    /// A rotation is due, but the key set has no room for its key: it waits.
    HeldBack,
}

/// How long a service's step that cannot proceed (a rotation with no room in the key set, a
/// failure) waits before it is looked at again.
const LOOK_AGAIN_AFTER: time::Duration = time::Duration::seconds(60);

/// One step of [`advance`], saying why nothing was written.
fn step(
    registry: &Registry,
    service: &Service,
    purging: bool,
    now: OffsetDateTime,
) -> Result<Step, AppError> {
    let Some(signing) = registry.store.signing(service.id)? else {
        return Ok(Step::Nothing);
    };
    let next_safe_at = match signing.next() {
        Some(next) => next_safe_at(registry, service, next, purging, now)?,
        None => None,
    };
    let mut due = signing.due(next_safe_at, now);
    // A rotation that would push the key set past its cap waits until a key leaves it (a
    // retiring key's withdrawal, a retired upload's end): looked at again a minute later, so
    // that it does not hold the front of the step's queue.
    let mut held_until = None;
    if due == Some(Transition::Rotate) && !room_for_a_key(registry, service, now)? {
        due = None;
        held_until = Some(now + LOOK_AGAIN_AFTER);
    }
    let made = match due {
        Some(Transition::Rotate) => Some(make(
            registry,
            service,
            Some(&signing),
            &signing.settings,
            Stage::Next,
            now,
        )?),
        _ => None,
    };
    let kid = |key: Option<&ManagedKey>| key.map_or(Value::Null, |k| Value::String(k.kid.clone()));
    let event = due.as_ref().map(|transition| match transition {
        Transition::Switch { kid: next } => system_event(Action::SigningSwitch, service, now)
            .with_change(
                "currentKid",
                kid(signing.current()),
                Value::String(next.clone()),
            ),
        Transition::Withdraw { kids } => system_event(Action::SigningWithdraw, service, now)
            .with_change(
                "withdrawnKids",
                Value::Null,
                kids.iter().cloned().map(Value::String).collect(),
            ),
        Transition::Rotate => system_event(Action::SigningRotate, service, now).with_change(
            "nextKid",
            Value::Null,
            kid(made.as_ref()),
        ),
    });
    let mut apply = |stored: Option<Signing>| {
        let mut signing = stored?;
        match &due {
            Some(Transition::Switch { .. }) => signing.switch(next_safe_at.unwrap_or(now), now),
            Some(Transition::Withdraw { kids }) => signing.withdraw(kids, now),
            Some(Transition::Rotate) => {
                signing.rotate(made.clone()?).ok()?;
            }
            None => {}
        }
        Some(signing)
    };
    let written = write(
        registry,
        service,
        Some(&signing),
        made.is_some(),
        &mut apply,
        event.as_ref(),
        held_until,
        now,
    )?;
    Ok(match (due, written.any()) {
        (Some(transition), true) => Step::Written(transition, written),
        (_, false) => Step::Lost,
        (None, true) if held_until.is_some() => Step::HeldBack,
        (None, true) => Step::Nothing,
    })
}

/// When the next key `next` became safe, if it is (its readiness, as `GET …/readiness` says).
fn next_safe_at(
    registry: &Registry,
    service: &Service,
    next: &ManagedKey,
    purging: bool,
    now: OffsetDateTime,
) -> Result<Option<OffsetDateTime>, AppError> {
    let keys = config::key_state(registry, service)?;
    let Some(record) = keys.published(now).find(|k| k.kid == next.kid) else {
        // Not published (the configuration was deleted meanwhile): the step's write publishes
        // it again, and its lead starts over.
        return Ok(None);
    };
    let purging = purging && !next.first_of_all;
    Ok(readiness::assess_key(registry, service, record, purging, now)?.1)
}

/// What one look at the due services did: the transitions written, and the services whose step
/// failed (retried at the next look).
#[derive(Debug, Default)]
pub struct Steps {
    /// How many transitions were written.
    pub written: usize,
    /// Each service whose step failed, by id, with why; its next look is put off by a
    /// minute (when that could be written), so that it does not hold the front of the queue.
    pub failed: Vec<(Uuid, AppError)>,
    /// Each service whose rotation waits for room in its key set (100 keys), by id.
    pub held_back: Vec<Uuid>,
    /// Each service whose step withdrew the last key it published (its configuration
    /// removed), by id and subdomain: caches in front may still hold its documents even where
    /// no replica holds them any more, and are to be purged of them.
    pub unpublished: Vec<(Uuid, String)>,
}

/// The rotation steps due at `now`: up to `limit` services, each stepped once (`purging` as for
/// [`advance`]). One service's failure does not hold back the others' steps: it is reported in
/// [`Steps::failed`], and only a failure to read what is due is an error.
pub fn advance_due(
    registry: &Registry,
    purging: bool,
    limit: usize,
    now: OffsetDateTime,
) -> Result<Steps, AppError> {
    let mut steps = Steps::default();
    for id in registry.store.signing_due(now, limit)? {
        let stepped = registry
            .store
            .service(id)
            .map_err(AppError::from)
            .and_then(|service| match service {
                Some(service) => {
                    step(registry, &service, purging, now).map(|done| (done, Some(service)))
                }
                None => Ok((Step::Nothing, None)),
            });
        match stepped {
            Ok((Step::Written(_, written), service)) => {
                steps.written += 1;
                if let (Written::Unpublished, Some(service)) = (written, service) {
                    steps.unpublished.push((id, service.subdomain));
                }
            }
            Ok((Step::HeldBack, _)) => steps.held_back.push(id),
            Ok((Step::Nothing | Step::Lost, _)) => {}
            Err(error) => {
                // Best effort: a store that cannot take this either fails the next look too.
                let _ = (registry.store).postpone_signing(id, now + LOOK_AGAIN_AFTER, now);
                steps.failed.push((id, error));
            }
        }
    }
    Ok(steps)
}

/// `POST /services/{s}/sign`: the signature of `claims` (the token's payload, base64url, as the
/// JWT's second segment) with the current managed key, once the claims are checked. 409
/// `no-key-ready` while no managed key is safe; 400 `invalid-claims` naming the claim.
pub fn sign(
    registry: &Registry,
    service: &Service,
    claims: &str,
    now: OffsetDateTime,
) -> Result<Signed, AppError> {
    // Without a data key the answer is `signing-disabled`, whatever the store says.
    keys_of(registry)?;
    let signing = registry.store.signing(service.id)?;
    let mut read: Option<Option<crate::custom_domain::CustomDomain>> = None;
    loop {
        let domain = match &read {
            None => CustomIssuer::Unread,
            Some(domain) => CustomIssuer::Read(domain.as_ref()),
        };
        match signature(registry, service, signing.as_ref(), &domain, claims, now)? {
            Signature::Made { signed, record } => {
                if record {
                    record_use(registry, service, &signed.kid, now)?;
                }
                return Ok(signed);
            }
            // Once read, the domain is known: the second turn signs or refuses.
            Signature::NeedsDomain => read = Some(registry.store.domain_of(service.id)?),
        }
    }
}

/// The service's custom domain, as far as the caller has read it: a token may name its issuer
/// instead of the subdomain's.
#[derive(Debug, Clone, Copy)]
pub enum CustomIssuer<'a> {
    /// Not read (it costs a read, and most tokens name the subdomain's issuer).
    Unread,
    /// Read: the service's domain, if it has one.
    Read(Option<&'a crate::custom_domain::CustomDomain>),
}

/// What [`signature`] made of the claims.
#[derive(Debug)]
pub enum Signature {
    /// Signed. `record`: the key's last use is due to be written ([`record_use`]): once a
    /// minute at most, since it only moves the withdrawal of a retired key.
    Made {
        /// The signature.
        signed: Signed,
        /// Whether to call [`record_use`].
        record: bool,
    },
    /// The claims name an issuer other than the subdomain's, and the custom domain is
    /// [`CustomIssuer::Unread`]: read it and ask again.
    NeedsDomain,
}

/// The signature of `claims` by the current key of `signing` (the service's, as the caller read
/// it), storage untouched: what [`sign`] does between its reads, and what a caller that read
/// the signing where that costs least (in place, on SQLite) runs itself.
pub fn signature(
    registry: &Registry,
    service: &Service,
    signing: Option<&Signing>,
    domain: &CustomIssuer<'_>,
    claims: &str,
    now: OffsetDateTime,
) -> Result<Signature, AppError> {
    let keys = keys_of(registry)?;
    let signing = match signing {
        Some(signing) if signing.enabled => signing,
        _ => return Err(not_on(service)),
    };
    let Some(key) = signing.current() else {
        // No sooner than the next key's own lead ends (its verifiers may hold it longer).
        let lead_left = (signing.next()).map_or(time::Duration::ZERO, |next| {
            let lead = next.lead_seconds.unwrap_or(signing.settings.lead_seconds);
            next.created_at + time::Duration::seconds(i64::from(lead)) - now
        });
        let retry_after_secs = (lead_left.max(signing::READINESS_POLL))
            .whole_seconds()
            .unsigned_abs()
            .max(1);
        return Err(AppError::NoKeyReady {
            retry_after_secs,
            detail: format!(
                "no managed key of {:?} is safe to sign with yet: the next key signs once every \
                 verifier has fetched the key set with it and its lead is over (GET \
                 /services/{{s}}/signing)",
                service.subdomain
            ),
        });
    };
    let subdomain_issuer = [registry.issuer_of(&service.subdomain)];
    let rules = |issuers| ClaimRules {
        issuers,
        max_token_seconds: signing.settings.max_token_seconds,
        expires_at: service.expires_at,
    };
    if let Err(refused) = check_claims(claims, &rules(&subdomain_issuer), now) {
        // A custom domain's issuer is looked up only for a token that names another issuer.
        let domain = match (refused.starts_with("iss "), domain) {
            (true, CustomIssuer::Unread) => return Ok(Signature::NeedsDomain),
            (true, CustomIssuer::Read(domain)) => *domain,
            (false, _) => None,
        };
        match domain.filter(|d| d.status == DomainStatus::Active) {
            Some(domain) => {
                let both = [
                    subdomain_issuer[0].clone(),
                    format!("https://{}", domain.domain),
                ];
                check_claims(claims, &rules(&both), now).map_err(AppError::InvalidClaims)?;
            }
            None => return Err(AppError::InvalidClaims(refused)),
        }
    }
    let header = signing::header(key.algorithm, &key.kid);
    let message = format!("{header}.{claims}");
    let signature = (keys.sign(&key.kid, key.algorithm, &key.sealed, message.as_bytes()))
        .map_err(|failure| sign_failure(&quoted(service), failure))?;
    Ok(Signature::Made {
        signed: Signed {
            header,
            signature: URL_SAFE_NO_PAD.encode(signature),
            kid: key.kid.clone(),
        },
        record: Signing::signature_worth_recording(key, now),
    })
}

/// Writes that `kid`, a managed key of `service`, signed at `now` (after [`Signature::Made`]
/// with `record`): a retired key is withdrawn only once its last token has expired. 409
/// `no-key-ready` when the key was withdrawn since it signed: the signature is not handed out.
pub fn record_use(
    registry: &Registry,
    service: &Service,
    kid: &str,
    now: OffsetDateTime,
) -> Result<(), AppError> {
    if registry.store.record_signature(service.id, kid, now)? {
        return Ok(());
    }
    // A switch and the old key's withdrawal both landed between the read that signed and this
    // write (the key had signed nothing yet, so it left at once): that token would name a key
    // no verifier can fetch. The caller asks again and gets the new key.
    Err(AppError::NoKeyReady {
        retry_after_secs: 1,
        detail: format!(
            "key {kid:?} of {:?} was withdrawn while it signed: ask again",
            service.subdomain
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::keys;
    use crate::app::services::{self, CreateService};
    use crate::app::testing::{caller, registry_over, MemoryStore};
    use crate::ports::{AuditLog, Ceiling, ServiceStore, SigningStore};
    use crate::signing::Algorithm;
    use crate::testing::CountingKeys;
    use crate::Plan;
    use serde_json::json;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use time::macros::datetime;
    use time::Duration;

    const T0: OffsetDateTime = datetime!(2026-11-30 10:00 UTC);

    fn setup() -> (Registry, Arc<MemoryStore>, Caller, Service) {
        let store = Arc::new(MemoryStore::default());
        let (registry, _, account) = registry_over(store.clone(), Plan::Business, T0);
        let caller = caller(account);
        let service = services::create(&registry, &caller, CreateService::default(), T0).unwrap();
        (registry, store, caller, service)
    }

    fn claims(registry: &Registry, service: &Service, iat: OffsetDateTime, life: i64) -> String {
        let payload = json!({
            "iss": registry.issuer_of(&service.subdomain),
            "sub": "system:serviceaccount:default:default",
            "iat": iat.unix_timestamp(),
            "exp": iat.unix_timestamp() + life,
        });
        URL_SAFE_NO_PAD.encode(payload.to_string())
    }

    fn actions(store: &MemoryStore, service: &Service) -> Vec<&'static str> {
        let query = crate::audit::AuditQuery {
            trail: crate::audit::Trail::Customer(service.customer_id.unwrap()),
            cursor: None,
            action: None,
            since: None,
            limit: 100,
        };
        let page = store.audit_events(&query).unwrap();
        page.events.iter().map(|e| e.action.as_str()).collect()
    }

    /// Signing turned on at `T0` with a lead of 0: its first key signs at once. Its view.
    fn on_at_once(registry: &Registry, caller: &Caller, service: &Service) -> Value {
        put(
            registry,
            caller,
            service,
            &json!({"leadSeconds": 0}),
            false,
            T0,
        )
        .unwrap()
    }

    /// An Ed25519 key `kid` of the `files` source, as a cluster's key file would give it.
    fn file_key(kid: &str) -> Value {
        json!({"kty": "OKP", "crv": "Ed25519", "kid": kid,
            "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"})
    }

    /// Uploads `body` as the key source `files` at `T0`.
    fn upload_files(registry: &Registry, caller: &Caller, service: &Service, body: Value) {
        let command = config::PublishConfig {
            body,
            source: "files".into(),
        };
        config::publish(registry, caller, service, command, T0).unwrap();
    }

    fn published_kids(registry: &Registry, service: &Service) -> Vec<String> {
        let keys = config::key_state(registry, service).unwrap();
        keys.published(T0 + Duration::days(400))
            .map(|k| k.kid.clone())
            .collect()
    }

    /// The agent `aws` fetched the service's key set once at `at`, from one network.
    fn aws_fetched_keys(store: &MemoryStore, service: &Service, at: OffsetDateTime) {
        use crate::ports::FetchLog;
        let fetch = crate::testing::key_set_fetch(service.id, "aws", "10.0.1.7", at);
        store.record_fetches(&[fetch]).unwrap();
    }

    /// Keys sealed under another data key than this registry's: made, never opened.
    #[derive(Default)]
    struct AnotherDataKey(CountingKeys);

    impl ManagedKeys for AnotherDataKey {
        fn make(&self, algorithm: Algorithm) -> Result<crate::signing::MadeKey, String> {
            self.0.make(algorithm)
        }

        fn sign(&self, _: &str, _: Algorithm, _: &str, _: &[u8]) -> Result<Vec<u8>, SignFailure> {
            Err(SignFailure::Sealed("sealed data does not open".to_owned()))
        }

        fn opens(&self, _: &str, _: &str) -> Result<(), SignFailure> {
            Err(SignFailure::Sealed("sealed data does not open".to_owned()))
        }
    }

    #[test]
    fn a_state_kept_for_its_memory_of_withdrawals_goes_when_that_memory_ends() {
        let (registry, store, caller, service) = setup();
        on_at_once(&registry, &caller, &service);
        // Turned off before it signed: the key leaves at once, its withdrawal is remembered.
        delete(&registry, &caller, &service, T0).unwrap();
        let kept = store
            .signing(service.id)
            .unwrap()
            .expect("kept for its memory");
        assert!(kept.keys.is_empty());
        assert_eq!(kept.remembered(T0).len(), 1);
        let forgotten = T0 + crate::withdrawn::WITHDRAWN_KEPT;
        let before = forgotten - Duration::seconds(1);
        assert_eq!(store.signing_due(before, 10).unwrap(), Vec::<Uuid>::new());
        assert_eq!(store.signing_due(forgotten, 10).unwrap(), [service.id]);
        advance_due(&registry, false, 10, forgotten).unwrap();
        assert_eq!(store.signing(service.id).unwrap(), None);
    }

    /// A replica started with another data key makes no service's first key either: the other
    /// replicas could open it no more than this one opens theirs (the probe of §22: the service
    /// could then neither sign nor rotate anywhere else).
    #[test]
    fn a_first_key_is_made_only_where_the_other_services_keys_open() {
        let (mut registry, store, caller, service) = setup();
        on_at_once(&registry, &caller, &service);
        let second = services::create(&registry, &caller, CreateService::default(), T0).unwrap();
        registry.managed_keys = Some(Arc::new(AnotherDataKey::default()));
        let refused = put(&registry, &caller, &second, &json!({}), false, T0).unwrap_err();
        assert!(
            matches!(&refused, AppError::SigningDisabled(d) if d.contains("other services")),
            "{refused:?}"
        );
        assert_eq!(store.signing(second.id).unwrap(), None);
    }

    #[test]
    fn keys_sealed_under_another_data_key_are_signing_disabled_not_an_internal_error() {
        let (mut registry, store, caller, service) = setup();
        registry.managed_keys = Some(Arc::new(AnotherDataKey::default()));
        on_at_once(&registry, &caller, &service);
        let claims = claims(&registry, &service, T0, 600);
        let refused = sign(&registry, &service, &claims, T0).unwrap_err();
        assert!(
            matches!(&refused, AppError::SigningDisabled(d) if d.contains("REGISTRY_DATA_KEY")),
            "{refused:?}"
        );
        // Nor does it make a key beside keys it cannot open (the others could not open that
        // one): no rotation, asked for or due, and no key turning signing on again.
        let disabled =
            |result: Result<Value, AppError>| matches!(result, Err(AppError::SigningDisabled(_)));
        assert!(disabled(rotate(
            &registry, &caller, &service, false, false, T0
        )));
        assert!(disabled(rotate(
            &registry, &caller, &service, true, false, T0
        )));
        // A due rotation fails (the step logs it and looks again in a minute); a change of
        // the settings is written all the same.
        let due = T0 + Duration::days(31);
        assert!(disabled(
            advance(&registry, &service, false, due).map(|_| Value::Null)
        ));
        let shorter = json!({"leadSeconds": 0, "maxTokenSeconds": 600});
        put(&registry, &caller, &service, &shorter, false, due).unwrap();
        let settings = store.signing(service.id).unwrap().unwrap().settings;
        assert_eq!(settings.max_token_seconds, 600);
        // Nor turned on again beside one that stays published after it was turned off (it
        // signed, on a replica holding the key that opens it).
        let kid = store.signing(service.id).unwrap().unwrap().keys[0]
            .kid
            .clone();
        record_use(&registry, &service, &kid, T0).unwrap();
        delete(&registry, &caller, &service, T0).unwrap();
        assert!(disabled(put(
            &registry,
            &caller,
            &service,
            &json!({}),
            false,
            T0
        )));
    }

    /// Keys that can no longer be made for RSA once `refuse` is set (a failing adapter).
    #[derive(Default)]
    struct NoMoreRsa {
        keys: CountingKeys,
        refuse: std::sync::atomic::AtomicBool,
    }

    impl ManagedKeys for NoMoreRsa {
        fn make(&self, algorithm: Algorithm) -> Result<crate::signing::MadeKey, String> {
            if algorithm == Algorithm::Rs256 && self.refuse.load(Ordering::SeqCst) {
                return Err("no RSA today".to_owned());
            }
            self.keys.make(algorithm)
        }

        fn sign(
            &self,
            kid: &str,
            algorithm: Algorithm,
            sealed: &str,
            message: &[u8],
        ) -> Result<Vec<u8>, crate::ports::SignFailure> {
            self.keys.sign(kid, algorithm, sealed, message)
        }

        fn opens(&self, kid: &str, sealed: &str) -> Result<(), SignFailure> {
            self.keys.opens(kid, sealed)
        }
    }

    #[test]
    fn one_services_failing_step_holds_back_no_other_service() {
        let (mut registry, _, caller, failing) = setup();
        let keys = Arc::new(NoMoreRsa::default());
        registry.managed_keys = Some(keys.clone());
        let other = services::create(
            &registry,
            &caller,
            CreateService {
                title: Some("Other".to_owned()),
                service_name: Some("other".to_owned()),
                description: None,
            },
            T0,
        )
        .unwrap();
        let settings = |algorithm| json!({"algorithm": algorithm, "leadSeconds": 0, "rotationPeriodSeconds": 3600});
        // The failing service's rotation falls due first, so it is stepped first.
        put(&registry, &caller, &failing, &settings("RS256"), false, T0).unwrap();
        let later = T0 + Duration::seconds(1);
        put(&registry, &caller, &other, &settings("ES256"), false, later).unwrap();
        keys.refuse.store(true, Ordering::SeqCst);
        let then = later + Duration::seconds(3600);
        let steps = advance_due(&registry, false, 10, then).unwrap();
        assert_eq!(steps.written, 1, "{steps:?}");
        assert_eq!(steps.failed.len(), 1, "{steps:?}");
        assert_eq!(steps.failed[0].0, failing.id);
        // The failing one is looked at again a minute later, not at the front of every look.
        let store = registry.store.clone();
        assert!(!store.signing_due(then, 10).unwrap().contains(&failing.id));
        let minute = then + Duration::seconds(60);
        assert!(store.signing_due(minute, 10).unwrap().contains(&failing.id));
        let other_keys = get(&registry, &other, false, T0).unwrap()["keys"].clone();
        assert_eq!(other_keys[1]["state"], "next", "{other_keys}");
    }

    #[test]
    fn without_a_data_key_signing_is_disabled() {
        let (mut registry, _, caller, service) = setup();
        registry.managed_keys = None;
        let refused = put(&registry, &caller, &service, &json!({}), false, T0).unwrap_err();
        assert!(
            matches!(refused, AppError::SigningDisabled(_)),
            "{refused:?}"
        );
        assert!(matches!(
            get(&registry, &service, false, T0),
            Err(AppError::NotFound(_))
        ));
    }

    #[test]
    fn a_first_key_with_no_lead_and_no_verifier_signs_at_once_with_a_document_of_its_own() {
        let (registry, store, caller, service) = setup();
        let view = on_at_once(&registry, &caller, &service);
        assert_eq!(view["keys"][0]["state"], "current", "{view}");
        let kid = view["keys"][0]["kid"].as_str().unwrap().to_owned();
        // Published as the key source `managed`, with the registry's own discovery document.
        let config = store.config(service.id).unwrap().unwrap();
        assert_eq!(config.keys.keys[0].source, "managed");
        let document: Value = serde_json::from_str(&config.openid_configuration).unwrap();
        assert_eq!(
            document["id_token_signing_alg_values_supported"],
            json!(["ES256"])
        );
        assert_eq!(document["issuer"], registry.issuer_of(&service.subdomain));
        // It signs exactly `header.claims`.
        let claims = claims(&registry, &service, T0, 3600);
        let signed = sign(&registry, &service, &claims, T0).unwrap();
        assert_eq!(signed.kid, kid);
        let expected =
            CountingKeys::signature_of(&kid, format!("{}.{claims}", signed.header).as_bytes());
        assert_eq!(URL_SAFE_NO_PAD.decode(&signed.signature).unwrap(), expected);
        // Its last signature is recorded, to the minute.
        let state = get(&registry, &service, false, T0).unwrap();
        assert!(state["keys"][0]["lastSignedAt"].is_string(), "{state}");
        assert_eq!(
            actions(&store, &service)[..2],
            ["signing.switch", "signing.enable"]
        );
    }

    #[test]
    fn a_services_very_first_key_waits_for_no_purge_but_a_later_one_does() {
        let (registry, _, caller, service) = setup();
        let settings = json!({"leadSeconds": 0});
        let view = put(&registry, &caller, &service, &settings, true, T0).unwrap();
        assert_eq!(view["keys"][0]["state"], "current", "{view}");
        let claims = claims(&registry, &service, T0, 3600);
        assert!(sign(&registry, &service, &claims, T0).is_ok());
        // A cache's copy may now hold the first key's set: the next key waits for the purge.
        let t1 = T0 + Duration::seconds(10);
        rotate(&registry, &caller, &service, false, true, t1).unwrap();
        advance_due(&registry, true, 10, t1 + Duration::seconds(5)).unwrap();
        let state = get(&registry, &service, false, T0).unwrap();
        assert_eq!(state["keys"][1]["state"], "next", "{state}");
    }

    /// Of two first PUTs at once, the one that only updates the settings may step before the
    /// one that made the first key: it too finds that key needs no purge.
    #[test]
    fn a_put_stepping_before_the_one_that_made_the_first_key_finds_it_needs_no_purge() {
        let (registry, _, caller, service) = setup();
        let settings = json!({"leadSeconds": 0});
        assert_eq!(
            put_once(&registry, &caller, &service, &settings, T0).unwrap(),
            Some(T0)
        );
        let read = get(&registry, &service, true, T0).unwrap();
        assert_eq!(
            read["keys"][0]["safeToSignAt"], "2026-11-30T10:00:00Z",
            "{read}"
        );
        let view = put(&registry, &caller, &service, &settings, true, T0).unwrap();
        assert_eq!(view["keys"][0]["state"], "current", "{view}");
    }

    /// The only managed key and the only one published, but not the service's first: a
    /// compromise's replacement (the key set before it was a 200 a cache may hold) waits for
    /// the purge like any later key, though it signs at once.
    #[test]
    fn a_compromises_lone_replacement_still_waits_for_its_purge() {
        let (registry, _, caller, service) = setup();
        let view = put(
            &registry,
            &caller,
            &service,
            &json!({"leadSeconds": 0}),
            true,
            T0,
        );
        assert_eq!(view.unwrap()["keys"][0]["state"], "current");
        let t1 = T0 + Duration::seconds(10);
        rotate(&registry, &caller, &service, true, true, t1).unwrap();
        let state = get(&registry, &service, true, t1).unwrap();
        let keys = state["keys"].as_array().unwrap();
        assert_eq!(keys.len(), 1, "{state}");
        assert_eq!(keys[0]["safeToSignAt"], Value::Null, "{state}");
        let kid = keys[0]["kid"].as_str().unwrap();
        let readiness = readiness::readiness(&registry, &service, kid, true, t1).unwrap();
        assert_eq!(readiness["pending"][0]["reason"], "purge", "{readiness}");
    }

    /// A PUT whose clock was read before another PUT made the first key (it waited behind that
    /// write, or its replica's clock is behind) acts no earlier than that key's making: with no
    /// lead, the key signs.
    #[test]
    fn a_put_that_read_its_clock_before_another_made_the_first_key_answers_it_current() {
        let (registry, _, caller, service) = setup();
        let settings = json!({"leadSeconds": 0});
        let later = T0 + Duration::milliseconds(40);
        assert_eq!(
            put_once(&registry, &caller, &service, &settings, later).unwrap(),
            Some(later)
        );
        let view = put(&registry, &caller, &service, &settings, false, T0).unwrap();
        assert_eq!(view["keys"][0]["state"], "current", "{view}");
    }

    #[test]
    fn a_signature_whose_key_left_meanwhile_is_not_handed_out() {
        let (registry, store, caller, service) = setup();
        let first = on_at_once(&registry, &caller, &service)["keys"][0]["kid"].clone();
        // The sign's read: the first key, which has signed nothing yet, is current.
        let read = store.signing(service.id).unwrap();
        let claims = claims(&registry, &service, T0, 3600);
        let made = signature(
            &registry,
            &service,
            read.as_ref(),
            &CustomIssuer::Unread,
            &claims,
            T0,
        );
        let Ok(Signature::Made {
            signed,
            record: true,
        }) = made
        else {
            panic!("{made:?}");
        };
        assert_eq!(signed.kid, first.as_str().unwrap());
        // Meanwhile the next key switches in at once, and the first, with no token to outlive,
        // leaves.
        rotate(&registry, &caller, &service, false, false, T0).unwrap();
        advance_due(&registry, false, 10, T0).unwrap();
        assert_eq!(published_kids(&registry, &service).len(), 1);
        let refused = record_use(&registry, &service, &signed.kid, T0).unwrap_err();
        assert!(
            matches!(refused, AppError::NoKeyReady { .. }),
            "{refused:?}"
        );
        // Asked again, it signs with the new key.
        let again = sign(&registry, &service, &claims, T0).unwrap();
        assert_ne!(again.kid, signed.kid);
    }

    #[test]
    fn a_key_set_fetched_in_the_week_before_makes_no_first_key_safe_before_its_purge() {
        let (registry, store, caller, service) = setup();
        // Something was published and fetched two days ago, then removed: a cache may still
        // hold that key set (stale on error), which lacks the new key.
        aws_fetched_keys(&store, &service, T0 - Duration::days(2));
        let view = put(
            &registry,
            &caller,
            &service,
            &json!({"leadSeconds": 0}),
            true,
            T0,
        )
        .unwrap();
        assert_eq!(view["keys"][0]["state"], "next", "{view}");
    }

    #[test]
    fn a_managed_key_the_key_set_lost_is_published_again_with_its_verifiers() {
        let (registry, store, caller, service) = setup();
        on_at_once(&registry, &caller, &service);
        // The key set went with the configuration (another replica's write), and a verifier
        // fetched the service's key set in two hours since.
        let event = caller.service_event(Action::ConfigDelete, &service, T0);
        assert!(store.delete_config(service.id, &|_| false, &event).unwrap());
        for hours in [1, 2] {
            aws_fetched_keys(&store, &service, T0 + Duration::hours(hours));
        }
        // A settings change finds the key missing: the write that publishes it again fixes
        // its verifiers, as for any key first published.
        let later = T0 + Duration::hours(3);
        let changed = json!({"leadSeconds": 0, "maxTokenSeconds": 600});
        put(&registry, &caller, &service, &changed, false, later).unwrap();
        let keys = config::key_state(&registry, &service).unwrap();
        let verifiers = keys.keys[0].verifiers.as_ref().expect("fixed verifiers");
        let agents: Vec<&str> = verifiers.iter().map(|v| v.agent.as_str()).collect();
        assert_eq!(agents, ["aws"]);
        assert_eq!(keys.keys[0].first_published_at, later);
    }

    #[test]
    fn with_a_lead_no_key_is_ready_until_it_is_over() {
        let (registry, _, caller, service) = setup();
        let view = put(&registry, &caller, &service, &json!({}), false, T0).unwrap();
        assert_eq!(view["keys"][0]["state"], "next");
        let claims = claims(&registry, &service, T0, 3600);
        // Asked to come back no sooner than the lead ends, then every few seconds.
        let retry = |at: OffsetDateTime| match sign(&registry, &service, &claims, at) {
            Err(AppError::NoKeyReady {
                retry_after_secs, ..
            }) => retry_after_secs,
            other => panic!("{other:?}"),
        };
        assert_eq!(retry(T0), 600);
        assert_eq!(retry(T0 + Duration::seconds(590)), 10);
        assert_eq!(retry(T0 + Duration::seconds(599)), 5);
        // A longer lead set since applies to the keys made after it, not to this one.
        let longer = json!({"leadSeconds": 604_800});
        put(
            &registry,
            &caller,
            &service,
            &longer,
            false,
            T0 + Duration::seconds(10),
        )
        .unwrap();
        assert_eq!(retry(T0 + Duration::seconds(20)), 580);
        // The step, once the 600 s lead is over, switches.
        let later = T0 + Duration::seconds(600);
        assert_eq!(advance_due(&registry, false, 10, later).unwrap().written, 1);
        let state = get(&registry, &service, false, T0).unwrap();
        assert_eq!(state["keys"][0]["state"], "current", "{state}");
        assert!(sign(&registry, &service, &claims, later).is_ok());
    }

    #[test]
    fn a_rotation_keeps_the_old_key_signing_until_the_next_is_safe_then_retires_it() {
        let (registry, store, caller, service) = setup();
        let settings = json!({"leadSeconds": 0, "maxTokenSeconds": 600});
        let first = put(&registry, &caller, &service, &settings, false, T0).unwrap()["keys"][0]
            ["kid"]
            .as_str()
            .unwrap()
            .to_owned();
        let claims_at = |at| claims(&registry, &service, at, 600);
        sign(&registry, &service, &claims_at(T0), T0).unwrap();
        // A lead of 120 s for the next key: the old one signs meanwhile.
        put(
            &registry,
            &caller,
            &service,
            &json!({"leadSeconds": 120}),
            false,
            T0,
        )
        .unwrap();
        let t1 = T0 + Duration::seconds(10);
        let view = rotate(&registry, &caller, &service, false, false, t1).unwrap();
        let next = view["keys"][1]["kid"].as_str().unwrap().to_owned();
        assert_eq!(view["keys"][1]["state"], "next");
        assert!(matches!(
            rotate(&registry, &caller, &service, false, false, t1),
            Err(AppError::RotationInProgress(_))
        ));
        assert_eq!(
            published_kids(&registry, &service),
            [first.clone(), next.clone()]
        );
        assert_eq!(
            sign(&registry, &service, &claims_at(t1), t1).unwrap().kid,
            first
        );
        let t2 = t1 + Duration::seconds(120);
        advance_due(&registry, false, 10, t2).unwrap();
        assert_eq!(
            sign(&registry, &service, &claims_at(t2), t2).unwrap().kid,
            next
        );
        let state = get(&registry, &service, false, T0).unwrap();
        assert_eq!(state["keys"][0]["state"], "retiring", "{state}");
        // The retiring key stays until its last token has expired: its last signature is kept
        // to the minute (T0; the one at T0 + 10 s expires at T0 + 610) and 300 s more.
        assert_eq!(
            published_kids(&registry, &service),
            [first.clone(), next.clone()]
        );
        let gone = T0 + Duration::seconds(600 + 300);
        assert_eq!(state["keys"][0]["withdrawAt"], "2026-11-30T10:15:00Z");
        assert_eq!(
            advance_due(&registry, false, 10, gone - Duration::seconds(1))
                .unwrap()
                .written,
            0
        );
        assert_eq!(advance_due(&registry, false, 10, gone).unwrap().written, 1);
        assert_eq!(published_kids(&registry, &service), [next]);
        let trail = actions(&store, &service);
        for action in ["signing.rotate", "signing.switch", "signing.withdraw"] {
            assert!(trail.contains(&action), "{trail:?}");
        }
    }

    #[test]
    fn a_token_of_the_custom_domains_issuer_needs_the_domain_read_and_signs_once_it_is_active() {
        use crate::custom_domain::CustomDomain;
        use crate::ports::DomainStore;
        let (registry, store, caller, service) = setup();
        on_at_once(&registry, &caller, &service);
        let signing = store.signing(service.id).unwrap();
        let of = |iss: &str| {
            let payload = json!({"iss": iss, "sub": "s", "iat": T0.unix_timestamp(),
                                 "exp": T0.unix_timestamp() + 600});
            URL_SAFE_NO_PAD.encode(payload.to_string())
        };
        let at = |domain: &CustomIssuer, claims: &str| {
            signature(&registry, &service, signing.as_ref(), domain, claims, T0)
        };
        // The subdomain's issuer: signed without the domain, its use due to be recorded.
        let own = of(&registry.issuer_of(&service.subdomain));
        assert!(matches!(
            at(&CustomIssuer::Unread, &own),
            Ok(Signature::Made { record: true, .. })
        ));
        // Another issuer: the domain is asked for; read and absent, the claim is refused.
        let custom = of("https://login.customer.test");
        assert!(matches!(
            at(&CustomIssuer::Unread, &custom),
            Ok(Signature::NeedsDomain)
        ));
        let refused = at(&CustomIssuer::Read(None), &custom).unwrap_err();
        assert!(
            matches!(&refused, AppError::InvalidClaims(why) if why.starts_with("iss ")),
            "{refused:?}"
        );
        // The service's domain, active: `sign` reads it and signs.
        let mut domain =
            CustomDomain::new(service.id, "login.customer.test".into(), "t".into(), T0);
        assert!(
            sign(&registry, &service, &custom, T0).is_err(),
            "no domain yet"
        );
        domain.status = DomainStatus::Active;
        let event = AuditEvent::new(
            Action::DomainPut,
            Resource::service(service.id, &service.subdomain),
            Actor::system(),
            service.customer_id,
            T0,
        );
        let put = store.put_domain(&domain, None, Ceiling::NONE, &event);
        assert_eq!(put, Ok(Ok(())));
        assert!(sign(&registry, &service, &custom, T0).is_ok());
        assert!(
            sign(&registry, &service, &of("https://elsewhere.test"), T0).is_err(),
            "only the service's own issuers"
        );
    }

    #[test]
    fn a_compromise_signs_with_a_new_key_at_once_and_withdraws_every_other() {
        let (registry, store, caller, service) = setup();
        let first = put(
            &registry,
            &caller,
            &service,
            &json!({"leadSeconds": 0}),
            false,
            T0,
        )
        .unwrap()["keys"][0]["kid"]
            .as_str()
            .unwrap()
            .to_owned();
        // A verifier of the key to come (the first key signed before it was one): two hours of
        // fetches before it.
        for hours_before in [30, 2] {
            let at = T0 - time::Duration::hours(hours_before);
            let fetched = crate::testing::key_set_fetch(service.id, "aws", "10.0.1.7", at);
            crate::ports::FetchLog::record_fetches(&*store, &[fetched]).unwrap();
        }
        let view = rotate(&registry, &caller, &service, true, false, T0).unwrap();
        let keys = view["keys"].as_array().unwrap();
        assert_eq!(keys.len(), 1, "{view}");
        assert_eq!(keys[0]["state"], "current");
        assert_ne!(keys[0]["kid"], first.as_str());
        // It signs before it is safe: as Key readiness says, until the verifier fetched it.
        assert_eq!(keys[0]["safeToSignAt"], Value::Null, "{view}");
        let fetched_at = T0 + time::Duration::minutes(1);
        let fetched = crate::testing::key_set_fetch(service.id, "aws", "10.0.1.8", fetched_at);
        crate::ports::FetchLog::record_fetches(&*store, &[fetched]).unwrap();
        let later = get(&registry, &service, false, T0 + time::Duration::minutes(2)).unwrap();
        assert!(later["keys"][0]["safeToSignAt"].is_string(), "{later}");
        assert!(!published_kids(&registry, &service).contains(&first));
        // Its life stays in the state, for the console's timeline: it signed until withdrawn.
        let gone = &view["withdrawn"][0];
        assert_eq!(gone["kid"], first.as_str(), "{view}");
        assert!(gone["signingSince"].is_string(), "{view}");
        assert_eq!(gone["signingUntil"], gone["withdrawnAt"], "{view}");
        let claims = claims(&registry, &service, T0, 3600);
        assert_eq!(
            sign(&registry, &service, &claims, T0).unwrap().kid,
            keys[0]["kid"]
        );
        // Its event says which key signs now and which left.
        let event = store.events_of(Action::SigningRotate).pop().unwrap();
        let changes: Vec<(&str, Value, Value)> = (event.changes.iter())
            .map(|c| (c.member.as_str(), c.old.clone(), c.new.clone()))
            .collect();
        assert_eq!(
            changes,
            [
                ("currentKid", json!(first), keys[0]["kid"].clone()),
                ("withdrawnKids", Value::Null, json!([first])),
                ("compromised", json!(false), json!(true)),
            ]
        );
    }

    #[test]
    fn a_put_that_changes_nothing_writes_no_event() {
        let (registry, store, caller, service) = setup();
        let body = json!({"leadSeconds": 0});
        put(&registry, &caller, &service, &body, false, T0).unwrap();
        let before = store.events().len();
        put(&registry, &caller, &service, &body, false, T0).unwrap();
        put(&registry, &caller, &service, &json!({}), false, T0).unwrap();
        assert_eq!(store.events().len(), before);
        put(
            &registry,
            &caller,
            &service,
            &json!({"leadSeconds": 5}),
            false,
            T0,
        )
        .unwrap();
        assert_eq!(actions(&store, &service)[0], "signing.update");
    }

    #[test]
    fn turned_off_nothing_signs_and_the_keys_leave_after_their_tokens() {
        let (registry, _, caller, service) = setup();
        put(
            &registry,
            &caller,
            &service,
            &json!({"leadSeconds": 0, "maxTokenSeconds": 600}),
            false,
            T0,
        )
        .unwrap();
        let claims = claims(&registry, &service, T0, 600);
        sign(&registry, &service, &claims, T0).unwrap();
        delete(&registry, &caller, &service, T0).unwrap();
        assert!(matches!(
            get(&registry, &service, false, T0),
            Err(AppError::NotFound(_))
        ));
        assert!(matches!(
            sign(&registry, &service, &claims, T0),
            Err(AppError::NotFound(_))
        ));
        assert_eq!(published_kids(&registry, &service).len(), 1);
        advance_due(&registry, false, 10, T0 + Duration::seconds(900)).unwrap();
        assert!(published_kids(&registry, &service).is_empty());
    }

    #[test]
    fn claims_are_checked_against_the_services_issuer_and_settings() {
        let (registry, _, caller, service) = setup();
        put(
            &registry,
            &caller,
            &service,
            &json!({"leadSeconds": 0, "maxTokenSeconds": 600}),
            false,
            T0,
        )
        .unwrap();
        let too_long = claims(&registry, &service, T0, 601);
        let refused = sign(&registry, &service, &too_long, T0).unwrap_err();
        assert!(
            matches!(&refused, AppError::InvalidClaims(why) if why.contains("exp")),
            "{refused:?}"
        );
        let other = URL_SAFE_NO_PAD.encode(
            json!({"iss": "https://elsewhere.example", "iat": T0.unix_timestamp(), "exp": T0.unix_timestamp() + 60})
                .to_string(),
        );
        let refused = sign(&registry, &service, &other, T0).unwrap_err();
        assert!(
            matches!(&refused, AppError::InvalidClaims(why) if why.contains("iss")),
            "{refused:?}"
        );
    }

    #[test]
    fn no_managed_key_pushes_the_key_set_past_its_cap() {
        let (registry, store, caller, service) = setup();
        let keys: Vec<Value> = (0..MAX_PUBLISHED_KEYS as u8 - 1)
            .map(|i| {
                json!({"kty": "OKP", "crv": "Ed25519", "kid": format!("file-{i}"),
                    "x": URL_SAFE_NO_PAD.encode([i; 32])})
            })
            .collect();
        let mut body = crate::testing::upload_of(keys[0].clone(), "EdDSA");
        body["jwks"]["keys"] = Value::Array(keys);
        upload_files(&registry, &caller, &service, body);
        // The first managed key is the 100th: room for it, and for no other.
        let settings = json!({"leadSeconds": 0, "rotationPeriodSeconds": 3600});
        put(&registry, &caller, &service, &settings, false, T0).unwrap();
        let full = rotate(&registry, &caller, &service, false, false, T0).unwrap_err();
        assert!(
            matches!(&full, AppError::Conflict(why) if why.contains("100 keys")),
            "{full:?}"
        );
        // The period's rotation waits; a compromise, which withdraws the other key, does not.
        let due = T0 + Duration::seconds(3600);
        let steps = advance_due(&registry, false, 10, due).unwrap();
        assert_eq!(steps.written, 0, "{steps:?}");
        assert_eq!(steps.held_back, [service.id], "{steps:?}");
        // Looked at again a minute later, not at every look meanwhile.
        assert_eq!(store.signing_due(due, 10).unwrap(), Vec::<Uuid>::new());
        let minute = due + Duration::seconds(60);
        assert_eq!(store.signing_due(minute, 10).unwrap(), [service.id]);
        assert_eq!(
            published_kids(&registry, &service).len(),
            MAX_PUBLISHED_KEYS
        );
        rotate(&registry, &caller, &service, true, false, T0).unwrap();
        assert_eq!(
            published_kids(&registry, &service).len(),
            MAX_PUBLISHED_KEYS
        );
    }

    #[test]
    fn a_retiring_managed_key_is_withdrawn_at_once_by_its_owner_the_signing_one_is_not() {
        let (registry, store, caller, service) = setup();
        let first = on_at_once(&registry, &caller, &service)["keys"][0]["kid"]
            .as_str()
            .unwrap()
            .to_owned();
        let claims = claims(&registry, &service, T0, 3600);
        sign(&registry, &service, &claims, T0).unwrap();
        let view = rotate(&registry, &caller, &service, false, false, T0).unwrap();
        let second = view["keys"][1]["kid"].as_str().unwrap().to_owned();
        assert_eq!(view["keys"][0]["state"], "retiring", "{view}");
        // The key that signs: a compromised rotation replaces it, not a withdrawal.
        let refused = keys::withdraw(&registry, &caller, &service, &second, T0).unwrap_err();
        assert!(matches!(&refused, AppError::Conflict(why) if why.contains("compromised")));
        // The retiring one leaves at once, though its tokens would still verify for an hour.
        keys::withdraw(&registry, &caller, &service, &first, T0).unwrap();
        assert_eq!(
            published_kids(&registry, &service),
            std::slice::from_ref(&second)
        );
        assert_eq!(actions(&store, &service)[0], "key.delete");
        // Signing off, every key retires (one that never signed leaves with it): the last one
        // can be pulled at once too.
        sign(&registry, &service, &claims, T0).unwrap();
        delete(&registry, &caller, &service, T0).unwrap();
        keys::withdraw(&registry, &caller, &service, &second, T0).unwrap();
        assert!(published_kids(&registry, &service).is_empty());
        assert_eq!(store.config(service.id).unwrap(), None);
    }

    #[test]
    fn the_last_managed_key_leaving_after_a_removed_sources_retention_unpublishes_the_service() {
        let (registry, store, caller, service) = setup();
        let mut body = crate::testing::upload_of(file_key("file-1"), "EdDSA");
        body["retainRemovedKeysHours"] = json!(1);
        upload_files(&registry, &caller, &service, body);
        let settings = json!({"leadSeconds": 0, "maxTokenSeconds": 7200});
        put(&registry, &caller, &service, &settings, false, T0).unwrap();
        sign(
            &registry,
            &service,
            &claims(&registry, &service, T0, 600),
            T0,
        )
        .unwrap();
        // The files' key retires for an hour; the managed key stays 2 h 05 min past its last
        // signature.
        config::withdraw_source(&registry, &caller, &service, "files", T0).unwrap();
        delete(&registry, &caller, &service, T0).unwrap();
        let gone = T0 + Duration::seconds(7200 + 300);
        advance_due(&registry, false, 10, gone).unwrap();
        // The retired key's hour is long over (not yet dropped by the upkeep): nothing is
        // published any more, rather than an empty key set.
        assert_eq!(store.config(service.id).unwrap(), None);
    }

    #[test]
    fn uploads_and_managed_keys_share_the_key_set_and_removing_the_uploads_keeps_the_managed() {
        let (registry, store, caller, service) = setup();
        let body = crate::testing::upload_of(file_key("file-1"), "EdDSA");
        upload_files(&registry, &caller, &service, body);
        let uploaded = store
            .config(service.id)
            .unwrap()
            .unwrap()
            .openid_configuration;
        on_at_once(&registry, &caller, &service);
        // Both sources' keys; the uploaded discovery document stays the one served.
        let config = store.config(service.id).unwrap().unwrap();
        let sources: Vec<&str> = config.keys.keys.iter().map(|k| k.source.as_str()).collect();
        assert_eq!(sources, ["files", "managed"]);
        assert_eq!(config.openid_configuration, uploaded);
        // Removing every upload keeps the managed keys, under the registry's own document.
        config::withdraw(&registry, &caller, &service, T0).unwrap();
        let config = store.config(service.id).unwrap().unwrap();
        let sources: Vec<&str> = config.keys.keys.iter().map(|k| k.source.as_str()).collect();
        assert_eq!(sources, ["managed"]);
        let document: Value = serde_json::from_str(&config.openid_configuration).unwrap();
        assert_eq!(
            document["id_token_signing_alg_values_supported"],
            json!(["ES256"])
        );
        // Again: nothing uploaded is left, nothing changes, and no event says it did.
        let events = store.events().len();
        config::withdraw(&registry, &caller, &service, T0 + Duration::seconds(1)).unwrap();
        assert_eq!(store.events().len(), events);
        assert_eq!(store.config(service.id).unwrap().unwrap(), config);
        // Without managed keys, the configuration goes whole.
        rotate(&registry, &caller, &service, true, false, T0).unwrap();
        delete(&registry, &caller, &service, T0).unwrap();
        advance(&registry, &service, false, T0).unwrap();
        assert!(config::key_state(&registry, &service)
            .unwrap()
            .keys
            .is_empty());
        // Nothing is published any more: no empty key set under the registry's document.
        assert_eq!(store.config(service.id).unwrap(), None);
    }

    #[test]
    fn two_replicas_stepping_one_rotation_write_it_once() {
        let (registry, store, caller, service) = setup();
        on_at_once(&registry, &caller, &service);
        rotate(&registry, &caller, &service, false, false, T0).unwrap();
        // The rotate's own step switched at once (lead 0, no verifier); the old key, which never
        // signed, leaves at the next step, once, whichever replica steps first.
        let before = actions(&store, &service).len();
        let withdrawn = advance(&registry, &service, false, T0).unwrap();
        assert!(
            matches!(withdrawn, Some(Transition::Withdraw { .. })),
            "{withdrawn:?}"
        );
        assert!(advance(&registry, &service, false, T0).unwrap().is_none());
        assert_eq!(actions(&store, &service).len(), before + 1);
        // A step decided on a state another replica changed meanwhile writes nothing.
        let stale = store.signing(service.id).unwrap().unwrap();
        let mut apply = |s: Option<Signing>| s;
        rotate(&registry, &caller, &service, true, false, T0).unwrap();
        let written = write(
            &registry,
            &service,
            Some(&stale),
            false,
            &mut apply,
            None,
            None,
            T0,
        );
        assert_eq!(written.unwrap(), Written::No);
    }
}
