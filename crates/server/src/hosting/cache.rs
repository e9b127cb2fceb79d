use actix_web::http::header::HeaderValue;
use anyhow::Context;
use registry_domain::publishing::{hosted_issuer, point_at};
use registry_domain::service::PublishedConfig;
use registry_domain::Service;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use time::format_description::FormatItem;
use time::macros::format_description;
use time::OffsetDateTime;
use uuid::Uuid;

/// The HTTP-date format (RFC 9110 §5.6.7), always GMT.
pub(crate) const HTTP_DATE: &[FormatItem<'static>] = format_description!(
    "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
);

/// One document, ready to send: body and headers are built once, when it is published, and
/// sending them shares the bytes (reference counts, no copy).
#[derive(Debug)]
pub struct Document {
    /// The body.
    pub body: actix_web::web::Bytes,
    /// Strong ETag, quoted.
    pub etag: HeaderValue,
}

impl Document {
    fn new(text: &str) -> Self {
        let digest = Sha256::digest(text.as_bytes());
        let etag = format!(
            "\"{}\"",
            digest[..16]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        );
        Self {
            body: actix_web::web::Bytes::copy_from_slice(text.as_bytes()),
            etag: HeaderValue::from_str(&etag).expect("hex digits are a valid header value"),
        }
    }
}

/// What a subdomain serves.
#[derive(Debug)]
pub struct Hosted {
    /// The discovery document.
    pub discovery: Document,
    /// The public key set: the uploaded keys, then the retired keys still published.
    pub jwks: Document,
    /// The key set as uploaded (what `GET /services/{s}/config` returns).
    pub uploaded_jwks: actix_web::web::Bytes,
    /// `Last-Modified`, formatted.
    pub last_modified: HeaderValue,
    /// When the documents last changed (whole seconds, for If-Modified-Since).
    pub modified_at: OffsetDateTime,
    /// Expiry of an anonymous service.
    pub expires_at: Option<OffsetDateTime>,
    /// When the public key set changes by itself (a retired key's time runs out): the entry is
    /// built again from `source` then.
    pub refresh_at: Option<OffsetDateTime>,
    /// What it was built from, kept only while `refresh_at` is set (memory: most entries never
    /// change by themselves).
    pub source: Option<Box<(Service, PublishedConfig)>>,
    /// The cache's use counter when last served (the least recently served leave first).
    last_served: AtomicU64,
    service_id: Uuid,
}

impl Hosted {
    fn new(service: &Service, config: &PublishedConfig, issuer: &str, now: OffsetDateTime) -> Self {
        let keys = &config.keys;
        let jwks = match keys.published(now).any(|k| k.retired_at.is_some()) {
            false => config.jwks.clone(),
            true => {
                let uploaded = serde_json::from_str(&config.jwks).unwrap_or_default();
                keys.served(&uploaded, now).to_string()
            }
        };
        // A retired key leaving the set is a change of the set, at the time it left.
        let changed = keys
            .keys
            .iter()
            .filter_map(|k| k.published_until)
            .filter(|until| *until <= now)
            .fold(config.updated_at, OffsetDateTime::max);
        let modified_at = changed.replace_nanosecond(0).unwrap_or(changed);
        let refresh_at = keys.next_change(now);
        Self {
            discovery: Document::new(&current_discovery(&config.openid_configuration, issuer)),
            jwks: Document::new(&jwks),
            uploaded_jwks: actix_web::web::Bytes::copy_from_slice(config.jwks.as_bytes()),
            last_modified: modified_at
                .format(HTTP_DATE)
                .ok()
                .and_then(|date| HeaderValue::from_str(&date).ok())
                .unwrap_or_else(|| HeaderValue::from_static("")),
            modified_at,
            expires_at: service.expires_at,
            refresh_at,
            source: refresh_at.map(|_| Box::new((service.clone(), config.clone()))),
            last_served: AtomicU64::new(0),
            service_id: service.id,
        }
    }

    /// Whether the public key set has changed by itself since the entry was built.
    pub fn is_stale_at(&self, now: OffsetDateTime) -> bool {
        self.refresh_at.is_some_and(|at| now >= at)
    }

    /// Bytes of its documents: what the cache's bound counts (twice while it keeps its source).
    fn bytes(&self) -> usize {
        let documents = self.discovery.body.len() + self.jwks.body.len();
        match self.source {
            Some(_) => 2 * documents,
            None => documents,
        }
    }
}

