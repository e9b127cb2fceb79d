//! `cargo xtask schemathesis [--max-examples N] [--seed S] [--postgres] [--federated]`: API
//! fuzzing driven by the server's own `/openapi.json`.
//!
//! Installs schemathesis (pinned) from PyPI into `target/schemathesis/venv`, starts the real
//! binary on a free port with a fresh SQLite database (or, with `--postgres`, a throwaway
//! PostgreSQL cluster), creates a customer with `registry customer create` (its token goes in
//! every request's `Authorization`), registers services with published configurations and two
//! more service accounts, so that `{subdomain}` and `{id}` take real values (schemathesis
//! `[parameters]`; the deleting calls get resources of their own), then runs every operation with
//! the checks `not_a_server_error`, `response_schema_conformance` and `status_code_conformance`.
//! Reports land in `target/schemathesis/report/`; the server log in
//! `target/schemathesis/server.log`.
//!
//! With `--federated` the caller is an `oidc` service account instead: every request carries an
//! RS256 identity token (JWT) minted here for an issuer that is a service hosted by the same
//! registry (`http://idp-acme.localhost:PORT`, as the benchmark's P3 scenario does), so the whole
//! pass goes through the federated path (discovery, key set, claims, policy rules). The server
//! then runs with `REGISTRY_OIDC_ALLOW_INSECURE_ISSUERS=true` (an `http`, loopback issuer).

use crate::bench::client::{oidc_policy, upload as upload_of, Api, Signer};
use crate::cmd::{output, root, run as run_command};
use crate::faults::harness::{build_binary, customer, free_port, Registry};
use anyhow::{bail, ensure, Context, Result};
use serde_json::json;
use std::process::Command;

const VERSION: &str = "4.32.5";
const CHECKS: &str = "not_a_server_error,response_schema_conformance,status_code_conformance";
const USAGE: &str =
    "usage: cargo xtask schemathesis [--max-examples N] [--seed S] [--postgres] [--federated]";

