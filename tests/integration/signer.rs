//! `registry signer` (docs/api.md, "Managed signing") end to end: the real binary as the registry
//! and as the plugin, a gRPC client generated from the KEP's `v1` proto speaking over the plugin's
//! Unix socket as kube-apiserver does (`Metadata`, `FetchKeys`, `Sign`), tokens assembled from
//! its answers and verified against the key set the registry hosts by two relying-party
//! libraries that fetch it themselves (jose's `createRemoteJWKSet`, PyJWT's `PyJWKClient`: the
//! CDN chore's, `xtask/cdn/verify.*`; `cargo xtask test` installs them) and by josekit. Those two
//! are the service's verifiers: across a rotation, their fetches are what make the next key safe.
//! A compromise withdraws at once. The test prints its timeline (`--nocapture`), each step with
//! its time.

use crate::api::signing::{
    account_for, hosted_keys, payload, rotate, sign, turn_on, verifies, DATA_KEY,
};
use crate::api::{publish_kids, register_service};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use registry_signer::proto::external_jwt_signer_client::ExternalJwtSignerClient;
use registry_signer::proto::{FetchKeysRequest, MetadataRequest, SignJwtRequest};
use registry_testkit::TempDir;
use registry_tests::server::{
    json, registry_binary, run_registry, Customer, ServerOptions, TestServer,
};
use registry_tests::wait::within;
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tonic::transport::{Channel, Endpoint};

/// The relying parties that verify the cluster's tokens, by their User-Agent.
const JOSE: &str = "jose-relying-party";
const PYJWT: &str = "pyjwt-relying-party";

/// Has `party` (jose or PyJWT) fetch the key set at `jwks_url` and verify `token`: the `kid` it
/// verified, or why it refused.
fn relying_party(party: &str, jwks_url: &str, token: &str) -> Result<String, String> {
    let dir = std::env::var("REGISTRY_TEST_RELYING_PARTIES")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../xtask/cdn").to_owned());
    let dir = Path::new(&dir);
    let mut command = match party {
        JOSE => {
            let mut node = Command::new("node");
            node.arg(dir.join("verify.mjs"));
            node
        }
        _ => {
            let python = std::env::var("REGISTRY_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
            let mut python = Command::new(python);
            python.arg(dir.join("verify.py"));
            python
        }
    };
    let out = (command.args([jwks_url, token, party]).output())
        .unwrap_or_else(|e| panic!("{party}: {e} (run the tests with cargo xtask test)"));
    match out.status.success() {
        true => Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned()),
        false => Err(String::from_utf8_lossy(&out.stderr).trim().to_owned()),
    }
}

/// Both relying parties verify `token`, each fetching the key set: its `kid`.
fn both_verify(jwks_url: &str, token: &str) -> String {
    let jose = relying_party(JOSE, jwks_url, token).expect("jose verifies");
    let pyjwt = relying_party(PYJWT, jwks_url, token).expect("PyJWT verifies");
    assert_eq!(jose, pyjwt);
    jose
}

/// The timeline of the test, printed as it goes.
struct Timeline(Instant);

impl Timeline {
    fn step(&self, what: &str) {
        eprintln!("[{:>6.1} s] {what}", self.0.elapsed().as_secs_f64());
    }
}

/// A running `registry signer`, stopped (SIGTERM) when dropped.
struct Plugin {
    child: Child,
    socket: PathBuf,
}

impl Plugin {
    fn start(server: &TestServer, token: &str, sub: &str, socket: &Path) -> Self {
        Self::spawn(server, token, sub, socket, Stdio::inherit())
    }

    /// [`Plugin::start`], its stderr (its log) written to `log`.
    fn start_logging(
        server: &TestServer,
        token: &str,
        sub: &str,
        socket: &Path,
        log: &Path,
    ) -> Self {
        let file = std::fs::File::create(log).unwrap();
        Self::spawn(server, token, sub, socket, Stdio::from(file))
    }

