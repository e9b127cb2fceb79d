//! The access decision (docs/api.md, "Authentication"): may this caller make this call, from this
//! address, now? One function, [`decide`], for static tokens, anonymous secrets and identity
//! tokens; and the rules of managing service accounts ([`may_manage`], [`may_regenerate_token`]).
//! The server authenticates (argon2, signatures) and finds the service; what follows is decided
//! here.
//!
//! The order of the answers is part of the contract: a credential that nobody accepts is a 401;
//! an address outside the account's `ip_allowlist` a 403; a service that is not the caller's
//! (or does not exist, or has expired) a 404, never a 403; a service the caller's patterns do
//! not cover a 403; an action the caller's policy does not allow a 403 naming the action
//! ([`Refusal::ActionNotAllowed`]). Every call names its [`Action`] (docs/api.md, "Actions").
//!
//! ```
//! use registry_domain::access::{decide, Credential, Refusal, Request};
//! use registry_domain::policy::{Action, Policy};
//! use registry_domain::{Service, ServiceAccount};
//! use serde_json::json;
//! use std::sync::Arc;
//! use time::macros::datetime;
//! use uuid::Uuid;
//!
//! let customer = Uuid::new_v4();
//! let now = datetime!(2026-11-23 12:00 UTC);
//! let account = Arc::new(ServiceAccount {
//!     id: Uuid::new_v4(),
//!     customer_id: customer,
//!     name: "deployer".into(),
//!     policy: Policy::parse(&json!({
//!         "$schema": "https://registry.example/schemas/service-account-policy/v2.json",
//!         "kind": "static", "services": ["api-acme"], "actions": ["config:read", "config:write"],
//!     })).unwrap().policy,
//!     created_at: now,
//!     last_used_at: None,
//! });
//! let service = |name: &str| Service {
//!     id: Uuid::new_v4(),
//!     customer_id: Some(customer),
//!     subdomain: name.into(),
//!     title: None,
//!     description: None,
//!     created_at: now,
//!     expires_at: None,
//! };
//! let ip = "192.0.2.1".parse().unwrap();
//! let (api, web) = (service("api-acme"), service("web-acme"));
//! let ask = |service, action| decide(Credential::Account(&account), Request::Service(service), action, ip, now);
//! assert!(ask(Some(&api), Action::ConfigWrite).is_ok());
//! assert!(matches!(ask(Some(&web), Action::ConfigWrite), Err(Refusal::Forbidden(_))));
//! assert_eq!(ask(None, Action::ConfigWrite).unwrap_err(), Refusal::NotFound);
//! // The service is covered, but deleting it is not among the account's actions.
//! assert_eq!(
//!     ask(Some(&api), Action::ServicesWrite).unwrap_err(),
//!     Refusal::ActionNotAllowed(Action::ServicesWrite)
//! );
//! ```

use crate::policy::{Action, Actions, Decision, DenyReason, Policy, PolicyKind};
use crate::{Service, ServiceAccount};
use serde_json::{Map, Value};
use std::net::IpAddr;
use std::sync::Arc;
use time::OffsetDateTime;
use uuid::Uuid;

/// A credential the server has verified, and what it found for it.
#[derive(Debug, Clone, Copy)]
pub enum Credential<'a> {
    /// A static token: its account.
    Account(&'a Arc<ServiceAccount>),
    /// An anonymous service's secret: the id of its service.
    AnonymousSecret(Uuid),
    /// An identity token whose signature and times verified.
    IdentityToken {
        /// Its claims.
        claims: &'a Map<String, Value>,
        /// The accounts (of any customer) with a rule naming the token's `iss`.
        candidates: &'a [Arc<ServiceAccount>],
        /// The account the client chose with `X-Service-Account`, if it did.
        chosen: Option<Uuid>,
    },
}

/// The call, as far as access is concerned: what it acts on.
#[derive(Debug, Clone, Copy)]
pub enum Request<'a> {
    /// A call on one service: the service the path names, if there is one.
    Service(Option<&'a Service>),
    /// Listing or creating the customer's services (`/services`). Each new name is checked
    /// against the grant's scope by the use case, once it is drawn.
    Services,
    /// The customer's service accounts (`/service-accounts…`; docs/api.md, "Authentication"): the
    /// caller's patterns include `"*"`, and `target` (a new policy, or the one of the account acted
    /// on, when the call names one) is no broader than the caller's addresses ([`may_manage`]).
    Accounts {
        /// The policy the call creates, or that of the account it changes, deletes or re-keys.
        target: Option<&'a Policy>,
    },
    /// The customer's audit trail (`/audit-events`): the caller's patterns include `"*"`.
    AuditTrail,
}

/// Who acts, once access is granted.
#[derive(Debug, Clone)]
pub enum Grant<'a> {
    /// A service account. For an identity token, the rules it acts by (their services are the
    /// caller's scope): on one service, every rule its claims matched; on no one service, those
    /// of them that allow the call's action, or on the whole customer those whose services
    /// include `"*"`.
    Account {
        /// The account.
        account: &'a Arc<ServiceAccount>,
        /// `Some` for an identity token.
        rules: Option<Vec<usize>>,
    },
    /// An anonymous service's secret, on its own service (its id).
    AnonymousService(Uuid),
}

