//! Background work of a server: following the change feed (so that replicas sharing a
//! PostgreSQL database serve each other's writes within a second), and the reaper: expired
//! anonymous services, retired keys whose time ran out, and old rows of the change log and the
//! audit trail.

use crate::state::AppState;
use actix_web::web;
use registry_domain::audit::{Action, Actor, AuditEvent, Resource};
use registry_domain::service::PublishedConfig;
use std::time::Duration;
use time::OffsetDateTime;
use uuid::Uuid;

const POLL_EVERY: Duration = Duration::from_millis(500);
const BATCH: usize = 500;
/// How long change-log rows are kept: far longer than any replica lags behind.
const KEEP_CHANGES: time::Duration = time::Duration::hours(1);

/// Applies the change feed to the caches (hosted documents, services, accounts), forever.
/// Authenticated requests apply it themselves when they find it ahead; this is what makes
/// public documents, which never touch the database, follow the other replicas' writes.
pub async fn follow_changes(state: web::Data<AppState>) {
    let mut interval = tokio::time::interval(POLL_EVERY);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        // On failure (the database is down) the next tick retries from the same point.
        let _ = state.replica.catch_up(i64::MAX).await;
    }
}

/// The reaper, forever: every minute, expiry and retention.
pub async fn reap_expired(state: web::Data<AppState>) {
    let every = Duration::from_secs(state.settings.reap_every_seconds);
    let mut interval = tokio::time::interval(every);
    loop {
        interval.tick().await;
        let now = state.now();
        state.auth.tokens.sweep(now);
        reap_anonymous(&state, now).await;
        reap_keys(&state, now).await;
        // The deletions leave the caches through the change log, like every other change (and
        // on every replica alike). Until then the handlers' own expiry checks hold.
        state.replica.settle_write().await;
        let _ = state
            .replica
            .db(move |s| s.prune_changes(now - KEEP_CHANGES))
            .await;
        let keep = time::Duration::days(i64::from(state.settings.audit_retention_days));
        let _ = state.replica.db(move |s| s.prune_audit(now - keep)).await;
        let _ = state
            .replica
            .db(move |s| s.prune_refusals(now - registry_domain::refusal::KEPT_FOR))
            .await;
    }
}

/// Deletes expired anonymous services, each with its `anonymous.expire` event. Batch after
/// batch: a burst of creations an hour ago must not take hours to clear.
async fn reap_anonymous(state: &AppState, now: OffsetDateTime) {
    while let Ok(expired) = state
        .replica
        .db(move |s| s.expired_anonymous(now, BATCH))
        .await
    {
        // A corrupt row is left out of the batch (and logged by the store), so a short batch
        // does not mean the last one: go on until a batch deletes nothing.
        let mut deleted = 0;
        for service in expired {
            let event = AuditEvent::new(
                Action::AnonymousExpire,
                Resource::service(service.id, &service.subdomain),
                Actor::system(),
                None,
                now,
            );
            let id = service.id;
            if state
                .replica
                .db(move |s| s.delete_service(id, &event))
                .await
                .is_ok()
            {
                deleted += 1;
                tracing::info!(service = %id, "reaped an expired anonymous service");
            }
        }
        if deleted == 0 {
            break;
        }
    }
}

/// Withdraws retired keys whose time ran out, each with its `key.expire` event. They left the
/// public key set on time already (it is computed for the instant it is served); this makes
/// the stored state, and the trail, say so.
async fn reap_keys(state: &AppState, now: OffsetDateTime) {
    let Ok(due) = state
        .replica
        .db(move |s| s.configs_with_expired_keys(now, BATCH))
        .await
    else {
        return;
    };
    for id in due {
        let _ = expire_keys_of(state, id, now).await;
    }
}

async fn expire_keys_of(
    state: &AppState,
    id: Uuid,
    now: OffsetDateTime,
) -> crate::problem::ApiResult<()> {
    let (service, config) = state
        .replica
        .db(move |s| Ok((s.service(id)?, s.config(id)?)))
        .await?;
    let (Some(service), Some(config)) = (service, config) else {
        return Ok(());
    };
    let kids: Vec<String> = config.keys.expired(now).map(|k| k.kid.clone()).collect();
    for kid in kids {
        let event = AuditEvent::new(
            Action::KeyExpire,
            Resource::key(&kid, &service.subdomain),
            Actor::system(),
            service.customer_id,
            now,
        );
        // Read, withdraw, write in one transaction: an upload meanwhile may have dropped the
        // key already, and then nothing is written (and no event).
        state
            .replica
            .db(move |s| {
                s.update_config(
                    id,
                    &mut |current: Option<PublishedConfig>| {
                        let config = current?;
                        let keys = config.keys.without_expired(&kid, now)?;
                        Some(PublishedConfig { keys, ..config })
                    },
                    &event,
                )
            })
            .await?;
    }
    Ok(())
}
