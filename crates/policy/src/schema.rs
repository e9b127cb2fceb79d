//! The JSON Schema of the policy document and the translation of its errors into [`Violation`]s.

use crate::violation::escape_token;
use crate::{Violation, Violations};
use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::{ValidationError, Validator};
use serde_json::Value;
use std::sync::OnceLock;

/// The policy document schema, version 1 (JSON Schema draft 2020-12), as published at
/// `{schema_url}`. Its `$id` is a placeholder (`https://registry.invalid/…`) that the server
/// replaces with its own address when it serves the file.
///
/// The crate reads its own copy, `crates/policy/schemas/service-account-policy/v1.json`, so
/// that the packaged crate builds on its own; a test keeps it equal to the workspace's
/// `schemas/service-account-policy/v1.json`.
///
/// ```
/// let schema: serde_json::Value =
///     serde_json::from_str(registry_policy::SCHEMA_SOURCE).unwrap();
/// assert_eq!(schema["$id"], "https://registry.invalid/schemas/service-account-policy/v1.json");
/// ```
pub const SCHEMA_SOURCE: &str = include_str!("../schemas/service-account-policy/v1.json");

/// The placeholder `$id` of [`SCHEMA_SOURCE`].
pub const SCHEMA_PLACEHOLDER_ID: &str =
    "https://registry.invalid/schemas/service-account-policy/v1.json";

/// The schema as JSON, parsed once.
///
/// ```
/// let schema = registry_policy::schema();
/// assert_eq!(schema["properties"]["kind"]["enum"], serde_json::json!(["static", "oidc"]));
/// ```
pub fn schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| serde_json::from_str(SCHEMA_SOURCE).expect("the schema file is JSON"))
}

/// The policy document schema, version 2 (JSON Schema draft 2020-12): version 1 plus a
/// required `actions` (top level for `kind: static`, in every rule for `kind: oidc`), a
/// non-empty array of unique action names or `"*"`. A document is version 2 when its
/// `$schema` is a string ending in [`crate::SCHEMA_V2_PATH`]; [`crate::Policy::parse`] checks it
/// against this schema then, and against [`SCHEMA_SOURCE`] otherwise. Its `$id` is a placeholder
/// ([`SCHEMA_V2_PLACEHOLDER_ID`]) that the server replaces with its own address.
///
/// The crate reads its own copy, `crates/policy/schemas/service-account-policy/v2.json`; a test
/// keeps it equal to the workspace's `schemas/service-account-policy/v2.json`.
///
/// ```
/// let schema: serde_json::Value =
///     serde_json::from_str(registry_policy::SCHEMA_V2_SOURCE).unwrap();
/// assert_eq!(schema["$id"], registry_policy::SCHEMA_V2_PLACEHOLDER_ID);
/// ```
pub const SCHEMA_V2_SOURCE: &str = include_str!("../schemas/service-account-policy/v2.json");

/// The placeholder `$id` of [`SCHEMA_V2_SOURCE`].
pub const SCHEMA_V2_PLACEHOLDER_ID: &str =
    "https://registry.invalid/schemas/service-account-policy/v2.json";

/// The version-2 schema as JSON, parsed once.
///
/// ```
/// let schema = registry_policy::schema_v2();
/// assert_eq!(schema["$defs"]["Actions"]["items"]["enum"][8], "*");
/// ```
pub fn schema_v2() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        serde_json::from_str(SCHEMA_V2_SOURCE).expect("the version-2 schema file is JSON")
    })
}

fn validator(version: u8) -> &'static Validator {
    static V1: OnceLock<Validator> = OnceLock::new();
    static V2: OnceLock<Validator> = OnceLock::new();
    let (cell, schema) = match version {
        1 => (&V1, schema()),
        _ => (&V2, schema_v2()),
    };
    cell.get_or_init(|| {
        jsonschema::draft202012::new(schema).expect("the schema file is a valid 2020-12 schema")
    })
}

