//! Python tools from PyPI, pinned, each in a virtual environment of its own under `target/`:
//! installed once with the machine's `python3 -m venv` and pip, then used offline.

use crate::cmd::{root, run};
use anyhow::{Context, Result};
use std::path::PathBuf;
use std::process::Command;

/// The virtual environment `target/{name}/venv` holding `package` (a pinned `name==version`),
/// installed now unless it already holds exactly that.
pub fn venv(name: &str, package: &str) -> Result<PathBuf> {
    let venv = root().join("target").join(name).join("venv");
    let marker = venv.join(".installed");
    if std::fs::read_to_string(&marker).ok().as_deref() != Some(package) {
        println!("installing {package} into {}", venv.display());
        run(Command::new("python3").arg("-m").arg("venv").arg(&venv))
            .context("creating a Python virtual environment (python3 -m venv)")?;
        run(Command::new(venv.join("bin/pip")).args(["install", "--quiet", package]))
            .with_context(|| format!("installing {package} from PyPI"))?;
        std::fs::write(&marker, package)?;
    }
    Ok(venv)
}
