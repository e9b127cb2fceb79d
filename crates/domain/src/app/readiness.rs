//! Key readiness (docs/api.md, "Key readiness"): whether a new key is safe to sign with, from
//! what the registry saw of the verifiers' fetches, instead of a guessed wait.
//!
//! A key is safe when it has been published for its lead time, every verifier of the key has
//! fetched the key set since, and, when caches in front of the registry are purged, the purge of
//! the change that published it succeeded.
//!
//! A key's verifiers are fixed when it is first published ([`crate::keys::verifiers_of`]): the
//! agents that fetched the key set in at least two distinct clock hours of the week before, each
//! with the networks it fetched from. No agent joins later, so a fetch under a new agent holds no
//! key back; and only a verifier's fetch from one of its own networks counts, so sending a
//! verifier's User-Agent from elsewhere makes no key safe. One not seen for 7 days no longer
//! holds a key back. The first time a key is found safe is recorded, and a key stays safe from
//! then on, whatever the evidence says later.

use crate::app::{config, AppError, Caller, Registry};
use crate::audit::{Action, Resource};
use crate::keys::{KeyRecord, KeyVerifier};
use crate::network::Network;
use crate::ports::{CachePurger, NetworkFetch};
use crate::service::PublishedConfig;
use crate::timestamp::rfc3339_exact;
use crate::Service;
use serde_json::{json, Value};
use time::{Duration, OffsetDateTime};

pub use crate::keys::VERIFIER_WINDOW;

/// One verifier of a key: who, from where, when it last fetched the key set, whether that was
/// after the key was first published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verifier {
    /// Its User-Agent.
    pub agent: String,
    /// The networks its fetches count from.
    pub networks: Vec<Network>,
    /// Its last fetch of the key set from one of them.
    pub last_fetched_at: OffsetDateTime,
    /// Whether it fetched the key set from one of them since the key was first published.
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

/// The readiness of `key` at `now`, given its verifiers and their fetches of the key set since
/// it was first published (`fetches`: each agent's last fetch from each network). A fetch
/// counts only for the verifier of its agent, and only from one of the verifier's networks.
pub fn assess(
    key: &KeyRecord,
    verifiers: &[KeyVerifier],
    fetches: &[(String, NetworkFetch)],
    now: OffsetDateTime,
) -> Readiness {
    let published = millis(key.first_published_at);
    let verifiers: Vec<Verifier> = (verifiers.iter())
        .map(|v| {
            let since = (fetches.iter())
                .filter(|(agent, f)| *agent == v.agent && v.networks.contains(&f.network))
                .map(|(_, f)| f.last_at)
                .filter(|at| millis(*at) >= published)
                .max();
            Verifier {
                agent: v.agent.clone(),
                networks: v.networks.clone(),
                last_fetched_at: since.map_or(v.last_fetched_at, |at| at.max(v.last_fetched_at)),
                fetched_since_key: since.is_some(),
            }
        })
        .filter(|v| now - v.last_fetched_at < VERIFIER_WINDOW)
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
        (last_fetch.into_iter().chain(key.dismissed_at))
            .fold(lead_ends, OffsetDateTime::max)
            .min(now)
    });
    Readiness {
        verifiers,
        pending,
        safe_at,
    }
}

/// The verifiers of `key`: fixed at its publication, or, for a key published before they were,
/// found now from the evidence of its week before.
fn verifiers_of_key(
    registry: &Registry,
    service: &Service,
    key: &KeyRecord,
) -> Result<Vec<KeyVerifier>, AppError> {
    match &key.verifiers {
        Some(fixed) => Ok(fixed.clone()),
        None => config::verifiers_at(registry, service.id, millis(key.first_published_at)),
    }
}