impl Grant<'_> {
    /// The account that acts, if one does.
    pub fn account(&self) -> Option<&Arc<ServiceAccount>> {
        match self {
            Grant::Account { account, .. } => Some(account),
            Grant::AnonymousService(_) => None,
        }
    }

    /// The anonymous service whose secret acts, if one does.
    pub fn anonymous_service(&self) -> Option<Uuid> {
        match self {
            Grant::AnonymousService(id) => Some(*id),
            Grant::Account { .. } => None,
        }
    }

    /// The caller this grant lets act: with, for an identity token, the verified token (its
    /// `iss` and `sub` go to the audit trail), from `origin`.
    pub fn caller(
        &self,
        token: Option<Arc<crate::ports::VerifiedToken>>,
        origin: crate::app::Origin,
    ) -> crate::app::Caller {
        match self {
            Grant::Account { account, rules } => crate::app::Caller::account(
                Arc::clone(account),
                rules.clone().map(Vec::into_boxed_slice),
                token,
                origin,
            ),
            Grant::AnonymousService(_) => crate::app::Caller::anonymous(origin),
        }
    }
}

/// Why a call is refused, as docs/api.md answers it ("Authentication").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// 401: no account accepts the credential. The reason is for the log, never the client.
    Unauthenticated(&'static str),
    /// 401 whose detail the client sees: on a collection call, accounts of several customers
    /// trust the identity token's issuer, or several accounts accept the token, and
    /// `X-Service-Account` must choose.
    Ambiguous,
    /// 403, with a sentence for the client.
    Forbidden(String),
    /// 404: no such service for this caller (missing, expired, or another customer's).
    NotFound,
    /// 403 (`action-not-allowed`): the caller may act on what the call names, but its policy
    /// does not allow this action.
    ActionNotAllowed(Action),
}

const OUTSIDE_ALLOWLIST: &str = "the source address is not in this service account's ip_allowlist";

fn outside_allowlist() -> Refusal {
    Refusal::Forbidden(OUTSIDE_ALLOWLIST.into())
}

/// Decides a call that takes `action` on what `request` names. `now` decides whether an
/// anonymous service has expired. An anonymous service's secret may take every action on its
/// own service (and nothing else).
pub fn decide<'a>(
    credential: Credential<'a>,
    request: Request<'_>,
    action: Action,
    ip: IpAddr,
    now: OffsetDateTime,
) -> Result<Grant<'a>, Refusal> {
    let request = match request {
        Request::Service(service) => Request::Service(service.filter(|s| !s.is_expired_at(now))),
        Request::Accounts { target } => {
            let grant = decide_on(credential, Some(MANAGING), action, ip)?;
            manages(&grant, target)?;
            return Ok(grant);
        }
        Request::AuditTrail => return decide_on(credential, Some(READING_AUDIT), action, ip),
        services => services,
    };
    match request {
        Request::Service(service) => decide_on_service(credential, service, action, ip),
        _ => decide_on(credential, None, action, ip),
    }
}

/// What managing service accounts is called in its refusals.
const MANAGING: &str = "managing service accounts";
/// What reading the audit trail is called in its refusals.
const READING_AUDIT: &str = "reading the audit trail";

/// A call on no one service: on the whole customer when `every_service` names it (the
/// caller's patterns must include `"*"`), else on the collection of services.
fn decide_on<'a>(
    credential: Credential<'a>,
    every_service: Option<&str>,
    action: Action,
    ip: IpAddr,
) -> Result<Grant<'a>, Refusal> {
    match credential {
        Credential::Account(account) => {
            // In the order of docs/api.md's table: the token's kind and the address (in
            // `decide_static`), then the `"*"` a call on the whole customer needs, then the
            // action.
            let policy = &account.policy;
            let known = policy.kind() == PolicyKind::Static && policy.allows_ip(ip);
            if let Some(needed_for) = every_service.filter(|_| known) {
                let scope = scope_of(account, None).unwrap_or_default();
                covers_all(&scope, needed_for)?;
            }
            decide_static(account, Request::Services, action, ip)
        }
        Credential::AnonymousSecret(_) => Err(Refusal::Forbidden(OWN_CALLS_ONLY.into())),
        Credential::IdentityToken {
            claims,
            candidates,
            chosen,
        } => {
            // A token of an issuer that several customers trust names its account: no
            // customer's rules may decide whether another customer's token acts in its
            // tenant, nor how that token is answered.
            if chosen.is_none() && spans_customers(candidates) {
                return Err(Refusal::Ambiguous);
            }
            decide_federated_collection(
                claims,
                eligible(candidates, chosen),
                every_service,
                action,
                ip,
            )
        }
    }
}

/// A call on one service (`None`: none by that name for anyone, or expired).
fn decide_on_service<'a>(
    credential: Credential<'a>,
    service: Option<&Service>,
    action: Action,
    ip: IpAddr,
) -> Result<Grant<'a>, Refusal> {
    match credential {
        Credential::Account(account) => {
            decide_static(account, Request::Service(service), action, ip)
        }
        Credential::AnonymousSecret(id) => match service {
            Some(service) if service.id == id => Ok(Grant::AnonymousService(id)),
            _ => Err(Refusal::NotFound),
        },
        Credential::IdentityToken {
            claims,
            candidates,
            chosen,
        } => decide_federated_service(claims, eligible(candidates, chosen), service, action, ip),
    }
}

/// The candidate accounts of an identity token: the one `chosen` with `X-Service-Account`, or
/// all of them.
fn eligible(
    candidates: &[Arc<ServiceAccount>],
    chosen: Option<Uuid>,
) -> impl Iterator<Item = &Arc<ServiceAccount>> + Clone {
    (candidates.iter()).filter(move |a| chosen.is_none_or(|id| a.id == id))
}

