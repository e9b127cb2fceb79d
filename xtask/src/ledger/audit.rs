//! The audit trail against the ledger and the data (one event per change, in the change's own
//! transaction, none for a change that did not happen: docs/api.md, "Audit trail and last use").
//!
//! Against the ledger: every acknowledged change has its event, once, and no event names a change
//! that was not acknowledged, unless one was in flight. Against the data, which settles what
//! became of the writes in flight: a resource exists exactly when the trail's newest creation or
//! deletion of it is a creation; a service's configuration is published exactly when the newest
//! `config.*` event since its creation is `config.put`; its title was changed exactly when a
//! `service.update` followed its creation (every chore creates a service titled with its name).
//! Events of the reaper (actor `system`) are nobody's writes and are left out; anonymous
//! services' events are in no customer's trail.

use super::{Change, Ledger, TENANT};
use anyhow::{ensure, Context, Result};
use registry_testkit::http::Http;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The customer's audit trail, read newest first.
#[derive(Debug, Default)]
pub(super) struct Trail {
    /// Events by action and resource.
    pub counts: BTreeMap<Change, u64>,
    /// What the newest events say of each resource.
    now: BTreeMap<String, Now>,
}

/// A resource as its newest events leave it.
#[derive(Debug, Default)]
struct Now {
    account: bool,
    /// Its newest creation was read: the older events concern an earlier life.
    born: bool,
    exists: Option<bool>,
    published: Option<bool>,
    updated: bool,
}

impl Trail {
    pub fn read(http: Http, token: &str) -> Result<Trail> {
        let mut trail = Trail::default();
        let mut path = "/audit-events?limit=500".to_owned();
        loop {
            let page = http.call("GET", &path, Some(token), None)?;
            ensure!(page.status == 200, "GET {path} → {}", page.status);
            let page = page.json();
            for event in page["events"].as_array().context("no events array")? {
                trail.note(event);
            }
            match page["nextCursor"].as_str() {
                Some(cursor) => path = format!("/audit-events?limit=500&cursor={cursor}"),
                None => return Ok(trail),
            }
        }
    }

    fn note(&mut self, event: &Value) {
        if event["actor"]["kind"] == "system" {
            return;
        }
        let resource = &event["resource"];
        // Services by subdomain, accounts by id, the customer as "".
        let key = match resource["type"].as_str() {
            Some("customer") => "",
            _ => resource["subdomain"]
                .as_str()
                .or(resource["id"].as_str())
                .unwrap_or_default(),
        };
        let action = event["action"].as_str().unwrap_or_default();
        *self
            .counts
            .entry((action.to_owned(), key.to_owned()))
            .or_default() += 1;
        let now = self.now.entry(key.to_owned()).or_default();
        now.account |= resource["type"] == "account";
        if now.born {
            return;
        }
        match action {
            "service.create" | "account.create" => {
                now.exists.get_or_insert(true);
                now.born = true;
            }
            "service.delete" | "account.delete" => _ = now.exists.get_or_insert(false),
            "config.put" => _ = now.published.get_or_insert(true),
            "config.delete" => _ = now.published.get_or_insert(false),
            "service.update" => now.updated = true,
            _ => {}
        }
    }
}

