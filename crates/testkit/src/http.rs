//! The one HTTP client of the chores (and of any test that wants no client library between it
//! and the server): HTTP/1.1 on loopback with std alone, one connection per request, so that a
//! killed server shows up as an error rather than a hang and no client library sits in a
//! measurement.

use serde_json::Value;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A response that cannot be read as HTTP/1.1.
fn malformed(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_owned())
}

/// A response: status and body text.
#[derive(Debug, Clone)]
pub struct Response {
    /// Its status code.
    pub status: u16,
    /// Its body, as text (lossy).
    pub body: String,
    /// The `Retry-After` header, when there is one.
    pub retry_after: Option<String>,
}

impl Response {
    /// The body as JSON (`Null` when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    /// The slug of a problem body's `type` (`""` when it is not a problem).
    pub fn problem(&self) -> String {
        self.json()["type"]
            .as_str()
            .and_then(|t| t.rsplit('/').next())
            .unwrap_or_default()
            .to_owned()
    }

    /// A 503 `database-unavailable`: the database is out of reach, the one 5xx a server may
    /// answer.
    pub fn is_unavailable(&self) -> bool {
        self.status == 503 && self.problem() == "database-unavailable"
    }

    /// Fails unless the status is `want` (503: the `database-unavailable` problem); the error names
    /// `what` and the answer.
    pub fn expect(&self, want: u16, what: &str) -> io::Result<()> {
        if self.status == want && (want != 503 || self.is_unavailable()) {
            return Ok(());
        }
        let body: String = self.body.chars().take(300).collect();
        Err(io::Error::other(format!(
            "{what} → {} (wanted {want}): {body}",
            self.status
        )))
    }
}

/// A client for the server at one address.
#[derive(Debug, Clone, Copy)]
pub struct Http {
    addr: SocketAddr,
}

impl Http {
    /// A client for `127.0.0.1:port`.
    pub fn local(port: u16) -> Http {
        Http {
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        }
    }

    /// The port it calls.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Sends a request; `host` overrides the `Host` header (hosted documents).
    pub fn send(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
        host: Option<&str>,
    ) -> io::Result<Response> {
        let mut stream = TcpStream::connect_timeout(&self.addr, Duration::from_secs(5))?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        stream.set_write_timeout(Some(Duration::from_secs(30)))?;
        let body = body.map(Value::to_string).unwrap_or_default();
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: {}\r\n",
            host.map_or_else(|| self.addr.to_string(), str::to_owned),
            body.len()
        );
        if !body.is_empty() {
            head.push_str("Content-Type: application/json\r\n");
        }
        if let Some(token) = token {
            head.push_str(&format!("Authorization: Bearer {token}\r\n"));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes())?;
        stream.write_all(body.as_bytes())?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw)?;
        parse_response(&raw)
    }

    /// `send` without a Host override.
    pub fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> io::Result<Response> {
        self.send(method, path, token, body, None)
    }

    /// The `Host` of a service's public documents on this server.
    pub fn issuer_host(&self, subdomain: &str) -> String {
        format!("{subdomain}.localhost:{}", self.port())
    }

    /// A public document of a service, as its subdomain serves it.
    pub fn hosted(&self, subdomain: &str, path: &str) -> io::Result<Response> {
        self.send("GET", path, None, None, Some(&self.issuer_host(subdomain)))
    }
}

fn parse_response(raw: &[u8]) -> io::Result<Response> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| malformed("no complete response head"))?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let status = head
        .lines()
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| malformed("no status line"))?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let mut body = raw[split + 4..].to_vec();
    if chunked {
        body = dechunk(&body)?;
    }
    let retry_after = head.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("retry-after")
            .then(|| value.trim().to_owned())
    });
    Ok(Response {
        status,
        body: String::from_utf8_lossy(&body).into_owned(),
        retry_after,
    })
}

fn dechunk(mut data: &[u8]) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = data
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| malformed("truncated chunk size"))?;
        let size_text = String::from_utf8_lossy(&data[..line_end]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| malformed("bad chunk size"))?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        if data.len() < size + 2 {
            return Err(malformed("truncated chunk"));
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_parse_with_and_without_chunks() {
        let plain = b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\n{}";
        let r = parse_response(plain).unwrap();
        assert_eq!((r.status, r.body.as_str()), (201, "{}"));
        let chunked =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n";
        assert_eq!(parse_response(chunked).unwrap().body, "abcde");
        assert!(parse_response(b"HTTP/1.1 200 OK\r\n").is_err());
        let problem = Response {
            status: 503,
            body: r#"{"type": "http://x/problems/database-unavailable"}"#.into(),
            retry_after: None,
        };
        assert_eq!(problem.problem(), "database-unavailable");
        assert!(problem.is_unavailable());
    }
}
