//! Service accounts: create, list, read, change, delete, re-key (spec §4; docs/api.md,
//! "Authentication").
//!
//! No account can mint one broader than itself: only callers whose patterns include `"*"`
//! manage accounts, and a caller limited to some addresses manages only accounts limited to
//! addresses inside its own.

use crate::access;
use crate::app::{AppError, Caller, Registry};
use crate::audit::{Action, AuditEvent, Resource};
use crate::credentials::{self, CredentialKind};
use crate::limits;
use crate::policy::{ParsedPolicy, Policy, PolicyKind};
use crate::ports::{Ceiling, CredentialRecord};
use crate::{ServiceAccount, StoreError, Violation};
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

/// Longest account name accepted.
pub const MAX_NAME: usize = 200;

/// `POST /service-accounts`.
///
/// `problems` carries what the request's own parsing found (unknown fields, a name of the wrong
/// type or length): they are reported with the policy's problems in one 400, so that a client
/// fixes everything at once. A missing name or policy is one more problem, unless `problems`
/// already has one at its pointer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CreateAccount {
    /// The name; required.
    pub name: Option<String>,
    /// The policy document, as sent; required.
    pub policy: Option<Value>,
    /// Problems the body already has, pointers from the body's root.
    pub problems: Vec<Violation>,
}

/// `PATCH /service-accounts/{id}`: what to change; `None` leaves a field as it is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UpdateAccount {
    /// A new name.
    pub name: Option<String>,
    /// A new policy document, of the same kind.
    pub policy: Option<Value>,
    /// Problems the body already has (see [`CreateAccount::problems`]).
    pub problems: Vec<Violation>,
}

/// A static token just generated: its plaintext is shown once; the server remembers the
/// plaintext with its lookup id and hash, so that its first use skips the slow hash.
#[derive(Clone, PartialEq, Eq)]
pub struct NewToken {
    /// The whole token, to return to the client once.
    pub plaintext: String,
    /// Its public lookup id.
    pub lookup_id: String,
    /// Its [`SecretHasher`](crate::ports::SecretHasher) hash, as stored.
    pub hash: String,
}

impl std::fmt::Debug for NewToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewToken")
            .field("lookup_id", &self.lookup_id)
            .field("plaintext", &"<redacted>")
            .finish_non_exhaustive()
    }
}

/// What [`create`] made.
#[derive(Debug, Clone)]
pub struct Created {
    /// The account.
    pub account: ServiceAccount,
    /// Its token, for a `static` account.
    pub token: Option<NewToken>,
    /// Sentences about risky but valid choices of its policy.
    pub warnings: Vec<String>,
}

/// What [`update`] wrote.
#[derive(Debug, Clone)]
pub struct Updated {
    /// The account as it is now.
    pub account: ServiceAccount,
    /// Sentences about risky but valid choices of its new policy (none without one).
    pub warnings: Vec<String>,
}

/// What [`regenerate_token`] made.
#[derive(Debug, Clone)]
pub struct Regenerated {
    /// The account re-keyed.
    pub account: ServiceAccount,
    /// Its new token; the old one fails from now on.
    pub token: NewToken,
}

/// The 404 of an account that does not exist for this caller (`id` as the client gave it).
pub fn not_found(id: &str) -> AppError {
    AppError::NotFound(format!("no service account {id:?}"))
}

/// The caller's customer's account with this id: another customer's, a missing one or a
/// malformed id are all the same 404. Only callers that manage accounts
/// (docs/api.md, "Authentication").
pub fn get(registry: &Registry, caller: &Caller, id: &str) -> Result<ServiceAccount, AppError> {
    caller.may_manage(None)?;
    let parsed: Uuid = id.parse().map_err(|_| not_found(id))?;
    let customer_id = caller.customer()?;
    registry
        .store
        .account(parsed)?
        .filter(|a| a.customer_id == customer_id)
        .ok_or_else(|| not_found(id))
}

/// The caller's customer's accounts, oldest first.
pub fn list(registry: &Registry, caller: &Caller) -> Result<Vec<ServiceAccount>, AppError> {
    caller.may_manage(None)?;
    Ok(registry.store.accounts_of(caller.customer()?)?)
}

/// An account the caller may change, delete or re-key: one of its customer's ([`get`]), and
/// within its addresses. Otherwise a caller limited to an office network could narrow an
/// account usable from anywhere and then take its token, or delete it.
pub fn managed(registry: &Registry, caller: &Caller, id: &str) -> Result<ServiceAccount, AppError> {
    let account = get(registry, caller, id)?;
    caller.may_manage(Some(&account.policy))?;
    Ok(account)
}

