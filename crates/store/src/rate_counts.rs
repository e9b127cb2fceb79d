//! [`RateCountLog`] on [`Store`]: the rate limits' counts shared by the replicas (docs/api.md,
//! "Limits"), one row per limit, subject, replica and clock minute.

use crate::error::Res;
use crate::pool::on_backend;
use crate::rows::{id_text, instant, millis, uuid};
use crate::schema::rate_counts;
use crate::Store;
use diesel::prelude::*;
use diesel::upsert::excluded;
use registry_domain::ports::{RateCount, RateCountLog, RateEvents, StoreResult};
use time::OffsetDateTime;
use uuid::Uuid;

/// A row as read: limit, subject, replica, minute, events, written.
type Row = (String, String, String, i64, i64, i64);

impl RateCountLog for Store {
    /// One transaction outside the change log (no cache holds the counts): the counts add up
    /// (`ON CONFLICT … DO UPDATE`), then the others' are read by when they were written.
    fn exchange_rate_counts(
        &self,
        replica: Uuid,
        added: &[RateEvents],
        now: OffsetDateTime,
        since: OffsetDateTime,
    ) -> StoreResult<Vec<RateCount>> {
        let me = id_text(replica);
        let written_at = millis(now);
        let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let rows: Vec<_> = (added.iter())
            .map(|a| {
                (
                    rate_counts::limit_name.eq(a.limit.as_str()),
                    rate_counts::subject.eq(a.key.as_str()),
                    rate_counts::replica.eq(me.as_str()),
                    rate_counts::minute.eq(a.minute),
                    rate_counts::events.eq(count(a.events)),
                    rate_counts::written_at.eq(written_at),
                )
            })
            .collect();
        let read = |conn: &mut crate::pool::Db| -> Res<Vec<Row>> {
            let query = rate_counts::table
                .filter(rate_counts::written_at.ge(millis(since)))
                .filter(rate_counts::replica.ne(me.as_str()))
                .select((
                    rate_counts::limit_name,
                    rate_counts::subject,
                    rate_counts::replica,
                    rate_counts::minute,
                    rate_counts::events,
                    rate_counts::written_at,
                ));
            let rows = on_backend!(conn, |c| query.load::<Row>(c))?;
            Ok(rows)
        };
        let stored = if rows.is_empty() {
            // Nothing to add (most seconds): a read, no write transaction; on the primary, since
            // a standby's lag could hide a count until the next read no longer reaches it.
            self.read_primary(read)?
        } else {
            self.write_aside(|conn| {
                for chunk in rows.chunks(crate::pool::ROWS_A_STATEMENT) {
                    on_backend!(&mut *conn, |c| diesel::insert_into(rate_counts::table)
                        .values(chunk)
                        .on_conflict((
                            rate_counts::limit_name,
                            rate_counts::subject,
                            rate_counts::replica,
                            rate_counts::minute,
                        ))
                        .do_update()
                        .set((
                            rate_counts::events
                                .eq(rate_counts::events + excluded(rate_counts::events)),
                            rate_counts::written_at.eq(excluded(rate_counts::written_at)),
                        ))
                        .execute(c))?;
                }
                read(conn)
            })?
        };
        let mut counts = Vec::with_capacity(stored.len());
        for (limit, key, replica, minute, events, written_at) in stored {
            // A row that cannot be read counts nothing; the limit holds on this replica.
            let (Ok(replica), Ok(written_at)) = (uuid(&replica), instant(written_at)) else {
                tracing::warn!(%limit, %replica, "a rate count that cannot be read: left out");
                continue;
            };
            counts.push(RateCount {
                limit,
                key,
                replica,
                minute,
                events: events.max(0).unsigned_abs(),
                written_at,
            });
        }
        Ok(counts)
    }

    fn prune_rate_counts(&self, before: OffsetDateTime) -> StoreResult<usize> {
        self.write_aside(|conn| {
            let old = rate_counts::table.filter(rate_counts::written_at.lt(millis(before)));
            Ok(on_backend!(conn, |c| diesel::delete(old).execute(c))?)
        })
    }
}
