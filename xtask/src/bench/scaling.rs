//! `cargo xtask bench --workers 1,2,4,8`: how the registry's figures grow with its workers, side
//! by side with nginx given as many workers, in one run.
//!
//! For W workers the servers (the registry over HTTP, the registry over HTTPS, nginx) are pinned
//! to CPUs 0..W−1 and wrk to the others, with up to 8 threads and 256 connections. A W that
//! leaves wrk no core of its own is not measured: the table says so, unless `--share-cores`
//! asks for a figure anyway (marked as such; server and wrk then share every core).
//!
//! The scenarios: P1 (discovery document by `Host`), JWKS (the key set), P1-TLS, each against
//! nginx serving the same bytes; P2 (`GET /services/{s}/config` with a static token) and P3
//! (the same with an identity token of an issuer the registry hosts), as ratios to P1; S-ES256 and
//! S-RS256 (`POST /services/{s}/sign` with a static token: a signature by a managed key, docs/api.md,
//! "Managed signing"), as ratios to P2. A second
//! table gives what each request cost the server on the CPU (`bench/cpu.rs`), user and system
//! time: steadier than the rates on a small or busy machine, and, growing with W, the mark of
//! workers that wait for one another.

use super::cpu::{self, CpuTime};
use super::nginx::Nginx;
use super::report::median;
use super::wrk::Load;
use super::{federated_server, machine};
use crate::api::{hosted_issuer, oidc_policy, upload, Api, Signer};
use crate::registry::{self, create_customer, truncate, Registry};
use anyhow::{bail, Context, Result};
use registry_testkit::free_port;
use registry_testkit::tls::TestCa;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The section of docs/benchmarks.md this writes.
pub const TITLE: &str = "## Every core counts (`cargo xtask bench --workers 1,2,4,8`)";

/// What to measure.
#[derive(Debug, Clone)]
pub struct Plan {
    pub workers: Vec<usize>,
    pub rounds: u64,
    pub seconds: u32,
    /// Measure a W even when wrk cannot have a core of its own.
    pub share_cores: bool,
    /// Where to put a `perf record` of each of the registry's warm-up runs, if anywhere.
    pub perf: Option<PathBuf>,
}

/// wrk's threads at most, and its connections (as in issue 39's measurement).
const WRK_THREADS: usize = 8;
const CONNECTIONS: u32 = 256;

/// The scenarios of one W, in the order they run.
const SCENARIOS: [&str; 10] = [
    "P1",
    "P1 nginx",
    "JWKS",
    "JWKS nginx",
    "P1-TLS",
    "P1-TLS nginx",
    "P2",
    "P3",
    "S-ES256",
    "S-RS256",
];

/// One scenario in one round: requests a second, and the server's CPU time per request
/// (microseconds).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Measured {
    pub(super) rate: f64,
    pub(super) cpu: CpuTime,
}

impl Measured {
    /// Runs `load` against the server whose process is `pid`: its rate, and the CPU time the
    /// server and its children spent per request. Any failed request fails the scenario `what`.
    pub(super) fn run(load: &Load, pid: u32, what: &str) -> Result<Measured> {
        let before = cpu::of_tree(pid)?;
        let sample = load.run()?;
        let after = cpu::of_tree(pid)?;
        if sample.failures > 0 {
            bail!("{what}: {} failed requests", sample.failures);
        }
        Ok(Measured {
            rate: sample.requests_per_sec,
            cpu: after.per_request_since(before, sample.requests),
        })
    }

    /// The share of `cpus` CPUs the server kept busy: its CPU time over the run's wall time. Well
    /// below 1, the rate measured the load generator's limit, not the server's.
    pub(super) fn busy(&self, cpus: usize) -> f64 {
        self.rate * self.cpu.total() / 1e6 / cpus.max(1) as f64
    }
}

