//! `cargo xtask <command>`: the project's chores in one place.
//!
//! * `test [--postgres-only] [-- TEST ARGS]`: the layering check, `cargo test --workspace`
//!   (unit, doc and integration tests on SQLite), then the integration suite again on a
//!   throwaway PostgreSQL cluster.
//! * `lint`: rustfmt, clippy and rustdoc (warnings are errors), the examples of
//!   `registry-domain` run, `cargo package` of it, the layering check, and `cargo deny check
//!   bans licenses sources` when cargo-deny is installed.
//! * `layering`: the layering check alone (no build).
//! * `manifests`: `deploy/kubernetes/` validated against the Kubernetes schemas.
//! * `e2e [-- NODE TEST ARGS]`: the browser tests of the pages (`e2e/`; needs Node.js and
//!   Chromium).
//! * `bench [--rounds N] [--seconds S] [--services N] [--no-postgres] [--no-write] [--binary
//!   PATH]`: the HTTP figures against nginx, written to docs/benchmarks.md (needs `wrk` and
//!   `nginx-light`).
//! * `fuzz [--seconds N] [TARGET…]`, `schemathesis [--max-examples N] [--seed S] [--postgres]
//!   [--federated]`, `faults [--rounds N] [kill] [postgres] [pgkill] [disk]`: the reliability
//!   suites (docs/reliability.md).
//! * `soak [--minutes M] [--postgres] [--binary PATH]`: minutes of mixed load on the release
//!   binary; no 5xx, nothing lost, memory flat (docs/reliability.md; needs `wrk`).

mod bench;
mod cmd;
mod e2e;
mod faults;
mod fuzz;
mod layering;
mod manifests;
mod postgres;
mod schemathesis;
mod soak;

use anyhow::{bail, Context, Result};
use cmd::{cargo, run};
use std::process::ExitCode;

const USAGE: &str =
    "usage: cargo xtask <test [--postgres-only] [-- TEST ARGS] | lint | layering | manifests | bench | e2e | fuzz | schemathesis | faults | soak>";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => test(&args[1..]),
        Some("lint") => lint(),
        Some("layering") => layering::check(),
        Some("manifests") => manifests::check(),
        Some("fuzz") => fuzz::run(&args[1..]),
        Some("schemathesis") => schemathesis::run(&args[1..]),
        Some("faults") => faults::run(&args[1..]),
        Some("soak") => soak::run(&args[1..]),
        Some("e2e") => e2e::run_suite(&args[1..]),
        Some("bench") => bench::run_bench(&args[1..]),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn banner(title: &str) {
    println!("\n=== {title} ===\n");
}

fn test(args: &[String]) -> Result<()> {
    let (flags, test_args) = match args.iter().position(|a| a == "--") {
        Some(i) => (&args[..i], &args[i + 1..]),
        None => (args, &[][..]),
    };
    let mut postgres_only = false;
    for flag in flags {
        match flag.as_str() {
            "--postgres-only" => postgres_only = true,
            other => bail!("unknown flag {other:?}\n{USAGE}"),
        }
    }

    if !postgres_only {
        banner("layering");
        layering::check()?;
        banner("Kubernetes manifests");
        manifests::check()?;
        banner("integration suite on SQLite");
        println!("(with every unit and doc test of the workspace)");
        run(cargo().args(["test", "--workspace", "--"]).args(test_args))?;
    }

    // Before starting the cluster, so that compile errors do not wait for initdb.
    run(cargo().args([
        "test",
        "-p",
        "registry-tests",
        "--test",
        "integration",
        "--no-run",
    ]))?;
    let cluster = postgres::Cluster::start()?;
    banner("integration suite on PostgreSQL");
    let on_postgres = |args: &[&str]| -> Result<()> {
        run(cargo()
            .args([
                "test",
                "-p",
                "registry-tests",
                "--test",
                "integration",
                "--",
            ])
            .args(args)
            .env("REGISTRY_TEST_POSTGRES_URL", cluster.admin_url())
            .env("PATH", cluster.path_with_binaries()?))
    };
    let args: Vec<&str> = test_args.iter().map(String::as_str).collect();
    let mut result = on_postgres(&args);
    if result.is_ok() && test_args.is_empty() {
        banner("PostgreSQL-only tests (ignored on SQLite)");
        result = on_postgres(&["--ignored", "api::outage"]);
    }
    drop(cluster);
    result
}

fn lint() -> Result<()> {
    banner("rustfmt");
    run(cargo().args(["fmt", "--all", "--", "--check"]))?;
    banner("clippy");
    run(cargo().args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    banner("rustdoc");
    run(cargo()
        .args(["doc", "--workspace", "--no-deps"])
        .env("RUSTDOCFLAGS", "-D warnings"))?;
    banner("registry-domain: examples and package");
    for example in domain_examples()? {
        let args = ["run", "--quiet", "-p", "registry-domain", "--example"];
        run(cargo().args(args).arg(example))?;
    }
    run(cargo().args([
        "package",
        "-p",
        "registry-domain",
        "--allow-dirty",
        "--no-verify",
    ]))?;
    banner("layering");
    layering::check()?;
    banner("cargo deny");
    if cmd::succeeds(cargo().args(["deny", "--version"])) {
        run(cargo().args(["deny", "check", "bans", "licenses", "sources"]))?;
    } else {
        println!(
            "cargo-deny is not installed: skipped (install: cargo install --locked cargo-deny)"
        );
    }
    Ok(())
}

/// The names of `crates/domain/examples/*.rs`, sorted. Each example asserts what it prints, so
/// running it is a test.
fn domain_examples() -> Result<Vec<String>> {
    let dir = cmd::root().join("crates/domain/examples");
    let mut names = Vec::new();
    for entry in
        std::fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))?
    {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "rs") {
            if let Some(name) = path.file_stem().and_then(|s| s.to_str()) {
                names.push(name.to_owned());
            }
        }
    }
    names.sort();
    Ok(names)
}
