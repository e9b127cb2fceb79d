//! `/service-accounts…`: programmatic identities and their policies. No account can mint one
//! broader than itself: only callers whose patterns include `"*"` manage accounts, and a caller
//! limited to some addresses manages only accounts limited to addresses inside its own.

use crate::audit;
use crate::auth::{self, AccountCaller};
use crate::body::{read_json, Fields};
use crate::directory;
use crate::problem::{ApiError, ApiResult};
use crate::state::AppState;
use crate::views;
use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use registry_domain::access::{self, Refusal};
use registry_domain::audit::{Action, AuditEvent, Resource};
use registry_domain::credentials::{self, CredentialKind, GeneratedSecret};
use registry_domain::limits;
use registry_domain::limits::within_quota;
use registry_domain::policy::{ParsedPolicy, Policy, PolicyKind};
use registry_domain::ports::CredentialRecord;
use registry_domain::{ServiceAccount, Violation};
use serde_json::Value;
use uuid::Uuid;

const MAX_NAME: usize = 200;

/// A caller allowed to manage the customer's accounts (and read its audit trail): its patterns
/// include `"*"`.
pub(crate) async fn manager(state: &AppState, req: &HttpRequest) -> ApiResult<AccountCaller> {
    let caller = auth::collection_caller(state, req).await?;
    may_manage(&caller, None)?;
    Ok(caller)
}

/// DECISIONS §5 (`registry_domain::access::may_manage`): the caller's patterns include `"*"`,
/// and `target` (a new policy, or the one of an account it would change, delete or re-key) is
/// no broader than the caller's addresses.
fn may_manage(caller: &AccountCaller, target: Option<&Policy>) -> ApiResult<()> {
    let scope = caller.scope().unwrap_or_default();
    access::may_manage(&scope, &caller.account.policy, target).map_err(|refusal| match refusal {
        Refusal::Forbidden(detail) => ApiError::Forbidden(detail),
        _ => ApiError::Internal,
    })
}

/// The audit event of a change to the account `id` by `caller`.
fn account_event(
    state: &AppState,
    req: &HttpRequest,
    caller: &AccountCaller,
    action: Action,
    id: Uuid,
) -> AuditEvent {
    audit::event(
        state,
        req,
        &caller.who.actor(),
        action,
        Resource::account(id),
        Some(caller.customer_id()),
    )
}

fn not_found(id: &str) -> ApiError {
    ApiError::NotFound(format!("no service account {id:?}"))
}

/// An account that vanished between the check and the write is a 404 like any missing one.
fn gone_as_not_found(error: ApiError, id: &str) -> ApiError {
    match error {
        ApiError::NotFound(_) => not_found(id),
        other => other,
    }
}

/// The caller's customer's account with this id, or 404.
pub(crate) async fn owned_account(
    state: &AppState,
    caller: &AccountCaller,
    id: &str,
) -> ApiResult<ServiceAccount> {
    let parsed: Uuid = id.parse().map_err(|_| not_found(id))?;
    let customer_id = caller.customer_id();
    state
        .db(move |s| s.account(parsed))
        .await?
        .filter(|a| a.customer_id == customer_id)
        .ok_or_else(|| not_found(id))
}

/// An account the caller may change, delete or re-key: one of its customer's, and within its
/// addresses. Otherwise a caller limited to an office network could narrow an account usable
/// from anywhere and then take its token, or delete it.
async fn managed_account(
    state: &AppState,
    caller: &AccountCaller,
    id: &str,
) -> ApiResult<ServiceAccount> {
    let account = owned_account(state, caller, id).await?;
    may_manage(caller, Some(&account.policy))?;
    Ok(account)
}

fn under_policy(violations: Vec<Violation>) -> ApiError {
    ApiError::Validation(
        violations
            .into_iter()
            .map(|v| v.prefixed("/policy"))
            .collect(),
    )
}

