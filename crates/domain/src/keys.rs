//! The key lifecycle of a published service (docs/api.md, "Key lifecycle"): rotations that never
//! break a verifier. Verifiers cache a key set and keep accepting tokens signed by a key until
//! those expire, so a key that an upload drops is **retired**: it stays in the public key set,
//! after the uploaded keys, until `retiredAt + retainRemovedKeysHours`, then leaves it on its own.
//!
//! Time is a parameter everywhere: [`rotate`] and [`KeyState::served`] take `now`.
//!
//! ```
//! use registry_domain::keys::{rotate, KeyState, Rotation};
//! use serde_json::json;
//! use time::macros::datetime;
//!
//! let key = |kid: &str, x: &str| json!({"kty": "OKP", "crv": "Ed25519", "kid": kid, "x": x});
//! let a = key("a", "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo");
//! let b = key("b", "3p7bfXt9wbTTW2HC7OQ1Nz-DQ8hbeGdNrfx-FG-IK08");
//! let t0 = datetime!(2026-11-23 10:00 UTC);
//! let first = rotate(&KeyState::default(), "default", &[a.clone()], 24, t0, None).unwrap();
//! let second = rotate(&first.state, "default", &[b.clone()], 24, t0 + time::Duration::hours(1), None).unwrap();
//! assert_eq!(second.retired, ["a"]);
//! // Until a's time is up, the public set holds b, then a.
//! let served = second.state.served(&json!({"keys": [b]}), t0 + time::Duration::hours(2));
//! assert_eq!(served["keys"].as_array().unwrap().len(), 2);
//! let later = second.state.served(&json!({"keys": []}), t0 + time::Duration::hours(26));
//! assert_eq!(later["keys"].as_array().unwrap().len(), 0);
//! ```

use crate::publishing::{no_overlap_warning, publish, Publication};
// The upload's retention is read with the rest of the upload (`publishing`); its rules are
// the key lifecycle's.
use crate::network::Network;
pub use crate::publishing::{
    lead_seconds, retain_hours, DEFAULT_LEAD_SECONDS, DEFAULT_RETAIN_HOURS, MAX_LEAD_SECONDS,
    MAX_RETAIN_HOURS,
};
use crate::timestamp::rfc3339;
use crate::withdrawn::WithdrawnKey;
use crate::{Violation, Violations};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use time::OffsetDateTime;

/// Imports a public JSON Web Key as a verifier would (an EC point on its curve, an RSA key that
/// builds): what the registry publishes must be usable. The OIDC adapter implements it with the
/// very code that verifies identity tokens.
pub trait KeyImport: Send + Sync {
    /// `Ok` when the key imports; else a sentence saying why not.
    fn import(&self, jwk: &serde_json::Map<String, serde_json::Value>) -> Result<(), String>;
}

/// Most keys in the public key set, uploaded and retained together, every source's.
pub const MAX_PUBLISHED_KEYS: usize = 100;

/// The key source of an upload that names none (docs/api.md, "Key sources").
pub const DEFAULT_SOURCE: &str = "default";

/// The key source of the keys the registry makes and signs with (docs/api.md, "Managed
/// signing"): no upload may name it.
pub const MANAGED_SOURCE: &str = "managed";

/// Longest key source name.
pub const MAX_SOURCE_NAME: usize = 32;

/// Checks a key source's name (`[a-z0-9-]{1,32}`); `None` is [`DEFAULT_SOURCE`].
///
/// ```
/// use registry_domain::keys::source_name;
/// assert_eq!(source_name(None).unwrap(), "default");
/// assert_eq!(source_name(Some("blue-1")).unwrap(), "blue-1");
/// assert!(source_name(Some("Blue")).is_err());
/// assert!(source_name(Some("")).is_err());
/// ```
pub fn source_name(name: Option<&str>) -> Result<&str, String> {
    let Some(name) = name else {
        return Ok(DEFAULT_SOURCE);
    };
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    if (1..=MAX_SOURCE_NAME).contains(&name.len()) && name.chars().all(allowed) {
        Ok(name)
    } else {
        Err(format!(
            "{name:?} is not a key source name: 1 to {MAX_SOURCE_NAME} characters of a-z, 0-9 and -"
        ))
    }
}

fn default_source() -> String {
    DEFAULT_SOURCE.to_owned()
}

fn is_default_source(source: &str) -> bool {
    source == DEFAULT_SOURCE
}

/// One key a service has published, current or retired.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyRecord {
    /// Its `kid`.
    pub kid: String,
    /// The key as it was uploaded (public members only: uploads with private ones are refused).
    pub jwk: Map<String, Value>,
    /// RFC 7638 thumbprint (SHA-256, base64url): the key's material, whatever its other members.
    pub thumbprint: String,
    /// When it was first published.
    #[serde(with = "time::serde::rfc3339")]
    pub first_published_at: OffsetDateTime,
    /// When an upload dropped it; `None` while it is current.
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub retired_at: Option<OffsetDateTime>,
    /// Until when a retired key stays published.
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub published_until: Option<OffsetDateTime>,
    /// Seconds it must have been published before it is safe to sign with: the
    /// `rotationLeadSeconds` of the upload that first published it (docs/api.md, "Key
    /// readiness"). Keys published before leads existed have the default.
    #[serde(default = "default_lead_seconds")]
    pub lead_seconds: u32,
    /// The key source whose upload published it (docs/api.md, "Key sources"); keys published
    /// before sources existed are the default source's.
    #[serde(default = "default_source", skip_serializing_if = "is_default_source")]
    pub source: String,
    /// The other key sources that uploaded it with the same material since (docs/api.md, "Key
    /// sources"): it belongs to each, and retires only when none of them still has it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also_sources: Vec<String>,
    /// Its verifiers, fixed when it was first published (docs/api.md, "Key readiness"); `None`
    /// for a key published before they were fixed, whose verifiers are found from the evidence
    /// of its week before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verifiers: Option<Vec<KeyVerifier>>,
    /// When the owner last dismissed a verifier that had not fetched it yet (docs/api.md, "Key
    /// readiness"): a key that dismissal makes safe became safe then, not when the evidence
    /// alone would date it.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "time::serde::rfc3339::option"
    )]
    pub dismissed_at: Option<OffsetDateTime>,
}

/// A verifier of a key (docs/api.md, "Key readiness"): an agent that fetched the service's key
/// set in at least two distinct clock hours of the week before the key was first published,
/// with the networks it fetched from. Only its fetches from those networks count for the key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyVerifier {
    /// Its User-Agent.
    pub agent: String,
    /// The networks it fetched from, the most often seen first.
    pub networks: Vec<Network>,
    /// Its last fetch before the key was published.
    #[serde(with = "time::serde::rfc3339")]
    pub last_fetched_at: OffsetDateTime,
}

/// An agent that fetched a service's key set in the week before a key's publication: what
/// decides whether it is one of the key's verifiers (docs/api.md, "Key readiness").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifierCandidate {
    /// The User-Agent.
    pub agent: String,
    /// Its fetches in the period.
    pub count: u64,
    /// In how many distinct clock hours it fetched.
    pub hours: u32,
    /// Its last fetch in the period.
    pub last_at: OffsetDateTime,
    /// The networks it fetched from, seen in the most distinct hours first.
    pub networks: Vec<SeenNetwork>,
}

/// A network an agent fetched the key set from, and in how many distinct clock hours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeenNetwork {
    /// The network (an IPv4 /24, an IPv6 /48).
    pub network: Network,
    /// In how many distinct clock hours the agent fetched from it.
    pub hours: u32,
}

/// How far back a verifier counts, from a key's first publication and from now (docs/api.md,
/// "Key readiness").
pub const VERIFIER_WINDOW: time::Duration = time::Duration::days(7);

/// Verifiers a key holds at most: the most active agents (seen in the most distinct hours,
/// then with the most fetches).
pub const MAX_VERIFIERS: usize = 32;

/// Networks a verifier keeps at most.
pub const MAX_VERIFIER_NETWORKS: usize = 8;

/// Verifiers one network gives a key at most: however many agents it made up over the week,
/// one network holds a key back by at most this many (the owner dismisses them, or they fetch).
pub const VERIFIERS_PER_NETWORK: usize = 4;

/// In how many distinct clock hours an agent must have fetched the key set to be a verifier.
pub const VERIFIER_HOURS: u32 = 2;

