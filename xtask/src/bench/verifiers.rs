//! `cargo xtask bench --verifiers [--issuers N] [--workers 1,2,4,8]`: what verifiers really do,
//! side by side with nginx serving the same bytes.
//!
//! A cloud fetches a key set now and then, from one of very many issuers, often over a new TLS
//! connection, and after a deploy every issuer is cold. Three scenarios, each against nginx:
//!
//! * **wide**: N issuers (100,000 by default), each request a random one's key set by `Host`,
//!   over keep-alive, after one sweep over all of them (each served once already);
//! * **wide, cold**: the same right after a restart of both servers: the registry reads each
//!   issuer's documents from the database at its first fetch, nginx opens each file anew;
//! * **fresh**: one key set over HTTPS, every GET on a new TLS connection (`Connection:
//!   close`; wrk resumes no session, so each is a full TLS 1.3 handshake).
//!
//! The registry's N services are one published through the API and N−1 copies of its rows
//! (`bench/scale.rs`); nginx serves `www/<host>/openid/v1/jwks` per issuer, by `root …/$host`,
//! with 1,000 open files cached (`bench/nginx.rs`). Servers and wrk on disjoint cores as in
//! `--workers` (`bench/scaling.rs`): a W that leaves wrk no core is not measured, and says so.

use super::nginx::Nginx;
use super::report::median;
use super::scale::{copies, execute, subdomain, Backend};
use super::scaling::{
    placement, registries, while_recorded, write_goals, Measured, Placed, Placement,
};
use super::wrk::Load;
use super::{federated_server, machine};
use crate::api::{upload, Api, Signer};
use crate::registry::{self, create_customer, truncate, Registry};
use anyhow::{bail, ensure, Context, Result};
use registry_testkit::free_port;
use registry_testkit::http::Http;
use registry_testkit::tls::TestCa;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The section of docs/benchmarks.md this writes.
pub const TITLE: &str = "## Where verifiers are (`cargo xtask bench --verifiers`)";

/// What to measure.
#[derive(Debug, Clone)]
pub struct Plan {
    pub workers: Vec<usize>,
    pub issuers: usize,
    /// How many customers the issuers belong to, spread evenly.
    pub customers: usize,
    pub rounds: u64,
    pub seconds: u32,
    /// Where to put a `perf record` of the registry's cold and warm runs of the first round.
    pub perf: Option<PathBuf>,
}

/// wrk's threads at most, and its connections (as `--workers`).
const WRK_THREADS: usize = 8;
const CONNECTIONS: u32 = 256;
/// The key set's path.
const JWKS: &str = "/openid/v1/jwks";

/// The scenarios, each the registry's then nginx's, in the order they run in a round.
const SCENARIOS: [&str; 3] = ["wide, cold", "wide", "fresh"];

/// One round: per scenario, (registry, nginx).
type Round = [(Measured, Measured); SCENARIOS.len()];

/// What every W shares: the database, the port the issuer URLs name, the certificate, nginx's
/// files, wrk's script of random issuers.
struct Scene {
    database_url: String,
    port: u16,
    tls: (PathBuf, PathBuf),
    jwks: Vec<u8>,
    hosts: Vec<String>,
    script: PathBuf,
}

/// Runs the plan; answers the section for docs/benchmarks.md.
pub fn run(binary: &Path, dir: &Path, plan: &Plan) -> Result<String> {
    ensure!(plan.issuers >= 1, "--issuers must be at least 1");
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    ensure!(
        (1..=plan.issuers).contains(&plan.customers),
        "--customers must be between 1 and the number of issuers"
    );
    let scene = scene(binary, dir, plan.issuers, plan.customers)?;
    let mut rows = Vec::new();
    for &workers in &plan.workers {
        let Some(placement) = placement(workers, cores, false) else {
            println!("W={workers}: too few cores");
            rows.push((workers, None));
            continue;
        };
        println!("\n=== verifiers, {workers} worker(s): servers on {placement:?} ===\n");
        let rounds = measure(binary, dir, &scene, plan, workers, &placement)?;
        rows.push((workers, Some((placement, rounds))));
    }
    Ok(render(plan, cores, &rows))
}

