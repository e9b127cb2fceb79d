//! The engine's answers as text for a person: what `registry policy` prints, and what any tool
//! that embeds the engine can print the same way. Each is a [`std::fmt::Display`]:
//!
//! - [`Explanation`]: the decision (`allow: rule 0 (/rules/0)`, `allow`, `deny`), then one
//!   indented line per [`Reason`] (`claim-mismatch /rules/0/claims/sub: …`) and per [`Hint`]
//!   (`hint /rules/0/claims/sub: …`);
//! - [`Comparison`]: the verdict in a sentence, then one indented line per [`Witness`];
//! - [`Finding`]: `warning any-subject /rules/0/claims/sub: …` (`/` for the whole document),
//!   and a [`Tally`] of findings: `0 error(s), 2 warning(s)`;
//! - a test run, through [`TestRun::report`]: `PASS name: allow by rule 0` or
//!   `FAIL name: deny (claim-mismatch)` per case, then the rules no case exercised.
//!
//! Lines are separated by `\n`; the explanation, the comparison and a finding have no newline at
//! the end (print them with `println!`), a run's report ends each of its lines with one (an
//! empty run is the empty text: print it with `print!`). The JSON forms are the `to_json`
//! methods.

use crate::{
    CompareResult, Comparison, Explanation, Finding, Hint, Reason, Severity, TestCase, TestRun,
    Witness,
};
use serde_json::{json, Value};
use std::fmt;

impl fmt::Display for Reason {
    /// `{code} {pointer}: {message}`, `-` for no pointer.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pointer = self.pointer.as_deref().unwrap_or("-");
        write!(f, "{} {pointer}: {}", self.code, self.message)
    }
}

impl fmt::Display for Hint {
    /// `hint {pointer}: {message}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "hint {}: {}", self.pointer, self.message)
    }
}

/// The decision, then each reason and each hint on a line of its own, indented by two spaces:
/// the text of `registry policy explain`.
///
/// ```
/// use registry_policy::Policy;
/// use serde_json::json;
///
/// let policy = Policy::parse(&json!({"kind": "oidc", "rules": [{"services": ["api-acme"],
///     "claims": {"iss": "https://ci.example", "aud": "registry", "sub": "repo:acme/infra"}}]}))
///     .unwrap().policy;
/// let token = |sub: &str| json!({"iss": "https://ci.example", "aud": "registry", "sub": sub});
/// let allowed = policy.explain(token("repo:acme/infra").as_object(), Some("api-acme"), None, None);
/// assert_eq!(allowed.to_string(), "allow: rule 0 (/rules/0)");
/// let refused = policy.explain(token("repo:Acme/infra").as_object(), Some("api-acme"), None, None);
/// assert_eq!(
///     refused.to_string(),
///     "deny\n  claim-mismatch /rules/0/claims/sub: sub \"repo:Acme/infra\" does not match \
///      \"repo:acme/infra\"\n  hint /rules/0/claims/sub: \"repo:Acme/infra\" differs from \
///      \"repo:acme/infra\" only in case: matching is case-sensitive"
/// );
/// ```
impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.rule {
            Some(rule) if self.allowed => write!(f, "allow: rule {rule} (/rules/{rule})")?,
            _ if self.allowed => f.write_str("allow")?,
            _ => f.write_str("deny")?,
        }
        for reason in &self.reasons {
            write!(f, "\n  {reason}")?;
        }
        for hint in &self.hints {
            write!(f, "\n  {hint}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Witness {
    /// `{rule} of NEW admits {claims} on {service}[ from {ip}][ for {action}]`: `rule 1` or `the policy`,
    /// `claims {…}` or `a static token`, `service "api-acme"` or `no one service`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.rule {
            Some(rule) => write!(f, "rule {rule}")?,
            None => f.write_str("the policy")?,
        }
        match &self.claims {
            Some(claims) => write!(f, " of NEW admits claims {}", Value::from(claims.clone()))?,
            None => f.write_str(" of NEW admits a static token")?,
        }
        match &self.service {
            Some(service) => write!(f, " on service {service:?}")?,
            None => f.write_str(" on no one service")?,
        }
        if let Some(ip) = self.ip {
            write!(f, " from {ip}")?;
        }
        match self.action {
            Some(action) => write!(f, " for {action}"),
            None => Ok(()),
        }
    }
}

