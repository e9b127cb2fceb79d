//! The caches in front of the registry (docs/api.md, "Behind a CDN"): when a service's public
//! documents change, each replica asks every cache of `REGISTRY_PURGE_URLS` to drop its copies
//! (`PURGE {path}` with the issuer's `Host`), so that a new key set is visible through the cache
//! at once instead of when its copy expires. [`Purger`] is the domain's `CachePurger` port.

use registry_domain::ports::{CachePurger, Purging};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;
use url::Url;

/// How long a purge is retried before it counts as failed.
pub const RETRY_FOR: Duration = Duration::from_secs(60);
/// How long one `PURGE` may take.
const TIMEOUT: Duration = Duration::from_secs(5);

/// A `REGISTRY_PURGE_URLS` entry the registry cannot purge at.
#[derive(Debug, thiserror::Error)]
pub enum BadTarget {
    /// Entry `n` (from 1) is not an `http(s)://host:port` address. The entry is not echoed: a
    /// password in it (one that did not parse, or was cut at a comma) would be shown.
    #[error("entry {0} is not the address of a cache (http://host:port or https://host:port)")]
    NotACache(usize),
    /// An address with a user or password: a secret that the registry's logs, which name the
    /// cache of each failed purge, would show. Never echoed.
    #[error(
        "an address of a cache holds a user or password (http://user:password@host): the \
         registry purges with none, and would write it to its logs"
    )]
    Credentials,
    /// The HTTP client could not be made.
    #[error("the HTTP client cannot start: {0}")]
    Client(String),
}

/// The caches to purge, and the outcomes so far.
#[derive(Debug)]
pub struct Purger {
    targets: Vec<Url>,
    /// Per target: whether its last purge attempt failed (an outage began and has not ended),
    /// so that an outage is logged once, at its first failed attempt, and once when it ends.
    down: Vec<AtomicBool>,
    client: reqwest::Client,
    purged: AtomicU64,
    failed: AtomicU64,
}

impl Purger {
    /// A purger of the caches at `targets`; `None` when there are none.
    pub fn new(targets: &[String]) -> Result<Option<Self>, BadTarget> {
        let targets: Vec<Url> = (targets.iter())
            .map(|t| t.trim())
            .filter(|t| !t.is_empty())
            .enumerate()
            .map(|(i, t)| {
                // An `@` is a user or password, parsed or not.
                if t.contains('@') {
                    return Err(BadTarget::Credentials);
                }
                Url::parse(t)
                    .ok()
                    .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
                    .filter(|u| u.path() == "/" && u.query().is_none() && u.fragment().is_none())
                    .ok_or(BadTarget::NotACache(i + 1))
            })
            .collect::<Result<_, _>>()?;
        if targets.is_empty() {
            return Ok(None);
        }
        let client = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| BadTarget::Client(e.to_string()))?;
        Ok(Some(Self {
            down: targets.iter().map(|_| AtomicBool::new(false)).collect(),
            targets,
            client,
            purged: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        }))
    }

    /// Purges `paths` under each host of `authorities` (as clients send it: with the port when
    /// the issuer URL has one) from every cache, each retried with backoff for up to
    /// [`RETRY_FOR`]; true when every cache purged every path. All at once: a cache that is
    /// down, or a path it refuses, holds up no other purge while it is retried.
    pub async fn purge(&self, authorities: &[String], paths: &[&str]) -> bool {
        let targets = self.targets.iter().enumerate();
        let each = targets.flat_map(|(index, target)| {
            authorities.iter().flat_map(move |authority| {
                (paths.iter()).map(move |path| async move {
                    let ok = self.purge_one(index, target, authority, path).await;
                    let counter = if ok { &self.purged } else { &self.failed };
                    counter.fetch_add(1, Relaxed);
                    ok
                })
            })
        });
        let outcomes = futures_util::future::join_all(each).await;
        outcomes.into_iter().all(|ok| ok)
    }

    async fn purge_one(&self, index: usize, target: &Url, authority: &str, path: &str) -> bool {
        let Ok(url) = target.join(path) else {
            return false;
        };
        let method = reqwest::Method::from_bytes(b"PURGE").unwrap_or(reqwest::Method::DELETE);
        let started = tokio::time::Instant::now();
        let mut pause = Duration::from_millis(100);
        loop {
            let sent = (self.client.request(method.clone(), url.clone()))
                .header("host", authority)
                .send()
                .await;
            let why = match sent {
                Ok(answer) if answer.status().is_success() => {
                    if self.outage_ends(index) {
                        tracing::info!(cache = %target, "the cache takes purges again");
                    }
                    return true;
                }
                Ok(answer) => format!("answered {}", answer.status()),
                Err(error) => error.to_string(),
            };
            // An operator learns of an outage when it begins, not a minute later (and only if
            // it lasts that long): once per cache and outage, not at every retry.
            if self.outage_begins(index) {
                tracing::warn!(cache = %target, host = authority, path, why,
                    "a purge attempt failed; retrying with backoff for up to 60 s");
            }
            if started.elapsed() + pause > RETRY_FOR {
                tracing::warn!(cache = %target, host = authority, path, why, "purge failed");
                return false;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(10));
        }
    }

    /// Records a failed attempt on target `index`: true when it is the first of an outage.
    fn outage_begins(&self, index: usize) -> bool {
        self.down
            .get(index)
            .is_some_and(|down| !down.swap(true, Relaxed))
    }

    /// Records a purge that succeeded on target `index`: true when it ends an outage.
    fn outage_ends(&self, index: usize) -> bool {
        self.down
            .get(index)
            .is_some_and(|down| down.swap(false, Relaxed))
    }

    /// Paths purged, and paths whose purge failed, so far.
    pub fn outcomes(&self) -> (u64, u64) {
        (self.purged.load(Relaxed), self.failed.load(Relaxed))
    }
}

