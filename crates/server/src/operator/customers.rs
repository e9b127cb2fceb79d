//! `registry customer …`: operators create customers from the command line.
//! Each command calls one use case of `registry_domain::app::customers` and prints its answer.

use crate::system::{OsRandomness, SystemClock};
use registry_domain::app::customers::{self, CreateCustomer, SetPlan};
use registry_domain::app::{AppError, Registry, Settings};
use registry_domain::ports::Clock;
use registry_domain::{Customer, ServiceAccount};
use registry_hasher::Argon2Hasher;
use registry_oidc::{VerifierKeyImport, VerifierSignatureCheck};
use registry_store::Store;
use serde_json::{json, Value};
use std::sync::Arc;

/// The use cases' ports over `store`, for the operator's commands; secrets are hashed on this
/// thread.
pub fn registry(store: &Store) -> Registry {
    Registry {
        store: Arc::new(store.clone()),
        random: Arc::new(OsRandomness),
        hasher: Arc::new(Argon2Hasher::default()),
        key_import: Arc::new(VerifierKeyImport),
        // The operator's commands make and use no managed key.
        managed_keys: None,
        signatures: Arc::new(VerifierSignatureCheck),
        settings: Settings::default(),
    }
}

/// The one sentence a failed command prints: the use case's own, or the database's failure
/// after what the command was doing.
fn failure(doing: &'static str) -> impl FnOnce(AppError) -> anyhow::Error {
    move |error| match error {
        AppError::Store(error) => anyhow::Error::new(error).context(doing),
        // A rule of the command line's flags: `/name` is `--name` (a message that starts with
        // the member's name says it once).
        AppError::Invalid(violations) => anyhow::anyhow!(violations
            .iter()
            .map(|v| {
                let flag = v.pointer.trim_start_matches('/');
                let message = (v.message.strip_prefix(flag))
                    .and_then(|rest| rest.strip_prefix(' '))
                    .unwrap_or(&v.message);
                format!("--{flag} {message}")
            })
            .collect::<Vec<_>>()
            .join("; ")),
        other => anyhow::Error::new(other),
    }
}

fn customer_json(c: &Customer) -> Value {
    json!({
        "id": c.id.to_string(),
        "name": c.name,
        "tenant": c.tenant,
        "plan": c.plan.as_str(),
        "disabledAt": c.disabled_at.map(registry_domain::timestamp::rfc3339),
    })
}

/// The account and token a command minted, as printed.
fn minted_json(account: &ServiceAccount, token: String) -> Value {
    json!({
        "serviceAccount": {
            "id": account.id.to_string(),
            "name": account.name,
            "policy": account.policy.document(),
            "createdAt": registry_domain::timestamp::rfc3339(account.created_at),
        },
        "token": token,
    })
}

/// Creates a customer with its first static service account; returns what to print.
pub fn create(store: &Store, tenant: &str, plan: &str, name: &str) -> anyhow::Result<Value> {
    let command = CreateCustomer {
        tenant: tenant.to_owned(),
        plan: plan.to_owned(),
        name: name.to_owned(),
    };
    let created = customers::create(&registry(store), command, SystemClock.now())
        .map_err(failure("could not create the customer"))?;
    let mut printed = minted_json(&created.account, created.token);
    printed["customer"] = customer_json(&created.customer);
    Ok(printed)
}

/// Every customer.
pub fn list(store: &Store) -> anyhow::Result<Value> {
    let customers =
        customers::list(&registry(store)).map_err(failure("could not list customers"))?;
    Ok(Value::Array(customers.iter().map(customer_json).collect()))
}

/// Changes a customer's plan (with its `customer.update` event when the plan is another one).
pub fn set_plan(store: &Store, tenant: &str, plan: &str) -> anyhow::Result<Value> {
    let command = SetPlan {
        tenant: tenant.to_owned(),
        plan: plan.to_owned(),
    };
    let customer = customers::set_plan(&registry(store), command, SystemClock.now())
        .map_err(failure("could not change the plan"))?;
    Ok(customer_json(&customer))
}

/// Disables (`disabled`) or enables a customer; prints it.
pub fn set_disabled(store: &Store, tenant: &str, disabled: bool) -> anyhow::Result<Value> {
    let doing = if disabled {
        "could not disable the customer"
    } else {
        "could not enable the customer"
    };
    let customer = customers::set_disabled(&registry(store), tenant, disabled, SystemClock.now())
        .map_err(failure(doing))?;
    Ok(customer_json(&customer))
}

/// Deletes a customer and everything it holds.
pub fn delete(store: &Store, tenant: &str) -> anyhow::Result<Value> {
    customers::delete(&registry(store), tenant, SystemClock.now())
        .map_err(failure("could not delete the customer"))?;
    Ok(json!({"deleted": tenant}))
}

/// Mints a new account on every service for a customer; prints it with its token.
pub fn mint_token(store: &Store, tenant: &str) -> anyhow::Result<Value> {
    let (account, token) = customers::mint_token(&registry(store), tenant, SystemClock.now())
        .map_err(failure("could not mint a token"))?;
    Ok(minted_json(&account, token))
}
