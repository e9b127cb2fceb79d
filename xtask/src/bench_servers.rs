//! The processes a benchmark drives: `registry serve` and nginx on loopback, each killed on
//! drop, plus the few raw HTTP requests whose timing matters (readiness, propagation), made on a
//! plain socket so that no client library sits in the measurement.

use anyhow::{bail, Context, Result};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TAKEN: &str = "the port was taken before the registry bound it";

/// A loopback port that is free now.
pub fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(listener.local_addr()?.port())
}

/// `program`, pinned to `cpu` with taskset when one is given.
pub fn pinned(program: &Path, cpu: Option<usize>) -> Command {
    match cpu {
        Some(cpu) => {
            let mut command = Command::new("taskset");
            command.arg("-c").arg(cpu.to_string()).arg(program);
            command
        }
        None => Command::new(program),
    }
}

/// A log file opened for appending, so that it can be emptied between runs while the server
/// keeps writing to it.
fn append_log(path: &Path) -> Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))
}

/// Empties a log file (runs write gigabytes of request lines otherwise).
pub fn truncate(path: &Path) {
    if let Ok(file) = OpenOptions::new().write(true).open(path) {
        let _ = file.set_len(0);
    }
}

/// One `GET` on a fresh connection; the status and the body, or `None` when nothing answers.
pub fn get(port: u16, host: &str, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split(' ').nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map_or("", |(_, body)| body)
        .to_owned();
    Some((status, body))
}

/// The resident memory of process `pid`, in KiB.
pub fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS in /proc/PID/status")
}

/// A running `registry serve`.
#[derive(Debug)]
pub struct Registry {
    child: Child,
    /// Its loopback port.
    pub port: u16,
    /// Its log (stderr).
    pub log: PathBuf,
    /// From spawn to the first `200` of `/readyz`.
    pub ready_after: Duration,
}

/// How to start a registry.
#[derive(Debug, Clone)]
pub struct RegistryOptions<'a> {
    pub binary: &'a Path,
    pub database_url: &'a str,
    pub log: PathBuf,
    /// `REGISTRY_WORKERS`; the default (one per core) when `None`.
    pub workers: Option<usize>,
    pub cpu: Option<usize>,
}

impl Registry {
    /// The environment of a benchmark server on `port` (what docs/benchmarks.md shows).
    pub fn environment(
        port: u16,
        database_url: &str,
        workers: Option<usize>,
    ) -> Vec<(String, String)> {
        let mut env = vec![
            ("REGISTRY_LISTEN".into(), format!("127.0.0.1:{port}")),
            ("REGISTRY_DATABASE_URL".into(), database_url.to_owned()),
            (
                "REGISTRY_BASE_URL".into(),
                format!("http://127.0.0.1:{port}"),
            ),
            (
                "REGISTRY_ISSUER_URL_TEMPLATE".into(),
                format!("http://{{subdomain}}.localhost:{port}"),
            ),
            // The federated scenarios use an issuer hosted by the registry itself, on loopback.
            ("REGISTRY_OIDC_ALLOW_INSECURE_ISSUERS".into(), "true".into()),
            ("RUST_LOG".into(), "info".into()),
        ];
        if let Some(workers) = workers {
            env.push(("REGISTRY_WORKERS".into(), workers.to_string()));
        }
        env
    }

    /// Starts a server and waits until `/readyz` answers 200 (at most 30 s). Other work on the
    /// machine may take the free port first: then another port is tried.
    pub fn start(options: &RegistryOptions<'_>) -> Result<Registry> {
        let mut attempts = 0;
        loop {
            match Self::start_on(options, free_port()?) {
                Err(e) if attempts < 5 && e.to_string().contains(TAKEN) => attempts += 1,
                other => return other,
            }
        }
    }

