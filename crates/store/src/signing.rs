//! [`SigningStore`] on [`Store`]: managed signing's state (docs/api.md, "Managed signing"), one
//! row per service, written with the key set it publishes.
//!
//! Every write runs inside the writers' lock ([`Store::write`]: SQLite's one writer, the change
//! log's lock on PostgreSQL), so a read-decide-write of one service's signing is never
//! interleaved with another: replicas racing for one rotation step write it once, and a
//! signature's record never overwrites a transition.

use crate::error::{Failure, Res};
use crate::pool::{on_backend, Db};
use crate::rows::{id_text, millis, readable, ConfigRow};
use crate::schema::{managed_signing, published_configs};
use crate::services::{exists, write_config};
use crate::Store;
use diesel::prelude::*;
use registry_domain::audit::AuditEvent;
use registry_domain::ports::{Change, ConfigChange, SigningChange, SigningStore, StoreResult};
use registry_domain::service::{PublishedConfig, VersionHistory};
use registry_domain::signing::Signing;
use registry_domain::StoreError;
use time::OffsetDateTime;
use uuid::Uuid;

/// How many other services' signings `other_signing` reads to find one holding a key.
const OTHERS_READ: i64 = 16;

fn corrupt(service: &str) -> Failure {
    Failure(StoreError::Corrupt(format!(
        "managed signing of service {service}"
    )))
}

/// The stored signing of `service` (its id as text), if any.
pub(crate) fn stored(conn: &mut Db, service: &str) -> Res<Option<Signing>> {
    let query = managed_signing::table
        .find(service)
        .select(managed_signing::state);
    let text = on_backend!(&mut *conn, |c| query.get_result::<String>(c)).optional()?;
    text.map(|text| serde_json::from_str(&text).map_err(|_| corrupt(service)))
        .transpose()
}

/// Inserts, replaces or deletes (`None`) the signing of `service` (inside the caller's write
/// transaction, whose lock makes update-else-insert race free).
fn put(conn: &mut Db, service: &str, signing: Option<&Signing>, due_at: Option<i64>) -> Res<()> {
    let Some(signing) = signing else {
        diesel::delete(managed_signing::table.find(service)).execute(conn)?;
        return Ok(());
    };
    let state = serde_json::to_string(signing).map_err(|e| {
        Failure(StoreError::Unavailable(format!(
            "cannot serialize managed signing: {e}"
        )))
    })?;
    let content = (
        managed_signing::state.eq(&state),
        managed_signing::due_at.eq(due_at),
    );
    let updated = diesel::update(managed_signing::table.find(service))
        .set(content)
        .execute(conn)?;
    if updated == 0 {
        diesel::insert_into(managed_signing::table)
            .values((managed_signing::service_id.eq(service), content))
            .execute(conn)?;
    }
    Ok(())
}

impl SigningStore for Store {
    fn signing(&self, service_id: Uuid) -> StoreResult<Option<Signing>> {
        // From the primary: a signature with a key a lagging copy still calls current (after a
        // compromise, a DELETE, a switch) would never verify, and a state just written must
        // read back as written.
        let service = id_text(service_id);
        self.read_primary(|conn| stored(conn, &service))
    }

    fn other_signing(&self, besides: Uuid) -> StoreResult<Option<Signing>> {
        let besides = id_text(besides);
        self.read_primary(|conn| {
            // A few rows: a state kept only for its memory of withdrawals holds no key.
            let query = managed_signing::table
                .filter(managed_signing::service_id.ne(&besides))
                .select((managed_signing::service_id, managed_signing::state))
                .limit(OTHERS_READ);
            let rows = on_backend!(&mut *conn, |c| query.load::<(String, String)>(c))?;
            // A row that does not read is another service's trouble, not this one's.
            let signings = (rows.into_iter())
                .filter_map(|(_, text)| serde_json::from_str::<Signing>(&text).ok());
            Ok(signings
                .into_iter()
                .find(|signing| !signing.keys.is_empty()))
        })
    }

