//! Draining after SIGTERM (docs/api.md, "Readiness"): the replica keeps its listeners open and
//! `/readyz` answers 503 while the requests in flight at the signal, and any that came since,
//! finish; at the first moment none is in flight (at most [`DRAIN_TIME`] after the signal) the
//! listeners close. A load balancer that probes readiness sees the replica leave, and one still
//! sending it requests gets answers, not refused connections.

use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use thread_local::ThreadLocal;

/// The longest a drain waits for a quiet moment; past it the requests still in flight are cut.
pub const DRAIN_TIME: Duration = Duration::from_secs(30);

/// How often a drain looks for a quiet moment.
const LOOK_EVERY: Duration = Duration::from_millis(20);

/// Whether the replica drains, and how many requests each worker has in flight (a counter per
/// thread, so that no two workers write one cache line).
#[derive(Debug, Default)]
pub struct Drain {
    draining: AtomicBool,
    in_flight: ThreadLocal<CachePadded<AtomicUsize>>,
}

/// A request in flight, until dropped (answered, or its client gone).
#[derive(Debug)]
pub struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Release);
    }
}

impl Drain {
    /// Counts a request in flight until the value returned is dropped.
    pub fn enter(&self) -> InFlight<'_> {
        let mine = self.in_flight.get_or_default();
        mine.fetch_add(1, Ordering::Relaxed);
        InFlight(mine)
    }

    /// Whether SIGTERM (or SIGINT) came: readiness says 503.
    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Requests in flight on every worker.
    fn in_flight(&self) -> usize {
        (self.in_flight.iter())
            .map(|count| count.load(Ordering::Acquire))
            .sum()
    }

    /// Starts draining; completes at the first moment no request is in flight (`true`) or
    /// [`DRAIN_TIME`] after it started (`false`).
    pub async fn quiet(&self) -> bool {
        self.draining.store(true, Ordering::Relaxed);
        let deadline = Instant::now() + DRAIN_TIME;
        loop {
            if self.in_flight() == 0 {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            actix_web::rt::time::sleep(LOOK_EVERY).await;
        }
    }
}

/// What drains at the first SIGTERM or SIGINT, then stops `server`: gracefully once quiet, at
/// once at the drain's end or at a second signal. The handlers are installed here, before the
/// future is first polled (a signal that comes meanwhile waits for it).
pub fn on_signals(
    server: actix_web::dev::ServerHandle,
    drain: std::sync::Arc<Drain>,
) -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let (mut term, mut int) = (
        signal(SignalKind::terminate())?,
        signal(SignalKind::interrupt())?,
    );
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        tracing::info!(
            "draining: readiness answers 503 until no request is in flight (30 s at most)"
        );
        let quiet = tokio::select! {
            quiet = drain.quiet() => quiet,
            _ = term.recv() => false,
            _ = int.recv() => false,
        };
        if quiet {
            tracing::info!("drained: closing the listeners");
        } else {
            tracing::warn!("stopping with requests in flight: the drain's end or a second signal");
        }
        server.stop(quiet).await;
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[actix_web::test]
    async fn a_drain_ends_when_the_last_request_in_flight_ends() {
        let drain = std::sync::Arc::new(Drain::default());
        assert!(!drain.draining());
        let outside = drain.clone();
        let other_thread = std::thread::spawn(move || {
            let request = outside.enter();
            std::thread::sleep(Duration::from_millis(200));
            drop(request);
        });
        let here = drain.enter();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(drain.in_flight(), 2);
        drop(here);
        let started = Instant::now();
        assert!(drain.quiet().await);
        assert!(drain.draining());
        assert!(started.elapsed() >= Duration::from_millis(100));
        assert_eq!(drain.in_flight(), 0);
        other_thread.join().unwrap();
    }
}
