//! Who is calling, and may they: bearer extraction, static tokens, anonymous secrets, federated
//! identity tokens, the IP allowlist and the service-pattern scope (DECISIONS §5–§7).

mod attempts;
mod federation;
mod token_cache;

pub use attempts::Attempts;
pub use token_cache::TokenCache;

use crate::client_ip::client_ip;
use crate::directory;
use crate::problem::{ApiError, ApiResult};
use crate::rate_limit::RetryAfter;
use crate::refusals::{self, RefusedRequest};
use crate::state::AppState;
use actix_web::{http::header, HttpRequest};
use registry_domain::access::{self, Credential, Grant, Refusal, Request};
use registry_domain::audit::Actor;
use registry_domain::credentials::{self, CredentialKind};
use registry_domain::policy::{PolicyKind, Scope};
use registry_domain::ports::{CredentialOwner, VerifiedToken};
use registry_domain::{Service, ServiceAccount};
use std::net::IpAddr;
use std::sync::Arc;
use time::OffsetDateTime;

/// A service account acting through the API.
#[derive(Debug)]
pub struct AccountCaller {
    /// The account (shared with the directory's cache).
    pub account: Arc<ServiceAccount>,
    /// For a federated caller, the rules whose claims the token matched (matched once per
    /// request: asking about many services does not match again).
    pub rules: Option<Box<[usize]>>,
    /// Who this is in the audit trail.
    pub who: Acting,
}

/// A caller allowed to act on one service.
#[derive(Debug)]
pub struct ServiceCaller {
    /// The service.
    pub service: Service,
    /// Who acts on it, for the audit trail.
    pub who: Acting,
}

/// Who a granted call acts as. The audit [`Actor`] is built from it only when the call changes
/// something: reads pay for no copy of the token's `iss` and `sub`.
#[derive(Debug, Clone)]
pub struct Acting {
    account: Option<uuid::Uuid>,
    token: Option<Arc<VerifiedToken>>,
}

impl Acting {
    /// A static token's account, a federated token's account with the token's `iss` and `sub`,
    /// or an anonymous secret.
    pub fn actor(&self) -> Actor {
        match (self.account, &self.token) {
            (Some(account), Some(token)) => {
                let sub = token.claims.get("sub").and_then(|s| s.as_str());
                Actor::federated(account, Some(token.issuer.clone()), sub.map(str::to_owned))
            }
            (Some(account), None) => Actor::static_token(account),
            (None, _) => Actor::anonymous(),
        }
    }
}

impl AccountCaller {
    /// The services this caller may act on.
    pub fn scope(&self) -> Option<Scope<'_>> {
        match (self.account.policy.kind(), &self.rules) {
            (PolicyKind::Static, _) => self.account.policy.static_scope(),
            (PolicyKind::Oidc, Some(rules)) => {
                Some(self.account.policy.rules_scope(rules)).filter(|s| !s.is_empty())
            }
            (PolicyKind::Oidc, None) => None,
        }
    }

    /// Whether the caller may act on `subdomain`.
    pub fn may_act_on(&self, subdomain: &str) -> bool {
        self.scope().is_some_and(|s| s.matches(subdomain))
    }

    /// The customer the caller acts for.
    pub fn customer_id(&self) -> uuid::Uuid {
        self.account.customer_id
    }
}

/// The bearer token of the request.
fn bearer(req: &HttpRequest) -> ApiResult<&str> {
    let value = req
        .headers()
        .get(header::AUTHORIZATION)
        .ok_or_else(|| unauthorized("no Authorization header"))?
        .to_str()
        .map_err(|_| unauthorized("Authorization header is not text"))?;
    let (scheme, token) = value
        .split_once(' ')
        .ok_or_else(|| unauthorized("Authorization header is not 'Bearer <token>'"))?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(unauthorized("Authorization scheme is not Bearer"));
    }
    Ok(token)
}

/// A 401 whose reason is logged, never returned.
pub(crate) fn unauthorized(reason: &str) -> ApiError {
    tracing::info!(reason, "authentication failed");
    ApiError::Unauthorized { detail: None }
}

