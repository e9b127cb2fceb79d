//! The two PEM files and what they hold.

use crate::TlsError;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::ParsedCertificate;
use rustls::sign::CertifiedKey;
use std::path::PathBuf;
use std::sync::Arc;

/// Where the certificate chain (leaf first, then intermediates) and its private key (PKCS#8,
/// PKCS#1 or SEC1) are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateFiles {
    /// The chain's PEM file.
    pub cert: PathBuf,
    /// The key's PEM file.
    pub key: PathBuf,
}

/// A chain and key that load, with the bytes they were read from.
#[derive(Debug, Clone)]
pub(crate) struct Served {
    pub(crate) key: Arc<CertifiedKey>,
    pub(crate) read: Contents,
}

/// The bytes of both files, compared to see a change.
pub(crate) type Contents = (Vec<u8>, Vec<u8>);

impl CertificateFiles {
    /// Reads and checks both files: at least one certificate, a key rustls can sign with, and
    /// that key the leaf certificate's.
    pub(crate) fn load(&self) -> Result<Served, TlsError> {
        self.parse(self.read()?)
    }

    pub(crate) fn read(&self) -> Result<Contents, TlsError> {
        let read = |what, path: &PathBuf| {
            std::fs::read(path).map_err(|cause| TlsError::Read {
                what,
                path: path.clone(),
                cause,
            })
        };
        Ok((read("certificate", &self.cert)?, read("key", &self.key)?))
    }

    pub(crate) fn parse(&self, read: Contents) -> Result<Served, TlsError> {
        let pem = |what, path: &PathBuf, problem: String| TlsError::Pem {
            what,
            path: path.clone(),
            problem,
        };
        let chain = CertificateDer::pem_slice_iter(&read.0)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| pem("certificate", &self.cert, format!("is not valid PEM ({e})")))?;
        if chain.is_empty() {
            let problem = "holds no CERTIFICATE block".to_owned();
            return Err(pem("certificate", &self.cert, problem));
        }
        let key = PrivateKeyDer::from_pem_slice(&read.1).map_err(|e| {
            pem(
                "key",
                &self.key,
                format!("holds no usable private key ({e})"),
            )
        })?;
        let provider = rustls::crypto::ring::default_provider();
        let key = CertifiedKey::from_der(chain, key, &provider).map_err(|e| TlsError::Key {
            key: self.key.clone(),
            problem: match e {
                rustls::Error::InconsistentKeys(_) => {
                    format!("is not the key of the certificate {}", self.cert.display())
                }
                other => format!("cannot be used ({other})"),
            },
        })?;
        Ok(Served {
            key: Arc::new(key),
            read,
        })
    }
}

/// Whether `key`'s leaf certificate is valid for the DNS name `host` (a wildcard covers one
/// label), as a client checking the name would find.
pub(crate) fn covers(key: &CertifiedKey, host: &str) -> bool {
    let (Ok(name), Some(leaf)) = (ServerName::try_from(host), key.cert.first()) else {
        return false;
    };
    ParsedCertificate::try_from(leaf)
        .is_ok_and(|leaf| rustls::client::verify_server_name(&leaf, &name).is_ok())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::path::Path;

    /// A fresh directory under the target dir and the two file names in it.
    pub(crate) fn files_in(name: &str) -> (PathBuf, CertificateFiles) {
        let dir = std::env::temp_dir().join(format!("tls-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let files = CertificateFiles {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
        };
        (dir, files)
    }

    /// A self-signed certificate for `names` and its key, written as tls.crt and tls.key.
    pub(crate) fn write_pair(dir: &Path, names: &[&str]) -> (String, String) {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let made = rcgen::generate_simple_self_signed(names).unwrap();
        let pair = (made.cert.pem(), made.signing_key.serialize_pem());
        std::fs::write(dir.join("tls.crt"), &pair.0).unwrap();
        std::fs::write(dir.join("tls.key"), &pair.1).unwrap();
        pair
    }

    fn refusal(files: &CertificateFiles) -> String {
        files.load().unwrap_err().to_string()
    }

    #[test]
    fn a_matching_pair_loads_and_covers_its_names() {
        let (dir, files) = files_in("names");
        write_pair(&dir, &["*.oidc.example.com", "registry.example.com"]);
        let served = files.load().unwrap();
        assert!(covers(&served.key, "acme.oidc.example.com"));
        assert!(covers(&served.key, "registry.example.com"));
        assert!(
            !covers(&served.key, "a.b.oidc.example.com"),
            "a wildcard covers one label"
        );
        assert!(!covers(&served.key, "oidc.example.com"));
        assert!(!covers(&served.key, "other.example.com"));
    }

    #[test]
    fn each_broken_pair_is_refused_with_the_file_and_what_is_wrong() {
        let (dir, files) = files_in("broken");
        assert!(refusal(&files).starts_with("cannot read the TLS certificate"));

        let (_, key_one) = write_pair(&dir, &["one.example"]);
        write_pair(&dir, &["two.example"]);
        std::fs::write(&files.key, key_one).unwrap();
        let message = refusal(&files);
        assert!(
            message.contains("is not the key of the certificate"),
            "{message}"
        );
        assert!(
            message.contains("tls.key") && message.contains("tls.crt"),
            "{message}"
        );

        std::fs::write(&files.cert, "not a certificate\n").unwrap();
        assert!(refusal(&files).ends_with("holds no CERTIFICATE block"));

        write_pair(&dir, &["one.example"]);
        std::fs::write(&files.key, "").unwrap();
        assert!(refusal(&files).contains("holds no usable private key"));
    }
}
