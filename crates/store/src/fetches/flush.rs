//! A replica's flush of fetch evidence, merged per hour bucket and agent, and written a thousand
//! rows a statement. Diesel prepares every `UPDATE` and every upsert again at each execution
//! (it never caches them), so a flush written a row at a time spent most of its time parsing
//! SQL: 48 µs a document (docs/benchmarks.md, "A cold issuer's read without the key state, and
//! a flush of fetch evidence in a few statements"). Only an agent new to its bucket is still
//! decided one at a time, since whether it gets a place depends on the bucket as the agents
//! before it left it; its rows are written with the rest.

use super::{count, key_of};
use crate::error::Res;
use crate::pool::{on_backend, Db, ROWS_A_STATEMENT};
use crate::rows::{id_text, millis};
use crate::schema::{fetch_agents, fetch_counts, fetch_networks};
use diesel::dsl::{case_when, Eq, Filter};
use diesel::prelude::*;
use diesel::upsert::excluded;
use registry_domain::keys::VERIFIER_WINDOW;
use registry_domain::ports::{
    fetch_hour, DocumentFetches, NetworkFetch, OTHER_AGENTS, STORED_AGENTS_PER_HOUR,
    STORED_AGENTS_PER_NETWORK, STORED_NETWORKS_PER_AGENT,
};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// `column` as an upsert leaves it: the upserted row's value when later, else the stored one
/// (a last fetch only moves forward, whichever replica flushes first).
macro_rules! later {
    ($column:expr) => {
        case_when($column.lt(excluded($column)), excluded($column)).otherwise($column)
    };
}

