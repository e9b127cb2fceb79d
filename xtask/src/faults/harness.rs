//! The real `registry` binary for the fault and API-fuzzing chores: built once, started on a
//! free loopback port with its log in a file, driven through a small HTTP/1.1 client (std only,
//! one connection per request, so a killed server shows up as an error rather than a hang).

use crate::cmd::{cargo, output, root, run};
use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Builds the debug `registry` binary and returns its path.
pub fn build_binary() -> Result<PathBuf> {
    run(cargo().args([
        "build",
        "--quiet",
        "-p",
        "registry-server",
        "--bin",
        "registry",
    ]))?;
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from);
    Ok(target.join("debug/registry"))
}

/// A port that is free now.
pub fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(listener.local_addr()?.port())
}

/// `registry …` (not `serve`) on a database; its standard output as JSON.
pub fn cli(binary: &Path, args: &[&str], database_url: &str) -> Result<Value> {
    let text = output(
        Command::new(binary)
            .args(args)
            .env("REGISTRY_DATABASE_URL", database_url),
    )?;
    serde_json::from_str(&text).with_context(|| format!("registry {args:?} printed {text:?}"))
}

/// A customer on the business plan; its bootstrap token.
pub fn customer(binary: &Path, database_url: &str, tenant: &str) -> Result<String> {
    let created = cli(
        binary,
        &[
            "customer", "create", "--tenant", tenant, "--plan", "business", "--name", tenant,
        ],
        database_url,
    )?;
    created["token"]
        .as_str()
        .map(str::to_owned)
        .context("customer create printed no token")
}

/// A running server; killed (SIGKILL) when dropped.
#[derive(Debug)]
pub struct Registry {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: SocketAddr,
}

impl Registry {
    /// Starts `binary serve` on `port` and `database_url`, appending its log to `log`; waits
    /// until it listens.
    pub fn start(
        binary: &Path,
        database_url: &str,
        port: u16,
        log: &Path,
        env: &[(&str, &str)],
    ) -> Result<Registry> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("opening {}", log.display()))?;
        let mut command = Command::new(binary);
        command
            .arg("serve")
            .env("REGISTRY_LISTEN", format!("127.0.0.1:{port}"))
            .env("REGISTRY_DATABASE_URL", database_url)
            .env("REGISTRY_BASE_URL", format!("http://127.0.0.1:{port}"))
            .env(
                "REGISTRY_ISSUER_URL_TEMPLATE",
                format!("http://{{subdomain}}.localhost:{port}"),
            )
            .env("REGISTRY_WORKERS", "2")
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::from(file));
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().context("starting the registry")?;
        let stdout = child.stdout.take().context("registry stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.contains("listening on") {
                    let _ = tx.send(());
                }
            }
        });
        if rx.recv_timeout(Duration::from_secs(60)).is_err() {
            let _ = child.kill();
            let _ = child.wait();
            let log = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            bail!(
                "the registry did not start; end of its log:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        Ok(Registry {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        })
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

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A client for this server.
    pub fn http(&self) -> Http {
        Http { addr: self.addr }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A response: status and body text.
#[derive(Debug, Clone)]
pub struct Response {
    /// HTTP status.
    pub status: u16,
    /// Body text.
    pub body: String,
}

impl Response {
    /// The body as JSON (`Null` when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    /// The slug of a problem body's `type` (`""` when it is not a problem).
    pub fn problem(&self) -> String {
        self.json()["type"]
            .as_str()
            .and_then(|t| t.rsplit('/').next())
            .unwrap_or_default()
            .to_owned()
    }
}

/// A minimal HTTP/1.1 client: one connection per request.
#[derive(Debug, Clone, Copy)]
pub struct Http {
    addr: SocketAddr,
}

impl Http {
    /// A client for the server at `addr`.
    pub fn new(addr: SocketAddr) -> Http {
        Http { addr }
    }

    /// Sends a request; `host` overrides the `Host` header (hosted documents).
    pub fn send(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
        host: Option<&str>,
    ) -> Result<Response> {
        let mut stream = TcpStream::connect_timeout(&self.addr, Duration::from_secs(5))?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        stream.set_write_timeout(Some(Duration::from_secs(30)))?;
        let body = body.map(Value::to_string).unwrap_or_default();
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: {}\r\n",
            host.map_or_else(|| self.addr.to_string(), str::to_owned),
            body.len()
        );
        if !body.is_empty() {
            head.push_str("Content-Type: application/json\r\n");
        }
        if let Some(token) = token {
            head.push_str(&format!("Authorization: Bearer {token}\r\n"));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes())?;
        stream.write_all(body.as_bytes())?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw)?;
        parse_response(&raw)
    }

    /// A service's configuration through the API (with `token`) and its key set as hosted on
    /// its subdomain (the server listening on `port`): what a write must have left in both.
    pub fn stored_and_hosted(
        &self,
        subdomain: &str,
        token: &str,
        port: u16,
    ) -> Result<(Response, Response)> {
        let stored = self.call(
            "GET",
            &format!("/services/{subdomain}/config"),
            Some(token),
            None,
        )?;
        let host = format!("{subdomain}.localhost:{port}");
        let hosted = self.send("GET", "/openid/v1/jwks", None, None, Some(&host))?;
        Ok((stored, hosted))
    }

    /// `send` without a Host override.
    pub fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> Result<Response> {
        self.send(method, path, token, body, None)
    }
}

fn parse_response(raw: &[u8]) -> Result<Response> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("no complete response head")?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let status = head
        .lines()
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .context("no status line")?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let mut body = raw[split + 4..].to_vec();
    if chunked {
        body = dechunk(&body)?;
    }
    Ok(Response {
        status,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

fn dechunk(mut data: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = data
            .windows(2)
            .position(|w| w == b"\r\n")
            .context("truncated chunk size")?;
        let size_text = String::from_utf8_lossy(&data[..line_end]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .context("bad chunk size")?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        if data.len() < size + 2 {
            bail!("truncated chunk");
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

/// Polls `check` every 100 ms until it returns true or `limit` passes; the time it took.
pub fn wait_until(limit: Duration, mut check: impl FnMut() -> bool) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < limit {
        if check() {
            return Some(started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

/// A temporary directory under `target/`, removed on drop.
#[derive(Debug)]
pub struct WorkDir(pub PathBuf);

impl WorkDir {
    /// A fresh, empty `target/{name}-{pid}`.
    pub fn new(name: &str) -> Result<WorkDir> {
        let dir = root()
            .join("target")
            .join(format!("{name}-{}", std::process::id()));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_parse_with_and_without_chunks() {
        let plain = b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\n{}";
        let r = parse_response(plain).unwrap();
        assert_eq!((r.status, r.body.as_str()), (201, "{}"));
        let chunked =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n";
        assert_eq!(parse_response(chunked).unwrap().body, "abcde");
        assert!(parse_response(b"HTTP/1.1 200 OK\r\n").is_err());
        let problem = Response {
            status: 503,
            body: r#"{"type": "http://x/problems/unavailable"}"#.into(),
        };
        assert_eq!(problem.problem(), "unavailable");
    }
}
