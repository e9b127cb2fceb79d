//! The listeners, and what serves a connection accepted on each: actix-server's, put together
//! here rather than by actix-web's `HttpServer`, whose HTTPS listener starts a connection's TLS
//! handshake before any hook of its own runs. Here the HTTPS listener counts a connection
//! towards its address's limit as it is accepted ([`connections::admitted_first`]), so that
//! connections that never finish a handshake hold their own address's places and no one
//! else's. The rest is what `HttpServer` would build: the same defaults, the app on every
//! listener, HTTP/2 offered by ALPN, in-flight requests finished on a graceful shutdown.

use crate::connections;
use crate::connections::ConnectionLimit;
use actix_http::body::MessageBody;
use actix_http::{HttpService, Request, Response, TlsAcceptorConfig};
use actix_server::{GracefulShutdownSignal, Server, ServerBuilder};
use actix_service::{map_config, IntoServiceFactory, Service, ServiceFactory, ServiceFactoryExt};
use actix_web::dev::{AppConfig, ServiceRequest, ServiceResponse};
use actix_web::rt::net::TcpStream;
use actix_web::App;
use std::cell::Cell;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use std::{fmt, io};

/// How long a TLS handshake may take from the connection's acceptance. Longer than actix's
/// 3 s, for clients on slow or lossy links (a lost flight is sent again after 1 s, then 2 s):
/// a handshake that never finishes holds only its own address's places, so waiting for it
/// costs other clients nothing.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The handshakes a worker runs at once beside one address's most: actix's own bound (256 a
/// worker, all addresses together), which one address's connections, all in their handshake
/// and all on one worker, would otherwise fill.
const HANDSHAKES_BESIDE: u32 = 256;

/// `HttpServer`'s: the connections the kernel queues while the workers are busy.
const BACKLOG: i32 = 1024;

/// `HttpServer`'s: how long a connection's shutdown may take.
const DISCONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// The server being put together: its listeners so far, each with its scheme.
pub struct Listeners<F> {
    builder: ServerBuilder,
    app: F,
    limit: Arc<ConnectionLimit>,
    shutdown: GracefulShutdownSignal,
    addrs: Vec<(SocketAddr, &'static str)>,
}

impl<F> fmt::Debug for Listeners<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Listeners")
            .field("addrs", &self.addrs)
            .finish_non_exhaustive()
    }
}

