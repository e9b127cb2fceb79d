//! Open connections per client address (DECISIONS §17), where actix accepts a connection
//! ([`on_connect`]): each admitted connection keeps its slot in its connection data, which
//! actix drops with the connection (its dispatcher holds it; a request's copy is let go when
//! the request is). A connection past the limit is shut down at once, so a flood from one
//! address costs one file descriptor per attempt for microseconds rather than one per
//! connection for as long as the client likes. The counting is registry-node's.

use crate::problem::ApiError;
use crate::tls;
use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{Extensions, ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::ResponseError;
use registry_node::connections::{Admission, ConnectionLimit};
use std::any::Any;
use std::net::Shutdown;
use std::sync::Arc;

/// For `HttpServer::on_connect`: admits the connection `io` (TCP, or TLS over TCP), keeping
/// its slot in the connection's data, or shuts it down when its address holds the most it may.
/// A plain TCP connection to a server that speaks `https` is marked [`tls::Plain`].
pub fn on_connect(limit: &Arc<ConnectionLimit>, https: bool, io: &dyn Any, data: &mut Extensions) {
    type Tcp = actix_web::rt::net::TcpStream;
    let tls = io.downcast_ref::<actix_tls::accept::rustls_0_23::TlsStream<Tcp>>();
    let plain = io.downcast_ref::<Tcp>();
    if https && plain.is_some() {
        data.insert(tls::Plain);
    }
    let Some(stream) = plain.or(tls.map(|tls| tls.get_ref().0)) else {
        return;
    };
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

/// The middleware that runs no request of a refused connection: a shutdown socket still gives
/// up the bytes that arrived before it, and a request among them must have no effect (its
/// client is told nothing, and takes the connection for closed). Outermost, so that a flood
/// of them is neither logged nor counted one by one ([`ConnectionLimit`] warns instead).
/// On the plain listener beside HTTPS it runs only what [`tls::redirect`] lets through.
pub async fn admitted(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    if req.conn_data::<Refused>().is_some() {
        let response = ApiError::Busy.error_response();
        return Ok(req.into_response(response).map_into_right_body());
    }
    if req.conn_data::<tls::Plain>().is_some() {
        if let Some(response) = tls::redirect(&req) {
            return Ok(req.into_response(response).map_into_right_body());
        }
    }
    next.call(req)
        .await
        .map(ServiceResponse::map_into_left_body)
}
