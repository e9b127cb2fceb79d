//! Evaluation of a request against a policy, with the reason when it is refused.

use super::rules::OidcRules;
use super::services::{fold_case, Scope};
use super::{Action, Policy, PolicyKind};
use serde_json::{Map, Value};
use std::fmt;
use std::net::IpAddr;

/// The outcome of [`Policy::evaluate`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
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
/// service, action; a token that no rule accepts is refused as such before its address is looked at, so
/// the refusal does not reveal an allowlist to a stranger.
///
/// Suggested statuses (docs/api.md, "Authentication"): [`DenyReason::KindMismatch`] and
/// [`DenyReason::NoRuleMatched`] are credential failures (401); the others are 403.
///
/// Which check of which rule refused a token is [`Policy::explain`]'s answer: `evaluate` only
/// looks at the rules a token can match, and does not spend time on the others.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DenyReason {
    /// A JWT was presented for a static account, or a static token for an OIDC account.
    KindMismatch {
        /// The kind of the account's policy.
        policy: PolicyKind,
        /// The kind of credential presented.
        credential: PolicyKind,
    },
    /// No rule accepted the token's claims.
    NoRuleMatched,
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
    /// The claims matched and the service is covered (or the policy is static and covers it),
    /// but the action is not allowed: not in a static policy's `actions`, nor in the `actions`
    /// of any matching rule that covers the service.
    ActionNotAllowed {
        /// The action the call needs.
        action: Action,
        /// The matching rules that covered the service (every matching rule for a call on no
        /// one service) and did not allow the action; empty for a static policy.
        rules: Vec<usize>,
    },
}

impl fmt::Display for DenyReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DenyReason::KindMismatch { policy, credential } => write!(
                f,
                "a {credential} credential was presented for an account whose policy is {policy}"
            ),
            DenyReason::NoRuleMatched => f.write_str("no rule accepted the token's claims"),
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
            DenyReason::ActionNotAllowed { action, rules } if rules.is_empty() => {
                write!(f, "action \"{action}\" is not in the policy's actions")
            }
            DenyReason::ActionNotAllowed { action, rules } => {
                let list: Vec<String> = rules.iter().map(usize::to_string).collect();
                write!(
                    f,
                    "action \"{action}\" is not in the actions of the matching rule(s) {}",
                    list.join(", ")
                )
            }
        }
    }
}

impl std::error::Error for DenyReason {}

pub(super) fn oidc_scope<'a>(
    rules: &'a OidcRules,
    claims: &Map<String, Value>,
) -> Option<Scope<'a>> {
    let group = rules.group(claims.get("iss")?.as_str()?)?;
    let views = group.views(claims);
    let mut scope = Scope::default();
    for rule in group.matching(&views) {
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
    group.matching(&views).map(|r| r.index).collect()
}

pub(super) fn evaluate(
    policy: &Policy,
    claims: Option<&Map<String, Value>>,
    subdomain: Option<&str>,
    client_ip: Option<IpAddr>,
    action: Option<Action>,
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
            if let Some(ip) = client_ip.filter(|ip| !policy.allows_ip(*ip)) {
                return Decision::Deny(DenyReason::IpNotAllowed { ip });
            }
            match subdomain {
                Some(s) if !policy.static_scope().is_some_and(|scope| scope.matches(s)) => {
                    Decision::Deny(DenyReason::ServiceNotCovered {
                        subdomain: s.to_owned(),
                        rules: vec![],
                    })
                }
                _ => match action {
                    Some(action) if !policy.actions().contains(action) => {
                        Decision::Deny(DenyReason::ActionNotAllowed {
                            action,
                            rules: vec![],
                        })
                    }
                    _ => Decision::Allow { rule: None },
                },
            }
        }
        Some(claims) => evaluate_oidc(policy, claims, subdomain, client_ip, action),
    }
}

fn evaluate_oidc(
    policy: &Policy,
    claims: &Map<String, Value>,
    subdomain: Option<&str>,
    client_ip: Option<IpAddr>,
    action: Option<Action>,
) -> Decision {
    let Some(group) = claims
        .get("iss")
        .and_then(Value::as_str)
        .and_then(|iss| policy.oidc_rules().group(iss))
    else {
        return Decision::Deny(DenyReason::NoRuleMatched);
    };
    let views = group.views(claims);
    // Only the candidates of the index are matched, and nothing is allocated for the reasons
    // of a refusal: those are `explain`'s.
    let mut matched = group.matching(&views).peekable();
    if matched.peek().is_none() {
        return Decision::Deny(DenyReason::NoRuleMatched);
    }
    if let Some(ip) = client_ip.filter(|ip| !policy.allows_ip(*ip)) {
        return Decision::Deny(DenyReason::IpNotAllowed { ip });
    }
    let lower = subdomain.map(fold_case);
    // The matching rules that cover the service (all of them for a call on no one service);
    // the first of those that allows the action admits the request.
    let mut covering = Vec::new();
    let mut tried = Vec::new();
    for rule in matched {
        if lower
            .as_deref()
            .is_some_and(|s| !rule.services.matches_lower(s))
        {
            tried.push(rule.index);
            continue;
        }
        if action.is_none_or(|a| rule.actions.contains(a)) {
            return Decision::Allow {
                rule: Some(rule.index),
            };
        }
        covering.push(rule.index);
    }
    match (action, subdomain) {
        (Some(action), _) if !covering.is_empty() => Decision::Deny(DenyReason::ActionNotAllowed {
            action,
            rules: covering,
        }),
        (_, Some(subdomain)) => Decision::Deny(DenyReason::ServiceNotCovered {
            subdomain: subdomain.to_owned(),
            rules: tried,
        }),
        // Unreachable: without a service every matching rule covers, and without an action the
        // first one admits.
        (_, None) => Decision::Deny(DenyReason::NoRuleMatched),
    }
}
