//! Wiring: open the store, warm the caches, start the HTTP server and the background tasks.

use crate::background;
use crate::caller::Gate;
use crate::connections::ConnectionLimit;
use crate::custom_domains::CustomDomains;
use crate::listeners::{self, Listeners};
use crate::problem;
use crate::routes;
use crate::settings::Settings;
use crate::state::AppState;
use crate::system::SystemClock;
use crate::tls;
use actix_web::dev::ServerHandle;
use actix_web::middleware;
use actix_web::{web, App};
use anyhow::Context;
use registry_domain::issuer::Issuers;
use registry_domain::ports::{Clock, IdentityTokenVerifier};
use registry_oidc::{OidcConfig, OidcVerifier};
use registry_store::Store;
use std::net::SocketAddr;
use std::sync::Arc;

/// Opens the database named by a URL for the server and applies pending migrations.
pub fn open_store(url: &str) -> anyhow::Result<Store> {
    migrated(Store::connect(url), url)
}

/// [`open_store`] for `registry serve`: with the read replica `read_url` names, if any, read
/// while it lags at most `max_lag` behind.
fn open_serving_store(
    url: &str,
    read_url: Option<&str>,
    max_lag: std::time::Duration,
) -> anyhow::Result<Store> {
    let Some(read_url) = read_url.filter(|u| !u.trim().is_empty()) else {
        return open_store(url);
    };
    migrated(
        Store::connect_with_read_replica(url, read_url, max_lag),
        url,
    )
}

/// The serving store, once its database answers. A PostgreSQL server that cannot be reached (a
/// replica started before its database, or during an outage) is tried again every few seconds,
/// while the listener answers 503 (docs/api.md, "Operations"), as a running replica rides out
/// an outage; any other failure (a SQLite file that cannot be opened, a migration that fails)
/// stops the start.
async fn store_once_answering(settings: &Settings) -> anyhow::Result<Store> {
    let url = settings.database.database_url.clone();
    let read_url = settings.database_read_url.clone();
    let max_lag = std::time::Duration::from_secs(settings.read_replica_max_lag_seconds);
    let mut wait = std::time::Duration::from_secs(1);
    loop {
        let (url, read_url) = (url.clone(), read_url.clone());
        let opened = registry_replica::blocking(move || {
            open_serving_store(&url, read_url.as_deref(), max_lag)
        })
        .await?;
        match opened {
            Err(error) if unreachable_postgres(&error) => {
                tracing::warn!(
                    error = format!("{error:#}"),
                    retry_in_seconds = wait.as_secs(),
                    "the database does not answer: trying again"
                );
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(std::time::Duration::from_secs(10));
            }
            opened => return opened,
        }
    }
}

/// Whether opening the store failed because a PostgreSQL server did not answer. One that
/// answered with a refusal no wait will change (a password, a role or a database that is not
/// there, a host name that does not resolve) stops the start, so that the mistake shows.
fn unreachable_postgres(error: &anyhow::Error) -> bool {
    const SETTLED: [&str; 4] = [
        "authentication failed",
        "does not exist",
        "no pg_hba.conf entry",
        "could not translate host name",
    ];
    match error.downcast_ref::<registry_store::SetupError>() {
        Some(registry_store::SetupError::Unreachable {
            backend: "postgres",
            reason,
        }) => !SETTLED.iter().any(|settled| reason.contains(settled)),
        _ => false,
    }
}

/// Runs a command of the command line on the registry database a URL names (its pending
/// migrations applied first), then closes the store (see [`Store::close`]) whatever the
/// command's outcome. Never creates a database: a SQLite file that does not exist, or a
/// database without the registry's tables, is an error naming the URL.
pub fn with_command_store<T>(
    url: &str,
    command: impl FnOnce(&Store) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let store = migrated(Store::connect_existing(url), url)?;
    let outcome = command(&store);
    store.close();
    outcome
}

/// `registry migrate`: applies the pending migrations to the database a URL names, creating a
/// SQLite file that does not exist; how many were applied.
pub fn migrate(url: &str) -> anyhow::Result<usize> {
    let store = opened(Store::connect_for_command(url), url)?;
    let applied = store.migrate().context("cannot apply database migrations");
    store.close();
    applied
}

/// `registry migrate --check`: the migrations not applied yet to the database a URL names,
/// without changing or creating anything (see [`Store::pending_migrations`]).
pub fn pending_migrations(url: &str) -> anyhow::Result<Vec<String>> {
    opened(Store::pending_migrations(url), url)
}

