//! `cargo xtask bench --services N`: a replica over N published services, on SQLite and on
//! PostgreSQL.
//!
//! One service is registered and published through the API, and one `oidc` account trusting
//! an issuer is created; then their rows are copied in the database, N−1 services and N/10−1
//! accounts, with the id, the subdomain and the issuer substituted in every text value (rows as
//! the registry writes them, copied in seconds rather than written through the API in hours).
//! A fresh registry process then reports: the time to `/readyz`, resident memory idle, the
//! latency of a first (cold) public GET of a service and of a second (warm) one (p50, p99), and
//! resident memory after public GETs of up to 100,000 distinct services; each document it
//! serves is checked to be that service's. On PostgreSQL also P2 (`GET /services/{s}/config`
//! with a static token, wrk) against the primary alone and with a local streaming standby as
//! the read replica.

use super::report::grouped;
use super::wrk::Load;
use crate::api::{oidc_policy, upload, Api, Signer};
use crate::cmd::output;
use crate::postgres::Cluster;
use crate::registry::{self, create_customer, Registry};
use anyhow::{ensure, Context, Result};
use registry_testkit::http::Http;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// Distinct services fetched once for the memory figure (at most).
const DISTINCT_GETS: usize = 100_000;
/// Services whose first and second GETs are timed (at most).
const TIMED: usize = 10_000;
/// The issuer the copied accounts trust, each with its own suffix.
const ISSUER: &str = "https://ci.example.com/bench";

/// The section of docs/benchmarks.md this writes.
pub const TITLE: &str = "## Scale (`cargo xtask bench --services N`)";

/// Which database a measurement ran on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Backend {
    Sqlite,
    Postgres,
}

/// What one backend measured.
#[derive(Debug, Default)]
struct Figures {
    copy_secs: f64,
    ready_ms: f64,
    rss_idle_kib: u64,
    cold: (f64, f64),
    warm: (f64, f64),
    distinct: usize,
    rss_after_kib: u64,
}

/// Runs the scale benchmark on SQLite, and on PostgreSQL unless `no_postgres`; the markdown
/// section of docs/benchmarks.md.
pub fn run(binary: &Path, dir: &Path, services: usize, no_postgres: bool) -> Result<String> {
    ensure!(services >= 1, "--services must be at least 1");
    let accounts = (services / 10).max(1);
    println!("\n=== scale: {services} services, {accounts} oidc accounts, SQLite ===\n");
    let sqlite_url = format!("sqlite://{}", dir.join("scale.db").display());
    let sqlite = measure(
        binary,
        dir,
        Backend::Sqlite,
        &sqlite_url,
        services,
        accounts,
    )?;
    let mut postgres = None;
    let mut p2 = None;
    if !no_postgres {
        println!("\n=== scale: {services} services, {accounts} oidc accounts, PostgreSQL ===\n");
        let cluster = Cluster::start()?;
        let url = cluster.admin_url();
        postgres = Some(measure(
            binary,
            dir,
            Backend::Postgres,
            &url,
            services,
            accounts,
        )?);
        drop(cluster);
        p2 = Some(p2_with_and_without_standby(binary, dir)?);
    }
    Ok(render(services, accounts, &sqlite, postgres.as_ref(), p2))
}

