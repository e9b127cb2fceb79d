//! `cargo xtask fuzz [--seconds N] [TARGET…]`: runs the cargo-fuzz targets of `fuzz/` (every
//! one unless named) for N seconds each (default 60), installing cargo-fuzz when it is missing.
//!
//! Seeds are read from `fuzz/corpus/<target>/` (committed, small), tokens from
//! `fuzz/dicts/<target>.dict`, and new inputs are written to
//! `target/fuzz-corpus/<target>/`, so runs never grow the committed corpus. A crash leaves its
//! input in `fuzz/artifacts/<target>/` and fails the chore; turn it into a regression test in
//! the crate it concerns. libFuzzer's output goes to `target/fuzz-logs/<target>.log`.

use crate::cmd::{root, run as run_command, succeeds};
use anyhow::{bail, Context, Result};
use std::process::{Command, Stdio};
use std::time::Instant;

/// The targets of `fuzz/Cargo.toml`.
pub const TARGETS: [&str; 5] = ["policy", "publish", "jwt", "glob", "glob_cost"];

#[derive(Debug, clap::Args)]
pub struct Options {
    /// Seconds of fuzzing per target.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    seconds: u64,
    /// The targets to run; every one when none is named.
    #[arg(value_parser = TARGETS)]
    targets: Vec<String>,
}

/// What one target's run did.
struct Run {
    target: &'static str,
    seconds: f64,
    executions: Option<u64>,
    corpus: usize,
    crashed: bool,
}

/// `cargo` through rustup's proxy, so that `+nightly` picks the toolchain (the `CARGO` that runs
/// xtask is the stable toolchain's own binary, which ignores `+toolchain`).
fn nightly_cargo() -> Command {
    let mut command = Command::new("cargo");
    command.arg("+nightly").current_dir(root());
    command.env_remove("RUSTUP_TOOLCHAIN").env_remove("CARGO");
    command
}

fn ensure_cargo_fuzz() -> Result<()> {
    if succeeds(nightly_cargo().args(["fuzz", "--version"])) {
        return Ok(());
    }
    println!("cargo-fuzz is not installed: installing it from crates.io");
    run_command(Command::new("cargo").args(["install", "cargo-fuzz", "--locked"]))
        .context("installing cargo-fuzz")?;
    if !succeeds(nightly_cargo().args(["fuzz", "--version"])) {
        bail!("cargo +nightly fuzz does not run: is the nightly toolchain installed? (rustup toolchain install nightly)");
    }
    Ok(())
}

pub fn run(options: &Options) -> Result<()> {
    let seconds = options.seconds;
    let targets: Vec<&'static str> = TARGETS
        .into_iter()
        .filter(|t| options.targets.is_empty() || options.targets.iter().any(|o| o == t))
        .collect();
    ensure_cargo_fuzz()?;
    // The jwt target's seeds must verify with its keys, or it never reaches the accepting path.
    let seeds_test = "test --quiet -p registry-oidc --features fuzzing --lib fuzzing";
    run_command(&mut crate::cmd::cargo(seeds_test))?;
    // Build every target first, so that the time budget is spent fuzzing.
    run_command(nightly_cargo().args(["fuzz", "build", "--fuzz-dir", "fuzz"]))?;

    let logs = root().join("target/fuzz-logs");
    std::fs::create_dir_all(&logs)?;
    let mut runs = Vec::new();
    for target in targets {
        let work = root().join("target/fuzz-corpus").join(target);
        std::fs::create_dir_all(&work)?;
        let seeds = root().join("fuzz/corpus").join(target);
        let dict = root().join("fuzz/dicts").join(format!("{target}.dict"));
        let log_path = logs.join(format!("{target}.log"));
        let log = std::fs::File::create(&log_path)?;
        println!(
            "\n=== fuzz {target}: {seconds} s (log: {}) ===",
            log_path.display()
        );
        let started = Instant::now();
        let status = nightly_cargo()
            .args(["fuzz", "run", "--fuzz-dir", "fuzz", target])
            .arg(&work)
            .arg(&seeds)
            .arg("--")
            .arg(format!("-max_total_time={seconds}"))
            // A single input running for 10 s is a hang worth reporting.
            .args(["-timeout=10", "-rss_limit_mb=2048", "-print_final_stats=1"])
            .arg(format!("-dict={}", dict.display()))
            .stdout(log.try_clone()?)
            .stderr(Stdio::from(log))
            .status()
            .with_context(|| format!("running cargo fuzz run {target}"))?;
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        let run = Run {
            target,
            seconds: started.elapsed().as_secs_f64(),
            executions: text
                .lines()
                .find_map(|l| l.strip_prefix("stat::number_of_executed_units:"))
                .and_then(|n| n.trim().parse().ok()),
            corpus: std::fs::read_dir(&work).map_or(0, |d| d.count()),
            crashed: !status.success(),
        };
        if run.crashed {
            let tail: Vec<&str> = text.lines().rev().take(40).collect();
            println!("{}", tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
        }
        println!(
            "{target}: {} executions in {:.0} s, working corpus {} inputs, {}",
            run.executions.map_or("?".into(), |n| n.to_string()),
            run.seconds,
            run.corpus,
            if run.crashed { "FAILED" } else { "no crash" }
        );
        runs.push(run);
    }

    println!("\n=== fuzz: summary ===\n");
    println!("| target | seconds | executions | corpus | result |\n|---|---:|---:|---:|---|");
    for r in &runs {
        println!(
            "| {} | {:.0} | {} | {} | {} |",
            r.target,
            r.seconds,
            r.executions.map_or("?".into(), |n| n.to_string()),
            r.corpus,
            if r.crashed {
                "crash (see fuzz/artifacts)"
            } else {
                "no crash"
            }
        );
    }
    let crashed: Vec<&str> = runs
        .iter()
        .filter(|r| r.crashed)
        .map(|r| r.target)
        .collect();
    if !crashed.is_empty() {
        bail!("fuzz targets failed: {}", crashed.join(", "));
    }
    Ok(())
}
