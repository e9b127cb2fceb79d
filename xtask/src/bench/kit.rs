//! `cargo xtask bench-kit`: `cargo xtask bench --workers` (and `--verifiers`) packed for a
//! machine that has no Rust, no wrk, no nginx and no network, such as a lent many-core machine
//! (issue 39's and issue 55's tables need 16 cores; the build machines have two).
//!
//! The kit is two files: `kit.tar.gz` and `run.sh`. The archive holds the stripped release
//! registry, this xtask, nginx, wrk, taskset and, where this machine has it, perf (`real/`),
//! every shared library they load and the dynamic loader (`lib/`), and one launcher each
//! (`bin/`) that starts the program through the carried loader with the carried libraries, so
//! that nothing depends on what the other machine has installed but a shell, `tar`, `gzip`,
//! `mktemp`, `dirname`, `rm`, `getconf` and `date`, and for `--verifiers`, Python's `sqlite3`
//! (the copies of the rows). `run.sh` says first what of these the machine lacks, then unpacks the kit into a
//! temporary folder, puts `bin/` first on the `PATH` and runs `xtask bench --no-write --binary
//! bin/registry` with its own arguments.

use super::require;
use crate::cmd::{output, root, shared_libraries};
use crate::registry;
use anyhow::{bail, ensure, Context, Result};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the kit goes, and which registry it carries.
#[derive(Debug, Clone, clap::Args)]
#[command(
    after_help = "Example, then on the other machine (its figures printed, nothing written):\n  \
    cargo xtask bench-kit\n  \
    bash target/bench-kit/run.sh --workers 1,2,4,8 --rounds 2 --seconds 5\n  \
    bash target/bench-kit/run.sh --verifiers --workers 1,2,4,8 --rounds 2 --seconds 5"
)]
pub struct Options {
    /// The folder that receives `kit.tar.gz` and `run.sh` (emptied first).
    #[arg(long, default_value = "target/bench-kit")]
    out: PathBuf,
    /// A registry binary to carry instead of building this tree's release binary.
    #[arg(long)]
    binary: Option<PathBuf>,
}

/// The programs besides the registry and xtask, each found on the `PATH`, with its Debian
/// package.
const TOOLS: [(&str, &str); 3] = [
    ("nginx", "nginx-light"),
    ("wrk", "wrk"),
    ("taskset", "util-linux"),
];

/// Programs carried when this machine has them: `perf`, for `bench --perf`.
const OPTIONAL_TOOLS: [&str; 1] = ["perf"];

pub fn run(options: &Options) -> Result<()> {
    for (tool, package) in TOOLS {
        require(tool, package)?;
    }
    let registry = match &options.binary {
        Some(binary) => binary.clone(),
        None => registry::build(true)?,
    };
    let xtask = std::env::current_exe().context("where this xtask is")?;
    let mut programs = vec![("registry", registry), ("xtask", xtask)];
    for (tool, _) in TOOLS {
        let path =
            crate::cmd::which(tool).with_context(|| format!("`{tool}` is not on the PATH"))?;
        programs.push((tool, path));
    }
    for tool in OPTIONAL_TOOLS {
        if let Some(path) = crate::cmd::which(tool) {
            programs.push((tool, path));
        }
    }

    let out = root().join(&options.out);
    if out.exists() {
        std::fs::remove_dir_all(&out).with_context(|| format!("emptying {}", out.display()))?;
    }
    let staging = out.join("kit");
    for dir in ["bin", "real", "lib"] {
        std::fs::create_dir_all(staging.join(dir))?;
    }
    let mut loader: Option<String> = None;
    for (name, path) in &programs {
        output(
            Command::new("strip")
                .arg("-o")
                .arg(staging.join("real").join(name))
                .arg(path),
        )
        .with_context(|| format!("stripping {}", path.display()))?;
        for library in shared_libraries(path)?.iter().filter(|l| l.is_absolute()) {
            let file = file_name(library)?;
            if file.starts_with("ld-linux") {
                match &loader {
                    Some(known) if *known != file => {
                        bail!(
                            "{} needs the loader {file}, the others {known}",
                            path.display()
                        )
                    }
                    _ => loader = Some(file.clone()),
                }
            }
            // The file itself, under the name the program asks for: the kit has no links.
            std::fs::copy(library, staging.join("lib").join(&file))
                .with_context(|| format!("copying {}", library.display()))?;
        }
    }
    let loader = loader.context("ldd named no dynamic loader: are these static programs?")?;
    for (name, _) in &programs {
        let launcher = staging.join("bin").join(name);
        std::fs::write(&launcher, launcher_script(name, &loader))?;
        std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755))?;
    }

    let archive = out.join("kit.tar.gz");
    output(
        Command::new("tar")
            .arg("-czf")
            .arg(&archive)
            .arg("-C")
            .arg(&staging)
            .arg("."),
    )?;
    std::fs::remove_dir_all(&staging)?;
    let script = out.join("run.sh");
    std::fs::write(&script, RUN_SCRIPT)?;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;

    let size = std::fs::metadata(&archive)?.len();
    ensure!(size > 0, "the archive is empty");
    println!(
        "bench kit: {} ({:.1} MiB: {}) and {}",
        archive.display(),
        size as f64 / (1024.0 * 1024.0),
        programs
            .iter()
            .map(|(name, _)| *name)
            .collect::<Vec<_>>()
            .join(", "),
        script.display()
    );
    println!(
        "on the other machine: bash {out}/run.sh --workers 1,2,4,8 --rounds 2 --seconds 5\n  \
         and: bash {out}/run.sh --verifiers --workers 1,2,4,8 --rounds 2 --seconds 5",
        out = options.out.display()
    );
    Ok(())
}

