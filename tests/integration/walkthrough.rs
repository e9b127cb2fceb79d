//! The README's walk-through, run as a newcomer would run it: every `sh` block from "Walk-through
//! with curl" to "Embed the policy engine", in order, in one shell with `set -euo pipefail`,
//! against the real binary. Blocks fenced otherwise (`console`, `text`) are what needs a cluster
//! or shows output; they are not run.
//!
//! What the test changes, and why each is the newcomer's situation: the server listens on a
//! free port (the README's `8080` is replaced by it), and the shell runs in a directory of its
//! own holding the repository's `examples/` and `target/release/registry` (this build's binary),
//! with `REGISTRY_DATABASE_URL` naming the server's database, as running in the server's
//! directory does.

use registry_tests::server::{registry_binary, ServerOptions, TempDir, TestServer};
use std::path::Path;
use std::process::Command;

/// The blocks of the README the walk-through is made of.
fn walkthrough_blocks(readme: &str) -> Vec<String> {
    let start = readme
        .find("## Walk-through with curl")
        .expect("the README has its walk-through");
    let end = readme[start..]
        .find("## Embed the policy engine")
        .map_or(readme.len(), |at| start + at);
    let mut blocks = Vec::new();
    let mut block: Option<String> = None;
    for line in readme[start..end].lines() {
        match (&mut block, line.trim_end()) {
            (None, "```sh") => block = Some(String::new()),
            (Some(text), "```") => {
                blocks.push(std::mem::take(text));
                block = None;
            }
            (Some(text), _) => {
                text.push_str(line);
                text.push('\n');
            }
            (None, _) => {}
        }
    }
    assert!(
        block.is_none(),
        "an sh block of the walk-through is not closed"
    );
    blocks
}

#[test]
fn the_readme_walkthrough_runs_top_to_bottom() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let blocks = walkthrough_blocks(&readme);
    assert!(blocks.len() >= 15, "only {} blocks", blocks.len());
    let server = TestServer::start_with(ServerOptions::binary(&[]));
    let script = format!(
        "set -euo pipefail\n{}",
        blocks
            .join("\n")
            .replace("localhost:8080", &format!("localhost:{}", server.port))
    );
    assert!(!script.contains("8080"), "{script}");

    let dir = TempDir::new("walkthrough");
    std::os::unix::fs::symlink(root.join("examples"), dir.join("examples")).unwrap();
    std::fs::create_dir_all(dir.join("target/release")).unwrap();
    std::os::unix::fs::symlink(registry_binary(), dir.join("target/release/registry")).unwrap();
    let output = Command::new("bash")
        .args(["-c", &script])
        .current_dir(&*dir)
        .env("REGISTRY_DATABASE_URL", &server.database_url)
        .output()
        .expect("bash");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the walk-through stopped ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        output.status
    );
    println!("{stdout}");
    // What each step shows the reader.
    for shown in [
        "\"subdomain\": \"k3s-acme\"",
        &format!("\"issuer\": \"http://k3s-acme.localhost:{}\"", server.port),
        "\"decision\": \"deny\"",
        "claim-mismatch",
        "the pull request widens the policy",
        "\"ready\"",
    ] {
        assert!(stdout.contains(shown), "no {shown} in:\n{stdout}\n{stderr}");
    }
}

#[test]
fn only_sh_blocks_of_the_walkthrough_are_run() {
    let readme = "intro\n```sh\nnot this\n```\n## Walk-through with curl\n```sh\na\nb\n```\n\
                  ```console\n$ kubectl\n```\n```sh\nc\n```\n## Embed the policy engine\n```sh\nd\n```\n";
    assert_eq!(walkthrough_blocks(readme), ["a\nb\n", "c\n"]);
}
