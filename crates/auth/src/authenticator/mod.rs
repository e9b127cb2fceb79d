//! Who is calling, and may they: bearer extraction, static tokens, anonymous secrets, federated
//! identity tokens, the IP allowlist and the service-pattern scope (docs/api.md, "Authentication").

pub(crate) mod federation;

use crate::attempts::Attempts;
use crate::failures::SecretFailures;
use crate::last_use::LastUse;
use crate::rate_limit::RateLimiter;
use crate::rate_limit::RetryAfter;
use crate::refusals::{Named, RefusalBudget, RefusedRequest};
use crate::request::{header_text, request_id, Presented};
use crate::shared::SharedLimit;
use crate::token_cache::{TokenCache, RECENTLY};
use crate::Counters;
use crate::{AuthError, AuthResult};
use registry_domain::access::{self, Credential, Grant, Refusal, Request};
use registry_domain::app::{Caller, Origin};
use registry_domain::credentials::{self, CredentialKind};
use registry_domain::policy::Action;
use registry_domain::ports::{
    ActivityLog, CredentialOwner, IdentityTokenVerifier, Ticks, VerifiedToken,
};
use registry_domain::refusal::RefusedBy;
use registry_domain::{Service, ServiceAccount};
use registry_hasher::HashingLanes;
use registry_replica::Replica;
use sha2::Digest;
use std::net::IpAddr;
use std::sync::Arc;
use subtle::ConstantTimeEq;
use time::OffsetDateTime;

/// Failed secrets for one lookup id per minute, from any address (docs/api.md, "Authentication").
const SECRET_FAILURES_PER_MINUTE: usize = 10;

/// Who is calling: the credential caches, the limits on failures and writes, the hasher and
/// the verifier, over the replica's view of the data. One per process, shared by the workers.
#[derive(Debug)]
pub struct Authenticator {
    pub(crate) replica: Arc<Replica>,
    /// Where last uses and refusals go: the authenticator's one storage port.
    activity: Arc<dyn ActivityLog>,
    pub(crate) verifier: Arc<dyn IdentityTokenVerifier>,
    hasher: Arc<HashingLanes>,
    pub(crate) counters: Arc<dyn Counters>,
    /// Remembered verifications of secrets and identity tokens.
    pub tokens: TokenCache,
    attempts: Attempts,
    /// Failed authentications per client address.
    pub auth_failures: RateLimiter,
    secret_failures: SecretFailures,
    writes: RateLimiter<uuid::Uuid>,
    writes_per_minute: u32,
    /// The minute each account's last use was written.
    pub last_use: LastUse,
    refusals: RefusalBudget,
    /// When this replica last accepted the fetch-log token (Unix seconds; 0: never), so that
    /// the per-address limit never refuses a shipper that works ([`shipper`]).
    shipper_verified_at: std::sync::atomic::AtomicI64,
}

/// The limits an authenticator enforces (docs/api.md, "Authentication" and "Errors"), and the
/// monotonic time they count in.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Failed authentications per client address and minute.
    pub auth_failures_per_minute: u32,
    /// Changes per credential and minute.
    pub writes_per_minute: u32,
    /// The time the limits count in.
    pub ticks: Arc<dyn Ticks>,
}

impl Authenticator {
    /// An authenticator with empty caches and these limits.
    pub fn new(
        limits: Limits,
        replica: Arc<Replica>,
        activity: Arc<dyn ActivityLog>,
        verifier: Arc<dyn IdentityTokenVerifier>,
        hasher: Arc<HashingLanes>,
        counters: Arc<dyn Counters>,
    ) -> Self {
        Self {
            replica,
            activity,
            verifier,
            hasher,
            counters,
            tokens: TokenCache::default(),
            attempts: Attempts::default(),
            // Guessing a 268-bit secret is hopeless anyway; the limit bounds the argon2 work a
            // stranger can cause while staying far above what an honest client with a stale
            // token produces.
            auth_failures: RateLimiter::new(
                limits.auth_failures_per_minute,
                std::time::Duration::from_secs(60),
                limits.ticks.clone(),
            ),
            secret_failures: SecretFailures::new(
                SECRET_FAILURES_PER_MINUTE,
                std::time::Duration::from_secs(60),
                limits.ticks.clone(),
            ),
            writes: RateLimiter::per_minute(limits.writes_per_minute, limits.ticks)
                .shared("writes"),
            writes_per_minute: limits.writes_per_minute,
            last_use: LastUse::default(),
            refusals: RefusalBudget::default(),
            shipper_verified_at: std::sync::atomic::AtomicI64::new(0),
        }
    }

