//! The registry on a free loopback port, on a fresh database: inside the test process (the
//! library's HTTP server on a thread of its own, with a clock the test moves), or the real
//! `registry` binary, whose log is captured (so tests can assert that no secret reaches it) and
//! which answers signals. The binary is launched by the test kit (`registry_testkit::launch`),
//! as the chores launch it, with the test kit's settings (`registry_testkit::Settings`).
//!
//! What servers in one test process share (the library's process-wide state): the base URL of
//! problem `type` addresses is the first server's (tests match a problem by the end of its
//! `type`, `/problems/{slug}`), and no `tracing` subscriber is installed, so an in-process
//! server logs nothing: tests that read a log start the binary.

use registry_domain::ports::{Clock, IdentityTokenVerifier};
use registry_testkit::{Launch, Launched};
use reqwest::blocking::{Client, RequestBuilder, Response};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

/// Seconds since the Unix epoch, now (the test kit's).
pub use registry_testkit::unix_now;
/// A temporary directory removed on drop (the test kit's).
pub use registry_testkit::TempDir;
/// The audience the federated rules of the tests pin (the test kit's).
pub use registry_testkit::AUDIENCE;

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

/// Options of a test server.
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    /// Settings as environment variables (`REGISTRY_*`), over the harness's own; `{port}` in a
    /// value is the server's port.
    pub env: Vec<(String, String)>,
    /// Share this database instead of a fresh one (replica tests).
    pub database_url: Option<String>,
    /// Run the real `registry` binary rather than the server inside the test process: for tests
    /// that read its log, its memory or its process id, or send it signals.
    pub binary: bool,
    /// The verifier of identity tokens of an in-process server, in place of the OIDC adapter.
    pub verifier: Option<Arc<dyn IdentityTokenVerifier>>,
}

impl ServerOptions {
    /// The real binary, with these settings.
    pub fn binary(env: &[(&str, &str)]) -> Self {
        Self {
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            binary: true,
            ..Self::default()
        }
    }
}

/// The clock of an in-process server: the system's, shifted by what the test says.
#[derive(Debug, Default)]
pub struct TestClock {
    shift_secs: AtomicI64,
}

impl TestClock {
    /// Moves the clock `seconds` further ahead.
    pub fn advance(&self, seconds: i64) {
        self.shift_secs.fetch_add(seconds, Ordering::SeqCst);
    }
}

impl Clock for TestClock {
    fn now(&self) -> time::OffsetDateTime {
        time::OffsetDateTime::now_utc()
            + time::Duration::seconds(self.shift_secs.load(Ordering::SeqCst))
    }
}

/// How a test server runs.
#[derive(Debug)]
enum Process {
    /// The real binary, its stderr in a file of its own directory.
    Binary {
        process: Launched,
        _log_dir: TempDir,
    },
    /// The library's server on a thread of the test process, on its own actix `System`.
    InProcess {
        handle: actix_web::dev::ServerHandle,
        thread: Option<JoinHandle<()>>,
        clock: Arc<TestClock>,
    },
}

/// A running server; stopped when dropped.
#[derive(Debug)]
pub struct TestServer {
    process: Process,
    /// `http://127.0.0.1:PORT` (`https://NAME:PORT` [`TestServer::over_https`]).
    pub base: String,
    /// The port.
    pub port: u16,
    /// Its database.
    pub database_url: String,
    client: Client,
}

/// The settings of a test server: the test kit's, for a server on loopback (the chores' too),
/// with the test's own over them.
fn settings_for(database_url: &str, options: &ServerOptions) -> registry_testkit::Settings {
    registry_testkit::Settings {
        more: options.env.clone(),
        ..registry_testkit::Settings::new(database_url)
    }
}

