//! `cargo xtask e2e [-- NODE TEST ARGS]`: the browser tests of the landing page, the anonymous
//! service's dashboard and the registered customers' console (`e2e/`).
//!
//! Builds the `registry` binary, installs the pinned playwright-core with `npm ci` when it is
//! missing, and runs the `node:test` suite, which starts the binary and drives the system's
//! Chromium (playwright's own browser download does not work everywhere, and is not needed).

use crate::cmd::{self, root};
use anyhow::Result;
use std::process::Command;

/// The test files, run one after the other (each starts its own registry).
const TEST_FILES: [&str; 2] = ["dashboard.test.mjs", "console.test.mjs"];

/// Runs the browser tests; `node_args` go to `node --test`, e.g. `--test-name-pattern=expir`.
/// Node.js, npm and Chromium are checked first (`cargo xtask setup --for e2e`), and installed
/// when missing where that can be done.
pub fn run(node_args: &[String]) -> Result<()> {
    crate::setup::ensure(crate::setup::Scope::E2e, true)?;
    let chromium = crate::setup::chromium();

    let binary = crate::registry::build(false)?;

    let dir = root().join("e2e");
    if !dir.join("node_modules").join("playwright-core").is_dir() {
        cmd::run(
            Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund"])
                .current_dir(&dir),
        )?;
    }
    // What `npm test` runs, with room for node's own flags before the files.
    cmd::run(
        Command::new("node")
            .args(["--test", "--test-concurrency=1"])
            .args(node_args)
            .args(TEST_FILES)
            .current_dir(&dir)
            .env("REGISTRY_BINARY", &binary)
            .env("CHROMIUM_PATH", &chromium),
    )
}
