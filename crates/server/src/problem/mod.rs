//! Every error the API answers, and the one place that turns them into
//! `application/problem+json` (RFC 9457) responses; `kinds` is the table of their slugs, titles
//! and what their pages say, `pages` serves those pages.

pub mod kinds;
pub mod pages;

use actix_web::http::{header, StatusCode};
use actix_web::{HttpResponse, ResponseError};
use kinds::Kind;
use registry_auth::AuthError;
use registry_domain::app::AppError;
use registry_domain::naming::NamingError;
use registry_domain::ports::HasherBusy;
use registry_domain::{StoreError, Violation};
use registry_replica::ReplicaError;
use serde_json::json;
use std::borrow::Cow;
use std::sync::OnceLock;

/// Where naming problems point in a `POST /services` body.
pub const SERVICE_NAME_POINTER: &str = "/serviceName";

/// The API's base URL, for problem `type` addresses; set once at start-up.
static BASE_URL: OnceLock<String> = OnceLock::new();

/// Sets the base URL used in problem types (first call wins; tests may start several servers
/// with the same one).
pub fn set_base_url(base: &str) {
    let _ = BASE_URL.set(base.trim_end_matches('/').to_owned());
}

/// An error answered to the client.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The body is not JSON at all.
    #[error("the request body is not valid JSON: {0}")]
    InvalidJson(String),
    /// The body is JSON but breaks the rules.
    #[error("the request body is invalid")]
    Validation(Vec<Violation>),
    /// A policy names services the customer does not own.
    #[error("the policy names services that do not exist in your account")]
    UnknownServices(Vec<Violation>),
    /// A PATCH tried to change a policy's kind.
    #[error("a policy's kind cannot change")]
    KindImmutable(Violation),
    /// A naming rule was broken.
    #[error(transparent)]
    Naming(#[from] NamingError),
    /// Any other bad request, with a sentence.
    #[error("{0}")]
    BadRequest(String),
    /// Missing, malformed, unknown, revoked or expired credentials. The detail is generic unless
    /// it helps an honest caller (X-Service-Account); the reason goes to the log.
    #[error("authentication required")]
    Unauthorized { detail: Option<String> },
    /// Valid credentials, but not for this.
    #[error("{0}")]
    Forbidden(String),
    /// Valid credentials for what the call acts on, but its policy does not allow the call's
    /// action (the detail names it).
    #[error("{0}")]
    ActionNotAllowed(String),
    /// The resource does not exist, or is not the caller's.
    #[error("{0}")]
    NotFound(String),
    /// Nothing published (404, `nothing-published`).
    #[error("{0}")]
    NothingPublished(String),
    /// The method is not supported on this path; the methods that are.
    #[error("method not allowed: this path accepts {0}")]
    MethodNotAllowed(&'static str),
    /// The subdomain is taken.
    #[error("{0}")]
    Conflict(String),
    /// Another service holds the custom domain.
    #[error("{0}")]
    DomainTaken(String),
    /// Custom domains are not on (no ACME directory).
    #[error("{0}")]
    CustomDomainsDisabled(String),
    /// The customer has as many unproven domain claims as it may.
    #[error("{0}")]
    TooManyPendingDomains(String),
    /// The service has as many key sources as it may.
    #[error("{0}")]
    TooManySources(String),
    /// Managed signing needs a data key the operator has not set.
    #[error("{0}")]
    SigningDisabled(String),
    /// No managed key is safe to sign with yet.
    #[error("{detail}")]
    NoKeyReady {
        retry_after_secs: u64,
        detail: String,
    },
    /// A rotation of managed keys is in progress.
    #[error("{0}")]
    RotationInProgress(String),
    /// The claims to sign break a rule, naming the claim.
    #[error("{0}")]
    InvalidClaims(String),
    /// What a change would store is too large, with a sentence.
    #[error("{0}")]
    TooLarge(String),
    /// The body did not arrive in time after the headers (docs/api.md, "Limits that hold (second
    /// security review)"); the connection closes after this answer.
    #[error("the request body did not arrive within {0} seconds of the headers")]
    RequestTimeout(u64),
    /// A per-customer quota is reached (docs/api.md, "Errors").
    #[error("{0}")]
    QuotaExceeded(String),
    /// The body is larger than allowed.
    #[error("the request body is larger than {0} bytes")]
    PayloadTooLarge(usize),
    /// The body's Content-Type is not the one the endpoint reads (named).
    #[error("the request body must be sent as Content-Type: {0}")]
    UnsupportedMediaType(&'static str),
    /// Too many requests from this client.
    #[error("{detail}")]
    RateLimited {
        retry_after_secs: u64,
        detail: String,
    },
    /// A `kid` published now came back with other key material (docs/api.md, "Key lifecycle").
    #[error("a key id is already published with other key material")]
    KidReused(Vec<Violation>),
    /// The database does not answer.
    #[error("the service is temporarily unavailable, retry shortly")]
    Unavailable,
    /// A ceiling on something shared by every client is reached (docs/api.md, "Errors").
    #[error("{detail}")]
    Capacity {
        retry_after_secs: u64,
        detail: String,
    },
    /// Too much secret hashing is queued; nothing else is affected.
    #[error("the server is busy checking credentials, retry shortly")]
    Busy,
    /// The replica is starting (`crate::starting`).
    #[error(
        "this replica is starting (applying migrations, loading what it serves): retry shortly"
    )]
    Starting,
    /// A bug.
    #[error("internal error")]
    Internal,
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Conflict(what) => ApiError::Conflict(what),
            StoreError::NotFound => ApiError::NotFound("not found".into()),
            StoreError::Unavailable(reason) => {
                tracing::error!(%reason, "storage unavailable");
                ApiError::Unavailable
            }
            StoreError::Corrupt(row) => {
                tracing::error!(%row, "a stored row cannot be read");
                ApiError::Internal
            }
            // Each use case that passes a ceiling answers its own refusal.
            StoreError::CeilingReached(_) | StoreError::OverBudget(_) => ApiError::Internal,
        }
    }
}

