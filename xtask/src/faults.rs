//! `cargo xtask faults`: the real binary under faults, checking that nothing acknowledged is lost.
//!
//! * `kill`: `kill -9` of the server in the middle of a stream of writes (services, published
//!   configurations, title changes, service accounts with their tokens), then a restart on the
//!   same database: every acknowledged write is there, nothing is half-written (a service's
//!   configuration and hosted documents agree, every account's token works), and on SQLite
//!   `PRAGMA integrity_check` says `ok`. Runs on SQLite, and on PostgreSQL when it is installed.
//! * `postgres`: PostgreSQL stopped and started under load: `GET /readyz` and authenticated
//!   calls answer 503 (never 500) while it is down, public documents keep being served from
//!   memory, and the same registry process recovers by itself once it is back.
//! * `pgkill`: `kill -9` of PostgreSQL itself (the postmaster and all its processes) in the
//!   middle of the `kill` scenario's write stream, then PostgreSQL started again on the same data
//!   directory (crash recovery), the registry never restarted (`faults/pgkill.rs`).
//! * `disk`: SQLite on a 2 MiB tmpfs (needs root for `mount`): writes fail with clear 503s once
//!   the disk is full, reads go on, writes recover when space returns (remount), no acknowledged
//!   write is lost and the database passes `PRAGMA integrity_check`.

pub mod harness;
mod pgkill;

use crate::postgres;
use anyhow::{bail, ensure, Context, Result};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use harness::{customer, free_port, wait_until, Http, Registry, WorkDir};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const USAGE: &str = "usage: cargo xtask faults [--rounds N] [kill] [postgres] [pgkill] [disk]";

/// One line of the final summary.
struct Outcome {
    scenario: String,
    result: Result<String>,
}

