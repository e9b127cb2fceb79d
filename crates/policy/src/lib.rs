#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod actions;
mod cases;
mod compare;
mod error;
mod eval;
mod explain;
mod index;
mod ip;
pub mod json;
pub mod limits;
mod lint;
pub(crate) mod pattern;
pub mod report;
mod rules;
mod schema;
mod services;
mod unique;
pub mod violation;

pub use actions::{judged_service, Action, Actions, UnknownAction};
pub use cases::{parse_cases, run_cases, CaseOutcome, TestCase, TestRun};
pub use compare::{compare, compare_with, CompareResult, Comparison, Witness, MAX_WITNESSES};
pub use error::PolicyError;
pub use eval::{Decision, DenyReason};
pub use explain::{Explanation, Hint, Reason, ReasonCode};
pub use ip::{parse_ip_entry, IpAllowlist};
pub use lint::{lint_document, Finding, Severity, GITHUB_ISSUER};
pub use pattern::ClaimPattern;
pub use report::{RunReport, Tally};
pub use schema::{
    schema, schema_v2, SCHEMA_PLACEHOLDER_ID, SCHEMA_SOURCE, SCHEMA_V2_PLACEHOLDER_ID,
    SCHEMA_V2_SOURCE,
};
pub use services::Scope;
pub use violation::{Violation, Violations};

use rules::OidcRules;
use serde_json::{Map, Value};
use services::ServiceSet;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

/// How an account authenticates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PolicyKind {
    /// A static bearer token.
    Static,
    /// Federation with an external OIDC issuer.
    Oidc,
}

impl PolicyKind {
    /// `"static"` or `"oidc"`.
    ///
    /// ```
    /// assert_eq!(registry_policy::PolicyKind::Oidc.as_str(), "oidc");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyKind::Static => "static",
            PolicyKind::Oidc => "oidc",
        }
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A non-wildcard `services` entry, for the ownership check of spec §4 rule 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiteralService {
    /// Pointer into the policy document (e.g. `/rules/0/services/1`).
    pub pointer: String,
    /// The subdomain, lower-cased.
    pub subdomain: String,
}

/// A parsed policy and the warnings found while parsing it.
#[derive(Debug, Clone)]
pub struct ParsedPolicy {
    /// The policy.
    pub policy: Policy,
    /// Sentences about risky but valid choices (a rule accepting any `sub` or `aud`), for the
    /// `warnings` array of the response (docs/api.md, "Responses").
    pub warnings: Vec<String>,
}

/// A parsed, compiled policy document. Cloning is cheap (the compiled form is shared).
#[derive(Debug, Clone)]
pub struct Policy {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    document: Value,
    kind: PolicyKind,
    /// 1 or 2 (see [`version_of`]).
    version: u8,
    /// Static policies: the top-level `actions` (version 1: every action).
    actions: Actions,
    /// Static policies only.
    services: Option<ServiceSet>,
    /// OIDC policies only (empty otherwise).
    rules: OidcRules,
    ip_allowlist: IpAllowlist,
}

impl Policy {
    /// Parses and checks a policy document.
    ///
    /// On failure, every problem found, each with an RFC 6901 pointer relative to the document
    /// (the server puts `/policy` in front): first the JSON Schema's (that of the document's
    /// [version](Policy::version)), then the size limits of [`limits::check_policy`], both
    /// checked before any pattern is compiled; and when the document passes both, the checks
    /// the schema cannot express (entries unique as they are matched, each `ip_allowlist` entry
    /// parses as an address or CIDR range).
    ///
    /// ```
    /// use registry_policy::Policy;
    /// use serde_json::json;
    ///
    /// let errors = Policy::parse(&json!({
    ///     "kind": "oidc",
    ///     "rules": [{"services": ["*"], "claims": {"iss": "https://ci.example/*", "aud": "x"}}],
    ///     "colour": "blue"
    /// }))
    /// .unwrap_err()
    /// .into_violations();
    /// let pointers: Vec<&str> = errors.iter().map(|v| v.pointer.as_str()).collect();
    /// assert!(pointers.contains(&"/colour"));
    /// assert!(pointers.contains(&"/rules/0/claims/iss"));
    /// assert!(pointers.contains(&"/rules/0/claims/sub"));
    /// ```
    pub fn parse(document: &Value) -> Result<ParsedPolicy, PolicyError> {
        // Nothing is compiled before the schema and the size limits pass: an oversized pattern
        // costs its check, never its compilation.
        let mut violations = schema::check(document, version_of(document));
        for problem in limits::check_policy(document) {
            if !violations.contains(&problem) {
                violations.push(problem);
            }
        }
        // Repeats are reported with the rest (they compile nothing).
        violations.extend(unique::check_unique(document));
        if !violations.is_empty() {
            return Err(PolicyError::Invalid(violations));
        }
        Self::compile(document).map_err(PolicyError::Invalid)
    }

