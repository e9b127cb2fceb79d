//! The workload both policy benches measure: one GitHub-Actions-like token and an OIDC policy
//! of `n` rules of its issuer, the matching rule last, exact and glob patterns mixed. Included
//! by `policy_eval` here and by `registry-domain`'s `access` bench (`#[path]`), so both measure
//! the same thing.

use registry_policy::Policy;
use serde_json::{json, Map, Value};

pub const ISSUER: &str = "https://token.actions.githubusercontent.com";
pub const AUDIENCE: &str = "https://registry.example";

/// Rule `i` admits repository `repo-{i}` of `acme`; even rules pin `sub` exactly, odd ones with a
/// glob, every third also pins the workflow with a glob. Past `limits::MAX_RULES` rules
/// `Policy::parse` refuses a document, so it is compiled as a stored one
/// (`Policy::from_stored`: a policy saved before the limits is served as it is), which is what
/// evaluation meets.
pub fn policy(rules: usize) -> Policy {
    Policy::from_stored(&document(rules)).expect("a valid policy")
}

/// The document of [`policy`].
pub fn document(rules: usize) -> Value {
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
    json!({"kind": "oidc", "rules": rules, "ip_allowlist": ["10.0.0.0/8", "2001:db8::/32"]})
}

/// The claims GitHub Actions puts in an ID token, for repository `repo-{n}`.
pub fn token(n: usize) -> Map<String, Value> {
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