/// Every violation of `document` against the schema of its `version`, in plain words; empty
/// when it conforms.
pub(super) fn check(document: &Value, version: u8) -> Violations {
    let validator = validator(version);
    if validator.is_valid(document) {
        return Vec::new();
    }
    let errors: Vec<ValidationError<'_>> = validator.iter_errors(document).collect();
    let mut out = Violations::new();
    for error in &errors {
        let at = error.instance_path().as_str();
        // An empty string also fails the address pattern; "must not be empty" says it all.
        if matches!(error.kind(), ValidationErrorKind::Pattern { .. })
            && errors.iter().any(|e| {
                e.instance_path().as_str() == at
                    && matches!(e.kind(), ValidationErrorKind::MinLength { .. })
            })
        {
            continue;
        }
        for v in translate(error, document, version) {
            if !out.contains(&v) {
                out.push(v);
            }
        }
    }
    out
}

/// Where in the document an instance path points, for choosing words.
#[derive(Debug, PartialEq, Eq)]
enum Place {
    Root,
    Rule,
    Claims,
    Other,
}

fn place(at: &str) -> Place {
    let segments: Vec<&str> = at.split('/').skip(1).collect();
    match segments.as_slice() {
        [] => Place::Root,
        ["rules", i] if i.parse::<usize>().is_ok() => Place::Rule,
        ["rules", i, "claims"] if i.parse::<usize>().is_ok() => Place::Claims,
        _ => Place::Other,
    }
}

/// The unescaped last token of a pointer (`"rules"` for `/rules`).
fn last_token(at: &str) -> String {
    at.rsplit('/')
        .next()
        .unwrap_or_default()
        .replace("~1", "/")
        .replace("~0", "~")
}

