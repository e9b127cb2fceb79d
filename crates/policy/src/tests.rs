use super::*;
use proptest::prelude::*;
use serde_json::json;

const GH: &str = "https://token.actions.githubusercontent.com";
const GITLAB: &str = "https://gitlab.com";

fn parse(document: Value) -> ParsedPolicy {
    Policy::parse(&document).unwrap_or_else(|v| panic!("{document}: {v:?}"))
}

fn claims(value: Value) -> Map<String, Value> {
    value.as_object().expect("claims object").clone()
}

/// Claims shaped like a GitHub Actions ID token.
fn github(sub: &str) -> Map<String, Value> {
    claims(json!({
        "iss": GH,
        "aud": "https://registry.example",
        "sub": sub,
        "repository": "acme/api",
        "repository_owner": "acme",
        "repository_id": "42",
        "run_attempt": 1,
        "ref": "refs/heads/main",
        "ref_protected": true,
        "exp": 1_900_000_000,
        "iat": 1_899_999_000,
    }))
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn oidc_policy() -> Policy {
    parse(json!({
        "kind": "oidc",
        "rules": [
            {
                "services": ["api-acme"],
                "claims": {"iss": GH, "aud": "https://registry.example", "sub": "repo:acme/api:*"}
            },
            {
                "services": ["web-acme"],
                "claims": {"iss": GITLAB, "aud": "https://registry.example", "sub": "project_path:acme/*"}
            },
            {
                "services": ["deploy-*"],
                "claims": {
                    "iss": GH,
                    "aud": "https://registry.example",
                    "sub": "repo:acme/*",
                    "repository_owner": "acme"
                }
            },
            {
                "services": ["*"],
                "claims": {
                    "iss": GH,
                    "aud": "https://registry.example",
                    "sub": "repo:acme/admin:ref:refs/heads/main",
                    "ref_protected": "true"
                }
            }
        ],
        "ip_allowlist": ["203.0.113.0/24", "2001:db8::/32"]
    }))
    .policy
}

#[test]
fn parse_keeps_the_document_and_kind() {
    let document = json!({"kind": "static", "services": ["b", "a"], "$schema": "x"});
    let policy = parse(document.clone()).policy;
    assert_eq!(policy.document(), &document);
    assert_eq!(
        serde_json::to_string(policy.document()).unwrap(),
        r#"{"kind":"static","services":["b","a"],"$schema":"x"}"#,
        "member order is kept as saved"
    );
    assert_eq!(policy.kind(), PolicyKind::Static);
    assert_eq!(policy.kind().to_string(), "static");
    assert_eq!(oidc_policy().kind(), PolicyKind::Oidc);
}

#[test]
fn schema_messages_name_the_problem() {
    let v = Policy::parse(&json!({"kind": "oidc"}))
        .unwrap_err()
        .into_violations();
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].pointer, "/rules");
    assert!(
        v[0].message.contains("required when kind is \"oidc\""),
        "{}",
        v[0]
    );

    let v = Policy::parse(&json!({"kind": "static", "services": ["*"], "rules": []}))
        .unwrap_err()
        .into_violations();
    assert!(v.iter().all(|v| v.pointer == "/rules"));
    assert!(v
        .iter()
        .any(|v| v.message.contains("not allowed when kind is \"static\"")));

    let v = Policy::parse(&json!({"kind": "oidc", "rules": [
        {"services": ["*"], "claims": {"iss": GH, "aud": "a", "sub": "s", "run_attempt": 1}}
    ]}))
    .unwrap_err()
    .into_violations();
    assert_eq!(v[0].pointer, "/rules/0/claims/run_attempt");
    assert!(
        v[0].message
            .starts_with("claim \"run_attempt\" must be a string"),
        "{}",
        v[0]
    );

    let v = Policy::parse(&json!({"kind": "static", "services": ["a", 1]}))
        .unwrap_err()
        .into_violations();
    assert_eq!(
        v[0].message,
        "entry 1 of \"services\" must be a string, not a number"
    );

    let v = Policy::parse(&json!({"kind": "static", "services": ["*"], "ip_allowlist": [""]}))
        .unwrap_err()
        .into_violations();
    assert_eq!(v.len(), 1, "an empty entry is reported once: {v:?}");
}

