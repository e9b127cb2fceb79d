//! `cargo xtask manifests` (and part of `cargo xtask test`): the Kubernetes manifests of
//! `deploy/kubernetes/` validated, strictly, against the Kubernetes schemas that
//! `kubernetes-validate` (PyPI, pinned) bundles: offline once installed into
//! `target/kubernetes-validate/venv`. A broken manifest is validated first, so that a check that
//! accepts everything cannot pass.

use crate::cmd::{root, run, succeeds};
use anyhow::{bail, Context, Result};
use std::process::Command;

const PACKAGE: &str = "kubernetes-validate==1.37.0";

pub fn check() -> Result<()> {
    let validate =
        crate::python::venv("kubernetes-validate", PACKAGE)?.join("bin/kubernetes-validate");
    let broken = root().join("target/kubernetes-validate/broken.yaml");
    std::fs::write(
        &broken,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\nspec:\n  replicas: \"one\"\n",
    )?;
    if succeeds(Command::new(&validate).arg("--strict").arg(&broken)) {
        bail!("kubernetes-validate accepted a broken manifest: the check is not checking");
    }
    let mut manifests: Vec<_> = std::fs::read_dir(root().join("deploy/kubernetes"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    manifests.sort();
    if manifests.is_empty() {
        bail!("no manifest in deploy/kubernetes");
    }
    run(Command::new(&validate).arg("--strict").args(&manifests))
        .context("deploy/kubernetes does not validate against the Kubernetes schemas")?;
    println!("manifests: {} file(s) valid", manifests.len());
    Ok(())
}