/// The verdict in a sentence, then each witness on a line of its own, indented by two spaces:
/// the text of `registry policy compare`.
///
/// ```
/// use registry_policy::{compare, Policy};
/// use serde_json::json;
///
/// let policy = |services| Policy::parse(&json!({"kind": "static", "services": services}))
///     .unwrap().policy;
/// let old = policy(json!(["api-acme"]));
/// assert_eq!(
///     compare(&old, &policy(json!(["api-acme"]))).to_string(),
///     "narrower-or-equal: NEW admits no request OLD refuses"
/// );
/// let text = compare(&old, &policy(json!(["api-acme", "web-acme"]))).to_string();
/// assert_eq!(
///     text,
///     "widens: NEW admits requests OLD refuses\n  the policy of NEW admits a static token on \
///      service \"web-acme\""
/// );
/// ```
impl fmt::Display for Comparison {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.result {
            CompareResult::Widens => f.write_str("widens: NEW admits requests OLD refuses")?,
            CompareResult::NarrowerOrEqual => {
                f.write_str("narrower-or-equal: NEW admits no request OLD refuses")?
            }
            CompareResult::Undetermined => write!(
                f,
                "undetermined: no request was found that NEW admits and OLD refuses, and none is \
                 ruled out for {}",
                self.unproven.join(", ")
            )?,
        }
        for witness in &self.witnesses {
            write!(f, "\n  {witness}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Severity {
    /// `error` or `warning`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `{severity} {code} {pointer}: {message}`, with `/` for a finding about the whole document:
/// a line of `registry policy check`.
///
/// ```
/// use registry_policy::lint_document;
/// use serde_json::json;
///
/// let findings = lint_document(&json!({"kind": "oidc", "rules": [{"services": ["api-acme"],
///     "claims": {"iss": "https://ci.example", "aud": "*", "sub": "repo:acme/api:*"}}]}));
/// assert_eq!(findings[0].to_string(), format!("warning any-audience /rules/0/claims/aud: {}",
///     findings[0].message));
/// // The whole document (RFC 6901's empty pointer; `/` would name a member "").
/// assert!(lint_document(&json!([]))[0].to_string().starts_with("error schema \"\": "));
/// ```
impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pointer = if self.pointer.is_empty() {
            "\"\""
        } else {
            &self.pointer
        };
        write!(
            f,
            "{} {} {pointer}: {}",
            self.severity, self.code, self.message
        )
    }
}

/// How many findings are errors and how many are warnings; as text, `2 error(s), 1
/// warning(s)` (the summary of `registry policy check`).
///
/// ```
/// use registry_policy::{lint_document, Tally};
/// use serde_json::json;
///
/// let findings = lint_document(&json!({"kind": "oidc", "rules": [{"services": ["*"],
///     "claims": {"iss": "https://ci.example", "aud": "registry", "sub": "*"}}]}));
/// let tally = Tally::of(&findings);
/// assert_eq!((tally.errors, tally.warnings), (0, 2));
/// assert_eq!(tally.to_string(), "0 error(s), 2 warning(s)");
/// assert_eq!(Tally::of(&lint_document(&json!({"kind": 1}))).errors, 1);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Tally {
    /// Findings of [`Severity::Error`]: the document cannot be saved.
    pub errors: usize,
    /// Every other finding.
    pub warnings: usize,
}

impl Tally {
    /// Counts `findings` by severity.
    pub fn of(findings: &[Finding]) -> Tally {
        let errors = findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .count();
        Tally {
            errors,
            warnings: findings.len() - errors,
        }
    }
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} error(s), {} warning(s)", self.errors, self.warnings)
    }
}

/// A [`TestRun`] with the cases it ran, for a person ([`std::fmt::Display`]) or as JSON
/// ([`RunReport::to_json`]): see [`TestRun::report`].
#[derive(Debug, Clone, Copy)]
pub struct RunReport<'a> {
    run: &'a TestRun,
    cases: &'a [TestCase],
}

