//! One GitHub-Actions-like token against an OIDC policy of 10 and of 1,000 rules of its issuer,
//! the matching rule last, exact and glob patterns mixed; the explanation of the same decision
//! (`Policy::explain`), and of a token no rule matches. The access decision built on it is
//! `registry-domain`'s `access` bench. Results: docs/benchmarks.md.
//!
//! `cargo bench -p registry-policy --bench policy_eval`

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion};
use registry_policy::{Decision, Policy};
use serde_json::{json, Map, Value};
use std::hint::black_box;
use std::net::IpAddr;

const ISSUER: &str = "https://token.actions.githubusercontent.com";
const AUDIENCE: &str = "https://registry.example";

/// Rule `i` admits repository `repo-{i}` of `acme`; even rules pin `sub` exactly, odd ones with a
/// glob, every third also pins the workflow with a glob.
fn policy(rules: usize) -> Policy {
    let rules: Vec<Value> = (0..rules)
        .map(|i| {
            let mut claims = json!({
                "iss": ISSUER,
                "aud": AUDIENCE,
                "sub": if i % 2 == 0 {
                    format!("repo:acme/repo-{i}:ref:refs/heads/main")
                } else {
                    format!("repo:acme/repo-{i}:*")
                },
                "repository_owner": "acme",
            });
            if i % 3 == 0 {
                claims["job_workflow_ref"] = json!(format!(
                    "acme/repo-{i}/.github/workflows/*.yml@refs/heads/main"
                ));
            }
            json!({"services": [format!("svc-{i}-acme"), "shared-*"], "claims": claims})
        })
        .collect();
    let document =
        json!({"kind": "oidc", "rules": rules, "ip_allowlist": ["10.0.0.0/8", "2001:db8::/32"]});
    Policy::parse(&document).expect("valid policy").policy
}

/// The claims GitHub Actions puts in an ID token, for repository `repo-{n}`.
fn token(n: usize) -> Map<String, Value> {
    let repo = format!("acme/repo-{n}");
    json!({
        "jti": "8d2f3c1e-6b7a-4e55-9c0d-2a1b3c4d5e6f",
        "sub": format!("repo:{repo}:ref:refs/heads/main"),
        "aud": AUDIENCE,
        "ref": "refs/heads/main",
        "sha": "d6f1c2a9b8e7f6a5d4c3b2a1f0e9d8c7b6a5f4e3",
        "repository": repo,
        "repository_owner": "acme",
        "repository_owner_id": "1234567",
        "run_id": "9876543210",
        "run_number": "482",
        "run_attempt": "1",
        "repository_visibility": "private",
        "repository_id": "76543210",
        "actor_id": "424242",
        "actor": "octocat",
        "workflow": "deploy",
        "head_ref": "",
        "base_ref": "",
        "event_name": "push",
        "ref_protected": "true",
        "ref_type": "branch",
        "workflow_ref": format!("{repo}/.github/workflows/deploy.yml@refs/heads/main"),
        "workflow_sha": "d6f1c2a9b8e7f6a5d4c3b2a1f0e9d8c7b6a5f4e3",
        "job_workflow_ref": format!("{repo}/.github/workflows/deploy.yml@refs/heads/main"),
        "job_workflow_sha": "d6f1c2a9b8e7f6a5d4c3b2a1f0e9d8c7b6a5f4e3",
        "runner_environment": "github-hosted",
        "iss": ISSUER,
        "nbf": 1_900_000_000,
        "exp": 1_900_000_900,
        "iat": 1_900_000_000
    })
    .as_object()
    .expect("object")
    .clone()
}

fn bench(c: &mut Criterion) {
    let client: IpAddr = "10.1.2.3".parse().expect("address");
    let mut group = c.benchmark_group("policy_eval");
    for rules in [10usize, 1_000] {
        let policy = policy(rules);
        let last = rules - 1;
        let claims = token(last);
        let service = format!("svc-{last}-acme");
        assert_eq!(
            policy.evaluate(Some(&claims), Some(&service), client),
            Decision::Allow { rule: Some(last) },
            "only the last rule matches"
        );
        group.bench_with_input(BenchmarkId::new("evaluate", rules), &rules, |b, _| {
            b.iter(|| {
                black_box(&policy).evaluate(
                    Some(black_box(&claims)),
                    Some(black_box(&service)),
                    client,
                )
            })
        });
        group.bench_with_input(BenchmarkId::new("oidc_scope", rules), &rules, |b, _| {
            b.iter(|| {
                let scope = black_box(&policy).oidc_scope(black_box(&claims));
                scope.is_some_and(|s| s.matches(black_box(&service)))
            })
        });
        let stranger = token(rules + 7);
        assert!(policy.oidc_scope(&stranger).is_none());
        explain_against_evaluate(
            &mut group, &policy, rules, &claims, &stranger, &service, client,
        );
        group.bench_with_input(
            BenchmarkId::new("oidc_scope_no_match", rules),
            &rules,
            |b, _| {
                b.iter(|| {
                    black_box(&policy)
                        .oidc_scope(black_box(&stranger))
                        .is_none()
                })
            },
        );
    }
    group.finish();

    let document = policy(1_000).document().clone();
    c.bench_function("policy_parse/1000", |b| {
        b.iter(|| Policy::parse(black_box(&document)).is_ok())
    });
}

/// `Policy::explain` against `Policy::evaluate` on the same policy and request: the token of the
/// last rule (allowed), and a token of another repository that no rule matches (refused, the
/// worst case: every rule of the issuer is explained).
fn explain_against_evaluate(
    group: &mut BenchmarkGroup<'_, WallTime>,
    policy: &Policy,
    rules: usize,
    last: &Map<String, Value>,
    stranger: &Map<String, Value>,
    service: &str,
    client: IpAddr,
) {
    let refused = policy.explain(Some(stranger), Some(service), Some(client));
    assert!(!refused.allowed && refused.reasons.len() == rules);
    assert!(!policy
        .evaluate(Some(stranger), Some(service), client)
        .is_allowed());
    assert_eq!(
        policy.explain(Some(last), Some(service), Some(client)).rule,
        Some(rules - 1)
    );
    group.bench_with_input(BenchmarkId::new("explain", rules), &rules, |b, _| {
        b.iter(|| {
            black_box(policy).explain(
                Some(black_box(last)),
                Some(black_box(service)),
                Some(client),
            )
        })
    });
    group.bench_with_input(
        BenchmarkId::new("evaluate_no_match", rules),
        &rules,
        |b, _| {
            b.iter(|| {
                black_box(policy).evaluate(
                    Some(black_box(stranger)),
                    Some(black_box(service)),
                    client,
                )
            })
        },
    );
    group.bench_with_input(
        BenchmarkId::new("explain_no_match", rules),
        &rules,
        |b, _| {
            b.iter(|| {
                black_box(policy).explain(
                    Some(black_box(stranger)),
                    Some(black_box(service)),
                    Some(client),
                )
            })
        },
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
