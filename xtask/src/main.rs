//! `cargo xtask <chore>`: the project's chores in one place (`cargo xtask --help` lists them,
//! `cargo xtask <chore> --help` their flags).

mod acme;
mod api;
mod bare_host;
mod bench;
mod cdn;
mod cmd;
mod e2e;
mod faults;
mod fuzz;
mod layering;
mod ledger;
mod manifests;
mod postgres;
mod processes;
mod python;
mod registry;
mod schemathesis;
mod setup;
mod soak;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use cmd::{cargo, run};
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "The project's chores."
)]
struct Cli {
    #[command(subcommand)]
    chore: Chore,
}

#[derive(Debug, Subcommand)]
enum Chore {
    /// The tools it needs (`setup --for test`), the layering check, the deployment files
    /// (`manifests`), `cargo test --workspace` (unit, doc and integration tests on SQLite), then
    /// the integration suite again on a throwaway PostgreSQL cluster, the standby scenario,
    /// `cdn` and `acme`.
    Test {
        /// Only the integration suite on PostgreSQL.
        #[arg(long)]
        postgres_only: bool,
        /// Passed to the test binaries (after `--`).
        #[arg(last = true)]
        test_args: Vec<String>,
    },
    /// The tools it needs (`setup --for lint`), rustfmt, clippy and rustdoc (warnings are
    /// errors), the examples of registry-domain, `cargo package` of registry-policy (with its
    /// verification build) and registry-domain, the layering check, and `cargo deny`.
    Lint,
    /// The external tools of `test` (or `lint`, `e2e`, `all`), checked at once: what is missing
    /// is installed where it can be, else named with its package and the command to install it.
    ///
    /// Debian's packages are installed with apt-get when running as root, cargo-deny with `cargo
    /// install`, rustfmt and clippy with rustup; whatever is still missing is named, all of it in
    /// one message, and the command fails. `test`, `lint` and `e2e` run this first, each for
    /// its own tools.
    Setup(setup::Options),
    /// The layering check alone (no build).
    Layering,
    /// deploy/: the Kubernetes manifests against the Kubernetes schemas (cert-manager's
    /// Certificate against its CRD's), the systemd unit with `systemd-analyze verify`, and the
    /// registry binary's shared libraries against the container's base image.
    Manifests,
    /// The browser tests of the pages (e2e/; needs Node.js and Chromium: `setup --for e2e`).
    E2e {
        /// Passed to `node --test` (after `--`).
        #[arg(last = true)]
        node_args: Vec<String>,
    },
    /// The release binary in a root file system holding only the C runtime: serve with no
    /// settings, create a customer, publish a configuration, fetch it publicly.
    BareHost,
    /// The HTTP figures against nginx, written to docs/benchmarks.md (needs wrk and nginx-light).
    Bench(bench::Options),
    /// `bench --workers` packed for a machine with no Rust, wrk, nginx or network (a lent
    /// many-core machine): the release registry, xtask, nginx, wrk and taskset with their
    /// libraries and loader in `kit.tar.gz`, and `run.sh`, which unpacks and runs it.
    BenchKit(bench::kit::Options),
    /// The cargo-fuzz targets of fuzz/ (docs/reliability.md).
    Fuzz(fuzz::Options),
    /// API fuzzing from the server's own /openapi.json (docs/reliability.md).
    Schemathesis(schemathesis::Options),
    /// The real binary under crashes, database outages and a full disk (docs/reliability.md).
    Faults(faults::Options),
    /// A key rotation through Varnish (deploy/cdn/) in front of two registries on PostgreSQL,
    /// with jose and PyJWT as relying parties (needs varnish and Node.js).
    Cdn,
    /// A custom domain end to end: verified by its DNS TXT record, a certificate from Pebble
    /// (ACME, HTTP-01) served by two registries on PostgreSQL, PyJWT as relying party (needs
    /// pebble, curl, and root for port 443).
    Acme,
    /// Minutes of mixed load on the release binary: no 5xx, nothing lost, memory flat
    /// (docs/reliability.md; needs wrk).
    Soak(soak::Options),
}

