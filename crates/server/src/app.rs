//! Wiring: open the store, warm the caches, start the HTTP server and the background tasks.

use crate::adapters::{ShiftedClock, SystemClock};
use crate::background;
use crate::body;
use crate::connections::{self, ConnectionLimit};
use crate::directory;
use crate::hosting;
use crate::observe::observe;
use crate::problem;
use crate::routes;
use crate::settings::Settings;
use crate::state::AppState;
use actix_web::{guard, middleware, web, App, HttpServer};
use anyhow::Context;
use registry_domain::ports::{Clock, Storage};
use registry_oidc::{OidcConfig, OidcVerifier};
use registry_store::Store;
use std::sync::Arc;

/// Opens the database named by a URL for the server and applies pending migrations.
pub fn open_store(url: &str) -> anyhow::Result<Store> {
    migrated(Store::connect(url), url)
}

/// Runs a command of the command line on the database named by a URL (migrated first), then
/// closes the store (see [`Store::close`]) whatever the command's outcome.
pub fn with_command_store<T>(
    url: &str,
    command: impl FnOnce(&Store) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let store = migrated(Store::connect_for_command(url), url)?;
    let outcome = command(&store);
    store.close();
    outcome
}

fn migrated(
    connected: Result<Store, registry_store::SetupError>,
    url: &str,
) -> anyhow::Result<Store> {
    let store = connected.with_context(|| format!("cannot open the database {}", redact(url)))?;
    if let Err(error) = store.migrate() {
        store.close();
        return Err(error).context("cannot apply database migrations");
    }
    Ok(store)
}

/// A database URL without its password, for messages.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &url[scheme + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// Runs the server until SIGTERM or SIGINT, then finishes in-flight requests.
pub async fn serve(settings: Settings) -> anyhow::Result<()> {
    problem::set_base_url(settings.base());
    let url = settings.database.database_url.clone();
    let store = web::block(move || open_store(&url)).await??;
    let verifier = OidcVerifier::new(OidcConfig {
        allow_insecure_issuers: settings.oidc_allow_insecure_issuers,
        ..OidcConfig::default()
    })
    .context("cannot build the OIDC verifier")?;
    log_trust_roots();
    let workers = settings.workers.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get)
    });
    let listen = settings.listen.clone();
    let clock: Arc<dyn Clock> = match &settings.test_clock_file {
        Some(path) => {
            tracing::warn!(file = %path.display(), "the clock is shifted by a test file");
            Arc::new(ShiftedClock::new(path.clone()))
        }
        None => Arc::new(SystemClock),
    };
    let storage: Arc<dyn Storage> = Arc::new(store.clone());
    let state = web::Data::new(AppState::new(settings, storage, verifier, clock)?);

    directory::reload_everything(&state)
        .await
        .context("cannot load the published documents and the service accounts")?;

    let app_state = state.clone();
    let connections = ConnectionLimit::new(
        state.settings.max_connections_per_address,
        state.trusted_proxies.clone(),
    );
    let server = HttpServer::new(move || {
        let hosted_state = app_state.clone();
        App::new()
            .app_data(app_state.clone())
            .wrap(middleware::from_fn(body::deadline))
            .wrap(middleware::from_fn(observe))
            .wrap(middleware::from_fn(connections::admitted))
            .service(
                web::scope("")
                    .guard(guard::fn_guard(move |ctx| {
                        hosting::hosted_request(&hosted_state, ctx.head())
                    }))
                    .default_service(web::to(hosting::serve)),
            )
            .configure(routes::configure)
            .default_service(web::to(routes::not_found))
    })
    .workers(workers)
    .shutdown_timeout(30)
    .on_connect(move |io, data| connections.on_connect(io, data))
    .bind(&listen)
    .with_context(|| format!("cannot listen on {listen}"))?;
    let addrs = server.addrs();
    let running = server.run();
    // Tests and scripts read this line to learn a port chosen with `:0`, and may send SIGTERM
    // as soon as they have it. The server installs its signal handlers when first polled, in
    // the `await` below, before this task gets its turn.
    actix_web::rt::spawn(async move {
        for addr in addrs {
            println!("registry listening on http://{addr}");
        }
    });
    tracing::info!(
        issuers = state.hosting.len(),
        trusted_issuers = state.directory.trusted_issuers(),
        workers,
        "registry started"
    );
    actix_web::rt::spawn(background::follow_changes(state.clone()));
    actix_web::rt::spawn(background::reap_expired(state.clone()));
    let ran = running.await.context("server failed");
    store.close();
    ran?;
    tracing::info!("registry stopped");
    Ok(())
}

/// Says which certificate authorities TLS to issuers trusts: the OpenSSL inside the binary
/// uses the host's bundle, found at start, and a host without one fails every https issuer.
fn log_trust_roots() {
    let roots = registry_oidc::trust_roots();
    if roots.is_empty() {
        tracing::warn!(
            "no certificate authorities found on this host: https issuers cannot be verified \
             (install CA certificates, or set SSL_CERT_FILE or SSL_CERT_DIR)"
        );
    } else {
        tracing::info!(
            file = ?roots.file,
            dirs = ?roots.dirs,
            "TLS trusts the certificate authorities found here"
        );
    }
}
