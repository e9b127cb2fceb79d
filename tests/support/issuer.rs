//! A real OIDC issuer for tests: discovery document and key set served over plain HTTP on
//! 127.0.0.1, real keys (the test kit's, `registry_testkit::keys`), behaviours switchable while
//! it runs.
//!
//! ```no_run
//! use registry_tests::issuer::TestIssuer;
//! use serde_json::json;
//! let issuer = TestIssuer::start();
//! let token = issuer.mint("ES256", json!({"iss": issuer.url(), "aud": "a", "iat": 0, "exp": 60}));
//! assert_eq!(issuer.jwks_fetches(), 0);
//! # drop(token);
//! ```

use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

/// Signing keys, compact tokens and HMAC signatures (the test kit's).
pub use registry_testkit::{compact, hmac_sha256, KeyKind, SigningKey};

/// Path of the discovery document.
pub const DISCOVERY_PATH: &str = "/.well-known/openid-configuration";
/// Path of the key set named by the discovery document.
pub const JWKS_PATH: &str = "/jwks";
/// A second path serving the same key set (a same-host redirect target).
pub const JWKS_ALT_PATH: &str = "/jwks-alt";

/// How the issuer answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// Serves its documents.
    Normal,
    /// Answers 503 to everything.
    Unavailable,
    /// Closes every connection without answering.
    CloseConnection,
    /// Waits this long, then serves.
    Slow(Duration),
    /// Serves an empty key set.
    EmptyKeys,
    /// Answers 404 to everything: the issuer withdrew its documents.
    NotFound,
    /// Answers 403 to everything: an answer, but neither keys nor an outage.
    Forbidden,
}

#[derive(Debug)]
struct State {
    keys: Vec<SigningKey>,
    next_kid: usize,
    behaviour: Behaviour,
    cache_control: Option<String>,
    issuer_override: Option<String>,
    jwks_uri_override: Option<String>,
    jwks_redirect: Option<String>,
    jwks_padding: usize,
    hits: HashMap<String, usize>,
}

/// A running issuer; it stops when dropped.
#[derive(Debug)]
pub struct TestIssuer {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
}

impl TestIssuer {
    /// An issuer with one key of each kind: RSA 2048, P-256, P-384, Ed25519.
    pub fn start() -> TestIssuer {
        Self::start_with(&[KeyKind::Rsa, KeyKind::P256, KeyKind::P384, KeyKind::Ed25519])
    }

    /// An issuer publishing one fresh key per entry of `kinds`.
    pub fn start_with(kinds: &[KeyKind]) -> TestIssuer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let addr = listener.local_addr().expect("local address");
        let mut state = State {
            keys: Vec::new(),
            next_kid: 1,
            behaviour: Behaviour::Normal,
            cache_control: None,
            issuer_override: None,
            jwks_uri_override: None,
            jwks_redirect: None,
            jwks_padding: 0,
            hits: HashMap::new(),
        };
        for kind in kinds {
            let key = new_key(&mut state, *kind);
            state.keys.push(key);
        }
        let state = Arc::new(Mutex::new(state));
        let stop = Arc::new(AtomicBool::new(false));
        let (shared, stopping) = (state.clone(), stop.clone());
        thread::spawn(move || {
            for stream in listener.incoming() {
                if stopping.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let shared = shared.clone();
                thread::spawn(move || serve(stream, addr, &shared));
            }
        });
        TestIssuer { addr, state, stop }
    }

    /// The issuer URL (`http://127.0.0.1:{port}`), also its `iss`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The first published key that signs `alg`.
    pub fn key(&self, alg: &str) -> SigningKey {
        let kind = KeyKind::for_alg(alg);
        self.state()
            .keys
            .iter()
            .find(|k| k.kind() == kind)
            .cloned()
            .unwrap_or_else(|| panic!("no {kind:?} key published"))
    }

    /// A token signed with `alg` by the published key of that kind, its `kid` in the header.
    pub fn mint(&self, alg: &str, claims: Value) -> String {
        self.key(alg).sign_claims(alg, &claims)
    }

    /// A token with exactly `header`, signed as its `alg` says: `none` gets an empty signature,
    /// `HS*` an HMAC keyed with the RSA key's public PEM (the algorithm-confusion attack), any
    /// other algorithm the published key of its kind, whatever `kid`, `jku` or `jwk` say.
    pub fn mint_with_header(&self, header: Value, claims: Value) -> String {
        let alg = header["alg"].as_str().unwrap_or("none").to_owned();
        match alg.as_str() {
            "none" => compact(&header, &claims, |_| Vec::new()),
            hs if hs.starts_with("HS") => {
                let secret = self.key("RS256").public_pem();
                compact(&header, &claims, |m| hmac_sha256(&secret, m))
            }
            _ => {
                let key = self.key(&alg);
                compact(&header, &claims, |m| key.sign(&alg, m))
            }
        }
    }

    /// Switches how requests are answered.
    pub fn set_behaviour(&self, behaviour: Behaviour) {
        self.state().behaviour = behaviour;
    }

    /// The key set's `Cache-Control` header (none by default).
    pub fn set_cache_control(&self, value: Option<&str>) {
        self.state().cache_control = value.map(str::to_owned);
    }

    /// Replaces every key by a fresh one of the same kind with a new `kid`.
    pub fn rotate_keys(&self) {
        let mut state = self.state();
        let kinds: Vec<KeyKind> = state.keys.iter().map(SigningKey::kind).collect();
        let keys: Vec<SigningKey> = kinds
            .into_iter()
            .map(|kind| new_key(&mut state, kind))
            .collect();
        state.keys = keys;
    }

    /// Publishes one more key of `kind` (after the others, so [`Self::key`] still returns the
    /// older key of that kind) and returns it.
    pub fn add_key(&self, kind: KeyKind) -> SigningKey {
        let mut state = self.state();
        let key = new_key(&mut state, kind);
        state.keys.push(key.clone());
        key
    }

    /// The `issuer` the discovery document claims (its own URL when `None`).
    pub fn set_discovery_issuer(&self, issuer: Option<&str>) {
        self.state().issuer_override = issuer.map(str::to_owned);
    }

    /// The `jwks_uri` the discovery document names (`{url}/jwks` when `None`).
    pub fn set_jwks_uri(&self, uri: Option<&str>) {
        self.state().jwks_uri_override = uri.map(str::to_owned);
    }

    /// Makes `/jwks` answer `302 Found` to `location` (`None`: serve normally).
    pub fn redirect_jwks(&self, location: Option<&str>) {
        self.state().jwks_redirect = location.map(str::to_owned);
    }

    /// Pads the key set document with a member of `bytes` characters.
    pub fn set_jwks_padding(&self, bytes: usize) {
        self.state().jwks_padding = bytes;
    }

    /// Requests received for `path` so far (answered or not).
    pub fn fetches(&self, path: &str) -> usize {
        self.state().hits.get(path).copied().unwrap_or(0)
    }

    /// Requests for the discovery document so far.
    pub fn discovery_fetches(&self) -> usize {
        self.fetches(DISCOVERY_PATH)
    }

    /// Requests for `/jwks` so far.
    pub fn jwks_fetches(&self) -> usize {
        self.fetches(JWKS_PATH)
    }
}

