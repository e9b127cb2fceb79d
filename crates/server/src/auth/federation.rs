//! Callers that present an identity token from an external OIDC issuer (DECISIONS §7).
//!
//! Candidates are the accounts with a rule whose `iss` equals the token's exactly, found in the
//! directory's trust index (memory, exact): a token whose issuer no policy names is refused
//! before the database, the token cache or the key cache sees it. Which candidate accepts the
//! token, and for what, is `registry_domain::access::decide`.

use super::unauthorized;
use crate::directory::{self, Trusting};
use crate::hosting::{self, Hosted};
use crate::problem::{ApiError, ApiResult};
use crate::state::AppState;
use actix_web::HttpRequest;
use registry_domain::ports::{IdentityTokenVerifier, TokenRejection, VerifiedToken};
use registry_oidc::HostedKeys;
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
        Some(remembered) => remembered.token.issuer.clone(),
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
    // The request's one database read: revocations and narrowed policies hold at once, and
    // so do the documents of the issuers this registry hosts.
    directory::refresh(state).await?;
    let candidates = state
        .directory
        .accounts_trusting(&issuer)
        .ok_or_else(untrusted_issuer)?;
    let hosted = hosted_issuer(state, &issuer).await?;
    let key_version = hosted.as_ref().and_then(|published| {
        published
            .as_ref()
            .map(|documents| documents.jwks.etag.clone())
    });
    if let Some(remembered) = remembered {
        // A hosted issuer's token counts as verified only against the key set published now.
        let still_published = match &hosted {
            None => true,
            Some(_) => key_version.is_some() && remembered.key_version == key_version,
        };
        if still_published {
            state.metrics.identity_token_cache_hit();
            return Ok((remembered.token, candidates));
        }
    }
    let verified = verify(state, token, &issuer, hosted.as_ref(), now)
        .await
        .map_err(|rejection| unauthorized(&format!("identity token refused: {rejection}")))?;
    let verified = Arc::new(verified);
    state
        .tokens
        .remember_identity(token, verified.clone(), key_version, now);
    Ok((verified, candidates))
}

/// The documents an issuer this registry hosts publishes now: `None` when the issuer is not
/// one of its own (its keys are fetched over HTTP), `Some(None)` when it is but publishes
/// nothing (no configuration, deleted, expired). Read from the registry's own data, never over
/// HTTP, so that a withdrawal applies to the next token (DECISIONS §17).
pub(crate) async fn hosted_issuer(
    state: &AppState,
    issuer: &str,
) -> ApiResult<Option<Option<Arc<Hosted>>>> {
    let template = &state.settings.issuer_url_template;
    let Some(scheme) = template.split_once("://").map(|(scheme, _)| scheme) else {
        return Ok(None);
    };
    let host = issuer
        .strip_prefix(scheme)
        .and_then(|rest| rest.strip_prefix("://"))
        .filter(|host| !host.contains('/'));
    let Some(subdomain) = host.and_then(|host| state.hosting.subdomain_for_host(host)) else {
        return Ok(None);
    };
    let ours = state.issuer_of(&subdomain);
    if !ours.eq_ignore_ascii_case(issuer) {
        // Another port or scheme: not an issuer of this registry's template.
        return Ok(None);
    }
    // Ours but spelt in other letters: never fetched, and no hosted document names it.
    if ours != issuer {
        return Ok(Some(None));
    }
    Ok(Some(hosting::current(state, &subdomain).await?))
}

/// Verifies a token as a request would, without the token cache (explaining a token): an
/// issuer this registry hosts is read from its own data.
pub(crate) async fn verify_identity(
    state: &AppState,
    token: &str,
) -> ApiResult<Result<VerifiedToken, TokenRejection>> {
    let now = state.now();
    let issuer = state.verifier.unverified_issuer(token);
    let hosted = match &issuer {
        Some(issuer) => hosted_issuer(state, issuer).await?,
        None => None,
    };
    let issuer = issuer.unwrap_or_default();
    Ok(verify(state, token, &issuer, hosted.as_ref(), now).await)
}

/// Verifies a token: against the registry's own documents for an issuer it hosts, else
/// against the keys its issuer serves over HTTP.
pub(crate) async fn verify(
    state: &AppState,
    token: &str,
    issuer: &str,
    hosted: Option<&Option<Arc<Hosted>>>,
    now: time::OffsetDateTime,
) -> Result<VerifiedToken, TokenRejection> {
    match hosted {
        None => state.verifier.verify(token, now).await,
        Some(published) => {
            let keys = match published {
                Some(documents) => HostedKeys::Published {
                    version: documents.jwks.etag.as_bytes(),
                    jwks: &documents.jwks.body,
                },
                None => HostedKeys::Withdrawn,
            };
            state
                .verifier
                .verify_hosted(token, now, issuer, keys)
                .map_err(TokenRejection::from)
        }
    }
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