/// Checks the trail against `ledger` and against the services (`published`: those whose
/// configuration is) and accounts listed now; how many events it holds.
pub(super) fn check(
    trail: &Trail,
    ledger: &Ledger,
    services: &BTreeMap<String, Value>,
    published: &[String],
    accounts: &BTreeMap<String, Value>,
) -> Result<u64> {
    let mut problems = Vec::new();

    let count =
        |map: &BTreeMap<Change, u64>, change: &Change| map.get(change).copied().unwrap_or(0);
    let changes: BTreeSet<&Change> = (trail.counts.keys())
        .chain(ledger.acked_changes.keys())
        .chain(ledger.unsure_changes.keys())
        .collect();
    // Creations without an answer, whose resource the ledger cannot name.
    let mut unnamed: BTreeMap<String, u64> = (ledger.unsure_changes.iter())
        .filter(|((_, resource), _)| resource == "?")
        .map(|((action, _), n)| (action.clone(), *n))
        .collect();
    for change in changes.into_iter().filter(|(_, resource)| resource != "?") {
        let events = count(&trail.counts, change).saturating_sub(count(&ledger.baseline, change));
        let acked = count(&ledger.acked_changes, change);
        let in_flight = count(&ledger.unsure_changes, change);
        let (action, resource) = change;
        if events < acked {
            problems.push(format!(
                "{action} {resource}: {acked} acknowledged, {events} events"
            ));
        } else if events > acked + in_flight {
            let extra = events - acked - in_flight;
            let budget = unnamed.entry(action.clone()).or_default();
            if *budget >= extra {
                *budget -= extra;
            } else {
                problems.push(format!(
                    "{action} {resource}: {events} events for {acked} acknowledged changes and \
                     {in_flight} in flight"
                ));
            }
        }
    }

    for (key, now) in trail.now.iter().filter(|(key, _)| !key.is_empty()) {
        let exists = now.exists == Some(true);
        let listed = if now.account {
            accounts.contains_key(key)
        } else {
            services.contains_key(key)
        };
        if listed && !exists {
            problems.push(format!(
                "{key} exists, but the trail has no creation since its last deletion"
            ));
        } else if exists && !listed {
            problems.push(format!(
                "{key} is gone, but the trail has no deletion since its creation"
            ));
        }
    }
    let is_published: BTreeSet<&String> = published.iter().collect();
    for (subdomain, service) in services {
        let Some(now) = trail.now.get(subdomain) else {
            problems.push(format!("{subdomain} exists, but the trail has no creation"));
            continue;
        };
        if now.published.unwrap_or(false) != is_published.contains(subdomain) {
            problems.push(format!(
                "{subdomain}: published {}, but the newest configuration event says {:?}",
                is_published.contains(subdomain),
                now.published
            ));
        }
        let name = subdomain
            .strip_suffix(&format!("-{TENANT}"))
            .unwrap_or(subdomain);
        if now.updated != (service["title"] != name) {
            problems.push(format!(
                "{subdomain}: titled {}, yet updated since its creation: {}",
                service["title"], now.updated
            ));
        }
    }
    // The bootstrap account came with the customer (customer.create), not by account.create.
    for (id, account) in accounts {
        let bootstrap = account["name"]
            .as_str()
            .is_some_and(|n| n.ends_with(" bootstrap"));
        if !bootstrap && !trail.now.contains_key(id) {
            problems.push(format!(
                "account {id} exists, but the trail has no creation"
            ));
        }
    }
    ensure!(
        problems.is_empty(),
        "the audit trail and the changes differ ({} problems): {:#?}",
        problems.len(),
        &problems[..problems.len().min(20)]
    );
    Ok(trail.counts.values().sum())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::Ack;
    use serde_json::json;

    fn event(action: &str, subdomain: &str) -> Value {
        json!({"action": action, "resource": {"type": "service", "subdomain": subdomain}, "actor": {"kind": "static"}})
    }

    /// Newest first, as the server pages them.
    fn trail(events: &[(&str, &str)]) -> Trail {
        let mut trail = Trail::default();
        for (action, subdomain) in events {
            trail.note(&event(action, subdomain));
        }
        trail
    }

    #[test]
    fn events_must_match_acknowledged_and_existing_changes() {
        let mut ledger = Ledger::default();
        ledger.service_created("a-acme", "a", Ack::Acked);
        ledger.service_retitled("a-acme", "t", Ack::Acked);
        ledger.service_created("b-acme", "b", Ack::Unsure);
        let a = json!({"title": "t"});
        let services = BTreeMap::from([("a-acme".to_owned(), a.clone())]);
        let (none, accounts) = (Vec::new(), BTreeMap::new());
        let check = |trail: &Trail| check(trail, &ledger, &services, &none, &accounts);

        // The creation in flight did not happen: no event for it, and it does not exist.
        let whole = trail(&[("service.update", "a-acme"), ("service.create", "a-acme")]);
        assert_eq!(check(&whole).unwrap(), 2);
        // An acknowledged change without its event.
        assert!(check(&trail(&[("service.create", "a-acme")])).is_err());
        // The creation in flight happened: its event, but the service is missing.
        let mut in_flight = trail(&[("service.update", "a-acme"), ("service.create", "a-acme")]);
        in_flight.note(&event("service.create", "b-acme"));
        assert!(check(&in_flight).is_err());
        // An event of a change nobody made.
        let mut extra = trail(&[("service.update", "a-acme"), ("service.create", "a-acme")]);
        extra.note(&event("config.put", "a-acme"));
        assert!(check(&extra).is_err());
        // The reaper's events are nobody's writes.
        let mut reaped = trail(&[("service.update", "a-acme"), ("service.create", "a-acme")]);
        let mut expired = event("key.expire", "a-acme");
        expired["actor"]["kind"] = "system".into();
        reaped.note(&expired);
        assert!(check(&reaped).is_ok());
    }
}
