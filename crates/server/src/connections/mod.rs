//! Open connections per client address, counted where the server accepts a connection and
//! held for its whole life; `limit` counts them.
//!
//! - On HTTPS, a connection is counted as it is accepted, before its TLS handshake reads a
//!   byte ([`admitted_first`]): connections that never finish a handshake hold their own
//!   address's places, and one past the limit is closed unread, before any handshake work.
//!   Its slot lives as long as the service that handshakes and then serves it.
//! - On plain HTTP, where HTTP starts at once, a connection is counted in [`on_connect`] and
//!   keeps its slot in its connection data, which actix drops with the connection (its
//!   dispatcher holds it; a request's copy is let go when the request is). One past the limit
//!   is shut down at once, and [`admitted`] runs none of the requests it had already sent.
//!
//! Either way a flood from one address costs one file descriptor per attempt for microseconds
//! rather than one per connection for as long as the client likes.

use crate::problem::ApiError;
use crate::tls;
use actix_web::body::EitherBody;
use actix_web::dev::{Extensions, Service, ServiceFactory, ServiceRequest, ServiceResponse};
use actix_web::rt::net::TcpStream;
use actix_web::ResponseError;
use std::future::Future;
use std::net::Shutdown;

mod limit;

pub use limit::{Admission, ConnectionLimit};
use std::sync::Arc;

/// The HTTPS listener's `service` (TLS handshake, then HTTP) behind the count of its address:
/// a connection is admitted as it is accepted, before any byte of it is read, and keeps its
/// place until `service` is done with it; one past the limit, or already gone, is closed
/// without reaching `service`.
pub fn admitted_first<S>(
    limit: Arc<ConnectionLimit>,
    service: S,
) -> impl ServiceFactory<TcpStream, Config = (), Response = (), Error = S::Error, InitError = S::InitError>
where
    S: ServiceFactory<TcpStream, Config = (), Response = ()>,
{
    actix_service::apply_fn_factory(service, move |stream: TcpStream, service: &S::Service| {
        let admission = match stream.peer_addr() {
            Ok(peer) => limit.admit(peer.ip()),
            Err(_) => Admission::Refused,
        };
        // Dropping the stream closes it: a client that sent nothing reads end-of-file.
        let served = match admission {
            Admission::Refused => None,
            held => Some((held, service.call(stream))),
        };
        async move {
            match served {
                Some((_held, served)) => served.await,
                None => Ok(()),
            }
        }
    })
}

/// For the plain listeners' `on_connect`: admits the connection, keeping its slot in the
/// connection's data, or shuts it down when its address holds the most it may. On the
/// listener beside HTTPS (`redirects`), the connection is marked [`tls::Plain`].
pub fn on_connect(
    limit: &Arc<ConnectionLimit>,
    redirects: bool,
    stream: &TcpStream,
    data: &mut Extensions,
) {
    if redirects {
        data.insert(tls::Plain);
    }
    let Ok(peer) = stream.peer_addr() else {
        // Already gone: actix finds out on its first read.
        return;
    };
    match limit.admit(peer.ip()) {
        Admission::Exempt => {}
        Admission::Admitted(slot) => {
            data.insert(slot);
        }
        Admission::Refused => {
            // Both halves: the client sees the connection closed without a byte, and the
            // dispatcher reads end-of-file once it has read what the client had already
            // sent, a request [`admitted`] then answers without running it.
            let _ = socket2::SockRef::from(stream).shutdown(Shutdown::Both);
            data.insert(Refused);
        }
    }
}

/// The mark of a connection shut down at connect time.
#[derive(Debug, Clone, Copy)]
struct Refused;

/// The step of the way in (`way_in`) that runs no request of a refused connection: a
/// shutdown socket still gives up the bytes that arrived before it, and a request among them
/// must have no effect (its client is told nothing, and takes the connection for closed).
/// First, so that a flood of them is neither logged nor counted one by one
/// ([`ConnectionLimit`] warns instead).
pub async fn admitted<B, Rest>(
    req: ServiceRequest,
    next: impl FnOnce(ServiceRequest) -> Rest,
) -> Result<ServiceResponse<EitherBody<B>>, actix_web::Error>
where
    Rest: Future<Output = Result<ServiceResponse<B>, actix_web::Error>>,
{
    if req.conn_data::<Refused>().is_some() {
        let response = ApiError::Busy.error_response();
        return Ok(req.into_response(response).map_into_right_body());
    }
    next(req).await.map(ServiceResponse::map_into_left_body)
}
