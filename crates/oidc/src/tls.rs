//! Where TLS to issuers and sources finds the certificate authorities it trusts.
//!
//! OpenSSL is built into the binary (vendored), so the directory compiled into it is not the
//! host's. native-tls, under reqwest, looks instead in the places that Linux distributions use
//! (`/etc/ssl/certs/ca-certificates.crt`, `/etc/pki/tls/certs/ca-bundle.crt`, …), and
//! `SSL_CERT_FILE` and `SSL_CERT_DIR` override them. [`trust_roots`] runs the same search, so
//! that the server can say at start what it trusts, or that it trusts nothing.

use std::path::PathBuf;

/// The certificate authorities that TLS connections trust: a bundle file, hashed directories,
/// or both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustRoots {
    /// A PEM bundle (`SSL_CERT_FILE`, else the first of the usual locations that exists).
    pub file: Option<PathBuf>,
    /// Directories of hashed certificates (`SSL_CERT_DIR`, else the usual ones that exist).
    pub dirs: Vec<PathBuf>,
}

impl TrustRoots {
    /// Whether nothing was found: every TLS connection would then fail to verify.
    pub fn is_empty(&self) -> bool {
        self.file.is_none() && self.dirs.is_empty()
    }
}

/// The roots that reqwest's TLS will load: the same search as native-tls's, read from the
/// environment and the file system now.
pub fn trust_roots() -> TrustRoots {
    let found = openssl_probe::probe();
    // The probe may find one directory under two of the names it tries.
    let mut seen = std::collections::HashSet::new();
    let mut dirs = found.cert_dir;
    dirs.retain(|dir| seen.insert(dir.clone()));
    TrustRoots {
        file: found.cert_file,
        dirs,
    }
}
