//! Customers: operators create them, list them and change their plan from the
//! command line. There is no caller: the actor of their events is the operator.

use crate::app::{AppError, Registry};
use crate::audit::{Action, Actor, AuditEvent, Resource};
use crate::credentials::{self, CredentialKind};
use crate::naming::validate_tenant;
use crate::policy::Policy;
use crate::ports::{Ceiling, CredentialRecord, Storage, StoreResult};
use crate::text::{text_violation, TextKind};
use crate::timestamp::rfc3339_or_null;
use crate::{Customer, Plan, ServiceAccount, StoreError, Violation};
use serde_json::json;
use time::OffsetDateTime;
use uuid::Uuid;

/// `registry customer create`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateCustomer {
    /// The tenant suffix (see [`validate_tenant`]).
    pub tenant: String,
    /// The plan's name (`free`, `team`, `business`, `enterprise`).
    pub plan: String,
    /// The display name; its bootstrap account is "{name} bootstrap".
    pub name: String,
}

/// A new customer with its bootstrap account and that account's token.
pub struct CreatedCustomer {
    /// The customer.
    pub customer: Customer,
    /// Its first service account: static, on every service (`"*"`).
    pub account: ServiceAccount,
    /// The account's static token: shown to the operator once, never stored.
    pub token: String,
}

impl std::fmt::Debug for CreatedCustomer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreatedCustomer")
            .field("customer", &self.customer)
            .field("account", &self.account.id)
            .field("token", &"<redacted>")
            .finish()
    }
}

/// `registry customer set-plan`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetPlan {
    /// The customer's tenant suffix.
    pub tenant: String,
    /// The new plan's name.
    pub plan: String,
}

/// The plan a name stands for, or a 400 that lists the plans.
fn plan(name: &str) -> Result<Plan, AppError> {
    name.parse()
        .map_err(|unknown: crate::customer::UnknownPlan| AppError::BadRequest(unknown.to_string()))
}

/// The 404 of a tenant suffix that no customer has.
pub fn unknown_tenant(tenant: &str) -> AppError {
    AppError::NotFound(format!("no customer has the tenant suffix {tenant:?}"))
}

/// Creates a customer with its bootstrap account (a static policy on `"*"`, named
/// "{name} bootstrap") and that account's token, hashed through the port, with the
/// `customer.create` event, all in one storage call. A taken tenant suffix is a
/// [`AppError::Conflict`]; an empty name, or one holding a control character
/// ([`crate::text::check_text`]), is [`AppError::Invalid`] at `/name`.
pub fn create(
    registry: &Registry,
    command: CreateCustomer,
    now: OffsetDateTime,
) -> Result<CreatedCustomer, AppError> {
    let CreateCustomer {
        tenant,
        plan: plan_name,
        name,
    } = command;
    validate_tenant(&tenant)?;
    let plan = plan(&plan_name)?;
    // The name is printed in the operator's terminal and in every bootstrap account's name.
    // Checked first: a NEL alone trims to nothing, and is refused for what it holds.
    if let Some(problem) = text_violation("/name", "name", &name, TextKind::Line) {
        return Err(AppError::Invalid(vec![problem]));
    }
    if name.trim().is_empty() {
        return Err(AppError::Invalid(vec![Violation::new(
            "/name",
            "must not be empty",
        )]));
    }
    let customer = Customer {
        id: Uuid::new_v4(),
        name,
        tenant,
        plan,
        created_at: now,
        disabled_at: None,
    };
    let (account, token, record) = account_on_every_service(
        registry,
        &customer,
        format!("{} bootstrap", customer.name),
        now,
    )?;
    let event = AuditEvent::new(
        Action::CustomerCreate,
        Resource::customer(customer.id),
        Actor::operator(),
        Some(customer.id),
        now,
    );
    match registry
        .store
        .create_customer(&customer, &account, &record, &event)
    {
        Ok(()) => Ok(CreatedCustomer {
            customer,
            account,
            token,
        }),
        Err(StoreError::Conflict(_)) => Err(AppError::Conflict(format!(
            "the tenant suffix {:?} is already taken",
            customer.tenant
        ))),
        Err(other) => Err(other.into()),
    }
}

