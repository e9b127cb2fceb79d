//! The golden policy test cases in `tests/cases`: each `NAME.policy.json` with its
//! `NAME.cases.json`, as `registry policy test NAME.policy.json NAME.cases.json` runs them. Every
//! case passes, every rule is exercised, and every allowed case names the rule that admits it, so
//! that the files pin the engine's decision and rule for each request. The Python binding's
//! tests (`crates/policy-python/tests`) run the same files.

use registry_policy::{parse_cases, run_cases, Decision, Policy};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn read(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Each policy file with its cases file, sorted.
fn golden() -> Vec<(PathBuf, PathBuf)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cases");
    let mut pairs: Vec<(PathBuf, PathBuf)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter_map(|path| {
            let name = path.file_name()?.to_str()?.strip_suffix(".policy.json")?;
            let cases = dir.join(format!("{name}.cases.json"));
            Some((path, cases))
        })
        .collect();
    pairs.sort();
    pairs
}

#[test]
fn every_golden_case_passes_and_names_its_rule() {
    let pairs = golden();
    assert!(pairs.len() >= 2, "{pairs:?}");
    let mut total = 0;
    for (policy_path, cases_path) in pairs {
        let policy = Policy::parse(&read(&policy_path))
            .unwrap_or_else(|e| panic!("{}: {e}", policy_path.display()))
            .policy;
        let cases = parse_cases(&read(&cases_path)).unwrap();
        let run = run_cases(&policy, &cases);
        let report = run.report(&cases).to_string();
        assert_eq!(run.failed(), 0, "{}:\n{report}", cases_path.display());
        assert!(
            run.uncovered.is_empty(),
            "{}:\n{report}",
            cases_path.display()
        );
        for case in &cases {
            let where_ = format!("{}: {}", cases_path.display(), case.name);
            assert!(
                !case.allow || case.rule.is_some(),
                "{where_}: name the rule"
            );
            // `evaluate` decides as `explain` does, with the same rule.
            let decision = policy.evaluate(
                Some(&case.claims),
                case.service.as_deref(),
                case.ip,
                case.action,
            );
            let expected = if case.allow {
                Decision::Allow { rule: case.rule }
            } else {
                assert!(!decision.is_allowed(), "{where_}");
                continue;
            };
            assert_eq!(decision, expected, "{where_}");
        }
        total += cases.len();
    }
    assert!(total >= 30, "{total} golden cases");
}
