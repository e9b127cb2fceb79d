//! `cargo xtask soak [--minutes M] [--postgres] [--binary PATH]`: minutes of mixed load on the
//! release binary, then proof that nothing was lost and that memory stayed flat.
//!
//! While three wrk processes read without pause (public documents by `Host`, API reads with a
//! static token, API reads with an RS256 identity token), five writers churn resources of their
//! own (two on registered services, one on static accounts and their tokens, one on short-lived
//! anonymous services, one federated caller), reading every write back from the API and from the
//! hosted documents. Every request must get the answer it expects (no 5xx, no stale read); the
//! server's log must hold no `ERROR`; resident memory after the warm-up (the first fifth) must
//! grow less than 10 %. Then the ledger of acknowledged writes is checked against the server and
//! its audit trail (every acknowledged change has its event, no event lacks its change), and again
//! after a restart on the same database. The report goes to `target/soak-report-{backend}.md`.

mod load;
mod writers;

use crate::api::{hosted_issuer, oidc_policy, upload, Api, Signer};
use crate::bench::{load_average, machine, require};
use crate::cmd::root;
use crate::ledger::{locked, Ledger, Verified, TENANT};
use crate::registry::{self, create_customer, Registry, WorkDir};
use anyhow::{bail, Context, Result};
use load::{Outcome, Request};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use writers::Scene;

/// Services whose documents the public load reads.
const PUBLISHED: usize = 8;
/// Slots of each service writer (so that the data stays bounded).
const SLOTS: usize = 16;
/// Anonymous services live 36 s: dozens expire during a run.
const ANONYMOUS_TTL_HOURS: f64 = 0.01;
const SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// The most resident memory may grow after the warm-up.
const GROWTH_LIMIT: f64 = 0.10;

#[derive(Debug, clap::Args)]
pub struct Options {
    /// How long the load runs (the federated callers' identity token lives an hour).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=50))]
    minutes: u32,
    /// On a throwaway PostgreSQL cluster instead of SQLite.
    #[arg(long)]
    postgres: bool,
    /// A registry binary to run instead of this tree's release build.
    #[arg(long)]
    binary: Option<PathBuf>,
}

pub fn run(options: &Options) -> Result<()> {
    require("wrk", "wrk")?;
    let binary = match &options.binary {
        Some(binary) => binary.clone(),
        None => registry::build(true)?,
    };
    let work = WorkDir::in_target("soak")?;
    let cluster = if options.postgres {
        Some(crate::postgres::Cluster::start()?)
    } else {
        None
    };
    let (backend, url) = match &cluster {
        Some(cluster) => ("PostgreSQL", cluster.admin_url()),
        None => (
            "SQLite",
            format!("sqlite://{}", work.0.join("registry.db").display()),
        ),
    };
    let report =
        soak(options, &binary, &url, &work.0).with_context(|| format!("soak on {backend}"))?;
    let text = report.render(backend, options);
    println!("\n{text}");
    let path = root().join(format!(
        "target/soak-report-{}.md",
        backend.to_ascii_lowercase()
    ));
    std::fs::write(&path, &text)?;
    println!("written to {}", path.display());
    report.verdict()
}