/// Whether `key` of `service` is safe at `now` (`purging`: caches in front of the registry are
/// purged), with what the evidence says: when it became safe, recorded the first time it is
/// found so (from then on it stays safe).
pub fn assess_key(
    registry: &Registry,
    service: &Service,
    key: &KeyRecord,
    purging: bool,
    now: OffsetDateTime,
) -> Result<(Readiness, Option<OffsetDateTime>), AppError> {
    let kid = key.kid.as_str();
    let assessed = evidence(registry, service, key, purging, now)?;
    let published = key.first_published_at;
    let safe_at = match registry.store.key_safe_at(service.id, kid, published)? {
        Some(at) => Some(at),
        None => match assessed.safe_at {
            Some(at) => Some((registry.store).record_key_safe(service.id, kid, published, at)?),
            None => None,
        },
    };
    Ok((assessed, safe_at))
}

/// What the evidence says of `key` at `now`, nothing recorded.
fn evidence(
    registry: &Registry,
    service: &Service,
    key: &KeyRecord,
    purging: bool,
    now: OffsetDateTime,
) -> Result<Readiness, AppError> {
    let verifiers = verifiers_of_key(registry, service, key)?;
    let agents: Vec<String> = verifiers.iter().map(|v| v.agent.clone()).collect();
    let fetches = match agents.is_empty() {
        true => Vec::new(),
        false => (registry.store).verifier_fetches(service.id, &agents, key.first_published_at)?,
    };
    let mut assessed = assess(key, &verifiers, &fetches, now);
    if purging {
        let purged = registry.store.purged_through(service.id)?;
        if purged.is_none_or(|at| at < millis(key.first_published_at)) {
            assessed.pending.push(Pending::Purge);
            assessed.safe_at = None;
        }
    }
    Ok(assessed)
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
    // A managed key that no longer signs is retired, as `GET …/keys` lists it; a service's
    // very first waits for no purge, as managed signing judges it.
    let managed = key.retired_at.is_none() && key.held_by(crate::keys::MANAGED_SOURCE);
    let signing = match managed {
        true => registry.store.signing(service.id)?,
        false => None,
    };
    let retiring = signing
        .as_ref()
        .map_or_else(Vec::new, |s| s.retiring(service.expires_at));
    let first_of_all =
        (signing.iter().flat_map(|s| &s.keys)).any(|k| k.kid == kid && k.first_of_all);
    let (assessed, safe_at) = assess_key(registry, service, key, purging && !first_of_all, now)?;
    let state = key.retirement(&retiring).map_or("current", |_| "retired");
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
                        rfc3339_exact(*ends)
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
                        "{agent:?} fetched the key set in the week before this key was \
                         published, and not since from its networks: it may still hold a key \
                         set without it (a verifier that will not come back can be dismissed: \
                         DELETE …/readiness/verifiers/{{agent}})"
                    ),
                }),
            })
            .collect(),
    };
    let verifiers: Vec<Value> = (assessed.verifiers.iter())
        .map(|v| {
            let networks: Vec<String> = v.networks.iter().map(Network::to_string).collect();
            json!({
                "agent": v.agent,
                "networks": networks,
                "lastFetchedAt": rfc3339_exact(v.last_fetched_at),
                "fetchedSinceKey": v.fetched_since_key,
            })
        })
        .collect();
    Ok(json!({
        "kid": key.kid,
        "state": state,
        // To the millisecond, as a fetch is compared with it (`GET …/keys` gives whole seconds).
        "firstPublishedAt": rfc3339_exact(millis(key.first_published_at)),
        "safeToSign": safe_at.is_some(),
        "safeToSignAt": safe_at.map(rfc3339_exact),
        "leadSeconds": key.lead_seconds,
        "pending": pending,
        "verifiers": verifiers,
    }))
}

/// Purges every cache in front of the registry of `paths` under each of `hosts` (a service's
/// subdomain, and its custom domain when one is served) after a change of its documents
/// (docs/api.md, "Behind a CDN"): whether every purge succeeded, which the caller then records
/// ([`purged`]); key readiness waits for that record. Every host is purged even when one fails,
/// and none waits for another's retries.
pub async fn purge(purger: &dyn CachePurger, hosts: &[String], paths: &[&str]) -> bool {
    purger.purge(hosts, paths).await
}

