//! `cargo xtask faults pgkill`: PostgreSQL itself crashes under the registry.
//!
//! Each round, the `kill` scenario's four writers run against one registry process; then the
//! postmaster and every process it started get `kill -9` at once (as when the OOM killer or a
//! crash takes the database down: no shutdown checkpoint, transactions cut off mid-way, clients'
//! connections dropped). While PostgreSQL is down the registry must answer 503 `unavailable`,
//! never another 5xx. PostgreSQL is then started again on the same data directory, runs crash
//! recovery, and the same registry process must recover by itself: `/readyz` ready again, writes
//! accepted, and [`Ledger::verify`] passes (every acknowledged write present, nothing
//! half-written). After the last round `pg_amcheck` checks the tables and indexes, and a fresh
//! registry process verifies everything once more from the database alone.
//!
//! The cluster runs with PostgreSQL's durability settings (`fsync`, `synchronous_commit`,
//! `full_page_writes` on), unlike the other chores' throwaway cluster. A `kill -9` of the
//! processes does not drop the operating system's page cache, so it checks PostgreSQL's crash
//! recovery and the registry's transactions, not the disk: that would need a machine crash.

use super::{acknowledged, create_database, readyz, with_writers};
use crate::ledger::{locked, Ledger, Writer, TENANT};
use crate::postgres::Cluster;
use crate::registry::{self, create_customer, Registry};
use anyhow::{ensure, Context, Result};
use registry_testkit::{free_port, wait_until};
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What PostgreSQL logs when it starts on a data directory it did not shut down.
const RECOVERY: &str = "automatic recovery in progress";

