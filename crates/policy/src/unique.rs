//! Entries unique as they are matched, which JSON Schema's `uniqueItems` (exact equality) cannot
//! say: service names and patterns are matched without regard to case, so `api-acme` and
//! `API-ACME` are one entry; an `ip_allowlist` entry is an address range, so `2001:db8::1`,
//! `2001:DB8::1` and `2001:db8::1/128` are one, and so are `127.0.0.1` and its IPv4-mapped
//! spelling `::ffff:127.0.0.1` (one client, [`crate::IpAllowlist::allows`]). [`crate::Policy::parse`] refuses the second of
//! each; a stored document is served as it is.

use crate::ip::as_v4;
use crate::violation::Violation;
use crate::Violations;
use ipnetwork::IpNetwork;
use serde_json::Value;

/// The entries of `document` that repeat an earlier entry of their list, each with its pointer.
pub(crate) fn check_unique(document: &Value) -> Violations {
    let mut problems = Violations::new();
    let strings = |value: Option<&Value>| -> Vec<Option<String>> {
        (value.and_then(Value::as_array).into_iter().flatten())
            .map(|v| v.as_str().map(str::to_owned))
            .collect()
    };
    let mut lists = vec![("/services".to_owned(), strings(document.get("services")))];
    if let Some(rules) = document.get("rules").and_then(Value::as_array) {
        for (r, rule) in rules.iter().enumerate() {
            lists.push((
                format!("/rules/{r}/services"),
                strings(rule.get("services")),
            ));
        }
    }
    for (pointer, entries) in lists {
        // Exact repeats are the schema's `uniqueItems` to report, for the whole list.
        if exact_repeats(&entries) {
            continue;
        }
        let folded: Vec<Option<String>> = (entries.iter())
            .map(|e| e.as_deref().map(str::to_ascii_lowercase))
            .collect();
        repeated(
            &folded,
            &pointer,
            "service names are matched without regard to case",
            &mut problems,
        );
    }
    let addresses = strings(document.get("ip_allowlist"));
    if exact_repeats(&addresses) {
        return problems;
    }
    let ranges: Vec<Option<IpNetwork>> = addresses
        .iter()
        .map(|e| e.as_deref().and_then(|e| e.parse::<IpNetwork>().ok()))
        .map(|n| n.and_then(|n| IpNetwork::new(n.network(), n.prefix()).ok()))
        .map(|n| n.map(|n| as_v4(n).map_or(n, IpNetwork::V4)))
        .collect();
    repeated(
        &ranges,
        "/ip_allowlist",
        "it is the same address range",
        &mut problems,
    );
    problems
}

/// Whether an entry of `entries` is exactly an earlier one.
fn exact_repeats(entries: &[Option<String>]) -> bool {
    (entries.iter().enumerate()).any(|(i, e)| e.is_some() && entries[..i].contains(e))
}

/// A problem at `pointer/i` for each entry `i` equal to an earlier one (entries that are `None`
/// are other checks' business).
fn repeated<T: PartialEq>(
    entries: &[Option<T>],
    pointer: &str,
    why: &str,
    problems: &mut Violations,
) {
    for (i, entry) in entries.iter().enumerate() {
        let Some(entry) = entry else { continue };
        if let Some(first) = entries[..i].iter().position(|e| e.as_ref() == Some(entry)) {
            problems.push(Violation::new(
                format!("{pointer}/{i}"),
                format!("entry {i} repeats entry {first} ({why})"),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn entries_repeated_as_matched_are_refused_with_their_pointer() {
        let document = json!({"kind": "static", "services": ["api-acme", "web-*", "API-ACME"],
            "ip_allowlist": ["2001:db8::1", "10.0.0.0/8", "2001:DB8::1/128", "10.1.2.3/8"]});
        let pointers: Vec<String> = check_unique(&document)
            .into_iter()
            .map(|v| v.pointer)
            .collect();
        assert_eq!(
            pointers,
            ["/services/2", "/ip_allowlist/2", "/ip_allowlist/3"]
        );
        let oidc =
            json!({"kind": "oidc", "rules": [{"services": ["a-*", "A-*"]}, {"services": ["a-*"]}]});
        let pointers: Vec<String> = check_unique(&oidc).into_iter().map(|v| v.pointer).collect();
        assert_eq!(pointers, ["/rules/0/services/1"]);
        assert!(check_unique(&json!({"kind": "static", "services": ["a", "b"]})).is_empty());
        // An IPv4 range and its IPv4-mapped spelling let the same clients in.
        let mapped = json!({"kind": "static", "services": ["a"],
            "ip_allowlist": ["127.0.0.1", "::ffff:127.0.0.1/128", "10.0.0.0/8",
                "::ffff:10.0.0.0/104", "::ffff:0:0/95"]});
        let pointers: Vec<String> = check_unique(&mapped)
            .into_iter()
            .map(|v| v.pointer)
            .collect();
        assert_eq!(pointers, ["/ip_allowlist/1", "/ip_allowlist/3"]);
    }
}
