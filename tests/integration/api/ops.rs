use registry_tests::server::{
    json, metric_in, registry_binary, run_cli, run_registry, series_in, ServerOptions, TestServer,
};
use reqwest::Method;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

/// On SQLite, a database nothing can be read from is down for `/readyz` and
/// `registry_database_up`, as a PostgreSQL one out of reach is (`api::outage`): `SELECT 1`,
/// which SQLite answers without reading the file, said "up" while every read failed. Once
/// readable again, it is up again.
#[test]
fn an_unreadable_sqlite_database_is_down() {
    if registry_tests::backend_name() != "sqlite" {
        // PostgreSQL's outage is `api::outage`'s, on its own pass.
        return;
    }
    let server = TestServer::start();
    let ready = json(server.request(Method::GET, "/readyz").send().unwrap());
    assert_eq!(ready["primary"], "up", "{ready}");
    let held = registry_tests::hold_sqlite_reads(&server.database_url);
    let ready = json(server.request(Method::GET, "/readyz").send().unwrap());
    assert_eq!(ready["status"], "degraded", "{ready}");
    assert_eq!(ready["primary"], "down", "{ready}");
    let text = server.metrics_text();
    assert!(
        text.contains("registry_database_up{side=\"primary\"} 0"),
        "{text}"
    );
    drop(held);
    let back = registry_tests::wait::within(std::time::Duration::from_secs(15), || {
        json(server.request(Method::GET, "/readyz").send().unwrap())["primary"] == "up"
    });
    assert!(back, "the database stayed down once readable");
}

#[test]
fn health_readiness_and_metrics() {
    let server = TestServer::start();
    assert_eq!(
        json(server.request(Method::GET, "/healthz").send().unwrap()),
        json!({"status": "ok"})
    );
    assert_eq!(server.status_of("/readyz"), 200);
    let acme = server.customer("acme", "business");
    for _ in 0..5 {
        let response = server
            .authed(Method::GET, "/services", &acme.token)
            .send()
            .unwrap();
        assert_eq!(response.status(), 200);
    }
    let text = server.metrics_text();
    // argon2 ran once for the token; the four other requests used the verification cache.
    assert_eq!(metric_in(&text, "registry_argon2_verifications_total"), 1);
    assert_eq!(metric_in(&text, "registry_token_cache_hits_total"), 4);
    assert_eq!(metric_in(&text, "registry_remembered_secrets"), 1);
    assert_eq!(metric_in(&text, "registry_remembered_identity_tokens"), 0);
    assert!(
        text.contains(
            "registry_http_requests_total{route=\"/services\",method=\"GET\",status=\"200\"} 5"
        ),
        "{text}"
    );
    assert!(text.contains(
        "registry_http_request_duration_seconds_bucket{le=\"0.0005\",route=\"/services\"}"
    ));
}

/// `/metrics` read by the Prometheus project's own Python parser (`prometheus_client`, which
/// `cargo xtask test` installs and names in `REGISTRY_TEST_PYTHON`): every family is there with
/// its type, and the exposition is valid OpenMetrics.
#[test]
fn metrics_parse_with_the_prometheus_parser() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    assert_eq!(server.get("/services", &acme.token).status(), 200);
    let response = server.request(Method::GET, "/metrics").send().unwrap();
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/openmetrics-text"));
    let text = response.text().unwrap();
    let python = std::env::var("REGISTRY_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = "import json, sys\n\
        from prometheus_client.openmetrics.parser import text_string_to_metric_families\n\
        families = {f.name: f.type for f in text_string_to_metric_families(sys.stdin.read())}\n\
        print(json.dumps(families))\n";
    let mut child = Command::new(&python)
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{python}: {e} (run the tests with cargo xtask test)"));
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), text.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "the parser refused /metrics (or prometheus_client is not installed: run the tests with \
         cargo xtask test): {}\n{text}",
        String::from_utf8_lossy(&output.stderr)
    );
    let families: Value = serde_json::from_slice(&output.stdout).unwrap();
    for (name, kind) in [
        ("registry_http_requests", "counter"),
        ("registry_http_request_duration_seconds", "histogram"),
        ("registry_hosting_cache_hits", "counter"),
        ("registry_hosting_cache_misses", "counter"),
        ("registry_token_cache_hits", "counter"),
        ("registry_identity_token_cache_hits", "counter"),
        ("registry_argon2_verifications", "counter"),
        ("registry_hosted_issuers", "gauge"),
        ("registry_hosted_bytes", "gauge"),
        ("registry_hosting_reads", "counter"),
        ("registry_hosting_remembered_misses", "gauge"),
        ("registry_trusted_issuers", "gauge"),
        ("registry_remembered_secrets", "gauge"),
        ("registry_remembered_identity_tokens", "gauge"),
        ("registry_oidc_key_fetches", "counter"),
        ("registry_oidc_key_fetch_failures", "counter"),
        ("registry_oidc_key_cache_hits", "counter"),
        ("registry_rate_limited_addresses", "gauge"),
        ("registry_last_used_statements", "counter"),
        ("registry_last_used_rows_written", "counter"),
        ("registry_build_info", "gauge"),
        ("registry_database_up", "gauge"),
        ("registry_database_connections", "gauge"),
        ("process_resident_memory_bytes", "gauge"),
        ("process_open_fds", "gauge"),
        ("process_start_time_seconds", "gauge"),
        ("process_cpu_seconds", "counter"),
    ] {
        assert_eq!(families[name], kind, "{name} in {families}");
    }
}

/// What an operator reads off `/metrics` besides the requests: which build runs, how the process
/// does, whether each side of the database answers and how its pool is used.
#[test]
fn metrics_name_the_build_the_process_and_the_database() {
    let server = TestServer::start();
    let text = server.metrics_text();
    let line = |prefix: &str| {
        text.lines()
            .find(|line| line.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in {text}"))
            .to_owned()
    };
    let build = line("registry_build_info{");
    assert!(
        build.contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION")))
            && build.contains("commit=\"")
            && build.ends_with(" 1.0"),
        "{build}"
    );
    assert_eq!(
        series_in(&text, "registry_database_up{side=\"primary\"}"),
        1.0
    );
    assert!(
        !text.contains("registry_database_up{side=\"read_replica\"}"),
        "{text}"
    );
    let connections = |state: &str| {
        let series = format!("registry_database_connections{{side=\"primary\",state=\"{state}\"}}");
        series_in(&text, &series)
    };
    assert!(connections("idle") + connections("in_use") >= 1.0, "{text}");
    assert!(series_in(&text, "process_resident_memory_bytes") > 1e6);
    assert!(series_in(&text, "process_open_fds") >= 3.0);
    let started = series_in(&text, "process_start_time_seconds");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        started <= now + 1.0 && started > now - 3600.0,
        "{started} {now}"
    );
}