    /// Its limits that the replicas share ([`crate::shared`]): writes per credential, failed
    /// secrets per lookup id.
    pub fn shared_limits(&self) -> [&dyn SharedLimit; 2] {
        [&self.writes, &self.secret_failures]
    }

    /// The verifier of identity tokens.
    pub fn verifier(&self) -> &dyn IdentityTokenVerifier {
        &*self.verifier
    }

    /// Records a federated call that a use case refused (403) after its token verified: a
    /// `POST /services` whose new service's `subdomain` the caller's rules do not cover
    /// (docs/api.md, "Explaining refusals"). The caller's account records it, under its own
    /// budget; any other caller is no one's refusal.
    pub async fn refused_creation(&self, caller: &Caller, subdomain: &str, action: Action) {
        let (Some(account), Some(token)) = (caller.acting_account(), caller.verified_token())
        else {
            return;
        };
        let candidates = [Arc::clone(account)];
        let mut refused = refused_request(
            caller.origin().ip,
            token,
            &candidates,
            Some(account.id),
            None,
            action,
        );
        refused.service = Some(Named::New(subdomain));
        self.refusals
            .record(&self.activity, self.replica.now(), refused)
            .await;
    }

    /// Counts a successful request of `account` at `now` (`lastUsedAt`: docs/api.md, "Audit
    /// trail and last use"): written at most once a minute, off the request's path.
    pub fn used(&self, account: uuid::Uuid, now: OffsetDateTime) {
        self.last_use.used(&self.activity, account, now);
    }
}

/// The bearer token of the request.
fn bearer<'r>(req: &Presented<'r>) -> AuthResult<&'r str> {
    let value = req
        .authorization
        .ok_or_else(|| unauthorized("no Authorization header"))?;
    let value =
        header_text(value).ok_or_else(|| unauthorized("Authorization header is not text"))?;
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
pub(crate) fn unauthorized(reason: &str) -> AuthError {
    tracing::info!(reason, "authentication failed");
    AuthError::Unauthorized { detail: None }
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
        && [header, payload, signature].iter().all(|s| base64url(s))
}

/// Whether `text` holds base64url characters only. Each byte is tested without a branch, so
/// that the compiler tests many at once: an identity token is a kilobyte or more, and every
/// federated request reads it (docs/benchmarks.md).
fn base64url(text: &str) -> bool {
    text.bytes().fold(true, |ok, b| {
        let digit = b.wrapping_sub(b'0') < 10;
        // Upper case folded onto lower case; no other byte lands in `a..=z` that way.
        let letter = (b | 0x20).wrapping_sub(b'a') < 26;
        ok & (digit | letter | (b == b'-') | (b == b'_'))
    })
}

/// The 429 of a client over its failed-authentication limit.
fn too_many_failures(retry: RetryAfter) -> AuthError {
    AuthError::RateLimited {
        retry_after_secs: retry.seconds(),
        detail: "too many failed authentications from this address; retry later".into(),
    }
}

/// The 429 of a lookup id whose secrets were tried too often (docs/api.md, "Authentication").
fn too_many_wrong_secrets(retry: RetryAfter) -> AuthError {
    tracing::info!("too many failed secrets for one lookup id");
    AuthError::RateLimited {
        retry_after_secs: retry.seconds(),
        detail: "too many failed authentications for this credential; retry later".into(),
    }
}

