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
use actix_web::http::{header, Method};
use actix_web::{dev::Payload, web, FromRequest, HttpRequest};
use futures_util::future::LocalBoxFuture;
use ipnetwork::IpNetwork;
use registry_auth::Authenticator;
use registry_auth::{auditor, collection_caller, manager, service_caller, Presented};
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

/// The one call that is a POST and changes nothing. (`POST …/preflight` changes nothing either,
/// but counts against the credential's writes per minute: checking a token against the keys
/// of a service costs signature checks.)
const EXPLAIN_ROUTE: &str = "/service-accounts/{id}/explain";

/// What authentication reads of `req`.
fn presented<'r>(gate: &Gate, req: &'r HttpRequest) -> Presented<'r> {
    let reads = matches!(*req.method(), Method::GET | Method::HEAD);
    let route = req.match_pattern();
    Presented {
        ip: client_ip(req, &gate.trusted_proxies),
        authorization: req
            .headers()
            .get(header::AUTHORIZATION)
            .map(|v| v.as_bytes()),
        service_account: req.headers().get("x-service-account").map(|v| v.as_bytes()),
        changes: !reads && route.as_deref() != Some(EXPLAIN_ROUTE),
        action: action_of(route.as_deref().unwrap_or_default(), reads),
    }
}

/// The action a call takes (docs/api.md, "Actions"): by its route, and whether it only reads.
/// `…/explain` and `…/preflight` are POSTs that read.
pub fn action_of(route: &str, reads: bool) -> Action {
    let read_or_write = |read, write| if reads { read } else { write };
    match route {
        "/services" | "/services/{subdomain}" => {
            read_or_write(Action::ServicesRead, Action::ServicesWrite)
        }
        "/services/{subdomain}/preflight" => Action::ConfigRead,
        r if r.starts_with("/services/{subdomain}/") => {
            read_or_write(Action::ConfigRead, Action::ConfigWrite)
        }
        EXPLAIN_ROUTE => Action::AccountsRead,
        r if r.starts_with("/service-accounts") => {
            read_or_write(Action::AccountsRead, Action::AccountsWrite)
        }
        "/audit-events" => Action::AuditRead,
        // A route that takes a caller and is not listed here: the widest action, so that a
        // forgotten entry refuses rather than lets through (a test lists every route).
        _ => Action::AccountsWrite,
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

#[cfg(test)]
mod tests {
    use super::action_of;
    use registry_domain::policy::Action::{self, *};

    /// Every call that takes a caller, with its action (docs/api.md's table).
    #[test]
    fn every_call_takes_the_action_of_the_table() {
        let table: &[(&str, bool, Action)] = &[
            ("/services", true, ServicesRead),
            ("/services", false, ServicesWrite),
            ("/services/{subdomain}", true, ServicesRead),
            ("/services/{subdomain}", false, ServicesWrite),
            ("/services/{subdomain}/config", true, ConfigRead),
            ("/services/{subdomain}/config", false, ConfigWrite),
            ("/services/{subdomain}/domain", true, ConfigRead),
            ("/services/{subdomain}/domain", false, ConfigWrite),
            ("/services/{subdomain}/keys", true, ConfigRead),
            ("/services/{subdomain}/keys/{kid}", false, ConfigWrite),
            (
                "/services/{subdomain}/keys/{kid}/readiness",
                true,
                ConfigRead,
            ),
            (
                "/services/{subdomain}/keys/{kid}/readiness/verifiers/{agent}",
                false,
                ConfigWrite,
            ),
            ("/services/{subdomain}/federation", true, ConfigRead),
            ("/services/{subdomain}/preflight", true, ConfigRead),
            ("/services/{subdomain}/preflight", false, ConfigRead),
            ("/services/{subdomain}/fetches", true, ConfigRead),
            ("/service-accounts", true, AccountsRead),
            ("/service-accounts", false, AccountsWrite),
            ("/service-accounts/{id}", true, AccountsRead),
            ("/service-accounts/{id}", false, AccountsWrite),
            (
                "/service-accounts/{id}/regenerate-token",
                false,
                AccountsWrite,
            ),
            ("/service-accounts/{id}/explain", false, AccountsRead),
            ("/service-accounts/{id}/refusals", true, AccountsRead),
            ("/audit-events", true, AuditRead),
            ("/unlisted", true, AccountsWrite),
        ];
        for &(route, reads, action) in table {
            assert_eq!(action_of(route, reads), action, "{route} (reads: {reads})");
        }
    }
}