/// The verifiers of a key published now, from the agents that fetched the key set in the week
/// before (`candidates`): those seen in at least `min_hours` distinct hours, the
/// [`MAX_VERIFIERS`] most active (seen in the most distinct hours of the week, then with the
/// most fetches, each agent's own as the store keeps them: a real verifier fetches hour after
/// hour, and agents made up to push it out of the places must fetch in as many hours, and
/// more often, each really), each with its [`MAX_VERIFIER_NETWORKS`] most seen networks,
/// and no more than [`VERIFIERS_PER_NETWORK`] whose every network has given that many already.
/// A verifier's networks are those it was seen from in `min_hours` distinct hours too, and in
/// half as many hours as from its steadiest network at least, when it has any: fetches under a
/// verifier's agent from an outsider's network, in a few hours of the week before, do not make
/// that network the verifier's (a later fetch from there would satisfy it). One
/// seen from no network that often (a cloud that fetches from a new address each time) keeps
/// every network it was seen from.
/// One seen from no known network (its fetches stored before networks were, or shipped in a
/// cache's log without the client's address) can be satisfied by no fetch: it holds the key
/// until it has not been seen for 7 days, or its owner dismisses it, never the other way.
pub fn verifiers_of(candidates: &[VerifierCandidate], min_hours: u32) -> Vec<KeyVerifier> {
    let mut ranked: Vec<&VerifierCandidate> = (candidates.iter())
        .filter(|c| c.hours >= min_hours)
        .collect();
    ranked.sort_by(|a, b| {
        (b.hours.cmp(&a.hours))
            .then_with(|| b.count.cmp(&a.count))
            .then_with(|| a.agent.cmp(&b.agent))
    });
    let mut given: std::collections::HashMap<Network, usize> = Default::default();
    let mut chosen = Vec::new();
    for c in ranked {
        if chosen.len() == MAX_VERIFIERS {
            break;
        }
        let steadiest = c.networks.iter().map(|n| n.hours).max().unwrap_or(0);
        let steady = steadiest >= min_hours;
        // Seen in half the hours of its steadiest network at least: an outsider who fetches
        // under a verifier's well-known agent must do so about as steadily as the verifier.
        let enough = min_hours.max(steadiest.div_ceil(2));
        let networks: Vec<Network> = (c.networks.iter())
            .filter(|n| !steady || n.hours >= enough)
            .take(MAX_VERIFIER_NETWORKS)
            .map(|n| n.network)
            .collect();
        let spent = |n: &Network| given.get(n).is_some_and(|&k| k >= VERIFIERS_PER_NETWORK);
        if !networks.is_empty() && networks.iter().all(spent) {
            continue;
        }
        for network in &networks {
            *given.entry(*network).or_default() += 1;
        }
        chosen.push(KeyVerifier {
            agent: c.agent.clone(),
            networks,
            last_fetched_at: c.last_at,
        });
    }
    chosen
}

fn default_lead_seconds() -> u32 {
    DEFAULT_LEAD_SECONDS
}

impl KeyRecord {
    /// Whether `source` holds the key (it published it first, or uploaded it since).
    pub fn held_by(&self, source: &str) -> bool {
        self.source == source || self.also_sources.iter().any(|s| s == source)
    }

    /// Every source that holds the key, the first publisher first.
    pub fn sources(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.source.as_str()).chain(self.also_sources.iter().map(String::as_str))
    }

    /// The key with `source` added to its holders.
    fn held_also_by(&self, source: &str) -> KeyRecord {
        let mut key = self.clone();
        if !key.held_by(source) {
            key.also_sources.push(source.to_owned());
        }
        key
    }

    /// The key without `source` among its holders; `None` when it was the only one.
    fn without_holder(&self, source: &str) -> Option<KeyRecord> {
        let mut holders: Vec<&str> = self.sources().filter(|s| *s != source).collect();
        if holders.is_empty() {
            return None;
        }
        let first = holders.remove(0).to_owned();
        Some(KeyRecord {
            also_sources: holders.into_iter().map(str::to_owned).collect(),
            source: first,
            ..self.clone()
        })
    }

    /// The key as it is remembered once it left the key set at `at`, or at the end of its
    /// retention if that came first (a retired key leaves on its own before the upkeep drops
    /// it).
    pub fn withdrawn(&self, at: OffsetDateTime) -> WithdrawnKey {
        WithdrawnKey {
            kid: self.kid.clone(),
            thumbprint: self.thumbprint.clone(),
            source: self.source.clone(),
            first_published_at: self.first_published_at,
            retired_at: self.retired_at,
            withdrawn_at: self.published_until.filter(|u| *u <= at).unwrap_or(at),
        }
    }

    /// Whether the key is in the public key set at `now`.
    pub fn is_published_at(&self, now: OffsetDateTime) -> bool {
        self.published_until.is_none_or(|until| now < until)
    }

    /// `"current"` or `"retired"`.
    pub fn state(&self) -> &'static str {
        if self.retired_at.is_some() {
            "retired"
        } else {
            "current"
        }
    }

    /// When it was retired and until when it stays published, as `GET …/keys` lists it: an
    /// uploaded key dropped by an upload, or a managed key of `retiring` (no longer signing);
    /// `None` for a current key.
    pub fn retirement(
        &self,
        retiring: &[Retiring],
    ) -> Option<(OffsetDateTime, Option<OffsetDateTime>)> {
        match self.retired_at {
            Some(at) => Some((at, self.published_until)),
            None => (retiring.iter())
                .find(|r| r.kid == self.kid && self.held_by(MANAGED_SOURCE))
                .map(|r| (r.retired_at, Some(r.published_until))),
        }
    }
}

/// A managed key that no longer signs (docs/api.md, "Managed signing"): still current in the
/// key state, which keeps it published, but listed as retired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retiring {
    /// Its `kid`.
    pub kid: String,
    /// When it stopped signing.
    pub retired_at: OffsetDateTime,
    /// When it leaves the key set: every token it signed has expired by then.
    pub published_until: OffsetDateTime,
}

/// Every key a service publishes: the current ones by source (in the order of the sources'
/// names) and in upload order within a source, then the retired ones.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyState {
    /// The keys.
    pub keys: Vec<KeyRecord>,
    /// The key sources that have current keys, by name (empty in states written before
    /// sources existed: their keys are the default source's).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sources: BTreeMap<String, SourceUpload>,
    /// The keys that left the key set in the eight days before its last write, newest first:
    /// recorded by the store as it writes, whatever use case dropped them
    /// ([`crate::withdrawn::remembered`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub withdrawn: Vec<WithdrawnKey>,
}

/// What the registry keeps of a key source's latest upload besides its keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceUpload {
    /// Its rewritten discovery document; `None` while it is the one published (the latest
    /// upload's), so that one source's document is stored once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovery: Option<Value>,
    /// Its `retainRemovedKeysHours`: how long its keys stay published when the source is removed.
    pub retain_hours: u32,
    /// The `kid`s of its upload in their order, which its keys are listed in (a key it shares
    /// has its place in each source's upload; the key set lists it once, where its first source
    /// put it). Empty in states written before it was recorded, and for the managed keys: then
    /// the key set's order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kids: Vec<String>,
}

/// What an upload did to the keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rotation {
    /// The keys after the upload.
    pub state: KeyState,
    /// The `kid`s of the upload, in its order.
    pub uploaded: Vec<String>,
    /// `kid`s of the uploaded keys that were not published before.
    pub added: Vec<String>,
    /// `kid`s that this upload retired (kept published for a while, unless the retention is 0).
    pub retired: Vec<String>,
    /// Until when the keys this upload retired stay published (`None`: not at all).
    pub retired_until: Option<OffsetDateTime>,
}

/// A problem of a rotation: its pointer, its sentence, and whether it is `kid-reused`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RotationProblem {
    /// The violation, with its pointer into the upload.
    pub violation: Violation,
    /// True for the `kid-reused` problem (its own slug), false for `validation-failed`.
    pub kid_reused: bool,
}

/// The RFC 7638 thumbprint of a public JWK (SHA-256, base64url); `None` for a key without the
/// members its type requires.
///
/// ```
/// use registry_domain::keys::thumbprint;
/// use serde_json::json;
/// // The example of RFC 7638 §3.1.
/// let key = json!({"kty": "RSA", "e": "AQAB", "alg": "RS256", "kid": "2011-04-29",
///   "n": "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw"});
/// assert_eq!(
///     thumbprint(key.as_object().unwrap()).unwrap(),
///     "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs"
/// );
/// ```
///
/// The key's numbers are read in their canonical form (RFC 7638 §3.2: base64url without
/// padding, an RSA integer in its fewest octets), so that one key written two ways, a modulus
/// with a leading zero octet, padding, has one thumbprint: a withdrawn key is not published
/// again, nor a kid's key changed, by writing it another way.
///
/// ```
/// # use registry_domain::keys::thumbprint;
/// # use serde_json::json;
/// let key = json!({"kty": "RSA", "e": "AQAB", "n": "wQ"});
/// let padded = json!({"kty": "RSA", "e": "AAEAAQ==", "n": "AME="});
/// assert_eq!(
///     thumbprint(key.as_object().unwrap()),
///     thumbprint(padded.as_object().unwrap())
/// );
/// ```
pub fn thumbprint(jwk: &Map<String, Value>) -> Option<String> {
    let member = |name: &str| jwk.get(name).and_then(Value::as_str);
    let number = |name: &str| member(name).map(canonical_number);
    let octets = |name: &str| member(name).map(canonical_octets);
    // Required members only, in lexicographic order, no white space (RFC 7638 §3.2).
    let canonical = match member("kty")? {
        "RSA" => json!({"e": number("e")?, "kty": "RSA", "n": number("n")?}),
        "EC" => json!({"crv": member("crv")?, "kty": "EC", "x": octets("x")?, "y": octets("y")?}),
        "OKP" => json!({"crv": member("crv")?, "kty": "OKP", "x": octets("x")?}),
        _ => return None,
    };
    Some(URL_SAFE_NO_PAD.encode(Sha256::digest(canonical.to_string().as_bytes())))
}