/// The goals' lines: each with its median ratio, its bar, and whether it is met.
pub(super) fn write_goals(out: &mut String, goals: Vec<(String, f64, f64)>) {
    if goals.is_empty() {
        out.push_str("- none measured\n");
    }
    for (what, value, least) in goals {
        let verdict = if value >= least { "met" } else { "not met" };
        let _ = writeln!(out, "- {what}: {value:.3} (at least {least}): {verdict}");
    }
}

/// Every scenario of one round, in the order of [`SCENARIOS`].
type Round = [Measured; SCENARIOS.len()];

/// Where the servers and wrk run for W workers on a machine with `cores` cores: `None` when wrk
/// would have no core of its own (and sharing was not asked for).
pub(super) fn placement(workers: usize, cores: usize, share: bool) -> Option<Placement> {
    if workers < cores {
        let wrk_cores = cores - workers;
        return Some(Placement {
            servers: Some(format!("0-{}", workers - 1)),
            wrk: Some(format!("{workers}-{}", cores - 1)),
            wrk_threads: wrk_cores.min(WRK_THREADS),
        });
    }
    share.then(|| Placement {
        servers: None,
        wrk: None,
        wrk_threads: cores.min(WRK_THREADS),
    })
}

/// CPUs (`taskset` lists) of the servers and of wrk; `None`: unpinned, sharing every core.
#[derive(Debug, Clone)]
pub(super) struct Placement {
    pub(super) servers: Option<String>,
    pub(super) wrk: Option<String>,
    pub(super) wrk_threads: usize,
}

/// What the scenarios need: the registry's data on SQLite, and what to ask it.
struct Scene {
    database_url: String,
    /// The HTTP registry's port, the same at every W: the issuer URLs name it.
    port: u16,
    token: String,
    jwt: String,
    service: String,
    discovery: Vec<u8>,
    jwks: Vec<u8>,
    tls: (PathBuf, PathBuf),
    /// wrk's scripts of `POST /services/{s}/sign` (ES256, RS256), with the signer's token.
    signing: [(String, PathBuf); 2],
}

/// Runs the plan; answers the section for docs/benchmarks.md.
pub fn run(binary: &Path, dir: &Path, plan: &Plan) -> Result<String> {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let scene = scene(binary, dir)?;
    let mut rows = Vec::new();
    for &workers in &plan.workers {
        let Some(placement) = placement(workers, cores, plan.share_cores) else {
            println!("W={workers}: too few cores");
            rows.push((workers, None));
            continue;
        };
        println!("\n=== {workers} worker(s): servers on {placement:?} ===\n");
        let rounds = measure(binary, dir, &scene, plan, workers, &placement)?;
        rows.push((workers, Some((placement, rounds))));
    }
    Ok(render(plan, cores, &rows))
}

/// Sets the scene through the API of a registry on the port every W will use.
fn scene(binary: &Path, dir: &Path) -> Result<Scene> {
    let database_url = format!("sqlite://{}", dir.join("scaling.db").display());
    let token = create_customer(binary, &database_url, "acme")?;
    let port = free_port()?;
    let setup = Registry::start(&registry::Options {
        port: Some(port),
        ..federated_server(binary, &database_url, &dir.join("setup.log"))
    })?;
    let http = setup.http();
    let api = Api::new(http, &token);
    let key = Signer::generate("site-1")?;
    let service = api.create_service("api")?;
    api.publish(&service, &upload(key.jwks()))?;
    let (issuer, idp_key) = hosted_issuer(&api)?;
    api.create_account("ci", oidc_policy(&issuer, &[&service]))?;
    let jwt = idp_key.mint(&issuer)?;
    Api::new(http, &jwt)
        .expect("GET", &format!("/services/{service}/config"), None, 200)
        .context("the identity token was refused")?;
    let document = |path: &str| -> Result<Vec<u8>> {
        let answer = http.hosted(&service, path)?;
        if answer.status != 200 {
            bail!("{path} answered {}", answer.status);
        }
        Ok(answer.body.into_bytes())
    };
    let (discovery, jwks) = (
        document("/.well-known/openid-configuration")?,
        document("/openid/v1/jwks")?,
    );
    let tls = (dir.join("tls.crt"), dir.join("tls.key"));
    let pair = TestCa::new("bench CA").server_certificate(&["localhost", "*.localhost"]);
    pair.write(&tls.0, &tls.1)?;
    let signing = [
        signing_scene(&api, dir, "ES256", port)?,
        signing_scene(&api, dir, "RS256", port)?,
    ];
    Ok(Scene {
        database_url,
        port,
        token,
        jwt,
        service,
        discovery,
        jwks,
        tls,
        signing,
    })
}

