//! The custom domains' worker (docs/api.md, "Custom domains"), which every replica runs: each
//! second, the domains due get their next step (a TXT lookup, an order, a renewal), one replica
//! ordering for a domain at a time (a lock in the database); and the installer that hands each
//! served domain's certificate to this replica's TLS listener.

use crate::state::AppState;
use actix_web::web;
use registry_domain::app::domains::{self, Step};
use registry_domain::custom_domain::{CustomDomain, DomainStatus};
use registry_replica::domains::DomainChanged;
use std::time::Duration;

/// How often the worker asks which domains are due.
const LOOK_EVERY: Duration = Duration::from_secs(1);
/// Domains handled per look.
const BATCH: usize = 256;
/// TXT lookups under way at once: each waits at most 3 s for its DNS server, so a round of
/// lookups whose servers never answer costs seconds, not one customer's count times 3 s.
const LOOKUPS_AT_ONCE: usize = 16;

/// The worker's loop; returns at once when custom domains are off.
pub async fn work(state: web::Data<AppState>) {
    if state.custom_domains.is_none() {
        return;
    }
    let mut interval = tokio::time::interval(LOOK_EVERY);
    loop {
        interval.tick().await;
        let now = state.now();
        let due = match state.read(move |r| domains::due(r, now, BATCH)).await {
            Ok(due) => due,
            Err(error) => {
                tracing::warn!(%error, "custom domains: cannot read the domains due");
                continue;
            }
        };
        // `due` is in the order to serve (renewals, new orders, then lookups, each customer's in
        // turn): the orders go one at a time, beside the lookups, several at once.
        let (lookups, orders): (Vec<_>, Vec<_>) =
            (due.into_iter()).partition(|d| d.status == DomainStatus::Verifying);
        let ordering = async {
            for domain in orders {
                step(&state, domain).await;
            }
        };
        let looking = async {
            for round in lookups.chunks(LOOKUPS_AT_ONCE) {
                let steps = round.iter().map(|domain| step(&state, domain.clone()));
                futures_util::future::join_all(steps).await;
            }
        };
        futures_util::future::join(ordering, looking).await;
    }
}

/// One step of one domain (`domains::advance`, through the one write path: this replica serves
/// the new state at once), what it did logged; a failed step is retried.
async fn step(state: &AppState, domain: CustomDomain) {
    let Some(worker) = state.custom_domains.clone() else {
        return;
    };
    let (name, now) = (domain.domain.clone(), state.now());
    let stepped = state
        .write(move |r| domains::advance(r, &worker.outside(), domain, now))
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
