//! Policy test cases (`registry policy test`): what a policy must answer for given claims,
//! service and address, checked against [`Policy::explain`], with the rules no case exercised.

use super::{Action, Explanation, Policy, PolicyError};
use serde_json::Value;
use std::collections::BTreeSet;
use std::net::IpAddr;

/// One case: the request, and the decision (and optionally the admitting rule) expected.
#[derive(Debug, Clone, PartialEq)]
pub struct TestCase {
    /// The case's name, for the report.
    pub name: String,
    /// The verified claims of the request.
    pub claims: serde_json::Map<String, Value>,
    /// The service the request acts on, if any.
    pub service: Option<String>,
    /// The client's address, if the case names one.
    pub ip: Option<IpAddr>,
    /// The action the request needs, if the case names one.
    pub action: Option<Action>,
    /// Whether the policy must allow it.
    pub allow: bool,
    /// The rule that must admit it, if the case says.
    pub rule: Option<usize>,
}

/// A case's outcome.
#[derive(Debug, Clone)]
pub struct CaseOutcome {
    /// The policy's answer.
    pub explanation: Explanation,
    /// Whether it is the expected one.
    pub passed: bool,
}

/// A whole run: each case's outcome, in order, and the rules no case was admitted by.
#[derive(Debug, Clone)]
pub struct TestRun {
    /// One per case.
    pub outcomes: Vec<CaseOutcome>,
    /// Pointers (`/rules/{i}`) of the rules that admitted no case.
    pub uncovered: Vec<String>,
}

impl TestRun {
    /// How many cases failed.
    pub fn failed(&self) -> usize {
        self.outcomes.iter().filter(|o| !o.passed).count()
    }
}

/// The members a case may have.
const CASE_MEMBERS: [&str; 7] = [
    "name", "claims", "service", "ip", "action", "expect", "rule",
];

/// Reads a JSON list of cases (`[{"name", "claims", "expect": "allow"|"deny", "service"?,
/// "ip"?, "action"?, "rule"?}]`); the error ([`PolicyError::Cases`]) names the first case that is not
/// one, and why (`case 2: claims is not an object`), or says `is not a JSON list of cases`.
///
/// ```
/// use registry_policy::{parse_cases, run_cases, Policy};
/// use serde_json::json;
///
/// let policy = Policy::parse(&json!({"kind": "oidc", "rules": [{"services": ["*"],
///     "claims": {"iss": "https://issuer.example", "aud": "registry", "sub": "repo:acme/*"}}]}))
///     .unwrap().policy;
/// let token = |sub: &str| json!({"iss": "https://issuer.example", "aud": "registry", "sub": sub});
/// let cases = parse_cases(&json!([
///     {"name": "acme", "claims": token("repo:acme/api"), "expect": "allow", "rule": 0},
///     {"name": "other", "claims": token("repo:other/x"), "expect": "deny"},
/// ])).unwrap();
/// let run = run_cases(&policy, &cases);
/// assert_eq!(run.failed(), 0);
/// assert!(run.uncovered.is_empty());
/// ```
pub fn parse_cases(document: &Value) -> Result<Vec<TestCase>, PolicyError> {
    let Value::Array(items) = document else {
        return Err(PolicyError::Cases("is not a JSON list of cases".into()));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let wrong = |what: &str| PolicyError::Cases(format!("case {i}: {what}"));
            // A mistyped member (`sevrice`) would leave the case judged without it.
            if let Some(unknown) = (item.as_object().into_iter().flatten())
                .map(|(member, _)| member)
                .find(|member| !CASE_MEMBERS.contains(&member.as_str()))
            {
                return Err(wrong(&format!(
                    "{unknown:?} is not a member of a case (accepted: {})",
                    CASE_MEMBERS.join(", ")
                )));
            }
            let name = item["name"]
                .as_str()
                .ok_or_else(|| wrong("name is not a string"))?;
            let claims = item["claims"]
                .as_object()
                .ok_or_else(|| wrong("claims is not an object"))?;
            let allow = match item["expect"].as_str() {
                Some("allow") => true,
                Some("deny") => false,
                _ => return Err(wrong("expect is not \"allow\" or \"deny\"")),
            };
            let service = match &item["service"] {
                Value::Null => None,
                Value::String(s) => Some(s.clone()),
                _ => return Err(wrong("service is not a string")),
            };
            let ip = match &item["ip"] {
                Value::Null => None,
                Value::String(s) => Some(s.parse().map_err(|_| wrong("ip is not an address"))?),
                _ => return Err(wrong("ip is not a string")),
            };
            let action = match &item["action"] {
                Value::Null => None,
                Value::String(s) => Some(
                    s.parse::<Action>()
                        .map_err(|e| wrong(&format!("action {e}")))?,
                ),
                _ => return Err(wrong("action is not a string")),
            };
            let rule = match &item["rule"] {
                Value::Null => None,
                v => Some(
                    v.as_u64()
                        .and_then(|r| usize::try_from(r).ok())
                        .ok_or_else(|| wrong("rule is not a rule index"))?,
                ),
            };
            Ok(TestCase {
                name: name.to_owned(),
                claims: claims.clone(),
                service,
                ip,
                action,
                allow,
                rule,
            })
        })
        .collect()
}

/// Runs every case against `policy`: a case passes when the decision is the expected one and,
/// if it names a rule, that rule admitted it.
pub fn run_cases(policy: &Policy, cases: &[TestCase]) -> TestRun {
    let mut exercised = BTreeSet::new();
    let outcomes = cases
        .iter()
        .map(|case| {
            // A case on the whole customer is judged as the registry judges such a request.
            let service = crate::judged_service(case.service.as_deref(), case.action);
            let explanation = policy.explain(Some(&case.claims), service, case.ip, case.action);
            exercised.extend(explanation.rule);
            let passed = explanation.allowed == case.allow
                && (case.rule.is_none() || case.rule == explanation.rule);
            CaseOutcome {
                explanation,
                passed,
            }
        })
        .collect();
    let rules = policy
        .document()
        .get("rules")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let uncovered = (0..rules)
        .filter(|r| !exercised.contains(r))
        .map(|r| format!("/rules/{r}"))
        .collect();
    TestRun {
        outcomes,
        uncovered,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A mistyped member is refused, naming it: the case would be judged without it.
    #[test]
    fn a_case_with_a_member_of_no_case_is_refused() {
        let cases = json!([{"name": "x", "claims": {}, "expect": "allow", "sevrice": "api"}]);
        let refused = parse_cases(&cases).unwrap_err().to_string();
        assert!(
            refused.contains("case 0") && refused.contains("\"sevrice\""),
            "{refused}"
        );
        let fine = json!([{"name": "x", "claims": {}, "expect": "deny", "service": "api",
            "ip": "192.0.2.1", "action": "services:read", "rule": 0}]);
        assert_eq!(parse_cases(&fine).unwrap().len(), 1);
    }
}