#[test]
fn semantic_ip_errors_point_at_the_entry() {
    // The schema pattern and the parser accept the same language (see the proptest below), so
    // the parser's own check is reached only through `IpAllowlist::parse`.
    let errors = IpAllowlist::parse(["10.0.0.1", "10.0.0.0/40"])
        .unwrap_err()
        .into_violations();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].pointer, "/1");
    assert!(errors[0].message.contains("from 0 to 32"));
}

#[test]
fn warnings_for_rules_accepting_any_subject_or_audience() {
    let rule = |aud: &str, sub: &str| json!({"services": ["*"], "claims": {"iss": GH, "aud": aud, "sub": sub}});
    let parsed = parse(json!({"kind": "oidc", "rules": [
        rule("https://registry.example", "repo:acme/*"),
        rule("https://registry.example", "*"),
        rule("**", "repo:acme/api:*"),
        rule("*", "***"),
        rule("https://registry.example", "*?"),
        rule("?*", "repo:acme/api:*"),
        rule("https://registry.example", "repo:?"),
    ]}));
    let w = &parsed.warnings;
    assert_eq!(w.len(), 6, "{w:#?}");
    assert!(w[0].starts_with("any-subject: rule 1 (/rules/1) accepts any subject (\"sub\": \"*\")"));
    assert!(w[0].contains("every repository of a CI provider"));
    assert!(w[0].contains(GH));
    assert!(
        w[1].starts_with("any-audience: rule 2 (/rules/2) accepts any audience (\"aud\": \"**\")")
    );
    assert!(w[2].starts_with("any-subject: rule 3 (/rules/3) accepts any subject"));
    assert!(w[3].starts_with("any-audience: rule 3 (/rules/3) accepts any audience"));
    // `*?` and `?*` accept any value of a character or more: every real subject or audience.
    assert!(
        w[4].starts_with("any-subject: rule 4 (/rules/4) accepts any subject (\"sub\": \"*?\")")
    );
    assert!(
        w[5].starts_with("any-audience: rule 5 (/rules/5) accepts any audience (\"aud\": \"?*\")")
    );

    assert!(parse(json!({"kind": "static", "services": ["*"]}))
        .warnings
        .is_empty());
    // Other claims accepting anything are not worth a warning: sub and aud still pin the token.
    let other = json!({"kind": "oidc", "rules": [{"services": ["*"], "claims": {
        "iss": GH, "aud": "a", "sub": "repo:acme/api:*", "environment": "*"
    }}]});
    assert!(parse(other).warnings.is_empty());
}

#[test]
fn issuers_are_distinct_in_first_seen_order() {
    assert_eq!(oidc_policy().issuers(), [GH, GITLAB]);
    assert!(parse(json!({"kind": "static", "services": ["*"]}))
        .policy
        .issuers()
        .is_empty());
}

#[test]
fn literal_services_skip_wildcards_and_carry_pointers() {
    let policy = parse(json!({"kind": "oidc", "rules": [
        {"services": ["API-Acme", "*"], "claims": {"iss": GH, "aud": "a", "sub": "s"}},
        {"services": ["build-*", "web-acme", "api-acme"], "claims": {"iss": GH, "aud": "a", "sub": "t"}}
    ]}))
    .policy;
    let found: Vec<(String, String)> = policy
        .literal_services()
        .into_iter()
        .map(|l| (l.pointer, l.subdomain))
        .collect();
    assert_eq!(
        found,
        [
            ("/rules/0/services/0".to_owned(), "api-acme".to_owned()),
            ("/rules/1/services/1".to_owned(), "web-acme".to_owned()),
            ("/rules/1/services/2".to_owned(), "api-acme".to_owned()),
        ]
    );
    assert!(parse(json!({"kind": "static", "services": ["*", "a-*"]}))
        .policy
        .literal_services()
        .is_empty());
}

