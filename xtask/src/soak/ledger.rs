//! What the soak's writers got acknowledged, and the check that the server still holds exactly
//! that: every live resource as last written, every deleted one gone, every retired token refused.

use crate::faults::harness::Http;
use anyhow::{ensure, Context, Result};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Instant;

/// How many retired tokens are checked at the end (each check is a failed authentication, and
/// those are rate limited per client address).
const RETIRED_KEPT: usize = 50;
/// How many problem descriptions are kept (all are counted).
const PROBLEMS_KEPT: usize = 50;

/// A registered service as last acknowledged.
#[derive(Debug, Clone)]
pub struct Service {
    pub title: String,
    /// The `kid` of the published key set; `None` when nothing is published.
    pub kid: Option<String>,
}

/// A static service account as last acknowledged.
#[derive(Debug, Clone)]
pub struct Account {
    pub name: String,
    pub token: String,
}

/// An anonymous service: published once, then deleted or left to expire.
#[derive(Debug, Clone)]
pub struct Anonymous {
    pub subdomain: String,
    pub secret: String,
    pub kid: String,
    /// Expiry lies between these two instants (the request's departure and arrival, plus the
    /// `remainingSeconds` it answered).
    pub expires_earliest: Instant,
    pub expires_latest: Instant,
    pub deleted: bool,
}

/// The acknowledged state, shared by the writers.
#[derive(Debug, Default)]
pub struct Ledger {
    pub services: BTreeMap<String, Service>,
    /// Deleted and not created again since.
    pub deleted_services: BTreeSet<String>,
    pub accounts: BTreeMap<String, Account>,
    /// Tokens replaced by regeneration or belonging to deleted accounts (the newest ones).
    pub retired_tokens: VecDeque<String>,
    pub anonymous: Vec<Anonymous>,
    /// Acknowledged writes by kind.
    pub acknowledged: BTreeMap<&'static str, u64>,
    /// Reads of one's own writes, checked against the ledger while the load ran.
    pub reads_checked: u64,
    /// Unexpected statuses, transport errors, stale reads: counted, the first ones described.
    pub problem_count: u64,
    pub problems: Vec<String>,
}

impl Ledger {
    pub fn acknowledge(&mut self, kind: &'static str) {
        *self.acknowledged.entry(kind).or_default() += 1;
    }

    pub fn problem(&mut self, description: String) {
        self.problem_count += 1;
        if self.problems.len() < PROBLEMS_KEPT {
            self.problems.push(description);
        }
    }

    pub fn retire(&mut self, token: String) {
        self.retired_tokens.push_back(token);
        if self.retired_tokens.len() > RETIRED_KEPT {
            self.retired_tokens.pop_front();
        }
    }
}

/// What the final check looked at.
#[derive(Debug, Default)]
pub struct Verified {
    pub live_services: usize,
    pub deleted_services: usize,
    pub accounts: usize,
    pub retired_tokens: usize,
    pub anonymous_live: usize,
    pub anonymous_gone: usize,
}

impl std::fmt::Display for Verified {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} live services as last written (title, key set, hosted set), {} deleted ones gone, \
             {} accounts with working tokens, {} retired tokens refused, {} anonymous services \
             live and {} expired or deleted as expected",
            self.live_services,
            self.deleted_services,
            self.accounts,
            self.retired_tokens,
            self.anonymous_live,
            self.anonymous_gone
        )
    }
}

/// The subdomain-keyed services `GET /services` lists for `token`.
fn listed_services(http: Http, token: &str) -> Result<BTreeMap<String, Value>> {
    let listed = http.call("GET", "/services", Some(token), None)?;
    ensure!(listed.status == 200, "GET /services → {}", listed.status);
    Ok(listed
        .json()
        .as_array()
        .context("GET /services is not an array")?
        .iter()
        .filter_map(|s| Some((s["subdomain"].as_str()?.to_owned(), s.clone())))
        .collect())
}

/// The `kid` of the first key of a key set.
pub fn first_kid(jwks: &Value) -> Option<&str> {
    jwks["keys"][0]["kid"].as_str()
}

