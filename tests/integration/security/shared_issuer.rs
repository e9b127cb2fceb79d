//! Second security review, findings 1 and 2 (docs/api.md, "Authentication"): a shared issuer never
//! hands one tenant another's identity, and a withdrawn issuer is not an outage.

use super::{create_service, oidc_account_for as account};
use registry_tests::issuer::{compact, Behaviour, KeyKind, SigningKey, TestIssuer};
use registry_tests::server::{
    assert_problem, claims, insecure_server, json, run_registry, ServerOptions, TestServer,
    AUDIENCE,
};
use registry_tests::wait::within;
use reqwest::Method;
use serde_json::{json, Value};

fn subdomains(list: &Value) -> Vec<String> {
    let mut names: Vec<String> = list
        .as_array()
        .expect("a list")
        .iter()
        .map(|s| s["subdomain"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

/// A 401 whose detail names the header that chooses an account.
#[track_caller]
fn assert_must_name_account(response: reqwest::blocking::Response) {
    let problem = assert_problem(response, 401, "unauthorized");
    let detail = problem["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("X-Service-Account"), "{detail}");
}

/// Finding 1, as the review ran it: customer B saves `aud: "*"`, `sub: "repo:acme/*"` for the
/// issuer A trusts. A's pipeline then never acts as B, whatever its token, and A's own calls
/// name A's account.
#[test]
fn another_tenants_rule_never_captures_a_pipeline() {
    let server = insecure_server();
    let issuer = TestIssuer::start();
    let (acme, bravo) = (
        server.customer("acme", "business"),
        server.customer("bravo", "business"),
    );
    let (ours, _) = create_service(&server, &acme, "api");
    let (theirs, _) = create_service(&server, &bravo, "web");
    let acme_ci = account(
        &server,
        &acme,
        &issuer.url(),
        AUDIENCE,
        "repo:acme/infra:ref:refs/heads/main",
    );
    let bravo_ci = account(&server, &bravo, &issuer.url(), "*", "repo:acme/*");
    let bravo_events = || json(server.get("/audit-events", &bravo.token))["events"].clone();
    let events_before = bravo_events();

    let release = issuer.mint(
        "RS256",
        claims(&issuer.url(), "repo:acme/infra:ref:refs/heads/release"),
    );
    let main = issuer.mint(
        "RS256",
        claims(&issuer.url(), "repo:acme/infra:ref:refs/heads/main"),
    );
    for token in [&release, &main] {
        for path in ["/services", "/service-accounts", "/audit-events"] {
            assert_must_name_account(server.get(path, token));
        }
        assert_must_name_account(
            server
                .authed(Method::POST, "/services", token)
                .json(&json!({"title": "captured", "serviceName": "captured"}))
                .send()
                .unwrap(),
        );
        assert_must_name_account(
            server
                .authed(Method::POST, "/service-accounts", token)
                .json(&json!({"name": "minted", "policy": {"kind": "static", "services": ["*"]}}))
                .send()
                .unwrap(),
        );
    }
    // Named, A's account acts for A only; the job its rule does not cover is refused.
    let named = |token: &str, id: &str| {
        server
            .authed(Method::GET, "/services", token)
            .header("x-service-account", id)
            .send()
            .unwrap()
    };
    assert_eq!(subdomains(&json(named(&main, &acme_ci))), [ours.as_str()]);
    assert_problem(named(&release, &acme_ci), 401, "unauthorized");
    // The command line names it too (`--service-account`), and says why when it does not.
    let dir = registry_tests::server::TempDir::new("shared-issuer-cli");
    let file = dir.0.join("token");
    std::fs::write(&file, &main).unwrap();
    let cli = |extra: &[&str]| {
        let mut args = vec![
            "services",
            "list",
            "--format",
            "json",
            "--identity-token-file",
        ];
        args.push(file.to_str().unwrap());
        args.extend_from_slice(extra);
        run_registry(&args, &[("REGISTRY_API_URL", &server.base)])
    };
    let (code, stdout, stderr) = cli(&["--service-account", &acme_ci]);
    assert_eq!(code, Some(0), "{stderr}");
    let listed: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(subdomains(&listed), [ours.as_str()]);
    let (code, _, stderr) = cli(&[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("X-Service-Account"), "{stderr}");

    // B's tenant is as it was: no service, no account, no event of A's repository.
    assert_eq!(
        subdomains(&json(server.get("/services", &bravo.token))),
        [theirs]
    );
    let accounts = json(server.get("/service-accounts", &bravo.token));
    assert_eq!(accounts.as_array().unwrap().len(), 2, "{accounts}");
    assert_eq!(bravo_events(), events_before);
    assert!(!bravo_events().to_string().contains("acme/infra"));

    // A call on A's service considers A's accounts only, and needs no header.
    let direct = server.get(&format!("/services/{ours}"), &main);
    assert_eq!(direct.status(), 200);
    // The release job reaches nothing of A's through B's rule either.
    assert_problem(
        server.get(&format!("/services/{ours}"), &release),
        404,
        "not-found",
    );
    let _ = bravo_ci;
}

/// Finding 2 for an external issuer: a 404 from it is a withdrawal, not an outage. Its cached
/// keys go at that fetch; a 503 keeps them (the grace of docs/api.md,
/// "Authentication").
#[test]
fn an_issuer_that_answers_404_is_no_longer_trusted() {
    let server = registry_tests::server::insecure_binary_server(); // reads its log
    let (down, gone) = (TestIssuer::start(), TestIssuer::start());
    let acme = server.customer("acme", "business");
    let (api, _) = create_service(&server, &acme, "api");
    for issuer in [&down, &gone] {
        account(&server, &acme, &issuer.url(), AUDIENCE, "repo:acme/*");
    }
    let path = format!("/services/{api}");
    let token = |issuer: &TestIssuer, sub: &str| {
        issuer.mint("RS256", claims(&issuer.url(), &format!("repo:acme/{sub}")))
    };
    // An unknown kid makes the registry fetch again (at most once per 30 s per issuer).
    let unknown_kid = |issuer: &TestIssuer| {
        let stranger = SigningKey::generate(KeyKind::Rsa, "rotated-in");
        compact(
            &json!({"alg": "RS256", "typ": "JWT", "kid": stranger.kid()}),
            &claims(&issuer.url(), "repo:acme/new"),
            |m| stranger.sign("RS256", m),
        )
    };
    for issuer in [&down, &gone] {
        assert_eq!(server.get(&path, &token(issuer, "warm")).status(), 200);
    }
    down.set_behaviour(Behaviour::Unavailable);
    gone.set_behaviour(Behaviour::NotFound);
    for issuer in [&down, &gone] {
        assert_problem(server.get(&path, &unknown_kid(issuer)), 401, "unauthorized");
    }
    // A fresh token of a key both issuers published before the refetch.
    assert_eq!(server.get(&path, &token(&down, "outage")).status(), 200);
    assert_problem(
        server.get(&path, &token(&gone, "withdrawn")),
        401,
        "unauthorized",
    );
    let log = server.log_when(|log| log.contains("withdrew its keys"));
    assert!(log.contains("withdrew its keys"), "{log}");
}

/// An issuer that drops a key from its set (a rotation after a compromise): once the registry
/// has fetched the set without it, a token it verified with that key before is refused too,
/// not accepted from memory until its verification is forgotten (the probe of federation).
#[test]
fn a_key_its_issuer_dropped_verifies_no_remembered_token() {
    let server = insecure_server();
    let issuer = TestIssuer::start();
    let acme = server.customer("acme", "business");
    let (api, _) = create_service(&server, &acme, "api");
    account(&server, &acme, &issuer.url(), AUDIENCE, "repo:acme/*");
    let path = format!("/services/{api}");
    let old = issuer.mint("RS256", claims(&issuer.url(), "repo:acme/old"));
    assert_eq!(server.get(&path, &old).status(), 200);
    issuer.rotate_keys();
    // The new key's first token makes the registry fetch the set again.
    let new = issuer.mint("RS256", claims(&issuer.url(), "repo:acme/new"));
    assert_eq!(server.get(&path, &new).status(), 200);
    assert_problem(server.get(&path, &old), 401, "unauthorized");
    assert_eq!(server.get(&path, &new).status(), 200);
}

/// Finding 2 for an issuer hosted by this registry: read from the registry's own data, never
/// over HTTP, so a deletion, a withdrawn configuration or a withdrawn key refuses its tokens
/// at once, on every replica, even a token that verified a moment before.
#[test]
fn a_hosted_issuer_is_read_from_the_registrys_own_data() {
    // No insecure issuers: the hosted issuer is `http://…localhost`, which the HTTP client
    // would refuse. It is never fetched.
    let first = TestServer::start();
    // Replicas of one registry share its issuer template.
    let second = TestServer::start_with(ServerOptions {
        database_url: Some(first.database_url.clone()),
        env: vec![(
            "REGISTRY_ISSUER_URL_TEMPLATE".into(),
            format!("http://{{subdomain}}.localhost:{}", first.port),
        )],
        ..ServerOptions::default()
    });
    let acme = first.customer("acme", "business");
    let (idp, _) = create_service(&first, &acme, "idp");
    let (api, _) = create_service(&first, &acme, "api");
    let hosted = first.issuer(&idp);
    let (old, new) = (
        SigningKey::generate(KeyKind::P256, "cluster-1"),
        SigningKey::generate(KeyKind::Rsa, "cluster-2"),
    );
    let publish = |keys: &[&SigningKey], retain: u32| {
        let keys: Vec<Value> = keys.iter().map(|k| k.public_jwk()).collect();
        let response = first
            .authed(Method::PUT, &format!("/services/{idp}/config"), &acme.token)
            .json(&json!({
                "openidConfiguration": {
                    "issuer": hosted,
                    "jwks_uri": "https://172.18.0.2:6443/openid/v1/jwks",
                    "response_types_supported": ["id_token"],
                    "subject_types_supported": ["public"],
                    "id_token_signing_alg_values_supported": ["ES256", "RS256"]
                },
                "jwks": {"keys": keys},
                "retainRemovedKeysHours": retain
            }))
            .send()
            .unwrap();
        assert_eq!(response.status(), 200, "{}", response.text().unwrap());
    };
    let sign = |key: &SigningKey, alg: &str, sub: &str| {
        compact(
            &json!({"alg": alg, "typ": "JWT", "kid": key.kid()}),
            &claims(&hosted, &format!("system:serviceaccount:ci:{sub}")),
            |m| key.sign(alg, m),
        )
    };
    publish(&[&old, &new], 24);
    account(
        &first,
        &acme,
        &hosted,
        AUDIENCE,
        "system:serviceaccount:ci:*",
    );
    let path = format!("/services/{api}");
    let (by_old, by_new) = (sign(&old, "ES256", "a"), sign(&new, "RS256", "b"));
    // Within the propagation time of docs/api.md, "Public hosting", the account is on the second
    // replica too.
    within(std::time::Duration::from_secs(5), || {
        second.get(&path, &by_old).status() == 200
    });
    for server in [&first, &second] {
        let response = server.get(&path, &by_old);
        let status = response.status();
        assert_eq!(status, 200, "{}", response.text().unwrap_or_default());
        assert_eq!(server.get(&path, &by_new).status(), 200);
    }

    // The old key dropped with no retention: withdrawn at once, verified tokens included.
    publish(&[&new], 0);
    for server in [&first, &second] {
        assert_problem(server.get(&path, &by_old), 401, "unauthorized");
        assert_eq!(server.get(&path, &by_new).status(), 200);
    }

    // A retired key withdrawn by hand.
    publish(&[&old, &new], 24);
    publish(&[&old], 24);
    for server in [&first, &second] {
        assert_eq!(
            server.get(&path, &by_new).status(),
            200,
            "retired, still published"
        );
    }
    let withdrawn = first
        .authed(
            Method::DELETE,
            &format!("/services/{idp}/keys/{}", new.kid()),
            &acme.token,
        )
        .send()
        .unwrap();
    assert_eq!(withdrawn.status(), 204);
    for server in [&first, &second] {
        assert_problem(server.get(&path, &by_new), 401, "unauthorized");
        assert_eq!(server.get(&path, &by_old).status(), 200);
    }

    // The configuration deleted: every token of the issuer.
    let deleted = first
        .authed(
            Method::DELETE,
            &format!("/services/{idp}/config"),
            &acme.token,
        )
        .send()
        .unwrap();
    assert_eq!(deleted.status(), 204);
    for server in [&first, &second] {
        assert_problem(server.get(&path, &by_old), 401, "unauthorized");
    }
    // Published again, it is trusted again; then the issuer's service deleted.
    publish(&[&old], 24);
    for server in [&first, &second] {
        assert_eq!(server.get(&path, &by_old).status(), 200);
    }
    let gone = first
        .authed(Method::DELETE, &format!("/services/{idp}"), &acme.token)
        .send()
        .unwrap();
    assert_eq!(gone.status(), 204);
    for server in [&first, &second] {
        assert_problem(server.get(&path, &by_old), 401, "unauthorized");
        assert_eq!(server.metric("registry_oidc_key_fetches_total"), 0);
    }
}
