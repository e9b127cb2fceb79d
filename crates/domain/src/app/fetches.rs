//! Fetch evidence (docs/api.md, "Fetch evidence"): whether the verifiers fetched a service's
//! documents since they last changed. Every replica counts the public fetches in memory and adds
//! its counts to the store at least every 30 s ([`record`]); [`evidence`] reads the sum of all of
//! them.

use crate::app::{AppError, Registry};
use crate::ports::{
    fetch_hour, AgentHour, DocumentFetches, FetchedDocument, OTHER_AGENTS, STORED_AGENTS_PER_HOUR,
};
use crate::timestamp::rfc3339_exact;
use crate::Service;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use time::{Duration, OffsetDateTime};
use uuid::Uuid;

/// How far back the evidence reaches.
pub const WINDOW: Duration = Duration::hours(24);
/// How long the store keeps the counts: a verifier seen in the last 7 days holds a new key back
/// (docs/api.md, "Key readiness"), so its fetches are kept that long, and a day more.
pub const KEPT_FOR: Duration = Duration::days(8);
/// How many agents a document lists.
pub const TOP_AGENTS: usize = 10;

/// What the replica serves of one document now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    /// Its `ETag`, quoted.
    pub etag: String,
    /// When it last changed.
    pub changed_at: OffsetDateTime,
}

/// What the replica serves of a service now: discovery document, then key set; `None` when
/// nothing is published.
pub type Current = Option<[Served; 2]>;

/// What the replica serves under one of the service's issuers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuerServed {
    /// The issuer URL.
    pub issuer: String,
    /// Whether it is the service's custom domain (else its subdomain).
    pub custom_domain: bool,
    /// Its documents now.
    pub current: Current,
}

/// Adds a replica's counts to the store.
pub fn record(registry: &Registry, counts: &[DocumentFetches]) -> Result<(), AppError> {
    if !counts.is_empty() {
        registry.store.record_fetches(counts)?;
    }
    Ok(())
}

/// A service's regular agents: each with in how many distinct clock hours of a week it fetched
/// the key set.
pub type RegularAgents = Vec<(String, u32)>;

/// The regular agents of each of `service_ids` (docs/api.md, "Fetch evidence"): those that
/// fetched its key set, under any of its issuers, in the week before `now`'s clock hour, each
/// with in how many distinct hours of it; the [`STORED_AGENTS_PER_HOUR`] seen in the most
/// hours, then with the most fetches. A replica whose bound on a key set's agents overflowed
/// asks for them, so that agents new to the week push out no verifier there.
pub fn regulars(
    registry: &Registry,
    service_ids: &[Uuid],
    now: OffsetDateTime,
) -> Result<Vec<(Uuid, RegularAgents)>, AppError> {
    let hour = OffsetDateTime::UNIX_EPOCH + Duration::milliseconds(fetch_hour(now));
    let mut found = Vec::with_capacity(service_ids.len());
    for &service_id in service_ids {
        let since = hour - crate::keys::VERIFIER_WINDOW;
        let mut agents = (registry.store).verifier_candidates(service_id, since, hour)?;
        agents.sort_by_key(|a| std::cmp::Reverse((a.hours, a.count)));
        agents.truncate(STORED_AGENTS_PER_HOUR);
        let agents = agents.into_iter().map(|a| (a.agent, a.hours)).collect();
        found.push((service_id, agents));
    }
    Ok(found)
}

/// `GET /services/{s}/fetches`: per issuer (the subdomain's, then the custom domain's while it
/// is served) and document, what is served and who fetched it in the last 24 hours, summed over
/// every replica.
pub fn evidence(
    registry: &Registry,
    service: &Service,
    issuers: &[IssuerServed],
    now: OffsetDateTime,
) -> Result<Value, AppError> {
    let counted = registry
        .store
        .fetches(service.id, now - WINDOW, TOP_AGENTS)?;
    // The last fetch is the latest of all the store keeps, not only of the last 24 hours: a
    // verifier that picked up a change two days ago and has not come back since did pick it up.
    let kept = registry.store.fetches(service.id, now - KEPT_FOR, 0)?;
    let documents: Vec<Value> = issuers
        .iter()
        .flat_map(|served| {
            [FetchedDocument::Discovery, FetchedDocument::Jwks]
                .into_iter()
                .enumerate()
                .map(move |(i, document)| {
                    let document = match served.custom_domain {
                        true => document.on_custom_domain(),
                        false => document,
                    };
                    (served, i, document)
                })
        })
        .map(|(issuer, i, document)| {
            let served = issuer.current.as_ref().map(|c| &c[i]);
            let fetches = counted.iter().find(|f| f.document == document);
            let last = (kept.iter().find(|f| f.document == document)).map(|f| f.last_at);
            let since_change = match (served, last) {
                (Some(served), Some(last)) => last >= served.changed_at,
                _ => false,
            };
            let agents: Vec<Value> = fetches
                .map(|f| f.agents.as_slice())
                .unwrap_or_default()
                .iter()
                .map(|a| {
                    json!({"agent": shown_agent(&a.agent), "count": a.count,
                           "lastFetchedAt": rfc3339_exact(a.last_at)})
                })
                .collect();
            json!({
                "issuer": issuer.issuer,
                "path": document.path(),
                "currentETag": served.map(|s| s.etag.as_str()),
                "lastChangedAt": served.map(|s| rfc3339_exact(s.changed_at)),
                "lastFetchedAt": last.map(rfc3339_exact),
                "fetchedSinceChange": since_change,
                "fetches24h": fetches.map_or(0, |f| f.ok + f.not_modified),
                "agents": agents,
            })
        })
        .collect();
    Ok(json!({ "documents": documents }))
}

