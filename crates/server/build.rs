//! Names the commit the binary is built from, for `registry_build_info` and `--version`:
//! `REGISTRY_COMMIT` when the build sets it (a source tarball has no git), else git's
//! short hash, else `unknown`.

fn main() {
    println!("cargo:rerun-if-env-changed=REGISTRY_COMMIT");
    // Only paths that exist: cargo runs a script again at every build for one that does not.
    for path in [
        "../../.git/HEAD",
        "../../.git/refs/heads",
        "../../.git/packed-refs",
    ] {
        if std::path::Path::new(path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    let commit = std::env::var("REGISTRY_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(|| {
            let output = std::process::Command::new("git")
                .args(["rev-parse", "--short=12", "HEAD"])
                .output()
                .ok()?;
            output
                .status
                .success()
                .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=REGISTRY_COMMIT={commit}");
}
