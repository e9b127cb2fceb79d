//! `cargo xtask e2e [-- NODE TEST ARGS]`: the browser tests of the landing page and the
//! anonymous service's dashboard (`e2e/`).
//!
//! Builds the `registry` binary, installs the pinned playwright-core with `npm ci` when it is
//! missing, and runs the `node:test` suite, which starts the binary and drives the system's
//! Chromium (playwright's own browser download does not work everywhere, and is not needed).

use crate::cmd::{self, root, succeeds};
use anyhow::{bail, Result};
use std::path::PathBuf;
use std::process::Command;

const DEFAULT_CHROMIUM: &str = "/usr/bin/chromium";

/// Runs the browser tests; `node_args` go to `node --test`, e.g. `--test-name-pattern=expir`.
pub fn run(node_args: &[String]) -> Result<()> {
    let chromium = std::env::var_os("CHROMIUM_PATH")
        .map(PathBuf::from)
        .unwrap_or_else(|| DEFAULT_CHROMIUM.into());
    if !chromium.is_file() {
        bail!(
            "Chromium not found at {}: install it (Debian: `apt-get update && apt-get install -y \
             chromium`), or point CHROMIUM_PATH at a Chromium or Chrome binary",
            chromium.display()
        );
    }
    if !succeeds(Command::new("npm").arg("--version")) {
        bail!("npm not found: the browser tests need Node.js 20 or later with npm");
    }

    let binary = crate::registry::build(false)?;

    let dir = root().join("e2e");
    if !dir.join("node_modules").join("playwright-core").is_dir() {
        cmd::run(
            Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund"])
                .current_dir(&dir),
        )?;
    }
    // What `npm test` runs, with room for node's own flags before the file.
    cmd::run(
        Command::new("node")
            .args(["--test", "--test-concurrency=1"])
            .args(node_args)
            .arg("dashboard.test.mjs")
            .current_dir(&dir)
            .env("REGISTRY_BINARY", &binary)
            .env("CHROMIUM_PATH", &chromium),
    )
}
