//! `cargo xtask manifests` (and part of `cargo xtask test`): what an operator deploys, checked
//! without a cluster, a systemd or a container engine.
//!
//! - `deploy/kubernetes/`: every document validated, strictly, against the Kubernetes schemas
//!   that `kubernetes-validate` (PyPI, pinned) bundles, offline once installed into
//!   `target/kubernetes-validate/venv`, and a custom resource (cert-manager's `Certificate`)
//!   against the JSON schema of `deploy/kubernetes/schemas/` for its kind, with the
//!   `jsonschema` package of the same environment (`xtask/src/manifests.py`). A kind with
//!   neither schema is refused.
//!
//! Each check refuses a broken input first, so that a check that accepts everything cannot pass.

use crate::cmd::{root, run};
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::Command;

const PACKAGE: &str = "kubernetes-validate==1.37.0";

pub fn check() -> Result<()> {
    kubernetes()
}

fn kubernetes() -> Result<()> {
    let python = crate::python::venv("kubernetes-validate", PACKAGE)?.join("bin/python");
    let script = root().join("xtask/src/manifests.py");
    let schemas = root().join("deploy/kubernetes/schemas");
    let validate = |manifests: &[PathBuf]| -> Result<()> {
        run(Command::new(&python)
            .arg(&script)
            .arg(&schemas)
            .args(manifests))
    };

    let dir = root().join("target/kubernetes-validate");
    let broken = [
        (
            "broken-deployment.yaml",
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\nspec:\n  replicas: \"one\"\n",
        ),
        // `dnsName`, not `dnsNames`: a field cert-manager does not know.
        (
            "broken-certificate.yaml",
            "apiVersion: cert-manager.io/v1\nkind: Certificate\nmetadata:\n  name: x\nspec:\n  \
             secretName: x\n  dnsName: [\"*.oidc.example.com\"]\n  issuerRef:\n    name: x\n",
        ),
        (
            "unknown-kind.yaml",
            "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: x\n",
        ),
    ];
    println!("broken manifests first, each must be refused:");
    for (name, text) in broken {
        let path = dir.join(name);
        std::fs::write(&path, text)?;
        if validate(&[path]).is_ok() {
            bail!("the manifest check accepted {name}: the check is not checking");
        }
    }

    let mut manifests: Vec<_> = std::fs::read_dir(root().join("deploy/kubernetes"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    manifests.sort();
    if manifests.is_empty() {
        bail!("no manifest in deploy/kubernetes");
    }
    println!("deploy/kubernetes:");
    validate(&manifests).context(
        "deploy/kubernetes does not validate against the Kubernetes schemas and deploy/kubernetes/schemas",
    )?;
    println!("manifests: {} file(s) valid", manifests.len());
    Ok(())
}