/// A client that trusts only the certificate authorities `ca_pems` and finds each of `names`
/// on the loopback `port` (the names the certificate holds, not `127.0.0.1`, so that the name
/// is checked as a relying party checks it); `tls_info` keeps the peer's certificate.
pub fn https_client(ca_pems: &[&str], names: &[&str], port: u16) -> Client {
    let roots = ca_pems
        .iter()
        .map(|pem| reqwest::Certificate::from_pem(pem.as_bytes()).expect("a CA certificate"));
    let mut builder = Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .tls_certs_only(roots)
        .tls_info(true)
        .https_only(true);
    for name in names {
        builder = builder.resolve(name, std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    }
    builder.build().expect("an HTTPS client")
}

fn client() -> Client {
    Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

impl TestServer {
    /// An in-process server with default settings on a fresh database.
    pub fn start() -> Self {
        Self::start_with(ServerOptions::default())
    }

    /// The real binary with default settings on a fresh database.
    pub fn start_binary() -> Self {
        Self::start_with(ServerOptions::binary(&[]))
    }

    /// A server with options.
    pub fn start_with(options: ServerOptions) -> Self {
        let database_url = options
            .database_url
            .clone()
            .unwrap_or_else(crate::fresh_database_url);
        if options.binary {
            Self::spawn_binary(&options, database_url)
        } else {
            Self::start_in_process(&options, database_url)
        }
    }

    fn start_in_process(options: &ServerOptions, database_url: String) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        let port = listener.local_addr().expect("its address").port();
        let vars = settings_for(&database_url, options).environment(port);
        let settings = registry_server::Settings::from_vars(vars).expect("test settings");
        let clock = Arc::new(TestClock::default());
        let injected = registry_server::Injected {
            clock: clock.clone(),
            verifier: options.verifier.clone(),
        };
        let (sender, started) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(format!("registry-{port}"))
            .spawn(move || {
                actix_web::rt::System::new().block_on(async move {
                    let running = match registry_server::start(settings, listener, injected).await {
                        Ok(running) => running,
                        Err(error) => {
                            let _ = sender.send(Err(format!("{error:#}")));
                            return;
                        }
                    };
                    let handle = running.handle();
                    // Runs once the server has been polled, that is, serves.
                    actix_web::rt::spawn(async move {
                        let _ = sender.send(Ok(handle));
                    });
                    if let Err(error) = running.stopped().await {
                        eprintln!("the in-process registry on port {port} failed: {error:#}");
                    }
                });
            })
            .expect("start the server's thread");
        let handle = match started.recv_timeout(Duration::from_secs(30)) {
            Ok(Ok(handle)) => handle,
            Ok(Err(error)) => panic!("the registry did not start: {error}"),
            Err(_) => panic!("the registry did not start within 30 s"),
        };
        Self {
            process: Process::InProcess {
                handle,
                thread: Some(thread),
                clock,
            },
            base: registry_testkit::settings::base_url(port),
            port,
            database_url,
            client: client(),
        }
    }

    fn spawn_binary(options: &ServerOptions, database_url: String) -> Self {
        let log_dir = TempDir::new("registry-log");
        let launch = Launch::new(&registry_binary(), &log_dir.join("server.log"));
        let process = launch
            .start(&settings_for(&database_url, options))
            .unwrap_or_else(|error| panic!("the registry did not start: {error}"));
        let port = process.port;
        Self {
            process: Process::Binary {
                process,
                _log_dir: log_dir,
            },
            base: registry_testkit::settings::base_url(port),
            port,
            database_url,
            client: client(),
        }
    }

    /// The same server, called at `https://{host}:{port}` by a client that trusts `ca_pem`
    /// (a server started with `REGISTRY_TLS_CERT` and `REGISTRY_TLS_KEY`).
    pub fn over_https(mut self, ca_pem: &str, host: &str) -> Self {
        self.base = format!("https://{host}:{}", self.port);
        self.client = https_client(&[ca_pem], &[host], self.port);
        self
    }

    /// Moves the server's clock `seconds` further ahead than it is (an in-process server); the
    /// server reads the new time at once.
    pub fn advance_clock(&self, seconds: i64) {
        match &self.process {
            Process::InProcess { clock, .. } => clock.advance(seconds),
            Process::Binary { .. } => panic!("only an in-process server's clock moves"),
        }
    }

    fn binary(&self, needs: &str) -> &Launched {
        match &self.process {
            Process::Binary { process, .. } => process,
            Process::InProcess { .. } => {
                panic!(
                    "{needs} needs the binary: start it with ServerOptions {{ binary: true, .. }}"
                )
            }
        }
    }

    /// The server's process id (the binary).
    pub fn pid(&self) -> u32 {
        self.binary("a process id").pid()
    }

    /// The server's resident memory now, in KiB (`VmRSS`; the binary).
    pub fn rss_kib(&self) -> u64 {
        self.binary("its memory")
            .rss_kib()
            .expect("the server's VmRSS")
    }

    /// What the server logged so far (the binary).
    pub fn log(&self) -> String {
        match &self.process {
            Process::Binary { process, .. } => {
                std::fs::read_to_string(&process.log).unwrap_or_default()
            }
            Process::InProcess { .. } => {
                panic!("an in-process server has no log of its own: start the binary (ServerOptions {{ binary: true, .. }})")
            }
        }
    }

    /// The server's log once `logged` holds of it, or as it stands after 10 s (the binary).
    /// The binary writes its log through per-thread buffers a background thread flushes every
    /// 50 ms: on a loaded machine a line may reach the file well after its request was answered.
    pub fn log_when(&self, logged: impl Fn(&str) -> bool) -> String {
        let mut log = String::new();
        super::wait::within(Duration::from_secs(10), || {
            log = self.log();
            logged(&log)
        });
        log
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

    /// A new anonymous service (`POST /anonymous/services`, answered 201): its subdomain and
    /// secret.
    pub fn anonymous_service(&self) -> (String, String) {
        let response = self
            .request(reqwest::Method::POST, "/anonymous/services")
            .json(&serde_json::json!({"title": "try"}))
            .send()
            .expect("POST /anonymous/services");
        assert_eq!(response.status(), 201);
        let body = json(response);
        (
            body["service"]["subdomain"]
                .as_str()
                .expect("a subdomain")
                .to_owned(),
            body["secret"].as_str().expect("a secret").to_owned(),
        )
    }

    /// `/metrics` as the server answers it now.
    pub fn metrics_text(&self) -> String {
        self.request(reqwest::Method::GET, "/metrics")
            .send()
            .and_then(Response::text)
            .expect("GET /metrics")
    }

    /// The value of a metric without labels, scraped from `/metrics` now.
    pub fn metric(&self, name: &str) -> u64 {
        metric_in(&self.metrics_text(), name)
    }

    /// The hosted issuer URL of a subdomain.
    pub fn issuer(&self, subdomain: &str) -> String {
        format!("http://{subdomain}.localhost:{}", self.port)
    }

    /// Sends SIGTERM to the binary and waits for its exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        self.terminated()
    }

    /// Stops the binary (SIGTERM) and returns its whole log, every buffer written out at exit.
    /// For what must *not* be in the log: a read while it runs may miss the newest lines, still
    /// in a buffer, and so pass without having searched them.
    pub fn final_log(mut self) -> String {
        let status = self.terminated();
        assert!(status.success(), "the registry exited with {status}");
        self.log()
    }

    /// Sends the signal `name` (`TERM`, `INT`) to the binary.
    pub fn signal(&self, name: &str) {
        self.binary("a signal").signal(name).expect("kill");
    }

    /// The binary's exit status, once it has exited by itself (within `limit`).
    pub fn exit_within(mut self, limit: std::time::Duration) -> std::process::ExitStatus {
        self.binary("an exit");
        let Process::Binary { process, .. } = &mut self.process else {
            unreachable!("checked above")
        };
        process.exit_within(limit).expect("the registry exits")
    }

    fn terminated(&mut self) -> std::process::ExitStatus {
        self.binary("SIGTERM");
        let Process::Binary { process, .. } = &mut self.process else {
            unreachable!("checked above")
        };
        process.terminate().expect("the registry stops on SIGTERM")
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        match &mut self.process {
            // Killed when its `Launched` is dropped.
            Process::Binary { .. } => {}
            Process::InProcess { handle, thread, .. } => {
                // Sent at once; the thread ends when the server has stopped and closed its
                // store, so that the next server on the same database finds it free.
                drop(handle.stop(false));
                if let Some(thread) = thread.take() {
                    let _ = thread.join();
                }
            }
        }
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

/// Runs `registry ARGS` with nothing of this process's environment but `PATH`, and `env`:
/// its exit code, stdout and stderr.
pub fn run_registry(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let output = Command::new(registry_binary())
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.iter().copied())
        .output()
        .expect("run registry");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
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

/// The value of one series (`name{labels}`, or a name without labels) in a Prometheus text;
/// panics when it is missing.
pub fn series_in(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("series {series} missing in\n{text}"))
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

/// Asserts a problem response: status, content type, slug, and `instance` the request's id;
/// returns the body without `instance`.
pub fn assert_problem(response: Response, status: u16, slug: &str) -> Value {
    assert_eq!(response.status().as_u16(), status, "status");
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let request_id = response
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut body = json(response);
    // `instance` is the request's id, different for every request: checked here, then left
    // out, so that callers compare what the problem says.
    if let (Some(id), Some(fields)) = (request_id, body.as_object_mut()) {
        let instance = fields.remove("instance");
        assert_eq!(
            instance.as_ref().and_then(Value::as_str),
            Some(id.as_str()),
            "the problem's instance is not its request's id"
        );
    }
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

/// A server that admits `http` and loopback issuers, as the test issuer is.
pub fn insecure_server() -> TestServer {
    TestServer::start_with(ServerOptions {
        env: vec![("REGISTRY_OIDC_ALLOW_INSECURE_ISSUERS".into(), "true".into())],
        ..ServerOptions::default()
    })
}

/// The real binary, admitting `http` and loopback issuers (tests that read its log).
pub fn insecure_binary_server() -> TestServer {
    TestServer::start_with(ServerOptions::binary(&[(
        "REGISTRY_OIDC_ALLOW_INSECURE_ISSUERS",
        "true",
    )]))
}

/// Claims of a token for `iss` and `sub`, with [`AUDIENCE`], issued now, living ten minutes.
pub fn claims(iss: &str, sub: &str) -> Value {
    let now = unix_now();
    serde_json::json!({"iss": iss, "sub": sub, "aud": AUDIENCE, "iat": now, "exp": now + 600})
}
