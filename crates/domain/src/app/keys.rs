//! Published keys: the inventory, the withdrawal of a retired key and the wiring guide that
//! tells clouds to trust them (docs/api.md, "Key lifecycle").

use crate::app::{config, domains, signing, AppError, Caller, Registry};
use crate::audit::{Action, Resource};
use crate::keys::KeyDeleteError;
use crate::publishing::{wiring_guide, DEFAULT_WIRING_SUBJECT};
use crate::service::PublishedConfig;
use crate::Service;
use serde_json::Value;
use time::OffsetDateTime;

/// Every key `service` publishes or keeps, current ones first (`GET /services/{s}/keys`); a
/// managed key that no longer signs is listed as retired.
pub fn inventory(
    registry: &Registry,
    service: &Service,
    now: OffsetDateTime,
) -> Result<Value, AppError> {
    // Managed signing says which of its keys no longer sign, and remembers the ones it
    // withdrew though the key state may have forgotten them.
    let signing = registry.store.signing(service.id)?;
    let keys = config::key_state(registry, service)?;
    let keys = config::with_remembered(keys, signing.as_ref(), now);
    let retiring = signing
        .as_ref()
        .map_or_else(Vec::new, |s| s.retiring(service.expires_at));
    Ok(keys.inventory(now, &retiring))
}

/// The wiring guide of `service` (`GET /services/{s}/federation`) for tokens whose `sub` is
/// `subject` (the default one when absent or empty), for its issuer `issuer` (its hosted one
/// when absent). A subject holding a control character is a 400: no token's `sub` holds one,
/// and a cloud's console would not take it.
pub fn wiring(
    registry: &Registry,
    service: &Service,
    subject: Option<&str>,
    issuer: Option<&str>,
) -> Result<Value, AppError> {
    let subject = subject
        .filter(|s| !s.is_empty())
        .unwrap_or(DEFAULT_WIRING_SUBJECT);
    if let Some(c) = subject.chars().find(|c| c.is_control()) {
        return Err(AppError::BadRequest(format!(
            "query parameter subject: holds the control character {c:?}; a subject is \
             printable text such as {DEFAULT_WIRING_SUBJECT:?}"
        )));
    }
    let issuer = domains::issuer(registry, service, issuer)?;
    let mut guide = wiring_guide(&issuer, subject);
    guide["service"] = Value::from(service.subdomain.as_str());
    Ok(guide)
}

/// Withdraws the retired key `kid` of `service` at once (a compromised key): a current key is a
/// 409, an unknown one a 404. A managed key is retired when it is retiring
/// ([`signing::withdraw_key`]).
pub fn withdraw(
    registry: &Registry,
    caller: &Caller,
    service: &Service,
    kid: &str,
    now: OffsetDateTime,
) -> Result<(), AppError> {
    if signing::withdraw_key(registry, caller, service, kid, now)?.is_some() {
        return Ok(());
    }
    let event = caller.event(
        Action::KeyDelete,
        Resource::key(kid, &service.subdomain),
        service.customer_id,
        now,
    );
    let mut outcome = Err(KeyDeleteError::Unknown);
    registry
        .store
        .update_config(
            service.id,
            &mut |current| {
                let config = current?;
                outcome = config.keys.without_retired(kid, now);
                let keys = outcome.clone().ok()?;
                let config = PublishedConfig {
                    updated_at: now,
                    ..config
                };
                Some(config::rekeyed(registry, service, config, keys, now))
            },
            &event,
        )
        .map_err(AppError::gone(|| {
            format!("no service {:?}", service.subdomain)
        }))?;
    outcome.map(drop).map_err(|e| match e {
        KeyDeleteError::Current => AppError::Conflict(format!(
            "key {kid:?} is current: upload a key set without it first, then delete it once it \
             is retired"
        )),
        KeyDeleteError::Unknown => AppError::NotFound(format!("no published key {kid:?}")),
    })
}