/// The service `bench-acme` published through the API, copied `issuers − 1` times in the
/// database and spread over `customers` (the copies' other customers are rows of the
/// database too); its key set as nginx's files, one directory per issuer.
fn scene(binary: &Path, dir: &Path, issuers: usize, customers: usize) -> Result<Scene> {
    let database_url = format!("sqlite://{}", dir.join("verifiers.db").display());
    let token = create_customer(binary, &database_url, "acme")?;
    let port = free_port()?;
    let options = registry::Options {
        port: Some(port),
        ..federated_server(binary, &database_url, &dir.join("setup.log"))
    };
    let (id, jwks) = {
        let setup = Registry::start(&options)?;
        let api = Api::new(setup.http(), &token);
        let service = api.create_service("bench")?;
        ensure!(service == subdomain(0), "the first service is {service}");
        api.publish(&service, &upload(Signer::generate("wide-1")?.jwks()))?;
        let shown = api.expect("GET", &format!("/services/{service}"), None, 200)?;
        let jwks = setup.http().hosted(&service, JWKS)?;
        jwks.expect(200, "the key set")?;
        let id = shown["id"].as_str().context("a service id")?.to_owned();
        (id, jwks.body.into_bytes())
    };
    let started = Instant::now();
    execute(
        Backend::Sqlite,
        &database_url,
        &copies(Backend::Sqlite, &id, issuers - 1, "", 0),
    )?;
    if customers > 1 {
        execute(Backend::Sqlite, &database_url, &spread(customers))?;
    }
    println!(
        "{issuers} issuers in the database in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let tls = (dir.join("tls.crt"), dir.join("tls.key"));
    let pair = TestCa::new("bench CA").server_certificate(&["localhost", "*.localhost"]);
    pair.write(&tls.0, &tls.1)?;
    // nginx's `$host` is the Host header without its port.
    let hosts: Vec<String> = (0..issuers)
        .map(|i| format!("{}.localhost", subdomain(i)))
        .collect();
    let script = dir.join("wide.lua");
    std::fs::write(&script, random_issuers(issuers, port))?;
    Ok(Scene {
        database_url,
        port,
        tls,
        jwks,
        hosts,
        script,
    })
}

/// SQL that adds `customers − 1` customers beside `acme` (the business plan, like it) and moves
/// the services to them in turn by row: a registry's issuers belong to many customers, and
/// reads that leave out disabled customers' services must cost the same with one or ten thousand.
fn spread(customers: usize) -> String {
    let id = |of: &str| format!("printf('00000000-0000-4000-8000-%012x', {of})");
    format!(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {others}) \
         INSERT INTO customers (id, name, tenant, plan, created_at) \
         SELECT {new}, 'Customer ' || n.i, 'c' || n.i, plan, created_at \
         FROM customers, n WHERE tenant = 'acme';\n\
         UPDATE services SET customer_id = {moved} WHERE rowid % {customers} != 0;\n",
        others = customers - 1,
        new = id("n.i"),
        moved = id(&format!("rowid % {customers}")),
    )
}

