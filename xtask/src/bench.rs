//! `cargo xtask bench`: the registry's HTTP figures, measured against nginx serving the same
//! bytes, written to `docs/benchmarks.md`.
//!
//! Release binaries on loopback. On a machine with two cores or more, every server runs on CPU 1
//! and wrk on CPU 0, so that load generator and server never share a core. Runs alternate
//! (registry, nginx, …, registry, nginx, …) and the table shows medians, so that a burst of
//! noise from other work on the machine hits both sides alike.
//!
//! * P1: public `GET /.well-known/openid-configuration` by `Host`, against nginx; one worker each.
//! * P2: `GET /services/{s}/config` with a static token. P3: the same with an RS256 identity
//!   token whose issuer is a service hosted by the same registry (`http://idp-acme.localhost:PORT`).
//! * P4: `PUT /services/{s}/config` on SQLite.
//! * P5: start-up to `/readyz`, resident memory idle and after `--services` published services.
//! * P6: two replicas on one throwaway PostgreSQL cluster: how long a PUT on one takes to be
//!   served by the other, and how many requests the other accepts after a DELETE of the
//!   caller's account returned (static token and identity token).

#[path = "bench_client.rs"]
pub mod client;
#[path = "bench_report.rs"]
mod report;
#[path = "bench_servers.rs"]
pub mod servers;
#[path = "bench_wrk.rs"]
pub mod wrk;

use crate::cmd::{cargo, output, root, run, succeeds};
use crate::postgres::Cluster;
use anyhow::{bail, Context, Result};
use client::{create_customer, oidc_policy, upload, Api, Signer};
use report::{median, Figures, Report, RoundSamples};
use reqwest::Method;
use servers::{get, truncate, Nginx, Registry, RegistryOptions};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use wrk::Load;

const USAGE: &str = "usage: cargo xtask bench [--rounds N] [--seconds S] [--services N] \
[--no-postgres] [--no-write] [--binary PATH]";

/// Options of a run.
#[derive(Debug, Clone)]
struct Options {
    rounds: usize,
    seconds: u32,
    services: usize,
    postgres: bool,
    write: bool,
    /// A registry binary to measure instead of building this tree's (before/after comparisons).
    binary: Option<PathBuf>,
}

