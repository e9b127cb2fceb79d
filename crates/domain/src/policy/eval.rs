//! Evaluation of a request against a policy, with the reason when it is refused.

use super::pattern::ClaimView;
use super::rules::OidcRules;
use super::services::{fold_case, Scope};
use super::{Policy, PolicyKind};
use serde_json::{Map, Value};
use std::fmt;
use std::net::IpAddr;

/// The outcome of [`Policy::evaluate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The request may proceed.
    Allow {
        /// For an OIDC policy, the index in `rules` of the first rule that let the token in;
        /// `None` for a static policy.
        rule: Option<usize>,
    },
    /// The request is refused, and why (for the server log, never for the response body).
    Deny(DenyReason),
}

impl Decision {
    /// Whether the request may proceed.
    pub fn is_allowed(&self) -> bool {
        matches!(self, Decision::Allow { .. })
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decision::Allow { rule: Some(rule) } => write!(f, "allowed by rule {rule}"),
            Decision::Allow { rule: None } => f.write_str("allowed"),
            Decision::Deny(reason) => write!(f, "denied: {reason}"),
        }
    }
}

/// Why a request was refused. The checks run in this order: kind, claims, source address,
/// service; a token that no rule accepts is refused as such before its address is looked at, so
/// the refusal does not reveal an allowlist to a stranger.
///
/// Suggested statuses (DECISIONS §4): [`DenyReason::KindMismatch`] and
/// [`DenyReason::NoRuleMatched`] are credential failures (401); the others are 403.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DenyReason {
    /// A JWT was presented for a static account, or a static token for an OIDC account.
    KindMismatch {
        /// The kind of the account's policy.
        policy: PolicyKind,
        /// The kind of credential presented.
        credential: PolicyKind,
    },
    /// No rule accepted the token's claims.
    NoRuleMatched {
        /// For every rule, in document order, the first claim it refused.
        mismatches: Vec<RuleMismatch>,
    },
    /// The source address is outside the non-empty `ip_allowlist`.
    IpNotAllowed {
        /// The client address.
        ip: IpAddr,
    },
    /// The claims matched (or the policy is static), but no matching rule's `services` cover the
    /// requested service.
    ServiceNotCovered {
        /// The requested subdomain.
        subdomain: String,
        /// The rules whose claims matched (empty for a static policy).
        rules: Vec<usize>,
    },
}

/// The first claim one rule refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleMismatch {
    /// Index of the rule in `rules`.
    pub rule: usize,
    /// The claim name (`iss` when the token has another issuer).
    pub claim: String,
    /// The rule's pattern for that claim.
    pub expected: String,
    /// The token's value as JSON text, shortened; `None` when the claim is missing.
    pub found: Option<String>,
}

impl fmt::Display for RuleMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rule {}: {} ", self.rule, self.claim)?;
        match &self.found {
            Some(found) => write!(f, "{found}")?,
            None => f.write_str("missing")?,
        }
        write!(f, " does not match {:?}", self.expected)
    }
}

/// How many rule mismatches a log line spells out.
const SHOWN_MISMATCHES: usize = 5;

impl fmt::Display for DenyReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DenyReason::KindMismatch { policy, credential } => write!(
                f,
                "a {credential} credential was presented for an account whose policy is {policy}"
            ),
            DenyReason::NoRuleMatched { mismatches } => {
                f.write_str("no rule accepted the token's claims")?;
                for (i, m) in mismatches.iter().take(SHOWN_MISMATCHES).enumerate() {
                    f.write_str(if i == 0 { ": " } else { "; " })?;
                    write!(f, "{m}")?;
                }
                if mismatches.len() > SHOWN_MISMATCHES {
                    write!(f, "; and {} more", mismatches.len() - SHOWN_MISMATCHES)?;
                }
                Ok(())
            }
            DenyReason::IpNotAllowed { ip } => {
                write!(f, "source address {ip} is not in the ip_allowlist")
            }
            DenyReason::ServiceNotCovered { subdomain, rules } if rules.is_empty() => {
                write!(f, "service {subdomain:?} is not in the policy's services")
            }
            DenyReason::ServiceNotCovered { subdomain, rules } => {
                let list: Vec<String> = rules.iter().map(usize::to_string).collect();
                write!(
                    f,
                    "service {subdomain:?} is not in the services of the matching rule(s) {}",
                    list.join(", ")
                )
            }
        }
    }
}

impl std::error::Error for DenyReason {}

/// Longest claim value text a mismatch keeps.
const FOUND_CHARS: usize = 120;

