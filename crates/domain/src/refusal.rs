//! The refusal log (DECISIONS §12): a federated request refused after its signature verified is
//! recorded for the owner of the accounts that trust its issuer, so that they can find out why
//! a 401 said nothing. Never the token; only the claims the owner's rules look at.

use crate::policy::{Policy, ReasonCode};
use serde_json::{json, Map, Value};
use std::net::IpAddr;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use uuid::Uuid;

/// Refusals kept per account: the newest.
pub const KEPT_PER_ACCOUNT: usize = 100;
/// How long a refusal is kept.
pub const KEPT_FOR: time::Duration = time::Duration::days(7);

/// The customer whose accounts record a refusal: the owner of the service in the path; else the
/// customer of the account the client chose (`X-Service-Account`); else the one customer whose
/// accounts trust the token's issuer. `None` when several do: one customer never sees a token
/// meant for another.
///
/// ```
/// use registry_domain::refusal::recording_customer;
/// use uuid::Uuid;
/// let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
/// assert_eq!(recording_customer(Some(a), None, &[b]), Some(a));
/// assert_eq!(recording_customer(None, Some(b), &[a, b]), Some(b));
/// assert_eq!(recording_customer(None, None, &[a, a]), Some(a));
/// assert_eq!(recording_customer(None, None, &[a, b]), None);
/// ```
pub fn recording_customer(
    service_owner: Option<Uuid>,
    chosen_account_owner: Option<Uuid>,
    trusting_customers: &[Uuid],
) -> Option<Uuid> {
    if let Some(owner) = service_owner.or(chosen_account_owner) {
        return Some(owner);
    }
    let first = *trusting_customers.first()?;
    trusting_customers
        .iter()
        .all(|c| *c == first)
        .then_some(first)
}

/// What one refused request looked like.
#[derive(Debug, Clone, Copy)]
pub struct Refused<'a> {
    /// The verified token's claims.
    pub claims: &'a Map<String, Value>,
    /// The service in the path, if any.
    pub service: Option<&'a str>,
    /// The client's address.
    pub ip: IpAddr,
    /// Refused because several accounts accept the token and none was chosen.
    pub ambiguous: bool,
    /// The request's id.
    pub request_id: Option<&'a str>,
    /// When.
    pub at: OffsetDateTime,
}

/// The record of `refused` for an account with `policy`: `{at, code, rule?, hints, claims,
/// service?, ip, requestId}`. `None` when this account's policy admits the request (the refusal
/// was another account's business, or the client chose another).
pub fn record(policy: &Policy, refused: &Refused<'_>) -> Option<Value> {
    let explained = policy.explain(Some(refused.claims), refused.service, Some(refused.ip));
    let (code, rule) = if refused.ambiguous {
        (ReasonCode::AccountAmbiguous, explained.rule)
    } else if explained.allowed {
        return None;
    } else {
        let first = explained.reasons.first()?;
        (first.code, first.rule)
    };
    let mut shown = Map::new();
    for name in ["iss", "sub", "aud"]
        .into_iter()
        .chain(policy.claim_names())
    {
        if let Some(value) = refused.claims.get(name) {
            shown.insert(name.to_owned(), value.clone());
        }
    }
    let mut record = json!({
        "at": refused.at.replace_nanosecond(0).unwrap_or(refused.at).format(&Rfc3339).unwrap_or_default(),
        "code": code.as_str(),
        "hints": explained.hints.iter().map(|h| json!({"rule": h.rule, "pointer": h.pointer,
            "message": h.message})).collect::<Vec<_>>(),
        "claims": shown,
        "ip": refused.ip.to_string(),
        "requestId": refused.request_id,
    });
    if let Some(rule) = rule {
        record["rule"] = rule.into();
    }
    if let Some(service) = refused.service {
        record["service"] = service.into();
    }
    Some(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_show_the_claims_rules_name_and_never_others() {
        let policy = Policy::parse(&json!({"kind": "oidc", "rules": [{"services": ["api-acme"],
            "claims": {"iss": "https://ci", "aud": "registry", "sub": "repo:acme/x:ref:main",
                       "repository_owner": "acme"}}]}))
        .unwrap()
        .policy;
        let claims = json!({"iss": "https://ci", "aud": "registry", "sub": "repo:acme/x:environment:prod",
            "repository_owner": "acme", "secret_claim": "s3cr3t"});
        let refused = Refused {
            claims: claims.as_object().unwrap(),
            service: Some("api-acme"),
            ip: "192.0.2.7".parse().unwrap(),
            ambiguous: false,
            request_id: Some("r1"),
            at: OffsetDateTime::UNIX_EPOCH,
        };
        let record = record(&policy, &refused).unwrap();
        assert_eq!(record["code"], "claim-mismatch");
        assert_eq!(record["rule"], 0);
        assert_eq!(record["service"], "api-acme");
        assert!(record["claims"].get("secret_claim").is_none());
        assert_eq!(record["claims"]["repository_owner"], "acme");
        assert!(record["hints"][0]["message"]
            .as_str()
            .unwrap()
            .contains("environment"));
        // An account that admits the request records nothing, unless it was ambiguous.
        let fine = json!({"iss": "https://ci", "aud": "registry", "sub": "repo:acme/x:ref:main",
            "repository_owner": "acme"});
        let admitted = Refused {
            claims: fine.as_object().unwrap(),
            ..refused
        };
        assert!(super::record(&policy, &admitted).is_none());
        let ambiguous = Refused {
            ambiguous: true,
            ..admitted
        };
        assert_eq!(
            super::record(&policy, &ambiguous).unwrap()["code"],
            "account-ambiguous"
        );
    }
}