/// Everything the run measured.
struct Report {
    /// How long the load ran.
    minutes: u32,
    loads: Vec<(&'static str, u32, Outcome)>,
    ledger: Ledger,
    /// Seconds since the load started, and resident KiB.
    memory: Vec<(u64, u64)>,
    rss_after_setup: u64,
    log_errors: Vec<String>,
    log_warnings: u64,
    verified: Verified,
    verified_after_restart: Verified,
    /// The server's remembered verifications at the end of the load: secrets, identity tokens.
    remembered: (String, String),
    load_before: String,
    load_after: String,
}

fn soak(options: &Options, binary: &Path, url: &str, dir: &Path) -> Result<Report> {
    let token = create_customer(binary, url, TENANT)?;
    let log = dir.join("registry.log");
    let options_of_registry = registry::Options {
        // The same port after the restart: the issuer URLs of published documents name it.
        port: Some(registry_testkit::free_port()?),
        ..registry::Options::new(binary, url, &log)
    }
    // The anonymous writer creates about ten a second from one address.
    .env("REGISTRY_ANON_CREATE_PER_HOUR", "1000000")
    // The federated callers' issuer is a service of this registry, on loopback.
    .env("REGISTRY_OIDC_ALLOW_INSECURE_ISSUERS", "true");
    let mut registry = Registry::start(&options_of_registry)?;
    let (scene, ledger, loads) = set_scene(&registry, token, dir, options.minutes * 60)?;
    let rss_after_setup = registry.rss_kib()?;
    let load_before = load_average();

    let (stop, ledger) = (AtomicBool::new(false), Mutex::new(ledger));
    let mut memory = Vec::new();
    let mut log_errors = Vec::new();
    let mut log_warnings = 0;
    let loads = std::thread::scope(|scope| -> Result<Vec<_>> {
        let readers: Vec<_> = (loads.into_iter())
            .map(|(name, connections, load)| {
                scope.spawn(move || load::run(&load).map(|o| (name, connections, o)))
            })
            .collect();
        let (scene, stop, ledger) = (&scene, &stop, &ledger);
        for id in 0..2 {
            scope.spawn(move || writers::services(scene, id, SLOTS, stop, ledger));
        }
        scope.spawn(|| writers::accounts(scene, stop, ledger));
        scope.spawn(|| writers::anonymous(scene, ANONYMOUS_TTL_HOURS, stop, ledger));
        scope.spawn(|| writers::federated(scene, stop, ledger));

        // Whatever happens, the writers stop, or the scope would wait for them forever.
        let mut watch = || -> Result<()> {
            let started = Instant::now();
            let duration = Duration::from_secs(u64::from(options.minutes) * 60);
            while started.elapsed() < duration {
                std::thread::sleep(SAMPLE_EVERY.min(duration.saturating_sub(started.elapsed())));
                let (seconds, kib) = (started.elapsed().as_secs(), registry.rss_kib()?);
                memory.push((seconds, kib));
                scan_log(&log, &mut log_errors, &mut log_warnings);
                if memory.len() % (60 / SAMPLE_EVERY.as_secs() as usize) == 0 {
                    let l = locked(ledger);
                    println!(
                        "{seconds:>4} s: RSS {:.1} MiB, {} writes acknowledged, {} reads \
                         checked, {} problems",
                        kib as f64 / 1024.0,
                        l.acknowledged.values().sum::<u64>(),
                        l.reads_checked,
                        l.problem_count
                    );
                }
            }
            Ok(())
        };
        let watched = watch();
        stop.store(true, Ordering::SeqCst);
        watched?;
        (readers.into_iter())
            .map(|reader| reader.join().expect("a wrk reader panicked"))
            .collect()
    })?;
    let load_after = load_average();
    scan_log(&log, &mut log_errors, &mut log_warnings);
    let remembered = remembered(&registry);

    let ledger = ledger.into_inner().unwrap_or_else(|e| e.into_inner());
    let verified = ledger
        .verify(registry.http(), &scene.token)
        .context("after the load")?;
    registry.terminate()?;
    let registry = Registry::start(&options_of_registry)?;
    let verified_after_restart = ledger
        .verify(registry.http(), &scene.token)
        .context("after a restart")?;
    scan_log(&log, &mut log_errors, &mut log_warnings);
    Ok(Report {
        minutes: options.minutes,
        loads,
        ledger,
        memory,
        rss_after_setup,
        log_errors,
        log_warnings,
        verified,
        verified_after_restart,
        remembered,
        load_before,
        load_after,
    })
}

/// A wrk load: its name, connections and the load itself.
type NamedLoad = (&'static str, u32, crate::bench::wrk::Load);

/// The services, accounts and tokens of the run, the ledger that follows what the writers do
/// from then on, and the read loads.
fn set_scene(
    registry: &Registry,
    token: String,
    dir: &Path,
    seconds: u32,
) -> Result<(Scene, Ledger, Vec<NamedLoad>)> {
    let http = registry.http();
    let api = Api::new(http, &token);
    let site_key = Signer::generate("site-1")?;
    let mut published = Vec::new();
    for i in 0..PUBLISHED {
        let subdomain = api.create_service(&format!("pub{i}"))?;
        api.publish(&subdomain, &upload(site_key.jwks()))?;
        published.push(subdomain);
    }
    let shared = published[0].clone();
    let federated_service = api.create_service("fed")?;
    let (issuer, idp_key) = hosted_issuer(&api)?;
    api.create_account("ci", oidc_policy(&issuer, &[&shared, &federated_service]))?;
    let jwt = idp_key.mint(&issuer)?;
    let reader_policy = serde_json::json!({"kind": "static", "services": [shared]});
    let (_, reader) = api.create_account("reader", reader_policy)?;
    let reader = reader.context("a static account without a token")?;

    let mut ledger = Ledger::new(http, &token)?;
    ledger.follow(&federated_service, "fed");
    let base = registry.base();
    let host = |s: &str| ("Host".to_owned(), http.issuer_host(s));
    let bearer = |t: &str| ("Authorization".to_owned(), format!("Bearer {t}"));
    let get = |path: String, headers: Vec<(String, String)>| Request { path, headers };
    let public: Vec<Request> = published
        .iter()
        .flat_map(|s| {
            [
                get("/.well-known/openid-configuration".into(), vec![host(s)]),
                get("/openid/v1/jwks".into(), vec![host(s)]),
            ]
        })
        .collect();
    let static_reads = vec![
        get(format!("/services/{shared}/config"), vec![bearer(&token)]),
        get(format!("/services/{shared}"), vec![bearer(&token)]),
        get("/services".into(), vec![bearer(&token)]),
        get("/service-accounts".into(), vec![bearer(&token)]),
        get(format!("/services/{shared}/config"), vec![bearer(&reader)]),
        get("/services".into(), vec![bearer(&reader)]),
    ];
    let federated_reads = vec![
        get(format!("/services/{shared}/config"), vec![bearer(&jwt)]),
        get(format!("/services/{federated_service}"), vec![bearer(&jwt)]),
        get("/services".into(), vec![bearer(&jwt)]),
    ];
    let load = |title, name, requests: &[Request], connections| {
        let load = load::load(dir, name, &base, requests, connections, seconds)?;
        anyhow::Ok((title, connections, load))
    };
    let loads = vec![
        load("public documents (by Host)", "public", &public, 8)?,
        load("API reads, static tokens", "static", &static_reads, 4)?,
        load(
            "API reads, identity token (RS256)",
            "federated",
            &federated_reads,
            4,
        )?,
    ];
    let scene = Scene {
        http,
        token,
        issuer,
        signer: Arc::new(idp_key),
        federated_service,
        shared_service: shared,
    };
    Ok((scene, ledger, loads))
}

/// The gauges of remembered verifications (secrets, identity tokens) from `/metrics`.
fn remembered(registry: &Registry) -> (String, String) {
    let metrics = registry.http().call("GET", "/metrics", None, None);
    let text = metrics.map(|r| r.body).unwrap_or_default();
    let gauge = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ').map(str::to_owned))
            .unwrap_or_else(|| "?".into())
    };
    (
        gauge("registry_remembered_secrets"),
        gauge("registry_remembered_identity_tokens"),
    )
}

/// Counts the log's ERROR and WARN lines (keeping the first errors), then empties it: a run
/// writes gigabytes of request lines otherwise.
fn scan_log(log: &Path, errors: &mut Vec<String>, warnings: &mut u64) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    for line in text.lines() {
        if line.contains(" ERROR ") || line.contains("panicked") {
            if errors.len() < 20 {
                errors.push(line.chars().take(300).collect());
            } else {
                errors.push(String::new());
            }
        } else if line.contains(" WARN ") {
            *warnings += 1;
        }
    }
    registry::truncate(log);
}

