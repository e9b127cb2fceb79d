//! Slow clients (docs/api.md, "Limits that hold (second security review)"; issue 25, finding 3).
//! The review held ~21,000 connections that each declared `Content-Length: 100` and sent one byte:
//! nothing ever timed them out, the file limit ran out and `/healthz` took 35 s. Here, scaled down:
//! a body that stops arriving gets 408 ten seconds after its headers and its connection closes,
//! whatever the handler; an unread body never keeps a connection open; and one address holds at
//! most `REGISTRY_MAX_CONNECTIONS_PER_ADDRESS` connections, past which they are closed at once and
//! run nothing, while other addresses and trusted proxies are served, and the places come
//! back as connections close.

use super::create_service;
use registry_tests::server::{json, ServerOptions, TestServer};
use registry_tests::wait::within;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

/// The contract's deadline for a body, counted from its headers.
const BODY_DEADLINE: Duration = Duration::from_secs(10);

/// A TCP connection to the server from the loopback address `source` (every 127.0.0.0/8
/// address is local on Linux: a second client address without a second machine).
fn connect_from(source: &str, port: u16) -> TcpStream {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .expect("runtime");
    let stream = runtime.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket
            .bind(format!("{source}:0").parse().expect("source"))
            .expect("bind the source address");
        socket
            .connect(SocketAddr::from(([127, 0, 0, 1], port)))
            .await
            .expect("connect")
    });
    let stream = stream.into_std().expect("std stream");
    stream.set_nonblocking(false).expect("blocking");
    stream
}

/// The head of a request declaring a 100-byte JSON body, and its first byte.
fn slow_body(path: &str, port: u16, token: Option<&str>) -> String {
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{auth}\
         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{"
    )
}

/// What came back on a connection within `limit`: the bytes, and how long after the call the
/// server closed it (`None`: still open at the limit).
fn read_until_closed(stream: &mut TcpStream, limit: Duration) -> (String, Option<Duration>) {
    let started = Instant::now();
    let mut received = Vec::new();
    let mut buffer = [0_u8; 4096];
    loop {
        let left = limit.saturating_sub(started.elapsed());
        if left.is_zero() {
            return (String::from_utf8_lossy(&received).into_owned(), None);
        }
        stream.set_read_timeout(Some(left)).expect("timeout");
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => received.extend_from_slice(&buffer[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            // A reset is a close too (the server shut a connection it had unread bytes of).
            Err(_) => break,
        }
    }
    (
        String::from_utf8_lossy(&received).into_owned(),
        Some(started.elapsed()),
    )
}

/// True when the server has not closed the connection within `wait`.
fn still_open(stream: &mut TcpStream, wait: Duration) -> bool {
    stream.set_read_timeout(Some(wait)).expect("timeout");
    let mut byte = [0_u8; 1];
    matches!(stream.read(&mut byte), Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut))
}