impl Drop for TestIssuer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so that it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

fn new_key(state: &mut State, kind: KeyKind) -> SigningKey {
    let prefix = match kind {
        KeyKind::Rsa => "rsa",
        KeyKind::P256 => "p256",
        KeyKind::P384 => "p384",
        KeyKind::Ed25519 => "ed25519",
    };
    let kid = format!("{prefix}-{}", state.next_kid);
    state.next_kid += 1;
    SigningKey::generate(kind, &kid)
}

/// Reads the request head and returns the path of its request line.
fn read_path(stream: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        let n = stream.read(&mut buf).ok().filter(|n| *n > 0)?;
        head.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&head).lines().next()?.to_owned();
    line.split(' ').nth(1).map(str::to_owned)
}

fn serve(mut stream: TcpStream, addr: SocketAddr, shared: &Mutex<State>) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let Some(path) = read_path(&mut stream) else {
        return;
    };
    let behaviour = {
        let mut state = shared.lock().unwrap_or_else(|e| e.into_inner());
        *state.hits.entry(path.clone()).or_default() += 1;
        state.behaviour
    };
    let base = format!("http://{addr}");
    let (status, headers, body) = match behaviour {
        Behaviour::CloseConnection => return,
        Behaviour::Unavailable => ("503 Service Unavailable", String::new(), String::new()),
        Behaviour::NotFound => ("404 Not Found", String::new(), String::new()),
        Behaviour::Forbidden => ("403 Forbidden", String::new(), String::new()),
        Behaviour::Slow(delay) => {
            thread::sleep(delay);
            respond(&path, &base, false, shared)
        }
        Behaviour::EmptyKeys => respond(&path, &base, true, shared),
        Behaviour::Normal => respond(&path, &base, false, shared),
    };
    // No Content-Length: the body ends when the connection closes, which is valid HTTP/1.1 and
    // makes a client that trusts Content-Length for its size limit read everything.
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nConnection: close\r\n{headers}\r\n{body}"
    );
    let _ = stream.write_all(response.as_bytes());
}

/// Status line, extra header lines and body for `path`.
fn respond(
    path: &str,
    base: &str,
    empty: bool,
    shared: &Mutex<State>,
) -> (&'static str, String, String) {
    let state = shared.lock().unwrap_or_else(|e| e.into_inner());
    match path {
        DISCOVERY_PATH => {
            let issuer = state
                .issuer_override
                .clone()
                .unwrap_or_else(|| base.to_owned());
            let jwks_uri = state
                .jwks_uri_override
                .clone()
                .unwrap_or_else(|| format!("{base}{JWKS_PATH}"));
            // The members OpenID Connect Discovery requires, as a real issuer serves them.
            let body = json!({"issuer": issuer, "jwks_uri": jwks_uri,
                "response_types_supported": ["id_token"], "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported":
                ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"]});
            ("200 OK", String::new(), body.to_string())
        }
        JWKS_PATH if state.jwks_redirect.is_some() => {
            let location = state.jwks_redirect.clone().unwrap_or_default();
            (
                "302 Found",
                format!("Location: {location}\r\n"),
                String::new(),
            )
        }
        JWKS_PATH | JWKS_ALT_PATH => {
            let keys: Vec<Value> = if empty {
                Vec::new()
            } else {
                state.keys.iter().map(SigningKey::public_jwk).collect()
            };
            let mut body = json!({ "keys": keys });
            if state.jwks_padding > 0 {
                body["padding"] = Value::String("x".repeat(state.jwks_padding));
            }
            let headers = state
                .cache_control
                .as_ref()
                .map(|v| format!("Cache-Control: {v}\r\n"))
                .unwrap_or_default();
            ("200 OK", headers, body.to_string())
        }
        _ => ("404 Not Found", String::new(), "{}".to_owned()),
    }
}
