//! The engine against a reference written as plainly as possible: a loop over the document's
//! rules, a recursive glob, the type rules of docs/api.md,
//! "Authentication". `evaluate`, `explain`,
//! `matching_rules` and `compare` must agree with it on random policies and requests, whatever
//! the candidate index does.

use proptest::prelude::*;
use registry_policy::{compare, CompareResult, Decision, DenyReason, Policy, PolicyKind};
use serde_json::{json, Map, Value};
use std::net::IpAddr;

/// `*` any run, `?` one character (when `question`), the rest literal; anchored.
fn glob(pattern: &[char], value: &[char], question: bool) -> bool {
    match pattern.split_first() {
        None => value.is_empty(),
        Some(('*', rest)) => (0..=value.len()).any(|i| glob(rest, &value[i..], question)),
        Some(('?', rest)) if question => !value.is_empty() && glob(rest, &value[1..], question),
        Some((c, rest)) => value.first() == Some(c) && glob(rest, &value[1..], question),
    }
}

fn glob_str(pattern: &str, value: &str, question: bool) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let v: Vec<char> = value.chars().collect();
    glob(&p, &v, question)
}

fn claim_matches(pattern: &str, value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) | Some(Value::Object(_)) => false,
        Some(Value::String(s)) => glob_str(pattern, s, true),
        Some(Value::Number(n)) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => glob_str(pattern, &i.to_string(), true),
            (None, Some(u)) => glob_str(pattern, &u.to_string(), true),
            _ => false,
        },
        Some(Value::Bool(b)) => pattern == if *b { "true" } else { "false" },
        Some(Value::Array(items)) => items
            .iter()
            .any(|item| !item.is_array() && claim_matches(pattern, Some(item))),
    }
}

fn services_cover(services: &Value, service: &str) -> bool {
    services.as_array().into_iter().flatten().any(|p| {
        // Subdomains fold ASCII case only, as DNS does.
        let p = p.as_str().unwrap_or_default().to_ascii_lowercase();
        glob_str(&p, &service.to_ascii_lowercase(), false)
    })
}

/// The decision, from the document alone (the address check is the allowlist's own).
fn reference(
    policy: &Policy,
    claims: Option<&Map<String, Value>>,
    service: Option<&str>,
    ip: Option<IpAddr>,
) -> Decision {
    let document = policy.document();
    let kind = policy.kind();
    let credential = if claims.is_some() {
        PolicyKind::Oidc
    } else {
        PolicyKind::Static
    };
    let refused_ip = ip.filter(|ip| !policy.allows_ip(*ip));
    let Some(claims) = claims else {
        if kind != PolicyKind::Static {
            return Decision::Deny(DenyReason::KindMismatch {
                policy: kind,
                credential,
            });
        }
        if let Some(ip) = refused_ip {
            return Decision::Deny(DenyReason::IpNotAllowed { ip });
        }
        return match service {
            Some(s) if !services_cover(&document["services"], s) => {
                Decision::Deny(DenyReason::ServiceNotCovered {
                    subdomain: s.to_owned(),
                    rules: vec![],
                })
            }
            _ => Decision::Allow { rule: None },
        };
    };
    if kind != PolicyKind::Oidc {
        return Decision::Deny(DenyReason::KindMismatch {
            policy: kind,
            credential,
        });
    }
    let matched = reference_matching(policy, claims);
    let Some(&first) = matched.first() else {
        return Decision::Deny(DenyReason::NoRuleMatched);
    };
    if let Some(ip) = refused_ip {
        return Decision::Deny(DenyReason::IpNotAllowed { ip });
    }
    let Some(service) = service else {
        return Decision::Allow { rule: Some(first) };
    };
    let rules = document["rules"].as_array().unwrap();
    match matched
        .iter()
        .find(|&&i| services_cover(&rules[i]["services"], service))
    {
        Some(&rule) => Decision::Allow { rule: Some(rule) },
        None => Decision::Deny(DenyReason::ServiceNotCovered {
            subdomain: service.to_owned(),
            rules: matched,
        }),
    }
}

