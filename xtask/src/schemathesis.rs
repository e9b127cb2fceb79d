//! `cargo xtask schemathesis`: API fuzzing driven by the server's own `/openapi.json`.
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

use crate::api::{fake_keys, hosted_issuer, oidc_policy, upload, Api};
use crate::cmd::{root, run as run_command};
use crate::registry::{self, create_customer, Registry};
use anyhow::{ensure, Context, Result};
use serde_json::json;
use std::process::Command;

const VERSION: &str = "4.32.5";
const CHECKS: &str = "not_a_server_error,response_schema_conformance,status_code_conformance";

#[derive(Debug, clap::Args)]
pub struct Options {
    /// Examples generated per operation.
    #[arg(long, default_value_t = 50)]
    max_examples: u32,
    /// Seed of the generated cases.
    #[arg(long, default_value_t = 20_261_121)]
    seed: u64,
    /// On a throwaway PostgreSQL cluster instead of SQLite.
    #[arg(long)]
    postgres: bool,
    /// As an `oidc` account presenting an identity token, instead of the customer's token.
    #[arg(long)]
    federated: bool,
}

pub fn run(options: &Options) -> Result<()> {
    let Options {
        max_examples,
        seed,
        postgres: on_postgres,
        federated,
    } = *options;
    let dir = root().join("target/schemathesis");
    let st =
        crate::python::venv("schemathesis", &format!("schemathesis=={VERSION}"))?.join("bin/st");

    let binary = registry::build(false)?;
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
    let token = create_customer(&binary, &url, "acme")?;
    let log = dir.join("server.log");
    let _ = std::fs::remove_file(&log);
    // Creation limits would turn most anonymous creations into 429s; with a data key, managed
    // signing is on (docs/api.md, "Managed signing"), not refused as `signing-disabled`.
    let mut server = registry::Options::new(&binary, &url, &log)
        .env("REGISTRY_ANON_CREATE_PER_HOUR", "1000000")
        .env(
            "REGISTRY_DATA_KEY",
            "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
        );
    if federated {
        server = server.env("REGISTRY_OIDC_ALLOW_INSECURE_ISSUERS", "true");
    }
    let registry = Registry::start(&server)?;
    let port = registry.port;
    let api = Api::new(registry.http(), &token);
    // Published services for the operations on `{subdomain}`, one to unpublish, one to delete.
    let subdomain = api.create_service("api")?;
    for name in ["api", "unpublish"] {
        if name != "api" {
            api.create_service(name)?;
        }
        api.publish(&format!("{name}-acme"), &upload(fake_keys("k1", 1)))?;
    }
    api.create_service("doomed")?;
    // Not the bootstrap account: schemathesis regenerates `{id}`'s token and deletes another.
    let mut accounts = Vec::new();
    for name in ["target", "doomed"] {
        let policy = json!({"kind": "static", "services": [subdomain]});
        accounts.push(api.create_account(name, policy)?.0);
    }

    // A federated caller names its account in `X-Service-Account`: left to schemathesis, the
    // header is fuzzed into 401s (documented) on nearly every call, until the registry's limit on
    // failed authentications turns the rest into 429s and no success path is reached.
    // (Operations' own `parameters` below only override the global ones they name.)
    let (bearer, header) = if federated {
        let (jwt, account) = federated_caller(&api)?;
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
    // `POST /fetch-log` takes JSON lines, a type schemathesis has no serializer for: its body
    // (a string in the schema) is sent as the text it is.
    std::fs::write(
        dir.join("registry_hooks.py"),
        "# Written by `cargo xtask schemathesis`.\n\
         import schemathesis\n\n\n\
         @schemathesis.serializer(\"application/x-ndjson\")\n\
         def ndjson(ctx, value):\n    \
             return value if isinstance(value, bytes) else str(value).encode()\n",
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
            .env("REGISTRY_SCHEMATHESIS_TOKEN", &bearer)
            .env("SCHEMATHESIS_HOOKS", "registry_hooks")
            .env("PYTHONPATH", &dir),
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
/// (docs/api.md, "Authentication").
fn federated_caller(api: &Api) -> Result<(String, String)> {
    let (issuer, signer) = hosted_issuer(api)?;
    let (account, _) = api.create_account("federated", oidc_policy(&issuer, &["*"]))?;
    let jwt = signer.mint(&issuer)?;
    // A token the registry refuses would turn the whole pass into 401s.
    Api::new(api.http, &jwt)
        .expect("GET", "/service-accounts", None, 200)
        .context("the identity token is refused")?;
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
