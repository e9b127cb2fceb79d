//! `cargo xtask bench`: the registry's HTTP figures, measured against nginx serving the same
//! bytes, written to `docs/benchmarks.md`.
//!
//! Release binaries on loopback. On a machine with two cores or more, every server runs on CPU 1
//! and wrk on CPU 0, so that load generator and server never share a core. Runs alternate
//! (registry, nginx, …, registry, nginx, …) and the table shows medians, so that a burst of
//! noise from other work on the machine hits both sides alike.
//!
//! * P1: public `GET /.well-known/openid-configuration` by `Host`, against nginx; one worker each.
//!   P1-TLS: the same over HTTPS (keep-alive; one certificate made here for both, TLS 1.3).
//! * P2: `GET /services/{s}/config` with a static token. P3: the same with an RS256 identity
//!   token whose issuer is a service hosted by the same registry (`http://idp-acme.localhost:PORT`).
//! * P4: `PUT /services/{s}/config` on SQLite.
//! * P5: start-up to `/readyz`, resident memory idle and after 10,000 published services.
//! * `--workers 1,2,4,8` alone: P1, JWKS, P1-TLS against nginx, P2 and P3, and signing
//!   (`POST /services/{s}/sign`, static token, ES256 and RS256), with each number of workers,
//!   the servers and wrk on disjoint cores (`bench/scaling.rs`).
//! * `--verifiers [--issuers N] [--workers …]` alone: what verifiers do, against nginx: a random
//!   one of N issuers' key sets, warm and right after a start, and one key set over a new TLS
//!   connection per GET (`bench/verifiers.rs`).
//! * `--services N` alone: a replica over N published services on SQLite and PostgreSQL
//!   (`bench/scale.rs`).
//! * P6: two replicas on one throwaway PostgreSQL cluster: how long a PUT on one takes to be
//!   served by the other, and how many requests the other accepts after a DELETE of the
//!   caller's account returned (static token and identity token).
//!
//! `cargo xtask bench-kit` packs `--workers` for a machine without Rust, wrk or nginx
//! (`bench/kit.rs`).

mod cpu;
pub mod kit;
mod nginx;
mod report;
mod scale;
mod scaling;
mod verifiers;
pub mod wrk;

use crate::api::{hosted_issuer, oidc_policy, upload, Api, Signer};
use crate::cmd::{root, succeeds};
use crate::postgres::Cluster;
use crate::registry::{self, create_customer, truncate, Registry, WorkDir};
use anyhow::{bail, Context, Result};
use nginx::Nginx;
use registry_testkit::tls::TestCa;
use report::{median, Figures, Report, RoundSamples};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use wrk::Load;

#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// Rounds of P1–P4 (the table shows medians).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    rounds: u64,
    /// Seconds of each wrk run.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    seconds: u32,
    /// Run the scale benchmark alone: N published services (copied in the database), on
    /// SQLite and PostgreSQL, instead of P1–P6.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    services: Option<u64>,
    /// Run the scaling benchmark alone: P1, JWKS and P1-TLS against nginx, P2 and P3, with each
    /// of these numbers of workers (e.g. `--workers 1,2,4,8`), servers and wrk on disjoint cores;
    /// requests a second, and the servers' CPU time per request.
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u64).range(1..=256))]
    workers: Vec<u64>,
    /// Run the verifiers' benchmark alone: `--issuers` issuers' key sets by random `Host`, warm
    /// and right after a start, and one key set over a new TLS connection per GET, each against
    /// nginx, with each of `--workers` (default 1) on disjoint cores.
    #[arg(long)]
    verifiers: bool,
    /// With `--verifiers`: how many issuers (services copied in the database, nginx's
    /// directories).
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    issuers: u64,
    /// With `--verifiers`: how many customers the issuers belong to, spread evenly (the first
    /// publishes through the API; the others are rows added to the database).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    customers: u64,
    /// With `--workers`: measure a number of workers even when wrk cannot have a core of its
    /// own (the figure is marked as measured on shared cores).
    #[arg(long)]
    share_cores: bool,
    /// With `--workers`: record where the registry spends its time during each of its
    /// scenarios' warm-up runs (`perf record`, 999 samples a second, no call graphs) into
    /// `DIR/<scenario>-W<workers>.data`; the measured rounds run without it. With
    /// `--verifiers`: the registry's cold and warm runs of the first round, into
    /// `DIR/wide-cold-W<workers>.data` and `DIR/wide-W<workers>.data` (those runs count in the
    /// medians: the profiler takes about one sample a millisecond of the registry's CPU).
    #[arg(long, value_name = "DIR")]
    perf: Option<PathBuf>,
    /// Skip P6 (two replicas on PostgreSQL).
    #[arg(long)]
    no_postgres: bool,
    /// Print the table only; leave docs/benchmarks.md as it is.
    #[arg(long)]
    no_write: bool,
    /// A registry binary to measure instead of building this tree's (before/after comparisons).
    #[arg(long)]
    binary: Option<PathBuf>,
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
fn cpus() -> (Option<String>, Option<String>) {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let taskset = succeeds(Command::new("taskset").arg("-V"));
    if cores >= 2 && taskset {
        (Some("1".into()), Some("0".into()))
    } else {
        (None, None)
    }
}