/// A document's hour: its service and document as stored, and the hour.
type Bucket = (String, &'static str, i64);

/// What a flush adds to one bucket.
#[derive(Debug)]
struct Counts {
    bucket: Bucket,
    ok: i64,
    not_modified: i64,
    last_at: i64,
}

/// What a flush adds of one agent to one bucket.
#[derive(Debug)]
struct Agent {
    /// Its bucket, an index into [`Flush::buckets`].
    bucket: usize,
    name: String,
    count: i64,
    last_at: i64,
    /// Each network once (in the order the replica gave them: the most frequent first), with
    /// the agent's last fetch from there.
    networks: Vec<(String, i64)>,
}

/// A flush's counts, each bucket and each agent of a bucket once (two replicas' counts, or
/// two threads', may name the same), in the order they first appear.
#[derive(Debug, Default)]
pub(super) struct Flush {
    buckets: Vec<Counts>,
    agents: Vec<Agent>,
}

impl Flush {
    /// `counts` merged: counts summed, the last fetches the latest.
    pub(super) fn of<'a>(counts: impl IntoIterator<Item = &'a DocumentFetches>) -> Self {
        let mut flush = Self::default();
        let mut buckets: HashMap<Bucket, usize> = HashMap::new();
        let mut agents: HashMap<(usize, &str), usize> = HashMap::new();
        for f in counts {
            let bucket = (
                id_text(f.service_id),
                key_of(f.document),
                fetch_hour(f.last_at),
            );
            let last_at = millis(f.last_at);
            let b = *buckets.entry(bucket.clone()).or_insert_with(|| {
                flush.buckets.push(Counts {
                    bucket,
                    ok: 0,
                    not_modified: 0,
                    last_at,
                });
                flush.buckets.len() - 1
            });
            let counts = &mut flush.buckets[b];
            counts.ok = counts.ok.saturating_add(count(f.ok));
            counts.not_modified = counts.not_modified.saturating_add(count(f.not_modified));
            counts.last_at = counts.last_at.max(last_at);
            for a in &f.agents {
                let last_at = millis(a.last_at);
                let i = *agents.entry((b, a.agent.as_str())).or_insert_with(|| {
                    flush.agents.push(Agent {
                        bucket: b,
                        name: a.agent.clone(),
                        count: 0,
                        last_at,
                        networks: Vec::new(),
                    });
                    flush.agents.len() - 1
                });
                let agent = &mut flush.agents[i];
                agent.count = agent.count.saturating_add(count(a.count));
                agent.last_at = agent.last_at.max(last_at);
                for NetworkFetch { network, last_at } in &a.networks {
                    let (network, last_at) = (network.to_string(), millis(*last_at));
                    match agent.networks.iter_mut().find(|(n, _)| *n == network) {
                        Some((_, at)) => *at = (*at).max(last_at),
                        None => agent.networks.push((network, last_at)),
                    }
                }
            }
        }
        flush
    }

    /// Adds the flush in the caller's transaction: the buckets' counts; the agents their
    /// buckets hold already, with their networks; then each new agent as the bounds on a
    /// bucket's agents let it in (decided one by one, in the flush's order, from what the
    /// database holds and what the agents before it took; written together).
    pub(super) fn record(&self, conn: &mut Db) -> Res<()> {
        self.add_counts(conn)?;
        let stored = self.stored(conn)?;
        let (known, new): (Vec<&Agent>, Vec<&Agent>) =
            (self.agents.iter()).partition(|a| stored.contains_key(&(a.bucket, a.name.as_str())));
        let mut rows = Rows::default();
        for a in known {
            let there = &stored[&(a.bucket, a.name.as_str())];
            let mut room = STORED_NETWORKS_PER_AGENT.saturating_sub(there.len());
            let networks = a.networks.iter().filter(|(network, _)| {
                there.contains(network) || {
                    let fits = room > 0;
                    room = room.saturating_sub(1);
                    fits
                }
            });
            rows.add(a.bucket, &a.name, a.count, a.last_at, networks);
        }
        // Written before the new agents are placed: a full bucket's least frequent agent is
        // read from the database.
        rows.write(conn, self)?;
        let mut places = Places::default();
        let mut rows = Rows::default();
        for a in new {
            self.place(conn, a, &mut places, &mut rows)?;
        }
        rows.write(conn, self)
    }

    /// A bucket as stored: service, document, hour.
    fn key(&self, bucket: usize) -> (&str, &'static str, i64) {
        let (service, document, hour) = &self.buckets[bucket].bucket;
        (service.as_str(), document, *hour)
    }

    /// One upsert per [`ROWS_A_STATEMENT`] buckets; the last fetch only moves forward.
    fn add_counts(&self, conn: &mut Db) -> Res<()> {
        for chunk in self.buckets.chunks(ROWS_A_STATEMENT) {
            let rows: Vec<_> = (chunk.iter())
                .map(|c| {
                    (
                        fetch_counts::service_id.eq(c.bucket.0.as_str()),
                        fetch_counts::document.eq(c.bucket.1),
                        fetch_counts::hour.eq(c.bucket.2),
                        fetch_counts::ok.eq(c.ok),
                        fetch_counts::not_modified.eq(c.not_modified),
                        fetch_counts::last_at.eq(c.last_at),
                    )
                })
                .collect();
            on_backend!(&mut *conn, |c| diesel::insert_into(fetch_counts::table)
                .values(&rows)
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
                    fetch_counts::last_at.eq(later!(fetch_counts::last_at)),
                ))
                .execute(c))?;
        }
        Ok(())
    }

    /// The agents the flush's buckets hold already, each with its networks there: one read per
    /// [`ROWS_A_STATEMENT`] services of a document and hour, for agents and for networks.
    fn stored(&self, conn: &mut Db) -> Res<HashMap<(usize, &str), HashSet<String>>> {
        let mut groups: BTreeMap<(&str, i64), HashMap<&str, usize>> = BTreeMap::new();
        for (i, c) in self.buckets.iter().enumerate() {
            let (service, document, hour) = &c.bucket;
            (groups.entry((*document, *hour)).or_default()).insert(service.as_str(), i);
        }
        let mut wanted: HashMap<usize, Vec<&str>> = HashMap::new();
        for a in &self.agents {
            wanted.entry(a.bucket).or_default().push(a.name.as_str());
        }
        let mut stored: HashMap<(usize, &str), HashSet<String>> = HashMap::new();
        for ((document, hour), services) in &groups {
            // The flush's own agent, from a row the read found.
            let ours = |service: &str, agent: &str| {
                let bucket = *services.get(service)?;
                let name = wanted.get(&bucket)?.iter().find(|name| **name == agent)?;
                Some((bucket, *name))
            };
            let ids: Vec<&str> = services.keys().copied().collect();
            for chunk in ids.chunks(ROWS_A_STATEMENT) {
                // Only the flush's agents: a bucket may hold 64, each from 8 networks.
                let names: BTreeSet<&str> = (chunk.iter())
                    .filter_map(|service| wanted.get(&services[service]))
                    .flatten()
                    .copied()
                    .collect();
                let names: Vec<&str> = names.into_iter().collect();
                let agents: Vec<(String, String)> = fetch_agents::table
                    .filter(fetch_agents::document.eq(*document))
                    .filter(fetch_agents::hour.eq(*hour))
                    .filter(fetch_agents::service_id.eq_any(chunk))
                    .filter(fetch_agents::agent.eq_any(&names))
                    .select((fetch_agents::service_id, fetch_agents::agent))
                    .load(conn)?;
                for (service, agent) in agents {
                    if let Some(key) = ours(&service, &agent) {
                        stored.entry(key).or_default();
                    }
                }
                let networks: Vec<(String, String, String)> = fetch_networks::table
                    .filter(fetch_networks::document.eq(*document))
                    .filter(fetch_networks::hour.eq(*hour))
                    .filter(fetch_networks::service_id.eq_any(chunk))
                    .filter(fetch_networks::agent.eq_any(&names))
                    .select((
                        fetch_networks::service_id,
                        fetch_networks::agent,
                        fetch_networks::network,
                    ))
                    .load(conn)?;
                for (service, agent, network) in networks {
                    let known = ours(&service, &agent).and_then(|key| stored.get_mut(&key));
                    if let Some(known) = known {
                        known.insert(network);
                    }
                }
            }
        }
        Ok(stored)
    }

    /// Places an agent new to its bucket. Whatever outsiders send, the hour's agents are
    /// bounded: while the hour has room, every new agent takes a place; once it is full, a new
    /// agent from networks that hold their bound of agents already is one of the others, and
    /// any other new agent takes the place (not the count) of the least regular and least
    /// frequent one when [`give_place`] gives it one, else is one of the others too (one
    /// network's made-up agents cannot push out another network's, and agents new to the week
    /// cannot push out one seen in earlier hours, a verifier's among them).
    fn place<'a>(
        &'a self,
        conn: &mut Db,
        a: &'a Agent,
        places: &mut Places<'a>,
        rows: &mut Rows<'a>,
    ) -> Res<()> {
        let key = self.key(a.bucket);
        let full = places.agents(conn, key, a.bucket)? >= count(STORED_AGENTS_PER_HOUR as u64);
        // The replica's others (agents that gave their place there) are the others here too.
        let mut crowded_out = a.name == OTHER_AGENTS || (full && !a.networks.is_empty());
        if crowded_out {
            for (network, _) in &a.networks {
                if places.network_agents(conn, key, a.bucket, network)?
                    < count(STORED_AGENTS_PER_NETWORK as u64)
                {
                    crowded_out = false;
                    break;
                }
            }
        }
        let placed = match full && !crowded_out {
            true => {
                let regular = places.regular(conn, key, a.bucket)?;
                let pushed_out = give_place(conn, key, &a.name, regular)?;
                places.forget(a.bucket);
                pushed_out.map(Some)
            }
            false => Some(None),
        };
        match (crowded_out, placed) {
            (false, Some(pushed_out)) => {
                let networks = a.networks.iter().take(STORED_NETWORKS_PER_AGENT);
                for (network, _) in networks.clone() {
                    places.took_network(a.bucket, network);
                }
                places.took(a.bucket);
                // Its own count, not the one it pushed out: a stored count is what the agent
                // fetched, which ranks verifiers (a count taken over would let made-up agents
                // with a fetch or two outrank a verifier's real ones). The fetches of the one
                // pushed out are the others' from now on: every fetch stays counted once.
                rows.add(a.bucket, &a.name, a.count, a.last_at, networks);
                if let Some((count, last_at)) = pushed_out {
                    self.add_to_others(conn, a.bucket, count, last_at, places, rows)?;
                }
            }
            _ => self.add_to_others(conn, a.bucket, a.count, a.last_at, places, rows)?,
        }
        Ok(())
    }

    /// Counts `count` fetches, the last at `last_at`, as the others' of the bucket.
    fn add_to_others<'a>(
        &self,
        conn: &mut Db,
        bucket: usize,
        count: i64,
        last_at: i64,
        places: &mut Places<'a>,
        rows: &mut Rows<'a>,
    ) -> Res<()> {
        if !places.others(conn, self.key(bucket), bucket)? {
            places.took(bucket);
            places.others_taken.insert(bucket);
        }
        rows.add(bucket, OTHER_AGENTS, count, last_at, std::iter::empty());
        Ok(())
    }
}