/// How many agents the history lists: the most active (as many as a key has verifiers at most;
/// a verifier less active than 32 others is left out, and its readiness still names it).
pub const HISTORY_AGENTS: usize = 32;

/// `GET /services/{s}/fetches/history`: who fetched the service's key set (under any of its
/// issuers), per clock hour, over the [`KEPT_FOR`] the store keeps: what a timeline of a
/// rotation draws beside the keys. The [`HISTORY_AGENTS`] most active agents (seen in the most
/// distinct hours, then with the most fetches), most active first, each with its hours, oldest
/// first.
pub fn history(
    registry: &Registry,
    service: &Service,
    now: OffsetDateTime,
) -> Result<Value, AppError> {
    crate::app::registered_only(service, "the fetch history")?;
    let since = now - KEPT_FOR;
    let mut by_agent: BTreeMap<String, Vec<AgentHour>> = BTreeMap::new();
    for hour in registry.store.key_set_hours(service.id, since)? {
        by_agent.entry(hour.agent.clone()).or_default().push(hour);
    }
    let mut agents: Vec<(String, u64, Vec<AgentHour>)> = by_agent
        .into_iter()
        .map(|(agent, mut hours)| {
            hours.sort_by_key(|h| h.hour);
            (agent, hours.iter().map(|h| h.count).sum(), hours)
        })
        .collect();
    // Most active as a key's verifiers are ranked: in the most distinct hours, then with the
    // most fetches, so that agents made up in one busy hour do not push a steady verifier out.
    agents.sort_by(|a, b| {
        (b.2.len().cmp(&a.2.len()))
            .then_with(|| b.1.cmp(&a.1))
            .then_with(|| a.0.cmp(&b.0))
    });
    agents.truncate(HISTORY_AGENTS);
    let agents: Vec<Value> = agents
        .into_iter()
        .map(|(agent, count, hours)| {
            let last = hours.iter().map(|h| h.last_at).max();
            let hours: Vec<Value> = (hours.iter())
                .map(|h| {
                    json!({"hour": rfc3339_exact(h.hour), "count": h.count,
                           "lastFetchedAt": rfc3339_exact(h.last_at)})
                })
                .collect();
            json!({
                "agent": shown_agent(&agent),
                "count": count,
                "lastFetchedAt": last.map(rfc3339_exact),
                "hours": hours,
            })
        })
        .collect();
    Ok(json!({
        "since": rfc3339_exact(OffsetDateTime::from_unix_timestamp(fetch_hour(since) / 1000).unwrap_or(since)),
        "until": crate::timestamp::rfc3339(now),
        "agents": agents,
    }))
}