fn options(args: &[String]) -> Result<Options> {
    let mut options = Options {
        rounds: 5,
        seconds: 10,
        services: 10_000,
        postgres: true,
        write: true,
        binary: None,
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let mut number = |name: &str| -> Result<usize> {
            args.next()
                .and_then(|v| v.parse().ok())
                .with_context(|| format!("{name} needs a number\n{USAGE}"))
        };
        match arg.as_str() {
            "--rounds" => options.rounds = number("--rounds")?.max(1),
            "--seconds" => options.seconds = u32::try_from(number("--seconds")?.max(1))?,
            "--services" => options.services = number("--services")?,
            "--no-postgres" => options.postgres = false,
            "--no-write" => options.write = false,
            "--binary" => {
                let path = args
                    .next()
                    .with_context(|| format!("--binary needs a path\n{USAGE}"))?;
                options.binary = Some(PathBuf::from(path));
            }
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    Ok(options)
}

/// Fails with the apt command that installs `tool` when it is not on the PATH.
pub fn require(tool: &str, package: &str) -> Result<()> {
    if !succeeds(
        Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {tool}")),
    ) {
        bail!("`{tool}` is not installed: apt-get update && apt-get install -y {package}");
    }
    Ok(())
}

/// CPUs for the servers and for wrk, when there are two to keep apart.
fn cpus() -> (Option<usize>, Option<usize>) {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let taskset = succeeds(Command::new("taskset").arg("-V"));
    if cores >= 2 && taskset {
        (Some(1), Some(0))
    } else {
        (None, None)
    }
}

/// Builds the optimised `registry` binary (what is measured) and returns its path.
pub fn release_binary() -> Result<PathBuf> {
    println!("\n=== release build ===\n");
    run(cargo().args([
        "build",
        "--release",
        "-p",
        "registry-server",
        "--bin",
        "registry",
    ]))?;
    Ok(std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root().join("target"), PathBuf::from)
        .join("release/registry"))
}

pub fn run_bench(args: &[String]) -> Result<()> {
    let options = options(args)?;
    require("wrk", "wrk")?;
    require("nginx", "nginx-light")?;
    let binary = match &options.binary {
        Some(binary) => binary.clone(),
        None => release_binary()?,
    };
    let dir = std::env::temp_dir().join(format!("registry-bench-{}", std::process::id()));
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    let mut report = Report::new(options.seconds, load_average());
    let result = measure(&options, &binary, &dir, &mut report);
    let _ = std::fs::remove_dir_all(&dir);
    result?;
    report.load_after = load_average();
    let table = report.render();
    println!("\n{table}");
    if options.write {
        let path = root().join("docs/benchmarks.md");
        report::write_section(&path, &table)?;
        println!("written to {}", path.display());
    }
    Ok(())
}

/// The load averages of /proc/loadavg (1, 5, 15 minutes).
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn measure(options: &Options, binary: &Path, dir: &Path, report: &mut Report) -> Result<()> {
    let (server_cpu, wrk_cpu) = cpus();
    report.pinning = match server_cpu {
        Some(cpu) => format!("servers on CPU {cpu}, wrk on CPU {}", wrk_cpu.unwrap_or(0)),
        None => "no pinning (one core, or no taskset)".into(),
    };
    println!("\n=== P1–P4: one registry worker on SQLite, nginx with one worker ===\n");
    http_rounds(options, binary, dir, (server_cpu, wrk_cpu), report)?;
    println!("\n=== P5: start-up and memory ===\n");
    startup_and_memory(options, binary, dir, &mut report.figures)?;
    if options.postgres {
        println!("\n=== P6: two replicas on PostgreSQL ===\n");
        replicas(binary, dir, &mut report.figures)?;
    }
    Ok(())
}

/// P1–P4: sets the scene through the API, then runs the rounds.
fn http_rounds(
    options: &Options,
    binary: &Path,
    dir: &Path,
    (server_cpu, wrk_cpu): (Option<usize>, Option<usize>),
    report: &mut Report,
) -> Result<()> {
    let database_url = format!("sqlite://{}", dir.join("registry.db").display());
    let token = create_customer(binary, &database_url, "acme")?;
    let registry = Registry::start(&RegistryOptions {
        binary,
        database_url: &database_url,
        log: dir.join("registry.log"),
        workers: Some(1),
        cpu: server_cpu,
    })?;
    let api = Api::new(registry.base(), token.clone())?;

    // The document P1 serves, and P2's service.
    let site_key = Signer::generate("site-1")?;
    let api_service = api.create_service("api")?;
    api.publish(&api_service, &upload(site_key.jwks()))?;
    // P4 writes to a service of its own.
    let writes_service = api.create_service("writes")?;
    let write_body = upload(site_key.jwks()).to_string();
    api.publish(&writes_service, &serde_json::from_str(&write_body)?)?;
    // P3's issuer: a service hosted by this registry, trusted by an oidc account.
    let idp_key = Signer::generate("idp-1")?;
    let idp = api.create_service("idp")?;
    api.publish(&idp, &upload(idp_key.jwks()))?;
    let issuer = format!("http://{}", registry.issuer_host(&idp));
    api.create_account("ci", oidc_policy(&issuer, &[&api_service]))?;
    let jwt = idp_key.mint(&issuer)?;
    let federated = Api::new(registry.base(), jwt.clone())?;
    let (status, _) = federated.call(
        Method::GET,
        &format!("/services/{api_service}/config"),
        None,
    )?;
    if status != 200 {
        bail!(
            "the identity token was refused ({status}); log:\n{}",
            tail(&registry.log)
        );
    }

    let host = registry.issuer_host(&api_service);
    let (status, document) = get(registry.port, &host, "/.well-known/openid-configuration")
        .context("fetching the hosted discovery document")?;
    if status != 200 {
        bail!("the hosted discovery document answered {status}");
    }
    let nginx = Nginx::start(&dir.join("nginx"), document.as_bytes(), server_cpu)?;

    let script = dir.join("put-config.lua");
    std::fs::write(&script, wrk::script("PUT", &token, &write_body))?;
    let load =
        |url: String, headers: Vec<(String, String)>, script: Option<PathBuf>, connections| Load {
            url,
            headers,
            script,
            connections,
            seconds: options.seconds,
            cpu: wrk_cpu,
        };
    let discovery = "/.well-known/openid-configuration";
    let loads = RoundLoads {
        p1_registry: load(
            format!("{}{discovery}", registry.base()),
            vec![("Host".into(), host.clone())],
            None,
            32,
        ),
        p1_nginx: load(
            format!("http://127.0.0.1:{}{discovery}", nginx.port),
            vec![("Host".into(), host.clone())],
            None,
            32,
        ),
        p2: load(
            format!("{}/services/{api_service}/config", registry.base()),
            vec![("Authorization".into(), format!("Bearer {token}"))],
            None,
            32,
        ),
        p3: load(
            format!("{}/services/{api_service}/config", registry.base()),
            vec![("Authorization".into(), format!("Bearer {jwt}"))],
            None,
            32,
        ),
        p4: load(
            format!("{}/services/{writes_service}/config", registry.base()),
            Vec::new(),
            Some(script),
            8,
        ),
    };
    report.commands = loads.describe();
    report.nginx_config = nginx.config.clone();
    report.registry_env = Registry::environment(registry.port, "sqlite://DIR/registry.db", Some(1))
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();

    // Warm-up: connections, caches, the CPU's frequency.
    let warm = |l: &Load| {
        Load {
            seconds: 2,
            ..l.clone()
        }
        .run()
    };
    for l in [&loads.p1_registry, &loads.p1_nginx, &loads.p2, &loads.p3] {
        warm(l)?;
    }
    for round in 0..options.rounds {
        println!("round {}/{}", round + 1, options.rounds);
        let samples = RoundSamples {
            p1_registry: loads.p1_registry.run()?,
            p1_nginx: loads.p1_nginx.run()?,
            p2: loads.p2.run()?,
            p3: loads.p3.run()?,
            p4: loads.p4.run()?,
        };
        println!("  {samples}");
        report.rounds.push(samples);
        truncate(&registry.log);
        truncate(&nginx.log);
    }
    Ok(())
}

/// The loads of one round, in the order they run.
struct RoundLoads {
    p1_registry: Load,
    p1_nginx: Load,
    p2: Load,
    p3: Load,
    p4: Load,
}

impl RoundLoads {
    fn describe(&self) -> Vec<(String, String)> {
        [
            ("P1 registry", &self.p1_registry),
            ("P1 nginx", &self.p1_nginx),
            ("P2", &self.p2),
            ("P3", &self.p3),
            ("P4", &self.p4),
        ]
        .into_iter()
        .map(|(name, load)| (name.to_owned(), load.describe()))
        .collect()
    }
}

fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// P5: start-up on a new database and on an existing one, memory idle and after `services`
/// published services, and start-up with those loaded.
fn startup_and_memory(
    options: &Options,
    binary: &Path,
    dir: &Path,
    figures: &mut Figures,
) -> Result<()> {
    const STARTS: usize = 5;
    let start = |name: &str, database_url: &str| {
        Registry::start(&RegistryOptions {
            binary,
            database_url,
            log: dir.join(format!("{name}.log")),
            workers: None,
            cpu: None,
        })
    };
    let mut fresh = Vec::new();
    for i in 0..STARTS {
        let url = format!("sqlite://{}", dir.join(format!("fresh-{i}.db")).display());
        fresh.push(start("fresh", &url)?.ready_after);
    }
    figures.ready_fresh_ms = median(fresh.iter().map(|d| d.as_secs_f64() * 1000.0));

    let url = format!("sqlite://{}", dir.join("memory.db").display());
    let token = create_customer(binary, &url, "acme")?;
    let mut existing = Vec::new();
    for _ in 0..STARTS {
        existing.push(start("existing", &url)?.ready_after);
    }
    figures.ready_existing_ms = median(existing.iter().map(|d| d.as_secs_f64() * 1000.0));

    let registry = start("memory", &url)?;
    std::thread::sleep(Duration::from_secs(1));
    figures.rss_idle_kib = registry.rss_kib()?;
    let api = Api::new(registry.base(), token)?;
    let key = Signer::generate("load-1")?;
    let document = upload(key.jwks());
    let started = Instant::now();
    populate(&api, &document, options.services)?;
    figures.populate_secs = started.elapsed().as_secs_f64();
    figures.services = options.services;
    std::thread::sleep(Duration::from_secs(1));
    figures.rss_loaded_kib = registry.rss_kib()?;
    drop(registry);
    let mut loaded = Vec::new();
    for _ in 0..STARTS {
        loaded.push(start("loaded", &url)?.ready_after);
    }
    figures.ready_loaded_ms = median(loaded.iter().map(|d| d.as_secs_f64() * 1000.0));
    println!("{figures:?}");
    Ok(())
}

/// Creates and publishes `count` services with a few parallel clients.
fn populate(api: &Api, document: &serde_json::Value, count: usize) -> Result<()> {
    const CLIENTS: usize = 4;
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..CLIENTS)
            .map(|client| {
                scope.spawn(move || -> Result<()> {
                    for i in (client..count).step_by(CLIENTS) {
                        let subdomain = api.create_service(&format!("s{i}"))?;
                        api.publish(&subdomain, document)?;
                    }
                    Ok(())
                })
            })
            .collect();
        workers
            .into_iter()
            .try_for_each(|w| w.join().map_err(|_| anyhow::anyhow!("a client panicked"))?)
    })
}

