//! A service's custom domain (docs/api.md, "Custom domains"): set, read, remove, and the worker's
//! step ([`advance`]) that takes a domain from `verifying` to `active` and renews it, over the
//! ports of what leaves the process ([`Outside`]: the certificate authority, the DNS lookup, the
//! sealing key); the rules it follows are [`crate::custom_domain`]'s.

use crate::app::{AppError, Caller, Registry};
use crate::audit::{Action, Actor, AuditEvent, Resource};
use crate::custom_domain::{
    check_domain, in_fair_order, may_order, CustomDomain, DomainCertificate, DomainProblem,
    DomainStatus, DomainWork, Schedule, ACCOUNT_WINDOW, BUDGET_WAIT, DOMAIN_TAKEN, ORDER_LOCK,
};
use crate::ports::{
    AcmeChallenge, AcmeOrder, Ceiling, CertificateAuthority, OwnershipCheck, Sealing,
};
use crate::{Service, StoreError};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::Value;
use time::{Duration, OffsetDateTime};

/// The 404 of a service with no custom domain.
pub fn no_domain(subdomain: &str) -> AppError {
    AppError::NotFound(format!("{subdomain:?} has no custom domain"))
}

/// `PUT /services/{s}/domain` `{domain}`: the domain to serve the service's documents under,
/// verifying from now on; the same domain again changes nothing. Another service's domain is a
/// 409 `domain-taken`; without an ACME directory, a 409 `custom-domains-disabled`.
pub fn set(
    registry: &Registry,
    caller: &Caller,
    service: &Service,
    domain: &str,
    now: OffsetDateTime,
) -> Result<CustomDomain, AppError> {
    // Who may ask, and what was asked, are answered whatever the operator's settings.
    registered_only(service)?;
    check_domain(domain, &registry.settings.issuers).map_err(|v| AppError::Invalid(vec![v]))?;
    if !registry.settings.custom_domains {
        return Err(AppError::CustomDomainsDisabled(
            "custom domains are not enabled on this registry (the operator sets \
             REGISTRY_ACME_DIRECTORY)"
                .into(),
        ));
    }
    // A PUT that lost a race with another write to the service's domain (or read a lagging
    // copy) decides again from what the write found: two PUTs of one name at once answer the
    // same TXT record.
    let mut current = registry.store.domain_of(service.id)?;
    for _ in 0..PUT_ATTEMPTS {
        match put_once(registry, caller, service, domain, current, now)? {
            Ok(set) => return Ok(set),
            Err(found) => current = found,
        }
    }
    Err(AppError::Conflict(
        "the service's domain kept changing meanwhile: try again".to_owned(),
    ))
}

/// How often a PUT decides again after another write to the service's domain won the race.
const PUT_ATTEMPTS: usize = 4;

