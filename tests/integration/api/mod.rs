//! The HTTP API, driven through the real binary (DECISIONS §3–§10).

mod accounts;
mod anonymous;
mod config;
mod dashboard;
mod errors;
mod federation;
mod hosting;
mod ops;
mod outage;
mod policy_fixtures;
mod replicas;
mod services;

use serde_json::{json, Value};

/// A discovery document as a kind/k3s cluster serves it.
pub fn cluster_discovery() -> Value {
    json!({
        "issuer": "https://kubernetes.default.svc.cluster.local",
        "jwks_uri": "https://172.18.0.2:6443/openid/v1/jwks",
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["RS256"]
    })
}

/// A well-formed 2048-bit RSA public key.
pub fn rsa_key(kid: &str) -> Value {
    let mut n = vec![0xa5u8; 256];
    n[0] = 0xc3;
    json!({"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256", "e": "AQAB", "n": b64(&n)})
}

/// base64url without padding.
pub fn b64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

/// A valid upload body.
pub fn upload(kids: &[&str]) -> Value {
    json!({
        "openidConfiguration": cluster_discovery(),
        "jwks": {"keys": kids.iter().map(|k| rsa_key(k)).collect::<Vec<_>>()}
    })
}
