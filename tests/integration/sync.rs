//! `registry sync` (docs/api.md, "Key lifecycle") against a stand-in for a kube-apiserver's
//! discovery endpoints (TLS with its own CA, a bearer token): one upload per change on the source,
//! none when nothing changed; federated with a token signed by the very keys it publishes; clear
//! failures with exit codes when either side is down or refuses.

use registry_tests::issuer::{compact, KeyKind, SigningKey};
use registry_tests::kube::KubeApiServer;
use registry_tests::server::{json, registry_binary, unix_now, TestServer, AUDIENCE};
use registry_tests::wait::within;
use reqwest::Method;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `registry sync` of `sub` against the registry at `api` and the source at `source`, with its
/// CA and token file when given, and `REGISTRY_TOKEN` = `token`.
fn sync_command(
    sub: &str,
    api: &str,
    source: &str,
    ca: Option<&Path>,
    token_file: Option<&Path>,
    token: Option<&str>,
) -> Command {
    let mut command = Command::new(registry_binary());
    command
        .args([
            "sync",
            "--service",
            sub,
            "--api-url",
            api,
            "--source",
            source,
        ])
        .env_remove("REGISTRY_TOKEN")
        .env("RUST_BACKTRACE", "1");
    if let Some(ca) = ca {
        command.arg("--source-ca").arg(ca);
    }
    if let Some(file) = token_file {
        command.arg("--source-token-file").arg(file);
    }
    if let Some(token) = token {
        command.env("REGISTRY_TOKEN", token);
    }
    command
}

/// `registry sync` of `sub` against `server` and `kube` (its CA and token), plus `extra`.
fn sync(
    server: &TestServer,
    kube: &KubeApiServer,
    sub: &str,
    token: Option<&str>,
    extra: &[&str],
) -> Output {
    let (ca, token_file) = (
        Some(kube.ca_file.as_path()),
        Some(kube.token_file.as_path()),
    );
    sync_command(sub, &server.base, &kube.url, ca, token_file, token)
        .args(extra)
        .output()
        .unwrap()
}