impl From<HasherBusy> for ApiError {
    fn from(_: HasherBusy) -> Self {
        ApiError::Busy
    }
}

impl From<AuthError> for ApiError {
    fn from(e: AuthError) -> Self {
        match e {
            AuthError::Unauthorized { detail } => ApiError::Unauthorized { detail },
            AuthError::Forbidden(detail) => ApiError::Forbidden(detail),
            AuthError::ActionNotAllowed(detail) => ApiError::ActionNotAllowed(detail),
            AuthError::NotFound(detail) => ApiError::NotFound(detail),
            AuthError::RateLimited {
                retry_after_secs,
                detail,
            } => ApiError::RateLimited {
                retry_after_secs,
                detail,
            },
            AuthError::Busy => ApiError::Busy,
            AuthError::Replica(e) => e.into(),
            AuthError::Internal => ApiError::Internal,
        }
    }
}

impl From<ReplicaError> for ApiError {
    fn from(e: ReplicaError) -> Self {
        match e {
            ReplicaError::Store(e) => e.into(),
            ReplicaError::Interrupted => ApiError::Internal,
        }
    }
}

impl From<AppError> for ApiError {
    fn from(e: AppError) -> Self {
        match e {
            AppError::Invalid(v) => ApiError::Validation(v),
            AppError::UnknownServices(v) => ApiError::UnknownServices(v),
            AppError::KindImmutable(v) => ApiError::KindImmutable(v),
            AppError::KidReused(v) => ApiError::KidReused(v),
            AppError::Naming(e) => ApiError::Naming(e),
            AppError::BadRequest(detail) => ApiError::BadRequest(detail),
            AppError::Unauthenticated(reason) => {
                tracing::info!(reason, "authentication failed");
                ApiError::Unauthorized { detail: None }
            }
            AppError::Forbidden(detail) => {
                tracing::info!(%detail, "call refused");
                ApiError::Forbidden(detail)
            }
            error @ AppError::NotCovered { .. } => {
                let detail = error.to_string();
                tracing::info!(%detail, "call refused");
                ApiError::Forbidden(detail)
            }
            AppError::NotFound(detail) => ApiError::NotFound(detail),
            AppError::NothingPublished(detail) => ApiError::NothingPublished(detail),
            AppError::Conflict(detail) => ApiError::Conflict(detail),
            AppError::DomainTaken(detail) => ApiError::DomainTaken(detail),
            AppError::CustomDomainsDisabled(detail) => ApiError::CustomDomainsDisabled(detail),
            AppError::TooManyPendingDomains(detail) => ApiError::TooManyPendingDomains(detail),
            AppError::TooManySources(detail) => ApiError::TooManySources(detail),
            AppError::SigningDisabled(detail) => ApiError::SigningDisabled(detail),
            AppError::NoKeyReady {
                retry_after_secs,
                detail,
            } => ApiError::NoKeyReady {
                retry_after_secs,
                detail,
            },
            AppError::RotationInProgress(detail) => ApiError::RotationInProgress(detail),
            AppError::InvalidClaims(detail) => ApiError::InvalidClaims(detail),
            AppError::Keys(reason) => {
                // Never key material: the adapters' sentences name the step that failed.
                tracing::error!(%reason, "managed keys failed");
                ApiError::Internal
            }
            AppError::TooLarge(detail) => ApiError::TooLarge(detail),
            AppError::QuotaExceeded(detail) => ApiError::QuotaExceeded(detail),
            AppError::Capacity {
                retry_after_secs,
                detail,
            } => ApiError::Capacity {
                retry_after_secs,
                detail,
            },
            AppError::Busy => ApiError::Busy,
            AppError::Store(e) => e.into(),
        }
    }
}