#[test]
fn scopes_by_kind() {
    let static_policy = parse(json!({"kind": "static", "services": ["api-acme"]})).policy;
    assert!(static_policy
        .oidc_scope(&github("repo:acme/api:x"))
        .is_none());
    let scope = static_policy.static_scope().unwrap();
    assert!(scope.matches("api-acme") && !scope.matches("web-acme"));
    assert!(oidc_policy().static_scope().is_none());
}

#[test]
fn oidc_scope_is_the_union_of_matching_rules() {
    let policy = oidc_policy();
    // Rules 0 and 2 match; rule 3 needs a protected admin branch.
    let scope = policy
        .oidc_scope(&github("repo:acme/api:ref:refs/heads/main"))
        .unwrap();
    assert!(scope.matches("api-acme"));
    assert!(scope.matches("deploy-eu-acme"));
    assert!(
        !scope.matches("web-acme"),
        "rule 1 belongs to another issuer"
    );
    assert!(!scope.includes_all());

    let admin = policy
        .oidc_scope(&github("repo:acme/admin:ref:refs/heads/main"))
        .unwrap();
    assert!(admin.includes_all());

    assert!(policy.oidc_scope(&github("repo:other/api:ref:x")).is_none());
    let mut no_iss = github("repo:acme/api:x");
    no_iss.remove("iss");
    assert!(policy.oidc_scope(&no_iss).is_none());
    let mut odd_iss = github("repo:acme/api:x");
    odd_iss.insert("iss".into(), json!([GH]));
    assert!(policy.oidc_scope(&odd_iss).is_none());
    let mut other_iss = github("repo:acme/api:x");
    other_iss.insert("iss".into(), json!(format!("{GH}/")));
    assert!(policy.oidc_scope(&other_iss).is_none(), "iss is exact");
}

#[test]
fn evaluate_static() {
    let policy = parse(json!({"kind": "static", "services": ["api-acme", "build-*"], "ip_allowlist": ["192.0.2.0/24"]})).policy;
    let inside = ip("192.0.2.10");
    let cases: Vec<(Option<&str>, IpAddr, Decision)> = vec![
        (Some("api-acme"), inside, Decision::Allow { rule: None }),
        (Some("API-ACME"), inside, Decision::Allow { rule: None }),
        (Some("build-7-acme"), inside, Decision::Allow { rule: None }),
        (None, inside, Decision::Allow { rule: None }),
        (
            Some("web-acme"),
            inside,
            Decision::Deny(DenyReason::ServiceNotCovered {
                subdomain: "web-acme".into(),
                rules: vec![],
            }),
        ),
        (
            Some("api-acme"),
            ip("198.51.100.1"),
            Decision::Deny(DenyReason::IpNotAllowed {
                ip: ip("198.51.100.1"),
            }),
        ),
        (
            Some("api-acme"),
            ip("::ffff:192.0.2.10"),
            Decision::Allow { rule: None },
        ),
    ];
    for (subdomain, client, expected) in cases {
        assert_eq!(
            policy.evaluate(None, subdomain, client, None),
            expected,
            "{subdomain:?} from {client}"
        );
    }
    assert_eq!(
        policy.evaluate(Some(&github("x")), Some("api-acme"), inside, None),
        Decision::Deny(DenyReason::KindMismatch {
            policy: PolicyKind::Static,
            credential: PolicyKind::Oidc
        })
    );
}

