//! Findings about valid but risky policies (docs/api.md, "Explaining refusals"): what `registry
//! policy check` prints. Each finding has a stable code, a severity, a pointer into the policy
//! document and a sentence. Schema violations are errors; everything here is a warning.

use super::compare::{self, Coverage};
use super::pattern::{ClaimPattern, Key};
use super::Policy;
use crate::violation::escape_token;
use crate::Violations;
use serde_json::{json, Map, Value};
use std::collections::HashMap;

/// The issuer of GitHub Actions' identity tokens.
pub const GITHUB_ISSUER: &str = "https://token.actions.githubusercontent.com";

/// How serious a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Severity {
    /// The policy cannot be saved.
    Error,
    /// The policy can be saved, and probably should not be as it is.
    Warning,
}

impl Severity {
    /// `"error"` or `"warning"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Stable code (`any-subject`, `schema`, …).
    pub code: &'static str,
    /// Error or warning.
    pub severity: Severity,
    /// RFC 6901 pointer into the policy document.
    pub pointer: String,
    /// A sentence for a person.
    pub message: String,
}

impl Finding {
    fn warning(code: &'static str, pointer: String, message: String) -> Self {
        Finding {
            code,
            severity: Severity::Warning,
            pointer,
            message,
        }
    }

    /// The finding as `{code, severity, pointer, message}`.
    pub fn to_json(&self) -> Value {
        json!({"code": self.code, "severity": self.severity.as_str(),
            "pointer": self.pointer, "message": self.message})
    }
}

/// Every finding about `document`: when it does not parse, its problems as errors (code
/// `limit` for those of [`crate::limits::check_policy`], `schema` for the others), else the
/// warnings of [`Policy::lint`].
///
/// ```
/// use registry_policy::lint_document;
/// use serde_json::json;
///
/// let findings = lint_document(&json!({"kind": "oidc", "rules": [{"services": ["*"],
///     "claims": {"iss": "https://token.actions.githubusercontent.com", "aud": "registry", "sub": "*"}}]}));
/// let codes: Vec<&str> = findings.iter().map(|f| f.code).collect();
/// assert_eq!(codes, ["any-subject", "wildcard-services", "github-subject-without-repository"]);
/// assert_eq!(lint_document(&json!({"kind": "nope"}))[0].code, "schema");
/// ```
pub fn lint_document(document: &Value) -> Vec<Finding> {
    match Policy::parse(document) {
        Ok(parsed) => parsed.policy.lint(),
        Err(error) => schema_findings(error.into_violations(), document),
    }
}

fn schema_findings(violations: Violations, document: &Value) -> Vec<Finding> {
    let limits = crate::limits::check_policy(document);
    violations
        .into_iter()
        .map(|v| Finding {
            code: if limits.contains(&v) {
                "limit"
            } else {
                "schema"
            },
            severity: Severity::Error,
            pointer: v.pointer,
            message: v.message,
        })
        .collect()
}

