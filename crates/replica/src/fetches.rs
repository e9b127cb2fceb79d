//! The replica's count of public fetches (docs/api.md, "Fetch evidence"): per service, document and
//! clock hour, the 200s and 304s, the last fetch, and the most frequent User-Agents, in memory
//! until the next flush to the store ([`Fetches::take`]). The hour is part of the key because the
//! store counts each fetch in the hour of its time, and key readiness tells a verifier by the
//! distinct hours it fetched in: two fetches of one flush in two hours (a cache's log shipped
//! late, a flush across the hour) are two hours, not one. Bounded whatever clients send: at most
//! [`MAX_SERVICES`] services between two flushes (fetches of others are dropped, and counted),
//! [`AGENTS_PER_DOCUMENT`] agents per document, each cut to [`AGENT_CHARS`] characters. Past
//! that bound, as in the store's hour, a new agent from networks that each brought 4 of the
//! document's agents already is one of the others ([`OTHER_AGENTS`]) at once, and otherwise the
//! store's rule for a full hour holds here too: a crowd's agents (seen only from networks that
//! each brought more than 4) give their places first, else the least regular (seen fetching the
//! service's key set in the fewest hours of the week before, as the store told,
//! [`Fetches::remember_regulars`]), and among equals the least frequent; a new agent takes that
//! place when the agent giving it is a crowd's or no more regular than it, else it is one of the
//! others. It takes the place with its predecessor's count as its rank (the space-saving
//! algorithm: a frequent agent is never pushed out by many rare ones), but reports its own
//! fetches only; the fetches of the agent that gave its place are counted as the others'. One
//! network's flood never pushes out another network's agent, nor a flood of agents new to the
//! week a regular one. No agent is reported
//! with a fetch it did not make, and every fetch is counted once.
//!
//! Each worker thread counts in its own map, under a lock only [`Fetches::take`] also takes:
//! the fetches of one popular document on many workers never wait for one another. `take` adds
//! the threads' counts up.

use crate::hosting::{Document, Hosted};
use crossbeam_utils::CachePadded;
use foldhash::HashMap;
use registry_domain::app::fetches::{Current, RegularAgents, Served};
use registry_domain::network::Network;
use registry_domain::ports::{
    fetch_hour, AgentFetches, DocumentFetches, FetchedDocument, NetworkFetch, OTHER_AGENTS,
    STORED_AGENTS_PER_HOUR, STORED_AGENTS_PER_NETWORK,
};
use smallvec::SmallVec;
use std::collections::hash_map::Entry;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use thread_local::ThreadLocal;
use time::OffsetDateTime;
use uuid::Uuid;

/// Services counted between two flushes, at most (in one clock hour: see [`MAX_DOCUMENTS`]).
pub const MAX_SERVICES: usize = 16_384;
/// Agents kept per document between two flushes: as many as the store keeps of an hour, so
/// that below that bound no agent's fetch is lost to the others' entry, a verifier's among them.
pub const AGENTS_PER_DOCUMENT: usize = STORED_AGENTS_PER_HOUR;
/// Characters kept of a User-Agent.
pub const AGENT_CHARS: usize = 100;
/// Networks kept per agent between two flushes (space-saving, as the agents).
pub const NETWORKS_PER_AGENT: usize = 8;
/// Counts kept between two flushes, at most: two documents a service, each in two clock hours
/// (a flush across the hour, a cache's log shipped late), so that the hour turning does not
/// halve the services counted. Counts given back while the database is down keep their hour
/// and their place: an outage of hours with many services can fill the bound, and fetches past
/// it are dropped (and counted).
pub const MAX_DOCUMENTS: usize = MAX_SERVICES * 4;
/// Services whose regular agents a replica keeps, at most: those whose key set's agents
/// overflowed its bound in the last hour or so (a flood; few at once).
pub const MAX_REGULAR_SERVICES: usize = 4_096;
/// Services whose regular agents one flush asks for, at most (the rest at the next).
pub const REGULARS_PER_FLUSH: usize = 16;
/// An hour in milliseconds, as `fetch_hour` counts.
const HOUR_MS: i64 = 3_600_000;

/// The agents the store saw fetch a service's key set in the week before an hour, each with
/// in how many distinct hours of it.
pub type Regulars = HashMap<Box<str>, u32>;

#[derive(Debug)]
struct Agent {
    name: Box<str>,
    /// Its rank: its own fetches, and `inherited`.
    count: u64,
    /// The rank it took over with its place (not its fetches).
    inherited: u64,
    last_at: OffsetDateTime,
    /// Where it fetched from: how often from each network, and when last. The first in place:
    /// a verifier usually fetches from one network.
    networks: SmallVec<[(Network, u64, OffsetDateTime); 1]>,
}

