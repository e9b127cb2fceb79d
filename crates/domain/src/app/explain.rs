//! Why was a token refused (docs/api.md, "Explaining refusals"): explain a token or a set of claims
//! by an account's policy, and the log of real requests refused after their signature verified. The
//! same callers as the account's other calls: another customer's account is a 404, a caller
//! without `"*"` a 403 (see [`accounts::get`]).
//!
//! Verifying a token is I/O (its issuer's keys) and stays with the caller of these use cases,
//! in three steps: [`account`] finds the account, [`screen_token`] says whether the token
//! is worth verifying at all, and [`explain`] judges what verification (or the body's claims)
//! gave.

use crate::app::{accounts, AppError, Caller, Registry};
use crate::policy::{Action, Explanation, Reason, ReasonCode};
use crate::ports::{TokenRejection, VerifiedToken};
use crate::refusal::{self, KEPT_FOR, KEPT_PER_ACCOUNT};
use crate::ServiceAccount;
use serde_json::{Map, Value};
use std::net::IpAddr;
use std::sync::Arc;
use time::OffsetDateTime;

/// What to judge.
#[derive(Debug, Clone, PartialEq)]
pub enum Evidence {
    /// Claims given as such, judged by the policy alone (`None`: no claims at all).
    Claims(Option<Map<String, Value>>),
    /// A token, as its verification ended: its verified claims, or why it was rejected.
    Token(Result<VerifiedToken, TokenRejection>),
    /// A token whose issuer (read without verifying anything) no rule of the account names:
    /// refused as a real request would be, before any of its keys are fetched. See
    /// [`screen_token`].
    UnnamedIssuer(String),
}

/// `POST /service-accounts/{id}/explain`: the account (from [`account`]), the evidence,
/// and the request to judge it for.
#[derive(Debug, Clone)]
pub struct Explain {
    /// The account whose policy judges.
    pub account: Arc<ServiceAccount>,
    /// The token or claims.
    pub evidence: Evidence,
    /// The service the request would call.
    pub service: Option<String>,
    /// The address the request would come from.
    pub ip: Option<IpAddr>,
    /// The action the request would take (`None`: not checked).
    pub action: Option<Action>,
}

/// The account to explain for: the caller's customer's ([`accounts::get`]), else a 404.
pub fn account(
    registry: &Registry,
    caller: &Caller,
    id: &str,
) -> Result<Arc<ServiceAccount>, AppError> {
    accounts::get(registry, caller, id).map(Arc::new)
}

/// Before a token is verified: as for a real request, the keys of an issuer no rule of the
/// account names are never fetched, and the token is explained as [`Evidence::UnnamedIssuer`]
/// (`Some`). `None`: verify it, then [`explain`] with [`Evidence::Token`]. A token whose issuer
/// cannot be read (`unverified_issuer` is `None`) is verified: it fails before any fetch, with
/// its precise code.
pub fn screen_token(
    account: &ServiceAccount,
    unverified_issuer: Option<String>,
) -> Option<Evidence> {
    unverified_issuer
        .filter(|issuer| !account.policy.issuers().contains(&issuer.as_str()))
        .map(Evidence::UnnamedIssuer)
}

/// The account's explanation of the evidence, as JSON text. With large array claims it takes
/// milliseconds: run it where that does not hold up other requests (docs/api.md, "Limits that hold
/// (second security review)"). The token itself is neither kept nor echoed.
///
/// A service named is looked up as a real request's path is (subdomain in any case, or id): one
/// that is not the account's customer's is a refusal whatever the policy says, as a request
/// naming it is a 404 (an account authorizes only against its own customer's services).
pub fn explain(registry: &Registry, command: Explain) -> Result<String, AppError> {
    let Explain {
        account,
        evidence,
        service,
        ip,
        action,
    } = command;
    let service = match service {
        Some(named) => match customer_service(registry, &account, &named)? {
            Some(subdomain) => Some(subdomain),
            None if matches!(evidence, Evidence::Claims(_) | Evidence::Token(Ok(_))) => {
                return Ok(not_a_service(&named).to_json().to_string());
            }
            // A token refused first is explained as such, as a real request is refused first.
            None => Some(named),
        },
        None => None,
    };
    // A call on the whole customer is judged as `decide` judges it: on every service.
    let service = crate::policy::judged_service(service.as_deref(), action);
    let explanation = match evidence {
        Evidence::Claims(claims) => account.policy.explain(claims.as_ref(), service, ip, action),
        Evidence::Token(Ok(verified)) => {
            account
                .policy
                .explain(Some(&verified.claims), service, ip, action)
        }
        Evidence::Token(Err(rejection)) => refused_before_policy(rejection.code, rejection.detail),
        Evidence::UnnamedIssuer(issuer) => {
            // Its near misses (an issuer named in another case, with a trailing slash) are the
            // policy's hints for that issuer.
            let claims = Map::from_iter([("iss".to_owned(), Value::String(issuer.clone()))]);
            let hints = (account.policy)
                .explain(Some(&claims), service, ip, action)
                .hints;
            let refused = refused_before_policy(
                ReasonCode::IssuerUnknown,
                format!("no rule of this service account names the issuer {issuer:?}"),
            );
            Explanation { hints, ..refused }
        }
    };
    Ok(explanation.to_json().to_string())
}