/// A static account of `customer` on every service (`"*"`), its token (shown once) and the
/// token's record (hashed through the port).
fn account_on_every_service(
    registry: &Registry,
    customer: &Customer,
    name: String,
    now: OffsetDateTime,
) -> Result<(ServiceAccount, String, CredentialRecord), AppError> {
    let policy = Policy::parse(&json!({"kind": "static", "services": ["*"]}))
        .map_err(|e| AppError::Invalid(e.into_violations()))?
        .policy;
    let account = ServiceAccount {
        id: Uuid::new_v4(),
        customer_id: customer.id,
        name,
        policy,
        created_at: now,
        last_used_at: None,
    };
    let token = credentials::generate(CredentialKind::StaticToken, &*registry.random);
    let record = CredentialRecord {
        lookup_id: token.lookup_id.clone(),
        hash: registry.hasher.hash(&token.plaintext)?,
    };
    Ok((account, token.plaintext, record))
}

/// Every customer, oldest first.
pub fn list(registry: &Registry) -> Result<Vec<Customer>, AppError> {
    Ok(registry.store.customers()?)
}

/// Changes the plan of the customer with that tenant suffix, with the `customer.update` event
/// recording the plan before and after. The plan it already has is no change: the customer is
/// answered as it is and no event is written (docs/api.md, "Audit trail and last use"). An
/// unknown plan is a 400, an unknown tenant a 404 ([`unknown_tenant`]).
pub fn set_plan(
    registry: &Registry,
    command: SetPlan,
    now: OffsetDateTime,
) -> Result<Customer, AppError> {
    let plan = plan(&command.plan)?;
    update(
        registry,
        &command.tenant,
        Action::CustomerUpdate,
        now,
        |before, event| {
            event.with_change("plan", json!(before.plan.as_str()), json!(plan.as_str()))
        },
        |store, event| store.set_plan(&command.tenant, plan, event),
    )
}

/// The customer with that tenant suffix, or the 404 of [`unknown_tenant`].
fn by_tenant(registry: &Registry, tenant: &str) -> Result<Customer, AppError> {
    registry
        .store
        .customer_by_tenant(tenant)?
        .ok_or_else(|| unknown_tenant(tenant))
}

/// An operator's change to the customer with that tenant suffix, made by `change` with an event
/// of `action` (which the store writes only when something changed) carrying what `record`
/// says changed, from the customer as it was: the customer as it is after it.
fn update(
    registry: &Registry,
    tenant: &str,
    action: Action,
    now: OffsetDateTime,
    record: impl FnOnce(&Customer, AuditEvent) -> AuditEvent,
    change: impl FnOnce(&dyn Storage, &AuditEvent) -> StoreResult<Option<Customer>>,
) -> Result<Customer, AppError> {
    // Tenant suffixes never change: the id read here is the one the store changes (or, should
    // the customer be deleted meanwhile, the store finds no one). Operators' changes of one
    // customer are rare enough that the values read here are those the change replaces.
    let customer = by_tenant(registry, tenant)?;
    let event = AuditEvent::new(
        action,
        Resource::customer(customer.id),
        Actor::operator(),
        Some(customer.id),
        now,
    );
    let event = record(&customer, event);
    change(&*registry.store, &event)?.ok_or_else(|| unknown_tenant(tenant))
}

/// `registry customer disable` (`disabled`: true) and `enable`: the customer by tenant suffix
/// is disabled since `now` (its credentials are refused and its services' documents not served,
/// on every replica from its next request) or enabled again, with a `customer.disable` or
/// `customer.enable` event recording `disabledAt` before and after, when that changes it.
/// Disabling a disabled customer changes nothing (it stays disabled since the first time). An
/// unknown tenant is a 404 ([`unknown_tenant`]).
pub fn set_disabled(
    registry: &Registry,
    tenant: &str,
    disabled: bool,
    now: OffsetDateTime,
) -> Result<Customer, AppError> {
    let action = if disabled {
        Action::CustomerDisable
    } else {
        Action::CustomerEnable
    };
    update(
        registry,
        tenant,
        action,
        now,
        |before, event| {
            let after = if disabled {
                before.disabled_at.or(Some(now))
            } else {
                None
            };
            event.with_change(
                "disabledAt",
                rfc3339_or_null(before.disabled_at),
                rfc3339_or_null(after),
            )
        },
        |store, event| store.set_disabled(tenant, disabled.then_some(now), event),
    )
}