impl ApiError {
    /// What kind of problem it is (slug, status, title: [`kinds`]).
    fn kind(&self) -> &'static Kind {
        match self {
            ApiError::InvalidJson(_) => &kinds::INVALID_JSON,
            ApiError::Validation(_) | ApiError::BadRequest(_) => &kinds::VALIDATION_FAILED,
            ApiError::UnknownServices(_) => &kinds::UNKNOWN_SERVICES,
            ApiError::KindImmutable(_) => &kinds::KIND_IMMUTABLE,
            ApiError::KidReused(_) => &kinds::KID_REUSED,
            ApiError::Naming(NamingError::PlanRequired(_)) => &kinds::PLAN_REQUIRED,
            ApiError::Naming(_) => &kinds::INVALID_SERVICE_NAME,
            ApiError::Unauthorized { .. } => &kinds::UNAUTHORIZED,
            ApiError::Forbidden(_) => &kinds::FORBIDDEN,
            ApiError::ActionNotAllowed(_) => &kinds::ACTION_NOT_ALLOWED,
            ApiError::NotFound(_) => &kinds::NOT_FOUND,
            ApiError::NothingPublished(_) => &kinds::NOTHING_PUBLISHED,
            ApiError::MethodNotAllowed(_) => &kinds::METHOD_NOT_ALLOWED,
            ApiError::Conflict(_) => &kinds::CONFLICT,
            ApiError::DomainTaken(_) => &kinds::DOMAIN_TAKEN,
            ApiError::CustomDomainsDisabled(_) => &kinds::CUSTOM_DOMAINS_DISABLED,
            ApiError::TooManyPendingDomains(_) => &kinds::TOO_MANY_PENDING_DOMAINS,
            ApiError::TooManySources(_) => &kinds::TOO_MANY_SOURCES,
            ApiError::SigningDisabled(_) => &kinds::SIGNING_DISABLED,
            ApiError::NoKeyReady { .. } => &kinds::NO_KEY_READY,
            ApiError::RotationInProgress(_) => &kinds::ROTATION_IN_PROGRESS,
            ApiError::InvalidClaims(_) => &kinds::INVALID_CLAIMS,
            ApiError::TooLarge(_) => &kinds::PAYLOAD_TOO_LARGE,
            ApiError::RequestTimeout(_) => &kinds::REQUEST_TIMEOUT,
            ApiError::QuotaExceeded(_) => &kinds::QUOTA_EXCEEDED,
            ApiError::PayloadTooLarge(_) => &kinds::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType(_) => &kinds::UNSUPPORTED_MEDIA_TYPE,
            ApiError::RateLimited { .. } => &kinds::RATE_LIMITED,
            ApiError::Unavailable => &kinds::DATABASE_UNAVAILABLE,
            ApiError::Busy | ApiError::Starting => &kinds::UNAVAILABLE,
            ApiError::Capacity { .. } => &kinds::CAPACITY,
            ApiError::Internal => &kinds::INTERNAL,
        }
    }

    fn violations(&self) -> Option<Vec<Cow<'_, Violation>>> {
        match self {
            ApiError::Validation(v) | ApiError::UnknownServices(v) | ApiError::KidReused(v) => {
                Some(v.iter().map(Cow::Borrowed).collect())
            }
            ApiError::KindImmutable(v) => Some(vec![Cow::Borrowed(v)]),
            // A client that reads `errors` of every 400 finds why here too: the whole body.
            ApiError::InvalidJson(reason) => Some(vec![Cow::Owned(Violation::new("", reason))]),
            // The one naming rule that needs the tenant (the subdomain's length) is checked
            // after the body; it still points at the field.
            ApiError::Naming(
                e @ (NamingError::InvalidServiceName { .. } | NamingError::ReservedSuffix(_)),
            ) => Some(vec![Cow::Owned(Violation::new(
                SERVICE_NAME_POINTER,
                e.to_string(),
            ))]),
            _ => None,
        }
    }

    fn detail(&self) -> String {
        match self {
            ApiError::Unauthorized { detail } => detail.clone().unwrap_or_else(|| {
                "missing, malformed, unknown, revoked or expired credentials: send \
                 Authorization: Bearer <token>"
                    .to_owned()
            }),
            ApiError::Validation(v) | ApiError::UnknownServices(v) | ApiError::KidReused(v)
                if v.len() == 1 =>
            {
                format!("{}: {}", self, v[0])
            }
            ApiError::Validation(v) | ApiError::UnknownServices(v) | ApiError::KidReused(v) => {
                format!("{} ({} problems, see errors)", self, v.len())
            }
            ApiError::KindImmutable(v) => format!(
                "{}: {} (to switch between static and oidc, delete the account and create a new one)",
                self, v
            ),
            other => other.to_string(),
        }
    }
}