fn document_kind(document: &Value) -> &str {
    document.get("kind").and_then(Value::as_str).unwrap_or("?")
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Whether `at` is an entry of an `actions` list (`/actions/1`, `/rules/0/actions/0`).
fn is_action_entry(at: &str) -> bool {
    at.rsplit_once('/')
        .is_some_and(|(parent, i)| parent.ends_with("/actions") && i.parse::<usize>().is_ok())
}

fn translate(error: &ValidationError<'_>, document: &Value, version: u8) -> Vec<Violation> {
    let at = error.instance_path().as_str();
    let instance = error.instance();
    let one = |message: String| vec![Violation::new(at, message)];
    match error.kind() {
        ValidationErrorKind::Required { property } => {
            let name = property.as_str().unwrap_or_default();
            let pointer = format!("{at}/{}", escape_token(name));
            let message = match (place(at), name) {
                (Place::Root, "kind") => "\"kind\" is required: \"static\" or \"oidc\"".to_owned(),
                (Place::Root, "services") => format!(
                    "\"services\" is required when kind is \"{}\": list the services the \
                     account may act on, or \"*\" for all",
                    document_kind(document)
                ),
                (Place::Root, "rules") => format!(
                    "\"rules\" is required when kind is \"{}\": at least one rule naming the \
                     token issuer, audience and subject",
                    document_kind(document)
                ),
                (Place::Root, "actions") => format!(
                    "\"actions\" is required when kind is \"static\" in a version-2 policy: \
                     list the actions the account may take; {}",
                    crate::actions::accepted_values()
                ),
                (Place::Rule, "actions") => format!(
                    "every rule of a version-2 policy needs \"actions\": the actions it allows; \
                     {}",
                    crate::actions::accepted_values()
                ),
                (Place::Rule, _) => format!("every rule needs \"{name}\""),
                (Place::Claims, "iss") => {
                    "claim \"iss\" is required: the exact issuer URL of the tokens".to_owned()
                }
                (Place::Claims, "aud") => {
                    "claim \"aud\" is required: the audience the tokens must carry".to_owned()
                }
                (Place::Claims, "sub") => {
                    "claim \"sub\" is required: the subject the tokens must carry".to_owned()
                }
                _ => format!("\"{name}\" is required"),
            };
            vec![Violation::new(pointer, message)]
        }
        ValidationErrorKind::AdditionalProperties { unexpected } => {
            let allowed = match (place(at), version) {
                (Place::Root, 1) => "$schema, kind, services, rules, ip_allowlist",
                (Place::Root, _) if document_kind(document) == "oidc" => {
                    "$schema, kind, rules, ip_allowlist"
                }
                (Place::Root, _) => "$schema, kind, services, actions, rules, ip_allowlist",
                (Place::Rule, 1) => "services, claims",
                (Place::Rule, _) => "services, actions, claims",
                _ => "none",
            };
            unexpected
                .iter()
                .map(|name| {
                    Violation::new(
                        format!("{at}/{}", escape_token(name)),
                        format!("unknown property \"{name}\"; allowed here: {allowed}"),
                    )
                })
                .collect()
        }
        ValidationErrorKind::FalseSchema => one(format!(
            "\"{}\" is not allowed when kind is \"{}\"{}",
            last_token(at),
            document_kind(document),
            match (document_kind(document), last_token(at).as_str()) {
                ("oidc", "actions") => ": each rule lists its own actions",
                ("oidc", _) => ": each rule lists its own services",
                _ => ": rules belong to oidc policies",
            }
        )),
        ValidationErrorKind::Enum { .. } if is_action_entry(at) => one(format!(
            "{instance} is not an action; {}",
            crate::actions::accepted_values()
        )),
        ValidationErrorKind::Enum { .. } => one(format!(
            "kind must be \"static\" or \"oidc\", not {instance}"
        )),
        ValidationErrorKind::Type { kind } => {
            let expected = match kind {
                TypeKind::Single(t) => match t.to_string().as_str() {
                    "object" => "an object".to_owned(),
                    "array" => "an array".to_owned(),
                    other => format!("a {other}"),
                },
                TypeKind::Multiple(ts) => {
                    let names: Vec<String> = ts.iter().map(|t| t.to_string()).collect();
                    format!("one of {}", names.join(", "))
                }
            };
            let hint = if place_of_claim(at).is_some() {
                " (write numbers and booleans as text, e.g. \"1\" or \"true\")"
            } else {
                ""
            };
            one(format!(
                "{} must be {expected}{hint}, not {}",
                describe(at),
                type_name(instance)
            ))
        }
        ValidationErrorKind::MinItems { limit } => one(format!(
            "\"{}\" must list at least {limit} entr{}",
            last_token(at),
            if *limit == 1 { "y" } else { "ies" }
        )),
        // The size limits the schema states are `limits::check_policy`'s to say, in its words
        // (`Policy::parse` runs both): once, and with every other problem of the member kept.
        ValidationErrorKind::MaxItems { .. } if at == "/rules" || at.ends_with("/services") => {
            Vec::new()
        }
        ValidationErrorKind::MaxLength { .. } | ValidationErrorKind::MaxProperties { .. } => {
            Vec::new()
        }
        ValidationErrorKind::MaxItems { limit } => one(format!(
            "\"{}\" lists {} entries; at most {limit} are allowed",
            last_token(at),
            instance.as_array().map_or(0, Vec::len)
        )),
        ValidationErrorKind::MinLength { .. } => {
            one(format!("{} must not be an empty string", describe(at)))
        }
        ValidationErrorKind::UniqueItems => {
            let duplicate = instance.as_array().and_then(|items| {
                items
                    .iter()
                    .enumerate()
                    .find(|(i, v)| items[..*i].contains(v))
                    .map(|(_, v)| v.to_string())
            });
            one(format!(
                "\"{}\" lists {} more than once; entries must be unique",
                last_token(at),
                duplicate.unwrap_or_else(|| "an entry".to_owned())
            ))
        }
        ValidationErrorKind::Pattern { .. } if place_of_claim(at) == Some("iss") => one(format!(
            "claim \"iss\" must be the exact issuer URL: \"*\" and \"?\" are not allowed in it \
             (found {instance})"
        )),
        ValidationErrorKind::Pattern { .. } if at.starts_with("/ip_allowlist/") => one(format!(
            "{instance} is not an IPv4 or IPv6 address or CIDR range \
             (e.g. 203.0.113.7, 203.0.113.0/24, 2001:db8::/32)"
        )),
        _ => one(error.to_string()),
    }
}

/// The claim name when `at` is `/rules/N/claims/NAME`.
fn place_of_claim(at: &str) -> Option<&str> {
    let (parent, name) = at.rsplit_once('/')?;
    (place(parent) == Place::Claims).then_some(name)
}

/// Names the value at `at` for a sentence: `the policy`, `claim "sub"`, `rule 1`,
/// `entry 2 of "services"`, `"kind"`.
fn describe(at: &str) -> String {
    if at.is_empty() {
        return "the policy".to_owned();
    }
    if let Some(claim) = place_of_claim(at) {
        return format!("claim \"{}\"", claim.replace("~1", "/").replace("~0", "~"));
    }
    let segments: Vec<&str> = at.split('/').skip(1).collect();
    match segments.as_slice() {
        ["rules", i] if i.parse::<usize>().is_ok() => format!("rule {i}"),
        [.., list, i] if i.parse::<usize>().is_ok() => format!("entry {i} of \"{list}\""),
        _ => format!("\"{}\"", last_token(at)),
    }
}

#[cfg(test)]
mod tests {
    use super::{validator, SCHEMA_SOURCE, SCHEMA_V2_SOURCE};
    use std::path::Path;

    /// The published schemas state the size limits, so a document valid under them is not
    /// refused for its size; a document over one is refused once, in the limit's words.
    #[test]
    fn the_schemas_state_the_size_limits_and_a_refusal_says_it_once() {
        use crate::limits::{
            MAX_CLAIMS_PER_RULE, MAX_PATTERN_CHARS, MAX_RULES, MAX_SERVICES_ENTRIES,
        };
        use serde_json::json;
        let services: Vec<String> = (0..=MAX_SERVICES_ENTRIES)
            .map(|i| format!("s{i}-*"))
            .collect();
        let rule = |sub: String| json!({"services": ["*"], "claims": {"iss": "https://ci.example", "aud": "a", "sub": sub}});
        let mut claims = serde_json::Map::new();
        for i in 0..=MAX_CLAIMS_PER_RULE {
            claims.insert(format!("c{i}"), json!("x"));
        }
        claims.insert("iss".into(), json!("https://ci.example"));
        let oversized = [
            ("/services", json!({"kind": "static", "services": services})),
            (
                "/rules",
                json!({"kind": "oidc", "rules": vec![rule("s".into()); MAX_RULES + 1]}),
            ),
            (
                "/rules/0/claims/sub",
                json!({"kind": "oidc", "rules": [rule("x".repeat(MAX_PATTERN_CHARS + 1))]}),
            ),
            (
                "/rules/0/claims",
                json!({"kind": "oidc", "rules": [{"services": ["*"], "claims": claims}]}),
            ),
        ];
        for (pointer, document) in oversized {
            assert!(
                !validator(1).is_valid(&document),
                "the schema allows {pointer}"
            );
            let refused = crate::Policy::parse(&document)
                .unwrap_err()
                .into_violations();
            let at: Vec<_> = refused.iter().filter(|v| v.pointer == pointer).collect();
            assert_eq!(at.len(), 1, "{pointer}: {refused:?}");
            assert!(at[0].message.contains("at most"), "{:?}", at[0]);
        }
    }

    #[test]
    fn the_crate_copies_are_the_published_schemas() {
        for (file, source) in [("v1.json", SCHEMA_SOURCE), ("v2.json", SCHEMA_V2_SOURCE)] {
            let published = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../schemas/service-account-policy")
                .join(file);
            // Built from the packaged crate, there is no workspace to compare with.
            let Ok(published) = std::fs::read_to_string(published) else {
                return;
            };
            assert!(
                published == source,
                "schemas/service-account-policy/{file} and its copy in crates/policy/schemas \
                 differ: change both"
            );
        }
    }
}