fn line(output: &Output) -> Value {
    assert!(
        output.status.success(),
        "sync failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(stdout.lines().count(), 1, "one JSON line: {stdout}");
    serde_json::from_str(stdout.trim()).unwrap()
}

/// PUTs of configurations the registry answered.
fn puts(server: &TestServer) -> u64 {
    let text = server.metrics_text();
    text.lines()
        .filter(|l| {
            l.starts_with(
                r#"registry_http_requests_total{route="/services/{subdomain}/config",method="PUT""#,
            )
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

fn public_kids(server: &TestServer, sub: &str) -> Vec<String> {
    let set = json(
        server
            .hosted(Method::GET, sub, "/openid/v1/jwks")
            .send()
            .unwrap(),
    );
    crate::api::keys::kids(&set)
}

/// `pending` names each reason once: two verifiers waited for are one `verifier`.
#[test]
fn sync_names_each_pending_reason_once() {
    let server = TestServer::start_with(registry_tests::server::ServerOptions {
        env: vec![
            ("REGISTRY_FETCH_FLUSH_SECONDS".into(), "1".into()),
            // One clock hour of fetches makes an agent a verifier (the test cannot wait two).
            ("REGISTRY_TEST_VERIFIER_HOURS".into(), "1".into()),
        ],
        ..Default::default()
    });
    let acme = server.customer("acme", "business");
    let sub = crate::api::register_service(&server, &acme, "k3s");
    let k1 = SigningKey::generate(KeyKind::P256, "k1");
    let k2 = SigningKey::generate(KeyKind::P256, "k2");
    let kube = KubeApiServer::start(vec![k1.public_jwk()]);
    line(&sync(&server, &kube, &sub, Some(&acme.token), &["--once"]));
    for agent in ["aws-sts", "gcp-sts"] {
        let fetched = (server.hosted(Method::GET, &sub, "/openid/v1/jwks"))
            .header("user-agent", agent)
            .send()
            .unwrap();
        assert_eq!(fetched.status(), 200);
    }
    let mut evidence = Value::Null;
    let counted = within(Duration::from_secs(30), || {
        evidence = json(server.get(&format!("/services/{sub}/fetches"), &acme.token));
        let text = evidence.to_string();
        text.contains("aws-sts") && text.contains("gcp-sts")
    });
    assert!(counted, "{evidence}");
    kube.set_keys(vec![k1.public_jwk(), k2.public_jwk()]);
    let added = line(&sync(&server, &kube, &sub, Some(&acme.token), &[]));
    let pending = (added["pending"].as_array().unwrap().iter())
        .find(|p| p["kid"] == "k2")
        .unwrap_or_else(|| panic!("k2 not pending: {added}"));
    assert_eq!(pending["reasons"], json!(["lead", "verifier"]), "{added}");
}

#[test]
fn sync_follows_a_clusters_rotation_with_one_upload_per_change() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let sub = crate::api::register_service(&server, &acme, "k3s");
    let k1 = SigningKey::generate(KeyKind::P256, "k1");
    let k2 = SigningKey::generate(KeyKind::P256, "k2");
    let kube = KubeApiServer::start(vec![k1.public_jwk()]);

    let first = line(&sync(&server, &kube, &sub, Some(&acme.token), &["--once"]));
    assert_eq!(first["changed"], true);
    assert_eq!(first["added"], json!(["k1"]));
    assert_eq!(first["service"], sub.as_str());
    assert!(first["warnings"]
        .to_string()
        .contains("--service-account-issuer"));
    assert_eq!(puts(&server), 1);
    let again = line(&sync(&server, &kube, &sub, Some(&acme.token), &[]));
    assert_eq!(
        again,
        json!({"service": sub, "changed": false, "added": [], "retired": [], "warnings": [],
            "pending": [{"kid": "k1", "reasons": ["lead"]}]})
    );
    assert_eq!(puts(&server), 1, "nothing changed, nothing uploaded");

    // The cluster adds a key, then drops the old one.
    kube.set_keys(vec![k1.public_jwk(), k2.public_jwk()]);
    let added = line(&sync(&server, &kube, &sub, Some(&acme.token), &[]));
    assert_eq!(
        (added["changed"].clone(), added["added"].clone()),
        (json!(true), json!(["k2"]))
    );
    kube.set_keys(vec![k2.public_jwk()]);
    let retired = line(&sync(&server, &kube, &sub, Some(&acme.token), &[]));
    assert_eq!(retired["retired"], json!(["k1"]));
    assert_eq!(puts(&server), 3);
    // The registry keeps the dropped key published, retired, after the cluster's.
    assert_eq!(public_kids(&server, &sub), ["k2", "k1"]);
    assert!(kube.requests() >= 8);
}

#[test]
fn a_cluster_keeps_its_keys_published_with_its_own_token_and_no_stored_secret() {
    let server = registry_tests::server::insecure_server();
    let acme = server.customer("acme", "business");
    let sub = crate::api::register_service(&server, &acme, "k3s");
    let key = SigningKey::generate(KeyKind::P256, "sa-key");
    let kube = KubeApiServer::start(vec![key.public_jwk()]);
    // Bootstrap: the first upload needs a token, since nothing publishes the keys yet.
    line(&sync(&server, &kube, &sub, Some(&acme.token), &[]));
    // An oidc account trusting the cluster's hosted issuer, for the sync's own service account.
    let issuer = server.issuer(&sub);
    let subject = "system:serviceaccount:registry-sync:registry-sync";
    let account = server
        .authed(Method::POST, "/service-accounts", &acme.token)
        .json(
            &json!({"name": "cluster", "policy": {"kind": "oidc", "rules": [{"services": [sub],
            "claims": {"iss": issuer, "aud": AUDIENCE, "sub": subject}}]}}),
        )
        .send()
        .unwrap();
    assert_eq!(account.status(), 201);
    // The projected token on disk, signed by the very key the registry publishes.
    let dir = registry_tests::server::TempDir::new("projected");
    let token_file = dir.0.join("token");
    let now = unix_now();
    let token = compact(
        &json!({"alg": "ES256", "kid": "sa-key"}),
        &json!({"iss": issuer, "sub": subject, "aud": AUDIENCE, "iat": now, "exp": now + 600}),
        |m| key.sign("ES256", m),
    );
    std::fs::write(&token_file, token).unwrap();
    let rotated = SigningKey::generate(KeyKind::P256, "sa-key-2");
    kube.set_keys(vec![key.public_jwk(), rotated.public_jwk()]);
    let federated = line(&sync(
        &server,
        &kube,
        &sub,
        None,
        &["--identity-token-file", token_file.to_str().unwrap()],
    ));
    assert_eq!(federated["added"], json!(["sa-key-2"]));
    assert_eq!(public_kids(&server, &sub), ["sa-key", "sa-key-2"]);
}

#[test]
fn failures_are_one_sentence_and_exit_1_and_an_interval_run_survives_them() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let sub = crate::api::register_service(&server, &acme, "k3s");
    let kube = KubeApiServer::start(vec![SigningKey::generate(KeyKind::P256, "k1").public_jwk()]);
    // Ends with `code` and one sentence on stderr naming `expected`, nothing on stdout.
    let fails = |mut command: Command, code: i32, expected: &str| {
        let output = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert_eq!(output.status.code(), Some(code), "{stderr}");
        assert!(
            stderr.contains(expected),
            "expected {expected:?} in {stderr}"
        );
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(
            !stderr.contains("panicked") && !stderr.contains("backtrace"),
            "{stderr}"
        );
        assert!(output.stdout.is_empty());
    };
    let token = Some(acme.token.as_str());
    let (ca, token_file) = (
        Some(kube.ca_file.as_path()),
        Some(kube.token_file.as_path()),
    );
    // The discard port: nothing listens there (a port just freed could be taken meanwhile).
    let down = "127.0.0.1:9";
    let (source_down, registry_down) = (format!("https://{down}"), format!("http://{down}"));
    let bad_token_dir = registry_tests::server::TempDir::new("bad-token");
    let bad_token = bad_token_dir.0.join("token");
    std::fs::write(&bad_token, "not-the-token").unwrap();
    let other_ca = Some(kube.other_ca_file.as_path());
    // A wrong CA, a refused source token, a source that is down, a registry that is down, a
    // bad registry token.
    let (api, source) = (server.base.as_str(), kube.url.as_str());
    let cases = [
        (
            sync_command(&sub, api, source, other_ca, token_file, token),
            "cannot reach the source",
        ),
        (
            sync_command(&sub, api, source, ca, Some(&bad_token), token),
            "answered 401",
        ),
        (
            sync_command(&sub, api, &source_down, None, None, token),
            "cannot reach the source",
        ),
        (
            sync_command(&sub, &registry_down, source, ca, token_file, token),
            "cannot reach the registry",
        ),
        (
            sync_command(
                &sub,
                api,
                source,
                ca,
                token_file,
                Some("rgst_aaaaaaaaaaaaaaaa_bbbb"),
            ),
            "the registry answered 401",
        ),
    ];
    for (command, expected) in cases {
        fails(command, 1, expected);
    }
    let usage = sync(&server, &kube, &sub, token, &["--interval", "0"]);
    assert_eq!(usage.status.code(), Some(2));
    // A command line that can make no call is a usage error, exit 2, never retried: no token
    // at all, an API address that is no http(s) URL, no service.
    let usage = [
        (
            sync_command(&sub, api, source, ca, token_file, None),
            "REGISTRY_TOKEN",
        ),
        (
            sync_command(&sub, "ftp://x", source, ca, token_file, token),
            "http:// or https://",
        ),
        (
            sync_command("", api, source, ca, token_file, token),
            "--service is empty",
        ),
    ];
    for (mut command, expected) in usage {
        command.args(["--interval", "1"]);
        fails(command, 2, expected);
    }

    // --interval keeps going through a registry outage, one line per failed cycle.
    let scratch = registry_tests::server::TempDir::new("sync-errors");
    let errors = scratch.0.join("stderr");
    let mut running = sync_command(&sub, &registry_down, source, ca, token_file, token)
        .args(["--interval", "1"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&errors).unwrap())
        .spawn()
        .unwrap();
    // Two cycles a second apart, however long a loaded machine takes to start the binary.
    let written = || std::fs::read_to_string(&errors).unwrap();
    within(Duration::from_secs(30), || written().lines().count() >= 2);
    assert!(
        running.try_wait().unwrap().is_none(),
        "still running after failed cycles"
    );
    let _ = running.kill();
    running.wait().unwrap();
    let stderr = written();
    assert!(stderr.lines().count() >= 2, "{stderr}");
    assert!(
        stderr
            .lines()
            .all(|l| l.starts_with("registry sync: cannot reach the registry")),
        "{stderr}"
    );
    // And publishes once the registry answers, then only reports.
    let mut healthy = sync_command(&sub, api, source, ca, token_file, token)
        .args(["--interval", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(healthy.stdout.take().unwrap()).lines();
    let started = Instant::now();
    let first: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    let second: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    let _ = healthy.kill();
    let _ = healthy.wait();
    assert_eq!(
        (first["changed"].clone(), second["changed"].clone()),
        (json!(true), json!(false))
    );
}

/// The OpenSSL built into the binary trusts what `SSL_CERT_FILE` or `SSL_CERT_DIR` names (how an
/// operator points it at a private CA, or at a host's bundle in an unusual place): without
/// them and without `--source-ca`, nothing trusts the cluster's own CA. `serve` says at start
/// what it trusts.
#[test]
fn the_built_in_openssl_trusts_ssl_cert_file_and_ssl_cert_dir() {
    let server = TestServer::start_binary(); // reads its log
    let acme = server.customer("acme", "business");
    let sub = crate::api::register_service(&server, &acme, "k3s");
    let kube = KubeApiServer::start(vec![SigningKey::generate(KeyKind::P256, "k1").public_jwk()]);
    let sync_trusting = |variable: Option<(&str, &Path)>| {
        let mut command = sync_command(
            &sub,
            &server.base,
            &kube.url,
            None,
            Some(kube.token_file.as_path()),
            Some(&acme.token),
        );
        command
            .env_remove("SSL_CERT_FILE")
            .env_remove("SSL_CERT_DIR");
        if let Some((name, value)) = variable {
            command.env(name, value);
        }
        command.output().unwrap()
    };

    let untrusted = sync_trusting(None);
    assert_eq!(untrusted.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&untrusted.stderr);
    assert!(stderr.contains("cannot reach the source"), "{stderr}");

    let by_file = sync_trusting(Some(("SSL_CERT_FILE", &kube.ca_file)));
    assert!(by_file.status.success(), "{by_file:?}");
    assert_eq!(line(&by_file)["added"], json!(["k1"]));

    // A directory in OpenSSL's hashed layout: `{subject name hash}.0`.
    let dir = registry_tests::server::TempDir::new("cert-dir");
    let pem = std::fs::read(&kube.ca_file).unwrap();
    let hash = openssl::x509::X509::from_pem(&pem)
        .unwrap()
        .subject_name_hash();
    std::fs::write(dir.0.join(format!("{hash:08x}.0")), &pem).unwrap();
    let by_dir = sync_trusting(Some(("SSL_CERT_DIR", &dir.0)));
    assert!(by_dir.status.success(), "{by_dir:?}");
    assert_eq!(line(&by_dir)["changed"], false, "already in sync");

    let log = server.log();
    let bundle = Path::new("/etc/ssl/certs/ca-certificates.crt");
    if bundle.exists() {
        assert!(
            log.contains("TLS trusts the certificate authorities found here")
                && log.contains(bundle.to_str().unwrap()),
            "{log}"
        );
    } else {
        assert!(log.contains("no certificate authorities found"), "{log}");
    }
}

#[test]
fn two_clusters_sync_as_two_sources_and_removing_one_retires_its_keys_only() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let sub = crate::api::register_service(&server, &acme, "k3s");
    let blue = KubeApiServer::start(vec![
        SigningKey::generate(KeyKind::P256, "blue").public_jwk()
    ]);
    let green = KubeApiServer::start(vec![
        SigningKey::generate(KeyKind::P256, "green").public_jwk()
    ]);
    let as_source = |kube: &KubeApiServer, name: &str| {
        line(&sync(
            &server,
            kube,
            &sub,
            Some(&acme.token),
            &["--source-name", name],
        ))
    };
    assert_eq!(as_source(&blue, "blue")["added"], json!(["blue"]));
    let first_green = as_source(&green, "green");
    assert_eq!(
        (first_green["added"].clone(), first_green["retired"].clone()),
        (json!(["green"]), json!([])),
        "another source's keys are not this source's to retire"
    );
    assert_eq!(public_kids(&server, &sub), ["blue", "green"]);
    // Each sync compares with its own source's upload: nothing changed, nothing uploaded.
    assert_eq!(as_source(&blue, "blue")["changed"], false);
    assert_eq!(as_source(&green, "green")["changed"], false);
    assert_eq!(puts(&server), 2);
    // A sync without a source name is the `default` source's, compared with that source's
    // upload alone: the other sources' keys are not its to retire, nor to upload again.
    let plain = KubeApiServer::start(vec![
        SigningKey::generate(KeyKind::P256, "plain").public_jwk()
    ]);
    let as_default = || line(&sync(&server, &plain, &sub, Some(&acme.token), &[]));
    let first_plain = as_default();
    assert_eq!(
        (first_plain["added"].clone(), first_plain["retired"].clone()),
        (json!(["plain"]), json!([])),
        "{first_plain}"
    );
    assert_eq!(as_default()["changed"], false);
    assert_eq!(puts(&server), 3);

    // The blue cluster is gone: its source is removed with the client command.
    let removed = Command::new(registry_binary())
        .args([
            "config",
            "delete",
            &sub,
            "--source",
            "blue",
            "--api-url",
            &server.base,
        ])
        .env("REGISTRY_TOKEN", &acme.token)
        .output()
        .unwrap();
    assert!(
        removed.status.success(),
        "{}",
        String::from_utf8_lossy(&removed.stderr)
    );
    assert_eq!(
        public_kids(&server, &sub),
        ["plain", "green", "blue"],
        "blue is retired, still published"
    );
    let shown = Command::new(registry_binary())
        .args([
            "config",
            "get",
            &sub,
            "--source",
            "green",
            "--api-url",
            &server.base,
            "--format",
            "json",
        ])
        .env("REGISTRY_TOKEN", &acme.token)
        .output()
        .unwrap();
    assert!(
        shown.status.success(),
        "{}",
        String::from_utf8_lossy(&shown.stderr)
    );
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(crate::api::keys::kids(&shown["jwks"]), ["green"]);
    let bad = sync(
        &server,
        &green,
        &sub,
        Some(&acme.token),
        &["--source-name", "Green!"],
    );
    // A name the API would refuse is a wrong command line, told before any call.
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("is not a key source name"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

/// Sources outside a cluster, read with care: an issuer whose key set lives on another host
/// (its own path answers 404) has its `jwks_uri` followed; a source that sends more than a
/// document holds is given up at 1 MiB; a source that now serves a published key's private part
/// is uploaded all the same, so that the registry refuses it and says why (never "in sync").
#[test]
fn an_issuers_key_set_elsewhere_a_flood_and_a_leaked_private_key() {
    use registry_tests::issuer::{TestIssuer, JWKS_PATH};
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let token = Some(acme.token.as_str());
    let sub = crate::api::register_service(&server, &acme, "google");
    let (issuer, keys_host) = (TestIssuer::start(), TestIssuer::start());
    let elsewhere = format!("{}{JWKS_PATH}", keys_host.url());
    issuer.set_jwks_uri(Some(&elsewhere));
    let run = || {
        sync_command(&sub, &server.base, &issuer.url(), None, None, token)
            .output()
            .unwrap()
    };
    assert_eq!(line(&run())["changed"], true);
    let served: Value = reqwest::blocking::get(&elsewhere).unwrap().json().unwrap();
    let config = json(server.get(&format!("/services/{sub}/config"), &acme.token));
    assert_eq!(config["jwks"]["keys"], served["keys"]);
    assert_eq!(issuer.fetches("/openid/v1/jwks"), 1, "its own path first");

    // 2 MiB of key set: exit 1, one sentence, the published keys unchanged.
    keys_host.set_jwks_padding(2 * 1024 * 1024);
    let flooded = run();
    let stderr = String::from_utf8_lossy(&flooded.stderr);
    assert_eq!(flooded.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("larger than 1 MiB"), "{stderr}");
    keys_host.set_jwks_padding(0);
    assert_eq!(line(&run())["changed"], false);

    // From files: a key published, then served with its private part.
    let dir = registry_tests::server::TempDir::new("sync-leak");
    let files = crate::api::register_service(&server, &acme, "files");
    let key = SigningKey::generate(KeyKind::P256, "leaky");
    let (discovery, jwks) = (dir.0.join("discovery.json"), dir.0.join("jwks.json"));
    let document = json!({"issuer": "https://kubernetes.default.svc",
        "jwks_uri": "https://10.0.0.1:6443/openid/v1/jwks",
        "response_types_supported": ["id_token"], "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["ES256"]});
    std::fs::write(&discovery, document.to_string()).unwrap();
    let sync_files = |key_set: &Path| {
        Command::new(registry_binary())
            .args(["sync", "--service", &files, "--api-url", &server.base])
            .arg("--discovery-file")
            .arg(&discovery)
            .arg("--jwks-file")
            .arg(key_set)
            .env("REGISTRY_TOKEN", &acme.token)
            .output()
            .unwrap()
    };
    let from_files = |keys: Value| {
        std::fs::write(&jwks, json!({ "keys": [keys] }).to_string()).unwrap();
        sync_files(&jwks)
    };
    assert_eq!(line(&from_files(key.public_jwk()))["changed"], true);
    assert_eq!(line(&from_files(key.public_jwk()))["changed"], false);
    let mut leaked = key.public_jwk();
    leaked["d"] = json!("nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A");
    let refused = from_files(leaked);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("private or symmetric key material (d)"),
        "{stderr}"
    );
    assert_eq!(public_kids(&server, &files), ["leaky"]);
    // A file is read up to 1 MiB too: `/dev/zero` is refused, not read on.
    let endless = sync_files(Path::new("/dev/zero"));
    let stderr = String::from_utf8_lossy(&endless.stderr);
    assert_eq!(endless.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("/dev/zero is larger than 1 MiB"),
        "{stderr}"
    );
}
