//! The custom domains' worker (docs/api.md, "Custom domains"), which every replica runs: each
//! second, the domains due get their next step (TXT lookups; apart from them, orders and
//! renewals), one replica ordering for a domain at a time (a lock in the database); and the
//! installer that hands each served domain's certificate to this replica's TLS listener.

use crate::state::AppState;
use actix_web::web;
use registry_domain::app::domains::{self, Step};
use registry_domain::custom_domain::{CustomDomain, DomainWork};
use registry_replica::domains::DomainChanged;
use std::time::Duration;

/// How often the worker asks which domains are due.
const LOOK_EVERY: Duration = Duration::from_secs(1);
/// Domains handled per look.
const BATCH: usize = 256;
/// TXT lookups under way at once: each waits at most 3 s for its DNS server, so a round of
/// lookups whose servers never answer costs seconds, not one customer's count times 3 s.
const LOOKUPS_AT_ONCE: usize = 16;

/// The worker's loops, one for the TXT lookups and one for the orders, so that no order (it may
/// take minutes) holds back a lookup; returns at once when custom domains are off.
pub async fn work(state: web::Data<AppState>) {
    if state.custom_domains.is_none() {
        return;
    }
    let state = &state;
    futures_util::future::join(
        each_second(state, DomainWork::Lookup, |due| async move {
            // Several at once, each customer's in turn (`due` is in that order).
            for round in due.chunks(LOOKUPS_AT_ONCE) {
                let steps = round.iter().map(|domain| step(state, domain.clone()));
                futures_util::future::join_all(steps).await;
            }
        }),
        each_second(state, DomainWork::Order, |due| async move {
            // One at a time: renewals first, then new orders, each customer's in turn.
            for domain in due {
                step(state, domain).await;
            }
        }),
    )
    .await;
}

/// Each second, the domains with `work` due, handed to `serve`, which the next second waits for.
async fn each_second<F, Fut>(state: &AppState, work: DomainWork, serve: F)
where
    F: Fn(Vec<CustomDomain>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut interval = tokio::time::interval(LOOK_EVERY);
    loop {
        interval.tick().await;
        let now = state.now();
        match state.read(move |r| domains::due(r, now, work, BATCH)).await {
            Ok(due) => serve(due).await,
            Err(error) => {
                tracing::warn!(%error, ?work, "custom domains: cannot read the domains due");
            }
        }
    }
}

/// One step of one domain (`domains::advance`, through the one write path: this replica serves
/// the new state at once), what it did logged; a failed step is retried.
async fn step(state: &AppState, domain: CustomDomain) {
    let Some(worker) = state.custom_domains.clone() else {
        return;
    };
    let name = domain.domain.clone();
    let clock = state.clone();
    let stepped = state
        .write(move |r| domains::advance(r, &worker.outside(), domain, &|| clock.now()))
        .await;
    match stepped {
        Ok(Step::Looked { proven: true, .. }) => {
            tracing::info!(domain = name, "custom domain: ownership proven");
        }
        Ok(Step::Looked {
            failed: Some(why), ..
        }) => tracing::info!(domain = name, why, "custom domain: TXT lookup failed"),
        Ok(Step::Ordered(Err(why))) => {
            tracing::warn!(domain = name, why, "custom domain: the order failed");
        }
        Ok(_) => {}
        Err(error) => {
            tracing::warn!(domain = name, %error, "custom domain: the step failed; retried");
        }
    }
}

/// Hands each served domain's certificate to the TLS listener as this replica applies it:
/// those served at start, then every change.
pub async fn install_certificates(state: web::Data<AppState>) {
    let (Some(worker), Some(tls)) = (state.custom_domains.clone(), state.certificate.clone())
    else {
        return;
    };
    let mut changes = state.replica.watch_domains();
    for served in state.replica.domains.all() {
        worker.install(&tls, &DomainChanged::Served(served));
    }
    while let Some(change) = changes.recv().await {
        worker.install(&tls, &change);
    }
}