fn decide_static<'a>(
    account: &'a Arc<ServiceAccount>,
    request: Request<'_>,
    action: Action,
    ip: IpAddr,
) -> Result<Grant<'a>, Refusal> {
    let policy = &account.policy;
    if policy.kind() != PolicyKind::Static {
        return Err(Refusal::Unauthenticated(
            "a static token for an account whose policy is oidc",
        ));
    }
    // The address first: a static token's caller is known, and its allowlist is its own.
    if !policy.allows_ip(ip) {
        return Err(outside_allowlist());
    }
    let grant = Grant::Account {
        account,
        rules: None,
    };
    let Request::Service(service) = request else {
        return allows(policy.actions(), action).map(|()| grant);
    };
    let service = service
        .filter(|s| s.customer_id == Some(account.customer_id))
        .ok_or(Refusal::NotFound)?;
    match policy.evaluate(None, Some(&service.subdomain), ip, action) {
        Decision::Allow { .. } => Ok(grant),
        Decision::Deny(reason) => Err(refusal_of(reason)),
        // An outcome this version does not know is no grant.
        _ => Err(Refusal::Unauthenticated(
            "the policy engine did not allow the call",
        )),
    }
}

/// `Ok` when `granted` holds `action`.
fn allows(granted: Actions, action: Action) -> Result<(), Refusal> {
    if granted.contains(action) {
        Ok(())
    } else {
        Err(Refusal::ActionNotAllowed(action))
    }
}

/// The 403 of a refusal after the claims matched.
fn refusal_of(reason: DenyReason) -> Refusal {
    match reason {
        DenyReason::ActionNotAllowed { action, .. } => Refusal::ActionNotAllowed(action),
        DenyReason::IpNotAllowed { .. } => outside_allowlist(),
        DenyReason::ServiceNotCovered { subdomain, rules } if rules.is_empty() => {
            Refusal::Forbidden(format!(
                "this service account's policy does not cover the service {subdomain:?}"
            ))
        }
        DenyReason::ServiceNotCovered { subdomain, .. } => Refusal::Forbidden(format!(
            "no rule that accepts this identity token covers the service {subdomain:?}"
        )),
        // A reason this version does not know refuses the credential, saying least.
        _ => Refusal::Unauthenticated("no rule accepts the credential"),
    }
}

/// The refusal of an anonymous service's secret on any call but its own service's.
pub const OWN_CALLS_ONLY: &str =
    "an anonymous service's secret only works on that service's own calls";

/// Whether `scope` covers every service of its customer (its patterns include `"*"`), which
/// `needed_for` (a call on the whole customer, as "reading the audit trail") needs: a 403 that
/// says so otherwise.
pub fn covers_all(scope: &crate::policy::Scope<'_>, needed_for: &str) -> Result<(), Refusal> {
    match scope.includes_all() {
        true => Ok(()),
        false => Err(Refusal::Forbidden(format!(
            "{needed_for} needs a service account whose services include \"*\""
        ))),
    }
}

/// [`may_manage`] for a granted caller: an anonymous secret manages nothing.
fn manages(grant: &Grant<'_>, target: Option<&Policy>) -> Result<(), Refusal> {
    match grant {
        Grant::Account { account, rules } => {
            let scope = scope_of(account, rules.as_deref()).unwrap_or_default();
            let actions = actions_of(account, rules.as_deref());
            may_manage(&scope, actions, &account.policy, target)
        }
        Grant::AnonymousService(_) => Err(Refusal::Forbidden(OWN_CALLS_ONLY.into())),
    }
}

/// The services an account may act on: a static policy's patterns, or those of the rules an
/// identity token matched (`rules`); `None` when that is nothing.
pub fn scope_of<'p>(
    account: &'p ServiceAccount,
    rules: Option<&[usize]>,
) -> Option<crate::policy::Scope<'p>> {
    match (account.policy.kind(), rules) {
        (PolicyKind::Static, _) => account.policy.static_scope(),
        (PolicyKind::Oidc, Some(rules)) => {
            Some(account.policy.rules_scope(rules)).filter(|s| !s.is_empty())
        }
        _ => None,
    }
}

/// The actions an account may take: a static policy's, or the union of those of the rules an
/// identity token matched (`rules`); every action for a version-1 policy.
pub fn actions_of(account: &ServiceAccount, rules: Option<&[usize]>) -> Actions {
    match (account.policy.kind(), rules) {
        (PolicyKind::Oidc, Some(rules)) => account.policy.rules_actions(rules),
        (PolicyKind::Oidc, None) => Actions::NONE,
        _ => account.policy.actions(),
    }
}

/// Whether the accounts belong to more than one customer.
fn spans_customers(accounts: &[Arc<ServiceAccount>]) -> bool {
    accounts
        .split_first()
        .is_some_and(|(first, rest)| rest.iter().any(|a| a.customer_id != first.customer_id))
}

/// The account's matching rules, when its policy accepts the token's claims.
fn accepted(account: &ServiceAccount, claims: &Map<String, Value>) -> Option<Vec<usize>> {
    let rules = account.policy.matching_rules(claims);
    (!rules.is_empty()).then_some(rules)
}

