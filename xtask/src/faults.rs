//! `cargo xtask faults`: the real binary under faults, checking that nothing acknowledged is lost.
//!
//! * `kill`: `kill -9` of the server in the middle of a stream of writes (services, published
//!   configurations, title changes, service accounts with their tokens), then a restart on the
//!   same database: every acknowledged write is there, nothing is half-written (a service's
//!   configuration and hosted documents agree, every account's token works), the audit trail
//!   holds one event per change, and on SQLite `PRAGMA integrity_check` says `ok`. Runs on
//!   SQLite, and on PostgreSQL when it is installed.
//! * `postgres`: PostgreSQL stopped and started under load: `GET /readyz` and authenticated
//!   calls answer 503 (never 500) while it is down, public documents keep being served from
//!   memory, and the same registry process recovers by itself once it is back.
//! * `pgkill`: `kill -9` of PostgreSQL itself (the postmaster and all its processes) in the
//!   middle of the `kill` scenario's write stream, then PostgreSQL started again on the same data
//!   directory (crash recovery), the registry never restarted (`faults/pgkill.rs`).
//! * `disk`: SQLite on a 2 MiB tmpfs (needs root for `mount`): writes fail with clear 503s once
//!   the disk is full, reads go on, writes recover when space returns (remount), no acknowledged
//!   write is lost and the database passes `PRAGMA integrity_check`.
//!
//! What was acknowledged is kept in the [`Ledger`], and checked with [`Ledger::verify`].

mod pgkill;
mod standby;

