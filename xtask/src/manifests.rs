//! `cargo xtask manifests` (and part of `cargo xtask test`): what an operator deploys, checked
//! without a cluster, a systemd or a container engine.
//!
//! - `deploy/kubernetes/`: every document validated, strictly, against the Kubernetes schemas
//!   that `kubernetes-validate` (PyPI, pinned) bundles, offline once installed into
//!   `target/kubernetes-validate/venv`, and a custom resource (cert-manager's `Certificate`)
//!   against the JSON schema of `deploy/kubernetes/schemas/` for its kind, with the
//!   `jsonschema` package of the same environment (`xtask/src/manifests.py`). A kind with
//!   neither schema is refused.
//! - `deploy/systemd/registry.service`: `systemd-analyze verify` in a root of its own (the unit,
//!   an executable at `ExecStart`'s path, the host's system units); any line it prints fails.
//!
//! Each check refuses a broken input first, so that a check that accepts everything cannot pass.

use crate::cmd::{root, run, which};
use anyhow::{bail, ensure, Context, Result};
use registry_testkit::TempDir;
use std::path::{Path, PathBuf};
use std::process::Command;

const PACKAGE: &str = "kubernetes-validate==1.37.0";

pub fn check() -> Result<()> {
    kubernetes()?;
    systemd_unit()
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

/// `systemd-analyze verify` (systemd 252 and later) on the unit, in a root directory holding it
/// as `etc/systemd/system/registry.service`, an executable at `usr/local/bin/registry` (verify
/// refuses an `ExecStart=` whose binary is missing, and resolves it inside `--root`) and a copy
/// of the host's `/usr/lib/systemd/system` (the targets the unit's default dependencies name).
/// It exits 0 on most mistakes (an unknown key, a bad value: "…, ignoring"), so any line it
/// prints is a failure too.
fn systemd_unit() -> Result<()> {
    let analyze = which("systemd-analyze")
        .context("systemd-analyze is missing: install Debian's systemd package (.ci/run does)")?;
    let unit = std::fs::read_to_string(root().join("deploy/systemd/registry.service"))
        .context("reading deploy/systemd/registry.service")?;
    ensure!(
        unit.contains("\n[Service]\n") && unit.contains("\nExecStart=/usr/local/bin/registry "),
        "deploy/systemd/registry.service: no [Service] section running /usr/local/bin/registry"
    );

    println!("broken units first, each must be refused:");
    let broken = [
        ("an unknown key", "[Service]\nProtectSytem=strict\n"),
        ("a bad value", "[Service]\nRestart=sometimes\n"),
    ];
    for (what, service) in broken {
        let text = unit.replacen("[Service]\n", service, 1);
        match verify(&analyze, &text) {
            Ok(()) => bail!(
                "systemd-analyze verify accepted a unit with {what}: the check is not checking"
            ),
            Err(e) => println!("  refused, with {what}: {e:#}"),
        }
    }
    verify(&analyze, &unit).context("deploy/systemd/registry.service")?;
    println!(
        "systemd: deploy/systemd/registry.service verified (systemd-analyze verify, no output)"
    );
    Ok(())
}

fn verify(analyze: &Path, unit: &str) -> Result<()> {
    let dir = TempDir::new("xtask-systemd");
    let units = dir.join("etc/systemd/system");
    let bin = dir.join("usr/local/bin");
    let lib = dir.join("usr/lib/systemd");
    for d in [&units, &bin, &lib] {
        std::fs::create_dir_all(d)?;
    }
    std::fs::write(units.join("registry.service"), unit)?;
    let registry = bin.join("registry");
    std::fs::write(&registry, "#!/bin/sh\nexit 0\n")?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&registry, std::fs::Permissions::from_mode(0o755))?;
    let system = ["/usr/lib/systemd/system", "/lib/systemd/system"]
        .into_iter()
        .find(|d| Path::new(d).join("sysinit.target").is_file())
        .context("the host has no systemd units (/usr/lib/systemd/system/sysinit.target)")?;
    let copied = Command::new("cp")
        .arg("-a")
        .arg(system)
        .arg(&lib)
        .status()?;
    ensure!(
        copied.success(),
        "cannot copy {system} into {}",
        lib.display()
    );

    let out = Command::new(analyze)
        .arg("verify")
        .arg(format!("--root={}", dir.display()))
        .arg("registry.service")
        .output()
        .context("cannot start systemd-analyze")?;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let said = said.trim();
    if !out.status.success() || !said.is_empty() {
        bail!("systemd-analyze verify ({}): {said}", out.status);
    }
    Ok(())
}