/// A document's counts. Its first agent is kept in place, in the map's slot: most documents
/// are fetched by one verifier, and among many issuers each slot is out of the processor's
/// cache, so that a fetch touches the slot and not one more allocation for the agents and
/// another for their networks (docs/benchmarks.md).
#[derive(Debug)]
struct Counts {
    ok: u64,
    not_modified: u64,
    last_at: OffsetDateTime,
    agents: SmallVec<[Agent; 1]>,
    /// The fetches of the agents that gave their place, and the last of them (boxed: most
    /// documents never have any).
    others: Option<Box<(u64, OffsetDateTime)>>,
}

/// A document's counts of one clock hour (`fetch_hour`).
type Key = (Uuid, FetchedDocument, i64);

type Shard = HashMap<Key, Counts>;

/// The counts of one replica.
#[derive(Debug, Default)]
pub struct Fetches {
    per_thread: ThreadLocal<CachePadded<Mutex<Shard>>>,
    /// Documents counted in all the threads' maps (written when a thread counts a document new
    /// to it, not at every fetch).
    documents: AtomicUsize,
    dropped: AtomicU64,
    /// The regular agents of services whose key set overflowed, with the hour (`fetch_hour`)
    /// they are of: read only when a document's agents are at their bound.
    regulars: RwLock<HashMap<Uuid, (i64, Arc<Regulars>)>>,
}

/// `agent` cut to [`AGENT_CHARS`] characters, control characters removed; borrowed when
/// nothing is to remove (the usual case).
pub fn clean_agent(agent: &[u8]) -> std::borrow::Cow<'_, str> {
    use registry_domain::credentials::redact_secrets;
    // A token a careless client sent as its agent is not kept: the owner reads agents.
    if agent.len() <= AGENT_CHARS && agent.iter().all(|b| (0x20..0x7f).contains(b)) {
        if let Ok(text) = std::str::from_utf8(agent) {
            return redact_secrets(text);
        }
    }
    redact_secrets(
        String::from_utf8_lossy(agent)
            .chars()
            .filter(|c| !c.is_control())
            .take(AGENT_CHARS)
            .collect::<String>(),
    )
}

impl Fetches {
    /// Counts a public fetch of `service`'s `document` at `at` (304 when `not_modified`) by
    /// `agent`, the User-Agent header's bytes (empty without one), from `network` (`None`: an
    /// address not known, which recognises no verifier).
    pub fn record(
        &self,
        service: Uuid,
        document: FetchedDocument,
        not_modified: bool,
        agent: &[u8],
        network: Option<Network>,
        at: OffsetDateTime,
    ) {
        let mut shard = self.mine();
        let key = (service, document, fetch_hour(at));
        let Some(counts) = self.counts(&mut shard, key, at) else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if not_modified {
            counts.not_modified += 1;
        } else {
            counts.ok += 1;
        }
        counts.last_at = counts.last_at.max(at);
        let networks = network.map(|network| (network, 1, at));
        let regulars = || self.regulars_of(key);
        counts.count_agent(&clean_agent(agent), 1, at, networks.as_slice(), &regulars);
    }

    /// Puts back counts [`Fetches::take`] gave that could not be stored (the database was
    /// down): they go with the next flush, within the same bounds.
    pub fn give_back(&self, counts: Vec<DocumentFetches>) {
        let mut shard = self.mine();
        for f in counts {
            let key = (f.service_id, f.document, fetch_hour(f.last_at));
            let regulars = || self.regulars_of(key);
            let Some(counts) = self.counts(&mut shard, key, f.last_at) else {
                self.dropped
                    .fetch_add(f.ok + f.not_modified, Ordering::Relaxed);
                continue;
            };
            for a in &f.agents {
                if a.agent == OTHER_AGENTS {
                    add_others(&mut counts.others, a.count, a.last_at);
                    continue;
                }
                // The counts per network went with the flush; each comes back as one fetch.
                let networks: Vec<_> = (a.networks.iter())
                    .map(|n| (n.network, 1, n.last_at))
                    .collect();
                counts.count_agent(&a.agent, a.count, a.last_at, &networks, &regulars);
            }
            counts.ok += f.ok;
            counts.not_modified += f.not_modified;
            counts.last_at = counts.last_at.max(f.last_at);
        }
    }

    /// The services of `counts` whose key set's agents overflowed the bound and whose regular
    /// agents are not known for `now`'s hour: those to ask the store for, at most
    /// [`REGULARS_PER_FLUSH`], in the counts' order (a hash's: no service is always last), and
    /// only those known already while [`MAX_REGULAR_SERVICES`] are (the others would not be kept).
    pub fn wanting_regulars(&self, counts: &[DocumentFetches], now: OffsetDateTime) -> Vec<Uuid> {
        let hour = fetch_hour(now);
        let known = self.regulars.read().unwrap_or_else(PoisonError::into_inner);
        let kept = (known.values()).filter(|(of, _)| *of >= hour - HOUR_MS);
        let room = kept.count() < MAX_REGULAR_SERVICES;
        let mut wanted = Vec::new();
        for f in counts {
            let key_set = is_key_set(f.document);
            let overflowed = f.agents.iter().any(|a| a.agent == OTHER_AGENTS);
            let unknown = match known.get(&f.service_id) {
                Some((of, _)) => *of != hour,
                None => room,
            };
            if key_set && overflowed && unknown && !wanted.contains(&f.service_id) {
                wanted.push(f.service_id);
                if wanted.len() == REGULARS_PER_FLUSH {
                    break;
                }
            }
        }
        wanted
    }

