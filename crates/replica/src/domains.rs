//! The custom domains this replica serves (docs/api.md, "Custom domains"): active ones with
//! their certificate, by name, kept as fresh as the database by the change log (a domain's
//! changes are its service's). Under a custom domain the service's documents are served with the
//! issuer `https://<domain>`: the key set is the subdomain's, byte for byte, and the discovery
//! document is the subdomain's with `issuer` and `jwks_uri` pointed at the domain.

use crate::hosting::{Document, Hosted};
use crate::near::{Copied, Near};
use registry_domain::custom_domain::CustomDomain;
use registry_domain::publishing::point_at;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use time::OffsetDateTime;
use uuid::Uuid;

/// A custom domain served now.
#[derive(Debug)]
pub struct Served {
    /// The domain, with its certificate (the key sealed).
    pub domain: CustomDomain,
    /// The subdomain of its service, whose documents it serves.
    pub subdomain: String,
    /// The discovery document for this domain's issuer, and the ETag of the subdomain's
    /// document it was made from.
    discovery: Mutex<Option<(bytes::Bytes, Document)>>,
}

/// A worker's own copy (see `near`), which makes its discovery document again at its first use.
impl Copied for Served {
    fn copied(&self) -> Arc<Self> {
        Arc::new(Served {
            domain: self.domain.clone(),
            subdomain: self.subdomain.clone(),
            discovery: Mutex::default(),
        })
    }
}

impl Served {
    /// Serves `domain` for `subdomain` from now on, in `by_name`: the change to report.
    fn keep(
        by_name: &mut HashMap<String, Arc<Served>>,
        domain: CustomDomain,
        subdomain: String,
    ) -> DomainChanged {
        let served = Arc::new(Served {
            domain,
            subdomain,
            discovery: Mutex::default(),
        });
        by_name.insert(served.domain.domain.clone(), served.clone());
        DomainChanged::Served(served)
    }

    /// The earliest `Last-Modified` of the documents under this domain: the first whole second
    /// after its claim was made. Before that the name may have served another service's
    /// documents (released, then claimed by this one), whose dates a client may hold and
    /// revalidate with `If-Modified-Since`; none is as late.
    pub fn modified_since(&self) -> OffsetDateTime {
        let made = self.domain.created_at;
        made.replace_nanosecond(0).unwrap_or(made) + time::Duration::SECOND
    }

    /// The discovery document of `hosted` (the subdomain's) under this domain's issuer: made
    /// once per version of the subdomain's document.
    pub fn discovery(&self, hosted: &Hosted) -> Document {
        let mut kept = self
            .discovery
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((from, document)) = kept.as_ref() {
            if *from == hosted.discovery.etag {
                return document.clone();
            }
        }
        let mut doc: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(&hosted.discovery.body).unwrap_or_default();
        point_at(&mut doc, &self.domain.issuer());
        let document = Document::new(&serde_json::Value::Object(doc).to_string());
        // The tag copied: a slice of the entry's buffer would keep all of it in memory once
        // the cache let the entry go.
        let from = bytes::Bytes::copy_from_slice(&hosted.discovery.etag);
        *kept = Some((from, document.clone()));
        document
    }
}

/// A change of the domains served, as this replica applied it: what the TLS listener installs
/// or drops.
#[derive(Debug, Clone)]
pub enum DomainChanged {
    /// Served from now on (or with a new certificate).
    Served(Arc<Served>),
    /// No longer served.
    Dropped(String),
}

/// The custom domains served, by name and by service. Each worker thread serves its own copy
/// of the domains it served before (see `near`).
#[derive(Debug)]
pub struct Domains {
    by_name: RwLock<HashMap<String, Arc<Served>>>,
    /// How many are served: read without the lock by every request for a host that is no
    /// subdomain's (the API's included), and written only when a domain comes or goes.
    count: AtomicUsize,
    /// Bumped, under the write lock, by every change of the domains served.
    changes: AtomicU64,
    near: Near<String, Served>,
    /// The domains held (proven, issuing or active), by name, with when the worker next orders
    /// for them: an ACME server's HTTP-01 request is answered from the database only while an
    /// order for its host may be under way (docs/api.md, "Custom domains").
    held: RwLock<HashMap<String, Held>>,
}

/// A domain held, as the HTTP-01 path needs it.
#[derive(Debug, Clone, Copy)]
struct Held {
    service_id: Uuid,
    next_attempt_at: OffsetDateTime,
}

/// How long before its due time, by this replica's clock, an order may have begun on another
/// replica's: the replicas' clocks differ by less.
const CLOCKS_DIFFER: time::Duration = time::Duration::minutes(1);

/// Domains each worker thread keeps its own copies of.
const NEAR_DOMAINS: usize = 256;

impl Default for Domains {
    fn default() -> Self {
        Self {
            by_name: RwLock::default(),
            count: AtomicUsize::default(),
            changes: AtomicU64::default(),
            near: Near::new(NEAR_DOMAINS),
            held: RwLock::default(),
        }
    }
}

impl Domains {
    /// Whether no domain is served (no lock taken).
    pub fn is_empty(&self) -> bool {
        self.count.load(Ordering::Relaxed) == 0
    }

