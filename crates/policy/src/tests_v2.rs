//! Version-2 documents: actions in the schema, `evaluate`, `explain`, `from_stored`.

use super::*;
use crate::{compare, compare_with, CompareResult};
use serde_json::json;

const V2: &str = "https://registry.example/schemas/service-account-policy/v2.json";
const ISS: &str = "https://ci.example";

fn v2(mut document: Value) -> Value {
    document["$schema"] = V2.into();
    document
}

fn parse(document: Value) -> Policy {
    Policy::parse(&document)
        .unwrap_or_else(|e| panic!("{document}: {e}"))
        .policy
}

fn pointers(document: Value) -> Vec<(String, String)> {
    Policy::parse(&document)
        .unwrap_err()
        .into_violations()
        .into_iter()
        .map(|v| (v.pointer, v.message))
        .collect()
}

fn token(sub: &str) -> Map<String, Value> {
    json!({"iss": ISS, "aud": "registry", "sub": sub})
        .as_object()
        .unwrap()
        .clone()
}

fn rule(sub: &str, services: &[&str], actions: &[&str]) -> Value {
    json!({"services": services, "actions": actions,
        "claims": {"iss": ISS, "aud": "registry", "sub": sub}})
}

#[test]
fn the_version_is_told_by_the_schema_address() {
    let static_v1 = json!({"kind": "static", "services": ["*"]});
    for (schema, version) in [
        (None, 1),
        (
            Some(json!(
                "https://r.example/schemas/service-account-policy/v1.json"
            )),
            1,
        ),
        (
            Some(json!(
                "https://r.example/schemas/service-account-policy/v2.json"
            )),
            2,
        ),
        (Some(json!("/schemas/service-account-policy/v2.json")), 2),
        (
            Some(json!(
                "https://r.example/schemas/service-account-policy/v2.json#"
            )),
            1,
        ),
        (Some(json!(2)), 1),
    ] {
        let mut document = static_v1.clone();
        if let Some(schema) = schema {
            document["$schema"] = schema;
        }
        if version == 2 {
            document["actions"] = json!(["*"]);
        }
        let policy = Policy::from_stored(&document).unwrap();
        assert_eq!(policy.version(), version, "{document}");
    }
    let v1 = parse(static_v1);
    assert_eq!(v1.actions(), Actions::ALL);
    assert_eq!(v1.rules_actions(&[]), Actions::ALL);
    // A version-1 document allows every action but minting tokens, which is never implied.
    for action in Action::ALL {
        let allowed = v1.evaluate(None, Some("x"), None, action).is_allowed();
        assert_eq!(allowed, action != Action::TokensSign, "{action}");
    }
}

#[test]
fn the_v2_schema_requires_actions_where_they_belong() {
    let found = pointers(v2(json!({"kind": "static", "services": ["*"]})));
    assert_eq!(found[0].0, "/actions");
    assert!(found[0].1.contains("\"config:write\""), "{}", found[0].1);
    let found = pointers(v2(json!({"kind": "oidc", "rules": [
        {"services": ["*"], "claims": {"iss": ISS, "aud": "a", "sub": "s"}}]})));
    assert_eq!(found[0].0, "/rules/0/actions");
    // A top-level `actions` in an oidc document is refused like any unknown member.
    let found = pointers(v2(json!({"kind": "oidc", "actions": ["*"],
        "rules": [rule("s", &["*"], &["*"])]})));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "/actions");
    // In a version-1 document, `actions` is an unknown member.
    let found = pointers(json!({"kind": "static", "services": ["*"], "actions": ["*"]}));
    assert_eq!(found[0].0, "/actions");
    // A rule of a static document: `rules` itself is refused.
    let found = pointers(v2(
        json!({"kind": "static", "services": ["*"], "actions": ["*"],
        "rules": [rule("s", &["*"], &["*"])]}),
    ));
    assert!(found.iter().all(|(p, _)| p == "/rules"), "{found:?}");
}