/// The changes of public documents in the week before `now` whose purge no replica recorded,
/// each service's newest with its subdomain: a replica purges them again as it starts
/// (docs/api.md, "Behind a CDN"). An older change published no key whose readiness could
/// still wait for it, unless its purge was owed for a week.
pub fn unpurged(
    registry: &Registry,
    now: OffsetDateTime,
) -> Result<Vec<(uuid::Uuid, String, OffsetDateTime)>, AppError> {
    Ok(registry
        .store
        .unpurged(now - crate::keys::VERIFIER_WINDOW)?)
}

/// Records that `service_id`'s documents as of their change at `changed_at` left no cache to
/// purge (none is configured): a key they published does not wait for a purge should caches be
/// purged later (docs/api.md, "Behind a CDN").
pub fn nothing_to_purge(
    registry: &Registry,
    service_id: uuid::Uuid,
    changed_at: OffsetDateTime,
) -> Result<(), AppError> {
    // A deleted service's change (its documents gone) has no key to wait for it.
    if registry.store.service(service_id)?.is_none() {
        return Ok(());
    }
    Ok(registry.store.record_purge(service_id, changed_at)?)
}

/// Records that every cache in front of the registry dropped its copies of `service_id`'s
/// documents as of their change at `changed_at` (docs/api.md, "Behind a CDN"), at `now`: what a
/// key's readiness waits for when caches are purged. A key of that change that waited for this
/// purge alone became safe now, not when its other conditions were met: its time is recorded
/// so, before any readiness call could date it earlier.
pub fn purged(
    registry: &Registry,
    service_id: uuid::Uuid,
    changed_at: OffsetDateTime,
    now: OffsetDateTime,
) -> Result<(), AppError> {
    // A deleted service's purge has no key to wait for it, and nothing to keep it for.
    let Some(service) = registry.store.service(service_id)? else {
        return Ok(());
    };
    let before = registry.store.purged_through(service_id)?;
    registry.store.record_purge(service_id, changed_at)?;
    let keys = config::key_state(registry, &service)?;
    let purged_now = (keys.keys.iter())
        .filter(|k| k.is_published_at(now) && millis(k.first_published_at) <= changed_at);
    for key in purged_now {
        let published = key.first_published_at;
        if (registry.store)
            .key_safe_at(service_id, &key.kid, published)?
            .is_some()
        {
            continue;
        }
        if let Some(at) = evidence(registry, &service, key, true, now)?.safe_at {
            // A key whose own publication was purged before (its lead or verifiers held it
            // back then) became safe when they let it go, not at this later change's purge.
            let purged_before = before.is_some_and(|b| millis(published) <= b);
            let at = if purged_before { at } else { at.max(now) };
            (registry.store).record_key_safe(service_id, &key.kid, published, at)?;
        }
    }
    Ok(())
}

