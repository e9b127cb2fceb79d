//! The real `registry` binary, the one way every chore builds, starts and stops it: on loopback,
//! its log in a file, ready once `/readyz` answers 200, killed when dropped.

use crate::cmd::{cargo, output, root, run, target_dir};
use crate::http::{free_port, Http};
use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::fs::OpenOptions;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

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

/// `registry customer create` on a database (the business plan, named after its tenant): the
/// customer's bootstrap token.
pub fn create_customer(binary: &Path, database_url: &str, tenant: &str) -> Result<String> {
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

/// How to start a registry.
#[derive(Debug, Clone)]
pub struct Options {
    pub binary: PathBuf,
    pub database_url: String,
    /// Its log (stderr), appended to: a restarted server continues the same file.
    pub log: PathBuf,
    /// A fixed port, for chores that restart a server on the same database (the issuer URLs of
    /// published documents name the port). Otherwise a free one, and another if something else
    /// takes it first.
    pub port: Option<u16>,
    /// `REGISTRY_WORKERS`; `None`: the server's default, one per core.
    pub workers: Option<usize>,
    /// The CPU it is pinned to (taskset), so that a load generator can have another.
    pub cpu: Option<usize>,
    /// More environment, after the settings every server gets.
    pub env: Vec<(String, String)>,
}

impl Options {
    /// Two workers (the chores' machines have two cores), no pinning, nothing else set.
    pub fn new(binary: &Path, database_url: &str, log: &Path) -> Options {
        Options {
            binary: binary.to_owned(),
            database_url: database_url.to_owned(),
            log: log.to_owned(),
            port: None,
            workers: Some(2),
            cpu: None,
            env: Vec::new(),
        }
    }

    /// Adds `name=value` to the environment.
    pub fn env(mut self, name: &str, value: &str) -> Options {
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    /// The whole environment of a server on `port`: the registry sees nothing else (no
    /// `REGISTRY_*` or `RUST_LOG` of the caller's), so that runs repeat and reports are true.
    fn environment(&self, port: u16) -> Vec<(String, String)> {
        let mut env = vec![
            ("REGISTRY_LISTEN".into(), format!("127.0.0.1:{port}")),
            ("REGISTRY_DATABASE_URL".into(), self.database_url.clone()),
            (
                "REGISTRY_BASE_URL".into(),
                format!("http://127.0.0.1:{port}"),
            ),
            (
                "REGISTRY_ISSUER_URL_TEMPLATE".into(),
                format!("http://{{subdomain}}.localhost:{port}"),
            ),
            ("RUST_LOG".into(), "info".into()),
        ];
        // The chores measure throughput and durability, one credential writing as fast as it
        // can: the per-credential and per-customer limits of DECISIONS §17 are lifted here (the
        // test suite holds them), unless a chore sets them itself.
        for (name, value) in [
            ("REGISTRY_WRITES_PER_MINUTE", "100000000"),
            ("REGISTRY_EXPLAIN_PER_MINUTE", "100000000"),
            ("REGISTRY_MAX_SERVICES_PER_CUSTOMER", "100000000"),
            ("REGISTRY_MAX_ACCOUNTS_PER_CUSTOMER", "100000000"),
        ] {
            env.push((name.into(), value.into()));
        }
        env.extend(self.env.iter().cloned());
        if let Some(workers) = self.workers {
            env.push(("REGISTRY_WORKERS".into(), workers.to_string()));
        }
        env
    }
}

/// A running `registry serve`; killed (SIGKILL) when dropped.
#[derive(Debug)]
pub struct Registry {
    child: Child,
    pub port: u16,
    pub log: PathBuf,
    /// What it was started with (for reports).
    pub environment: Vec<(String, String)>,
    /// From spawn to the first 200 of `/readyz`.
    pub ready_after: Duration,
}

/// Why a start failed when another process bound the free port first.
const TAKEN: &str = "the port was taken before the registry bound it";

impl Registry {
    /// Starts a server and waits until it is ready (at most 60 s).
    pub fn start(options: &Options) -> Result<Registry> {
        if let Some(port) = options.port {
            return Registry::start_on(options, port);
        }
        let mut attempts = 0;
        loop {
            match Registry::start_on(options, free_port()?) {
                Err(e) if attempts < 5 && e.to_string().contains(TAKEN) => attempts += 1,
                other => return other,
            }
        }
    }

    fn start_on(options: &Options, port: u16) -> Result<Registry> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&options.log)
            .with_context(|| format!("opening {}", options.log.display()))?;
        // Only what this start writes tells why it failed.
        let log_start = log.metadata()?.len() as usize;
        let environment = options.environment(port);
        let mut command = match options.cpu {
            Some(cpu) => {
                let mut command = Command::new("taskset");
                command.arg("-c").arg(cpu.to_string()).arg(&options.binary);
                command
            }
            None => Command::new(&options.binary),
        };
        command
            .arg("serve")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(environment.iter().cloned())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log);
        let started = Instant::now();
        let mut child = command.spawn().context("starting the registry")?;
        // The server prints this line once it has bound the port: until then, whatever answers
        // on the port is not this server. The thread reads on, so the pipe never fills up.
        let (bound, listening) = mpsc::channel();
        let stdout = child.stdout.take().context("the registry's stdout")?;
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.contains("listening on") {
                    let _ = bound.send(());
                }
            }
        });
        let mut registry = Registry {
            child,
            port,
            log: options.log.clone(),
            environment,
            ready_after: Duration::ZERO,
        };
        let http = registry.http();
        let mut is_bound = false;
        loop {
            is_bound = is_bound || listening.try_recv().is_ok();
            if is_bound
                && http
                    .call("GET", "/readyz", None, None)
                    .is_ok_and(|r| r.status == 200)
            {
                registry.ready_after = started.elapsed();
                return Ok(registry);
            }
            if let Ok(Some(status)) = registry.child.try_wait() {
                let text = std::fs::read_to_string(&options.log).unwrap_or_default();
                let written = text.get(log_start..).unwrap_or_default();
                if written.contains("cannot listen on") {
                    bail!("{TAKEN}");
                }
                bail!(
                    "the registry exited ({status}); its log:\n{}",
                    tail(written)
                );
            }
            if started.elapsed() > Duration::from_secs(60) {
                bail!(
                    "the registry was not ready within 60 s; end of its log:\n{}",
                    { tail(&std::fs::read_to_string(&options.log).unwrap_or_default()) }
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
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `kill -9`: no chance to finish anything.
    pub fn kill9(&mut self) -> Result<()> {
        // `Child::kill` is SIGKILL on Unix.
        self.child.kill().context("SIGKILL")?;
        self.child.wait().context("reaping the registry")?;
        Ok(())
    }

    /// SIGTERM, then waits for the exit (graceful shutdown).
    pub fn terminate(&mut self) -> Result<()> {
        run(Command::new("kill").args(["-TERM", &self.child.id().to_string()]))?;
        let deadline = Instant::now() + Duration::from_secs(40);
        while self.child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                bail!("the registry did not stop on SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Its resident memory (`VmRSS`), in KiB.
    pub fn rss_kib(&self) -> Result<u64> {
        let pid = self.child.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .context("no VmRSS in /proc/PID/status")
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The last 20 lines of a log.
pub fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// Empties a log file that a server keeps appending to (long runs write gigabytes of request
/// lines otherwise).
pub fn truncate(path: &Path) {
    if let Ok(file) = OpenOptions::new().write(true).open(path) {
        let _ = file.set_len(0);
    }
}

/// A fresh, empty directory for a chore's databases and logs, removed on drop.
#[derive(Debug)]
pub struct WorkDir(pub PathBuf);

impl WorkDir {
    /// `target/{name}-{pid}`.
    pub fn in_target(name: &str) -> Result<WorkDir> {
        WorkDir::at(
            root()
                .join("target")
                .join(format!("{name}-{}", std::process::id())),
        )
    }

    pub fn at(dir: PathBuf) -> Result<WorkDir> {
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(WorkDir(dir))
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
