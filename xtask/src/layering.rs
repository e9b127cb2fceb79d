//! Dependencies point inwards: the domain does no I/O, and each I/O library is used by the one
//! adapter that wraps it.

use crate::cmd::{cargo, output};
use anyhow::{bail, Context, Result};
use serde_json::Value;

/// Crates the domain must not reach, even transitively (by name or name prefix).
const FORBIDDEN_IN_DOMAIN: [&str; 6] = ["actix", "diesel", "reqwest", "tokio", "josekit", "hyper"];

/// (dependency name or `prefix*`, the workspace members allowed to depend on it directly as a
/// normal dependency). Dev-dependencies are free: tests may use anything. Keep in step with
/// the `[bans]` of `deny.toml`.
const WRAPPERS: [(&str, &[&str]); 6] = [
    ("diesel*", &["registry-store"]),
    ("libsqlite3-sys", &["registry-store"]),
    ("pq-sys", &["registry-store"]),
    ("actix*", &["registry-server"]),
    // registry-tests: its support library mints tokens for a test issuer; xtask: the benchmark
    // drives the registry and mints an identity token. Neither ships in the binary.
    (
        "reqwest",
        &[
            "registry-oidc",
            "registry-server",
            "registry-tests",
            "xtask",
        ],
    ),
    (
        "josekit",
        &[
            "registry-oidc",
            "registry-server",
            "registry-tests",
            "xtask",
        ],
    ),
];

/// The migrations of the two backends carry the same folder names, so that neither schema can
/// gain a change the other lacks.
fn migration_problems() -> Result<Vec<String>> {
    let folders = |backend: &str| -> Result<std::collections::BTreeSet<String>> {
        let dir = crate::cmd::root().join("migrations").join(backend);
        let mut names = std::collections::BTreeSet::new();
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?
        {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                names.insert(entry.file_name().to_string_lossy().into_owned());
            }
        }
        Ok(names)
    };
    let (sqlite, postgres) = (folders("sqlite")?, folders("postgres")?);
    Ok(sqlite
        .symmetric_difference(&postgres)
        .map(|name| {
            let has = if sqlite.contains(name) {
                "sqlite"
            } else {
                "postgres"
            };
            format!("migration {name:?} exists for {has} only: add it for both backends")
        })
        .collect())
}

fn matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == pattern,
    }
}

pub fn check() -> Result<()> {
    let mut problems = domain_problems()?;
    problems.extend(wrapper_problems()?);
    problems.extend(migration_problems()?);
    if problems.is_empty() {
        println!("layering: ok");
        return Ok(());
    }
    for p in &problems {
        eprintln!("layering: {p}");
    }
    bail!("{} layering violation(s)", problems.len())
}

fn domain_problems() -> Result<Vec<String>> {
    let tree = output(&mut cargo(
        "tree -p registry-domain -e normal --prefix none",
    ))?;
    Ok(domain_problems_in(&tree))
}

fn domain_problems_in(tree: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for name in tree.lines().filter_map(|l| l.split_whitespace().next()) {
        if FORBIDDEN_IN_DOMAIN.iter().any(|f| name.starts_with(f)) {
            let problem = format!("registry-domain depends on {name} (the domain does no I/O)");
            if !problems.contains(&problem) {
                problems.push(problem);
            }
        }
    }
    problems
}

fn wrapper_problems() -> Result<Vec<String>> {
    let metadata = output(&mut cargo("metadata --format-version 1 --no-deps"))?;
    let metadata: Value = serde_json::from_str(&metadata).context("reading cargo metadata")?;
    Ok(wrapper_problems_in(&metadata))
}

fn wrapper_problems_in(metadata: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    for package in metadata["packages"].as_array().into_iter().flatten() {
        let member = package["name"].as_str().unwrap_or_default();
        for dep in package["dependencies"].as_array().into_iter().flatten() {
            // `kind` is null for normal dependencies, "dev" or "build" otherwise.
            if !dep["kind"].is_null() {
                continue;
            }
            let name = dep["name"].as_str().unwrap_or_default();
            for (pattern, allowed) in WRAPPERS {
                if matches(pattern, name) && !allowed.contains(&member) {
                    problems.push(format!(
                        "{member} depends on {name}; only {} may",
                        allowed.join(", ")
                    ));
                }
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn io_crates_in_the_domain_tree_are_reported_once() {
        let tree = "registry-domain v0.1.0 (/w/crates/domain)\nserde v1.0.229\n\
                    tokio v1.54.1\ntokio v1.54.1 (*)\ndiesel_derives v2.3.10\n";
        let problems = domain_problems_in(tree);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("tokio") && problems[1].contains("diesel_derives"));
        assert!(domain_problems_in("registry-domain v0.1.0\nserde v1.0\n").is_empty());
    }

    #[test]
    fn only_the_wrapping_member_may_depend_on_an_io_crate() {
        let metadata = json!({"packages": [
            {"name": "registry-store", "dependencies": [
                {"name": "diesel", "kind": null}, {"name": "pq-sys", "kind": null}]},
            {"name": "registry-server", "dependencies": [
                {"name": "actix-web", "kind": null}, {"name": "diesel_migrations", "kind": null}]},
            {"name": "registry-tests", "dependencies": [
                {"name": "diesel", "kind": "dev"}, {"name": "josekit", "kind": null}]},
        ]});
        assert_eq!(
            wrapper_problems_in(&metadata),
            ["registry-server depends on diesel_migrations; only registry-store may"]
        );
    }

    #[test]
    fn patterns_match_names_and_prefixes() {
        assert!(matches("diesel*", "diesel"));
        assert!(matches("diesel*", "diesel_migrations"));
        assert!(matches("reqwest", "reqwest"));
        assert!(!matches("reqwest", "reqwest-middleware"));
        assert!(!matches("actix*", "tokio"));
    }
}
