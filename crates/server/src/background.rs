//! Background work of a server: following the change feed (so that replicas sharing a
//! PostgreSQL database serve each other's writes within a second), and reaping expired
//! anonymous services.

use crate::state::AppState;
use actix_web::web;
use registry_domain::ports::{Change, ChangeFeed, ServiceStore};
use std::time::Duration;

const POLL_EVERY: Duration = Duration::from_millis(500);
const REAP_EVERY: Duration = Duration::from_secs(60);
const BATCH: usize = 500;
/// How long change-log rows are kept: far longer than any replica lags behind.
const KEEP_CHANGES: time::Duration = time::Duration::hours(1);

/// Refreshes the hosting cache from the change feed, forever. `after` is the sequence the
/// warm-up load saw.
pub async fn follow_changes(state: web::Data<AppState>, mut after: i64) {
    let mut interval = tokio::time::interval(POLL_EVERY);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let since = after;
        let Ok((last, changes)) = state.db(move |s| s.changes_since(since, BATCH)).await else {
            continue; // the database is down; the next tick retries
        };
        let mut services: Vec<uuid::Uuid> = changes
            .into_iter()
            .filter_map(|c| match c {
                Change::Service(id) => Some(id),
                Change::Account(_) => None,
            })
            .collect();
        services.sort_unstable();
        services.dedup();
        let mut refreshed = true;
        for id in services {
            refreshed &= refresh_service(&state, id).await;
        }
        if refreshed {
            after = last;
        }
    }
}

/// Reloads one service's documents into the hosting cache; false when the database failed.
async fn refresh_service(state: &AppState, id: uuid::Uuid) -> bool {
    let loaded = state
        .db(move |s| Ok((s.service(id)?, s.config(id)?)))
        .await;
    match loaded {
        Ok((Some(service), Some(config))) => {
            state.hosting.remove(id);
            state.hosting.put(&service, &config);
            true
        }
        Ok(_) => {
            state.hosting.remove(id);
            true
        }
        Err(_) => false,
    }
}

/// Deletes expired anonymous services and old change-log rows, forever.
pub async fn reap_expired(state: web::Data<AppState>) {
    let mut interval = tokio::time::interval(REAP_EVERY);
    loop {
        interval.tick().await;
        let now = state.now();
        let Ok(expired) = state.db(move |s| s.expired_anonymous(now, BATCH)).await else {
            continue;
        };
        for id in expired {
            if state.db(move |s| s.delete_service(id)).await.is_ok() {
                state.hosting.remove(id);
                tracing::info!(service = %id, "reaped an expired anonymous service");
            }
        }
        let _ = state.db(move |s| s.prune_changes(now - KEEP_CHANGES)).await;
    }
}