/// An identity token on no one service: the caller acts by the matching rules that allow the
/// action, their services its scope (a rule's actions hold on its own services only, so no
/// other rule's patterns widen them). On the whole customer (`every_service` names the call),
/// by the matching rules whose services include `"*"`, one of which must allow the action:
/// their actions are what the caller may grant an account it manages.
fn decide_federated_collection<'a>(
    claims: &Map<String, Value>,
    mut eligible: impl Iterator<Item = &'a Arc<ServiceAccount>>,
    every_service: Option<&str>,
    action: Action,
    ip: IpAddr,
) -> Result<Grant<'a>, Refusal> {
    // Matching stops at the second account that accepts: that is already an ambiguity.
    let mut accepting = eligible
        .by_ref()
        .filter_map(|a| accepted(a, claims).map(|rules| (a, rules)));
    let (account, rules) = accepting.next().ok_or(Refusal::Unauthenticated(
        "no account's rules accept the token",
    ))?;
    if accepting.next().is_some() {
        return Err(Refusal::Ambiguous);
    }
    if !account.policy.allows_ip(ip) {
        return Err(outside_allowlist());
    }
    let policy = &account.policy;
    let allowing = |rule: &usize| policy.rules_actions(&[*rule]).contains(action);
    let rules: Vec<usize> = match every_service {
        None => rules.into_iter().filter(allowing).collect(),
        Some(needed_for) => {
            let everywhere: Vec<usize> = (rules.iter().copied())
                .filter(|&rule| policy.rules_scope(&[rule]).includes_all())
                .collect();
            // No accepting rule's services include `"*"`: that answer comes before the
            // action's (docs/api.md's table).
            let nowhere = everywhere.is_empty();
            if nowhere || (!everywhere.iter().any(allowing) && rules.iter().any(allowing)) {
                return Err(Refusal::Forbidden(format!(
                    "{needed_for} needs a rule that accepts this identity token, allows {} and \
                     whose services include \"*\"",
                    action.as_str()
                )));
            }
            everywhere
        }
    };
    if !rules.iter().any(allowing) {
        return Err(Refusal::ActionNotAllowed(action));
    }
    Ok(Grant::Account {
        account,
        rules: Some(rules),
    })
}

fn decide_federated_service<'a>(
    claims: &Map<String, Value>,
    eligible: impl Iterator<Item = &'a Arc<ServiceAccount>> + Clone,
    service: Option<&Service>,
    action: Action,
    ip: IpAddr,
) -> Result<Grant<'a>, Refusal> {
    let owner = service.and_then(|s| s.customer_id);
    let mut outcome: Option<Result<Grant<'a>, Refusal>> = None;
    if let (Some(service), Some(owner)) = (service, owner) {
        // Only the owner's accounts are candidates (spec §4 rule 2); each is matched once.
        for account in eligible.clone().filter(|a| a.customer_id == owner) {
            let decision =
                account
                    .policy
                    .evaluate(Some(claims), Some(&service.subdomain), ip, action);
            let refusal = match decision {
                Decision::Allow { .. } => {
                    let rules = account.policy.matching_rules(claims);
                    return Ok(Grant::Account {
                        account,
                        rules: Some(rules),
                    });
                }
                Decision::Deny(DenyReason::NoRuleMatched | DenyReason::KindMismatch { .. }) => {
                    continue
                }
                Decision::Deny(reason) => refusal_of(reason),
                _ => continue,
            };
            // An account that accepts the token but does not cover the service (or the
            // action) outranks one whose allowlist refuses the address: the caller reaches the
            // service's owner.
            let covers_less = refusal != outside_allowlist();
            if outcome.is_none() || covers_less {
                outcome = Some(Err(refusal));
            }
        }
    }
    if let Some(outcome) = outcome {
        return outcome;
    }
    // No account of the owner accepts: a token some other account accepts is a caller without
    // this service (404, no existence oracle); one that nobody accepts, a 401.
    let accepted_elsewhere = eligible
        .filter(|a| owner.is_none() || Some(a.customer_id) != owner)
        .any(|a| accepted(a, claims).is_some());
    Err(if accepted_elsewhere {
        Refusal::NotFound
    } else {
        Refusal::Unauthenticated("no account's rules accept the token")
    })
}

/// Managing `/service-accounts…`: the caller's patterns include `"*"`; and an account it
/// creates, changes, deletes or re-keys (`target`, the new policy or the existing one) is no
/// broader than the caller: within its addresses, and allowed no action the caller may not
/// take itself (`caller_actions`, [`actions_of`]). No account mints, widens or takes over an
/// account broader than itself, with one exception: `tokens:sign` is never implied, so granting
/// it is left to the accounts that manage every service (`accounts:write` on `"*"`, the
/// customer's first account among them), which may grant it without holding it.
///
/// ```
/// use registry_domain::access::{may_manage, Refusal};
/// use registry_domain::policy::{Action, Actions, Policy};
/// use serde_json::json;
///
/// let policy = |v: serde_json::Value| Policy::parse(&v).unwrap().policy;
/// let office = policy(json!({"kind": "static", "services": ["*"], "ip_allowlist": ["203.0.113.0/24"]}));
/// let anywhere = policy(json!({"kind": "static", "services": ["api-acme"]}));
/// let scope = office.static_scope().unwrap();
/// assert!(may_manage(&scope, office.actions(), &office, None).is_ok());
/// assert!(matches!(may_manage(&scope, office.actions(), &office, Some(&anywhere)), Err(Refusal::Forbidden(_))));
/// let narrow = anywhere.static_scope().unwrap();
/// assert!(matches!(may_manage(&narrow, anywhere.actions(), &anywhere, None), Err(Refusal::Forbidden(_))));
///
/// // A manager without config:write cannot mint an account that has it.
/// let v2 = "https://registry.example/schemas/service-account-policy/v2.json";
/// let manager = policy(json!({"$schema": v2, "kind": "static", "services": ["*"],
///     "actions": ["accounts:read", "accounts:write", "config:read"]}));
/// let writer = policy(json!({"$schema": v2, "kind": "static", "services": ["api-acme"],
///     "actions": ["config:read", "config:write"]}));
/// let reader = policy(json!({"$schema": v2, "kind": "static", "services": ["api-acme"],
///     "actions": ["config:read"]}));
/// let scope = manager.static_scope().unwrap();
/// assert!(may_manage(&scope, manager.actions(), &manager, Some(&reader)).is_ok());
/// assert!(matches!(
///     may_manage(&scope, manager.actions(), &manager, Some(&writer)),
///     Err(Refusal::Forbidden(_))
/// ));
///
/// // It may mint a signer, though it cannot sign itself.
/// let signer = policy(json!({"$schema": v2, "kind": "static", "services": ["api-acme"],
///     "actions": ["tokens:sign", "config:read"]}));
/// assert!(may_manage(&scope, manager.actions(), &manager, Some(&signer)).is_ok());
/// ```
pub fn may_manage(
    caller_scope: &crate::policy::Scope<'_>,
    caller_actions: Actions,
    caller_policy: &Policy,
    target: Option<&Policy>,
) -> Result<(), Refusal> {
    if !caller_scope.includes_all() {
        return Err(Refusal::Forbidden(
            "managing service accounts needs a service account whose services include \"*\"".into(),
        ));
    }
    let Some(target) = target else {
        return Ok(());
    };
    if !target
        .ip_allowlist()
        .is_within(caller_policy.ip_allowlist())
    {
        return Err(Refusal::Forbidden(
            "this service account has an ip_allowlist, so the accounts it manages must have \
             one whose every entry lies inside one of its own entries"
                .into(),
        ));
    }
    // Minting tokens is never implied (not by "*"), so a manager of every service grants it
    // without holding it.
    let caller_actions = match caller_actions.contains(Action::AccountsWrite) {
        true => caller_actions.union(Actions::of(&[Action::TokensSign])),
        false => caller_actions,
    };
    if !caller_actions.includes(target.actions()) {
        let missing: Vec<&str> = target
            .actions()
            .iter()
            .filter(|a| !caller_actions.contains(*a))
            .map(Action::as_str)
            .collect();
        let detail = if missing.is_empty() {
            // Only "*" (every action, those added later included) is missing.
            "this service account may not take every action (\"*\"), so the accounts it \
             manages may not either"
                .to_owned()
        } else {
            format!(
                "this service account may not take the action(s) {}, so the accounts it manages \
                 may not either",
                missing.join(", ")
            )
        };
        return Err(Refusal::Forbidden(detail));
    }
    Ok(())
}

