//! What the integration tests (`registry-tests`) and the chores (`xtask`) share: the real
//! `registry` binary launched on a free loopback port ([`launch`]), signing keys and the identity
//! tokens they sign ([`keys`]), certificates for HTTPS ([`tls`]), the settings of a server on
//! loopback ([`settings`]), a std-only HTTP client ([`http`]), free ports and temporary
//! directories.
//!
//! Std, josekit, rcgen and serde_json only: no HTTP library, no async runtime, nothing of the server, so
//! that the chores stay quick to build. What only one side needs stays with it: the tests'
//! in-process server and test OIDC issuer, the chores' readiness wait on `/readyz`, the limits
//! they lift and CPU pinning.

pub mod http;
pub mod keys;
pub mod launch;
pub mod settings;
pub mod tls;

pub use keys::{compact, hmac_sha256, KeyKind, SigningKey, AUDIENCE, SUBJECT};
pub use launch::{Launch, Launched};
pub use settings::Settings;

use std::io;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A loopback port that is free now. Nothing holds it: a server binds it a moment later, and
/// [`Launch`] takes another when something else was faster. Taken below the system's ephemeral
/// range where it can be: meanwhile, another test's outgoing connection or listener on port 0
/// takes its port from that range, and so never this one (an in-process server given a
/// `REGISTRY_HTTP_REDIRECT_LISTEN` has no second try).
pub fn free_port() -> io::Result<u16> {
    static TAKEN: AtomicU64 = AtomicU64::new(0);
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(32_768);
    // Up to 12,000 ports under it, above the well-known and registered ones most used.
    let span = low.saturating_sub(10_000).min(12_000);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::from(d.subsec_nanos()));
    let seed = u64::from(std::process::id()).wrapping_mul(7_919) ^ nanos;
    for _ in 0..if span > 0 { 64 } else { 0 } {
        let n = TAKEN.fetch_add(1, Ordering::Relaxed);
        let offset = seed.wrapping_add(n.wrapping_mul(2_654_435_761)) % span;
        let Ok(port) = u16::try_from(low - 1 - offset) else {
            continue;
        };
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Polls `check` every 100 ms until it returns true or `limit` passes; the time it took.
pub fn wait_until(
    limit: std::time::Duration,
    mut check: impl FnMut() -> bool,
) -> Option<std::time::Duration> {
    let started = std::time::Instant::now();
    while started.elapsed() < limit {
        if check() {
            return Some(started.elapsed());
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    None
}

/// Seconds since the Unix epoch, now, whole (as issuers write `iat` and `exp`).
pub fn unix_now() -> i64 {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is past 1970")
        .as_secs();
    i64::try_from(secs).expect("time fits")
}

/// The last 20 lines of a log.
pub fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// A directory removed, with everything in it, when dropped.
#[derive(Debug)]
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A new empty directory in the system's temporary directory, named `{prefix}-…` (unique
    /// within this process and among those running); panics when it cannot be made.
    pub fn new(prefix: &str) -> TempDir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!(
            "{prefix}-{}-{}-{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        TempDir::at(std::env::temp_dir().join(name)).expect("a temporary directory")
    }

    /// `dir`, fresh and empty: whatever was there before is removed first.
    pub fn at(dir: PathBuf) -> io::Result<TempDir> {
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        std::fs::create_dir_all(&dir)
            .map_err(|e| io::Error::new(e.kind(), format!("creating {}: {e}", dir.display())))?;
        Ok(TempDir(dir))
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl std::ops::Deref for TempDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_port_can_be_bound_and_lies_below_the_ephemeral_range() {
        let low: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .map_or(32_768, |range| {
                range.split_whitespace().next().unwrap().parse().unwrap()
            });
        let ports: Vec<u16> = (0..20).map(|_| free_port().unwrap()).collect();
        for port in &ports {
            assert!(
                *port < low && *port >= 1024,
                "{port} (ephemeral from {low})"
            );
            TcpListener::bind(("127.0.0.1", *port)).expect("the free port binds");
        }
        let mut distinct = ports.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert!(distinct.len() > 15, "{ports:?}");
    }

    #[test]
    fn a_temporary_directory_is_fresh_and_removes_itself() {
        let dir = TempDir::new("testkit");
        let other = TempDir::new("testkit");
        assert_ne!(dir.path(), other.path());
        assert!(dir.is_dir() && std::fs::read_dir(&dir.0).unwrap().next().is_none());
        std::fs::create_dir(dir.join("inner")).unwrap();
        std::fs::write(dir.join("inner/file"), "x").unwrap();
        let path = dir.path().to_owned();
        drop(dir);
        assert!(!path.exists());

        // `at` empties what it is given.
        std::fs::create_dir_all(path.join("old")).unwrap();
        let again = TempDir::at(path.clone()).unwrap();
        assert!(std::fs::read_dir(&again.0).unwrap().next().is_none());
        drop(again);
        assert!(!path.exists());
    }

    #[test]
    fn the_tail_is_the_last_twenty_lines() {
        let text: String = (1..=25).map(|i| format!("{i}\n")).collect();
        assert_eq!(tail(&text).lines().next(), Some("6"));
        assert_eq!(tail("one"), "one");
    }
}