/// `registry customer delete`: the customer by tenant suffix and everything it holds, gone from
/// every replica at its next request, at `now`. An unknown tenant is a 404 ([`unknown_tenant`]).
pub fn delete(registry: &Registry, tenant: &str, now: OffsetDateTime) -> Result<(), AppError> {
    if registry.store.delete_customer(tenant, now)? {
        Ok(())
    } else {
        Err(unknown_tenant(tenant))
    }
}

/// `registry customer token`: a new static account of the customer on every service, and its
/// token (the way back after a lost bootstrap token), with the `account.create` event of the
/// operator. Not counted against the customer's accounts quota: it is the operator's, and the
/// way back must not be closed by a full quota. An unknown tenant is a 404.
pub fn mint_token(
    registry: &Registry,
    tenant: &str,
    now: OffsetDateTime,
) -> Result<(ServiceAccount, String), AppError> {
    let customer = by_tenant(registry, tenant)?;
    let name = format!("{} operator token", customer.name);
    let (account, token, record) = account_on_every_service(registry, &customer, name, now)?;
    let event = AuditEvent::new(
        Action::AccountCreate,
        Resource::account(account.id),
        Actor::operator(),
        Some(customer.id),
        now,
    );
    registry
        .store
        .create_account(&account, Some(&record), Ceiling::NONE, None, &event)?;
    Ok((account, token))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::testing::{registry_over, MemoryStore};
    use crate::audit::{ActorKind, ResourceKind};
    use crate::credentials::parse;
    use crate::naming::NamingError;
    use crate::policy::PolicyKind;
    use crate::ports::{CredentialOwner, CredentialStore, CustomerStore};
    use std::sync::Arc;
    use time::macros::datetime;

    const NOW: OffsetDateTime = datetime!(2026-11-23 12:00 UTC);
    const LATER: OffsetDateTime = datetime!(2026-11-24 09:30 UTC);

    /// A registry holding customer `acme` on `plan` (see `testing::registry_over`).
    fn setup(plan: Plan) -> (Registry, Arc<MemoryStore>, Customer) {
        let store = Arc::new(MemoryStore::default());
        let (registry, acme, _) = registry_over(store.clone(), plan, NOW);
        (registry, store, acme)
    }

    fn new(tenant: &str, plan: &str, name: &str) -> CreateCustomer {
        CreateCustomer {
            tenant: tenant.into(),
            plan: plan.into(),
            name: name.into(),
        }
    }

    fn set(tenant: &str, plan: &str) -> SetPlan {
        SetPlan {
            tenant: tenant.into(),
            plan: plan.into(),
        }
    }

    #[test]
    fn create_makes_the_customer_its_bootstrap_account_and_token_with_its_event() {
        let (registry, store, _) = setup(Plan::Free);

        let created = create(&registry, new("globex", "team", "Globex"), LATER).unwrap();

        let customer = &created.customer;
        assert_eq!(
            (customer.tenant.as_str(), customer.name.as_str()),
            ("globex", "Globex")
        );
        assert_eq!(customer.plan, Plan::Team);
        assert_eq!(customer.created_at, LATER);
        assert_eq!(
            store.customer_by_tenant("globex").unwrap().as_ref(),
            Some(customer)
        );
        let account = &created.account;
        assert_eq!(account.customer_id, customer.id);
        assert_eq!(account.name, "Globex bootstrap");
        assert_eq!(account.policy.kind(), PolicyKind::Static);
        assert_eq!(
            account.policy.document(),
            &json!({"kind": "static", "services": ["*"]})
        );
        let token = parse(&created.token).expect("a well-formed token");
        assert_eq!(token.kind, CredentialKind::StaticToken);
        let stored = store.credential(token.lookup_id).unwrap().unwrap();
        assert_eq!(stored.owner, CredentialOwner::Account(account.id));
        assert_eq!(stored.hash, format!("plain:{}", created.token));
        assert!(!format!("{created:?}").contains(&created.token));

        let event = store.last_event().unwrap();
        assert_eq!(event.action, Action::CustomerCreate);
        assert_eq!(event.actor, Actor::operator());
        assert_eq!(event.customer_id, Some(customer.id));
        assert_eq!(event.resource.kind, ResourceKind::Customer);
        assert_eq!(event.resource.id, customer.id.to_string());
        assert_eq!((event.ip.as_ref(), event.at), (None, LATER));
    }

    #[test]
    fn a_taken_tenant_is_a_conflict_and_changes_nothing() {
        let (registry, store, acme) = setup(Plan::Free);
        let before = store.events();

        let refused = create(&registry, new("acme", "team", "Other"), LATER).unwrap_err();

        assert_eq!(
            refused,
            AppError::Conflict("the tenant suffix \"acme\" is already taken".into())
        );
        assert_eq!(store.customers().unwrap(), vec![acme]);
        assert_eq!(store.events(), before);
    }

    #[test]
    fn create_refuses_a_bad_tenant_plan_or_name_before_writing() {
        let (registry, store, _) = setup(Plan::Free);
        let before = store.events();

        let tenant = create(&registry, new("foo-acme", "team", "F"), LATER).unwrap_err();
        assert_eq!(
            tenant,
            AppError::Naming(NamingError::InvalidTenant("foo-acme".into()))
        );
        let plan = create(&registry, new("globex", "gold", "G"), LATER).unwrap_err();
        assert_eq!(
            plan.to_string(),
            "unknown plan \"gold\": expected free, team, business or enterprise"
        );
        let name = create(&registry, new("globex", "team", "  "), LATER).unwrap_err();
        assert_eq!(
            name,
            AppError::Invalid(vec![Violation::new("/name", "must not be empty")])
        );
        for bad in [
            "Glo\u{1b}]52;c;aGk=\u{7}bex",
            "Globex\nInc",
            "Globex\u{85}",
            "G\u{2028}",
        ] {
            match create(&registry, new("globex", "team", bad), LATER).unwrap_err() {
                AppError::Invalid(problems) => {
                    assert_eq!(problems.len(), 1, "{bad:?}");
                    assert_eq!(problems[0].pointer, "/name", "{bad:?}");
                    assert!(problems[0].message.contains("control"), "{bad:?}");
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        assert_eq!(store.customers().unwrap().len(), 1);
        assert_eq!(store.events(), before);
    }

    #[test]
    fn list_is_every_customer_oldest_first() {
        let (registry, _, acme) = setup(Plan::Free);
        let globex = create(&registry, new("globex", "team", "Globex"), LATER).unwrap();

        assert_eq!(list(&registry).unwrap(), vec![acme, globex.customer]);
    }

    #[test]
    fn set_plan_changes_the_plan_with_the_customer_update_event() {
        let (registry, store, acme) = setup(Plan::Free);

        let updated = set_plan(&registry, set("acme", "enterprise"), LATER).unwrap();

        assert_eq!(
            updated,
            Customer {
                plan: Plan::Enterprise,
                ..acme.clone()
            }
        );
        assert_eq!(
            store.customer(acme.id).unwrap().unwrap().plan,
            Plan::Enterprise
        );
        let events = store.events_of(Action::CustomerUpdate);
        assert_eq!(events.len(), 1);
        let event = &events[0];
        assert_eq!(event.actor.kind, ActorKind::Operator);
        assert_eq!(event.customer_id, Some(acme.id));
        assert_eq!(event.resource, Resource::customer(acme.id));
        assert_eq!(event.at, LATER);
        assert_eq!(Action::CustomerUpdate.as_str(), "customer.update");
        assert_eq!(
            event.to_json()["changes"],
            json!({"plan": {"old": "free", "new": "enterprise"}})
        );
    }

    #[test]
    fn the_plan_a_customer_already_has_writes_no_event() {
        let (registry, store, acme) = setup(Plan::Team);

        let same = set_plan(&registry, set("acme", "team"), LATER).unwrap();

        assert_eq!(same, acme);
        assert!(store.events_of(Action::CustomerUpdate).is_empty());
    }

    #[test]
    fn set_plan_of_an_unknown_tenant_or_plan_is_refused_without_an_event() {
        let (registry, store, acme) = setup(Plan::Team);
        let before = store.events();

        let nobody = set_plan(&registry, set("nobody", "free"), LATER).unwrap_err();
        assert_eq!(
            nobody,
            AppError::NotFound("no customer has the tenant suffix \"nobody\"".into())
        );
        let gold = set_plan(&registry, set("acme", "gold"), LATER).unwrap_err();
        assert!(matches!(gold, AppError::BadRequest(_)), "{gold:?}");
        assert_eq!(store.customer(acme.id).unwrap().unwrap().plan, Plan::Team);
        assert_eq!(store.events(), before);
    }

    #[test]
    fn a_disabled_customer_holds_nothing_the_requests_read_until_enabled() {
        use crate::ports::AccountStore;
        let (registry, store, acme) = setup(Plan::Business);
        let created = create(&registry, new("globex", "team", "Globex"), NOW).unwrap();
        let account = created.account.id;
        let before = store.events().len();

        let disabled = set_disabled(&registry, "globex", true, LATER).unwrap();
        assert_eq!(disabled.disabled_at, Some(LATER));
        assert!(store.account(account).unwrap().is_none());
        assert_eq!(store.events().len(), before + 1);
        let event = store.last_event().unwrap();
        assert_eq!(event.action, Action::CustomerDisable);
        assert_eq!(event.to_json()["action"], "customer.disable");
        assert_eq!(
            event.to_json()["changes"],
            json!({"disabledAt": {"old": null, "new": "2026-11-24T09:30:00Z"}})
        );
        // Again: nothing changes, no event, disabled since the first time.
        let again = set_disabled(&registry, "globex", true, LATER + time::Duration::hours(1));
        assert_eq!(again.unwrap().disabled_at, Some(LATER));
        assert_eq!(store.events().len(), before + 1);
        // Another customer is untouched.
        assert!(store
            .accounts_of(acme.id)
            .unwrap()
            .iter()
            .all(|a| store.account(a.id).unwrap().is_some()));

        let enabled = set_disabled(&registry, "globex", false, LATER).unwrap();
        assert_eq!(enabled.disabled_at, None);
        let event = store.last_event().unwrap();
        assert_eq!(event.action, Action::CustomerEnable);
        assert_eq!(
            event.to_json()["changes"],
            json!({"disabledAt": {"old": "2026-11-24T09:30:00Z", "new": null}})
        );
        assert_eq!(store.events().len(), before + 2);
        // Enabling an enabled customer: no event.
        set_disabled(&registry, "globex", false, LATER).unwrap();
        assert_eq!(store.events().len(), before + 2);
        assert!(store.events_of(Action::CustomerUpdate).is_empty());
        assert_eq!(store.account(account).unwrap().map(|a| a.id), Some(account));
        assert!(matches!(
            set_disabled(&registry, "nobody", true, LATER),
            Err(AppError::NotFound(_))
        ));
    }

    #[test]
    fn a_deleted_customer_leaves_nothing_and_a_minted_token_works() {
        use crate::ports::AccountStore;
        let (registry, store, _) = setup(Plan::Business);
        let created = create(&registry, new("globex", "team", "Globex"), NOW).unwrap();

        let (account, token) = mint_token(&registry, "globex", LATER).unwrap();
        assert_eq!(
            account.policy.document(),
            &json!({"kind": "static", "services": ["*"]})
        );
        let parsed = parse(&token).unwrap();
        let stored = store.credential(parsed.lookup_id).unwrap().unwrap();
        assert_eq!(stored.owner, CredentialOwner::Account(account.id));
        let event = store.last_event().unwrap();
        assert_eq!(
            (event.action, event.actor.clone()),
            (Action::AccountCreate, Actor::operator())
        );

        delete(&registry, "globex", LATER).unwrap();
        assert_eq!(store.customer_by_tenant("globex").unwrap(), None);
        assert!(store.account(created.account.id).unwrap().is_none());
        assert_eq!(store.credential(parsed.lookup_id).unwrap(), None);
        assert!(matches!(
            delete(&registry, "globex", LATER),
            Err(AppError::NotFound(_))
        ));
        assert!(matches!(
            mint_token(&registry, "globex", LATER),
            Err(AppError::NotFound(_))
        ));
    }
}