/// Creates an account for the caller's customer: a policy within the limits, naming only the
/// customer's services and no broader than the caller, within the customer's quota; a `static`
/// account gets its token.
pub fn create(
    registry: &Registry,
    caller: &Caller,
    command: CreateAccount,
    now: OffsetDateTime,
) -> Result<Created, AppError> {
    caller.may_manage(None)?;
    let mut problems = command.problems;
    if command.name.is_none() && !problems.iter().any(|p| p.pointer == "/name") {
        problems.push(Violation::new("/name", "name is required"));
    }
    let parsed = match &command.policy {
        Some(document) => with_problems(
            checked_policy(registry, caller, document, None),
            &mut problems,
        )?,
        None => {
            if !problems.iter().any(|p| p.pointer == "/policy") {
                problems.push(Violation::new("/policy", "policy is required"));
            }
            None
        }
    };
    let (Some(name), Some(ParsedPolicy { policy, warnings }), true) =
        (command.name, parsed, problems.is_empty())
    else {
        return Err(AppError::Invalid(problems));
    };
    let store = &*registry.store;
    let customer_id = caller.customer()?;
    let account = ServiceAccount {
        id: Uuid::new_v4(),
        customer_id,
        name,
        policy,
        created_at: now,
        last_used_at: None,
    };
    let token = match account.policy.kind() {
        PolicyKind::Static => Some(new_token(registry)?),
        _ => None,
    };
    let record = token.as_ref().map(NewToken::record);
    let event = account_event(caller, Action::AccountCreate, account.id, now);
    let quota = Ceiling(registry.settings.max_accounts_per_customer);
    let budget = within_budget(&account.policy);
    store
        .create_account(&account, record.as_ref(), quota, budget.as_deref(), &event)
        .map_err(|error| match error {
            StoreError::CeilingReached(max) => {
                AppError::QuotaExceeded(limits::quota_reached("service accounts", max))
            }
            StoreError::OverBudget(violation) => under_policy(vec![violation]),
            other => other.into(),
        })?;
    Ok(Created {
        account,
        token,
        warnings,
    })
}

/// Changes the name and/or the policy of `account`, found by [`managed`] (checked again here):
/// the new policy passes the checks of [`create`], and its kind is the old one's. Its
/// `account.update` event records the members that changed, with their old and new values.
pub fn update(
    registry: &Registry,
    caller: &Caller,
    account: ServiceAccount,
    command: UpdateAccount,
    now: OffsetDateTime,
) -> Result<Updated, AppError> {
    // As a service's `PATCH` (`services::update`): over a lagging copy, or another call's
    // change, the change is judged and made again over what is stored.
    let mut before = account;
    for _ in 0..super::services::UPDATE_ATTEMPTS {
        match update_once(registry, caller, &before, &command, now)? {
            Ok(updated) => return Ok(updated),
            Err(stored) => before = stored,
        }
    }
    Err(AppError::Conflict(
        "the service account kept changing meanwhile: try again".to_owned(),
    ))
}

/// One attempt of [`update`] over `before`, the account as last read: `Err` with the account as
/// stored when its name or policy changed since.
fn update_once(
    registry: &Registry,
    caller: &Caller,
    before: &ServiceAccount,
    command: &UpdateAccount,
    now: OffsetDateTime,
) -> Result<Result<Updated, ServiceAccount>, AppError> {
    caller.may_manage(Some(&before.policy))?;
    let mut account = before.clone();
    let mut problems = command.problems.clone();
    let mut warnings = Vec::new();
    if let Some(document) = &command.policy {
        let checked = checked_policy(registry, caller, document, Some(before));
        if let Some(parsed) = with_problems(checked, &mut problems)? {
            if let Err(why) = access::kind_may_change(account.policy.kind(), parsed.policy.kind()) {
                return Err(AppError::KindImmutable(Violation::new("/policy/kind", why)));
            }
            account.policy = parsed.policy;
            warnings = parsed.warnings;
        }
    }
    if !problems.is_empty() {
        return Err(AppError::Invalid(problems));
    }
    if let Some(name) = &command.name {
        account.name.clone_from(name);
    }
    // The policy is recorded whole: it is what grants access, and holds no secret.
    let event = account_event(caller, Action::AccountUpdate, account.id, now)
        .with_change(
            "name",
            before.name.clone().into(),
            account.name.clone().into(),
        )
        .with_change(
            "policy",
            before.policy.document().clone(),
            account.policy.document().clone(),
        );
    // Even a change that changes nothing goes to the store, which compares it with what is
    // stored; it is not written, nor recorded, when stored already (docs/api.md, "Audit trail").
    let id = account.id;
    // A rename keeps the policy: nothing to check of the others.
    let budget = match command.policy {
        Some(_) => within_budget(&account.policy),
        None => None,
    };
    let written = registry
        .store
        .update_account(before, &account, budget.as_deref(), &event)
        .map_err(|error| match error {
            StoreError::OverBudget(violation) => under_policy(vec![violation]),
            other => AppError::gone(|| format!("no service account {:?}", id.to_string()))(other),
        })?;
    Ok(written.map(|()| Updated { account, warnings }))
}

/// Deletes an account the caller manages: its token stops working at once.
pub fn delete(
    registry: &Registry,
    caller: &Caller,
    id: &str,
    now: OffsetDateTime,
) -> Result<(), AppError> {
    let account = managed(registry, caller, id)?;
    let event = account_event(caller, Action::AccountDelete, account.id, now);
    if registry.store.delete_account(account.id, &event)? {
        Ok(())
    } else {
        Err(not_found(id))
    }
}

/// Gives a `static` account the caller manages a new token; the old one fails from now on.
/// An `oidc` account has none (400).
pub fn regenerate_token(
    registry: &Registry,
    caller: &Caller,
    id: &str,
    now: OffsetDateTime,
) -> Result<Regenerated, AppError> {
    let account = get(registry, caller, id)?;
    regenerate(registry, caller, account, now)
}

