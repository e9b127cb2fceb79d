//! One subdomain's documents, ready to send ([`Hosted`]), built from what its service publishes
//! ([`Publication`]), with every byte it keeps counted (its `footprint`, which the cache's bound
//! sums) and what it needs to build itself again when a retired key's time runs out.

use bytes::Bytes;
use registry_domain::keys::KeyState;
use registry_domain::publishing::point_at;
use registry_domain::service::{DocumentDates, Publication};
use registry_domain::timestamp::whole_second;
use sha2::{Digest, Sha256};
use std::ops::Range;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use time::OffsetDateTime;
use uuid::Uuid;

/// What an allocation of `len` bytes is counted as: glibc's malloc's cost (a header of 8
/// bytes, rounded up to 16, 32 at least). The `registry` binary does not run glibc's malloc but
/// jemalloc (`tikv-jemallocator`, the global allocator of crates/server/src/main.rs), which keeps
/// no header and rounds up to its size classes (16 bytes apart up to 128, then four per
/// doubling): up to 128 bytes this counts at least what jemalloc takes, above it jemalloc may
/// take up to a quarter more. Every allocation an entry keeps is counted, at this estimate.
const fn allocation(len: usize) -> usize {
    if len == 0 {
        return 0;
    }
    let chunk = (len + 8 + 15) & !15;
    if chunk < 32 {
        32
    } else {
        chunk
    }
}

/// What a `Bytes` of `len` bytes keeps once it has been sent: its buffer, and the shared header
/// (buffer, capacity, count) that its first clone allocates.
const fn shared_bytes(len: usize) -> usize {
    if len == 0 {
        return 0;
    }
    allocation(len) + allocation(3 * std::mem::size_of::<usize>())
}

/// Slots of the subdomain map counted per entry: the map grows by doubling, so it is at least
/// 7/16 full, and the cache's map shrinks it when it is less than a third full.
pub(super) const MAP_SLOTS_PER_ENTRY: usize = 3;

/// One document, ready to send: body and headers are built once, when it is published, and
/// sending them shares the bytes (reference counts, no copy).
#[derive(Debug, Clone)]
pub struct Document {
    /// The body.
    pub body: Bytes,
    /// Strong entity tag, quoted: a digest of the body.
    pub etag: Bytes,
}

impl Document {
    /// `text` and its ETag, in one allocation.
    pub(crate) fn new(text: &str) -> Self {
        let mut parts = Text::with_capacity(text.len() + ETAG_LEN);
        let body = parts.push(text.as_bytes());
        let etag = parts.etag_of(body.clone());
        let bytes = parts.freeze();
        Self {
            body: bytes.slice(body),
            etag: bytes.slice(etag),
        }
    }
}

/// A quoted ETag's length: 32 hexadecimal digits between quotes.
const ETAG_LEN: usize = 34;

/// An entry's text written into one buffer, each part then a slice of it: the clones a
/// response makes of its body and headers count references in one place, where one
/// allocation per part would put each count on a line of memory of its own (a seldom fetched
/// issuer's entry is not in the processor's cache: each of those lines would be a miss).
struct Text(Vec<u8>);

impl Text {
    fn with_capacity(len: usize) -> Self {
        Self(Vec::with_capacity(len))
    }

    /// Appends `part`; answers where it is.
    fn push(&mut self, part: &[u8]) -> Range<usize> {
        let start = self.0.len();
        self.0.extend_from_slice(part);
        start..self.0.len()
    }

    /// Appends the strong ETag of the part at `body` (a digest of its bytes, quoted).
    fn etag_of(&mut self, body: Range<usize>) -> Range<usize> {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let digest = Sha256::digest(&self.0[body]);
        let mut etag = [b'"'; ETAG_LEN];
        for (i, byte) in digest[..16].iter().enumerate() {
            etag[1 + 2 * i] = HEX[usize::from(byte >> 4)];
            etag[2 + 2 * i] = HEX[usize::from(byte & 15)];
        }
        self.push(&etag)
    }

    /// The buffer, in an allocation of exactly its length (what the entry's footprint counts).
    fn freeze(self) -> Bytes {
        let mut bytes = self.0;
        bytes.shrink_to_fit();
        Bytes::from(bytes)
    }
}

