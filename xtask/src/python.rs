//! Python tools from PyPI, pinned, each in a virtual environment of its own under `target/`:
//! installed once with the machine's `python3 -m venv` and pip, then used offline.

use crate::cmd::{root, run};
use anyhow::{Context, Result};
use std::path::PathBuf;
use std::process::Command;

/// The virtual environment `target/{name}/venv` holding `package` (pinned `name==version`s,
/// separated by spaces), installed now unless it already holds exactly that.
pub fn venv(name: &str, package: &str) -> Result<PathBuf> {
    let venv = root().join("target").join(name).join("venv");
    let marker = venv.join(".installed");
    if std::fs::read_to_string(&marker).ok().as_deref() != Some(package) {
        println!("installing {package} into {}", venv.display());
        run(Command::new("python3").arg("-m").arg("venv").arg(&venv))
            .context("creating a Python virtual environment (python3 -m venv)")?;
        run(Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet"])
            .args(package.split_whitespace()))
        .with_context(|| format!("installing {package} from PyPI"))?;
        std::fs::write(&marker, package)?;
    }
    Ok(venv)
}

/// pytest, for the tests of the policy engine's Python binding; 8.4 is the last series that
/// runs on Python 3.9, the oldest the binding supports.
const PYTEST: &str = "pytest==8.4.2";

/// The Python binding of the policy engine (`crates/policy-python`): installed
/// with `pip install ./crates/policy-python` into `target/policy-python/venv` (beside pytest),
/// then its tests run. pip builds the wheel from source, with maturin from PyPI (the package's
/// `[build-system]`) and this machine's cargo, in `{target}/policy-python`, where the next run
/// finds the crates already built. Any failure, the build's or a test's, is this one's.
pub fn test_policy_binding() -> Result<()> {
    let venv = venv("policy-python", PYTEST)?;
    let build = crate::cmd::target_dir()?.join("policy-python");
    let started = std::time::Instant::now();
    run(Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "./crates/policy-python"])
        .current_dir(root())
        .env("CARGO_TARGET_DIR", &build))
    .context("building and installing crates/policy-python (pip, maturin, cargo)")?;
    println!(
        "installed crates/policy-python in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    run(Command::new(venv.join("bin/python"))
        .args(["-m", "pytest", "crates/policy-python/tests", "-q"])
        .current_dir(root()))
    .context("the tests of the policy engine's Python binding (pytest)")
}
