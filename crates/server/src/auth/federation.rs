//! Callers that present an identity token from an external OIDC issuer (DECISIONS §7).
//!
//! Candidates are the accounts with a rule whose `iss` equals the token's exactly, found in the
//! directory's trust index (memory, exact): a token whose issuer no policy names is refused
//! before the database, the token cache or the key cache sees it. Which candidate accepts the
//! token, and for what, is `registry_domain::access::decide`.

use super::unauthorized;
use crate::directory::{self, Trusting};
use crate::problem::{ApiError, ApiResult};
use crate::state::AppState;
use actix_web::HttpRequest;
use registry_domain::ports::{IdentityTokenVerifier, VerifiedToken};
use std::sync::Arc;
use uuid::Uuid;

const SELECT_HEADER: &str = "x-service-account";

fn untrusted_issuer() -> ApiError {
    unauthorized("no service account trusts the token's issuer")
}

/// A verified identity token, the accounts that name its issuer, and the account the client
/// chose with `X-Service-Account`.
pub(super) type Federated = (Arc<VerifiedToken>, Trusting, Option<Uuid>);

/// Verifies the token (or finds it verified before), and finds the accounts that name its
/// issuer and the client's choice among them; `registry_domain::access` decides the rest.
pub(super) async fn verified(
    state: &AppState,
    req: &HttpRequest,
    token: &str,
) -> ApiResult<Federated> {
    let chosen = chosen_account(req)?;
    let (verified, candidates) = verified_token(state, token).await?;
    Ok((verified, candidates, chosen))
}

async fn verified_token(
    state: &AppState,
    token: &str,
) -> ApiResult<(Arc<VerifiedToken>, Trusting)> {
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