/// One attempt of [`set`] over `current`, the service's domain as last read: `Err` with the
/// domain the write found instead when that was not it.
fn put_once(
    registry: &Registry,
    caller: &Caller,
    service: &Service,
    domain: &str,
    current: Option<CustomDomain>,
    now: OffsetDateTime,
) -> Result<Result<CustomDomain, Option<CustomDomain>>, AppError> {
    // The same domain again changes nothing, unless it failed: a PUT starts it over.
    if let Some(current) = current
        .as_ref()
        .filter(|c| c.status != DomainStatus::Failed)
    {
        if current.domain == domain {
            return Ok(Ok(current.clone()));
        }
    }
    // A name another service holds is refused as such first: no claim would come of it, so the
    // customer's pending claims are beside the point.
    let held_elsewhere = (registry.store.domain_named(domain)?)
        .is_some_and(|named| named.is_held() && named.service_id != service.id);
    if held_elsewhere {
        return Err(taken(domain));
    }
    // The same name started over keeps its TXT record (a PUT of the domain the service has
    // answers the same records): its owner set it once.
    let txt_token = match current.as_ref().filter(|c| c.domain == domain) {
        Some(again) => again.txt_token.clone(),
        None => {
            let mut token = [0u8; 24];
            registry.random.fill_bytes(&mut token);
            URL_SAFE_NO_PAD.encode(token)
        }
    };
    let added = CustomDomain::new(service.id, domain.to_owned(), txt_token, now);
    let mut event = caller.service_event(Action::DomainPut, service, now);
    // The event says what changed: the domain set, or the one replaced (or a failed one
    // started over), and its status.
    let (old_domain, old_status) = match &current {
        Some(old) => (old.domain.as_str().into(), old.status.as_str().into()),
        None => (Value::Null, Value::Null),
    };
    event = event
        .with_change("domain", old_domain, domain.into())
        .with_change("status", old_status, added.status.as_str().into());
    // Unproven claims are bounded per customer (each costs every replica's worker lookups),
    // counted in the write's own transaction: claims at once never pass the bound together.
    let most = registry.settings.max_pending_domains;
    let pending = match service.customer_id {
        Some(_) => Ceiling(u64::try_from(most).unwrap_or(u64::MAX)),
        None => Ceiling::NONE,
    };
    match (registry.store).put_domain(&added, current.as_ref(), pending, &event) {
        Ok(written) => Ok(written.map(|()| added)),
        Err(StoreError::Conflict(_)) => Err(taken(domain)),
        Err(StoreError::NotFound) => Err(crate::app::services::not_found(&service.subdomain)),
        Err(StoreError::CeilingReached(_)) => Err(AppError::TooManyPendingDomains(format!(
            "your services have {most} custom domains waiting for their TXT record; at most \
             {most} may wait at once: prove or remove one first"
        ))),
        Err(other) => Err(other.into()),
    }
}

/// The refusal of a name another service holds (it names neither that service nor its owner).
fn taken(domain: &str) -> AppError {
    AppError::DomainTaken(format!(
        "{domain:?} is held by another service, whose owner proved it with the TXT record"
    ))
}

/// The refusal of every domain call on an anonymous service: see
/// [`crate::app::registered_only`].
pub fn registered_only(service: &Service) -> Result<(), AppError> {
    crate::app::registered_only(service, "a custom domain")
}

/// `GET /services/{s}/domain`.
pub fn get(registry: &Registry, service: &Service) -> Result<CustomDomain, AppError> {
    registered_only(service)?;
    registry
        .store
        .domain_of(service.id)?
        .ok_or_else(|| no_domain(&service.subdomain))
}

/// A `domain.delete` event saying which domain went.
fn deleted(event: AuditEvent, domain: &CustomDomain) -> AuditEvent {
    event.with_change("domain", domain.domain.as_str().into(), Value::Null)
}

/// `DELETE /services/{s}/domain`: no longer served, its certificate and key deleted.
pub fn remove(
    registry: &Registry,
    caller: &Caller,
    service: &Service,
    now: OffsetDateTime,
) -> Result<(), AppError> {
    registered_only(service)?;
    let Some(current) = registry.store.domain_of(service.id)? else {
        return Err(no_domain(&service.subdomain));
    };
    let event = caller.service_event(Action::DomainDelete, service, now);
    let event = deleted(event, &current);
    if registry.store.delete_domain(service.id, None, &event)? {
        Ok(())
    } else {
        Err(no_domain(&service.subdomain))
    }
}

/// The issuer a call describes (`?issuer=` of preflight and the wiring guide): the subdomain's
/// when `asked` is `None`; else `asked` when it is the subdomain's issuer or the issuer of the
/// service's custom domain once it is served; any other issuer is a 400.
pub fn issuer(
    registry: &Registry,
    service: &Service,
    asked: Option<&str>,
) -> Result<String, AppError> {
    let own = registry.issuer_of(&service.subdomain);
    let Some(asked) = asked.filter(|a| *a != own) else {
        return Ok(own);
    };
    let custom = registry
        .store
        .domain_of(service.id)?
        .filter(CustomDomain::is_served)
        .map(|d| d.issuer());
    match custom {
        Some(custom) if custom == asked => Ok(custom),
        custom => Err(AppError::BadRequest(format!(
            "query parameter issuer: {asked:?} is not an issuer of {:?}; its issuers are {}",
            service.subdomain,
            std::iter::once(own)
                .chain(custom)
                .map(|i| format!("{i:?}"))
                .collect::<Vec<_>>()
                .join(" and ")
        ))),
    }
}