pub fn run(args: &[String]) -> Result<()> {
    let mut rounds = 3;
    let mut only: Vec<String> = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--rounds" => {
                rounds = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .context("--rounds needs a number")?;
            }
            "kill" | "postgres" | "pgkill" | "disk" => only.push(arg.clone()),
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    let wanted = |name: &str| only.is_empty() || only.iter().any(|o| o == name);
    let binary = harness::build_binary()?;
    let work = WorkDir::new("faults")?;
    let mut outcomes = Vec::new();

    if wanted("kill") {
        let path = work.0.join("kill.db");
        let url = format!("sqlite://{}", path.display());
        outcomes.push(Outcome {
            scenario: "kill -9 during writes (SQLite)".into(),
            result: kill_during_writes(&binary, &url, &work.0, rounds, Some(&path)),
        });
    }
    let cluster = if wanted("kill") || wanted("postgres") {
        match postgres::Cluster::start() {
            Ok(cluster) => Some(cluster),
            Err(e) => {
                outcomes.push(Outcome {
                    scenario: "PostgreSQL scenarios".into(),
                    result: Err(e.context("cannot start a PostgreSQL cluster")),
                });
                None
            }
        }
    } else {
        None
    };
    if let Some(mut cluster) = cluster {
        if wanted("kill") {
            let result = create_database(&cluster, "faults_kill")
                .and_then(|url| kill_during_writes(&binary, &url, &work.0, rounds, None));
            outcomes.push(Outcome {
                scenario: "kill -9 during writes (PostgreSQL)".into(),
                result,
            });
        }
        if wanted("postgres") {
            let result = create_database(&cluster, "faults_outage")
                .and_then(|url| postgres_outage(&binary, &url, &work.0, &mut cluster));
            outcomes.push(Outcome {
                scenario: "PostgreSQL stopped and started under load".into(),
                result,
            });
        }
    }
    if wanted("pgkill") {
        outcomes.push(Outcome {
            scenario: "kill -9 of PostgreSQL during writes".into(),
            result: pgkill::postgres_killed_during_writes(&binary, &work.0, rounds),
        });
    }
    if wanted("disk") {
        outcomes.push(Outcome {
            scenario: "disk full (SQLite on a 2 MiB tmpfs)".into(),
            result: disk_full(&binary, &work.0),
        });
    }

    println!("\n=== faults: summary ===\n");
    let mut failed = 0;
    for outcome in &outcomes {
        match &outcome.result {
            Ok(summary) => println!("PASS  {}\n      {summary}", outcome.scenario),
            Err(e) => {
                failed += 1;
                println!("FAIL  {}\n      {e:#}", outcome.scenario);
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
            .args([
                "-X",
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
                "-d",
                &cluster.admin_url(),
                "-c",
            ])
            .arg(format!("CREATE DATABASE {name}")),
    )?;
    let admin = cluster.admin_url();
    let (server, _) = admin
        .rsplit_once('/')
        .context("an admin URL with a database")?;
    Ok(format!("{server}/{name}"))
}

/// A valid PUT /config body whose key set holds `keys` RSA keys named `{kid}-{i}`.
pub fn upload(kid: &str, keys: usize) -> Value {
    let mut n = vec![0xa5u8; 256];
    n[0] = 0xc3;
    let n = URL_SAFE_NO_PAD.encode(&n);
    let keys: Vec<Value> = (0..keys)
        .map(|i| json!({"kty": "RSA", "kid": format!("{kid}-{i}"), "use": "sig", "alg": "RS256", "e": "AQAB", "n": n}))
        .collect();
    json!({
        "openidConfiguration": {
            "issuer": "https://kubernetes.default.svc.cluster.local",
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"]
        },
        "jwks": {"keys": keys}
    })
}

/// What the writers got acknowledged.
#[derive(Default)]
struct Acked {
    services: Vec<String>,
    configs: Vec<String>,
    patched: Vec<String>,
    /// (account id, subdomain it covers, token)
    accounts: Vec<(String, String, String)>,
    /// Statuses other than the expected success, by operation.
    unexpected: Vec<String>,
    /// 5xx answers other than 503 `unavailable` (status and body).
    server_errors: Vec<String>,
    /// 503 `unavailable` answers.
    unavailable: usize,
}

impl Acked {
    fn refused(&mut self, method: &str, path: &str, response: &harness::Response) {
        let status = response.status;
        self.unexpected.push(format!("{method} {path} → {status}"));
        if status == 503 && response.problem() == "unavailable" {
            self.unavailable += 1;
        } else if status >= 500 {
            self.server_errors
                .push(format!("{method} {path} → {status}: {}", response.body));
        }
    }
}

/// One writer: services, then their configuration, title and a service account, until `stop`
/// or the server disappears.
fn write_stream(http: Http, token: &str, prefix: &str, stop: &AtomicBool, acked: &Mutex<Acked>) {
    let record =
        |f: &mut dyn FnMut(&mut Acked)| f(&mut acked.lock().unwrap_or_else(|e| e.into_inner()));
    let mut n = 0;
    while !stop.load(Ordering::SeqCst) {
        n += 1;
        let name = format!("{prefix}n{n}");
        let body = json!({"title": name, "serviceName": name, "description": "d".repeat(300)});
        let Ok(created) = http.call("POST", "/services", Some(token), Some(&body)) else {
            return;
        };
        if created.status != 201 {
            record(&mut |a| a.refused("POST", "/services", &created));
            continue;
        }
        let subdomain = created.json()["subdomain"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        record(&mut |a| a.services.push(subdomain.clone()));
        let steps: [(&str, String, Value, u16); 3] = [
            (
                "PUT",
                format!("/services/{subdomain}/config"),
                upload(&subdomain, 2),
                200,
            ),
            (
                "PATCH",
                format!("/services/{subdomain}"),
                json!({"title": "patched"}),
                200,
            ),
            (
                "POST",
                "/service-accounts".into(),
                json!({"name": subdomain, "policy": {"kind": "static", "services": [subdomain]}}),
                201,
            ),
        ];
        for (step, (method, path, body, expected)) in steps.into_iter().enumerate() {
            let Ok(response) = http.call(method, &path, Some(token), Some(&body)) else {
                return;
            };
            if response.status != expected {
                record(&mut |a| a.refused(method, &path, &response));
                continue;
            }
            let reply = response.json();
            record(&mut |a| match step {
                0 => a.configs.push(subdomain.clone()),
                1 => a.patched.push(subdomain.clone()),
                _ => a.accounts.push((
                    reply["id"].as_str().unwrap_or_default().to_owned(),
                    subdomain.clone(),
                    reply["token"].as_str().unwrap_or_default().to_owned(),
                )),
            });
        }
    }
}

/// Four [`write_stream`]s named `{prefix}w{n}`; the flag that stops them, and their threads.
fn start_writers(
    http: Http,
    token: &str,
    prefix: &str,
    acked: &Arc<Mutex<Acked>>,
) -> (Arc<AtomicBool>, Vec<std::thread::JoinHandle<()>>) {
    let stop = Arc::new(AtomicBool::new(false));
    let writers = (0..4)
        .map(|w| {
            let (stop, acked, token) = (stop.clone(), acked.clone(), token.to_owned());
            let prefix = format!("{prefix}w{w}");
            std::thread::spawn(move || write_stream(http, &token, &prefix, &stop, &acked))
        })
        .collect();
    (stop, writers)
}

fn kill_during_writes(
    binary: &Path,
    database_url: &str,
    work: &Path,
    rounds: usize,
    sqlite: Option<&Path>,
) -> Result<String> {
    let token = customer(binary, database_url, "acme")?;
    let log = work.join(format!(
        "kill-{}.log",
        if sqlite.is_some() {
            "sqlite"
        } else {
            "postgres"
        }
    ));
    let acked = Arc::new(Mutex::new(Acked::default()));
    let mut in_flight_found = 0;
    // One port throughout: the issuer URLs of published documents name it.
    let port = free_port()?;
    for round in 0..rounds {
        let mut registry = Registry::start(binary, database_url, port, &log, &[])?;
        let http = registry.http();
        verify_everything(
            http,
            port,
            &token,
            &acked.lock().unwrap_or_else(|e| e.into_inner()),
        )
        .with_context(|| format!("after restart {round}"))?;
        let (stop, writers) = start_writers(http, &token, &format!("r{round}"), &acked);
        // A different moment of the stream each round.
        std::thread::sleep(Duration::from_millis(3000 + 1100 * round as u64));
        registry.kill9()?;
        stop.store(true, Ordering::SeqCst);
        for writer in writers {
            writer
                .join()
                .map_err(|_| anyhow::anyhow!("a writer panicked"))?;
        }
        let a = acked.lock().unwrap_or_else(|e| e.into_inner());
        println!(
            "round {round}: killed with {} services, {} configurations, {} accounts acknowledged so far",
            a.services.len(),
            a.configs.len(),
            a.accounts.len()
        );
    }
    // The last kill's aftermath.
    let mut registry = Registry::start(binary, database_url, port, &log, &[])?;
    let acked = acked.lock().unwrap_or_else(|e| e.into_inner());
    in_flight_found += verify_everything(registry.http(), port, &token, &acked)?;
    registry.terminate()?;
    ensure!(
        acked.unexpected.iter().all(|u| !u.contains("→ 5")),
        "server errors during the write stream: {:?}",
        acked.unexpected
    );
    let mut summary = format!(
        "{rounds} kills; {} services, {} configurations, {} title changes, {} accounts acknowledged, \
         all present after restart; {in_flight_found} unacknowledged writes found whole",
        acked.services.len(),
        acked.configs.len(),
        acked.patched.len(),
        acked.accounts.len()
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

/// Checks every acknowledged write and that nothing stored is half-written; returns how many
/// services exist that were never acknowledged (writes in flight at the kill, found whole).
fn verify_everything(http: Http, port: u16, token: &str, acked: &Acked) -> Result<usize> {
    let listed = http.call("GET", "/services", Some(token), None)?;
    ensure!(listed.status == 200, "GET /services → {}", listed.status);
    let services: BTreeMap<String, Value> = listed
        .json()
        .as_array()
        .context("GET /services is not an array")?
        .iter()
        .map(|s| {
            (
                s["subdomain"].as_str().unwrap_or_default().to_owned(),
                s.clone(),
            )
        })
        .collect();
    for subdomain in &acked.services {
        ensure!(
            services.contains_key(subdomain),
            "acknowledged service {subdomain} is missing"
        );
    }
    for subdomain in &acked.patched {
        let title = &services[subdomain]["title"];
        ensure!(
            title == "patched",
            "acknowledged title change of {subdomain} is missing ({title})"
        );
    }
    let configs: std::collections::HashSet<&String> = acked.configs.iter().collect();
    let mut published = std::collections::HashSet::new();
    for (subdomain, service) in &services {
        for field in ["id", "subdomain", "title", "issuer", "createdAt"] {
            ensure!(
                service.get(field).is_some(),
                "service {subdomain} has no {field}: {service}"
            );
        }
        let (config, hosted) = http.stored_and_hosted(subdomain, token, port)?;
        match config.status {
            200 => {
                let doc = config.json();
                ensure!(
                    doc["openidConfiguration"]["issuer"] == service["issuer"],
                    "{subdomain}: configuration issuer differs from the service's"
                );
                let kids = doc["jwks"]["keys"].as_array().map_or(0, Vec::len);
                ensure!(
                    kids == 2,
                    "{subdomain}: published set has {kids} keys, uploaded 2"
                );
                ensure!(
                    hosted.status == 200,
                    "{subdomain}: published but hosted → {}",
                    hosted.status
                );
                ensure!(
                    hosted.json() == doc["jwks"],
                    "{subdomain}: hosted set differs from the stored one"
                );
                published.insert(subdomain.clone());
            }
            404 => {
                ensure!(
                    !configs.contains(subdomain),
                    "acknowledged configuration of {subdomain} is missing"
                );
                ensure!(
                    hosted.status == 404,
                    "{subdomain}: unpublished but hosted → {}",
                    hosted.status
                );
            }
            other => bail!("GET /services/{subdomain}/config → {other}"),
        }
    }
    let accounts = http.call("GET", "/service-accounts", Some(token), None)?;
    ensure!(
        accounts.status == 200,
        "GET /service-accounts → {}",
        accounts.status
    );
    let accounts_listed = accounts.json();
    let accounts_listed = accounts_listed
        .as_array()
        .context("GET /service-accounts is not an array")?;
    let ids: std::collections::HashSet<String> = accounts_listed
        .iter()
        .filter_map(|a| a["id"].as_str().map(str::to_owned))
        .collect();
    for (id, subdomain, account_token) in &acked.accounts {
        ensure!(ids.contains(id), "acknowledged account {id} is missing");
        let mine = http.call("GET", "/services", Some(account_token), None)?;
        ensure!(
            mine.status == 200,
            "the token of acknowledged account {id} → {}",
            mine.status
        );
        let mine = mine.json();
        let visible: Vec<&str> = mine.as_array().map_or_else(Vec::new, |l| {
            l.iter().filter_map(|s| s["subdomain"].as_str()).collect()
        });
        ensure!(
            visible == [subdomain.as_str()],
            "account {id} sees {visible:?}"
        );
    }
    // The bootstrap account came with the customer (customer.create), not by account.create.
    let created: std::collections::HashSet<String> = accounts_listed
        .iter()
        .filter(|a| {
            !a["name"]
                .as_str()
                .unwrap_or_default()
                .ends_with(" bootstrap")
        })
        .filter_map(|a| a["id"].as_str().map(str::to_owned))
        .collect();
    verify_audit(http, token, &services, &published, &created)?;
    Ok(services.len().saturating_sub(acked.services.len()))
}

/// The audit trail holds exactly one event per change that exists (DECISIONS §13): every
/// acknowledged change has its event (the callers above checked that each one exists), and no
/// event names a change that did not happen. The write streams only create and update, so
/// what exists is what happened.
fn verify_audit(
    http: Http,
    token: &str,
    services: &BTreeMap<String, Value>,
    published: &std::collections::HashSet<String>,
    accounts: &std::collections::HashSet<String>,
) -> Result<()> {
    let mut events: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut path = "/audit-events?limit=500".to_owned();
    loop {
        let page = http.call("GET", &path, Some(token), None)?;
        ensure!(page.status == 200, "GET {path} → {}", page.status);
        let page = page.json();
        for event in page["events"].as_array().context("no events array")? {
            let resource = &event["resource"];
            // Services by subdomain, accounts by id, the customer as "".
            let key = match resource["type"].as_str() {
                Some("customer") => "",
                _ => resource["subdomain"]
                    .as_str()
                    .or(resource["id"].as_str())
                    .unwrap_or_default(),
            };
            let action = event["action"].as_str().unwrap_or_default();
            *events
                .entry((action.to_owned(), key.to_owned()))
                .or_default() += 1;
        }
        match page["nextCursor"].as_str() {
            Some(cursor) => path = format!("/audit-events?limit=500&cursor={cursor}"),
            None => break,
        }
    }
    let patched: std::collections::HashSet<&String> = services
        .iter()
        .filter(|(_, s)| s["title"] == "patched")
        .map(|(subdomain, _)| subdomain)
        .collect();
    let mut expected: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut expect = |action: &str, key: &str| {
        expected.insert((action.to_owned(), key.to_owned()), 1);
    };
    for subdomain in services.keys() {
        expect("service.create", subdomain);
    }
    for subdomain in published {
        expect("config.put", subdomain);
    }
    for subdomain in patched {
        expect("service.update", subdomain);
    }
    for id in accounts {
        expect("account.create", id);
    }
    expect("customer.create", "");
    let missing: Vec<_> = expected
        .keys()
        .filter(|k| !events.contains_key(*k))
        .collect();
    let extra: Vec<_> = events
        .iter()
        .filter(|(k, n)| expected.get(*k) != Some(*n))
        .collect();
    ensure!(
        missing.is_empty() && extra.is_empty(),
        "audit trail and data differ: changes without their event {missing:?}, events without          their change (or twice) {extra:?}"
    );
    Ok(())
}

fn sqlite_pragma(path: &Path, pragma: &str) -> Result<String> {
    let out = crate::cmd::output(Command::new("sqlite3").arg(path).arg(pragma))
        .context("the sqlite3 command-line shell is needed (apt-get install sqlite3)")?;
    Ok(out.trim().to_owned())
}

/// Statuses seen by one kind of request, with the moments they came.
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
    let token = customer(binary, database_url, "acme")?;
    let port = free_port()?;
    let mut registry = Registry::start(binary, database_url, port, &work.join("outage.log"), &[])?;
    let http = registry.http();
    let created = http.call(
        "POST",
        "/services",
        Some(&token),
        Some(&json!({"title": "api", "serviceName": "api"})),
    )?;
    ensure!(created.status == 201, "POST /services → {}", created.status);
    let published = http.call(
        "PUT",
        "/services/api-acme/config",
        Some(&token),
        Some(&upload("k", 1)),
    )?;
    ensure!(published.status == 200, "PUT config → {}", published.status);
    let host = format!("api-acme.localhost:{port}");

    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Mutex::new(Tally::default()));
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let written = Arc::new(AtomicUsize::new(0));
    let load: Vec<_> = (0..3)
        .map(|worker| {
            let (stop, tally, acked, written, token) = (
                stop.clone(),
                tally.clone(),
                acked.clone(),
                written.clone(),
                token.clone(),
            );
            std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    n += 1;
                    let (op, result) = if worker == 0 {
                        let name = format!("load{n}");
                        let body = json!({"title": name, "serviceName": name});
                        (
                            "POST /services",
                            http.call("POST", "/services", Some(&token), Some(&body)),
                        )
                    } else {
                        (
                            "GET /services/{s}",
                            http.call("GET", "/services/api-acme", Some(&token), None),
                        )
                    };
                    let mut t = tally.lock().unwrap_or_else(|e| e.into_inner());
                    let key = match &result {
                        Ok(r) => format!("{op} → {}", r.status),
                        Err(_) => format!("{op} → connection error"),
                    };
                    if let Ok(r) = &result {
                        if r.status >= 500 && !(r.status == 503 && r.problem() == "unavailable") {
                            t.server_errors.push(format!("{key}: {}", r.body));
                        }
                        if r.status == 201 {
                            let sub = r.json()["subdomain"]
                                .as_str()
                                .unwrap_or_default()
                                .to_owned();
                            acked.lock().unwrap_or_else(|e| e.into_inner()).push(sub);
                            written.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    *t.counts.entry(key).or_default() += 1;
                    drop(t);
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        })
        .collect();

    std::thread::sleep(Duration::from_secs(2));
    let before_outage = written.load(Ordering::SeqCst);
    ensure!(before_outage > 0, "no write succeeded before the outage");
    let stopped_at = Instant::now();
    cluster.stop_server()?;
    let to_503 = wait_until(Duration::from_secs(30), || {
        http.call("GET", "/readyz", None, None)
            .is_ok_and(|r| r.status == 503)
    })
    .context("GET /readyz never answered 503 with PostgreSQL down")?;
    let authed = http.call("GET", "/services/api-acme", Some(&token), None)?;
    ensure!(
        authed.status == 503 && authed.problem() == "unavailable",
        "an authenticated call with PostgreSQL down → {} {}",
        authed.status,
        authed.body
    );
    let public = http.send("GET", "/openid/v1/jwks", None, None, Some(&host))?;
    ensure!(
        public.status == 200,
        "the hosted key set with PostgreSQL down → {}",
        public.status
    );
    std::thread::sleep(Duration::from_secs(3));
    let down_for = stopped_at.elapsed();
    cluster.start_server()?;
    let restarted_at = Instant::now();
    let ready = wait_until(Duration::from_secs(60), || {
        http.call("GET", "/readyz", None, None)
            .is_ok_and(|r| r.status == 200)
    })
    .context("GET /readyz never recovered after PostgreSQL came back")?;
    let writes = wait_until(Duration::from_secs(30), || {
        let name = format!("after{}", restarted_at.elapsed().as_millis());
        let body = json!({"title": name, "serviceName": name});
        http.call("POST", "/services", Some(&token), Some(&body))
            .is_ok_and(|r| r.status == 201)
    })
    .context("writes never recovered after PostgreSQL came back")?;
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::SeqCst);
    for worker in load {
        worker
            .join()
            .map_err(|_| anyhow::anyhow!("a load worker panicked"))?;
    }
    ensure!(
        registry.is_running(),
        "the registry exited during the outage"
    );
    let tally = tally.lock().unwrap_or_else(|e| e.into_inner());
    ensure!(
        tally.server_errors.is_empty(),
        "unexpected server errors: {:?}",
        tally.server_errors
    );
    for sub in acked.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        let got = http.call("GET", &format!("/services/{sub}"), Some(&token), None)?;
        ensure!(
            got.status == 200,
            "acknowledged service {sub} → {}",
            got.status
        );
    }
    registry.terminate()?;
    let counts: Vec<String> = tally
        .counts
        .iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    Ok(format!(
        "down {:.1} s; /readyz 503 after {:.1} s; ready {:.1} s after PostgreSQL restarted and a \
         write accepted {:.1} s later, same process; hosted documents served throughout; {} \
         acknowledged writes all present; statuses under load: {}",
        down_for.as_secs_f64(),
        to_503.as_secs_f64(),
        ready.as_secs_f64(),
        writes.as_secs_f64(),
        written.load(Ordering::SeqCst),
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
    let token = customer(binary, &url, "acme")?;
    let port = free_port()?;
    let log = work.join("disk.log");
    let mut registry = Registry::start(binary, &url, port, &log, &[])?;
    let http = registry.http();
    let created = http.call(
        "POST",
        "/services",
        Some(&token),
        Some(&json!({"title": "probe", "serviceName": "probe"})),
    )?;
    ensure!(created.status == 201, "POST /services → {}", created.status);
    let published = http.call(
        "PUT",
        "/services/probe-acme/config",
        Some(&token),
        Some(&upload("p", 1)),
    )?;
    ensure!(published.status == 200, "PUT config → {}", published.status);

    let mut acked_services = vec!["probe-acme".to_owned()];
    let mut statuses: BTreeMap<String, usize> = BTreeMap::new();
    let mut consecutive_503 = 0;
    let mut first_503 = None;
    let mut n = 0;
    while consecutive_503 < 6 && n < 3000 {
        n += 1;
        let name = format!("fill{n}");
        let body = json!({"title": name, "serviceName": name, "description": "x".repeat(2000)});
        let created = http.call("POST", "/services", Some(&token), Some(&body))?;
        let config = if created.status == 201 {
            acked_services.push(format!("{name}-acme"));
            Some(http.call(
                "PUT",
                &format!("/services/{name}-acme/config"),
                Some(&token),
                Some(&upload(&name, 60)),
            )?)
        } else {
            None
        };
        for (op, r) in [
            ("POST /services", Some(&created)),
            ("PUT config", config.as_ref()),
        ] {
            let Some(r) = r else { continue };
            *statuses.entry(format!("{op} → {}", r.status)).or_default() += 1;
            match r.status {
                200 | 201 => consecutive_503 = 0,
                503 => {
                    ensure!(
                        r.problem() == "unavailable",
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
    let list = http.call("GET", "/services", Some(&token), None)?;
    let ready = http.call("GET", "/readyz", None, None)?;
    let hosted = http.send(
        "GET",
        "/openid/v1/jwks",
        None,
        None,
        Some(&format!("probe-acme.localhost:{port}")),
    )?;
    ensure!(
        list.status == 200,
        "GET /services on a full disk → {}",
        list.status
    );
    ensure!(
        hosted.status == 200,
        "hosted documents on a full disk → {}",
        hosted.status
    );
    ensure!(
        registry.is_running(),
        "the registry exited when the disk filled up"
    );
    // Space comes back: writes recover without a restart.
    tmpfs.resize("64m")?;
    let recovered = wait_until(Duration::from_secs(20), || {
        let body = json!({"title": "after", "serviceName": "after"});
        http.call("POST", "/services", Some(&token), Some(&body))
            .is_ok_and(|r| r.status == 201)
    })
    .context("writes did not recover once space came back")?;
    acked_services.push("after-acme".into());
    registry.terminate()?;
    let integrity = sqlite_pragma(&path, "PRAGMA integrity_check")?;
    ensure!(integrity == "ok", "PRAGMA integrity_check: {integrity}");
    // Every acknowledged write survives a restart.
    let mut registry = Registry::start(binary, &url, port, &log, &[])?;
    let http = registry.http();
    for sub in &acked_services {
        let got = http.call("GET", &format!("/services/{sub}"), Some(&token), None)?;
        ensure!(
            got.status == 200,
            "acknowledged service {sub} after restart → {}",
            got.status
        );
    }
    registry.terminate()?;
    drop(tmpfs);
    let counts: Vec<String> = statuses.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    Ok(format!(
        "first 503 at write {first_503} of {n}; while full: GET /services {}, /readyz {}, hosted 200; \
         writes back {:.1} s after the remount, no restart; {} acknowledged services present after \
         restart; PRAGMA integrity_check ok; {}",
        list.status,
        ready.status,
        recovered.as_secs_f64(),
        acked_services.len(),
        counts.join(", ")
    ))
}