/// The agent and network rows a flush adds, each once: upserts that add counts and move the
/// last fetch forward, [`ROWS_A_STATEMENT`] rows a statement.
#[derive(Debug, Default)]
struct Rows<'a> {
    agents: Vec<(usize, &'a str, i64, i64)>,
    /// An agent row's index in `agents`, by bucket and agent (the others' row of a bucket
    /// takes several agents' counts).
    index: HashMap<(usize, &'a str), usize>,
    networks: Vec<(usize, &'a str, &'a str, i64)>,
}

impl<'a> Rows<'a> {
    fn add(
        &mut self,
        bucket: usize,
        agent: &'a str,
        count: i64,
        last_at: i64,
        networks: impl Iterator<Item = &'a (String, i64)>,
    ) {
        match self.index.get(&(bucket, agent)) {
            Some(&i) => {
                let row = &mut self.agents[i];
                row.2 = row.2.saturating_add(count);
                row.3 = row.3.max(last_at);
            }
            None => {
                self.index.insert((bucket, agent), self.agents.len());
                self.agents.push((bucket, agent, count, last_at));
            }
        }
        (self.networks)
            .extend(networks.map(|(network, at)| (bucket, agent, network.as_str(), *at)));
    }

    fn write(&self, conn: &mut Db, flush: &Flush) -> Res<()> {
        for chunk in self.agents.chunks(ROWS_A_STATEMENT) {
            let rows: Vec<_> = (chunk.iter())
                .map(|(bucket, agent, count, last_at)| {
                    let (service, document, hour) = flush.key(*bucket);
                    (
                        fetch_agents::service_id.eq(service),
                        fetch_agents::document.eq(document),
                        fetch_agents::hour.eq(hour),
                        fetch_agents::agent.eq(*agent),
                        fetch_agents::count.eq(*count),
                        fetch_agents::last_at.eq(*last_at),
                    )
                })
                .collect();
            on_backend!(&mut *conn, |c| diesel::insert_into(fetch_agents::table)
                .values(&rows)
                .on_conflict((
                    fetch_agents::service_id,
                    fetch_agents::document,
                    fetch_agents::hour,
                    fetch_agents::agent,
                ))
                .do_update()
                .set((
                    fetch_agents::count.eq(fetch_agents::count + excluded(fetch_agents::count)),
                    fetch_agents::last_at.eq(later!(fetch_agents::last_at)),
                ))
                .execute(c))?;
        }
        for chunk in self.networks.chunks(ROWS_A_STATEMENT) {
            let rows: Vec<_> = (chunk.iter())
                .map(|(bucket, agent, network, at)| {
                    let (service, document, hour) = flush.key(*bucket);
                    (
                        fetch_networks::service_id.eq(service),
                        fetch_networks::document.eq(document),
                        fetch_networks::hour.eq(hour),
                        fetch_networks::agent.eq(*agent),
                        fetch_networks::network.eq(*network),
                        fetch_networks::last_at.eq(*at),
                    )
                })
                .collect();
            on_backend!(&mut *conn, |c| diesel::insert_into(fetch_networks::table)
                .values(&rows)
                .on_conflict((
                    fetch_networks::service_id,
                    fetch_networks::document,
                    fetch_networks::hour,
                    fetch_networks::agent,
                    fetch_networks::network,
                ))
                .do_update()
                .set(fetch_networks::last_at.eq(later!(fetch_networks::last_at)))
                .execute(c))?;
        }
        Ok(())
    }
}

/// What the buckets hold while new agents are placed: what the database held when first asked
/// (one count each), and what the agents placed before took.
#[derive(Debug, Default)]
struct Places<'a> {
    stored_agents: HashMap<usize, i64>,
    stored_network_agents: HashMap<(usize, &'a str), i64>,
    stored_others: HashMap<usize, bool>,
    taken: HashMap<usize, i64>,
    taken_networks: HashMap<(usize, &'a str), i64>,
    others_taken: HashSet<usize>,
    /// Per full bucket, the hours of the week before in which each agent fetched.
    regular: HashMap<usize, HashMap<String, i64>>,
}

impl<'a> Places<'a> {
    /// The agents of the bucket, the others' row included.
    fn agents(&mut self, conn: &mut Db, key: (&str, &str, i64), bucket: usize) -> Res<i64> {
        let stored = match self.stored_agents.get(&bucket) {
            Some(n) => *n,
            None => {
                let n = agents_of(key).count().get_result::<i64>(conn)?;
                *self.stored_agents.entry(bucket).or_insert(n)
            }
        };
        Ok(stored + self.taken.get(&bucket).copied().unwrap_or(0))
    }

    /// The agents that brought `network` to the bucket.
    fn network_agents(
        &mut self,
        conn: &mut Db,
        (service, document, hour): (&str, &str, i64),
        bucket: usize,
        network: &'a str,
    ) -> Res<i64> {
        let stored = match self.stored_network_agents.get(&(bucket, network)) {
            Some(n) => *n,
            None => {
                let n = fetch_networks::table
                    .filter(fetch_networks::service_id.eq(service))
                    .filter(fetch_networks::document.eq(document))
                    .filter(fetch_networks::hour.eq(hour))
                    .filter(fetch_networks::network.eq(network))
                    .count()
                    .get_result::<i64>(conn)?;
                *self
                    .stored_network_agents
                    .entry((bucket, network))
                    .or_insert(n)
            }
        };
        Ok(stored + (self.taken_networks.get(&(bucket, network)).copied()).unwrap_or(0))
    }

    /// Whether the bucket has its others' row.
    fn others(&mut self, conn: &mut Db, key: (&str, &str, i64), bucket: usize) -> Res<bool> {
        if self.others_taken.contains(&bucket) {
            return Ok(true);
        }
        if let Some(stored) = self.stored_others.get(&bucket) {
            return Ok(*stored);
        }
        let n = (agents_of(key).filter(fetch_agents::agent.eq(OTHER_AGENTS)))
            .count()
            .get_result::<i64>(conn)?;
        Ok(*self.stored_others.entry(bucket).or_insert(n > 0))
    }

    /// An agent placed in the bucket.
    fn took(&mut self, bucket: usize) {
        *self.taken.entry(bucket).or_default() += 1;
    }

    /// An agent placed in the bucket brought `network`.
    fn took_network(&mut self, bucket: usize, network: &'a str) {
        *self.taken_networks.entry((bucket, network)).or_default() += 1;
    }

    /// In how many distinct hours of the week before the bucket's each agent fetched its
    /// document (read once a bucket, when it is full: earlier hours do not change in a flush).
    fn regular(
        &mut self,
        conn: &mut Db,
        (service, document, hour): (&str, &str, i64),
        bucket: usize,
    ) -> Res<&HashMap<String, i64>> {
        if let std::collections::hash_map::Entry::Vacant(place) = self.regular.entry(bucket) {
            let week = VERIFIER_WINDOW.whole_milliseconds() as i64;
            // One row an agent and hour: a week of a bounded hour is a bounded read.
            let rows: Vec<(String, i64)> = fetch_agents::table
                .filter(fetch_agents::service_id.eq(service))
                .filter(fetch_agents::document.eq(document))
                .filter(fetch_agents::hour.ge(hour - week))
                .filter(fetch_agents::hour.lt(hour))
                .filter(fetch_agents::agent.ne(OTHER_AGENTS))
                .group_by(fetch_agents::agent)
                .select((fetch_agents::agent, diesel::dsl::count_star()))
                .load(conn)?;
            place.insert(rows.into_iter().collect());
        }
        Ok(&self.regular[&bucket])
    }

    /// The bucket lost an agent and its networks to a new one: what the database holds of it
    /// is read again when next asked.
    fn forget(&mut self, bucket: usize) {
        self.stored_agents.remove(&bucket);
        self.stored_network_agents.retain(|(b, _), _| *b != bucket);
    }
}

/// The agent rows of one service's bucket, before the document and hour are named.
type OfService<'a> = Filter<fetch_agents::table, Eq<fetch_agents::service_id, &'a str>>;

/// The query of a bucket's agent rows.
type AgentsOf<'a> =
    Filter<Filter<OfService<'a>, Eq<fetch_agents::document, &'a str>>, Eq<fetch_agents::hour, i64>>;

/// The agent rows of a bucket.
fn agents_of<'a>((service, document, hour): (&'a str, &'a str, i64)) -> AgentsOf<'a> {
    fetch_agents::table
        .filter(fetch_agents::service_id.eq(service))
        .filter(fetch_agents::document.eq(document))
        .filter(fetch_agents::hour.eq(hour))
}

/// Removes an agent of the bucket `(service, document, hour)` (the others' row aside) with its
/// networks, and answers its count and last fetch: the place `newcomer` takes (with its own
/// count); `None` when there is no such agent, or none `newcomer` may push out. The
/// agent is the least regular (seen in the fewest hours of the week before, by `regular`),
/// then least frequent, of those no network of its own vouches for ([`exposed`]), else of
/// all: one network's made-up agents, filling the hour while it had room, give their places
/// before a verifier seen from a network of its own. Past a crowd's, only an agent at least as
/// regular gets a place: agents made up on many networks, however busy this hour, push out
/// no verifier seen in earlier hours; to do so they must have been seen in as many.
fn give_place(
    conn: &mut Db,
    (service, document, hour): (&str, &str, i64),
    newcomer: &str,
    regular: &HashMap<String, i64>,
) -> Res<Option<(i64, i64)>> {
    let bucket = agents_of((service, document, hour));
    let networks_of = || {
        fetch_networks::table
            .filter(fetch_networks::service_id.eq(service))
            .filter(fetch_networks::document.eq(document))
            .filter(fetch_networks::hour.eq(hour))
    };
    let agents: Vec<(String, i64, i64)> = bucket
        .filter(fetch_agents::agent.ne(OTHER_AGENTS))
        .select((
            fetch_agents::agent,
            fetch_agents::count,
            fetch_agents::last_at,
        ))
        .load(conn)?;
    let networks: Vec<(String, String)> = networks_of()
        .select((fetch_networks::agent, fetch_networks::network))
        .load(conn)?;
    let exposed = exposed(&networks);
    let hours = |agent: &str| regular.get(agent).copied().unwrap_or(0);
    let least = |only_exposed: bool| {
        (agents.iter())
            .filter(|(agent, ..)| !only_exposed || exposed(agent))
            .min_by_key(|(agent, count, last_at)| (hours(agent), *count, *last_at))
    };
    let Some((agent, n, last_at)) = least(true).or_else(|| least(false)) else {
        return Ok(None);
    };
    if !exposed(agent) && hours(newcomer) < hours(agent) {
        return Ok(None);
    }
    diesel::delete(bucket.filter(fetch_agents::agent.eq(agent))).execute(conn)?;
    diesel::delete(networks_of().filter(fetch_networks::agent.eq(agent))).execute(conn)?;
    Ok(Some((*n, *last_at)))
}

/// Of a bucket's `(agent, network)` rows, whether an agent is exposed: seen from no network,
/// or only from networks that hold more than [`STORED_AGENTS_PER_NETWORK`] of the hour's
/// agents (a crowd's, which no verifier needs: a network vouches for a few agents at most).
fn exposed(networks: &[(String, String)]) -> impl Fn(&str) -> bool + '_ {
    let mut agents_of: HashMap<&str, usize> = HashMap::new();
    for (_, network) in networks {
        *agents_of.entry(network.as_str()).or_default() += 1;
    }
    move |agent: &str| {
        (networks.iter())
            .filter(|(a, _)| a == agent)
            .all(|(_, network)| agents_of[network.as_str()] > STORED_AGENTS_PER_NETWORK)
    }
}