/// `part`, a slice of `from`, as the same slice of `to` (a copy of `from`).
fn moved(part: &Bytes, from: &Bytes, to: &Bytes) -> Bytes {
    if part.is_empty() {
        return Bytes::new();
    }
    let (part_at, from_at) = (part.as_ptr_range(), from.as_ptr_range());
    debug_assert!(from_at.start <= part_at.start && part_at.end <= from_at.end);
    let start = part_at.start as usize - from_at.start as usize;
    to.slice(start..start + part.len())
}

/// What an entry keeps to build itself again when a retired key's time runs out, without the
/// database: the retired keys as JSON text (parsed, a key costs several times its text, and
/// the text's size is known exactly), and the times `Last-Modified` is made of.
#[derive(Debug)]
pub(super) struct Source {
    pub(super) retired: Box<str>,
    updated_at: OffsetDateTime,
    previous_change_at: Option<OffsetDateTime>,
    dates: DocumentDates,
}

/// What a subdomain serves.
///
/// Everything it keeps is counted in `Hosted::footprint`, which the cache's byte bound sums
/// (docs/api.md, "Limits that hold (second security review)", "Hosting memory"): its documents and
/// their headers, the uploaded key set when it differs from the served one (all of these slices
/// of one buffer), what it is rebuilt from, and its share of the cache's map.
#[derive(Debug)]
pub struct Hosted {
    /// The discovery document.
    pub discovery: Document,
    /// The public key set: the uploaded keys, then the retired keys still published.
    pub jwks: Document,
    /// The key set as uploaded (what `GET /services/{s}/config` returns): the same bytes as
    /// `jwks` while no retired key is published.
    pub uploaded_jwks: Bytes,
    /// When the documents last changed (whole seconds, for If-Modified-Since).
    pub modified_at: OffsetDateTime,
    /// `modified_at` as the cache's [`DateText`] writes it.
    pub last_modified: Bytes,
    /// The service's id as text: the `Surrogate-Key` of the documents (docs/api.md, "Behind a
    /// CDN"), made once per entry like the other headers rather than at every response.
    pub surrogate_key: Bytes,
    date_text: DateText,
    /// When the discovery document last changed, to the millisecond (the fetch evidence:
    /// docs/api.md, "Fetch evidence").
    pub discovery_changed_at: OffsetDateTime,
    /// When the key set last changed (by a write, or a retired key leaving), to the millisecond.
    pub jwks_changed_at: OffsetDateTime,
    /// Whether another change of the documents falls in the second of `modified_at`: a client
    /// holding that date may hold an older version, so the date alone never answers 304.
    pub modified_second_shared: bool,
    /// Expiry of an anonymous service.
    pub expires_at: Option<OffsetDateTime>,
    /// When the public key set changes by itself (a retired key's time runs out): the entry is
    /// built again from its source then.
    pub refresh_at: Option<OffsetDateTime>,
    /// Kept only while `refresh_at` is set (most entries never change by themselves).
    pub(super) source: Option<Box<Source>>,
    /// The cache's use counter when last served (the least recently served leave first).
    pub(super) last_served: AtomicU64,
    pub(super) service_id: Uuid,
    /// Bytes of memory it keeps, its key in the cache's map included.
    pub(super) footprint: usize,
    /// The buffer every document and header above is a slice of.
    pub(super) text: Bytes,
}

/// A worker's own copy (see `near`): every byte in its own buffer, so that sending it touches
/// no reference count another worker touches. Without what it is rebuilt from: only the shared
/// entry is rebuilt.
impl crate::near::Copied for Hosted {
    fn copied(&self) -> Arc<Self> {
        let text = Bytes::copy_from_slice(&self.text);
        let own = |part: &Bytes| moved(part, &self.text, &text);
        let document = |document: &Document| Document {
            body: own(&document.body),
            etag: own(&document.etag),
        };
        Arc::new(Self {
            discovery: document(&self.discovery),
            jwks: document(&self.jwks),
            uploaded_jwks: own(&self.uploaded_jwks),
            modified_at: self.modified_at,
            last_modified: own(&self.last_modified),
            surrogate_key: own(&self.surrogate_key),
            date_text: self.date_text,
            discovery_changed_at: self.discovery_changed_at,
            jwks_changed_at: self.jwks_changed_at,
            modified_second_shared: self.modified_second_shared,
            expires_at: self.expires_at,
            refresh_at: self.refresh_at,
            source: None,
            last_served: AtomicU64::new(0),
            service_id: self.service_id,
            footprint: self.footprint,
            text,
        })
    }

    fn weight(&self) -> usize {
        self.footprint
    }
}

