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

    let pushed = ok(
        &server,
        &acme.token,
        &[
            "config",
            "push",
            "k3s-acme",
            "--discovery-file",
            &sample("openid-configuration.json"),
            "--jwks-file",
            &sample("jwks-1.json"),
        ],
    );
    assert!(pushed.contains("warnings:"), "{pushed}");
    let keys = ok(&server, &acme.token, &["keys", "list", "k3s-acme"]);
    assert!(
        keys.starts_with("KID") && keys.contains("current"),
        "{keys}"
    );
    let preflight = ok(&server, &acme.token, &["preflight", "k3s-acme"]);
    assert!(
        preflight.starts_with("CLOUD") && preflight.contains("aws"),
        "{preflight}"
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
        &["services", "create", "--name", "Bad Name"],
    );
    assert_eq!(code, Some(1));
    assert!(stderr.contains("/serviceName"), "{stderr}");
    let (code, _, stderr) = client(&server, "rgst_wrong", &["services", "list"]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("Unauthorized (401)"), "{stderr}");
    // A wrong command line: usage, exit 2; --help has an example.
    let (code, _, _) = client(&server, &acme.token, &["services", "frobnicate"]);
    assert_eq!(code, Some(2));
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