#[test]
fn unknown_actions_are_pointed_at_with_the_accepted_values() {
    let found = pointers(v2(json!({"kind": "static", "services": ["*"],
        "actions": ["config:read", "config:delete"]})));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "/actions/1");
    assert!(
        found[0].1.contains("\"config:delete\" is not an action"),
        "{}",
        found[0].1
    );
    assert!(
        found[0]
            .1
            .contains("\"audit:read\", \"tokens:sign\", \"*\""),
        "{}",
        found[0].1
    );
    let found = pointers(v2(json!({"kind": "oidc", "rules": [
        rule("s", &["*"], &["services:read"]), rule("s", &["*"], &["read"])]})));
    assert_eq!(found[0].0, "/rules/1/actions/0");
    let found = pointers(v2(
        json!({"kind": "static", "services": ["*"], "actions": []}),
    ));
    assert_eq!(found[0].0, "/actions");
    let found = pointers(v2(json!({"kind": "static", "services": ["*"],
        "actions": ["audit:read", "audit:read"]})));
    assert_eq!(found[0].0, "/actions");
    assert!(found[0].1.contains("more than once"), "{}", found[0].1);
}

#[test]
fn static_v2_allows_only_its_actions() {
    let policy = parse(v2(json!({"kind": "static", "services": ["api-*"],
        "actions": ["config:read", "config:write"], "ip_allowlist": ["192.0.2.0/24"]})));
    assert_eq!(policy.version(), 2);
    assert_eq!(
        policy.actions(),
        Actions::of(&[Action::ConfigRead, Action::ConfigWrite])
    );
    assert_eq!(policy.rules_actions(&[3]), policy.actions());
    let inside: IpAddr = "192.0.2.1".parse().unwrap();
    let outside: IpAddr = "198.51.100.1".parse().unwrap();
    assert!(policy
        .evaluate(None, Some("api-acme"), inside, Action::ConfigRead)
        .is_allowed());
    assert!(policy
        .evaluate(None, Some("api-acme"), inside, None)
        .is_allowed());
    assert!(policy
        .evaluate(None, None, None, Action::ConfigWrite)
        .is_allowed());
    assert_eq!(
        policy.evaluate(None, Some("api-acme"), inside, Action::AccountsWrite),
        Decision::Deny(DenyReason::ActionNotAllowed {
            action: Action::AccountsWrite,
            rules: vec![]
        })
    );
    // The order of checks: address, service, then action.
    assert!(matches!(
        policy.evaluate(None, Some("api-acme"), outside, Action::AccountsWrite),
        Decision::Deny(DenyReason::IpNotAllowed { .. })
    ));
    assert!(matches!(
        policy.evaluate(None, Some("web-acme"), inside, Action::AccountsWrite),
        Decision::Deny(DenyReason::ServiceNotCovered { .. })
    ));
    let explained = policy.explain(None, Some("api-acme"), inside, Action::AuditRead);
    assert!(!explained.allowed);
    assert_eq!(explained.reasons[0].code, ReasonCode::ActionNotAllowed);
    assert_eq!(explained.reasons[0].code.as_str(), "action-not-allowed");
    assert_eq!(explained.reasons[0].pointer.as_deref(), Some("/actions"));
    assert_eq!(
        explained.reasons[0].message,
        "the policy's actions do not include \"audit:read\", the action the call needs"
    );
    assert_eq!(
        explained.to_json()["reasons"][0]["code"],
        "action-not-allowed"
    );
    let reason = DenyReason::ActionNotAllowed {
        action: Action::AuditRead,
        rules: vec![],
    };
    assert!(reason.to_string().contains("\"audit:read\""));
}

