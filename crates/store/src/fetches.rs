//! [`FetchLog`] on [`Store`]: the fetch evidence (docs/api.md, "Fetch evidence"), one row per
//! service, document and hour (and per agent), which every replica adds its counts to.

use crate::error::Res;
use crate::pool::{on_backend, Db};
use crate::rows::{id_text, instant, millis, uuid};
use crate::schema::{fetch_agents, fetch_counts, fetch_networks, key_readiness};
use crate::Store;
use diesel::prelude::*;
use diesel::upsert::excluded;
use registry_domain::network::Network;
use registry_domain::ports::{
    fetch_hour, AgentFetches, AgentHour, DocumentFetches, FetchLog, FetchedDocument, NetworkFetch,
    StoreResult, VerifierCandidate, OTHER_AGENTS, STORED_AGENTS_PER_HOUR,
    STORED_AGENTS_PER_NETWORK, STORED_NETWORKS_PER_AGENT,
};
use std::collections::{HashMap, HashSet};
use time::OffsetDateTime;
use uuid::Uuid;

fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// What a document is stored as: its path, after `domain:` under a custom domain.
const fn key_of(document: FetchedDocument) -> &'static str {
    match document {
        FetchedDocument::Discovery => "/.well-known/openid-configuration",
        FetchedDocument::Jwks => "/openid/v1/jwks",
        FetchedDocument::DomainDiscovery => "domain:/.well-known/openid-configuration",
        FetchedDocument::DomainJwks => "domain:/openid/v1/jwks",
    }
}

/// The document a stored name ([`key_of`]) names.
fn document_of(key: &str) -> Option<FetchedDocument> {
    FetchedDocument::ALL.into_iter().find(|d| key_of(*d) == key)
}

/// The key sets' documents as stored: under the subdomain and under the custom domain.
const KEY_SETS: [&str; 2] = [
    key_of(FetchedDocument::Jwks),
    key_of(FetchedDocument::DomainJwks),
];

/// Removes the least frequent agent of the bucket `(service, document, hour)` (the others'
/// row aside) with its networks, and answers its count: the place a new agent takes, with that
/// count (space-saving); `None` when there is no such agent.
fn give_place(conn: &mut Db, (service, document, hour): (&str, &str, i64)) -> Res<Option<i64>> {
    let bucket = fetch_agents::table
        .filter(fetch_agents::service_id.eq(service))
        .filter(fetch_agents::document.eq(document))
        .filter(fetch_agents::hour.eq(hour));
    let least = bucket
        .filter(fetch_agents::agent.ne(OTHER_AGENTS))
        .order((fetch_agents::count.asc(), fetch_agents::last_at.asc()))
        .select((fetch_agents::agent, fetch_agents::count))
        .first::<(String, i64)>(conn)
        .optional()?;
    let Some((agent, n)) = least else {
        return Ok(None);
    };
    diesel::delete(bucket.filter(fetch_agents::agent.eq(&agent))).execute(conn)?;
    diesel::delete(
        fetch_networks::table
            .filter(fetch_networks::service_id.eq(service))
            .filter(fetch_networks::document.eq(document))
            .filter(fetch_networks::hour.eq(hour))
            .filter(fetch_networks::agent.eq(&agent)),
    )
    .execute(conn)?;
    Ok(Some(n))
}

