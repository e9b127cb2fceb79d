//! The cluster's signing plugin (docs/api.md, "Managed signing"): kube-apiserver's external JWT
//! signer, the gRPC service `ExternalJWTSigner` of version `v1` (Kubernetes Enhancement Proposal
//! 740), served on a Unix socket and answered through the registry's API, so that the cluster's
//! service account tokens are signed by keys the registry holds and rotates. `registry signer
//! --service S --socket PATH` runs [`serve`].
//!
//! - `Sign` forwards the token's payload to `POST /services/{s}/sign` and answers the header and
//!   signature the registry made. The registry refusing (a 4xx: `invalid-claims`,
//!   `no-key-ready`, a policy without `tokens:sign`) is `INVALID_ARGUMENT`, with the problem's
//!   detail; a registry that cannot be reached or answers a 5xx is `UNAVAILABLE`, with the reason.
//! - `FetchKeys` answers from the plugin's copy of the keys that may verify the service's tokens:
//!   the managed keys in every state (`GET /services/{s}/signing`) and the current and retired
//!   keys of the service's other key sources (`GET /services/{s}/keys`), each as its DER
//!   SubjectPublicKeyInfo. The copy is read again every 10 s, and at once when `Sign` answers a
//!   `kid` it lacks; while the registry cannot be reached it answers the last copy, so
//!   kube-apiserver keeps verifying its tokens.
//! - `Metadata` answers the service's `maxTokenSeconds`, from the same copy.
//!
//! Claims and tokens are never logged.

#![warn(missing_docs)]

mod error;
mod jwk;
mod keys;
mod plugin;
mod relay;
mod socket;

/// The code generated from `proto/v1/api.proto` (package `v1` of `k8s.io/externaljwt`): the
/// messages, the server the plugin serves (`external_jwt_signer_server`) and the client
/// kube-apiserver's side speaks with (`external_jwt_signer_client`, for tests).
#[allow(missing_docs, missing_debug_implementations, clippy::all)]
pub mod proto {
    tonic::include_proto!("v1");
}

pub use error::SignerError;

use keys::KeyCopy;
use plugin::Plugin;
use proto::external_jwt_signer_server::ExternalJwtSignerServer;
use registry_client::RegistryApi;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::UnixListener;

/// How often the copy of the keys is read again from the registry.
const REFRESH_EVERY: Duration = Duration::from_secs(10);

/// How long the calls in flight may take once a termination signal came.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Serves kube-apiserver's `ExternalJWTSigner` for `service` on the Unix socket `socket`, through
/// the registry `api`, until the process receives SIGTERM or SIGINT; then it stops serving,
/// removes its socket and returns `Ok`.
///
/// The socket is created with mode 0600. A socket file with no process behind it is replaced;
/// one that another process serves is [`SignerError::AlreadyServed`], and a path that is not a
/// socket [`SignerError::NotASocket`]: the command prints the sentence and exits 1. The keys are
/// read once before serving; when that read fails the plugin logs why and serves anyway (see
/// [`Signer::bind`]).
pub async fn serve(api: RegistryApi, service: String, socket: PathBuf) -> Result<(), SignerError> {
    // Listened to first: a signal during the first read stops the plugin as cleanly as later.
    let signals = termination()?;
    let signer = Signer::bind(api, service, socket).await?;
    signer.serve_until(signals).await
}

/// A plugin bound to its socket and not serving yet: [`Signer::bind`], then
/// [`Signer::serve_until`]. [`serve`] is both, until a termination signal.
#[derive(Debug)]
pub struct Signer {
    listener: UnixListener,
    socket: socket::Bound,
    api: RegistryApi,
    service: String,
    keys: Arc<KeyCopy>,
}

impl Signer {
    /// Creates the socket `socket` (mode 0600; a stale socket file is replaced; one another
    /// process serves is [`SignerError::AlreadyServed`]), then reads `service`'s keys from the
    /// registry `api` once.
    ///
    /// A failed first read does not stop the plugin: it is logged, and the plugin serves anyway,
    /// its copy read again every 10 s. Until a read succeeds, `FetchKeys` and `Metadata` answer
    /// `UNAVAILABLE` (kube-apiserver retries them) and `Sign` works as soon as the registry
    /// answers. A plugin that exited instead would be restarted with a growing back-off, and
    /// the cluster would wait longer for the registry to come back.
    pub async fn bind(
        api: RegistryApi,
        service: String,
        socket: PathBuf,
    ) -> Result<Self, SignerError> {
        let (listener, socket) = socket::bind(&socket).await?;
        let keys = Arc::new(KeyCopy::new(api.clone(), service.clone()));
        match keys.refresh().await {
            Ok(()) => tracing::info!(service, "read the keys of the service from the registry"),
            Err(reason) => tracing::warn!(
                service,
                %reason,
                "cannot read the keys of the service from the registry: serving anyway, \
                 FetchKeys and Metadata are unavailable until a read succeeds"
            ),
        }
        Ok(Self {
            listener,
            socket,
            api,
            service,
            keys,
        })
    }

    /// The socket's path.
    pub fn socket(&self) -> &Path {
        self.socket.path()
    }

    /// Serves the gRPC service on the socket until `shutdown` completes, reading the keys again
    /// every 10 s meanwhile; then waits for the calls in flight (at most 2 s: kube-apiserver
    /// keeps its connection open, and would hold a graceful stop forever), removes the socket
    /// (when it is still this plugin's) and returns.
    pub async fn serve_until<F>(self, shutdown: F) -> Result<(), SignerError>
    where
        F: Future<Output = ()>,
    {
        let Self {
            listener,
            socket,
            api,
            service,
            keys,
        } = self;
        tracing::info!(service, socket = %socket.path().display(), "serving ExternalJWTSigner v1");
        let refresher = tokio::spawn(Arc::clone(&keys).keep_fresh(REFRESH_EVERY));
        let plugin = Plugin::new(api, service, keys);
        // kube-apiserver keeps its connection open: a graceful shutdown alone would wait for it
        // forever. The calls in flight get a grace, then the plugin stops regardless.
        let (stopping, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tonic::transport::Server::builder().serve_with_incoming_shutdown(
            ExternalJwtSignerServer::new(plugin),
            tokio_stream::StreamExt::map(
                tokio_stream::wrappers::UnixListenerStream::new(listener),
                |accepted| accepted.map(relay::relayed),
            ),
            async move {
                shutdown.await;
                let _ = stopping.send(());
            },
        );
        let grace_over = async move {
            if stopped.await.is_ok() {
                tokio::time::sleep(SHUTDOWN_GRACE).await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        let served = tokio::select! {
            served = serving => served,
            () = grace_over => {
                tracing::info!("stopping: calls still open after the grace, closed");
                Ok(())
            }
        };
        refresher.abort();
        socket.remove();
        served.map_err(|e| SignerError::Serve {
            reason: registry_client::error_chain(&e),
        })
    }
}

/// Completes at the first SIGTERM or SIGINT.
fn termination() -> Result<impl Future<Output = ()>, SignerError> {
    use tokio::signal::unix::{signal, SignalKind};
    let listen = |kind| {
        signal(kind).map_err(|e| SignerError::Signals {
            reason: e.to_string(),
        })
    };
    let (mut term, mut int) = (
        listen(SignalKind::terminate())?,
        listen(SignalKind::interrupt())?,
    );
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        tracing::info!("stopping: a termination signal");
    })
}

#[cfg(test)]
mod testing;