#[test]
fn oidc_v2_unites_the_actions_of_the_rules_that_match_and_cover() {
    let policy = parse(v2(json!({"kind": "oidc", "rules": [
        rule("repo:acme/*", &["api-acme"], &["config:read"]),
        rule("repo:acme/api", &["api-acme", "web-acme"], &["config:write"]),
        rule("repo:acme/*", &["docs-acme"], &["*"]),
        rule("repo:other", &["*"], &["audit:read"]),
    ]})));
    assert_eq!(policy.version(), 2);
    let all = policy.actions();
    assert!(all.is_all());
    assert_eq!(
        policy.rules_actions(&[0, 1]),
        Actions::of(&[Action::ConfigRead, Action::ConfigWrite])
    );
    let api = token("repo:acme/api");
    let web = token("repo:acme/web");
    let decide = |claims: &Map<String, Value>, service: Option<&str>, action: Option<Action>| {
        let decision = policy.evaluate(Some(claims), service, None, action);
        let explained = policy.explain(Some(claims), service, None, action);
        assert_eq!(
            explained.allowed,
            decision.is_allowed(),
            "{decision:?} {explained:?}"
        );
        if let Decision::Allow { rule } = decision {
            assert_eq!(explained.rule, rule);
        }
        (decision, explained)
    };
    assert_eq!(
        decide(&api, Some("api-acme"), Some(Action::ConfigRead)).0,
        Decision::Allow { rule: Some(0) }
    );
    assert_eq!(
        decide(&api, Some("api-acme"), Some(Action::ConfigWrite)).0,
        Decision::Allow { rule: Some(1) }
    );
    assert_eq!(
        decide(&api, Some("api-acme"), None).0,
        Decision::Allow { rule: Some(0) }
    );
    // Rule 1 does not match web's token: writing is not allowed on api-acme.
    let (decision, explained) = decide(&web, Some("api-acme"), Some(Action::ConfigWrite));
    assert_eq!(
        decision,
        Decision::Deny(DenyReason::ActionNotAllowed {
            action: Action::ConfigWrite,
            rules: vec![0]
        })
    );
    let reasons: Vec<(ReasonCode, Option<&str>)> = explained
        .reasons
        .iter()
        .map(|r| (r.code, r.pointer.as_deref()))
        .collect();
    assert!(reasons.contains(&(ReasonCode::ActionNotAllowed, Some("/rules/0/actions"))));
    assert!(explained
        .reasons
        .iter()
        .any(|r| r.message.contains("\"config:write\"")));
    // Every rule of the issuer is explained: rule 2 accepts web's token, refused the service.
    let mut rules: Vec<(Option<usize>, ReasonCode)> = (explained.reasons.iter())
        .map(|r| (r.rule, r.code))
        .collect();
    rules.sort_by_key(|(rule, _)| *rule);
    assert_eq!(
        rules,
        [
            (Some(0), ReasonCode::ActionNotAllowed),
            (Some(1), ReasonCode::ClaimMismatch),
            (Some(2), ReasonCode::ServiceNotAllowed),
            (Some(3), ReasonCode::ClaimMismatch),
        ],
        "{explained:?}"
    );
    // The action's refusal decided: it comes before the services'.
    let first_accepting = (explained.reasons.iter())
        .find(|r| r.code != ReasonCode::ClaimMismatch)
        .unwrap();
    assert_eq!(first_accepting.code, ReasonCode::ActionNotAllowed);
    // Rule 0 covers api-acme but not web-acme; rule 1 covers web-acme for api's token.
    assert!(matches!(
        decide(&web, Some("web-acme"), Some(Action::ConfigRead)).0,
        Decision::Deny(DenyReason::ServiceNotCovered { .. })
    ));
    assert_eq!(
        decide(&api, Some("web-acme"), Some(Action::ConfigRead)).0,
        Decision::Deny(DenyReason::ActionNotAllowed {
            action: Action::ConfigRead,
            rules: vec![1]
        })
    );
    // "*" allows everything on docs-acme.
    assert_eq!(
        decide(&web, Some("docs-acme"), Some(Action::AccountsWrite)).0,
        Decision::Allow { rule: Some(2) }
    );
    // No service: the union of the matching rules' actions.
    assert_eq!(
        decide(&api, None, Some(Action::AuditRead)).0,
        Decision::Allow { rule: Some(2) }
    );
    let narrow = parse(v2(json!({"kind": "oidc", "rules": [
        rule("a", &["x"], &["config:read"]), rule("a", &["y"], &["services:read"])]})));
    assert_eq!(
        narrow.evaluate(Some(&token("a")), None, None, Action::AuditRead),
        Decision::Deny(DenyReason::ActionNotAllowed {
            action: Action::AuditRead,
            rules: vec![0, 1]
        })
    );
    assert_eq!(
        narrow.evaluate(Some(&token("a")), None, None, Action::ServicesRead),
        Decision::Allow { rule: Some(1) }
    );
    let explained = narrow.explain(Some(&token("a")), None, None, Action::AuditRead);
    assert_eq!(explained.reasons.len(), 2);
    assert!(explained
        .reasons
        .iter()
        .all(|r| r.code == ReasonCode::ActionNotAllowed));
}

