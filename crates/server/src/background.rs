//! Background work of a server: following the change feed (so that replicas sharing a
//! PostgreSQL database serve each other's writes within a second), and reaping expired
//! anonymous services.

use crate::directory;
use crate::state::AppState;
use actix_web::web;
use std::time::Duration;

const POLL_EVERY: Duration = Duration::from_millis(500);
const REAP_EVERY: Duration = Duration::from_secs(60);
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
        let _ = directory::catch_up(&state, i64::MAX).await;
    }
}

/// Deletes expired anonymous services and old change-log rows, and forgets verifications no
/// longer needed, forever.
pub async fn reap_expired(state: web::Data<AppState>) {
    let mut interval = tokio::time::interval(REAP_EVERY);
    loop {
        interval.tick().await;
        let now = state.now();
        state.tokens.sweep(now);
        // Batch after batch: a burst of creations an hour ago must not take hours to clear.
        while let Ok(expired) = state.db(move |s| s.expired_anonymous(now, BATCH)).await {
            let complete = expired.len() < BATCH;
            for id in expired {
                if state.db(move |s| s.delete_service(id)).await.is_ok() {
                    tracing::info!(service = %id, "reaped an expired anonymous service");
                }
            }
            // The deletions leave the hosting cache through the change log, like every other
            // change (and on every replica alike). Until then the handler's own expiry check
            // answers 404 for them.
            directory::settle_write(&state).await;
            if complete {
                break;
            }
        }
        let _ = state.db(move |s| s.prune_changes(now - KEEP_CHANGES)).await;
    }
}
