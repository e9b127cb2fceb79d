//! Rows as stored, and their conversion to and from domain types.
//!
//! Times are unix milliseconds: a value read back is the value written, truncated to the
//! millisecond.

use crate::error::{Failure, Res};
use diesel::{Queryable, Selectable};
use registry_domain::keys::KeyState;
use registry_domain::policy::Policy;
use registry_domain::service::{DocumentDates, Publication, PublishedConfig};
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

/// `result`, its corruption (if any) naming the row it was read from, `{row} {id}`, unless the
/// message names the id already: the log of a list that leaves the row out must say which.
fn naming<T>(result: Res<T>, row: &str, id: &str) -> Res<T> {
    result.map_err(|failure| match failure {
        Failure(StoreError::Corrupt(what)) if !what.contains(id) => {
            corrupt(format_args!("{what} of {row} {id}"))
        }
        other => other,
    })
}

/// The rows of a list that can be read, each through `read`. A row that cannot
/// (`StoreError::Corrupt`) is left out and logged, naming it (asked for alone, it is a 500):
/// one corrupt row must not take a list, the reaper or a server's start with it. Any other
/// failure fails the list.
pub(crate) fn readable<R, T>(
    kind: &str,
    rows: impl IntoIterator<Item = R>,
    mut read: impl FnMut(R) -> Res<T>,
) -> Res<Vec<T>> {
    let rows = rows.into_iter();
    let mut items = Vec::with_capacity(rows.size_hint().0);
    for row in rows {
        match read(row) {
            Ok(item) => items.push(item),
            Err(Failure(StoreError::Corrupt(row))) => {
                tracing::error!(%row, "left out a stored {kind} that cannot be read");
            }
            Err(other) => return Err(other),
        }
    }
    Ok(items)
}

#[derive(Queryable)]
pub(crate) struct CustomerRow {
    id: String,
    name: String,
    tenant: String,
    plan: String,
    created_at: i64,
    disabled_at: Option<i64>,
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
            disabled_at: self.disabled_at.map(instant).transpose()?,
        })
    }
}

/// A service's row, less what only writes read (`config_removed_at`).
#[derive(Queryable, Selectable)]
#[diesel(table_name = crate::schema::services)]
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
    /// Its ids and times: what can be corrupt.
    fn ids_and_times(&self) -> Res<(Uuid, Option<Uuid>, OffsetDateTime, Option<OffsetDateTime>)> {
        Ok((
            uuid(&self.id)?,
            self.customer_id.as_deref().map(uuid).transpose()?,
            instant(self.created_at)?,
            self.expires_at.map(instant).transpose()?,
        ))
    }

    pub(crate) fn into_domain(self) -> Res<Service> {
        let (id, customer_id, created_at, expires_at) =
            naming(self.ids_and_times(), "service", &self.id)?;
        Ok(Service {
            id,
            customer_id,
            subdomain: self.subdomain,
            title: self.title,
            description: self.description,
            created_at,
            expires_at,
        })
    }
}

/// What the public path reads of a service besides its configuration (whose `service_id` is
/// the service's id): the index it is found by holds all of it (`services_published`), so the
/// read does not visit the service's row.
#[derive(Queryable)]
pub(crate) struct HostRow {
    subdomain: String,
    expires_at: Option<i64>,
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
        let policy = Policy::from_stored(&document).map_err(|error| {
            let why: Vec<String> = error
                .violations()
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
    discovery_changed_at: Option<i64>,
    jwks_changed_at: Option<i64>,
}

impl ConfigRow {
    /// The stored `key_expires_at` (milliseconds), as the reaper sees it.
    pub(crate) fn key_expires_at(&self) -> Option<i64> {
        self.key_expires_at
    }

    /// Its id and times: what can be corrupt besides the key state.
    fn id_and_times(&self) -> Res<(Uuid, OffsetDateTime, Option<OffsetDateTime>, DocumentDates)> {
        Ok((
            uuid(&self.service_id)?,
            instant(self.updated_at)?,
            self.previous_change_at.map(instant).transpose()?,
            DocumentDates {
                discovery: self.discovery_changed_at.map(instant).transpose()?,
                jwks: self.jwks_changed_at.map(instant).transpose()?,
            },
        ))
    }

    pub(crate) fn into_domain(self) -> Res<PublishedConfig> {
        self.into_config(true)
    }

    /// What the service of this row serves at `host`'s subdomain. The key state is read only
    /// when a retired key has an end (`key_expires_at`): without one, every key it records is
    /// current and `jwks` holds them, so the public path's read parses no JSON.
    pub(crate) fn into_publication(self, host: HostRow) -> Res<Publication> {
        let with_keys = self.key_expires_at.is_some();
        let expires_at = host.expires_at.map(instant).transpose();
        let expires_at = naming(expires_at, "service", &self.service_id)?;
        let config = self.into_config(with_keys)?;
        Ok(Publication::at(host.subdomain, expires_at, config))
    }

    /// The configuration, with its key state when `with_keys` (else none).
    fn into_config(self, with_keys: bool) -> Res<PublishedConfig> {
        let (service_id, updated_at, previous_change_at, dates) = naming(
            self.id_and_times(),
            "the configuration of service",
            &self.service_id,
        )?;
        let keys = if !with_keys {
            KeyState::default()
        } else if self.key_state.is_empty() {
            // Published before the lifecycle was recorded: every key current.
            let jwks: serde_json::Value = serde_json::from_str(&self.jwks).map_err(|e| {
                corrupt(format_args!("key set of service {}: {e}", self.service_id))
            })?;
            KeyState::of_uploaded(&jwks, updated_at)
        } else {
            serde_json::from_str::<KeyState>(&self.key_state)
                .map_err(|e| {
                    corrupt(format_args!(
                        "key state of service {}: {e}",
                        self.service_id
                    ))
                })?
                .with_canonical_thumbprints()
        };
        Ok(PublishedConfig {
            service_id,
            openid_configuration: self.openid_configuration,
            jwks: self.jwks,
            updated_at,
            previous_change_at,
            dates,
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
    fn a_list_leaves_corrupt_rows_out_and_fails_on_any_other_failure() {
        let read = |n: i64| if n == 2 { Err(corrupt("row 2")) } else { Ok(n) };
        assert_eq!(readable("number", [1, 2, 3], read).unwrap(), [1, 3]);
        let down = readable("number", [1], |_| -> Res<i64> {
            Err(Failure(StoreError::Unavailable("down".into())))
        });
        assert!(matches!(down, Err(Failure(StoreError::Unavailable(_)))));
    }

    #[test]
    fn a_corrupt_time_names_its_row() {
        let row = ServiceRow {
            id: "6f9619ff-8b86-d011-b42d-00c04fc964ff".into(),
            customer_id: None,
            subdomain: "x".into(),
            title: None,
            description: None,
            created_at: i64::MAX,
            expires_at: None,
        };
        let Err(Failure(StoreError::Corrupt(what))) = row.into_domain() else {
            panic!("a time out of range is corrupt");
        };
        assert!(
            what.ends_with("of service 6f9619ff-8b86-d011-b42d-00c04fc964ff"),
            "{what}"
        );
    }

    #[test]
    fn ids_are_stored_hyphenated_lower_case() {
        let id = Uuid::parse_str("6F9619FF8B86D011B42D00C04FC964FF").unwrap();
        assert_eq!(id_text(id), "6f9619ff-8b86-d011-b42d-00c04fc964ff");
        assert!(uuid("not-a-uuid").is_err());
    }
}
