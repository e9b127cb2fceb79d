//! Lints policy documents the way `registry policy check` does: schema errors, then warnings
//! about valid but risky choices, each with a stable code and a pointer.
//!
//! `cargo run -p registry-domain --example lint`

use registry_domain::policy::{lint_document, Severity};
use serde_json::{json, Value};

fn lint(name: &str, document: &Value) -> Vec<(&'static str, String)> {
    let findings = lint_document(document);
    println!("{name}: {} finding(s)", findings.len());
    for finding in &findings {
        println!(
            "  {} {} at {}: {}",
            finding.severity.as_str(),
            finding.code,
            finding.pointer,
            finding.message
        );
    }
    findings
        .into_iter()
        .map(|f| {
            let expected = if f.code == "schema" {
                Severity::Error
            } else {
                Severity::Warning
            };
            assert_eq!(f.severity, expected);
            (f.code, f.pointer)
        })
        .collect()
}

fn main() {
    let careful = json!({"kind": "oidc", "rules": [{"services": ["api-acme"], "claims": {
        "iss": "https://token.actions.githubusercontent.com",
        "aud": "https://registry.example",
        "sub": "repo:acme/api:ref:refs/heads/main"}}]});
    assert_eq!(lint("careful", &careful), []);

    let risky = json!({"kind": "oidc", "rules": [
        {"services": ["*"], "claims": {"iss": "http://idp.example/", "aud": "*", "sub": "ci"}},
        {"services": ["api-acme"], "claims": {"iss": "http://idp.example/", "aud": "*", "sub": "ci"}}
    ], "ip_allowlist": ["0.0.0.0/0"]});
    let found = lint("risky", &risky);
    for expected in [
        ("any-audience", "/rules/0/claims/aud"),
        ("insecure-issuer", "/rules/0/claims/iss"),
        ("issuer-trailing-slash", "/rules/0/claims/iss"),
        ("wildcard-services", "/rules/0/services/0"),
        ("shadowed-rule", "/rules/1"),
        ("allow-all-addresses", "/ip_allowlist/0"),
    ] {
        assert!(
            found.contains(&(expected.0, expected.1.to_owned())),
            "{expected:?} missing"
        );
    }

    let broken = json!({"kind": "oidc", "rules": [{"services": ["api-acme"],
        "claims": {"iss": "https://ci.example/*", "aud": "registry"}}]});
    let found = lint("broken", &broken);
    assert!(found.contains(&("schema", "/rules/0/claims/iss".to_owned())));
    assert!(found.contains(&("schema", "/rules/0/claims/sub".to_owned())));
}