    fn update_signing(
        &self,
        service_id: Uuid,
        change: &mut dyn FnMut(Option<Signing>, Option<PublishedConfig>) -> Option<SigningChange>,
        event: Option<&AuditEvent>,
    ) -> StoreResult<bool> {
        let service = id_text(service_id);
        let mut written = false;
        self.write(event, |conn, changed| {
            if !exists(conn, &service)? {
                return Err(Failure(StoreError::NotFound));
            }
            let signing = stored(conn, &service)?;
            let query = published_configs::table.find(&service);
            let row = on_backend!(&mut *conn, |c| query.get_result::<ConfigRow>(c)).optional()?;
            let stored_expiry = row.as_ref().map(ConfigRow::key_expires_at);
            let config = row.map(ConfigRow::into_domain).transpose()?;
            let history = crate::services::history(conn, &service, config.as_ref())?;
            let Some(update) = change(signing, config) else {
                return Ok(());
            };
            put(
                conn,
                &service,
                update.signing.as_ref(),
                update.due_at.map(millis),
            )?;
            let published = update.config != ConfigChange::Keep;
            match update.config {
                ConfigChange::Keep => {}
                ConfigChange::Write(config) => {
                    let config = VersionHistory::date(history.as_ref(), config);
                    write_config(conn, &config, stored_expiry)?;
                }
                ConfigChange::Remove(at) => crate::services::remove_config(conn, &service, at)?,
            }
            // A transition is logged as a change of its service even when the key set stays
            // (a switch): the change log is what carries its audit event.
            if published || event.is_some() {
                changed.push(Change::Service(service_id));
            }
            written = true;
            Ok(())
        })?;
        Ok(written)
    }

    fn record_signature(
        &self,
        service_id: Uuid,
        kid: &str,
        at: OffsetDateTime,
    ) -> StoreResult<bool> {
        let service = id_text(service_id);
        // In the writers' lock, like every change of the row: never over a transition.
        self.write(None, |conn, _| {
            let Some(mut signing) = stored(conn, &service)? else {
                return Ok(false);
            };
            if !signing.keys.iter().any(|key| key.kid == kid) {
                return Ok(false);
            }
            if signing.record_signature(kid, at) {
                let due_at = managed_signing::table
                    .find(&service)
                    .select(managed_signing::due_at);
                let due_at = on_backend!(&mut *conn, |c| due_at.get_result::<Option<i64>>(c))?;
                // The step's due time stays: a signature only moves a withdrawal later, and a
                // step put off (a rotation waiting for room, a failure) stays put off.
                let due_at = due_at.or_else(|| signing.due_at(at).map(millis));
                put(conn, &service, Some(&signing), due_at)?;
            }
            Ok(true)
        })
    }

    fn postpone_signing(
        &self,
        service_id: Uuid,
        until: OffsetDateTime,
        now: OffsetDateTime,
    ) -> StoreResult<()> {
        let service = id_text(service_id);
        self.write(None, |conn, _| {
            // Only a step still due: one rescheduled meanwhile (a change, another replica's
            // step) keeps its time. The state is neither read nor written.
            let due = managed_signing::table
                .find(&service)
                .filter(managed_signing::due_at.le(millis(now)));
            diesel::update(due)
                .set(managed_signing::due_at.eq(Some(millis(until))))
                .execute(conn)?;
            Ok(())
        })
    }

    fn signing_due(&self, now: OffsetDateTime, limit: usize) -> StoreResult<Vec<Uuid>> {
        self.read(|conn| {
            let ids = managed_signing::table
                .filter(managed_signing::due_at.le(millis(now)))
                .order(managed_signing::due_at)
                .limit(i64::try_from(limit).unwrap_or(i64::MAX))
                .select(managed_signing::service_id)
                .load::<String>(conn)?;
            readable("managed signing", ids, |id| crate::rows::uuid(&id))
        })
    }
}