/// A service signing with a managed key of `algorithm` (safe at once: a lead of 0, no verifier),
/// an account allowed `tokens:sign` on it, and wrk's script of one signature of a day-long token
/// (the longest its `maxTokenSeconds` allows): the service's sign URL and the script.
fn signing_scene(api: &Api, dir: &Path, algorithm: &str, port: u16) -> Result<(String, PathBuf)> {
    use base64::Engine;
    let service = api.create_service(&format!("sign-{}", algorithm.to_lowercase()))?;
    let settings = serde_json::json!({"algorithm": algorithm, "leadSeconds": 0});
    let state = api.expect(
        "PUT",
        &format!("/services/{service}/signing"),
        Some(&settings),
        200,
    )?;
    if state["keys"][0]["state"] != "current" {
        bail!("the first managed key of {service} does not sign at once: {state}");
    }
    let policy = serde_json::json!({
        "$schema": "https://registry.example/schemas/service-account-policy/v2.json",
        "kind": "static", "services": [service], "actions": ["tokens:sign"]});
    let (_, token) = api.create_account(&format!("signer-{service}"), policy)?;
    let token = token.context("a static account has a token")?;
    let iat = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    let claims = serde_json::json!({
        "iss": format!("http://{service}.localhost:{port}"),
        "sub": "system:serviceaccount:default:default", "aud": ["sts.amazonaws.com"],
        "iat": iat, "nbf": iat, "exp": iat + 86_400});
    let claims = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(claims.to_string());
    let body = serde_json::json!({"claims": claims}).to_string();
    let script = dir.join(format!("sign-{algorithm}.lua"));
    std::fs::write(&script, super::wrk::script("POST", &token, &body))?;
    Ok((format!("/services/{service}/sign"), script))
}

/// W workers on the servers' CPUs.
pub(super) struct Placed<'a> {
    pub(super) workers: usize,
    pub(super) placement: &'a Placement,
}

/// The registry over HTTP on `port` (the issuer URLs of the published documents name it), and
/// over HTTPS with the certificate `tls` (chain, key) serving the same issuers, both on the
/// servers' CPUs with W workers, their logs in `dir`.
pub(super) fn registries(
    binary: &Path,
    dir: &Path,
    database_url: &str,
    port: u16,
    (cert, key): &(PathBuf, PathBuf),
    placed: &Placed,
) -> Result<(Registry, Registry)> {
    let options = |name: &str| registry::Options {
        cpus: placed.placement.servers.clone(),
        ..federated_server(binary, database_url, &dir.join(format!("{name}.log")))
            .workers(Some(placed.workers))
    };
    let plain = Registry::start(&registry::Options {
        port: Some(port),
        ..options("registry")
    })?;
    let tls = Registry::start(
        &options("registry-tls")
            .env("REGISTRY_TLS_CERT", &cert.display().to_string())
            .env("REGISTRY_TLS_KEY", &key.display().to_string())
            .env("REGISTRY_BASE_URL", &plain.base())
            .env("REGISTRY_ISSUER_URL_TEMPLATE", &plain.issuer_template()),
    )?;
    Ok((plain, tls))
}