/// Checks that the server holds what the ledger says. `owned` tells which listed services the
/// writers own (others were set up before the load).
pub fn verify(
    http: Http,
    port: u16,
    token: &str,
    ledger: &Ledger,
    owned: impl Fn(&str) -> bool,
) -> Result<Verified> {
    let mut verified = Verified::default();
    let listed = listed_services(http, token)?;
    for subdomain in listed.keys().filter(|s| owned(s)) {
        ensure!(
            ledger.services.contains_key(subdomain),
            "{subdomain} exists but no acknowledged write created it (or its deletion was acknowledged)"
        );
    }
    for (subdomain, expected) in &ledger.services {
        let service = listed
            .get(subdomain)
            .with_context(|| format!("acknowledged service {subdomain} is missing"))?;
        ensure!(
            service["title"] == expected.title.as_str(),
            "{subdomain}: title {} but {:?} was acknowledged last",
            service["title"],
            expected.title
        );
        let (config, hosted) = http.stored_and_hosted(subdomain, token, port)?;
        match &expected.kid {
            Some(kid) => {
                ensure!(
                    config.status == 200,
                    "{subdomain}: configuration → {}",
                    config.status
                );
                let stored = config.json();
                ensure!(
                    first_kid(&stored["jwks"]) == Some(kid.as_str()),
                    "{subdomain}: stored key set is not the last acknowledged ({kid})"
                );
                ensure!(
                    hosted.status == 200 && hosted.json() == stored["jwks"],
                    "{subdomain}: hosted key set ({}) differs from the stored one",
                    hosted.status
                );
            }
            None => {
                ensure!(
                    config.status == 404 && hosted.status == 404,
                    "{subdomain}: nothing acknowledged as published, yet configuration → {}, hosted → {}",
                    config.status,
                    hosted.status
                );
            }
        }
        verified.live_services += 1;
    }
    for subdomain in &ledger.deleted_services {
        ensure!(
            !listed.contains_key(subdomain),
            "deleted service {subdomain} is listed"
        );
        let host = format!("{subdomain}.localhost:{port}");
        let hosted = http.send("GET", "/openid/v1/jwks", None, None, Some(&host))?;
        ensure!(
            hosted.status == 404,
            "deleted service {subdomain} is hosted → {}",
            hosted.status
        );
        verified.deleted_services += 1;
    }

    let accounts = http.call("GET", "/service-accounts", Some(token), None)?;
    ensure!(
        accounts.status == 200,
        "GET /service-accounts → {}",
        accounts.status
    );
    let names: BTreeMap<String, String> = accounts
        .json()
        .as_array()
        .context("GET /service-accounts is not an array")?
        .iter()
        .filter_map(|a| Some((a["id"].as_str()?.to_owned(), a["name"].as_str()?.to_owned())))
        .collect();
    for (id, account) in &ledger.accounts {
        ensure!(
            names.get(id) == Some(&account.name),
            "account {id}: {:?} listed, {:?} acknowledged",
            names.get(id),
            account.name
        );
        let mine = http.call("GET", "/services", Some(&account.token), None)?;
        ensure!(
            mine.status == 200,
            "the last token of account {id} → {}",
            mine.status
        );
        verified.accounts += 1;
    }
    for retired in &ledger.retired_tokens {
        let answer = http.call("GET", "/services", Some(retired), None)?;
        ensure!(
            answer.status == 401,
            "a retired token → {} (wanted 401)",
            answer.status
        );
        verified.retired_tokens += 1;
    }

    let margin = std::time::Duration::from_secs(1);
    for anonymous in &ledger.anonymous {
        let host = format!("{}.localhost:{port}", anonymous.subdomain);
        // Checking thousands takes longer than their lifetime: each is judged by the clock
        // around its own request.
        let before = Instant::now();
        let hosted = http.send("GET", "/openid/v1/jwks", None, None, Some(&host))?;
        let after = Instant::now();
        let gone = anonymous.deleted || before > anonymous.expires_latest + margin;
        if gone {
            ensure!(
                hosted.status == 404,
                "anonymous {} should be gone (deleted: {}), hosted → {}",
                anonymous.subdomain,
                anonymous.deleted,
                hosted.status
            );
            verified.anonymous_gone += 1;
        } else if after + margin < anonymous.expires_earliest {
            ensure!(
                hosted.status == 200 && first_kid(&hosted.json()) == Some(anonymous.kid.as_str()),
                "anonymous {} should be live, hosted → {}",
                anonymous.subdomain,
                hosted.status
            );
            let api = http.call(
                "GET",
                &format!("/services/{}", anonymous.subdomain),
                Some(&anonymous.secret),
                None,
            )?;
            ensure!(
                api.status == 200,
                "anonymous {} with its secret → {}",
                anonymous.subdomain,
                api.status
            );
            verified.anonymous_live += 1;
        }
    }
    Ok(verified)
}