    /// Keeps what the store told of each service's regular agents (the agents that fetched its
    /// key set in the week before `now`'s hour, each with in how many hours), until the hour
    /// after next; at most [`MAX_REGULAR_SERVICES`] services.
    pub fn remember_regulars(&self, found: Vec<(Uuid, RegularAgents)>, now: OffsetDateTime) {
        let hour = fetch_hour(now);
        let mut known = self
            .regulars
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        known.retain(|_, (of, _)| *of >= hour - HOUR_MS);
        for (service, agents) in found {
            if known.len() >= MAX_REGULAR_SERVICES && !known.contains_key(&service) {
                break;
            }
            let agents: Regulars = (agents.into_iter())
                .map(|(agent, hours)| (agent.into_boxed_str(), hours))
                .collect();
            known.insert(service, (hour, Arc::new(agents)));
        }
    }

    /// The regular agents of the key set counted under `key` (a service, a document, a
    /// `fetch_hour`), if the store told them in that hour or the one before (older ones would
    /// keep a verifier gone since, or miss a new one); none for a discovery document, whose
    /// fetches decide no key's readiness.
    fn regulars_of(&self, (service, document, hour): Key) -> Option<Arc<Regulars>> {
        if !is_key_set(document) {
            return None;
        }
        let known = self.regulars.read().unwrap_or_else(PoisonError::into_inner);
        let (of, agents) = known.get(&service)?;
        (*of >= hour - HOUR_MS).then(|| agents.clone())
    }

    /// Fetches not counted because [`MAX_DOCUMENTS`] counts were kept already.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// This thread's counts.
    fn mine(&self) -> MutexGuard<'_, Shard> {
        let shard = self.per_thread.get_or_default();
        shard.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The counts of `key` in `shard`, new ones (first fetched `at`) while fewer than
    /// [`MAX_DOCUMENTS`] are counted; `None` past that.
    fn counts<'s>(
        &self,
        shard: &'s mut Shard,
        key: Key,
        at: OffsetDateTime,
    ) -> Option<&'s mut Counts> {
        // One look-up a fetch: the key is hashed once.
        match shard.entry(key) {
            Entry::Occupied(known) => Some(known.into_mut()),
            Entry::Vacant(new) => {
                if self.documents.load(Ordering::Relaxed) >= MAX_DOCUMENTS {
                    return None;
                }
                self.documents.fetch_add(1, Ordering::Relaxed);
                Some(new.insert(Counts {
                    ok: 0,
                    not_modified: 0,
                    last_at: at,
                    agents: SmallVec::new(),
                    others: None,
                }))
            }
        }
    }

    /// Every count since the last call, and none left: what to add to the store.
    pub fn take(&self) -> Vec<DocumentFetches> {
        let mut all = Shard::default();
        for shard in &self.per_thread {
            let counts = std::mem::take(&mut *shard.lock().unwrap_or_else(PoisonError::into_inner));
            self.documents.fetch_sub(counts.len(), Ordering::Relaxed);
            for (key, c) in counts {
                let Some(sum) = all.get_mut(&key) else {
                    all.insert(key, c);
                    continue;
                };
                sum.add(c, &|| self.regulars_of(key));
            }
        }
        (all.into_iter())
            .map(|((service_id, document, _), c)| DocumentFetches {
                service_id,
                document,
                ok: c.ok,
                not_modified: c.not_modified,
                last_at: c.last_at,
                agents: (c.agents.into_iter())
                    .map(|a| AgentFetches {
                        agent: a.name.into(),
                        count: a.count - a.inherited,
                        last_at: a.last_at,
                        networks: (a.networks.into_iter())
                            .map(|(network, _, last_at)| NetworkFetch { network, last_at })
                            .collect(),
                    })
                    .chain(c.others.map(|others| AgentFetches {
                        agent: OTHER_AGENTS.into(),
                        count: others.0,
                        last_at: others.1,
                        networks: Vec::new(),
                    }))
                    .collect(),
            })
            .collect()
    }
}

impl Counts {
    /// Adds another thread's counts of the same document.
    fn add(&mut self, other: Counts, regulars: &dyn Fn() -> Option<Arc<Regulars>>) {
        self.ok += other.ok;
        self.not_modified += other.not_modified;
        self.last_at = self.last_at.max(other.last_at);
        for a in other.agents {
            let own = a.count - a.inherited;
            self.count_agent(&a.name, own, a.last_at, &a.networks, regulars);
        }
        if let Some(others) = other.others {
            add_others(&mut self.others, others.0, others.1);
        }
    }