/// The client's address and bearer, once past the per-address limit on failed
/// authentications (docs/api.md, "Authentication"). The limit never refuses a credential this
/// replica accepted within the last minute: a neighbour in the same /64 or behind the same NAT
/// cannot lock out a working token. Deciding that reads memory only.
fn admitted<'r>(
    auth: &Authenticator,
    req: &Presented<'r>,
    now: OffsetDateTime,
) -> AuthResult<(IpAddr, &'r str)> {
    admitted_if(auth, req, |token| recently_verified(auth, token, now))
}

/// [`admitted`], a bearer being one this replica accepted within the last minute when
/// `recent` says so.
fn admitted_if<'r>(
    auth: &Authenticator,
    req: &Presented<'r>,
    recent: impl FnOnce(&str) -> bool,
) -> AuthResult<(IpAddr, &'r str)> {
    let ip = req.ip;
    let token = bearer(req);
    if let Err(retry) = auth.auth_failures.check(ip) {
        let recent = token.as_ref().is_ok_and(|token| recent(token));
        if !recent {
            return Err(too_many_failures(retry));
        }
    }
    let token = token.map_err(|e| record_failure(auth, ip, e))?;
    Ok((ip, token))
}

/// Whether this replica accepted exactly this bearer within the last minute.
fn recently_verified(auth: &Authenticator, token: &str, now: OffsetDateTime) -> bool {
    if looks_like_jwt(token) {
        return auth.tokens.recently_verified_identity(token, now);
    }
    credentials::parse(token).is_some_and(|parsed| {
        auth.tokens
            .recently_verified_secret(parsed.lookup_id, token, now)
    })
}

fn record_failure(auth: &Authenticator, ip: IpAddr, error: AuthError) -> AuthError {
    if matches!(error, AuthError::Unauthorized { .. }) {
        let _ = auth.auth_failures.hit(ip);
    }
    error
}