/// Whether an account has a token to regenerate: only `static` accounts do.
///
/// ```
/// use registry_domain::access::may_regenerate_token;
/// use registry_domain::policy::PolicyKind;
/// assert!(may_regenerate_token(PolicyKind::Static).is_ok());
/// assert!(may_regenerate_token(PolicyKind::Oidc).is_err());
/// ```
pub fn may_regenerate_token(kind: PolicyKind) -> Result<(), &'static str> {
    match kind {
        PolicyKind::Static => Ok(()),
        _ => Err(
            "oidc service accounts authenticate with identity tokens and have no token to regenerate",
        ),
    }
}

/// A policy's kind never changes: to switch, delete the account and create another.
///
/// ```
/// use registry_domain::access::kind_may_change;
/// use registry_domain::policy::PolicyKind;
/// assert!(kind_may_change(PolicyKind::Oidc, PolicyKind::Oidc).is_ok());
/// assert!(kind_may_change(PolicyKind::Oidc, PolicyKind::Static).is_err());
/// ```
pub fn kind_may_change(from: PolicyKind, to: PolicyKind) -> Result<(), String> {
    if from == to {
        Ok(())
    } else {
        Err(format!(
            "this account's kind is {:?} and cannot become {:?}",
            from.as_str(),
            to.as_str()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use time::macros::datetime;

    const NOW: OffsetDateTime = datetime!(2026-11-25 12:00 UTC);
    const GITHUB: &str = "https://token.actions.githubusercontent.com";

    fn oidc_account(customer: Uuid, aud: &str, sub: &str) -> Arc<ServiceAccount> {
        let policy = json!({"kind": "oidc", "rules": [{"services": ["*"],
            "claims": {"iss": GITHUB, "aud": aud, "sub": sub}}]});
        account_with(customer, &policy)
    }

    fn account_with(customer: Uuid, policy: &Value) -> Arc<ServiceAccount> {
        Arc::new(ServiceAccount {
            id: Uuid::new_v4(),
            customer_id: customer,
            name: "ci".into(),
            policy: Policy::parse(policy).unwrap().policy,
            created_at: NOW,
            last_used_at: None,
        })
    }

    fn claims(sub: &str) -> Map<String, Value> {
        json!({"iss": GITHUB, "aud": "registry", "sub": sub})
            .as_object()
            .unwrap()
            .clone()
    }

    fn collection<'a>(
        claims: &'a Map<String, Value>,
        candidates: &'a [Arc<ServiceAccount>],
        chosen: Option<Uuid>,
    ) -> Result<Grant<'a>, Refusal> {
        let credential = Credential::IdentityToken {
            claims,
            candidates,
            chosen,
        };
        decide(
            credential,
            Request::Services,
            Action::ServicesRead,
            "192.0.2.1".parse().unwrap(),
            NOW,
        )
    }

    /// The review's capture: B's broad rule for A's repositories must neither take A's
    /// uncovered job nor make A's covered one act as anyone without naming its account.
    #[test]
    fn a_shared_issuer_never_picks_an_account_silently() {
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let ours = oidc_account(a, "registry", "repo:acme/infra:ref:refs/heads/main");
        let theirs = oidc_account(b, "*", "repo:acme/*");
        let candidates = [ours.clone(), theirs.clone()];
        let release = claims("repo:acme/infra:ref:refs/heads/release");
        let main = claims("repo:acme/infra:ref:refs/heads/main");
        assert_eq!(
            collection(&release, &candidates, None).unwrap_err(),
            Refusal::Ambiguous
        );
        assert_eq!(
            collection(&main, &candidates, None).unwrap_err(),
            Refusal::Ambiguous
        );
        // Named, each account decides for itself alone.
        let granted = collection(&main, &candidates, Some(ours.id)).unwrap();
        assert_eq!(granted.account().unwrap().id, ours.id);
        assert_eq!(
            collection(&release, &candidates, Some(ours.id)).unwrap_err(),
            Refusal::Unauthenticated("no account's rules accept the token")
        );
        // One customer's accounts alone: as before, the one that accepts acts.
        let alone = [ours.clone()];
        assert_eq!(
            collection(&main, &alone, None)
                .unwrap()
                .account()
                .unwrap()
                .id,
            ours.id
        );
        // Whether or not the other customer's rules match: here they do not.
        let stranger = oidc_account(b, "registry", "repo:other/*");
        let unrelated = [ours.clone(), stranger];
        assert_eq!(
            collection(&main, &unrelated, None).unwrap_err(),
            Refusal::Ambiguous
        );
    }

    /// Calls on one service consider the service owner's accounts only.
    fn static_account(policy: Value) -> Arc<ServiceAccount> {
        Arc::new(ServiceAccount {
            id: Uuid::new_v4(),
            customer_id: Uuid::new_v4(),
            name: "deployer".into(),
            policy: Policy::parse(&policy).unwrap().policy,
            created_at: NOW,
            last_used_at: None,
        })
    }

    #[test]
    fn accounts_and_the_audit_trail_need_a_star_and_targets_within_the_addresses() {
        let ip = "203.0.113.9".parse().unwrap();
        let star = static_account(json!({"kind": "static", "services": ["*"]}));
        let narrow = static_account(json!({"kind": "static", "services": ["api-*"]}));
        let office = static_account(json!({"kind": "static", "services": ["*"],
            "ip_allowlist": ["203.0.113.0/24"]}));
        let anywhere = static_account(json!({"kind": "static", "services": ["api-acme"]}));
        let decide_for = |account: &Arc<ServiceAccount>, request| {
            decide(
                Credential::Account(account),
                request,
                Action::AccountsWrite,
                ip,
                NOW,
            )
            .map(|_| ())
        };
        let accounts = Request::Accounts { target: None };
        assert_eq!(decide_for(&star, accounts), Ok(()));
        assert_eq!(decide_for(&star, Request::AuditTrail), Ok(()));
        assert_eq!(decide_for(&narrow, Request::Services), Ok(()));
        for request in [accounts, Request::AuditTrail] {
            assert!(matches!(
                decide_for(&narrow, request),
                Err(Refusal::Forbidden(_))
            ));
        }
        // A caller limited to an office network manages only accounts limited to it.
        let broader = Request::Accounts {
            target: Some(&anywhere.policy),
        };
        assert!(matches!(
            decide_for(&office, broader),
            Err(Refusal::Forbidden(_))
        ));
        let within = Request::Accounts {
            target: Some(&office.policy),
        };
        assert_eq!(decide_for(&office, within), Ok(()));
        // An anonymous secret acts on its own service only.
        let secret = Credential::AnonymousSecret(Uuid::new_v4());
        assert!(matches!(
            decide(secret, Request::AuditTrail, Action::AuditRead, ip, NOW),
            Err(Refusal::Forbidden(_))
        ));
    }

    #[test]
    fn a_service_call_is_decided_by_the_owners_accounts() {
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let ours = oidc_account(a, "registry", "repo:acme/infra:ref:refs/heads/main");
        let theirs = oidc_account(b, "*", "repo:acme/*");
        let candidates = [ours.clone(), theirs];
        let service = Service {
            id: Uuid::new_v4(),
            customer_id: Some(a),
            subdomain: "api-acme".into(),
            title: None,
            description: None,
            created_at: NOW,
            expires_at: None,
        };
        let main = claims("repo:acme/infra:ref:refs/heads/main");
        let credential = Credential::IdentityToken {
            claims: &main,
            candidates: &candidates,
            chosen: None,
        };
        let ip = "192.0.2.1".parse().unwrap();
        let grant = decide(
            credential,
            Request::Service(Some(&service)),
            Action::ConfigRead,
            ip,
            NOW,
        )
        .unwrap();
        assert_eq!(grant.account().unwrap().id, ours.id);
    }

    const V2: &str = "https://registry.example/schemas/service-account-policy/v2.json";

    fn service_of(customer: Uuid, subdomain: &str) -> Service {
        Service {
            id: Uuid::new_v4(),
            customer_id: Some(customer),
            subdomain: subdomain.into(),
            title: None,
            description: None,
            created_at: NOW,
            expires_at: None,
        }
    }

    /// The review's capture: an account scoped to one service could delete it. With actions, a
    /// sync agent's account keeps the keys published and does nothing else.
    #[test]
    fn a_static_account_takes_only_its_actions() {
        let sync = static_account(json!({"$schema": V2, "kind": "static",
            "services": ["k3s-acme"], "actions": ["config:read", "config:write"]}));
        let k3s = service_of(sync.customer_id, "k3s-acme");
        let ip = "192.0.2.1".parse().unwrap();
        let ask = |request, action| {
            decide(Credential::Account(&sync), request, action, ip, NOW).map(|_| ())
        };
        assert_eq!(
            ask(Request::Service(Some(&k3s)), Action::ConfigWrite),
            Ok(())
        );
        assert_eq!(
            ask(Request::Service(Some(&k3s)), Action::ConfigRead),
            Ok(())
        );
        for action in [Action::ServicesWrite, Action::ServicesRead] {
            assert_eq!(
                ask(Request::Service(Some(&k3s)), action),
                Err(Refusal::ActionNotAllowed(action))
            );
        }
        assert_eq!(
            ask(Request::Services, Action::ServicesRead),
            Err(Refusal::ActionNotAllowed(Action::ServicesRead))
        );
        // A call on the whole customer needs "*" first: that refusal comes before the
        // action's (docs/api.md's table; the probe of 2026-12-04 got action-not-allowed).
        for (request, action) in [
            (Request::Accounts { target: None }, Action::AccountsRead),
            (Request::AuditTrail, Action::AuditRead),
        ] {
            let refused = ask(request, action);
            assert!(matches!(refused, Err(Refusal::Forbidden(_))), "{refused:?}");
        }
        // Another customer's service is still a 404, whatever the action.
        let theirs = service_of(Uuid::new_v4(), "web-globex");
        assert_eq!(
            ask(Request::Service(Some(&theirs)), Action::ServicesWrite),
            Err(Refusal::NotFound)
        );
        // A version-1 policy allows every action, as before, but minting tokens.
        let v1 = static_account(json!({"kind": "static", "services": ["*"]}));
        let service = service_of(v1.customer_id, "api-acme");
        let ask_v1 = |action| {
            decide(
                Credential::Account(&v1),
                Request::Service(Some(&service)),
                action,
                ip,
                NOW,
            )
            .map(|_| ())
        };
        for action in Action::ALL {
            match action {
                Action::TokensSign => assert_eq!(
                    ask_v1(action),
                    Err(Refusal::ActionNotAllowed(Action::TokensSign))
                ),
                _ => assert_eq!(ask_v1(action), Ok(())),
            }
        }
        // Nor does "*" in version 2; naming it does.
        let star = static_account(
            json!({"$schema": V2, "kind": "static", "services": ["*"], "actions": ["*"]}),
        );
        let signer = static_account(
            json!({"$schema": V2, "kind": "static", "services": ["api-acme"], "actions": ["tokens:sign"]}),
        );
        for (account, allowed) in [(&star, false), (&signer, true)] {
            let service = service_of(account.customer_id, "api-acme");
            let decided = decide(
                Credential::Account(account),
                Request::Service(Some(&service)),
                Action::TokensSign,
                ip,
                NOW,
            );
            assert_eq!(decided.is_ok(), allowed);
        }
    }

    /// For an identity token, the actions of the rules that match it and cover the service.
    #[test]
    fn a_federated_call_unites_the_actions_of_its_matching_rules() {
        let customer = Uuid::new_v4();
        let rule = |sub: &str, services: Value, actions: Value| {
            json!({"services": services, "actions": actions,
                "claims": {"iss": GITHUB, "aud": "registry", "sub": sub}})
        };
        let policy = json!({"$schema": V2, "kind": "oidc", "rules": [
            rule("repo:acme/*", json!(["*"]), json!(["config:read", "services:read"])),
            rule("repo:acme/infra:*", json!(["api-acme"]), json!(["config:write"])),
        ]});
        let candidates = [account_with(customer, &policy)];
        let ip = "192.0.2.1".parse().unwrap();
        let (api, web) = (
            service_of(customer, "api-acme"),
            service_of(customer, "web-acme"),
        );
        let ask = |sub: &str, service: &Service, action| {
            let claims = claims(sub);
            let credential = Credential::IdentityToken {
                claims: &claims,
                candidates: &candidates,
                chosen: None,
            };
            decide(credential, Request::Service(Some(service)), action, ip, NOW).map(|_| ())
        };
        let infra = "repo:acme/infra:ref:refs/heads/main";
        assert_eq!(ask(infra, &api, Action::ConfigWrite), Ok(()));
        assert_eq!(ask(infra, &api, Action::ConfigRead), Ok(()));
        // The rule that allows config:write does not cover web-acme.
        assert_eq!(
            ask(infra, &web, Action::ConfigWrite),
            Err(Refusal::ActionNotAllowed(Action::ConfigWrite))
        );
        assert_eq!(
            ask(
                "repo:acme/docs:ref:refs/heads/main",
                &api,
                Action::ConfigWrite
            ),
            Err(Refusal::ActionNotAllowed(Action::ConfigWrite))
        );
        assert_eq!(
            ask(infra, &api, Action::ServicesWrite),
            Err(Refusal::ActionNotAllowed(Action::ServicesWrite))
        );
        // On the collection, the matching rules' actions.
        let claims = claims(infra);
        let collection = |action| {
            decide(
                Credential::IdentityToken {
                    claims: &claims,
                    candidates: &candidates,
                    chosen: None,
                },
                Request::Services,
                action,
                ip,
                NOW,
            )
            .map(|_| ())
        };
        assert_eq!(collection(Action::ServicesRead), Ok(()));
        assert_eq!(
            collection(Action::ServicesWrite),
            Err(Refusal::ActionNotAllowed(Action::ServicesWrite))
        );
    }

    /// Managing accounts compares actions too: no account mints one broader than itself.
    #[test]
    fn a_manager_mints_no_account_with_actions_it_lacks() {
        let ip = "192.0.2.1".parse().unwrap();
        let manager = static_account(json!({"$schema": V2, "kind": "static", "services": ["*"],
            "actions": ["accounts:read", "accounts:write", "config:read", "config:write"]}));
        let policy = |v: Value| Policy::parse(&v).unwrap().policy;
        let ok = policy(
            json!({"$schema": V2, "kind": "static", "services": ["api-acme"],
            "actions": ["config:read", "config:write"]}),
        );
        let broader = policy(
            json!({"$schema": V2, "kind": "static", "services": ["api-acme"],
            "actions": ["services:write"]}),
        );
        let v1 = policy(json!({"kind": "static", "services": ["api-acme"]}));
        let manage = |target| {
            decide(
                Credential::Account(&manager),
                Request::Accounts { target },
                Action::AccountsWrite,
                ip,
                NOW,
            )
            .map(|_| ())
        };
        assert_eq!(manage(Some(&ok)), Ok(()));
        for target in [&broader, &v1] {
            let Err(Refusal::Forbidden(detail)) = manage(Some(target)) else {
                panic!("a broader account was allowed");
            };
            assert!(detail.contains("may not"), "{detail}");
        }
        // Reading the trail is another action.
        assert_eq!(
            decide(
                Credential::Account(&manager),
                Request::AuditTrail,
                Action::AuditRead,
                ip,
                NOW
            )
            .map(|_| ()),
            Err(Refusal::ActionNotAllowed(Action::AuditRead))
        );
    }

    /// A call on no one service (or on the whole customer) acts by the matching rules that
    /// allow its action: another rule's `"*"` lends them nothing (the review's four cases).
    #[test]
    fn no_rule_lends_its_services_to_another_rules_actions() {
        let customer = Uuid::new_v4();
        let ip = "192.0.2.1".parse().unwrap();
        let sub = "repo:acme/infra:ref:refs/heads/main";
        let rule = |services: Value, actions: Value| {
            json!({"services": services, "actions": actions,
                "claims": {"iss": GITHUB, "aud": "registry", "sub": sub}})
        };
        let claims = claims(sub);
        let ask = |rules: Value, request: Request<'_>, action| {
            let candidates = [account_with(
                customer,
                &json!({"$schema": V2, "kind": "oidc", "rules": rules}),
            )];
            let credential = Credential::IdentityToken {
                claims: &claims,
                candidates: &candidates,
                chosen: None,
            };
            decide(credential, request, action, ip, NOW).map(|grant| {
                let account = grant.account().unwrap();
                let Grant::Account { rules, .. } = &grant else {
                    unreachable!("an account")
                };
                let scope = scope_of(account, rules.as_deref()).unwrap_or_default();
                (
                    scope.includes_all(),
                    scope.matches("prod-acme"),
                    actions_of(account, rules.as_deref()),
                )
            })
        };
        let forbidden = |result: Result<_, Refusal>| matches!(result, Err(Refusal::Forbidden(_)));
        // Account management: "*" from one rule, accounts:write from another.
        let takeover = json!([
            rule(json!(["*"]), json!(["services:read"])),
            rule(
                json!(["sandbox-*"]),
                json!(["accounts:read", "accounts:write"])
            ),
        ]);
        let minted = Policy::parse(&json!({"$schema": V2, "kind": "static", "services": ["*"],
            "actions": ["accounts:write"]}))
        .unwrap()
        .policy;
        let target = Some(&minted);
        assert!(forbidden(ask(
            takeover.clone(),
            Request::Accounts { target },
            Action::AccountsWrite
        )));
        assert!(forbidden(ask(
            takeover,
            Request::Accounts { target: None },
            Action::AccountsRead
        )));
        // The audit trail likewise.
        let audit = json!([
            rule(json!(["*"]), json!(["config:read"])),
            rule(json!(["x-*"]), json!(["audit:read"])),
        ]);
        assert!(forbidden(ask(
            audit,
            Request::AuditTrail,
            Action::AuditRead
        )));
        // Creating and listing services: the scope is that of the rules with the action.
        let create = json!([
            rule(json!(["ci-*"]), json!(["services:write"])),
            rule(json!(["*"]), json!(["config:write"])),
        ]);
        let (all, prod, _) = ask(create, Request::Services, Action::ServicesWrite).unwrap();
        assert!(!all && !prod, "services:write holds on ci-* only");
        let list = json!([
            rule(json!(["api-*"]), json!(["services:read"])),
            rule(json!(["*"]), json!(["config:read"])),
        ]);
        let (all, prod, _) = ask(list, Request::Services, Action::ServicesRead).unwrap();
        assert!(!all && !prod, "services:read holds on api-* only");
        // A rule that has both manages, with its own actions only: the other rule's
        // config:write on sandbox-* is not the manager's to grant on "*".
        let manager = json!([
            rule(json!(["*"]), json!(["accounts:read", "accounts:write"])),
            rule(
                json!(["sandbox-*"]),
                json!(["accounts:write", "config:write"])
            ),
        ]);
        let (all, _, actions) = ask(
            manager.clone(),
            Request::Accounts { target: None },
            Action::AccountsWrite,
        )
        .unwrap();
        assert!(all);
        assert!(!actions.contains(Action::ConfigWrite));
        let writer = Policy::parse(&json!({"$schema": V2, "kind": "static", "services": ["*"],
            "actions": ["config:write"]}))
        .unwrap()
        .policy;
        assert!(forbidden(ask(
            manager,
            Request::Accounts {
                target: Some(&writer)
            },
            Action::AccountsWrite
        )));
        // Two rules on every service: the manager may grant what either allows.
        let everywhere = json!([
            rule(json!(["*"]), json!(["accounts:read", "accounts:write"])),
            rule(json!(["*"]), json!(["config:read", "config:write"])),
        ]);
        assert_eq!(
            ask(
                everywhere,
                Request::Accounts {
                    target: Some(&writer)
                },
                Action::AccountsWrite
            )
            .map(|(all, _, actions)| all && actions.contains(Action::ConfigWrite)),
            Ok(true)
        );
        // No matching rule covers every service: that refuses before the action does.
        let narrow = json!([rule(json!(["api-*"]), json!(["services:read"]))]);
        assert!(forbidden(ask(
            narrow,
            Request::AuditTrail,
            Action::AuditRead
        )));
        // No matching rule allows the action at all: the action is what refuses.
        let reader = json!([rule(json!(["*"]), json!(["services:read"]))]);
        assert_eq!(
            ask(reader, Request::AuditTrail, Action::AuditRead),
            Err(Refusal::ActionNotAllowed(Action::AuditRead))
        );
    }
}
