//! The ledger of acknowledged writes, shared by the fault chores and the soak: what writers sent
//! and what the server answered, and the check that the server holds exactly that afterwards
//! (after a `kill -9`, a database crash, a restart, or minutes of load).
//!
//! A write the server acknowledged must be there. A write that got no answer, or a 5xx, may or
//! may not have happened (it was in flight when something crashed): the ledger keeps it as an
//! alternative, and the check accepts either outcome, but nothing else.
//!
//! `ledger/writer.rs` sends writes and records what became of them, `ledger/verify.rs` checks the
//! server against the ledger, and `ledger/audit.rs` checks the audit trail against both.

mod audit;
mod verify;
mod writer;

pub use verify::{kids, Verified};
pub use writer::{Sent, Writer};

use anyhow::Result;
use registry_testkit::http::Http;
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

/// The tenant of the customer whose writes the chores follow: its services are `{name}-acme`.
pub const TENANT: &str = "acme";
/// How many retired tokens are checked at the end (each check is a failed authentication, and
/// those are rate limited per client address).
const RETIRED_KEPT: usize = 50;
/// How many problem descriptions are kept (all are counted).
const PROBLEMS_KEPT: usize = 50;

/// Whether a write was acknowledged, or may or may not have happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ack {
    Acked,
    Unsure,
}

/// A value as writes left it: the last acknowledged one, and those of later writes that got no
/// answer, any of which the server may hold instead.
#[derive(Debug, Clone)]
pub struct Written<T> {
    pub acked: T,
    pub unsure: Vec<T>,
}

impl<T: PartialEq> Written<T> {
    pub fn new(value: T) -> Written<T> {
        Written {
            acked: value,
            unsure: Vec::new(),
        }
    }

    fn write(&mut self, value: T, ack: Ack) {
        match ack {
            Ack::Acked => *self = Written::new(value),
            Ack::Unsure => self.unsure.push(value),
        }
    }

    pub fn may_be(&self, value: &T) -> bool {
        self.any(|v| v == value)
    }

    pub fn any(&self, test: impl Fn(&T) -> bool) -> bool {
        test(&self.acked) || self.unsure.iter().any(test)
    }
}

/// A registered service.
#[derive(Debug, Clone)]
pub struct Service {
    pub exists: Written<bool>,
    pub title: Written<String>,
    /// The `kid`s of the last uploaded key set (retired keys follow them in the published set);
    /// `None` while nothing is published.
    pub keys: Written<Option<Vec<String>>>,
}

impl Service {
    /// A service just created (or, unsure, perhaps created) with `title`.
    fn created(title: &str, ack: Ack) -> Service {
        let mut exists = Written::new(false);
        exists.write(true, ack);
        Service {
            exists,
            title: Written::new(title.to_owned()),
            keys: Written::new(None),
        }
    }
}

/// A static service account.
#[derive(Debug, Clone)]
pub struct Account {
    pub exists: Written<bool>,
    pub name: Written<String>,
    /// Its token; `""` for the one a regeneration without an answer may have made.
    pub token: Written<String>,
    /// The services its policy names: all it sees.
    pub services: Vec<String>,
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

/// One change as the audit trail names it: the action, and the resource's subdomain, account id,
/// or `?` for an account whose creation got no answer (its id is unknown).
type Change = (String, String);

/// What writers sent and what the server answered.
#[derive(Debug, Default)]
pub struct Ledger {
    pub services: BTreeMap<String, Service>,
    /// By id.
    pub accounts: BTreeMap<String, Account>,
    /// Tokens replaced by regeneration or belonging to deleted accounts (the newest ones).
    pub retired_tokens: VecDeque<String>,
    pub anonymous: Vec<Anonymous>,
    /// Acknowledged writes by kind, for reports.
    pub acknowledged: BTreeMap<&'static str, u64>,
    /// Reads of one's own writes, checked while the writers ran.
    pub reads_checked: u64,
    /// Unexpected answers, transport errors, stale reads: counted, the first ones described.
    pub problem_count: u64,
    pub problems: Vec<String>,
    /// 503 `unavailable` answers to writes.
    pub unavailable: u64,
    /// Other 5xx answers to writes, with their bodies.
    pub server_errors: Vec<String>,
    /// The customer's audit trail when the ledger began: changes made before it.
    baseline: BTreeMap<Change, u64>,
    acked_changes: BTreeMap<Change, u64>,
    unsure_changes: BTreeMap<Change, u64>,
}

impl Ledger {
    /// A ledger of the writes to come, made with `token` (a `*` account of [`TENANT`]).
    pub fn new(http: Http, token: &str) -> Result<Ledger> {
        Ok(Ledger {
            baseline: audit::Trail::read(http, token)?.counts,
            ..Ledger::default()
        })
    }