pub fn run(options: &Options) -> Result<()> {
    require("wrk", "wrk")?;
    require("nginx", "nginx-light")?;
    let binary = match &options.binary {
        Some(binary) => binary.clone(),
        None => {
            println!("\n=== release build ===\n");
            registry::build(true)?
        }
    };
    let dir = std::env::temp_dir().join(format!("registry-bench-{}", std::process::id()));
    let work = WorkDir::at(dir)?;
    if let Some(perf) = &options.perf {
        require("perf", "linux-perf")?;
        std::fs::create_dir_all(perf)
            .with_context(|| format!("creating the profiles' folder {}", perf.display()))?;
    }
    if options.verifiers {
        let plan = verifiers::Plan {
            workers: match options.workers.is_empty() {
                true => vec![1],
                false => options.workers.iter().map(|&w| w as usize).collect(),
            },
            issuers: options.issuers as usize,
            customers: options.customers as usize,
            rounds: options.rounds,
            seconds: options.seconds,
            perf: options.perf.clone(),
        };
        let section = verifiers::run(&binary, &work.0, &plan)?;
        return publish(options, verifiers::TITLE, &section);
    }
    if !options.workers.is_empty() {
        let plan = scaling::Plan {
            workers: options.workers.iter().map(|&w| w as usize).collect(),
            rounds: options.rounds,
            seconds: options.seconds,
            share_cores: options.share_cores,
            perf: options.perf.clone(),
        };
        let section = scaling::run(&binary, &work.0, &plan)?;
        return publish(options, scaling::TITLE, &section);
    }
    if let Some(services) = options.services {
        let section = scale::run(&binary, &work.0, services as usize, options.no_postgres)?;
        return publish(options, scale::TITLE, &section);
    }
    let mut report = Report::new(options.seconds, load_average());
    measure(options, &binary, &work.0, &mut report)?;
    drop(work);
    report.load_after = load_average();
    let table = report.render();
    println!("\n{table}");
    if !options.no_write {
        let path = root().join("docs/benchmarks.md");
        report::write_section(&path, &table)?;
        println!("written to {}", path.display());
    }
    Ok(())
}

