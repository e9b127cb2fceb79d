//! The certificate a handshake gets, swapped when the files change.

use crate::files::{CertificateFiles, Contents, Served};
use crate::TlsError;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::time::Duration;

/// Serves the chain last loaded from [`CertificateFiles`] to every handshake (one certificate
/// holds the API's name and the issuers' wildcard), except a handshake whose SNI names a custom
/// domain: that one gets the domain's own certificate ([`Reloading::serve_domain`]).
#[derive(Debug)]
pub struct Reloading {
    files: CertificateFiles,
    current: RwLock<Arc<CertifiedKey>>,
    seen: Mutex<Seen>,
    /// Custom domains' certificates, by lower-case name.
    domains: RwLock<HashMap<String, Arc<CertifiedKey>>>,
}

/// What the files held at the last look, loadable or not.
#[derive(Debug)]
struct Seen {
    contents: Contents,
    /// Why they do not load, and whether that was logged. A renewal that writes the key and
    /// the certificate one after the other is seen half done now and then; only a problem
    /// still there at the next look (a second later) is worth a line.
    problem: Option<(String, bool)>,
}

impl Seen {
    /// What a look found: `problem`, or `None` for the same contents as the last look. A new
    /// problem waits for the next look; one still there then (or still unchanged) is logged.
    fn still(&mut self, problem: Option<String>) {
        let known = |p: &String| self.problem.as_ref().is_some_and(|(k, _)| k == p);
        if let Some(new) = problem.filter(|p| !known(p)) {
            self.problem = Some((new, false));
        } else if let Some((known, logged @ false)) = &mut self.problem {
            tracing::warn!("{known}: still serving the previous certificate");
            *logged = true;
        }
    }
}

/// What a look at the files found.
#[derive(Debug)]
pub enum Change {
    /// The same bytes as last time.
    Unchanged,
    /// New bytes that load: handshakes from now on get them.
    Reloaded,
    /// New bytes (or an unreadable file) that do not load: the chain served stays.
    Kept(TlsError),
}

impl Reloading {
    /// Loads the files (an error is for the start to report) and serves what they hold.
    pub fn new(files: CertificateFiles) -> Result<Arc<Self>, TlsError> {
        let served = files.load()?;
        Ok(Arc::new(Self::serving(files, served)))
    }

    fn serving(files: CertificateFiles, served: Served) -> Self {
        Self {
            files,
            current: RwLock::new(served.key),
            seen: Mutex::new(Seen {
                contents: served.read,
                problem: None,
            }),
            domains: RwLock::default(),
        }
    }

    /// Serves `chain_pem` with `key_pem` to handshakes naming `domain` (SNI), from now on; an
    /// error (nothing changes) when they do not load or the key is not the chain's.
    pub fn serve_domain(
        &self,
        domain: &str,
        chain_pem: &[u8],
        key_pem: &[u8],
    ) -> Result<(), TlsError> {
        let files = CertificateFiles {
            cert: format!("(custom domain {domain})").into(),
            key: format!("(custom domain {domain})").into(),
        };
        let served = files.parse((chain_pem.to_vec(), key_pem.to_vec()))?;
        self.domains
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(domain.to_ascii_lowercase(), served.key);
        Ok(())
    }