    fn spawn(server: &TestServer, token: &str, sub: &str, socket: &Path, stderr: Stdio) -> Self {
        let child = Command::new(registry_binary())
            .args(["signer", "--service", sub, "--socket"])
            .arg(socket)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("REGISTRY_API_URL", &server.base)
            .env("REGISTRY_TOKEN", token)
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("start registry signer");
        let serving = within(Duration::from_secs(20), || {
            std::os::unix::net::UnixStream::connect(socket).is_ok()
        });
        assert!(serving, "the plugin never served");
        Self {
            child,
            socket: socket.to_owned(),
        }
    }
}

impl Drop for Plugin {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

/// kube-apiserver's side: the client generated from the proto, over the socket.
struct ApiServer {
    runtime: tokio::runtime::Runtime,
    client: ExternalJwtSignerClient<Channel>,
}

impl ApiServer {
    fn connect(socket: &Path) -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let endpoint = Endpoint::from_shared(format!("unix:{}", socket.display())).unwrap();
        let channel = runtime
            .block_on(endpoint.connect())
            .expect("connect to the plugin");
        Self {
            runtime,
            client: ExternalJwtSignerClient::new(channel),
        }
    }

    fn max_token_seconds(&mut self) -> i64 {
        let answer = self
            .runtime
            .block_on(self.client.metadata(MetadataRequest {}));
        answer.unwrap().into_inner().max_token_expiration_seconds
    }

    /// The key ids `FetchKeys` answers, after checking each entry's shape.
    fn fetch_keys(&mut self) -> Vec<String> {
        let answer = self
            .runtime
            .block_on(self.client.fetch_keys(FetchKeysRequest {}));
        let keys = answer.unwrap().into_inner();
        assert_eq!(keys.refresh_hint_seconds, 60);
        assert!(keys.data_timestamp.is_some_and(|t| t.seconds > 0));
        (keys.keys.into_iter())
            .map(|key| {
                assert!(!key.exclude_from_oidc_discovery);
                assert!(openssl::pkey::PKey::public_key_from_der(&key.key).is_ok());
                key.key_id
            })
            .collect()
    }

    /// `Sign` of `claims`: the compact token, or the status.
    fn sign(&mut self, claims: &str) -> Result<String, tonic::Status> {
        let request = SignJwtRequest {
            claims: claims.to_owned(),
        };
        let signed = self
            .runtime
            .block_on(self.client.sign(request))?
            .into_inner();
        Ok(format!("{}.{claims}.{}", signed.header, signed.signature))
    }