impl TestRun {
    /// This run told case by case: `cases` are the ones it ran, in the same order (a case
    /// without an outcome, or an outcome without a case, is left out).
    ///
    /// As text, one line per case, `PASS` or `FAIL`, its name, and what the policy answered
    /// (`allow by rule 0`, `allow`, or `deny (` the code of the first reason `)`), then
    /// `rules no case exercised: /rules/1, …` when some rule admitted no case; each line ends
    /// with a newline. As JSON, `{cases: [{name, passed, decision, rule}], uncoveredRules}`.
    ///
    /// ```
    /// use registry_policy::{parse_cases, run_cases, Policy};
    /// use serde_json::json;
    ///
    /// let rule = |sub: &str| json!({"services": ["*"],
    ///     "claims": {"iss": "https://ci.example", "aud": "registry", "sub": sub}});
    /// let policy = Policy::parse(&json!({"kind": "oidc",
    ///     "rules": [rule("repo:acme/*"), rule("repo:other/*")]})).unwrap().policy;
    /// let token = |sub: &str| json!({"iss": "https://ci.example", "aud": "registry", "sub": sub});
    /// let cases = parse_cases(&json!([
    ///     {"name": "acme", "claims": token("repo:acme/api"), "expect": "allow", "rule": 0},
    ///     {"name": "evil", "claims": token("repo:evil/api"), "expect": "allow"},
    /// ])).unwrap();
    /// let run = run_cases(&policy, &cases);
    /// assert_eq!(
    ///     run.report(&cases).to_string(),
    ///     "PASS acme: allow by rule 0\nFAIL evil: deny (claim-mismatch)\n\
    ///      rules no case exercised: /rules/1\n"
    /// );
    /// assert_eq!(run.report(&cases).to_json()["cases"][1],
    ///     json!({"name": "evil", "passed": false, "decision": "deny", "rule": null}));
    /// ```
    pub fn report<'a>(&'a self, cases: &'a [TestCase]) -> RunReport<'a> {
        RunReport { run: self, cases }
    }
}

impl RunReport<'_> {
    /// `{cases: [{name, passed, decision: "allow"|"deny", rule}], uncoveredRules: [pointer]}`,
    /// the output of `registry policy test --format json`.
    pub fn to_json(&self) -> Value {
        let cases: Vec<Value> = self
            .cases
            .iter()
            .zip(&self.run.outcomes)
            .map(|(case, outcome)| {
                let e = &outcome.explanation;
                json!({"name": case.name, "passed": outcome.passed,
                    "decision": if e.allowed { "allow" } else { "deny" }, "rule": e.rule})
            })
            .collect();
        json!({"cases": cases, "uncoveredRules": self.run.uncovered})
    }
}