/// The members that write a public key's material, of every key type a thumbprint reads.
const MATERIAL_MEMBERS: [&str; 5] = ["crv", "e", "n", "x", "y"];

/// A base64url member without padding; as written when it is not base64url (such a key is
/// refused on upload).
fn canonical_octets(text: &str) -> String {
    match URL_SAFE_NO_PAD.decode(text.trim_end_matches('=')) {
        Ok(bytes) => URL_SAFE_NO_PAD.encode(bytes),
        Err(_) => text.to_owned(),
    }
}

/// A base64url unsigned integer in its fewest octets (RFC 7518 §6.3.1.1), without padding.
fn canonical_number(text: &str) -> String {
    match URL_SAFE_NO_PAD.decode(text.trim_end_matches('=')) {
        Ok(bytes) => {
            let zeros = bytes.iter().take_while(|b| **b == 0).count();
            URL_SAFE_NO_PAD.encode(&bytes[zeros.min(bytes.len().saturating_sub(1))..])
        }
        Err(_) => text.to_owned(),
    }
}

/// The keys after `source` uploads `uploaded` (the checked `jwks.keys`), `retain` hours of
/// retention for the keys of that source it drops, at `now`; every other source's keys stay as
/// they are. `expires_at` is an anonymous service's end: its keys never outlive it.
pub fn rotate(
    previous: &KeyState,
    source: &str,
    uploaded: &[Value],
    retain: u32,
    now: OffsetDateTime,
    expires_at: Option<OffsetDateTime>,
) -> Result<Rotation, Vec<RotationProblem>> {
    let live: Vec<&KeyRecord> = previous.published(now).collect();
    let mut problems = Vec::new();
    let mut current = Vec::with_capacity(uploaded.len());
    let mut added = Vec::new();
    for (i, key) in uploaded.iter().enumerate() {
        let Some(jwk) = key.as_object() else { continue };
        let (Some(kid), Some(thumbprint)) =
            (jwk.get("kid").and_then(Value::as_str), thumbprint(jwk))
        else {
            continue;
        };
        let before = live.iter().find(|k| k.kid == kid);
        if let Some(before) = before.filter(|k| k.thumbprint != thumbprint) {
            let whose = if before.held_by(source) {
                String::new()
            } else {
                format!(" by key source {:?}", before.source)
            };
            problems.push(RotationProblem {
                violation: Violation::new(
                    format!("/jwks/keys/{i}"),
                    format!(
                        "kid {kid:?} is already published ({}){whose} with other key material: \
                         verifiers that cached the old key would reject tokens signed with this \
                         one. Give the new key a new kid",
                        before.state()
                    ),
                ),
                kid_reused: true,
            });
            continue;
        }
        // The same key, current already: listed once. This source's own upload of it replaces
        // its other members (`alg`, `use`…), another source's is held by this one too. One key
        // set lists it once, so every source that holds it must give it alike: another `alg`
        // would be published for none of them, or wrongly for the others.
        if let Some(before) = before.filter(|k| k.retired_at.is_none()) {
            let other = before.sources().find(|s| *s != source);
            let differs = |member: &str| before.jwk.get(member) != jwk.get(member);
            let used_otherwise = ["alg", "use", "key_ops"].into_iter().any(differs);
            if let Some(other) = other.filter(|_| used_otherwise) {
                problems.push(RotationProblem {
                    violation: Violation::new(
                        format!("/jwks/keys/{i}"),
                        format!(
                            "kid {kid:?} is published by key source {other:?} with the same key \
                             material but another alg, use or key_ops: a key the sources share \
                             is published once, so upload it as {other:?} does (or have it \
                             dropped there first), or give this key a new kid"
                        ),
                    ),
                    kid_reused: false,
                });
                continue;
            }
            current.push(match before.held_by(source) {
                true => KeyRecord {
                    jwk: jwk.clone(),
                    ..(*before).clone()
                },
                false => before.held_also_by(source),
            });
            continue;
        }
        if before.is_none() {
            added.push(kid.to_owned());
        }
        current.push(KeyRecord {
            kid: kid.to_owned(),
            jwk: jwk.clone(),
            thumbprint,
            first_published_at: before.map_or(now, |k| k.first_published_at),
            retired_at: None,
            published_until: None,
            lead_seconds: before.map_or(DEFAULT_LEAD_SECONDS, |k| k.lead_seconds),
            source: source.to_owned(),
            also_sources: Vec::new(),
            verifiers: before.and_then(|k| k.verifiers.clone()),
            dismissed_at: None,
        });
    }
    let uploaded: Vec<String> = (current.iter()).map(|k| k.kid.clone()).collect();
    let until = retirement_end(retain, now, expires_at);
    let mut retired = Vec::new();
    let mut kept = Vec::new();
    for &key in &live {
        if current.iter().any(|c| c.kid == key.kid) {
            continue;
        }
        match key.retired_at {
            // Retired earlier: its time is its own, an upload never changes it.
            Some(_) => kept.push(key.clone()),
            // Another source's current key: that source's uploads decide.
            None if !key.held_by(source) => current.push(key.clone()),
            // This source dropped it, another still has it: it stays, theirs.
            None if key.without_holder(source).is_some() => {
                current.extend(key.without_holder(source));
            }
            None => {
                retired.push(key.kid.clone());
                if retain > 0 && now < until {
                    kept.push(KeyRecord {
                        retired_at: Some(now),
                        published_until: Some(until),
                        ..key.clone()
                    });
                }
            }
        }
    }
    // Upload order within a source: this upload's for its own keys, and the order of before for
    // every other source's (a key of another source that this upload shares stays where that
    // source put it).
    let place = |k: &KeyRecord| match k.source == source {
        true => uploaded.iter().position(|kid| *kid == k.kid),
        false => live.iter().position(|l| l.kid == k.kid),
    };
    current.sort_by_cached_key(|k| (k.source.clone(), place(k)));
    let total = current.len() + kept.len();
    if total > MAX_PUBLISHED_KEYS {
        // Only keys retired before this upload can be deleted now; those it would retire are
        // still current.
        let deletable: Vec<&str> = (kept.iter())
            .filter(|k| !retired.contains(&k.kid))
            .map(|k| k.kid.as_str())
            .collect();
        let retires_kept = kept.iter().any(|k| retired.contains(&k.kid));
        let mut way_out = match (deletable.is_empty(), retires_kept) {
            (false, _) => format!(
                "Delete retired keys first (DELETE /services/{{s}}/keys/{{kid}}): {}",
                deletable.join(", ")
            ),
            (true, true) => "Upload fewer keys, or the same with \"retainRemovedKeysHours\": 0 \
                             (the keys it drops then leave at once)"
                .to_owned(),
            (true, false) => "Upload fewer keys".to_owned(),
        };
        // Other sources' keys count too, and only their own uploads (or removal) change them;
        // managed keys (signing's) are not removed that way, and not counted here.
        let others = (current.iter())
            .filter(|k| !k.held_by(source) && !k.held_by(MANAGED_SOURCE))
            .count();
        if others > 0 {
            way_out.push_str(&format!(
                "; {others} of them are other sources' (DELETE /services/{{s}}/config?source=NAME \
                 removes a source's keys)"
            ));
        }
        problems.push(RotationProblem {
            violation: Violation::new(
                "/jwks/keys",
                format!(
                    "the public key set would hold {total} keys, every source's, uploaded and \
                     retained; at most {MAX_PUBLISHED_KEYS} are published. {way_out}"
                ),
            ),
            kid_reused: false,
        });
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let retired_until = kept
        .iter()
        .filter(|k| retired.contains(&k.kid))
        .find_map(|k| k.published_until);
    current.extend(kept);
    Ok(Rotation {
        state: KeyState {
            keys: current,
            sources: previous.sources.clone(),
            withdrawn: previous.withdrawn.clone(),
        },
        uploaded,
        added,
        retired,
        retired_until,
    })
}

/// Until when a key retired at `now` with `retain` hours of retention stays published: never past
/// an anonymous service's end (`expires_at`).
fn retirement_end(
    retain: u32,
    now: OffsetDateTime,
    expires_at: Option<OffsetDateTime>,
) -> OffsetDateTime {
    never_past_end(now + time::Duration::hours(i64::from(retain)), expires_at)
}

/// `until`, but never past an anonymous service's end (`expires_at`): its keys never outlive
/// it, uploaded or managed.
pub(crate) fn never_past_end(
    until: OffsetDateTime,
    expires_at: Option<OffsetDateTime>,
) -> OffsetDateTime {
    expires_at.map_or(until, |end| until.min(end))
}

/// An accepted upload: what is published, and what it did to the keys.
#[derive(Debug, Clone, PartialEq)]
pub struct Upload {
    /// The rewritten discovery document, the key set as uploaded, the warnings.
    pub publication: Publication,
    /// The keys after the upload.
    pub rotation: Rotation,
    /// Its `retainRemovedKeysHours`.
    pub retain_hours: u32,
}

/// A refused upload: every problem, and whether it is a `kid-reused` refusal (its own slug).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadError {
    /// The problems, with pointers into the upload.
    pub violations: Violations,
    /// A `kid` published now came back with other key material.
    pub kid_reused: bool,
}

impl From<Violations> for UploadError {
    fn from(violations: Violations) -> Self {
        UploadError {
            violations,
            kid_reused: false,
        }
    }
}