/// Prints a section and, unless `--no-write`, puts it under `title` in docs/benchmarks.md.
fn publish(options: &Options, title: &str, section: &str) -> Result<()> {
    println!("\n{section}");
    if !options.no_write {
        let path = root().join("docs/benchmarks.md");
        report::write_titled_section(&path, title, section)?;
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
    report.pinning = match &server_cpu {
        Some(cpu) => format!(
            "servers on CPU {cpu}, wrk on CPU {}",
            wrk_cpu.as_deref().unwrap_or("0")
        ),
        None => "no pinning (one core, or no taskset)".into(),
    };
    println!("\n=== P1–P4: one registry worker on SQLite, nginx with one worker ===\n");
    http_rounds(options, binary, dir, (server_cpu, wrk_cpu), report)?;
    println!("\n=== P5: start-up and memory ===\n");
    startup_and_memory(binary, dir, &mut report.figures)?;
    if !options.no_postgres {
        println!("\n=== P6: two replicas on PostgreSQL ===\n");
        replicas(binary, dir, &mut report.figures)?;
    }
    Ok(())
}

/// The data key of the benchmarks' managed keys (docs/api.md, "Managed signing").
const DATA_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// A server whose identity tokens may come from an `http` issuer it hosts itself, on loopback,
/// with the server's default workers; it holds managed keys, and its signatures per minute are
/// not what is measured (no limit in reach).
fn federated_server(binary: &Path, database_url: &str, log: &Path) -> registry::Options {
    registry::Options::new(binary, database_url, log)
        .workers(None)
        .env("REGISTRY_OIDC_ALLOW_INSECURE_ISSUERS", "true")
        .env("REGISTRY_DATA_KEY", DATA_KEY)
        .env("REGISTRY_SIGN_PER_MINUTE", "4000000000")
}

/// P1–P4: sets the scene through the API, then runs the rounds.
fn http_rounds(
    options: &Options,
    binary: &Path,
    dir: &Path,
    (server_cpu, wrk_cpu): (Option<String>, Option<String>),
    report: &mut Report,
) -> Result<()> {
    let database_url = format!("sqlite://{}", dir.join("registry.db").display());
    let token = create_customer(binary, &database_url, "acme")?;
    let registry = Registry::start(&registry::Options {
        cpus: server_cpu.clone(),
        ..federated_server(binary, &database_url, &dir.join("registry.log")).workers(Some(1))
    })?;
    let http = registry.http();
    let api = Api::new(http, &token);

    // The document P1 serves, and P2's service.
    let site_key = Signer::generate("site-1")?;
    let api_service = api.create_service("api")?;
    api.publish(&api_service, &upload(site_key.jwks()))?;
    // P4 writes to a service of its own.
    let writes_service = api.create_service("writes")?;
    let write_body = upload(site_key.jwks());
    api.publish(&writes_service, &write_body)?;
    // P3's issuer: a service hosted by this registry, trusted by an oidc account.
    let (issuer, idp_key) = hosted_issuer(&api)?;
    api.create_account("ci", oidc_policy(&issuer, &[&api_service]))?;
    let jwt = idp_key.mint(&issuer)?;
    let path = format!("/services/{api_service}/config");
    Api::new(http, &jwt)
        .expect("GET", &path, None, 200)
        .context("the identity token was refused")?;

    let discovery = "/.well-known/openid-configuration";
    let document = http.hosted(&api_service, discovery)?;
    if document.status != 200 {
        bail!("the hosted discovery document answered {}", document.status);
    }
    // P1-TLS: a second registry, over HTTPS on the same database and URLs, and nginx's HTTPS
    // listener, with one certificate.
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    let pair = TestCa::new("bench CA").server_certificate(&["localhost", "*.localhost"]);
    pair.write(&cert, &key)?;
    let tls_registry = Registry::start(
        &registry::Options {
            cpus: server_cpu.clone(),
            ..federated_server(binary, &database_url, &dir.join("registry-tls.log"))
                .workers(Some(1))
        }
        .env("REGISTRY_TLS_CERT", &cert.display().to_string())
        .env("REGISTRY_TLS_KEY", &key.display().to_string())
        .env("REGISTRY_BASE_URL", &registry.base())
        .env("REGISTRY_ISSUER_URL_TEMPLATE", &registry.issuer_template()),
    )?;
    let nginx = Nginx::start(
        &dir.join("nginx"),
        (document.body.as_bytes(), None),
        server_cpu.as_deref(),
        1,
        (&cert, &key),
    )?;

    let script = dir.join("put-config.lua");
    std::fs::write(&script, wrk::script("PUT", &token, &write_body.to_string()))?;
    let load = |url: String, headers: Vec<(String, String)>, script, connections| Load {
        url,
        headers,
        script,
        connections,
        seconds: options.seconds,
        cpus: wrk_cpu.clone(),
        threads: 1,
    };
    let base = registry.base();
    let (on_registry, on_nginx) = (
        format!("{base}{discovery}"),
        format!("http://127.0.0.1:{}{discovery}", nginx.port),
    );
    let (on_tls_registry, on_tls_nginx) = (
        format!("https://127.0.0.1:{}{discovery}", tls_registry.port),
        format!("https://127.0.0.1:{}{discovery}", nginx.tls_port),
    );
    let config = format!("{base}/services/{api_service}/config");
    let writes = format!("{base}/services/{writes_service}/config");
    let host = || vec![("Host".to_owned(), http.issuer_host(&api_service))];
    let bearer = |token: &str| vec![("Authorization".to_owned(), format!("Bearer {token}"))];
    // The loads of a round, in the order they run.
    let loads = [
        ("P1 registry", load(on_registry, host(), None, 32)),
        ("P1 nginx", load(on_nginx, host(), None, 32)),
        ("P1-TLS registry", load(on_tls_registry, host(), None, 32)),
        ("P1-TLS nginx", load(on_tls_nginx, host(), None, 32)),
        ("P2", load(config.clone(), bearer(&token), None, 32)),
        ("P3", load(config, bearer(&jwt), None, 32)),
        ("P4", load(writes, Vec::new(), Some(script), 8)),
    ];
    report.commands = (loads.iter())
        .map(|(name, load)| (name.to_string(), load.describe()))
        .collect();
    report.nginx_config = nginx.config.clone();
    report.registry_env = (registry.environment.iter())
        .map(|(k, v)| match k.as_str() {
            "REGISTRY_DATABASE_URL" => format!("{k}=sqlite://DIR/registry.db"),
            _ => format!("{k}={v}"),
        })
        .collect();

    // Warm-up of P1–P3: connections, caches, the CPU's frequency.
    for (_, load) in &loads[..6] {
        Load {
            seconds: 2,
            ..load.clone()
        }
        .run()?;
    }
    let run = |i: usize| loads[i].1.run();
    for round in 0..options.rounds {
        println!("round {}/{}", round + 1, options.rounds);
        let samples = RoundSamples {
            p1_registry: run(0)?,
            p1_nginx: run(1)?,
            p1_tls_registry: run(2)?,
            p1_tls_nginx: run(3)?,
            p2: run(4)?,
            p3: run(5)?,
            p4: run(6)?,
        };
        println!("  {samples}");
        report.rounds.push(samples);
        truncate(&registry.log);
        truncate(&tls_registry.log);
        truncate(&nginx.log);
    }
    Ok(())
}

/// Services P5 publishes through the API for its memory figure (`--services` measures far more,
/// copied in the database).
const P5_SERVICES: usize = 10_000;

/// P5: start-up on a new database and on an existing one, memory idle and after `services`
/// published services, and start-up with those loaded.
fn startup_and_memory(binary: &Path, dir: &Path, figures: &mut Figures) -> Result<()> {
    const STARTS: usize = 5;
    let start = |name: &str, database_url: &str| {
        let log = dir.join(format!("{name}.log"));
        Registry::start(&federated_server(binary, database_url, &log))
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
    let api = Api::new(registry.http(), &token);
    let key = Signer::generate("load-1")?;
    let document = upload(key.jwks());
    let started = Instant::now();
    populate(&api, &document, P5_SERVICES)?;
    figures.populate_secs = started.elapsed().as_secs_f64();
    figures.services = P5_SERVICES;
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
        let log = dir.join(format!("{name}.log"));
        Registry::start(&federated_server(binary, &url, &log))
    };
    let a = start("replica-a")?;
    let b = start("replica-b")?;
    let on_a = Api::new(a.http(), &token);
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
            if let Ok(hosted) = b.http().hosted(&service, "/openid/v1/jwks") {
                if hosted.status == 200 && hosted.body.contains(&format!("\"{kid}\"")) {
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
    let (issuer, idp_key) = hosted_issuer(&on_a)?;
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
    let on_b = Api::new(b.http(), bearer);
    let path = format!("/services/{service}/config");
    on_b.expect("GET", &path, None, 200)
        .context("the bearer was refused on the other replica before the DELETE")?;
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
                    let Ok(answer) = on_b.call("GET", &path, None) else {
                        continue;
                    };
                    if !after {
                        result.before += 1;
                    } else {
                        result.after += 1;
                        if answer.status == 200 {
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
    // What a tool prints of itself, on stdout or on stderr (nginx).
    let version = |program: &str, flag: &str| {
        let out = Command::new(program).arg(flag).output();
        let text = out.map_or(Vec::new(), |out| [out.stdout, out.stderr].concat());
        String::from_utf8_lossy(&text).trim().to_owned()
    };
    let (kernel, rustc) = (version("uname", "-r"), version("rustc", "--version"));
    let nginx = version("nginx", "-v").replace("nginx version: ", "");
    let wrk = version("wrk", "-v");
    let wrk = wrk.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
    // A tool this machine lacks (rustc, where a bench kit runs) is left out.
    let tools = [format!("Linux {kernel}"), rustc, nginx, wrk]
        .into_iter()
        .filter(|part| !part.is_empty() && part != "Linux ")
        .collect::<Vec<_>>()
        .join("; ");
    format!("{cores} cores ({cpu}){memory}; {tools}")
}
