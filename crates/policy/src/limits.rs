//! The size limits of one policy document: what one customer can make every request (and every
//! compile) pay for. [`crate::Policy::parse`] checks them before it compiles any pattern,
//! beside the JSON Schema, so the registry's API, its command line and the Python module refuse
//! the same documents; [`crate::Policy::from_stored`] does not apply them (a policy saved under
//! other limits is served as it is).
//!
//! ```
//! use registry_policy::limits::{check_policy, MAX_RULES};
//! use registry_policy::Policy;
//! use serde_json::json;
//!
//! let rule = json!({"services": ["*"], "claims": {"iss": "https://ci.example", "aud": "a", "sub": "s"}});
//! let rules: Vec<_> = std::iter::repeat(rule).take(MAX_RULES + 1).collect();
//! let document = json!({"kind": "oidc", "rules": rules});
//! assert_eq!(check_policy(&document)[0].pointer, "/rules");
//! let refused = Policy::parse(&document).unwrap_err();
//! assert_eq!(refused.violations()[0].pointer, "/rules");
//! assert!(Policy::from_stored(&document).is_ok());
//! ```

use crate::violation::escape_token;
use crate::{Violation, Violations};
use serde_json::Value;

/// Largest policy document, in bytes of compact JSON.
pub const MAX_POLICY_BYTES: usize = 16 * 1024;
/// Most rules in one policy.
pub const MAX_RULES: usize = 50;
/// Most claims one rule lists (`iss` included).
pub const MAX_CLAIMS_PER_RULE: usize = 16;
/// Longest claim pattern, in characters: with matching linear in the claim's length for each
/// 64 pattern characters, this bounds a match at 8 passes over the claim.
pub const MAX_PATTERN_CHARS: usize = 512;
/// Most entries in one `services` list.
pub const MAX_SERVICES_ENTRIES: usize = 100;

/// The size limits of one policy document; every problem, each with a pointer into the
/// document (the server puts `/policy` in front). It reads the document only: it compiles
/// nothing, and costs time linear in the document's size.
///
/// ```
/// use registry_policy::limits::{check_policy, MAX_PATTERN_CHARS};
/// use serde_json::json;
///
/// let long = "*".repeat(MAX_PATTERN_CHARS + 1);
/// let document = json!({"kind": "oidc", "rules": [
///     {"services": ["*"], "claims": {"iss": "https://ci.example", "aud": "a", "sub": long}}
/// ]});
/// assert_eq!(check_policy(&document)[0].pointer, "/rules/0/claims/sub");
/// ```
pub fn check_policy(document: &Value) -> Violations {
    let mut problems = Violations::new();
    let bytes = document.to_string().len();
    if bytes > MAX_POLICY_BYTES {
        problems.push(Violation::new(
            "",
            format!("the policy is {bytes} bytes of JSON; at most {MAX_POLICY_BYTES} are accepted"),
        ));
    }
    let mut services_lists: Vec<(String, &Vec<Value>)> = Vec::new();
    if let Some(services) = document.get("services").and_then(Value::as_array) {
        services_lists.push(("/services".into(), services));
    }
    let rules = document.get("rules").and_then(Value::as_array);
    if let Some(rules) = rules {
        if rules.len() > MAX_RULES {
            problems.push(Violation::new(
                "/rules",
                format!("{} rules; a policy has at most {MAX_RULES}", rules.len()),
            ));
        }
        for (r, rule) in rules.iter().enumerate() {
            if let Some(services) = rule.get("services").and_then(Value::as_array) {
                services_lists.push((format!("/rules/{r}/services"), services));
            }
            let Some(claims) = rule.get("claims").and_then(Value::as_object) else {
                continue;
            };
            if claims.len() > MAX_CLAIMS_PER_RULE {
                problems.push(Violation::new(
                    format!("/rules/{r}/claims"),
                    format!(
                        "{} claims; a rule lists at most {MAX_CLAIMS_PER_RULE}",
                        claims.len()
                    ),
                ));
            }
            for (name, pattern) in claims {
                let chars = pattern.as_str().map_or(0, |p| p.chars().count());
                if chars > MAX_PATTERN_CHARS {
                    problems.push(Violation::new(
                        format!("/rules/{r}/claims/{}", escape_token(name)),
                        format!(
                            "the pattern is {chars} characters long; at most \
                             {MAX_PATTERN_CHARS} are accepted"
                        ),
                    ));
                }
            }
        }
    }
    for (pointer, entries) in services_lists {
        if entries.len() > MAX_SERVICES_ENTRIES {
            problems.push(Violation::new(
                pointer,
                format!(
                    "{} entries; a services list has at most {MAX_SERVICES_ENTRIES}",
                    entries.len()
                ),
            ));
        }
    }
    problems
}