#[test]
fn evaluate_oidc() {
    let policy = oidc_policy();
    let inside = ip("203.0.113.9");
    let main = github("repo:acme/api:ref:refs/heads/main");
    let admin = github("repo:acme/admin:ref:refs/heads/main");
    type Case<'a> = (&'a Map<String, Value>, Option<&'a str>, IpAddr, Decision);
    let cases: Vec<Case<'_>> = vec![
        (
            &main,
            Some("api-acme"),
            inside,
            Decision::Allow { rule: Some(0) },
        ),
        // The first rule whose claims match and whose services cover the service.
        (
            &main,
            Some("deploy-acme"),
            inside,
            Decision::Allow { rule: Some(2) },
        ),
        (&main, None, inside, Decision::Allow { rule: Some(0) }),
        (
            &main,
            Some("Deploy-ACME"),
            inside,
            Decision::Allow { rule: Some(2) },
        ),
        (
            &admin,
            Some("anything-acme"),
            ip("2001:db8::5"),
            Decision::Allow { rule: Some(3) },
        ),
        (
            &main,
            Some("web-acme"),
            inside,
            Decision::Deny(DenyReason::ServiceNotCovered {
                subdomain: "web-acme".into(),
                rules: vec![0, 2],
            }),
        ),
        (
            &main,
            Some("api-acme"),
            ip("198.51.100.1"),
            Decision::Deny(DenyReason::IpNotAllowed {
                ip: ip("198.51.100.1"),
            }),
        ),
    ];
    for (claims, subdomain, client, expected) in cases {
        assert_eq!(
            policy.evaluate(Some(claims), subdomain, client, None),
            expected,
            "{} on {subdomain:?} from {client}",
            claims["sub"]
        );
    }
    assert_eq!(
        policy.evaluate(None, Some("api-acme"), inside, None),
        Decision::Deny(DenyReason::KindMismatch {
            policy: PolicyKind::Oidc,
            credential: PolicyKind::Static
        })
    );
}

#[test]
fn refusals_come_before_the_address_check_and_explain_says_why() {
    let policy = oidc_policy();
    let mut stranger = github("repo:evil/api:ref:refs/heads/main");
    stranger.remove("repository_owner");
    // From outside the allowlist too: the claims are refused first.
    let decision = policy.evaluate(Some(&stranger), Some("api-acme"), ip("198.51.100.1"), None);
    assert_eq!(decision, Decision::Deny(DenyReason::NoRuleMatched));
    assert_eq!(
        decision.to_string(),
        "denied: no rule accepted the token's claims"
    );
    // Which check of which rule refused it is explain's answer: every rule of the issuer.
    let explained = policy.explain(Some(&stranger), Some("api-acme"), ip("198.51.100.1"), None);
    let summary: Vec<(Option<usize>, Option<&str>)> = explained
        .reasons
        .iter()
        .map(|r| (r.rule, r.pointer.as_deref()))
        .collect();
    assert_eq!(
        summary,
        [
            (Some(0), Some("/rules/0/claims/sub")),
            (Some(2), Some("/rules/2/claims/sub")),
            (Some(3), Some("/rules/3/claims/sub")),
        ]
    );

    // The first failing claim in the rule's order; missing claims say so.
    let mut almost = github("repo:acme/tool:ref:refs/heads/main");
    almost.remove("repository_owner");
    assert_eq!(
        policy.evaluate(Some(&almost), None, ip("203.0.113.1"), None),
        Decision::Deny(DenyReason::NoRuleMatched)
    );
    let explained = policy.explain(Some(&almost), None, ip("203.0.113.1"), None);
    let third = explained
        .reasons
        .iter()
        .find(|r| r.rule == Some(2))
        .unwrap();
    assert_eq!(third.code, ReasonCode::ClaimMissing);
    assert_eq!(
        third.pointer.as_deref(),
        Some("/rules/2/claims/repository_owner")
    );
}

#[test]
fn claim_types_through_a_policy() {
    let rule = |name: &str, pattern: &str| {
        json!({"kind": "oidc", "rules": [{"services": ["*"], "claims": {
            "iss": GH, "aud": "https://registry.example", "sub": "*", name: pattern
        }}]})
    };
    let token = github("repo:acme/api:ref:refs/heads/main");
    let cases = [
        ("run_attempt", "1", true),
        ("run_attempt", "*", true),
        ("run_attempt", "2", false),
        ("ref_protected", "true", true),
        ("ref_protected", "*", false),
        ("ref_protected", "t*", false),
        ("exp", "19*", true),
        ("missing", "*", false),
        ("repository", "acme/*", true),
        ("repository", "ACME/*", false),
    ];
    for (name, pattern, expected) in cases {
        let policy = parse(rule(name, pattern)).policy;
        assert_eq!(
            policy.oidc_scope(&token).is_some(),
            expected,
            "{name}: {pattern:?}"
        );
    }
    // An array audience matches when any element does.
    let policy = parse(rule("repository_owner", "acme")).policy;
    let mut multi = token.clone();
    multi.insert("aud".into(), json!(["other", "https://registry.example"]));
    assert!(policy.oidc_scope(&multi).is_some());
    multi.insert("aud".into(), json!(["other"]));
    assert!(policy.oidc_scope(&multi).is_none());
}