impl CachePurger for Purger {
    fn purge<'a>(&'a self, authorities: &'a [String], paths: &'a [&'a str]) -> Purging<'a> {
        Box::pin(Purger::purge(self, authorities, paths))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_is_noted_once_when_it_begins_and_once_when_it_ends() {
        let purger = Purger::new(&["http://127.0.0.1:6081".into(), "http://cdn:80".into()])
            .unwrap()
            .unwrap();
        assert!(purger.outage_begins(0), "the first failed attempt");
        assert!(!purger.outage_begins(0), "not every retry");
        assert!(purger.outage_begins(1), "per cache");
        assert!(purger.outage_ends(0));
        assert!(!purger.outage_ends(0));
        assert!(purger.outage_begins(0), "the next outage");
    }

    #[test]
    fn targets_are_cache_addresses() {
        assert!(Purger::new(&[]).unwrap().is_none());
        assert!(Purger::new(&[" ".into()]).unwrap().is_none());
        let purger = Purger::new(&["http://127.0.0.1:6081".into(), "https://cdn:443/".into()]);
        assert_eq!(purger.unwrap().unwrap().targets.len(), 2);
        for bad in [
            "cdn:6081",
            "ftp://cdn",
            "http://cdn/purge",
            "http://cdn/?x=1",
            "http://cdn:80#part",
        ] {
            let refused = Purger::new(&[bad.into()]).unwrap_err();
            assert!(matches!(refused, BadTarget::NotACache(1)), "{bad}");
        }
        for with_secret in [
            "http://user:s3cret@cdn:80",
            "htps://s3cret@cdn",
            "http://:s3cret@cdn",
            "http://u:s3cret@cdn:99999",
            "http://u:s3cret@",
        ] {
            let refused = Purger::new(&[with_secret.into()]).unwrap_err();
            assert!(matches!(refused, BadTarget::Credentials), "{with_secret}");
            assert!(!refused.to_string().contains("s3cret"), "{refused}");
        }
        // A password cut at a comma (the setting's separator) is shown by neither piece.
        let pieces = ["http://u:s3c".to_owned(), "ret@cdn:80".to_owned()];
        let refused = Purger::new(&pieces).unwrap_err();
        assert!(!refused.to_string().contains("s3c"), "{refused}");
    }
}
