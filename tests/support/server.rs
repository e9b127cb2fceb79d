//! The real `registry` binary on a free loopback port, on a fresh database, with its log
//! captured (so tests can assert that no secret reaches it).

use reqwest::blocking::{Client, RequestBuilder, Response};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Builds the binary once per test process (a no-op when it is fresh) and returns its path.
pub fn registry_binary() -> PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let status = Command::new(cargo)
                .args([
                    "build",
                    "--quiet",
                    "-p",
                    "registry-server",
                    "--bin",
                    "registry",
                ])
                .status()
                .expect("run cargo build");
            assert!(status.success(), "building the registry binary failed");
            // target/debug/deps/integration-… → target/debug/registry
            let exe = std::env::current_exe().expect("test executable path");
            let dir = exe.parent().and_then(|p| p.parent()).expect("target dir");
            dir.join("registry")
        })
        .clone()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// Options of a test server.
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    /// Extra environment variables (`REGISTRY_*`).
    pub env: Vec<(String, String)>,
    /// Share this database instead of a fresh one (replica tests).
    pub database_url: Option<String>,
    /// Run on a clock the test moves with [`TestServer::advance_clock`] (expiry tests).
    pub shifted_clock: bool,
}

/// A running server; killed when dropped.
#[derive(Debug)]
pub struct TestServer {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// The port.
    pub port: u16,
    /// Its database.
    pub database_url: String,
    log_path: PathBuf,
    clock_path: Option<PathBuf>,
    _log_dir: TempDir,
    client: Client,
}