/// Verifies a static token or anonymous secret; returns its owner. Counts its own failures
/// against the client's limit: an argon2 check counts as an attempt before it runs, so a burst
/// of wrong secrets is refused before it is hashed, not after; a secret that verifies, or is
/// not hashed at all, gives its attempt back (no failure: the first uses of working tokens
/// behind one NAT, a replica's restart, lock out nobody).
async fn verify_secret(
    auth: &Authenticator,
    token: &str,
    ip: IpAddr,
) -> AuthResult<CredentialOwner> {
    let cheap = async {
        let parsed =
            credentials::parse(token).ok_or_else(|| unauthorized("malformed bearer token"))?;
        let stored = auth
            .replica
            .credential(parsed.lookup_id)
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
    let (lookup_id, stored) = cheap.await.map_err(|e| record_failure(auth, ip, e))?;
    let now = auth.replica.now();
    let remembered = || auth.tokens.verified(lookup_id, &stored.hash, token, now);
    if remembered() {
        auth.counters.token_cache_hit();
        return Ok(stored.owner);
    }
    // Each argon2 check counts against the client's address before it runs; and a lookup id
    // whose secrets failed too often, from any address, is not hashed for until its allowance
    // comes back: strangers who know a lookup id cannot make the registry hash for it more
    // than a few times a minute, and a secret verified before never gets here.
    auth.auth_failures.hit(ip).map_err(too_many_failures)?;
    let checked = hashed_check(auth, lookup_id, &stored.hash, token, now).await;
    // Only a secret hashed and found wrong stays counted: one that verified, or that was not
    // hashed at all (a queue full, a lookup id refused), is no failure of this address.
    if !matches!(checked, Err(AuthError::Unauthorized { .. })) {
        auth.auth_failures.give_back(ip);
    }
    checked.map(|()| stored.owner)
}

/// The argon2 check of `token` against `hash`, one at a time per lookup id: `Ok` when it
/// verifies (remembered), `Unauthorized` when it does not.
async fn hashed_check(
    auth: &Authenticator,
    lookup_id: &str,
    hash: &str,
    token: &str,
    now: OffsetDateTime,
) -> AuthResult<()> {
    let remembered = || auth.tokens.verified(lookup_id, hash, token, now);
    auth.secret_failures
        .check(lookup_id)
        .map_err(too_many_wrong_secrets)?;
    let turn = auth.attempts.turn(lookup_id, token).await?;
    // The check this one waited for may have been of this very token, found right or wrong.
    if remembered() {
        auth.counters.token_cache_hit();
        return Ok(());
    }
    if turn.found_wrong() {
        return Err(unauthorized("token does not match its stored hash"));
    }
    // Or the last failure the lookup id's allowance had room for: those that waited behind it
    // are not hashed either.
    auth.secret_failures
        .check(lookup_id)
        .map_err(too_many_wrong_secrets)?;
    auth.counters.argon2_verification();
    let ok = auth
        .hasher
        .verify(token.to_owned(), hash.to_owned())
        .await?;
    if !ok {
        turn.wrong();
        auth.secret_failures.record(lookup_id);
        return Err(unauthorized("token does not match its stored hash"));
    }
    auth.tokens.remember(lookup_id, hash, token, now);
    Ok(())
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
async fn secret_holder(auth: &Authenticator, token: &str, ip: IpAddr) -> AuthResult<SecretHolder> {
    match verify_secret(auth, token, ip).await? {
        CredentialOwner::Account(id) => auth
            .replica
            .account(id)
            .await?
            .map(SecretHolder::Account)
            .ok_or_else(|| {
                record_failure(
                    auth,
                    ip,
                    unauthorized("the token's account was deleted, or its customer is disabled"),
                )
            }),
        CredentialOwner::AnonymousService(id) => Ok(SecretHolder::AnonymousService(id)),
    }
}

/// The answer to a refused call (docs/api.md, "Authentication"), for a service named `key` in the
/// path.
fn refused(refusal: Refusal, key: &str) -> AuthError {
    match refusal {
        Refusal::Unauthenticated(reason) => unauthorized(reason),
        Refusal::Ambiguous => AuthError::Unauthorized {
            detail: Some(
                "more than one service account may accept this identity token (its issuer is \
                 trusted by several accounts): name yours with the X-Service-Account header"
                    .into(),
            ),
        },
        Refusal::Forbidden(detail) => {
            tracing::info!(%detail, "call refused");
            AuthError::Forbidden(detail)
        }
        Refusal::NotFound => not_found_service(key),
        Refusal::ActionNotAllowed(action) => {
            tracing::info!(action = action.as_str(), "call refused: action not allowed");
            AuthError::ActionNotAllowed(format!(
                "this service account's policy does not allow the action {:?} that this call \
                 takes",
                action.as_str()
            ))
        }
    }
}

/// What a granted call does besides acting: the write rate of its credential (the account for
/// tokens, the service for an anonymous secret; docs/api.md, "Errors"), its account's
/// `lastUsedAt` (docs/api.md, "Audit trail and last use"); and who it acts as.
fn granted(
    auth: &Authenticator,
    req: &Presented<'_>,
    grant: &Grant<'_>,
    token: Option<&Arc<VerifiedToken>>,
    ip: IpAddr,
    now: OffsetDateTime,
) -> AuthResult<Caller> {
    let account = grant.account().map(|a| a.id);
    let changes = req.changes;
    if let Some(credential) = account.or(grant.anonymous_service()) {
        if changes {
            auth.writes
                .hit_key(credential)
                .map_err(|retry| AuthError::RateLimited {
                    retry_after_secs: retry.seconds(),
                    detail: format!(
                        "this credential made more than {} changes in a minute; retry later",
                        auth.writes_per_minute
                    ),
                })?;
        }
    }
    // Counted once the request succeeded (the server calls `Authenticator::used`); at once
    // outside a request's scope.
    if let Some(id) = account {
        if !crate::request::note_use(id, now) {
            auth.used(id, now);
        }
    }
    // Only changes carry the request id (into their audit events): reads pay for no copy.
    let request_id = if changes { request_id() } else { None };
    Ok(grant.caller(token.cloned(), Origin::new(ip, request_id)))
}

fn refused_request<'a>(
    ip: IpAddr,
    token: &'a VerifiedToken,
    candidates: &'a [Arc<ServiceAccount>],
    chosen: Option<uuid::Uuid>,
    service: Option<&'a Service>,
    action: Action,
) -> RefusedRequest<'a> {
    RefusedRequest {
        ip,
        token,
        candidates,
        chosen,
        service: service.map(Named::Existing),
        action,
        refused_by: RefusedBy::Policy,
    }
}