#[test]
fn stored_v2_documents_compile_without_the_schema() {
    let stored = v2(
        json!({"kind": "static", "services": ["*"], "actions": ["audit:read"],
        "note": "from an older version"}),
    );
    let policy = Policy::from_stored(&stored).unwrap();
    assert_eq!(policy.actions(), Actions::of(&[Action::AuditRead]));
    for (document, pointer) in [
        (v2(json!({"kind": "static", "services": ["*"]})), "/actions"),
        (
            v2(json!({"kind": "static", "services": ["*"], "actions": "*"})),
            "/actions",
        ),
        (
            v2(json!({"kind": "static", "services": ["*"], "actions": [1, "*"]})),
            "/actions/0",
        ),
        (
            v2(json!({"kind": "oidc", "rules": [
            {"services": ["*"], "claims": {"iss": ISS, "aud": "a", "sub": "s"}}]})),
            "/rules/0/actions",
        ),
        (
            v2(json!({"kind": "oidc", "rules": [rule("s", &["*"], &["nope"])]})),
            "/rules/0/actions/0",
        ),
    ] {
        let error = Policy::from_stored(&document).unwrap_err();
        assert_eq!(error.violations()[0].pointer, pointer, "{document}");
    }
}

/// The review's probe, sent whole: a document holding a 60,000-character pattern is refused by
/// its size before any pattern is compiled.
#[test]
fn oversized_documents_are_refused_before_anything_is_compiled() {
    let mut sub = String::from("*");
    for i in 0..29_999u32 {
        sub.push(char::from_u32(0x10000 + i).unwrap());
        sub.push('?');
    }
    sub.push('*');
    let document = json!({"kind": "oidc", "rules": [{"services": ["*"],
        "claims": {"iss": ISS, "aud": "registry", "sub": sub}}]});
    assert!(document.to_string().len() > 64 * 1024);
    let compiled = || crate::pattern::COMPILED.with(|n| n.get());
    let before = compiled();
    let refused = Policy::parse(&document).unwrap_err().into_violations();
    assert_eq!(compiled(), before, "nothing is compiled");
    let found: Vec<&str> = refused.iter().map(|v| v.pointer.as_str()).collect();
    assert_eq!(found, ["", "/rules/0/claims/sub"], "{refused:?}");
    assert!(refused[0].message.contains("at most 16384"));
    assert!(refused[1]
        .message
        .contains("60000 characters long; at most 512"));
    // Schema violations and limits are reported together.
    let mut both = document.clone();
    both["rules"][0]["colour"] = "blue".into();
    let found: Vec<String> = Policy::parse(&both)
        .unwrap_err()
        .into_violations()
        .into_iter()
        .map(|v| v.pointer)
        .collect();
    assert_eq!(found, ["/rules/0/colour", "", "/rules/0/claims/sub"]);
    assert_eq!(compiled(), before);
    // A stored document is served as it is.
    assert!(Policy::from_stored(&document).is_ok());
    // Every limit, with the pointer of what goes over.
    let rule = |i: usize| {
        json!({"services": ["*"], "actions": ["*"],
        "claims": {"iss": ISS, "aud": "a", "sub": format!("s{i}")}})
    };
    let many = v2(json!({"kind": "oidc", "rules": (0..51).map(rule).collect::<Vec<_>>()}));
    assert_eq!(
        Policy::parse(&many).unwrap_err().violations()[0].pointer,
        "/rules"
    );
    let services: Vec<String> = (0..101).map(|i| format!("s{i}")).collect();
    let listed = json!({"kind": "static", "services": services});
    assert_eq!(
        Policy::parse(&listed).unwrap_err().violations()[0].pointer,
        "/services"
    );
    let mut claims = json!({"iss": ISS, "aud": "a", "sub": "s"});
    for i in 0..14 {
        claims[format!("c{i}")] = "x".into();
    }
    let wide = json!({"kind": "oidc", "rules": [{"services": ["*"], "claims": claims}]});
    assert_eq!(
        Policy::parse(&wide).unwrap_err().violations()[0].pointer,
        "/rules/0/claims"
    );
    let findings = crate::lint_document(&document);
    assert!(findings.iter().all(|f| f.code == "limit"), "{findings:?}");
}