/// A temporary directory removed on drop.
#[derive(Debug)]
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A new empty directory.
    pub fn new(prefix: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("{prefix}-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl TestServer {
    /// A server with default settings on a fresh database.
    pub fn start() -> Self {
        Self::start_with(ServerOptions::default())
    }

    /// A server with options.
    pub fn start_with(options: ServerOptions) -> Self {
        let database_url = options
            .database_url
            .clone()
            .unwrap_or_else(crate::fresh_database_url);
        let log_dir = TempDir::new("registry-log");
        let log_path = log_dir.0.join("server.log");
        let clock_path = options.shifted_clock.then(|| log_dir.0.join("clock-shift"));
        for _attempt in 0..5 {
            let port = free_port();
            let base = format!("http://127.0.0.1:{port}");
            let log = std::fs::File::create(&log_path).expect("log file");
            let mut command = Command::new(registry_binary());
            command
                .arg("serve")
                .env_clear()
                .env("PATH", std::env::var("PATH").unwrap_or_default())
                .env("REGISTRY_LISTEN", format!("127.0.0.1:{port}"))
                .env("REGISTRY_DATABASE_URL", &database_url)
                .env("REGISTRY_BASE_URL", &base)
                .env(
                    "REGISTRY_ISSUER_URL_TEMPLATE",
                    format!("http://{{subdomain}}.localhost:{port}"),
                )
                .env("REGISTRY_WORKERS", "2")
                .env("RUST_LOG", "info")
                .stdout(Stdio::piped())
                .stderr(Stdio::from(log));
            for (k, v) in &options.env {
                command.env(k, v);
            }
            if let Some(path) = &clock_path {
                command.env("REGISTRY_TEST_CLOCK_FILE", path);
            }
            let mut child = command.spawn().expect("spawn registry");
            let stdout = child.stdout.take().expect("stdout");
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if line.contains("listening on") {
                        let _ = tx.send(());
                    }
                }
            });
            if rx.recv_timeout(Duration::from_secs(30)).is_ok() {
                return Self {
                    child,
                    base,
                    port,
                    database_url,
                    log_path,
                    clock_path,
                    _log_dir: log_dir,
                    client: Client::builder()
                        .redirect(reqwest::redirect::Policy::none())
                        .timeout(Duration::from_secs(30))
                        .build()
                        .expect("client"),
                };
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!(
            "the registry did not start; log:\n{}",
            std::fs::read_to_string(&log_path).unwrap_or_default()
        );
    }

    /// Moves the server's clock `seconds` further ahead than it is (a server started with
    /// [`ServerOptions::shifted_clock`]); returns once the server reads the new time.
    pub fn advance_clock(&self, seconds: i64) {
        let path = self
            .clock_path
            .as_ref()
            .expect("a server started with ServerOptions::shifted_clock");
        let shift: i64 = std::fs::read_to_string(path)
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0);
        std::fs::write(path, (shift + seconds).to_string()).expect("clock file");
        // The server reads the file again at most 50 ms after the last time it did.
        std::thread::sleep(Duration::from_millis(120));
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The server's resident memory now, in KiB (`VmRSS`).
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("the server's /proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS")
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Runs `registry customer create` against this server's database; returns its output.
    pub fn create_customer(&self, tenant: &str, plan: &str) -> Value {
        run_cli(
            &[
                "customer",
                "create",
                "--tenant",
                tenant,
                "--plan",
                plan,
                "--name",
                &format!("{tenant} Inc"),
            ],
            &self.database_url,
        )
        .expect("customer create")
    }

    /// A customer and its bootstrap token.
    pub fn customer(&self, tenant: &str, plan: &str) -> Customer {
        let out = self.create_customer(tenant, plan);
        Customer {
            tenant: tenant.to_owned(),
            token: out["token"].as_str().expect("token").to_owned(),
            account_id: out["serviceAccount"]["id"].as_str().expect("id").to_owned(),
        }
    }

    /// A request to an API path.
    pub fn request(&self, method: reqwest::Method, path: &str) -> RequestBuilder {
        self.client.request(method, format!("{}{path}", self.base))
    }

    /// A request with a bearer token.
    pub fn authed(&self, method: reqwest::Method, path: &str, token: &str) -> RequestBuilder {
        self.request(method, path).bearer_auth(token)
    }

    /// The status of a GET without credentials (`/readyz`, `/healthz`…).
    pub fn status_of(&self, path: &str) -> u16 {
        self.request(reqwest::Method::GET, path)
            .send()
            .unwrap()
            .status()
            .as_u16()
    }

    /// A public request to a hosted issuer, chosen by `Host`.
    pub fn hosted(&self, method: reqwest::Method, subdomain: &str, path: &str) -> RequestBuilder {
        self.request(method, path)
            .header("host", format!("{subdomain}.localhost:{}", self.port))
    }

    /// `GET path` with a bearer token.
    pub fn get(&self, path: &str, token: &str) -> Response {
        self.authed(reqwest::Method::GET, path, token)
            .send()
            .expect("GET")
    }

    /// The detail of the 401 a request without credentials gets on `path`: every refused token
    /// must get exactly this, so that a client learns nothing about why.
    pub fn anonymous_401_detail(&self, path: &str) -> String {
        let response = self
            .request(reqwest::Method::GET, path)
            .send()
            .expect("GET");
        assert_problem(response, 401, "unauthorized")["detail"]
            .as_str()
            .expect("a detail")
            .to_owned()
    }

    /// The value of a metric without labels, scraped from `/metrics` now.
    pub fn metric(&self, name: &str) -> u64 {
        let text = self
            .request(reqwest::Method::GET, "/metrics")
            .send()
            .and_then(Response::text)
            .expect("GET /metrics");
        metric_in(&text, name)
    }

    /// The hosted issuer URL of a subdomain.
    pub fn issuer(&self, subdomain: &str) -> String {
        format!("http://{subdomain}.localhost:{}", self.port)
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the registry did not stop on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A customer made by `registry customer create`.
#[derive(Debug, Clone)]
pub struct Customer {
    /// Tenant suffix.
    pub tenant: String,
    /// The bootstrap account's static token (`services: ["*"]`).
    pub token: String,
    /// The bootstrap account's id.
    pub account_id: String,
}

/// Runs the CLI on a database; `Ok(stdout as JSON)` or `Err(stderr)`.
pub fn run_cli(args: &[&str], database_url: &str) -> Result<Value, String> {
    let output = Command::new(registry_binary())
        .args(args)
        .env("REGISTRY_DATABASE_URL", database_url)
        .output()
        .expect("run registry");
    if output.status.success() {
        let text = String::from_utf8_lossy(&output.stdout);
        Ok(serde_json::from_str(&text).unwrap_or(Value::String(text.into_owned())))
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

/// The value of a metric without labels in a Prometheus text; panics when it is missing.
pub fn metric_in(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("metric {name} missing in\n{text}"))
}

/// The response body as JSON (panics with the text when it is not).
pub fn json(response: Response) -> Value {
    let text = response.text().expect("body");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// The `pointer` of each entry of a problem's `errors`, in order.
pub fn pointers(problem: &Value) -> Vec<String> {
    problem["errors"]
        .as_array()
        .unwrap_or_else(|| panic!("no errors in {problem}"))
        .iter()
        .map(|e| e["pointer"].as_str().unwrap().to_owned())
        .collect()
}

/// Asserts a problem response: status, content type, slug; returns the body.
pub fn assert_problem(response: Response, status: u16, slug: &str) -> Value {
    assert_eq!(response.status().as_u16(), status, "status");
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = json(response);
    assert_eq!(
        content_type, "application/problem+json",
        "content type of {body}"
    );
    assert!(
        body["type"]
            .as_str()
            .unwrap_or("")
            .ends_with(&format!("/problems/{slug}")),
        "expected problem {slug}, got {body}"
    );
    assert_eq!(body["status"], status, "{body}");
    assert!(
        body["title"].is_string() && body["detail"].is_string(),
        "{body}"
    );
    body
}

/// The audience the federated rules of the tests pin.
pub const AUDIENCE: &str = "registry";

/// A server that admits `http` and loopback issuers, as the test issuer is.
pub fn insecure_server() -> TestServer {
    TestServer::start_with(ServerOptions {
        env: vec![("REGISTRY_OIDC_ALLOW_INSECURE_ISSUERS".into(), "true".into())],
        ..ServerOptions::default()
    })
}

/// Seconds since the Unix epoch, now.
pub fn unix_now() -> i64 {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    i64::try_from(secs).expect("time fits")
}

/// Claims of a token for `iss` and `sub`, with [`AUDIENCE`], issued now, living ten minutes.
pub fn claims(iss: &str, sub: &str) -> Value {
    let now = unix_now();
    serde_json::json!({"iss": iss, "sub": sub, "aud": AUDIENCE, "iat": now, "exp": now + 600})
}