/// The answer to a federated call refused after its token verified: a 401 or 403 is recorded
/// in the refusal log of the accounts' owner (docs/api.md, "Explaining refusals") and counted as a
/// failure.
async fn refused_federated(
    auth: &Authenticator,
    mut request: RefusedRequest<'_>,
    refusal: Refusal,
    key: &str,
) -> AuthError {
    let ip = request.ip;
    if !matches!(refusal, Refusal::NotFound) {
        if matches!(refusal, Refusal::Ambiguous) {
            request.refused_by = RefusedBy::Ambiguity;
        }
        auth.refusals
            .record(&auth.activity, auth.replica.now(), request)
            .await;
    }
    record_failure(auth, ip, refused(refusal, key))
}

/// The answer to a federated call whose token its issuer signed but a registered claim refused
/// (expired, say): a 401, recorded in the refusal log like a refusal of the policies.
async fn refused_claim(
    auth: &Authenticator,
    req: &Presented<'_>,
    ip: IpAddr,
    key: Option<&str>,
    signed: federation::SignedRefusal,
) -> AuthError {
    let service = match the_service(auth, key).await {
        Ok(service) => service,
        Err(error) => return error,
    };
    // A path naming no service the registry has is no one's refusal, as a policy's is not.
    if key.is_some() && service.is_none() {
        return record_failure(auth, ip, federation::refused_token(&signed.detail));
    }
    let mut request = refused_request(
        ip,
        &signed.token,
        &signed.candidates,
        signed.chosen,
        service.as_deref(),
        req.action,
    );
    request.refused_by = RefusedBy::Claim(signed.code);
    auth.refusals
        .record(&auth.activity, auth.replica.now(), request)
        .await;
    record_failure(auth, ip, federation::refused_token(&signed.detail))
}

