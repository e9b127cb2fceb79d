//! `ClaimPattern` (the glob of docs/api.md, "Authentication") against a plain dynamic-programming matcher.
//!
//! Input: `pattern NUL value` (without a NUL byte the whole input is the pattern). Checked:
//! the compiled matcher agrees with the reference on the value; the pattern matches its own
//! instantiations (`*` → "", `*` → "*?x", `?` → one character); the claim-typed entry points
//! agree with the string one; `is_exact` and `accepts_any_string` tell the truth.
#![no_main]

use libfuzzer_sys::fuzz_target;
use registry_domain::policy::ClaimPattern;
use serde_json::Value;

/// Largest `pattern × value` the quadratic reference is run on (keeps each input fast).
const REFERENCE_BUDGET: usize = 1 << 18;

/// `*` any run of characters, `?` exactly one, all else literal; anchored; by Unicode scalar.
fn reference(pattern: &[char], value: &[char]) -> bool {
    let mut matched = vec![false; value.len() + 1];
    matched[0] = true;
    for &p in pattern {
        let mut next = vec![false; value.len() + 1];
        match p {
            '*' => {
                let mut any = false;
                for j in 0..=value.len() {
                    any |= matched[j];
                    next[j] = any;
                }
            }
            '?' => next[1..].copy_from_slice(&matched[..value.len()]),
            c => {
                for j in 1..=value.len() {
                    next[j] = matched[j - 1] && value[j - 1] == c;
                }
            }
        }
        matched = next;
    }
    matched[value.len()]
}

fn instantiate(pattern: &str, star: &str, question: char) -> String {
    let mut out = String::new();
    for c in pattern.chars() {
        match c {
            '*' => out.push_str(star),
            '?' => out.push(question),
            c => out.push(c),
        }
    }
    out
}

fn check(compiled: &ClaimPattern, pattern: &str, value: &str) {
    let got = compiled.matches_str(value);
    let p: Vec<char> = pattern.chars().collect();
    let v: Vec<char> = value.chars().collect();
    if p.len().saturating_mul(v.len().max(1)) <= REFERENCE_BUDGET {
        assert_eq!(
            got,
            reference(&p, &v),
            "pattern {pattern:?} on {value:?}: the matcher and the reference disagree"
        );
    }
    let claim = Value::String(value.to_owned());
    assert_eq!(
        compiled.matches(Some(&claim)),
        got,
        "string claim {value:?}"
    );
    let array = Value::Array(vec![Value::Null, claim]);
    assert_eq!(compiled.matches(Some(&array)), got, "array claim {value:?}");
    if compiled.is_exact() {
        assert_eq!(
            got,
            pattern == value,
            "exact pattern {pattern:?} on {value:?}"
        );
    }
    if compiled.accepts_any_string() {
        assert!(got, "{pattern:?} accepts any string but refused {value:?}");
    }
}

fuzz_target!(|data: &[u8]| {
    let (pattern, value) = match data.iter().position(|b| *b == 0) {
        Some(i) => (&data[..i], Some(&data[i + 1..])),
        None => (data, None),
    };
    let pattern = String::from_utf8_lossy(pattern);
    let compiled = ClaimPattern::new(&pattern);
    assert_eq!(compiled.as_str(), pattern);
    for (star, question) in [("", 'a'), ("*?x", '?'), ("ééé", '\u{10FFFF}')] {
        let own = instantiate(&pattern, star, question);
        assert!(
            compiled.matches_str(&own),
            "{pattern:?} refused its own instantiation {own:?}"
        );
        check(&compiled, &pattern, &own);
    }
    if let Some(value) = value {
        check(&compiled, &pattern, &String::from_utf8_lossy(value));
    }
    // Never matched, whatever the pattern (docs/api.md, "Authentication").
    assert!(!compiled.matches(None));
    assert!(!compiled.matches(Some(&Value::Null)));
    assert!(!compiled.matches(Some(&serde_json::json!({"a": "b"}))));
    assert!(!compiled.matches(Some(&serde_json::json!(1.5))));
});