/// `DELETE /services/{s}/keys/{kid}/readiness/verifiers/{agent}`: the owner dismisses a
/// verifier of key `kid` that will never come back; it no longer holds the key back. 404 for a
/// key not published or an agent that is not one of its verifiers.
pub fn dismiss_verifier(
    registry: &Registry,
    caller: &Caller,
    service: &Service,
    kid: &str,
    agent: &str,
    now: OffsetDateTime,
) -> Result<(), AppError> {
    crate::app::registered_only(service, "dismissing a verifier")?;
    // A key published before verifiers were fixed gets them fixed now, without the dismissed one.
    let keys = config::key_state(registry, service)?;
    let key = (keys.keys.iter())
        .find(|k| k.kid == kid && k.is_published_at(now))
        .ok_or_else(|| AppError::NotFound(format!("no published key {kid:?}")))?;
    let found = verifiers_of_key(registry, service, key)?;
    // Whether the dismissed verifier still held the key back: then the key is safe no earlier
    // than now.
    let fetches = (registry.store).verifier_fetches(
        service.id,
        &[agent.to_owned()],
        key.first_published_at,
    )?;
    let held_back = (assess(key, &found, &fetches, now).pending.iter())
        .any(|p| matches!(p, Pending::Verifier(waiting) if waiting == agent));
    // The event names the key and says which verifiers it had and has.
    let agents = |verifiers: &[KeyVerifier]| -> Value {
        verifiers.iter().map(|v| v.agent.as_str()).collect()
    };
    let had = key.verifiers.as_deref().unwrap_or(&found);
    let kept: Vec<KeyVerifier> = (had.iter()).filter(|v| v.agent != agent).cloned().collect();
    let event = caller
        .event(
            Action::VerifierDismiss,
            Resource::key(kid, &service.subdomain),
            service.customer_id,
            now,
        )
        .with_change("verifiers", agents(had), agents(&kept));
    let mut outcome = None;
    registry
        .store
        .update_config(
            service.id,
            &mut |current| {
                let mut current = current?;
                let key = (current.keys.keys.iter_mut()).find(|k| k.kid == kid)?;
                let mut verifiers = key.verifiers.clone().unwrap_or_else(|| found.clone());
                let before = verifiers.len();
                verifiers.retain(|v| v.agent != agent);
                outcome = Some(verifiers.len() < before);
                if verifiers.len() == before {
                    return None;
                }
                key.verifiers = Some(verifiers);
                if held_back {
                    key.dismissed_at = Some(now);
                }
                Some(PublishedConfig {
                    updated_at: now,
                    previous_change_at: None,
                    ..current
                })
            },
            &event,
        )
        .map_err(AppError::gone(|| {
            format!("no service {:?}", service.subdomain)
        }))?;
    match outcome {
        Some(true) => Ok(()),
        Some(false) => Err(AppError::NotFound(format!(
            "{agent:?} is not a verifier of key {kid:?}"
        ))),
        None => Err(AppError::NotFound(format!("no published key {kid:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::testing::{caller, registry};
    use crate::app::{config as config_app, services};
    use crate::testing::key_set_fetch;
    use crate::Plan;
    use time::macros::datetime;

    const T0: OffsetDateTime = datetime!(2026-11-26 12:00 UTC);

    fn net(text: &str) -> Network {
        text.parse().unwrap()
    }

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
            also_sources: Vec::new(),
            verifiers: None,
            dismissed_at: None,
        }
    }

    fn verifier(agent: &str, network: &str, last: OffsetDateTime) -> KeyVerifier {
        KeyVerifier {
            agent: agent.into(),
            networks: vec![net(network)],
            last_fetched_at: last,
        }
    }

    fn fetch(agent: &str, network: &str, at: OffsetDateTime) -> (String, NetworkFetch) {
        let network = net(network);
        (
            agent.into(),
            NetworkFetch {
                network,
                last_at: at,
            },
        )
    }

    #[test]
    fn safe_after_the_lead_once_every_recent_verifier_fetched_since_from_its_network() {
        let minutes = |m: i64| T0 + Duration::minutes(m);
        let verifiers = [
            verifier("aws", "10.0.1.0/24", minutes(-30)),
            verifier("gcp", "10.0.2.0/24", minutes(-60 * 24 * 6)),
        ];
        let at = assess(&key(600), &verifiers, &[], minutes(5));
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
        // aws fetched after the key was published from its network; gcp's agent was sent from
        // another network (anyone can send it), and another agent from gcp's: neither counts.
        let fetches = [
            fetch("aws", "10.0.1.0/24", minutes(12)),
            fetch("gcp", "192.0.2.0/24", minutes(13)),
            fetch("bot", "10.0.2.0/24", minutes(13)),
        ];
        let at = assess(&key(600), &verifiers, &fetches, minutes(20));
        assert_eq!(at.pending, [Pending::Verifier("gcp".into())]);
        assert!(!at.verifiers[1].fetched_since_key);
        assert_eq!(at.verifiers[1].last_fetched_at, minutes(-60 * 24 * 6));
        // A fetch before the publication, from the right network, does not count either.
        let early = [fetch("gcp", "10.0.2.0/24", minutes(-1))];
        let at = assess(&key(0), &verifiers[1..], &early, minutes(20));
        assert_eq!(at.pending, [Pending::Verifier("gcp".into())]);
        // A day later gcp has not been seen for 7 days: it no longer holds the key back.
        let at = assess(&key(600), &verifiers, &fetches, minutes(60 * 24 + 1));
        assert!(at.pending.is_empty());
        assert_eq!(at.safe_at, Some(minutes(12)), "the latest verifier's fetch");
        // No verifier at all: safe at the end of the lead.
        let at = assess(&key(0), &[], &[], minutes(1));
        assert_eq!(at.safe_at, Some(T0));
        // A verifier seen from no known network is satisfied by no fetch: it holds the key
        // until it has not been seen for 7 days (or is dismissed).
        let unknown = KeyVerifier {
            agent: "cdn-without-addresses".into(),
            networks: Vec::new(),
            last_fetched_at: minutes(-60),
        };
        let anywhere = [fetch("cdn-without-addresses", "10.9.9.0/24", minutes(5))];
        let at = assess(
            &key(0),
            std::slice::from_ref(&unknown),
            &anywhere,
            minutes(10),
        );
        assert_eq!(
            at.pending,
            [Pending::Verifier("cdn-without-addresses".into())]
        );
        let at = assess(&key(0), &[unknown], &anywhere, minutes(60 * 24 * 7));
        assert!(at.pending.is_empty());
    }

    fn new_service() -> (Registry, Service, Caller) {
        let (registry, _, account) = registry(Plan::Business, T0);
        let command = services::CreateService::default();
        let service = services::create(&registry, &caller(account.clone()), command, T0).unwrap();
        (registry, service, caller(account))
    }

    /// Publishes the key `kid` at `at` with this lead.
    fn publish(
        registry: &Registry,
        service: &Service,
        who: &Caller,
        kid: &str,
        lead: u32,
        at: OffsetDateTime,
    ) {
        let x = match kid {
            "new" => "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo",
            _ => "3p7bfXt9wbTTW2HC7OQ1Nz-DQ8hbeGdNrfx-FG-IK08",
        };
        let key = json!({"kty": "OKP", "crv": "Ed25519", "kid": kid, "x": x});
        let mut body = crate::testing::upload_of(key, "EdDSA");
        body["rotationLeadSeconds"] = json!(lead);
        let command = config_app::PublishConfig {
            body,
            source: crate::keys::DEFAULT_SOURCE.into(),
        };
        config_app::publish(registry, who, service, command, at).unwrap();
    }

    /// A service that published the key `new` at `T0`, with this lead.
    fn published(lead: u32) -> (Registry, Service) {
        let (registry, service, who) = new_service();
        publish(&registry, &service, &who, "new", lead, T0);
        (registry, service)
    }

    fn reasons(answer: &Value) -> Vec<String> {
        (answer["pending"].as_array().unwrap().iter())
            .map(|p| {
                p["agent"]
                    .as_str()
                    .or(p["reason"].as_str())
                    .unwrap()
                    .to_owned()
            })
            .collect()
    }

    /// The time of a key's publication to the millisecond, as a verifier's fetch is compared
    /// with it: a client comparing the two sees what the registry compared (a managed key's,
    /// taken from the clock with its nanoseconds, no finer).
    #[test]
    fn the_publication_time_keeps_its_milliseconds() {
        let (registry, service, who) = new_service();
        let published = T0 + Duration::nanoseconds(560_123_456);
        publish(&registry, &service, &who, "new", 0, published);
        let answer = readiness(&registry, &service, "new", false, T0 + Duration::seconds(1));
        assert_eq!(
            answer.unwrap()["firstPublishedAt"],
            "2026-11-26T12:00:00.56Z"
        );
    }

    #[test]
    fn verifiers_are_fixed_at_publication_and_recognised_by_their_network() {
        let (registry, service, who) = new_service();
        let store = &registry.store;
        let hours = |h: i64| T0 - Duration::hours(h);
        // aws fetched in two distinct hours of the week before; gcp in one only; a bot under
        // many agents, each in one hour.
        store
            .record_fetches(&[key_set_fetch(service.id, "aws", "10.0.1.7", hours(30))])
            .unwrap();
        store
            .record_fetches(&[key_set_fetch(service.id, "aws", "10.0.1.8", hours(2))])
            .unwrap();
        store
            .record_fetches(&[key_set_fetch(service.id, "gcp", "10.0.2.7", hours(2))])
            .unwrap();
        for i in 0..50 {
            let agent = format!("bot {i}");
            store
                .record_fetches(&[key_set_fetch(service.id, &agent, "192.0.2.1", hours(1))])
                .unwrap();
        }
        publish(&registry, &service, &who, "new", 0, T0);
        let at = |s: i64| T0 + Duration::seconds(s);
        let answer = readiness(&registry, &service, "new", false, at(1)).unwrap();
        assert_eq!(reasons(&answer), ["aws"], "{answer}");
        assert_eq!(answer["verifiers"][0]["networks"], json!(["10.0.1.0/24"]));
        // An agent first seen after the publication never joins; the verifier's agent from
        // another network counts for nothing.
        store
            .record_fetches(&[key_set_fetch(service.id, "late", "10.0.9.1", at(2))])
            .unwrap();
        store
            .record_fetches(&[key_set_fetch(service.id, "late", "10.0.9.1", at(3700))])
            .unwrap();
        store
            .record_fetches(&[key_set_fetch(service.id, "aws", "192.0.2.1", at(3))])
            .unwrap();
        let answer = readiness(&registry, &service, "new", false, at(3800)).unwrap();
        assert_eq!(reasons(&answer), ["aws"], "{answer}");
        assert_eq!(answer["safeToSign"], false);
        // Its own network: safe.
        store
            .record_fetches(&[key_set_fetch(service.id, "aws", "10.0.1.200", at(3900))])
            .unwrap();
        let answer = readiness(&registry, &service, "new", false, at(3901)).unwrap();
        assert_eq!(answer["safeToSign"], true, "{answer}");
        assert_eq!(answer["verifiers"][0]["fetchedSinceKey"], true);
    }

    #[test]
    fn a_dismissed_verifier_holds_the_key_back_no_longer() {
        let (registry, service, who) = new_service();
        let store = &registry.store;
        for h in [3, 2] {
            let at = T0 - Duration::hours(h);
            store
                .record_fetches(&[key_set_fetch(service.id, "gone", "10.0.3.1", at)])
                .unwrap();
        }
        publish(&registry, &service, &who, "new", 0, T0);
        let later = T0 + Duration::minutes(1);
        let answer = readiness(&registry, &service, "new", false, later).unwrap();
        assert_eq!(reasons(&answer), ["gone"]);
        let refused = dismiss_verifier(&registry, &who, &service, "new", "nobody", later);
        assert!(matches!(refused, Err(AppError::NotFound(_))), "{refused:?}");
        let refused = dismiss_verifier(&registry, &who, &service, "nokey", "gone", later);
        assert!(matches!(refused, Err(AppError::NotFound(_))), "{refused:?}");
        let dismissed = later + Duration::seconds(30);
        dismiss_verifier(&registry, &who, &service, "new", "gone", dismissed).unwrap();
        let answer = readiness(&registry, &service, "new", false, dismissed).unwrap();
        assert_eq!(answer["safeToSign"], true, "{answer}");
        // It became safe when the dismissal let it, not at its publication.
        assert_eq!(answer["safeToSignAt"], rfc3339_exact(dismissed), "{answer}");
        assert_eq!(answer["verifiers"], json!([]));
    }

    #[test]
    fn a_key_found_safe_stays_safe() {
        let (registry, service, who) = new_service();
        // A verifier of the days before.
        let store = &registry.store;
        for days in [2, 1] {
            let at = T0 - Duration::days(days);
            store
                .record_fetches(&[key_set_fetch(service.id, "aws", "10.0.1.1", at)])
                .unwrap();
        }
        publish(&registry, &service, &who, "new", 60, T0);
        let at = |s: i64| T0 + Duration::seconds(s);
        let answer = readiness(&registry, &service, "new", false, at(30)).unwrap();
        assert_eq!(answer["safeToSign"], false);
        assert_eq!(answer["leadSeconds"], 60);
        let reasons: Vec<&str> = (answer["pending"].as_array().unwrap().iter())
            .map(|p| p["reason"].as_str().unwrap())
            .collect();
        assert_eq!(reasons, ["lead", "verifier"]);
        store
            .record_fetches(&[key_set_fetch(service.id, "aws", "10.0.1.1", at(90))])
            .unwrap();
        let answer = readiness(&registry, &service, "new", false, at(100)).unwrap();
        assert_eq!(answer["safeToSign"], true, "{answer}");
        assert_eq!(answer["safeToSignAt"], rfc3339_exact(at(90)));
        assert_eq!(answer["pending"], json!([]));
        assert_eq!(answer["verifiers"][0]["fetchedSinceKey"], true);
        // Evidence that would move the time does not: it stays what it was found.
        store
            .record_fetches(&[key_set_fetch(service.id, "aws", "10.0.1.1", at(500))])
            .unwrap();
        let answer = readiness(&registry, &service, "new", false, at(600)).unwrap();
        assert_eq!(answer["safeToSignAt"], rfc3339_exact(at(90)));
        assert!(matches!(
            readiness(&registry, &service, "other", false, at(600)),
            Err(AppError::NotFound(_))
        ));
    }

    /// Purging without a cache: every host is purged even when one fails, and only a purge of
    /// them all counts.
    #[test]
    fn a_purge_succeeds_only_when_every_host_was_purged() {
        use crate::testing::MemoryPurger;
        let purger = MemoryPurger::default();
        let hosts = ["k.oidc.test".to_owned(), "login.acme.com".to_owned()];
        let paths = ["/.well-known/openid-configuration", "/openid/v1/jwks"];
        assert!(crate::testing::ready(purge(&purger, &hosts, &paths)));
        assert_eq!(purger.purged().len(), 4);
        purger.fail("k.oidc.test");
        assert!(!crate::testing::ready(purge(&purger, &hosts, &paths)));
        let purged = purger.purged();
        assert_eq!(purged.len(), 6, "the other host was purged all the same");
        assert!(purged[4..].iter().all(|(host, _)| host == "login.acme.com"));
    }

    #[test]
    fn the_in_memory_caches_keep_the_purger_contract() {
        use crate::testing::{purger_contract, ready, MemoryPurger};
        let purger = MemoryPurger::default();
        let mut from_cache = |host: &str, path: &str| purger.get(host, path);
        ready(purger_contract(
            &purger,
            "k.oidc.test",
            "/openid/v1/jwks",
            &mut from_cache,
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
        purged(&registry, service.id, T0 - Duration::hours(1), later).unwrap();
        let answer = readiness(&registry, &service, "new", true, later).unwrap();
        assert_eq!(answer["safeToSign"], false);
        // The purge succeeds 10 s later: the key became safe then, though its lead (0 s) and its
        // verifiers (none) held nothing back before.
        let purge_done = later + Duration::seconds(10);
        purged(&registry, service.id, T0, purge_done).unwrap();
        let answer = readiness(
            &registry,
            &service,
            "new",
            true,
            purge_done + Duration::seconds(5),
        )
        .unwrap();
        assert_eq!(answer["safeToSign"], true, "{answer}");
        assert_eq!(
            answer["safeToSignAt"],
            rfc3339_exact(purge_done),
            "{answer}"
        );
        assert_eq!(registry.store.purged_through(service.id).unwrap(), Some(T0));
    }

    /// A key whose publication was purged while its lead still held it back became safe at the
    /// end of its lead: a later change's purge, recorded before anyone asked, does not date it.
    #[test]
    fn a_later_changes_purge_does_not_date_a_key_its_own_purge_let_go_before() {
        let (registry, service) = published(3);
        purged(&registry, service.id, T0, T0 + Duration::milliseconds(600)).unwrap();
        let later_change = T0 + Duration::seconds(6);
        let later_purge = later_change + Duration::milliseconds(600);
        purged(&registry, service.id, later_change, later_purge).unwrap();
        let answer = readiness(&registry, &service, "new", true, T0 + Duration::seconds(10));
        let answer = answer.unwrap();
        assert_eq!(answer["safeToSign"], true, "{answer}");
        let lead_end = rfc3339_exact(T0 + Duration::seconds(3));
        assert_eq!(answer["safeToSignAt"], lead_end, "{answer}");
    }
}