fn main() -> ExitCode {
    let result = match Cli::parse().chore {
        Chore::Test {
            postgres_only,
            test_args,
        } => test(postgres_only, &test_args),
        Chore::Lint => lint(),
        Chore::Setup(options) => setup::run_options(&options),
        Chore::Layering => layering::check(),
        Chore::Manifests => manifests::check(),
        Chore::E2e { node_args } => e2e::run(&node_args),
        Chore::BareHost => bare_host::run(),
        Chore::Bench(options) => bench::run(&options),
        Chore::BenchKit(options) => bench::kit::run(&options),
        Chore::Fuzz(options) => fuzz::run(&options),
        Chore::Schemathesis(options) => schemathesis::run(&options),
        Chore::Faults(options) => faults::run(&options),
        Chore::Cdn => cdn::run(),
        Chore::Acme => acme::run(),
        Chore::Soak(options) => soak::run(&options),
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

/// The Python of the suite's tests that use Python libraries: the Prometheus project's parser
/// (`api::ops::metrics_parse_with_the_prometheus_parser`), pyoidc, PyJWT and httpx as
/// relying parties over HTTPS and HTTP/2 (`https::the_api_and_the_issuers_are_served_with_a_chain_and_names_clients_check`),
/// and grpcio with its code generator as a client of the signing plugin
/// (`signer::a_client_of_grpcs_c_core_is_served_though_it_names_the_socket_as_authority`).
pub(crate) fn test_python() -> Result<std::path::PathBuf> {
    let packages = "prometheus-client==0.21.1 pyjwt[crypto]==2.10.1 httpx[http2]==0.28.1 \
                    oic==1.7.0 grpcio==1.85.3 grpcio-tools==1.85.1";
    Ok(python::venv("test-python", packages)?.join("bin/python"))
}

fn test(postgres_only: bool, test_args: &[String]) -> Result<()> {
    // Every tool of every step, before the first: a missing one stops the run now, not after
    // the suites.
    setup::ensure(setup::Scope::Test, true)?;
    if !postgres_only {
        banner("layering");
        layering::check()?;
        banner("deployment files (Kubernetes, systemd, container)");
        manifests::check()?;
        banner("integration suite on SQLite");
        println!("(with every unit and doc test of the workspace)");
        run(cargo("test --workspace --")
            .args(test_args)
            .env("REGISTRY_TEST_PYTHON", test_python()?)
            .env("REGISTRY_TEST_RELYING_PARTIES", cdn::relying_parties()?))?;
        if test_args.is_empty() {
            banner("the policy engine from Python (crates/policy-python, pytest)");
            python::test_policy_binding()?;
        }
    }

    // Before starting the cluster, so that compile errors do not wait for initdb.
    let integration = "test -p registry-tests --test integration";
    run(cargo(integration).arg("--no-run"))?;
    let python = test_python()?;
    let cluster = postgres::Cluster::start()?;
    banner("integration suite on PostgreSQL");
    let on_postgres = |args: &[&str]| -> Result<()> {
        run(cargo(integration)
            .arg("--")
            .args(args)
            .env("REGISTRY_TEST_POSTGRES_URL", cluster.admin_url())
            .env("REGISTRY_TEST_PYTHON", &python)
            .env("REGISTRY_TEST_RELYING_PARTIES", cdn::relying_parties()?)
            .env("PATH", cluster.path_with_binaries()?))
    };
    let args: Vec<&str> = test_args.iter().map(String::as_str).collect();
    let mut result = on_postgres(&args);
    if result.is_ok() && test_args.is_empty() {
        banner("PostgreSQL-only tests (ignored on SQLite)");
        result = on_postgres(&["--ignored", "api::outage"]);
    }
    if result.is_err() {
        // Many failures at once mean the server, not the tests: say what it saw, last.
        cluster.report();
    }
    drop(cluster);
    if result.is_ok() && test_args.is_empty() {
        banner("a primary and a synchronous standby: read replica, primary down, fail-over");
        result = faults::run_standby();
    }
    if result.is_ok() && test_args.is_empty() {
        banner("a key rotation through Varnish in front of two registries (deploy/cdn/)");
        result = cdn::run();
    }
    if result.is_ok() && test_args.is_empty() {
        banner("custom domains: a certificate from Pebble on two registries (docs/api.md, \"Custom domains\")");
        result = acme::run();
    }
    result
}

fn lint() -> Result<()> {
    setup::ensure(setup::Scope::Lint, true)?;
    banner("rustfmt");
    run(&mut cargo("fmt --all -- --check"))?;
    banner("clippy");
    run(&mut cargo(
        "clippy --workspace --all-targets -- -D warnings",
    ))?;
    banner("rustdoc");
    run(cargo("doc --workspace --no-deps").env("RUSTDOCFLAGS", "-D warnings"))?;
    banner("registry-domain: examples and package");
    for example in domain_examples()? {
        run(cargo("run --quiet -p registry-domain --example").arg(example))?;
    }
    banner("registry-policy: package, with its verification build");
    run(&mut cargo("package -p registry-policy --allow-dirty"))?;
    run(&mut cargo(
        "package -p registry-policy -p registry-domain --allow-dirty --no-verify",
    ))?;
    banner("layering");
    layering::check()?;
    banner("cargo deny");
    run(&mut cargo("deny check bans licenses sources"))
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