pub fn postgres_killed_during_writes(binary: &Path, work: &Path, rounds: usize) -> Result<String> {
    let mut cluster = Cluster::start_durable()?;
    let database_url = create_database(&cluster, "faults_pgkill")?;
    let token = create_customer(binary, &database_url, TENANT)?;
    let log = work.join("pgkill.log");
    let options = registry::Options {
        port: Some(free_port()?),
        ..registry::Options::new(binary, &database_url, &log)
    };
    let mut registry = Registry::start(&options)?;
    let http = registry.http();
    let ledger = Mutex::new(Ledger::new(http, &token)?);
    let mut killed = 0;
    let mut aimed = 0;
    let mut down = Vec::new();
    let mut ready_after = Vec::new();
    for round in 0..rounds {
        let prefix = format!("p{round}");
        let writer = Writer {
            http,
            token: &token,
            ledger: &ledger,
        };
        let (down_for, ready) = with_writers(writer, &prefix, || {
            // A different moment of the stream each round.
            std::thread::sleep(Duration::from_millis(4000 + 1100 * round as u64));
            if wait_for_a_transaction(&cluster)? {
                aimed += 1;
            }
            killed += cluster.kill9_server()?;
            let killed_at = Instant::now();
            wait_until(Duration::from_secs(30), || {
                readyz(http).as_deref() == Some("degraded")
            })
            .context("GET /readyz never said degraded with PostgreSQL killed")?;
            let listed = http.call("GET", "/services", Some(&token), None)?;
            listed.expect(503, "an authenticated call with PostgreSQL killed")?;
            // Long enough for the writers to meet the outage, not only the kill.
            std::thread::sleep(Duration::from_secs(3));
            let created = || locked(&ledger).acknowledged("service created");
            let acked_before = created();
            cluster
                .start_server()
                .with_context(|| format!("PostgreSQL did not restart after kill {round}"))?;
            let down_for = killed_at.elapsed();
            let ready = wait_until(Duration::from_secs(60), || {
                readyz(http).as_deref() == Some("ready")
            })
            .with_context(|| format!("GET /readyz never recovered after kill {round}"))?;
            wait_until(Duration::from_secs(30), || created() > acked_before)
                .with_context(|| format!("no write accepted after kill {round}"))?;
            std::thread::sleep(Duration::from_secs(1));
            anyhow::Ok((down_for, ready))
        })?;
        down.push(down_for);
        ready_after.push(ready);
        ensure!(
            registry.is_running(),
            "the registry exited after kill {round}"
        );
        let l = locked(&ledger);
        l.verify(http, &token)
            .with_context(|| format!("after kill {round}, same registry process"))?;
        ensure!(
            l.server_errors.is_empty(),
            "server errors other than 503 unavailable: {:?}",
            l.server_errors
        );
        println!(
            "round {round}: PostgreSQL killed and recovered, registry ready {:.1} s later; {} so \
             far; {} answers 503",
            ready.as_secs_f64(),
            acknowledged(&l),
            l.unavailable
        );
    }
    registry.terminate()?;
    let recoveries = std::fs::read_to_string(cluster.server_log())?
        .matches(RECOVERY)
        .count();
    ensure!(
        recoveries == rounds,
        "PostgreSQL logged {recoveries} crash recoveries ({RECOVERY:?}) for {rounds} kills"
    );
    amcheck(&cluster, &database_url)?;
    // From the database alone: no cache of the old process.
    let mut registry = Registry::start(&options)?;
    let l = locked(&ledger);
    let verified = l
        .verify(registry.http(), &token)
        .context("after a restart of the registry")?;
    registry.terminate()?;
    let log_text = std::fs::read_to_string(&log)?;
    let panics = log_text.lines().filter(|l| l.contains("panicked")).count();
    ensure!(panics == 0, "the registry panicked: see {}", log.display());
    // What the registry saw of the crashes: cut connections, refused connections, timeouts.
    let mut reasons = std::collections::BTreeMap::<String, usize>::new();
    for line in log_text
        .lines()
        .filter(|l| l.contains("storage unavailable"))
    {
        let reason = line.split_once("reason=").map_or(line, |(_, r)| r);
        let reason: String = reason.chars().take(90).collect();
        *reasons.entry(reason).or_default() += 1;
    }
    println!("the registry's \"storage unavailable\" log lines, by reason:");
    for (reason, count) in &reasons {
        println!("  {count:>4} × {reason}");
    }
    // Anything but waiting for a connection: a statement or commit the crash cut off.
    let cut: usize = reasons
        .iter()
        .filter(|(reason, _)| !reason.starts_with("timed out waiting for connection"))
        .map(|(_, count)| count)
        .sum();
    let seconds = |d: &[Duration]| {
        d.iter()
            .map(|d| format!("{:.1}", d.as_secs_f64()))
            .collect::<Vec<_>>()
            .join("/")
    };
    Ok(format!(
        "{rounds} kills of PostgreSQL ({killed} processes; {aimed} kills while a backend was busy, \
         statements cut off: {cut}), fsync on; down {} s, registry ready {} s after the restart, \
         same process; {}, all present after each recovery and after a registry restart; {} \
         unacknowledged writes found whole; {} audit events, one per change; {} answers 503 \
         unavailable, no other 5xx; {recoveries} crash recoveries logged; pg_amcheck clean",
        seconds(&down),
        seconds(&ready_after),
        acknowledged(&l),
        verified.found_whole,
        verified.audit_events,
        l.unavailable
    ))
}

/// Waits (at most 3 s) until a backend is running a statement or is inside a transaction, so
/// that the kill is likelier to cut one; whether one was seen.
fn wait_for_a_transaction(cluster: &Cluster) -> Result<bool> {
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        if cluster
            .backend_titles()?
            .iter()
            .any(|title| !title.ends_with(" idle"))
        {
            return Ok(true);
        }
    }
    Ok(false)
}

/// `pg_amcheck` on the registry's database: heap pages and B-tree indexes (with every heap tuple
/// found in its indexes) are consistent after the crash recoveries.
fn amcheck(cluster: &Cluster, database_url: &str) -> Result<()> {
    let out = Command::new("pg_amcheck")
        .env("PATH", cluster.path_with_binaries()?)
        .args(["--install-missing", "--heapallindexed"])
        .arg(database_url)
        .output()
        .context("running pg_amcheck")?;
    ensure!(
        out.status.success(),
        "pg_amcheck ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}