/// Whether every one of `networks` (at least one) already brought
/// [`STORED_AGENTS_PER_NETWORK`] agents to the bucket `(service, document, hour)`.
fn crowded(
    conn: &mut Db,
    (service, document, hour): (&str, &str, i64),
    networks: &[NetworkFetch],
) -> Res<bool> {
    if networks.is_empty() {
        return Ok(false);
    }
    for n in networks {
        let agents = fetch_networks::table
            .filter(fetch_networks::service_id.eq(service))
            .filter(fetch_networks::document.eq(document))
            .filter(fetch_networks::hour.eq(hour))
            .filter(fetch_networks::network.eq(n.network.to_string()))
            .count()
            .get_result::<i64>(conn)?;
        if agents < count(STORED_AGENTS_PER_NETWORK as u64) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Adds `agent`'s last fetch from each of `networks` to the bucket `(service, document, hour)`:
/// a network already there moves forward, a new one is added while the agent has fewer than
/// [`STORED_NETWORKS_PER_AGENT`] there.
fn record_networks(
    conn: &mut Db,
    (service, document, hour): (&str, &str, i64),
    agent: &str,
    networks: &[NetworkFetch],
) -> Res<()> {
    if networks.is_empty() {
        return Ok(());
    }
    let bucket = fetch_networks::table
        .filter(fetch_networks::service_id.eq(service))
        .filter(fetch_networks::document.eq(document))
        .filter(fetch_networks::hour.eq(hour))
        .filter(fetch_networks::agent.eq(agent));
    let known: Vec<String> = bucket.select(fetch_networks::network).load(conn)?;
    let mut room = STORED_NETWORKS_PER_AGENT.saturating_sub(known.len());
    for n in networks {
        let (network, at) = (n.network.to_string(), millis(n.last_at));
        if known.contains(&network) {
            diesel::update(
                bucket
                    .filter(fetch_networks::network.eq(&network))
                    .filter(fetch_networks::last_at.lt(at)),
            )
            .set(fetch_networks::last_at.eq(at))
            .execute(conn)?;
        } else if room > 0 {
            room -= 1;
            let row = (
                fetch_networks::service_id.eq(service),
                fetch_networks::document.eq(document),
                fetch_networks::hour.eq(hour),
                fetch_networks::agent.eq(agent),
                fetch_networks::network.eq(&network),
                fetch_networks::last_at.eq(at),
            );
            on_backend!(&mut *conn, |c| diesel::insert_into(fetch_networks::table)
                .values(row)
                .on_conflict_do_nothing()
                .execute(c))?;
        }
    }
    Ok(())
}

impl FetchLog for Store {
    /// One transaction, outside the change log: no cache holds fetch counts. Counts add up
    /// (`ON CONFLICT … DO UPDATE`), and the last fetch only moves forward.
    fn record_fetches(&self, counts: &[DocumentFetches]) -> StoreResult<()> {
        self.write_aside(|conn| {
            for f in counts {
                let (service, document) = (id_text(f.service_id), key_of(f.document));
                let (hour, last) = (fetch_hour(f.last_at), millis(f.last_at));
                let row = (
                    fetch_counts::service_id.eq(&service),
                    fetch_counts::document.eq(document),
                    fetch_counts::hour.eq(hour),
                    fetch_counts::ok.eq(count(f.ok)),
                    fetch_counts::not_modified.eq(count(f.not_modified)),
                    fetch_counts::last_at.eq(last),
                );
                on_backend!(&mut *conn, |c| diesel::insert_into(fetch_counts::table)
                    .values(row)
                    .on_conflict((
                        fetch_counts::service_id,
                        fetch_counts::document,
                        fetch_counts::hour,
                    ))
                    .do_update()
                    .set((
                        fetch_counts::ok.eq(fetch_counts::ok + excluded(fetch_counts::ok)),
                        fetch_counts::not_modified
                            .eq(fetch_counts::not_modified + excluded(fetch_counts::not_modified)),
                    ))
                    .execute(c))?;
                diesel::update(
                    fetch_counts::table
                        .filter(fetch_counts::service_id.eq(&service))
                        .filter(fetch_counts::document.eq(document))
                        .filter(fetch_counts::hour.eq(hour))
                        .filter(fetch_counts::last_at.lt(last)),
                )
                .set(fetch_counts::last_at.eq(last))
                .execute(conn)?;
                for a in &f.agents {
                    let at = millis(a.last_at);
                    let bucket = fetch_agents::table
                        .filter(fetch_agents::service_id.eq(&service))
                        .filter(fetch_agents::document.eq(document))
                        .filter(fetch_agents::hour.eq(hour));
                    let known = bucket
                        .filter(fetch_agents::agent.eq(&a.agent))
                        .count()
                        .get_result::<i64>(conn)?
                        > 0;
                    // Whatever outsiders send, the hour's agents are bounded: one network's new
                    // agents past its bound are the others; past the hour's bound, the least
                    // frequent agent gives its place, and its count, to the new one
                    // (space-saving: an agent more frequent than the hour's fetches over 64 is
                    // never pushed out, so a verifier stays while one-off agents churn).
                    let key = (service.as_str(), document, hour);
                    let crowded_out = !known && crowded(conn, key, &a.networks)?;
                    let full = !known
                        && !crowded_out
                        && bucket.count().get_result::<i64>(conn)?
                            >= count(STORED_AGENTS_PER_HOUR as u64);
                    let inherited = match full {
                        true => give_place(conn, key)?,
                        false => Some(0),
                    };
                    let (agent, inherited) = match (crowded_out, inherited) {
                        (false, Some(n)) => (a.agent.as_str(), n),
                        _ => (OTHER_AGENTS, 0),
                    };
                    if agent != OTHER_AGENTS {
                        record_networks(conn, key, agent, &a.networks)?;
                    }
                    let row = (
                        fetch_agents::service_id.eq(&service),
                        fetch_agents::document.eq(document),
                        fetch_agents::hour.eq(hour),
                        fetch_agents::agent.eq(agent),
                        fetch_agents::count.eq(count(a.count).saturating_add(inherited)),
                        fetch_agents::last_at.eq(at),
                    );
                    on_backend!(&mut *conn, |c| diesel::insert_into(fetch_agents::table)
                        .values(row)
                        .on_conflict((
                            fetch_agents::service_id,
                            fetch_agents::document,
                            fetch_agents::hour,
                            fetch_agents::agent,
                        ))
                        .do_update()
                        .set(
                            fetch_agents::count
                                .eq(fetch_agents::count + excluded(fetch_agents::count)),
                        )
                        .execute(c))?;
                    diesel::update(
                        fetch_agents::table
                            .filter(fetch_agents::service_id.eq(&service))
                            .filter(fetch_agents::document.eq(document))
                            .filter(fetch_agents::hour.eq(hour))
                            .filter(fetch_agents::agent.eq(agent))
                            .filter(fetch_agents::last_at.lt(at)),
                    )
                    .set(fetch_agents::last_at.eq(at))
                    .execute(conn)?;
                }
            }
            Ok(())
        })
    }

    fn fetches(
        &self,
        service_id: Uuid,
        since: OffsetDateTime,
        agents: usize,
    ) -> StoreResult<Vec<DocumentFetches>> {
        let service = id_text(service_id);
        let since = fetch_hour(since);
        self.read(|conn| {
            let rows = fetch_counts::table
                .filter(fetch_counts::service_id.eq(&service))
                .filter(fetch_counts::hour.ge(since))
                .select((
                    fetch_counts::document,
                    fetch_counts::ok,
                    fetch_counts::not_modified,
                    fetch_counts::last_at,
                ))
                .load::<(String, i64, i64, i64)>(conn)?;
            let mut sums: Vec<DocumentFetches> = Vec::new();
            for (document, ok, not_modified, last) in rows {
                let Some(document) = document_of(&document) else {
                    continue;
                };
                let last = instant(last)?;
                let (ok, not_modified) =
                    (ok.max(0).unsigned_abs(), not_modified.max(0).unsigned_abs());
                match sums.iter_mut().find(|s| s.document == document) {
                    Some(sum) => {
                        sum.ok += ok;
                        sum.not_modified += not_modified;
                        sum.last_at = sum.last_at.max(last);
                    }
                    None => sums.push(DocumentFetches {
                        service_id,
                        document,
                        ok,
                        not_modified,
                        last_at: last,
                        agents: Vec::new(),
                    }),
                }
            }
            let rows = fetch_agents::table
                .filter(fetch_agents::service_id.eq(&service))
                .filter(fetch_agents::hour.ge(since))
                .select((
                    fetch_agents::document,
                    fetch_agents::agent,
                    fetch_agents::count,
                    fetch_agents::last_at,
                ))
                .load::<(String, String, i64, i64)>(conn)?;
            let mut by_agent: HashMap<(String, String), (u64, i64)> = HashMap::new();
            for (document, agent, n, last) in rows {
                let entry = by_agent.entry((document, agent)).or_default();
                entry.0 += n.max(0).unsigned_abs();
                entry.1 = entry.1.max(last);
            }
            for sum in &mut sums {
                let mut list = by_agent
                    .iter()
                    .filter(|((document, _), _)| document == key_of(sum.document))
                    .map(|((_, agent), (n, last))| {
                        Ok(AgentFetches {
                            agent: agent.clone(),
                            count: *n,
                            last_at: instant(*last)?,
                            networks: Vec::new(),
                        })
                    })
                    .collect::<Res<Vec<_>>>()?;
                list.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.agent.cmp(&b.agent)));
                list.truncate(agents);
                sum.agents = list;
            }
            Ok(sums)
        })
    }

    fn verifier_candidates(
        &self,
        service_id: Uuid,
        since: OffsetDateTime,
        until: OffsetDateTime,
    ) -> StoreResult<Vec<VerifierCandidate>> {
        let service = id_text(service_id);
        let (from, to, until) = (fetch_hour(since), fetch_hour(until), millis(until));
        self.read(|conn| {
            // At most 64 agents an hour and document: a week of them is a bounded read.
            let rows = fetch_agents::table
                .filter(fetch_agents::service_id.eq(&service))
                .filter(fetch_agents::document.eq_any(KEY_SETS))
                .filter(fetch_agents::hour.between(from, to))
                .filter(fetch_agents::last_at.lt(until))
                .filter(fetch_agents::agent.ne(OTHER_AGENTS))
                .select((
                    fetch_agents::agent,
                    fetch_agents::hour,
                    fetch_agents::count,
                    fetch_agents::last_at,
                ))
                .load::<(String, i64, i64, i64)>(conn)?;
            let mut by_agent: HashMap<String, (u64, HashSet<i64>, i64)> = HashMap::new();
            for (agent, hour, n, last) in rows {
                let entry = by_agent.entry(agent).or_default();
                entry.0 += n.max(0).unsigned_abs();
                entry.1.insert(hour);
                entry.2 = entry.2.max(last);
            }
            let networks = fetch_networks::table
                .filter(fetch_networks::service_id.eq(&service))
                .filter(fetch_networks::document.eq_any(KEY_SETS))
                .filter(fetch_networks::hour.between(from, to))
                .filter(fetch_networks::last_at.lt(until))
                .select((
                    fetch_networks::agent,
                    fetch_networks::network,
                    fetch_networks::hour,
                ))
                .load::<(String, String, i64)>(conn)?;
            // Per agent, per network: the hours it was seen from there.
            let mut hours_seen: HashMap<String, HashMap<Network, HashSet<i64>>> = HashMap::new();
            for (agent, network, hour) in networks {
                if let Ok(network) = network.parse::<Network>() {
                    let of_agent = hours_seen.entry(agent).or_default();
                    of_agent.entry(network).or_default().insert(hour);
                }
            }
            let mut candidates = Vec::with_capacity(by_agent.len());
            for (agent, (n, hours, last)) in by_agent {
                let mut networks: Vec<(Network, usize)> = (hours_seen.remove(&agent))
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(network, hours)| (network, hours.len()))
                    .collect();
                networks.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
                candidates.push(VerifierCandidate {
                    agent,
                    count: n,
                    hours: u32::try_from(hours.len()).unwrap_or(u32::MAX),
                    last_at: instant(last)?,
                    networks: networks.into_iter().map(|(network, _)| network).collect(),
                });
            }
            Ok(candidates)
        })
    }

    fn verifier_fetches(
        &self,
        service_id: Uuid,
        agents: &[String],
        since: OffsetDateTime,
    ) -> StoreResult<Vec<(String, NetworkFetch)>> {
        let service = id_text(service_id);
        self.read(|conn| {
            let rows = fetch_networks::table
                .filter(fetch_networks::service_id.eq(&service))
                .filter(fetch_networks::document.eq_any(KEY_SETS))
                .filter(fetch_networks::hour.ge(fetch_hour(since)))
                .filter(fetch_networks::agent.eq_any(agents))
                .group_by((fetch_networks::agent, fetch_networks::network))
                .select((
                    fetch_networks::agent,
                    fetch_networks::network,
                    diesel::dsl::max(fetch_networks::last_at),
                ))
                .load::<(String, String, Option<i64>)>(conn)?;
            let mut fetches = Vec::with_capacity(rows.len());
            for (agent, network, last) in rows {
                let (Ok(network), Some(last)) = (network.parse::<Network>(), last) else {
                    continue;
                };
                let last_at = instant(last)?;
                fetches.push((agent, NetworkFetch { network, last_at }));
            }
            Ok(fetches)
        })
    }

    fn key_set_hours(
        &self,
        service_id: Uuid,
        since: OffsetDateTime,
    ) -> StoreResult<Vec<AgentHour>> {
        let service = id_text(service_id);
        self.read(|conn| {
            // At most 64 agents an hour, document and issuer: 8 days of them is a bounded read,
            // summed here (SQL's sum of a BIGINT has another type on each backend).
            let rows = fetch_agents::table
                .filter(fetch_agents::service_id.eq(&service))
                .filter(fetch_agents::document.eq_any(KEY_SETS))
                .filter(fetch_agents::hour.ge(fetch_hour(since)))
                .select((
                    fetch_agents::agent,
                    fetch_agents::hour,
                    fetch_agents::count,
                    fetch_agents::last_at,
                ))
                .load::<(String, i64, i64, i64)>(conn)?;
            let mut by_hour: HashMap<(String, i64), (u64, i64)> = HashMap::new();
            for (agent, hour, n, last) in rows {
                let entry = by_hour.entry((agent, hour)).or_default();
                entry.0 += n.max(0).unsigned_abs();
                entry.1 = entry.1.max(last);
            }
            by_hour
                .into_iter()
                .map(|((agent, hour), (count, last))| {
                    Ok(AgentHour {
                        agent,
                        hour: instant(hour)?,
                        count,
                        last_at: instant(last)?,
                    })
                })
                .collect()
        })
    }

    fn last_key_set_fetches(
        &self,
        service_ids: &[Uuid],
        since: OffsetDateTime,
    ) -> StoreResult<Vec<(Uuid, OffsetDateTime)>> {
        let since = fetch_hour(since);
        self.read(|conn| {
            let mut last = Vec::new();
            // Bounded lists of bound parameters, whatever the customer's number of services.
            for chunk in service_ids.chunks(500) {
                let ids: Vec<String> = chunk.iter().copied().map(id_text).collect();
                let rows = fetch_counts::table
                    .filter(fetch_counts::service_id.eq_any(&ids))
                    .filter(fetch_counts::document.eq_any(KEY_SETS))
                    .filter(fetch_counts::hour.ge(since))
                    .group_by(fetch_counts::service_id)
                    .select((
                        fetch_counts::service_id,
                        diesel::dsl::max(fetch_counts::last_at),
                    ))
                    .load::<(String, Option<i64>)>(conn)?;
                for (service, at) in rows {
                    if let Some(at) = at {
                        last.push((uuid(&service)?, instant(at)?));
                    }
                }
            }
            Ok(last)
        })
    }

    fn prune_fetches(&self, older_than: OffsetDateTime) -> StoreResult<usize> {
        let hour = fetch_hour(older_than);
        self.write_aside(|conn| {
            let networks =
                diesel::delete(fetch_networks::table.filter(fetch_networks::hour.lt(hour)))
                    .execute(conn)?;
            let agents = diesel::delete(fetch_agents::table.filter(fetch_agents::hour.lt(hour)))
                .execute(conn)?;
            let counts = diesel::delete(fetch_counts::table.filter(fetch_counts::hour.lt(hour)))
                .execute(conn)?;
            let ready = diesel::delete(
                key_readiness::table.filter(key_readiness::safe_at.lt(millis(older_than))),
            )
            .execute(conn)?;
            Ok(networks + agents + counts + ready)
        })
    }
}