    /// The domain `name` (lower case, no port), when it is served: this thread's copy. No lock
    /// is taken while no domain is served (every API request and federated token asks), nor
    /// when no domain changed since the copy was checked.
    pub fn get(&self, name: &str) -> Option<Arc<Served>> {
        if self.is_empty() {
            return None;
        }
        let changes = self.changes.load(Ordering::Acquire);
        (self.near).get(name, changes, |_| {}, || self.read().get(name).cloned())
    }

    /// The domain of the service `service_id`, when it is served.
    pub fn of_service(&self, service_id: Uuid) -> Option<Arc<Served>> {
        if self.is_empty() {
            return None;
        }
        (self.read().values())
            .find(|served| served.domain.service_id == service_id)
            .cloned()
    }

    /// Whether an order for the domain `name` may be under way at `now`: it is held, and its
    /// next order (a first certificate, a retry or a renewal) is due, give or take
    /// `CLOCKS_DIFFER` (a minute); an order under way leaves it due until it ends. Else its HTTP-01
    /// answers are not asked for, and the database is not read for them: a domain waiting an
    /// hour for its retry, or put off by the order budget, is not pending.
    pub fn order_pending(&self, name: &str, now: OffsetDateTime) -> bool {
        let held = self.held.read().unwrap_or_else(PoisonError::into_inner);
        held.get(name)
            .is_some_and(|h| h.next_attempt_at <= now + CLOCKS_DIFFER)
    }

    fn hold(&self, service_id: Uuid, domain: Option<&CustomDomain>) {
        let mut held = self.held.write().unwrap_or_else(PoisonError::into_inner);
        held.retain(|_, h| h.service_id != service_id);
        if let Some(domain) = domain.filter(|d| d.is_held()) {
            let entry = Held {
                service_id,
                next_attempt_at: domain.next_attempt_at,
            };
            held.insert(domain.domain.clone(), entry);
        }
    }

    /// Every domain served.
    pub fn all(&self) -> Vec<Arc<Served>> {
        self.read().values().cloned().collect()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<Served>>> {
        self.by_name.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies what the database holds for `service_id`: its domain and subdomain when it has
    /// one, or nothing. Answers what changed for the TLS listener.
    pub(crate) fn apply(
        &self,
        service_id: Uuid,
        found: Option<(CustomDomain, String)>,
    ) -> Vec<DomainChanged> {
        self.hold(service_id, found.as_ref().map(|(domain, _)| domain));
        let mut by_name = self.by_name.write().unwrap_or_else(PoisonError::into_inner);
        let mut changes = Vec::new();
        let before: Vec<String> = (by_name.iter())
            .filter(|(_, s)| s.domain.service_id == service_id)
            .map(|(name, _)| name.clone())
            .collect();
        let keep = found.filter(|(domain, _)| domain.is_served());
        for name in before {
            if keep.as_ref().is_none_or(|(d, _)| d.domain != name) {
                by_name.remove(&name);
                changes.push(DomainChanged::Dropped(name));
            }
        }
        if let Some((domain, subdomain)) = keep {
            let unchanged = by_name
                .get(&domain.domain)
                .is_some_and(|s| s.domain == domain && s.subdomain == subdomain);
            if !unchanged {
                changes.push(Served::keep(&mut by_name, domain, subdomain));
            }
        }
        self.count.store(by_name.len(), Ordering::Relaxed);
        self.changes.fetch_add(1, Ordering::Release);
        changes
    }

    /// Replaces every domain with `served` (with their subdomains): the start-up load.
    pub(crate) fn load(&self, served: Vec<(CustomDomain, String)>) -> Vec<DomainChanged> {
        (self.held.write().unwrap_or_else(PoisonError::into_inner)).clear();
        for (domain, _) in &served {
            self.hold(domain.service_id, Some(domain));
        }
        let mut by_name = self.by_name.write().unwrap_or_else(PoisonError::into_inner);
        let mut changes: Vec<DomainChanged> = by_name
            .drain()
            .map(|(name, _)| DomainChanged::Dropped(name))
            .collect();
        for (domain, subdomain) in served.into_iter().filter(|(d, _)| d.is_served()) {
            changes.push(Served::keep(&mut by_name, domain, subdomain));
        }
        self.count.store(by_name.len(), Ordering::Relaxed);
        self.changes.fetch_add(1, Ordering::Release);
        changes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use registry_domain::custom_domain::DomainStatus;
    use time::macros::datetime;

    #[test]
    fn a_domain_is_pending_only_while_its_order_is_due() {
        let now = datetime!(2026-12-01 12:00 UTC);
        let domains = Domains::default();
        let id = Uuid::new_v4();
        let mut domain = CustomDomain::new(id, "login.acme.com".into(), "t".into(), now);
        // Claimed, not proven: not held.
        domains.hold(id, Some(&domain));
        assert!(!domains.order_pending("login.acme.com", now));
        domain.status = DomainStatus::Issuing;
        for (due, pending) in [
            (now - time::Duration::minutes(4), true), // an order under way
            (now + time::Duration::seconds(30), true), // another replica's clock
            (now + time::Duration::minutes(5), false), // put off by the budget
            (now + time::Duration::hours(1), false),  // a retry's wait
        ] {
            domain.next_attempt_at = due;
            domains.hold(id, Some(&domain));
            assert_eq!(
                domains.order_pending("login.acme.com", now),
                pending,
                "{due}"
            );
        }
        assert!(!domains.order_pending("other.acme.com", now));
    }
}
