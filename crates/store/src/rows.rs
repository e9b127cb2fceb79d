//! Rows as stored, and their conversion to and from domain types.
//!
//! Times are unix milliseconds: a value read back is the value written, truncated to the
//! millisecond.

use crate::error::{Failure, Res};
use diesel::Queryable;
use registry_domain::keys::KeyState;
use registry_domain::policy::Policy;
use registry_domain::service::PublishedConfig;
use registry_domain::{Customer, Plan, Service, ServiceAccount, StoreError};
use time::OffsetDateTime;
use uuid::Uuid;

fn corrupt(what: impl std::fmt::Display) -> Failure {
    Failure(StoreError::Corrupt(what.to_string()))
}

/// Unix milliseconds of `t`, rounded toward the past.
pub(crate) fn millis(t: OffsetDateTime) -> i64 {
    let ms = t.unix_timestamp_nanos().div_euclid(1_000_000);
    // Beyond ±292 million years; clamping keeps ordering without a failure path.
    i64::try_from(ms).unwrap_or(if ms < 0 { i64::MIN } else { i64::MAX })
}

/// The instant `ms` unix milliseconds.
pub(crate) fn instant(ms: i64) -> Res<OffsetDateTime> {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .map_err(|_| corrupt(format_args!("timestamp {ms}")))
}

pub(crate) fn uuid(text: &str) -> Res<Uuid> {
    Uuid::parse_str(text).map_err(|_| corrupt(format_args!("id {text:?}")))
}

/// The id as stored: hyphenated lower case, so that equal ids compare equal as text.
pub(crate) fn id_text(id: Uuid) -> String {
    id.hyphenated().to_string()
}

#[derive(Queryable)]
pub(crate) struct CustomerRow {
    id: String,
    name: String,
    tenant: String,
    plan: String,
    created_at: i64,
}

impl CustomerRow {
    pub(crate) fn into_domain(self) -> Res<Customer> {
        Ok(Customer {
            id: uuid(&self.id)?,
            plan: self.plan.parse::<Plan>().map_err(|_| {
                corrupt(format_args!("plan {:?} of customer {}", self.plan, self.id))
            })?,
            name: self.name,
            tenant: self.tenant,
            created_at: instant(self.created_at)?,
        })
    }
}

#[derive(Queryable)]
pub(crate) struct ServiceRow {
    id: String,
    customer_id: Option<String>,
    subdomain: String,
    title: Option<String>,
    description: Option<String>,
    created_at: i64,
    expires_at: Option<i64>,
}

impl ServiceRow {
    pub(crate) fn into_domain(self) -> Res<Service> {
        Ok(Service {
            id: uuid(&self.id)?,
            customer_id: self.customer_id.as_deref().map(uuid).transpose()?,
            subdomain: self.subdomain,
            title: self.title,
            description: self.description,
            created_at: instant(self.created_at)?,
            expires_at: self.expires_at.map(instant).transpose()?,
        })
    }
}

#[derive(Queryable)]
pub(crate) struct AccountRow {
    id: String,
    customer_id: String,
    name: String,
    // The policy document says its kind too; the column exists for queries and checks.
    _kind: String,
    policy: String,
    created_at: i64,
    last_used_at: Option<i64>,
}

impl AccountRow {
    pub(crate) fn into_domain(self) -> Res<ServiceAccount> {
        let document: serde_json::Value = serde_json::from_str(&self.policy)
            .map_err(|e| corrupt(format_args!("policy of account {}: {e}", self.id)))?;
        let policy = Policy::from_stored(&document).map_err(|violations| {
            let why: Vec<String> = violations
                .iter()
                .map(|v| format!("{} {}", v.pointer, v.message))
                .collect();
            corrupt(format_args!(
                "policy of account {}: {}",
                self.id,
                why.join("; ")
            ))
        })?;
        Ok(ServiceAccount {
            id: uuid(&self.id)?,
            customer_id: uuid(&self.customer_id)?,
            name: self.name,
            policy,
            created_at: instant(self.created_at)?,
            last_used_at: self.last_used_at.map(instant).transpose()?,
        })
    }
}

/// The policy as stored: the document as JSON text.
pub(crate) fn policy_text(policy: &Policy) -> Res<String> {
    serde_json::to_string(policy.document()).map_err(|e| {
        Failure(StoreError::Unavailable(format!(
            "cannot serialize policy: {e}"
        )))
    })
}

#[derive(Queryable)]
pub(crate) struct ConfigRow {
    service_id: String,
    openid_configuration: String,
    jwks: String,
    updated_at: i64,
    key_state: String,
    // What `key_state` says, kept as a column for the reaper's query.
    key_expires_at: Option<i64>,
    previous_change_at: Option<i64>,
}

impl ConfigRow {
    /// The stored `key_expires_at` (milliseconds), as the reaper sees it.
    pub(crate) fn key_expires_at(&self) -> Option<i64> {
        self.key_expires_at
    }

    pub(crate) fn into_domain(self) -> Res<PublishedConfig> {
        let updated_at = instant(self.updated_at)?;
        let keys = if self.key_state.is_empty() {
            // Published before the lifecycle was recorded: every key current.
            let jwks: serde_json::Value = serde_json::from_str(&self.jwks).map_err(|e| {
                corrupt(format_args!("key set of service {}: {e}", self.service_id))
            })?;
            KeyState::of_uploaded(&jwks, updated_at)
        } else {
            serde_json::from_str(&self.key_state).map_err(|e| {
                corrupt(format_args!(
                    "key state of service {}: {e}",
                    self.service_id
                ))
            })?
        };
        Ok(PublishedConfig {
            service_id: uuid(&self.service_id)?,
            openid_configuration: self.openid_configuration,
            jwks: self.jwks,
            updated_at,
            previous_change_at: self.previous_change_at.map(instant).transpose()?,
            keys,
        })
    }
}

/// The key state as stored: JSON text.
pub(crate) fn key_state_text(keys: &KeyState) -> Res<String> {
    serde_json::to_string(keys).map_err(|e| {
        Failure(StoreError::Unavailable(format!(
            "cannot serialize a key state: {e}"
        )))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn millis_round_trip_truncates_toward_the_past() {
        let t = datetime!(2026-11-21 10:00:00.123_456_789 UTC);
        assert_eq!(
            instant(millis(t)).unwrap(),
            datetime!(2026-11-21 10:00:00.123 UTC)
        );
        let before_epoch = datetime!(1969-12-31 23:59:59.999_5 UTC);
        assert_eq!(millis(before_epoch), -1);
        assert_eq!(instant(-1).unwrap(), datetime!(1969-12-31 23:59:59.999 UTC));
    }

    #[test]
    fn ids_are_stored_hyphenated_lower_case() {
        let id = Uuid::parse_str("6F9619FF8B86D011B42D00C04FC964FF").unwrap();
        assert_eq!(id_text(id), "6f9619ff-8b86-d011-b42d-00c04fc964ff");
        assert!(uuid("not-a-uuid").is_err());
    }
}