/// wrk's script: each request the key set of a random one of the `issuers`, by the `Host` of
/// the registry's issuer URL (`<subdomain>.localhost:<port>`; nginx ignores the port), each of
/// wrk's threads with a seed of its own.
fn random_issuers(issuers: usize, port: u16) -> String {
    format!(
        "local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set(\"seed\", threads)
end
function init(args)
  math.randomseed(seed * 7919)
end
function request()
  local i = math.random(0, {last})
  local name = \"bench-acme\"
  if i > 0 then name = \"s\" .. i .. \"-acme\" end
  return wrk.format(\"GET\", \"{JWKS}\", {{[\"Host\"] = name .. \".localhost:{port}\"}})
end
",
        last = issuers - 1,
    )
}

/// The servers of one W: the registry over HTTP and over HTTPS, and nginx.
struct Servers {
    plain: Registry,
    tls: Registry,
    nginx: Nginx,
}

impl Servers {
    fn start(
        binary: &Path,
        dir: &Path,
        scene: &Scene,
        workers: usize,
        placement: &Placement,
    ) -> Result<Servers> {
        let placed = Placed { workers, placement };
        let (plain, tls) = registries(
            binary,
            dir,
            &scene.database_url,
            scene.port,
            &scene.tls,
            &placed,
        )?;
        let (cert, key) = (&scene.tls.0, &scene.tls.1);
        let nginx = Nginx::start_hosts(
            &dir.join(format!("nginx-verifiers-{workers}")),
            &scene.jwks,
            &scene.hosts,
            placement.servers.as_deref(),
            workers,
            (cert, key),
        )?;
        Ok(Servers { plain, tls, nginx })
    }

    /// One GET of every issuer's key set from each server, each answer checked: after it,
    /// every issuer has been served once (the warm `wide`).
    fn sweep(&self, scene: &Scene) -> Result<()> {
        let started = Instant::now();
        let (registry, nginx) = (self.plain.http(), Http::local(self.nginx.port));
        for (i, host) in scene.hosts.iter().enumerate() {
            let sub = subdomain(i);
            let ours = registry.hosted(&sub, JWKS)?;
            ours.expect(200, &format!("{sub}'s key set"))?;
            let theirs = nginx.send("GET", JWKS, None, None, Some(host))?;
            theirs.expect(200, &format!("nginx's {host}"))?;
            if ours.body.as_bytes() != scene.jwks || theirs.body.as_bytes() != scene.jwks {
                bail!("{sub}: the servers answer other bytes than the key set published");
            }
        }
        println!(
            "  swept {} issuers in {:.1} s",
            scene.hosts.len(),
            started.elapsed().as_secs_f64()
        );
        Ok(())
    }
}

/// Each round: both servers restarted, the cold scenario, a sweep, the warm one, fresh TLS.
fn measure(
    binary: &Path,
    dir: &Path,
    scene: &Scene,
    plan: &Plan,
    workers: usize,
    placement: &Placement,
) -> Result<Vec<Round>> {
    let load = |url: String, headers: Vec<(String, String)>, script: Option<PathBuf>| Load {
        url,
        headers,
        script,
        connections: CONNECTIONS,
        seconds: plan.seconds,
        cpus: placement.wrk.clone(),
        threads: placement.wrk_threads.min(WRK_THREADS) as u32,
    };
    let run = |load: &Load, pid: u32, what: &str| {
        Measured::run(load, pid, &format!("{what} with {workers} worker(s)"))
    };
    let mut rounds = Vec::new();
    for round in 0..plan.rounds {
        // The cold scenario has no warm-up to sample (it would warm the issuers): the first
        // round's own runs are recorded, at a cost of about one sample a millisecond.
        let profiled = |load: &Load, pid: u32, what: &str| match &plan.perf {
            Some(dir) if round == 0 => {
                let file = dir.join(format!("{}-W{workers}.data", what.replace(", ", "-")));
                while_recorded(pid, load.seconds, &file, || run(load, pid, what))
            }
            _ => run(load, pid, what),
        };
        let servers = Servers::start(binary, dir, scene, workers, placement)?;
        let (plain, tls, nginx) = (&servers.plain, &servers.tls, &servers.nginx);
        let wide = |port: u16| {
            let url = format!("http://127.0.0.1:{port}{JWKS}");
            load(url, Vec::new(), Some(scene.script.clone()))
        };
        let host = format!("{}:{}", scene.hosts[0], scene.port);
        let fresh = |port: u16| {
            let headers = vec![
                ("Host".to_owned(), host.clone()),
                ("Connection".to_owned(), "close".to_owned()),
            ];
            load(format!("https://127.0.0.1:{port}{JWKS}"), headers, None)
        };
        let cold = (
            profiled(&wide(plain.port), plain.pid(), "wide, cold")?,
            run(&wide(nginx.port), nginx.pid(), "wide, cold nginx")?,
        );
        servers.sweep(scene)?;
        let warm = (
            profiled(&wide(plain.port), plain.pid(), "wide")?,
            run(&wide(nginx.port), nginx.pid(), "wide nginx")?,
        );
        let fresh = (
            run(&fresh(tls.port), tls.pid(), "fresh")?,
            run(&fresh(nginx.tls_port), nginx.pid(), "fresh nginx")?,
        );
        let measured: Round = [cold, warm, fresh];
        let rates: Vec<String> = (SCENARIOS.iter().zip(&measured))
            .map(|(name, (ours, theirs))| format!("{name} {:.0} / {:.0}", ours.rate, theirs.rate))
            .collect();
        println!(
            "  round {}: {} req/s (registry / nginx)",
            round + 1,
            rates.join(", ")
        );
        rounds.push(measured);
        truncate(&plain.log);
        truncate(&tls.log);
        truncate(&nginx.log);
    }
    Ok(rounds)
}

/// The goals of issue 55 for W workers, from the median ratios: (what, ratio, at least).
fn goals(workers: usize, ratio: impl Fn(usize) -> f64) -> Vec<(String, f64, f64)> {
    let mut goals = vec![(format!("wide, cold / nginx at W={workers}"), ratio(0), 1.0)];
    if workers == 1 || workers == 8 {
        goals.push((format!("wide / nginx at W={workers}"), ratio(1), 1.5));
        goals.push((format!("fresh / nginx at W={workers}"), ratio(2), 1.5));
    }
    goals
}

type Row = (usize, Option<(Placement, Vec<Round>)>);

fn render(plan: &Plan, cores: usize, rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{TITLE}\n");
    let _ = writeln!(
        out,
        "Machine: {}. {} issuers of {} customer(s); {} round(s) of {} s per scenario and side, each round on \
         servers started anew (the cold scenario first, then a sweep over every issuer, the \
         warm one, fresh TLS); wrk with {CONNECTIONS} connections and up to {WRK_THREADS} \
         threads on the cores the servers do not have. Cells: the median of the rounds, \
         requests a second; the ratio is the median of each round's ratio; CPU: the server's \
         user + system time per request (µs).\n",
        machine(),
        plan.issuers,
        plan.customers,
        plan.rounds,
        plan.seconds,
    );
    let _ = writeln!(
        out,
        "| W | scenario | registry | nginx | registry / nginx | CPU µs registry | CPU µs nginx |"
    );
    let _ = writeln!(out, "|---:|---|---:|---:|---:|---:|---:|");
    let (mut goal_lines, mut limits) = (Vec::new(), Vec::new());
    for (workers, measured) in rows {
        let Some((_, rounds)) = measured else {
            let _ = writeln!(
                out,
                "| {workers} | not measured: {cores} core(s) leave wrk none of its own | | | | | |"
            );
            continue;
        };
        let ratio = |i: usize| median(rounds.iter().map(|r| r[i].0.rate / r[i].1.rate));
        for (i, name) in SCENARIOS.iter().enumerate() {
            let of =
                |f: &dyn Fn(&(Measured, Measured)) -> f64| median(rounds.iter().map(|r| f(&r[i])));
            let _ = writeln!(
                out,
                "| {workers} | {name} | {:.0} | {:.0} | {:.2} | {:.1} | {:.1} |",
                of(&|m| m.0.rate),
                of(&|m| m.1.rate),
                ratio(i),
                of(&|m| m.0.cpu.total()),
                of(&|m| m.1.cpu.total()),
            );
            let busy = of(&|m| m.0.busy(*workers));
            let cpu = of(&|m| m.1.cpu.total() / m.0.cpu.total());
            limits.extend(unsaturated(name, *workers, busy, cpu));
        }
        goal_lines.extend(goals(*workers, ratio));
    }
    out.push_str("\nGoals (median of the rounds):\n\n");
    write_goals(&mut out, goal_lines);
    if !limits.is_empty() {
        out.push_str("\nWhere the registry was not the limit:\n\n");
        out.push_str(&limits.concat());
    }
    out
}

/// A note when the registry kept less than 90 % of its W CPUs busy in `scenario` (`busy`): its
/// rate, and the ratio, are then the load generator's limit; `cpu` (nginx's CPU time a request
/// over the registry's) says what each side's request cost instead.
fn unsaturated(scenario: &str, workers: usize, busy: f64, cpu: f64) -> Option<String> {
    (busy < 0.9).then(|| {
        format!(
            "- {scenario} at W={workers}: the registry kept {:.0} % of its CPU busy, so the rate is \
             wrk's limit; CPU a request, nginx / registry: {cpu:.2}\n",
            busy * 100.0
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_the_registry_did_not_saturate_is_named_with_its_cpu_ratio() {
        assert_eq!(unsaturated("wide", 1, 0.95, 1.4), None);
        assert_eq!(
            unsaturated("fresh", 8, 0.541, 1.553).as_deref(),
            Some(
                "- fresh at W=8: the registry kept 54 % of its CPU busy, so the rate is wrk's \
                 limit; CPU a request, nginx / registry: 1.55\n"
            )
        );
    }

    #[test]
    fn the_script_picks_every_issuer_by_its_host() {
        let script = random_issuers(100_000, 8080);
        assert!(script.contains("math.random(0, 99999)"));
        assert!(script.contains("\"s\" .. i .. \"-acme\""));
        assert!(script.contains(".localhost:8080"));
        assert_eq!(
            subdomain(0),
            "bench-acme",
            "the name of issuer 0 in the script"
        );
    }

    #[test]
    fn the_issuers_are_spread_over_the_customers_on_sqlite() {
        use crate::cmd::output;
        use std::process::Command;
        let dir = std::env::temp_dir().join(format!("spread-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("spread.db");
        let url = format!("sqlite://{}", file.display());
        let schema = "CREATE TABLE customers (id TEXT PRIMARY KEY, name TEXT, tenant TEXT UNIQUE, \
                      plan TEXT, created_at BIGINT);
                      CREATE TABLE services (id TEXT PRIMARY KEY, customer_id TEXT);
                      INSERT INTO customers VALUES ('acme-id', 'Acme', 'acme', 'business', 7);
                      WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 8)
                      INSERT INTO services SELECT 's' || i, 'acme-id' FROM n;";
        execute(Backend::Sqlite, &url, schema).unwrap();
        execute(Backend::Sqlite, &url, &spread(4)).unwrap();
        let count = |sql: &str| {
            let script = "import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute(sys.argv[2]).fetchone()[0])";
            let out = output(
                Command::new("python3")
                    .args(["-c", script])
                    .arg(&file)
                    .arg(sql),
            );
            out.unwrap().trim().to_owned()
        };
        let customers = count("SELECT count(*) FROM customers WHERE plan = 'business'");
        let owners = count("SELECT count(DISTINCT customer_id) FROM services");
        let uneven = count(
            "SELECT max(n) - min(n) FROM (SELECT count(*) AS n FROM services GROUP BY customer_id)",
        );
        let orphans = count(
            "SELECT count(*) FROM services WHERE customer_id NOT IN (SELECT id FROM customers)",
        );
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(customers, "4");
        assert_eq!(owners, "4");
        assert_eq!(uneven, "0", "two services each");
        assert_eq!(orphans, "0", "every service's customer exists");
    }
}
