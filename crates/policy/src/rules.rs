//! OIDC rules compiled for evaluation: grouped by exact issuer, claim names resolved to slots,
//! each group's rules filed in a [`CandidateIndex`].

use super::index::CandidateIndex;
use super::pattern::{ClaimPattern, ClaimView, Key};
use super::services::ServiceSet;
use crate::violation::escape_token;
use crate::Actions;
use crate::{Violation, Violations};
use serde_json::{Map, Value};
use std::collections::HashMap;

/// Every OIDC rule of a policy, indexed by `iss` so a token only meets its issuer's rules.
#[derive(Debug, Clone, Default)]
pub(crate) struct OidcRules {
    groups: Vec<IssuerGroup>,
    by_issuer: HashMap<Box<str>, usize>,
}

/// The rules that pin one issuer, in document order.
#[derive(Debug, Clone)]
pub(crate) struct IssuerGroup {
    pub(crate) issuer: Box<str>,
    /// Distinct claim names these rules check; a rule's checks refer to them by position, so
    /// each claim is looked up in the token once per request, not once per rule.
    pub(crate) claim_names: Box<[Box<str>]>,
    pub(crate) rules: Box<[Rule]>,
    /// The rules by the literal text they pin.
    index: CandidateIndex,
}

/// One rule, without its `iss` (the group pins it).
#[derive(Debug, Clone)]
pub(crate) struct Rule {
    /// Position in the document's `rules`.
    pub(crate) index: usize,
    /// In the order the claims object lists them.
    pub(crate) checks: Box<[Check]>,
    pub(crate) services: ServiceSet,
    /// What the rule allows (version 1: every action).
    pub(crate) actions: Actions,
}

/// One claim of a rule: which slot of the group's claim names, and the pattern.
#[derive(Debug, Clone)]
pub(crate) struct Check {
    pub(crate) slot: usize,
    pub(crate) pattern: ClaimPattern,
}

