//! Key readiness (docs/api.md, "Key readiness"): whether a new key is safe to sign with, from
//! what the registry saw of the verifiers' fetches, instead of a guessed wait.
//!
//! A key is safe when it has been published for its lead time, every verifier that fetched the
//! service's key set in the 7 days before the key was first published has fetched it since, and,
//! when caches in front of the registry are purged, the purge of the change that published it
//! succeeded.
//! A verifier is a distinct User-Agent, as the fetch evidence counts them; one not seen for 7
//! days no longer holds a key back. The first time a key is found safe is recorded, and a key
//! stays safe from then on, whatever the evidence says later.

use crate::app::{config, AppError, Registry};
use crate::keys::KeyRecord;
use crate::Service;
use serde_json::{json, Value};
use time::format_description::well_known::Rfc3339;
use time::{Duration, OffsetDateTime};

/// How far back a verifier counts, from the key's first publication and from now.
pub const VERIFIER_WINDOW: Duration = Duration::days(7);

/// Agents read per key set: far more verifiers than a service has.
const AGENTS: usize = 1_000;

/// One verifier of a key: who, when it last fetched the key set, whether that was after the
/// key was first published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verifier {
    /// Its User-Agent.
    pub agent: String,
    /// Its last fetch of the key set.
    pub last_fetched_at: OffsetDateTime,
    /// Whether it fetched the key set since the key was first published.
    pub fetched_since_key: bool,
}

/// What holds a key back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pending {
    /// Its lead time is not over; it ends then.
    Lead(OffsetDateTime),
    /// This verifier has not fetched the key set since the key was first published.
    Verifier(String),
    /// The caches in front of the registry have not all dropped the documents without the key.
    Purge,
}

/// Whether a key is safe to sign with at `now`, and why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    /// The verifiers of the key.
    pub verifiers: Vec<Verifier>,
    /// What holds it back (nothing: safe).
    pub pending: Vec<Pending>,
    /// When it became safe, as far as the evidence tells: the end of its lead or the latest
    /// verifier's last fetch, whichever is later.
    pub safe_at: Option<OffsetDateTime>,
}

/// Truncated to the millisecond: fetch times are kept so, and compared so.
fn millis(t: OffsetDateTime) -> OffsetDateTime {
    let nanos = t.unix_timestamp_nanos();
    OffsetDateTime::from_unix_timestamp_nanos(nanos - nanos.rem_euclid(1_000_000)).unwrap_or(t)
}

/// The readiness of `key` at `now`, given each agent's last fetch of the key set (as far back as
/// [`VERIFIER_WINDOW`] before the key's first publication).
pub fn assess(
    key: &KeyRecord,
    agents: &[(String, OffsetDateTime)],
    now: OffsetDateTime,
) -> Readiness {
    let published = millis(key.first_published_at);
    let verifiers: Vec<Verifier> = agents
        .iter()
        .filter(|(_, last)| *last >= published - VERIFIER_WINDOW && now - *last < VERIFIER_WINDOW)
        .map(|(agent, last)| Verifier {
            agent: agent.clone(),
            last_fetched_at: *last,
            fetched_since_key: millis(*last) >= published,
        })
        .collect();
    let lead_ends = published + Duration::seconds(i64::from(key.lead_seconds));
    let mut pending = Vec::new();
    if now < lead_ends {
        pending.push(Pending::Lead(lead_ends));
    }
    pending.extend(
        (verifiers.iter())
            .filter(|v| !v.fetched_since_key)
            .map(|v| Pending::Verifier(v.agent.clone())),
    );
    let safe_at = pending.is_empty().then(|| {
        let last_fetch = verifiers.iter().map(|v| v.last_fetched_at).max();
        last_fetch
            .map_or(lead_ends, |at| at.max(lead_ends))
            .min(now)
    });
    Readiness {
        verifiers,
        pending,
        safe_at,
    }
}

fn rfc3339(at: OffsetDateTime) -> String {
    at.format(&Rfc3339).unwrap_or_default()
}