/// `PUT /services/{s}/config[?source=…]` with its key lifecycle: the checks and rewrite of
/// [`publish`], every key imported as a verifier would
/// ([`KeyImport`]), then [`rotate`] of `source`'s keys from `previous` at `now` (`expires_at`:
/// an anonymous service's end). The state's sources record this upload
/// ([`KeyState::with_upload`]).
pub fn upload(
    body: &Value,
    issuer: &str,
    source: &str,
    previous: &KeyState,
    import: &dyn KeyImport,
    now: OffsetDateTime,
    expires_at: Option<OffsetDateTime>,
) -> Result<Upload, UploadError> {
    let mut publication = publish(body, issuer, None)?;
    let keys: Vec<Value> = publication.jwks["keys"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    // A key published now, its material written as it was imported when first published. The
    // thumbprint alone reads numbers canonically: a copy with padding or a leading zero octet
    // would replace text every verifier reads with text some cannot, unchecked.
    let known = |jwk: &Map<String, Value>| {
        let kid = jwk.get("kid").and_then(Value::as_str);
        let print = thumbprint(jwk);
        let written_alike = |k: &KeyRecord| {
            MATERIAL_MEMBERS
                .iter()
                .all(|m| k.jwk.get(*m) == jwk.get(*m))
        };
        previous.published(now).any(|k| {
            Some(k.kid.as_str()) == kid && Some(&k.thumbprint) == print.as_ref() && written_alike(k)
        })
    };
    // A key the registry holds for managed signing is published by it alone: a copy of its
    // material, under its kid or another, would outlive its withdrawal (a compromise must end
    // every token it signed), and one withdrawn in the days the service remembers it may be
    // a compromised key a stale copy still lists. Its kid with other material is `kid-reused`,
    // as for any other source's key.
    let managed = |jwk: &Map<String, Value>| {
        let print = thumbprint(jwk)?;
        let held = (previous.keys.iter())
            .find(|k| k.thumbprint == print && k.held_by(MANAGED_SOURCE))
            .map(|k| format!("is managed signing key {:?}", k.kid));
        held.or_else(|| {
            (previous.withdrawn.iter())
                .find(|w| w.thumbprint == print && w.source == MANAGED_SOURCE)
                .map(|w| format!("was managed signing key {:?}, withdrawn", w.kid))
        })
    };
    let unusable: Violations = keys
        .iter()
        .enumerate()
        .filter_map(|(i, key)| {
            let jwk = key.as_object()?;
            if let Some(which) = managed(jwk) {
                return Some(Violation::new(
                    format!("/jwks/keys/{i}"),
                    format!(
                        "this {which} of this service: the registry publishes its keys itself \
                         (source \"managed\") and withdraws them; upload only the keys you hold"
                    ),
                ));
            }
            if known(jwk) {
                return None;
            }
            let why = import.import(jwk).err()?;
            Some(Violation::new(
                format!("/jwks/keys/{i}"),
                format!("{why}: no verifier could use it"),
            ))
        })
        .collect();
    if !unusable.is_empty() {
        return Err(unusable.into());
    }
    let retain = retain_hours(body.get("retainRemovedKeysHours")).map_err(|v| vec![v])?;
    let lead = lead_seconds(body.get("rotationLeadSeconds")).map_err(|v| vec![v])?;
    let mut rotation =
        rotate(previous, source, &keys, retain, now, expires_at).map_err(|problems| {
            UploadError {
                kid_reused: problems.iter().any(|p| p.kid_reused),
                violations: problems.into_iter().map(|p| p.violation).collect(),
            }
        })?;
    // The lead is the upload's that first publishes a key; later uploads leave it.
    for key in &mut rotation.state.keys {
        if rotation.added.contains(&key.kid) {
            key.lead_seconds = lead;
        }
    }
    let before: Vec<String> = previous
        .published(now)
        .filter(|k| k.retired_at.is_none() && k.held_by(source))
        .map(|k| k.kid.clone())
        .collect();
    let kept_one = rotation
        .state
        .keys
        .iter()
        .any(|k| k.retired_at.is_none() && before.contains(&k.kid));
    // A verifier that cached the set before this upload holds every key it published, the
    // retired ones too: a set that adds no key new to it (a retired key brought back) breaks
    // no one.
    if !before.is_empty() && !kept_one && !rotation.added.is_empty() {
        publication
            .warnings
            .push(no_overlap_warning(&before, rotation.retired_until));
    }
    publication
        .warnings
        .extend(published_again(&keys, previous, now));
    Ok(Upload {
        publication,
        rotation,
        retain_hours: retain,
    })
}

/// A warning for each uploaded key that the service withdrew in the days it remembers (and
/// does not publish now): a key withdrawn as compromised that a source still lists (a
/// cluster's stale key file under `registry sync`) would otherwise come back without a word,
/// and verifiers accept the tokens it signed again. (A managed key is refused instead.)
fn published_again(keys: &[Value], previous: &KeyState, now: OffsetDateTime) -> Vec<String> {
    let remembered = |print: &str| {
        (previous.withdrawn.iter()).find(|w| {
            w.thumbprint == print && w.withdrawn_at > now - crate::withdrawn::WITHDRAWN_KEPT
        })
    };
    (keys.iter().filter_map(Value::as_object))
        .filter_map(|jwk| {
            let print = thumbprint(jwk)?;
            if previous.published(now).any(|k| k.thumbprint == print) {
                return None;
            }
            let withdrawn = remembered(&print)?;
            let kid = jwk.get("kid").and_then(Value::as_str).unwrap_or_default();
            Some(format!(
                "key {kid:?} was withdrawn from the public key set at {} and is published \
                 again: verifiers accept the tokens it signed again; if it was withdrawn because \
                 it was compromised, upload a set without it (and remove it from its source)",
                rfc3339(withdrawn.withdrawn_at)
            ))
        })
        .collect()
}

/// What `registry sync` found comparing a source's documents with what is published.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SyncPlan {
    /// Whether an upload is needed.
    pub changed: bool,
    /// `kid`s of the source's keys that are not published (or are, with other material).
    pub added: Vec<String>,
    /// `kid`s published now that the source no longer has.
    pub retired: Vec<String>,
}

/// Compares a source's discovery document and key set with what is published (`published`:
/// the `{openidConfiguration, jwks}` of `GET /services/{s}/config`, `None` when nothing is).
/// Keys compare by `kid` and material (RFC 7638 thumbprint); the discovery document by its
/// members other than `issuer` and `jwks_uri`, which the registry rewrites. A key set holding
/// private material is always a change: its upload is refused, saying so.
///
/// ```
/// use registry_domain::keys::sync_plan;
/// use serde_json::json;
/// let key = json!({"kty": "OKP", "crv": "Ed25519", "kid": "a", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"});
/// let discovery = json!({"issuer": "https://kubernetes.default.svc", "jwks_uri": "https://10.0.0.1/openid/v1/jwks",
///     "response_types_supported": ["id_token"]});
/// let jwks = json!({"keys": [key]});
/// assert!(sync_plan(None, &discovery, &jwks).changed);
/// let published = json!({"openidConfiguration": {"issuer": "https://k3s-acme.example.com",
///     "jwks_uri": "https://k3s-acme.example.com/openid/v1/jwks", "response_types_supported": ["id_token"]},
///     "jwks": {"keys": [key]}});
/// assert!(!sync_plan(Some(&published), &discovery, &jwks).changed);
/// // The same key, its private part served too: uploaded, so that the registry refuses it.
/// let mut leaked = key.clone();
/// leaked["d"] = json!("nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A");
/// assert!(sync_plan(Some(&published), &discovery, &json!({"keys": [leaked]})).changed);
/// ```
pub fn sync_plan(published: Option<&Value>, discovery: &Value, jwks: &Value) -> SyncPlan {
    let fingerprints = |set: &Value| -> Vec<(String, Option<String>)> {
        set.get("keys")
            .and_then(Value::as_array)
            .map(|keys| {
                keys.iter()
                    .filter_map(Value::as_object)
                    .filter_map(|k| Some((k.get("kid")?.as_str()?.to_owned(), thumbprint(k))))
                    .collect()
            })
            .unwrap_or_default()
    };
    let rewritten = |doc: &Value| -> Map<String, Value> {
        let mut doc = doc.as_object().cloned().unwrap_or_default();
        doc.remove("issuer");
        doc.remove("jwks_uri");
        doc
    };
    let source = fingerprints(jwks);
    let Some(published) = published else {
        return SyncPlan {
            changed: true,
            added: source.into_iter().map(|(kid, _)| kid).collect(),
            retired: Vec::new(),
        };
    };
    let current = fingerprints(&published["jwks"]);
    let added: Vec<String> = source
        .iter()
        .filter(|k| !current.contains(k))
        .map(|(kid, _)| kid.clone())
        .collect();
    let retired: Vec<String> = current
        .iter()
        .filter(|(kid, _)| !source.iter().any(|(k, _)| k == kid))
        .map(|(kid, _)| kid.clone())
        .collect();
    let discovery_changed = rewritten(&published["openidConfiguration"]) != rewritten(discovery);
    let order_changed = current.len() == source.len() && current != source;
    // A source that now serves a published key with its private part (the thumbprint reads the
    // public part alone) is uploaded all the same, so that the registry refuses it and says
    // why: "in sync" would hide a leaked key.
    let leaked = (jwks
        .get("keys")
        .and_then(Value::as_array)
        .into_iter()
        .flatten())
    .filter_map(Value::as_object)
    .any(crate::publishing::holds_secret);
    SyncPlan {
        changed: discovery_changed
            || order_changed
            || leaked
            || !added.is_empty()
            || !retired.is_empty(),
        added,
        retired,
    }
}