/// The `type` URI of a problem slug.
pub fn problem_type(slug: &str) -> String {
    let base = BASE_URL
        .get()
        .map(String::as_str)
        .unwrap_or("http://localhost:8080");
    format!("{base}/problems/{slug}")
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.kind().status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    fn error_response(&self) -> HttpResponse {
        let status = self.status_code();
        let kind = self.kind();
        let mut body = json!({
            "type": problem_type(kind.slug),
            "title": kind.title,
            "status": status.as_u16(),
            "detail": self.detail(),
        });
        // The request's id (its `X-Request-Id`), which the log lines of the request carry too.
        if let Some(id) = registry_auth::request_id() {
            body["instance"] = json!(id);
        }
        if let Some(violations) = self.violations() {
            body["errors"] = violations
                .into_iter()
                .map(|v| json!({"pointer": v.pointer, "message": v.message}))
                .collect();
        }
        let mut response = HttpResponse::build(status);
        response.insert_header((header::CONTENT_TYPE, "application/problem+json"));
        response.insert_header((header::CACHE_CONTROL, "no-store"));
        match self {
            ApiError::Unauthorized { .. } => {
                response.insert_header((header::WWW_AUTHENTICATE, "Bearer realm=\"registry\""));
            }
            ApiError::RateLimited {
                retry_after_secs, ..
            }
            | ApiError::Capacity {
                retry_after_secs, ..
            }
            | ApiError::NoKeyReady {
                retry_after_secs, ..
            } => {
                response.insert_header((header::RETRY_AFTER, retry_after_secs.to_string()));
            }
            ApiError::Busy | ApiError::Starting => {
                response.insert_header((header::RETRY_AFTER, "1"));
            }
            // A restart or a fail-over of the database takes seconds (docs/api.md, "Read replicas
            // and the primary down").
            ApiError::Unavailable => {
                response.insert_header((header::RETRY_AFTER, "5"));
            }
            ApiError::MethodNotAllowed(allowed) => {
                response.insert_header((header::ALLOW, *allowed));
            }
            ApiError::RequestTimeout(_) => {
                response.insert_header((header::CONNECTION, "close"));
            }
            _ => {}
        }
        response.body(body.to_string())
    }
}

/// Result of a handler.
pub type ApiResult<T> = Result<T, ApiError>;
