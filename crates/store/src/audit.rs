//! [`AuditLog`], [`RefusalLog`] and [`ActivityLog`] on [`Store`], and the insert that every audited write runs in
//! its transaction.

use crate::error::{Failure, Res};
use crate::pool::{on_backend, Db};
use crate::rows::{id_text, instant, millis, uuid};
use crate::schema::{audit_events, refusals, service_accounts};
use crate::Store;
use diesel::prelude::*;
use registry_domain::audit::{
    changes_from_json, changes_to_json, Action, Actor, ActorKind, AuditEvent, AuditPage,
    AuditQuery, Cursor, Resource, ResourceKind, Trail,
};
use registry_domain::ports::{ActivityLog, AuditLog, RefusalLog, StoreResult};
use registry_domain::refusal::{is_near_record, KEPT_PER_ACCOUNT};
use registry_domain::StoreError;
use serde_json::Value;
use uuid::Uuid;

/// Appends `event` (inside the caller's transaction).
pub(crate) fn insert(conn: &mut Db, event: &AuditEvent) -> Res<()> {
    let changes = (!event.changes.is_empty()).then(|| changes_to_json(&event.changes).to_string());
    let values = (
        audit_events::id.eq(id_text(event.id)),
        audit_events::customer_id.eq(event.customer_id.map(id_text)),
        audit_events::at.eq(millis(event.at)),
        audit_events::action.eq(event.action.as_str()),
        audit_events::resource_type.eq(event.resource.kind.as_str()),
        audit_events::resource_id.eq(&event.resource.id),
        audit_events::subdomain.eq(event.resource.subdomain.as_deref()),
        audit_events::actor_kind.eq(event.actor.kind.as_str()),
        audit_events::actor_account_id.eq(event.actor.account_id.map(id_text)),
        audit_events::actor_iss.eq(event.actor.iss.as_deref()),
        audit_events::actor_sub.eq(event.actor.sub.as_deref()),
        audit_events::ip.eq(event.ip.as_deref()),
        audit_events::request_id.eq(event.request_id.as_deref()),
        audit_events::changes.eq(changes),
    );
    on_backend!(conn, |c| diesel::insert_into(audit_events::table)
        .values(values)
        .execute(c))?;
    Ok(())
}

#[derive(Queryable)]
struct EventRow {
    seq: i64,
    id: String,
    customer_id: Option<String>,
    at: i64,
    action: String,
    resource_type: String,
    resource_id: String,
    subdomain: Option<String>,
    actor_kind: String,
    actor_account_id: Option<String>,
    actor_iss: Option<String>,
    actor_sub: Option<String>,
    ip: Option<String>,
    request_id: Option<String>,
    changes: Option<String>,
}

fn corrupt(seq: i64, what: &str, value: &str) -> Failure {
    Failure(StoreError::Corrupt(format!(
        "audit event {seq}: unknown {what} {value:?}"
    )))
}

impl EventRow {
    fn into_domain(self) -> Res<AuditEvent> {
        let seq = self.seq;
        Ok(AuditEvent {
            id: uuid(&self.id)?,
            at: instant(self.at)?,
            customer_id: self.customer_id.as_deref().map(uuid).transpose()?,
            action: self
                .action
                .parse::<Action>()
                .map_err(|_| corrupt(seq, "action", &self.action))?,
            resource: Resource {
                kind: ResourceKind::parse(&self.resource_type)
                    .ok_or_else(|| corrupt(seq, "resource type", &self.resource_type))?,
                id: self.resource_id,
                subdomain: self.subdomain,
            },
            actor: Actor {
                kind: ActorKind::parse(&self.actor_kind)
                    .ok_or_else(|| corrupt(seq, "actor kind", &self.actor_kind))?,
                account_id: self.actor_account_id.as_deref().map(uuid).transpose()?,
                iss: self.actor_iss,
                sub: self.actor_sub,
            },
            ip: self.ip,
            request_id: self.request_id,
            changes: match self.changes {
                None => Vec::new(),
                Some(text) => serde_json::from_str::<Value>(&text)
                    .ok()
                    .as_ref()
                    .and_then(changes_from_json)
                    .ok_or_else(|| corrupt(seq, "changes", &text))?,
            },
        })
    }
}