/// Up to `limit` domains with `work` to do at `now`, in the order the worker serves them
/// ([`in_fair_order`]: renewals before new orders, customers in turn).
pub fn due(
    registry: &Registry,
    now: OffsetDateTime,
    work: DomainWork,
    limit: usize,
) -> Result<Vec<CustomDomain>, AppError> {
    let due = registry.store.domains_due(now, work, limit)?;
    let mut with_customers = Vec::with_capacity(due.len());
    for domain in due {
        let customer = (registry.store.service(domain.service_id)?).and_then(|s| s.customer_id);
        with_customers.push((domain, customer));
    }
    Ok(in_fair_order(with_customers))
}

/// What the worker's step needs from outside the process, and its schedule.
#[derive(Clone, Copy)]
pub struct Outside<'a> {
    /// Where certificates are ordered.
    pub authority: &'a dyn CertificateAuthority,
    /// The TXT lookups that prove ownership.
    pub dns: &'a dyn OwnershipCheck,
    /// What seals the ACME account and the certificates' keys.
    pub sealing: &'a dyn Sealing,
    /// When to look again, retry, renew.
    pub schedule: &'a Schedule,
}

impl std::fmt::Debug for Outside<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outside")
            .field("directory", &self.authority.directory())
            .field("schedule", &self.schedule)
            .finish_non_exhaustive()
    }
}

/// What one step of one domain did, for the worker's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing to do (a failed domain).
    Nothing,
    /// The TXT record was looked up: whether it proved ownership, and why a lookup failed
    /// (a failed lookup counts as not found: it is looked up again later).
    Looked {
        /// Ownership proven.
        proven: bool,
        /// The lookup's failure, if it failed.
        failed: Option<String>,
    },
    /// Another replica holds the domain's ordering lock.
    Locked,
    /// The ACME budget is spent: put off.
    PutOff,
    /// A certificate was ordered: until when it is valid, or why the order failed.
    Ordered(Result<OffsetDateTime, String>),
}

/// One step of the worker for `domain` at `clock()` (docs/api.md, "Custom domains"): a TXT
/// lookup of a claim being verified, recorded (`looked`); or, for a domain to issue or renew,
/// under the domain's ordering lock (one replica at a time) and within the ACME budget, an
/// order, its HTTP-01 answers stored for every replica to serve, its key sealed, recorded with
/// the next step's time, counted from when the order ended (it may take minutes: a retry's
/// wait counted from its start would be over before it began). Every write is this function's:
/// the caller settles it on its replica.
pub fn advance(
    registry: &Registry,
    outside: &Outside<'_>,
    domain: CustomDomain,
    clock: &dyn Fn() -> OffsetDateTime,
) -> Result<Step, AppError> {
    let now = clock();
    match domain.status {
        DomainStatus::Verifying => {
            let holds = outside
                .dns
                .holds(&domain.challenge_name(), &domain.txt_token);
            let proven = holds == Ok(true);
            let checked = domain.clone().checked(proven, outside.schedule, now);
            looked(registry, &domain, checked, now)?;
            Ok(Step::Looked {
                proven,
                failed: holds.err(),
            })
        }
        DomainStatus::Issuing | DomainStatus::Active => {
            if !lock(registry, &domain, now + ORDER_LOCK, now)? {
                return Ok(Step::Locked);
            }
            if !take_order(registry, &domain, outside.authority.directory(), now)? {
                return Ok(Step::PutOff);
            }
            let outcome = order(registry, outside, &domain.domain, now);
            let step = Step::Ordered(outcome.as_ref().map(|c| c.not_after).map_err(Clone::clone));
            let next = domain.clone().ordered(outcome, outside.schedule, clock());
            progress(registry, &domain, &next)?;
            Ok(step)
        }
        DomainStatus::Failed => Ok(Step::Nothing),
    }
}