/// What opening the database a URL names gave, its failure said with the URL and the setting
/// it came from.
fn opened<T>(connected: Result<T, registry_store::SetupError>, url: &str) -> anyhow::Result<T> {
    connected.with_context(|| {
        format!(
            "cannot open the database {} (--database-url, REGISTRY_DATABASE_URL)",
            redact(url)
        )
    })
}

fn migrated(
    connected: Result<Store, registry_store::SetupError>,
    url: &str,
) -> anyhow::Result<Store> {
    let store = opened(connected, url)?;
    if let Err(error) = store.migrate() {
        store.close();
        return Err(error).context("cannot apply database migrations");
    }
    Ok(store)
}

/// A database URL without its password, for messages: the one in its user part (which ends,
/// as libpq reads it, at the first `@` before the path), and any query parameter whose name
/// ends with `password` (libpq's `?password=`, `?sslpassword=`).
pub fn redact(url: &str) -> String {
    let Some(scheme) = url.find("://").map(|at| at + 3) else {
        return url.to_owned();
    };
    let after = &url[scheme..];
    let authority = &after[..after.find('/').unwrap_or(after.len())];
    let (user, rest) = match authority.find('@') {
        Some(at) => match after[..at].split_once(':') {
            Some((user, _)) => (format!("{user}:***"), &after[at..]),
            None => (after[..at].to_owned(), &after[at..]),
        },
        None => (String::new(), after),
    };
    let rest = match rest.split_once('?') {
        Some((place, query)) => {
            let secret = |name: &str| name.to_ascii_lowercase().ends_with("password");
            let parameters: Vec<String> = (query.split('&'))
                .map(|parameter| match parameter.split_once('=') {
                    Some((name, _)) if secret(name) => format!("{name}=***"),
                    _ => parameter.to_owned(),
                })
                .collect();
            format!("{place}?{}", parameters.join("&"))
        }
        None => rest.to_owned(),
    };
    format!("{}{user}{rest}", &url[..scheme])
}

/// Runs the server until SIGTERM or SIGINT, then finishes in-flight requests: `registry serve`,
/// on `REGISTRY_LISTEN` and the system clock.
pub async fn serve(settings: Settings) -> anyhow::Result<()> {
    let listen = Listen::Address(settings.listen.clone());
    let running = launch(settings, listen, Injected::none()).await?;
    let addrs = running.addrs.clone();
    // Installed before the line below: tests and scripts read it to learn a port chosen with
    // `:0`, and may send SIGTERM as soon as they have it.
    let drain = crate::drain::on_signals(running.handle(), running.drain.clone())
        .context("cannot handle SIGTERM and SIGINT")?;
    actix_web::rt::spawn(drain);
    actix_web::rt::spawn(async move {
        for (addr, scheme) in addrs {
            println!("registry listening on {scheme}://{addr}");
        }
    });
    running.stopped().await
}

/// What a program that runs the server in its own process may give it in place of the real
/// thing (the tests: a clock they move, a verifier of their own).
pub struct Injected {
    /// Where time comes from.
    pub clock: Arc<dyn Clock>,
    /// What verifies identity tokens; `None`: the OIDC adapter, as `registry serve` has.
    pub verifier: Option<Arc<dyn IdentityTokenVerifier>>,
}

impl std::fmt::Debug for Injected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Injected")
            .field("verifier", &self.verifier)
            .finish_non_exhaustive()
    }
}

impl Injected {
    /// The system clock and the OIDC adapter.
    pub fn none() -> Self {
        Self {
            clock: Arc::new(SystemClock),
            verifier: None,
        }
    }
}

/// Starts the server inside another program: on a listener already bound, with what that
/// program injects, deaf to signals (stop it with [`Running::handle`]). `settings.listen` is not
/// used. Call it inside an actix `System` (the background tasks are spawned on the current
/// one), then await [`Running::stopped`] there: the server serves while that future is polled.
pub async fn start(
    settings: Settings,
    listener: std::net::TcpListener,
    injected: Injected,
) -> anyhow::Result<Running> {
    launch(settings, Listen::Listener(listener), injected).await
}

/// A started server.
pub struct Running {
    server: actix_web::dev::Server,
    store: Store,
    addrs: Vec<(SocketAddr, &'static str)>,
    drain: Arc<crate::drain::Drain>,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running")
            .field("addrs", &self.addrs)
            .finish_non_exhaustive()
    }
}