/// [`regenerate_token`] of `account`, as read (from a copy that may lag).
fn regenerate(
    registry: &Registry,
    caller: &Caller,
    mut account: ServiceAccount,
    now: OffsetDateTime,
) -> Result<Regenerated, AppError> {
    may_regenerate(registry, caller, &account)?;
    // Read before hashing: of the calls that race, the first to write wins and the others
    // find the token changed under them (409), so no caller is handed a token that never worked.
    let replaced = registry.store.token_lookup_id(account.id)?;
    let token = new_token(registry)?;
    let event = account_event(caller, Action::AccountRegenerateToken, account.id, now);
    // As an account's `PATCH`: over a lagging copy, or a policy changed meanwhile, the caller
    // is judged again over the account as stored, and the same token written.
    for _ in 0..super::services::UPDATE_ATTEMPTS {
        let written = registry
            .store
            .replace_token(&account, replaced.as_deref(), &token.record(), &event)
            .map_err(AppError::gone(|| {
                format!("no service account {:?}", account.id.to_string())
            }))?;
        match written {
            Ok(()) => return Ok(Regenerated { account, token }),
            Err(stored) => {
                may_regenerate(registry, caller, &stored)?;
                account = stored;
            }
        }
    }
    Err(AppError::Conflict(
        "the service account kept changing meanwhile: try again".to_owned(),
    ))
}

/// Whether the caller may give `account` a new token: it manages the account, the account has
/// one to give (a `static` account), and the caller may grant what it signs.
fn may_regenerate(
    registry: &Registry,
    caller: &Caller,
    account: &ServiceAccount,
) -> Result<(), AppError> {
    caller.may_manage(Some(&account.policy))?;
    access::may_regenerate_token(account.policy.kind())
        .map_err(|why| AppError::BadRequest(why.into()))?;
    may_grant_signing(registry, caller, &account.policy, None, false)
}

impl NewToken {
    /// What the store keeps of it.
    fn record(&self) -> CredentialRecord {
        CredentialRecord {
            lookup_id: self.lookup_id.clone(),
            hash: self.hash.clone(),
        }
    }
}

/// A new static token, hashed.
fn new_token(registry: &Registry) -> Result<NewToken, AppError> {
    let secret = credentials::generate(CredentialKind::StaticToken, &*registry.random);
    let hash = registry.hasher.hash(&secret.plaintext)?;
    Ok(NewToken {
        plaintext: secret.plaintext,
        lookup_id: secret.lookup_id,
        hash,
    })
}

/// The audit event of a change to the account `id` by `caller`.
fn account_event(caller: &Caller, action: Action, id: Uuid, now: OffsetDateTime) -> AuditEvent {
    caller.event(action, Resource::account(id), caller.customer_id(), now)
}

/// Field problems and policy problems are reported together: a policy's 400 joins `problems`;
/// any other refusal of the policy wins only when the body has no problem of its own.
fn with_problems(
    checked: Result<ParsedPolicy, AppError>,
    problems: &mut Vec<Violation>,
) -> Result<Option<ParsedPolicy>, AppError> {
    match checked {
        Ok(parsed) => Ok(Some(parsed)),
        Err(AppError::Invalid(violations)) => {
            problems.extend(violations);
            Ok(None)
        }
        Err(other) if problems.is_empty() => Err(other),
        Err(_) => Ok(None),
    }
}

fn under_policy(violations: Vec<Violation>) -> AppError {
    AppError::Invalid(
        violations
            .into_iter()
            .map(|v| v.prefixed("/policy"))
            .collect(),
    )
}

/// Whether the caller may let `target` sign (`tokens:sign`, docs/api.md, "Managed signing"). A
/// manager of every service grants signing without holding it, but an account that signs for
/// a service mints tokens under that service's issuers, and the customer's federated accounts
/// that trust one of those issuers accept them: through them, the signer reaches as far as
/// they do. So a caller that does not sign itself grants signing only on services whose
/// issuers no federated account broader than itself trusts (each such account is a 403 naming
/// it); one that signs already reaches that far itself. `itself`: `target` replaces the
/// caller's own policy, which it may not make sign where it did not.
fn may_grant_signing(
    registry: &Registry,
    caller: &Caller,
    target: &Policy,
    replaced: Option<&Policy>,
    itself: bool,
) -> Result<(), AppError> {
    let Some(signs) = signing_scope(target) else {
        return Ok(());
    };
    // A policy replacing one that signed already for a service gives it no new reach there.
    let signed = replaced.and_then(signing_scope);
    if caller.holds(crate::policy::Action::TokensSign) {
        return Ok(());
    }
    let customer_id = caller.customer()?;
    let store = &*registry.store;
    let mut issuers: Vec<(String, String)> = Vec::new();
    for service in store.services_of(customer_id)? {
        let signed_before = signed
            .as_ref()
            .is_some_and(|s| s.matches(&service.subdomain));
        if !signs.matches(&service.subdomain) || signed_before {
            continue;
        }
        issuers.push((
            registry.issuer_of(&service.subdomain),
            service.subdomain.clone(),
        ));
        // A custom domain's issuer, whatever its state: it may be served tomorrow.
        if let Some(domain) = store.domain_of(service.id)? {
            issuers.push((domain.issuer(), service.subdomain));
        }
    }
    for federated in store.accounts_of(customer_id)? {
        let trusted = federated.policy.issuers();
        let Some((_, subdomain)) = issuers.iter().find(|(i, _)| trusted.contains(&i.as_str()))
        else {
            continue;
        };
        if caller.may_manage(Some(&federated.policy)).is_err() {
            return Err(AppError::Forbidden(format!(
                "an account that signs for {subdomain:?} mints tokens that service account \
                 {:?} ({}) accepts, and that account may do more than this one: only an \
                 account no narrower than it may grant tokens:sign there",
                federated.name, federated.id
            )));
        }
    }
    // The grant by an account that does not sign is for the accounts it makes: it cannot sign
    // itself, so it cannot grant itself the action either, where its policy did not sign
    // before (a policy that signed already keeps what it had).
    if itself && (signed.is_none() || !issuers.is_empty()) {
        return Err(AppError::Forbidden(
            "an account cannot grant itself tokens:sign: another account that holds \
             accounts:write grants it"
                .to_owned(),
        ));
    }
    Ok(())
}

