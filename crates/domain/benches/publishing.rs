//! The checks and rewrite of an upload (`PUT /services/{s}/config`): a cluster's discovery
//! document with a key set of 2 and of 100 keys (RSA 2048 and P-256 alternating), with a
//! previous set to compare `kid`s with. Results: docs/benchmarks.md.
//!
//! `cargo bench -p registry-domain --bench publishing`

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use registry_domain::publishing::publish;
use serde_json::{json, Value};
use std::hint::black_box;

const ISSUER: &str = "https://k3s-acme.oidc.example.com";

fn key(i: usize) -> Value {
    if i % 2 == 0 {
        let mut n = vec![0x5au8; 256];
        n[0] = 0xc5;
        // Odd, as every RSA modulus is.
        n[255] = 0x5b;
        json!({"kty": "RSA", "kid": format!("k{i}"), "use": "sig", "alg": "RS256", "e": "AQAB", "n": URL_SAFE_NO_PAD.encode(&n)})
    } else {
        json!({"kty": "EC", "crv": "P-256", "kid": format!("k{i}"), "use": "sig", "alg": "ES256",
               "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
               "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"})
    }
}

fn upload(keys: usize) -> Value {
    json!({
        "openidConfiguration": {
            "issuer": "https://kubernetes.default.svc.cluster.local",
            "jwks_uri": "https://172.18.0.2:6443/openid/v1/jwks",
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256", "ES256"]
        },
        "jwks": {"keys": (0..keys).map(key).collect::<Vec<_>>()}
    })
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("publish");
    let previous: Vec<String> = vec!["k0".into(), "old".into()];
    for keys in [2, 100] {
        let body = upload(keys);
        group.bench_with_input(BenchmarkId::from_parameter(keys), &body, |b, body| {
            b.iter(|| publish(black_box(body), ISSUER, Some(&previous)).expect("valid upload"))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