/// How the documents' last change is written in the answers that carry it (the server gives
/// an HTTP date): made once per entry, when it is built, so serving it formats nothing.
pub type DateText = fn(OffsetDateTime) -> Bytes;

/// What an entry is built from.
struct Parts<'a> {
    date_text: DateText,
    service_id: Uuid,
    subdomain: &'a str,
    expires_at: Option<OffsetDateTime>,
    discovery: &'a [u8],
    uploaded_jwks: &'a [u8],
    /// The retired keys (current ones have no end).
    retired: &'a KeyState,
    updated_at: OffsetDateTime,
    previous_change_at: Option<OffsetDateTime>,
    dates: DocumentDates,
}

impl Hosted {
    /// The documents `publication` serves under `issuer`, at `now`.
    pub(super) fn new(
        publication: Publication,
        issuer: &str,
        now: OffsetDateTime,
        date_text: DateText,
    ) -> Self {
        let retired = KeyState {
            keys: publication.retired,
            ..KeyState::default()
        };
        Self::build(
            Parts {
                date_text,
                service_id: publication.service_id,
                subdomain: &publication.subdomain,
                expires_at: publication.expires_at,
                discovery: current_discovery(publication.openid_configuration, issuer).as_bytes(),
                uploaded_jwks: publication.jwks.as_bytes(),
                retired: &retired,
                updated_at: publication.updated_at,
                previous_change_at: publication.previous_change_at,
                dates: publication.dates,
            },
            now,
        )
    }

    fn build(parts: Parts<'_>, now: OffsetDateTime) -> Self {
        let Parts {
            retired,
            updated_at,
            ..
        } = parts;
        // The served set is the uploaded one unless retired keys are still published.
        let served_jwks = retired.published(now).next().map(|_| {
            let uploaded = serde_json::from_slice(parts.uploaded_jwks).unwrap_or_default();
            retired.served(&uploaded, now).to_string()
        });
        // Every change of the documents this entry knows of: its publication, then each
        // retired key that left the set since (a change of the set, at the time it left).
        let changes = || {
            std::iter::once(updated_at).chain(
                retired
                    .keys
                    .iter()
                    .filter_map(|k| k.published_until)
                    .filter(|until| updated_at < *until && *until <= now),
            )
        };
        let changed = changes().fold(updated_at, OffsetDateTime::max);
        // The key set's own date: its last write (the store dates the keys that left before
        // it), then the keys that left since.
        let jwks_changed_at =
            (changes().skip(1)).fold(parts.dates.jwks.unwrap_or(updated_at), OffsetDateTime::max);
        let modified_at = whole_second(changed);
        let in_that_second = changes()
            .chain(parts.previous_change_at)
            .filter(|change| whole_second(*change) == modified_at)
            .count();
        let refresh_at = retired.next_change(now);
        let source = refresh_at.map(|_| {
            Box::new(Source {
                retired: serde_json::to_string(retired)
                    .unwrap_or_default()
                    .into_boxed_str(),
                updated_at,
                previous_change_at: parts.previous_change_at,
                dates: parts.dates,
            })
        });
        let last_modified = (parts.date_text)(modified_at);
        let mut surrogate_key = Uuid::encode_buffer();
        let surrogate_key = parts
            .service_id
            .hyphenated()
            .encode_lower(&mut surrogate_key);
        let mut text = Text::with_capacity(
            parts.discovery.len()
                + parts.uploaded_jwks.len()
                + served_jwks.as_ref().map_or(0, String::len)
                + 2 * ETAG_LEN
                + last_modified.len()
                + surrogate_key.len(),
        );
        let discovery = text.push(parts.discovery);
        let discovery_etag = text.etag_of(discovery.clone());
        let uploaded_jwks = text.push(parts.uploaded_jwks);
        let jwks = match &served_jwks {
            Some(served) => text.push(served.as_bytes()),
            // One copy of the bytes, one ETag.
            None => uploaded_jwks.clone(),
        };
        let jwks_etag = text.etag_of(jwks.clone());
        let last_modified = text.push(&last_modified);
        let surrogate_key = text.push(surrogate_key.as_bytes());
        let text = text.freeze();
        let mut hosted = Self {
            discovery: Document {
                body: text.slice(discovery),
                etag: text.slice(discovery_etag),
            },
            jwks: Document {
                body: text.slice(jwks),
                etag: text.slice(jwks_etag),
            },
            uploaded_jwks: text.slice(uploaded_jwks),
            modified_at,
            last_modified: text.slice(last_modified),
            surrogate_key: text.slice(surrogate_key),
            date_text: parts.date_text,
            discovery_changed_at: parts.dates.discovery.unwrap_or(updated_at),
            jwks_changed_at,
            modified_second_shared: in_that_second > 1,
            expires_at: parts.expires_at,
            refresh_at,
            source,
            last_served: AtomicU64::new(0),
            service_id: parts.service_id,
            footprint: 0,
            text,
        };
        hosted.footprint = hosted.kept_bytes(parts.subdomain);
        hosted
    }