    /// Adds `n` fetches by `agent`, the last at `at`, from `networks`
    /// (past the bound, as the module says: `regulars` is asked only then; an agent that gives
    /// its place leaves its fetches to the others; space-saving for each agent's networks).
    fn count_agent(
        &mut self,
        agent: &str,
        n: u64,
        at: OffsetDateTime,
        networks: &[(Network, u64, OffsetDateTime)],
        regulars: &dyn Fn() -> Option<Arc<Regulars>>,
    ) {
        let agents = &mut self.agents;
        let known = match agents.iter().position(|a| *a.name == *agent) {
            Some(i) => &mut agents[i],
            None if agents.len() < AGENTS_PER_DOCUMENT => {
                agents.push(Agent {
                    name: agent.into(),
                    count: 0,
                    inherited: 0,
                    last_at: at,
                    networks: SmallVec::new(),
                });
                let last = agents.len() - 1;
                &mut agents[last]
            }
            None => {
                let crowds = agents_per_network(agents);
                let from = |network: &Network| crowds.get(network).copied().unwrap_or(0);
                // Full, a new agent from networks that each hold their bound of the document's
                // agents already is one of the others: one network's made-up agents cannot
                // push out another network's, a verifier's among them (the store's rule for an
                // hour).
                let crowded = |(network, ..): &(Network, u64, OffsetDateTime)| {
                    from(network) >= STORED_AGENTS_PER_NETWORK
                };
                if !networks.is_empty() && networks.iter().all(crowded) {
                    add_others(&mut self.others, n, at);
                    return;
                }
                // The store's rule for a full hour: a crowd's agent gives its place first, when
                // there are such (seen from no network, or only from networks holding more than
                // their bound of agents), to any; else the least regular to one as regular at
                // least, so that busier agents new to the week push out no verifier. Among
                // equals the least frequent, and the newcomer takes its rank (space-saving).
                let exposed = |a: &Agent| {
                    (a.networks.iter())
                        .all(|(network, ..)| from(network) > STORED_AGENTS_PER_NETWORK)
                };
                let regulars = regulars();
                let hours = |name: &str| {
                    (regulars.as_ref()).map_or(0, |r| r.get(name).copied().unwrap_or(0))
                };
                let least = |only_exposed: bool| {
                    (agents.iter().enumerate())
                        .filter(|(_, a)| !only_exposed || exposed(a))
                        .min_by_key(|(_, a)| (hours(&a.name), a.count, a.last_at))
                };
                let place = (least(true).or_else(|| least(false)))
                    .filter(|(_, a)| exposed(a) || hours(agent) >= hours(&a.name))
                    .map(|(i, a)| (i, a.count));
                let Some((least, rank)) = place else {
                    add_others(&mut self.others, n, at);
                    return;
                };
                let least = &mut agents[least];
                let (gone, gone_at) = (least.count - least.inherited, least.last_at);
                // It takes the rank, not the fetches nor the networks: those were another's.
                *least = Agent {
                    name: agent.into(),
                    count: rank,
                    inherited: rank,
                    last_at: at,
                    networks: SmallVec::new(),
                };
                add_others(&mut self.others, gone, gone_at);
                least
            }
        };
        known.count += n;
        known.last_at = known.last_at.max(at);
        for &(network, m, last) in networks {
            let kept = &mut known.networks;
            if let Some(seen) = kept.iter_mut().find(|(k, _, _)| *k == network) {
                seen.1 += m;
                seen.2 = seen.2.max(last);
            } else if kept.len() < NETWORKS_PER_AGENT {
                kept.push((network, m, last));
            } else if let Some(least) = kept.iter_mut().min_by_key(|(_, count, _)| *count) {
                *least = (network, least.1 + m, last);
            }
        }
    }
}

/// How many of `agents` were seen from each network: counted once for a new agent past the
/// bound, at most [`AGENTS_PER_DOCUMENT`] × [`NETWORKS_PER_AGENT`] entries.
/// Whether `document` is a key set: the fetches whose verifiers a key's readiness counts.
fn is_key_set(document: FetchedDocument) -> bool {
    matches!(
        document,
        FetchedDocument::Jwks | FetchedDocument::DomainJwks
    )
}

fn agents_per_network(agents: &[Agent]) -> HashMap<Network, usize> {
    let mut counts = HashMap::default();
    for a in agents {
        for (network, ..) in &a.networks {
            *counts.entry(*network).or_default() += 1;
        }
    }
    counts
}

/// Adds `n` fetches, the last at `at`, to `others` (a document's others').
fn add_others(others: &mut Option<Box<(u64, OffsetDateTime)>>, n: u64, at: OffsetDateTime) {
    let others = others.get_or_insert_with(|| Box::new((0, at)));
    others.0 += n;
    others.1 = others.1.max(at);
}

