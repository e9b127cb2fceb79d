//! Recording federated requests refused after their signature verified (docs/api.md, "Explaining
//! refusals"), for the owner of the accounts that trust the token's issuer. Runs on refused
//! requests only: the accepted path neither calls it nor pays for it.

use registry_domain::ports::{ActivityLog, VerifiedToken};
use registry_domain::refusal::{self, Refused, RefusedBy};
use registry_domain::{Service, ServiceAccount};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use time::OffsetDateTime;
use uuid::Uuid;

/// Refusals recorded per account, class and minute, at most: the log keeps the newest 100 of
/// each class, and a flood of refused tokens must not become a flood of writes. Near misses of
/// the account's rules and the rest each have this budget (docs/api.md, "Explaining refusals"):
/// holders of a shared issuer's tokens use up the second only, never the owner's.
const PER_ACCOUNT_PER_MINUTE: u32 = 30;
/// Budgets tracked before the counts start again (a bound on memory).
const MAX_TRACKED: usize = 100_000;

/// How many refusals each account recorded in the current minute, per class (near or not).
#[derive(Debug, Default)]
pub struct RefusalBudget {
    counts: Mutex<HashMap<(Uuid, bool), (i64, u32)>>,
}

impl RefusalBudget {
    fn allows(&self, account: Uuid, near: bool, minute: i64) -> bool {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (account, near);
        if counts.len() >= MAX_TRACKED && !counts.contains_key(&key) {
            counts.clear();
        }
        let (at, n) = counts.entry(key).or_insert((minute, 0));
        if *at != minute {
            (*at, *n) = (minute, 0);
        }
        *n += 1;
        *n <= PER_ACCOUNT_PER_MINUTE
    }
}

/// A refused federated request, as the auth module saw it.
#[derive(Clone, Copy)]
pub struct RefusedRequest<'a> {
    /// The client's address.
    pub ip: IpAddr,
    /// Its verified token.
    pub token: &'a VerifiedToken,
    /// The accounts (of any customer) that trust the token's issuer.
    pub candidates: &'a [Arc<ServiceAccount>],
    /// The account the client chose.
    pub chosen: Option<Uuid>,
    /// The service in the path, when it exists; or the subdomain of a service the call would
    /// have created, which no one owns yet.
    pub service: Option<Named<'a>>,
    /// The action the call needed.
    pub action: registry_domain::policy::Action,
    /// What refused it.
    pub refused_by: RefusedBy,
}

/// The service a refused call acted on.
#[derive(Clone, Copy)]
pub enum Named<'a> {
    /// One that exists.
    Existing(&'a Service),
    /// One the call would have created, under this subdomain.
    New(&'a str),
}

impl<'a> Named<'a> {
    fn owner(self) -> Option<Uuid> {
        match self {
            Named::Existing(service) => service.customer_id,
            Named::New(_) => None,
        }
    }

    fn subdomain(self) -> &'a str {
        match self {
            Named::Existing(service) => &service.subdomain,
            Named::New(subdomain) => subdomain,
        }
    }
}

/// Records `refused` against the accounts that trust its issuer within one customer. A failure
/// to write is logged: the answer stays the 401 or 403 it was.
impl RefusalBudget {
    /// Records `refused` in the refusal log of the accounts' owner, within each account's
    /// budget for this minute.
    pub async fn record(
        &self,
        activity: &Arc<dyn ActivityLog>,
        at: OffsetDateTime,
        refused: RefusedRequest<'_>,
    ) {
        let chosen_owner = refused.chosen.and_then(|id| {
            refused
                .candidates
                .iter()
                .find(|a| a.id == id)
                .map(|a| a.customer_id)
        });
        let customers: Vec<Uuid> = refused.candidates.iter().map(|a| a.customer_id).collect();
        let Some(customer) = refusal::recording_customer(
            refused.service.and_then(Named::owner),
            chosen_owner,
            &customers,
        ) else {
            return;
        };
        let minute = at.unix_timestamp().div_euclid(60);
        let request_id = crate::request_id();
        let facts = Refused {
            claims: &refused.token.claims,
            service: refused.service.map(Named::subdomain),
            action: refused.action,
            ip: refused.ip,
            refused_by: refused.refused_by,
            request_id: request_id.as_deref(),
            at,
        };
        let records: Vec<(Uuid, serde_json::Value)> = refused
            .candidates
            .iter()
            .filter(|a| a.customer_id == customer)
            .filter_map(|a| Some((a.id, refusal::record(&a.policy, &facts)?)))
            .filter(|(id, record)| {
                let near = refusal::is_near_record(record);
                self.allows(*id, near, minute)
            })
            .collect();
        if records.is_empty() {
            return;
        }
        let activity = Arc::clone(activity);
        let recorded =
            registry_replica::blocking(move || activity.record_refusals(&records, at)).await;
        if let Ok(Err(error)) = recorded {
            tracing::warn!(%error, "could not record a refused request");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn far_refusals_never_use_up_the_near_budget() {
        let budget = RefusalBudget::default();
        let account = Uuid::from_u128(1);
        for _ in 0..200 {
            budget.allows(account, false, 7);
        }
        assert!(!budget.allows(account, false, 7));
        assert!(budget.allows(account, true, 7));
        assert!(
            budget.allows(account, false, 8),
            "a new minute, a new budget"
        );
        for _ in 1..PER_ACCOUNT_PER_MINUTE {
            assert!(budget.allows(account, true, 7));
        }
        assert!(!budget.allows(account, true, 7));
    }
}
