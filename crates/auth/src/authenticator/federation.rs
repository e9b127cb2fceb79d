//! Callers that present an identity token from an external OIDC issuer (docs/api.md,
//! "Authentication").
//!
//! Candidates are the accounts with a rule whose `iss` equals the token's exactly, found in the
//! directory's trust index (memory, exact, brought up to date by the request's one database
//! read): a token whose issuer no policy names is refused before the token cache or the key
//! cache sees it. Which candidate accepts the token, and for what, is
//! `registry_domain::access::decide`.

use super::{unauthorized, Authenticator};
use crate::request::{header_text, Presented};
use crate::{AuthError, AuthResult};
use registry_domain::policy::ReasonCode;
use registry_domain::ports::{IssuerKeys, TokenRejection, VerifiedToken};
use registry_replica::hosting::Hosted;
use registry_replica::Trusting;
use std::sync::Arc;
use uuid::Uuid;

fn untrusted_issuer() -> AuthError {
    unauthorized("no service account trusts the token's issuer")
}

/// A verified identity token, the accounts that name its issuer, the account the client chose
/// with `X-Service-Account`, and whether this replica granted a request with the token before
/// (`TokenCache::accept_identity` is told of the first grant).
pub(super) type Federated = (Arc<VerifiedToken>, Trusting, Option<Uuid>, bool);

/// A token signed by its issuer but refused for a registered claim (its times, its audience),
/// with what its record in the refusal log needs.
pub(super) struct SignedRefusal {
    /// The token.
    pub token: Box<VerifiedToken>,
    /// Why: `token-expired` and the like.
    pub code: ReasonCode,
    /// The same, in a sentence for the server log.
    pub detail: String,
    /// The accounts that name its issuer.
    pub candidates: Trusting,
    /// The account the client chose.
    pub chosen: Option<Uuid>,
}

/// Verifies the token (or finds it verified before), and finds the accounts that name its
/// issuer and the client's choice among them; `registry_domain::access` decides the rest.
pub(super) async fn verified(
    auth: &Authenticator,
    req: &Presented<'_>,
    token: &str,
) -> AuthResult<Result<Federated, SignedRefusal>> {
    let chosen = chosen_account(req)?;
    Ok(match verified_token(auth, token).await? {
        Ok((verified, candidates, accepted)) => Ok((verified, candidates, chosen, accepted)),
        Err((rejection, candidates)) => match rejection.signed {
            Some(token) => Err(SignedRefusal {
                token,
                code: rejection.code,
                detail: rejection.detail,
                candidates,
                chosen,
            }),
            None => return Err(refused_token(&rejection.detail)),
        },
    })
}

/// The 401 of a token refused by its verification.
pub(super) fn refused_token(detail: &str) -> AuthError {
    unauthorized(&format!("identity token refused: {detail}"))
}

/// The token verified, the accounts that trust its issuer and whether it was accepted before;
/// or why it was refused (the accounts with it, for a token its issuer signed).
type Verification = Result<(Arc<VerifiedToken>, Trusting, bool), (TokenRejection, Trusting)>;

async fn verified_token(auth: &Authenticator, token: &str) -> AuthResult<Verification> {
    let now = auth.replica.now();
    // A look-up only: the token cache keeps tokens that verified, nothing else.
    let remembered = auth.tokens.verified_identity(token, now);
    let issuer = match &remembered {
        Some(remembered) => remembered.token.issuer.clone(),
        None => auth
            .verifier
            .unverified_issuer(token)
            .ok_or_else(|| unauthorized("malformed identity token"))?,
    };
    // The request's one database read: revocations and narrowed policies hold at once, and
    // so do the documents of the issuers this registry hosts, and an account created on
    // another replica a moment ago (its issuer enters this replica's index here), even for an
    // issuer this replica refused a moment before. A made-up issuer costs that read too, as
    // an unknown static token does; the failed authentications' limit bounds both.
    auth.replica.refresh().await?;
    let Some(candidates) = auth.replica.directory.accounts_trusting(&issuer) else {
        return Err(untrusted_issuer());
    };
    let hosted = auth.replica.hosted_issuer(&issuer, now).await?;
    // Read before the verification: a withdrawal meanwhile makes the next request verify again.
    // Only for an issuer fetched over HTTP: a hosted one has no place in the key cache.
    let generation;
    let key_version = match &hosted {
        Some(published) => (published.as_ref()).map(|documents| documents.jwks.etag.as_ref()),
        None => {
            generation = auth.verifier.key_generation(&issuer).to_be_bytes();
            Some(&generation[..])
        }
    };
    if let Some(remembered) = remembered {
        // A hosted issuer's token counts as verified only against the key set published now,
        // another issuer's only while no issuer withdrew its keys since (those of this one may
        // be gone: docs/api.md, "Authentication"); one verified against hosted keys is not
        // verified once the issuer is no longer hosted (a custom domain removed).
        let still_published =
            key_version.is_some() && remembered.key_version.as_deref() == key_version;
        if still_published {
            auth.counters.identity_token_cache_hit();
            let accepted = remembered.accepted();
            return Ok(Ok((remembered.token, candidates, accepted)));
        }
    }
    let verified = match verify(auth, token, &issuer, hosted.as_ref(), now).await {
        Ok(verified) => Arc::new(verified),
        Err(rejection) => return Ok(Err((rejection, candidates))),
    };
    auth.tokens
        .remember_identity(token, verified.clone(), key_version, now);
    Ok(Ok((verified, candidates, false)))
}

/// Verifies a token as a request would, without the token cache (explaining a token): an
/// issuer this registry hosts is read from its own data.
pub async fn verify_identity(
    auth: &Authenticator,
    token: &str,
) -> AuthResult<Result<VerifiedToken, TokenRejection>> {
    let now = auth.replica.now();
    let issuer = auth.verifier.unverified_issuer(token);
    let hosted = match &issuer {
        Some(issuer) => auth.replica.hosted_issuer(issuer, now).await?,
        None => None,
    };
    let issuer = issuer.unwrap_or_default();
    Ok(verify(auth, token, &issuer, hosted.as_ref(), now).await)
}

/// Verifies a token: against the registry's own documents for an issuer it hosts, else
/// against the keys its issuer serves over HTTP.
pub(crate) async fn verify(
    auth: &Authenticator,
    token: &str,
    issuer: &str,
    hosted: Option<&Option<Arc<Hosted>>>,
    now: time::OffsetDateTime,
) -> Result<VerifiedToken, TokenRejection> {
    let keys = match hosted {
        None => IssuerKeys::Fetched,
        Some(Some(documents)) => IssuerKeys::Hosted {
            issuer,
            version: &documents.jwks.etag[..],
            jwks: &documents.jwks.body,
        },
        Some(None) => IssuerKeys::Withdrawn { issuer },
    };
    auth.verifier.verify(token, keys, now).await
}

/// The account the client chose with `X-Service-Account`, if it sent the header.
fn chosen_account(req: &Presented<'_>) -> AuthResult<Option<Uuid>> {
    match req.service_account {
        None => Ok(None),
        Some(v) => header_text(v)
            .and_then(|v| v.trim().parse::<Uuid>().ok())
            .map(Some)
            .ok_or_else(|| unauthorized("X-Service-Account is not a service account id")),
    }
}