impl OidcRules {
    /// Compiles `rules`. A document the schema accepted always
    /// compiles; a stored one that does not (it was changed outside the registry) gets every
    /// problem with its pointer, never a panic.
    pub(crate) fn compile(rules: &[Value], version: u8) -> Result<Self, Violations> {
        let mut compiled = OidcRules::default();
        let mut names: Vec<Vec<Box<str>>> = Vec::new();
        let mut grouped: Vec<Vec<Rule>> = Vec::new();
        let mut problems = Violations::new();
        for (index, rule) in rules.iter().enumerate() {
            let Some(claims) = rule.get("claims").and_then(Value::as_object) else {
                problems.push(Violation::new(
                    format!("/rules/{index}/claims"),
                    "a rule needs a claims object",
                ));
                continue;
            };
            let Some(issuer) = claims.get("iss").and_then(Value::as_str) else {
                problems.push(Violation::new(
                    format!("/rules/{index}/claims/iss"),
                    "a rule needs an iss string",
                ));
                continue;
            };
            let Some(services) = rule.get("services").and_then(Value::as_array) else {
                problems.push(Violation::new(
                    format!("/rules/{index}/services"),
                    "a rule needs a services list",
                ));
                continue;
            };
            let actions = match version {
                1 => Actions::ALL,
                _ => {
                    match Actions::compile(rule.get("actions"), &format!("/rules/{index}/actions"))
                    {
                        Ok(actions) => actions,
                        Err(found) => {
                            problems.extend(found);
                            continue;
                        }
                    }
                }
            };
            let group = match compiled.by_issuer.get(issuer) {
                Some(&g) => g,
                None => {
                    let g = compiled.groups.len();
                    compiled.by_issuer.insert(issuer.into(), g);
                    compiled.groups.push(IssuerGroup {
                        issuer: issuer.into(),
                        claim_names: Box::default(),
                        rules: Box::default(),
                        index: CandidateIndex::default(),
                    });
                    names.push(Vec::new());
                    grouped.push(Vec::new());
                    g
                }
            };
            let mut checks = Vec::new();
            for (name, pattern) in claims.iter().filter(|(name, _)| name.as_str() != "iss") {
                let Some(pattern) = pattern.as_str() else {
                    problems.push(Violation::new(
                        format!("/rules/{index}/claims/{}", escape_token(name)),
                        "a claim pattern is a string",
                    ));
                    continue;
                };
                let pattern = ClaimPattern::new(pattern);
                let slot = match names[group].iter().position(|n| **n == **name) {
                    Some(slot) => slot,
                    None => {
                        names[group].push(name.as_str().into());
                        names[group].len() - 1
                    }
                };
                checks.push(Check { slot, pattern });
            }
            grouped[group].push(Rule {
                index,
                checks: checks.into(),
                services: ServiceSet::compile(services.iter().filter_map(Value::as_str)),
                actions,
            });
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        for ((group, names), rules) in compiled.groups.iter_mut().zip(names).zip(grouped) {
            group.claim_names = names.into();
            group.index = CandidateIndex::build(rules.iter().map(Rule::keys));
            group.rules = rules.into();
        }
        Ok(compiled)
    }

    /// Distinct issuers in the order they first appear.
    pub(crate) fn issuers(&self) -> Vec<&str> {
        self.groups.iter().map(|g| &*g.issuer).collect()
    }

    /// The rules pinning `issuer` exactly.
    pub(crate) fn group(&self, issuer: &str) -> Option<&IssuerGroup> {
        self.by_issuer.get(issuer).map(|&g| &self.groups[g])
    }

    pub(crate) fn groups(&self) -> &[IssuerGroup] {
        &self.groups
    }

    /// The union of every rule's actions.
    pub(crate) fn actions(&self) -> Actions {
        self.groups
            .iter()
            .flat_map(|g| g.rules.iter())
            .fold(Actions::NONE, |all, rule| all.union(rule.actions))
    }
}

impl IssuerGroup {
    /// The token's value of every claim these rules check, looked up once.
    pub(crate) fn views<'a>(&self, claims: &'a Map<String, Value>) -> Vec<ClaimView<'a>> {
        self.claim_names
            .iter()
            .map(|name| ClaimView::of_option(claims.get(&**name)))
            .collect()
    }

    /// The rules the token's claims (`views`, from [`IssuerGroup::views`]) can match, in
    /// document order: a superset of those that do, usually a small one.
    pub(crate) fn candidates<'g>(
        &'g self,
        views: &[ClaimView<'_>],
    ) -> impl Iterator<Item = &'g Rule> + Clone + 'g {
        let positions = self.index.candidates(views);
        positions.into_iter().map(|p| &self.rules[p as usize])
    }

    /// The rules the token's claims match, in document order.
    pub(crate) fn matching<'g, 'v>(
        &'g self,
        views: &'v [ClaimView<'v>],
    ) -> impl Iterator<Item = &'g Rule> + Clone + 'v
    where
        'g: 'v,
    {
        self.candidates(views).filter(move |r| r.matches(views))
    }
}

impl Rule {
    /// The keys the candidate index may file this rule under: (claim slot, the literal its
    /// pattern pins), for each check whose pattern pins one.
    fn keys(&self) -> impl Iterator<Item = (usize, Key<'_>)> {
        self.checks
            .iter()
            .filter_map(|check| Some((check.slot, check.pattern.key()?)))
    }

    /// The first check (in document order) the token fails, if any.
    pub(crate) fn first_failure(&self, views: &[ClaimView<'_>]) -> Option<&Check> {
        self.checks
            .iter()
            .find(|c| !c.pattern.matches_view(&views[c.slot]))
    }

    pub(crate) fn matches(&self, views: &[ClaimView<'_>]) -> bool {
        self.first_failure(views).is_none()
    }
}