/// The subdomain of the service `named` (a subdomain in any case, or an id) when it is one of
/// the account's customer's.
fn customer_service(
    registry: &Registry,
    account: &ServiceAccount,
    named: &str,
) -> Result<Option<String>, AppError> {
    let service = registry.store.find_service(named)?;
    Ok(service
        .filter(|s| s.customer_id == Some(account.customer_id))
        .map(|s| s.subdomain))
}

/// The refusal of a service that is not the account's customer's (or no service at all).
fn not_a_service(named: &str) -> Explanation {
    refused_before_policy(
        ReasonCode::ServiceNotAllowed,
        format!(
            "{named:?} is no service of this account's customer: a request naming it is a 404 \
             whatever the policy says"
        ),
    )
}

/// `GET /service-accounts/{id}/refusals`: of the last [`KEPT_FOR`], the newest
/// [`KEPT_PER_ACCOUNT`], near misses first in line for a place (each record says which it is in
/// `near`), newest first.
pub fn refusals(
    registry: &Registry,
    caller: &Caller,
    id: &str,
    now: OffsetDateTime,
) -> Result<Vec<Value>, AppError> {
    let account = accounts::get(registry, caller, id)?;
    let records = registry
        .store
        .refusals(account.id, now - KEPT_FOR, 2 * KEPT_PER_ACCOUNT)?;
    Ok(refusal::shown(records, KEPT_PER_ACCOUNT))
}