    /// Stops serving `domain`'s own certificate: its handshakes get the operator's again.
    pub fn drop_domain(&self, domain: &str) {
        self.domains
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&domain.to_ascii_lowercase());
    }

    /// Looks at the files every `every` on a thread of its own, which ends with the last
    /// reference to `self`.
    pub fn watch(self: &Arc<Self>, every: Duration) {
        let watched: Weak<Self> = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name("tls-reload".into())
            .spawn(move || loop {
                std::thread::sleep(every);
                let Some(reloading) = watched.upgrade() else {
                    return;
                };
                reloading.look();
            });
        if let Err(error) = spawned {
            tracing::error!(%error, "cannot watch the TLS files: renewals need a restart");
        }
    }

    /// Reads the files; new bytes that load replace the chain served, new bytes that do not
    /// are logged once, if still there at the next look, and otherwise ignored.
    pub fn look(&self) -> Change {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let loaded = match self.files.read() {
            Ok(read) if read == seen.contents => {
                seen.still(None);
                return Change::Unchanged;
            }
            Ok(read) => {
                seen.contents.clone_from(&read);
                self.files.parse(read)
            }
            Err(error) => Err(error),
        };
        match loaded {
            Ok(served) => {
                *self.current.write().unwrap_or_else(PoisonError::into_inner) = served.key;
                seen.problem = None;
                tracing::info!(cert = %self.files.cert.display(), "TLS certificate reloaded");
                Change::Reloaded
            }
            Err(error) => {
                seen.still(Some(error.to_string()));
                Change::Kept(error)
            }
        }
    }

    /// Whether the chain served now is valid for the DNS name `host`.
    pub fn covers(&self, host: &str) -> bool {
        crate::files::covers(&self.current(), host)
    }

    /// When the certificate served now stops being valid (its leaf's `notAfter`, in seconds
    /// since the Unix epoch); `None` when it cannot be read.
    pub fn not_after(&self) -> Option<i64> {
        crate::expiry::not_after(self.current().cert.first()?.as_ref())
    }

    /// The chain served now.
    pub fn current(&self) -> Arc<CertifiedKey> {
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }
}

impl ResolvesServerCert for Reloading {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if let Some(name) = hello.server_name() {
            // rustls hands the name over in lower case.
            let domains = self.domains.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(key) = domains.get(name) {
                return Some(key.clone());
            }
        }
        Some(self.current())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::tests::{files_in, write_pair};

    #[test]
    fn a_change_that_loads_is_served_and_one_that_does_not_keeps_the_chain() {
        let (dir, files) = files_in("reload");
        write_pair(&dir, &["one.example"]);
        let reloading = Reloading::new(files.clone()).unwrap();
        let first = reloading.current();
        assert!(matches!(reloading.look(), Change::Unchanged));

        write_pair(&dir, &["two.example"]);
        assert!(matches!(reloading.look(), Change::Reloaded));
        let second = reloading.current();
        assert_ne!(first.cert, second.cert);

        std::fs::write(&files.key, "-----BEGIN PRIVATE KEY-----\nnot base64!\n").unwrap();
        assert!(matches!(
            reloading.look(),
            Change::Kept(TlsError::Pem { .. })
        ));
        assert_eq!(reloading.current().cert, second.cert);
        // The same broken bytes are not a new change; now they are logged.
        assert!(matches!(reloading.look(), Change::Unchanged));
        assert!(reloading
            .seen
            .lock()
            .unwrap()
            .problem
            .as_ref()
            .is_some_and(|p| p.1));

        std::fs::remove_file(&files.cert).unwrap();
        assert!(matches!(
            reloading.look(),
            Change::Kept(TlsError::Read { .. })
        ));
        assert_eq!(reloading.current().cert, second.cert);

        write_pair(&dir, &["three.example"]);
        assert!(matches!(reloading.look(), Change::Reloaded));
        assert_ne!(reloading.current().cert, second.cert);
    }

    #[test]
    fn the_watcher_picks_up_a_renewal_and_ends_with_the_resolver() {
        let (dir, files) = files_in("watch");
        write_pair(&dir, &["one.example"]);
        let reloading = Reloading::new(files).unwrap();
        let first = reloading.current();
        reloading.watch(Duration::from_millis(20));
        write_pair(&dir, &["two.example"]);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while reloading.current().cert == first.cert {
            assert!(
                std::time::Instant::now() < deadline,
                "no reload within 10 s"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let watched = Arc::downgrade(&reloading);
        drop(reloading);
        // The watcher holds it while it looks (every 20 ms), then lets go for good; a loaded
        // machine may pause it mid-look.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while watched.strong_count() > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the watcher keeps the resolver alive"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