impl AuditLog for Store {
    fn audit_events(&self, query: &AuditQuery) -> StoreResult<AuditPage> {
        self.read(|conn| {
            let mut select = audit_events::table.into_boxed();
            select = match query.trail {
                Trail::Customer(id) => select.filter(audit_events::customer_id.eq(id_text(id))),
                Trail::Anonymous => select.filter(audit_events::customer_id.is_null()),
            };
            if let Some(cursor) = query.cursor {
                // The cursor's event, looked up in the caller's own trail: another trail's
                // event is as unknown as a made-up one, and says nothing of where it stands.
                let named = audit_events::table
                    .filter(audit_events::id.eq(id_text(cursor.after)))
                    .select((audit_events::seq, audit_events::customer_id))
                    .load::<(i64, Option<String>)>(conn)?;
                let owner = match query.trail {
                    Trail::Customer(id) => Some(id_text(id)),
                    Trail::Anonymous => None,
                };
                let before = named
                    .into_iter()
                    .find(|(_, customer)| *customer == owner)
                    .map(|(seq, _)| seq)
                    .ok_or(Failure(StoreError::NotFound))?;
                select = select.filter(audit_events::seq.lt(before));
            }
            if let Some(action) = query.action {
                select = select.filter(audit_events::action.eq(action.as_str()));
            }
            if let Some(since) = query.since {
                select = select.filter(audit_events::at.ge(millis(since)));
            }
            // One more than asked: whether a next page exists, without a second query.
            let limit = i64::try_from(query.limit.saturating_add(1)).unwrap_or(i64::MAX);
            let mut rows = select
                .order(audit_events::seq.desc())
                .limit(limit)
                .load::<EventRow>(conn)?;
            let more = rows.len() > query.limit;
            rows.truncate(query.limit);
            let events: Vec<AuditEvent> = rows
                .into_iter()
                .map(EventRow::into_domain)
                .collect::<Res<_>>()?;
            let next = more
                .then(|| events.last().map(|e| Cursor { after: e.id }))
                .flatten();
            Ok(AuditPage { events, next })
        })
    }

    fn prune_audit(&self, older_than: time::OffsetDateTime) -> StoreResult<usize> {
        // Events are written in time order, so everything before the first event young enough
        // to keep goes; finding it reads only the rows that go (no index on `at` to keep up).
        self.write_aside(|conn| {
            let first_kept = audit_events::table
                .filter(audit_events::at.ge(millis(older_than)))
                .order(audit_events::seq)
                .select(audit_events::seq)
                .limit(1)
                .get_result::<i64>(conn)
                .optional()?;
            let old =
                audit_events::table.filter(audit_events::seq.lt(first_kept.unwrap_or(i64::MAX)));
            Ok(diesel::delete(old).execute(conn)?)
        })
    }
}

impl ActivityLog for Store {
    /// Outside the change log: no cache holds it.
    fn record_use(&self, account_id: Uuid, minute: time::OffsetDateTime) -> StoreResult<bool> {
        let minute = millis(minute);
        self.write_aside(|conn| {
            let updated = diesel::update(
                service_accounts::table.find(id_text(account_id)).filter(
                    service_accounts::last_used_at
                        .is_null()
                        .or(service_accounts::last_used_at.lt(minute)),
                ),
            )
            .set(service_accounts::last_used_at.eq(minute))
            .execute(conn)?;
            Ok(updated > 0)
        })
    }

    /// One transaction, outside the change log: no cache holds refusals.
    fn record_refusals(
        &self,
        records: &[(Uuid, Value)],
        at: time::OffsetDateTime,
    ) -> StoreResult<()> {
        let kept = i64::try_from(KEPT_PER_ACCOUNT).unwrap_or(i64::MAX);
        self.write_aside(|conn| {
            for (account, record) in records {
                let account = id_text(*account);
                let near = is_near_record(record);
                diesel::insert_into(refusals::table)
                    .values((
                        refusals::account_id.eq(&account),
                        refusals::at.eq(millis(at)),
                        refusals::refusal.eq(record.to_string()),
                        refusals::near.eq(near),
                    ))
                    .execute(conn)?;
                // The oldest of this class beyond its newest KEPT_PER_ACCOUNT go; the other
                // class keeps its own (outsiders must not push out the owner's near misses).
                let oldest_kept = refusals::table
                    .filter(refusals::account_id.eq(&account))
                    .filter(refusals::near.eq(near))
                    .order(refusals::seq.desc())
                    .offset(kept - 1)
                    .limit(1)
                    .select(refusals::seq)
                    .get_result::<i64>(conn)
                    .optional()?;
                if let Some(oldest_kept) = oldest_kept {
                    diesel::delete(
                        refusals::table
                            .filter(refusals::account_id.eq(&account))
                            .filter(refusals::near.eq(near))
                            .filter(refusals::seq.lt(oldest_kept)),
                    )
                    .execute(conn)?;
                }
            }
            Ok(())
        })
    }
}

impl RefusalLog for Store {
    fn refusals(
        &self,
        account_id: Uuid,
        since: time::OffsetDateTime,
        limit: usize,
    ) -> StoreResult<Vec<Value>> {
        self.read(|conn| {
            refusals::table
                .filter(refusals::account_id.eq(id_text(account_id)))
                .filter(refusals::at.ge(millis(since)))
                .order(refusals::seq.desc())
                .limit(i64::try_from(limit).unwrap_or(i64::MAX))
                .select((refusals::seq, refusals::refusal))
                .load::<(i64, String)>(conn)?
                .into_iter()
                .map(|(seq, text)| {
                    serde_json::from_str(&text)
                        .map_err(|e| Failure(StoreError::Corrupt(format!("refusal {seq}: {e}"))))
                })
                .collect()
        })
    }

    fn prune_refusals(&self, older_than: time::OffsetDateTime) -> StoreResult<usize> {
        self.write_aside(|conn| {
            Ok(
                diesel::delete(refusals::table.filter(refusals::at.lt(millis(older_than))))
                    .execute(conn)?,
            )
        })
    }
}
