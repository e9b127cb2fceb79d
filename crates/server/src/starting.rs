//! What answers while the replica starts (docs/api.md, "Readiness"). The listeners are bound
//! before the database is touched; until the migrations are applied and what the replica serves
//! is loaded, a stand-in serves them: `/healthz` 200 (the process lives: a liveness probe does
//! not restart a replica migrating a large database) and everything else, `/readyz` first, 503
//! `unavailable` with `Retry-After: 1`. The plain listener beside HTTPS waits (its redirects
//! need the issuers the replica loads).

use crate::connections::ConnectionLimit;
use crate::listeners::Listeners;
use crate::problem::ApiError;
use crate::settings::Settings;
use actix_tls::accept::rustls_0_23::reexports::ServerConfig;
use actix_web::dev::ServerHandle;
use actix_web::{middleware, web, App, HttpResponse};
use std::net::TcpListener;

/// The stand-in on the replica's listeners, until [`Starting::stop`] (or dropped).
#[derive(Debug)]
pub struct Starting {
    handle: ServerHandle,
}

impl Starting {
    /// Serves the stand-in on copies of `bound` (HTTPS with `tls`, if given), one worker.
    pub fn serve(
        bound: &[TcpListener],
        tls: Option<&ServerConfig>,
        settings: &Settings,
    ) -> anyhow::Result<Self> {
        let limit = ConnectionLimit::new(
            settings.max_connections_per_address,
            settings.trusted_proxy_networks()?,
        );
        let app = || {
            App::new()
                .wrap(middleware::from_fn(crate::way_in::way_in))
                .route("/healthz", web::get().to(crate::routes::ops::healthz))
                .default_service(web::to(starting))
        };
        let copies =
            (bound.iter().map(TcpListener::try_clone)).collect::<std::io::Result<Vec<_>>>()?;
        let server = Listeners::new(app, limit, 1).serving(copies, tls)?.run();
        let handle = server.handle();
        actix_web::rt::spawn(server);
        Ok(Self { handle })
    }

    /// Stops the stand-in (its connections are closed: their clients ask again, of the
    /// replica), so that the replica's server takes the listeners.
    pub async fn stop(self) {
        self.handle.stop(false).await;
    }
}

impl Drop for Starting {
    fn drop(&mut self) {
        // A start that failed: the stand-in goes with it (sent at once, not awaited).
        drop(self.handle.stop(false));
    }
}

/// Every request but `/healthz`'s while the replica starts.
async fn starting() -> Result<HttpResponse, ApiError> {
    Err(ApiError::Starting)
}