/// A 512-character pattern of `?`, `*` and two letters, different for each seed: the proof's
/// table is full for every pair of them.
fn adversarial(seed: u64) -> String {
    let mut x = seed
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    (0..crate::limits::MAX_PATTERN_CHARS)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ['a', 'b', '?', '*', 'a', '?'][(x % 6) as usize]
        })
        .collect()
}

fn adversarial_policy(salt: u64, star_subs: bool) -> Policy {
    let rules: Vec<Value> = (0..crate::limits::MAX_RULES as u64)
        .map(|i| {
            let sub = adversarial(salt + 2 * i + 1);
            let sub = if star_subs { format!("*{sub}") } else { sub };
            json!({"services": ["*"], "claims": {"iss": ISS,
                "aud": adversarial(salt + 2 * i), "sub": sub}})
        })
        .collect();
    // Beyond the byte limit: stored documents are not held to it, and compare must still end.
    Policy::from_stored(&json!({"kind": "oidc", "rules": rules})).unwrap()
}

/// 50 rules of 512-character adversarial patterns on both sides: `compare` ends after a
/// bounded amount of work (the hook is asked a bounded number of times), answers
/// `undetermined` where its budget ran out, and never a wrong `narrower-or-equal`.
#[test]
fn compare_is_bounded_at_the_limits() {
    let old = adversarial_policy(1, false);
    let wider = adversarial_policy(1, true);
    let other = adversarial_policy(1_000_000, false);
    for (old, new, never) in [
        (&old, &old, None),
        (&wider, &old, None),
        (&old, &wider, Some(CompareResult::NarrowerOrEqual)),
        (&old, &other, Some(CompareResult::NarrowerOrEqual)),
    ] {
        let mut polls = 0;
        let comparison = compare_with(old, new, &mut || {
            polls += 1;
            true
        });
        assert!(polls < 1_000, "{polls} polls");
        assert_ne!(Some(comparison.result), never);
        for w in &comparison.witnesses {
            let claims = w.claims.as_ref();
            assert!(new
                .evaluate(claims, w.service.as_deref(), w.ip, w.action)
                .is_allowed());
            assert!(!old
                .evaluate(claims, w.service.as_deref(), w.ip, w.action)
                .is_allowed());
        }
    }
    // The proof ran out of budget: undetermined, not narrower-or-equal.
    assert_eq!(compare(&old, &old).result, CompareResult::Undetermined);
    // Stopped by its hook at once: nothing proven, nothing found.
    let stopped = compare_with(&old, &old, &mut || false);
    assert_eq!(stopped.result, CompareResult::Undetermined);
}

