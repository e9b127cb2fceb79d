//! Background work of a server: following the change feed (so that replicas sharing a
//! PostgreSQL database serve each other's writes within a second), and the upkeep of
//! `registry_domain::app::upkeep` once a `REGISTRY_REAP_EVERY_SECONDS`.

use crate::state::AppState;
use actix_web::web;
use futures_util::StreamExt;
use registry_auth::shared::Exchange;
use registry_cdn::Purger;
use registry_domain::app::{fetches, rate_counts, readiness, signing, upkeep};
use registry_replica::DocumentsChanged;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use uuid::Uuid;

const POLL_EVERY: Duration = Duration::from_millis(500);

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

/// The reaper, forever: expiry and retention, and the token cache's sweep. A round runs every
/// `REGISTRY_REAP_EVERY_SECONDS`, and as each anonymous service expires in between; retention
/// runs once a period.
pub async fn reap_expired(state: web::Data<AppState>) {
    let every = Duration::from_secs(state.settings.reap_every_seconds);
    let keep_audit = time::Duration::days(i64::from(state.settings.audit_retention_days));
    let mut pruned_at: Option<std::time::Instant> = None;
    loop {
        let now = state.now();
        state.auth.tokens.sweep(now);
        if let Ok(expired) = state.write(move |r| Ok(upkeep::expire(r, now))).await {
            if expired != upkeep::Expired::default() {
                tracing::info!(
                    services = expired.services,
                    keys = expired.keys,
                    "expired anonymous services and retired keys"
                );
            }
            for (service_id, subdomain) in expired.published {
                state
                    .replica
                    .documents_gone(service_id, &subdomain, Vec::new());
            }
        }
        // The deletions leave the caches through the change log, like every other change (and
        // on every replica alike). Until then the handlers' own expiry checks hold.
        if pruned_at.is_none_or(|at| at.elapsed() >= every) {
            pruned_at = Some(std::time::Instant::now());
            let _ = state
                .write(move |r| Ok(upkeep::prune(r, now, keep_audit)?))
                .await;
        }
        // A service created meanwhile may expire before the round planned: plan again.
        let plan = || async { tokio::time::Instant::now() + next_round(&state, now, every).await };
        let mut next = plan().await;
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(next) => break,
                () = state.anonymous_created.notified() => next = next.min(plan().await),
            }
        }
    }
}

/// The least time between two rounds of the reaper, however many anonymous services expire in
/// between: a round reads and writes the database.
const ROUNDS_APART: Duration = Duration::from_millis(500);

/// How long the reaper waits for its next round after the round of `round` (half a second at
/// least, `every` at most): until the first anonymous service to expire after `round` expires,
/// at once (after the half second) when it already has.
async fn next_round(state: &AppState, round: time::OffsetDateTime, every: Duration) -> Duration {
    let now = state.now();
    let until = now + time::Duration::try_from(every).unwrap_or(time::Duration::DAY);
    let next = state.read(move |r| Ok(upkeep::next_expiry(r, round, until)?));
    let wait = match next.await {
        Ok(Some(at)) => Duration::try_from(at - now).unwrap_or(Duration::ZERO),
        _ => every,
    };
    wait.clamp(ROUNDS_APART.min(every), every)
}

/// Purges the caches in front of the registry of every change of public documents this replica
/// applies (docs/api.md, "Behind a CDN"), each in a task of its own (its retries last up to 60 s),
/// and records the purges that succeeded, which key readiness waits for; one that failed is owed
/// ([`purge_owed`]). With no cache to purge, each change is recorded as purged as it is: a key
/// published now needs no purge should `REGISTRY_PURGE_URLS` be set later.
pub async fn purge_changes(state: web::Data<AppState>) {
    let mut changes = state.replica.watch_documents();
    let Some(purger) = state.purger.clone() else {
        while let Some(change) = changes.recv().await {
            let (id, at) = (change.service_id, change.changed_at);
            if let Err(error) = state
                .write(move |r| readiness::nothing_to_purge(r, id, at))
                .await
            {
                tracing::warn!(service = %id, %error, "a change could not be recorded as purged");
            }
        }
        return;
    };
    let owed = Owed::default();
    actix_web::rt::spawn(purge_owed(state.clone(), purger.clone(), owed.clone()));
    while let Some(change) = changes.recv().await {
        let (state, purger, owed) = (state.clone(), purger.clone(), owed.clone());
        actix_web::rt::spawn(async move { purge_change(&state, &purger, &owed, change).await });
    }
}

