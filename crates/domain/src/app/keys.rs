//! Published keys: the inventory and the withdrawal of a retired key (docs/api.md, "Key
//! lifecycle").

use crate::app::{config, signing, AppError, Caller, Registry};
use crate::audit::{Action, Resource};
use crate::keys::KeyDeleteError;
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
    let retiring = signing.as_ref().map_or_else(Vec::new, |s| s.retiring());
    Ok(keys.inventory(now, &retiring))
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
