//! Evaluates a GitHub Actions token's claims against an OIDC policy: which requests it allows,
//! which it refuses and why, and the services the matching rules cover.
//!
//! `cargo run -p registry-domain --example evaluate`

use registry_domain::policy::{Decision, DenyReason, Policy};
use serde_json::json;
use std::net::IpAddr;

fn main() {
    let parsed = Policy::parse(&json!({
        "kind": "oidc",
        "rules": [
            {"services": ["deploy-*"], "claims": {
                "iss": "https://token.actions.githubusercontent.com",
                "aud": "https://registry.example",
                "sub": "repo:acme/*:ref:refs/heads/main"}},
            {"services": ["docs-acme"], "claims": {
                "iss": "https://token.actions.githubusercontent.com",
                "aud": "https://registry.example",
                "sub": "repo:acme/docs:*"}}
        ],
        "ip_allowlist": ["203.0.113.0/24"]
    }))
    .expect("a valid policy");
    assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
    let policy = parsed.policy;

    let claims = json!({
        "iss": "https://token.actions.githubusercontent.com",
        "aud": "https://registry.example",
        "sub": "repo:acme/api:ref:refs/heads/main",
        "repository": "acme/api"
    });
    let claims = claims.as_object().expect("an object");
    let inside: IpAddr = "203.0.113.5".parse().expect("an address");
    let outside: IpAddr = "198.51.100.1".parse().expect("an address");

    let cases = [
        ("deploy-acme", inside),
        ("docs-acme", inside),
        ("deploy-acme", outside),
    ];
    let mut decisions = Vec::new();
    for (service, address) in cases {
        let decision = policy.evaluate(Some(claims), Some(service), address, None);
        println!("{service} from {address}: {decision}");
        decisions.push(decision);
    }
    assert_eq!(decisions[0], Decision::Allow { rule: Some(0) });
    assert_eq!(
        decisions[1],
        Decision::Deny(DenyReason::ServiceNotCovered {
            subdomain: "docs-acme".into(),
            rules: vec![0],
        })
    );
    assert_eq!(
        decisions[2],
        Decision::Deny(DenyReason::IpNotAllowed { ip: outside })
    );

    let scope = policy.oidc_scope(claims).expect("rule 0 matches");
    let covered: Vec<&str> = ["deploy-acme", "deploy-web-acme", "docs-acme"]
        .into_iter()
        .filter(|s| scope.matches(s))
        .collect();
    println!("the token's scope covers {covered:?}");
    assert_eq!(covered, ["deploy-acme", "deploy-web-acme"]);
    assert_eq!(policy.matching_rules(claims), [0]);
}
