//! The shared policy fixtures (`tests/fixtures/policies/`), through the API: every invalid
//! document is refused with exactly the pointers the domain parser reports, under `/policy`;
//! every valid one is accepted.

use registry_tests::server::{assert_problem, json, pointers, TestServer};
use reqwest::Method;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::Path;

fn fixtures(kind: &str) -> Vec<(String, Value)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/policies")
        .join(kind);
    let mut out: Vec<(String, Value)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            (
                path.file_name().unwrap().to_string_lossy().into_owned(),
                serde_json::from_str(&text).unwrap(),
            )
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Every literal `services` entry of a policy document.
fn literal_services(policy: &Value) -> Vec<String> {
    let mut lists = vec![&policy["services"]];
    if let Some(rules) = policy["rules"].as_array() {
        lists.extend(rules.iter().map(|r| &r["services"]));
    }
    lists
        .into_iter()
        .filter_map(Value::as_array)
        .flatten()
        .filter_map(Value::as_str)
        .filter(|s| !s.contains('*'))
        .map(str::to_owned)
        .collect()
}

#[test]
fn invalid_fixtures_are_refused_with_their_pointers() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let invalid = fixtures("invalid");
    assert!(invalid.len() >= 30, "{} fixtures", invalid.len());
    for (name, fixture) in invalid {
        let response = server
            .authed(Method::POST, "/service-accounts", &acme.token)
            .json(&json!({"name": "fixture", "policy": fixture["document"]}))
            .send()
            .unwrap();
        let problem = assert_problem(response, 400, "validation-failed");
        let got: BTreeSet<String> = pointers(&problem).into_iter().collect();
        let expected: BTreeSet<String> = fixture["pointers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| format!("/policy{}", p.as_str().unwrap()))
            .collect();
        assert_eq!(got, expected, "{name}: {problem}");
    }
    let accounts = json(
        server
            .authed(Method::GET, "/service-accounts", &acme.token)
            .send()
            .unwrap(),
    );
    assert_eq!(
        accounts.as_array().unwrap().len(),
        1,
        "only the bootstrap account exists"
    );
}

#[test]
fn valid_fixtures_are_accepted_and_returned_as_saved() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let valid = fixtures("valid");
    let mut owned = BTreeSet::new();
    let mut accepted = 0;
    for (name, policy) in valid {
        let literals = literal_services(&policy);
        // Fixtures that name services of a tenant other than acme cannot be owned here.
        if literals
            .iter()
            .any(|s| !s.to_lowercase().ends_with("-acme"))
        {
            continue;
        }
        for subdomain in literals.iter().map(|s| s.to_lowercase()) {
            if owned.insert(subdomain.clone()) {
                let service_name = subdomain.trim_end_matches("-acme");
                let created = server
                    .authed(Method::POST, "/services", &acme.token)
                    .json(&json!({"title": service_name, "serviceName": service_name}))
                    .send()
                    .unwrap();
                assert_eq!(created.status(), 201, "{name}: {subdomain}");
            }
        }
        let response = server
            .authed(Method::POST, "/service-accounts", &acme.token)
            .json(&json!({"name": name, "policy": policy}))
            .send()
            .unwrap();
        assert_eq!(response.status(), 201, "{name}");
        let body = json(response);
        assert_eq!(body["policy"], policy, "{name}");
        accepted += 1;
    }
    assert!(
        accepted >= 8,
        "only {accepted} valid fixtures could be used"
    );
}