fn file_name(path: &Path) -> Result<String> {
    Ok(path
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("{} has no file name", path.display()))?
        .to_owned())
}

/// `bin/{name}`: starts `real/{name}` through the kit's loader and libraries. `exec` keeps the
/// process id, which the benchmark reads the CPU time of; `$0` is the launcher's own path,
/// also when a program found it on the `PATH`.
fn launcher_script(name: &str, loader: &str) -> String {
    format!(
        "#!/bin/sh\n\
         kit=\"$(cd \"$(dirname \"$0\")/..\" && pwd)\"\n\
         exec \"$kit/lib/{loader}\" --library-path \"$kit/lib\" \"$kit/real/{name}\" \"$@\"\n"
    )
}

/// `run.sh`: unpacks the kit beside nothing else and runs the benchmark with its arguments.
const RUN_SCRIPT: &str = r#"#!/bin/sh
# cargo xtask bench, from the kit `cargo xtask bench-kit` made: no Rust, wrk or nginx needed here.
# Usage: run.sh --workers 1,2,4,8 [--rounds N] [--seconds S] [any other flag of `bench`]
set -eu
# What the kit does not carry, this machine must have: what unpacks it, what the benchmark
# calls besides its carried programs, and for --verifiers and --services, Python's sqlite3
# (the copies of the rows). Said at once, rather than as a failure minutes into a run.
missing=""
for tool in tar gzip mktemp dirname rm getconf date; do
    command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
done
case " $* " in
*" --verifiers "* | *" --services "* | *" --services="*)
    python3 -c "import sqlite3" >/dev/null 2>&1 || missing="$missing python3-with-sqlite3"
    ;;
esac
if [ -n "$missing" ]; then
    echo "run.sh: this machine lacks what the kit does not carry:$missing" >&2
    exit 2