#[test]
fn rules_of_one_issuer_only_see_that_issuers_tokens() {
    // Same sub and aud under two issuers: only the token's issuer's rule applies.
    let policy = parse(json!({"kind": "oidc", "rules": [
        {"services": ["a"], "claims": {"iss": GH, "aud": "x", "sub": "*"}},
        {"services": ["b"], "claims": {"iss": GITLAB, "aud": "x", "sub": "*"}}
    ]}))
    .policy;
    let token = claims(json!({"iss": GITLAB, "aud": "x", "sub": "anything"}));
    let scope = policy.oidc_scope(&token).unwrap();
    assert!(scope.matches("b") && !scope.matches("a"));
}

#[test]
fn clones_share_the_compiled_policy() {
    let policy = oidc_policy();
    let copy = policy.clone();
    assert!(Arc::ptr_eq(&policy.inner, &copy.inner));
}

#[test]
fn schema_and_parser_agree_on_known_addresses() {
    for entry in [
        "10.0.0.1",
        "10.0.0.0/8",
        "0.0.0.0/0",
        "::",
        "::/0",
        "1::",
        "::1",
        "2001:db8::/32",
        "::ffff:1.2.3.4",
        "1:2:3:4:5:6:1.2.3.4",
        "1:2:3:4:5:6:7::",
        "::2:3:4:5:6:7:8",
        "1:2:3:4:5:6:7:8",
        "1:2:3:4:5::1.2.3.4",
        "ABCD:ef01::/128",
        "1.2.3.4/33",
        "01.2.3.4",
        "1.2.3",
        "1.2.3.4.5",
        "1:2:3:4:5:6:7:8::",
        "1:2:3:4:5:6:7:1.2.3.4",
        "1.2.3.4::",
        "::1.2.3.4:5",
        "12345::",
        ":1::",
        "1::2::",
        "fe80::1%1",
        "1.2.3.4/08",
        "::/129",
        "1.2.3.4/",
        "/8",
        "1.2.3.4/8/8",
        "1:2:3:4:5:6:7::/64",
        "::ffff:1.2.3.4/96",
    ] {
        assert_agree(entry);
    }
}

fn assert_agree(entry: &str) {
    let document = json!({"kind": "static", "services": ["*"], "ip_allowlist": [entry]});
    let by_schema = schema::check(&document, 1).is_empty();
    let by_parser = parse_ip_entry(entry).is_ok();
    assert_eq!(
        by_schema, by_parser,
        "{entry:?}: schema says {by_schema}, parser {by_parser}"
    );
}

fn address_like() -> impl Strategy<Value = String> {
    let token = prop::sample::select(vec![
        "0", "1", "9", "25", "255", "256", "01", "00", "ff", "FFFF", "fffff", "0000", ".", ".",
        ":", ":", "::", "/", "8", "32", "33", "64", "128", "129", "%",
    ]);
    prop::collection::vec(token, 1..14).prop_map(|parts| parts.concat())
}

fn real_address() -> impl Strategy<Value = String> {
    (
        any::<u32>(),
        any::<[u16; 8]>(),
        0u8..=130,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(v4, groups, prefix, use_v4, with_prefix)| {
            // Zero some groups so `::` compression happens.
            let mut groups = groups;
            for g in groups.iter_mut().skip(2).take(usize::from(prefix % 5)) {
                *g = 0;
            }
            let addr: IpAddr = if use_v4 {
                std::net::Ipv4Addr::from(v4).into()
            } else {
                std::net::Ipv6Addr::from(groups).into()
            };
            if with_prefix {
                format!("{addr}/{prefix}")
            } else {
                addr.to_string()
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn schema_pattern_and_parser_accept_the_same_entries(
        entry in prop_oneof![address_like(), real_address()]
    ) {
        assert_agree(&entry);
    }
}