/// `GET /healthz` on a new connection from `source`: the status line, and how long it took.
fn healthz_from(source: &str, port: u16) -> (String, Duration) {
    let started = Instant::now();
    let mut stream = connect_from(source, port);
    let request =
        format!("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    let _ = stream.write_all(request.as_bytes());
    let (response, _) = read_until_closed(&mut stream, Duration::from_secs(10));
    let status = response.lines().next().unwrap_or("").to_owned();
    (status, started.elapsed())
}

/// Sends `first`, then `then` in pieces every `every` (if any), and reads what comes back for
/// up to 20 s: the response, when its first byte came, when the connection closed.
fn exchange(
    port: u16,
    first: String,
    then: Vec<&'static str>,
    every: Duration,
) -> (String, Option<Duration>, Option<Duration>) {
    let mut stream = connect_from("127.0.0.1", port);
    stream.write_all(first.as_bytes()).expect("send the head");
    let started = Instant::now();
    let mut writer = stream.try_clone().expect("clone");
    let dribble = thread::spawn(move || {
        for piece in then {
            thread::sleep(every);
            if writer.write_all(piece.as_bytes()).is_err() {
                return;
            }
        }
    });
    let mut received = Vec::new();
    let mut first_byte = None;
    let mut buffer = [0_u8; 4096];
    let closed = loop {
        let left = Duration::from_secs(20).saturating_sub(started.elapsed());
        if left.is_zero() {
            break None;
        }
        stream.set_read_timeout(Some(left)).expect("timeout");
        match stream.read(&mut buffer) {
            Ok(0) => break Some(started.elapsed()),
            Ok(n) => {
                first_byte.get_or_insert_with(|| started.elapsed());
                received.extend_from_slice(&buffer[..n]);
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break Some(started.elapsed()),
        }
    };
    let _ = dribble.join();
    (
        String::from_utf8_lossy(&received).into_owned(),
        first_byte,
        closed,
    )
}

#[test]
fn a_body_that_stops_arriving_gets_408_at_the_deadline_and_its_connection_closes() {
    let server = TestServer::start();
    let port = server.port;
    let acme = server.customer("acme", "business");
    let (api, _) = create_service(&server, &acme, "api");
    let token = acme.token.clone();
    let chunked = |path: &str| {
        format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
             Transfer-Encoding: chunked\r\n\r\n1\r\n{{\r\n"
        )
    };
    // (what, request head and first bytes, pieces sent later, every, read-to-the-end handler)
    let cases: Vec<(&str, String, Vec<&'static str>, Duration, bool)> = vec![
        (
            "anonymous creation, one byte of 100",
            slow_body("/anonymous/services", port, None),
            vec![],
            Duration::ZERO,
            true,
        ),
        (
            "authenticated PUT config, one byte of 100",
            slow_body(&format!("/services/{api}/config"), port, Some(&token))
                .replace("POST", "PUT"),
            vec![],
            Duration::ZERO,
            true,
        ),
        (
            "chunked body that stops",
            chunked("/anonymous/services"),
            vec![],
            Duration::ZERO,
            true,
        ),
        (
            // Not an idle timeout: bytes keep coming, too slowly to finish in time.
            "a byte every 400 ms",
            slow_body("/services", port, Some(&token)),
            vec![" "; 60],
            Duration::from_millis(400),
            true,
        ),
    ];
    let running: Vec<_> = cases
        .into_iter()
        .map(|(what, first, then, every, _)| {
            thread::spawn(move || (what, exchange(port, first, then, every)))
        })
        .collect();
    // Handlers that answer before reading the body: the unread body must not hold the
    // connection (actix once drained a chunked one for as long as the client kept it coming).
    let unread: Vec<_> = vec![
        (
            "GET /healthz with a stalled chunked body",
            chunked("/healthz").replace("POST", "GET"),
        ),
        (
            "GET /healthz with one byte of 100",
            slow_body("/healthz", port, None).replace("POST", "GET"),
        ),
        (
            "a refused token, one byte of 100",
            slow_body("/services", port, Some("rgst_nope_nope")),
        ),
    ]
    .into_iter()
    .map(|(what, first)| {
        thread::spawn(move || (what, exchange(port, first, vec![], Duration::ZERO)))
    })
    .collect();

    for handle in unread {
        let (what, (response, first_byte, closed)) = handle.join().expect("case");
        assert!(
            // Well before the body's 10 s deadline, which a wait for the body would reach.
            first_byte.is_some_and(|t| t < Duration::from_secs(5)),
            "{what}: answered at once, got {response:?} at {first_byte:?}"
        );
        let closed = closed.unwrap_or_else(|| panic!("{what}: the connection stayed open"));
        assert!(
            closed < Duration::from_secs(8),
            "{what}: closed after {closed:?}"
        );
    }
    for handle in running {
        let (what, (response, first_byte, closed)) = handle.join().expect("case");
        let at = first_byte.unwrap_or_else(|| panic!("{what}: no answer within 20 s"));
        assert!(
            at >= BODY_DEADLINE - Duration::from_millis(500)
                && at < BODY_DEADLINE + Duration::from_secs(5),
            "{what}: answered after {at:?}, not at the deadline"
        );
        assert!(
            response.starts_with("HTTP/1.1 408 "),
            "{what}: {response:?}"
        );
        let lower = response.to_ascii_lowercase();
        assert!(lower.contains("connection: close"), "{what}: {response:?}");
        assert!(
            lower.contains("content-type: application/problem+json")
                && response.contains("/problems/request-timeout"),
            "{what}: {response:?}"
        );
        let closed = closed.unwrap_or_else(|| panic!("{what}: the connection stayed open"));
        assert!(
            closed < at + Duration::from_secs(3),
            "{what}: closed {closed:?} after the head, the 408 came at {at:?}"
        );
    }
    // Nothing half-read was stored, and the server answers as before.
    let services = json(server.get("/services", &acme.token));
    assert_eq!(services.as_array().map(Vec::len), Some(1), "{services}");
    assert_eq!(server.status_of("/healthz"), 200);
}

#[test]
fn connections_past_the_per_address_limit_are_closed_and_their_places_come_back() {
    const LIMIT: usize = 20;
    let server = TestServer::start_with(ServerOptions {
        env: vec![
            (
                "REGISTRY_MAX_CONNECTIONS_PER_ADDRESS".into(),
                LIMIT.to_string(),
            ),
            ("REGISTRY_TRUSTED_PROXIES".into(), "127.0.0.3/32".into()),
        ],
        // Reads its log.
        binary: true,
        ..ServerOptions::default()
    });
    let port = server.port;
    let acme = server.customer("acme", "business");
    let hold = |source: &str, count: usize| -> Vec<TcpStream> {
        (0..count)
            .map(|_| {
                let mut stream = connect_from(source, port);
                stream
                    .write_all(slow_body("/anonymous/services", port, None).as_bytes())
                    .expect("send");
                stream
            })
            .collect()
    };
    // Everything below happens well within the 10 s the held bodies may take.
    let started = Instant::now();
    let mut held = hold("127.0.0.1", LIMIT);
    thread::sleep(Duration::from_millis(300));
    for (i, stream) in held.iter_mut().enumerate() {
        assert!(
            still_open(stream, Duration::from_millis(50)),
            "connection {i} of {LIMIT} was closed"
        );
    }

    // Past the limit: closed at once, without a byte, and a request sent on it has no effect.
    for i in 0..5 {
        let mut extra = connect_from("127.0.0.1", port);
        let request = format!(
            "POST /services HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nContent-Length: 39\r\n\r\n\
             {{\"title\":\"ghost\",\"serviceName\":\"ghost\"}}",
            acme.token
        );
        let _ = extra.write_all(request.as_bytes());
        let (response, closed) = read_until_closed(&mut extra, Duration::from_secs(3));
        assert_eq!(response, "", "extra connection {i} was answered");
        // At once: well before the 3 s a client may take to send its request's head.
        assert!(
            closed.is_some_and(|t| t < Duration::from_millis(2500)),
            "extra connection {i} closed after {closed:?}"
        );
    }

    // Another address is served at once, and so is a trusted proxy past the limit.
    let (status, took) = healthz_from("127.0.0.2", port);
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    // Before: 35 s, behind the held connections.
    assert!(took < Duration::from_secs(5), "/healthz took {took:?}");
    let mut proxied = hold("127.0.0.3", LIMIT + 10);
    thread::sleep(Duration::from_millis(300));
    for (i, stream) in proxied.iter_mut().enumerate() {
        assert!(
            still_open(stream, Duration::from_millis(20)),
            "trusted proxy connection {i} was closed"
        );
    }
    let (status, _) = healthz_from("127.0.0.3", port);
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    drop(proxied);
    // The held bodies were still within their deadline: the closes above were the limit's.
    assert!(
        started.elapsed() < BODY_DEADLINE - Duration::from_secs(2),
        "the test took too long to prove anything: {:?}",
        started.elapsed()
    );

    // The places come back as connections close: all of them, not just one.
    drop(held);
    let reopened = Instant::now();
    assert!(
        within(Duration::from_secs(3), || {
            healthz_from("127.0.0.1", port)
                .0
                .starts_with("HTTP/1.1 200")
        }),
        "127.0.0.1 still refused after its connections closed"
    );
    // Every place comes back, not only the first: the server counts a close when its worker
    // gets to it, later on a busy machine, so the whole set is tried again for a while.
    let (again, again_opened) = loop {
        let opened = Instant::now();
        let mut again = hold("127.0.0.1", LIMIT);
        thread::sleep(Duration::from_millis(300));
        let closed = again
            .iter_mut()
            .position(|stream| !still_open(stream, Duration::from_millis(20)));
        let Some(i) = closed else {
            break (again, opened);
        };
        drop(again);
        assert!(
            reopened.elapsed() < Duration::from_secs(5),
            "connection {i} of the second {LIMIT} was closed 5 s after the first {LIMIT} closed"
        );
        thread::sleep(Duration::from_millis(100));
    };
    let mut extra = connect_from("127.0.0.1", port);
    let (response, closed) = read_until_closed(&mut extra, Duration::from_secs(3));
    assert!(
        response.is_empty() && closed.is_some(),
        "the limit still holds"
    );
    assert!(
        again_opened.elapsed() < BODY_DEADLINE - Duration::from_secs(2),
        "the test took too long to prove anything: {:?}",
        again_opened.elapsed()
    );
    drop(again);

    // The request sent on a refused connection created nothing.
    let services = json(server.get("/services", &acme.token));
    assert_eq!(services, serde_json::json!([]), "{services}");
    let log = server.log_when(|log| log.contains("REGISTRY_MAX_CONNECTIONS_PER_ADDRESS"));
    assert!(
        log.contains("REGISTRY_MAX_CONNECTIONS_PER_ADDRESS"),
        "the refusal is logged"
    );
}
