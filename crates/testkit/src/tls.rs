//! Certificates for HTTPS tests and benchmarks: a certificate authority made on the spot and
//! the server certificates it signs (rcgen), as PEM, as a public CA and an operator's files
//! would be.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use std::io;
use std::path::Path;

/// A certificate authority of the test's own: clients that are given [`TestCa::pem`] trust
/// what it signs, and nothing else does.
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa").finish_non_exhaustive()
    }
}

/// A server certificate and its key, as the two PEM files `REGISTRY_TLS_CERT` and
/// `REGISTRY_TLS_KEY` name (or nginx's `ssl_certificate` and `ssl_certificate_key`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerCertificate {
    /// The certificate, PEM.
    pub chain: String,
    /// Its private key (ECDSA P-256, PKCS#8), PEM.
    pub key: String,
    /// The certificate, DER: what a client receives in the handshake.
    pub der: Vec<u8>,
}

impl TestCa {
    /// A new root, named `name`, with an ECDSA P-256 key.
    pub fn new(name: &str) -> Self {
        let key = KeyPair::generate().expect("a CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let pem = params.self_signed(&key).expect("a CA certificate").pem();
        Self {
            issuer: Issuer::new(params, key),
            pem,
        }
    }

    /// The root certificate, PEM: what a client trusts.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// A server certificate for the DNS `names` (`*.` wildcards allowed), on a new key.
    pub fn server_certificate(&self, names: &[&str]) -> ServerCertificate {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let key = KeyPair::generate().expect("a server key");
        let mut params = CertificateParams::new(names).expect("server certificate names");
        params
            .distinguished_name
            .push(DnType::CommonName, "registry");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("a server certificate");
        ServerCertificate {
            chain: cert.pem(),
            key: key.serialize_pem(),
            der: cert.der().to_vec(),
        }
    }
}

impl ServerCertificate {
    /// Writes the certificate to `cert` and the key to `key`, in that order, each in place (as
    /// `cp` would: a reader may see either file half-written, or a key of the other pair).
    pub fn write(&self, cert: &Path, key: &Path) -> io::Result<()> {
        std::fs::write(cert, &self.chain)?;
        std::fs::write(key, &self.key)
    }
}