/// What `hosted` serves, as the fetch evidence reports it.
pub fn served(hosted: Option<&Hosted>) -> Current {
    let hosted = hosted?;
    served_as(hosted, &hosted.discovery)
}

/// What `hosted` serves with `discovery` as its discovery document (a custom domain's), as the
/// fetch evidence reports it.
pub fn served_as(hosted: &Hosted, discovery: &Document) -> Current {
    let served = |etag: &bytes::Bytes, changed_at| Served {
        etag: String::from_utf8_lossy(etag).into_owned(),
        changed_at,
    };
    Some([
        served(&discovery.etag, hosted.discovery_changed_at),
        served(&hosted.jwks.etag, hosted.jwks_changed_at),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;
    const SECOND: time::Duration = time::Duration::SECOND;

    const AT: OffsetDateTime = datetime!(2026-11-25 12:00 UTC);
    const DOC: FetchedDocument = FetchedDocument::Jwks;
    const NET: Option<Network> = Some(Network::V4([10, 0, 0]));

    #[test]
    fn counts_200s_304s_and_agents_until_taken() {
        let fetches = Fetches::default();
        let service = Uuid::new_v4();
        fetches.record(service, DOC, false, b"aws", NET, AT);
        fetches.record(service, DOC, true, b"aws", NET, AT + time::Duration::SECOND);
        fetches.record(service, FetchedDocument::Discovery, false, b"", NET, AT);
        let mut taken = fetches.take();
        taken.sort_by_key(|f| f.document);
        assert_eq!(taken.len(), 2);
        let jwks = &taken[1];
        assert_eq!((jwks.ok, jwks.not_modified), (1, 1));
        assert_eq!(jwks.last_at, AT + time::Duration::SECOND);
        assert_eq!(jwks.agents.len(), 1);
        assert_eq!(jwks.agents[0].agent, "aws");
        assert_eq!(jwks.agents[0].count, 2);
        assert!(fetches.take().is_empty(), "taken once");
        fetches.record(service, DOC, false, b"gcp", NET, AT);
        fetches.give_back(taken);
        let mut again = fetches.take();
        again.sort_by_key(|f| f.document);
        assert_eq!(
            (again[1].ok, again[1].not_modified),
            (2, 1),
            "given back and added"
        );
        assert_eq!(again[1].agents.len(), 2);
        assert_eq!(again[0].ok, 1);
    }

    #[test]
    fn fetches_of_one_flush_in_two_hours_are_counted_in_each() {
        // A cache's log shipped late, or a flush across the hour: the store counts each in its
        // own hour, so that an agent of two hours is a verifier.
        let fetches = Fetches::default();
        let service = Uuid::new_v4();
        let (before, after) = (
            AT - time::Duration::minutes(4),
            AT + time::Duration::minutes(3),
        );
        fetches.record(service, DOC, false, b"aws", NET, before);
        fetches.record(service, DOC, false, b"aws", NET, after);
        fetches.record(service, DOC, true, b"aws", NET, after);
        let mut taken = fetches.take();
        taken.sort_by_key(|f| f.last_at);
        let hours: Vec<(OffsetDateTime, u64, u64, u64)> = (taken.iter())
            .map(|f| (f.last_at, f.ok, f.not_modified, f.agents[0].count))
            .collect();
        assert_eq!(hours, [(before, 1, 0, 1), (after, 1, 1, 2)]);
        // Given back, each stays in its hour.
        fetches.give_back(taken);
        assert_eq!(fetches.take().len(), 2);
    }

    #[test]
    fn agents_are_bounded_and_the_frequent_ones_stay() {
        let fetches = Fetches::default();
        let service = Uuid::new_v4();
        for i in 0..10_000 {
            fetches.record(service, DOC, false, format!("bot {i}").as_bytes(), NET, AT);
            if i % 10 == 0 {
                fetches.record(service, DOC, false, b"AWS STS", NET, AT);
            }
        }
        let taken = fetches.take();
        let agents = &taken[0].agents;
        // The bound, and the others' entry last.
        assert_eq!(agents.len(), AGENTS_PER_DOCUMENT + 1);
        let others = agents.last().unwrap();
        assert_eq!(others.agent, OTHER_AGENTS);
        assert!(others.networks.is_empty());
        let named = agents.iter().filter(|a| a.agent != OTHER_AGENTS);
        let top = named.max_by_key(|a| a.count).unwrap();
        assert_eq!((top.agent.as_str(), top.count), ("AWS STS", 1000));
        // No agent reported with a fetch it did not make, and every fetch counted once.
        let bots = agents.iter().filter(|a| a.agent.starts_with("bot "));
        assert!(bots.clone().all(|a| a.count == 1), "{agents:?}");
        assert_eq!(bots.count(), AGENTS_PER_DOCUMENT - 1);
        assert_eq!(others.count, 10_000 - (AGENTS_PER_DOCUMENT as u64 - 1));
        assert_eq!(agents.iter().map(|a| a.count).sum::<u64>(), 11_000);
        assert_eq!(taken[0].ok, 11_000);
        // Given back (the store was down), the others stay the others'.
        fetches.give_back(taken);
        let again = fetches.take();
        let others = again[0].agents.iter().filter(|a| a.agent == OTHER_AGENTS);
        assert_eq!(
            others.map(|a| a.count).collect::<Vec<_>>(),
            [10_000 - (AGENTS_PER_DOCUMENT as u64 - 1)]
        );
        assert_eq!(again[0].agents.iter().map(|a| a.count).sum::<u64>(), 11_000);
    }

    /// The probe of the fourth security review: a frequent agent that comes after a flood of
    /// made-up ones is reported with its own fetches, and none of the flood is reported with
    /// fetches it did not make.
    #[test]
    fn an_agent_after_a_flood_is_counted_with_its_own_fetches() {
        let fetches = Fetches::default();
        let service = Uuid::new_v4();
        let record = |agent: &str, times: usize| {
            for _ in 0..times {
                fetches.record(service, DOC, false, agent.as_bytes(), NET, AT);
            }
        };
        record("top A", 100);
        record("top B", 50);
        for i in 0..1_000 {
            record(&format!("single {i}"), 1);
        }
        // From a network of its own: the flood's network is full of made-up agents already.
        for _ in 0..20 {
            let own = Some(Network::V4([198, 51, 100]));
            fetches.record(service, DOC, false, b"top C", own, AT);
        }
        let taken = fetches.take();
        let counts: HashMap<&str, u64> = (taken[0].agents.iter())
            .map(|a| (a.agent.as_str(), a.count))
            .collect();
        assert_eq!(counts["top A"], 100);
        assert_eq!(counts["top B"], 50);
        assert_eq!(counts["top C"], 20);
        assert!((counts.iter())
            .filter(|(agent, _)| agent.starts_with("single"))
            .all(|(_, count)| *count == 1));
        assert_eq!(counts.values().sum::<u64>(), 1_170);
    }

    /// The probe of this round: a verifier's one fetch from its own network is never lost to
    /// the others' entry, neither under a flood of one-off agents from one network, nor among
    /// fewer agents than the store keeps of an hour, each from a network of its own.
    #[test]
    fn a_verifiers_one_fetch_stays_through_a_flood() {
        let verifier = Network::V4([198, 51, 100]);
        let kept = |fetches: &Fetches| {
            let taken = fetches.take();
            let agents = &taken[0].agents;
            let found = agents.iter().find(|a| a.agent == "AWS STS");
            found.map(|a| {
                (
                    a.count,
                    a.networks.iter().map(|n| n.network).collect::<Vec<_>>(),
                )
            })
        };
        let service = Uuid::new_v4();
        let flooded = Fetches::default();
        flooded.record(service, DOC, false, b"AWS STS", Some(verifier), AT);
        for i in 0..5_000 {
            let agent = format!("junk {i}");
            flooded.record(service, DOC, false, agent.as_bytes(), NET, AT);
        }
        assert_eq!(kept(&flooded), Some((1, vec![verifier])));

        let spread = Fetches::default();
        spread.record(service, DOC, false, b"AWS STS", Some(verifier), AT);
        for i in 0..(AGENTS_PER_DOCUMENT - 1) as u8 {
            let agent = format!("junk {i}");
            let network = Some(Network::V4([10, i, 0]));
            spread.record(service, DOC, false, agent.as_bytes(), network, AT);
        }
        assert_eq!(kept(&spread), Some((1, vec![verifier])));
    }

    /// The probe of §24 (F2): agents made up on many networks, 4 each (no crowd), each
    /// busier than a verifier, used to push its one fetch out.
    fn flood(fetches: &Fetches, service: Uuid, round: u8, times: usize, at: OffsetDateTime) {
        flood_of(fetches, (service, DOC), round, times, at);
    }

    /// [`flood`] of any document.
    fn flood_of(
        fetches: &Fetches,
        (service, document): (Uuid, FetchedDocument),
        round: u8,
        times: usize,
        at: OffsetDateTime,
    ) {
        for i in 0..AGENTS_PER_DOCUMENT as u8 {
            let agent = format!("made-up {round}-{i}");
            let network = Some(Network::V4([10, round, i / 4]));
            for _ in 0..times {
                fetches.record(service, document, false, agent.as_bytes(), network, at);
            }
        }
    }

    /// The verifier's count, if it kept its place.
    fn verifier_kept(taken: &[DocumentFetches]) -> Option<u64> {
        let agents = &taken[0].agents;
        let found = agents.iter().find(|a| a.agent == "AWS STS");
        found.map(|a| a.count)
    }

    const OWN: Option<Network> = Some(Network::V4([198, 51, 100]));

    /// The verifier's regular hours and one of the flood's, as the store tells them.
    fn told(fetches: &Fetches, service: Uuid) {
        let regulars = vec![("AWS STS".to_owned(), 3), ("made-up 0-0".to_owned(), 1)];
        fetches.remember_regulars(vec![(service, regulars)], AT);
    }

    #[test]
    fn agents_made_up_on_many_networks_push_out_no_regular_verifier() {
        let service = Uuid::new_v4();
        let verifier_then_floods_of = |fetches: &Fetches, document: FetchedDocument| {
            fetches.record(service, document, false, b"AWS STS", OWN, AT);
            for round in 0..3 {
                flood_of(fetches, (service, document), round, 2, AT + SECOND);
            }
            let taken = fetches.take();
            let agents = &taken[0].agents;
            assert_eq!(agents.iter().map(|a| a.count).sum::<u64>(), 1 + 3 * 64 * 2);
            verifier_kept(&taken)
        };
        let verifier_then_floods = |fetches: &Fetches| verifier_then_floods_of(fetches, DOC);
        // Nothing told: a busier agent takes the place of the least frequent, the verifier.
        assert_eq!(verifier_then_floods(&Fetches::default()), None);
        // Told that it fetched in 3 hours of the week, the flood's agents in none.
        let fetches = Fetches::default();
        told(&fetches, service);
        assert_eq!(verifier_then_floods(&fetches), Some(1));
        // The regulars are of the key set: a discovery document's agents are placed without.
        let fetches = Fetches::default();
        told(&fetches, service);
        let discovery = verifier_then_floods_of(&fetches, FetchedDocument::Discovery);
        assert_eq!(discovery, None);
        // The same across threads: the verifier counted by one, the flood by another, both
        // alive until both counted (a thread that ended gives its counts to the next).
        let fetches = Fetches::default();
        told(&fetches, service);
        let both_counted = std::sync::Barrier::new(2);
        std::thread::scope(|scope| {
            let (fetches, both_counted) = (&fetches, &both_counted);
            scope.spawn(move || {
                fetches.record(service, DOC, false, b"AWS STS", OWN, AT);
                both_counted.wait();
            });
            scope.spawn(move || {
                flood(fetches, service, 0, 2, AT + SECOND);
                both_counted.wait();
            });
        });
        assert_eq!(fetches.per_thread.iter().count(), 2);
        assert_eq!(verifier_kept(&fetches.take()), Some(1));
    }

    #[test]
    fn a_regular_agent_takes_its_place_from_agents_new_to_the_week() {
        let service = Uuid::new_v4();
        let between_floods = |fetches: &Fetches| {
            flood(fetches, service, 0, 2, AT);
            let later = AT + time::Duration::SECOND;
            fetches.record(service, DOC, false, b"AWS STS", OWN, later);
            flood(fetches, service, 1, 3, later);
            let taken = fetches.take();
            let agents = &taken[0].agents;
            assert_eq!(agents.iter().map(|a| a.count).sum::<u64>(), 1 + 64 * 5);
            taken
        };
        // Nothing told: it takes a place from the flood (space-saving), and the next gives it.
        assert_eq!(verifier_kept(&between_floods(&Fetches::default())), None);
        // Told, it takes a place from an agent new to the week, and keeps it; so does the
        // flood's agent seen in an hour of the week.
        let fetches = Fetches::default();
        told(&fetches, service);
        let taken = between_floods(&fetches);
        assert_eq!(verifier_kept(&taken), Some(1), "{taken:?}");
        let agents = &taken[0].agents;
        let regular = agents.iter().find(|a| a.agent == "made-up 0-0");
        assert_eq!(regular.map(|a| a.count), Some(2), "{agents:?}");
    }

    #[test]
    fn the_flush_asks_for_the_regulars_of_key_sets_that_overflowed_once_an_hour() {
        let fetches = Fetches::default();
        let service = Uuid::new_v4();
        flood(&fetches, service, 0, 1, AT);
        fetches.record(service, DOC, false, b"late", OWN, AT);
        let taken = fetches.take();
        assert_eq!(fetches.wanting_regulars(&taken, AT), [service]);
        fetches.remember_regulars(vec![(service, Vec::new())], AT);
        assert!(fetches.wanting_regulars(&taken, AT).is_empty());
        let next_hour = AT + time::Duration::HOUR;
        assert_eq!(fetches.wanting_regulars(&taken, next_hour), [service]);
        // Used in the hour told and the next only, and kept as long.
        let hour = |at: OffsetDateTime| fetch_hour(at);
        assert!(fetches
            .regulars_of((service, DOC, hour(next_hour)))
            .is_some());
        let after_next = AT + time::Duration::HOUR * 2;
        assert!(fetches
            .regulars_of((service, DOC, hour(after_next)))
            .is_none());
        fetches.remember_regulars(Vec::new(), after_next);
        assert!(fetches.regulars_of((service, DOC, hour(AT))).is_none());
        // At most so many services: a new one is not asked for then, one known still is.
        let many = (0..MAX_REGULAR_SERVICES).map(|_| (Uuid::new_v4(), Vec::new()));
        fetches.remember_regulars(many.collect(), AT);
        assert!(fetches.wanting_regulars(&taken, AT).is_empty());
        let known = fetches
            .regulars
            .read()
            .unwrap()
            .keys()
            .next()
            .copied()
            .unwrap();
        let mut of_known = taken.clone();
        of_known[0].service_id = known;
        assert_eq!(fetches.wanting_regulars(&of_known, next_hour), [known]);
    }

    #[test]
    fn the_others_of_every_thread_are_added_up() {
        let fetches = Fetches::default();
        let service = Uuid::new_v4();
        std::thread::scope(|scope| {
            for thread in 0..2 {
                let fetches = &fetches;
                scope.spawn(move || {
                    for i in 0..AGENTS_PER_DOCUMENT + 10 {
                        let agent = format!("{thread} {i}");
                        fetches.record(service, DOC, false, agent.as_bytes(), NET, AT);
                    }
                });
            }
        });
        let taken = fetches.take();
        let agents = &taken[0].agents;
        assert_eq!(agents.iter().map(|a| a.count).sum::<u64>(), taken[0].ok);
        assert!(agents
            .iter()
            .all(|a| a.count == 1 || a.agent == OTHER_AGENTS));
    }

    #[test]
    fn each_agents_networks_are_bounded_and_the_frequent_ones_stay() {
        let fetches = Fetches::default();
        let service = Uuid::new_v4();
        let home = Network::V4([203, 0, 113]);
        let later = AT + time::Duration::SECOND;
        for i in 0..200u8 {
            let elsewhere = Some(Network::V4([198, 51, i]));
            fetches.record(service, DOC, false, b"AWS STS", elsewhere, AT);
            fetches.record(service, DOC, false, b"AWS STS", Some(home), later);
        }
        // An address not known is no network.
        fetches.record(service, DOC, false, b"AWS STS", None, later);
        let taken = fetches.take();
        let networks = &taken[0].agents[0].networks;
        assert_eq!(networks.len(), NETWORKS_PER_AGENT);
        let kept = networks.iter().find(|n| n.network == home).unwrap();
        assert_eq!(kept.last_at, AT + time::Duration::SECOND);
        // Given back, they go with the next flush.
        fetches.give_back(taken);
        assert_eq!(
            fetches.take()[0].agents[0].networks.len(),
            NETWORKS_PER_AGENT
        );
    }

    #[test]
    fn the_counts_of_every_thread_are_added_up() {
        let fetches = Fetches::default();
        let service = Uuid::new_v4();
        std::thread::scope(|scope| {
            for agent in ["aws", "gcp", "aws"] {
                let fetches = &fetches;
                scope.spawn(move || {
                    for _ in 0..100 {
                        fetches.record(service, DOC, false, agent.as_bytes(), NET, AT);
                    }
                });
            }
        });
        let taken = fetches.take();
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].ok, 300);
        let aws = taken[0].agents.iter().find(|a| a.agent == "aws").unwrap();
        assert_eq!(aws.count, 200);
        assert_eq!(fetches.documents.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn services_are_bounded() {
        let fetches = Fetches::default();
        let sent = MAX_DOCUMENTS + MAX_SERVICES;
        for _ in 0..sent {
            fetches.record(Uuid::new_v4(), DOC, false, b"a", NET, AT);
        }
        let kept = fetches.take().len();
        assert_eq!(kept, MAX_DOCUMENTS);
        assert_eq!(fetches.dropped() as usize, sent - kept);
    }

    #[test]
    fn agents_are_cut_and_cleaned() {
        assert!(matches!(
            clean_agent(b"Go-http-client/1.1"),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(clean_agent(b"a\x00b\r\nc\x7fd"), "abcd");
        let long = "é".repeat(300);
        assert_eq!(clean_agent(long.as_bytes()).chars().count(), AGENT_CHARS);
        assert_eq!(clean_agent(&[b'x'; 500]).len(), AGENT_CHARS);
        assert_eq!(clean_agent(b"\xff ok"), "\u{fffd} ok");
        let token = format!("rgst_{}_{}", "a".repeat(16), "b".repeat(52));
        assert_eq!(
            clean_agent(format!("bot {token}").as_bytes()),
            "bot rgst_[redacted]"
        );
        assert_eq!(
            clean_agent(format!("bot\t{token}").as_bytes()),
            "botrgst_[redacted]"
        );
        assert_eq!(clean_agent(b"x86_64 curl"), "x86_64 curl");
    }
}