fn median(values: &mut [u64]) -> u64 {
    values.sort_unstable();
    values.get(values.len() / 2).copied().unwrap_or_default()
}

impl Report {
    /// Resident memory: the median of the minute after the warm-up, of the last minute, and
    /// the growth between them.
    fn memory_figures(&self) -> (u64, u64, u64, f64) {
        let total = u64::from(self.minutes) * 60;
        let warm = total / 5;
        let window = |from: u64, to: u64| {
            let mut v: Vec<u64> = self
                .memory
                .iter()
                .filter(|(s, _)| *s >= from && *s <= to)
                .map(|(_, k)| *k)
                .collect();
            median(&mut v)
        };
        let baseline = window(warm, warm + 60);
        let last = window(total.saturating_sub(60), total);
        let max = self
            .memory
            .iter()
            .map(|(_, k)| *k)
            .max()
            .unwrap_or_default();
        let growth = if baseline == 0 {
            f64::INFINITY
        } else {
            (last as f64 - baseline as f64) / baseline as f64
        };
        (baseline, last, max, growth)
    }

    fn server_errors(&self) -> u64 {
        self.loads.iter().map(|(_, _, o)| o.classes[3]).sum()
    }

    fn verdict(&self) -> Result<()> {
        let mut failures = Vec::new();
        for (name, _, outcome) in &self.loads {
            let [ok, _, _, _] = outcome.classes;
            if ok != outcome.requests || outcome.sample.failures > 0 {
                failures.push(format!(
                    "{name}: {} of {} requests were not 2xx (by class {:?}), {} failures",
                    outcome.requests - ok,
                    outcome.requests,
                    outcome.classes,
                    outcome.sample.failures
                ));
            }
        }
        if self.ledger.problem_count > 0 {
            failures.push(format!(
                "{} writer problems, first: {:#?}",
                self.ledger.problem_count,
                &self.ledger.problems[..self.ledger.problems.len().min(10)]
            ));
        }
        if !self.log_errors.is_empty() {
            failures.push(format!(
                "{} ERROR lines in the server log, first: {:#?}",
                self.log_errors.len(),
                &self.log_errors[..self.log_errors.len().min(5)]
            ));
        }
        let (_, _, _, growth) = self.memory_figures();
        if growth >= GROWTH_LIMIT {
            failures.push(format!(
                "resident memory grew {:.1} % after the warm-up",
                growth * 100.0
            ));
        }
        if failures.is_empty() {
            Ok(())
        } else {
            bail!("the soak failed:\n- {}", failures.join("\n- "))
        }
    }

