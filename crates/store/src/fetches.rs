//! [`FetchLog`] on [`Store`]: the fetch evidence (docs/api.md, "Fetch evidence"), one row per
//! service, document and hour (and per agent), which every replica adds its counts to.

use crate::error::Res;
use crate::pool::{on_backend, Db};
use crate::rows::{id_text, instant, millis, uuid};
use crate::schema::{
    custom_domains, fetch_agents, fetch_counts, fetch_networks, key_readiness, services,
};
use crate::Store;
use diesel::prelude::*;
use registry_domain::network::Network;
use registry_domain::ports::{
    fetch_hour, AgentFetches, AgentHour, DocumentFetches, FetchLog, FetchedDocument, NetworkFetch,
    SeenNetwork, StoreResult, VerifierCandidate, OTHER_AGENTS,
};
use std::collections::{BTreeSet, HashMap, HashSet};
use time::OffsetDateTime;
use uuid::Uuid;

mod flush;

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

/// The documents fetched under a custom domain, as stored.
const ON_DOMAIN: [&str; 2] = [
    key_of(FetchedDocument::DomainDiscovery),
    key_of(FetchedDocument::DomainJwks),
];

/// Removes the fetch evidence of service `id`'s documents under its custom domain (its domain
/// removed, or another asked for): it was another issuer's, and would be shown, and counted,
/// as the next domain's. A flush in flight commits first, as for a customer's deletion.
pub(crate) fn forget_domain_fetches(conn: &mut Db, id: &str) -> Res<()> {
    lock_evidence(conn, true)?;
    diesel::delete(
        fetch_networks::table
            .filter(fetch_networks::service_id.eq(id))
            .filter(fetch_networks::document.eq_any(ON_DOMAIN)),
    )
    .execute(conn)?;
    diesel::delete(
        fetch_agents::table
            .filter(fetch_agents::service_id.eq(id))
            .filter(fetch_agents::document.eq_any(ON_DOMAIN)),
    )
    .execute(conn)?;
    diesel::delete(
        fetch_counts::table
            .filter(fetch_counts::service_id.eq(id))
            .filter(fetch_counts::document.eq_any(ON_DOMAIN)),
    )
    .execute(conn)?;
    Ok(())
}

/// On PostgreSQL, the transaction-scoped advisory lock that orders a flush of fetch evidence
/// (shared: flushes run side by side) and a customer's deletion (exclusive), so that a flush
/// in flight commits before the deletion removes the evidence, and a flush after it finds the
/// services gone. No row is locked: writers of `services` never wait on a flush.
const EVIDENCE_LOCK: i64 = 0x6576_6964_656e_6365; // "evidence"

/// Takes [`EVIDENCE_LOCK`] for the caller's transaction: `exclusive` for a customer's deletion.
/// SQLite has one writer at a time already.
pub(crate) fn lock_evidence(conn: &mut Db, exclusive: bool) -> Res<()> {
    if let Db::Postgres(c) = conn {
        crate::pool::advisory_xact_lock(c, EVIDENCE_LOCK, !exclusive)?;
    }
    Ok(())
}

/// Which of the services `counts` names still exist, read in the caller's transaction (after
/// [`lock_evidence`]).
fn live_services(conn: &mut Db, counts: &[DocumentFetches]) -> Res<HashSet<Uuid>> {
    let named: BTreeSet<String> = counts.iter().map(|f| id_text(f.service_id)).collect();
    let named: Vec<String> = named.into_iter().collect();
    let mut live = HashSet::new();
    for chunk in named.chunks(crate::pool::ROWS_A_STATEMENT) {
        let ids: Vec<String> = on_backend!(&mut *conn, |c| services::table
            .filter(services::id.eq_any(chunk))
            .select(services::id)
            .load(c))?;
        for id in ids {
            live.insert(uuid(&id)?);
        }
    }
    Ok(live)
}

/// When each service with counts under its custom domain asked for the domain it has now (as
/// stored: milliseconds); a service with no domain is absent.
fn domains_since(conn: &mut Db, counts: &[DocumentFetches]) -> Res<HashMap<Uuid, i64>> {
    let named: BTreeSet<String> = (counts.iter())
        .filter(|f| f.document.is_custom_domain())
        .map(|f| id_text(f.service_id))
        .collect();
    let named: Vec<String> = named.into_iter().collect();
    let mut since = HashMap::new();
    for chunk in named.chunks(crate::pool::ROWS_A_STATEMENT) {
        let rows: Vec<(String, i64)> = on_backend!(&mut *conn, |c| custom_domains::table
            .filter(custom_domains::service_id.eq_any(chunk))
            .select((custom_domains::service_id, custom_domains::created_at))
            .load(c))?;
        for (id, created) in rows {
            since.insert(uuid(&id)?, created);
        }
    }
    Ok(since)
}

impl FetchLog for Store {
    /// One transaction, outside the change log: no cache holds fetch counts. Counts add up
    /// (`ON CONFLICT … DO UPDATE`), and the last fetch only moves forward.
    ///
    /// Counts of a service deleted since (its customer's, whose evidence went at once) are
    /// dropped: they would come back as rows of no one's until their retention ends. So are
    /// counts under a custom domain whose last fetch came before the service asked for the
    /// domain it has now (or that has none now): another domain's, arriving late.
    fn record_fetches(&self, counts: &[DocumentFetches]) -> StoreResult<()> {
        self.write_aside(|conn| {
            lock_evidence(conn, false)?;
            let live = live_services(conn, counts)?;
            let domains = domains_since(conn, counts)?;
            let current = |f: &DocumentFetches| {
                !f.document.is_custom_domain()
                    || (domains.get(&f.service_id)).is_some_and(|&since| millis(f.last_at) >= since)
            };
            let counts = counts
                .iter()
                .filter(|f| live.contains(&f.service_id) && current(f));
            flush::Flush::of(counts).record(conn)
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
            // Asked for no agents (the last fetch only): their rows are not read.
            if agents == 0 {
                return Ok(sums);
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
                    networks: (networks.into_iter())
                        .map(|(network, hours)| SeenNetwork {
                            network,
                            hours: u32::try_from(hours).unwrap_or(u32::MAX),
                        })
                        .collect(),
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