/// The longest DNS label.
const MAX_LABEL: usize = 63;

/// A subdomain read from a `Host` header: a DNS label, lower-cased into a fixed buffer, so that
/// recognising the host of every public request allocates nothing.
#[derive(Clone, Copy)]
pub struct Label {
    bytes: [u8; MAX_LABEL],
    len: usize,
}

impl Label {
    /// `text` lower-cased, when it is a non-empty label of letters, digits and `-`.
    fn parse(text: &str) -> Option<Self> {
        let is_label = !text.is_empty()
            && text.len() <= MAX_LABEL
            && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if !is_label {
            return None;
        }
        let mut bytes = [0; MAX_LABEL];
        bytes[..text.len()].copy_from_slice(text.as_bytes());
        bytes.make_ascii_lowercase();
        Some(Self {
            bytes,
            len: text.len(),
        })
    }
}

impl std::ops::Deref for Label {
    type Target = str;

    fn deref(&self) -> &str {
        // Only ASCII letters, digits and `-` were copied in.
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default()
    }
}

impl std::fmt::Debug for Label {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self)
    }
}

/// `host` without its `suffix`, ASCII case ignored.
fn strip_suffix_ignore_case<'a>(host: &'a str, suffix: &str) -> Option<&'a str> {
    let cut = host.len().checked_sub(suffix.len())?;
    (host.is_char_boundary(cut) && host[cut..].eq_ignore_ascii_case(suffix)).then(|| &host[..cut])
}

/// `host` without its `prefix`, ASCII case ignored.
fn strip_prefix_ignore_case<'a>(host: &'a str, prefix: &str) -> Option<&'a str> {
    let cut = prefix.len();
    (host.is_char_boundary(cut) && host.get(..cut)?.eq_ignore_ascii_case(prefix))
        .then(|| &host[cut..])
}

/// Subdomain → published documents, plus how to recognise a hosted `Host`.
///
/// The documents held in memory are bounded in bytes (`REGISTRY_HOSTING_CACHE_BYTES`): past the
/// bound, the least recently served leave memory but stay known, and a request for one of them
/// reads it from the database again ([`Lookup::Evicted`]). A subdomain nobody published is
/// answered from memory whatever the bound, so a flood of made-up hosts never reaches the
/// database. Every change is made under one lock: a reader sees a service's old documents or its
/// new ones, never none.
#[derive(Debug)]
pub struct HostingCache {
    hosts: RwLock<Hosts>,
    max_bytes: usize,
    /// Bumped by every hit: a logical clock for least-recently-served eviction.
    served: AtomicU64,
    host_prefix: String,
    host_suffix: String,
    api_host: String,
    template: String,
}

/// The stored discovery document, re-pointed at `issuer` when it was published under another
/// issuer URL (the operator changed `REGISTRY_ISSUER_URL_TEMPLATE`): verifiers refuse a
/// document whose `issuer` is not the URL they fetched it from.
fn current_discovery(stored: &str, issuer: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(stored) {
        Ok(serde_json::Value::Object(mut doc))
            if doc.get("issuer").and_then(|i| i.as_str()) != Some(issuer) =>
        {
            point_at(&mut doc, issuer);
            serde_json::Value::Object(doc).to_string()
        }
        _ => stored.to_owned(),
    }
}

fn host_of(url: &str) -> anyhow::Result<String> {
    let rest = url
        .split_once("://")
        .map(|(_, rest)| rest)
        .with_context(|| format!("{url:?} is not an absolute URL"))?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    Ok(strip_port(authority)
        .trim_end_matches('.')
        .to_ascii_lowercase())
}

fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host.split_inclusive(']').next().unwrap_or(host);
    }
    host.rsplit_once(':').map_or(host, |(h, port)| {
        if port.bytes().all(|b| b.is_ascii_digit()) {
            h
        } else {
            host
        }
    })
}

