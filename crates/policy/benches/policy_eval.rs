//! One GitHub-Actions-like token against an OIDC policy of 10 and of 1,000 rules of its issuer,
//! the matching rule last, exact and glob patterns mixed; the explanation of the same decision
//! (`Policy::explain`), and of a token no rule matches. The access decision built on it is
//! `registry-domain`'s `access` bench. Results: docs/benchmarks.md.
//!
//! `cargo bench -p registry-policy --bench policy_eval`

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion};
use registry_policy::{Decision, Policy};
use serde_json::{Map, Value};
use std::hint::black_box;
use std::net::IpAddr;

#[path = "workload.rs"]
mod workload;

use workload::{document, policy, token};

fn bench(c: &mut Criterion) {
    let client: IpAddr = "10.1.2.3".parse().expect("address");
    let mut group = c.benchmark_group("policy_eval");
    for rules in [10usize, 1_000] {
        let policy = policy(rules);
        let last = rules - 1;
        let claims = token(last);
        let service = format!("svc-{last}-acme");
        assert_eq!(
            policy.evaluate(Some(&claims), Some(&service), client, None),
            Decision::Allow { rule: Some(last) },
            "only the last rule matches"
        );
        group.bench_with_input(BenchmarkId::new("evaluate", rules), &rules, |b, _| {
            b.iter(|| {
                black_box(&policy).evaluate(
                    Some(black_box(&claims)),
                    Some(black_box(&service)),
                    client,
                    None,
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

    // The most rules a saved policy may have, through the whole check; and 1,000, compiled as
    // a stored policy is (parsing refuses them after the limits' check, in well under 1 ms).
    let saved = document(registry_policy::limits::MAX_RULES);
    c.bench_function("policy_parse/50", |b| {
        b.iter(|| Policy::parse(black_box(&saved)).is_ok())
    });
    let stored = document(1_000);
    c.bench_function("policy_from_stored/1000", |b| {
        b.iter(|| Policy::from_stored(black_box(&stored)).is_ok())
    });
    // What `registry policy check` adds to the compilation: every warning, duplicates and
    // shadowed rules included.
    let compiled = Policy::from_stored(&stored).expect("a stored policy");
    c.bench_function("policy_lint/1000", |b| {
        b.iter(|| black_box(&compiled).lint().len())
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
    let refused = policy.explain(Some(stranger), Some(service), Some(client), None);
    assert!(!refused.allowed && refused.reasons.len() == rules);
    assert!(!policy
        .evaluate(Some(stranger), Some(service), client, None)
        .is_allowed());
    assert_eq!(
        policy
            .explain(Some(last), Some(service), Some(client), None)
            .rule,
        Some(rules - 1)
    );
    group.bench_with_input(BenchmarkId::new("explain", rules), &rules, |b, _| {
        b.iter(|| {
            black_box(policy).explain(
                Some(black_box(last)),
                Some(black_box(service)),
                Some(client),
                None,
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
                    None,
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
                    None,
                )
            })
        },
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