/// The services `policy` lets sign (`tokens:sign`), if any: a static policy's, or those of the
/// rules of an OIDC one that allow it.
fn signing_scope(policy: &Policy) -> Option<crate::policy::Scope<'_>> {
    use crate::policy::Action::TokensSign;
    match policy.kind() {
        PolicyKind::Static => policy
            .static_scope()
            .filter(|_| policy.actions().contains(TokensSign)),
        _ => {
            let rules: Vec<usize> = (policy.rule_issuers().into_iter())
                .map(|(rule, _)| rule)
                .filter(|rule| policy.rules_actions(&[*rule]).contains(TokensSign))
                .collect();
            Some(policy.rules_scope(&rules)).filter(|s| !s.is_empty())
        }
    }
}

/// The check of an OIDC policy against the customer's other accounts that its write makes in
/// its own transaction (the issuers and rules one customer may trust together: checked first
/// by [`checked_policy`], with every other problem, and again by the write, so that concurrent
/// writes never pass the limits together); `None` for a static policy, which trusts no issuer.
fn within_budget(policy: &Policy) -> Option<Box<BudgetCheck>> {
    let policy = policy.clone();
    (policy.kind() == PolicyKind::Oidc).then(|| {
        Box::new(move |others: &[ServiceAccount]| {
            let others: Vec<Policy> = others.iter().map(|a| a.policy.clone()).collect();
            limits::check_customer_budget(&policy, &others)
        }) as Box<BudgetCheck>
    })
}

/// A check of an account's policy against the customer's other accounts.
type BudgetCheck = dyn Fn(&[ServiceAccount]) -> Result<(), Violation>;

