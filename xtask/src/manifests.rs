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
//! - `deploy/container/Containerfile`: the registry binary's shared libraries (ELF `NEEDED`) are
//!   among those of its base image, distroless/cc-debian12.
//!
//! Each check refuses a broken input first, so that a check that accepts everything cannot pass.

use crate::cmd::{cargo, root, run, target_dir, which};
use anyhow::{bail, ensure, Context, Result};
use registry_testkit::TempDir;
use std::path::{Path, PathBuf};
use std::process::Command;

const PACKAGE: &str = "kubernetes-validate==1.37.0";

pub fn check() -> Result<()> {
    kubernetes()?;
    systemd_unit()?;
    container_libraries()
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
        .context("systemd-analyze is missing: install Debian's systemd package (`cargo xtask setup` does, as root)")?;
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
    run(Command::new("cp").arg("-a").arg(system).arg(&lib))?;

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

/// What `gcr.io/distroless/cc-debian12` ships of the C runtime (glibc, libgcc_s): the only
/// shared libraries the binary may need. The loader's name for x86-64 and arm64.
const DISTROLESS_CC: &[&str] = &[
    "libc.so.6",
    "libm.so.6",
    "libgcc_s.so.1",
    "libpthread.so.0",
    "libdl.so.2",
    "librt.so.1",
    "libutil.so.1",
    "ld-linux-x86-64.so.2",
    "ld-linux-aarch64.so.1",
];

/// No container engine here: the image's one assumption is checked instead, that the binary
/// runs on distroless/cc-debian12. The registry binary checked is the newest of
/// `{target}/{debug,release}/registry` (the same libraries in both profiles), built (debug)
/// when there is none.
fn container_libraries() -> Result<()> {
    let containerfile = std::fs::read_to_string(root().join("deploy/container/Containerfile"))
        .context("reading deploy/container/Containerfile")?;
    ensure!(
        containerfile
            .lines()
            .any(|l| l.starts_with("FROM gcr.io/distroless/cc-debian12")),
        "deploy/container/Containerfile does not run on gcr.io/distroless/cc-debian12, \
         the libraries checked here"
    );

    container_context(&containerfile)?;

    let target = target_dir()?;
    let newest = |target: &Path| {
        ["debug", "release"]
            .iter()
            .map(|profile| target.join(profile).join("registry"))
            .filter_map(|p| Some((p.metadata().ok()?.modified().ok()?, p)))
            .max()
    };
    let (built, binary) = match newest(&target) {
        Some(found) => found,
        None => {
            run(&mut cargo("build -p registry-server --bin registry"))?;
            newest(&target).context("cargo built no registry binary")?
        }
    };
    let age = built.elapsed().map(|d| d.as_secs() / 60).unwrap_or(0);

    let libraries = needed(&binary)?;
    ensure!(
        !libraries.is_empty(),
        "readelf lists no NEEDED entry for {}: is it an ELF executable?",
        binary.display()
    );
    let foreign: Vec<_> = libraries
        .iter()
        .filter(|l| !DISTROLESS_CC.contains(&l.as_str()))
        .collect();
    ensure!(
        foreign.is_empty(),
        "{} needs {foreign:?}, which distroless/cc-debian12 does not ship \
         (deploy/container/Containerfile would build an image that cannot start)",
        binary.display()
    );
    println!(
        "container: {} (built {age} min ago) needs {}: all in distroless/cc-debian12",
        binary.display(),
        libraries.join(", ")
    );
    Ok(())
}

/// The build stage's context: what its `COPY` lines take from the repository is a workspace
/// that cargo resolves with the lock file as it is (`--locked`, as the image builds),
/// so that a member or a path left out fails here rather than in `docker build`.
fn container_context(containerfile: &str) -> Result<()> {
    let context = TempDir::new("xtask-container");
    for copy in containerfile
        .lines()
        .filter_map(|l| l.strip_prefix("COPY "))
    {
        let words: Vec<&str> = copy.split_whitespace().collect();
        if copy.starts_with("--") || words.len() < 2 {
            continue; // from another stage
        }
        let (sources, destination) = words.split_at(words.len() - 1);
        for source in sources {
            ensure!(
                destination[0] == "./" || destination[0] == *source,
                "deploy/container/Containerfile: COPY {copy}: the check expects each path \
                 copied to the same place"
            );
            run(Command::new("cp")
                .arg("-r")
                .arg(root().join(source))
                .arg(context.join(source)))?;
        }
    }
    let manifest = context.join("Cargo.toml");
    // Linux's packages only: those of other platforms need not be downloaded.
    let metadata =
        "metadata --locked --format-version 1 --filter-platform x86_64-unknown-linux-gnu";
    run(cargo(metadata)
        .arg("--manifest-path")
        .arg(&manifest)
        .stdout(std::process::Stdio::null()))
    .context("the Containerfile's build context is not a workspace cargo resolves")?;
    println!("container: the build stage's COPY lines hold a workspace that resolves (--locked)");
    Ok(())
}

/// The `NEEDED` entries of an ELF file's dynamic section, and its interpreter's file name.
fn needed(binary: &Path) -> Result<Vec<String>> {
    let readelf = which("readelf").context("readelf is missing (Debian's binutils)")?;
    let out = crate::cmd::output(Command::new(&readelf).arg("-d").arg("-l").arg(binary))?;
    let mut libraries = Vec::new();
    for line in out.lines() {
        if line.contains("(NEEDED)") {
            if let Some(name) = bracketed(line, "Shared library: [") {
                libraries.push(name.to_string());
            }
        } else if let Some(interpreter) = bracketed(line, "Requesting program interpreter: ") {
            let name = Path::new(interpreter)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            libraries.push(name);
        }
    }
    libraries.sort();
    libraries.dedup();
    Ok(libraries)
}

/// The text after `prefix` in `line`, up to the next `]`.
fn bracketed<'a>(line: &'a str, prefix: &str) -> Option<&'a str> {
    let start = line.find(prefix)? + prefix.len();
    let rest = &line[start..];
    Some(&rest[..rest.find(']')?])
}