/// A certificate for `domain` by the authority: the directory's account (made once, kept
/// sealed, the same for every replica), the HTTP-01 answers stored, the new key sealed. `Err`
/// is the sentence the domain's `error` shows.
fn order(
    registry: &Registry,
    outside: &Outside<'_>,
    domain: &str,
    now: OffsetDateTime,
) -> Result<DomainCertificate, String> {
    let account = acme_account(registry, outside)?;
    let mut publish = |challenge: &AcmeChallenge| {
        (registry.store)
            .put_challenge(domain, &challenge.token, &challenge.key_authorization, now)
            .map_err(|e| format!("storing the HTTP-01 answer: {e}"))
    };
    let issued = outside.authority.order(&account, domain, &mut publish)?;
    Ok(DomainCertificate {
        sealed_key: outside.sealing.seal(issued.key_pem.as_bytes()),
        chain_pem: issued.chain_pem,
        not_before: issued.not_before,
        not_after: issued.not_after,
        issuer: issued.issuer,
    })
}

/// The credentials of the ACME account of the authority's directory: the one kept (by
/// whichever replica made it first), or a new one, kept.
fn acme_account(registry: &Registry, outside: &Outside<'_>) -> Result<String, String> {
    let directory = outside.authority.directory();
    let stored = |e: StoreError| format!("the ACME account: {e}");
    let sealed = match registry.store.acme_account(directory).map_err(stored)? {
        Some(sealed) => sealed,
        None => {
            let made = outside.authority.new_account()?;
            let sealed = outside.sealing.seal(made.as_bytes());
            // Another replica may have kept one first: that one is everyone's.
            (registry.store)
                .put_acme_account(directory, &sealed)
                .map_err(stored)?
        }
    };
    let opened = outside.sealing.open(&sealed)?;
    String::from_utf8(opened).map_err(|_| "the stored ACME account is not text".to_owned())
}

/// The HTTP-01 answers stored for `host` (token, answer), the newest first.
pub fn challenges(registry: &Registry, host: &str) -> Result<Vec<(String, String)>, AppError> {
    Ok(registry.store.challenges(host)?)
}

/// Takes the ordering lock of the domain `was` until `until`: `false` when another replica
/// holds it, or another step changed the domain since it was read.
fn lock(
    registry: &Registry,
    was: &CustomDomain,
    until: OffsetDateTime,
    now: OffsetDateTime,
) -> Result<bool, AppError> {
    Ok(registry.store.lock_domain(was, until, now)?)
}

/// Takes one order of the ACME account of `directory` for `domain` at `now`, when the budget
/// allows it (docs/api.md, "Custom domains": 3 new orders per customer an hour, 250 orders per
/// account in 3 hours): `true`, recorded, whichever replica asks next sees it; `false` when the
/// budget is spent, and the domain is put off ([`BUDGET_WAIT`]).
fn take_order(
    registry: &Registry,
    domain: &CustomDomain,
    directory: &str,
    now: OffsetDateTime,
) -> Result<bool, AppError> {
    let customer = (registry.store.service(domain.service_id)?).and_then(|s| s.customer_id);
    let renewal = domain.renews();
    let order = AcmeOrder {
        directory,
        domain: &domain.domain,
        customer_id: customer,
        renewal,
        at: now,
        customer_since: now - Duration::hours(1),
        account_since: now - ACCOUNT_WINDOW,
    };
    let admits = |new_orders, orders| may_order(renewal, new_orders, orders);
    if !registry.store.take_acme_order(&order, &admits)? {
        let later = domain.clone().postponed(now + BUDGET_WAIT);
        registry.store.update_domain(domain, &later)?;
        return Ok(false);
    }
    Ok(true)
}