    pub fn acknowledge(&mut self, kind: &'static str) {
        *self.acknowledged.entry(kind).or_default() += 1;
    }

    pub fn acknowledged(&self, kind: &str) -> u64 {
        self.acknowledged.get(kind).copied().unwrap_or_default()
    }

    pub fn problem(&mut self, description: String) {
        self.problem_count += 1;
        if self.problems.len() < PROBLEMS_KEPT {
            self.problems.push(description);
        }
    }

    fn change(&mut self, action: &str, resource: &str, ack: Ack) {
        let changes = match ack {
            Ack::Acked => &mut self.acked_changes,
            Ack::Unsure => &mut self.unsure_changes,
        };
        *changes
            .entry((action.to_owned(), resource.to_owned()))
            .or_default() += 1;
    }

    fn retire(&mut self, token: String) {
        self.retired_tokens.push_back(token);
        if self.retired_tokens.len() > RETIRED_KEPT {
            self.retired_tokens.pop_front();
        }
    }

    pub fn service_created(&mut self, subdomain: &str, title: &str, ack: Ack) {
        self.change("service.create", subdomain, ack);
        match self.services.get_mut(subdomain) {
            Some(service) if ack == Ack::Unsure => {
                service.exists.write(true, ack);
                service.title.write(title.to_owned(), ack);
                service.keys.write(None, ack);
            }
            _ => {
                self.services
                    .insert(subdomain.to_owned(), Service::created(title, ack));
            }
        }
    }

    fn service(&mut self, subdomain: &str) -> &mut Service {
        self.services
            .entry(subdomain.to_owned())
            .or_insert_with(|| Service::created("", Ack::Unsure))
    }

    /// Follows a service made before the ledger began, titled `title`, nothing published.
    pub fn follow(&mut self, subdomain: &str, title: &str) {
        self.services
            .insert(subdomain.to_owned(), Service::created(title, Ack::Acked));
    }

    pub fn service_retitled(&mut self, subdomain: &str, title: &str, ack: Ack) {
        self.change("service.update", subdomain, ack);
        self.service(subdomain).title.write(title.to_owned(), ack);
    }

    /// A configuration published with the key set `kids`, or (`None`) withdrawn.
    pub fn service_published(&mut self, subdomain: &str, kids: Option<Vec<String>>, ack: Ack) {
        let action = if kids.is_some() {
            "config.put"
        } else {
            "config.delete"
        };
        self.change(action, subdomain, ack);
        self.service(subdomain).keys.write(kids, ack);
    }

    pub fn service_deleted(&mut self, subdomain: &str, ack: Ack) {
        self.change("service.delete", subdomain, ack);
        self.service(subdomain).exists.write(false, ack);
    }

    /// An account created as `name` over `services`: its id and token, unknown when the server
    /// did not answer.
    pub fn account_created(
        &mut self,
        created: Option<(&str, &str)>,
        name: &str,
        services: &[String],
        ack: Ack,
    ) {
        let Some((id, token)) = created else {
            return self.change("account.create", "?", ack);
        };
        self.change("account.create", id, ack);
        let account = Account {
            exists: Written::new(true),
            name: Written::new(name.to_owned()),
            token: Written::new(token.to_owned()),
            services: services.to_vec(),
        };
        self.accounts.insert(id.to_owned(), account);
    }

    pub fn account_renamed(&mut self, id: &str, name: &str, ack: Ack) {
        self.change("account.update", id, ack);
        if let Some(account) = self.accounts.get_mut(id) {
            account.name.write(name.to_owned(), ack);
        }
    }

    /// A token regenerated: the new one, `None` when the server did not answer.
    pub fn token_regenerated(&mut self, id: &str, token: Option<&str>, ack: Ack) {
        self.change("account.regenerate-token", id, ack);
        if let Some(account) = self.accounts.get_mut(id) {
            let old = account.token.acked.clone();
            account
                .token
                .write(token.unwrap_or_default().to_owned(), ack);
            if ack == Ack::Acked {
                self.retire(old);
            }
        }
    }

    pub fn account_deleted(&mut self, id: &str, ack: Ack) {
        self.change("account.delete", id, ack);
        if let Some(account) = self.accounts.get_mut(id) {
            account.exists.write(false, ack);
            let token = account.token.acked.clone();
            if ack == Ack::Acked {
                self.retire(token);
            }
        }
    }
}

/// Locks the shared ledger (a panicking writer must not hide what the others acknowledged).
pub fn locked(ledger: &Mutex<Ledger>) -> MutexGuard<'_, Ledger> {
    ledger.lock().unwrap_or_else(|e| e.into_inner())
}