/// The changes whose purge is owed, by service: the newest of each (a purge of it covers the
/// earlier ones), with every custom domain any of them stopped serving.
type Owed = Arc<Mutex<HashMap<Uuid, DocumentsChanged>>>;

/// How often the changes owed are purged again.
const PURGE_OWED_EVERY: Duration = Duration::from_secs(30);

/// Purges the caches of `change` and records it; when the purge fails (every retry of its
/// minute spent), the change is owed.
async fn purge_change(state: &AppState, purger: &Purger, owed: &Owed, change: DocumentsChanged) {
    // The service's custom domain serves the same documents under its own host; one this
    // change stopped serving them under held them until now.
    let mut hosts = change.dropped_domains.clone();
    if let Some(served) = state.replica.domains.of_service(change.service_id) {
        hosts.push(served.domain.domain.clone());
    }
    hosts.push(
        state
            .replica
            .hosting
            .issuers()
            .authority_of(&change.subdomain),
    );
    let (id, at) = (change.service_id, change.changed_at);
    if !readiness::purge(purger, &hosts, &crate::public::PUBLIC_PATHS).await {
        owe(owed, change);
        return;
    }
    let now = state.now();
    if let Err(error) = state
        .write(move |r| readiness::purged(r, id, at, now))
        .await
    {
        // Owed all the same: recorded at the next pass.
        tracing::warn!(service = %id, %error, "a purge succeeded but could not be recorded");
        owe(owed, change);
        return;
    }
    let mut owed = owed.lock().unwrap_or_else(PoisonError::into_inner);
    if owed.get(&id).is_some_and(|o| o.changed_at <= at) {
        owed.remove(&id);
    }
}

/// Adds `change` to those owed: its service's newest, with every domain either dropped.
fn owe(owed: &Owed, change: DocumentsChanged) {
    let mut owed = owed.lock().unwrap_or_else(PoisonError::into_inner);
    let entry = owed
        .entry(change.service_id)
        .or_insert_with(|| change.clone());
    for domain in change.dropped_domains {
        if !entry.dropped_domains.contains(&domain) {
            entry.dropped_domains.push(domain);
        }
    }
    entry.changed_at = entry.changed_at.max(change.changed_at);
}

/// Purges owed that run at once in a pass: many services owed after a long outage do not all
/// hold a task and a connection to each cache together.
const OWED_AT_ONCE: usize = 16;

/// Purges again, every [`PURGE_OWED_EVERY`], the changes owed: those whose purge failed here,
/// and, from the start, those no replica recorded as purged (one lost with a replica stopped
/// while it retried), so that a key's readiness is not held back until the next change.
async fn purge_owed(state: web::Data<AppState>, purger: Arc<Purger>, owed: Owed) {
    let now = state.now();
    match state.read(move |r| readiness::unpurged(r, now)).await {
        Ok(unpurged) => {
            let mut owed = owed.lock().unwrap_or_else(PoisonError::into_inner);
            for (service_id, subdomain, changed_at) in unpurged {
                owed.entry(service_id).or_insert(DocumentsChanged {
                    service_id,
                    subdomain,
                    changed_at,
                    dropped_domains: Vec::new(),
                });
            }
        }
        Err(error) => tracing::warn!(%error, "the changes no replica purged could not be read"),
    }
    let mut interval = tokio::time::interval(PURGE_OWED_EVERY);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let due: Vec<DocumentsChanged> = (owed.lock().unwrap_or_else(PoisonError::into_inner))
            .values()
            .cloned()
            .collect();
        if !due.is_empty() {
            tracing::info!(
                services = due.len(),
                "purging the caches again of changes owed"
            );
        }
        // One pass at a time: a cache still down holds each purge for its minute of retries.
        futures_util::stream::iter(due)
            .for_each_concurrent(OWED_AT_ONCE, |change| {
                purge_change(&state, &purger, &owed, change)
            })
            .await;
    }
}