/// Parses a policy from the body (pointers under `/policy`) and checks that it keeps within the
/// limits (`registry_domain::limits`: its size, and the issuers and rules of the customer's
/// accounts with it in place of account `replacing`), that every non-wildcard `services` entry
/// names a service of the customer (spec §4 rule 1) and that it is no broader than the caller's
/// addresses.
async fn checked_policy(
    state: &AppState,
    caller: &AccountCaller,
    document: &Value,
    replacing: Option<Uuid>,
) -> ApiResult<ParsedPolicy> {
    let parsed = Policy::parse(document).map_err(under_policy)?;
    let too_large = limits::check_policy(document);
    if !too_large.is_empty() {
        return Err(under_policy(too_large));
    }
    may_manage(caller, Some(&parsed.policy))?;
    let customer_id = caller.customer_id();
    if parsed.policy.kind() == PolicyKind::Oidc {
        let others: Vec<Policy> = state
            .db(move |s| s.accounts_of(customer_id))
            .await?
            .into_iter()
            .filter(|a| Some(a.id) != replacing)
            .map(|a| a.policy)
            .collect();
        limits::check_customer_budget(&parsed.policy, &others)
            .map_err(|v| under_policy(vec![v]))?;
    }
    let literals = parsed.policy.literal_services();
    if literals.is_empty() {
        return Ok(parsed);
    }
    let names: Vec<String> = literals.iter().map(|l| l.subdomain.clone()).collect();
    let owned = state
        .db(move |s| s.owned_subdomains(customer_id, &names))
        .await?;
    let unknown: Vec<Violation> = literals
        .into_iter()
        .filter(|l| !owned.contains(&l.subdomain))
        .map(|l| {
            Violation::new(
                format!("/policy{}", l.pointer),
                format!("no service {:?} exists in your account", l.subdomain),
            )
        })
        .collect();
    if unknown.is_empty() {
        Ok(parsed)
    } else {
        Err(ApiError::UnknownServices(unknown))
    }
}

async fn new_token(state: &AppState) -> ApiResult<(GeneratedSecret, CredentialRecord)> {
    let token = credentials::generate(CredentialKind::StaticToken, &state.rng);
    let hash = state.hasher.hash(token.plaintext.clone()).await?;
    let record = CredentialRecord {
        lookup_id: token.lookup_id.clone(),
        hash,
    };
    Ok((token, record))
}

fn with_warnings(mut body: Value, warnings: Vec<String>) -> Value {
    if !warnings.is_empty() {
        body["warnings"] = warnings.into();
    }
    body
}

/// `POST /service-accounts`.
pub async fn create(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let caller = manager(&state, &req).await?;
    let body = read_json(&req, payload, state.settings.max_body_bytes).await?;
    let mut fields = Fields::new(body.as_ref(), &["name", "policy"])?;
    let name = fields.string("name", true, MAX_NAME);
    let document = fields.raw("policy").cloned();
    if document.is_none() {
        fields
            .problems
            .push(Violation::new("/policy", "policy is required"));
    }
    let policy = match &document {
        Some(doc) => match checked_policy(&state, &caller, doc, None).await {
            Ok(parsed) => Some(parsed),
            Err(ApiError::Validation(v)) => {
                fields.problems.extend(v);
                None
            }
            Err(e) if fields.problems.is_empty() => return Err(e),
            Err(_) => None,
        },
        None => None,
    };
    fields.finish()?;
    let (Some(name), Some(ParsedPolicy { policy, warnings })) = (name, policy) else {
        return Err(ApiError::Internal);
    };
    let customer_id = caller.customer_id();
    let held = state.db(move |s| s.count_accounts_of(customer_id)).await?;
    within_quota(
        "service accounts",
        held,
        state.settings.max_accounts_per_customer,
    )
    .map_err(ApiError::QuotaExceeded)?;
    let account = ServiceAccount {
        id: Uuid::new_v4(),
        customer_id: caller.customer_id(),
        name,
        policy,
        created_at: state.now(),
        last_used_at: None,
    };
    let token = match account.policy.kind() {
        PolicyKind::Static => Some(new_token(&state).await?),
        PolicyKind::Oidc => None,
    };
    let row = account.clone();
    let record = token.as_ref().map(|(_, r)| r.clone());
    let event = account_event(&state, &req, &caller, Action::AccountCreate, account.id);
    state
        .db(move |s| s.create_account(&row, record.as_ref(), &event))
        .await?;
    // The issuers it trusts are in this node's trust index before the answer.
    directory::settle_write(&state).await;
    let mut body = views::account(&account);
    if let Some((token, record)) = &token {
        body["token"] = token.plaintext.clone().into();
        state.tokens.remember(
            &token.lookup_id,
            &record.hash,
            &token.plaintext,
            state.now(),
        );
    }
    Ok(HttpResponse::Created()
        .insert_header((
            header::LOCATION,
            format!("{}/service-accounts/{}", state.settings.base(), account.id),
        ))
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(with_warnings(body, warnings)))
}

