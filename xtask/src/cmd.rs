//! Running commands from the workspace root, echoing them first.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The workspace root (the parent of `xtask/`). `cargo run` names the package's folder at run
/// time; the folder it was compiled in is only the fallback, because clones that share a target
/// directory run one clone's build of xtask (sources unchanged, so cargo does not rebuild it).
pub fn root() -> PathBuf {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .filter(|dir| dir.file_name().is_some_and(|name| name == "xtask"))
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest_dir
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// Where `program` is: the first directory of `PATH` holding it, else `/usr/sbin` or
/// `/usr/bin` (a `PATH` without the sbin directories still finds Debian's `chroot`).
pub fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// Cargo's target directory (honours `CARGO_TARGET_DIR` and `.cargo/config`).
pub fn target_dir() -> Result<PathBuf> {
    let metadata = output(&mut cargo("metadata --format-version 1 --no-deps"))?;
    let metadata: serde_json::Value = serde_json::from_str(&metadata)
        .context("cargo metadata printed something other than JSON")?;
    metadata["target_directory"]
        .as_str()
        .map(PathBuf::from)
        .context("cargo metadata has no target_directory")
}

/// The shared libraries `ldd` says `binary` loads, the dynamic loader among them (`linux-vdso`,
/// which the kernel provides, as a bare name).
pub fn shared_libraries(binary: &Path) -> Result<Vec<PathBuf>> {
    Ok(ldd_paths(&output(Command::new("ldd").arg(binary))?))
}

/// The paths of `ldd`'s lines: `name => /path (address)`, `/loader (address)`, or
/// `linux-vdso.so.1 (address)`.
fn ldd_paths(listed: &str) -> Vec<PathBuf> {
    listed
        .lines()
        .filter_map(|line| {
            let line = line.trim();
            let path = match line.split_once("=>") {
                Some((name, target)) => target
                    .split_whitespace()
                    .next()
                    .filter(|t| t.starts_with('/'))
                    .unwrap_or(name.trim()),
                None => line.split_whitespace().next()?,
            };
            Some(PathBuf::from(path))
        })
        .collect()
}

/// `cargo` (the same one that runs this xtask) with `args`, split at spaces.
pub fn cargo(args: &str) -> Command {
    let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    command.current_dir(root()).args(args.split_whitespace());
    command
}

fn describe(command: &Command) -> String {
    let mut line = command.get_program().to_string_lossy().into_owned();
    for arg in command.get_args() {
        line.push(' ');
        line.push_str(&arg.to_string_lossy());
    }
    line
}

/// Runs `command`, failing unless it exits with success.
pub fn run(command: &mut Command) -> Result<()> {
    let line = describe(command);
    println!("$ {line}");
    let status = command
        .status()
        .with_context(|| format!("cannot start `{line}`"))?;
    if !status.success() {
        bail!("`{line}` failed ({status})");
    }
    Ok(())
}

/// Runs `command` and returns its standard output, failing unless it exits with success.
pub fn output(command: &mut Command) -> Result<String> {
    let line = describe(command);
    let out = command
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("cannot start `{line}`"))?;
    if !out.status.success() {
        bail!(
            "`{line}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether `command` runs and exits with success (its output is discarded).
pub fn succeeds(command: &mut Command) -> bool {
    command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_lines_name_each_library_and_the_loader() {
        let listed = "\tlinux-vdso.so.1 (0x00007ffd2b1f1000)\n\
                      \tlibssl.so.3 => /lib/x86_64-linux-gnu/libssl.so.3 (0x00007f0bef763000)\n\
                      \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f0bef01e000)\n\
                      \t/lib64/ld-linux-x86-64.so.2 (0x00007f0befa4a000)\n";
        assert_eq!(
            ldd_paths(listed),
            [
                "linux-vdso.so.1",
                "/lib/x86_64-linux-gnu/libssl.so.3",
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib64/ld-linux-x86-64.so.2",
            ]
            .map(PathBuf::from)
        );
    }
}