use crate::api::{fake_keys, upload, Api};
use crate::ledger::{locked, Ledger, Sent, Writer, TENANT};
use crate::postgres;
use crate::registry::{self, create_customer, Registry, WorkDir};
use anyhow::{bail, ensure, Context, Result};
use registry_testkit::http::Http;
use registry_testkit::{free_port, wait_until};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug, clap::Args)]
pub struct Options {
    /// Kills of the server (and of PostgreSQL, for `pgkill`) per scenario.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// The scenarios to run; all of them when none is named.
    #[arg(value_enum)]
    scenarios: Vec<Scenario>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Scenario {
    Kill,
    Postgres,
    Pgkill,
    Disk,
    Standby,
}

/// The `standby` scenario alone: what `cargo xtask test` runs of this chore (docs/api.md,
/// "Read replicas and the primary down", on a real primary and standby).
pub fn run_standby() -> Result<()> {
    run(&Options {
        rounds: 1,
        scenarios: vec![Scenario::Standby],
    })
}

pub fn run(options: &Options) -> Result<()> {
    let wanted = |s| options.scenarios.is_empty() || options.scenarios.contains(&s);
    let rounds = options.rounds;
    let binary = registry::build(false)?;
    let work = WorkDir::in_target("faults")?;
    let mut outcomes: Vec<(&str, Result<String>)> = Vec::new();

    if wanted(Scenario::Kill) {
        let path = work.0.join("kill.db");
        let url = format!("sqlite://{}", path.display());
        let result = kill_during_writes(&binary, &url, &work.0, rounds, Some(&path));
        outcomes.push(("kill -9 during writes (SQLite)", result));
    }
    if wanted(Scenario::Kill) || wanted(Scenario::Postgres) {
        match postgres::Cluster::start() {
            Err(e) => outcomes.push((
                "PostgreSQL scenarios",
                Err(e.context("cannot start a PostgreSQL cluster")),
            )),
            Ok(mut cluster) => {
                if wanted(Scenario::Kill) {
                    let result = create_database(&cluster, "faults_kill")
                        .and_then(|url| kill_during_writes(&binary, &url, &work.0, rounds, None));
                    outcomes.push(("kill -9 during writes (PostgreSQL)", result));
                }
                if wanted(Scenario::Postgres) {
                    let result = create_database(&cluster, "faults_outage")
                        .and_then(|url| postgres_outage(&binary, &url, &work.0, &mut cluster));
                    outcomes.push(("PostgreSQL stopped and started under load", result));
                }
            }
        }
    }
    if wanted(Scenario::Pgkill) {
        let result = pgkill::postgres_killed_during_writes(&binary, &work.0, rounds);
        outcomes.push(("kill -9 of PostgreSQL during writes", result));
    }
    if wanted(Scenario::Standby) {
        let result = standby::read_replica_and_fail_over(&binary, &work.0);
        outcomes.push((
            "read replica, primary down, fail-over (PostgreSQL standby)",
            result,
        ));
    }
    if wanted(Scenario::Disk) {
        let result = disk_full(&binary, &work.0);
        outcomes.push(("disk full (SQLite on a 2 MiB tmpfs)", result));
    }

    println!("\n=== faults: summary ===\n");
    let mut failed = 0;
    for (scenario, result) in &outcomes {
        match result {
            Ok(summary) => println!("PASS  {scenario}\n      {summary}"),
            Err(e) => {
                failed += 1;
                println!("FAIL  {scenario}\n      {e:#}");
            }
        }
    }
    if failed > 0 {
        bail!("{failed} of {} fault scenarios failed", outcomes.len());
    }
    Ok(())
}

/// A new database on the cluster; its URL.
fn create_database(cluster: &postgres::Cluster, name: &str) -> Result<String> {
    crate::cmd::output(
        Command::new("psql")
            .env("PATH", cluster.path_with_binaries()?)
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d"])
            .arg(cluster.admin_url())
            .arg("-c")
            .arg(format!("CREATE DATABASE {name}")),
    )?;
    let admin = cluster.admin_url();
    let (server, _) = admin
        .rsplit_once('/')
        .context("an admin URL with a database")?;
    Ok(format!("{server}/{name}"))
}

/// One writer of the crash scenarios: services `{prefix}n{n}`, each then published (two keys),
/// retitled `patched` and given a static account over it, until `stop` or the server stops
/// answering.
fn write_stream(writer: Writer, prefix: &str, stop: &AtomicBool) {
    let mut n = 0;
    while !stop.load(Ordering::SeqCst) {
        n += 1;
        let name = format!("{prefix}n{n}");
        let subdomain = format!("{name}-{TENANT}");
        let created = writer.create_service(&name, Some(&"d".repeat(300)));
        if created.answer.is_none() {
            return;
        } else if !created.acked() {
            continue;
        }
        let steps: [&dyn Fn() -> Sent; 3] = [
            &|| writer.publish("configuration published", &subdomain, &subdomain, 2),
            &|| writer.retitle("title changed", &subdomain, "patched"),
            &|| writer.create_account(&subdomain, std::slice::from_ref(&subdomain)),
        ];
        // A refused step does not stop the others; no answer means the server is gone.
        if steps.iter().any(|step| step().answer.is_none()) {
            return;
        }
    }
}

/// Runs `during` while `workers` threads run `work(i, stop)`; sets `stop` after.
fn alongside<R>(
    workers: usize,
    work: impl Fn(usize, &AtomicBool) + Sync,
    during: impl FnOnce() -> R,
) -> R {
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        for i in 0..workers {
            let (work, stop) = (&work, &stop);
            scope.spawn(move || work(i, stop));
        }
        let result = during();
        stop.store(true, Ordering::SeqCst);
        result
    })
}

/// Runs `during` while four [`write_stream`]s named `{prefix}w{n}` write.
fn with_writers<R>(writer: Writer, prefix: &str, during: impl FnOnce() -> R) -> R {
    let work = |w, stop: &AtomicBool| write_stream(writer, &format!("{prefix}w{w}"), stop);
    alongside(4, work, during)
}