fi
here="$(cd "$(dirname "$0")" && pwd)"
kit="$(mktemp -d "${TMPDIR:-/tmp}/registry-bench-kit.XXXXXX")"
trap 'rm -rf "$kit"' EXIT
tar -xzf "$here/kit.tar.gz" -C "$kit"
PATH="$kit/bin:$PATH"
export PATH
xtask bench --no-write --binary "$kit/bin/registry" "$@"
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launcher_starts_its_program_through_the_carried_loader_with_its_arguments() {
        let dir = registry_testkit::TempDir::new("bench-kit");
        let kit = dir.0.as_path();
        for sub in ["bin", "real", "lib"] {
            std::fs::create_dir_all(kit.join(sub)).unwrap();
        }
        // A stand-in loader that prints what it was asked to start, and how.
        let loader = kit.join("lib/ld-test.so");
        std::fs::write(&loader, "#!/bin/sh\necho \"$@\"\n").unwrap();
        std::fs::set_permissions(&loader, std::fs::Permissions::from_mode(0o755)).unwrap();
        let launcher = kit.join("bin/wrk");
        std::fs::write(&launcher, launcher_script("wrk", "ld-test.so")).unwrap();
        std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).unwrap();

        // Found on the PATH, as taskset and xtask find it.
        let path = format!("{}:/usr/bin:/bin", kit.join("bin").display());
        let said = output(
            Command::new("sh")
                .args(["-c", "wrk -t2 'two words'"])
                .env("PATH", path),
        )
        .unwrap();
        let kit = kit.canonicalize().unwrap();
        assert_eq!(
            said.trim(),
            format!(
                "--library-path {k}/lib {k}/real/wrk -t2 two words",
                k = kit.display()
            )
        );
    }

    #[test]
    fn run_sh_names_what_this_machine_lacks_before_it_starts() {
        let dir = registry_testkit::TempDir::new("bench-kit-lacks");
        std::fs::write(dir.0.join("run.sh"), RUN_SCRIPT).unwrap();
        // A machine with what unpacks the kit and `date`, but no getconf and no python3.
        let tools = dir.0.join("tools");
        std::fs::create_dir_all(&tools).unwrap();
        for tool in ["tar", "gzip", "mktemp", "dirname", "rm", "date"] {
            let path = crate::cmd::which(tool).unwrap();
            std::os::unix::fs::symlink(path, tools.join(tool)).unwrap();
        }
        let run = |args: &[&str]| {
            Command::new("/bin/sh")
                .arg(dir.0.join("run.sh"))
                .args(args)
                .env("PATH", &tools)
                .output()
                .unwrap()
        };

        let workers = run(&["--workers", "1,2"]);
        assert_eq!(workers.status.code(), Some(2));
        assert_eq!(
            String::from_utf8_lossy(&workers.stderr).trim(),
            "run.sh: this machine lacks what the kit does not carry: getconf"
        );
        let verifiers = run(&["--verifiers", "--workers", "1"]);
        assert_eq!(verifiers.status.code(), Some(2));
        assert_eq!(
            String::from_utf8_lossy(&verifiers.stderr).trim(),
            "run.sh: this machine lacks what the kit does not carry: getconf python3-with-sqlite3"
        );
    }

    #[test]
    fn run_sh_unpacks_the_kit_and_runs_bench_with_its_registry_and_arguments() {
        let dir = registry_testkit::TempDir::new("bench-kit-run");
        let staging = dir.0.join("kit");
        std::fs::create_dir_all(staging.join("bin")).unwrap();
        // A stand-in xtask that says how it was called and from where.
        let xtask = staging.join("bin/xtask");
        std::fs::write(&xtask, "#!/bin/sh\necho \"$0 $@\"\n").unwrap();
        std::fs::set_permissions(&xtask, std::fs::Permissions::from_mode(0o755)).unwrap();
        output(
            Command::new("tar")
                .arg("-czf")
                .arg(dir.0.join("kit.tar.gz"))
                .arg("-C")
                .arg(&staging)
                .arg("."),
        )
        .unwrap();
        std::fs::write(dir.0.join("run.sh"), RUN_SCRIPT).unwrap();
        let unpacked = dir.0.join("tmp");
        std::fs::create_dir_all(&unpacked).unwrap();

        let said = output(
            Command::new("sh")
                .arg(dir.0.join("run.sh"))
                .args(["--workers", "1,2"])
                .env("TMPDIR", &unpacked),
        )
        .unwrap();
        let (program, args) = said.trim().split_once(' ').unwrap();
        let kit = program.strip_suffix("/bin/xtask").unwrap();
        assert!(
            kit.starts_with(&format!("{}/registry-bench-kit.", unpacked.display())),
            "{said}"
        );
        assert_eq!(
            args,
            format!("bench --no-write --binary {kit}/bin/registry --workers 1,2")
        );
        assert_eq!(
            std::fs::read_dir(&unpacked).unwrap().count(),
            0,
            "the unpacked kit is left behind"
        );
    }
}