impl Running {
    /// The addresses it listens on, each with its scheme (`http`, `https`).
    pub fn addrs(&self) -> &[(SocketAddr, &'static str)] {
        &self.addrs
    }

    /// What stops it (`stop(true)` finishes in-flight requests first, for up to 25 s: the
    /// drain's `FINISH_AT_MOST`).
    pub fn handle(&self) -> ServerHandle {
        self.server.handle()
    }

    /// Serves until stopped, then closes the store.
    pub async fn stopped(self) -> anyhow::Result<()> {
        let ran = self.server.await.context("server failed");
        self.store.close();
        ran?;
        tracing::info!("registry stopped");
        Ok(())
    }
}

/// Where the server listens.
enum Listen {
    /// An address to bind (actix binds it: every address it resolves to, its backlog).
    Address(String),
    /// A listener bound already.
    Listener(std::net::TcpListener),
}

async fn launch(settings: Settings, listen: Listen, injected: Injected) -> anyhow::Result<Running> {
    problem::set_base_url(settings.base());
    // Everything that can be checked without the database is, first: the settings that are
    // parsed further, the certificate, and the listeners (a port in use is reported before
    // the database is touched, and nothing is migrated by a server that cannot serve).
    let issuers = Issuers::new(&settings.issuer_url_template, &settings.base_url)?;
    settings.trusted_proxy_networks()?;
    settings.metrics_allow_networks()?;
    settings.check_fetch_log_token()?;
    settings.check_data_key()?;
    settings.check_read_url()?;
    settings.check_domain_settings()?;
    settings.purger()?;
    let certificate = tls::certificate(&settings, &issuers.names_served())?;
    let custom_domains = CustomDomains::from_settings(&settings, certificate.as_ref())?;
    let at = match &listen {
        Listen::Address(address) => address.clone(),
        Listen::Listener(listener) => format!("{:?}", listener.local_addr()),
    };
    let bound = match listen {
        Listen::Address(address) => listeners::bind(&address),
        Listen::Listener(listener) => Ok(vec![listener]),
    }
    .with_context(|| format!("cannot listen on {at} (REGISTRY_LISTEN)"))?;
    let redirecting = match &settings.http_redirect_listen {
        Some(plain) => listeners::bind(plain)
            .with_context(|| format!("cannot listen on {plain} (REGISTRY_HTTP_REDIRECT_LISTEN)"))?,
        None => Vec::new(),
    };
    let tls = certificate.clone().map(registry_tls::server_config);
    let starting = crate::starting::Starting::serve(&bound, tls.as_ref(), &settings)
        .context("cannot serve on the listener")?;

    let store = store_once_answering(&settings).await?;
    let verifier = OidcVerifier::new(
        OidcConfig {
            allow_insecure_issuers: settings.oidc_allow_insecure_issuers,
            ..OidcConfig::default()
        },
        Arc::new(crate::system::SystemTicks),
    )
    .context("cannot build the OIDC verifier")?;
    log_trust_roots();
    let workers = settings.workers.map_or_else(
        || std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get),
        usize::from,
    );
    let identity = injected
        .verifier
        .unwrap_or_else(|| Arc::new(verifier.clone()));
    let state = web::Data::new(AppState::new(
        settings,
        (issuers, certificate.clone(), custom_domains),
        Arc::new(store.clone()),
        (verifier, identity),
        injected.clock,
    )?);
    state
        .replica
        .reload_everything()
        .await
        .context("cannot load the service accounts")?;