/// The status of `GET /readyz`; `None` without an answer.
/// What `/readyz` says of the database: `ready` (every side answers), `degraded` (one does not;
/// the replica still serves, 200 either way), `None` without an answer.
fn readyz(http: Http) -> Option<String> {
    let answer = http.call("GET", "/readyz", None, None).ok()?;
    (answer.status == 200).then(|| {
        answer.json()["status"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    })
}

/// "N services, N configurations, N title changes, N accounts acknowledged".
fn acknowledged(ledger: &Ledger) -> String {
    format!(
        "{} services, {} configurations, {} title changes, {} accounts acknowledged",
        ledger.acknowledged("service created"),
        ledger.acknowledged("configuration published"),
        ledger.acknowledged("title changed"),
        ledger.acknowledged("account created")
    )
}

fn kill_during_writes(
    binary: &Path,
    database_url: &str,
    work: &Path,
    rounds: usize,
    sqlite: Option<&Path>,
) -> Result<String> {
    let token = create_customer(binary, database_url, TENANT)?;
    let backend = if sqlite.is_some() {
        "sqlite"
    } else {
        "postgres"
    };
    let log = work.join(format!("kill-{backend}.log"));
    // One port throughout: the issuer URLs of published documents name it.
    let options = registry::Options {
        port: Some(free_port()?),
        ..registry::Options::new(binary, database_url, &log)
    };
    let mut registry = Registry::start(&options)?;
    let ledger = Mutex::new(Ledger::new(registry.http(), &token)?);
    for round in 0..rounds {
        locked(&ledger)
            .verify(registry.http(), &token)
            .with_context(|| format!("after {round} kills"))?;
        let prefix = format!("r{round}");
        let writer = Writer {
            http: registry.http(),
            token: &token,
            ledger: &ledger,
        };
        with_writers(writer, &prefix, || {
            // A different moment of the stream each round.
            std::thread::sleep(Duration::from_millis(3000 + 1100 * round as u64));
            registry.kill9()
        })?;
        println!(
            "round {round}: killed with {} so far",
            acknowledged(&locked(&ledger))
        );
        registry = Registry::start(&options)?;
    }
    let ledger = locked(&ledger);
    let verified = ledger.verify(registry.http(), &token)?;
    registry.terminate()?;
    ensure!(
        ledger.unavailable == 0 && ledger.server_errors.is_empty(),
        "server errors during the write stream: {:?}, {} answers 503 unavailable",
        ledger.server_errors,
        ledger.unavailable
    );
    let mut summary = format!(
        "{rounds} kills; {}, all present after restart; {} unacknowledged writes found whole; \
         {} audit events, one per change",
        acknowledged(&ledger),
        verified.found_whole,
        verified.audit_events
    );
    if let Some(path) = sqlite {
        let integrity = sqlite_pragma(path, "PRAGMA integrity_check")?;
        ensure!(integrity == "ok", "PRAGMA integrity_check: {integrity}");
        let foreign = sqlite_pragma(path, "PRAGMA foreign_key_check")?;
        ensure!(foreign.is_empty(), "PRAGMA foreign_key_check: {foreign}");
        summary.push_str("; PRAGMA integrity_check ok, no foreign key violation");
    }
    Ok(summary)
}

fn sqlite_pragma(path: &Path, pragma: &str) -> Result<String> {
    // Python's sqlite3 module: the machine's Python, rather than one more package to install.
    let print_rows = "import sqlite3, sys\nfor row in sqlite3.connect(sys.argv[1]).execute(sys.argv[2]):\n    print('|'.join(map(str, row)))";
    let out = crate::cmd::output(
        Command::new("python3")
            .args(["-c", print_rows])
            .arg(path)
            .arg(pragma),
    )
    .context("python3 is needed to check the SQLite database")?;
    Ok(out.trim().to_owned())
}

/// Statuses seen by each kind of request, and the 5xx answers other than 503 `unavailable`.
#[derive(Default)]
struct Tally {
    counts: BTreeMap<String, usize>,
    server_errors: Vec<String>,
}

fn postgres_outage(
    binary: &Path,
    database_url: &str,
    work: &Path,
    cluster: &mut postgres::Cluster,
) -> Result<String> {
    let token = create_customer(binary, database_url, TENANT)?;
    let log = work.join("outage.log");
    let mut registry = Registry::start(&registry::Options::new(binary, database_url, &log))?;
    let http = registry.http();
    let api = Api::new(http, &token);
    let service = api.create_service("api")?;
    api.publish(&service, &upload(fake_keys("k", 1)))?;
    let ledger = Mutex::new(Ledger::new(http, &token)?);
    let writer = Writer {
        http,
        token: &token,
        ledger: &ledger,
    };
    let tally = Mutex::new(Tally::default());
    let read = format!("/services/{service}");
    // One writer creating services, two readers.
    let load = |worker, stop: &AtomicBool| {
        let mut n = 0;
        while !stop.load(Ordering::SeqCst) {
            n += 1;
            let (op, answer) = if worker == 0 {
                let sent = writer.create_service(&format!("load{n}"), None);
                ("POST /services", sent.answer)
            } else {
                ("GET /services/{s}", api.call("GET", &read, None).ok())
            };
            let key = match &answer {
                Some(r) => format!("{op} → {}", r.status),
                None => format!("{op} → connection error"),
            };
            let mut t = tally.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(r) = answer.filter(|r| r.status >= 500 && !r.is_unavailable()) {
                t.server_errors.push(format!("{key}: {}", r.body));
            }
            *t.counts.entry(key).or_default() += 1;
            drop(t);
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let (down_for, to_degraded, ready, writes) = alongside(3, load, || {
        std::thread::sleep(Duration::from_secs(2));
        ensure!(
            locked(&ledger).acknowledged("service created") > 0,
            "no write succeeded before the outage"
        );
        let stopped_at = Instant::now();
        cluster.stop_server()?;
        let to_degraded = wait_until(Duration::from_secs(30), || {
            readyz(http).as_deref() == Some("degraded")
        })
        .context("GET /readyz never said degraded with PostgreSQL down")?;
        let authed = api.call("GET", &read, None)?;
        authed.expect(503, "an authenticated call with PostgreSQL down")?;
        let public = http.hosted(&service, "/openid/v1/jwks")?;
        public.expect(200, "the hosted key set with PostgreSQL down")?;
        std::thread::sleep(Duration::from_secs(3));
        let down_for = stopped_at.elapsed();
        cluster.start_server()?;
        let restarted_at = Instant::now();
        let ready = wait_until(Duration::from_secs(60), || {
            readyz(http).as_deref() == Some("ready")
        })
        .context("GET /readyz never recovered after PostgreSQL came back")?;
        let writes = wait_until(Duration::from_secs(30), || {
            let name = format!("after{}", restarted_at.elapsed().as_millis());
            writer.create_service(&name, None).acked()
        })
        .context("writes never recovered after PostgreSQL came back")?;
        std::thread::sleep(Duration::from_secs(1));
        Ok((down_for, to_degraded, ready, writes))
    })?;
    ensure!(
        registry.is_running(),
        "the registry exited during the outage"
    );
    let tally = tally.into_inner().unwrap_or_else(|e| e.into_inner());
    let ledger = locked(&ledger);
    ensure!(
        tally.server_errors.is_empty() && ledger.server_errors.is_empty(),
        "unexpected server errors: {:?} {:?}",
        tally.server_errors,
        ledger.server_errors
    );
    let verified = ledger.verify(http, &token)?;
    registry.terminate()?;
    let counts: Vec<String> = tally
        .counts
        .iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    Ok(format!(
        "down {:.1} s; /readyz degraded after {:.1} s; ready {:.1} s after PostgreSQL restarted and a \
         write accepted {:.1} s later, same process; hosted documents served throughout; {} \
         acknowledged writes all present, {} audit events, one per change; statuses under \
         load: {}",
        down_for.as_secs_f64(),
        to_degraded.as_secs_f64(),
        ready.as_secs_f64(),
        writes.as_secs_f64(),
        ledger.acknowledged("service created"),
        verified.audit_events,
        counts.join(", ")
    ))
}

/// A tmpfs mounted for the test; unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: PathBuf, size: &str) -> Result<Tmpfs> {
        std::fs::create_dir_all(&dir)?;
        crate::cmd::output(
            Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
                .arg(&dir),
        )
        .context("mounting a tmpfs (the disk-full scenario needs root)")?;
        Ok(Tmpfs(dir))
    }

    fn resize(&self, size: &str) -> Result<()> {
        crate::cmd::output(
            Command::new("mount")
                .args(["-o", &format!("remount,size={size}")])
                .arg(&self.0),
        )?;
        Ok(())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

fn disk_full(binary: &Path, work: &Path) -> Result<String> {
    let tmpfs = Tmpfs::mount(
        std::env::temp_dir().join(format!("registry-diskfull-{}", std::process::id())),
        "2m",
    )?;
    let path = tmpfs.0.join("registry.db");
    let url = format!("sqlite://{}", path.display());
    let token = create_customer(binary, &url, TENANT)?;
    let options = registry::Options {
        port: Some(free_port()?),
        ..registry::Options::new(binary, &url, &work.join("disk.log"))
    };
    let mut registry = Registry::start(&options)?;
    let http = registry.http();
    let api = Api::new(http, &token);
    let probe = api.create_service("probe")?;
    api.publish(&probe, &upload(fake_keys("p", 1)))?;
    let ledger = Mutex::new(Ledger::new(http, &token)?);
    let writer = Writer {
        http,
        token: &token,
        ledger: &ledger,
    };

    let mut statuses: BTreeMap<String, usize> = BTreeMap::new();
    let mut consecutive_503 = 0;
    let mut first_503 = None;
    let mut n = 0;
    while consecutive_503 < 6 && n < 3000 {
        n += 1;
        let name = format!("fill{n}");
        let created = writer.create_service(&name, Some(&"x".repeat(2000)));
        let config = created.acked().then(|| {
            let subdomain = format!("{name}-{TENANT}");
            writer.publish("configuration published", &subdomain, &name, 60)
        });
        for (op, sent) in [
            ("POST /services", Some(&created)),
            ("PUT config", config.as_ref()),
        ] {
            let Some(sent) = sent else { continue };
            let r = sent
                .answer
                .as_ref()
                .context("the registry stopped answering")?;
            *statuses.entry(format!("{op} → {}", r.status)).or_default() += 1;
            match r.status {
                200 | 201 => consecutive_503 = 0,
                503 => {
                    ensure!(
                        r.is_unavailable(),
                        "a 503 that is not the unavailable problem: {}",
                        r.body
                    );
                    consecutive_503 += 1;
                    first_503.get_or_insert(n);
                }
                other => bail!("{op} on a full disk → {other}: {}", r.body),
            }
        }
    }
    let first_503 = first_503.context("the disk never filled up")?;
    // While full: reads, authentication and hosting go on.
    let list = api.call("GET", "/services", None)?;
    let ready = http.call("GET", "/readyz", None, None)?;
    let hosted = http.hosted(&probe, "/openid/v1/jwks")?;
    list.expect(200, "GET /services on a full disk")?;
    hosted.expect(200, "hosted documents on a full disk")?;
    ensure!(
        registry.is_running(),
        "the registry exited when the disk filled up"
    );
    // Space comes back: writes recover without a restart.
    tmpfs.resize("64m")?;
    let mut attempt = 0;
    let recovered = wait_until(Duration::from_secs(20), || {
        attempt += 1;
        writer
            .create_service(&format!("after{attempt}"), None)
            .acked()
    })
    .context("writes did not recover once space came back")?;
    registry.terminate()?;
    let integrity = sqlite_pragma(&path, "PRAGMA integrity_check")?;
    ensure!(integrity == "ok", "PRAGMA integrity_check: {integrity}");
    // Every acknowledged write survives a restart.
    let mut registry = Registry::start(&options)?;
    let ledger = locked(&ledger);
    let verified = ledger
        .verify(registry.http(), &token)
        .context("after a restart")?;
    registry.terminate()?;
    drop(tmpfs);
    let counts: Vec<String> = statuses.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    Ok(format!(
        "first 503 at write {first_503} of {n}; while full: GET /services {}, /readyz {}, hosted 200; \
         writes back {:.1} s after the remount, no restart; {} acknowledged services present after \
         restart, {} audit events, one per change; PRAGMA integrity_check ok; {}",
        list.status,
        ready.status,
        recovered.as_secs_f64(),
        ledger.acknowledged("service created"),
        verified.audit_events,
        counts.join(", ")
    ))
}