fn measure(
    binary: &Path,
    dir: &Path,
    backend: Backend,
    url: &str,
    services: usize,
    accounts: usize,
) -> Result<Figures> {
    let token = create_customer(binary, url, "acme")?;
    let options = registry::Options::new(binary, url, &dir.join("scale.log"));
    let (service_id, account_id) = {
        let registry = Registry::start(&options)?;
        let api = Api::new(registry.http(), &token);
        let subdomain = api.create_service("bench")?;
        api.publish(&subdomain, &upload(Signer::generate("scale-1")?.jwks()))?;
        let service = api.expect("GET", &format!("/services/{subdomain}"), None, 200)?;
        let (account, _) = api.create_account("ci", oidc_policy(ISSUER, &["*"]))?;
        let id = service["id"].as_str().context("a service id")?.to_owned();
        (id, account)
    };
    let started = Instant::now();
    let sql = copies(
        backend,
        &service_id,
        services - 1,
        &account_id,
        accounts - 1,
    );
    execute(backend, url, &sql)?;
    let copy_secs = started.elapsed().as_secs_f64();
    println!("copied in {copy_secs:.1} s");

    let registry = Registry::start(&options)?;
    let ready_ms = registry.ready_after.as_secs_f64() * 1000.0;
    std::thread::sleep(Duration::from_secs(1));
    let rss_idle_kib = registry.rss_kib()?;
    let http = registry.http();
    let distinct = services.min(DISTINCT_GETS);
    let timed = distinct.min(TIMED);
    // Spread over the whole range: the copies are stored in order.
    let pick = |k: usize| -> usize { k * services / distinct };
    let mut cold = Vec::with_capacity(timed);
    for k in 0..timed {
        cold.push(get(http, pick(k))?);
    }
    let mut warm = Vec::with_capacity(timed);
    for k in 0..timed {
        warm.push(get(http, pick(k))?);
    }
    for k in timed..distinct {
        get(http, pick(k))?;
    }
    std::thread::sleep(Duration::from_secs(1));
    let figures = Figures {
        copy_secs,
        ready_ms,
        rss_idle_kib,
        cold: percentiles(cold),
        warm: percentiles(warm),
        distinct,
        rss_after_kib: registry.rss_kib()?,
    };
    println!("{figures:?}");
    Ok(figures)
}

/// The subdomain of copy `i` (0: the service published through the API).
pub(super) fn subdomain(i: usize) -> String {
    if i == 0 {
        "bench-acme".into()
    } else {
        format!("s{i}-acme")
    }
}

/// A public GET of copy `i`'s discovery document, checked to be its own; its latency.
fn get(http: Http, i: usize) -> Result<Duration> {
    let subdomain = subdomain(i);
    let started = Instant::now();
    let answer = http.hosted(&subdomain, "/.well-known/openid-configuration")?;
    let took = started.elapsed();
    answer.expect(200, &format!("the discovery document of {subdomain}"))?;
    let issuer = format!("http://{}", http.issuer_host(&subdomain));
    ensure!(
        answer.json()["issuer"] == issuer.as_str(),
        "{subdomain} served another issuer: {}",
        answer.json()["issuer"]
    );
    Ok(took)
}