/// P6 on a throwaway PostgreSQL cluster.
fn replicas(binary: &Path, dir: &Path, figures: &mut Figures) -> Result<()> {
    let cluster = Cluster::start()?;
    let url = cluster.admin_url();
    let token = create_customer(binary, &url, "acme")?;
    let start = |name: &str| {
        Registry::start(&RegistryOptions {
            binary,
            database_url: &url,
            log: dir.join(format!("{name}.log")),
            workers: None,
            cpu: None,
        })
    };
    let a = start("replica-a")?;
    let b = start("replica-b")?;
    let on_a = Api::new(a.base(), token)?;
    let service = on_a.create_service("api")?;
    let key = Signer::generate("p6-0")?;
    on_a.publish(&service, &upload(key.jwks()))?;

    // Propagation: a new kid published on A, polled for on B.
    const TRIALS: usize = 10;
    let mut delays = Vec::new();
    for trial in 1..=TRIALS {
        let kid = format!("p6-{trial}");
        let key = Signer::generate(&kid)?;
        on_a.publish(&service, &upload(key.jwks()))?;
        let published = Instant::now();
        loop {
            if let Some((200, body)) = get(b.port, &b.issuer_host(&service), "/openid/v1/jwks") {
                if body.contains(&format!("\"{kid}\"")) {
                    delays.push(published.elapsed().as_secs_f64() * 1000.0);
                    break;
                }
            }
            if published.elapsed() > Duration::from_secs(30) {
                bail!("{kid} did not reach the other replica within 30 s");
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    figures.propagation_median_ms = median(delays.iter().copied());
    figures.propagation_max_ms = delays.iter().copied().fold(0.0, f64::max);

    // Revocation with a static token.
    let (id, static_token) = on_a.create_account(
        "revocable",
        serde_json::json!({"kind": "static", "services": ["*"]}),
    )?;
    let static_token = static_token.context("a static account without a token")?;
    figures.revocation_static = revocation(&on_a, &b, &service, &id, &static_token)?;

    // Revocation with an identity token (issuer hosted on A, verified by B through A).
    let idp_key = Signer::generate("idp-1")?;
    let idp = on_a.create_service("idp")?;
    on_a.publish(&idp, &upload(idp_key.jwks()))?;
    let issuer = format!("http://{}", a.issuer_host(&idp));
    let (id, _) = on_a.create_account("federated", oidc_policy(&issuer, &[&service]))?;
    let jwt = idp_key.mint(&issuer)?;
    figures.revocation_federated = revocation(&on_a, &b, &service, &id, &jwt)?;
    println!("{figures:?}");
    drop((a, b));
    drop(cluster);
    Ok(())
}

/// Requests made to replica `b` with `bearer` while account `id` is deleted through `a`: how many
/// were sent after the DELETE returned, and how many of those were accepted (must be 0).
fn revocation(
    a: &Api,
    b: &Registry,
    service: &str,
    id: &str,
    bearer: &str,
) -> Result<report::Revocation> {
    let on_b = Api::new(b.base(), bearer.to_owned())?;
    let path = format!("/services/{service}/config");
    let (status, _) = on_b.call(Method::GET, &path, None)?;
    if status != 200 {
        bail!(
            "the bearer was refused on the other replica before the DELETE ({status}); log:\n{}",
            tail(&b.log)
        );
    }
    // Each client stops after this many requests sent once the DELETE has returned: enough to
    // see every refusal, few enough to stay under the limit of failed authentications per
    // address (1000 a minute), which would turn the next scenario's requests into 429s.
    const AFTER: u64 = 100;
    let deleted: Arc<OnceLock<Instant>> = Arc::new(OnceLock::new());
    let hammers: Vec<_> = (0..2)
        .map(|_| {
            let (on_b, path, deleted) = (on_b.clone(), path.clone(), deleted.clone());
            std::thread::spawn(move || {
                let mut result = report::Revocation::default();
                while result.after < AFTER {
                    let sent = Instant::now();
                    let after = deleted.get().is_some_and(|at| sent >= *at);
                    let Ok((status, _)) = on_b.call(Method::GET, &path, None) else {
                        continue;
                    };
                    if !after {
                        result.before += 1;
                    } else {
                        result.after += 1;
                        if status == 200 {
                            result.accepted_after += 1;
                        }
                    }
                }
                result
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    a.delete_account(id)?;
    let _ = deleted.set(Instant::now());
    let mut result = report::Revocation::default();
    for hammer in hammers {
        let counted = hammer
            .join()
            .map_err(|_| anyhow::anyhow!("a client panicked"))?;
        result.before += counted.before;
        result.after += counted.after;
        result.accepted_after += counted.accepted_after;
    }
    Ok(result)
}

/// The machine, for the report.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(String::new(), |kib| format!(", {} GiB", kib / 1024 / 1024));
    let kernel = output(Command::new("uname").arg("-r")).unwrap_or_default();
    let rustc = output(Command::new("rustc").arg("--version")).unwrap_or_default();
    let nginx = Command::new("nginx")
        .arg("-v")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stderr)
                .trim()
                .replace("nginx version: ", "")
        })
        .unwrap_or_default();
    let wrk = Command::new("wrk")
        .arg("-v")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .take(2)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    format!(
        "{cores} cores ({cpu}){memory}; Linux {}; {}; {nginx}; {wrk}",
        kernel.trim(),
        rustc.trim()
    )
}
