//! Service patterns (`services` entries) and the [`Scope`] a caller may act on.

use super::pattern::{Glob, Wildcards};
use std::borrow::Cow;

/// One compiled `services` list (ServicesPatterns), lower-cased at parse time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServiceSet {
    includes_all: bool,
    patterns: Box<[Glob]>,
}

impl ServiceSet {
    pub(crate) fn compile<'a>(entries: impl IntoIterator<Item = &'a str>) -> Self {
        let patterns: Box<[Glob]> = entries
            .into_iter()
            .map(|e| Glob::compile(&e.to_ascii_lowercase(), Wildcards::StarOnly))
            .collect();
        Self {
            includes_all: patterns.iter().any(|g| matches!(g, Glob::Any)),
            patterns,
        }
    }

    /// `subdomain` must already be lower case.
    pub(crate) fn matches_lower(&self, subdomain: &str) -> bool {
        self.includes_all || self.patterns.iter().any(|g| g.matches(subdomain))
    }
}

/// Whether a `services` entry is a pattern rather than a subdomain (spec §4 rule 1 skips those).
pub(crate) fn is_wildcard(entry: &str) -> bool {
    entry.contains('*')
}

/// The services a caller may act on: the static policy's `services`, or the union of the
/// `services` of every OIDC rule the token matched.
///
/// `"*"` matches every subdomain; entries with `*` are globs (`*` is any run of characters);
/// other entries compare whole. Subdomains are lower case and look-ups fold case. A scope borrows
/// the policy's compiled patterns, so making one copies nothing.
///
/// ```
/// use registry_policy::Policy;
/// use serde_json::json;
///
/// let policy = Policy::parse(&json!({"kind": "static", "services": ["Build-*", "api-acme"]}))
///     .unwrap()
///     .policy;
/// let scope = policy.static_scope().unwrap();
/// assert!(scope.matches("build-42-acme"));
/// assert!(scope.matches("API-acme"));
/// assert!(!scope.matches("api-acme2"));
/// assert!(!scope.includes_all());
/// ```
#[derive(Debug, Clone, Default)]
pub struct Scope<'a> {
    sets: Sets<'a>,
}

#[derive(Debug, Clone, Default)]
enum Sets<'a> {
    /// Matches nothing.
    #[default]
    Empty,
    One(&'a ServiceSet),
    Many(Vec<&'a ServiceSet>),
}

impl<'a> Scope<'a> {
    pub(crate) fn push(&mut self, set: &'a ServiceSet) {
        self.sets = match std::mem::take(&mut self.sets) {
            Sets::Empty => Sets::One(set),
            Sets::One(first) => Sets::Many(vec![first, set]),
            Sets::Many(mut all) => {
                all.push(set);
                Sets::Many(all)
            }
        };
    }

    fn sets(&self) -> &[&'a ServiceSet] {
        match &self.sets {
            Sets::Empty => &[],
            Sets::One(one) => std::slice::from_ref(one),
            Sets::Many(all) => all,
        }
    }

    /// Whether the service `subdomain` is covered (case-insensitively).
    pub fn matches(&self, subdomain: &str) -> bool {
        let lower = fold_case(subdomain);
        self.sets().iter().any(|s| s.matches_lower(&lower))
    }

    /// Whether the scope holds `"*"` (every service of the customer): the condition for managing
    /// service accounts (docs/api.md, "Authentication").
    pub fn includes_all(&self) -> bool {
        self.sets().iter().any(|s| s.includes_all)
    }

    /// Whether the scope covers no service at all (the default scope).
    pub fn is_empty(&self) -> bool {
        matches!(self.sets, Sets::Empty)
    }
}

/// ASCII lower case, borrowing in the usual case of an already lower-case subdomain. Only
/// ASCII folds, as in DNS: Unicode's folding would make `\u{212A}3s-acme` (KELVIN SIGN) name
/// `k3s-acme`.
pub(crate) fn fold_case(s: &str) -> Cow<'_, str> {
    if s.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(s.to_ascii_lowercase())
    } else {
        Cow::Borrowed(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(entries: &[&str], subdomain: &str) -> bool {
        let set = ServiceSet::compile(entries.iter().copied());
        let mut s = Scope::default();
        s.push(&set);
        s.matches(subdomain)
    }

    fn includes_all(entries: &[&str]) -> bool {
        let set = ServiceSet::compile(entries.iter().copied());
        let mut s = Scope::default();
        s.push(&set);
        s.includes_all()
    }

    #[test]
    fn service_patterns() {
        let cases: &[(&[&str], &str, bool)] = &[
            (&["*"], "anything-acme", true),
            (&["api-acme"], "api-acme", true),
            (&["api-acme"], "API-ACME", true),
            (&["API-Acme"], "api-acme", true),
            (&["api-acme"], "api-acme-2", false),
            (&["api-acme"], "xapi-acme", false),
            (&["build-*"], "build-1-acme", true),
            (&["build-*"], "build-", true),
            (&["build-*"], "build", false),
            (&["build-*"], "rebuild-1-acme", false),
            (&["*-acme"], "api-acme", true),
            (&["*-acme"], "api-acme2", false),
            (&["api-*-acme"], "api-1-acme", true),
            (&["api-*-acme"], "web-1-acme", false),
            (&["a", "b-*"], "b-x", true),
            (&["a", "b-*"], "c", false),
            (&["a?c"], "abc", false),
            // Only ASCII folds: KELVIN SIGN lower-cases to `k` in Unicode, not in DNS.
            (&["k3s-acme"], "\u{212A}3s-acme", false),
            (&["\u{212A}3s-*"], "k3s-acme", false),
        ];
        for (entries, subdomain, expected) in cases {
            assert_eq!(
                check(entries, subdomain),
                *expected,
                "{entries:?} against {subdomain:?}"
            );
        }
    }

    #[test]
    fn includes_all_only_for_a_bare_star() {
        assert!(includes_all(&["api-acme", "*"]));
        assert!(includes_all(&["**"]));
        assert!(!includes_all(&["*-acme"]));
        assert!(!Scope::default().includes_all());
    }

    #[test]
    fn union_of_sets() {
        let sets = [
            ServiceSet::compile(["a"]),
            ServiceSet::compile(["b-*"]),
            ServiceSet::compile(["*"]),
        ];
        let mut s = Scope::default();
        assert!(s.is_empty());
        assert!(!s.matches("a"));
        for set in &sets {
            s.push(set);
        }
        assert!(s.matches("a") && s.matches("b-1") && s.matches("zzz"));
        assert!(s.includes_all());
    }

    #[test]
    fn wildcard_entries() {
        assert!(is_wildcard("*"));
        assert!(is_wildcard("api-*"));
        assert!(!is_wildcard("api-acme"));
    }
}