/// Each round's requests per second of every scenario ([`SCENARIOS`]) with W workers.
fn measure(
    binary: &Path,
    dir: &Path,
    scene: &Scene,
    plan: &Plan,
    workers: usize,
    placement: &Placement,
) -> Result<Vec<Round>> {
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
    let nginx = Nginx::start(
        &dir.join(format!("nginx-{workers}")),
        (&scene.discovery, Some(&scene.jwks)),
        placement.servers.as_deref(),
        workers,
        (cert, key),
    )?;
    let host = vec![("Host".to_owned(), plain.http().issuer_host(&scene.service))];
    let bearer = |token: &str| vec![("Authorization".to_owned(), format!("Bearer {token}"))];
    let load = |url: String, headers: Vec<(String, String)>| Load {
        url,
        headers,
        script: None::<PathBuf>,
        connections: CONNECTIONS,
        seconds: plan.seconds,
        cpus: placement.wrk.clone(),
        threads: placement.wrk_threads as u32,
    };
    let (discovery, jwks) = ("/.well-known/openid-configuration", "/openid/v1/jwks");
    let on = |port: u16, scheme: &str, path: &str| format!("{scheme}://127.0.0.1:{port}{path}");
    let config = format!("{}/services/{}/config", plain.base(), scene.service);
    // Each scenario's load, beside the process whose CPU time it costs.
    let (http, https, static_files) = (plain.pid(), tls.pid(), nginx.pid());
    let sign = |(path, script): &(String, PathBuf)| Load {
        script: Some(script.clone()),
        ..load(format!("{}{path}", plain.base()), Vec::new())
    };
    let loads: [(Load, u32); SCENARIOS.len()] = [
        (load(on(plain.port, "http", discovery), host.clone()), http),
        (
            load(on(nginx.port, "http", discovery), host.clone()),
            static_files,
        ),
        (load(on(plain.port, "http", jwks), host.clone()), http),
        (
            load(on(nginx.port, "http", jwks), host.clone()),
            static_files,
        ),
        (load(on(tls.port, "https", discovery), host.clone()), https),
        (
            load(on(nginx.tls_port, "https", discovery), host.clone()),
            static_files,
        ),
        (load(config.clone(), bearer(&scene.token)), http),
        (load(config, bearer(&scene.jwt)), http),
        (sign(&scene.signing[0]), http),
        (sign(&scene.signing[1]), http),
    ];
    for (i, (load, server)) in loads.iter().enumerate() {
        let warm_up = Load {
            seconds: 2,
            ..load.clone()
        };
        match &plan.perf {
            Some(dir) if *server != static_files => {
                let name = SCENARIOS[i].replace(' ', "-");
                let file = dir.join(format!("{name}-W{workers}.data"));
                while_recorded(*server, warm_up.seconds, &file, || warm_up.run())?;
            }
            _ => {
                warm_up.run()?;
            }
        }
    }
    let mut rounds = Vec::new();
    for round in 0..plan.rounds {
        let mut measured = [Measured::default(); SCENARIOS.len()];
        for (i, (load, server)) in loads.iter().enumerate() {
            let what = format!("{} with {workers} worker(s)", SCENARIOS[i]);
            measured[i] = Measured::run(load, *server, &what)?;
        }
        let rates = measured.map(|m| m.rate);
        let costs = measured.map(|m| m.cpu.total());
        println!(
            "  round {}: {rates:.0?} req/s, {costs:.2?} µs CPU per request",
            round + 1
        );
        rounds.push(measured);
        truncate(&plain.log);
        truncate(&tls.log);
        truncate(&nginx.log);
    }
    Ok(rounds)
}

