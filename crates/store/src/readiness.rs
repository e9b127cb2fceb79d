//! [`ReadinessLog`] and [`PurgeLog`] on [`Store`]: when each key was found safe to sign with
//! (docs/api.md, "Key readiness") and the purges of the caches in front that succeeded
//! (docs/api.md, "Behind a CDN"), both outside the change log like the fetch evidence they go with.

use crate::error::{Failure, Res};
use crate::pool::{on_backend, Db};
use crate::rows::{id_text, instant, millis, uuid};
use crate::schema::{key_readiness, published_configs, purges, services};
use crate::Store;
use diesel::prelude::*;
use registry_domain::ports::{PurgeLog, ReadinessLog, StoreResult};
use registry_domain::StoreError;
use time::OffsetDateTime;
use uuid::Uuid;

/// When key `kid` of `service`, first published at `published` (Unix milliseconds), was found
/// safe to sign with (Unix milliseconds), if it was.
fn safe_at(conn: &mut Db, service: &str, kid: &str, published: i64) -> Res<Option<i64>> {
    Ok(key_readiness::table
        .filter(key_readiness::service_id.eq(service))
        .filter(key_readiness::kid.eq(kid))
        .filter(key_readiness::safe_at.ge(published))
        .select(key_readiness::safe_at)
        .first::<i64>(conn)
        .optional()?)
}

impl ReadinessLog for Store {
    fn key_safe_at(
        &self,
        service_id: Uuid,
        kid: &str,
        published_at: OffsetDateTime,
    ) -> StoreResult<Option<OffsetDateTime>> {
        let service = id_text(service_id);
        let published = millis(published_at);
        self.read(|conn| {
            safe_at(conn, &service, kid, published)?
                .map(instant)
                .transpose()
        })
    }

    /// Outside the change log, like the counts it is derived from; the first time recorded
    /// stays (`ON CONFLICT DO NOTHING`), once an earlier key's under the `kid` is deleted.
    fn record_key_safe(
        &self,
        service_id: Uuid,
        kid: &str,
        published_at: OffsetDateTime,
        at: OffsetDateTime,
    ) -> StoreResult<OffsetDateTime> {
        let service = id_text(service_id);
        let published = millis(published_at);
        self.write_aside(|conn| {
            let earlier = key_readiness::table
                .filter(key_readiness::service_id.eq(&service))
                .filter(key_readiness::kid.eq(kid))
                .filter(key_readiness::safe_at.lt(published));
            on_backend!(&mut *conn, |c| diesel::delete(earlier).execute(c))?;
            let row = (
                key_readiness::service_id.eq(&service),
                key_readiness::kid.eq(kid),
                key_readiness::safe_at.eq(millis(at)),
            );
            on_backend!(&mut *conn, |c| diesel::insert_into(key_readiness::table)
                .values(row)
                .on_conflict((key_readiness::service_id, key_readiness::kid))
                .do_nothing()
                .execute(c))?;
            let stored = safe_at(conn, &service, kid, published)?;
            instant(stored.ok_or(Failure(StoreError::NotFound))?)
        })
    }
}

impl PurgeLog for Store {
    /// Outside the change log; the newest change only moves forward.
    fn record_purge(&self, service_id: Uuid, changed_at: OffsetDateTime) -> StoreResult<()> {
        let service = id_text(service_id);
        let at = millis(changed_at);
        self.write_aside(|conn| {
            let row = (purges::service_id.eq(&service), purges::changed_at.eq(at));
            on_backend!(&mut *conn, |c| diesel::insert_into(purges::table)
                .values(row)
                .on_conflict(purges::service_id)
                .do_nothing()
                .execute(c))?;
            diesel::update(
                purges::table
                    .filter(purges::service_id.eq(&service))
                    .filter(purges::changed_at.lt(at)),
            )
            .set(purges::changed_at.eq(at))
            .execute(conn)?;
            Ok(())
        })
    }

    /// One read of the configurations published since `since` beside their purges: a replica
    /// asks once, as it starts, as it reads every configuration to serve them.
    fn unpurged(&self, since: OffsetDateTime) -> StoreResult<Vec<(Uuid, String, OffsetDateTime)>> {
        let since = millis(since);
        self.read(|conn| {
            let owed = published_configs::table
                .inner_join(services::table)
                .left_join(purges::table.on(purges::service_id.eq(published_configs::service_id)))
                .filter(published_configs::updated_at.ge(since))
                .filter(
                    (purges::changed_at.nullable().is_null())
                        .or(purges::changed_at.lt(published_configs::updated_at)),
                )
                .order(published_configs::updated_at)
                .select((
                    published_configs::service_id,
                    services::subdomain,
                    published_configs::updated_at,
                ))
                .load::<(String, String, i64)>(conn)?;
            (owed.into_iter())
                .map(|(id, subdomain, at)| Ok((uuid(&id)?, subdomain, instant(at)?)))
                .collect()
        })
    }

    fn purged_through(&self, service_id: Uuid) -> StoreResult<Option<OffsetDateTime>> {
        let service = id_text(service_id);
        self.read(|conn| {
            let at = purges::table
                .filter(purges::service_id.eq(&service))
                .select(purges::changed_at)
                .first::<i64>(conn)
                .optional()?;
            at.map(instant).transpose()
        })
    }
}