/// Adds this replica's counts of public fetches to the database (docs/api.md, "Fetch evidence"),
/// once a `REGISTRY_FETCH_FLUSH_SECONDS`; counts that fail to go are kept for the next flush.
pub async fn flush_fetches(state: web::Data<AppState>) {
    let every = Duration::from_secs(state.settings.fetch_flush_seconds);
    let mut interval = tokio::time::interval(every);
    // One read of regular agents at a time, beside the flushes: a slow one delays no count.
    let reading = Arc::new(AtomicBool::new(false));
    loop {
        interval.tick().await;
        let counts = state.replica.fetches.take();
        let now = state.now();
        let wanted = state.replica.fetches.wanting_regulars(&counts, now);
        let kept = counts.clone();
        if let Err(error) = state.write(move |r| fetches::record(r, &counts)).await {
            tracing::warn!(%error, "fetch counts not recorded: kept for the next flush");
            state.replica.fetches.give_back(kept);
            continue;
        }
        if wanted.is_empty() || reading.swap(true, Ordering::AcqRel) {
            continue;
        }
        // Key sets whose agents overflowed (a flood, or a popular issuer): keep their
        // verifiers' places from now on.
        let (state, done) = (state.clone(), ReadDone(reading.clone()));
        tokio::spawn(async move {
            let _done = done;
            match state
                .read(move |r| fetches::regulars(r, &wanted, now))
                .await
            {
                Ok(found) => state.replica.fetches.remember_regulars(found, now),
                Err(error) => {
                    tracing::warn!(%error, "regular agents not read: asked again at a next flush")
                }
            }
        });
    }
}

/// How often a replica adds its rate limits' events to the shared counts and takes in the
/// others' (docs/api.md, "Limits"): what two replicas may let through beyond a limit is about
/// this long's worth of events.
const SHARE_RATE_COUNTS_EVERY: Duration = Duration::from_secs(1);

/// Shares the rate limits' counts with the other replicas, forever ([`Exchange`]). Events not
/// added while the database is away are added at the next exchange that succeeds. Run beside
/// the one write path (`AppState::write`): nothing a cache holds changes, so nothing is settled,
/// and a database away is said once here, not every second as a request's failure.
pub async fn share_rate_counts(state: web::Data<AppState>) {
    let mut exchange = Exchange::new();
    let replica = exchange.replica();
    let mut interval = tokio::time::interval(SHARE_RATE_COUNTS_EVERY);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        interval.tick().await;
        let now = state.now();
        let added = exchange.to_add(&state.shared_limits(), now);
        let since = exchange.since(now, rate_counts::LONGEST_WINDOW);
        let registry = state.registry.clone();
        let exchanged = registry_replica::blocking(move || {
            rate_counts::exchange(&registry, replica, &added, now, since)
        })
        .await;
        match exchanged {
            Ok(Ok(counts)) => {
                if failing {
                    tracing::info!("rate counts shared again");
                }
                exchange.absorb(counts, &state.shared_limits(), now);
                failing = false;
            }
            Ok(Err(error)) if !failing => {
                tracing::warn!(%error, "rate counts not shared: each limit holds on this replica alone until the database is back");
                failing = true;
            }
            Ok(Err(_)) => {}
            // The task did not finish (a panic): its events are added again next time, counted
            // twice should its write have committed, which errs on the strict side.
            Err(error) => tracing::warn!(%error, "a rate count exchange did not finish"),
        }
    }
}

/// Clears the flag of a read of regular agents when the read ends, however it ends: one that
/// panicked holds no later read off.
struct ReadDone(Arc<AtomicBool>);

impl Drop for ReadDone {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// How often the rotation step looks for managed signing with something due.
const SIGNING_EVERY: Duration = Duration::from_secs(2);

/// Services stepped per look; the rest wait for the next one, most overdue first.
const SIGNING_BATCH: usize = 100;

/// Managed signing's rotation step (docs/api.md, "Managed signing"), forever: for every service
/// with something due (a next key to check, a rotation to start, a retiring key to withdraw),
/// one step. Every replica runs it; each transition is written once, by whichever gets there
/// first, and what is due is read from the database, so a restart resumes where it stopped.
/// Without a data key it still switches and withdraws keys (neither needs a private key); a
/// rotation due fails, logged, once a minute per service.
pub async fn step_signing(state: web::Data<AppState>) {
    let purging = state.purging();
    let mut interval = tokio::time::interval(SIGNING_EVERY);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let now = state.now();
        match (state.write(move |r| signing::advance_due(r, purging, SIGNING_BATCH, now))).await {
            Ok(steps) => {
                if steps.written > 0 {
                    tracing::info!(transitions = steps.written, "managed signing stepped");
                }
                for (service_id, error) in steps.failed {
                    tracing::warn!(%service_id, %error, "a service's signing step failed; retried in a minute");
                }
                for (service_id, subdomain) in steps.unpublished {
                    (state.replica).documents_gone(service_id, &subdomain, Vec::new());
                }
                for service_id in steps.held_back {
                    tracing::warn!(
                        %service_id,
                        "a service's rotation waits: its key set holds 100 keys; looked at again in a minute"
                    );
                }
            }
            Err(error) => tracing::warn!(%error, "managed signing's step failed; retried"),
        }
    }
}