impl HostingCache {
    /// A cache for issuers built from `template` (`{subdomain}` in the host part); requests for
    /// the host of `base_url` are never hosted ones.
    pub fn new(template: &str, base_url: &str, max_bytes: usize) -> anyhow::Result<Self> {
        let host = host_of(template)?;
        let path = template
            .split_once("://")
            .map(|(_, rest)| rest.split_once('/').map_or("", |(_, path)| path))
            .unwrap_or("");
        anyhow::ensure!(
            path.trim_end_matches('/').is_empty(),
            "REGISTRY_ISSUER_URL_TEMPLATE {template:?} must not have a path: issuers are told apart by host"
        );
        let (host_prefix, host_suffix) = host.split_once("{subdomain}").with_context(|| {
            format!("REGISTRY_ISSUER_URL_TEMPLATE {template:?} must hold {{subdomain}} in its host")
        })?;
        Ok(Self {
            hosts: RwLock::default(),
            max_bytes,
            served: AtomicU64::new(0),
            host_prefix: host_prefix.to_owned(),
            host_suffix: host_suffix.to_owned(),
            api_host: host_of(base_url)?,
            template: template.to_owned(),
        })
    }

    /// The subdomain a `Host` header names, if it is a hosted issuer's host.
    pub fn subdomain_for_host(&self, host: &str) -> Option<Label> {
        // A fully qualified name may end in a dot; it names the same host (`host_of` drops
        // it from the configured ones).
        let host = strip_port(host);
        let host = host.strip_suffix('.').unwrap_or(host);
        if host.eq_ignore_ascii_case(&self.api_host) {
            return None;
        }
        let label = strip_prefix_ignore_case(host, &self.host_prefix)?;
        Label::parse(strip_suffix_ignore_case(label, &self.host_suffix)?)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Hosts> {
        self.hosts.read().expect("hosting cache lock")
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Hosts> {
        self.hosts.write().expect("hosting cache lock")
    }

    /// What a subdomain serves, as far as memory knows.
    pub fn lookup(&self, subdomain: &str) -> Lookup {
        let hosts = self.read();
        if let Some(hosted) = hosts.by_subdomain.get(subdomain) {
            let tick = self.served.fetch_add(1, Ordering::Relaxed);
            hosted.last_served.store(tick, Ordering::Relaxed);
            return Lookup::Hit(hosted.clone());
        }
        match hosts.evicted.get(subdomain) {
            Some(id) => Lookup::Evicted(*id),
            None => Lookup::Miss,
        }
    }

    /// What a subdomain serves, when it is in memory.
    pub fn get(&self, subdomain: &str) -> Option<Arc<Hosted>> {
        match self.lookup(subdomain) {
            Lookup::Hit(hosted) => Some(hosted),
            Lookup::Evicted(_) | Lookup::Miss => None,
        }
    }

    /// Publishes a service's documents as of `now`, replacing what it served before in one step.
    pub fn put(&self, service: &Service, config: &PublishedConfig, now: OffsetDateTime) {
        let issuer = hosted_issuer(&self.template, &service.subdomain);
        let hosted = Arc::new(Hosted::new(service, config, &issuer, now));
        hosted.last_served.store(
            self.served.fetch_add(1, Ordering::Relaxed),
            Ordering::Relaxed,
        );
        let mut hosts = self.write();
        if hosts
            .subdomain_of
            .get(&service.id)
            .is_some_and(|s| *s != service.subdomain)
        {
            hosts.forget(service.id);
        }
        hosts.evicted.remove(&service.subdomain);
        hosts.bytes += hosted.bytes();
        if let Some(old) = hosts.by_subdomain.insert(service.subdomain.clone(), hosted) {
            hosts.bytes -= old.bytes();
            if old.service_id != service.id {
                // The name passed to a new service: the old one no longer serves anything.
                hosts.subdomain_of.remove(&old.service_id);
            }
        }
        hosts
            .subdomain_of
            .insert(service.id, service.subdomain.clone());
        hosts.evict_down_to(self.max_bytes, &service.subdomain);
    }

    /// Stops serving a service's documents.
    pub fn remove(&self, service_id: Uuid) {
        self.write().forget(service_id);
    }

    /// Serves exactly `published`, replacing everything at once (start-up, and a replica that
    /// fell behind the change log's horizon).
    pub fn load(&self, published: &[(Service, PublishedConfig)], now: OffsetDateTime) {
        let fresh = HostingCache {
            hosts: RwLock::default(),
            max_bytes: self.max_bytes,
            served: AtomicU64::new(self.served.load(Ordering::Relaxed)),
            host_prefix: String::new(),
            host_suffix: String::new(),
            api_host: String::new(),
            template: self.template.clone(),
        };
        for (service, config) in published {
            fresh.put(service, config, now);
        }
        let hosts = std::mem::take(&mut *fresh.write());
        *self.write() = hosts;
    }

    /// How many subdomains are served (in memory or not).
    pub fn len(&self) -> usize {
        self.read().subdomain_of.len()
    }

    /// Bytes of documents held in memory.
    pub fn bytes(&self) -> usize {
        self.read().bytes
    }
}

/// What memory knows of a subdomain.
#[derive(Debug)]
pub enum Lookup {
    /// Its documents.
    Hit(Arc<Hosted>),
    /// Published, but its documents left memory: the service with this id is to be read again.
    Evicted(Uuid),
    /// Nothing is published there.
    Miss,
}

#[derive(Debug, Default)]
struct Hosts {
    by_subdomain: HashMap<String, Arc<Hosted>>,
    /// Every published service, in memory or evicted.
    subdomain_of: HashMap<Uuid, String>,
    /// Published services whose documents are not in memory.
    evicted: HashMap<String, Uuid>,
    /// Bytes of the documents in `by_subdomain`.
    bytes: usize,
}

impl Hosts {
    /// Stops serving the service `service_id`. A subdomain is let go only while it still
    /// belongs to that service: a service deleted and created again under the same name has a
    /// new id, and forgetting the old one must not take the new one's documents.
    fn forget(&mut self, service_id: Uuid) {
        let Some(subdomain) = self.subdomain_of.remove(&service_id) else {
            return;
        };
        if self
            .by_subdomain
            .get(&subdomain)
            .is_some_and(|h| h.service_id == service_id)
        {
            if let Some(old) = self.by_subdomain.remove(&subdomain) {
                self.bytes -= old.bytes();
            }
        }
        if self.evicted.get(&subdomain) == Some(&service_id) {
            self.evicted.remove(&subdomain);
        }
    }

    /// Evicts the least recently served documents (never `keep`'s) until they fit `max_bytes`.
    fn evict_down_to(&mut self, max_bytes: usize, keep: &str) {
        while self.bytes > max_bytes {
            let oldest = self
                .by_subdomain
                .iter()
                .filter(|(subdomain, _)| subdomain.as_str() != keep)
                .min_by_key(|(_, hosted)| hosted.last_served.load(Ordering::Relaxed))
                .map(|(subdomain, _)| subdomain.clone());
            let Some(subdomain) = oldest else {
                return;
            };
            if let Some(old) = self.by_subdomain.remove(&subdomain) {
                self.bytes -= old.bytes();
                self.evicted.insert(subdomain, old.service_id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn published(subdomain: &str, padding: usize) -> (Service, PublishedConfig) {
        let now = OffsetDateTime::now_utc();
        let service = Service {
            id: Uuid::new_v4(),
            customer_id: None,
            subdomain: subdomain.into(),
            title: None,
            description: None,
            created_at: now,
            expires_at: None,
        };
        let config = PublishedConfig {
            service_id: service.id,
            openid_configuration: format!(r#"{{"issuer":"x","pad":"{}"}}"#, "p".repeat(padding)),
            jwks: r#"{"keys":[]}"#.into(),
            updated_at: now,
            keys: registry_domain::keys::KeyState::default(),
        };
        (service, config)
    }

    #[test]
    fn forgetting_a_deleted_service_spares_the_new_one_of_the_same_name() {
        let cache = HostingCache::new(
            "http://{subdomain}.localhost",
            "http://api.localhost",
            1 << 20,
        )
        .unwrap();
        let old = published("api-x", 10);
        let new = published("api-x", 20);
        cache.put(&old.0, &old.1, OffsetDateTime::now_utc());
        cache.put(&new.0, &new.1, OffsetDateTime::now_utc());
        // The old id's removal arrives after the new service was published (log order).
        cache.remove(old.0.id);
        let served = cache.get("api-x").expect("the new service is still served");
        assert_eq!(served.service_id, new.0.id);
        cache.remove(new.0.id);
        assert!(cache.get("api-x").is_none());
        assert_eq!(cache.bytes(), 0);
    }

    #[test]
    fn memory_is_bounded_and_the_least_recently_served_leave_it() {
        // Each entry counts about 1,040 bytes (no retired key, no source kept): two fit, three
        // do not.
        let cache = HostingCache::new("http://{subdomain}.localhost", "http://api.localhost", 2500)
            .unwrap();
        let (a, b, c) = (
            published("a-x", 1000),
            published("b-x", 1000),
            published("c-x", 1000),
        );
        cache.put(&a.0, &a.1, OffsetDateTime::now_utc());
        cache.put(&b.0, &b.1, OffsetDateTime::now_utc());
        assert!(cache.get("a-x").is_some()); // a is served after b was published
        cache.put(&c.0, &c.1, OffsetDateTime::now_utc());
        assert!(cache.bytes() <= 2500, "{}", cache.bytes());
        assert!(matches!(cache.lookup("b-x"), Lookup::Evicted(id) if id == b.0.id));
        assert!(matches!(cache.lookup("a-x"), Lookup::Hit(_)));
        assert!(matches!(cache.lookup("nobody-x"), Lookup::Miss));
        assert_eq!(cache.len(), 3);
        // Read again, it comes back and something else leaves.
        cache.put(&b.0, &b.1, OffsetDateTime::now_utc());
        assert!(matches!(cache.lookup("b-x"), Lookup::Hit(_)));
        assert!(cache.bytes() <= 2500);
        cache.remove(b.0.id);
        assert!(matches!(cache.lookup("b-x"), Lookup::Miss));
        // A republication replaces in one step, and the bytes follow.
        let before = cache.bytes();
        cache.put(&a.0, &a.1, OffsetDateTime::now_utc());
        assert_eq!(cache.bytes(), before);
    }

    #[test]
    fn documents_published_under_another_template_are_re_pointed() {
        let stored = r#"{"issuer":"http://a-acme.old:1","jwks_uri":"http://a-acme.old:1/openid/v1/jwks","x":1}"#;
        assert_eq!(
            current_discovery(stored, "https://a-acme.new"),
            r#"{"issuer":"https://a-acme.new","jwks_uri":"https://a-acme.new/openid/v1/jwks","x":1}"#
        );
        let current =
            r#"{"issuer":"https://a-acme.new","jwks_uri":"https://a-acme.new/openid/v1/jwks"}"#;
        assert_eq!(current_discovery(current, "https://a-acme.new"), current);
    }

    #[test]
    fn recognises_hosted_hosts() {
        let cache = HostingCache::new(
            "http://{subdomain}.localhost:8080",
            "http://localhost:8080",
            1 << 20,
        )
        .unwrap();
        assert_eq!(
            cache
                .subdomain_for_host("api-acme.localhost:8080")
                .as_deref(),
            Some("api-acme")
        );
        assert_eq!(
            cache.subdomain_for_host("API-acme.LOCALHOST").as_deref(),
            Some("api-acme")
        );
        assert_eq!(
            cache
                .subdomain_for_host("api-acme.localhost.:8080")
                .as_deref(),
            Some("api-acme")
        );
        assert_eq!(cache.subdomain_for_host("localhost.:8080").as_deref(), None);
        assert_eq!(
            cache.subdomain_for_host("api-acme.localhost..").as_deref(),
            None
        );
        assert_eq!(cache.subdomain_for_host("localhost:8080").as_deref(), None);
        assert_eq!(cache.subdomain_for_host("a.b.localhost").as_deref(), None);
        assert_eq!(cache.subdomain_for_host("example.com").as_deref(), None);
        assert_eq!(cache.subdomain_for_host(".localhost").as_deref(), None);
        assert_eq!(cache.subdomain_for_host("é.localhost").as_deref(), None);
        assert_eq!(
            cache
                .subdomain_for_host(&format!("{}.localhost", "a".repeat(64)))
                .as_deref(),
            None
        );
        let prefixed = HostingCache::new(
            "https://oidc-{subdomain}.example.com/",
            "https://api.example.com",
            1 << 20,
        )
        .unwrap();
        assert_eq!(
            prefixed
                .subdomain_for_host("oidc-x-acme.example.com")
                .as_deref(),
            Some("x-acme")
        );
        assert_eq!(
            prefixed.subdomain_for_host("api.example.com").as_deref(),
            None
        );
        assert_eq!(
            prefixed
                .subdomain_for_host("OIDC-X-acme.Example.COM")
                .as_deref(),
            Some("x-acme")
        );
        assert!(
            HostingCache::new("http://localhost:8080/{subdomain}", "http://localhost", 1).is_err()
        );
        assert!(HostingCache::new(
            "https://{subdomain}.example.com/oidc",
            "http://localhost",
            1
        )
        .is_err());
    }
}