    fn render(&self, backend: &str, options: &Options) -> String {
        let mib = |kib: u64| kib as f64 / 1024.0;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "### Soak on {backend}: {} minutes\n\n`cargo xtask soak --minutes {}{}` on {}; load average {} before, {} after.\n",
            options.minutes,
            options.minutes,
            if options.postgres { " --postgres" } else { "" },
            machine(),
            self.load_before,
            self.load_after
        );
        let _ = writeln!(out, "| load | connections | requests | per second | p99 | 2xx | 4xx | 5xx |\n|---|---:|---:|---:|---:|---:|---:|---:|");
        for (name, connections, o) in &self.loads {
            let _ = writeln!(
                out,
                "| {name} | {connections} | {} | {:.0} | {:.2} ms | {} | {} | {} |",
                o.requests,
                o.sample.requests_per_sec,
                o.sample.p99_ms,
                o.classes[0],
                o.classes[2],
                o.classes[3]
            );
        }
        let _ = writeln!(out, "\n| writes acknowledged | count |\n|---|---:|");
        for (kind, count) in &self.ledger.acknowledged {
            let _ = writeln!(out, "| {kind} | {count} |");
        }
        // The figures, named as the list below (Markdown as it is written) uses them.
        let (baseline, last, max, growth) = self.memory_figures();
        let [setup, baseline, last, max] = [self.rss_after_setup, baseline, last, max].map(mib);
        let growth = growth * 100.0;
        let (reads, problems) = (self.ledger.reads_checked, self.ledger.problem_count);
        let (server_errors, errors) = (self.server_errors(), self.log_errors.len());
        let (warnings, (secrets, tokens)) = (self.log_warnings, &self.remembered);
        let (verified, after_restart) = (&self.verified, &self.verified_after_restart);
        let per_minute: Vec<String> = (self.memory.iter())
            .skip(60 / SAMPLE_EVERY.as_secs() as usize - 1)
            .step_by(60 / SAMPLE_EVERY.as_secs() as usize)
            .map(|(s, k)| format!("{}′ {:.1}", (s + 30) / 60, mib(*k)))
            .collect();
        let per_minute = per_minute.join(", ");
        let _ = write!(
            out,
            "
- Reads of one's own writes checked while the load ran (API and hosted documents): {reads}; problems (unexpected status, no answer, stale read): {problems}.
- Server errors (5xx) across all loads: {server_errors}; server log: {errors} ERROR lines, {warnings} WARN lines.
- Resident memory: {setup:.1} MiB after setup; median {baseline:.1} MiB in the minute after the warm-up, {last:.1} MiB in the last minute ({growth:+.1} %); peak {max:.1} MiB.
- RSS by minute (MiB): {per_minute}.
- Verifications remembered at the end of the load: {secrets} secrets, {tokens} identity tokens.
- Checked after the load: {verified}.
- Checked again after a restart on the same database: {after_restart}.
"
        );
        out
    }
}
