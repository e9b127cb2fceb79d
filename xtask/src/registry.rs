//! The real `registry` binary, the one way every chore builds, starts and stops it: launched by
//! the test kit (`registry_testkit::launch`: on loopback, its log in a file, killed when
//! dropped) with the test kit's settings and the chores' limits lifted, optionally pinned to a
//! CPU, ready once `/readyz` answers 200.

use crate::cmd::{cargo, output, root, run, target_dir};
use anyhow::{bail, Context, Result};
use registry_testkit::http::Http;
use registry_testkit::settings::{base_url, issuer_template};
pub use registry_testkit::tail;
use registry_testkit::{Launch, Launched, Settings, TempDir};
use serde_json::Value;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Builds the `registry` binary (`release`: optimised, what the benchmark and the soak
/// measure; debug otherwise) and returns its path.
pub fn build(release: bool) -> Result<PathBuf> {
    let mut command = cargo("build --quiet -p registry-server --bin registry");
    if release {
        command.arg("--release");
    }
    run(&mut command)?;
    let profile = if release { "release" } else { "debug" };
    Ok(target_dir()?.join(profile).join("registry"))
}

/// `registry customer create` on a database (the business plan, named after its tenant),
/// migrated first as an operator would (`customer create` never sets up a database): the
/// customer's bootstrap token.
pub fn create_customer(binary: &Path, database_url: &str, tenant: &str) -> Result<String> {
    output(
        Command::new(binary)
            .arg("migrate")
            .env("REGISTRY_DATABASE_URL", database_url),
    )?;
    let text = output(
        Command::new(binary)
            .args([
                "customer", "create", "--tenant", tenant, "--plan", "business",
            ])
            .args(["--name", tenant])
            .env("REGISTRY_DATABASE_URL", database_url),
    )?;
    let created: Value =
        serde_json::from_str(&text).with_context(|| format!("customer create printed {text:?}"))?;
    created["token"]
        .as_str()
        .map(str::to_owned)
        .context("customer create printed no token")
}

/// How to start a registry: where its binary and log are, and the test kit's settings of a
/// server on loopback, with the chores' limits lifted.
#[derive(Debug, Clone)]
pub struct Options {
    pub binary: PathBuf,
    /// Its log (stderr), appended to: a restarted server continues the same file.
    pub log: PathBuf,
    /// A fixed port, for chores that restart a server on the same database (the issuer URLs of
    /// published documents name the port). Otherwise a free one, and another if something else
    /// takes it first.
    pub port: Option<u16>,
    /// The CPU it is pinned to (taskset), so that a load generator can have another.
    pub cpus: Option<String>,
    /// Its settings (two workers unless a chore says otherwise).
    pub settings: Settings,
}

impl Options {
    /// Two workers (the chores' machines have two cores), no pinning, the limits lifted.
    pub fn new(binary: &Path, database_url: &str, log: &Path) -> Options {
        let mut settings = Settings::new(database_url);
        // The chores measure throughput and durability, one credential writing as fast as it
        // can: the per-credential and per-customer limits (docs/api.md, "Errors") are lifted here
        // (the test suite holds them), unless a chore sets them itself.
        for name in [
            "REGISTRY_WRITES_PER_MINUTE",
            "REGISTRY_EXPLAIN_PER_MINUTE",
            "REGISTRY_MAX_SERVICES_PER_CUSTOMER",
            "REGISTRY_MAX_ACCOUNTS_PER_CUSTOMER",
        ] {
            settings = settings.set(name, "100000000");
        }
        Options {
            binary: binary.to_owned(),
            log: log.to_owned(),
            port: None,
            cpus: None,
            settings,
        }
    }

    /// Sets the setting `name` to `value`.
    pub fn env(mut self, name: &str, value: &str) -> Options {
        self.settings = self.settings.set(name, value);
        self
    }

    /// `REGISTRY_WORKERS`; `None`: the server's default, one per core.
    pub fn workers(mut self, workers: Option<usize>) -> Options {
        self.settings.workers = workers;
        self
    }
}

/// A running `registry serve` (the test kit's [`Launched`]); killed (SIGKILL) when dropped.
#[derive(Debug)]
pub struct Registry {
    process: Launched,
    pub port: u16,
    pub log: PathBuf,
    /// What it was started with (for reports).
    pub environment: Vec<(String, String)>,
    /// From spawn to the first 200 of `/readyz`.
    pub ready_after: Duration,
}

impl Registry {
    /// Starts a server and waits until it is ready (at most 60 s).
    pub fn start(options: &Options) -> Result<Registry> {
        let mut wrapper = Vec::new();
        if let Some(cpus) = &options.cpus {
            wrapper = vec!["taskset".into(), "-c".into(), cpus.into()];
        }
        let launch = Launch {
            wrapper,
            port: options.port,
            ..Launch::new(&options.binary, &options.log)
        };
        let mut process = launch
            .start(&options.settings)
            .context("starting the registry")?;
        let http = Http::local(process.port);
        // Over HTTPS its "listening on" line, which the launch waited for, is the sign: the
        // server prints it once it serves, after loading what it serves.
        let tls = options
            .settings
            .more
            .iter()
            .any(|(name, _)| name == "REGISTRY_TLS_CERT");
        loop {
            if tls
                || http
                    .call("GET", "/readyz", None, None)
                    .is_ok_and(|r| r.status == 200)
            {
                return Ok(Registry {
                    port: process.port,
                    log: process.log.clone(),
                    environment: process.environment.clone(),
                    ready_after: process.spawned.elapsed(),
                    process,
                });
            }
            if let Some(why) = process.exit_report() {
                bail!("{why}");
            }
            if process.spawned.elapsed() > Duration::from_secs(60) {
                bail!(
                    "the registry was not ready within 60 s; end of its log:\n{}",
                    tail(&process.log_since_start())
                );
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A client for this server.
    pub fn http(&self) -> Http {
        Http::local(self.port)
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base(&self) -> String {
        base_url(self.port)
    }

    /// Its `REGISTRY_ISSUER_URL_TEMPLATE`.
    pub fn issuer_template(&self) -> String {
        issuer_template(self.port)
    }

    /// `kill -9`: no chance to finish anything.
    pub fn kill9(&mut self) -> Result<()> {
        self.process.kill9().context("SIGKILL")
    }

    /// SIGTERM, then waits for the exit (graceful shutdown).
    pub fn terminate(&mut self) -> Result<()> {
        self.process.terminate()?;
        Ok(())
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.process.is_running()
    }

    /// Its resident memory (`VmRSS`), in KiB.
    pub fn rss_kib(&self) -> Result<u64> {
        Ok(self.process.rss_kib()?)
    }
}

/// Empties a log file that a server keeps appending to (long runs write gigabytes of request
/// lines otherwise).
pub fn truncate(path: &Path) {
    if let Ok(file) = OpenOptions::new().write(true).open(path) {
        let _ = file.set_len(0);
    }
}

/// A fresh, empty directory for a chore's databases and logs (the test kit's [`TempDir`]),
/// removed on drop.
#[derive(Debug)]
pub struct WorkDir(pub TempDir);

impl WorkDir {
    /// `target/{name}-{pid}`.
    pub fn in_target(name: &str) -> Result<WorkDir> {
        WorkDir::at(
            root()
                .join("target")
                .join(format!("{name}-{}", std::process::id())),
        )
    }

    /// `dir`, emptied first.
    pub fn at(dir: PathBuf) -> Result<WorkDir> {
        Ok(WorkDir(TempDir::at(dir)?))
    }
}
