//! Policy documents: `Policy::parse`, then `evaluate` / `oidc_scope` / `static_scope`.
//!
//! Input: any bytes; those that are JSON are parsed as a policy document. For a policy that
//! parses, requests are derived from the policy itself so that evaluation reaches its accepting
//! paths: each rule's claims with their wildcards filled in must match that rule, each
//! wildcard-free ASCII service entry must be covered, an address inside the allowlist must pass,
//! and `evaluate` must agree with the scopes it is built from. Display of every decision runs
//! too (it renders claim values).
#![no_main]

use libfuzzer_sys::fuzz_target;
use registry_domain::policy::{Decision, Policy, PolicyKind};
use serde_json::{Map, Value};
use std::net::IpAddr;

/// A value the glob must accept: `*` → nothing, `?` → one character, all else as written.
fn instantiate(pattern: &str) -> String {
    pattern
        .chars()
        .filter(|c| *c != '*')
        .map(|c| if c == '?' { 'q' } else { c })
        .collect()
}

/// A service entry's subdomain that the entry covers (services have no `?` wildcard).
fn instantiate_service(entry: &str) -> Option<String> {
    entry.is_ascii().then(|| entry.replace('*', ""))
}

fn strings(value: Option<&Value>) -> Vec<&str> {
    value
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// An address the allowlist must admit, if one is obvious (v4-mapped v6 ranges are compared
/// as IPv4 by design, so they are skipped).
fn inside(policy: &Policy) -> Option<IpAddr> {
    let Some(net) = policy.ip_allowlist().entries().first() else {
        return Some("192.0.2.1".parse().expect("an address"));
    };
    match net.network() {
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some() => None,
        ip => Some(ip),
    }
}

fn check_consistency(
    policy: &Policy,
    claims: Option<&Map<String, Value>>,
    subdomain: &str,
    ip: IpAddr,
) {
    let decision = policy.evaluate(claims, Some(subdomain), ip);
    let _ = decision.to_string();
    let _ = policy.evaluate(claims, None, ip).to_string();
    let covered = match (policy.kind(), claims) {
        (PolicyKind::Static, None) => policy.static_scope().is_some_and(|s| s.matches(subdomain)),
        (PolicyKind::Oidc, Some(claims)) => policy
            .oidc_scope(claims)
            .is_some_and(|s| s.matches(subdomain)),
        _ => false,
    };
    assert_eq!(
        decision.is_allowed(),
        covered && policy.allows_ip(ip),
        "evaluate says {decision} but the scope says covered={covered}"
    );
}

fuzz_target!(|data: &[u8]| {
    let Ok(document) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let Ok(parsed) = Policy::parse(&document) else {
        return;
    };
    let policy = parsed.policy;
    assert_eq!(policy.document(), &document);
    let _ = policy.literal_services();
    let _ = policy.issuers();
    let ip = inside(&policy);
    if let Some(ip) = ip {
        assert!(
            policy.allows_ip(ip),
            "{ip} is inside the allowlist's first entry"
        );
    }
    let ip = ip.unwrap_or_else(|| "198.51.100.7".parse().expect("an address"));
    match policy.kind() {
        PolicyKind::Static => {
            let scope = policy.static_scope().expect("a static policy has a scope");
            for entry in strings(document.get("services")) {
                if let Some(subdomain) = instantiate_service(entry) {
                    assert!(
                        scope.matches(&subdomain),
                        "{entry:?} does not cover {subdomain:?}"
                    );
                    check_consistency(&policy, None, &subdomain, ip);
                }
            }
            check_consistency(&policy, None, "api-acme", ip);
            assert!(matches!(
                policy.evaluate(Some(&Map::new()), None, ip),
                Decision::Deny(_)
            ));
        }
        PolicyKind::Oidc => {
            let rules = document["rules"]
                .as_array()
                .expect("the schema requires rules");
            for rule in rules {
                let Some(patterns) = rule["claims"].as_object() else {
                    continue;
                };
                let claims: Map<String, Value> = patterns
                    .iter()
                    .filter_map(|(name, p)| {
                        Some((name.clone(), Value::String(instantiate(p.as_str()?))))
                    })
                    .collect();
                let scope = policy.oidc_scope(&claims);
                assert!(
                    scope.is_some(),
                    "a rule refused its own instantiated claims {claims:?}"
                );
                for entry in strings(rule.get("services")) {
                    if let Some(subdomain) = instantiate_service(entry) {
                        assert!(
                            scope.as_ref().is_some_and(|s| s.matches(&subdomain)),
                            "{entry:?} of a matching rule does not cover {subdomain:?}"
                        );
                        check_consistency(&policy, Some(&claims), &subdomain, ip);
                    }
                }
                check_consistency(&policy, Some(&claims), "api-acme", ip);
                // The same claims as an array `aud` and integer-typed extras must not panic.
                let mut variant = claims.clone();
                if let Some(aud) = variant.get("aud").cloned() {
                    variant.insert("aud".into(), Value::Array(vec![Value::Bool(true), aud]));
                }
                variant.insert("extra".into(), Value::from(-9_223_372_036_854_775_807i64));
                check_consistency(&policy, Some(&variant), "api-acme", ip);
            }
            assert!(policy.static_scope().is_none());
            assert!(matches!(policy.evaluate(None, None, ip), Decision::Deny(_)));
        }
        // The kinds are non-exhaustive: a later one is not this target's to check.
        _ => {}
    }
});