#[test]
fn compare_knows_actions() {
    let static_v2 = |actions: &[&str]| {
        parse(v2(
            json!({"kind": "static", "services": ["api-acme"], "actions": actions}),
        ))
    };
    let read = static_v2(&["config:read"]);
    let write = static_v2(&["config:read", "config:write"]);
    let star = static_v2(&["*"]);
    let seven = static_v2(
        &Action::ALL[..7]
            .iter()
            .map(|a| a.as_str())
            .collect::<Vec<_>>(),
    );
    let signer = static_v2(&["*", "tokens:sign"]);
    let v1 = parse(json!({"kind": "static", "services": ["api-acme"]}));
    assert_eq!(
        compare(&write, &read).result,
        CompareResult::NarrowerOrEqual
    );
    assert_eq!(compare(&v1, &read).result, CompareResult::NarrowerOrEqual);
    assert_eq!(
        compare(&star, &seven).result,
        CompareResult::NarrowerOrEqual
    );
    assert_ne!(
        compare(&seven, &star).result,
        CompareResult::NarrowerOrEqual
    );
    assert_ne!(compare(&read, &v1).result, CompareResult::NarrowerOrEqual);
    // Minting tokens is not in "*": naming it widens.
    let minting = compare(&star, &signer);
    assert_eq!(minting.result, CompareResult::Widens);
    assert_eq!(minting.witnesses[0].action, Some(Action::TokensSign));
    assert_eq!(
        compare(&signer, &star).result,
        CompareResult::NarrowerOrEqual
    );
    let added = compare(&read, &write);
    assert_eq!(added.result, CompareResult::Widens);
    let witness = &added.witnesses[0];
    assert_eq!(witness.action, Some(Action::ConfigWrite));
    assert_eq!(added.to_json()["witnesses"][0]["action"], "config:write");
    assert!(write
        .evaluate(None, witness.service.as_deref(), witness.ip, witness.action)
        .is_allowed());
    assert!(!read
        .evaluate(None, witness.service.as_deref(), witness.ip, witness.action)
        .is_allowed());
    // OIDC: a rule's actions must lie inside those of the old rules that cover it.
    let oidc = |rules: Vec<Value>| parse(v2(json!({"kind": "oidc", "rules": rules})));
    let old = oidc(vec![
        rule("repo:acme/*", &["api-acme"], &["config:read"]),
        rule("repo:acme/*", &["*"], &["services:read"]),
    ]);
    let same = oidc(vec![rule(
        "repo:acme/api",
        &["api-acme"],
        &["config:read", "services:read"],
    )]);
    assert_eq!(compare(&old, &same).result, CompareResult::NarrowerOrEqual);
    let more = oidc(vec![rule(
        "repo:acme/api",
        &["api-acme"],
        &["config:write"],
    )]);
    let comparison = compare(&old, &more);
    assert_eq!(comparison.result, CompareResult::Widens);
    assert_eq!(comparison.witnesses[0].action, Some(Action::ConfigWrite));
    let elsewhere = oidc(vec![rule("repo:acme/api", &["web-acme"], &["config:read"])]);
    assert_eq!(compare(&old, &elsewhere).result, CompareResult::Widens);
}

#[test]
fn lint_warns_of_every_action_on_every_service() {
    let codes = |document: Value| -> Vec<(&'static str, String)> {
        crate::lint_document(&document)
            .into_iter()
            .map(|f| (f.code, f.pointer))
            .collect()
    };
    let found = codes(v2(
        json!({"kind": "static", "services": ["*"], "actions": ["*"]}),
    ));
    assert!(
        found.contains(&("all-actions-on-all-services", "/actions".into())),
        "{found:?}"
    );
    let found = codes(v2(json!({"kind": "oidc", "rules": [
        rule("repo:acme/api", &["api-acme"], &["*"]), rule("repo:acme/api", &["*"], &["*"])]})));
    let hits: Vec<_> = found
        .iter()
        .filter(|(c, _)| *c == "all-actions-on-all-services")
        .collect();
    assert_eq!(
        hits,
        [&("all-actions-on-all-services", "/rules/1/actions".to_owned())]
    );
    let found = codes(v2(
        json!({"kind": "static", "services": ["*"], "actions": ["audit:read"]}),
    ));
    assert!(found
        .iter()
        .all(|(c, _)| *c != "all-actions-on-all-services"));
    let found = codes(json!({"kind": "static", "services": ["*"]}));
    assert!(found
        .iter()
        .all(|(c, _)| *c != "all-actions-on-all-services"));
}
