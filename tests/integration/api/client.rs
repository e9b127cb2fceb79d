//! The binary as a client of the API (docs/api.md, "The command line as a client"): tables by
//! default, the API's JSON with `--format json`, an API problem as one sentence with exit 1, a
//! wrong command line with exit 2.

use registry_tests::server::{run_registry, TestServer};
use serde_json::Value;

/// Runs `registry ARGS` against `server` with `token`: exit code, stdout, stderr.
fn client(server: &TestServer, token: &str, args: &[&str]) -> (Option<i32>, String, String) {
    run_registry(
        args,
        &[
            ("REGISTRY_API_URL", &server.base),
            ("REGISTRY_TOKEN", token),
        ],
    )
}

fn ok(server: &TestServer, token: &str, args: &[&str]) -> String {
    let (code, stdout, stderr) = client(server, token, args);
    assert_eq!(code, Some(0), "{args:?}: {stderr}");
    stdout
}

#[test]
fn a_customer_works_with_the_api_from_the_command_line() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap();
    let sample = |name: &str| {
        root.join("examples/cluster")
            .join(name)
            .display()
            .to_string()
    };

    let created = ok(
        &server,
        &acme.token,
        &[
            "services",
            "create",
            "--name",
            "k3s",
            "--title",
            "Dev cluster",
        ],
    );
    assert!(created.contains("subdomain: k3s-acme"), "{created}");
    let listed = ok(&server, &acme.token, &["services", "list"]);
    let lines: Vec<&str> = listed.lines().collect();
    assert!(
        lines[0].starts_with("SUBDOMAIN") && lines[0].contains("ISSUER"),
        "{listed}"
    );
    assert!(
        lines[1].starts_with("k3s-acme ") && lines[1].contains("Dev cluster"),
        "{listed}"
    );
    let json: Value = serde_json::from_str(&ok(
        &server,
        &acme.token,
        &["services", "list", "--format", "json"],
    ))
    .unwrap();
    assert_eq!(json[0]["subdomain"], "k3s-acme");

    // A number the upload would carry as another is refused before anything is sent.
    let discovery: Value = serde_json::from_str(
        &std::fs::read_to_string(sample("openid-configuration.json")).unwrap(),
    )
    .unwrap();
    let odd = std::env::temp_dir().join(format!("odd-number-{}.json", std::process::id()));
    let text = discovery
        .to_string()
        .replacen('{', "{\"big\": 18446744073709551616, ", 1);
    std::fs::write(&odd, text).unwrap();
    let jwks = sample("jwks-1.json");
    fn push<'a>(discovery: &'a str, jwks: &'a str) -> [&'a str; 7] {
        [
            "config",
            "push",
            "k3s-acme",
            "--discovery-file",
            discovery,
            "--jwks-file",
            jwks,
        ]
    }
    let (code, _, stderr) = client(&server, &acme.token, &push(odd.to_str().unwrap(), &jwks));
    std::fs::remove_file(&odd).unwrap();
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("the number 18446744073709551616 (line 1, column 9)"),
        "{stderr}"
    );
    let pushed = ok(
        &server,
        &acme.token,
        &push(&sample("openid-configuration.json"), &jwks),
    );
    assert!(pushed.contains("warnings:"), "{pushed}");
    let keys = ok(&server, &acme.token, &["keys", "list", "k3s-acme"]);
    assert!(
        keys.starts_with("KID") && keys.contains("current"),
        "{keys}"
    );
    let preflight = ok(&server, &acme.token, &["preflight", "k3s-acme"]);
    // The verdicts, then each finding with what to do (this issuer is http://: an error).
    assert!(
        preflight.starts_with("issuer: http://") && preflight.contains("\nCLOUD"),
        "{preflight}"
    );
    assert!(
        preflight.contains("WHAT TO DO") && preflight.contains("error     issuer-not-https"),
        "{preflight}"
    );
    // A key source's name the API would refuse is a wrong command line, for every command.
    for args in [
        &["config", "get", "k3s-acme", "--source", "Blue"][..],
        &[
            "sync",
            "--service",
            "k3s-acme",
            "--source-name",
            "blue green",
        ][..],
    ] {
        let (code, _, stderr) = client(&server, &acme.token, args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("is not a key source name"), "{stderr}");
    }
    // `--issuer` chooses one of the service's issuers; another is refused, naming them.
    let described = |args: &[&str]| -> Value {
        let mut all = vec!["preflight", "k3s-acme", "--format", "json"];
        all.extend_from_slice(args);
        serde_json::from_str(&ok(&server, &acme.token, &all)).unwrap()
    };
    let issuer = described(&[])["issuer"].as_str().unwrap().to_owned();
    assert_eq!(described(&["--issuer", &issuer])["issuer"], issuer.as_str());
    let (code, _, stderr) = client(
        &server,
        &acme.token,
        &[
            "preflight",
            "k3s-acme",
            "--issuer",
            "https://elsewhere.test/a b",
        ],
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("elsewhere.test/a b") && stderr.contains(&issuer),
        "{stderr}"
    );
    let fetches = ok(&server, &acme.token, &["fetches", "k3s-acme"]);
    assert!(
        fetches.starts_with("ISSUER") && fetches.contains("PATH"),
        "{fetches}"
    );
    // Custom domains: off on this registry, one sentence and exit 1; `--help` has an example.
    let (code, _, stderr) = client(
        &server,
        &acme.token,
        &["domain", "set", "k3s-acme", "login.example.com"],
    );
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("(409)") && stderr.contains("REGISTRY_ACME_DIRECTORY"),
        "{stderr}"
    );
    let (code, _, stderr) = client(&server, &acme.token, &["domain", "get", "k3s-acme"]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("has no custom domain"), "{stderr}");
    let help = ok(&server, &acme.token, &["domain", "set", "--help"]);
    assert!(help.contains("Example: `registry domain set"), "{help}");

    let policy = std::env::temp_dir().join(format!("client-policy-{}.json", std::process::id()));
    std::fs::write(&policy, r#"{"kind": "static", "services": ["k3s-acme"]}"#).unwrap();
    let account: Value = serde_json::from_str(&ok(
        &server,
        &acme.token,
        &[
            "accounts",
            "create",
            "--name",
            "deployer",
            "--policy-file",
            &policy.display().to_string(),
            "--format",
            "json",
        ],
    ))
    .unwrap();
    let id = account["id"].as_str().unwrap();
    let token = account["token"].as_str().unwrap();
    // The new account reads its service, and nothing else.
    assert!(ok(&server, token, &["config", "get", "k3s-acme"]).contains("openidConfiguration"));
    let accounts = ok(&server, &acme.token, &["accounts", "list"]);
    assert!(
        accounts.contains("deployer") && accounts.contains("static"),
        "{accounts}"
    );
    let events = ok(
        &server,
        &acme.token,
        &["audit-events", "--action", "config.put"],
    );
    assert_eq!(events.lines().count(), 2, "{events}");
    // A page at a time: the table's last line is the flag for the next page.
    let first = ok(&server, &acme.token, &["audit-events", "--limit", "1"]);
    let cursor = (first.lines().last())
        .and_then(|l| l.strip_prefix("more: --cursor "))
        .unwrap_or_else(|| panic!("{first}"));
    let second = ok(
        &server,
        &acme.token,
        &["audit-events", "--limit", "1", "--cursor", cursor],
    );
    assert_eq!(second.lines().count(), 3, "{second}");
    assert_ne!(
        first.lines().nth(1),
        second.lines().nth(1),
        "{first}\n{second}"
    );
    assert!(ok(&server, &acme.token, &["accounts", "delete", id]).contains("done"));
    std::fs::remove_file(&policy).unwrap();

    // A problem: one sentence, exit 1.
    let (code, stdout, stderr) = client(&server, &acme.token, &["services", "get", "nothing-acme"]);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(stdout.is_empty());
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("Not found (404)"), "{stderr}");
    let (code, _, stderr) = client(
        &server,
        &acme.token,
        &["services", "create", "--name", "Bad Name", "--title", "Bad"],
    );
    assert_eq!(code, Some(1));
    assert!(stderr.contains("/serviceName"), "{stderr}");
    // The title the API requires is required by the command itself: a usage error, exit 2.
    let (code, _, stderr) = client(
        &server,
        &acme.token,
        &["services", "create", "--name", "mix"],
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--title"), "{stderr}");
    let (code, _, stderr) = client(&server, "rgst_wrong", &["services", "list"]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("Unauthorized (401)"), "{stderr}");
    // A wrong command line: usage, exit 2; --help has an example, the binary's own too.
    let (code, _, _) = client(&server, &acme.token, &["services", "frobnicate"]);
    assert_eq!(code, Some(2));
    let help = ok(&server, &acme.token, &["--help"]);
    assert!(help.contains("Example: `registry serve`"), "{help}");
    let help = ok(&server, &acme.token, &["services", "list", "--help"]);
    assert!(
        help.contains("Example:") && help.contains("REGISTRY_API_URL"),
        "{help}"
    );
    // No registry there: one sentence, exit 1.
    let (code, _, stderr) = run_registry(
        &[
            "services",
            "list",
            "--api-url",
            "http://127.0.0.1:9",
            "--token",
            "x",
        ],
        &[],
    );
    assert_eq!(code, Some(1));
    assert!(stderr.contains("cannot reach the registry"), "{stderr}");
}

