//! The whole access decision of a request (`registry_domain::access::decide`): a static token,
//! and one GitHub-Actions-like identity token meeting accounts whose OIDC policies hold 10 and
//! 1,000 rules of its issuer, the matching rule last (the policies and the token of
//! `registry-policy`'s `policy_eval` bench). Results: docs/benchmarks.md.
//!
//! `cargo bench -p registry-domain --bench access`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use registry_domain::access::{decide, Credential, Request};
use registry_domain::policy::{Action, Policy};
use registry_domain::{Service, ServiceAccount};
use serde_json::json;
use std::hint::black_box;
use std::net::IpAddr;
use std::sync::Arc;
use time::macros::datetime;
use uuid::Uuid;

#[path = "../../policy/benches/workload.rs"]
mod workload;

use workload::{policy, token};

fn bench(c: &mut Criterion) {
    let client: IpAddr = "10.1.2.3".parse().expect("address");
    access(c, client);
}

/// `access::decide` as the server calls it for a call on one service: a static token's
/// account, and an identity token meeting the accounts that trust its issuer (three customers'
/// accounts of 10 or 1,000 rules; the owner's last).
fn access(c: &mut Criterion, client: IpAddr) {
    let now = datetime!(2026-11-23 12:00 UTC);
    let owner = Uuid::new_v4();
    let account = |customer: Uuid, policy: Policy| {
        Arc::new(ServiceAccount {
            id: Uuid::new_v4(),
            customer_id: customer,
            name: "ci".into(),
            policy,
            created_at: now,
            last_used_at: None,
        })
    };
    let mut group = c.benchmark_group("access");
    for rules in [10usize, 1_000] {
        let last = rules - 1;
        let service = Service {
            id: Uuid::new_v4(),
            customer_id: Some(owner),
            subdomain: format!("svc-{last}-acme"),
            title: None,
            description: None,
            created_at: now,
            expires_at: None,
        };
        let candidates: Vec<Arc<ServiceAccount>> = vec![
            account(Uuid::new_v4(), policy(rules)),
            account(Uuid::new_v4(), policy(rules)),
            account(owner, policy(rules)),
        ];
        let claims = token(last);
        let federated = Credential::IdentityToken {
            claims: &claims,
            candidates: &candidates,
            chosen: None,
        };
        let request = Request::Service(Some(&service));
        assert!(decide(federated, request, Action::ConfigRead, client, now).is_ok());
        group.bench_with_input(
            BenchmarkId::new("decide_federated", rules),
            &rules,
            |b, _| {
                b.iter(|| {
                    decide(
                        black_box(federated),
                        black_box(request),
                        Action::ConfigRead,
                        client,
                        now,
                    )
                })
            },
        );
    }
    let static_account = account(
        owner,
        Policy::parse(&json!({"kind": "static", "services": ["svc-*", "api-acme"],
            "ip_allowlist": ["10.0.0.0/8"]}))
        .expect("valid policy")
        .policy,
    );
    let service = Service {
        id: Uuid::new_v4(),
        customer_id: Some(owner),
        subdomain: "api-acme".into(),
        title: None,
        description: None,
        created_at: now,
        expires_at: None,
    };
    let request = Request::Service(Some(&service));
    let credential = Credential::Account(&static_account);
    assert!(decide(credential, request, Action::ConfigRead, client, now).is_ok());
    group.bench_function("decide_static", |b| {
        b.iter(|| {
            decide(
                black_box(credential),
                black_box(request),
                Action::ConfigRead,
                client,
                now,
            )
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
