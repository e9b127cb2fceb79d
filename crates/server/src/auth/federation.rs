//! Callers that present an identity token from an external OIDC issuer (DECISIONS §7).
//!
//! Candidates are the accounts with a rule whose `iss` equals the token's exactly, found in the
//! directory's trust index (memory, exact): a token whose issuer no policy names is refused
//! before the database, the token cache or the key cache sees it. An account accepts the token
//! when one of its rules' claims match; the matching runs once per account and request, and for
//! a call on a service only the service owner's accounts are matched on the way to an answer
//! (spec §4 rule 2: a `*` rule never reaches another customer's services).

use super::{not_found_service, unauthorized, AccountCaller};
use crate::directory::{self, Trusting};
use crate::problem::{ApiError, ApiResult};
use crate::state::AppState;
use actix_web::HttpRequest;
use registry_domain::ports::{IdentityTokenVerifier, VerifiedToken};
use registry_domain::{Service, ServiceAccount};
use std::net::IpAddr;
use std::sync::Arc;
use uuid::Uuid;

const SELECT_HEADER: &str = "x-service-account";

fn untrusted_issuer() -> ApiError {
    unauthorized("no service account trusts the token's issuer")
}

/// Verifies the token (or finds it verified before) and the accounts that name its issuer.
async fn verified(state: &AppState, token: &str) -> ApiResult<(Arc<VerifiedToken>, Trusting)> {
    let now = state.now();
    // A look-up only: the token cache keeps tokens that verified, nothing else.
    let remembered = state.tokens.verified_identity(token, now);
    let issuer = match &remembered {
        Some(verified) => verified.issuer.clone(),
        None => state
            .verifier
            .unverified_issuer(token)
            .ok_or_else(|| unauthorized("malformed identity token"))?,
    };
    // Memory only: made-up issuers stop here. An account that starts trusting an issuer is in
    // the index on its own node at once and on the others at the next follower tick.
    if state.directory.accounts_trusting(&issuer).is_none() {
        return Err(untrusted_issuer());
    }
    // The request's one database read: revocations and narrowed policies hold at once.
    directory::refresh(state).await?;
    let candidates = state
        .directory
        .accounts_trusting(&issuer)
        .ok_or_else(untrusted_issuer)?;
    if let Some(verified) = remembered {
        state.metrics.identity_token_cache_hit();
        return Ok((verified, candidates));
    }
    let verified = Arc::new(
        state
            .verifier
            .verify(token, now)
            .await
            .map_err(|rejection| unauthorized(&format!("identity token refused: {rejection}")))?,
    );
    state.tokens.remember_identity(token, verified.clone(), now);
    Ok((verified, candidates))
}

/// The account the client chose with `X-Service-Account`, if it sent the header.
fn chosen_account(req: &HttpRequest) -> ApiResult<Option<Uuid>> {
    match req.headers().get(SELECT_HEADER) {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<Uuid>().ok())
            .map(Some)
            .ok_or_else(|| unauthorized("X-Service-Account is not a service account id")),
    }
}

/// The candidates the client's choice leaves.
fn eligible(
    candidates: &[Arc<ServiceAccount>],
    chosen: Option<Uuid>,
) -> impl Iterator<Item = &Arc<ServiceAccount>> + Clone {
    candidates
        .iter()
        .filter(move |a| chosen.is_none_or(|id| a.id == id))
}

/// The account as a caller, when one of its rules accepts the token's claims.
fn accepted(
    account: &Arc<ServiceAccount>,
    token: &VerifiedToken,
    ip: IpAddr,
) -> Option<AccountCaller> {
    let rules = account.policy.matching_rules(&token.claims);
    (!rules.is_empty()).then(|| AccountCaller {
        account: account.clone(),
        rules: Some(rules.into()),
        ip,
    })
}

fn nobody_accepts() -> ApiError {
    unauthorized("no service account's rules accept this identity token")
}

/// A federated caller of a collection call: exactly one account must accept the token.
pub(super) async fn collection_caller(
    state: &AppState,
    req: &HttpRequest,
    token: &str,
    ip: IpAddr,
) -> ApiResult<AccountCaller> {
    let chosen = chosen_account(req)?;
    let (token, candidates) = verified(state, token).await?;
    // Matching stops at the second account that accepts: that is already an ambiguity.
    let mut accepting = eligible(&candidates, chosen).filter_map(|a| accepted(a, &token, ip));
    let caller = accepting.next().ok_or_else(nobody_accepts)?;
    if accepting.next().is_some() {
        return Err(ApiError::Unauthorized {
            detail: Some(
                "several service accounts accept this identity token: choose one with the \
                 X-Service-Account header"
                    .into(),
            ),
        });
    }
    Ok(caller)
}

/// A federated caller of a call on one service.
pub(super) async fn service_caller(
    state: &AppState,
    req: &HttpRequest,
    token: &str,
    key: &str,
    ip: IpAddr,
) -> ApiResult<Service> {
    let chosen = chosen_account(req)?;
    let (token, candidates) = verified(state, token).await?;
    let now = state.now();
    let service = directory::service(state, key)
        .await?
        .filter(|s| !s.is_expired_at(now));
    let owner = service.as_ref().and_then(|s| s.customer_id);
    let owners: Vec<AccountCaller> = eligible(&candidates, chosen)
        .filter(|a| owner.is_some() && Some(a.customer_id) == owner)
        .filter_map(|a| accepted(a, &token, ip))
        .collect();
    let Some(service) = service.filter(|_| !owners.is_empty()) else {
        // No account of the owner accepts: a token some other account accepts is a caller
        // without this service (404, no existence oracle); one that nobody accepts, a 401.
        let accepted_elsewhere = eligible(&candidates, chosen)
            .filter(|a| owner.is_none() || Some(a.customer_id) != owner)
            .any(|a| !a.policy.matching_rules(&token.claims).is_empty());
        return Err(if accepted_elsewhere {
            not_found_service(key)
        } else {
            nobody_accepts()
        });
    };
    let reachable: Vec<&AccountCaller> = owners
        .iter()
        .filter(|c| c.account.policy.allows_ip(ip))
        .collect();
    if reachable.is_empty() {
        return Err(ApiError::Forbidden(
            "the source address is not in this service account's ip_allowlist".into(),
        ));
    }
    if !reachable.iter().any(|c| c.may_act_on(&service.subdomain)) {
        return Err(ApiError::Forbidden(format!(
            "no rule that accepts this identity token covers the service {:?}",
            service.subdomain
        )));
    }
    Ok(Service::clone(&service))
}
