//! TLS for the registry's listener (issue 30): the certificate chain and key of two PEM files
//! (`REGISTRY_TLS_CERT`, `REGISTRY_TLS_KEY`), checked at start, and re-read when they change.
//!
//! A renewal (cert-manager rewriting a mounted secret, certbot a live directory) changes the
//! files under a running server; [`Reloading::watch`] sees it within a second and the
//! next handshake gets the new chain. Connections already open keep theirs: nothing restarts,
//! nothing is dropped. A file that does not load (half-written, a key of another certificate)
//! keeps the chain that works and logs one line about it.
//!
//! No OpenSSL on this path: rustls with the `ring` provider, TLS 1.3 and 1.2.

mod expiry;
mod files;
mod watch;

pub use expiry::not_after;
pub use files::CertificateFiles;
pub use watch::Reloading;

use std::path::PathBuf;

/// Why a certificate could not be served.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read the TLS {what} {}: {cause}", path.display())]
    Read {
        /// `certificate` or `key`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why (in the message, not as a source: the message is the whole sentence).
        cause: std::io::Error,
    },
    /// A file holds no PEM block of the kind it should, or a broken one.
    #[error("the TLS {what} {} {problem}", path.display())]
    Pem {
        /// `certificate` or `key`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// The key is not the certificate's, or rustls cannot sign with it.
    #[error("the TLS key {} {problem}", key.display())]
    Key {
        /// The key file.
        key: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
}

/// The server side of TLS for an actix or any rustls listener: TLS 1.3 and 1.2, the `ring`
/// provider, the certificate `resolver` picks at each handshake. ALPN is the listener's
/// business (actix adds `h2` and `http/1.1`).
pub fn server_config(resolver: std::sync::Arc<Reloading>) -> rustls::ServerConfig {
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .expect("ring supports TLS 1.3 and 1.2")
        .with_no_client_auth()
        .with_cert_resolver(resolver)
}
