//! Callers that present an identity token from an external OIDC issuer (DECISIONS §7).
//!
//! Candidates are the accounts with a rule whose `iss` equals the token's exactly (an indexed
//! look-up); an account accepts the token when one of its rules' claims match. For a call on a
//! service only the service owner's accounts count (spec §4 rule 2), so a `*` rule never reaches
//! another customer's services.

use super::{not_found_service, unauthorized, AccountCaller};
use crate::directory::{self, Trusting};
use crate::problem::{ApiError, ApiResult};
use crate::state::AppState;
use actix_web::HttpRequest;
use registry_domain::ports::{IdentityTokenVerifier, VerifiedToken};
use registry_domain::{Service, ServiceAccount};
use std::net::IpAddr;
use std::sync::Arc;

const SELECT_HEADER: &str = "x-service-account";

/// Verifies the token (or finds it verified before) and loads the accounts that name its
/// issuer. Tokens from issuers that no policy names are refused before any key is fetched.
async fn verified(state: &AppState, token: &str) -> ApiResult<(Arc<VerifiedToken>, Trusting)> {
    // The request's one database read: the accounts below are as fresh as the database.
    directory::refresh(state).await?;
    let now = state.now();
    if let Some(verified) = state.tokens.verified_identity(token, now) {
        let candidates = directory::accounts_trusting(state, &verified.issuer).await?;
        if candidates.is_empty() {
            return Err(unauthorized("no service account trusts the token's issuer"));
        }
        state.metrics.identity_token_cache_hit();
        return Ok((verified, candidates));
    }
    let issuer = state
        .verifier
        .unverified_issuer(token)
        .ok_or_else(|| unauthorized("malformed identity token"))?;
    let candidates = directory::accounts_trusting(state, &issuer).await?;
    if candidates.is_empty() {
        return Err(unauthorized("no service account trusts the token's issuer"));
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

/// The accounts (any customer) whose rules accept the token's claims, narrowed by
/// `X-Service-Account` when the client sent it.
fn accepting_accounts(
    req: &HttpRequest,
    token: &VerifiedToken,
    candidates: &[Arc<ServiceAccount>],
) -> ApiResult<Vec<Arc<ServiceAccount>>> {
    let chosen = match req.headers().get(SELECT_HEADER) {
        None => None,
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|v| v.trim().parse::<uuid::Uuid>().ok())
                .ok_or_else(|| unauthorized("X-Service-Account is not a service account id"))?,
        ),
    };
    let accepting: Vec<Arc<ServiceAccount>> = candidates
        .iter()
        .filter(|a| chosen.is_none_or(|id| a.id == id))
        .filter(|a| a.policy.oidc_scope(&token.claims).is_some())
        .cloned()
        .collect();
    if accepting.is_empty() {
        return Err(unauthorized(
            "no service account's rules accept this identity token",
        ));
    }
    Ok(accepting)
}

fn caller(account: Arc<ServiceAccount>, token: &VerifiedToken, ip: IpAddr) -> AccountCaller {
    AccountCaller {
        account,
        claims: Some(Arc::new(token.claims.clone())),
        ip,
    }
}

/// A federated caller of a collection call: exactly one account must accept the token.
pub(super) async fn collection_caller(
    state: &AppState,
    req: &HttpRequest,
    token: &str,
    ip: IpAddr,
) -> ApiResult<AccountCaller> {
    let (token, candidates) = verified(state, token).await?;
    let mut accepting = accepting_accounts(req, &token, &candidates)?;
    if accepting.len() > 1 {
        return Err(ApiError::Unauthorized {
            detail: Some(
                "several service accounts accept this identity token: choose one with the \
                 X-Service-Account header"
                    .into(),
            ),
        });
    }
    Ok(caller(accepting.remove(0), &token, ip))
}

/// A federated caller of a call on one service.
pub(super) async fn service_caller(
    state: &AppState,
    req: &HttpRequest,
    token: &str,
    key: &str,
    ip: IpAddr,
) -> ApiResult<Service> {
    let (token, candidates) = verified(state, token).await?;
    let accepting = accepting_accounts(req, &token, &candidates)?;
    let now = state.now();
    let service = directory::service(state, key)
        .await?
        .filter(|s| !s.is_expired_at(now))
        .ok_or_else(|| not_found_service(key))?;
    let owners: Vec<&Arc<ServiceAccount>> = accepting
        .iter()
        .filter(|a| Some(a.customer_id) == service.customer_id)
        .collect();
    if owners.is_empty() {
        return Err(not_found_service(key));
    }
    let reachable: Vec<&Arc<ServiceAccount>> = owners
        .into_iter()
        .filter(|a| a.policy.allows_ip(ip))
        .collect();
    if reachable.is_empty() {
        return Err(ApiError::Forbidden(
            "the source address is not in this service account's ip_allowlist".into(),
        ));
    }
    let covered = reachable.iter().any(|a| {
        a.policy
            .oidc_scope(&token.claims)
            .is_some_and(|scope| scope.matches(&service.subdomain))
    });
    if !covered {
        return Err(ApiError::Forbidden(format!(
            "no rule that accepts this identity token covers the service {:?}",
            service.subdomain
        )));
    }
    Ok(Service::clone(&service))
}