/// Runs `work` (`seconds` long) while `perf record` samples the process `pid` and its threads
/// into `file`: a flat profile (no call graphs, which a release build without frame pointers
/// would garble) of where the workers spend their time. A machine that does not let perf
/// sample (a container without the capability, say) gets a warning, and the work goes on.
pub(super) fn while_recorded<T>(
    pid: u32,
    seconds: u32,
    file: &Path,
    work: impl FnOnce() -> Result<T>,
) -> Result<T> {
    let perf = perf_record(pid, seconds, file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting perf record")?;
    let done = work()?;
    let out = perf.wait_with_output().context("waiting for perf record")?;
    if !out.status.success() {
        println!(
            "  perf record gave no profile for {}: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(done)
}

/// `perf record` of the process `pid` and its threads for `seconds`, into `file`.
fn perf_record(pid: u32, seconds: u32, file: &Path) -> Command {
    let mut perf = Command::new("perf");
    perf.args([
        "record",
        "--quiet",
        "-F",
        "999",
        "-p",
        &pid.to_string(),
        "-o",
    ])
    .arg(file)
    .args(["--", "sleep", &seconds.to_string()]);
    perf
}

/// The goals for W workers (issue 55, which keeps issue 39's ratios to P1 at every W and makes
/// parity with nginx the bar for a hot document: a bare actix-web handler costs what nginx
/// does), from the median ratios: (what, ratio, at least).
fn goals(workers: usize, ratio: impl Fn(usize, usize) -> f64) -> Vec<(String, f64, f64)> {
    let mut goals = vec![
        (format!("P2 / P1 at W={workers}"), ratio(6, 0), 0.6),
        (format!("P3 / P1 at W={workers}"), ratio(7, 0), 0.5),
        // Issue 53: a signature costs no more than twice an authenticated read.
        (format!("S-ES256 / P2 at W={workers}"), ratio(8, 6), 0.5),
    ];
    for (name, of, nginx) in [("P1", 0, 1), ("JWKS", 2, 3), ("P1-TLS", 4, 5)] {
        goals.push((
            format!("{name} / nginx at W={workers}"),
            ratio(of, nginx),
            1.0,
        ));
    }
    goals
}

type Row = (usize, Option<(Placement, Vec<Round>)>);

fn render(plan: &Plan, cores: usize, rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{TITLE}\n");
    let _ = writeln!(
        out,
        "Machine: {}. {} round(s) of {} s per scenario, wrk with {CONNECTIONS} connections and \
         up to {WRK_THREADS} threads on the cores the servers do not have; each cell lists the \
         rounds' ratios.\n",
        machine(),
        plan.rounds,
        plan.seconds
    );
    out.push_str(
        "| W | servers / wrk CPUs | P1 / nginx | JWKS / nginx | P1-TLS / nginx-TLS | P2 / P1 | \
         P3 / P1 | S-ES256 / P2 | S-RS256 / P2 | P1 req/s | P2 req/s | P3 req/s | S-ES256 req/s | \
         S-RS256 req/s |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let mut checks = Vec::new();
    for (workers, measured) in rows {
        let Some((placement, rounds)) = measured else {
            let _ = writeln!(
                out,
                "| {workers} | not measured: {workers} worker(s) and wrk need {} cores, this \
                 machine has {cores} | | | | | | | | | | | | |",
                workers + 1
            );
            continue;
        };
        let ratios = |a: usize, b: usize| {
            (rounds.iter())
                .map(|r| format!("{:.2}", r[a].rate / r[b].rate))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let rate = |i: usize| median(rounds.iter().map(|r| r[i].rate));
        let cpus = match (&placement.servers, &placement.wrk) {
            (Some(servers), Some(wrk)) => format!("{servers} / {wrk}"),
            _ => "shared (too few cores)".into(),
        };
        let _ = writeln!(
            out,
            "| {workers} | {cpus} | {} | {} | {} | {} | {} | {} | {} | {:.0} | {:.0} | {:.0} | {:.0} \
             | {:.0} |",
            ratios(0, 1),
            ratios(2, 3),
            ratios(4, 5),
            ratios(6, 0),
            ratios(7, 0),
            ratios(8, 6),
            ratios(9, 6),
            rate(0),
            rate(6),
            rate(7),
            rate(8),
            rate(9),
        );
        let median_ratio =
            |a: usize, b: usize| median(rounds.iter().map(|r| r[a].rate / r[b].rate));
        checks.extend(goals(*workers, median_ratio));
    }
    cpu_table(&mut out, rows);
    out.push_str("\nGoals (median of the rounds):\n\n");
    write_goals(&mut out, checks);
    out
}

/// The servers' CPU time per request, medians of the rounds: `user + system` microseconds.
fn cpu_table(out: &mut String, rows: &[Row]) {
    out.push_str(
        "\nCPU time of the server per request, microseconds, user + system (median of the \
         rounds; nginx: its master and workers; the kernel's share includes the loopback \
         delivery to wrk):\n\n",
    );
    out.push_str("| W |");
    for scenario in SCENARIOS {
        let _ = write!(out, " {scenario} |");
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(SCENARIOS.len()));
    out.push('\n');
    for (workers, measured) in rows {
        let Some((_, rounds)) = measured else {
            continue;
        };
        let _ = write!(out, "| {workers} |");
        for i in 0..SCENARIOS.len() {
            let user = median(rounds.iter().map(|r| r[i].cpu.user));
            let system = median(rounds.iter().map(|r| r[i].cpu.system));
            let _ = write!(out, " {user:.2} + {system:.2} |");
        }
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrk_gets_the_cores_the_servers_do_not_have() {
        let p = placement(4, 16, false).unwrap();
        assert_eq!(p.servers.as_deref(), Some("0-3"));
        assert_eq!(p.wrk.as_deref(), Some("4-15"));
        assert_eq!(p.wrk_threads, 8);
        let p = placement(1, 2, false).unwrap();
        assert_eq!(
            (p.servers.as_deref(), p.wrk.as_deref()),
            (Some("0-0"), Some("1-1"))
        );
        assert_eq!(p.wrk_threads, 1);
        assert!(placement(2, 2, false).is_none(), "no core left for wrk");
        assert!(placement(2, 2, true).unwrap().servers.is_none());
    }

    #[test]
    fn perf_samples_the_registrys_threads_for_the_warm_up_into_its_file() {
        let perf = perf_record(4242, 2, Path::new("/tmp/prof/P2-W8.data"));
        let args: Vec<_> = perf.get_args().map(|a| a.to_string_lossy()).collect();
        assert_eq!(perf.get_program(), "perf");
        assert_eq!(
            args.join(" "),
            "record --quiet -F 999 -p 4242 -o /tmp/prof/P2-W8.data -- sleep 2"
        );
    }

    #[test]
    fn a_w_without_cores_says_so_and_goals_are_judged() {
        let plan = Plan {
            workers: vec![1, 8],
            rounds: 2,
            seconds: 1,
            share_cores: false,
            perf: None,
        };
        let p = placement(1, 2, false).unwrap();
        let round = [
            130.0, 100.0, 125.0, 100.0, 119.0, 100.0, 70.0, 60.0, 42.0, 7.0,
        ]
        .map(|rate| Measured {
            rate,
            cpu: CpuTime {
                user: 400.0 / rate,
                system: 5.0,
            },
        });
        let text = render(&plan, 2, &[(1, Some((p, vec![round, round]))), (8, None)]);
        assert!(
            text.contains("| 1 | 3.08 + 5.00 | 4.00 + 5.00 | 3.20 + 5.00 |"),
            "{text}"
        );
        assert!(text.contains("| 1 | 0-0 / 1-1 | 1.30, 1.30 |"), "{text}");
        assert!(
            text.contains("not measured: 8 worker(s) and wrk need 9 cores"),
            "{text}"
        );
        assert!(
            text.contains("- P2 / P1 at W=1: 0.538 (at least 0.6): not met"),
            "{text}"
        );
        assert!(
            text.contains("- P3 / P1 at W=1: 0.462 (at least 0.5): not met"),
            "{text}"
        );
        assert!(
            text.contains("- P1 / nginx at W=1: 1.300 (at least 1): met"),
            "{text}"
        );
        assert!(
            text.contains("- P1-TLS / nginx at W=1: 1.190 (at least 1): met"),
            "{text}"
        );
        assert!(
            text.contains("- S-ES256 / P2 at W=1: 0.600 (at least 0.5): met"),
            "{text}"
        );
        assert!(
            text.contains("| 0.60, 0.60 | 0.10, 0.10 | 130 | 70 | 60 | 42 | 7 |"),
            "{text}"
        );
    }
}