/// Every problem's `type` resolves to a page saying what it means and what to do (HTML for a
/// browser, JSON for a program), and `instance` is the request's id.
#[test]
fn problems_explain_themselves_and_name_their_request() {
    let server = TestServer::start();
    let response = server
        .request(Method::GET, "/services")
        .header("x-request-id", "trace-42")
        .send()
        .unwrap();
    assert_eq!(response.headers()["x-request-id"], "trace-42");
    let problem = json(response);
    assert_eq!(problem["instance"], "trace-42", "{problem}");
    let made = server
        .request(Method::GET, "/no-such-endpoint")
        .send()
        .unwrap();
    let id = made.headers()["x-request-id"].to_str().unwrap().to_owned();
    assert_eq!(json(made)["instance"], id.as_str());
    // A problem on an issuer host too.
    let hosted = server
        .hosted(
            Method::GET,
            "nothing-here",
            "/.well-known/openid-configuration",
        )
        .send()
        .unwrap();
    let id = hosted.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(json(hosted)["instance"], id.as_str());

    let page_url = problem["type"].as_str().unwrap();
    assert!(page_url.ends_with("/problems/unauthorized"), "{page_url}");
    let path = &page_url[page_url.find("/problems/").unwrap()..];
    let page = server.request(Method::GET, path).send().unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    // Plain text under a policy that lets nothing run, load or frame it (the console probe).
    let csp = page.headers()["content-security-policy"].to_str().unwrap();
    assert!(
        csp.starts_with("default-src 'none'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    assert_eq!(page.headers()["x-content-type-options"], "nosniff");
    let html = page.text().unwrap();
    assert!(
        html.contains("<h1>Unauthorized</h1>") && html.contains("What to do"),
        "{html}"
    );
    let described = json(
        server
            .request(Method::GET, path)
            .header("accept", "application/json")
            .send()
            .unwrap(),
    );
    assert_eq!(described["type"], page_url);
    assert_eq!(described["status"], 401);
    assert_eq!(described["title"], "Unauthorized");
    assert!(described["whatToDo"].as_str().unwrap().contains("Bearer"));
    // Every slug the API answers has a page.
    for slug in [
        "invalid-json",
        "validation-failed",
        "unknown-services",
        "kind-immutable",
        "kid-reused",
        "invalid-service-name",
        "unauthorized",
        "forbidden",
        "action-not-allowed",
        "plan-required",
        "not-found",
        "method-not-allowed",
        "conflict",
        "request-timeout",
        "quota-exceeded",
        "payload-too-large",
        "unsupported-media-type",
        "rate-limited",
        "database-unavailable",
        "unavailable",
        "capacity",
        "internal",
    ] {
        let page = server
            .request(Method::GET, &format!("/problems/{slug}"))
            .send()
            .unwrap();
        assert_eq!(page.status(), 200, "{slug}");
    }
    let unknown = server
        .request(Method::GET, "/problems/no-such-problem")
        .send()
        .unwrap();
    assert_eq!(unknown.status(), 404);
}

/// The request line names the client (none made up where a forwarding chain does not reveal
/// it), the host, the User-Agent (cut to 100 characters) and, where no route pattern does, the
/// path; every line logged while a request is served names its id; JSON values are plain values.
#[test]
fn request_logs_say_who_asked_for_what() {
    let server = TestServer::start_with(registry_tests::server::ServerOptions::binary(&[
        ("REGISTRY_LOG_FORMAT", "json"),
        ("REGISTRY_TRUSTED_PROXIES", "127.0.0.1/32"),
    ]));
    let agent = format!("curl/8.0 {}", "x".repeat(200));
    let _ = server
        .hosted(
            Method::GET,
            "nothing-here",
            "/.well-known/openid-configuration",
        )
        .header("user-agent", &agent)
        .send()
        .unwrap();
    let refused = server
        .request(Method::GET, "/services")
        .header(
            "authorization",
            "Bearer rgst_0000000000000000_wrongwrongwrongwrongwrongwrongwrongwrong",
        )
        .header("x-request-id", "refused-1")
        .send()
        .unwrap();
    assert_eq!(refused.status(), 401);
    let unrevealed = server
        .request(Method::GET, "/openapi.json")
        .header("forwarded", "for=unknown")
        .header("x-request-id", "unrevealed-1")
        .send()
        .unwrap();
    assert_eq!(unrevealed.status(), 200);
    let log = server.log_when(|log| {
        [
            "nothing-here.",
            "refused-1",
            "authentication failed",
            "unrevealed-1",
        ]
        .iter()
        .all(|line| log.contains(line))
    });
    let lines: Vec<Value> = log
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    let hosted = lines
        .iter()
        .find(|l| l["message"] == "request" && l["route"] == "(hosted)")
        .unwrap_or_else(|| panic!("no hosted request line in {log}"));
    assert_eq!(
        hosted["path"], "/.well-known/openid-configuration",
        "{hosted}"
    );
    assert_eq!(hosted["client"], "127.0.0.1", "{hosted}");
    assert!(
        hosted["host"]
            .as_str()
            .unwrap()
            .starts_with("nothing-here."),
        "{hosted}"
    );
    assert_eq!(
        hosted["user_agent"].as_str().unwrap(),
        &agent[..100],
        "{hosted}"
    );
    let api = lines
        .iter()
        .find(|l| l["message"] == "request" && l["request_id"] == "refused-1")
        .unwrap_or_else(|| panic!("no request line of refused-1 in {log}"));
    assert_eq!(api["route"], "/services", "{api}");
    assert!(api.get("path").is_none(), "{api}");
    assert_eq!(api["client"], "127.0.0.1", "{api}");
    let unrevealed = lines
        .iter()
        .find(|l| l["message"] == "request" && l["request_id"] == "unrevealed-1")
        .unwrap_or_else(|| panic!("no request line of unrevealed-1 in {log}"));
    assert!(unrevealed.get("client").is_none(), "{unrevealed}");
    let failed = lines
        .iter()
        .find(|l| l["message"] == "authentication failed")
        .unwrap_or_else(|| panic!("no authentication failure in {log}"));
    assert_eq!(failed["span"]["request_id"], "refused-1", "{failed}");
    let roots = lines
        .iter()
        .find(|l| l["message"] == "TLS trusts the certificate authorities found here");
    if let Some(roots) = roots {
        assert!(!roots.to_string().contains("Some("), "{roots}");
    }
}

/// Wherever GET is served, HEAD is too: the same status and headers, no body.
#[test]
fn head_answers_like_get_without_a_body() {
    let server = TestServer::start();
    let acme = server.customer("acme", "team");
    for (path, token) in [
        ("/healthz", None),
        ("/openapi.json", None),
        ("/services", Some(acme.token.as_str())),
        ("/service-accounts", Some(acme.token.as_str())),
    ] {
        let request = |method: Method| {
            let request = server.request(method, path);
            match token {
                Some(token) => request.bearer_auth(token),
                None => request,
            }
        };
        let get = request(Method::GET).send().unwrap();
        assert_eq!(get.status(), 200, "{path}");
        let head = request(Method::HEAD).send().unwrap();
        assert_eq!(head.status(), get.status(), "{path}");
        assert_eq!(
            head.headers().get("content-type"),
            get.headers().get("content-type"),
            "{path}"
        );
        assert!(head.bytes().unwrap().is_empty(), "{path}");
        assert!(!get.bytes().unwrap().is_empty(), "{path}");
    }
    let unauthenticated = server.request(Method::HEAD, "/services").send().unwrap();
    assert_eq!(unauthenticated.status(), 401);
}

#[test]
fn openapi_documents_exactly_the_methods_each_route_serves() {
    // With the fetch-log token, every documented route is served (without it, `/fetch-log`
    // answers any method as an unknown path).
    let server = TestServer::start_with(ServerOptions {
        env: vec![(
            "REGISTRY_FETCH_LOG_TOKEN".into(),
            "fetch-log-token-of-32-characters!".into(),
        )],
        ..ServerOptions::default()
    });
    let doc = json(server.request(Method::GET, "/openapi.json").send().unwrap());
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(doc["servers"][0]["url"], server.base.as_str());
    assert_eq!(
        doc["x-public-hosting"]["issuerUrlTemplate"],
        server.issuer("{subdomain}")
    );
    let paths = doc["paths"].as_object().unwrap();
    assert!(paths.len() >= 12, "{}", paths.len());
    for (path, item) in paths {
        let concrete = path
            .replace("{subdomain}", "some-acme")
            .replace("{id}", "00000000-0000-0000-0000-000000000000");
        let mut documented: Vec<String> = item
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| ["get", "put", "post", "delete", "patch"].contains(&k.as_str()))
            .map(|k| k.to_uppercase())
            .collect();
        // HEAD goes with GET (RFC 9110), undocumented as an operation of its own.
        if documented.iter().any(|m| m == "GET") {
            documented.push("HEAD".into());
        }
        documented.sort();
        // TRACE is served by no route, so the 405 lists what the route really has.
        let response = server.request(Method::TRACE, &concrete).send().unwrap();
        assert_eq!(response.status(), 405, "{path}");
        let mut allowed: Vec<String> = response.headers()["allow"]
            .to_str()
            .unwrap()
            .split(", ")
            .map(str::to_owned)
            .collect();
        allowed.sort();
        assert_eq!(allowed, documented, "{path}");
    }
}

/// A call that reads a body, even one that takes none (a `DELETE`), refuses text that is not
/// JSON with 415: exactly those operations document 415, and with it the body's 400, 408 and
/// 413.
#[test]
fn openapi_documents_the_body_refusals_of_every_call_that_reads_one() {
    let shipper = "fetch-log-token-of-32-characters!";
    let server = TestServer::start_with(ServerOptions {
        env: vec![("REGISTRY_FETCH_LOG_TOKEN".into(), shipper.into())],
        ..ServerOptions::default()
    });
    let acme = server.customer("acme", "business");
    // Resources that exist: some calls look their resource up before they read the body.
    let created = server
        .authed(Method::POST, "/services", &acme.token)
        .json(&json!({"title": "some", "serviceName": "some"}))
        .send()
        .unwrap();
    assert_eq!(created.status(), 201);
    // Only an account granted `tokens:sign` gets as far as a signature's body.
    let signer = super::signing::account_for(&server, &acme, "some-acme", &["tokens:sign"]);
    let doc = json(server.request(Method::GET, "/openapi.json").send().unwrap());
    let (mut reading, mut wrong) = (0, Vec::new());
    for (path, item) in doc["paths"].as_object().unwrap() {
        let concrete = path
            .replace("{subdomain}", "some-acme")
            .replace("{id}", &acme.account_id)
            .replace("{kid}", "k1")
            .replace("{agent}", "agent");
        for (method, operation) in item.as_object().unwrap() {
            let method = match method.as_str() {
                "post" => Method::POST,
                "put" => Method::PUT,
                "patch" => Method::PATCH,
                "delete" => Method::DELETE,
                _ => continue,
            };
            let token = match path.as_str() {
                "/fetch-log" => shipper,
                "/services/{subdomain}/sign" => &signer,
                _ => &acme.token,
            };
            let status = server
                .request(method.clone(), &concrete)
                .bearer_auth(token)
                .header("content-type", "text/plain")
                .body("x")
                .send()
                .unwrap()
                .status();
            let documented = |code: &str| operation["responses"].get(code).is_some();
            let reads_a_body = status == 415;
            reading += usize::from(reads_a_body);
            if documented("415") != reads_a_body {
                wrong.push(format!("{method} {path}: {status}"));
            }
            if reads_a_body && !["400", "408", "413"].into_iter().all(documented) {
                wrong.push(format!("{method} {path}: 400, 408 or 413 undocumented"));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    assert!(reading >= 20, "{reading}");
}

#[test]
fn the_policy_schema_is_served_with_this_servers_address() {
    let server = TestServer::start();
    let response = server
        .request(Method::GET, "/schemas/service-account-policy/v1.json")
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    let schema: Value = json(response);
    assert_eq!(
        schema["$id"],
        format!("{}/schemas/service-account-policy/v1.json", server.base)
    );
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
}

/// A start on a fresh database is quiet: on SQLite the pool's first connection used to race the
/// migrations for the switch to WAL and log `ERROR r2d2: database is locked` (10 starts in 20).
#[test]
fn a_fresh_start_logs_no_error() {
    for _ in 0..5 {
        let server = TestServer::start_binary();
        assert_eq!(server.status_of("/readyz"), 200);
        let log = server.final_log();
        assert!(!log.contains("ERROR"), "{log}");
    }
}

#[test]
fn sigterm_stops_the_server_cleanly() {
    let server = TestServer::start_binary();
    assert!(server.terminate().success());
}

/// A graceful stop closes the connections that sit idle between requests at once (each worker
/// hears of it through its own signal, `listeners::WorkerShutdown`), on every worker: the
/// process does not wait for their keep-alive to run out.
#[test]
fn sigterm_closes_idle_keep_alive_connections_at_once() {
    use std::io::{Read, Write};
    let server = TestServer::start_with(ServerOptions::binary(&[("REGISTRY_WORKERS", "2")]));
    let mut idle: Vec<std::net::TcpStream> = (0..8)
        .map(|_| {
            let mut stream = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
            stream
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
                .unwrap();
            let mut answer = [0u8; 512];
            let read = stream.read(&mut answer).unwrap();
            assert!(answer[..read].starts_with(b"HTTP/1.1 200"));
            stream
        })
        .collect();
    let asked = std::time::Instant::now();
    assert!(server.terminate().success());
    assert!(
        asked.elapsed() < std::time::Duration::from_secs(4),
        "stopped after {:?}: it waited for idle connections",
        asked.elapsed()
    );
    for stream in &mut idle {
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(1)))
            .unwrap();
        let mut rest = Vec::new();
        assert!(
            stream.read_to_end(&mut rest).is_ok(),
            "closed, not left open"
        );
    }
}

/// While a replica starts (here: waiting for the migration lock another process holds), its
/// listener answers: `/healthz` 200, `/readyz` 503 `unavailable` with `Retry-After`; once it
/// has started, `/readyz` is 200.
#[test]
fn readiness_is_503_while_the_replica_starts_and_health_answers() {
    let database_url = registry_tests::fresh_database_url();
    let (migrated, _, stderr) = run_registry(
        &["migrate"],
        &[("REGISTRY_DATABASE_URL", database_url.as_str())],
    );
    assert_eq!(migrated, Some(0), "{stderr}");
    let lock = registry_tests::hold_migration_lock(&database_url);
    let port = registry_testkit::free_port().unwrap();
    let mut child = Command::new(registry_binary())
        .arg("serve")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("REGISTRY_LISTEN", format!("127.0.0.1:{port}"))
        .env("REGISTRY_DATABASE_URL", &database_url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn registry");
    let client = reqwest::blocking::Client::new();
    let get = |path: &str| {
        client
            .get(format!("http://127.0.0.1:{port}{path}"))
            .timeout(std::time::Duration::from_secs(2))
            .send()
    };
    let healthy = registry_tests::wait::within(std::time::Duration::from_secs(10), || {
        get("/healthz").is_ok_and(|r| r.status() == 200)
    });
    assert!(healthy, "/healthz does not answer while the replica starts");
    let starting = get("/readyz").unwrap();
    assert_eq!(starting.headers()["retry-after"], "1");
    assert!(starting.headers().contains_key("x-request-id"));
    let problem = registry_tests::server::assert_problem(starting, 503, "unavailable");
    assert!(
        problem["detail"].as_str().unwrap().contains("starting"),
        "{problem}"
    );
    assert_eq!(get("/services").unwrap().status(), 503);
    drop(lock);
    let ready = registry_tests::wait::within(std::time::Duration::from_secs(10), || {
        get("/readyz").is_ok_and(|r| r.status() == 200)
    });
    assert!(ready, "/readyz after the start");
    assert_eq!(get("/services").unwrap().status(), 401);
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(child.wait().unwrap().success());
}

/// After SIGTERM the replica drains: `/readyz` answers 503 `draining` (on a new connection)
/// while a request that came before the signal is still in flight, that request is answered,
/// and the process then exits by itself, cleanly.
#[test]
fn sigterm_drains_readiness_answers_503_until_the_request_in_flight_is_answered() {
    use std::io::{Read, Write};
    let server = TestServer::start_binary();
    let mut slow = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    let body = br#"{"title": "drained"}"#;
    let (first, rest) = body.split_at(5);
    write!(
        slow,
        "POST /anonymous/services HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    slow.write_all(first).unwrap();
    slow.flush().unwrap();
    // The handler waits for the rest of the body (given time to begin on a loaded machine:
    // a signal before the request is in flight finds nothing to drain).
    std::thread::sleep(std::time::Duration::from_millis(1500));
    server.signal("TERM");
    let mut readiness = Value::Null;
    let draining = registry_tests::wait::within(std::time::Duration::from_secs(5), || {
        let response = server.request(Method::GET, "/readyz").send().unwrap();
        let status = response.status();
        readiness = json(response);
        status == 503
    });
    assert!(draining, "/readyz after SIGTERM: {readiness}");
    assert_eq!(readiness["status"], "draining", "{readiness}");
    // Still serving meanwhile, each answer closing its connection (keep-alive clients go
    // elsewhere); the body's end is read and the request answered.
    let health = server.request(Method::GET, "/healthz").send().unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(health.headers()["connection"], "close");
    slow.write_all(rest).unwrap();
    slow.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut answer = [0u8; 64];
    let read = slow.read(&mut answer).unwrap();
    assert!(
        answer[..read].starts_with(b"HTTP/1.1 201"),
        "{}",
        String::from_utf8_lossy(&answer[..read])
    );
    drop(slow);
    let status = server.exit_within(std::time::Duration::from_secs(10));
    assert!(status.success(), "{status}");
}

/// A second signal while the replica drains ends it at once, exit status 1: an operator's
/// second Ctrl-C does not wait for a request that hangs.
#[test]
fn a_second_signal_while_draining_stops_at_once() {
    use std::io::Write;
    let server = TestServer::start_binary();
    let mut slow = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    slow.write_all(
        b"POST /anonymous/services HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 20\r\n\r\n{",
    )
    .unwrap();
    // In flight before the signal, on a loaded machine too.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    server.signal("TERM");
    let draining = registry_tests::wait::within(std::time::Duration::from_secs(5), || {
        server.status_of("/readyz") == 503
    });
    assert!(draining);
    server.signal("INT");
    let status = server.exit_within(std::time::Duration::from_secs(3));
    assert_eq!(status.code(), Some(1), "{status}");
    drop(slow);
}

/// Scripts send SIGTERM as soon as the server has said where it listens. The line used to come
/// before the signal handlers were installed, and such a SIGTERM killed the process outright
/// (32 of 40 times in a shell loop).
#[test]
fn sigterm_right_after_the_listening_line_stops_the_server_cleanly() {
    let database_url = registry_tests::fresh_database_url();
    for run in 0..10 {
        let mut child = Command::new(registry_binary())
            .arg("serve")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("REGISTRY_LISTEN", "127.0.0.1:0")
            .env("REGISTRY_DATABASE_URL", &database_url)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn registry");
        let stdout = child.stdout.take().expect("stdout");
        // Kept open until the process has exited: it may still print.
        let mut lines = BufReader::new(stdout).lines();
        let announced = lines
            .by_ref()
            .map_while(Result::ok)
            .any(|line| line.contains("listening on"));
        assert!(announced, "run {run}: no listening line");
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("kill");
        let status = child.wait().expect("wait");
        assert!(status.success(), "run {run}: {status}");
    }
}

/// A URL in the environment may carry a password: `--help` names the variable, never its value.
#[test]
fn help_never_prints_a_url_from_the_environment() {
    let secret = "S3cretPW";
    let url = format!("postgres://u:{secret}@db.example/x");
    let env = [
        ("REGISTRY_DATABASE_URL", url.as_str()),
        ("REGISTRY_DATABASE_READ_URL", url.as_str()),
        (
            "REGISTRY_PURGE_URLS",
            "http://purger:S3cretPW@cache.example",
        ),
    ];
    for command in [
        &["serve", "--help"][..],
        &["migrate", "--help"],
        &["customer", "list", "--help"],
        &["customer", "create", "--help"],
        &["audit", "--help"],
    ] {
        let (code, stdout, stderr) = run_registry(command, &env);
        assert_eq!(code, Some(0), "{command:?}: {stderr}");
        assert!(
            stdout.contains("REGISTRY_DATABASE_URL"),
            "{command:?}: {stdout}"
        );
        assert!(
            !stdout.contains(secret),
            "{command:?} printed the password: {stdout}"
        );
    }
    // The API's URL too, which a call refuses when it holds a password.
    let api = [("REGISTRY_API_URL", "http://u:S3cretPW@registry.example")];
    for command in [
        &["services", "list", "--help"][..],
        &["keys", "wait", "--help"],
        &["fetch-log", "--help"],
        &["sync", "--help"],
    ] {
        let (code, stdout, stderr) = run_registry(command, &api);
        assert_eq!(code, Some(0), "{command:?}: {stderr}");
        assert!(stdout.contains("REGISTRY_API_URL"), "{command:?}: {stdout}");
        assert!(
            !stdout.contains(secret),
            "{command:?} printed the password: {stdout}"
        );
    }
}

/// The operator's commands never make a database up: a command run from the wrong directory,
/// or with a mistyped URL, says so instead of creating an empty one. `migrate` creates it,
/// `migrate --check` says what is pending without changing anything.
#[test]
fn commands_never_invent_a_database() {
    let dir = registry_tests::server::TempDir::new("no-database");
    let missing = dir.join("nothere.db");
    let url = format!("sqlite://{}", missing.display());
    let (code, stdout, stderr) = run_registry(&["customer", "list", "--database-url", &url], &[]);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains(&missing.display().to_string()) && stderr.contains("no database"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        !missing.exists(),
        "the command created {}",
        missing.display()
    );
    // The same from the environment, for `audit` too.
    let (code, _, stderr) = run_registry(
        &["audit", "--tenant", "acme"],
        &[("REGISTRY_DATABASE_URL", &url)],
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(!missing.exists());

    // An existing file that holds no registry.
    let empty = dir.join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    let empty_url = format!("sqlite://{}", empty.display());
    let (code, _, stderr) = run_registry(&["customer", "list", "--database-url", &empty_url], &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("holds no registry"), "{stderr}");
    // Left as it was: no database written into it, no journal files beside it.
    assert_eq!(std::fs::metadata(&empty).unwrap().len(), 0);
    assert!(!dir.join("empty.db-wal").exists() && !dir.join("empty.db-shm").exists());

    // `migrate --check`: everything pending, nothing created; `migrate` creates and applies.
    let (code, stdout, _) = run_registry(&["migrate", "--check", "--database-url", &url], &[]);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        stdout.contains("pending") && stdout.contains("_init"),
        "{stdout}"
    );
    assert!(!missing.exists());
    let (code, stdout, stderr) = run_registry(&["migrate", "--database-url", &url], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("up to date"), "{stdout}");
    let (code, stdout, _) = run_registry(&["migrate", "--check", "--database-url", &url], &[]);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains("up to date"), "{stdout}");
    let (code, stdout, stderr) = run_registry(&["customer", "list", "--database-url", &url], &[]);
    assert_eq!((code, stdout.trim()), (Some(0), "[]"), "{stderr}");

    // A database a newer registry migrated: refused by every command, `serve` included.
    let python = std::env::var("REGISTRY_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = format!(
        "import sqlite3; c = sqlite3.connect({:?}); \
         c.execute(\"INSERT INTO __diesel_schema_migrations (version) VALUES ('29990101000001')\"); \
         c.commit()",
        missing.display().to_string()
    );
    let inserted = Command::new(&python)
        .args(["-c", &script])
        .status()
        .unwrap();
    assert!(inserted.success());
    for args in [
        vec!["migrate", "--database-url", &url],
        vec!["migrate", "--check", "--database-url", &url],
        vec!["customer", "list", "--database-url", &url],
    ] {
        let (code, _, stderr) = run_registry(&args, &[]);
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains("newer than this binary") && stderr.contains("29990101000001"),
            "{args:?}: {stderr}"
        );
    }
    let (code, _, stderr) = run_registry(
        &["serve"],
        &[
            ("REGISTRY_DATABASE_URL", &url),
            ("REGISTRY_LISTEN", "127.0.0.1:0"),
        ],
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("newer than this binary"), "{stderr}");
}

/// `serve` checks what it can before it touches the database: a port in use is reported first
/// (and no database is created or migrated), and a bad value in a `REGISTRY_*` variable names
/// the variable, not a flag the operator never typed.
#[test]
fn serve_reports_its_settings_and_listeners_before_the_database() {
    let dir = registry_tests::server::TempDir::new("serve-checks");
    let database = dir.join("registry.db");
    let url = format!("sqlite://{}", database.display());
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let listen = taken.local_addr().unwrap().to_string();
    let (code, _, stderr) = run_registry(
        &["serve"],
        &[
            ("REGISTRY_DATABASE_URL", &url),
            ("REGISTRY_LISTEN", &listen),
        ],
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("cannot listen on"), "{stderr}");
    assert!(!stderr.contains("database migrated"), "{stderr}");
    assert!(
        !database.exists(),
        "serve touched the database before it could listen"
    );
    // Each setting parsed further is checked before the database too, its error naming it.
    let bad_settings = [
        ("REGISTRY_DATA_KEY", "not a key"),
        ("REGISTRY_PURGE_URLS", "ftp://cache.example"),
        ("REGISTRY_DATABASE_READ_URL", "mysql://db.example/registry"),
        ("REGISTRY_LISTEN", "localhost"),
        ("REGISTRY_BASE_URL", "registry.example.com"),
        (
            "REGISTRY_ISSUER_URL_TEMPLATE",
            "{subdomain}.oidc.example.com",
        ),
    ];
    for (variable, value) in bad_settings {
        let (code, _, stderr) = run_registry(
            &["serve"],
            &[("REGISTRY_DATABASE_URL", &url), (variable, value)],
        );
        assert_eq!(code, Some(1), "{variable}: {stderr}");
        assert!(stderr.contains(variable), "{variable}: {stderr}");
        assert!(!database.exists(), "{variable}: the database was touched");
    }
    // A cache's address with a password: refused, and the password shown nowhere.
    let (code, _, stderr) = run_registry(
        &["serve"],
        &[
            ("REGISTRY_DATABASE_URL", &url),
            ("REGISTRY_PURGE_URLS", "http://purger:s3cret@127.0.0.1:9"),
        ],
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("REGISTRY_PURGE_URLS"), "{stderr}");
    assert!(!stderr.contains("s3cret"), "{stderr}");
    assert!(!database.exists(), "the database was touched");
    // No workers at all, or no anonymous creation ever allowed (a limit of 0 allowed one an
    // hour): values the command line refuses (exit 2), naming the variable.
    for variable in ["REGISTRY_WORKERS", "REGISTRY_ANON_CREATE_PER_HOUR"] {
        let (code, _, stderr) = run_registry(
            &["serve"],
            &[("REGISTRY_DATABASE_URL", &url), (variable, "0")],
        );
        assert_eq!(code, Some(2), "{stderr}");
        assert!(stderr.contains(variable), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(!database.exists(), "{variable}: the database was touched");
    }
    // A database URL of no backend the registry knows names its variable too.
    let (code, _, stderr) = run_registry(
        &["serve"],
        &[("REGISTRY_DATABASE_URL", "mysql://db.example/registry")],
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("REGISTRY_DATABASE_URL"), "{stderr}");

    let (code, _, stderr) = run_registry(
        &["serve"],
        &[
            ("REGISTRY_DATABASE_URL", &url),
            ("REGISTRY_LOG_FORMAT", "yaml"),
        ],
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("REGISTRY_LOG_FORMAT") && !stderr.contains("--log-format"),
        "{stderr}"
    );
    // Typed on the command line, the flag is what is named.
    let (code, _, stderr) = run_registry(&["serve", "--log-format", "yaml"], &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--log-format"), "{stderr}");
    let (code, stdout, _) = run_registry(&["--version"], &[]);
    assert_eq!(code, Some(0));
    assert!(stdout.starts_with("registry "), "{stdout}");
}

/// A command that exited while the pool was still opening a PostgreSQL connection in the
/// background aborted in libpq's Kerberos teardown (`k5_mutex_lock`), about once in fifty runs.
#[test]
fn commands_exit_cleanly_every_time() {
    let server = TestServer::start();
    server.create_customer("acme", "team");
    for run in 0..100 {
        let list = run_cli(&["customer", "list"], &server.database_url)
            .unwrap_or_else(|stderr| panic!("run {run} failed: {stderr}"));
        assert_eq!(list[0]["tenant"], "acme", "run {run}");
    }
}

#[test]
fn customer_commands() {
    let server = TestServer::start();
    let out = server.create_customer("acme", "team");
    assert_eq!(out["customer"]["tenant"], "acme");
    assert_eq!(out["customer"]["plan"], "team");
    assert_eq!(out["customer"]["name"], "acme Inc");
    assert_eq!(
        out["serviceAccount"]["policy"],
        json!({"kind": "static", "services": ["*"]})
    );
    assert!(out["token"].as_str().unwrap().starts_with("rgst_"));
    let duplicate = run_cli(
        &[
            "customer", "create", "--tenant", "acme", "--plan", "free", "--name", "X",
        ],
        &server.database_url,
    );
    assert!(duplicate.unwrap_err().contains("taken"));
    let invalid = run_cli(
        &[
            "customer", "create", "--tenant", "anon", "--plan", "free", "--name", "X",
        ],
        &server.database_url,
    );
    assert!(invalid.unwrap_err().contains("tenant"));
    let bad_plan = run_cli(
        &[
            "customer", "create", "--tenant", "ok", "--plan", "gold", "--name", "X",
        ],
        &server.database_url,
    );
    assert!(bad_plan.unwrap_err().contains("plan"));
    // A plan that does not exist is a wrong command line: exit 2, as for any usage error.
    let (code, _, stderr) = run_registry(
        &["customer", "set-plan", "--tenant", "acme", "--plan", "gold"],
        &[("REGISTRY_DATABASE_URL", &server.database_url)],
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("free, team, business or enterprise"),
        "{stderr}"
    );
    let updated = run_cli(
        &[
            "customer", "set-plan", "--tenant", "acme", "--plan", "business",
        ],
        &server.database_url,
    )
    .unwrap();
    assert_eq!(updated["plan"], "business");
    let list = run_cli(&["customer", "list"], &server.database_url).unwrap();
    assert_eq!(list[0]["plan"], "business");
    assert!(run_cli(
        &["customer", "set-plan", "--tenant", "nobody", "--plan", "free"],
        &server.database_url
    )
    .is_err());
}

/// `customer set-plan` writes `customer.update` (docs/api.md, "Audit trail and last use"), by the
/// operator, into the customer's trail; setting the plan the customer already has changes nothing
/// and writes none.
#[test]
fn set_plan_writes_a_customer_update_event() {
    let server = TestServer::start();
    let acme = server.create_customer("acme", "team");
    let set_plan = |plan: &str| {
        run_cli(
            &["customer", "set-plan", "--tenant", "acme", "--plan", plan],
            &server.database_url,
        )
        .unwrap()
    };

    assert_eq!(set_plan("enterprise")["plan"], "enterprise");
    assert_eq!(set_plan("enterprise")["plan"], "enterprise");

    let events = super::audit::cli_audit(&server, &["--tenant", "acme"]);
    let actions: Vec<&str> = events
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["customer.update", "customer.create"]);
    let update = &events[0];
    assert_eq!(update["actor"], json!({"kind": "operator"}));
    assert_eq!(
        update["resource"],
        json!({"type": "customer", "id": acme["customer"]["id"]})
    );
    assert_eq!(
        update["changes"],
        json!({"plan": {"old": "team", "new": "enterprise"}})
    );
    let filtered = super::audit::cli_audit(
        &server,
        &["--tenant", "acme", "--action", "customer.update"],
    );
    assert_eq!(filtered, std::slice::from_ref(update));
}

/// `customer disable` and `customer enable` write `customer.disable` and `customer.enable`
/// (docs/api.md, "Audit trail and last use"), each with `disabledAt` before and after, seen
/// through `GET /audit-events` as through `registry audit`; doing either again writes none.
#[test]
fn disable_and_enable_are_audit_actions_of_their_own_saying_what_changed() {
    let server = TestServer::start();
    let acme = server.customer("acme", "team");
    let cli = |args: &[&str]| run_cli(args, &server.database_url).unwrap();

    let disabled = cli(&["customer", "disable", "--tenant", "acme"]);
    let since = disabled["disabledAt"].as_str().unwrap().to_owned();
    cli(&["customer", "disable", "--tenant", "acme"]);
    let enabled = cli(&["customer", "enable", "--tenant", "acme"]);
    assert!(enabled["disabledAt"].is_null());
    cli(&["customer", "enable", "--tenant", "acme"]);

    let events = super::audit::cli_audit(&server, &["--tenant", "acme"]);
    let actions: Vec<&str> = events
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        ["customer.enable", "customer.disable", "customer.create"]
    );
    assert_eq!(
        events[1]["changes"],
        json!({"disabledAt": {"old": null, "new": since}})
    );
    assert_eq!(
        events[0]["changes"],
        json!({"disabledAt": {"old": since, "new": null}})
    );
    assert_eq!(events[0]["actor"], json!({"kind": "operator"}));
    // The API shows the same, and filters by the new actions.
    let page = json(server.get("/audit-events?action=customer.disable", &acme.token));
    assert_eq!(page["events"].as_array().unwrap().len(), 1, "{page}");
    assert_eq!(page["events"][0], events[1]);
    let page = json(server.get("/audit-events?action=customer.update", &acme.token));
    assert_eq!(page["events"], json!([]), "{page}");
}

/// Every failing command says one sentence on stderr and exits 1, never with a backtrace or a
/// panic, even with `RUST_BACKTRACE=1` set as many Rust users have it; a wrong command line
/// exits 2 with its usage.
#[test]
fn command_errors_are_one_sentence_and_an_exit_code() {
    let database = registry_tests::fresh_database_url();
    let run = |args: &[&str]| {
        std::process::Command::new(registry_tests::server::registry_binary())
            .args(args)
            .env("REGISTRY_DATABASE_URL", &database)
            .env("RUST_BACKTRACE", "1")
            .output()
            .unwrap()
    };
    for args in [
        &[
            "customer", "create", "--tenant", "h", "--plan", "free", "--name", "H",
        ][..],
        &[
            "customer", "create", "--tenant", "foo-acme", "--plan", "free", "--name", "F",
        ],
        &[
            "customer", "set-plan", "--tenant", "nobody", "--plan", "free",
        ],
        &[
            "customer",
            "list",
            "--database-url",
            "postgres://127.0.0.1:1/none?connect_timeout=1",
        ],
    ] {
        let output = run(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.starts_with("registry: "), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            !stderr.contains("backtrace") && !stderr.contains("panicked"),
            "{stderr}"
        );
    }
    let usage = run(&["customer", "create", "--plan", "free"]);
    assert_eq!(usage.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&usage.stderr).contains("Usage"));
    let usage = run(&[
        "customer", "create", "--tenant", "p", "--plan", "nope", "--name", "P",
    ]);
    assert_eq!(usage.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&usage.stderr);
    assert!(stderr.contains("unknown plan \"nope\""), "{stderr}");
}

/// `registry policy check`: the findings of a policy file, as lines for a person or as JSON,
/// with exit 1 on an error (and on a warning with --deny-warnings); bad files are one sentence.
#[test]
fn policy_check_prints_findings_and_exits_by_severity() {
    let dir = registry_tests::server::TempDir::new("policy-check");
    let write = |name: &str, text: &str| {
        let path = dir.0.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let risky = write(
        "risky.json",
        r#"{"kind": "oidc", "rules": [{"services": ["api-acme"], "claims": {
            "iss": "https://token.actions.githubusercontent.com", "aud": "registry", "sub": "*"}}]}"#,
    );
    let clean = write(
        "clean.json",
        r#"{"kind": "oidc", "rules": [{"services": ["api-acme"], "claims": {
            "iss": "https://token.actions.githubusercontent.com", "aud": "registry",
            "sub": "repo:acme/infra:ref:refs/heads/main"}}]}"#,
    );
    let invalid = write(
        "invalid.json",
        r#"{"kind": "oidc", "rules": [{"services": []}]}"#,
    );
    let not_json = write("not.json", "{ nope");
    let run = |args: &[&str]| {
        Command::new(registry_binary())
            .arg("policy")
            .args(args)
            .env("RUST_BACKTRACE", "1")
            .output()
            .unwrap()
    };
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();

    let output = run(&["check", &risky]);
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        text(&output.stdout),
        "warning any-subject /rules/0/claims/sub: rule 0 (/rules/0) accepts any subject \
         (\"sub\": \"*\"): every token https://token.actions.githubusercontent.com issues for \
         the rule's audience gets in, e.g. every repository of a CI provider, not only yours; \
         pin \"sub\" to your own subjects or add a claim that narrows it (such as \
         \"repository_owner\")\nwarning github-subject-without-repository /rules/0/claims/sub: \
         rule 0 trusts GitHub Actions without pinning a repository: any repository's workflow \
         can get such a token; start sub with repo:OWNER/NAME:\n"
    );
    assert_eq!(
        run(&["check", &risky, "--deny-warnings"]).status.code(),
        Some(1)
    );
    let json_output = run(&["check", &risky, "--format", "json"]);
    let findings: Value = serde_json::from_slice(&json_output.stdout).unwrap();
    assert_eq!(findings["findings"][0]["code"], "any-subject");
    assert_eq!(findings["findings"][0]["severity"], "warning");
    assert_eq!(findings["findings"][1]["pointer"], "/rules/0/claims/sub");

    let output = run(&["check", &clean]);
    assert_eq!(output.status.code(), Some(0));
    assert!(text(&output.stdout).ends_with("clean.json: no findings\n"));

    let output = run(&["check", &invalid, "--format", "json"]);
    assert_eq!(output.status.code(), Some(1));
    let findings: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(findings["findings"]
        .as_array()
        .unwrap()
        .iter()
        .all(|f| f["severity"] == "error" && f["code"] == "schema"));

    for bad in [not_json.as_str(), "/no/such/file.json"] {
        let output = run(&["check", bad]);
        assert_eq!(output.status.code(), Some(1), "{bad}");
        let stderr = text(&output.stderr);
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    // A file that is not JSON is the check's own finding: with --format json, one JSON document
    // on stdout still.
    let output = run(&["check", &not_json, "--format", "json"]);
    assert_eq!(output.status.code(), Some(1));
    let findings: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(findings["findings"][0]["code"], "json", "{findings}");
    assert_eq!(findings["findings"][0]["severity"], "error");
    assert_eq!(findings["findings"][0]["pointer"], "");
    // A member named twice, as the API refuses it: the check says which.
    let twice = write(
        "twice.json",
        r#"{"kind": "static", "services": ["web-*"], "services": ["*"]}"#,
    );
    let output = run(&["check", &twice, "--format", "json"]);
    assert_eq!(output.status.code(), Some(1));
    let findings: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(findings["findings"][0]["code"], "json", "{findings}");
    assert!(
        findings["findings"][0]["message"]
            .as_str()
            .is_some_and(|m| m.contains(r#""services" appears twice"#)),
        "{findings}"
    );
    assert_eq!(run(&["check"]).status.code(), Some(2));
}

/// `registry policy explain` and `registry policy test`, offline: golden text, JSON, exit codes
/// and bad files.
#[test]
fn policy_explain_and_test_answer_offline() {
    let dir = registry_tests::server::TempDir::new("policy-explain");
    let write = |name: &str, text: &str| {
        let path = dir.0.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let policy = write(
        "policy.json",
        r#"{"kind": "oidc", "rules": [
            {"services": ["api-acme"], "claims": {"iss": "https://ci.example", "aud": "registry",
             "sub": "repo:acme/infra:ref:refs/heads/main"}},
            {"services": ["web-acme"], "claims": {"iss": "https://ci.example", "aud": "registry",
             "sub": "repo:acme/web:*"}}]}"#,
    );
    let claims = write(
        "claims.json",
        r#"{"iss": "https://ci.example", "aud": "registry", "sub": "repo:Acme/infra:ref:refs/heads/main"}"#,
    );
    let run = |args: &[&str]| {
        Command::new(registry_binary())
            .arg("policy")
            .args(args)
            .output()
            .unwrap()
    };
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    let output = run(&[
        "explain",
        &policy,
        "--claims",
        &claims,
        "--service",
        "api-acme",
    ]);
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        text(&output.stdout),
        "deny\n  claim-mismatch /rules/0/claims/sub: sub \"repo:Acme/infra:ref:refs/heads/main\" \
         does not match \"repo:acme/infra:ref:refs/heads/main\"\n  claim-mismatch \
         /rules/1/claims/sub: sub \"repo:Acme/infra:ref:refs/heads/main\" does not match \
         \"repo:acme/web:*\"\n  hint /rules/0/claims/sub: \"repo:Acme/infra:ref:refs/heads/main\" \
         differs from \"repo:acme/infra:ref:refs/heads/main\" only in case: matching is \
         case-sensitive\n"
    );
    // A token's claims, unverified (and said so), as JSON.
    let payload =
        base64_url(r#"{"iss":"https://ci.example","aud":"registry","sub":"repo:acme/web:ref:x"}"#);
    let token = format!("eyJhbGciOiJSUzI1NiJ9.{payload}.c2ln");
    let output = run(&[
        "explain",
        &policy,
        "--token",
        &token,
        "--service",
        "web-acme",
        "--format",
        "json",
    ]);
    assert_eq!(output.status.code(), Some(0));
    assert!(text(&output.stderr).contains("not checked"));
    let body: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(body["decision"], "allow");
    assert_eq!(body["rule"], json!({"index": 1, "pointer": "/rules/1"}));
    // Managing accounts is a request on the whole customer: judged on every service, as the
    // registry judges it, so a rule covering one service does not admit it.
    let output = run(&[
        "explain",
        &policy,
        "--token",
        &token,
        "--action",
        "accounts:write",
        "--format",
        "json",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let body: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(body["decision"], "deny", "{body}");

    let cases = write(
        "cases.json",
        r#"[{"name": "main deploys the API", "expect": "allow", "rule": 0, "service": "api-acme",
             "claims": {"iss": "https://ci.example", "aud": "registry", "sub": "repo:acme/infra:ref:refs/heads/main"}},
            {"name": "a fork is refused", "expect": "deny", "service": "api-acme",
             "claims": {"iss": "https://ci.example", "aud": "registry", "sub": "repo:evil/infra:ref:refs/heads/main"}}]"#,
    );
    let output = run(&["test", &policy, &cases]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(
        text(&output.stdout),
        "PASS main deploys the API: allow by rule 0\nPASS a fork is refused: deny \
         (claim-mismatch)\nrules no case exercised: /rules/1\n"
    );
    let failing = write(
        "failing.json",
        r#"[{"name": "wrong expectation", "expect": "deny",
             "claims": {"iss": "https://ci.example", "aud": "registry", "sub": "repo:acme/web:x"}}]"#,
    );
    let output = run(&["test", &policy, &failing, "--format", "json"]);
    assert_eq!(output.status.code(), Some(1));
    let body: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        body,
        json!({"cases": [{"name": "wrong expectation", "passed": false, "decision": "allow", "rule": 1}],
               "uncoveredRules": ["/rules/0"]})
    );
    let wrong_shape = write(
        "shape.json",
        r#"[{"name": "x", "claims": {}, "expect": "maybe"}]"#,
    );
    let not_a_policy = write("bad-policy.json", r#"{"kind": "oidc"}"#);
    for args in [
        vec!["test", policy.as_str(), wrong_shape.as_str()],
        vec!["test", not_a_policy.as_str(), cases.as_str()],
        vec!["explain", policy.as_str(), "--token", "not-a-jwt"],
    ] {
        let output = run(&args);
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        let stderr = text(&output.stderr);
        assert!(stderr.starts_with("registry: "), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    assert_eq!(run(&["explain", &policy]).status.code(), Some(2));
    // An empty service is no service (the API's explain refuses it too).
    let empty = run(&["explain", &policy, "--claims", &claims, "--service", ""]);
    assert_eq!(empty.status.code(), Some(2));
    assert!(text(&empty.stderr).contains("--service"));
    // `"*"` is what a policy grants, no action a call needs: refused by `--action` (usage, 2)
    // and in a case (1), each by a sentence that does not offer it.
    let star_case = write(
        "star.json",
        r#"[{"name": "s", "claims": {}, "action": "*", "expect": "allow"}]"#,
    );
    for (args, code) in [
        (
            vec![
                "explain",
                policy.as_str(),
                "--claims",
                claims.as_str(),
                "--action",
                "*",
            ],
            2,
        ),
        (vec!["test", policy.as_str(), star_case.as_str()], 1),
    ] {
        let output = run(&args);
        assert_eq!(output.status.code(), Some(code), "{args:?}");
        let stderr = text(&output.stderr);
        assert!(
            stderr.contains("\"*\" is not an action; one of"),
            "{stderr}"
        );
        assert!(!stderr.contains("every action"), "{stderr}");
    }
}

fn base64_url(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text)
}

/// `registry policy compare OLD NEW`: narrower-or-equal, widens (with a witness, exit 1 under
/// --deny-widening) and undetermined, as text and JSON; bad files exit 2 with one sentence.
#[test]
fn policy_compare_says_whether_a_change_widens() {
    let dir = registry_tests::server::TempDir::new("policy-compare");
    let write = |name: &str, text: &str| {
        let path = dir.0.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let rule = |sub: &str, services: &str| {
        format!(
            r#"{{"services": {services}, "claims": {{"iss": "https://ci.example",
                "aud": "registry", "sub": "{sub}"}}}}"#
        )
    };
    let old = write(
        "old.json",
        &format!(
            r#"{{"kind": "oidc", "ip_allowlist": ["203.0.113.0/24"], "rules": [{}, {}]}}"#,
            rule("repo:acme/api:*", r#"["api-acme"]"#),
            rule("repo:acme/web:*", r#"["web-*"]"#)
        ),
    );
    let narrower = write(
        "narrower.json",
        &format!(
            r#"{{"kind": "oidc", "ip_allowlist": ["203.0.113.7"], "rules": [{}]}}"#,
            rule("repo:acme/api:ref:refs/heads/main", r#"["api-acme"]"#)
        ),
    );
    let wider = write(
        "wider.json",
        &format!(
            r#"{{"kind": "oidc", "ip_allowlist": ["203.0.113.0/24"], "rules": [{}, {}]}}"#,
            rule("repo:acme/api:*", r#"["api-acme"]"#),
            rule("repo:acme/*", r#"["web-*"]"#)
        ),
    );
    let wider_addresses = write(
        "wider-addresses.json",
        &format!(
            r#"{{"kind": "oidc", "ip_allowlist": ["203.0.112.0/23"], "rules": [{}]}}"#,
            rule("repo:acme/api:*", r#"["api-acme"]"#)
        ),
    );
    // `repo:?*` accepts every subject `repo:*a` does, which the proof does not see.
    let glob_old = write(
        "glob-old.json",
        &format!(
            r#"{{"kind": "oidc", "rules": [{}]}}"#,
            rule("repo:?*", r#"["api-acme"]"#)
        ),
    );
    let unproven = write(
        "unproven.json",
        &format!(
            r#"{{"kind": "oidc", "rules": [{}]}}"#,
            rule("repo:*a", r#"["api-acme"]"#)
        ),
    );
    let run = |args: &[&str]| {
        Command::new(registry_binary())
            .arg("policy")
            .arg("compare")
            .args(args)
            .output()
            .unwrap()
    };
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();

    let output = run(&[&old, &narrower, "--deny-widening"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(
        text(&output.stdout),
        "narrower-or-equal: NEW admits no request OLD refuses\n"
    );
    let output = run(&[&old, &narrower, "--format", "json"]);
    let body: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        body,
        json!({"result": "narrower-or-equal", "witnesses": []})
    );

    // A broader subject in the second rule: the witness is a token of another repository.
    let output = run(&[&old, &wider, "--format", "json"]);
    assert_eq!(output.status.code(), Some(0));
    let body: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(body["result"], "widens");
    let witness = &body["witnesses"][0];
    assert_eq!(witness["rule"], 1);
    assert_eq!(witness["claims"]["iss"], "https://ci.example");
    assert!(!witness["claims"]["sub"]
        .as_str()
        .unwrap()
        .starts_with("repo:acme/web:"));
    assert!(witness["service"].as_str().unwrap().starts_with("web-"));
    assert!(witness["ip"].as_str().unwrap().starts_with("203.0.113."));
    let output = run(&[&old, &wider, "--deny-widening"]);
    assert_eq!(output.status.code(), Some(1));
    let stdout = text(&output.stdout);
    assert!(
        stdout
            .starts_with("widens: NEW admits requests OLD refuses\n  rule 1 of NEW admits claims"),
        "{stdout}"
    );
    assert!(text(&output.stderr).starts_with("registry: "));

    // A wider address range: the witness comes from outside the old one.
    let output = run(&[&old, &wider_addresses, "--format", "json"]);
    let body: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(body["result"], "widens");
    let ip: std::net::IpAddr = body["witnesses"][0]["ip"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(!ip.to_string().starts_with("203.0.113."), "{ip}");

    let output = run(&[&glob_old, &unproven, "--deny-widening"]);
    assert_eq!(output.status.code(), Some(0));
    assert!(text(&output.stdout).starts_with("undetermined: "));
    assert!(text(&output.stdout).contains("/rules/0"));

    let not_a_policy = write("bad-policy.json", r#"{"kind": "oidc"}"#);
    let not_json = write("not.json", "{ nope");
    for args in [
        [old.as_str(), not_a_policy.as_str()],
        [not_json.as_str(), old.as_str()],
        [old.as_str(), "/no/such/file.json"],
    ] {
        let output = run(&args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = text(&output.stderr);
        assert!(stderr.starts_with("registry: "), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(output.stdout.is_empty());
    }
    assert_eq!(run(&[&old]).status.code(), Some(2));
    let help = run(&["--help"]);
    assert_eq!(help.status.code(), Some(0));
    assert!(text(&help.stdout).contains("--deny-widening"));
}
