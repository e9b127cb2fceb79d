//! The use cases' test fixtures: a [`registry`] holding one customer over the in-memory ports
//! of [`crate::testing`], accounts added as an operator would, and the caller of every test.

use crate::app::{Caller, Origin, Registry, Settings};
use crate::audit::{Action, Actor, AuditEvent, Resource};
use crate::policy::Policy;
use crate::ports::Ceiling;
use crate::{Customer, Plan, ServiceAccount};
use serde_json::Value;
use std::sync::Arc;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::testing::{AcceptAllKeys, GoodSignatures, PlainHasher};
pub(crate) use crate::testing::{FixedRandomness, MemoryStore};

/// [`registry_over`] a fresh store.
pub(crate) fn registry(
    plan: Plan,
    now: OffsetDateTime,
) -> (Registry, Customer, Arc<ServiceAccount>) {
    registry_over(Arc::new(MemoryStore::default()), plan, now)
}

/// A registry over `store` (which the test keeps, to look at what was written) and the other
/// fakes, with default settings, holding one customer of tenant `acme` on `plan`, created with
/// its bootstrap account (static policy, every service) as an operator would.
pub(crate) fn registry_over(
    store: Arc<MemoryStore>,
    plan: Plan,
    now: OffsetDateTime,
) -> (Registry, Customer, Arc<ServiceAccount>) {
    let registry = Registry {
        store: store.clone(),
        random: Arc::new(FixedRandomness::default()),
        hasher: Arc::new(PlainHasher),
        key_import: Arc::new(AcceptAllKeys),
        signatures: Arc::new(GoodSignatures),
        managed_keys: Some(Arc::new(crate::testing::CountingKeys::default())),
        settings: Settings::default(),
    };
    let (customer, account) = add_customer(&registry, "acme", plan, now);
    (registry, customer, account)
}

/// Adds a customer of `tenant` on `plan` (named after it: `acme` is Acme) with its bootstrap account, as an
/// operator would: the store holds only rows whose customer exists, as the real store does.
pub(crate) fn add_customer(
    registry: &Registry,
    tenant: &str,
    plan: Plan,
    now: OffsetDateTime,
) -> (Customer, Arc<ServiceAccount>) {
    let command = super::customers::CreateCustomer {
        tenant: tenant.into(),
        plan: plan.as_str().into(),
        name: tenant[..1].to_uppercase() + &tenant[1..],
    };
    let created = super::customers::create(registry, command, now).unwrap();
    (created.customer, Arc::new(created.account))
}

fn new_account(
    customer: &Customer,
    name: &str,
    policy: Value,
    now: OffsetDateTime,
) -> ServiceAccount {
    ServiceAccount {
        id: Uuid::new_v4(),
        customer_id: customer.id,
        name: name.into(),
        policy: Policy::parse(&policy).expect("a valid policy").policy,
        created_at: now,
        last_used_at: None,
    }
}

/// Adds an account of `customer` with `policy` (without a token) to the registry's store, as an
/// operator would: the store gets its `account.create` event.
pub(crate) fn add_account(
    registry: &Registry,
    customer: &Customer,
    policy: Value,
    now: OffsetDateTime,
) -> Arc<ServiceAccount> {
    let account = new_account(customer, "added", policy, now);
    let event = AuditEvent::new(
        Action::AccountCreate,
        Resource::account(account.id),
        Actor::operator(),
        Some(customer.id),
        now,
    );
    registry
        .store
        .create_account(&account, None, Ceiling::NONE, None, &event)
        .unwrap();
    Arc::new(account)
}

/// The origin of every test call: 192.0.2.1, request `req-1`.
pub(crate) fn origin() -> Origin {
    Origin::new("192.0.2.1".parse().unwrap(), Some("req-1".into()))
}

/// `account` calling with its static token from [`origin`].
pub(crate) fn caller(account: Arc<ServiceAccount>) -> Caller {
    Caller::account(account, None, None, origin())
}