fn render(value: Option<&Value>) -> Option<String> {
    let text = value?.to_string();
    Some(if text.chars().count() > FOUND_CHARS {
        let mut short: String = text.chars().take(FOUND_CHARS).collect();
        short.push('…');
        short
    } else {
        text
    })
}

pub(super) fn oidc_scope<'a>(
    rules: &'a OidcRules,
    claims: &Map<String, Value>,
) -> Option<Scope<'a>> {
    let group = rules.group(claims.get("iss")?.as_str()?)?;
    let views = group.views(claims);
    let mut scope = Scope::default();
    for rule in group.rules.iter().filter(|r| r.matches(&views)) {
        scope.push(&rule.services);
    }
    (!scope.is_empty()).then_some(scope)
}

pub(super) fn matching_rules(rules: &OidcRules, claims: &Map<String, Value>) -> Vec<usize> {
    let Some(group) = claims
        .get("iss")
        .and_then(Value::as_str)
        .and_then(|iss| rules.group(iss))
    else {
        return Vec::new();
    };
    let views = group.views(claims);
    group
        .rules
        .iter()
        .filter(|r| r.matches(&views))
        .map(|r| r.index)
        .collect()
}

pub(super) fn evaluate(
    policy: &Policy,
    claims: Option<&Map<String, Value>>,
    subdomain: Option<&str>,
    client_ip: IpAddr,
) -> Decision {
    let kind = policy.kind();
    let credential = if claims.is_some() {
        PolicyKind::Oidc
    } else {
        PolicyKind::Static
    };
    if kind != credential {
        return Decision::Deny(DenyReason::KindMismatch {
            policy: kind,
            credential,
        });
    }
    match claims {
        None => {
            if !policy.allows_ip(client_ip) {
                return Decision::Deny(DenyReason::IpNotAllowed { ip: client_ip });
            }
            match subdomain {
                Some(s) if !policy.static_scope().is_some_and(|scope| scope.matches(s)) => {
                    Decision::Deny(DenyReason::ServiceNotCovered {
                        subdomain: s.to_owned(),
                        rules: vec![],
                    })
                }
                _ => Decision::Allow { rule: None },
            }
        }
        Some(claims) => evaluate_oidc(policy, claims, subdomain, client_ip),
    }
}

fn evaluate_oidc(
    policy: &Policy,
    claims: &Map<String, Value>,
    subdomain: Option<&str>,
    client_ip: IpAddr,
) -> Decision {
    let rules = policy.oidc_rules();
    let issuer = claims.get("iss").and_then(Value::as_str);
    let group = issuer.and_then(|iss| rules.group(iss));
    let views = group.map(|g| g.views(claims)).unwrap_or_default();
    // Allocation-free on the way to an Allow; the explanation is built only when refusing.
    let mut matched = group
        .into_iter()
        .flat_map(|g| g.rules.iter())
        .filter(|r| r.matches(&views))
        .peekable();
    let Some(first) = matched.peek().map(|r| r.index) else {
        return Decision::Deny(DenyReason::NoRuleMatched {
            mismatches: mismatches(rules, claims, &views, issuer),
        });
    };
    if !policy.allows_ip(client_ip) {
        return Decision::Deny(DenyReason::IpNotAllowed { ip: client_ip });
    }
    let Some(subdomain) = subdomain else {
        return Decision::Allow { rule: Some(first) };
    };
    let lower = fold_case(subdomain);
    let mut tried = Vec::new();
    for rule in matched {
        if rule.services.matches_lower(&lower) {
            return Decision::Allow {
                rule: Some(rule.index),
            };
        }
        tried.push(rule.index);
    }
    Decision::Deny(DenyReason::ServiceNotCovered {
        subdomain: subdomain.to_owned(),
        rules: tried,
    })
}

fn mismatches(
    rules: &OidcRules,
    claims: &Map<String, Value>,
    views: &[ClaimView<'_>],
    issuer: Option<&str>,
) -> Vec<RuleMismatch> {
    let mut out = Vec::new();
    for group in rules.groups() {
        let same_issuer = issuer == Some(&*group.issuer);
        for rule in group.rules.iter() {
            let mismatch = if same_issuer {
                let Some(check) = rule.first_failure(views) else {
                    continue;
                };
                let claim = &*group.claim_names[check.slot];
                RuleMismatch {
                    rule: rule.index,
                    claim: claim.to_owned(),
                    expected: check.pattern.as_str().to_owned(),
                    found: render(claims.get(claim)),
                }
            } else {
                RuleMismatch {
                    rule: rule.index,
                    claim: "iss".to_owned(),
                    expected: group.issuer.to_string(),
                    found: render(claims.get("iss")),
                }
            };
            out.push(mismatch);
        }
    }
    out.sort_by_key(|m| m.rule);
    out
}