pub fn run(args: &[String]) -> Result<()> {
    let mut max_examples: u32 = 50;
    let mut seed: u64 = 20_261_121;
    let mut on_postgres = false;
    let mut federated = false;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let mut value = || {
            args.next()
                .and_then(|v| v.parse::<u64>().ok())
                .context(USAGE)
        };
        match arg.as_str() {
            "--postgres" => on_postgres = true,
            "--federated" => federated = true,
            "--max-examples" => max_examples = u32::try_from(value()?)?,
            "--seed" => seed = value()?,
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    let dir = root().join("target/schemathesis");
    let venv = dir.join("venv");
    let st = venv.join("bin/st");
    let installed = output(Command::new(&st).arg("--version")).unwrap_or_default();
    if !installed.contains(VERSION) {
        println!("installing schemathesis {VERSION} into {}", venv.display());
        run_command(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
        run_command(
            Command::new(venv.join("bin/pip"))
                .args(["install", "--quiet"])
                .arg(format!("schemathesis=={VERSION}")),
        )?;
    }

    let binary = build_binary()?;
    // PostgreSQL refuses some text SQLite stores (NUL), so both backends are worth a run.
    let cluster = if on_postgres {
        Some(crate::postgres::Cluster::start()?)
    } else {
        None
    };
    let url = match &cluster {
        Some(cluster) => cluster.admin_url(),
        None => {
            let db = dir.join("registry.db");
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
            }
            format!("sqlite://{}", db.display())
        }
    };
    let token = customer(&binary, &url, "acme")?;
    let log = dir.join("server.log");
    let _ = std::fs::remove_file(&log);
    let port = free_port()?;
    // Creation limits would turn most anonymous creations into 429s.
    let mut env = vec![("REGISTRY_ANON_CREATE_PER_HOUR", "1000000")];
    if federated {
        env.push(("REGISTRY_OIDC_ALLOW_INSECURE_ISSUERS", "true"));
    }
    let registry = Registry::start(&binary, &url, port, &log, &env)?;
    let http = registry.http();
    let created = http.call(
        "POST",
        "/services",
        Some(&token),
        Some(&json!({"title": "API", "serviceName": "api"})),
    )?;
    ensure!(
        created.status == 201,
        "POST /services → {}: {}",
        created.status,
        created.body
    );
    let subdomain = created.json()["subdomain"]
        .as_str()
        .context("a subdomain")?
        .to_owned();
    let upload = json!({
        "openidConfiguration": {
            "issuer": "https://kubernetes.default.svc.cluster.local",
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["ES256"]
        },
        "jwks": {"keys": [{"kty": "EC", "crv": "P-256", "kid": "k1", "use": "sig", "alg": "ES256",
            "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
            "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}
    });
    for name in ["api", "unpublish"] {
        if name != "api" {
            let body = json!({"title": name, "serviceName": name});
            let made = http.call("POST", "/services", Some(&token), Some(&body))?;
            ensure!(made.status == 201, "POST /services → {}", made.status);
        }
        let path = format!("/services/{name}-acme/config");
        let published = http.call("PUT", &path, Some(&token), Some(&upload))?;
        ensure!(published.status == 200, "PUT {path} → {}", published.status);
    }
    let body = json!({"title": "doomed", "serviceName": "doomed"});
    let doomed = http.call("POST", "/services", Some(&token), Some(&body))?;
    ensure!(doomed.status == 201, "POST /services → {}", doomed.status);
    // Not the bootstrap account: schemathesis regenerates `{id}`'s token and deletes another.
    let mut accounts = Vec::new();
    for name in ["target", "doomed"] {
        let body = json!({"name": name, "policy": {"kind": "static", "services": [subdomain]}});
        let account = http.call("POST", "/service-accounts", Some(&token), Some(&body))?;
        ensure!(
            account.status == 201,
            "POST /service-accounts → {}",
            account.status
        );
        accounts.push(account.json()["id"].as_str().context("an id")?.to_owned());
    }

    // A federated caller names its account in `X-Service-Account`: left to schemathesis, the
    // header is fuzzed into 401s (documented) on nearly every call, until the registry's limit on
    // failed authentications turns the rest into 429s and no success path is reached.
    // (Operations' own `parameters` below only override the global ones they name.)
    let (bearer, header) = if federated {
        let (jwt, account) = federated_caller(port, &token)?;
        (
            jwt,
            format!("\"header.X-Service-Account\" = \"{account}\"\n"),
        )
    } else {
        (token.clone(), String::new())
    };

    // The deleting calls get resources of their own, so that the others keep finding theirs.
    let config = dir.join("schemathesis.toml");
    std::fs::write(
        &config,
        format!(
            "# Written by `cargo xtask schemathesis`.\n\
             headers = {{ Authorization = \"Bearer ${{REGISTRY_SCHEMATHESIS_TOKEN}}\" }}\n\n\
             [parameters]\n\"path.subdomain\" = \"{subdomain}\"\n\"path.id\" = \"{target}\"\n{header}\n\
             [[operations]]\ninclude-name = \"DELETE /services/{{subdomain}}\"\n\
             parameters = {{ \"path.subdomain\" = \"doomed-acme\" }}\n\n\
             [[operations]]\ninclude-name = \"DELETE /services/{{subdomain}}/config\"\n\
             parameters = {{ \"path.subdomain\" = \"unpublish-acme\" }}\n\n\
             [[operations]]\ninclude-name = \"DELETE /service-accounts/{{id}}\"\n\
             parameters = {{ \"path.id\" = \"{doomed}\" }}\n",
            target = accounts[0],
            doomed = accounts[1],
        ),
    )?;
    let report = dir.join("report");
    let _ = std::fs::remove_dir_all(&report);
    let caller = if federated {
        "an identity token (JWT) of an oidc account"
    } else {
        "the customer's static token"
    };
    println!("\n=== schemathesis on http://127.0.0.1:{port}/openapi.json, as {caller} ===\n");
    let result = run_command(
        Command::new(&st)
            // Its example database (`.schemathesis/`) then lands under target/.
            .current_dir(&dir)
            .arg("--config-file")
            .arg(&config)
            .args(["run", &format!("http://127.0.0.1:{port}/openapi.json")])
            .args(["--checks", CHECKS])
            .args(["--max-examples", &max_examples.to_string()])
            .args(["--seed", &seed.to_string()])
            .args(["--workers", "1", "--no-color", "--report", "junit,ndjson"])
            .arg("--report-dir")
            .arg(&report)
            .env("REGISTRY_SCHEMATHESIS_TOKEN", &bearer),
    );
    drop(registry);
    drop(cluster);
    if let Err(e) = print_statuses(&report) {
        println!("(no status summary: {e:#})");
    }
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    let panics = log_text.lines().filter(|l| l.contains("panicked")).count();
    println!(
        "report: {}\nserver log: {} ({panics} panics)",
        report.display(),
        log.display()
    );
    ensure!(
        panics == 0,
        "the server panicked during the run: see {}",
        log.display()
    );
    result.context("schemathesis found failures (see the output above and the report)")
}

/// Sets up the federated caller: a service `idp` publishing an RS256 key, the issuer it is hosted
/// as, an `oidc` account trusting that issuer's tokens; one such token (valid for an hour) and the
/// account's id.
///
/// The account's rule covers `"*"`: every service schemathesis touches (including `doomed-acme`
/// and `unpublish-acme`, which the deleting calls use, and those it creates itself), and the
/// service-account calls, which only callers whose patterns include `"*"` may make
/// (DECISIONS.md §5).
fn federated_caller(port: u16, token: &str) -> Result<(String, String)> {
    let base = format!("http://127.0.0.1:{port}");
    let api = Api::new(base.clone(), token.to_owned())?;
    let signer = Signer::generate("idp-1")?;
    let idp = api.create_service("idp")?;
    api.publish(&idp, &upload_of(signer.jwks()))?;
    let issuer = format!("http://{idp}.localhost:{port}");
    let (account, _) = api.create_account("federated", oidc_policy(&issuer, &["*"]))?;
    let jwt = signer.mint(&issuer)?;
    // A token the registry refuses would turn the whole pass into 401s.
    let (status, answer) =
        Api::new(base, jwt.clone())?.call(reqwest::Method::GET, "/service-accounts", None)?;
    ensure!(
        status == 200,
        "the identity token is refused: GET /service-accounts → {status}: {answer}"
    );
    println!("federated caller: oidc account trusting {issuer}");
    Ok((jwt, account))
}

/// Prints, per documented operation, how many responses of each status the run got (from the
/// NDJSON report), so that a run that never reached an operation's success path shows.
fn print_statuses(report: &std::path::Path) -> Result<()> {
    use std::collections::BTreeMap;
    let file = std::fs::read_dir(report)?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "ndjson"))
        .context("no NDJSON report")?;
    let documented = ["GET", "POST", "PUT", "PATCH", "DELETE"];
    let mut table: BTreeMap<String, BTreeMap<u64, u64>> = BTreeMap::new();
    let mut other_methods = 0;
    for line in std::fs::read_to_string(&file)?.lines() {
        let event: serde_json::Value = serde_json::from_str(line)?;
        let recorder = &event["ScenarioFinished"]["recorder"];
        let Some(interactions) = recorder["interactions"].as_object() else {
            continue;
        };
        for (id, interaction) in interactions {
            let case = &recorder["cases"][id]["value"];
            let method = case["method"].as_str().unwrap_or("?");
            let Some(status) = interaction["response"]["status_code"].as_u64() else {
                continue;
            };
            // Schemathesis also probes methods a path does not serve (405).
            if !documented.contains(&method) || status == 405 {
                other_methods += 1;
                continue;
            }
            let operation = format!("{method} {}", case["path"].as_str().unwrap_or("?"));
            *table
                .entry(operation)
                .or_default()
                .entry(status)
                .or_default() += 1;
        }
    }
    println!("\nresponses per operation (status: count):");
    for (operation, statuses) in &table {
        let counts: Vec<String> = statuses.iter().map(|(s, n)| format!("{s}: {n}")).collect();
        println!("  {operation:<50} {}", counts.join(", "));
    }
    println!("  (and {other_methods} requests with methods the path does not serve: 405)");
    Ok(())
}