/// An agent as the API names it: the agents past the stored bound, counted together, are
/// `"other"`.
fn shown_agent(agent: &str) -> &str {
    match agent == OTHER_AGENTS {
        true => "other",
        false => agent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::services;
    use crate::app::testing::{caller, registry};
    use crate::audit::{Action, Actor, AuditEvent, Resource};
    use crate::custom_domain::CustomDomain;
    use crate::ports::{AgentFetches, Ceiling};
    use crate::{Plan, Service};
    use time::macros::datetime;

    /// `service` asked for a custom domain a month ago: counts under a domain are taken only
    /// for the domain a service has, from when it asked for it.
    fn with_domain(registry: &Registry, service: &Service) {
        let asked = NOW - Duration::days(30);
        let claim = CustomDomain::new(service.id, "login.acme.com".into(), "t".into(), asked);
        let resource = Resource::service(service.id, &service.subdomain);
        let event = AuditEvent::new(
            Action::DomainPut,
            resource,
            Actor::operator(),
            service.customer_id,
            asked,
        );
        let put = registry
            .store
            .put_domain(&claim, None, Ceiling::NONE, &event);
        put.unwrap().unwrap();
    }

    const NOW: OffsetDateTime = datetime!(2026-11-25 12:00 UTC);

    fn count(
        service: &Service,
        document: FetchedDocument,
        agent: &str,
        at: OffsetDateTime,
    ) -> DocumentFetches {
        DocumentFetches {
            service_id: service.id,
            document,
            ok: 2,
            not_modified: 1,
            last_at: at,
            agents: vec![AgentFetches {
                agent: agent.into(),
                count: 3,
                last_at: at,
                networks: Vec::new(),
            }],
        }
    }

    fn served(changed_at: OffsetDateTime) -> Vec<IssuerServed> {
        vec![issuer("https://s.example", false, Some(changed_at))]
    }

    fn issuer(url: &str, custom_domain: bool, changed_at: Option<OffsetDateTime>) -> IssuerServed {
        let current = changed_at.map(|changed_at| {
            let one = Served {
                etag: "\"e\"".into(),
                changed_at,
            };
            [one.clone(), one]
        });
        IssuerServed {
            issuer: url.into(),
            custom_domain,
            current,
        }
    }

    #[test]
    fn regulars_are_the_key_set_s_agents_of_the_week_before_the_hour_most_regular_first() {
        let (registry, _, account) = registry(Plan::Business, NOW);
        let command = services::CreateService::default();
        let service = services::create(&registry, &caller(account), command, NOW).unwrap();
        with_domain(&registry, &service);
        let fetched = |document, agent: &str, hours_before: i64| {
            let at = NOW - Duration::hours(hours_before) + Duration::minutes(10);
            record(&registry, &[count(&service, document, agent, at)]).unwrap();
        };
        for hours_before in [1, 2, 3] {
            fetched(FetchedDocument::Jwks, "aws", hours_before);
        }
        // Under the custom domain's issuer too; the discovery document is no key set.
        fetched(FetchedDocument::DomainJwks, "gcp", 1);
        fetched(FetchedDocument::Discovery, "browser", 1);
        // Neither this hour's fetches nor those of more than a week before.
        fetched(FetchedDocument::Jwks, "new", 0);
        fetched(FetchedDocument::Jwks, "gone", 24 * 7 + 1);
        let found = regulars(&registry, &[service.id], NOW + Duration::minutes(30)).unwrap();
        assert_eq!(
            found,
            [(service.id, vec![("aws".into(), 3), ("gcp".into(), 1)])]
        );
    }

    #[test]
    fn sums_replicas_and_says_whether_fetched_since_the_change() {
        let (registry, _, account) = registry(Plan::Business, NOW);
        let command = services::CreateService::default();
        let service = services::create(&registry, &caller(account), command, NOW).unwrap();
        let at = NOW - Duration::minutes(5);
        record(
            &registry,
            &[count(&service, FetchedDocument::Jwks, "aws", at)],
        )
        .unwrap();
        record(
            &registry,
            &[count(
                &service,
                FetchedDocument::Jwks,
                "gcp",
                at + Duration::minutes(1),
            )],
        )
        .unwrap();
        record(
            &registry,
            &[count(
                &service,
                FetchedDocument::Jwks,
                "aws",
                at - Duration::hours(30),
            )],
        )
        .unwrap();
        let answer = evidence(&registry, &service, &served(at), NOW).unwrap();
        let [discovery, jwks] = answer["documents"].as_array().unwrap().as_slice() else {
            panic!()
        };
        assert_eq!(discovery["path"], "/.well-known/openid-configuration");
        assert_eq!(discovery["issuer"], "https://s.example");
        assert_eq!(discovery["fetches24h"], 0);
        assert_eq!(discovery["lastFetchedAt"], Value::Null);
        assert_eq!(discovery["fetchedSinceChange"], false);
        assert_eq!(jwks["path"], "/openid/v1/jwks");
        assert_eq!(
            jwks["fetches24h"], 6,
            "two replicas' counts, not the day-old one"
        );
        assert_eq!(jwks["fetchedSinceChange"], true);
        assert_eq!(jwks["currentETag"], "\"e\"");
        assert_eq!(jwks["agents"].as_array().unwrap().len(), 2);
        let later = evidence(
            &registry,
            &service,
            &served(NOW - Duration::minutes(1)),
            NOW,
        )
        .unwrap();
        assert_eq!(later["documents"][1]["fetchedSinceChange"], false);
        let nothing = evidence(
            &registry,
            &service,
            &[issuer("https://s.example", false, None)],
            NOW,
        )
        .unwrap();
        assert_eq!(nothing["documents"][1]["currentETag"], Value::Null);
        assert_eq!(nothing["documents"][1]["fetchedSinceChange"], false);
        // The discovery document, last fetched two days ago: none in 24 hours, but that fetch
        // is the last one, and it came after a change three days ago.
        let long_ago = NOW - Duration::days(2);
        let fetched = count(&service, FetchedDocument::Discovery, "aws", long_ago);
        record(&registry, &[fetched]).unwrap();
        let answer = evidence(&registry, &service, &served(NOW - Duration::days(3)), NOW);
        let discovery = &answer.unwrap()["documents"][0];
        assert_eq!(discovery["fetches24h"], 0);
        assert_eq!(discovery["agents"], json!([]));
        assert_eq!(discovery["lastFetchedAt"], rfc3339_exact(long_ago));
        assert_eq!(discovery["fetchedSinceChange"], true);
    }

    #[test]
    fn a_custom_domains_fetches_are_counted_apart() {
        let (registry, _, account) = registry(Plan::Business, NOW);
        let command = services::CreateService::default();
        let service = services::create(&registry, &caller(account), command, NOW).unwrap();
        with_domain(&registry, &service);
        let at = NOW - Duration::minutes(5);
        let fetched = [
            count(&service, FetchedDocument::Jwks, "aws", at),
            count(&service, FetchedDocument::DomainJwks, "gcp", at),
        ];
        record(&registry, &fetched).unwrap();
        let issuers = [
            issuer("https://s.example", false, Some(at)),
            issuer("https://login.acme.com", true, Some(at)),
        ];
        let answer = evidence(&registry, &service, &issuers, NOW).unwrap();
        let documents = answer["documents"].as_array().unwrap();
        assert_eq!(documents.len(), 4);
        assert_eq!(documents[3]["issuer"], "https://login.acme.com");
        assert_eq!(documents[3]["path"], "/openid/v1/jwks");
        assert_eq!(documents[3]["agents"][0]["agent"], "gcp");
        assert_eq!(documents[1]["agents"][0]["agent"], "aws");
        assert_eq!(documents[1]["fetches24h"], 3);
    }

    #[test]
    fn the_history_lists_key_set_fetches_per_agent_and_hour_for_eight_days() {
        let (registry, _, account) = registry(Plan::Business, NOW);
        let command = services::CreateService::default();
        let service = services::create(&registry, &caller(account), command, NOW).unwrap();
        with_domain(&registry, &service);
        let fetched = [
            count(
                &service,
                FetchedDocument::Jwks,
                "aws",
                NOW - Duration::hours(50),
            ),
            count(
                &service,
                FetchedDocument::DomainJwks,
                "aws",
                NOW - Duration::minutes(5),
            ),
            count(
                &service,
                FetchedDocument::Jwks,
                "aws",
                NOW - Duration::minutes(1),
            ),
            count(
                &service,
                FetchedDocument::Jwks,
                "gcp",
                NOW - Duration::minutes(3),
            ),
            count(
                &service,
                FetchedDocument::Discovery,
                "curl",
                NOW - Duration::minutes(3),
            ),
            count(
                &service,
                FetchedDocument::Jwks,
                "old",
                NOW - Duration::days(9),
            ),
        ];
        for one in fetched {
            record(&registry, &[one]).unwrap();
        }
        // More fetches than aws's in one hour: a steadier agent still ranks first.
        for _ in 0..4 {
            let burst = count(
                &service,
                FetchedDocument::Jwks,
                "burst",
                NOW - Duration::minutes(2),
            );
            record(&registry, &[burst]).unwrap();
        }
        let answer = history(&registry, &service, NOW).unwrap();
        // Whole seconds, like every time of the API that is no fetch's.
        let later = history(&registry, &service, NOW + time::Duration::milliseconds(250));
        assert_eq!(later.unwrap()["until"], "2026-11-25T12:00:00Z");
        assert_eq!(answer["since"], "2026-11-17T12:00:00Z");
        assert_eq!(answer["until"], "2026-11-25T12:00:00Z");
        let agents = answer["agents"].as_array().unwrap();
        let names: Vec<&str> = agents
            .iter()
            .map(|a| a["agent"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["aws", "burst", "gcp"],
            "most hours first, then most fetches; no discovery, nothing older"
        );
        assert_eq!(agents[0]["count"], 9);
        assert_eq!(agents[0]["lastFetchedAt"], "2026-11-25T11:59:00Z");
        assert_eq!(
            agents[0]["hours"],
            json!([
                {"hour": "2026-11-23T10:00:00Z", "count": 3,
                 "lastFetchedAt": "2026-11-23T10:00:00Z"},
                {"hour": "2026-11-25T11:00:00Z", "count": 6,
                 "lastFetchedAt": "2026-11-25T11:59:00Z"},
            ]),
            "both issuers' key sets in one hour are one hour"
        );
    }
}