/// Authenticates a call and asks `registry_domain::access::decide` about it once: on the
/// service the path names (its subdomain or id), or on no one service (`/services`,
/// `/service-accounts…`, `/audit-events`, where anonymous secrets are refused with 403). Answers the caller and
/// the service: 404 for a service that does not exist, has expired or is not the caller's, 403
/// when the caller's address or patterns do not allow the call.
async fn authorize(
    auth: &Authenticator,
    req: &Presented<'_>,
    call: Call<'_>,
) -> AuthResult<(Caller, Option<Arc<Service>>)> {
    let now = auth.replica.now();
    let (ip, token) = admitted(auth, req, now)?;
    let key = match call {
        Call::Service(key) => Some(key),
        _ => None,
    };
    let named = key.unwrap_or_default();
    if looks_like_jwt(token) {
        let federated = federation::verified(auth, req, token).await;
        let (verified, candidates, chosen, accepted) =
            match federated.map_err(|e| record_failure(auth, ip, e))? {
                Ok(federated) => federated,
                Err(signed) => return Err(refused_claim(auth, req, ip, key, signed).await),
            };
        let service = the_service(auth, key).await?;
        let credential = Credential::IdentityToken {
            claims: &verified.claims,
            candidates: &candidates,
            chosen,
        };
        let grant = match access::decide(credential, request(call, &service), req.action, ip, now) {
            Ok(grant) => grant,
            Err(refusal) => {
                // No account accepts it (any more): no working credential, whatever it was.
                if matches!(refusal, Refusal::Unauthenticated(_) | Refusal::Ambiguous) {
                    auth.tokens.forget_acceptance(token);
                }
                let request = refused_request(
                    ip,
                    &verified,
                    &candidates,
                    chosen,
                    service.as_deref(),
                    req.action,
                );
                return Err(refused_federated(auth, request, refusal, named).await);
            }
        };
        let caller = granted(auth, req, &grant, Some(&verified), ip, now)?;
        if !accepted {
            auth.tokens.accept_identity(token, now);
        }
        return Ok((caller, service));
    }
    let holder = match secret_holder(auth, token, ip).await {
        Ok(holder) => holder,
        Err(refused @ AuthError::Unauthorized { .. }) => {
            return Err(gone_anonymous(auth, token, key).await.unwrap_or(refused))
        }
        Err(other) => return Err(other),
    };
    let service = the_service(auth, key).await?;
    let grant = access::decide(
        holder.credential(),
        request(call, &service),
        req.action,
        ip,
        now,
    )
    .map_err(|refusal| refused(refusal, named))?;
    Ok((granted(auth, req, &grant, None, ip, now)?, service))
}

/// The 404 of an anonymous secret refused on the path of an anonymous service that is no more:
/// an expired service answers 404 everywhere (docs/api.md, "Anonymous services"), also once the
/// reaper has deleted it and, with it, its secret. The secret's shape says what it was; any
/// other refusal stays the 401 it was. Only a path that names an anonymous service (its
/// `-anon` subdomain, or an id) answers so: those names are random and cannot be guessed, so
/// that a made-up secret tells no one whether a registered service exists.
async fn gone_anonymous(auth: &Authenticator, token: &str, key: Option<&str>) -> Option<AuthError> {
    let key = key?;
    let parsed = credentials::parse(token)?;
    if parsed.kind != CredentialKind::AnonymousSecret {
        return None;
    }
    let unguessable = registry_domain::naming::is_anonymous_subdomain(&key.to_ascii_lowercase())
        || uuid::Uuid::try_parse(key).is_ok();
    if !unguessable {
        return None;
    }
    // Deleted by another replica (its secret with it), which this one may not have applied
    // yet: caught up first, as a request with an identity token is. Expired, though not yet
    // deleted: the reaper of another may have deleted its secret already.
    let _ = auth.replica.refresh().await;
    let now = auth.replica.now();
    match the_service(auth, Some(key)).await {
        Ok(None) => Some(not_found_service(key)),
        Ok(Some(service)) if service.expires_at.is_some_and(|at| at <= now) => {
            Some(not_found_service(key))
        }
        _ => None,
    }
}

/// The service the path names, if it names one.
async fn the_service(auth: &Authenticator, key: Option<&str>) -> AuthResult<Option<Arc<Service>>> {
    match key {
        Some(key) => Ok(auth.replica.service(key).await?),
        None => Ok(None),
    }
}

/// What a call acts on, as its path says.
#[derive(Debug, Clone, Copy)]
enum Call<'k> {
    /// The service named by this subdomain or id.
    Service(&'k str),
    /// `/services`.
    Services,
    /// `/service-accounts…`.
    Accounts,
    /// `/audit-events`.
    AuditTrail,
}

/// The call as `access::decide` sees it.
fn request<'s>(call: Call<'_>, service: &'s Option<Arc<Service>>) -> Request<'s> {
    match call {
        Call::Service(_) => Request::Service(service.as_deref()),
        Call::Services => Request::Services,
        // The account a call acts on is the use case's to find: its policy is checked there
        // (`Caller::may_manage`).
        Call::Accounts => Request::Accounts { target: None },
        Call::AuditTrail => Request::AuditTrail,
    }
}

