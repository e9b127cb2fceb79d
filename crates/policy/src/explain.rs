//! Why a policy admits or refuses a token (docs/api.md, "Explaining refusals"): the decision of
//! [`Policy::evaluate`], with the matching rule, the first failing check of every rule of the
//! token's issuer, and hints for near misses. A 401 says nothing to its caller; this is what the
//! owner of the account can see.

use super::pattern::{ClaimPattern, ClaimView};
use super::services::fold_case;
use super::{Action, Policy, PolicyKind};
use serde_json::{json, Map, Value};
use std::borrow::Cow;
use std::fmt;
use std::net::IpAddr;

/// The reason codes of explain and the refusal log (docs/api.md, "Explaining refusals"), stable
/// strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReasonCode {
    /// No rule names the token's issuer.
    IssuerUnknown,
    /// The issuer's keys could not be fetched.
    IssuerUnreachable,
    /// The signature does not verify.
    SignatureInvalid,
    /// No key of the issuer has the token's `kid`.
    KeyUnknown,
    /// The token's `alg` is not accepted, or does not fit the key.
    AlgorithmNotAllowed,
    /// `exp` has passed.
    TokenExpired,
    /// `nbf` or `iat` is in the future.
    TokenNotYetValid,
    /// `exp - iat` is above 24 hours.
    TokenLifetimeTooLong,
    /// A claim a rule lists is absent (or null).
    ClaimMissing,
    /// A claim does not match the rule's pattern.
    ClaimMismatch,
    /// A claim has a type no pattern can match (an object, a fraction…).
    ClaimTypeMismatch,
    /// `aud` does not match.
    AudienceMismatch,
    /// The matching rules do not cover the requested service.
    ServiceNotAllowed,
    /// The address is outside the `ip_allowlist`.
    AddressNotAllowed,
    /// Several accounts accept the token on a collection call.
    AccountAmbiguous,
    /// The policy does not allow the action the call needs.
    ActionNotAllowed,
}

impl ReasonCode {
    /// Every code: those of refusals in the order of the documentation, then
    /// `action-not-allowed`.
    pub const ALL: [ReasonCode; 16] = [
        ReasonCode::IssuerUnknown,
        ReasonCode::IssuerUnreachable,
        ReasonCode::SignatureInvalid,
        ReasonCode::KeyUnknown,
        ReasonCode::AlgorithmNotAllowed,
        ReasonCode::TokenExpired,
        ReasonCode::TokenNotYetValid,
        ReasonCode::TokenLifetimeTooLong,
        ReasonCode::ClaimMissing,
        ReasonCode::ClaimMismatch,
        ReasonCode::ClaimTypeMismatch,
        ReasonCode::AudienceMismatch,
        ReasonCode::ServiceNotAllowed,
        ReasonCode::AddressNotAllowed,
        ReasonCode::AccountAmbiguous,
        ReasonCode::ActionNotAllowed,
    ];

    /// The stable string (`claim-mismatch`, …).
    ///
    /// ```
    /// use registry_policy::ReasonCode;
    /// assert_eq!(ReasonCode::AudienceMismatch.as_str(), "audience-mismatch");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            ReasonCode::IssuerUnknown => "issuer-unknown",
            ReasonCode::IssuerUnreachable => "issuer-unreachable",
            ReasonCode::SignatureInvalid => "signature-invalid",
            ReasonCode::KeyUnknown => "key-unknown",
            ReasonCode::AlgorithmNotAllowed => "algorithm-not-allowed",
            ReasonCode::TokenExpired => "token-expired",
            ReasonCode::TokenNotYetValid => "token-not-yet-valid",
            ReasonCode::TokenLifetimeTooLong => "token-lifetime-too-long",
            ReasonCode::ClaimMissing => "claim-missing",
            ReasonCode::ClaimMismatch => "claim-mismatch",
            ReasonCode::ClaimTypeMismatch => "claim-type-mismatch",
            ReasonCode::AudienceMismatch => "audience-mismatch",
            ReasonCode::ServiceNotAllowed => "service-not-allowed",
            ReasonCode::AddressNotAllowed => "address-not-allowed",
            ReasonCode::AccountAmbiguous => "account-ambiguous",
            ReasonCode::ActionNotAllowed => "action-not-allowed",
        }
    }
}

impl fmt::Display for ReasonCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a check failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reason {
    /// The rule it is about, if one.
    pub rule: Option<usize>,
    /// Pointer into the policy document.
    pub pointer: Option<String>,
    /// The code.
    pub code: ReasonCode,
    /// A sentence.
    pub message: String,
}