    /// [`Policy::parse`] of a JSON text; a text that is not JSON, or names a member twice in one
    /// object (read strictly, as the registry reads every body: [`json::parse_unique`]), is
    /// [`PolicyError::Json`].
    ///
    /// ```
    /// use registry_policy::{Policy, PolicyError};
    ///
    /// let parsed = Policy::parse_str(r#"{"kind": "static", "services": ["api-acme"]}"#).unwrap();
    /// assert!(parsed.policy.static_scope().unwrap().matches("api-acme"));
    /// assert!(matches!(Policy::parse_str("{ nope"), Err(PolicyError::Json(_))));
    /// let twice = r#"{"kind": "static", "services": ["api-acme"], "services": ["*"]}"#;
    /// assert!(matches!(Policy::parse_str(twice), Err(PolicyError::Json(_))));
    /// ```
    pub fn parse_str(text: &str) -> Result<ParsedPolicy, PolicyError> {
        let document =
            json::parse_unique(text.as_bytes()).map_err(|e| PolicyError::Json(e.to_string()))?;
        Self::parse(&document)
    }

    /// A policy as it was stored: saved through [`Policy::parse`] once, so the JSON Schema is
    /// not run again (a stricter schema later must not lock existing accounts out). It is still
    /// compiled whole, and a document changed outside the registry gets its problems, each with
    /// a pointer, instead of a panic.
    ///
    /// ```
    /// use registry_policy::Policy;
    /// use serde_json::json;
    ///
    /// let stored = json!({"kind": "static", "services": ["*"], "note": "from an older version"});
    /// assert!(Policy::parse(&stored).is_err());
    /// assert!(Policy::from_stored(&stored).is_ok());
    /// let broken = json!({"kind": "oidc", "rules": [{"claims": {"iss": 7}}]});
    /// assert_eq!(Policy::from_stored(&broken).unwrap_err().violations()[0].pointer, "/rules/0/claims/iss");
    /// ```
    pub fn from_stored(document: &Value) -> Result<Policy, PolicyError> {
        Self::compile(document)
            .map(|parsed| parsed.policy)
            .map_err(PolicyError::Invalid)
    }