    fn start_on(options: &RegistryOptions<'_>, port: u16) -> Result<Registry> {
        truncate(&options.log);
        let mut command = pinned(options.binary, options.cpu);
        command
            .arg("serve")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(Self::environment(
                port,
                options.database_url,
                options.workers,
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(append_log(&options.log)?);
        let started = Instant::now();
        let mut child = command.spawn().context("starting the registry")?;
        // The server prints this line once it has bound the port: until then, whatever answers
        // on the port is not this server.
        let (bound, listening) = std::sync::mpsc::channel();
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
            ready_after: Duration::ZERO,
        };
        let mut is_bound = false;
        loop {
            is_bound = is_bound || listening.try_recv().is_ok();
            if is_bound && matches!(get(port, "127.0.0.1", "/readyz"), Some((200, _))) {
                registry.ready_after = started.elapsed();
                return Ok(registry);
            }
            if let Ok(Some(status)) = registry.child.try_wait() {
                let log = std::fs::read_to_string(&options.log).unwrap_or_default();
                if log.contains("cannot listen on") {
                    bail!("{TAKEN}");
                }
                bail!("the registry exited ({status}); log:\n{log}");
            }
            if started.elapsed() > Duration::from_secs(30) {
                bail!("the registry was not ready within 30 s");
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The `Host` of a hosted issuer on this server.
    pub fn issuer_host(&self, subdomain: &str) -> String {
        format!("{subdomain}.localhost:{}", self.port)
    }

    /// The process's resident memory (`VmRSS`), in KiB.
    pub fn rss_kib(&self) -> Result<u64> {
        rss_kib(self.child.id())
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// nginx serving one file as `/.well-known/openid-configuration`.
#[derive(Debug)]
pub struct Nginx {
    child: Child,
    /// Its loopback port.
    pub port: u16,
    /// Its configuration, for the report.
    pub config: String,
    /// Its access log.
    pub log: PathBuf,
}

impl Nginx {
    /// Starts nginx with one worker process in `dir`, serving `document` with the registry's
    /// headers.
    pub fn start(dir: &Path, document: &[u8], cpu: Option<usize>) -> Result<Nginx> {
        let root = dir.join("www");
        std::fs::create_dir_all(root.join(".well-known"))?;
        std::fs::write(root.join(".well-known/openid-configuration"), document)?;
        let port = free_port()?;
        let log = dir.join("access.log");
        let d = dir.display();
        // As a static file server would be tuned: sendfile, cached file descriptors, long
        // keep-alive. It logs every request like the registry does, through a buffer like the
        // registry's (64 KiB, written at least every second).
        let config = format!(
            "worker_processes 1;
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 1024; }}
http {{
    access_log {log} combined buffer=64k flush=1s;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    open_file_cache max=64;
    keepalive_requests 1000000;
    client_body_temp_path {d}/tmp-body;
    proxy_temp_path {d}/tmp-proxy;
    fastcgi_temp_path {d}/tmp-fastcgi;
    uwsgi_temp_path {d}/tmp-uwsgi;
    scgi_temp_path {d}/tmp-scgi;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        location = /.well-known/openid-configuration {{
            default_type application/json;
            add_header Cache-Control \"public, max-age=30\";
            add_header Access-Control-Allow-Origin \"*\";
        }}
    }}
}}
",
            log = log.display(),
            root = root.display(),
        );
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, &config)?;
        let child = pinned(Path::new("nginx"), cpu)
            .arg("-c")
            .arg(&conf)
            .arg("-e")
            .arg(dir.join("error.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting nginx")?;
        let nginx = Nginx {
            child,
            port,
            config,
            log,
        };
        let started = Instant::now();
        while get(port, "localhost", "/.well-known/openid-configuration")
            .is_none_or(|(s, _)| s != 200)
        {
            if started.elapsed() > Duration::from_secs(10) {
                bail!(
                    "nginx did not answer within 10 s: {}",
                    std::fs::read_to_string(dir.join("error.log")).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(nginx)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM: the master stops its worker too (SIGKILL would leave the worker listening).
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}
