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
/// provider, the certificate `resolver` picks at each handshake, and resumption. ALPN is the
/// listener's business (actix adds `h2` and `http/1.1`).
///
/// Resumption is by stateless tickets: the session sealed under a key only this process holds
/// (rustls' `Ticketer`: AEAD keys made here, replaced every 6 hours, the previous one still
/// opening tickets), so a client's next connection skips the certificate and its signature on
/// both sides, whatever the number of clients, at no memory per client. A TLS 1.3 resumption
/// still agrees a new ephemeral key (rustls serves `psk_dhe_ke` only), so a ticket key, were it
/// stolen, would decrypt no recorded traffic. Another replica does not know this one's tickets, and
/// its client gets a full handshake. Connection limits are unchanged: a resumed handshake is a
/// connection like any other.
pub fn server_config(resolver: std::sync::Arc<Reloading>) -> rustls::ServerConfig {
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .expect("ring supports TLS 1.3 and 1.2")
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    // Its only failure is the system's random numbers failing, which every handshake needs.
    config.ticketer = rustls::crypto::ring::Ticketer::new().expect("the system's random numbers");
    config
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::tests::{files_in, write_pair};
    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::crypto::CryptoProvider;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, HandshakeKind};
    use rustls::{ServerConnection, SignatureScheme};
    use std::sync::Arc;

    /// A client that takes any certificate: resumption is the question here, not the chain.
    #[derive(Debug)]
    struct AnyCertificate(Arc<CryptoProvider>);

    impl ServerCertVerifier for AnyCertificate {
        fn verify_server_cert(
            &self,
            _: &CertificateDer<'_>,
            _: &[CertificateDer<'_>],
            _: &ServerName<'_>,
            _: &[u8],
            _: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            Ok(ServerCertVerified::assertion())
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            let algorithms = &self.0.signature_verification_algorithms;
            rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            let algorithms = &self.0.signature_verification_algorithms;
            rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.0.signature_verification_algorithms.supported_schemes()
        }
    }

    /// A client of its own (its own session cache) speaking `version`.
    fn client(version: &'static rustls::SupportedProtocolVersion) -> Arc<ClientConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[version])
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
            .with_no_client_auth();
        Arc::new(config)
    }

    /// One connection, handshake and the tickets after it; how the handshake went.
    fn connect(client: &Arc<ClientConfig>, server: &Arc<rustls::ServerConfig>) -> HandshakeKind {
        let name = ServerName::try_from("registry.test").unwrap();
        let mut c = ClientConnection::new(client.clone(), name).unwrap();
        let mut s = ServerConnection::new(server.clone()).unwrap();
        while c.is_handshaking() || s.is_handshaking() || s.wants_write() || c.wants_write() {
            let mut wire = Vec::new();
            while c.wants_write() {
                c.write_tls(&mut wire).unwrap();
            }
            let mut read = wire.as_slice();
            while !read.is_empty() {
                s.read_tls(&mut read).unwrap();
                s.process_new_packets().unwrap();
            }
            let mut wire = Vec::new();
            while s.wants_write() {
                s.write_tls(&mut wire).unwrap();
            }
            let mut read = wire.as_slice();
            while !read.is_empty() {
                c.read_tls(&mut read).unwrap();
                c.process_new_packets().unwrap();
            }
        }
        c.handshake_kind().unwrap()
    }

    #[test]
    fn a_client_resumes_however_many_other_clients_came_meanwhile() {
        let (dir, files) = files_in("resume");
        write_pair(&dir, &["registry.test"]);
        let server = Arc::new(server_config(Reloading::new(files).unwrap()));
        for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
            let first = client(version);
            assert_eq!(connect(&first, &server), HandshakeKind::Full);
            // More clients than rustls' cache of sessions kept by the server holds (256): each
            // of their sessions would have pushed the first client's out.
            for _ in 0..300 {
                connect(&client(version), &server);
            }
            assert_eq!(
                connect(&first, &server),
                HandshakeKind::Resumed,
                "{version:?}"
            );
        }
    }
}
