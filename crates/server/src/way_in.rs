//! Every request's way in, ahead of the router: the one middleware of the replica's server and
//! of the stand-in that answers while it starts (`starting`).

use crate::body;
use crate::connections;
use crate::observe::observe;
use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;

/// Every request's way in, ahead of the router, in this order: a refused connection's request
/// stops (`connections::admitted`, first, so that a flood of them is neither logged nor
/// counted), its body is held to its deadline (`body::deadline`, ahead of the public path too),
/// and it is logged and counted, and answered there when it is a hosted issuer's (`observe`).
/// One middleware calling the three in turn, not three: each middleware of actix boxes the
/// future of each request it passes on (docs/benchmarks.md).
pub async fn way_in(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    connections::admitted(req, |req| body::deadline(req, |req| observe(req, next))).await
}