/// A near miss: what probably went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hint {
    /// The rule.
    pub rule: usize,
    /// Pointer into the policy document.
    pub pointer: String,
    /// A sentence.
    pub message: String,
}

/// The answer of [`Policy::explain`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    /// Whether the policy admits the request.
    pub allowed: bool,
    /// The rule that admits it (an OIDC policy).
    pub rule: Option<usize>,
    /// Why not, when it is refused: every rule of the token's issuer, its first failing check.
    pub reasons: Vec<Reason>,
    /// Near misses.
    pub hints: Vec<Hint>,
}

impl Explanation {
    /// The body of `POST /service-accounts/{id}/explain` and `registry policy explain`.
    pub fn to_json(&self) -> Value {
        json!({
            "decision": if self.allowed { "allow" } else { "deny" },
            "rule": self.rule.map(|i| json!({"index": i, "pointer": format!("/rules/{i}")})),
            "reasons": self.reasons.iter().map(|r| {
                let mut v = json!({"code": r.code.as_str(), "message": r.message});
                if let Some(rule) = r.rule { v["rule"] = rule.into(); }
                if let Some(pointer) = &r.pointer { v["pointer"] = pointer.clone().into(); }
                v
            }).collect::<Vec<_>>(),
            "hints": self.hints.iter().map(|h| json!({"rule": h.rule, "pointer": h.pointer,
                "message": h.message})).collect::<Vec<_>>(),
        })
    }
}

/// Lower case in Unicode's sense: a claim is any text, and a hint that it differs only in case
/// helps whatever its script (unlike subdomains, which fold ASCII only).
fn fold_any_case(s: &str) -> Cow<'_, str> {
    if s.chars().any(char::is_uppercase) {
        Cow::Owned(s.to_lowercase())
    } else {
        Cow::Borrowed(s)
    }
}