/// Whether a bearer looks like a compact JWS (three base64url segments).
fn looks_like_jwt(token: &str) -> bool {
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    !header.is_empty()
        && !payload.is_empty()
        && [header, payload, signature].iter().all(|s| {
            s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// The 429 of a client over its failed-authentication limit.
fn too_many_failures(retry: RetryAfter) -> ApiError {
    ApiError::RateLimited {
        retry_after_secs: retry.0.as_secs().max(1),
        detail: "too many failed authentications from this address; retry later".into(),
    }
}

/// Refuses clients that failed to authenticate too often.
fn check_brute_force(state: &AppState, ip: IpAddr) -> ApiResult<()> {
    state.auth_failures.check(ip).map_err(too_many_failures)
}

fn record_failure(state: &AppState, ip: IpAddr, error: ApiError) -> ApiError {
    if matches!(error, ApiError::Unauthorized { .. }) {
        let _ = state.auth_failures.hit(ip);
    }
    error
}

/// Verifies a static token or anonymous secret; returns its owner. Counts its own failures
/// against the client's limit: an argon2 check counts as an attempt before it runs, whatever
/// its outcome, so a burst of wrong secrets is refused before it is hashed, not after.
async fn verify_secret(state: &AppState, token: &str, ip: IpAddr) -> ApiResult<CredentialOwner> {
    let cheap = async {
        let parsed =
            credentials::parse(token).ok_or_else(|| unauthorized("malformed bearer token"))?;
        let stored = directory::credential(state, parsed.lookup_id)
            .await?
            .ok_or_else(|| unauthorized("unknown token lookup id"))?;
        let kind_matches = matches!(
            (parsed.kind, stored.owner),
            (CredentialKind::StaticToken, CredentialOwner::Account(_))
                | (
                    CredentialKind::AnonymousSecret,
                    CredentialOwner::AnonymousService(_)
                )
        );
        if !kind_matches {
            return Err(unauthorized("token prefix does not match its owner"));
        }
        Ok((parsed.lookup_id, stored))
    };
    let (lookup_id, stored) = cheap.await.map_err(|e| record_failure(state, ip, e))?;
    let remembered = || state.tokens.verified(lookup_id, &stored.hash, token);
    if remembered() {
        state.metrics.token_cache_hit();
        return Ok(stored.owner);
    }
    state.auth_failures.hit(ip).map_err(too_many_failures)?;
    let _turn = state.attempts.turn(lookup_id).await?;
    // The check this one waited for may have been of this very token.
    if remembered() {
        state.metrics.token_cache_hit();
        return Ok(stored.owner);
    }
    state.metrics.argon2_verification();
    let ok = state
        .hasher
        .verify(token.to_owned(), stored.hash.clone())
        .await?;
    if !ok {
        return Err(unauthorized("token does not match its stored hash"));
    }
    state.tokens.remember(lookup_id, &stored.hash, token);
    Ok(stored.owner)
}

/// Who a verified static token or anonymous secret belongs to.
enum SecretHolder {
    Account(Arc<ServiceAccount>),
    AnonymousService(uuid::Uuid),
}

impl SecretHolder {
    fn credential(&self) -> Credential<'_> {
        match self {
            SecretHolder::Account(account) => Credential::Account(account),
            SecretHolder::AnonymousService(id) => Credential::AnonymousSecret(*id),
        }
    }
}

/// Verifies a static token or anonymous secret ([`verify_secret`]) and loads its account.
async fn secret_holder(state: &AppState, token: &str, ip: IpAddr) -> ApiResult<SecretHolder> {
    match verify_secret(state, token, ip).await? {
        CredentialOwner::Account(id) => directory::account(state, id)
            .await?
            .map(SecretHolder::Account)
            .ok_or_else(|| {
                record_failure(state, ip, unauthorized("the token's account was deleted"))
            }),
        CredentialOwner::AnonymousService(id) => Ok(SecretHolder::AnonymousService(id)),
    }
}

/// The answer to a refused call (DECISIONS §4), for a service named `key` in the path.
fn refused(refusal: Refusal, key: &str) -> ApiError {
    match refusal {
        Refusal::Unauthenticated(reason) => unauthorized(reason),
        Refusal::Ambiguous => ApiError::Unauthorized {
            detail: Some(
                "several service accounts accept this identity token: choose one with the \
                 X-Service-Account header"
                    .into(),
            ),
        },
        Refusal::Forbidden(detail) => {
            tracing::info!(%detail, "call refused");
            ApiError::Forbidden(detail)
        }
        Refusal::NotFound => not_found_service(key),
    }
}

/// What a granted call does besides acting: its account's `lastUsedAt` (DECISIONS §13); and
/// who it acts as.
fn granted(
    state: &AppState,
    grant: &Grant<'_>,
    token: Option<&Arc<VerifiedToken>>,
    now: OffsetDateTime,
) -> Acting {
    let account = grant.account().map(|a| a.id);
    if let Some(id) = account {
        state.last_use.used(&state.store, id, now);
    }
    Acting {
        account,
        token: token.cloned(),
    }
}

fn refused_request<'a>(
    ip: IpAddr,
    token: &'a VerifiedToken,
    candidates: &'a [Arc<ServiceAccount>],
    chosen: Option<uuid::Uuid>,
    service: Option<&'a Service>,
) -> RefusedRequest<'a> {
    RefusedRequest {
        ip,
        token,
        candidates,
        chosen,
        service,
        ambiguous: false,
    }
}