/// A server at `127.0.0.1:port` that answers every request 200 with a page, as a proxy or a
/// web server where the API should be would.
fn a_page_server() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request);
            let page = "<html>not an API</html>";
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n{page}",
                page.len()
            );
        }
    });
    address
}

/// What is no registry's answer is no success; a command line that cannot make a call is a
/// usage error; an identity token file wins over `REGISTRY_TOKEN`; a reader that goes away ends
/// the output quietly.
#[test]
fn the_client_takes_no_page_for_an_answer_and_ends_quietly_with_its_reader() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    // A page where the API should be: one sentence, exit 1 (2 for `keys wait`), nothing printed.
    let page = a_page_server();
    for (args, expected) in [
        (&["services", "list"][..], 1),
        (&["services", "list", "--format", "json"][..], 1),
        (
            &[
                "keys",
                "wait",
                "--service",
                "a",
                "--kid",
                "b",
                "--timeout",
                "2",
            ][..],
            2,
        ),
    ] {
        let env = [("REGISTRY_API_URL", page.as_str()), ("REGISTRY_TOKEN", "x")];
        let (code, stdout, stderr) = run_registry(args, &env);
        assert_eq!(code, Some(expected), "{args:?}: {stderr}");
        assert!(stderr.contains("is not JSON"), "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
    }
    // `..` would be a step up to `/` in a URL: no name the registry gives, a usage error.
    let (code, stdout, stderr) = client(&server, &acme.token, &["services", "get", ".."]);
    assert_eq!(code, Some(2), "{stdout}");
    assert!(stderr.contains("no name the registry gives"), "{stderr}");
    // No credentials, or an API URL that is none: usage errors, exit 2, one sentence.
    let (code, _, stderr) = run_registry(&["services", "list", "--api-url", &server.base], &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("no credentials"), "{stderr}");
    let (code, _, stderr) = run_registry(
        &["services", "list", "--api-url", "notaurl", "--token", "x"],
        &[],
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("REGISTRY_API_URL"), "{stderr}");
    // A token no header can carry was copied wrong: a usage error that never shows it.
    let copied = format!("{}\u{1b}[31m", acme.token);
    for command in [
        &["services", "list"][..],
        &[
            "sync",
            "--service",
            "api-acme",
            "--once",
            "--discovery-file",
            "x",
            "--jwks-file",
            "y",
        ],
        &["fetch-log"],
    ] {
        let env = [
            ("REGISTRY_API_URL", server.base.as_str()),
            ("REGISTRY_TOKEN", copied.as_str()),
            ("REGISTRY_FETCH_LOG_TOKEN", copied.as_str()),
        ];
        let (code, stdout, stderr) = run_registry(command, &env);
        assert_eq!(code, Some(2), "{command:?}: {stdout}{stderr}");
        assert!(
            stderr.contains("TOKEN") && stderr.contains("copied"),
            "{command:?}: {stderr}"
        );
        assert!(
            !stderr.contains(&acme.token[5..]),
            "{command:?} showed the token"
        );
    }
    // An update that changes nothing is no call: a usage error naming what it needs.
    let (code, _, stderr) = client(&server, &acme.token, &["accounts", "update", "some-id"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--policy-file"), "{stderr}");
    // An identity token file with REGISTRY_TOKEN in the environment: the file is used.
    let dir = registry_tests::server::TempDir::new("client-token-file");
    let file = dir.0.join("token");
    std::fs::write(&file, &acme.token).unwrap();
    let (code, _, stderr) = client(
        &server,
        "rgst_wrong",
        &[
            "services",
            "list",
            "--identity-token-file",
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    // What the client can check is a usage error before any call, as the operators' are.
    for args in [
        &["audit-events", "--since", "yesterday"][..],
        &["audit-events", "--limit", "0"],
        &["audit-events", "--limit", "501"],
        &["audit-events", "--action", "config.nothing"],
        &[
            "config",
            "push",
            "k3s-acme",
            "--discovery-file",
            "d",
            "--jwks-file",
            "j",
            "--retain-hours",
            "169",
        ],
    ] {
        let (code, _, stderr) = client(&server, &acme.token, args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
    }
    // An account to call as goes with an identity token only: a static token is its account.
    let (code, _, stderr) = client(
        &server,
        &acme.token,
        &["services", "list", "--service-account", "some-id"],
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--identity-token-file"), "{stderr}");
    // A variable set to nothing names no account; an id is a UUID.
    ok(
        &server,
        &acme.token,
        &["services", "list", "--service-account", ""],
    );
    let (code, _, stderr) = client(
        &server,
        &acme.token,
        &[
            "services",
            "list",
            "--identity-token-file",
            "/dev/null",
            "--service-account",
            "ci",
        ],
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("UUID"), "{stderr}");
    // An empty one is no token: said so, nothing sent.
    std::fs::write(&file, "\n").unwrap();
    let args = [
        "services",
        "list",
        "--identity-token-file",
        file.to_str().unwrap(),
    ];
    let (code, _, stderr) = client(&server, "rgst_wrong", &args);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("is empty"), "{stderr}");
    // A reader that goes away before the output ends: exit 0, no panic.
    for _ in 0..3 {
        let mut child = std::process::Command::new(registry_tests::server::registry_binary())
            .args(["audit-events", "--limit", "500"])
            .env_clear()
            .env("REGISTRY_API_URL", &server.base)
            .env("REGISTRY_TOKEN", &acme.token)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// What the client reads and prints is bounded and inert (the probe of the command line): no
/// file or stdin is read past 1 MiB (`/dev/zero` once took all memory), a URL's password is
/// never shown, a URL with a query, or a service of dots, is a usage error, and what a file
/// held reaches the terminal escaped.
#[test]
fn the_client_reads_within_bounds_and_shows_nothing_it_should_not() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let sub = super::register_service(&server, &acme, "api");
    // Files that never end: one sentence and exit 1, at once.
    for args in [
        &["preflight", sub.as_str(), "--token-file", "/dev/zero"][..],
        &[
            "accounts",
            "create",
            "--name",
            "x",
            "--policy-file",
            "/dev/zero",
        ],
        &["services", "list", "--identity-token-file", "/dev/zero"],
    ] {
        let started = std::time::Instant::now();
        let (code, stdout, stderr) = client(&server, &acme.token, args);
        assert_eq!(code, Some(1), "{args:?}: {stdout}{stderr}");
        assert!(stderr.contains("larger than 1 MiB"), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
    }
    // A token file holding what no token holds: said so, not an HTTP library's words.
    let dir = registry_tests::server::TempDir::new("client-bounds");
    let file = dir.0.join("token");
    std::fs::write(&file, "a\nb").unwrap();
    let args = [
        "services",
        "list",
        "--identity-token-file",
        file.to_str().unwrap(),
    ];
    let (code, _, stderr) = client(&server, &acme.token, &args);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("control character"), "{stderr}");
    // URLs the client cannot put a path after, or that hold a password: usage errors that
    // never show the password.
    for url in [
        "http://user:S3CRET@127.0.0.1:9",
        "htps://user:S3CRET@127.0.0.1:9",
        "user:S3CRET@127.0.0.1:9",
        "http://127.0.0.1:9/?q=1",
        "http://127.0.0.1:9/#frag",
    ] {
        let (code, _, stderr) =
            run_registry(&["services", "list", "--api-url", url, "--token", "x"], &[]);
        assert_eq!(code, Some(2), "{url}: {stderr}");
        assert!(stderr.contains("REGISTRY_API_URL"), "{url}: {stderr}");
        assert!(!stderr.contains("S3CRET"), "{url}: {stderr}");
    }
    let env = [
        ("REGISTRY_API_URL", server.base.as_str()),
        ("REGISTRY_TOKEN", acme.token.as_str()),
    ];
    let (code, _, stderr) = run_registry(
        &[
            "sync",
            "--service",
            &sub,
            "--source",
            "https://u:S3CRETSRC@127.0.0.1:9",
        ],
        &env,
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(!stderr.contains("S3CRETSRC"), "{stderr}");
    // A service of dots is a step of a URL's path, not a name.
    let socket = dir.0.join("signer.sock");
    for args in [
        &["sync", "--service", "..", "--once"][..],
        &[
            "signer",
            "--service",
            ".",
            "--socket",
            socket.to_str().unwrap(),
        ],
    ] {
        let (code, _, stderr) = run_registry(args, &env);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("names no service"), "{args:?}: {stderr}");
    }
    // `fetch-log`: no token is a usage error naming the variable; a log without line ends is
    // read a batch at a time, and its line is not posted.
    let (code, _, stderr) = run_registry(
        &["fetch-log", "--token", ""],
        &[("REGISTRY_API_URL", server.base.as_str())],
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("REGISTRY_FETCH_LOG_TOKEN"), "{stderr}");
    let endless = std::process::Command::new(registry_tests::server::registry_binary())
        .args(["fetch-log", "--batch-bytes", "1024"])
        .env_clear()
        .env("REGISTRY_API_URL", &server.base)
        .env("REGISTRY_FETCH_LOG_TOKEN", "t".repeat(32))
        .stdin(std::fs::File::open("/dev/zero").unwrap())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(2));
    let pid = endless.id();
    let rss_kib = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(0);
    let _ = std::process::Command::new("kill")
        .arg(pid.to_string())
        .status();
    let output = endless.wait_with_output().unwrap();
    assert!(
        rss_kib < 200 * 1024,
        "fetch-log holds {rss_kib} KiB of a line"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("memory allocation"), "{stderr}");
    // What a policy file names reaches the terminal escaped: an author's escape sequences
    // do not act on a reviewer's screen.
    let policy = dir.0.join("policy.json");
    std::fs::write(
        &policy,
        r#"{"kind": "static", "services": ["*"], "bad\u001b]0;pwned\u0007": 1}"#,
    )
    .unwrap();
    let (_, stdout, stderr) = run_registry(&["policy", "check", policy.to_str().unwrap()], &[]);
    assert!(!stdout.contains('\u{1b}'), "{stdout}");
    assert!(stdout.contains("\\u{1b}"), "{stdout}");
    assert!(!stderr.contains('\u{1b}'), "{stderr}");
}