/// Why a key cannot be deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyDeleteError {
    /// It is current: upload a set without it first (409).
    Current,
    /// No published key has this `kid` (404).
    Unknown,
}

impl KeyState {
    /// The state with each key's thumbprint as [`thumbprint`] reads it now: a state written
    /// before it read numbers canonically holds another for a key written with a leading zero
    /// octet, which would make that key's next upload look like other material under its kid.
    pub fn with_canonical_thumbprints(mut self) -> Self {
        for key in &mut self.keys {
            if let Some(print) = thumbprint(&key.jwk) {
                key.thumbprint = print;
            }
        }
        self
    }

    /// The key sources with current keys, by name: the recorded ones, or the default source
    /// for a state written before sources existed.
    pub fn sources(&self) -> BTreeMap<String, SourceUpload> {
        let mut sources = self.sources.clone();
        if sources.is_empty() && self.keys.iter().any(|k| k.retired_at.is_none()) {
            sources.insert(
                DEFAULT_SOURCE.to_owned(),
                SourceUpload {
                    discovery: None,
                    retain_hours: DEFAULT_RETAIN_HOURS,
                    kids: Vec::new(),
                },
            );
        }
        sources
    }

    /// This state, made by `source`'s upload of `uploaded` (its `kid`s, in order) from
    /// `previous`, with that upload recorded: its discovery document becomes the published one,
    /// so the source whose document was published until now (`published_before`, the document)
    /// keeps its own; sources left with no current key are dropped.
    pub fn with_upload(
        self,
        previous: &KeyState,
        published_before: Option<Value>,
        source: &str,
        retain_hours: u32,
        uploaded: Vec<String>,
    ) -> KeyState {
        let mut sources = previous.sources();
        for (name, kept) in &mut sources {
            if name != source && kept.discovery.is_none() {
                kept.discovery = published_before.clone();
            }
        }
        sources.insert(
            source.to_owned(),
            SourceUpload {
                discovery: None,
                retain_hours,
                kids: uploaded,
            },
        );
        KeyState { sources, ..self }.without_empty_sources()
    }

    fn without_empty_sources(mut self) -> KeyState {
        let keys = &self.keys;
        self.sources.retain(|name, _| {
            keys.iter()
                .any(|k| k.retired_at.is_none() && k.held_by(name))
        });
        self
    }

    /// The state after `source` is removed at `now` (`DELETE /services/{s}/config?source=…`):
    /// its current keys retire for its upload's retention (never past `expires_at`), the
    /// other sources' keys stay. `None` when no current key is the source's.
    pub fn without_source(
        &self,
        source: &str,
        now: OffsetDateTime,
        expires_at: Option<OffsetDateTime>,
    ) -> Option<KeyState> {
        let sources = self.sources();
        let removed = sources.get(source)?;
        let until = retirement_end(removed.retain_hours, now, expires_at);
        let mut current = Vec::new();
        let mut retired = Vec::new();
        let mut retiring = Vec::new();
        for key in self.published(now) {
            if key.retired_at.is_some() {
                retired.push(key.clone());
            } else if !key.held_by(source) {
                current.push(key.clone());
            } else if let Some(kept) = key.without_holder(source) {
                // Another source still has it: it stays current.
                current.push(kept);
            } else if removed.retain_hours > 0 && now < until {
                retiring.push(KeyRecord {
                    retired_at: Some(now),
                    published_until: Some(until),
                    ..key.clone()
                });
            }
        }
        // In the order they were retired.
        current.extend(retired);
        current.extend(retiring);
        let state = KeyState {
            keys: current,
            sources,
            withdrawn: self.withdrawn.clone(),
        };
        Some(state.without_empty_sources())
    }

    /// This state with the managed keys (docs/api.md, "Managed signing") as `managed` lists them
    /// (`kid` and public JWK): a key new to the state is first published at `now` with `lead`
    /// seconds and the `verifiers` of keys published now; a managed key no longer listed leaves
    /// the key set at once (the managed keys' own life keeps it as long as its tokens live),
    /// even a copy another source uploaded before such copies were refused: a withdrawn or
    /// compromised key must stop verifying. Every other source's keys stay as they are.
    pub fn with_managed(
        &self,
        managed: &[(String, Map<String, Value>)],
        lead: u32,
        verifiers: &[KeyVerifier],
        now: OffsetDateTime,
    ) -> KeyState {
        let source = MANAGED_SOURCE;
        let listed = |kid: &str| managed.iter().any(|(k, _)| k == kid);
        let mut keys: Vec<KeyRecord> = Vec::new();
        for key in &self.keys {
            if key.retired_at.is_some() || !key.held_by(source) || listed(&key.kid) {
                keys.push(key.clone());
            }
        }
        for (kid, jwk) in managed {
            if keys.iter().any(|k| k.kid == *kid && k.retired_at.is_none()) {
                continue;
            }
            let Some(thumbprint) = thumbprint(jwk) else {
                continue;
            };
            keys.push(KeyRecord {
                kid: kid.clone(),
                jwk: jwk.clone(),
                thumbprint,
                first_published_at: now,
                retired_at: None,
                published_until: None,
                lead_seconds: lead,
                source: source.to_owned(),
                also_sources: Vec::new(),
                verifiers: Some(verifiers.to_vec()),
                dismissed_at: None,
            });
        }
        // Current keys first, then the retired ones, each in their order.
        keys.sort_by_key(|k| k.retired_at.is_some());
        let mut sources = self.sources();
        sources.insert(
            source.to_owned(),
            SourceUpload {
                discovery: None,
                retain_hours: 0,
                kids: Vec::new(),
            },
        );
        let withdrawn = self.withdrawn.clone();
        KeyState {
            keys,
            sources,
            withdrawn,
        }
        .without_empty_sources()
    }

    /// The `alg` of every key published at `now` (retired ones still published included), once
    /// each: what a discovery document the registry writes says it supports.
    pub fn algorithms(&self, now: OffsetDateTime) -> Vec<&str> {
        let mut algorithms: Vec<&str> = (self.published(now))
            .filter_map(|k| k.jwk.get("alg")?.as_str())
            .collect();
        algorithms.sort_unstable();
        algorithms.dedup();
        algorithms
    }

    /// Whether there are current keys and every one is managed: the discovery document is then
    /// the registry's own.
    pub fn only_managed(&self) -> bool {
        let mut current = self
            .keys
            .iter()
            .filter(|k| k.retired_at.is_none())
            .peekable();
        current.peek().is_some() && current.all(|k| k.sources().all(|s| s == MANAGED_SOURCE))
    }

    /// The public key set's current part: every source's current keys (`{"keys": [...]}`),
    /// what the store keeps as the published key set.
    pub fn current_set(&self) -> Value {
        Self::key_set(self.current_of(|_| true))
    }

    /// The current keys one of whose sources `of` accepts, in the key set's order.
    fn current_of(&self, of: impl Fn(&str) -> bool) -> impl Iterator<Item = &KeyRecord> {
        (self.keys.iter()).filter(move |k| k.retired_at.is_none() && k.sources().any(&of))
    }