/// A rule's claims (empty when it has none).
pub(crate) fn claims_of(rule: &Value) -> Map<String, Value> {
    rule.get("claims")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

fn services_of(rule: &Value) -> Vec<String> {
    rule.get("services")
        .and_then(Value::as_array)
        .map(|s| {
            s.iter()
                .filter_map(Value::as_str)
                .map(str::to_ascii_lowercase)
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a pattern accepts any value: only `*` (`**` alike), or only `*` and `?` with a `*`
/// (`*?`, `?*`: any value of a character or more, which every real subject and audience is).
fn any_string(pattern: &str) -> bool {
    ClaimPattern::new(pattern).accepts_any_string()
        || (pattern.contains('*') && pattern.chars().all(|c| matches!(c, '*' | '?')))
}

/// Whether a GitHub `sub` pattern pins one repository (`repo:owner/name:…`).
fn pins_repository(pattern: &str) -> bool {
    let Some(rest) = pattern.strip_prefix("repo:") else {
        return false;
    };
    let Some((repository, _)) = rest.split_once(':') else {
        return false;
    };
    let wild = |s: &str| s.is_empty() || s.contains(['*', '?']);
    match repository.split_once('/') {
        Some((owner, name)) => !wild(owner) && !wild(name),
        None => false,
    }
}

/// The findings of rule `i`, whose claims are `claims`, that a save answers as warnings: it
/// accepts any subject, or any audience. Each rule on its own, so that a save costs what its
/// rules do (the rest of the lint compares rules with each other).
pub(crate) fn open_claims(i: usize, claims: &Map<String, Value>) -> Vec<Finding> {
    let at = |name: &str| format!("/rules/{i}/claims/{}", escape_token(name));
    let issuer = claims
        .get("iss")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut findings = Vec::new();
    if let Some(sub) = claims
        .get("sub")
        .and_then(Value::as_str)
        .filter(|sub| any_string(sub))
    {
        findings.push(Finding::warning(
            "any-subject",
            at("sub"),
            format!(
                "rule {i} (/rules/{i}) accepts any subject (\"sub\": \"{sub}\"): every \
                 token {issuer} issues for the rule's audience gets in, e.g. every \
                 repository of a CI provider, not only yours; pin \"sub\" to your own \
                 subjects or add a claim that narrows it (such as \"repository_owner\")"
            ),
        ));
    }
    if let Some(aud) = claims
        .get("aud")
        .and_then(Value::as_str)
        .filter(|aud| any_string(aud))
    {
        findings.push(Finding::warning(
            "any-audience",
            at("aud"),
            format!(
                "rule {i} (/rules/{i}) accepts any audience (\"aud\": \"{aud}\"): \
                 tokens {issuer} issued for any other service get in too, e.g. a token \
                 that every repository of a CI provider can request; pin \"aud\" to the \
                 audience you configured for this registry"
            ),
        ));
    }
    findings
}

/// A rule as the duplicate and shadow checks read it, taken apart once.
struct RuleParts {
    /// The rule's JSON text: equal texts are equal rules.
    text: String,
    claims: Map<String, Value>,
    services: Vec<String>,
    /// A version 2 rule's actions; `None`: the rule lists none (version 1: every action).
    actions: Option<Vec<String>>,
    /// What every subject it admits starts with: its whole `sub` when that has no wildcard
    /// (`exact`), else the literal text before the first wildcard ("" without a `sub`).
    subject_head: String,
    /// Whether `sub` is exact (no wildcard).
    subject_exact: bool,
}

impl RuleParts {
    fn of(rule: &Value) -> Self {
        let claims = claims_of(rule);
        let sub = claims
            .get("sub")
            .and_then(Value::as_str)
            .map(ClaimPattern::new);
        let (subject_head, subject_exact) = match sub.as_ref().and_then(ClaimPattern::key) {
            Some(Key::Exact(value)) => (value.to_owned(), true),
            Some(Key::Head(head)) => (head.to_owned(), false),
            None => (String::new(), false),
        };
        Self {
            text: rule.to_string(),
            subject_head,
            subject_exact,
            claims,
            services: services_of(rule),
            actions: (rule.get("actions").and_then(Value::as_array)).map(|actions| {
                (actions.iter().filter_map(Value::as_str))
                    .map(str::to_owned)
                    .collect()
            }),
        }
    }

    /// Its issuer (`iss` is compared exactly).
    fn issuer(&self) -> Option<&str> {
        self.claims.get("iss").and_then(Value::as_str)
    }
}

/// Whether rule `earlier` admits every token `later` admits, for at least `later`'s services and
/// actions: it pins the same issuer, every claim it checks `later` checks with a pattern it
/// covers (`a*` covers `ab`; `*` covers no boolean, which only the literal `true` or `false`
/// matches, and never a missing claim), its services cover `later`'s (`d-*` covers `d-acme`),
/// and so do its actions (the actions of the rules that match are united, so a later rule that
/// adds one still decides something). What the proof cannot afford to decide is not shadowed.
fn shadows(earlier: &RuleParts, later: &RuleParts, coverage: &mut Coverage) -> bool {
    let (a, b) = (&earlier.claims, &later.claims);
    if a.get("iss") != b.get("iss") {
        return false;
    }
    let actions_covered = match (&earlier.actions, &later.actions) {
        (None, _) => true,
        (Some(_), None) => false,
        // `*` is every action but `tokens:sign`, which only naming it grants.
        (Some(granted), Some(asked)) => asked.iter().all(|action| {
            granted.contains(action)
                || (action != "tokens:sign" && granted.iter().any(|a| a == "*"))
        }),
    };
    // The cheap checks first: the patterns' proofs cost a table each.
    actions_covered
        && a.iter().all(|(name, pattern)| {
            let later_pattern = b.get(name).and_then(Value::as_str);
            name == "iss"
                || (pattern.as_str())
                    .zip(later_pattern)
                    .is_some_and(|(outer, inner)| coverage.claim(outer, inner))
        })
        && coverage.services(&earlier.services, &later.services)
}

/// The most one rule's shadowing proofs may cost (a comparison's budget).
const RULE_BUDGET: u64 = compare::SEARCH_BUDGET;

/// The most all of a policy's shadowing proofs may cost together: rules past it are not found
/// shadowed (no warning rather than a guess).
const LINT_BUDGET: u64 = 5 * RULE_BUDGET;

/// For each rule, the first earlier rule it repeats (`Ok`) or, failing that, the first earlier
/// rule that shadows it (`Err`). Linear in the rules for the usual policy: only earlier rules
/// with the same issuer, and the same exact subject or a subject pattern with wildcards (or
/// none), can shadow a rule, and they are looked up, not compared pair by pair (a 1,000-rule
/// policy once took 0.8 s to lint).
fn repeats_and_shadows(rules: &[Value]) -> Vec<Option<Result<usize, usize>>> {
    let parts: Vec<RuleParts> = rules.iter().map(RuleParts::of).collect();
    let mut lint_budget = LINT_BUDGET;
    let mut first_with_text: HashMap<&str, usize> = HashMap::new();
    // Earlier rules by issuer and exact subject (which covers only itself); and by issuer and
    // the literal head of a subject with wildcards ("" without one), which covers only
    // subjects that start with that head.
    let mut by_subject: HashMap<(Option<&str>, &str), Vec<usize>> = HashMap::new();
    let mut by_head: HashMap<(Option<&str>, &str), Vec<usize>> = HashMap::new();
    let mut found = Vec::with_capacity(rules.len());
    for (i, rule) in parts.iter().enumerate() {
        if let Some(&j) = first_with_text.get(rule.text.as_str()) {
            found.push(Some(Ok(j)));
            continue;
        }
        first_with_text.insert(&rule.text, i);
        let issuer = rule.issuer();
        let head = rule.subject_head.as_str();
        let same_subject = (rule.subject_exact)
            .then(|| by_subject.get(&(issuer, head)))
            .flatten();
        // Every earlier head this rule's subjects start with: each prefix of its own head.
        let heads = (head.char_indices().map(|(at, _)| at))
            .chain([head.len()])
            .filter_map(|end| by_head.get(&(issuer, &head[..end])));
        // Each rule its own budget (one costly part cannot silence the rest), all of them
        // together at most a few comparisons' worth.
        let mut coverage = Coverage::with(RULE_BUDGET.min(lint_budget));
        let shadowing = (same_subject.into_iter().chain(heads))
            .filter_map(|earlier| {
                (earlier.iter()).find(|&&j| shadows(&parts[j], rule, &mut coverage))
            })
            .min();
        lint_budget -= RULE_BUDGET.min(lint_budget) - coverage.left();
        found.push(shadowing.map(|&j| Err(j)));
        match rule.subject_exact {
            true => by_subject.entry((issuer, head)).or_default().push(i),
            false => by_head.entry((issuer, head)).or_default().push(i),
        }
    }
    found
}

impl Policy {
    /// The lint's warnings about this policy, in document order.
    ///
    /// ```
    /// use registry_policy::Policy;
    /// use serde_json::json;
    ///
    /// let rule = json!({"services": ["api-acme"], "claims": {"iss": "http://idp.example/",
    ///     "aud": "*", "sub": "ci"}});
    /// let policy = Policy::parse(&json!({"kind": "oidc", "rules": [rule.clone(), rule],
    ///     "ip_allowlist": ["0.0.0.0/0"]})).unwrap().policy;
    /// let found: Vec<(&str, String)> = policy.lint().into_iter().map(|f| (f.code, f.pointer)).collect();
    /// assert!(found.contains(&("any-audience", "/rules/0/claims/aud".into())));
    /// assert!(found.contains(&("insecure-issuer", "/rules/0/claims/iss".into())));
    /// assert!(found.contains(&("issuer-trailing-slash", "/rules/0/claims/iss".into())));
    /// assert!(found.contains(&("duplicate-rule", "/rules/1".into())));
    /// assert!(found.contains(&("allow-all-addresses", "/ip_allowlist/0".into())));
    /// ```
    pub fn lint(&self) -> Vec<Finding> {
        let document = self.document();
        let mut findings = Vec::new();
        if let Some(entries) = document.get("services").and_then(Value::as_array) {
            for (k, entry) in entries.iter().enumerate() {
                if entry.as_str() == Some("*") {
                    findings.push(Finding::warning(
                        "wildcard-services",
                        format!("/services/{k}"),
                        "\"*\" covers every service of the customer, including those created \
                         later: name the services this account needs"
                            .into(),
                    ));
                }
            }
        }
        // A version-2 grant of every action on every service: the least privilege it was
        // meant to give is none.
        let all_on_all = |services: Option<&Value>, actions: Option<&Value>| {
            let has_star = |v: Option<&Value>| {
                v.and_then(Value::as_array)
                    .is_some_and(|a| a.iter().any(|e| e.as_str() == Some("*")))
            };
            self.version() == 2 && has_star(services) && has_star(actions)
        };
        if all_on_all(document.get("services"), document.get("actions")) {
            findings.push(Finding::warning(
                "all-actions-on-all-services",
                "/actions".into(),
                "\"actions\": [\"*\"] with \"services\": [\"*\"] lets this account do anything \
                 to every service of the customer, including managing accounts: list the actions \
                 it needs"
                    .into(),
            ));
        }
        let rules = document
            .get("rules")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for (i, rule) in rules.iter().enumerate() {
            if all_on_all(rule.get("services"), rule.get("actions")) {
                findings.push(Finding::warning(
                    "all-actions-on-all-services",
                    format!("/rules/{i}/actions"),
                    format!(
                        "rule {i} grants \"actions\": [\"*\"] with \"services\": [\"*\"]: the \
                         tokens it accepts may do anything to every service of the customer, \
                         including managing accounts; list the actions they need"
                    ),
                ));
            }
        }
        let repeated = repeats_and_shadows(&rules);
        for (i, rule) in rules.iter().enumerate() {
            let claims = claims_of(rule);
            let at = |name: &str| format!("/rules/{i}/claims/{}", escape_token(name));
            let issuer = claims
                .get("iss")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let sub = claims.get("sub").and_then(Value::as_str);
            if sub.is_none() {
                findings.push(Finding::warning(
                    "no-subject",
                    format!("/rules/{i}/claims"),
                    format!("rule {i} names no sub: every subject of {issuer} gets in"),
                ));
            }
            findings.extend(open_claims(i, &claims));
            if (issuer.get(..7)).is_some_and(|scheme| scheme.eq_ignore_ascii_case("http://")) {
                findings.push(Finding::warning(
                    "insecure-issuer",
                    at("iss"),
                    format!(
                        "rule {i}'s issuer is http://: its keys can be changed in transit, and \
                         the registry fetches only https issuers outside development"
                    ),
                ));
            }
            if issuer.ends_with('/') {
                findings.push(Finding::warning(
                    "issuer-trailing-slash",
                    at("iss"),
                    format!(
                        "rule {i}'s issuer ends in '/': iss is compared exactly, and most \
                         issuers write theirs without one ({:?})",
                        issuer.trim_end_matches('/')
                    ),
                ));
            }
            for (k, entry) in services_of(rule).iter().enumerate() {
                if entry == "*" {
                    findings.push(Finding::warning(
                        "wildcard-services",
                        format!("/rules/{i}/services/{k}"),
                        format!(
                            "rule {i}'s services include \"*\": every service of the customer, \
                             including those created later"
                        ),
                    ));
                }
            }
            if issuer == GITHUB_ISSUER && !sub.is_some_and(pins_repository) {
                findings.push(Finding::warning(
                    "github-subject-without-repository",
                    if sub.is_some() {
                        at("sub")
                    } else {
                        format!("/rules/{i}/claims")
                    },
                    format!(
                        "rule {i} trusts GitHub Actions without pinning a repository: any \
                         repository's workflow can get such a token; start sub with \
                         repo:OWNER/NAME:"
                    ),
                ));
            }
            match repeated[i] {
                Some(Ok(j)) => findings.push(Finding::warning(
                    "duplicate-rule",
                    format!("/rules/{i}"),
                    format!("rule {i} repeats rule {j}"),
                )),
                Some(Err(j)) => findings.push(Finding::warning(
                    "shadowed-rule",
                    format!("/rules/{i}"),
                    format!(
                        "rule {j} already admits every token rule {i} admits, for all of rule \
                         {i}'s services: rule {i} never decides anything"
                    ),
                )),
                None => {}
            }
        }
        let addresses = document
            .get("ip_allowlist")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for (k, entry) in addresses.iter().enumerate() {
            if entry.as_str().is_some_and(allows_every_address) {
                findings.push(Finding::warning(
                    "allow-all-addresses",
                    format!("/ip_allowlist/{k}"),
                    "this entry allows every address: the allowlist restricts nothing".into(),
                ));
            }
        }
        findings
    }
}

/// Whether an allowlist entry lets every IPv4 or every IPv6 client in, in any spelling
/// (`0.0.0.0/0`, `::/0`, the IPv4-mapped block `::ffff:0:0/96`); one that does not parse is
/// the schema's to report.
fn allows_every_address(entry: &str) -> bool {
    crate::ip::parse_ip_entry(entry).is_ok_and(|net| {
        let every_v6 = matches!(net, ipnetwork::IpNetwork::V6(n) if n.prefix() == 0);
        every_v6 || crate::ip::as_v4(net).is_some_and(|v4| v4.prefix() == 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codes(document: Value) -> Vec<(&'static str, String)> {
        lint_document(&document)
            .into_iter()
            .map(|f| (f.code, f.pointer))
            .collect()
    }

    /// The checks rule by rule, as they were before the index: every earlier rule compared.
    fn pairwise(rules: &[Value]) -> Vec<Option<Result<usize, usize>>> {
        let parts: Vec<RuleParts> = rules.iter().map(RuleParts::of).collect();
        (0..rules.len())
            .map(|i| {
                let earlier = 0..i;
                if let Some(j) = earlier.clone().find(|&j| rules[j] == rules[i]) {
                    return Some(Ok(j));
                }
                let mut coverage = Coverage::with(RULE_BUDGET);
                earlier
                    .clone()
                    .find(|&j| shadows(&parts[j], &parts[i], &mut coverage))
                    .map(Err)
            })
            .collect()
    }

    #[test]
    fn the_index_finds_what_comparing_every_pair_finds() {
        let issuers = ["https://a.example", "https://b.example"];
        let subjects = [
            None,
            Some("*"),
            Some("ci"),
            Some("ci-*"),
            Some("c*"),
            Some("ci-?"),
            Some("ci-a"),
            Some("deploy"),
        ];
        let services = [json!(["*"]), json!(["api-x"]), json!(["api-x", "web-x"])];
        let audiences = [None, Some("*"), Some("sts")];
        // Every rule of a small grid, in a scrambled order, and repeated.
        let mut grid = Vec::new();
        for iss in issuers {
            for sub in subjects {
                for services in &services {
                    for aud in audiences {
                        let mut claims = json!({"iss": iss});
                        if let Some(sub) = sub {
                            claims["sub"] = json!(sub);
                        }
                        if let Some(aud) = aud {
                            claims["aud"] = json!(aud);
                        }
                        grid.push(json!({"services": services, "claims": claims}));
                    }
                }
            }
        }
        let mut rules = Vec::new();
        for k in 0..grid.len() * 2 {
            rules.push(grid[(k * 37 + 11) % grid.len()].clone());
        }
        let found = repeats_and_shadows(&rules);
        assert_eq!(found, pairwise(&rules));
        assert!(found.iter().any(|f| matches!(f, Some(Ok(_)))));
        assert!(found.iter().any(|f| matches!(f, Some(Err(_)))));
        assert!(found.iter().any(Option::is_none));
    }

    #[test]
    fn every_code_has_a_policy_that_produces_it() {
        let rule = |iss: &str, sub: Option<&str>, services: Value| {
            let mut claims = json!({"iss": iss, "aud": "registry"});
            if let Some(sub) = sub {
                claims["sub"] = json!(sub);
            }
            json!({"services": services, "claims": claims})
        };
        // no-subject cannot pass the schema (sub is required): the lint still says it for
        // stored documents, which are not checked against the schema again.
        let stored = Policy::from_stored(&json!({"kind": "oidc",
            "rules": [rule("https://ci.example", None, json!(["a-x"]))]}))
        .unwrap();
        assert_eq!(stored.lint()[0].code, "no-subject");
        let found = codes(json!({"kind": "oidc", "rules": [
            rule("https://ci.example", Some("team-*"), json!(["*"])),
            rule("https://ci.example", Some("team-a"), json!(["api-x"])),
            rule(GITHUB_ISSUER, Some("repo:acme/*:ref:refs/heads/main"), json!(["api-x"])),
            rule(GITHUB_ISSUER, Some("repo:acme/infra:environment:prod"), json!(["api-x"])),
        ]}));
        assert!(found.contains(&("wildcard-services", "/rules/0/services/0".into())));
        assert!(found.contains(&(
            "github-subject-without-repository",
            "/rules/2/claims/sub".into()
        )));
        assert!(!found.iter().any(|(_, p)| p.starts_with("/rules/3")));
        let shadowed = codes(json!({"kind": "oidc", "rules": [
            json!({"services": ["*"], "claims": {"iss": "https://ci.example", "aud": "registry", "sub": "team-*"}}),
            json!({"services": ["api-x"], "claims": {"iss": "https://ci.example", "aud": "registry",
                "sub": "team-*", "ref": "main"}}),
        ]}));
        assert!(shadowed.contains(&("shadowed-rule", "/rules/1".into())));
        // A later rule that adds an action (the actions of matching rules are united), or that
        // lacks a claim the earlier one requires with `*` (never matching a missing claim), still
        // decides something.
        let v2 = "http://localhost:8080/schemas/service-account-policy/v2.json";
        let claims = json!({"iss": "https://ci.example", "aud": "registry", "sub": "team-a"});
        let adds_an_action = codes(json!({"$schema": v2, "kind": "oidc", "rules": [
            {"services": ["*"], "actions": ["services:read"], "claims": claims},
            {"services": ["api-x"], "actions": ["config:write"], "claims": claims},
            {"services": ["api-x"], "actions": ["services:read"], "claims": claims},
        ]}));
        assert!(!adds_an_action.contains(&("shadowed-rule", "/rules/1".into())));
        assert!(adds_an_action.contains(&("shadowed-rule", "/rules/2".into())));
        let star_needs_the_claim = codes(json!({"kind": "oidc", "rules": [
            {"services": ["*"], "claims": {"iss": "https://ci.example", "aud": "registry",
                "sub": "team-a", "environment": "*"}},
            {"services": ["api-x"], "claims": {"iss": "https://ci.example", "aud": "registry",
                "sub": "team-a"}},
            {"services": ["api-x"], "claims": {"iss": "https://ci.example", "aud": "registry",
                "sub": "team-a", "environment": "prod"}},
        ]}));
        assert!(!star_needs_the_claim.contains(&("shadowed-rule", "/rules/1".into())));
        assert!(star_needs_the_claim.contains(&("shadowed-rule", "/rules/2".into())));
        // `*` matches no boolean: a later `true` still decides a token with `"admin": true`.
        let boolean = codes(json!({"kind": "oidc", "rules": [
            {"services": ["d-x"], "claims": {"iss": "https://ci.example", "aud": "x", "sub": "ab",
                "admin": "*"}},
            {"services": ["d-x"], "claims": {"iss": "https://ci.example", "aud": "x", "sub": "ab",
                "admin": "true"}},
        ]}));
        assert!(
            !boolean.contains(&("shadowed-rule", "/rules/1".into())),
            "{boolean:?}"
        );
        // A wildcard covers what it matches: in the subject, another claim, or the services.
        let covered = |earlier: Value, later: Value| {
            let rule = |patch: Value| {
                let mut rule = json!({"services": ["d-acme"], "claims": {"iss": "https://ci.example",
                    "aud": "xy", "sub": "ab"}});
                for (name, value) in patch.as_object().unwrap() {
                    match name.as_str() {
                        "services" => rule["services"] = value.clone(),
                        claim => rule["claims"][claim] = value.clone(),
                    }
                }
                rule
            };
            codes(json!({"kind": "oidc", "rules": [rule(earlier), rule(later)]}))
                .contains(&("shadowed-rule", "/rules/1".into()))
        };
        assert!(covered(json!({"sub": "a*"}), json!({})));
        assert!(covered(json!({"aud": "x*"}), json!({})));
        assert!(covered(json!({"services": ["d-*"]}), json!({})));
        assert!(covered(
            json!({"sub": "*", "services": ["*"]}),
            json!({"sub": "a*b"})
        ));
        assert!(!covered(json!({"sub": "ab*"}), json!({"sub": "a*"})));
        assert!(!covered(
            json!({"services": ["d-*"]}),
            json!({"services": ["e-acme"]})
        ));
        for every in ["0.0.0.0/0", "::ffff:0:0/96", "::ffff:0.0.0.0/96", "0:0::/0"] {
            assert!(allows_every_address(every), "{every}");
        }
        for some in ["0.0.0.0/1", "::ffff:0:0/97", "::/1", "10.0.0.1", "junk"] {
            assert!(!allows_every_address(some), "{some}");
        }
        assert_eq!(
            codes(json!({"kind": "static", "services": ["*"], "ip_allowlist": ["::/0"]})),
            [
                ("wildcard-services", "/services/0".into()),
                ("allow-all-addresses", "/ip_allowlist/0".into())
            ]
        );
    }
}
