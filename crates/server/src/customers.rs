//! `registry customer …`: operators create customers from the command line (DECISIONS §1).

use crate::adapters::{Argon2Hasher, OsRandomness, SystemClock};
use crate::views;
use anyhow::{bail, Context};
use registry_domain::audit::{Action, Actor, AuditEvent, Resource};
use registry_domain::credentials::{self, CredentialKind};
use registry_domain::naming::validate_tenant;
use registry_domain::policy::Policy;
use registry_domain::ports::{Clock, CredentialRecord, CustomerStore, SecretHasher};
use registry_domain::{Customer, Plan, ServiceAccount, StoreError};
use registry_store::Store;
use serde_json::{json, Value};

fn customer_json(c: &Customer) -> Value {
    json!({"id": c.id.to_string(), "name": c.name, "tenant": c.tenant, "plan": c.plan.as_str()})
}

/// Creates a customer with its first static service account; returns what to print.
pub fn create(store: &Store, tenant: &str, plan: &str, name: &str) -> anyhow::Result<Value> {
    validate_tenant(tenant)?;
    let plan: Plan = plan.parse()?;
    if name.trim().is_empty() {
        bail!("--name must not be empty");
    }
    let now = SystemClock.now();
    let customer = Customer {
        id: uuid::Uuid::new_v4(),
        name: name.to_owned(),
        tenant: tenant.to_owned(),
        plan,
        created_at: now,
    };
    let policy = Policy::parse(&json!({"kind": "static", "services": ["*"]}))
        .map_err(|v| anyhow::anyhow!("bootstrap policy rejected: {v:?}"))?
        .policy;
    let account = ServiceAccount {
        id: uuid::Uuid::new_v4(),
        customer_id: customer.id,
        name: format!("{name} bootstrap"),
        policy,
        created_at: now,
        last_used_at: None,
    };
    let token = credentials::generate(CredentialKind::StaticToken, &OsRandomness);
    let record = CredentialRecord {
        lookup_id: token.lookup_id.clone(),
        hash: Argon2Hasher::default().hash(&token.plaintext),
    };
    let event = AuditEvent::new(
        Action::CustomerCreate,
        Resource::customer(customer.id),
        Actor::operator(),
        Some(customer.id),
        now,
    );
    match store.create_customer(&customer, &account, &record, &event) {
        Err(StoreError::Conflict(_)) => bail!("the tenant suffix {tenant:?} is already taken"),
        other => other.context("could not create the customer")?,
    }
    Ok(json!({
        "customer": customer_json(&customer),
        "serviceAccount": {
            "id": account.id.to_string(),
            "name": account.name,
            "policy": account.policy.document(),
            "createdAt": views::timestamp(account.created_at),
        },
        "token": token.plaintext,
    }))
}

/// Every customer.
pub fn list(store: &Store) -> anyhow::Result<Value> {
    let customers = store.customers().context("could not list customers")?;
    Ok(Value::Array(customers.iter().map(customer_json).collect()))
}

/// Changes a customer's plan.
pub fn set_plan(store: &Store, tenant: &str, plan: &str) -> anyhow::Result<Value> {
    let plan: Plan = plan.parse()?;
    match store
        .set_plan(tenant, plan)
        .context("could not change the plan")?
    {
        Some(customer) => Ok(customer_json(&customer)),
        None => bail!("no customer has the tenant suffix {tenant:?}"),
    }
}