/// The answer to a federated call refused after its token verified: a 401 or 403 is recorded
/// in the refusal log of the accounts' owner (DECISIONS §12) and counted as a failure.
async fn refused_federated(
    state: &AppState,
    mut request: RefusedRequest<'_>,
    refusal: Refusal,
    key: &str,
) -> ApiError {
    let ip = request.ip;
    if !matches!(refusal, Refusal::NotFound) {
        request.ambiguous = matches!(refusal, Refusal::Ambiguous);
        refusals::record(state, request).await;
    }
    record_failure(state, ip, refused(refusal, key))
}

fn caller_of(grant: &Grant<'_>, who: Acting) -> Option<AccountCaller> {
    match grant {
        Grant::Account { account, rules } => Some(AccountCaller {
            account: Arc::clone(account),
            rules: rules.clone().map(Vec::into_boxed_slice),
            who,
        }),
        Grant::AnonymousService => None,
    }
}

/// Authenticates a call that is not about one service (`/services` collection,
/// `/service-accounts…`). Anonymous secrets are refused with 403.
pub async fn collection_caller(state: &AppState, req: &HttpRequest) -> ApiResult<AccountCaller> {
    let ip = client_ip(req, &state.trusted_proxies);
    check_brute_force(state, ip)?;
    let token = bearer(req).map_err(|e| record_failure(state, ip, e))?;
    let now = state.now();
    if looks_like_jwt(token) {
        let federated = federation::verified(state, req, token).await;
        let (verified, candidates, chosen) = federated.map_err(|e| record_failure(state, ip, e))?;
        let credential = Credential::IdentityToken {
            claims: &verified.claims,
            candidates: &candidates,
            chosen,
        };
        let grant = match access::decide(credential, Request::Collection, ip, now) {
            Ok(grant) => grant,
            Err(refusal) => {
                let request = refused_request(ip, &verified, &candidates, chosen, None);
                return Err(refused_federated(state, request, refusal, "").await);
            }
        };
        let who = granted(state, &grant, Some(&verified), now);
        // An identity token acts as an account.
        return caller_of(&grant, who).ok_or(ApiError::Internal);
    }
    let holder = secret_holder(state, token, ip).await?;
    let grant = access::decide(holder.credential(), Request::Collection, ip, now)
        .map_err(|refusal| refused(refusal, ""))?;
    let who = granted(state, &grant, None, now);
    // `decide` refuses an anonymous secret on a collection call: a grant here is an account.
    caller_of(&grant, who).ok_or(ApiError::Internal)
}

/// Authenticates and authorizes a call on one service, found by subdomain or id; returns the
/// service. Answers 404 for services that do not exist, have expired or are not the caller's,
/// and 403 when the caller's address or patterns do not allow it (`registry_domain::access`).
pub async fn service_caller(
    state: &AppState,
    req: &HttpRequest,
    key: &str,
) -> ApiResult<ServiceCaller> {
    let ip = client_ip(req, &state.trusted_proxies);
    check_brute_force(state, ip)?;
    let token = bearer(req).map_err(|e| record_failure(state, ip, e))?;
    let now = state.now();
    if looks_like_jwt(token) {
        let federated = federation::verified(state, req, token).await;
        let (verified, candidates, chosen) = federated.map_err(|e| record_failure(state, ip, e))?;
        let service = directory::service(state, key).await?;
        let credential = Credential::IdentityToken {
            claims: &verified.claims,
            candidates: &candidates,
            chosen,
        };
        let grant = match access::decide(credential, Request::Service(service.as_deref()), ip, now)
        {
            Ok(grant) => grant,
            Err(refusal) => {
                let request =
                    refused_request(ip, &verified, &candidates, chosen, service.as_deref());
                return Err(refused_federated(state, request, refusal, key).await);
            }
        };
        return Ok(ServiceCaller {
            who: granted(state, &grant, Some(&verified), now),
            service: Service::clone(service.as_deref().ok_or(ApiError::Internal)?),
        });
    }
    let holder = secret_holder(state, token, ip).await?;
    let credential = holder.credential();
    let service = directory::service(state, key).await?;
    let grant = access::decide(credential, Request::Service(service.as_deref()), ip, now)
        .map_err(|refusal| refused(refusal, key))?;
    Ok(ServiceCaller {
        who: granted(state, &grant, None, now),
        service: Service::clone(service.as_deref().ok_or(ApiError::Internal)?),
    })
}

/// The 404 of a service that does not exist for this caller.
pub fn not_found_service(key: &str) -> ApiError {
    ApiError::NotFound(format!("no service {key:?}"))
}

#[cfg(test)]
mod tests {
    use super::looks_like_jwt;

    #[test]
    fn jwt_shape() {
        assert!(looks_like_jwt("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"));
        assert!(looks_like_jwt("eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0."));
        assert!(!looks_like_jwt("rgst_abc_def"));
        assert!(!looks_like_jwt("a.b.c.d"));
        assert!(!looks_like_jwt("a..c"));
    }
}