/// Authenticates a cache shipping its access log (`POST /fetch-log`, docs/api.md, "Behind a
/// CDN"): the bearer must be `expected` (`REGISTRY_FETCH_LOG_TOKEN`), compared in constant time
/// (both hashed first, so the comparison's length is the digest's); a wrong one counts against
/// the address's failures like any refused credential.
pub fn shipper(auth: &Authenticator, req: &Presented<'_>, expected: &str) -> AuthResult<()> {
    use std::sync::atomic::Ordering::Relaxed;
    let now = auth.replica.now().unix_timestamp();
    let same = |given: &str| -> bool {
        sha2::Sha256::digest(given)
            .ct_eq(&sha2::Sha256::digest(expected))
            .into()
    };
    // As for an account's token: the limit never refuses the fetch-log token this replica
    // accepted within the last minute (a neighbour behind the same NAT, or another shipper
    // with a stale token, cannot stop the evidence).
    let accepted_at = auth.shipper_verified_at.load(Relaxed);
    let recently = accepted_at > 0 && now - accepted_at <= RECENTLY.whole_seconds();
    let (ip, given) = admitted_if(auth, req, |given| recently && same(given))?;
    if !same(given) {
        return Err(record_failure(
            auth,
            ip,
            unauthorized("wrong fetch-log token"),
        ));
    }
    auth.shipper_verified_at.fetch_max(now, Relaxed);
    Ok(())
}

/// Authenticates a call on `/services` (list or create). Anonymous secrets are refused with 403.
pub async fn collection_caller(auth: &Authenticator, req: &Presented<'_>) -> AuthResult<Caller> {
    Ok(authorize(auth, req, Call::Services).await?.0)
}

/// Authenticates a call on the customer's service accounts: a caller whose patterns include
/// `"*"` (docs/api.md, "Authentication").
pub async fn manager(auth: &Authenticator, req: &Presented<'_>) -> AuthResult<Caller> {
    Ok(authorize(auth, req, Call::Accounts).await?.0)
}

/// Authenticates a read of the customer's audit trail: a caller whose patterns include `"*"`.
pub async fn auditor(auth: &Authenticator, req: &Presented<'_>) -> AuthResult<Caller> {
    Ok(authorize(auth, req, Call::AuditTrail).await?.0)
}

/// Authenticates and authorizes a call on one service, found by subdomain or id (see
/// `authorize`): the caller, and the service (shared with the directory's cache).
pub async fn service_caller(
    auth: &Authenticator,
    req: &Presented<'_>,
    key: &str,
) -> AuthResult<(Caller, Arc<Service>)> {
    let (caller, service) = authorize(auth, req, Call::Service(key)).await?;
    // A grant on a service names a service that exists.
    Ok((caller, service.ok_or(AuthError::Internal)?))
}

/// The 404 of a service that does not exist for this caller.
pub fn not_found_service(key: &str) -> AuthError {
    AuthError::NotFound(format!("no service {key:?}"))
}

#[cfg(test)]
mod shape_tests {
    use super::{base64url, looks_like_jwt};

    #[test]
    fn base64url_takes_exactly_the_alphabet_of_rfc_4648_section_5() {
        for b in 0..=u8::MAX {
            let text = [b'A', b, b'z'];
            let expected = b.is_ascii_alphanumeric() || b == b'-' || b == b'_';
            assert_eq!(
                std::str::from_utf8(&text).is_ok_and(base64url),
                expected,
                "byte {b:#04x}"
            );
        }
        assert!(base64url(""));
        assert!(!base64url("é"));
    }

    #[test]
    fn jwt_shape() {
        assert!(looks_like_jwt("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"));
        assert!(looks_like_jwt("eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0."));
        assert!(!looks_like_jwt("rgst_abc_def"));
        assert!(!looks_like_jwt("a.b.c.d"));
        assert!(!looks_like_jwt("a..c"));
    }
}

#[cfg(test)]
mod tests;
