//! What a first fetch of an issuer costs the database (docs/benchmarks.md): the public path's
//! read of a published service by its subdomain (`Database::published_by_subdomain_now`, in
//! place, as a worker makes it), once for each of ISSUERS services in random order, as the
//! wide, cold verifiers' scenario makes them (`cargo xtask bench --verifiers`), on a real SQLite
//! database. The same reads are timed with the index that holds what the read needs of a
//! service (`services_published`) and without it (dropped, then made again), alternately, so
//! that both run on the same data in the same minute.
//!
//! `cargo bench -p registry-store --bench first_read [-- ISSUERS]` (100,000 by default).

use diesel::connection::SimpleConnection;
use diesel::{Connection, RunQueryDsl, SqliteConnection};
use registry_domain::app::{config, services};
use registry_domain::ports::Database;
use registry_domain::testing::{self, PlainHasher, Tenant};
use std::sync::Arc;
use std::time::Instant;
use time::OffsetDateTime;

/// Passes timed with the index and without it, alternately (the median of each is shown).
const PASSES: usize = 3;

mod common;

fn main() {
    let issuers = common::count_argument(100_000);
    let scratch = common::Scratch::new("first-read");
    let (store, file) = (&scratch.store, &scratch.file);
    // 2026-11-29 12:00 UTC.
    let t0 = OffsetDateTime::from_unix_timestamp(1_795_953_600).unwrap();
    let template = ("http://{subdomain}.localhost:8080", "http://localhost:8080");
    let Tenant {
        registry, caller, ..
    } = testing::tenant(store.clone(), Arc::new(PlainHasher), template, t0);
    let service = services::create(&registry, &caller, Default::default(), t0).unwrap();
    // A 2048-bit modulus: 0xc3 then 255 bytes of 0xa5.
    let n = format!("w6{}Q", "Wlpa".repeat(84) + "Wlp");
    let key = serde_json::json!({"kty": "RSA", "kid": "k1", "e": "AQAB", "n": n});
    let command = config::PublishConfig {
        body: testing::upload_of(key, "RS256"),
        source: "default".into(),
    };
    config::publish(&registry, &caller, &service, command, t0).unwrap();

    // The service copied `issuers` times, as `cargo xtask bench --verifiers` does: the id's
    // last 12 digits and the subdomain replaced in every text that holds them.
    let mut sql = SqliteConnection::establish(&file.display().to_string()).unwrap();
    let (id, subdomain) = (service.id.hyphenated().to_string(), &service.subdomain);
    let new_id = format!("substr('{id}', 1, 24) || printf('%012x', n.i)");
    let new_subdomain = "'s' || n.i || '-bench'";
    let text = |column: &str| {
        format!("replace(replace({column}, '{id}', {new_id}), '{subdomain}', {new_subdomain})")
    };
    let series = format!(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {issuers}) "
    );
    let copied = Instant::now();
    sql.batch_execute(&format!(
        "{series}INSERT INTO services (id, customer_id, subdomain, title, description, created_at, expires_at) \
         SELECT {new_id}, customer_id, {new_subdomain}, title, description, created_at, expires_at \
         FROM services, n WHERE id = '{id}';
         {series}INSERT INTO published_configs (service_id, openid_configuration, jwks, updated_at, key_state, key_expires_at, previous_change_at) \
         SELECT {new_id}, {}, {}, updated_at, {}, key_expires_at, previous_change_at \
         FROM published_configs, n WHERE service_id = '{id}';",
        text("openid_configuration"),
        text("jwks"),
        text("key_state"),
    ))
    .unwrap();
    println!(
        "{issuers} issuers stored in {:.1} s",
        copied.elapsed().as_secs_f64()
    );

    // A random order (a fixed one: every pass reads the same), each issuer once a pass.
    let mut order: Vec<usize> = (1..=issuers).collect();
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    for i in (1..order.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        order.swap(i, (state % (i as u64 + 1)) as usize);
    }
    let names: Vec<String> = order.iter().map(|n| format!("s{n}-bench")).collect();
    let pass = || {
        let started = Instant::now();
        for name in &names {
            let read = store
                .published_by_subdomain_now(name)
                .expect("read in place");
            assert!(read.unwrap().is_some(), "{name} is published");
        }
        started.elapsed().as_secs_f64() * 1e6 / issuers as f64
    };
    // Made again as the migration made it: its statement, as SQLite keeps it.
    #[derive(diesel::QueryableByName)]
    struct Made {
        #[diesel(sql_type = diesel::sql_types::Text)]
        sql: String,
    }
    let index =
        diesel::sql_query("SELECT sql FROM sqlite_master WHERE name = 'services_published'")
            .get_result::<Made>(&mut sql)
            .unwrap()
            .sql;
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for _ in 0..PASSES {
        with.push(pass());
        sql.batch_execute("DROP INDEX services_published").unwrap();
        without.push(pass());
        sql.batch_execute(&index).unwrap();
    }
    let median = |mut passes: Vec<f64>| {
        passes.sort_by(f64::total_cmp);
        passes[PASSES / 2]
    };
    println!(
        "first read of each of {issuers} issuers, µs a read (median of {PASSES} passes): \
         {:.2} with the index services_published, {:.2} without",
        median(with),
        median(without)
    );
}
