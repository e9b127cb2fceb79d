//! The caller of a request, as handler arguments: each runs the authentication and the access
//! decision of its kind of call before the handler reads anything else, and refuses with the
//! answer of DECISIONS §4 (401, 403, 404) when the call may not proceed.
//!
//! actix polls a handler's arguments together and answers with the first error: an argument
//! that can fail (a query string) goes before the caller, so that its 400 never races the
//! authentication (and never cancels it half-way).

use super::{auditor, collection_caller, manager, service_caller, Authenticator, ServiceCaller};
use crate::problem::ApiError;
use actix_web::{dev::Payload, web, FromRequest, HttpRequest};
use futures_util::future::LocalBoxFuture;
use registry_domain::app::Caller;

/// A caller on no one service (`/services`): an account, never an anonymous secret.
#[derive(Debug)]
pub struct Collection(pub Caller);

/// A caller managing the customer's service accounts: an account whose patterns include `"*"`
/// (DECISIONS §5).
#[derive(Debug)]
pub struct Manager(pub Caller);

/// A caller reading the customer's audit trail: an account whose patterns include `"*"`.
#[derive(Debug)]
pub struct Auditor(pub Caller);

fn authenticator(req: &HttpRequest) -> Result<web::Data<Authenticator>, ApiError> {
    req.app_data::<web::Data<Authenticator>>()
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
                    let auth = authenticator(&req)?;
                    $authenticate(&auth, &req).await.map($wrapper)
                })
            }
        }
    };
}

caller_argument!(Collection, collection_caller);
caller_argument!(Manager, manager);
caller_argument!(Auditor, auditor);

/// The service of the path's `{subdomain}` segment (a subdomain or an id).
impl FromRequest for ServiceCaller {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let req = req.clone();
        Box::pin(async move {
            let auth = authenticator(&req)?;
            let key = req.match_info().get("subdomain").unwrap_or_default();
            service_caller(&auth, &req, key).await
        })
    }
}