    let shared = state.clone();
    let connections = ConnectionLimit::new(
        state.settings.max_connections_per_address,
        state.trusted_proxies.clone(),
    );
    // Run once per worker (and listener): each worker's handles are its own allocations, so
    // the clone every request's extractors make of them writes no line another worker writes.
    let app = move || {
        let app_state = web::Data::new(AppState::clone(&shared));
        let gate = web::Data::new(Gate {
            auth: shared.auth.clone(),
            trusted_proxies: shared.trusted_proxies.clone(),
            fetch_log_token: shared.settings.fetch_log_token.clone(),
        });
        App::new()
            .app_data(app_state)
            // What the caller arguments take by themselves (`caller`).
            .app_data(gate)
            // A query string the route cannot read is a problem like any other bad input
            // (actix answers plain text by itself).
            .app_data(web::QueryConfig::default().error_handler(|error, _| {
                // The parser's own words, without actix's "Query deserialize error" before them.
                let why = match error {
                    actix_web::error::QueryPayloadError::Deserialize(why) => why.to_string(),
                    other => other.to_string(),
                };
                problem::ApiError::BadRequest(format!("query string: {why}")).into()
            }))
            .wrap(middleware::from_fn(crate::way_in::way_in))
            .configure(routes::configure)
            .default_service(web::to(routes::not_found))
    };
    starting.stop().await;
    let server = Listeners::new(app, connections, workers);
    let server = (server.serving(bound, tls.as_ref())).context("cannot serve on the listener")?;
    let server = redirecting
        .into_iter()
        .try_fold(server, |server, listener| server.plain(listener, true))
        .context("cannot serve on the redirecting listener")?;
    let addrs = server.addrs().to_vec();
    let server = server.run();
    tracing::info!(
        issuers = state.replica.hosting.in_memory(),
        trusted_issuers = state.replica.directory.trusted_issuers(),
        workers,
        "registry started"
    );
    actix_web::rt::spawn(background::follow_changes(state.clone()));
    actix_web::rt::spawn(background::reap_expired(state.clone()));
    actix_web::rt::spawn(background::flush_fetches(state.clone()));
    actix_web::rt::spawn(background::share_rate_counts(state.clone()));
    actix_web::rt::spawn(background::step_signing(state.clone()));
    actix_web::rt::spawn(background::purge_changes(state.clone()));
    actix_web::rt::spawn(crate::domain_worker::work(state.clone()));
    actix_web::rt::spawn(crate::domain_worker::install_certificates(state.clone()));
    Ok(Running {
        server,
        store,
        addrs,
        drain: state.drain.clone(),
    })
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
        // Plain values (a path, a list of paths), never Rust's debug notation of them.
        let dirs: Vec<String> = roots.dirs.iter().map(|d| d.display().to_string()).collect();
        tracing::info!(
            file = roots.file.as_ref().map(|f| tracing::field::display(f.display())),
            dirs = %dirs.join(", "),
            "TLS trusts the certificate authorities found here"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn a_start_waits_for_a_database_that_does_not_answer_not_for_one_that_refuses() {
        let opening = |reason: &str| {
            let error = registry_store::SetupError::Unreachable {
                backend: "postgres",
                reason: reason.to_owned(),
            };
            super::unreachable_postgres(&anyhow::Error::new(error).context("opening"))
        };
        assert!(opening(
            "connection to server at \"127.0.0.1\", port 1 failed: Connection refused"
        ));
        assert!(opening("server closed the connection unexpectedly"));
        assert!(!opening(
            "FATAL:  password authentication failed for user \"registry\""
        ));
        assert!(!opening("FATAL:  database \"registry\" does not exist"));
        assert!(!opening("could not translate host name \"db\" to address"));
        let sqlite = registry_store::SetupError::Unreachable {
            backend: "sqlite",
            reason: "unable to open database file".to_owned(),
        };
        assert!(!super::unreachable_postgres(&anyhow::Error::new(sqlite)));
    }

    #[test]
    fn a_database_urls_password_is_masked_in_every_form() {
        assert_eq!(
            redact("postgres://registry:S3cret@db:5432/r?sslmode=require"),
            "postgres://registry:***@db:5432/r?sslmode=require"
        );
        assert_eq!(
            redact("postgres://registry@db/r?password=S3cret&sslmode=require&sslpassword=k"),
            "postgres://registry@db/r?password=***&sslmode=require&sslpassword=***"
        );
        assert_eq!(redact("sqlite://registry.db"), "sqlite://registry.db");
        assert_eq!(
            redact("postgres://db/r?PASSWORD=x"),
            "postgres://db/r?PASSWORD=***"
        );
        // A password holding `?`, a query holding `@`.
        assert_eq!(
            redact("postgres://registry:S3c?ret@db/r?sslmode=require"),
            "postgres://registry:***@db/r?sslmode=require"
        );
        assert_eq!(
            redact("postgres://registry@db/r?password=p@ss"),
            "postgres://registry@db/r?password=***"
        );
        assert_eq!(
            redact("postgres://db/r?user=svc@tenant&password=S3cret"),
            "postgres://db/r?user=svc@tenant&password=***"
        );
    }
}