    /// Built again at `now` from what it keeps, when its key set changed by itself.
    pub(super) fn rebuilt(&self, subdomain: &str, now: OffsetDateTime) -> Option<Self> {
        let source = self.source.as_deref()?;
        let retired: KeyState = serde_json::from_str(&source.retired).ok()?;
        Some(Self::build(
            Parts {
                date_text: self.date_text,
                service_id: self.service_id,
                subdomain,
                expires_at: self.expires_at,
                discovery: &self.discovery.body,
                uploaded_jwks: &self.uploaded_jwks,
                retired: &retired,
                updated_at: source.updated_at,
                previous_change_at: source.previous_change_at,
                dates: source.dates,
            },
            now,
        ))
    }

    /// The service whose documents these are.
    pub fn service_id(&self) -> Uuid {
        self.service_id
    }

    /// Whether the public key set has changed by itself since the entry was built.
    pub fn is_stale_at(&self, now: OffsetDateTime) -> bool {
        self.refresh_at.is_some_and(|at| now >= at)
    }

    /// Every allocation the entry keeps, as the allocator counts it: the entry itself (behind
    /// its `Arc`), the buffer of its documents and headers, its source, and its keys and slots
    /// in the cache's two maps.
    fn kept_bytes(&self, subdomain: &str) -> usize {
        let source = self.source.as_ref().map_or(0, |source| {
            allocation(std::mem::size_of::<Source>()) + allocation(source.retired.len())
        });
        let slot = std::mem::size_of::<(String, Arc<Hosted>)>() + 1;
        // Its service's entry in the map by id: the id, the subdomain again.
        let by_id = std::mem::size_of::<(Uuid, String)>() + 1;
        allocation(std::mem::size_of::<Hosted>() + 2 * std::mem::size_of::<usize>())
            + shared_bytes(self.text.len())
            + source
            + 2 * allocation(subdomain.len())
            + MAP_SLOTS_PER_ENTRY * (slot + by_id)
    }
}

/// The stored discovery document, re-pointed at `issuer` when it was published under another
/// issuer URL (the operator changed `REGISTRY_ISSUER_URL_TEMPLATE`): verifiers refuse a
/// document whose `issuer` is not the URL they fetched it from.
fn current_discovery(stored: String, issuer: &str) -> String {
    // The registry stores the document as serde_json writes it, `issuer` first unless the
    // upload put it later: then the answer is known without parsing the whole document.
    if let Some(rest) = stored.strip_prefix(r#"{"issuer":"#) {
        let quoted = serde_json::to_string(issuer).unwrap_or_default();
        if rest
            .strip_prefix(quoted.as_str())
            .is_some_and(|after| after.starts_with([',', '}']))
        {
            return stored;
        }
    }
    match serde_json::from_str::<serde_json::Value>(&stored) {
        Ok(serde_json::Value::Object(mut doc))
            if doc.get("issuer").and_then(|i| i.as_str()) != Some(issuer) =>
        {
            point_at(&mut doc, issuer);
            serde_json::Value::Object(doc).to_string()
        }
        _ => stored,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_published_under_another_template_are_re_pointed() {
        let stored = r#"{"issuer":"http://a-acme.old:1","jwks_uri":"http://a-acme.old:1/openid/v1/jwks","x":1}"#;
        assert_eq!(
            current_discovery(stored.to_owned(), "https://a-acme.new"),
            r#"{"issuer":"https://a-acme.new","jwks_uri":"https://a-acme.new/openid/v1/jwks","x":1}"#
        );
        let current =
            r#"{"issuer":"https://a-acme.new","jwks_uri":"https://a-acme.new/openid/v1/jwks"}"#;
        assert_eq!(
            current_discovery(current.to_owned(), "https://a-acme.new"),
            current
        );
    }
}