/// `GET /service-accounts`: never with tokens.
pub async fn list(req: HttpRequest, state: web::Data<AppState>) -> ApiResult<HttpResponse> {
    let caller = manager(&state, &req).await?;
    let customer_id = caller.customer_id();
    let accounts = state.db(move |s| s.accounts_of(customer_id)).await?;
    Ok(HttpResponse::Ok().json(accounts.iter().map(views::account).collect::<Vec<_>>()))
}

/// `GET /service-accounts/{id}`.
pub async fn get(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let caller = manager(&state, &req).await?;
    let account = owned_account(&state, &caller, &path).await?;
    Ok(HttpResponse::Ok().json(views::account(&account)))
}

/// `PATCH /service-accounts/{id}`: name and/or policy; the kind never changes.
pub async fn patch(
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let caller = manager(&state, &req).await?;
    let mut account = managed_account(&state, &caller, &path).await?;
    let body = read_json(&req, payload, state.settings.max_body_bytes).await?;
    let mut fields = Fields::new(body.as_ref(), &["name", "policy"])?;
    let name = fields.string("name", false, MAX_NAME);
    let mut warnings = Vec::new();
    if let Some(document) = fields.raw("policy").cloned() {
        match checked_policy(&state, &caller, &document, Some(account.id)).await {
            Ok(parsed) if parsed.policy.kind() != account.policy.kind() => {
                let why = access::kind_may_change(account.policy.kind(), parsed.policy.kind())
                    .err()
                    .unwrap_or_default();
                return Err(ApiError::KindImmutable(Violation::new("/policy/kind", why)));
            }
            Ok(parsed) => {
                account.policy = parsed.policy;
                warnings = parsed.warnings;
            }
            // Field problems and policy problems are reported together.
            Err(ApiError::Validation(v)) => fields.problems.extend(v),
            Err(e) if fields.problems.is_empty() => return Err(e),
            Err(_) => {}
        }
    }
    fields.finish()?;
    if let Some(name) = name {
        account.name = name;
    }
    let row = account.clone();
    let event = account_event(&state, &req, &caller, Action::AccountUpdate, account.id);
    state
        .db(move |s| s.update_account(&row, &event))
        .await
        .map_err(|e| gone_as_not_found(e, &path))?;
    directory::settle_write(&state).await;
    Ok(HttpResponse::Ok().json(with_warnings(views::account(&account), warnings)))
}

/// `DELETE /service-accounts/{id}`: its token stops working at once.
pub async fn delete(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let caller = manager(&state, &req).await?;
    let account = managed_account(&state, &caller, &path).await?;
    let id = account.id;
    let event = account_event(&state, &req, &caller, Action::AccountDelete, id);
    if !state.db(move |s| s.delete_account(id, &event)).await? {
        return Err(not_found(&path));
    }
    directory::settle_write(&state).await;
    Ok(HttpResponse::NoContent().finish())
}

/// `POST /service-accounts/{id}/regenerate-token`: the old token fails from now on.
pub async fn regenerate_token(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let caller = manager(&state, &req).await?;
    let account = managed_account(&state, &caller, &path).await?;
    access::may_regenerate_token(account.policy.kind())
        .map_err(|why| ApiError::BadRequest(why.into()))?;
    let (token, record) = new_token(&state).await?;
    let id = account.id;
    let stored = record.clone();
    let event = account_event(&state, &req, &caller, Action::AccountRegenerateToken, id);
    state
        .db(move |s| s.replace_token(id, &stored, &event))
        .await
        .map_err(|e| gone_as_not_found(e, &path))?;
    state.tokens.remember(
        &token.lookup_id,
        &record.hash,
        &token.plaintext,
        state.now(),
    );
    Ok(HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(serde_json::json!({"id": account.id.to_string(), "token": token.plaintext})))
}