/// Parses a policy from the body (pointers under `/policy`) and checks that it keeps within the
/// limits ([`limits`]: its size, and the issuers and rules of the customer's accounts with it in
/// place of account `replacing`), that it is no broader than the caller's addresses (nor, by
/// the signing it grants, than the federation it reaches), and that every non-wildcard
/// `services` entry names a service of the customer (spec §4 rule 1).
fn checked_policy(
    registry: &Registry,
    caller: &Caller,
    document: &Value,
    replacing: Option<&ServiceAccount>,
) -> Result<ParsedPolicy, AppError> {
    // `parse` checks the size limits before it compiles a pattern.
    let parsed = Policy::parse(document).map_err(|e| under_policy(e.into_violations()))?;
    caller.may_manage(Some(&parsed.policy))?;
    let replaced = replacing.map(|a| &a.policy);
    let itself =
        (caller.acting_account()).is_some_and(|me| replacing.is_some_and(|a| a.id == me.id));
    may_grant_signing(registry, caller, &parsed.policy, replaced, itself)?;
    let replacing = replacing.map(|a| a.id);
    let customer_id = caller.customer()?;
    let store = &*registry.store;
    if parsed.policy.kind() == PolicyKind::Oidc {
        let others: Vec<Policy> = store
            .accounts_of(customer_id)?
            .into_iter()
            .filter(|a| Some(a.id) != replacing)
            .map(|a| a.policy)
            .collect();
        limits::check_customer_budget(&parsed.policy, &others)
            .map_err(|v| under_policy(vec![v]))?;
    }
    let literals = parsed.policy.literal_services();
    if literals.is_empty() {
        return Ok(parsed);
    }
    let names: Vec<String> = literals.iter().map(|l| l.subdomain.clone()).collect();
    let owned = store.owned_subdomains(customer_id, &names)?;
    let unknown: Vec<Violation> = literals
        .into_iter()
        .filter(|l| !owned.contains(&l.subdomain))
        .map(|l| {
            Violation::new(
                format!("/policy{}", l.pointer),
                format!("no service {:?} exists in your account", l.subdomain),
            )
        })
        .collect();
    if unknown.is_empty() {
        Ok(parsed)
    } else {
        Err(AppError::UnknownServices(unknown))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::testing::{
        add_account, add_customer, caller, origin, registry_over, MemoryStore,
    };
    use crate::audit::{Actor, Resource};
    use crate::ports::CredentialOwner;
    use crate::{Customer, Plan, Service};
    use serde_json::json;
    use std::sync::Arc;
    use time::macros::datetime;

    const NOW: OffsetDateTime = datetime!(2026-11-23 10:00 UTC);

    struct World {
        store: Arc<MemoryStore>,
        registry: Registry,
        customer: Customer,
        admin: Caller,
    }

    fn world() -> World {
        let store = Arc::new(MemoryStore::default());
        let (registry, customer, bootstrap) = registry_over(store.clone(), Plan::Business, NOW);
        World {
            store,
            registry,
            customer,
            admin: caller(bootstrap),
        }
    }

    impl World {
        /// A service of the customer, written straight to the store.
        fn service(&self, subdomain: &str) {
            let service = Service {
                id: Uuid::new_v4(),
                customer_id: Some(self.customer.id),
                subdomain: subdomain.into(),
                title: Some("A service".into()),
                description: None,
                created_at: NOW,
                expires_at: None,
            };
            let event = self
                .admin
                .service_event(Action::ServiceCreate, &service, NOW);
            self.registry
                .store
                .create_service(&service, None, Ceiling::NONE, &event)
                .unwrap();
        }

        fn caller_with(&self, policy: Value) -> Caller {
            caller(add_account(&self.registry, &self.customer, policy, NOW))
        }

        /// A caller usable from an office's network only, and the account `inside` it made,
        /// usable from part of that network.
        fn office_and_inside(&self) -> (Caller, Created) {
            let office = self.caller_with(
                json!({"kind": "static", "services": ["*"], "ip_allowlist": ["203.0.113.0/24"]}),
            );
            let inside =
                json!({"kind": "static", "services": ["*"], "ip_allowlist": ["203.0.113.8/29"]});
            let created = self.create(&office, "inside", inside).unwrap();
            (office, created)
        }

        fn create(
            &self,
            as_caller: &Caller,
            name: &str,
            policy: Value,
        ) -> Result<Created, AppError> {
            let command = CreateAccount {
                name: Some(name.into()),
                policy: Some(policy),
                problems: Vec::new(),
            };
            create(&self.registry, as_caller, command, NOW)
        }
    }

    fn oidc(issuer: &str) -> Value {
        json!({"kind": "oidc", "rules": [{"services": ["*"],
            "claims": {"iss": issuer, "aud": "registry", "sub": "repo:acme/infra:ref:main"}}]})
    }

    fn pointers(violations: &[Violation]) -> Vec<&str> {
        violations.iter().map(|v| v.pointer.as_str()).collect()
    }

    #[test]
    fn a_static_account_gets_a_hashed_token_and_its_event() {
        let w = world();
        let created = w
            .create(
                &w.admin,
                "deployer",
                json!({"kind": "static", "services": ["*"]}),
            )
            .unwrap();
        let token = created.token.expect("a static account has a token");
        assert!(token.plaintext.starts_with("rgst_"));
        assert!(token.plaintext.contains(&token.lookup_id));
        assert_eq!(token.hash, format!("plain:{}", token.plaintext));
        assert!(!format!("{token:?}").contains(&token.plaintext));
        let stored = w
            .registry
            .store
            .credential(&token.lookup_id)
            .unwrap()
            .unwrap();
        assert_eq!(stored.owner, CredentialOwner::Account(created.account.id));
        assert_eq!(stored.hash, token.hash);
        assert_eq!(created.account.customer_id, w.customer.id);
        assert_eq!(created.account.created_at, NOW);
        let event = w.store.last_event().unwrap();
        assert_eq!(event.action, Action::AccountCreate);
        assert_eq!(event.resource, Resource::account(created.account.id));
        assert_eq!(event.customer_id, Some(w.customer.id));
        let admin_id = w.admin.acting_account().unwrap().id;
        assert_eq!(event.actor, Actor::static_token(admin_id));
        assert_eq!(event.ip.as_deref(), Some("192.0.2.1"));
        assert_eq!(event.request_id.as_deref(), Some("req-1"));
    }

    #[test]
    fn an_oidc_account_has_no_token_and_its_warnings_come_back() {
        let w = world();
        let policy = json!({"kind": "oidc", "rules": [{"services": ["*"],
            "claims": {"iss": "https://ci.example", "aud": "registry", "sub": "*"}}]});
        let created = w.create(&w.admin, "ci", policy).unwrap();
        assert!(created.token.is_none());
        assert!(
            !created.warnings.is_empty(),
            "a rule accepting any sub warns"
        );
        let listed = list(&w.registry, &w.admin).unwrap();
        assert!(listed.iter().any(|a| a.id == created.account.id));
    }

    #[test]
    fn the_quota_of_accounts_holds() {
        let mut w = world();
        // The bootstrap account is one.
        w.registry.settings.max_accounts_per_customer = 2;
        let policy = json!({"kind": "static", "services": ["*"]});
        w.create(&w.admin, "one", policy.clone()).unwrap();
        let before = w.store.events().len();
        let refused = w.create(&w.admin, "two", policy).unwrap_err();
        assert!(matches!(refused, AppError::QuotaExceeded(_)), "{refused:?}");
        assert_eq!(w.store.events().len(), before, "nothing written");
    }

    #[test]
    fn services_the_customer_does_not_own_are_named_under_policy() {
        let w = world();
        w.service("api-acme");
        let policy = json!({"kind": "static", "services": ["api-acme", "nope-acme", "web-*"]});
        let refused = w.create(&w.admin, "x", policy).unwrap_err();
        let AppError::UnknownServices(unknown) = refused else {
            panic!("{refused:?}");
        };
        assert_eq!(pointers(&unknown), ["/policy/services/1"]);
        assert!(unknown[0].message.contains("nope-acme"));
    }

    #[test]
    fn field_problems_and_policy_problems_make_one_400() {
        let w = world();
        let command = CreateAccount {
            name: None,
            policy: Some(json!({"kind": "static"})),
            problems: vec![Violation::new("/extra", "unknown field")],
        };
        let refused = create(&w.registry, &w.admin, command, NOW).unwrap_err();
        let AppError::Invalid(problems) = refused else {
            panic!("{refused:?}");
        };
        let found = pointers(&problems);
        assert_eq!(&found[..2], ["/extra", "/name"]);
        assert!(found.len() > 2);
        assert!(
            found[2..].iter().all(|p| p.starts_with("/policy")),
            "{found:?}"
        );

        let command = CreateAccount::default();
        let refused = create(&w.registry, &w.admin, command, NOW).unwrap_err();
        let AppError::Invalid(problems) = refused else {
            panic!("{refused:?}");
        };
        assert_eq!(pointers(&problems), ["/name", "/policy"]);
    }

    #[test]
    fn a_field_problem_wins_over_other_refusals_of_the_policy() {
        let w = world();
        let command = CreateAccount {
            name: None,
            policy: Some(json!({"kind": "static", "services": ["nope-acme"]})),
            problems: Vec::new(),
        };
        let refused = create(&w.registry, &w.admin, command, NOW).unwrap_err();
        assert_eq!(
            refused,
            AppError::Invalid(vec![Violation::new("/name", "name is required")])
        );
    }

    #[test]
    fn the_issuer_budget_counts_every_other_account_of_the_customer() {
        let w = world();
        let mut first = None;
        for i in 0..limits::MAX_ISSUERS_PER_CUSTOMER {
            let created = w.create(&w.admin, "ci", oidc(&format!("https://idp{i}.example")));
            first.get_or_insert(created.unwrap().account);
        }
        let refused = w
            .create(&w.admin, "one-too-many", oidc("https://new.example"))
            .unwrap_err();
        let AppError::Invalid(problems) = refused else {
            panic!("{refused:?}");
        };
        assert_eq!(pointers(&problems), ["/policy/rules/0/claims/iss"]);
        // An account changing its own issuer does not count against itself.
        let command = UpdateAccount {
            policy: Some(oidc("https://new.example")),
            ..UpdateAccount::default()
        };
        update(&w.registry, &w.admin, first.unwrap(), command, NOW).unwrap();
    }

    #[test]
    fn only_callers_with_every_service_manage_accounts() {
        let w = world();
        w.service("api-acme");
        let narrow = w.caller_with(json!({"kind": "static", "services": ["api-acme"]}));
        let policy = json!({"kind": "static", "services": ["api-acme"]});
        let refused = w.create(&narrow, "x", policy).unwrap_err();
        assert!(matches!(refused, AppError::Forbidden(_)), "{refused:?}");
        assert!(matches!(
            list(&w.registry, &narrow),
            Err(AppError::Forbidden(_))
        ));
        let id = w.admin.acting_account().unwrap().id.to_string();
        assert!(matches!(
            get(&w.registry, &narrow, &id),
            Err(AppError::Forbidden(_))
        ));
        assert!(matches!(
            delete(&w.registry, &narrow, &id, NOW),
            Err(AppError::Forbidden(_))
        ));
    }

    #[test]
    fn a_caller_with_an_allowlist_manages_only_accounts_inside_it() {
        let w = world();
        let office = w.caller_with(
            json!({"kind": "static", "services": ["*"], "ip_allowlist": ["203.0.113.0/24"]}),
        );
        let broader = json!({"kind": "static", "services": ["*"]});
        let refused = w.create(&office, "anywhere", broader).unwrap_err();
        let AppError::Forbidden(why) = refused else {
            panic!("{refused:?}");
        };
        assert!(why.contains("ip_allowlist"), "{why}");
        let inside =
            json!({"kind": "static", "services": ["*"], "ip_allowlist": ["203.0.113.8/29"]});
        w.create(&office, "inside", inside).unwrap();
        // Nor may it narrow, delete or re-key an account usable from anywhere.
        let bootstrap = w.admin.acting_account().unwrap().id.to_string();
        let refused = regenerate_token(&w.registry, &office, &bootstrap, NOW).unwrap_err();
        assert!(matches!(refused, AppError::Forbidden(_)), "{refused:?}");
        let refused = managed(&w.registry, &office, &bootstrap).unwrap_err();
        assert!(matches!(refused, AppError::Forbidden(_)), "{refused:?}");
    }

    #[test]
    fn another_customer_s_account_and_a_malformed_id_are_404() {
        let w = world();
        let (other, _) = add_customer(&w.registry, "other", Plan::Business, NOW);
        let theirs = add_account(
            &w.registry,
            &other,
            json!({"kind": "static", "services": ["*"]}),
            NOW,
        );
        let id = theirs.id.to_string();
        let expected = AppError::NotFound(format!("no service account {id:?}"));
        assert_eq!(get(&w.registry, &w.admin, &id).unwrap_err(), expected);
        assert_eq!(
            delete(&w.registry, &w.admin, &id, NOW).unwrap_err(),
            expected
        );
        assert_eq!(
            regenerate_token(&w.registry, &w.admin, &id, NOW).unwrap_err(),
            expected
        );
        assert_eq!(
            get(&w.registry, &w.admin, "not-a-uuid").unwrap_err(),
            AppError::NotFound("no service account \"not-a-uuid\"".into())
        );
        assert!(list(&w.registry, &w.admin)
            .unwrap()
            .iter()
            .all(|a| a.id != theirs.id));
    }

    #[test]
    fn an_update_changes_name_and_policy_with_its_event() {
        let w = world();
        let created = w
            .create(&w.admin, "ci", oidc("https://ci.example"))
            .unwrap();
        let account = managed(&w.registry, &w.admin, &created.account.id.to_string()).unwrap();
        let command = UpdateAccount {
            name: Some("ci-2".into()),
            policy: Some(oidc("https://other.example")),
            problems: Vec::new(),
        };
        let updated = update(&w.registry, &w.admin, account, command, NOW).unwrap();
        assert_eq!(updated.account.name, "ci-2");
        assert_eq!(updated.account.policy.issuers(), ["https://other.example"]);
        let stored = w
            .registry
            .store
            .account(created.account.id)
            .unwrap()
            .unwrap();
        assert_eq!(stored.name, "ci-2");
        let event = w.store.last_event().unwrap();
        assert_eq!(event.action, Action::AccountUpdate);
        assert_eq!(event.resource, Resource::account(created.account.id));
        let changes = &event.to_json()["changes"];
        assert_eq!(changes["name"], json!({"old": "ci", "new": "ci-2"}));
        assert_eq!(
            changes["policy"]["old"]["rules"][0]["claims"]["iss"],
            "https://ci.example"
        );
        assert_eq!(
            changes["policy"]["new"]["rules"][0]["claims"]["iss"],
            "https://other.example"
        );
        // The same again changes nothing: no event.
        let events = w.store.events_of(Action::AccountUpdate).len();
        let same = UpdateAccount {
            name: Some("ci-2".into()),
            policy: Some(oidc("https://other.example")),
            problems: Vec::new(),
        };
        let again = update(&w.registry, &w.admin, updated.account.clone(), same, NOW).unwrap();
        assert_eq!(again.account.name, "ci-2");
        assert_eq!(w.store.events_of(Action::AccountUpdate).len(), events);
    }

    #[test]
    fn a_policy_s_kind_is_immutable() {
        let w = world();
        let created = w
            .create(&w.admin, "x", json!({"kind": "static", "services": ["*"]}))
            .unwrap();
        let command = UpdateAccount {
            policy: Some(oidc("https://ci.example")),
            ..UpdateAccount::default()
        };
        let refused = update(&w.registry, &w.admin, created.account, command, NOW).unwrap_err();
        let AppError::KindImmutable(why) = refused else {
            panic!("{refused:?}");
        };
        assert_eq!(why.pointer, "/policy/kind");
        assert!(why.message.contains("cannot become"), "{why:?}");
        assert_eq!(w.store.last_event().unwrap().action, Action::AccountCreate);
    }

    #[test]
    fn an_update_may_not_widen_an_account_beyond_the_caller() {
        let w = world();
        let (office, created) = w.office_and_inside();
        let command = UpdateAccount {
            policy: Some(json!({"kind": "static", "services": ["*"]})),
            ..UpdateAccount::default()
        };
        let refused = update(&w.registry, &office, created.account, command, NOW).unwrap_err();
        assert!(matches!(refused, AppError::Forbidden(_)), "{refused:?}");
    }

    #[test]
    fn an_update_over_a_lagging_copy_is_judged_and_made_over_what_is_stored() {
        let w = world();
        let (office, created) = w.office_and_inside();
        let stale = created.account;
        // Another replica's call widened the policy; this copy has not seen it.
        let widen = UpdateAccount {
            policy: Some(json!({"kind": "static", "services": ["*"]})),
            ..UpdateAccount::default()
        };
        update(&w.registry, &w.admin, stale.clone(), widen, NOW).unwrap();

        // The office's caller managed the copy, not what is stored now.
        let rename = |name: &str| UpdateAccount {
            name: Some(name.into()),
            ..UpdateAccount::default()
        };
        let refused = update(&w.registry, &office, stale.clone(), rename("x"), NOW).unwrap_err();
        assert!(matches!(refused, AppError::Forbidden(_)), "{refused:?}");
        // The admin's rename keeps the stored policy: nothing undone, nothing refused.
        let renamed = update(&w.registry, &w.admin, stale.clone(), rename("y"), NOW).unwrap();
        let stored = (w.registry.store.account(stale.id).unwrap()).unwrap();
        assert_eq!(stored.name, "y");
        assert_eq!(stored.policy.document(), renamed.account.policy.document());
        assert_eq!(
            stored.policy.document(),
            &json!({"kind": "static", "services": ["*"]})
        );
        let changes = &w.store.last_event().unwrap().to_json()["changes"];
        assert_eq!(*changes, json!({"name": {"old": "inside", "new": "y"}}));
    }

    #[test]
    fn delete_writes_its_event_and_then_the_account_is_404() {
        let w = world();
        let created = w
            .create(&w.admin, "x", json!({"kind": "static", "services": ["*"]}))
            .unwrap();
        let id = created.account.id.to_string();
        delete(&w.registry, &w.admin, &id, NOW).unwrap();
        let event = w.store.last_event().unwrap();
        assert_eq!(event.action, Action::AccountDelete);
        assert_eq!(event.resource, Resource::account(created.account.id));
        assert!(matches!(
            get(&w.registry, &w.admin, &id),
            Err(AppError::NotFound(_))
        ));
        let token = created.token.unwrap();
        assert!(w
            .registry
            .store
            .credential(&token.lookup_id)
            .unwrap()
            .is_none());
    }

    #[test]
    fn regenerate_replaces_a_static_token() {
        let w = world();
        let created = w
            .create(&w.admin, "x", json!({"kind": "static", "services": ["*"]}))
            .unwrap();
        let old = created.token.unwrap();
        let id = created.account.id.to_string();
        let regenerated = regenerate_token(&w.registry, &w.admin, &id, NOW).unwrap();
        assert_ne!(regenerated.token.plaintext, old.plaintext);
        assert_eq!(regenerated.account.id, created.account.id);
        let store = &w.registry.store;
        assert!(store.credential(&old.lookup_id).unwrap().is_none());
        let new = store
            .credential(&regenerated.token.lookup_id)
            .unwrap()
            .unwrap();
        assert_eq!(new.hash, regenerated.token.hash);
        let event = w.store.last_event().unwrap();
        assert_eq!(event.action, Action::AccountRegenerateToken);
        assert_eq!(event.resource, Resource::account(created.account.id));
    }

    #[test]
    fn a_regeneration_over_a_lagging_copy_is_judged_and_made_over_what_is_stored() {
        let w = world();
        let (office, created) = w.office_and_inside();
        let stale = created.account;
        let renamed = UpdateAccount {
            name: Some("renamed".into()),
            ..UpdateAccount::default()
        };
        update(&w.registry, &w.admin, stale.clone(), renamed, NOW).unwrap();
        // A copy behind a rename only: the policy judged is the one stored.
        let regenerated = regenerate(&w.registry, &office, stale.clone(), NOW).unwrap();
        let store = &w.registry.store;
        assert!(store
            .credential(&created.token.unwrap().lookup_id)
            .unwrap()
            .is_none());

        // Another replica's call widened the policy; this copy has not seen it.
        let widen = UpdateAccount {
            policy: Some(json!({"kind": "static", "services": ["*"]})),
            ..UpdateAccount::default()
        };
        let widened = update(&w.registry, &w.admin, stale.clone(), widen, NOW).unwrap();
        // The office's caller managed the copy, not what is stored now: nothing is replaced.
        let refused = regenerate(&w.registry, &office, stale.clone(), NOW).unwrap_err();
        assert!(matches!(refused, AppError::Forbidden(_)), "{refused:?}");
        let token = &regenerated.token.lookup_id;
        assert_eq!(
            store.token_lookup_id(stale.id).unwrap().as_ref(),
            Some(token)
        );
        // The admin may: judged again over the stored policy, the token is replaced.
        let again = regenerate(&w.registry, &w.admin, stale, NOW).unwrap();
        let policy = again.account.policy.document();
        assert_eq!(policy, widened.account.policy.document());
        assert!(store.credential(token).unwrap().is_none());
        assert!(store.credential(&again.token.lookup_id).unwrap().is_some());
    }

    #[test]
    fn a_federated_account_whose_other_rule_signs_keeps_that_signing_in_its_own_patch() {
        const V2: &str = "https://registry.example/schemas/service-account-policy/v2.json";
        let w = world();
        w.service("k3s");
        w.service("web");
        let rules = |signs: &[&str]| {
            json!({"$schema": V2, "kind": "oidc", "rules": [
                {"services": ["*"], "actions": ["accounts:read", "accounts:write"],
                 "claims": {"iss": "https://ci.example", "aud": "registry", "sub": "admin"}},
                {"services": signs, "actions": ["tokens:sign"],
                 "claims": {"iss": "https://ci.example", "aud": "registry", "sub": "signer"}}]})
        };
        let own = add_account(&w.registry, &w.customer, rules(&["k3s"]), NOW);
        // Acting through its first rule (an identity token that matched it alone).
        let me = Caller::account(Arc::clone(&own), Some(Box::new([0])), None, origin());
        let patch = |policy: Value| UpdateAccount {
            policy: Some(policy),
            ..UpdateAccount::default()
        };
        // What signed already is kept: a PATCH of its own that signs no further is its own.
        let kept = update(
            &w.registry,
            &me,
            (*own).clone(),
            patch(rules(&["k3s"])),
            NOW,
        );
        kept.unwrap();
        // Signing anew, on another service, is another account's to grant.
        let stored = w.registry.store.account(own.id).unwrap().unwrap();
        let refused = update(&w.registry, &me, stored, patch(rules(&["k3s", "web"])), NOW);
        let AppError::Forbidden(why) = refused.unwrap_err() else {
            panic!("not a 403");
        };
        assert!(why.contains("itself"), "{why}");
    }

    #[test]
    fn an_oidc_account_has_no_token_to_regenerate() {
        let w = world();
        let created = w
            .create(&w.admin, "ci", oidc("https://ci.example"))
            .unwrap();
        let id = created.account.id.to_string();
        let refused = regenerate_token(&w.registry, &w.admin, &id, NOW).unwrap_err();
        let expected = access::may_regenerate_token(PolicyKind::Oidc).unwrap_err();
        assert_eq!(refused, AppError::BadRequest(expected.into()));
        assert_eq!(w.store.last_event().unwrap().action, Action::AccountCreate);
    }
}
