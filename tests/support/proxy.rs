//! A TCP proxy in front of a PostgreSQL database that a test can cut and restore: an outage of
//! one server's database without stopping the cluster the other tests share.

use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

/// A running proxy; it stops when dropped.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    stopped: AtomicBool,
    /// Under one lock, so that a connection is either refused or registered before a cut.
    links: Mutex<Links>,
}

#[derive(Debug, Default)]
struct Links {
    cut: bool,
    streams: Vec<TcpStream>,
}

impl Proxy {
    /// A proxy to the host and port of a `postgres://user@host:port/db` URL, and the same URL
    /// through the proxy.
    pub fn in_front_of(url: &str) -> (Proxy, String) {
        let (scheme, rest) = url.split_once("://").expect("a URL with a scheme");
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (user, host_port) = authority.rsplit_once('@').unwrap_or(("", authority));
        let proxy = Proxy::start(host_port.to_owned());
        let user = if user.is_empty() {
            String::new()
        } else {
            format!("{user}@")
        };
        let through = format!("{scheme}://{user}{}/{path}", proxy.addr);
        (proxy, through)
    }

    fn start(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let addr = listener.local_addr().expect("proxy address");
        let shared = Arc::new(Shared::default());
        let accepting = shared.clone();
        thread::spawn(move || {
            for client in listener.incoming() {
                if accepting.stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                // Every address of the name, as libpq would.
                let Ok(server) = TcpStream::connect(upstream.as_str()) else {
                    continue;
                };
                let mut links = accepting.links.lock().unwrap();
                // While cut, a connection is closed as soon as it is made: libpq fails at once,
                // as it does when the server is down.
                if links.cut {
                    continue;
                }
                let clones = (
                    client.try_clone(),
                    server.try_clone(),
                    client.try_clone(),
                    server.try_clone(),
                );
                let (Ok(c), Ok(s), Ok(c2), Ok(s2)) = clones else {
                    continue;
                };
                links.streams.extend([c2, s2]);
                drop(links);
                pipe(client, server);
                pipe(s, c);
            }
        });
        Proxy { addr, shared }
    }

    /// Closes every connection through the proxy and refuses new ones, until [`Proxy::restore`].
    pub fn cut(&self) {
        let mut links = self.shared.links.lock().unwrap();
        links.cut = true;
        for stream in links.streams.drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    /// Lets connections through again.
    pub fn restore(&self) {
        self.shared.links.lock().unwrap().cut = false;
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
        self.shared.stopped.store(true, Ordering::SeqCst);
        // Wakes the accepting thread so that it sees `stopped`.
        let _ = TcpStream::connect(self.addr);
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream) {
    thread::spawn(move || {
        let _ = io::copy(&mut from, &mut to);
        let _ = to.shutdown(Shutdown::Both);
    });
}