    fn compile(document: &Value) -> Result<ParsedPolicy, Violations> {
        let version = version_of(document);
        let kind = match document.get("kind").and_then(Value::as_str) {
            Some("oidc") => PolicyKind::Oidc,
            Some("static") => PolicyKind::Static,
            _ => {
                return Err(vec![Violation::new(
                    "/kind",
                    "kind is \"static\" or \"oidc\"",
                )])
            }
        };
        let entries = document
            .get("ip_allowlist")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>())
            .unwrap_or_default();
        let ip_allowlist = IpAllowlist::parse(entries).map_err(|error| {
            error
                .into_violations()
                .into_iter()
                .map(|v| v.prefixed("/ip_allowlist"))
                .collect::<Violations>()
        })?;
        let (services, rules, actions) = match kind {
            PolicyKind::Static => {
                let Some(entries) = document.get("services").and_then(Value::as_array) else {
                    return Err(vec![Violation::new(
                        "/services",
                        "a static policy needs a services list",
                    )]);
                };
                let actions = match version {
                    1 => Actions::ALL,
                    _ => Actions::compile(document.get("actions"), "/actions")?,
                };
                let set = ServiceSet::compile(entries.iter().filter_map(Value::as_str));
                (Some(set), OidcRules::default(), actions)
            }
            PolicyKind::Oidc => {
                let Some(entries) = document.get("rules").and_then(Value::as_array) else {
                    return Err(vec![Violation::new(
                        "/rules",
                        "an oidc policy needs a rules list",
                    )]);
                };
                let rules = OidcRules::compile(entries, version)?;
                let actions = match version {
                    1 => Actions::ALL,
                    _ => rules.actions(),
                };
                (None, rules, actions)
            }
        };
        let policy = Policy {
            inner: Arc::new(Inner {
                document: document.clone(),
                kind,
                version,
                actions,
                services,
                rules,
                ip_allowlist,
            }),
        };
        // The API's warnings are the lint's findings about any subject or audience, rule by
        // rule: the whole lint compares every rule with every other, quadratic in the rules.
        let warnings = document
            .get("rules")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
            .flat_map(|(i, rule)| lint::open_claims(i, &lint::claims_of(rule)))
            .map(|f| format!("{}: {}", f.code, f.message))
            .collect();
        Ok(ParsedPolicy { policy, warnings })
    }

    /// The document as saved.
    pub fn document(&self) -> &Value {
        &self.inner.document
    }

    /// The kind.
    pub fn kind(&self) -> PolicyKind {
        self.inner.kind
    }

    /// The version of the document: 2 when its `$schema` names the version-2 schema, else 1
    /// (see [`SCHEMA_V2_PATH`]).
    ///
    /// ```
    /// use registry_policy::Policy;
    /// use serde_json::json;
    ///
    /// let v1 = Policy::parse(&json!({"kind": "static", "services": ["*"]})).unwrap().policy;
    /// assert_eq!(v1.version(), 1);
    /// let v2 = Policy::parse(&json!({
    ///     "$schema": "https://registry.example/schemas/service-account-policy/v2.json",
    ///     "kind": "static", "services": ["*"], "actions": ["services:read"]
    /// })).unwrap().policy;
    /// assert_eq!(v2.version(), 2);
    /// ```
    pub fn version(&self) -> u8 {
        self.inner.version
    }

    /// What the policy may ever allow: every action for a version-1 document
    /// ([`Actions::ALL`]); for version 2, a static policy's `actions`, or the union of the
    /// `actions` of every rule of an OIDC policy.
    ///
    /// ```
    /// use registry_policy::{Action, Actions, Policy};
    /// use serde_json::json;
    ///
    /// let policy = Policy::parse(&json!({
    ///     "$schema": "https://registry.example/schemas/service-account-policy/v2.json",
    ///     "kind": "static", "services": ["api-acme"], "actions": ["config:read", "config:write"]
    /// })).unwrap().policy;
    /// assert_eq!(policy.actions(), Actions::of(&[Action::ConfigRead, Action::ConfigWrite]));
    /// ```
    pub fn actions(&self) -> Actions {
        self.inner.actions
    }

    /// The union of the `actions` of the OIDC rules with these indices (see
    /// [`Policy::matching_rules`]; indices of no rule are ignored). A version-1 policy answers
    /// [`Actions::ALL`], a static one [`Policy::actions`].
    pub fn rules_actions(&self, rules: &[usize]) -> Actions {
        if self.inner.version == 1 {
            return Actions::ALL;
        }
        if self.inner.kind == PolicyKind::Static {
            return self.inner.actions;
        }
        let mut actions = Actions::NONE;
        for group in self.inner.rules.groups() {
            for rule in group.rules.iter().filter(|r| rules.contains(&r.index)) {
                actions = actions.union(rule.actions);
            }
        }
        actions
    }

    /// Distinct exact issuers of the OIDC rules, in the order they first appear (empty for a
    /// static policy).
    ///
    /// ```
    /// use registry_policy::Policy;
    /// use serde_json::json;
    ///
    /// let rule = |iss: &str| json!({"services": ["*"], "claims": {"iss": iss, "aud": "a", "sub": "s"}});
    /// let doc = json!({"kind": "oidc", "rules": [rule("https://b"), rule("https://a"), rule("https://b")]});
    /// assert_eq!(Policy::parse(&doc).unwrap().policy.issuers(), ["https://b", "https://a"]);
    /// ```
    pub fn issuers(&self) -> Vec<&str> {
        self.inner.rules.issuers()
    }

    /// The names of the claims the OIDC rules look at, each once, sorted.
    ///
    /// ```
    /// use registry_policy::Policy;
    /// use serde_json::json;
    ///
    /// let doc = json!({"kind": "oidc", "rules": [{"services": ["*"],
    ///     "claims": {"iss": "https://i", "aud": "a", "sub": "s", "ref": "main"}}]});
    /// assert_eq!(Policy::parse(&doc).unwrap().policy.claim_names(), ["aud", "iss", "ref", "sub"]);
    /// ```
    pub fn claim_names(&self) -> Vec<&str> {
        let rules = self.inner.document.get("rules").and_then(Value::as_array);
        let names: std::collections::BTreeSet<&str> = rules
            .into_iter()
            .flatten()
            .filter_map(|r| r.get("claims").and_then(Value::as_object))
            .flat_map(|claims| claims.keys().map(String::as_str))
            .collect();
        names.into_iter().collect()
    }

    /// Each exact issuer with the number of rules that name it.
    ///
    /// ```
    /// use registry_policy::Policy;
    /// use serde_json::json;
    ///
    /// let rule = |iss: &str| json!({"services": ["*"], "claims": {"iss": iss, "aud": "a", "sub": "s"}});
    /// let doc = json!({"kind": "oidc", "rules": [rule("https://b"), rule("https://a"), rule("https://b")]});
    /// assert_eq!(Policy::parse(&doc).unwrap().policy.rules_per_issuer(), [("https://b", 2), ("https://a", 1)]);
    /// ```
    pub fn rules_per_issuer(&self) -> Vec<(&str, usize)> {
        self.inner
            .rules
            .groups()
            .iter()
            .map(|g| (&*g.issuer, g.rules.len()))
            .collect()
    }

    /// The issuer of every rule, with the rule's index, in document order.
    ///
    /// ```
    /// use registry_policy::Policy;
    /// use serde_json::json;
    ///
    /// let rule = |iss: &str| json!({"services": ["*"], "claims": {"iss": iss, "aud": "a", "sub": "s"}});
    /// let doc = json!({"kind": "oidc", "rules": [rule("https://b"), rule("https://a")]});
    /// assert_eq!(Policy::parse(&doc).unwrap().policy.rule_issuers(), [(0, "https://b"), (1, "https://a")]);
    /// ```
    pub fn rule_issuers(&self) -> Vec<(usize, &str)> {
        let mut all: Vec<(usize, &str)> = self
            .inner
            .rules
            .groups()
            .iter()
            .flat_map(|g| g.rules.iter().map(move |r| (r.index, &*g.issuer)))
            .collect();
        all.sort_unstable_by_key(|(index, _)| *index);
        all
    }

    /// Every non-wildcard `services` entry (lower-cased) with its pointer, for the ownership
    /// check of spec §4 rule 1.
    ///
    /// ```
    /// use registry_policy::{LiteralService, Policy};
    /// use serde_json::json;
    ///
    /// let doc = json!({"kind": "static", "services": ["*", "API-acme", "build-*"]});
    /// assert_eq!(
    ///     Policy::parse(&doc).unwrap().policy.literal_services(),
    ///     [LiteralService { pointer: "/services/1".into(), subdomain: "api-acme".into() }]
    /// );
    /// ```
    pub fn literal_services(&self) -> Vec<LiteralService> {
        let document = &self.inner.document;
        let mut lists: Vec<(String, &Vec<Value>)> = Vec::new();
        if let Some(services) = document.get("services").and_then(Value::as_array) {
            lists.push(("/services".to_owned(), services));
        }
        if let Some(rules) = document.get("rules").and_then(Value::as_array) {
            for (r, rule) in rules.iter().enumerate() {
                if let Some(services) = rule.get("services").and_then(Value::as_array) {
                    lists.push((format!("/rules/{r}/services"), services));
                }
            }
        }
        lists
            .into_iter()
            .flat_map(|(base, entries)| {
                entries.iter().enumerate().filter_map(move |(i, entry)| {
                    let entry = entry.as_str()?;
                    (!services::is_wildcard(entry)).then(|| LiteralService {
                        pointer: format!("{base}/{i}"),
                        subdomain: entry.to_ascii_lowercase(),
                    })
                })
            })
            .collect()
    }

    /// The parsed `ip_allowlist` (empty when absent).
    pub fn ip_allowlist(&self) -> &IpAllowlist {
        &self.inner.ip_allowlist
    }

    /// Whether the source address may call (an empty or absent list allows all; see
    /// [`IpAllowlist::allows`]).
    pub fn allows_ip(&self, ip: IpAddr) -> bool {
        self.inner.ip_allowlist.allows(ip)
    }

    /// For a static policy, its services scope; `None` for an OIDC policy.
    pub fn static_scope(&self) -> Option<Scope<'_>> {
        let set = self.inner.services.as_ref()?;
        let mut scope = Scope::default();
        scope.push(set);
        Some(scope)
    }

    /// For an OIDC policy, the union of the `services` of every rule whose claims all match the
    /// verified `claims`; `None` when no rule matches (or the policy is static).
    ///
    /// Only the rules whose `iss` equals the token's `iss` are looked at.
    pub fn oidc_scope(&self, claims: &Map<String, Value>) -> Option<Scope<'_>> {
        eval::oidc_scope(&self.inner.rules, claims)
    }

    /// For an OIDC policy, the indices of the rules whose claims all match the verified
    /// `claims`, in document order (empty when none does, or the policy is static). With
    /// [`Policy::rules_scope`], a request matches the token once and then asks about as many
    /// services as it likes without matching again.
    ///
    /// ```
    /// use registry_policy::Policy;
    /// use serde_json::json;
    ///
    /// let rule = |sub: &str, service: &str| json!({"services": [service],
    ///     "claims": {"iss": "https://ci.example", "aud": "registry", "sub": sub}});
    /// let policy = Policy::parse(&json!({"kind": "oidc",
    ///     "rules": [rule("main", "api-acme"), rule("*", "docs-acme"), rule("dev", "web-acme")]}))
    ///     .unwrap().policy;
    /// let claims = json!({"iss": "https://ci.example", "aud": "registry", "sub": "main"});
    /// let rules = policy.matching_rules(claims.as_object().unwrap());
    /// assert_eq!(rules, [0, 1]);
    /// let scope = policy.rules_scope(&rules);
    /// assert!(scope.matches("api-acme") && scope.matches("docs-acme"));
    /// assert!(!scope.matches("web-acme"));
    /// ```
    pub fn matching_rules(&self, claims: &Map<String, Value>) -> Vec<usize> {
        eval::matching_rules(&self.inner.rules, claims)
    }

    /// The union of the `services` of the rules with these indices (see
    /// [`Policy::matching_rules`]); indices of no rule are ignored.
    pub fn rules_scope(&self, rules: &[usize]) -> Scope<'_> {
        let mut scope = Scope::default();
        for group in self.inner.rules.groups() {
            for rule in group.rules.iter().filter(|r| rules.contains(&r.index)) {
                scope.push(&rule.services);
            }
        }
        scope
    }

    /// Decides a request: `claims` are the verified JWT claims (`None` for a static token),
    /// `service` the subdomain the call acts on (`None` for calls on no one service, such as
    /// listing), `ip` the caller's address (an [`IpAddr`], or `None`: the `ip_allowlist` is not
    /// checked). See [`DenyReason`] for the order of checks, and [`Policy::explain`] (same
    /// arguments) for why each rule refused a token.
    ///
    /// Only the rules the token can match are looked at: rules are filed by the exact values
    /// and literal heads they pin, so the cost hardly grows with the number of rules.
    ///
    /// ```
    /// use registry_policy::{Decision, DenyReason, Policy};
    /// use serde_json::json;
    ///
    /// let policy = Policy::parse(&json!({"kind": "static", "services": ["api-acme"]}))
    ///     .unwrap()
    ///     .policy;
    /// let ip: std::net::IpAddr = "192.0.2.1".parse().unwrap();
    /// assert_eq!(policy.evaluate(None, Some("api-acme"), ip, None), Decision::Allow { rule: None });
    /// // `None`: the address is not checked (the `ip_allowlist` is not looked at).
    /// assert!(policy.evaluate(None, Some("api-acme"), None, None).is_allowed());
    /// let Decision::Deny(reason) = policy.evaluate(None, Some("web-acme"), ip, None) else {
    ///     panic!("web-acme is not covered");
    /// };
    /// assert_eq!(reason.to_string(), "service \"web-acme\" is not in the policy's services");
    /// assert!(matches!(reason, DenyReason::ServiceNotCovered { .. }));
    /// ```
    pub fn evaluate(
        &self,
        claims: Option<&Map<String, Value>>,
        service: Option<&str>,
        ip: impl Into<Option<IpAddr>>,
        action: impl Into<Option<Action>>,
    ) -> Decision {
        eval::evaluate(self, claims, service, ip.into(), action.into())
    }

    fn oidc_rules(&self) -> &OidcRules {
        &self.inner.rules
    }
}

/// How the version of a document is told: the end of the address of the version-2 schema.
/// A document whose `$schema` is a string ending in this is version 2; every other document
/// (no `$schema`, the version-1 address, anything else) is version 1, which allows every action.
pub const SCHEMA_V2_PATH: &str = "/schemas/service-account-policy/v2.json";

/// The version of `document`: 2 when its `$schema` is a string ending in [`SCHEMA_V2_PATH`]
/// (whatever the server's address before it), else 1.
fn version_of(document: &Value) -> u8 {
    match document.get("$schema").and_then(Value::as_str) {
        Some(address) if address.ends_with(SCHEMA_V2_PATH) => 2,
        _ => 1,
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod tests_v2;