/// `GET /services/{s}/keys/{kid}/readiness`: whether key `kid` of `service` is safe to sign
/// with (404 for a key the service does not publish), `purging` when caches in front of the
/// registry are purged. The first time it is found safe is recorded: from then on it stays safe.
pub fn readiness(
    registry: &Registry,
    service: &Service,
    kid: &str,
    purging: bool,
    now: OffsetDateTime,
) -> Result<Value, AppError> {
    let keys = config::key_state(registry, service)?;
    let key = (keys.keys.iter())
        .find(|k| k.kid == kid && k.is_published_at(now))
        .ok_or_else(|| AppError::NotFound(format!("no published key {kid:?}")))?;
    let since = key.first_published_at - VERIFIER_WINDOW;
    let fetches = registry.store.fetches(service.id, since, AGENTS)?;
    let agents: Vec<(String, OffsetDateTime)> = (fetches.iter())
        .filter(|f| f.document.is_jwks())
        .flat_map(|f| f.agents.iter().map(|a| (a.agent.clone(), a.last_at)))
        .collect();
    let mut assessed = assess(key, &agents, now);
    if purging {
        let purged = registry.store.purged_through(service.id)?;
        if purged.is_none_or(|at| at < millis(key.first_published_at)) {
            assessed.pending.push(Pending::Purge);
            assessed.safe_at = None;
        }
    }
    let safe_at = match registry.store.key_safe_at(service.id, kid)? {
        Some(at) => Some(at),
        None => match assessed.safe_at {
            Some(at) => Some(registry.store.record_key_safe(service.id, kid, at)?),
            None => None,
        },
    };
    let pending: Vec<Value> = match safe_at {
        Some(_) => Vec::new(),
        None => (assessed.pending.iter())
            .map(|p| match p {
                Pending::Lead(ends) => json!({
                    "reason": "lead",
                    "message": format!(
                        "the key has been published for less than its lead time of {} s: it \
                         ends at {}",
                        key.lead_seconds,
                        rfc3339(*ends)
                    ),
                }),
                Pending::Purge => json!({
                    "reason": "purge",
                    "message": "the caches in front of the registry have not all dropped their \
                                copies of the key set published before this key",
                }),
                Pending::Verifier(agent) => json!({
                    "reason": "verifier",
                    "agent": agent,
                    "message": format!(
                        "{agent:?} fetched the key set in the 7 days before this key was \
                         published, and not since: it may still hold a key set without it"
                    ),
                }),
            })
            .collect(),
    };
    let verifiers: Vec<Value> = (assessed.verifiers.iter())
        .map(|v| {
            json!({
                "agent": v.agent,
                "lastFetchedAt": rfc3339(v.last_fetched_at),
                "fetchedSinceKey": v.fetched_since_key,
            })
        })
        .collect();
    Ok(json!({
        "kid": key.kid,
        "state": key.state(),
        "firstPublishedAt": rfc3339(key.first_published_at),
        "safeToSign": safe_at.is_some(),
        "safeToSignAt": safe_at.map(rfc3339),
        "leadSeconds": key.lead_seconds,
        "pending": pending,
        "verifiers": verifiers,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::testing::{caller, registry};
    use crate::app::{config as config_app, services};
    use crate::ports::{AgentFetches, DocumentFetches};
    use crate::Plan;
    use time::macros::datetime;

    const T0: OffsetDateTime = datetime!(2026-11-26 12:00 UTC);

    fn key(lead_seconds: u32) -> KeyRecord {
        KeyRecord {
            kid: "new".into(),
            jwk: serde_json::Map::new(),
            thumbprint: "t".into(),
            first_published_at: T0,
            retired_at: None,
            published_until: None,
            lead_seconds,
            source: crate::keys::DEFAULT_SOURCE.into(),
        }
    }

    #[test]
    fn safe_after_the_lead_once_every_recent_verifier_fetched_since() {
        let minutes = |m: i64| T0 + Duration::minutes(m);
        let agents = vec![
            ("aws".to_owned(), minutes(-30)),
            ("gcp".to_owned(), minutes(-60 * 24 * 6)),
            // Gone for more than 7 days before the key: not a verifier.
            ("old".to_owned(), minutes(-60 * 24 * 8)),
        ];
        let at = assess(&key(600), &agents, minutes(5));
        assert_eq!(at.verifiers.len(), 2);
        assert_eq!(
            at.pending,
            [
                Pending::Lead(minutes(10)),
                Pending::Verifier("aws".into()),
                Pending::Verifier("gcp".into())
            ]
        );
        assert_eq!(at.safe_at, None);
        // aws fetched after the key was published, gcp did not come back: gcp holds it.
        let agents = vec![
            ("aws".to_owned(), minutes(12)),
            ("gcp".to_owned(), minutes(-60 * 24 * 6)),
        ];
        let at = assess(&key(600), &agents, minutes(20));
        assert_eq!(at.pending, [Pending::Verifier("gcp".into())]);
        // A day later gcp has not been seen for 7 days: it no longer holds the key back.
        let at = assess(&key(600), &agents, minutes(60 * 24 + 1));
        assert!(at.pending.is_empty());
        assert_eq!(at.safe_at, Some(minutes(12)), "the latest verifier's fetch");
        // No verifier at all: safe at the end of the lead.
        let at = assess(&key(0), &[], minutes(1));
        assert_eq!(at.safe_at, Some(T0));
    }

    /// A service that published the key `new` at `T0`, with this lead.
    fn published(lead: u32) -> (Registry, Service) {
        let (registry, _, account) = registry(Plan::Business, T0);
        let command = services::CreateService::default();
        let service = services::create(&registry, &caller(account.clone()), command, T0).unwrap();
        let key = json!({"kty": "OKP", "crv": "Ed25519", "kid": "new",
            "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"});
        let body = json!({
            "openidConfiguration": {"issuer": "https://k.example",
                "jwks_uri": "https://k.example/jwks", "response_types_supported": ["id_token"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["EdDSA"]},
            "jwks": {"keys": [key]},
            "rotationLeadSeconds": lead});
        let command = config_app::PublishConfig {
            body,
            source: crate::keys::DEFAULT_SOURCE.into(),
        };
        config_app::publish(&registry, &caller(account), &service, command, T0).unwrap();
        (registry, service)
    }

    #[test]
    fn a_key_found_safe_stays_safe() {
        let (registry, service) = published(60);
        let fetched = |agent: &str, at: OffsetDateTime| DocumentFetches {
            service_id: service.id,
            document: crate::ports::FetchedDocument::Jwks,
            ok: 1,
            not_modified: 0,
            last_at: at,
            agents: vec![AgentFetches {
                agent: agent.into(),
                count: 1,
                last_at: at,
            }],
        };
        // A verifier of the day before.
        let store = &registry.store;
        store
            .record_fetches(&[fetched("aws", T0 - Duration::days(1))])
            .unwrap();
        let at = |s: i64| T0 + Duration::seconds(s);
        let answer = readiness(&registry, &service, "new", false, at(30)).unwrap();
        assert_eq!(answer["safeToSign"], false);
        assert_eq!(answer["leadSeconds"], 60);
        let reasons: Vec<&str> = (answer["pending"].as_array().unwrap().iter())
            .map(|p| p["reason"].as_str().unwrap())
            .collect();
        assert_eq!(reasons, ["lead", "verifier"]);
        store.record_fetches(&[fetched("aws", at(90))]).unwrap();
        let answer = readiness(&registry, &service, "new", false, at(100)).unwrap();
        assert_eq!(answer["safeToSign"], true, "{answer}");
        assert_eq!(answer["safeToSignAt"], rfc3339(at(90)));
        assert_eq!(answer["pending"], json!([]));
        assert_eq!(answer["verifiers"][0]["fetchedSinceKey"], true);
        // Evidence that would move the time does not: it stays what it was found.
        store.record_fetches(&[fetched("aws", at(500))]).unwrap();
        let answer = readiness(&registry, &service, "new", false, at(600)).unwrap();
        assert_eq!(answer["safeToSignAt"], rfc3339(at(90)));
        assert!(matches!(
            readiness(&registry, &service, "other", false, at(600)),
            Err(AppError::NotFound(_))
        ));
    }

    #[test]
    fn with_caches_to_purge_a_key_waits_for_the_purge_of_its_publication() {
        let (registry, service) = published(0);
        let later = T0 + Duration::seconds(5);
        let answer = readiness(&registry, &service, "new", true, later).unwrap();
        assert_eq!(answer["safeToSign"], false);
        assert_eq!(answer["pending"][0]["reason"], "purge");
        // A purge of an earlier change does not count; the publication's does.
        let store = &registry.store;
        store
            .record_purge(service.id, T0 - Duration::hours(1))
            .unwrap();
        let answer = readiness(&registry, &service, "new", true, later).unwrap();
        assert_eq!(answer["safeToSign"], false);
        store.record_purge(service.id, T0).unwrap();
        let answer = readiness(&registry, &service, "new", true, later).unwrap();
        assert_eq!(answer["safeToSign"], true, "{answer}");
        assert_eq!(store.purged_through(service.id).unwrap(), Some(T0));
    }
}
