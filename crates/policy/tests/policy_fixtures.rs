//! The policy fixtures in `tests/fixtures/policies` against both the raw schema file (as any
//! client would use it) and `Policy::parse`.

use registry_policy::{Policy, SCHEMA_SOURCE};
use serde_json::Value;
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

fn fixtures(kind: &str) -> Vec<(String, Value)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/policies")
        .join(kind);
    let mut paths: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let text = fs::read_to_string(&p).unwrap();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            (name, value)
        })
        .collect()
}

/// The schema file compiled the way an outside client would: from its own `$schema`.
fn raw_schema() -> jsonschema::Validator {
    let schema: Value = serde_json::from_str(SCHEMA_SOURCE).unwrap();
    jsonschema::validator_for(&schema).expect("the schema file compiles")
}

#[test]
fn there_are_enough_fixtures() {
    assert!(fixtures("valid").len() >= 10);
    assert!(fixtures("invalid").len() >= 30);
}

#[test]
fn valid_fixtures_are_accepted_by_schema_and_parser() {
    let schema = raw_schema();
    for (name, document) in fixtures("valid") {
        let errors: Vec<String> = schema
            .iter_errors(&document)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{name}: schema refused it: {errors:?}");
        if let Err(violations) = Policy::parse(&document) {
            panic!("{name}: parser refused it: {violations:?}");
        }
    }
}

#[test]
fn invalid_fixtures_are_refused_by_schema_and_parser_with_the_expected_pointers() {
    let schema = raw_schema();
    for (name, fixture) in fixtures("invalid") {
        let document = &fixture["document"];
        assert!(
            fixture["description"]
                .as_str()
                .is_some_and(|d| !d.is_empty()),
            "{name}: needs a description"
        );
        let expected: BTreeSet<&str> = fixture["pointers"]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: needs pointers"))
            .iter()
            .map(|p| p.as_str().unwrap())
            .collect();
        assert!(!expected.is_empty(), "{name}: lists no pointer");

        assert!(
            !schema.is_valid(document),
            "{name}: the schema file accepts it"
        );

        let violations = match Policy::parse(document) {
            Ok(_) => panic!("{name}: the parser accepts it"),
            Err(error) => error.into_violations(),
        };
        let found: BTreeSet<&str> = violations.iter().map(|v| v.pointer.as_str()).collect();
        assert_eq!(found, expected, "{name}: {violations:#?}");
        for v in &violations {
            assert!(
                v.message.len() > 10 && !v.message.contains("json-schema"),
                "{name}: unhelpful message {v:?}"
            );
        }
    }
}