impl fmt::Display for RunReport<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (case, outcome) in self.cases.iter().zip(&self.run.outcomes) {
            let verdict = if outcome.passed { "PASS" } else { "FAIL" };
            write!(f, "{verdict} {}: ", case.name)?;
            let e = &outcome.explanation;
            match e.rule {
                Some(rule) if e.allowed => writeln!(f, "allow by rule {rule}")?,
                _ if e.allowed => writeln!(f, "allow")?,
                _ => writeln!(
                    f,
                    "deny ({})",
                    e.reasons.first().map_or("no reason", |r| r.code.as_str())
                )?,
            }
        }
        if !self.run.uncovered.is_empty() {
            writeln!(
                f,
                "rules no case exercised: {}",
                self.run.uncovered.join(", ")
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::{compare, lint_document, parse_cases, run_cases, Policy, ReasonCode, Witness};
    use serde_json::{json, Value};

    fn policy(document: Value) -> Policy {
        Policy::parse(&document).unwrap().policy
    }

    fn oidc(rules: &[(&str, &str)]) -> Policy {
        let rules: Vec<Value> = rules
            .iter()
            .map(|(sub, service)| {
                json!({"services": [service],
                    "claims": {"iss": "https://ci.example", "aud": "registry", "sub": sub}})
            })
            .collect();
        policy(json!({"kind": "oidc", "rules": rules, "ip_allowlist": ["203.0.113.0/24"]}))
    }

    fn token(sub: &str) -> Value {
        json!({"iss": "https://ci.example", "aud": "registry", "sub": sub})
    }

    #[test]
    fn explanations_read_as_the_cli_prints_them() {
        let static_policy = policy(json!({"kind": "static", "services": ["api-acme"]}));
        assert_eq!(
            static_policy
                .explain(None, Some("api-acme"), None, None)
                .to_string(),
            "allow"
        );
        let p = oidc(&[("repo:acme/api", "api-acme")]);
        let outside: std::net::IpAddr = "198.51.100.1".parse().unwrap();
        let refused = p.explain(
            token("repo:acme/api").as_object(),
            Some("api-acme"),
            outside,
            None,
        );
        assert_eq!(refused.reasons[0].code, ReasonCode::AddressNotAllowed);
        assert_eq!(
            refused.to_string(),
            "deny\n  address-not-allowed /ip_allowlist: the address 198.51.100.1 is outside the \
             ip_allowlist"
        );
        // A reason with no pointer reads `-`.
        let mut no_pointer = refused.reasons[0].clone();
        no_pointer.pointer = None;
        assert!(no_pointer
            .to_string()
            .starts_with("address-not-allowed -: "));
    }

    #[test]
    fn comparisons_name_every_witness_and_what_is_unproven() {
        let old = oidc(&[("repo:acme/api:*", "api-acme")]);
        let wider = oidc(&[("repo:acme/*", "api-acme")]);
        let comparison = compare(&old, &wider);
        let text = comparison.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "widens: NEW admits requests OLD refuses");
        assert_eq!(lines.len(), 1 + comparison.witnesses.len());
        let witness = &comparison.witnesses[0];
        assert_eq!(lines[1], format!("  {witness}"));
        assert!(
            lines[1].starts_with("  rule 0 of NEW admits claims {\"iss\":\"https://ci.example\"")
        );
        assert!(lines[1].ends_with(" on service \"api-acme\" from 203.0.113.0"));

        let undetermined = compare(
            &oidc(&[("repo:?*", "api-acme")]),
            &oidc(&[("repo:*a", "api-acme")]),
        );
        assert_eq!(
            undetermined.to_string(),
            "undetermined: no request was found that NEW admits and OLD refuses, and none is \
             ruled out for /rules/0"
        );

        let mut listing = Witness {
            rule: None,
            claims: None,
            service: None,
            ip: None,
            action: None,
        };
        assert_eq!(
            listing.to_string(),
            "the policy of NEW admits a static token on no one service"
        );
        listing.action = Some(crate::Action::AuditRead);
        assert_eq!(
            listing.to_string(),
            "the policy of NEW admits a static token on no one service for audit:read"
        );
        assert_eq!(listing.to_json()["action"], "audit:read");
    }

    #[test]
    fn findings_read_as_severity_code_pointer_message() {
        let findings = lint_document(&json!({"kind": "oidc", "rules": [{"services": ["*"],
            "claims": {"iss": "https://ci.example", "aud": "registry", "sub": "*"}}]}));
        assert_eq!(
            findings[0].to_string(),
            format!(
                "warning any-subject /rules/0/claims/sub: {}",
                findings[0].message
            )
        );
        let invalid = lint_document(&json!([]));
        assert!(invalid[0].to_string().starts_with("error schema \"\": "));
    }

    #[test]
    fn a_run_reports_each_case_and_the_rules_no_case_exercised() {
        let p = oidc(&[("repo:acme/api", "api-acme"), ("repo:acme/web", "web-acme")]);
        let cases = parse_cases(&json!([
            {"name": "api", "claims": token("repo:acme/api"), "service": "api-acme",
             "expect": "allow", "rule": 0},
            {"name": "fork", "claims": token("repo:evil/api"), "service": "api-acme",
             "expect": "deny"},
            {"name": "wrong rule", "claims": token("repo:acme/api"), "service": "api-acme",
             "expect": "allow", "rule": 1},
        ]))
        .unwrap();
        let run = run_cases(&p, &cases);
        assert_eq!(
            run.report(&cases).to_string(),
            "PASS api: allow by rule 0\nPASS fork: deny (claim-mismatch)\nFAIL wrong rule: \
             allow by rule 0\nrules no case exercised: /rules/1\n"
        );
        assert_eq!(
            run.report(&cases).to_json(),
            json!({"cases": [
                {"name": "api", "passed": true, "decision": "allow", "rule": 0},
                {"name": "fork", "passed": true, "decision": "deny", "rule": null},
                {"name": "wrong rule", "passed": false, "decision": "allow", "rule": 0}],
                "uncoveredRules": ["/rules/1"]})
        );
        // A static token allowed without a rule; an empty run is the empty text.
        let static_policy = policy(json!({"kind": "static", "services": ["*"]}));
        let none = run_cases(&static_policy, &[]);
        assert_eq!(none.report(&[]).to_string(), "");
        assert_eq!(
            none.report(&[]).to_json(),
            json!({"cases": [], "uncoveredRules": []})
        );
    }
}
