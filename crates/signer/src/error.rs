//! What stops the plugin: one sentence each, which `registry signer` prints before it exits 1.

use std::path::PathBuf;

/// Why the plugin cannot serve.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SignerError {
    /// Another process serves the socket's path.
    #[error("another process is serving {}: stop it, or give another --socket", path.display())]
    AlreadyServed {
        /// The socket's path.
        path: PathBuf,
    },
    /// The path exists and is not a socket: the plugin replaces only a stale socket.
    #[error("{} exists and is not a socket: remove it, or give another --socket", path.display())]
    NotASocket {
        /// The path.
        path: PathBuf,
    },
    /// The socket could not be created.
    #[error("cannot create the socket {}: {reason}", path.display())]
    Socket {
        /// The socket's path.
        path: PathBuf,
        /// Why, as the system says.
        reason: String,
    },
    /// The termination signals could not be listened to.
    #[error("cannot listen to SIGTERM and SIGINT: {reason}")]
    Signals {
        /// Why, as the system says.
        reason: String,
    },
    /// The gRPC server stopped on an error.
    #[error("the gRPC server stopped: {reason}")]
    Serve {
        /// Why, with its causes.
        reason: String,
    },
}
