//! Explains why a policy refuses a token, as the owner of the account sees it: reasons with
//! stable codes and pointers into the policy, and hints about near misses.
//!
//! `cargo run -p registry-domain --example explain`

use registry_domain::policy::{Policy, ReasonCode};
use serde_json::json;
use std::net::IpAddr;

fn main() {
    let policy = Policy::parse(&json!({
        "kind": "oidc",
        "rules": [
            {"services": ["api-acme"], "claims": {
                "iss": "https://token.actions.githubusercontent.com",
                "aud": "registry",
                "sub": "repo:acme/infra:ref:refs/heads/main"}},
            {"services": ["web-acme"], "claims": {
                "iss": "https://token.actions.githubusercontent.com",
                "aud": "registry",
                "sub": "repo:Acme/web:*"}}
        ]
    }))
    .expect("a valid policy")
    .policy;

    // A job that uses a deployment environment: GitHub puts it in `sub` instead of the ref.
    let claims = json!({
        "iss": "https://token.actions.githubusercontent.com",
        "aud": "registry",
        "sub": "repo:acme/infra:environment:production"
    });
    let explained = policy.explain(claims.as_object(), Some("api-acme"), None, None);
    println!(
        "{}",
        serde_json::to_string_pretty(&explained.to_json()).expect("JSON")
    );
    assert!(!explained.allowed);
    let reasons: Vec<(ReasonCode, Option<&str>)> = explained
        .reasons
        .iter()
        .map(|r| (r.code, r.pointer.as_deref()))
        .collect();
    assert_eq!(
        reasons,
        [
            (ReasonCode::ClaimMismatch, Some("/rules/0/claims/sub")),
            (ReasonCode::ClaimMismatch, Some("/rules/1/claims/sub")),
        ]
    );
    assert!(explained.hints[0]
        .message
        .contains("deployment environment"));

    // A token of acme/web: rule 1 spells the owner `Acme`, and matching is case-sensitive. The
    // decision is always `evaluate`'s; the hint points at the near miss.
    let web = json!({
        "iss": "https://token.actions.githubusercontent.com",
        "aud": "registry",
        "sub": "repo:acme/web:ref:refs/heads/main"
    });
    let explained = policy.explain(web.as_object(), Some("web-acme"), None, None);
    for reason in &explained.reasons {
        println!("{}: {}", reason.code, reason.message);
    }
    for hint in &explained.hints {
        println!("hint ({}): {}", hint.pointer, hint.message);
    }
    let evaluated = policy.evaluate(
        web.as_object(),
        Some("web-acme"),
        IpAddr::from([192, 0, 2, 1]),
        None,
    );
    assert_eq!(explained.allowed, evaluated.is_allowed());
    assert!(!explained.allowed);
    assert!(explained
        .hints
        .iter()
        .any(|h| h.rule == 1 && h.message.contains("only in case")));

    // A token the policy admits: no reasons, the admitting rule.
    let infra = json!({
        "iss": "https://token.actions.githubusercontent.com",
        "aud": "registry",
        "sub": "repo:acme/infra:ref:refs/heads/main"
    });
    let explained = policy.explain(infra.as_object(), Some("api-acme"), None, None);
    println!(
        "acme/infra on api-acme: {}",
        explained.to_json()["decision"]
    );
    assert!(explained.allowed && explained.reasons.is_empty());
    assert_eq!(explained.rule, Some(0));
}