impl<F, T, B> Listeners<F>
where
    F: Fn() -> App<T> + Send + Clone + 'static,
    T: ServiceFactory<
            ServiceRequest,
            Config = (),
            Response = ServiceResponse<B>,
            Error = actix_web::Error,
            InitError = (),
        > + 'static,
    B: MessageBody + 'static,
{
    /// A server of `app` (a new one for each worker of each listener) on `workers` workers,
    /// whose listeners count connections with `limit`. In-flight requests get
    /// [`crate::drain::FINISH_AT_MOST`] on a graceful stop. Signals are not actix's to handle:
    /// `registry serve` drains first ([`crate::drain`]).
    pub fn new(app: F, limit: Arc<ConnectionLimit>, workers: usize) -> Self {
        let builder = Server::build()
            .workers(workers)
            .shutdown_timeout(crate::drain::FINISH_AT_MOST.as_secs())
            .disable_signals();
        Self {
            shutdown: builder.graceful_shutdown_signal(),
            builder,
            app,
            limit,
            addrs: Vec::new(),
        }
    }

    /// Adds a plain-HTTP listener; on the one beside HTTPS (`redirects`), connections are
    /// marked for [`crate::tls::redirect`]. Connections are counted where HTTP starts
    /// ([`connections::on_connect`]): nothing comes before it.
    pub fn plain(mut self, listener: TcpListener, redirects: bool) -> io::Result<Self> {
        let addr = listener.local_addr()?;
        let (app, limit, shutdown) = (self.app.clone(), self.limit.clone(), self.shutdown.clone());
        self.builder = self
            .builder
            .listen(format!("http-{addr}"), listener, move || {
                let limit = limit.clone();
                let host = addr.to_string();
                let app = app().into_factory().map_err(|err| err.error_response());
                http(&shutdown)
                    .local_addr(addr)
                    .on_connect_ext(move |io: &TcpStream, data| {
                        connections::on_connect(&limit, redirects, io, data);
                    })
                    .finish(map_config(app, move |()| app_config(false, &host, addr)))
                    .tcp()
            })?;
        self.addrs.push((addr, "http"));
        Ok(self)
    }

    /// Adds the listeners of `REGISTRY_LISTEN`: HTTPS with `tls` when the registry has a
    /// certificate, else plain HTTP.
    pub fn serving(
        self,
        listeners: impl IntoIterator<Item = TcpListener>,
        tls: Option<&actix_tls::accept::rustls_0_23::reexports::ServerConfig>,
    ) -> io::Result<Self> {
        (listeners.into_iter()).try_fold(self, |server, listener| match tls {
            Some(tls) => server.https(listener, tls.clone()),
            None => server.plain(listener, false),
        })
    }

    /// Adds an HTTPS listener with `tls` (its certificate resolver, which follows renewals):
    /// a connection is admitted by its address before the handshake, which must then finish
    /// within [`HANDSHAKE_TIMEOUT`].
    pub fn https(
        mut self,
        listener: TcpListener,
        tls: actix_tls::accept::rustls_0_23::reexports::ServerConfig,
    ) -> io::Result<Self> {
        let addr = listener.local_addr()?;
        // Process-wide, read by each worker as it starts (actix's `max_connection_rate`).
        let per_worker = self.limit.max().saturating_add(HANDSHAKES_BESIDE);
        actix_tls::accept::max_concurrent_tls_connect(per_worker as usize);
        let (app, limit, shutdown) = (self.app.clone(), self.limit.clone(), self.shutdown.clone());
        self.builder = self
            .builder
            .listen(format!("https-{addr}"), listener, move || {
                let host = addr.to_string();
                let app = app().into_factory().map_err(|err| err.error_response());
                let handshake = TlsAcceptorConfig::default().handshake_timeout(HANDSHAKE_TIMEOUT);
                let served = http(&shutdown)
                    .finish(map_config(app, move |()| app_config(true, &host, addr)))
                    .rustls_0_23_with_config(tls.clone(), handshake);
                connections::admitted_first(limit.clone(), served)
            })?;
        self.addrs.push((addr, "https"));
        Ok(self)
    }

    /// The addresses listened on so far, each with its scheme.
    pub fn addrs(&self) -> &[(SocketAddr, &'static str)] {
        &self.addrs
    }

    /// Starts the workers; the server serves while the returned future is polled.
    pub fn run(self) -> Server {
        self.builder.run()
    }
}

/// `HttpServer`'s settings of a connection's HTTP, over TCP or TLS (`T`). Built on the worker
/// thread that serves the connections (the listener's factory runs there).
fn http<T, S, B>(shutdown: &GracefulShutdownSignal) -> actix_http::HttpServiceBuilder<T, S>
where
    S: ServiceFactory<Request, Config = ()>,
    S::Error: Into<Response<actix_http::body::BoxBody>> + 'static,
    S::Response: Into<Response<B>> + 'static,
    B: MessageBody + 'static,
    S::InitError: fmt::Debug,
    <S::Service as Service<Request>>::Future: 'static,
{
    let shutdown = WorkerShutdown::new(shutdown.clone());
    HttpService::build()
        .graceful_shutdown_signal(move || shutdown.notified())
        .client_disconnect_timeout(DISCONNECT_TIMEOUT)
}

/// One worker's view of the server's graceful shutdown. A connection polls its signal each time
/// it is polled, at least once a request; actix-server's signal is a `watch` channel shared by
/// every worker, whose poll locks one of a few mutexes that all workers take (on 16 cores, P1's
/// share of that poll grew sixfold from 1 to 8 workers). Here the worker's connections wait on
/// the worker's own `Notify`, and one task of the worker waits on the server's signal for them.
struct WorkerShutdown {
    server: GracefulShutdownSignal,
    /// The task that waits on the server's signal was started (at the first connection).
    waiting: Cell<bool>,
    /// The server's signal came: a connection made from now on drains at once.
    fired: Cell<bool>,
    connections: tokio::sync::Notify,
}

impl WorkerShutdown {
    fn new(server: GracefulShutdownSignal) -> Rc<Self> {
        Rc::new(Self {
            server,
            waiting: Cell::new(false),
            fired: Cell::new(false),
            connections: tokio::sync::Notify::new(),
        })
    }

    /// Resolves when the server starts a graceful shutdown (at once if it has).
    fn notified(self: &Rc<Self>) -> impl std::future::Future<Output = ()> + 'static {
        if !self.waiting.replace(true) {
            let worker = self.clone();
            actix_web::rt::spawn(async move {
                worker.server.notified().await;
                worker.fired.set(true);
                worker.connections.notify_waiters();
            });
        }
        let worker = self.clone();
        async move {
            // Made before `fired` is read: `notify_waiters` wakes every `Notified` made before
            // it, polled or not, so no signal falls between the two.
            let notified = worker.connections.notified();
            if !worker.fired.get() {
                notified.await;
            }
        }
    }
}

/// What the app is told of its listener, as `HttpServer` tells it: whether it is HTTPS, and
/// its address as the default host. actix-web builds it only for `HttpServer` and its test
/// server (this constructor, exempt from semantic versioning): an actix-web that drops it
/// fails to build here rather than telling an HTTPS app that it is plain.
fn app_config(secure: bool, host: &str, addr: SocketAddr) -> AppConfig {
    AppConfig::__priv_test_new(secure, host.to_owned(), addr)
}

/// Listeners bound to every address `address` resolves to, as `HttpServer::bind` binds them
/// (address reuse, its backlog); an error only when none could be bound.
pub fn bind(address: &str) -> io::Result<Vec<TcpListener>> {
    let mut bound = Vec::new();
    let mut failed = None;
    for addr in address.to_socket_addrs()? {
        match listener(addr) {
            Ok(listener) => bound.push(listener),
            Err(error) => failed = Some(error),
        }
    }
    match (bound.is_empty(), failed) {
        (true, Some(error)) => Err(error),
        (true, None) => Err(io::Error::other("the address resolves to nothing")),
        (false, _) => Ok(bound),
    }
}

fn listener(addr: SocketAddr) -> io::Result<TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}