fn near_misses(rule: usize, pointer: &str, pattern: &str, value: &Value, hints: &mut Vec<Hint>) {
    let mut hint = |message: String| {
        hints.push(Hint {
            rule,
            pointer: pointer.to_owned(),
            message,
        })
    };
    let candidates: Vec<&str> = match value {
        Value::String(s) => vec![s.as_str()],
        Value::Array(items) => items.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if let Value::Array(items) = value {
        hint(format!(
            "the token's value is a list of {} (none of them matches {pattern:?})",
            items.len()
        ));
    }
    // The pattern failed on every candidate: folding case (or tidying) can only make it match
    // when it changes something, so the common case compiles no pattern and allocates nothing.
    let lower_pattern = fold_any_case(pattern);
    fn tidy(s: &str) -> &str {
        s.trim().trim_end_matches('/')
    }
    for value in candidates {
        let lower_value = fold_any_case(value);
        let folds = matches!(lower_pattern, Cow::Owned(_)) || matches!(lower_value, Cow::Owned(_));
        if folds && ClaimPattern::new(&lower_pattern).matches_str(&lower_value) {
            hint(format!(
                "{value:?} differs from {pattern:?} only in case: matching is case-sensitive"
            ));
        }
        let untidy = tidy(value) != value || tidy(pattern) != pattern;
        if untidy && ClaimPattern::new(tidy(pattern)).matches_str(tidy(value)) {
            hint(format!(
                "{value:?} differs from {pattern:?} only by a trailing slash or spaces"
            ));
        }
        let github = |s: &str, kind: &str| s.starts_with("repo:") && s.contains(kind);
        if github(pattern, ":ref:") && github(value, ":environment:") {
            hint(format!(
                "the token's sub {value:?} names a deployment environment, the rule expects a \
                 ref: GitHub puts environment:NAME in sub for jobs that use an environment"
            ));
        } else if github(pattern, ":environment:") && github(value, ":ref:") {
            hint(format!(
                "the token's sub {value:?} names a ref, the rule expects an environment: the job \
                 does not declare the environment"
            ));
        }
    }
}

impl Policy {
    /// The refusal of the action a call needs, which `member` (of `rule`) does not grant, as
    /// `message` says. A version-1 document has no `actions` (nor `version`): it grants every
    /// action but `tokens:sign`, and the refusal points at the whole document (`""`).
    fn action_refused(&self, rule: Option<usize>, member: String, message: String) -> Reason {
        let (pointer, message) = match self.version() {
            1 => (
                String::new(),
                format!(
                    "a version 1 policy allows every action but \"{}\", which only a version 2 \
                     policy allows, by naming it in its actions",
                    Action::TokensSign
                ),
            ),
            _ => (member, message),
        };
        Reason {
            rule,
            pointer: Some(pointer),
            code: ReasonCode::ActionNotAllowed,
            message,
        }
    }

    /// Explains the decision of [`Policy::evaluate`] for the same arguments: `claims` (`None`: a
    /// static token), the requested `service` (`None`: a call on no one service), the
    /// client's address `ip` (an [`IpAddr`], or `None`: not checked) and the `action` the call
    /// needs (`None`: not checked); a refused action is the reason `action-not-allowed`, which
    /// names it. The decision is always
    /// `evaluate`'s; an admitted request costs about as much as `evaluate`, a refused one
    /// looks at every rule of the token's issuer to say why each refused it.
    ///
    /// ```
    /// use registry_policy::Policy;
    /// use serde_json::json;
    ///
    /// let policy = Policy::parse(&json!({"kind": "oidc", "rules": [{"services": ["api-acme"],
    ///     "claims": {"iss": "https://ci.example", "aud": "registry", "sub": "repo:acme/infra:ref:main"}}]}))
    ///     .unwrap().policy;
    /// let claims = json!({"iss": "https://ci.example", "aud": "registry", "sub": "repo:Acme/infra:ref:main"});
    /// let explained = policy.explain(claims.as_object(), Some("api-acme"), None, None);
    /// assert!(!explained.allowed);
    /// assert_eq!(explained.reasons[0].code.as_str(), "claim-mismatch");
    /// assert_eq!(explained.reasons[0].pointer.as_deref(), Some("/rules/0/claims/sub"));
    /// assert!(explained.hints[0].message.contains("only in case"));
    /// ```
    pub fn explain(
        &self,
        claims: Option<&Map<String, Value>>,
        service: Option<&str>,
        ip: impl Into<Option<IpAddr>>,
        action: impl Into<Option<Action>>,
    ) -> Explanation {
        let address: Option<IpAddr> = ip.into();
        let action: Option<Action> = action.into();
        let mut reasons = Vec::new();
        let mut hints = Vec::new();
        let deny = |reasons, hints| Explanation {
            allowed: false,
            rule: None,
            reasons,
            hints,
        };
        let address_refused = |reasons: &mut Vec<Reason>| -> bool {
            let refused = address.is_some_and(|ip| !self.allows_ip(ip));
            if refused {
                reasons.push(Reason {
                    rule: None,
                    pointer: Some("/ip_allowlist".into()),
                    code: ReasonCode::AddressNotAllowed,
                    message: format!(
                        "the address {} is outside the ip_allowlist",
                        address.map(|a| a.to_string()).unwrap_or_default()
                    ),
                });
            }
            refused
        };
        // An OIDC policy asked without claims is asked about a token that names no issuer.
        let no_claims = Map::new();
        let claims = match (self.kind(), claims) {
            (PolicyKind::Oidc, Some(claims)) => claims,
            (PolicyKind::Oidc, None) => &no_claims,
            _ => {
                // Outside the allowlist, what else the policy refuses is listed too.
                let outside = address_refused(&mut reasons);
                let covered = match (self.static_scope(), service) {
                    (Some(scope), Some(s)) => scope.matches(s),
                    (Some(_), None) => true,
                    (None, _) => false,
                };
                if !covered {
                    reasons.push(Reason {
                        rule: None,
                        pointer: Some("/services".into()),
                        code: ReasonCode::ServiceNotAllowed,
                        message: format!(
                            "the policy's services do not cover {:?}",
                            service.unwrap_or_default()
                        ),
                    });
                    return deny(reasons, hints);
                }
                if let Some(action) = action.filter(|a| !self.actions().contains(*a)) {
                    reasons.push(self.action_refused(
                        None,
                        "/actions".into(),
                        format!(
                            "the policy's actions do not include \"{action}\", the action the \
                             call needs"
                        ),
                    ));
                    return deny(reasons, hints);
                }
                if outside {
                    return deny(reasons, hints);
                }
                return Explanation {
                    allowed: true,
                    rule: None,
                    reasons,
                    hints,
                };
            }
        };
        let rules = self.oidc_rules();
        let issuer = claims.get("iss").and_then(Value::as_str);
        let Some(group) = issuer.and_then(|iss| rules.group(iss)) else {
            let iss = issuer.unwrap_or_default();
            for group in rules.groups() {
                let tidy = |s: &str| s.trim().trim_end_matches('/').to_lowercase();
                if tidy(&group.issuer) == tidy(iss) {
                    let rule = group.rules[0].index;
                    hints.push(Hint {
                        rule,
                        pointer: format!("/rules/{rule}/claims/iss"),
                        message: format!(
                            "the token's iss {iss:?} differs from {:?} only in case, a trailing \
                             slash or spaces: iss is compared exactly",
                            &*group.issuer
                        ),
                    });
                }
            }
            reasons.push(Reason {
                rule: None,
                pointer: None,
                code: ReasonCode::IssuerUnknown,
                message: format!("no rule names the issuer {iss:?}"),
            });
            return deny(reasons, hints);
        };
        let views = group.views(claims);
        // An allowed request has nothing to explain: find its rule as `evaluate` does, without
        // allocating, and build reasons and hints only for a refusal.
        if address.is_none_or(|ip| self.allows_ip(ip)) {
            let lower = service.map(fold_case);
            let admitting = group.matching(&views).find(|r| {
                lower.as_deref().is_none_or(|s| r.services.matches_lower(s))
                    && action.is_none_or(|a| r.actions.contains(a))
            });
            if let Some(rule) = admitting {
                return Explanation {
                    allowed: true,
                    rule: Some(rule.index),
                    reasons: Vec::new(),
                    hints: Vec::new(),
                };
            }
        }
        let mut matched = Vec::new();
        for rule in group.rules.iter() {
            let Some(check) = rule.first_failure(&views) else {
                matched.push(rule);
                continue;
            };
            let name = &*group.claim_names[check.slot];
            let pointer = format!(
                "/rules/{}/claims/{}",
                rule.index,
                crate::violation::escape_token(name)
            );
            let pattern = check.pattern.as_str();
            let value = claims.get(name);
            let code = match (value, &views[check.slot]) {
                (None | Some(Value::Null), _) => ReasonCode::ClaimMissing,
                // An object or a fraction: no pattern matches it, not even `*`.
                (_, ClaimView::Never) => ReasonCode::ClaimTypeMismatch,
                (Some(Value::Bool(_)), _) if !check.pattern.is_exact() => {
                    ReasonCode::ClaimTypeMismatch
                }
                _ if name == "aud" => ReasonCode::AudienceMismatch,
                _ => ReasonCode::ClaimMismatch,
            };
            let message = match value {
                None | Some(Value::Null) => format!("the token has no {name}"),
                Some(found) => format!("{name} {found} does not match {pattern:?}"),
            };
            if let Some(value) = value {
                near_misses(rule.index, &pointer, pattern, value, &mut hints);
            }
            reasons.push(Reason {
                rule: Some(rule.index),
                pointer: Some(pointer),
                code,
                message,
            });
        }
        if matched.is_empty() {
            return deny(reasons, hints);
        }
        // Outside the allowlist, the request is refused whatever the rules say; each rule that
        // accepts the token still says what else it would refuse.
        let outside = address_refused(&mut reasons);
        // The rules that matched have no failing check to report; the first that covers the
        // service and allows the action admits the request.
        let lower = service.map(fold_case);
        let covers = |rule: &&crate::rules::Rule| {
            lower
                .as_deref()
                .is_none_or(|s| rule.services.matches_lower(s))
        };
        let allows = |rule: &&crate::rules::Rule| action.is_none_or(|a| rule.actions.contains(a));
        if let Some(rule) = matched.iter().find(|r| covers(r) && allows(r) && !outside) {
            return Explanation {
                allowed: true,
                rule: Some(rule.index),
                reasons: Vec::new(),
                hints: Vec::new(),
            };
        }
        // The rules that cover the service refused the action (what decided, listed first);
        // each of the others refused the service, its first failing check.
        let (covering, others): (Vec<_>, Vec<_>) = matched.into_iter().partition(|r| covers(r));
        if let Some(action) = action {
            for rule in covering.iter().filter(|r| !allows(r)) {
                let scope = match service {
                    Some(service) => format!("and covers {service:?}"),
                    None => "(a call on no one service)".to_owned(),
                };
                reasons.push(self.action_refused(
                    Some(rule.index),
                    format!("/rules/{}/actions", rule.index),
                    format!(
                        "rule {} accepts the token {scope}, but its actions do not include \
                         \"{action}\"",
                        rule.index
                    ),
                ));
            }
        }
        let service = service.unwrap_or_default();
        for rule in others {
            reasons.push(Reason {
                rule: Some(rule.index),
                pointer: Some(format!("/rules/{}/services", rule.index)),
                code: ReasonCode::ServiceNotAllowed,
                message: format!(
                    "rule {} accepts the token, but its services do not cover {service:?}",
                    rule.index
                ),
            });
        }
        deny(reasons, hints)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Decision;
    use proptest::prelude::*;

    fn policy(rules: &[(&str, &str, &[&str])], allowlist: &[&str]) -> Policy {
        let rules: Vec<Value> = rules
            .iter()
            .map(|(sub, aud, services)| {
                json!({"services": services, "claims": {"iss": "https://ci.example", "aud": aud, "sub": sub}})
            })
            .collect();
        let mut document = json!({"kind": "oidc", "rules": rules});
        if !allowlist.is_empty() {
            document["ip_allowlist"] = json!(allowlist);
        }
        Policy::parse(&document).unwrap().policy
    }

    fn explain(policy: &Policy, claims: Value, service: Option<&str>) -> Explanation {
        policy.explain(
            claims.as_object(),
            service,
            Some("192.0.2.1".parse().unwrap()),
            None,
        )
    }

    /// Every pointer points at a member the document has: an OIDC policy asked without claims
    /// names no `/services` (it has none), and a version-1 document's refused action points at
    /// the whole document (it has no `actions`).
    #[test]
    fn pointers_point_at_members_the_document_has() {
        let oidc = policy(&[("sub", "registry", &["api-x"])], &[]);
        let unasked = oidc.explain(None, Some("api-x"), None, None);
        assert!(!unasked.allowed);
        assert_eq!(unasked.reasons[0].code, ReasonCode::IssuerUnknown);
        assert!(!oidc.evaluate(None, Some("api-x"), None, None).is_allowed());
        let claims = json!({"iss": "https://ci.example", "aud": "registry", "sub": "sub"});
        for (document, pointer) in [
            (json!({"kind": "static", "services": ["*"]}), ""),
            (
                json!({"$schema": format!("https://registry.example{}", crate::SCHEMA_V2_PATH),
                    "kind": "static", "services": ["*"], "actions": ["*"]}),
                "/actions",
            ),
            (oidc.document().clone(), ""),
        ] {
            let policy = Policy::parse(&document).unwrap().policy;
            let refused =
                policy.explain(claims.as_object(), Some("api-x"), None, Action::TokensSign);
            assert!(!refused.allowed, "{document}");
            let reason = &refused.reasons[0];
            assert_eq!(reason.code, ReasonCode::ActionNotAllowed);
            assert_eq!(reason.pointer.as_deref(), Some(pointer), "{document}");
            assert!(
                document.pointer(pointer).is_some(),
                "{document} has {pointer}"
            );
        }
    }

    #[test]
    fn every_policy_reason_and_hint_has_a_case() {
        let p = policy(
            &[
                (
                    "repo:acme/infra:ref:refs/heads/main",
                    "registry",
                    &["api-x"],
                ),
                ("team/", "registry", &["web-x"]),
            ],
            &[],
        );
        let iss = "https://ci.example";
        let case = |claims: Value| explain(&p, claims, Some("api-x"));
        let unknown = case(json!({"iss": "https://CI.example/", "aud": "registry", "sub": "x"}));
        assert_eq!(unknown.reasons[0].code, ReasonCode::IssuerUnknown);
        assert!(unknown.hints[0].message.contains("only in case"));
        let missing = case(json!({"iss": iss, "aud": "registry"}));
        assert_eq!(missing.reasons[0].code, ReasonCode::ClaimMissing);
        let typed = case(json!({"iss": iss, "aud": "registry", "sub": {"a": 1}}));
        assert_eq!(typed.reasons[0].code, ReasonCode::ClaimTypeMismatch);
        let audience = case(json!({"iss": iss, "aud": ["a", "b"], "sub": "x"}));
        assert_eq!(audience.reasons[0].code, ReasonCode::AudienceMismatch);
        assert!(audience.hints[0].message.contains("list of 2"));
        let environment = case(json!({"iss": iss, "aud": "registry",
            "sub": "repo:acme/infra:environment:prod"}));
        assert_eq!(environment.reasons[0].code, ReasonCode::ClaimMismatch);
        assert!(environment
            .hints
            .iter()
            .any(|h| h.message.contains("environment")));
        let slash = case(json!({"iss": iss, "aud": "registry", "sub": "team"}));
        assert!(slash
            .hints
            .iter()
            .any(|h| h.message.contains("trailing slash")));
        let service = case(json!({"iss": iss, "aud": "registry",
            "sub": "repo:acme/infra:ref:refs/heads/main"}));
        assert!(service.allowed);
        let elsewhere = explain(
            &p,
            json!({"iss": iss, "aud": "registry",
            "sub": "repo:acme/infra:ref:refs/heads/main"}),
            Some("db-x"),
        );
        let uncovered = elsewhere
            .reasons
            .iter()
            .find(|r| r.code == ReasonCode::ServiceNotAllowed)
            .unwrap();
        assert_eq!(uncovered.pointer.as_deref(), Some("/rules/0/services"));
        let fenced = policy(&[("x", "registry", &["*"])], &["10.0.0.0/8"]);
        let address = explain(
            &fenced,
            json!({"iss": iss, "aud": "registry", "sub": "x"}),
            None,
        );
        assert_eq!(address.reasons[0].code, ReasonCode::AddressNotAllowed);
        // Outside the allowlist, a rule that accepts the token still says what else it refuses.
        let fenced = policy(
            &[("x", "registry", &["web-*"]), ("y", "registry", &["*"])],
            &["10.0.0.0/8"],
        );
        let claims = json!({"iss": iss, "aud": "registry", "sub": "x"});
        let outside = fenced.explain(
            claims.as_object(),
            Some("api-acme"),
            Some("192.0.2.1".parse().unwrap()),
            None,
        );
        let said: Vec<(Option<usize>, &str)> = (outside.reasons.iter())
            .map(|r| (r.rule, r.code.as_str()))
            .collect();
        assert_eq!(
            said,
            [
                (Some(1), "claim-mismatch"),
                (None, "address-not-allowed"),
                (Some(0), "service-not-allowed")
            ]
        );
        let covered = fenced.explain(
            claims.as_object(),
            Some("web-acme"),
            Some("192.0.2.1".parse().unwrap()),
            None,
        );
        assert!(!covered.allowed);
        assert!(
            !(covered.reasons.iter()).any(|r| r.rule == Some(0)),
            "rule 0 refuses nothing but the address: {:?}",
            covered.reasons
        );
        // A static policy alike.
        let fenced = Policy::parse(&json!({"kind": "static", "services": ["web-*"],
            "ip_allowlist": ["10.0.0.0/8"]}))
        .unwrap()
        .policy;
        let outside = fenced.explain(
            None,
            Some("api-acme"),
            Some("192.0.2.1".parse().unwrap()),
            None,
        );
        let codes: Vec<&str> = outside.reasons.iter().map(|r| r.code.as_str()).collect();
        assert_eq!(codes, ["address-not-allowed", "service-not-allowed"]);
        let codes: Vec<&str> = ReasonCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(codes.len(), 16);
        assert!(codes.contains(&"account-ambiguous") && codes.contains(&"token-expired"));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]
        /// `explain` decides as `evaluate` does, with the same matching rule.
        #[test]
        fn explain_agrees_with_evaluate(
            subs in proptest::collection::vec("[ab*?]{1,4}", 1..5),
            services in proptest::collection::vec("(api|web|\\*)", 1..5),
            sub in "[ab]{0,4}",
            aud in "(registry|other)",
            service in proptest::option::of("(api|web|db)"),
            fenced in any::<bool>(),
            inside in any::<bool>(),
        ) {
            let rules: Vec<Value> = subs.iter().zip(services.iter().cycle()).map(|(s, svc)| {
                json!({"services": [svc], "claims": {"iss": "https://ci.example", "aud": "registry", "sub": s}})
            }).collect();
            let mut document = json!({"kind": "oidc", "rules": rules});
            if fenced {
                document["ip_allowlist"] = json!(["192.0.2.0/24"]);
            }
            let policy = Policy::parse(&document).unwrap().policy;
            let claims = json!({"iss": "https://ci.example", "aud": aud, "sub": sub});
            let claims = claims.as_object().unwrap();
            let ip: IpAddr = if inside { "192.0.2.9" } else { "198.51.100.9" }.parse().unwrap();
            let evaluated = policy.evaluate(Some(claims), service.as_deref(), ip, None);
            let explained = policy.explain(Some(claims), service.as_deref(), Some(ip), None);
            prop_assert_eq!(explained.allowed, evaluated.is_allowed());
            if let Decision::Allow { rule } = evaluated {
                prop_assert_eq!(explained.rule, rule);
            } else {
                prop_assert!(!explained.reasons.is_empty());
            }
        }
    }
}