/// The explanation of a token refused before the policy was asked.
fn refused_before_policy(code: ReasonCode, message: String) -> Explanation {
    Explanation {
        allowed: false,
        rule: None,
        reasons: vec![Reason {
            rule: None,
            pointer: None,
            code,
            message,
        }],
        hints: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::testing::{add_account, add_customer, caller, registry};
    use crate::{Customer, Plan};
    use serde_json::json;
    use time::macros::datetime;

    const NOW: OffsetDateTime = datetime!(2026-11-23 10:00 UTC);

    fn oidc_policy() -> Value {
        json!({"kind": "oidc", "rules": [{"services": ["*"],
            "claims": {"iss": "https://ci.example", "aud": "registry", "sub": "repo:acme/infra"}}]})
    }

    fn claims(sub: &str) -> Map<String, Value> {
        let claims = json!({"iss": "https://ci.example", "aud": "registry", "sub": sub});
        claims.as_object().unwrap().clone()
    }

    /// The explanation of `evidence` for a request on a service of the account's customer
    /// (made for it).
    fn judged(registry: &Registry, account: &Arc<ServiceAccount>, evidence: Evidence) -> Value {
        let service = Some(customer_service(registry, account));
        let command = Explain {
            account: account.clone(),
            evidence,
            service,
            ip: None,
            action: None,
        };
        serde_json::from_str(&explain(registry, command).unwrap()).unwrap()
    }

    /// A new service of `account`'s customer, made by an account of that customer with `"*"`:
    /// its subdomain.
    fn customer_service(registry: &Registry, account: &Arc<ServiceAccount>) -> String {
        let maker = ServiceAccount {
            id: uuid::Uuid::new_v4(),
            name: "maker".into(),
            policy: crate::policy::Policy::parse(&json!({"kind": "static", "services": ["*"]}))
                .unwrap()
                .policy,
            ..(**account).clone()
        };
        let command = crate::app::services::CreateService {
            title: Some("api".into()),
            service_name: None,
            description: None,
        };
        let made = crate::app::services::create(registry, &caller(Arc::new(maker)), command, NOW);
        made.unwrap().subdomain
    }

    /// Another customer, in the registry's store.
    fn other_customer(registry: &Registry) -> Customer {
        add_customer(registry, "other", Plan::Free, NOW).0
    }

    #[test]
    fn the_account_is_the_caller_s_customer_s_only() {
        let (registry, customer, admin) = registry(Plan::Free, NOW);
        let ours = add_account(&registry, &customer, oidc_policy(), NOW);
        let admin = caller(admin);
        let found = account(&registry, &admin, &ours.id.to_string()).unwrap();
        assert_eq!(found.id, ours.id);
        let theirs = add_account(&registry, &other_customer(&registry), oidc_policy(), NOW);
        let id = theirs.id.to_string();
        let refused = account(&registry, &admin, &id).unwrap_err();
        assert_eq!(
            refused,
            AppError::NotFound(format!("no service account {id:?}"))
        );
        let narrow = add_account(
            &registry,
            &customer,
            json!({"kind": "static", "services": ["api-*"]}),
            NOW,
        );
        let refused = account(&registry, &caller(narrow), &ours.id.to_string()).unwrap_err();
        assert!(matches!(refused, AppError::Forbidden(_)), "{refused:?}");
    }

    #[test]
    fn a_token_of_an_issuer_no_rule_names_is_refused_before_verification() {
        let (registry, customer, _) = registry(Plan::Free, NOW);
        let account = add_account(&registry, &customer, oidc_policy(), NOW);
        assert_eq!(
            screen_token(&account, Some("https://ci.example".into())),
            None
        );
        assert_eq!(screen_token(&account, None), None, "verification says why");
        let screened = screen_token(&account, Some("https://evil.example".into()));
        let evidence = screened.expect("an unnamed issuer is refused at once");
        let explained = judged(&registry, &account, evidence);
        assert_eq!(explained["decision"], "deny");
        assert_eq!(explained["reasons"][0]["code"], "issuer-unknown");
        let message = explained["reasons"][0]["message"].as_str().unwrap();
        assert!(message.contains("\"https://evil.example\""), "{message}");
        assert_eq!(explained["hints"], json!([]));
        // An issuer named but for a trailing slash is a near miss, hinted at the rule's iss.
        let near = screen_token(&account, Some("https://CI.example/".into())).unwrap();
        let explained = judged(&registry, &account, near);
        assert_eq!(explained["reasons"][0]["code"], "issuer-unknown");
        assert_eq!(
            explained["hints"][0]["pointer"], "/rules/0/claims/iss",
            "{explained}"
        );
        let hint = explained["hints"][0]["message"].as_str().unwrap();
        assert!(hint.contains("trailing slash"), "{hint}");
    }

    #[test]
    fn a_rejected_token_is_explained_by_its_rejection() {
        let (registry, customer, _) = registry(Plan::Free, NOW);
        let account = add_account(&registry, &customer, oidc_policy(), NOW);
        let rejection = TokenRejection {
            code: ReasonCode::TokenExpired,
            detail: "the token expired 5 minutes ago".into(),
            signed: None,
        };
        let explained = judged(&registry, &account, Evidence::Token(Err(rejection)));
        assert_eq!(explained["decision"], "deny");
        assert_eq!(explained["reasons"][0]["code"], "token-expired");
        assert_eq!(
            explained["reasons"][0]["message"],
            "the token expired 5 minutes ago"
        );
    }

    #[test]
    fn verified_claims_and_given_claims_are_judged_by_the_policy() {
        let (registry, customer, _) = registry(Plan::Free, NOW);
        let account = add_account(&registry, &customer, oidc_policy(), NOW);
        let verified = VerifiedToken {
            issuer: "https://ci.example".into(),
            claims: claims("repo:acme/infra"),
        };
        let explained = judged(&registry, &account, Evidence::Token(Ok(verified)));
        assert_eq!(explained["decision"], "allow", "{explained}");
        let explained = judged(
            &registry,
            &account,
            Evidence::Claims(Some(claims("repo:acme/other"))),
        );
        assert_eq!(explained["decision"], "deny");
        assert_eq!(explained["reasons"][0]["code"], "claim-mismatch");
        // Another customer's service, whatever the policy says, and no service at all.
        let (admin, _) = add_customer(&registry, "other", Plan::Free, NOW);
        let theirs = add_account(&registry, &admin, oidc_policy(), NOW);
        for service in [customer_service(&registry, &theirs), "nope-acme".into()] {
            let command = Explain {
                account: account.clone(),
                evidence: Evidence::Claims(Some(claims("repo:acme/infra"))),
                service: Some(service),
                ip: None,
                action: None,
            };
            let explained: Value =
                serde_json::from_str(&explain(&registry, command).unwrap()).unwrap();
            assert_eq!(explained["decision"], "deny", "{explained}");
            assert_eq!(explained["reasons"][0]["code"], "service-not-allowed");
        }
    }

    #[test]
    fn refusals_are_listed_for_the_caller_s_accounts_only() {
        let (registry, customer, admin) = registry(Plan::Free, NOW);
        let admin = caller(admin);
        let ours = add_account(&registry, &customer, oidc_policy(), NOW);
        let old = json!({"code": "claim-mismatch", "near": false, "n": 0});
        let recent = json!({"code": "claim-mismatch", "near": true, "n": 1});
        let store = &registry.store;
        store
            .record_refusals(&[(ours.id, old)], NOW - KEPT_FOR - time::Duration::hours(1))
            .unwrap();
        store
            .record_refusals(&[(ours.id, recent.clone())], NOW)
            .unwrap();
        let listed = refusals(&registry, &admin, &ours.id.to_string(), NOW).unwrap();
        assert_eq!(listed, [recent], "older than KEPT_FOR is not shown");
        let theirs = add_account(&registry, &other_customer(&registry), oidc_policy(), NOW);
        let refused = refusals(&registry, &admin, &theirs.id.to_string(), NOW).unwrap_err();
        assert!(matches!(refused, AppError::NotFound(_)), "{refused:?}");
    }
}