/// Records the worker's step from `was` to `next`, unless the domain changed meanwhile.
fn progress(
    registry: &Registry,
    was: &CustomDomain,
    next: &CustomDomain,
) -> Result<bool, AppError> {
    Ok(registry.store.update_domain(was, next)?)
}

/// Records a TXT lookup's outcome (`looked`: the claim `was` after [`CustomDomain::checked`])
/// at `now`: a claim proven holds the name, and every other service's claim of it turns failed
/// (`domain-taken`), unless another service proved it first (then this one fails so); a claim
/// not proven in time is deleted, its name free again (a `system` event); any other outcome is
/// recorded as it is. Every replica looks: another may have proven the claim, or its owner
/// replaced or removed it, while this lookup waited; each write is made only to the claim as it
/// was looked up (`was`), so that no late outcome undoes one recorded meanwhile.
fn looked(
    registry: &Registry,
    was: &CustomDomain,
    looked: CustomDomain,
    now: OffsetDateTime,
) -> Result<bool, AppError> {
    let taken = DomainProblem {
        code: DOMAIN_TAKEN.into(),
        message: format!(
            "another service proved {} with its TXT record first",
            looked.domain
        ),
    };
    match looked.status {
        DomainStatus::Issuing => {
            if registry.store.hold_domain(was, &looked, &taken)? {
                return Ok(true);
            }
            let refused = CustomDomain {
                status: DomainStatus::Failed,
                problem: Some(taken),
                ..looked
            };
            Ok(registry.store.update_domain(was, &refused)?)
        }
        DomainStatus::Failed => {
            let Some(service) = registry.store.service(looked.service_id)? else {
                return Ok(false);
            };
            let event = AuditEvent::new(
                Action::DomainDelete,
                Resource::service(service.id, &service.subdomain),
                Actor::system(),
                service.customer_id,
                now,
            );
            let event = deleted(event, was);
            Ok(registry
                .store
                .delete_domain(service.id, Some(was), &event)?)
        }
        _ => Ok(registry.store.update_domain(was, &looked)?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::services::{self, CreateService};
    use crate::app::testing::{caller, registry_over, MemoryStore};
    use crate::custom_domain::DomainStatus;
    use crate::ports::DomainStore;
    use crate::Plan;
    use std::sync::Arc;
    use time::macros::datetime;

    const NOW: OffsetDateTime = datetime!(2026-11-28 10:00 UTC);

    /// A registry with custom domains on (or off), its store, and two services of one caller.
    fn two_services(enabled: bool) -> (Registry, Arc<MemoryStore>, Caller, Service, Service) {
        let store = Arc::new(MemoryStore::default());
        let (mut registry, _, account) = registry_over(store.clone(), Plan::Business, NOW);
        registry.settings.custom_domains = enabled;
        let caller = caller(account);
        let create =
            || services::create(&registry, &caller, CreateService::default(), NOW).unwrap();
        let (a, b) = (create(), create());
        (registry, store, caller, a, b)
    }

    #[test]
    fn a_domain_is_set_once_held_by_one_service_and_removed() {
        let (registry, store, caller, a, b) = two_services(true);
        let added = set(&registry, &caller, &a, "login.acme.com", NOW).unwrap();
        assert_eq!(added.status, DomainStatus::Verifying);
        assert_eq!(added.txt_token.len(), 32);
        let again = set(&registry, &caller, &a, "login.acme.com", NOW).unwrap();
        assert_eq!(
            again.txt_token, added.txt_token,
            "the same domain changes nothing"
        );
        assert!(matches!(
            set(&registry, &caller, &b, "Login.acme.com", NOW),
            Err(AppError::Invalid(_))
        ));
        remove(&registry, &caller, &a, NOW).unwrap();
        assert!(matches!(get(&registry, &a), Err(AppError::NotFound(_))));
        assert!(store.domain_named("login.acme.com").unwrap().is_none());
        assert!(matches!(
            remove(&registry, &caller, &a, NOW),
            Err(AppError::NotFound(_))
        ));
        assert_eq!(store.events_of(Action::DomainPut).len(), 1);
        assert_eq!(store.events_of(Action::DomainDelete).len(), 1);
        // Free again: the other service takes it.
        assert!(set(&registry, &caller, &b, "login.acme.com", NOW).is_ok());
        let first = store.events_of(Action::DomainPut).pop().unwrap();
        assert_eq!(
            first.to_json()["changes"],
            serde_json::json!({"domain": {"old": null, "new": "login.acme.com"},
                "status": {"old": null, "new": "verifying"}}),
            "a first domain says which"
        );
        let gone = store.events_of(Action::DomainDelete).pop().unwrap();
        assert_eq!(
            gone.to_json()["changes"],
            serde_json::json!({"domain": {"old": "login.acme.com", "new": null}})
        );
        // A failed claim started over keeps its records.
        let failed = CustomDomain {
            status: DomainStatus::Failed,
            ..store.domain_of(b.id).unwrap().unwrap()
        };
        let was = store.domain_of(b.id).unwrap().unwrap();
        assert!(store.update_domain(&was, &failed).unwrap());
        let again = set(&registry, &caller, &b, "login.acme.com", NOW).unwrap();
        assert_eq!(again.status, DomainStatus::Verifying);
        assert_eq!(again.txt_token, was.txt_token, "the same records");
        // Another name replaces it: the event says what changed.
        set(&registry, &caller, &b, "id.acme.com", NOW).unwrap();
        let replaced = store.events_of(Action::DomainPut).pop().unwrap();
        assert_eq!(
            replaced.to_json()["changes"],
            serde_json::json!({"domain": {"old": "login.acme.com", "new": "id.acme.com"}})
        );
    }

    /// The fourth security review: a domain is held only once proven; other claims of it are
    /// no conflict until then, and turn failed once another service proves it.
    #[test]
    fn a_domain_is_held_by_the_first_to_prove_it() {
        let (registry, store, caller, a, b) = two_services(true);
        let schedule = crate::custom_domain::Schedule::default();
        let claim_a = set(&registry, &caller, &a, "login.acme.com", NOW).unwrap();
        let claim_b = set(&registry, &caller, &b, "login.acme.com", NOW).unwrap();
        assert_ne!(claim_a.txt_token, claim_b.txt_token);
        // b proves it first: it holds the name, a's claim fails.
        let proven = claim_b.clone().checked(true, &schedule, NOW);
        assert!(looked(&registry, &claim_b, proven, NOW).unwrap());
        assert_eq!(get(&registry, &b).unwrap().status, DomainStatus::Issuing);
        let lost = get(&registry, &a).unwrap();
        assert_eq!(lost.status, DomainStatus::Failed);
        assert_eq!(lost.problem.unwrap().code, "domain-taken");
        // a's late proof, or a lookup that found nothing and ends after b's proof, changes
        // nothing; a new claim of the name is a 409 naming no one.
        let late = claim_a.clone().checked(true, &schedule, NOW);
        assert!(!looked(&registry, &claim_a, late, NOW).unwrap());
        let not_found = claim_a.clone().checked(false, &schedule, NOW);
        assert!(!looked(&registry, &claim_a, not_found, NOW).unwrap());
        assert_eq!(get(&registry, &a).unwrap().status, DomainStatus::Failed);
        let refused = set(&registry, &caller, &a, "login.acme.com", NOW);
        let Err(AppError::DomainTaken(detail)) = refused else {
            panic!("{refused:?}")
        };
        assert!(!detail.contains(&b.subdomain), "{detail}");
        assert_eq!(
            store
                .domain_named("login.acme.com")
                .unwrap()
                .unwrap()
                .service_id,
            b.id
        );
    }

    #[test]
    fn a_claim_not_proven_in_time_is_deleted_and_claims_are_bounded() {
        let (mut registry, store, caller, a, _) = two_services(true);
        let schedule = crate::custom_domain::Schedule::default();
        let claim = set(&registry, &caller, &a, "login.acme.com", NOW).unwrap();
        let later = NOW + schedule.give_up_after;
        let expired = claim.clone().checked(false, &schedule, later);
        assert!(looked(&registry, &claim, expired, later).unwrap());
        assert!(matches!(get(&registry, &a), Err(AppError::NotFound(_))));
        assert!(store.domain_named("login.acme.com").unwrap().is_none());
        let deleted = store.events_of(Action::DomainDelete);
        assert_eq!(deleted.len(), 1);
        assert_eq!(deleted[0].actor, Actor::system());

        registry.settings.max_pending_domains = 2;
        let create =
            || services::create(&registry, &caller, CreateService::default(), NOW).unwrap();
        let services: Vec<Service> = (0..3).map(|_| create()).collect();
        set(&registry, &caller, &services[0], "a.acme.com", NOW).unwrap();
        set(&registry, &caller, &services[1], "b.acme.com", NOW).unwrap();
        assert!(matches!(
            set(&registry, &caller, &services[2], "c.acme.com", NOW),
            Err(AppError::TooManyPendingDomains(_))
        ));
        // Replacing one's own claim is no new one.
        set(&registry, &caller, &services[1], "b2.acme.com", NOW).unwrap();
    }

    /// The worker's whole flow over the in-memory certificate authority, DNS and sealing key:
    /// verify, order, serve, renew, delete.
    #[test]
    fn a_domain_is_verified_ordered_renewed_and_deleted_by_the_worker() {
        use crate::testing::{MarkSealing, MemoryAuthority, MemoryDns};
        let (registry, store, caller, a, _) = two_services(true);
        let (authority, dns) = (
            MemoryAuthority::new("https://ca.test/dir"),
            MemoryDns::default(),
        );
        let schedule = Schedule::default();
        let outside = Outside {
            authority: &authority,
            dns: &dns,
            sealing: &MarkSealing,
            schedule: &schedule,
        };
        let step = |now| {
            let domain = get(&registry, &a).unwrap();
            advance(&registry, &outside, domain, &|| now).unwrap()
        };
        let claim = set(&registry, &caller, &a, "login.acme.com", NOW).unwrap();

        // Verify: a failed lookup and an absent record leave it verifying, looked up later.
        dns.set_down(true);
        let Step::Looked {
            proven: false,
            failed: Some(why),
        } = step(NOW)
        else {
            panic!("a failed lookup is a lookup")
        };
        assert!(
            why.contains("_registry-challenge") || why.contains("login.acme.com"),
            "{why}"
        );
        dns.set_down(false);
        assert_eq!(
            step(NOW),
            Step::Looked {
                proven: false,
                failed: None
            }
        );
        let waiting = get(&registry, &a).unwrap();
        assert_eq!(waiting.status, DomainStatus::Verifying);
        assert!(waiting.next_attempt_at > NOW);
        dns.put(&claim.challenge_name(), &claim.txt_token);
        assert_eq!(
            step(NOW),
            Step::Looked {
                proven: true,
                failed: None
            }
        );
        assert_eq!(get(&registry, &a).unwrap().status, DomainStatus::Issuing);

        // Order: one account, made once and kept sealed; the challenge stored for every
        // replica; the certificate's key sealed, never kept in the clear.
        authority.set_now(NOW);
        let Step::Ordered(Ok(not_after)) = step(NOW) else {
            panic!("the first order succeeds")
        };
        assert_eq!(not_after, NOW + Duration::days(90));
        let served = get(&registry, &a).unwrap();
        assert_eq!(served.status, DomainStatus::Active);
        let certificate = served.certificate.clone().unwrap();
        let key = MarkSealing.open(&certificate.sealed_key).unwrap();
        assert!(String::from_utf8(key).unwrap().contains("PRIVATE KEY"));
        assert!(!certificate.sealed_key.contains("PRIVATE KEY"));
        let kept = store.acme_account("https://ca.test/dir").unwrap().unwrap();
        assert!(kept.starts_with("sealed:"), "the account is kept sealed");
        assert_eq!(
            challenges(&registry, "login.acme.com").unwrap(),
            [("token-0".to_owned(), "token-0.thumbprint".to_owned())]
        );

        // While another replica holds the ordering lock, nothing is ordered.
        let renew = served.next_attempt_at;
        assert!(store
            .lock_domain(&served, renew + ORDER_LOCK, renew)
            .unwrap());
        assert_eq!(step(renew), Step::Locked);
        assert_eq!(authority.orders().len(), 1);

        // Renew: after the lock, at the renewal time, a new order under the same account; a
        // failed renewal keeps serving the certificate it has.
        let later = renew + ORDER_LOCK;
        authority.fail_with(Some("the ACME server is down"));
        // The order takes 200 s: its retry waits from when it ended, not from when it began.
        let asked = std::cell::Cell::new(0);
        let slow = || {
            asked.set(asked.get() + 1);
            match asked.get() {
                1 => later,
                _ => later + Duration::seconds(200),
            }
        };
        let domain = get(&registry, &a).unwrap();
        assert_eq!(
            advance(&registry, &outside, domain, &slow).unwrap(),
            Step::Ordered(Err("the ACME server is down".into()))
        );
        let kept_serving = get(&registry, &a).unwrap();
        assert!(kept_serving.next_attempt_at > later + Duration::seconds(200));
        assert_eq!(kept_serving.status, DomainStatus::Active);
        assert_eq!(kept_serving.certificate, Some(certificate.clone()));
        authority.fail_with(None);
        authority.set_now(later);
        // At its own time: the failed order released its lock.
        let retry = kept_serving.next_attempt_at;
        assert!(retry < later + ORDER_LOCK, "{retry} waits for the lock");
        let Step::Ordered(Ok(renewed)) = step(retry) else {
            panic!("the renewal succeeds")
        };
        assert_eq!(renewed, later + Duration::days(90));
        assert_eq!(authority.accounts_made(), 1, "one account, kept");
        let orders = authority.orders();
        assert_eq!(orders.len(), 3);
        assert!(orders.iter().all(|(account, domain, _)| {
            account == "{\"account\":1}" && domain == "login.acme.com"
        }));

        // Delete: no longer served, its certificate gone; a failed domain takes no step.
        remove(&registry, &caller, &a, retry).unwrap();
        assert!(store.domain_named("login.acme.com").unwrap().is_none());
        let failed = CustomDomain {
            status: DomainStatus::Failed,
            ..claim
        };
        assert_eq!(
            advance(&registry, &outside, failed, &|| retry).unwrap(),
            Step::Nothing
        );
    }

    #[test]
    fn the_in_memory_authority_keeps_the_authority_contract() {
        let authority = crate::testing::MemoryAuthority::new("https://ca.test/dir");
        crate::testing::authority_contract(&authority, "login.acme.com", &mut |_| Ok(()));
    }

    #[test]
    fn the_in_memory_dns_keeps_the_ownership_contract() {
        let dns = crate::testing::MemoryDns::default();
        crate::testing::ownership_contract(&dns, &mut |name, value| dns.put(name, value));
    }

    #[test]
    fn without_an_acme_directory_domains_are_refused() {
        let (registry, _, caller, a, _) = two_services(false);
        assert!(matches!(
            set(&registry, &caller, &a, "login.acme.com", NOW),
            Err(AppError::CustomDomainsDisabled(_))
        ));
    }
}