    /// `{"keys": [...]}` of `keys`.
    fn key_set<'k>(keys: impl Iterator<Item = &'k KeyRecord>) -> Value {
        let keys: Vec<Value> = keys.map(|k| Value::Object(k.jwk.clone())).collect();
        json!({"keys": keys})
    }

    /// `source`'s latest upload as `GET /services/{s}/config?source=…` answers it: its
    /// discovery document (`published`: the one published now) and its current keys; `None`
    /// for a source with no current key.
    pub fn source_upload(&self, source: &str, published: &Value) -> Option<Value> {
        let recorded = self.sources();
        let upload = recorded.get(source)?;
        let mut keys: Vec<&KeyRecord> = self.current_of(|of| of == source).collect();
        // In its upload's order (stable: the key set's order for states that have none).
        keys.sort_by_key(|k| upload.kids.iter().position(|kid| *kid == k.kid));
        Some(json!({
            "openidConfiguration": upload.discovery.as_ref().unwrap_or(published),
            "jwks": Self::key_set(keys.into_iter()),
        }))
    }

    /// The state of keys published before the lifecycle was recorded: every key of `jwks`
    /// current, first published at `published_at`.
    pub fn of_uploaded(jwks: &Value, published_at: OffsetDateTime) -> KeyState {
        let keys = jwks
            .get("keys")
            .and_then(Value::as_array)
            .map(|keys| {
                keys.iter()
                    .filter_map(Value::as_object)
                    .filter_map(|jwk| {
                        Some(KeyRecord {
                            kid: jwk.get("kid")?.as_str()?.to_owned(),
                            thumbprint: thumbprint(jwk)?,
                            jwk: jwk.clone(),
                            first_published_at: published_at,
                            retired_at: None,
                            published_until: None,
                            lead_seconds: DEFAULT_LEAD_SECONDS,
                            source: default_source(),
                            also_sources: Vec::new(),
                            verifiers: None,
                            dismissed_at: None,
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        KeyState {
            keys,
            ..KeyState::default()
        }
    }

    /// The public key set at `now`: the uploaded `jwks` as it was uploaded, then the retired
    /// keys still published, in the order they were retired.
    pub fn served(&self, uploaded: &Value, now: OffsetDateTime) -> Value {
        let mut keys: Vec<Value> = uploaded
            .get("keys")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        keys.extend(
            self.keys
                .iter()
                .filter(|k| k.retired_at.is_some() && k.is_published_at(now))
                .map(|k| Value::Object(k.jwk.clone())),
        );
        json!({"keys": keys})
    }

    /// When the public key set next changes by itself (a retired key's time runs out).
    pub fn next_change(&self, now: OffsetDateTime) -> Option<OffsetDateTime> {
        self.keys
            .iter()
            .filter_map(|k| k.published_until)
            .filter(|until| now < *until)
            .min()
    }

    /// The retired keys whose time ran out at or before `now` and that the state still holds
    /// (an upload drops them; otherwise the reaper withdraws them, with a `key.expire` event).
    pub fn expired(&self, now: OffsetDateTime) -> impl Iterator<Item = &KeyRecord> {
        self.keys.iter().filter(move |k| !k.is_published_at(now))
    }

    /// The state without the key `kid`, if its time ran out at or before `now`.
    pub fn without_expired(&self, kid: &str, now: OffsetDateTime) -> Option<KeyState> {
        self.expired(now)
            .any(|k| k.kid == kid)
            .then(|| self.without(kid))
    }

    /// The earliest end of a retired key the state holds, expired or not: when the reaper
    /// has something to do for it.
    pub fn next_expiry(&self) -> Option<OffsetDateTime> {
        self.keys.iter().filter_map(|k| k.published_until).min()
    }

    /// The keys published at `now`, current ones first.
    pub fn published(&self, now: OffsetDateTime) -> impl Iterator<Item = &KeyRecord> {
        self.keys.iter().filter(move |k| k.is_published_at(now))
    }

    /// The state without the retired key `kid` (a compromised key, withdrawn at once).
    pub fn without_retired(
        &self,
        kid: &str,
        now: OffsetDateTime,
    ) -> Result<KeyState, KeyDeleteError> {
        match self.published(now).find(|k| k.kid == kid) {
            None => Err(KeyDeleteError::Unknown),
            Some(k) if k.retired_at.is_none() => Err(KeyDeleteError::Current),
            Some(_) => Ok(self.without(kid)),
        }
    }

    /// The withdrawn keys remembered at `at` once of this state's keys only those `held` are
    /// still there (a new version's, or those published at `at`): the others, and those it
    /// remembers already ([`crate::withdrawn::remembered`]).
    pub fn remembered(&self, held: impl Fn(&str) -> bool, at: OffsetDateTime) -> Vec<WithdrawnKey> {
        let left = (self.keys.iter())
            .filter(|k| !held(&k.kid))
            .map(|k| k.withdrawn(at))
            .collect();
        crate::withdrawn::remembered(left, &self.withdrawn, held, at)
    }

    /// The state without the key `kid`.
    fn without(&self, kid: &str) -> KeyState {
        let mut state = self.clone();
        state.keys.retain(|k| k.kid != kid);
        state
    }

    /// The inventory of `GET /services/{s}/keys` at `now`, current keys first. A key of
    /// `retiring` (managed keys that no longer sign, published until their tokens expire) is
    /// listed as retired, with when it stopped signing and when it leaves.
    pub fn inventory(&self, now: OffsetDateTime, retiring: &[Retiring]) -> Value {
        let mut published: Vec<&KeyRecord> = self.published(now).collect();
        published.sort_by_key(|k| k.retirement(retiring).is_some());
        let keys: Vec<Value> = (published.into_iter())
            .map(|k| {
                let retired = k.retirement(retiring);
                let mut view = json!({
                    "kid": k.kid,
                    "kty": k.jwk.get("kty").cloned().unwrap_or(Value::Null),
                    "thumbprint": k.thumbprint,
                    "state": if retired.is_some() { "retired" } else { "current" },
                    "source": k.source,
                    "sources": k.sources().collect::<Vec<_>>(),
                    "firstPublishedAt": rfc3339(k.first_published_at),
                });
                if let Some(alg) = k.jwk.get("alg") {
                    view["alg"] = alg.clone();
                }
                if let Some((at, until)) = retired {
                    view["retiredAt"] = rfc3339(at).into();
                    if let Some(until) = until {
                        view["publishedUntil"] = rfc3339(until).into();
                    }
                }
                // The public key as the key set serves it: a retired key's material is read
                // nowhere else (the external signer's plugin answers it to kube-apiserver).
                view["jwk"] = Value::Object(k.jwk.clone());
                view
            })
            .collect();
        // Keys whose retention ran out before the upkeep dropped them have left already.
        let live = |kid: &str| self.published(now).any(|k| k.kid == kid);
        let withdrawn = self.remembered(live, now);
        let withdrawn: Vec<Value> = (withdrawn.iter())
            .map(|w| {
                let mut view = json!({
                    "kid": w.kid,
                    "thumbprint": w.thumbprint,
                    "source": w.source,
                    "firstPublishedAt": rfc3339(w.first_published_at),
                    "withdrawnAt": rfc3339(w.withdrawn_at),
                });
                if let Some(at) = w.retired_at {
                    view["retiredAt"] = rfc3339(at).into();
                }
                view
            })
            .collect();
        json!({"keys": keys, "withdrawn": withdrawn})
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;
    use time::Duration;

    fn key(kid: &str, x: &str) -> Value {
        json!({"kty": "OKP", "crv": "Ed25519", "kid": kid, "x": x})
    }

    const X1: &str = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo";
    const X2: &str = "3p7bfXt9wbTTW2HC7OQ1Nz-DQ8hbeGdNrfx-FG-IK08";
    const X3: &str = "JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs";

    #[test]
    fn a_key_that_leaves_is_remembered_when_it_left() {
        let t = datetime!(2026-11-25 12:00 UTC);
        let jwks = json!({"keys": [key("now", X1), key("ended", X2), key("pulled", X3)]});
        let mut state = KeyState::of_uploaded(&jwks, t - Duration::days(2));
        let retired = Some(t - Duration::days(1));
        // Its retention ended an hour before the upkeep dropped it.
        state.keys[1].retired_at = retired;
        state.keys[1].published_until = Some(t - Duration::hours(1));
        // Withdrawn at once, its retention still running.
        state.keys[2].retired_at = retired;
        state.keys[2].published_until = Some(t + Duration::hours(5));
        let got = state.remembered(|kid| kid == "now", t);
        let at: Vec<(&str, OffsetDateTime)> = got
            .iter()
            .map(|w| (w.kid.as_str(), w.withdrawn_at))
            .collect();
        assert_eq!(at, [("pulled", t), ("ended", t - Duration::hours(1))]);
        assert_eq!(got[0].retired_at, retired);
        assert_eq!(got[0].thumbprint, state.keys[2].thumbprint);
    }

    #[test]
    fn a_managed_key_that_leaves_takes_any_other_sources_copy_with_it() {
        let t0 = datetime!(2026-11-23 10:00 UTC);
        let jwk = key("m-1", X1).as_object().unwrap().clone();
        let mut shared = KeyState::default().with_managed(&[("m-1".to_owned(), jwk)], 0, &[], t0);
        // A copy another source uploaded before such uploads were refused.
        shared.keys[0].also_sources.push("files".to_owned());
        let after = shared.with_managed(&[], 0, &[], t0 + Duration::seconds(1));
        assert_eq!(after.published(t0 + Duration::seconds(1)).count(), 0);
    }

    #[test]
    fn verifiers_are_the_most_active_of_two_hours_and_one_network_gives_four_at_most() {
        let at = datetime!(2026-11-23 10:00 UTC);
        let candidate =
            |agent: &str, count: u64, hours: u32, networks: &[&str]| VerifierCandidate {
                agent: agent.to_owned(),
                count,
                hours,
                last_at: at,
                networks: (networks.iter())
                    .map(|n| SeenNetwork {
                        network: n.parse().unwrap(),
                        hours,
                    })
                    .collect(),
            };
        let mut candidates = vec![
            candidate("once", 1_000, 1, &["198.51.100.0/24"]),
            candidate("AWS", 10, 2, &["198.51.100.0/24"]),
            candidate("Google", 5, 3, &["203.0.113.0/24", "192.0.2.0/24"]),
        ];
        // Ten made-up agents of one network, more active than the real verifiers.
        for i in 0..10 {
            candidates.push(candidate(
                &format!("bot {i}"),
                100 + i,
                2,
                &["192.0.2.0/24"],
            ));
        }
        let chosen: Vec<String> = (verifiers_of(&candidates, 2).into_iter())
            .map(|v| v.agent)
            .collect();
        // Google, seen in the most hours, first; the bots' network gives four, Google's (seen
        // from another network too) among them; an agent of one hour never counts.
        assert_eq!(
            chosen,
            ["Google", "bot 9", "bot 8", "bot 7", "AWS"],
            "{chosen:?}"
        );
        let many: Vec<VerifierCandidate> = (0..40)
            .map(|i| {
                candidate(
                    &format!("agent {i:02}"),
                    100 - i,
                    2,
                    &[&format!("10.0.{i}.0/24")],
                )
            })
            .collect();
        assert_eq!(verifiers_of(&many, 2).len(), MAX_VERIFIERS);
        // Forty made-up agents, each on a network of its own and far busier in two hours, do
        // not push out a verifier seen hour after hour.
        let mut crowd = many.clone();
        crowd.push(candidate("AWS", 50, 30, &["198.51.100.0/24"]));
        for bot in &mut crowd[..40] {
            bot.count *= 1_000;
        }
        let chosen = verifiers_of(&crowd, 2);
        assert_eq!(chosen[0].agent, "AWS", "{chosen:?}");
    }

    #[test]
    fn a_verifier_s_networks_are_those_it_was_seen_from_steadily() {
        let at = datetime!(2026-11-23 10:00 UTC);
        let seen = |network: &str, hours: u32| SeenNetwork {
            network: network.parse().unwrap(),
            hours,
        };
        let candidate = |agent: &str, networks: Vec<SeenNetwork>| VerifierCandidate {
            agent: agent.to_owned(),
            count: 10,
            hours: 3,
            last_at: at,
            networks,
        };
        let candidates = [
            // Its own networks in forty hours and in twenty; an outsider's fetches under its
            // agent in one hour, and in two (and in nineteen, not half of forty).
            candidate(
                "AWS",
                vec![
                    seen("203.0.113.0/24", 40),
                    seen("203.0.114.0/24", 20),
                    seen("198.51.100.0/24", 19),
                    seen("198.51.101.0/24", 2),
                    seen("198.51.102.0/24", 1),
                ],
            ),
            // A new network each hour: each of them is its.
            candidate(
                "roaming",
                vec![
                    seen("10.0.1.0/24", 1),
                    seen("10.0.2.0/24", 1),
                    seen("10.0.3.0/24", 1),
                ],
            ),
        ];
        let networks: Vec<(String, Vec<String>)> = (verifiers_of(&candidates, 2).into_iter())
            .map(|v| (v.agent, v.networks.iter().map(Network::to_string).collect()))
            .collect();
        assert_eq!(
            networks,
            [
                (
                    "AWS".to_owned(),
                    vec!["203.0.113.0/24".to_owned(), "203.0.114.0/24".to_owned()]
                ),
                (
                    "roaming".to_owned(),
                    vec![
                        "10.0.1.0/24".into(),
                        "10.0.2.0/24".into(),
                        "10.0.3.0/24".into()
                    ]
                ),
            ]
        );
    }

    #[test]
    fn expired_keys_are_found_and_withdrawn_one_by_one() {
        let t0 = datetime!(2026-11-23 10:00 UTC);
        let one = rotate(
            &KeyState::default(),
            DEFAULT_SOURCE,
            &[key("a", X1)],
            1,
            t0,
            None,
        )
        .unwrap();
        let two = rotate(&one.state, DEFAULT_SOURCE, &[key("b", X2)], 1, t0, None).unwrap();
        let end = t0 + Duration::hours(1);
        assert_eq!(two.state.next_expiry(), Some(end));
        assert_eq!(two.state.expired(end - Duration::seconds(1)).count(), 0);
        assert!(two
            .state
            .without_expired("a", end - Duration::seconds(1))
            .is_none());
        assert!(
            two.state.without_expired("b", end).is_none(),
            "b is current"
        );
        let after = two.state.without_expired("a", end).unwrap();
        assert_eq!(after.keys.len(), 1);
        assert_eq!(after.next_expiry(), None);
    }

    #[test]
    fn retired_keys_keep_their_time_and_come_back_with_their_own_material() {
        let t0 = datetime!(2026-11-23 10:00 UTC);
        let one = rotate(
            &KeyState::default(),
            DEFAULT_SOURCE,
            &[key("a", X1)],
            24,
            t0,
            None,
        )
        .unwrap();
        assert_eq!(one.added, ["a"]);
        let two = rotate(
            &one.state,
            DEFAULT_SOURCE,
            &[key("b", X2)],
            24,
            t0 + Duration::hours(1),
            None,
        )
        .unwrap();
        let until = t0 + Duration::hours(25);
        assert_eq!(two.retired_until, Some(until));
        // A later upload neither extends nor shortens a's time.
        let three = rotate(
            &two.state,
            DEFAULT_SOURCE,
            &[key("c", X3)],
            1,
            t0 + Duration::hours(2),
            None,
        )
        .unwrap();
        let a = three.state.keys.iter().find(|k| k.kid == "a").unwrap();
        assert_eq!(a.published_until, Some(until));
        // a comes back with its own material: current again, first published at t0.
        let four = rotate(
            &three.state,
            DEFAULT_SOURCE,
            &[key("a", X1)],
            24,
            t0 + Duration::hours(3),
            None,
        )
        .unwrap();
        let a = &four.state.keys[0];
        assert_eq!(
            (a.kid.as_str(), a.retired_at, a.first_published_at),
            ("a", None, t0)
        );
        // With other material: kid-reused, whatever its state.
        let reused = rotate(
            &four.state,
            DEFAULT_SOURCE,
            &[key("c", X1)],
            24,
            t0 + Duration::hours(3),
            None,
        )
        .unwrap_err();
        assert!(reused[0].kid_reused);
        assert_eq!(reused[0].violation.pointer, "/jwks/keys/0");
    }

    #[test]
    fn an_anonymous_services_keys_never_outlive_it() {
        let t0 = datetime!(2026-11-23 10:00 UTC);
        let end = t0 + Duration::hours(2);
        let one = rotate(
            &KeyState::default(),
            DEFAULT_SOURCE,
            &[key("a", X1)],
            24,
            t0,
            Some(end),
        )
        .unwrap();
        let two = rotate(
            &one.state,
            DEFAULT_SOURCE,
            &[key("b", X2)],
            24,
            t0,
            Some(end),
        )
        .unwrap();
        assert_eq!(two.retired_until, Some(end));
        assert_eq!(two.state.next_change(t0), Some(end));
        let served = two.state.served(&json!({"keys": [key("b", X2)]}), end);
        assert_eq!(served["keys"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn the_public_set_holds_at_most_a_hundred_keys() {
        let t0 = datetime!(2026-11-23 10:00 UTC);
        let many = |prefix: &str, n: usize| -> Vec<Value> {
            (0..n)
                .map(|i| {
                    let x = URL_SAFE_NO_PAD.encode([u8::try_from(i).unwrap(); 32]);
                    json!({"kty": "OKP", "crv": "Ed25519", "kid": format!("{prefix}{i}"),
                        "x": format!("{x}{prefix}")})
                })
                .collect()
        };
        let first = rotate(
            &KeyState::default(),
            DEFAULT_SOURCE,
            &many("a", 60),
            24,
            t0,
            None,
        )
        .unwrap();
        let refused =
            rotate(&first.state, DEFAULT_SOURCE, &many("b", 60), 24, t0, None).unwrap_err();
        assert_eq!(refused[0].violation.pointer, "/jwks/keys");
        // The a-keys are current until this upload: no key to delete, another way out.
        let message = &refused[0].violation.message;
        assert!(
            !message.contains("a59") && message.contains("retainRemovedKeysHours"),
            "{message}"
        );
        // Retired earlier, the a-keys are named; the c-keys this upload would retire are not.
        let second = rotate(&first.state, DEFAULT_SOURCE, &many("c", 30), 24, t0, None).unwrap();
        let refused =
            rotate(&second.state, DEFAULT_SOURCE, &many("d", 30), 24, t0, None).unwrap_err();
        let message = &refused[0].violation.message;
        assert!(
            message.contains("a59") && !message.contains("c0"),
            "{message}"
        );
        let state = first.state.without_retired("a1", t0);
        assert_eq!(state, Err(KeyDeleteError::Current));
        assert_eq!(
            first.state.without_retired("zz", t0),
            Err(KeyDeleteError::Unknown)
        );
    }

    #[test]
    fn sources_rotate_their_own_keys_and_retire_alone() {
        let t0 = datetime!(2026-11-23 10:00 UTC);
        let upload = |state: &KeyState, source: &str, keys: &[Value], retain: u32| {
            let rotation = rotate(state, source, keys, retain, t0, None).unwrap();
            let state = rotation.state.clone().with_upload(
                state,
                Some(json!({"n": source})),
                source,
                retain,
                rotation.uploaded.clone(),
            );
            (rotation, state)
        };
        let kids = |state: &KeyState| -> Vec<(String, String, &'static str)> {
            (state.keys.iter())
                .map(|k| (k.kid.clone(), k.source.clone(), k.state()))
                .collect()
        };
        let (_, green) = upload(&KeyState::default(), "green", &[key("g1", X1)], 24);
        let (_, both) = upload(&green, "blue", &[key("b1", X2)], 2);
        // By source name, then upload order; both sources recorded, blue's document published.
        assert_eq!(
            kids(&both),
            [
                ("b1".into(), "blue".into(), "current"),
                ("g1".into(), "green".into(), "current")
            ]
        );
        assert_eq!(both.sources["blue"].discovery, None);
        assert_eq!(both.sources["green"].discovery, Some(json!({"n": "blue"})));
        assert_eq!(both.current_set()["keys"].as_array().unwrap().len(), 2);

        // Green rotates: only g1 retires.
        let (rotation, rotated) = upload(&both, "green", &[key("g2", X3)], 24);
        assert_eq!(rotation.retired, ["g1"]);
        assert_eq!(rotated.keys[2].state(), "retired");
        let green_upload = rotated.source_upload("green", &json!({})).unwrap();
        assert_eq!(green_upload["jwks"]["keys"][0]["kid"], "g2");

        // Another source's kid with other material is kid-reused; with the same, it stays theirs.
        let reused = rotate(&rotated, "green", &[key("b1", X1)], 24, t0, None).unwrap_err();
        assert!(reused[0].kid_reused && reused[0].violation.message.contains("\"blue\""));
        let shared = rotate(
            &rotated,
            "green",
            &[key("g2", X3), key("b1", X2)],
            24,
            t0,
            None,
        )
        .unwrap();
        assert!(shared.added.is_empty() && shared.retired.is_empty());
        assert_eq!(
            shared.state.keys.iter().filter(|k| k.kid == "b1").count(),
            1
        );

        // Blue goes: its key retires for blue's 2 hours, green's stay; blue is no source.
        let without = rotated.without_source("blue", t0, None).unwrap();
        let b1 = without.keys.iter().find(|k| k.kid == "b1").unwrap();
        assert_eq!(b1.published_until, Some(t0 + Duration::hours(2)));
        assert_eq!(without.current_set()["keys"][0]["kid"], "g2");
        assert!(!without.sources.contains_key("blue"));
        assert!(without.without_source("blue", t0, None).is_none());
        assert!(without.source_upload("blue", &json!({})).is_none());
    }

    #[test]
    fn a_key_uploaded_by_several_sources_belongs_to_each_and_retires_with_the_last() {
        let t0 = datetime!(2026-11-23 10:00 UTC);
        let upload = |state: &KeyState, source: &str, keys: &[Value]| {
            let rotation = rotate(state, source, keys, 24, t0, None).unwrap();
            let retired = rotation.retired.clone();
            let state = rotation
                .state
                .with_upload(state, None, source, 24, rotation.uploaded);
            (retired, state)
        };
        let kids_of = |listed: &Value| -> Vec<String> {
            (listed["keys"].as_array().unwrap().iter())
                .map(|k| k["kid"].as_str().unwrap().to_owned())
                .collect()
        };
        let (_, blue) = upload(&KeyState::default(), "blue", &[key("shared", X1)]);
        // A source's own upload of its key again replaces its other members.
        let mut with_alg = key("shared", X1);
        with_alg["alg"] = json!("EdDSA");
        let (_, again) = upload(&blue, "blue", &[with_alg]);
        assert_eq!(again.keys[0].jwk["alg"], "EdDSA");
        let (_, both) = upload(&blue, "green", &[key("shared", X1), key("g1", X2)]);
        // Shared, it is used alike by each: another alg would publish it wrongly for one.
        let mut other_alg = key("shared", X1);
        other_alg["alg"] = json!("EdDSA");
        for (source, keys) in [
            ("green", vec![other_alg.clone()]),
            ("blue", vec![other_alg]),
        ] {
            let refused = rotate(&both, source, &keys, 24, t0, None).unwrap_err();
            let message = &refused[0].violation.message;
            assert!(
                !refused[0].kid_reused && message.contains("another alg"),
                "{message}"
            );
        }
        // A member that says nothing of its use (a certificate chain, say) is the first's.
        let mut with_chain = key("shared", X1);
        with_chain["x5t"] = json!("abc");
        assert!(rotate(&both, "green", &[with_chain], 24, t0, None).is_ok());
        let shared = both.keys.iter().find(|k| k.kid == "shared").unwrap();
        assert_eq!(shared.sources().collect::<Vec<_>>(), ["blue", "green"]);
        assert_eq!(both.keys.iter().filter(|k| k.kid == "shared").count(), 1);
        for source in ["blue", "green"] {
            let listed = both.source_upload(source, &json!({})).unwrap();
            let kids = listed["jwks"]["keys"].to_string();
            assert!(kids.contains("\"shared\""), "{source}: {kids}");
        }
        // Each source's upload is listed in its own order, and the key set in each source's
        // order: a key it shares stays where its first source put it.
        {
            let listed = |state: &KeyState, source: &str| {
                kids_of(&state.source_upload(source, &json!({})).unwrap()["jwks"])
            };
            let (_, first) = upload(
                &KeyState::default(),
                "blue",
                &[key("b1", X3), key("shared", X1)],
            );
            let (_, second) = upload(&first, "green", &[key("g1", X2), key("shared", X1)]);
            assert_eq!(listed(&second, "blue"), ["b1", "shared"]);
            assert_eq!(listed(&second, "green"), ["g1", "shared"]);
            assert_eq!(kids_of(&second.current_set()), ["b1", "shared", "g1"]);
            let (_, third) = upload(&second, "blue", &[key("shared", X1), key("b1", X3)]);
            assert_eq!(kids_of(&third.current_set()), ["shared", "b1", "g1"]);
            assert_eq!(listed(&third, "green"), ["g1", "shared"]);
        }
        // Blue's sync goes: the key stays current, green's alone.
        let without_blue = both.without_source("blue", t0, None).unwrap();
        let kept = without_blue
            .keys
            .iter()
            .find(|k| k.kid == "shared")
            .unwrap();
        assert_eq!((kept.state(), kept.source.as_str()), ("current", "green"));
        assert!(kept.also_sources.is_empty());
        assert!(!without_blue.sources.contains_key("blue"));
        // Blue uploads a set without it: green still has it, nothing retires.
        let (retired, after) = upload(&both, "blue", &[key("b2", X3)]);
        assert!(retired.is_empty(), "{retired:?}");
        let kept = after.keys.iter().find(|k| k.kid == "shared").unwrap();
        assert_eq!(kept.sources().collect::<Vec<_>>(), ["green"]);
        // Then green drops it too: it retires.
        let (retired, _) = upload(&after, "green", &[key("g1", X2)]);
        assert_eq!(retired, ["shared"]);
    }

    #[test]
    fn states_before_sources_are_the_default_sources() {
        let t0 = datetime!(2026-11-23 10:00 UTC);
        let stored = r#"{"keys":[{"kid":"a","jwk":{},"thumbprint":"t","firstPublishedAt":"2026-11-23T10:00:00Z"}]}"#;
        let state: KeyState = serde_json::from_str(stored).unwrap();
        assert_eq!(state.keys[0].source, DEFAULT_SOURCE);
        assert!(state.sources().contains_key(DEFAULT_SOURCE));
        let published = json!({"issuer": "x"});
        assert_eq!(
            state.source_upload("default", &published).unwrap()["openidConfiguration"],
            published
        );
        // Written back, a default-source key carries no source member.
        assert!(!serde_json::to_string(&state).unwrap().contains("source"));
        assert!(state.without_source(DEFAULT_SOURCE, t0, None).is_some());
    }

    #[test]
    fn a_published_key_written_otherwise_is_imported_again() {
        /// An import that cannot read padded base64url, as some verifiers cannot.
        struct NoPadding;
        impl KeyImport for NoPadding {
            fn import(&self, jwk: &Map<String, Value>) -> Result<(), String> {
                match jwk
                    .values()
                    .any(|v| v.as_str().is_some_and(|s| s.ends_with('=')))
                {
                    true => Err("padded base64url".to_owned()),
                    false => Ok(()),
                }
            }
        }
        let t0 = datetime!(2026-11-23 10:00 UTC);
        let put = |previous: &KeyState, x: &str| {
            let body = crate::testing::upload_of(key("k", x), "EdDSA");
            let issuer = "https://s.example";
            upload(
                &body,
                issuer,
                DEFAULT_SOURCE,
                previous,
                &NoPadding,
                t0,
                None,
            )
        };
        let first = put(&KeyState::default(), X1).unwrap().rotation.state;
        // The same key, its thumbprint the same: padded, it is checked and refused.
        let padded = format!("{X1}=");
        let refused = put(&first, &padded).unwrap_err();
        assert!(refused.violations[0].message.contains("padded base64url"));
        // Written as before, it is not imported again.
        assert!(put(&first, X1).is_ok());
    }

    #[test]
    fn a_state_written_before_canonical_thumbprints_reads_them_canonically() {
        // A key uploaded with a leading zero octet in `n`, its thumbprint of the time.
        let stored = r#"{"keys":[{"kid":"a","jwk":{"kty":"RSA","kid":"a","e":"AQAB","n":"AME"},
            "thumbprint":"as-written","firstPublishedAt":"2026-11-23T10:00:00Z"}]}"#;
        let state: KeyState = serde_json::from_str(stored).unwrap();
        let read = state.with_canonical_thumbprints();
        let canonical = json!({"kty": "RSA", "e": "AQAB", "n": "wQ"});
        assert_eq!(
            Some(&read.keys[0].thumbprint),
            thumbprint(canonical.as_object().unwrap()).as_ref()
        );
    }
}