fn reference_matching(policy: &Policy, claims: &Map<String, Value>) -> Vec<usize> {
    let rules = policy.document()["rules"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut matched = Vec::new();
    for (i, rule) in rules.iter().enumerate() {
        let patterns = rule["claims"].as_object().unwrap();
        let issuer_ok = claims.get("iss").and_then(Value::as_str) == patterns["iss"].as_str();
        let others_ok = patterns
            .iter()
            .filter(|(name, _)| name.as_str() != "iss")
            .all(|(name, p)| claim_matches(p.as_str().unwrap(), claims.get(name)));
        if issuer_ok && others_ok {
            matched.push(i);
        }
    }
    matched
}

const ISSUERS: [&str; 3] = [
    "https://a.example",
    "https://b.example",
    "https://c.example",
];

/// Patterns biased towards what the index files: exact values, literal heads, and some that
/// start with a wildcard.
fn pattern() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[ab]{1,3}",
        3 => "[ab]{1,2}[*?][ab*?]{0,2}",
        1 => "[*?][ab*?]{0,3}",
        1 => Just("true".to_owned()),
        1 => Just("1".to_owned()),
        1 => Just("1*".to_owned()),
        1 => "[aé]{1,2}\\*?",
    ]
}

fn rule() -> impl Strategy<Value = Value> {
    (
        0..2usize,
        pattern(),
        pattern(),
        proptest::option::of(pattern()),
        proptest::option::of(pattern()),
        proptest::collection::vec("(api|web|\\*|a\\*|API)", 1..3),
    )
        .prop_map(|(iss, sub, aud, repo, n, services)| {
            let mut claims = json!({"iss": ISSUERS[iss], "sub": sub, "aud": aud});
            if let Some(repo) = repo {
                claims["repo"] = repo.into();
            }
            if let Some(n) = n {
                claims["n"] = n.into();
            }
            json!({"services": services, "claims": claims})
        })
}

fn policy_strategy() -> impl Strategy<Value = Policy> {
    (
        proptest::collection::vec(rule(), 1..10),
        prop_oneof![
            2 => Just(None),
            1 => Just(Some(json!(["192.0.2.0/24"]))),
            1 => Just(Some(json!(["192.0.2.0/25", "2001:db8::/32"]))),
        ],
    )
        .prop_map(|(rules, allowlist)| {
            let mut document = json!({"kind": "oidc", "rules": rules});
            if let Some(list) = allowlist {
                document["ip_allowlist"] = list;
            }
            stored(&document)
        })
}

/// The policy, through the schema when it passes (a repeated service does not: the stored
/// form, compiled without it, decides the same way).
fn stored(document: &Value) -> Policy {
    match Policy::parse(document) {
        Ok(parsed) => parsed.policy,
        Err(_) => Policy::from_stored(document).expect("a policy that compiles"),
    }
}

fn static_policy_strategy() -> impl Strategy<Value = Policy> {
    (
        proptest::collection::vec("(api|web|\\*|a\\*|API|web-\\*)", 0..3),
        prop_oneof![
            Just(None),
            Just(Some(json!(["192.0.2.0/24"]))),
            Just(Some(json!(["192.0.2.0/25"]))),
            Just(Some(json!(["192.0.2.0/23", "2001:db8::/32"]))),
        ],
    )
        .prop_map(|(services, allowlist)| {
            let mut document = json!({"kind": "static", "services": services});
            if let Some(list) = allowlist {
                document["ip_allowlist"] = list;
            }
            stored(&document)
        })
}

fn claim_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => "[ab]{0,4}".prop_map(Value::from),
        1 => "[aé]{1,3}".prop_map(Value::from),
        1 => (0..20i64).prop_map(Value::from),
        1 => any::<bool>().prop_map(Value::from),
        1 => Just(Value::Null),
        1 => Just(json!({"a": 1})),
        1 => Just(json!(1.5)),
        2 => proptest::collection::vec(
            prop_oneof!["[ab]{0,3}".prop_map(Value::from), (0..3i64).prop_map(Value::from),
                any::<bool>().prop_map(Value::from), Just(json!(["a"]))],
            0..3
        ).prop_map(Value::from),
    ]
}