/// p50 and p99, in milliseconds.
fn percentiles(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort();
    let at = |q: f64| {
        let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
        samples.get(i).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    (at(0.50), at(0.99))
}

/// The SQL that copies the service `id` (with its published configuration) `services` times
/// and the account `account` (with its issuer index rows) `accounts` times.
pub(super) fn copies(
    backend: Backend,
    id: &str,
    services: usize,
    account: &str,
    accounts: usize,
) -> String {
    let (series, hex) = match backend {
        // SQLite has no generate_series without an extension: a recursive CTE counts.
        Backend::Sqlite => ("n", "printf('%012x', n.i)"),
        Backend::Postgres => (
            "generate_series(1, {count}) AS n(i)",
            "lpad(to_hex(n.i), 12, '0')",
        ),
    };
    let with = |count: usize| {
        match backend {
        Backend::Sqlite => format!(
            "WITH RECURSIVE n(i) AS (SELECT 1 WHERE {count} > 0 UNION ALL SELECT i + 1 FROM n WHERE i < {count}) "
        ),
        Backend::Postgres => String::new(),
    }
    };
    let from = |count: usize| series.replace("{count}", &count.to_string());
    let new_id = |of: &str| format!("substr('{of}', 1, 24) || {hex}");
    let sub = subdomain(0);
    let new_sub = "'s' || n.i || '-acme'";
    let text = |column: &str| {
        format!(
            "replace(replace({column}, '{id}', {}), '{sub}', {new_sub})",
            new_id(id)
        )
    };
    let issuer = format!("'{ISSUER}/' || n.i");
    let account_text = |column: &str| {
        format!(
            "replace(replace({column}, '{account}', {}), '{ISSUER}', {issuer})",
            new_id(account)
        )
    };
    format!(
        "{with_s}INSERT INTO services (id, customer_id, subdomain, title, description, created_at, expires_at) \
         SELECT {sid}, customer_id, {new_sub}, {title}, {description}, created_at, expires_at \
         FROM services, {from_s} WHERE id = '{id}';\n\
         {with_s}INSERT INTO published_configs (service_id, openid_configuration, jwks, updated_at, key_state, key_expires_at, previous_change_at) \
         SELECT {sid}, {doc}, {jwks}, updated_at, {keys}, key_expires_at, previous_change_at \
         FROM published_configs, {from_s} WHERE service_id = '{id}';\n\
         {with_a}INSERT INTO service_accounts (id, customer_id, name, kind, policy, created_at, last_used_at) \
         SELECT {aid}, customer_id, 'ci-' || n.i, kind, {policy}, created_at, last_used_at \
         FROM service_accounts, {from_a} WHERE id = '{account}';\n\
         {with_a}INSERT INTO account_issuers (issuer, account_id) \
         SELECT {issuer}, {aid} FROM account_issuers, {from_a} WHERE account_id = '{account}';\n",
        with_s = with(services),
        with_a = with(accounts),
        from_s = from(services),
        from_a = from(accounts),
        sid = new_id(id),
        aid = new_id(account),
        title = text("title"),
        description = text("description"),
        doc = text("openid_configuration"),
        jwks = text("jwks"),
        keys = text("key_state"),
        policy = account_text("policy"),
    )
}

/// Runs `sql` on the database: SQLite through Python's `sqlite3` (no SQLite command line is
/// needed), PostgreSQL through `psql`.
pub(super) fn execute(backend: Backend, url: &str, sql: &str) -> Result<()> {
    match backend {
        Backend::Sqlite => {
            let path = url.trim_start_matches("sqlite://");
            output(
                Command::new("python3")
                    .arg("-c")
                    .arg("import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.executescript(sys.argv[2]); c.commit()")
                    .arg(path)
                    .arg(sql),
            )
            .context("copying the rows (python3's sqlite3)")?;
        }
        Backend::Postgres => {
            output(Command::new("psql").args([
                "-X",
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
                "-d",
                url,
                "-c",
                sql,
            ]))
            .context("copying the rows (psql)")?;
        }
    }
    Ok(())
}

/// P2 (`GET /services/{s}/config`, static token, 10 s of wrk) on PostgreSQL: the primary
/// alone, then with a local streaming standby as the read replica, synchronous with
/// `remote_apply` as docs/api.md recommends (with an asynchronous one, the service created
/// just before the load may not be on the standby yet). Requests/s and p99 ms each. On a
/// cluster of its own: the one of the bulk copy is busy writing it out for minutes after.
fn p2_with_and_without_standby(binary: &Path, dir: &Path) -> Result<[(f64, f64); 2]> {
    let mut cluster = Cluster::start()?;
    let url = cluster.admin_url();
    let standby = cluster.start_standby()?;
    cluster.wait_for_standby("remote_apply")?;
    let read_url = format!("postgres://postgres@127.0.0.1:{}/postgres", standby.port());
    let token = create_customer(binary, &url, "p2")?;
    let mut figures = [(0.0, 0.0); 2];
    for (slot, read) in [(0, None), (1, Some(read_url.as_str()))] {
        let mut options = registry::Options::new(binary, &url, &dir.join("p2.log"));
        if let Some(read) = read {
            options = options.env("REGISTRY_DATABASE_READ_URL", read);
        }
        let registry = Registry::start(&options)?;
        let api = Api::new(registry.http(), &token);
        let service = api.create_service(&format!("p2x{slot}"))?;
        api.publish(&service, &upload(Signer::generate("p2-1")?.jwks()))?;
        let load = Load {
            url: format!("{}/services/{service}/config", registry.base()),
            headers: vec![("Authorization".into(), format!("Bearer {token}"))],
            script: None,
            connections: 32,
            seconds: 10,
            cpus: None,
            threads: 1,
        };
        let sample = load.run()?;
        figures[slot] = (sample.requests_per_sec, sample.p99_ms);
        println!(
            "P2 on PostgreSQL{}: {:.0} requests/s, p99 {:.2} ms",
            if read.is_some() {
                " with a read replica"
            } else {
                ""
            },
            sample.requests_per_sec,
            sample.p99_ms
        );
    }
    Ok(figures)
}

fn render(
    services: usize,
    accounts: usize,
    sqlite: &Figures,
    postgres: Option<&Figures>,
    p2: Option<[(f64, f64); 2]>,
) -> String {
    let mib = |kib: u64| kib as f64 / 1024.0;
    let row = |name: &str, cell: &dyn Fn(&Figures) -> String| {
        format!(
            "| {name} | {} | {} |\n",
            cell(sqlite),
            postgres.map_or_else(|| "not run".to_owned(), cell)
        )
    };
    let mut out = format!(
        "{TITLE}\n\n\
         Written by `cargo xtask bench --services {services}` on {} (UTC). {} published services \
         and {} `oidc` accounts (each trusting an issuer of its own): one of each made through the \
         API, the rest copies of its rows. Release build, 2 workers, on loopback.\n\n\
         | | SQLite | PostgreSQL |\n|---|---:|---:|\n",
        super::report::today(),
        grouped(services as f64),
        grouped(accounts as f64)
    );
    out += &row("rows copied in", &|f| format!("{:.1} s", f.copy_secs));
    out += &row("ready after start (`/readyz`)", &|f| {
        format!("{:.0} ms", f.ready_ms)
    });
    out += &row("resident memory idle", &|f| {
        format!("{:.0} MiB", mib(f.rss_idle_kib))
    });
    out += &row("first public GET of a service (cold) p50 / p99", &|f| {
        format!("{:.2} / {:.2} ms", f.cold.0, f.cold.1)
    });
    out += &row("second GET (warm) p50 / p99", &|f| {
        format!("{:.2} / {:.2} ms", f.warm.0, f.warm.1)
    });
    out += &row("resident memory after GETs of distinct services", &|f| {
        format!(
            "{:.0} MiB ({})",
            mib(f.rss_after_kib),
            grouped(f.distinct as f64)
        )
    });
    if let Some([alone, replica]) = p2 {
        out += &format!(
            "\nP2 on PostgreSQL (`GET /services/{{s}}/config`, static token, wrk 32 connections, 10 s): \
             primary alone {:.0} requests/s (p99 {:.2} ms); reading from a local streaming standby \
             (synchronous, `remote_apply`) {:.0} requests/s (p99 {:.2} ms).\n",
            alone.0, alone.1, replica.0, replica.1
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_substitute_the_id_subdomain_and_issuer_in_every_text_value() {
        let id = "0a1b2c3d-0000-4000-8000-000000000001";
        let sql = copies(Backend::Postgres, id, 5, "acc", 2);
        assert!(sql.contains("generate_series(1, 5)"), "{sql}");
        assert!(sql.contains("generate_series(1, 2)"), "{sql}");
        assert!(
            sql.contains("replace(replace(openid_configuration"),
            "{sql}"
        );
        let sqlite = copies(Backend::Sqlite, id, 5, "acc", 2);
        assert!(sqlite.contains("WITH RECURSIVE n(i)"), "{sqlite}");
        assert!(sqlite.contains("printf('%012x', n.i)"), "{sqlite}");
    }

    #[test]
    fn percentiles_of_samples() {
        let samples = (1..=100).map(Duration::from_millis).collect();
        let (p50, p99) = percentiles(samples);
        assert!(
            (p50 - 50.0).abs() <= 1.0 && (p99 - 99.0).abs() <= 1.0,
            "{p50} {p99}"
        );
    }
}
