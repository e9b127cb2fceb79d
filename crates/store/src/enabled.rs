//! The filter that leaves out what disabled customers hold ([`enabled`]): those rows do not
//! exist for the reads that serve requests (docs/api.md, "Customers").

use diesel::backend::Backend;
use diesel::expression::ValidGrouping;
use diesel::expression::{is_aggregate, AppearsOnTable, Expression, SelectableExpression};
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::sql_types::Bool;
use diesel::QueryResult;

/// Whether the customer named by `customer_id` (a row's `customer_id` column) is not
/// disabled, or the row has none (an anonymous service).
pub(crate) fn enabled<C>(customer_id: C) -> Enabled<C> {
    Enabled(customer_id)
}

/// `NOT EXISTS (SELECT 1 FROM customers WHERE customers.id = <customer_id> AND disabled)`: one
/// lookup of the customer's primary key per row. `customer_id NOT IN (SELECT id FROM customers
/// WHERE …)`, diesel's own form, made SQLite read every customer at each execution: a cold
/// issuer's first fetch read all of them. Diesel's sub-selects name only their own table, and
/// SQL text (`dsl::sql`) would keep the statement out of the connection's cache: hence this
/// expression of its own, whose SQL is fixed by its type.
#[derive(Debug, Clone, Copy, QueryId)]
pub(crate) struct Enabled<C>(C);

impl<C: Expression> Expression for Enabled<C> {
    type SqlType = Bool;
}

impl<C: AppearsOnTable<QS>, QS> AppearsOnTable<QS> for Enabled<C> {}

impl<C: SelectableExpression<QS>, QS> SelectableExpression<QS> for Enabled<C> {}

impl<C> ValidGrouping<()> for Enabled<C> {
    type IsAggregate = is_aggregate::No;
}

impl<C: QueryFragment<DB>, DB: Backend> QueryFragment<DB> for Enabled<C> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("NOT EXISTS (SELECT 1 FROM customers WHERE customers.id = ");
        self.0.walk_ast(out.reborrow())?;
        out.push_sql(" AND customers.disabled_at IS NOT NULL)");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::Db;
    use crate::schema::services;
    use crate::Store;
    use diesel::prelude::*;

    #[derive(QueryableByName)]
    struct Step {
        #[diesel(sql_type = diesel::sql_types::Text)]
        detail: String,
    }

    /// What SQLite plans for a read of one service by its subdomain, as the public path reads it.
    fn plan() -> Vec<String> {
        let store = Store::connect("sqlite::memory:").unwrap();
        store.migrate().unwrap();
        let query = services::table
            .filter(services::subdomain.eq("api-acme"))
            .filter(enabled(services::customer_id))
            .select(services::id);
        let sql = diesel::debug_query::<diesel::sqlite::Sqlite, _>(&query).to_string();
        let sql = sql.split(" -- binds").next().unwrap().to_owned();
        store
            .read(|conn| {
                let Db::Sqlite(conn) = conn else {
                    unreachable!("a SQLite store")
                };
                let steps = diesel::sql_query(format!("EXPLAIN QUERY PLAN {sql}"))
                    .bind::<diesel::sql_types::Text, _>("api-acme")
                    .load::<Step>(conn)?;
                Ok(steps.into_iter().map(|s| s.detail).collect())
            })
            .unwrap()
    }

    #[test]
    fn a_rows_customer_is_looked_up_by_its_key_not_scanned() {
        let plan = plan();
        assert!(
            plan.iter()
                .any(|step| step.starts_with("SEARCH customers USING")),
            "{plan:?}"
        );
        assert!(
            !plan.iter().any(|step| step.contains("SCAN customers")),
            "{plan:?}"
        );
    }

    #[test]
    fn a_read_with_the_filter_stays_in_the_connections_statement_cache() {
        // Diesel keeps a prepared statement by its query's type only when the type fixes the
        // SQL; a query with SQL text in it is prepared again at every execution.
        fn kept<Q: QueryId>(_: &Q) -> bool {
            Q::HAS_STATIC_QUERY_ID
        }
        let query = services::table
            .filter(services::subdomain.eq("api-acme"))
            .filter(enabled(services::customer_id));
        assert!(kept(&query));
        let text = services::table.filter(diesel::dsl::sql::<diesel::sql_types::Bool>("1"));
        assert!(!kept(&text), "the test can tell");
    }
}
