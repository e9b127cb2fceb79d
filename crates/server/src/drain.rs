//! Draining after SIGTERM (docs/api.md, "Readiness"). For a moment the replica keeps its
//! listeners open: `/readyz` answers 503 `draining`, so that a load balancer that probes
//! readiness takes it out, while every other request is still served (HTTP/1.1 answers then
//! close their connection, so that keep-alive clients go elsewhere). At the first moment no
//! request is in flight, or after [`OPEN_AT_MOST`], the listeners close and the requests in
//! flight are finished: all within [`DRAIN_TIME`] of the signal.

use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use thread_local::ThreadLocal;

/// The longest a drain keeps the listeners open for new requests.
pub const OPEN_AT_MOST: Duration = Duration::from_secs(5);

/// The longest the requests in flight get once the listeners are closed
/// (`Listeners`' graceful stop).
pub const FINISH_AT_MOST: Duration = Duration::from_secs(25);

/// The longest a drain takes, from the signal to the end.
pub const DRAIN_TIME: Duration = Duration::from_secs(30);

const _: () = assert!(OPEN_AT_MOST.as_secs() + FINISH_AT_MOST.as_secs() == DRAIN_TIME.as_secs());

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

    /// Whether SIGTERM (or SIGINT) came: readiness says 503, connections close after their
    /// answer.
    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Requests in flight on every worker.
    fn in_flight(&self) -> usize {
        (self.in_flight.iter())
            .map(|count| count.load(Ordering::Acquire))
            .sum()
    }

    /// Starts draining; completes at the first moment no request is in flight, or `open`
    /// after it started.
    pub async fn quiet(&self, open: Duration) {
        self.draining.store(true, Ordering::Relaxed);
        let deadline = Instant::now() + open;
        while self.in_flight() > 0 && Instant::now() < deadline {
            actix_web::rt::time::sleep(LOOK_EVERY).await;
        }
    }
}

/// What drains at the first SIGTERM or SIGINT, then stops `server` gracefully (the requests in
/// flight get [`FINISH_AT_MOST`]). A second signal, or SIGQUIT, ends the process at once
/// (exit status 1). The handlers are installed here, before the future is first polled (a
/// signal that comes meanwhile waits for it).
pub fn on_signals(
    server: actix_web::dev::ServerHandle,
    drain: std::sync::Arc<Drain>,
) -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let (mut term, mut int, mut quit) = (
        signal(SignalKind::terminate())?,
        signal(SignalKind::interrupt())?,
        signal(SignalKind::quit())?,
    );
    Ok(async move {
        let mut quit = std::pin::pin!(async move {
            quit.recv().await;
        });
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
            () = &mut quit => at_once(),
        }
        tracing::info!(
            "draining: readiness answers 503 until no request is in flight ({} s at most), \
             then the listeners close",
            OPEN_AT_MOST.as_secs()
        );
        let ended = async {
            drain.quiet(OPEN_AT_MOST).await;
            tracing::info!("closing the listeners and finishing the requests in flight");
            server.stop(true).await;
        };
        tokio::select! {
            () = ended => {}
            _ = term.recv() => at_once(),
            _ = int.recv() => at_once(),
            () = &mut quit => at_once(),
        }
    })
}

/// The end of a drain cut short: what is in flight is dropped.
fn at_once() -> ! {
    tracing::warn!("stopping at once: a second signal (or SIGQUIT) came while draining");
    crate::log_buffer::flush_log();
    std::process::exit(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[actix_web::test]
    async fn a_drain_ends_when_the_last_request_in_flight_ends_or_at_its_bound() {
        let drain = std::sync::Arc::new(Drain::default());
        assert!(!drain.draining());
        let (entered, wait) = std::sync::mpsc::channel();
        let outside = drain.clone();
        let other_thread = std::thread::spawn(move || {
            let request = outside.enter();
            entered.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(200));
            drop(request);
        });
        wait.recv().unwrap();
        let here = drain.enter();
        assert_eq!(drain.in_flight(), 2);
        drop(here);
        let started = Instant::now();
        drain.quiet(Duration::from_secs(10)).await;
        assert!(drain.draining());
        assert_eq!(drain.in_flight(), 0);
        assert!(started.elapsed() < Duration::from_secs(5));
        other_thread.join().unwrap();
        // A request that never ends holds the listeners open no longer than asked.
        let _stuck = drain.enter();
        let started = Instant::now();
        drain.quiet(Duration::from_millis(100)).await;
        assert!(started.elapsed() >= Duration::from_millis(100));
        assert_eq!(drain.in_flight(), 1);
    }
}