    /// Waits until `FetchKeys` answers exactly `kids` (the plugin reads the registry every 10 s).
    fn keys_become(&mut self, kids: &[&str]) {
        let mut want: Vec<String> = kids.iter().map(|k| (*k).to_owned()).collect();
        want.sort();
        let mut found = Vec::new();
        let became = within(Duration::from_secs(30), || {
            found = self.fetch_keys();
            found.sort();
            found == want
        });
        assert!(became, "FetchKeys: {found:?}, not {want:?}");
    }
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The payload kube-apiserver sends for a pod's token of `issuer`.
fn pod_claims(issuer: &str) -> String {
    let iat = now();
    URL_SAFE_NO_PAD.encode(
        json!({"aud": ["sts.amazonaws.com"], "exp": iat + 600, "iat": iat, "iss": issuer,
            "kubernetes.io": {"namespace": "default", "serviceaccount": {"name": "default"}},
            "nbf": iat, "sub": "system:serviceaccount:default:default"})
        .to_string(),
    )
}

fn kid_of(token: &str) -> String {
    let header = josekit::jwt::decode_header(token).unwrap();
    header
        .claim("kid")
        .and_then(Value::as_str)
        .unwrap()
        .to_owned()
}

fn signing_state(server: &TestServer, token: &str, sub: &str) -> Value {
    json(server.get(&format!("/services/{sub}/signing"), token))
}

fn stage_of(state: &Value, kid: &str) -> Option<String> {
    (state["keys"].as_array().unwrap().iter())
        .find(|k| k["kid"] == kid)
        .map(|k| k["state"].as_str().unwrap().to_owned())
}

/// acme's service `k3s` with managed signing on (a lead of 0, `max_token_seconds`): the
/// customer, the subdomain, its issuer and the first key, which is current at once.
fn signing_k3s(server: &TestServer, max_token_seconds: i64) -> (Customer, String, String, String) {
    let acme = server.customer("acme", "business");
    let sub = register_service(server, &acme, "k3s");
    let issuer = server.issuer(&sub);
    let settings = json!({"leadSeconds": 0, "maxTokenSeconds": max_token_seconds});
    let state = turn_on(server, &acme.token, &sub, settings);
    assert_eq!(state["keys"][0]["state"], "current", "{state}");
    let first = state["keys"][0]["kid"].as_str().unwrap().to_owned();
    (acme, sub, issuer, first)
}

#[test]
fn the_plugin_signs_for_kube_apiserver_across_a_rotation_and_a_compromise() {
    let timeline = Timeline(Instant::now());
    let server = TestServer::start_with(ServerOptions::binary(&[
        ("REGISTRY_DATA_KEY", DATA_KEY),
        ("REGISTRY_FETCH_FLUSH_SECONDS", "1"),
        // One clock hour of fetches makes a verifier: the test cannot wait for a second hour.
        ("REGISTRY_TEST_VERIFIER_HOURS", "1"),
    ]));
    let (acme, sub, issuer, first) = signing_k3s(&server, 600);
    timeline.step(&format!(
        "signing on: first key {first} current (lead 0, no verifier yet)"
    ));
    let plugin_token = account_for(&server, &acme, &sub, &["tokens:sign", "config:read"]);
    let dir = TempDir::new("signer");
    let socket = dir.0.join("signer.sock");
    let mut plugin = Plugin::start(&server, &plugin_token, &sub, &socket);
    let mode = std::fs::metadata(&plugin.socket)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the socket is the owner's only");
    timeline.step("registry signer serving on its socket (mode 0600)");
    // A second plugin on the same socket is refused, in one sentence.
    let (code, _, stderr) = run_registry(
        &[
            "signer",
            "--service",
            &sub,
            "--socket",
            socket.to_str().unwrap(),
        ],
        &[
            ("REGISTRY_API_URL", server.base.as_str()),
            ("REGISTRY_TOKEN", plugin_token.as_str()),
        ],
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains(socket.to_str().unwrap()), "{stderr}");

    let mut apiserver = ApiServer::connect(&socket);
    assert_eq!(apiserver.max_token_seconds(), 600);
    assert_eq!(apiserver.fetch_keys(), [first.as_str()]);
    let jwks_url = format!("{issuer}/openid/v1/jwks");
    let before = apiserver.sign(&pod_claims(&issuer)).expect("Sign");
    assert_eq!(kid_of(&before), first);
    // Only they fetch the key set before the rotation: they are its verifiers.
    assert_eq!(both_verify(&jwks_url, &before), first);
    timeline
        .step("Sign → a token by the first key; jose and PyJWT verify it (fetching the key set)");
    // They are now the service's verifiers: they fetched the key set before the next key.
    let counted = within(Duration::from_secs(30), || {
        let fetches = server
            .get(&format!("/services/{sub}/fetches"), &acme.token)
            .text()
            .unwrap();
        fetches.contains(JOSE) && fetches.contains(PYJWT)
    });
    assert!(counted, "the verifiers' fetches never counted");

    // Rotate: the next key is published, the first keeps signing.
    turn_on(&server, &acme.token, &sub, json!({"leadSeconds": 1}));
    let rotated = rotate(&server, &acme.token, &sub, false);
    assert_eq!(rotated.status(), 200);
    let rotated = json(rotated);
    let next = (rotated["keys"].as_array().unwrap().iter())
        .find(|k| k["state"] == "next")
        .and_then(|k| k["kid"].as_str())
        .expect("a next key")
        .to_owned();
    timeline.step(&format!(
        "rotate: next key {next} published; no verifier has fetched it"
    ));
    apiserver.keys_become(&[&first, &next]);
    timeline.step("FetchKeys lists both keys");
    std::thread::sleep(Duration::from_secs(3));
    let waiting = apiserver.sign(&pod_claims(&issuer)).expect("Sign");
    assert_eq!(
        kid_of(&waiting),
        first,
        "the next key is not safe: its verifiers lack it"
    );
    let readiness = json(server.get(
        &format!("/services/{sub}/keys/{next}/readiness"),
        &acme.token,
    ));
    assert_eq!(readiness["safeToSign"], false, "{readiness}");
    let mut holding: Vec<&str> = (readiness["pending"].as_array().unwrap().iter())
        .filter_map(|p| p["agent"].as_str())
        .collect();
    holding.sort_unstable();
    assert_eq!(holding, [JOSE, PYJWT], "{readiness}");
    timeline.step("Sign → still the first key: the next waits for jose and PyJWT");

    // The verifiers fetch the set with the next key (verifying a token of the first): safe, the
    // step switches.
    assert_eq!(both_verify(&jwks_url, &waiting), first);
    timeline.step("jose and PyJWT fetch the key set holding the next key");
    let switched = within(Duration::from_secs(30), || {
        stage_of(&signing_state(&server, &acme.token, &sub), &next).as_deref() == Some("current")
    });
    assert!(switched, "the next key never switched");
    timeline.step("the step switches: the next key signs, the first retires");
    let after = apiserver.sign(&pod_claims(&issuer)).expect("Sign");
    assert_eq!(kid_of(&after), next);
    let state = signing_state(&server, &acme.token, &sub);
    assert_eq!(
        stage_of(&state, &first).as_deref(),
        Some("retiring"),
        "{state}"
    );
    assert_eq!(both_verify(&jwks_url, &after), next);
    assert_eq!(
        both_verify(&jwks_url, &before),
        first,
        "the retiring key still verifies"
    );
    let set = hosted_keys(&server, &sub);
    assert!(verifies(&set, &after) && verifies(&set, &before) && verifies(&set, &waiting));
    assert!(
        apiserver.fetch_keys().contains(&first),
        "the retiring key stays for the plugin"
    );
    timeline
        .step("Sign → the next key; tokens of both keys verify; FetchKeys keeps the retiring key");

    // A compromise: a new key signs at once; every other leaves the key set at once.
    let compromised = rotate(&server, &acme.token, &sub, true);
    assert_eq!(compromised.status(), 200);
    let newest = json(compromised)["keys"][0]["kid"]
        .as_str()
        .unwrap()
        .to_owned();
    let fresh = apiserver.sign(&pod_claims(&issuer)).expect("Sign");
    assert_eq!(kid_of(&fresh), newest);
    assert_eq!(both_verify(&jwks_url, &fresh), newest);
    for party in [JOSE, PYJWT] {
        assert!(
            relying_party(party, &jwks_url, &after).is_err(),
            "{party}: withdrawn at once"
        );
    }
    let set = hosted_keys(&server, &sub);
    assert!(verifies(&set, &fresh));
    assert!(
        !verifies(&set, &before) && !verifies(&set, &after),
        "withdrawn at once"
    );
    apiserver.keys_become(&[&newest]);
    timeline.step(&format!(
        "compromised rotation: {newest} signs at once, the others are withdrawn"
    ));

    // Claims the registry refuses are INVALID_ARGUMENT.
    let wrong = URL_SAFE_NO_PAD.encode(
        json!({"iss": "https://elsewhere.example", "iat": now(), "exp": now() + 60}).to_string(),
    );
    let refused = apiserver.sign(&wrong).unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    assert!(refused.message().contains("iss"), "{refused:?}");

    // The registry unreachable: FetchKeys answers from the plugin's copy; Sign is UNAVAILABLE.
    drop(server);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(apiserver.fetch_keys(), [newest.as_str()]);
    let unavailable = apiserver.sign(&pod_claims(&issuer)).unwrap_err();
    assert_eq!(
        unavailable.code(),
        tonic::Code::Unavailable,
        "{unavailable:?}"
    );
    timeline.step("registry stopped: FetchKeys answers from the copy, Sign is UNAVAILABLE");
    // A termination stops the plugin, though kube-apiserver's side is still connected.
    let _ = Command::new("kill")
        .arg(plugin.child.id().to_string())
        .status();
    let stopped = within(Duration::from_secs(10), || {
        plugin.child.try_wait().unwrap().is_some()
    });
    assert!(stopped, "SIGTERM did not stop the plugin");
    assert!(!socket.exists(), "the plugin removed its socket");
    drop(apiserver);
}

/// A plugin started after signing was turned off, and after an upload retired a key, still
/// answers every key that may verify the service's tokens: the managed key until its
/// `withdrawAt`, the retired key until its end (both read from `GET …/keys`, which carries each
/// key's public `jwk`).
#[test]
fn a_plugin_started_after_signing_stopped_still_answers_the_keys_that_verify_its_tokens() {
    let server = TestServer::start_with(ServerOptions::binary(&[("REGISTRY_DATA_KEY", DATA_KEY)]));
    let acme = server.customer("acme", "business");
    let sub = register_service(&server, &acme, "k3s");
    let issuer = server.issuer(&sub);
    let state = turn_on(&server, &acme.token, &sub, json!({"leadSeconds": 0}));
    let managed = state["keys"][0]["kid"].as_str().unwrap().to_owned();
    let signer = account_for(&server, &acme, &sub, &["tokens:sign", "config:read"]);
    let (status, signed) = sign(&server, &signer, &sub, &payload(&issuer, now(), 600));
    assert_eq!(
        (status, signed["kid"].as_str()),
        (200, Some(managed.as_str()))
    );
    // Keys of an uploaded source: k1 retired by the next upload, before any plugin met it.
    publish_kids(&server, &acme.token, &sub, &["k1"]);
    publish_kids(&server, &acme.token, &sub, &["k2"]);
    let off = (server.authed(
        reqwest::Method::DELETE,
        &format!("/services/{sub}/signing"),
        &acme.token,
    ))
    .send()
    .unwrap();
    assert_eq!(off.status(), 204);
    let listed = json(server.get(&format!("/services/{sub}/keys"), &acme.token));
    let state_of = |kid: &str| {
        (listed["keys"].as_array().unwrap().iter())
            .find(|k| k["kid"] == kid)
            .map(|k| (k["state"].clone(), k["jwk"]["kid"].clone()))
    };
    assert_eq!(
        state_of("k1"),
        Some((json!("retired"), json!("k1"))),
        "{listed}"
    );
    // Signing stopped: the managed key signs no more, listed as retired until its tokens
    // expire.
    assert_eq!(
        state_of(&managed),
        Some((json!("retired"), json!(managed))),
        "{listed}"
    );

    let dir = TempDir::new("signer-after");
    let socket = dir.0.join("signer.sock");
    let _plugin = Plugin::start(&server, &signer, &sub, &socket);
    let mut apiserver = ApiServer::connect(&socket);
    let mut answered = apiserver.fetch_keys();
    answered.sort();
    let mut expected = vec!["k1".to_owned(), "k2".to_owned(), managed];
    expected.sort();
    assert_eq!(answered, expected);
}

/// A service deleted (its key set a 404 for everyone): the plugin drops its copy at its next
/// read, as a verifier drops a key set that answers 404, rather than answer keys the registry
/// withdrew; and it says so on stderr, as it says what it cannot read, and as it says of a
/// service it never found.
#[test]
fn a_plugin_drops_the_keys_of_a_service_that_is_gone() {
    let server = TestServer::start_with(ServerOptions::binary(&[("REGISTRY_DATA_KEY", DATA_KEY)]));
    let acme = server.customer("acme", "business");
    let sub = register_service(&server, &acme, "k3s");
    let state = turn_on(&server, &acme.token, &sub, json!({"leadSeconds": 0}));
    let managed = state["keys"][0]["kid"].as_str().unwrap().to_owned();
    let signer = account_for(&server, &acme, &sub, &["tokens:sign", "config:read"]);
    let dir = TempDir::new("signer-gone");
    let socket = dir.0.join("signer.sock");
    let log = dir.0.join("signer.log");
    let plugin = Plugin::start_logging(&server, &signer, &sub, &socket, &log);
    let mut apiserver = ApiServer::connect(&socket);
    assert_eq!(apiserver.fetch_keys(), [managed]);
    let gone = (server.authed(
        reqwest::Method::DELETE,
        &format!("/services/{sub}"),
        &acme.token,
    ))
    .send()
    .unwrap();
    assert_eq!(gone.status(), 204);
    apiserver.keys_become(&[]);
    drop((apiserver, plugin));
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(said.contains("no such service"), "{said}");
    // A service the registry never had (a --service mistyped) is said so at the start.
    let (socket, log) = (dir.0.join("nope.sock"), dir.0.join("nope.log"));
    let _plugin = Plugin::start_logging(&server, &signer, "nope-acme", &socket, &log);
    let said = within(Duration::from_secs(10), || {
        std::fs::read_to_string(&log).is_ok_and(|said| said.contains("no such service"))
    });
    assert!(said, "{:?}", std::fs::read_to_string(&log));
}

/// gRPC's C core (Python's grpcio, here from code generated out of the KEP's proto) names the
/// socket's path as each call's `:authority`, which the HTTP/2 server under the plugin would
/// refuse: the plugin's relay serves it all the same.
#[test]
fn a_client_of_grpcs_c_core_is_served_though_it_names_the_socket_as_authority() {
    let server = TestServer::start_with(ServerOptions::binary(&[("REGISTRY_DATA_KEY", DATA_KEY)]));
    let (acme, sub, issuer, managed) = signing_k3s(&server, 900);
    let signer = account_for(&server, &acme, &sub, &["tokens:sign", "config:read"]);
    let dir = TempDir::new("signer-grpcio");
    let socket = dir.0.join("signer.sock");
    let _plugin = Plugin::start(&server, &signer, &sub, &socket);
    let claims = pod_claims(&issuer);
    let python = std::env::var("REGISTRY_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new(python)
        .arg(root.join("tests/fixtures/grpc_client.py"))
        .arg(root.join("crates/signer/proto"))
        .arg(&socket)
        .arg(&claims)
        .output()
        .expect("python (run the tests with cargo xtask test)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "grpcio's calls failed: {stderr}");
    let answered: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answered["maxTokenSeconds"], 900, "{answered}");
    assert_eq!(answered["kids"], json!([managed]), "{answered}");
    let token = answered["token"].as_str().unwrap();
    assert_eq!(kid_of(token), managed);
    assert!(verifies(&hosted_keys(&server, &sub), token));
}

/// A command line the plugin cannot serve from is a usage error (exit 2, one sentence), before
/// any socket is made: an API address that is no URL, or no service named.
#[test]
fn a_plugin_without_a_usable_api_url_service_or_credentials_is_a_usage_error() {
    let dir = TempDir::new("signer-usage");
    let socket = dir.0.join("signer.sock");
    let socket = socket.to_str().unwrap();
    for (service, api_url, token, named) in [
        ("k3s-acme", "not a url", "t", "REGISTRY_API_URL"),
        ("", "http://127.0.0.1:9", "t", "--service"),
        ("k3s-acme", "http://127.0.0.1:9", "", "REGISTRY_TOKEN"),
    ] {
        let (code, stdout, stderr) = run_registry(
            &["signer", "--service", service, "--socket", socket],
            &[("REGISTRY_API_URL", api_url), ("REGISTRY_TOKEN", token)],
        );
        assert_eq!(code, Some(2), "{stderr}");
        assert!(stderr.contains(named), "{stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(stdout.is_empty(), "{stdout}");
        assert!(!Path::new(socket).exists());
    }
}
