//! A stand-in for a kube-apiserver's issuer discovery endpoints, for `registry sync`: HTTPS
//! with a CA of its own, a bearer token required, `/.well-known/openid-configuration` and
//! `/openid/v1/jwks` (as `application/jwk-set+json`), and a key set the test changes.

use openssl::asn1::Asn1Time;
use openssl::bn::BigNum;
use openssl::ec::{EcGroup, EcKey};
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::{PKey, Private};
use openssl::ssl::{SslAcceptor, SslMethod};
use openssl::x509::extension::{BasicConstraints, SubjectAlternativeName};
use openssl::x509::{X509NameBuilder, X509};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The issuer a cluster names in its tokens (the registry rewrites it).
pub const CLUSTER_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

fn key() -> PKey<Private> {
    let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).expect("P-256");
    PKey::from_ec_key(EcKey::generate(&group).expect("key")).expect("pkey")
}

fn certificate(
    name: &str,
    key: &PKey<Private>,
    issuer: Option<(&X509, &PKey<Private>)>,
    serial: u32,
) -> X509 {
    let mut subject = X509NameBuilder::new().expect("name");
    subject.append_entry_by_text("CN", name).expect("CN");
    let subject = subject.build();
    let mut builder = X509::builder().expect("builder");
    builder.set_version(2).expect("version");
    builder
        .set_serial_number(
            &BigNum::from_u32(serial)
                .expect("serial")
                .to_asn1_integer()
                .expect("asn1"),
        )
        .expect("serial");
    builder.set_subject_name(&subject).expect("subject");
    builder.set_pubkey(key).expect("pubkey");
    builder
        .set_not_before(&Asn1Time::days_from_now(0).expect("time"))
        .expect("not before");
    builder
        .set_not_after(&Asn1Time::days_from_now(2).expect("time"))
        .expect("not after");
    match issuer {
        None => {
            builder.set_issuer_name(&subject).expect("issuer");
            let ca = BasicConstraints::new().critical().ca().build().expect("ca");
            builder.append_extension(ca).expect("extension");
            builder.sign(key, MessageDigest::sha256()).expect("sign");
        }
        Some((ca, ca_key)) => {
            builder.set_issuer_name(ca.subject_name()).expect("issuer");
            let san = SubjectAlternativeName::new()
                .ip("127.0.0.1")
                .dns("localhost")
                .build(&builder.x509v3_context(Some(ca), None))
                .expect("san");
            builder.append_extension(san).expect("extension");
            builder.sign(ca_key, MessageDigest::sha256()).expect("sign");
        }
    }
    builder.build()
}

/// A running stand-in; stops with the test process.
#[derive(Debug)]
pub struct KubeApiServer {
    /// `https://127.0.0.1:PORT`.
    pub url: String,
    /// The PEM file of its CA.
    pub ca_file: PathBuf,
    /// Another CA's PEM file (the wrong CA).
    pub other_ca_file: PathBuf,
    /// A file holding the token it accepts.
    pub token_file: PathBuf,
    keys: Arc<Mutex<Vec<Value>>>,
    requests: Arc<AtomicUsize>,
    _dir: crate::server::TempDir,
}

impl KubeApiServer {
    /// Starts one serving `keys`.
    pub fn start(keys: Vec<Value>) -> KubeApiServer {
        let dir = crate::server::TempDir::new("kube");
        let (ca_key, server_key) = (key(), key());
        let ca = certificate("test cluster CA", &ca_key, None, 1);
        let server = certificate("kube-apiserver", &server_key, Some((&ca, &ca_key)), 2);
        let other_key = key();
        let other_ca = certificate("another CA", &other_key, None, 3);
        let ca_file = dir.0.join("ca.crt");
        let other_ca_file = dir.0.join("other-ca.crt");
        let token_file = dir.0.join("token");
        std::fs::write(&ca_file, ca.to_pem().expect("pem")).expect("ca file");
        std::fs::write(&other_ca_file, other_ca.to_pem().expect("pem")).expect("ca file");
        let token = format!("cluster-token-{}", uuid::Uuid::new_v4());
        std::fs::write(&token_file, &token).expect("token file");
        let mut acceptor =
            SslAcceptor::mozilla_intermediate_v5(SslMethod::tls()).expect("acceptor");
        acceptor.set_private_key(&server_key).expect("key");
        acceptor.set_certificate(&server).expect("certificate");
        acceptor.add_extra_chain_cert(ca).expect("chain");
        let acceptor = Arc::new(acceptor.build());
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!(
            "https://127.0.0.1:{}",
            listener.local_addr().expect("addr").port()
        );
        let keys = Arc::new(Mutex::new(keys));
        let requests = Arc::new(AtomicUsize::new(0));
        let (served_keys, counter, base) = (keys.clone(), requests.clone(), url.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (acceptor, keys, counter, base, token) = (
                    acceptor.clone(),
                    served_keys.clone(),
                    counter.clone(),
                    base.clone(),
                    token.clone(),
                );
                std::thread::spawn(move || {
                    let Ok(mut tls) = acceptor.accept(stream) else {
                        return; // a client that does not trust our CA hangs up here
                    };
                    let mut reader = BufReader::new(&mut tls);
                    let mut request_line = String::new();
                    if reader.read_line(&mut request_line).is_err() {
                        return;
                    }
                    let mut authorized = false;
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
                            break;
                        }
                        if line.to_ascii_lowercase().starts_with("authorization:") {
                            authorized = line.trim_end().ends_with(&format!("Bearer {token}"));
                        }
                    }
                    counter.fetch_add(1, Ordering::SeqCst);
                    let path = request_line.split_whitespace().nth(1).unwrap_or("");
                    let (status, content_type, body) = match (authorized, path) {
                        (false, _) => (
                            "401 Unauthorized",
                            "application/json",
                            json!({"kind": "Status", "code": 401}),
                        ),
                        (true, "/.well-known/openid-configuration") => (
                            "200 OK",
                            "application/json",
                            json!({
                                "issuer": CLUSTER_ISSUER,
                                "jwks_uri": format!("{base}/openid/v1/jwks"),
                                "response_types_supported": ["id_token"],
                                "subject_types_supported": ["public"],
                                "id_token_signing_alg_values_supported": ["ES256"]
                            }),
                        ),
                        (true, "/openid/v1/jwks") => (
                            "200 OK",
                            "application/jwk-set+json",
                            json!({"keys": *keys.lock().expect("keys")}),
                        ),
                        (true, _) => ("404 Not Found", "application/json", json!({"code": 404})),
                    };
                    let body = body.to_string();
                    let response = format!(
                        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = tls.write_all(response.as_bytes());
                    let _ = tls.shutdown();
                });
            }
        });
        KubeApiServer {
            url,
            ca_file,
            other_ca_file,
            token_file,
            keys,
            requests,
            _dir: dir,
        }
    }

    /// Replaces the key set it serves (a rotation on the cluster).
    pub fn set_keys(&self, keys: Vec<Value>) {
        *self.keys.lock().expect("keys") = keys;
    }

    /// Requests it answered.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}
