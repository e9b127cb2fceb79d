//! The caller of a request, as handler arguments: each reads what authentication needs from
//! the request ([`Presented`]), runs the authentication and the access decision of its kind of
//! call (`registry_auth`) before the handler reads anything else, and refuses with the answer
//! of docs/api.md, "Authentication" (401, 403, 404) when the call may not proceed.
//!
//! actix polls a handler's arguments together and answers with the first error: an argument
//! that can fail (a query string) goes before the caller, so that its 400 never races the
//! authentication (and never cancels it half-way).

use crate::client_ip::client_ip;
use crate::problem::ApiError;
use crate::route::{Access, ResourceAccess, Verb};
use actix_web::http::header;
use actix_web::{dev::Payload, web, FromRequest, HttpRequest};
use futures_util::future::LocalBoxFuture;
use ipnetwork::IpNetwork;
use registry_auth::Authenticator;
use registry_auth::{auditor, collection_caller, manager, service_caller, shipper, Presented};
use registry_domain::app::Caller;
use registry_domain::policy::Action;
use registry_domain::Service;
use std::sync::Arc;

/// What the caller arguments take from the application: the authenticator and the proxies
/// whose `X-Forwarded-For` or `Forwarded` names the client.
#[derive(Debug)]
pub struct Gate {
    /// Who is calling.
    pub auth: Arc<Authenticator>,
    /// Trusted proxy networks.
    pub trusted_proxies: Vec<IpNetwork>,
    /// The token a cache's log shipper presents (`REGISTRY_FETCH_LOG_TOKEN`); without one,
    /// `POST /fetch-log` is not served.
    pub fetch_log_token: Option<String>,
}

/// A caller on no one service (`/services`): an account, never an anonymous secret.
#[derive(Debug)]
pub struct Collection(pub Caller);

/// A caller managing the customer's service accounts: an account whose patterns include `"*"`
/// (docs/api.md, "Authentication").
#[derive(Debug)]
pub struct Manager(pub Caller);

/// A caller reading the customer's audit trail: an account whose patterns include `"*"`.
#[derive(Debug)]
pub struct Auditor(pub Caller);

/// What authentication reads of `req`: the action and whether the call changes something come
/// from the route table (`routes::table`), through the resource's data.
fn presented<'r>(gate: &Gate, req: &'r HttpRequest) -> Presented<'r> {
    let verb = Verb::of(req.method());
    let access = req.app_data::<ResourceAccess>().and_then(|a| a.of(verb?));
    Presented {
        ip: client_ip(req, &gate.trusted_proxies),
        authorization: req
            .headers()
            .get(header::AUTHORIZATION)
            .map(|v| v.as_bytes()),
        service_account: req.headers().get("x-service-account").map(|v| v.as_bytes()),
        changes: verb != Some(Verb::Get) && !matches!(access, Some(Access::Reads(_))),
        // A caller on a route the table gives no action: the widest, so that a mistake refuses
        // rather than lets through.
        action: access
            .and_then(Access::action)
            .unwrap_or(Action::AccountsWrite),
    }
}

fn gate(req: &HttpRequest) -> Result<web::Data<Gate>, ApiError> {
    req.app_data::<web::Data<Gate>>()
        .cloned()
        .ok_or(ApiError::Internal)
}

/// `FromRequest` for a caller wrapper: authenticates with `$authenticate` and wraps the caller.
macro_rules! caller_argument {
    ($wrapper:ident, $authenticate:ident) => {
        impl FromRequest for $wrapper {
            type Error = ApiError;
            type Future = LocalBoxFuture<'static, Result<Self, ApiError>>;

            fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
                let req = req.clone();
                Box::pin(async move {
                    let gate = gate(&req)?;
                    let caller = $authenticate(&gate.auth, &presented(&gate, &req)).await?;
                    Ok($wrapper(caller))
                })
            }
        }
    };
}

caller_argument!(Collection, collection_caller);
caller_argument!(Manager, manager);
caller_argument!(Auditor, auditor);

/// The cache's log shipper (`POST /fetch-log`, docs/api.md, "Behind a CDN"): its bearer is the
/// fetch-log token, checked by the authenticator (a wrong one counts against the address's
/// failures). Without a token configured, the endpoint is not served: the answer of any
/// unknown path.
#[derive(Debug)]
pub struct Shipper;

impl FromRequest for Shipper {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let req = req.clone();
        Box::pin(async move {
            let gate = gate(&req)?;
            let Some(expected) = gate.fetch_log_token.as_deref() else {
                return Err(ApiError::NotFound("no such endpoint".into()));
            };
            shipper(&gate.auth, &presented(&gate, &req), expected)?;
            Ok(Shipper)
        })
    }
}

/// A caller allowed to act on the service of the path's `{subdomain}` segment (a subdomain or
/// an id), with that service.
#[derive(Debug)]
pub struct ServiceCaller {
    /// The service (shared with the directory's cache).
    pub service: Arc<Service>,
    /// Who acts on it.
    pub caller: Caller,
}

impl FromRequest for ServiceCaller {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let req = req.clone();
        Box::pin(async move {
            let gate = gate(&req)?;
            let key = req.match_info().get("subdomain").unwrap_or_default();
            let (caller, service) =
                service_caller(&gate.auth, &presented(&gate, &req), key).await?;
            Ok(ServiceCaller { service, caller })
        })
    }
}
