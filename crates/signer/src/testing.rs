//! What the unit tests share: a temporary directory, and a fake registry answering canned JSON
//! over HTTP, so the plugin's calls go through the real client.

use registry_client::{Credentials, RegistryApi};
use serde_json::Value;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A directory removed when dropped; short, for socket paths (at most 107 bytes).
#[derive(Debug)]
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub(crate) fn new() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("signer-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What the fake answers to each method and path, and the calls it received.
#[derive(Debug, Default)]
struct Routes {
    answers: HashMap<(String, String), (u16, Value)>,
    calls: Vec<(String, String, Value)>,
}

/// A registry on a local port answering canned JSON, one request per connection; a route it does
/// not know is a 404 `not-found`.
#[derive(Debug)]
pub(crate) struct FakeRegistry {
    address: SocketAddr,
    routes: Arc<Mutex<Routes>>,
    task: JoinHandle<()>,
}

impl FakeRegistry {
    pub(crate) async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let routes = Arc::new(Mutex::new(Routes::default()));
        let served = Arc::clone(&routes);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(answer(stream, Arc::clone(&served)));
            }
        });
        Self {
            address,
            routes,
            task,
        }
    }

    /// Answers `method path` with `status` and `body` from now on.
    pub(crate) fn set(&self, method: &str, path: &str, status: u16, body: Value) {
        (self.routes.lock().unwrap().answers).insert((method.into(), path.into()), (status, body));
    }

    /// The calls received so far: method, path, JSON body.
    pub(crate) fn calls(&self) -> Vec<(String, String, Value)> {
        self.routes.lock().unwrap().calls.clone()
    }

    /// A client of the fake.
    pub(crate) fn api(&self) -> RegistryApi {
        api_at(&format!("http://{}", self.address))
    }

    /// Stops listening: every call after it finds no registry.
    pub(crate) async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

/// A client of the registry at `base`, with a token.
pub(crate) fn api_at(base: &str) -> RegistryApi {
    RegistryApi::new(base, Credentials::Token("test-token".into())).unwrap()
}

/// A base URL no registry answers at: a port just freed.
pub(crate) async fn nowhere() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    format!("http://{}", listener.local_addr().unwrap())
}

async fn answer(mut stream: TcpStream, routes: Arc<Mutex<Routes>>) {
    let mut request = Vec::new();
    let mut buffer = [0u8; 4096];
    let (head, length) = loop {
        let Ok(n) = stream.read(&mut buffer).await else {
            return;
        };
        if n == 0 {
            return;
        }
        request.extend_from_slice(&buffer[..n]);
        if let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&request[..end]).into_owned();
            let length = (head.lines())
                .filter_map(|line| line.split_once(':'))
                .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
                .and_then(|(_, value)| value.trim().parse::<usize>().ok())
                .unwrap_or(0);
            request.drain(..end + 4);
            break (head, length);
        }
    };
    while request.len() < length {
        let Ok(n) = stream.read(&mut buffer).await else {
            return;
        };
        if n == 0 {
            return;
        }
        request.extend_from_slice(&buffer[..n]);
    }
    let mut words = head.split_whitespace();
    let (method, path) = (
        words.next().unwrap_or("").to_owned(),
        words.next().unwrap_or("").to_owned(),
    );
    let body = serde_json::from_slice(&request).unwrap_or(Value::Null);
    let (status, answer) = {
        let mut routes = routes.lock().unwrap();
        routes.calls.push((method.clone(), path.clone(), body));
        routes.answers.get(&(method, path)).cloned().unwrap_or_else(|| {
            (
                404,
                serde_json::json!({"type": "http://registry.test/problems/not-found", "detail": "no such route"}),
            )
        })
    };
    let answer = answer.to_string();
    let response = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
        answer.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}