fn claims_strategy() -> impl Strategy<Value = Map<String, Value>> {
    (
        0..4usize,
        proptest::option::of(claim_value()),
        proptest::option::of(claim_value()),
        proptest::option::of(claim_value()),
        proptest::option::of(claim_value()),
    )
        .prop_map(|(iss, sub, aud, repo, n)| {
            let mut claims = Map::new();
            if let Some(iss) = ISSUERS.get(iss) {
                claims.insert("iss".into(), (*iss).into());
            }
            for (name, value) in [("sub", sub), ("aud", aud), ("repo", repo), ("n", n)] {
                if let Some(value) = value {
                    claims.insert(name.into(), value);
                }
            }
            claims
        })
}

fn address() -> impl Strategy<Value = Option<IpAddr>> {
    prop_oneof![
        Just(None),
        Just(Some("192.0.2.9".parse().unwrap())),
        Just(Some("192.0.2.200".parse().unwrap())),
        Just(Some("198.51.100.1".parse().unwrap())),
        Just(Some("2001:db8::1".parse().unwrap())),
    ]
}

fn service() -> impl Strategy<Value = Option<String>> {
    proptest::option::of("(api|web|Api|ab|db|web-x)")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    /// `evaluate`, `explain` and `matching_rules` decide as the plain loop over the rules does.
    #[test]
    fn the_engine_agrees_with_the_reference(
        policy in policy_strategy(),
        claims in claims_strategy(),
        service in service(),
        ip in address(),
    ) {
        let expected = reference(&policy, Some(&claims), service.as_deref(), ip);
        let decision = policy.evaluate(Some(&claims), service.as_deref(), ip, None);
        prop_assert_eq!(&decision, &expected, "{}", policy.document());
        let explained = policy.explain(Some(&claims), service.as_deref(), ip, None);
        prop_assert_eq!(explained.allowed, expected.is_allowed());
        match expected {
            Decision::Allow { rule } => prop_assert_eq!(explained.rule, rule),
            _ => prop_assert!(!explained.reasons.is_empty()),
        }
        prop_assert_eq!(policy.matching_rules(&claims), reference_matching(&policy, &claims));
        let scope = policy.oidc_scope(&claims);
        prop_assert_eq!(scope.is_some(), !reference_matching(&policy, &claims).is_empty());
    }

    /// A static token against either kind of policy.
    #[test]
    fn static_tokens_agree_with_the_reference(
        policy in prop_oneof![static_policy_strategy(), policy_strategy()],
        service in service(),
        ip in address(),
    ) {
        let expected = reference(&policy, None, service.as_deref(), ip);
        prop_assert_eq!(policy.evaluate(None, service.as_deref(), ip, None), expected.clone());
        prop_assert_eq!(policy.explain(None, service.as_deref(), ip, None).allowed, expected.is_allowed());
    }

    /// `compare`'s witnesses are what they claim, and what it proves holds for every request
    /// tried here.
    #[test]
    fn compare_is_sound(
        old in prop_oneof![3 => policy_strategy(), 1 => static_policy_strategy()],
        new in prop_oneof![3 => policy_strategy(), 1 => static_policy_strategy()],
        requests in proptest::collection::vec(
            (proptest::option::of(claims_strategy()), service(), address()), 16),
    ) {
        let comparison = compare(&old, &new);
        match comparison.result {
            CompareResult::Widens => {
                prop_assert!(!comparison.witnesses.is_empty());
                for w in &comparison.witnesses {
                    let ip = w.ip;
                    let decision = new.evaluate(w.claims.as_ref(), w.service.as_deref(), ip, None);
                    prop_assert_eq!(decision, Decision::Allow { rule: w.rule });
                    prop_assert!(!old.evaluate(w.claims.as_ref(), w.service.as_deref(), ip, None).is_allowed());
                }
            }
            CompareResult::NarrowerOrEqual => {
                prop_assert!(comparison.witnesses.is_empty());
                for (claims, service, ip) in &requests {
                    let claims = claims.as_ref().filter(|_| new.kind() == PolicyKind::Oidc);
                    if reference(&new, claims, service.as_deref(), *ip).is_allowed() {
                        prop_assert!(
                            reference(&old, claims, service.as_deref(), *ip).is_allowed(),
                            "proven narrower, but {:?} {:?} {:?} gets in only with the new policy",
                            claims, service, ip
                        );
                    }
                }
            }
            _ => prop_assert!(comparison.witnesses.is_empty()),
        }
        // A policy against itself never widens.
        prop_assert_eq!(compare(&new, &new).result, CompareResult::NarrowerOrEqual);
    }
}
