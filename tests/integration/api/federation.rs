//! Federated callers (docs/api.md, "Authentication"; spec §4 rules, §5): identity tokens minted by
//! a real issuer on loopback, verified by the real binary.

use super::register_service;
use registry_tests::issuer::{compact, Behaviour, KeyKind, SigningKey, TestIssuer};
use registry_tests::server::{
    assert_problem, claims, insecure_server, json, unix_now, Customer, TestServer, AUDIENCE,
};
use reqwest::Method;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// An oidc account with one rule per `(services, sub pattern)`, all pinning `iss`; its id.
fn oidc_account(
    server: &TestServer,
    customer: &Customer,
    iss: &str,
    rules: &[(&[&str], &str)],
    ip_allowlist: Option<&[&str]>,
) -> String {
    let rules: Vec<Value> = rules
        .iter()
        .map(|(services, sub)| {
            json!({"services": services, "claims": {"iss": iss, "aud": AUDIENCE, "sub": sub}})
        })
        .collect();
    let mut policy = json!({"kind": "oidc", "rules": rules});
    if let Some(list) = ip_allowlist {
        policy["ip_allowlist"] = json!(list);
    }
    let response = server
        .authed(Method::POST, "/service-accounts", &customer.token)
        .json(&json!({"name": "federated", "policy": policy}))
        .send()
        .unwrap();
    assert_eq!(response.status(), 201);
    let body = json(response);
    assert!(
        body.get("token").is_none(),
        "an oidc account has no token: {body}"
    );
    body["id"].as_str().unwrap().to_owned()
}

/// Asserts a 401 indistinguishable from a missing token's.
#[track_caller]
fn assert_refused(server: &TestServer, path: &str, token: &str) {
    let expected = server.anonymous_401_detail(path);
    let body = assert_problem(server.get(path, token), 401, "unauthorized");
    assert_eq!(
        body["detail"],
        expected.as_str(),
        "the 401 reveals more than a missing token's"
    );
}

fn subdomains(list: &Value) -> Vec<&str> {
    let mut names: Vec<&str> = list
        .as_array()
        .expect("a list")
        .iter()
        .map(|s| s["subdomain"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    names
}

/// Neither `tokens` nor their signatures are in the server's whole log (it stops the server:
/// `TestServer::final_log`).
#[track_caller]
fn assert_not_logged(server: TestServer, tokens: &[&str]) {
    let log = server.final_log();
    for token in tokens {
        assert!(!log.contains(token), "a token reached the log");
        // The signature alone is what makes a token usable: not even that.
        let signature = token.rsplit('.').next().unwrap_or_default();
        assert!(
            signature.is_empty() || !log.contains(signature),
            "a token's signature reached the log"
        );
    }
}

#[test]
fn rules_authorize_covered_services_of_their_own_customer_only() {
    let server = registry_tests::server::insecure_binary_server(); // reads its log
    let issuer = TestIssuer::start();
    let iss = issuer.url();
    let acme = server.customer("acme", "business");
    let other = server.customer("other", "business");
    let api = register_service(&server, &acme, "api");
    let web = register_service(&server, &acme, "web");
    let foreign = register_service(&server, &other, "svc");
    let acme_ci = oidc_account(
        &server,
        &acme,
        &iss,
        &[
            (&[api.as_str()], "repo:acme/api:*"),
            (&["*"], "repo:acme/admin"),
        ],
        None,
    );
    // The other customer trusts the same issuer, for its own repositories: collection calls
    // name their account (docs/api.md, "Authentication").
    let listed = |token: &str| {
        server
            .authed(Method::GET, "/services", token)
            .header("x-service-account", &acme_ci)
            .send()
            .unwrap()
    };
    oidc_account(&server, &other, &iss, &[(&["*"], "repo:other/*")], None);

    let deployer = issuer.mint("ES256", claims(&iss, "repo:acme/api:ref:refs/heads/main"));
    let response = server.get(&format!("/services/{api}"), &deployer);
    assert_eq!(response.status(), 200);
    assert_eq!(json(response)["subdomain"], api.as_str());
    let uncovered = assert_problem(
        server.get(&format!("/services/{web}"), &deployer),
        403,
        "forbidden",
    );
    assert!(
        uncovered["detail"].as_str().unwrap().contains(&web),
        "{uncovered}"
    );
    assert_eq!(subdomains(&json(listed(&deployer))), [api.as_str()]);
    let unnamed = assert_problem(server.get("/services", &deployer), 401, "unauthorized");
    assert!(unnamed["detail"]
        .as_str()
        .unwrap()
        .contains("X-Service-Account"));
    // Mutations are covered the same way.
    let patched = server
        .authed(Method::PATCH, &format!("/services/{api}"), &deployer)
        .json(&json!({"title": "API v2"}))
        .send()
        .unwrap();
    assert_eq!(patched.status(), 200);
    let patch_web = server
        .authed(Method::PATCH, &format!("/services/{web}"), &deployer)
        .json(&json!({"title": "nope"}))
        .send()
        .unwrap();
    assert_problem(patch_web, 403, "forbidden");

    // A `*` rule reaches every service of its own customer and none of another's (spec §4
    // rule 2): the foreign service answers exactly like one that does not exist.
    let admin = issuer.mint("RS256", claims(&iss, "repo:acme/admin"));
    assert_eq!(
        server.get(&format!("/services/{web}"), &admin).status(),
        200
    );
    assert_eq!(
        subdomains(&json(listed(&admin))),
        [api.as_str(), web.as_str()]
    );
    assert_problem(
        server.get(&format!("/services/{foreign}"), &admin),
        404,
        "not-found",
    );
    assert_problem(
        server.get("/services/nothing-acme", &admin),
        404,
        "not-found",
    );
    let delete_foreign = server
        .authed(Method::DELETE, &format!("/services/{foreign}"), &admin)
        .send()
        .unwrap();
    assert_problem(delete_foreign, 404, "not-found");
    assert_eq!(
        server
            .get(&format!("/services/{foreign}"), &other.token)
            .status(),
        200,
        "still there"
    );
    // And the other customer's own token does reach it.
    let theirs = issuer.mint("EdDSA", claims(&iss, "repo:other/svc"));
    assert_eq!(
        server
            .get(&format!("/services/{foreign}"), &theirs)
            .status(),
        200
    );
    assert_problem(
        server.get(&format!("/services/{api}"), &theirs),
        404,
        "not-found",
    );

    assert_not_logged(server, &[&deployer, &admin, &theirs]);
}

#[test]
fn refused_tokens_get_the_same_401_as_no_token_and_are_never_logged() {
    let server = registry_tests::server::insecure_binary_server(); // reads its log
    let issuer = TestIssuer::start();
    let iss = issuer.url();
    let acme = server.customer("acme", "business");
    let api = register_service(&server, &acme, "api");
    oidc_account(&server, &acme, &iss, &[(&["*"], "repo:acme/*")], None);
    let path = format!("/services/{api}");
    let good = issuer.mint("ES256", claims(&iss, "repo:acme/api"));
    assert_eq!(server.get(&path, &good).status(), 200);

    let details: Vec<(&str, String)> = [path.as_str(), "/services", "/service-accounts"]
        .into_iter()
        .map(|p| (p, server.anonymous_401_detail(p)))
        .collect();
    let now = unix_now();
    let rsa_kid = issuer.key("RS256").kid().to_owned();
    let mut wrong_audience = claims(&iss, "repo:acme/api");
    wrong_audience["aud"] = json!("someone-else");
    let unknown = TestIssuer::start();
    let refused = [
        ("claims match no rule", issuer.mint("ES256", claims(&iss, "repo:evil/api"))),
        ("audience matches no rule", issuer.mint("ES256", wrong_audience)),
        (
            "expired",
            issuer.mint(
                "ES256",
                json!({"iss": iss, "sub": "repo:acme/api", "aud": AUDIENCE, "iat": now - 7200, "exp": now - 3600}),
            ),
        ),
        (
            "alg none",
            issuer.mint_with_header(json!({"alg": "none", "typ": "JWT"}), claims(&iss, "repo:acme/api")),
        ),
        (
            "HS256 keyed with the RSA public key",
            issuer.mint_with_header(
                json!({"alg": "HS256", "typ": "JWT", "kid": rsa_kid}),
                claims(&iss, "repo:acme/api"),
            ),
        ),
        (
            "signed by another key than the issuer's",
            compact(
                &json!({"alg": "ES256", "typ": "JWT", "kid": issuer.key("ES256").kid()}),
                &claims(&iss, "repo:acme/api"),
                |m| SigningKey::generate(KeyKind::P256, "stranger").sign("ES256", m),
            ),
        ),
        ("unknown issuer", unknown.mint("ES256", claims(&unknown.url(), "repo:acme/api"))),
    ];
    for (case, token) in &refused {
        for (path, expected) in &details {
            let body = assert_problem(server.get(path, token), 401, "unauthorized");
            assert_eq!(
                body["detail"],
                expected.as_str(),
                "{case} on {path}: the 401 says more than a missing token's"
            );
        }
    }
    assert_eq!(
        unknown.discovery_fetches() + unknown.jwks_fetches(),
        0,
        "a stranger's issuer was fetched"
    );
    // Only the trusted issuer was fetched, once: refused tokens cost no refetch.
    assert_eq!((issuer.discovery_fetches(), issuer.jwks_fetches()), (1, 1));
    let all: Vec<&str> = std::iter::once(good.as_str())
        .chain(refused.iter().map(|(_, t)| t.as_str()))
        .collect();
    assert_not_logged(server, &all);
}

#[test]
fn several_accepting_accounts_need_x_service_account_on_collection_calls() {
    let server = registry_tests::server::insecure_binary_server(); // reads its log
    let issuer = TestIssuer::start();
    let iss = issuer.url();
    let acme = server.customer("acme", "business");
    let other = server.customer("other", "business");
    let api = register_service(&server, &acme, "api");
    let web = register_service(&server, &acme, "web");
    let foreign = register_service(&server, &other, "svc");
    let narrow = oidc_account(
        &server,
        &acme,
        &iss,
        &[(&[api.as_str()], "repo:shared/*")],
        None,
    );
    let broad = oidc_account(&server, &acme, &iss, &[(&["*"], "repo:shared/*")], None);
    let theirs = oidc_account(&server, &other, &iss, &[(&["*"], "repo:shared/*")], None);
    let token = issuer.mint("ES256", claims(&iss, "repo:shared/tool"));

    let ambiguous = assert_problem(server.get("/services", &token), 401, "unauthorized");
    let detail = ambiguous["detail"].as_str().unwrap();
    assert!(detail.contains("X-Service-Account"), "{detail}");
    assert_ne!(detail, server.anonymous_401_detail("/services"));

    let list_as = |id: &str| {
        server
            .authed(Method::GET, "/services", &token)
            .header("X-Service-Account", id)
            .send()
            .unwrap()
    };
    assert_eq!(subdomains(&json(list_as(&narrow))), [api.as_str()]);
    assert_eq!(
        subdomains(&json(list_as(&broad))),
        [api.as_str(), web.as_str()]
    );
    assert_eq!(subdomains(&json(list_as(&theirs))), [foreign.as_str()]);
    // An account that does not accept the token cannot be picked.
    let bystander = oidc_account(&server, &acme, &iss, &[(&["*"], "repo:bystander/*")], None);
    assert_problem(list_as(&bystander), 401, "unauthorized");
    assert_problem(list_as("not-an-id"), 401, "unauthorized");

    // A call on one service needs no choice: only its owner's accounts count, and one covers it.
    assert_eq!(
        server.get(&format!("/services/{web}"), &token).status(),
        200
    );
    assert_eq!(
        server.get(&format!("/services/{foreign}"), &token).status(),
        200
    );
    assert_not_logged(server, &[&token]);
}

#[test]
fn ip_allowlist_applies_to_federated_callers() {
    let server = insecure_server();
    let issuer = TestIssuer::start();
    let iss = issuer.url();
    let acme = server.customer("acme", "business");
    let api = register_service(&server, &acme, "api");
    oidc_account(
        &server,
        &acme,
        &iss,
        &[(&["*"], "repo:acme/far")],
        Some(&["10.0.0.0/8", "2001:db8::/32"]),
    );
    oidc_account(
        &server,
        &acme,
        &iss,
        &[(&["*"], "repo:acme/near")],
        Some(&["127.0.0.1"]),
    );

    let far = issuer.mint("ES256", claims(&iss, "repo:acme/far"));
    let problem = assert_problem(
        server.get(&format!("/services/{api}"), &far),
        403,
        "forbidden",
    );
    assert!(
        problem["detail"].as_str().unwrap().contains("ip_allowlist"),
        "{problem}"
    );
    assert_problem(server.get("/services", &far), 403, "forbidden");

    let near = issuer.mint("ES256", claims(&iss, "repo:acme/near"));
    assert_eq!(server.get(&format!("/services/{api}"), &near).status(), 200);
    assert_eq!(server.get("/services", &near).status(), 200);
}

#[test]
fn a_warm_key_cache_costs_no_fetch_and_outlives_the_issuer() {
    let server = insecure_server();
    let issuer = TestIssuer::start();
    let iss = issuer.url();
    let acme = server.customer("acme", "business");
    let api = register_service(&server, &acme, "api");
    oidc_account(&server, &acme, &iss, &[(&["*"], "repo:acme/*")], None);
    assert_eq!(server.metric("registry_oidc_key_fetches_total"), 0);

    let path = format!("/services/{api}");
    for (i, alg) in ["ES256", "RS256", "ES384", "EdDSA", "PS256", "ES256"]
        .iter()
        .enumerate()
    {
        let token = issuer.mint(alg, claims(&iss, &format!("repo:acme/job-{i}")));
        assert_eq!(server.get(&path, &token).status(), 200, "{alg}");
        assert_eq!(server.get("/services", &token).status(), 200, "{alg}");
    }
    assert_eq!(
        issuer.discovery_fetches(),
        1,
        "one discovery fetch for twelve requests"
    );
    assert_eq!(
        issuer.jwks_fetches(),
        1,
        "one key set fetch for twelve requests"
    );
    assert_eq!(server.metric("registry_oidc_key_fetches_total"), 1);
    assert_eq!(server.metric("registry_oidc_key_cache_hits_total"), 11);

    // The issuer fails, then disappears: tokens it signed keep working from the cache.
    let warm = issuer.mint("ES256", claims(&iss, "repo:acme/warm"));
    let key = issuer.key("ES256");
    issuer.set_behaviour(Behaviour::Unavailable);
    assert_eq!(server.get(&path, &warm).status(), 200);
    drop(issuer);
    assert_eq!(server.get(&path, &warm).status(), 200);
    let late = compact(
        &json!({"alg": "ES256", "typ": "JWT", "kid": key.kid()}),
        &claims(&iss, "repo:acme/late"),
        |m| key.sign("ES256", m),
    );
    assert_eq!(
        server.get(&path, &late).status(),
        200,
        "a token minted after the issuer went away"
    );
    assert_eq!(server.metric("registry_oidc_key_fetches_total"), 1);
    assert_eq!(server.metric("registry_oidc_key_fetch_failures_total"), 0);
}

#[test]
fn loopback_issuers_are_refused_quickly_unless_insecure_issuers_are_allowed() {
    let server = TestServer::start_binary(); // reads its log
    let issuer = TestIssuer::start();
    let acme = server.customer("acme", "business");
    let api = register_service(&server, &acme, "api");
    let port = issuer.port();
    // `http` is refused before any look-up; the `https` names reach the guarded resolver, which
    // answers loopback for them and refuses to connect.
    let issuers = [
        issuer.url(),
        format!("https://127.0.0.1:{port}"),
        format!("https://localhost:{port}"),
        format!("https://issuer.localhost:{port}"),
    ];
    for iss in &issuers {
        // Saving the policy succeeds: what an issuer resolves to is only known when it is fetched.
        oidc_account(&server, &acme, iss, &[(&["*"], "repo:acme/*")], None);
    }
    let mut refused = Vec::new();
    for iss in &issuers {
        let token = issuer.mint("ES256", claims(iss, "repo:acme/api"));
        let started = Instant::now();
        assert_refused(&server, &format!("/services/{api}"), &token);
        assert_refused(&server, "/services", &token);
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{iss} took {:?}",
            started.elapsed()
        );
        refused.push(token);
    }
    assert_eq!(
        issuer.discovery_fetches() + issuer.jwks_fetches(),
        0,
        "the loopback issuer was fetched"
    );
    assert_not_logged(
        server,
        &refused.iter().map(String::as_str).collect::<Vec<_>>(),
    );
}

/// The issue "the issuer is itself a service hosted by the registry": a customer publishes its
/// own issuer's documents on the registry and federates with it. The verifier reads them from
/// the registry's own data, never over HTTP (docs/api.md, "Authentication").
#[test]
fn an_issuer_hosted_by_the_registry_federates_with_it() {
    let server = registry_tests::server::insecure_binary_server(); // reads its log
    let acme = server.customer("acme", "business");
    let idp = register_service(&server, &acme, "idp");
    let api = register_service(&server, &acme, "api");
    let web = register_service(&server, &acme, "web");
    let hosted = server.issuer(&idp);
    let key = SigningKey::generate(KeyKind::P256, "cluster-key-1");
    let published = server
        .authed(Method::PUT, &format!("/services/{idp}/config"), &acme.token)
        .json(&json!({
            "openidConfiguration": {
                "issuer": hosted,
                "jwks_uri": "https://172.18.0.2:6443/openid/v1/jwks",
                "response_types_supported": ["id_token"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["ES256"]
            },
            "jwks": {"keys": [key.public_jwk()]}
        }))
        .send()
        .unwrap();
    assert_eq!(
        published.status(),
        200,
        "{}",
        published.text().unwrap_or_default()
    );
    oidc_account(
        &server,
        &acme,
        &hosted,
        &[(&[api.as_str()], "system:serviceaccount:ci:*")],
        None,
    );

    let token = compact(
        &json!({"alg": "ES256", "typ": "JWT", "kid": key.kid()}),
        &claims(&hosted, "system:serviceaccount:ci:deployer"),
        |m| key.sign("ES256", m),
    );
    let response = server.get(&format!("/services/{api}"), &token);
    assert_eq!(
        response.status(),
        200,
        "{}",
        response.text().unwrap_or_default()
    );
    assert_problem(
        server.get(&format!("/services/{web}"), &token),
        403,
        "forbidden",
    );
    assert_eq!(
        subdomains(&json(server.get("/services", &token))),
        [api.as_str()]
    );
    assert_eq!(server.metric("registry_oidc_key_fetches_total"), 0);
    assert_eq!(server.metric("registry_oidc_key_fetch_failures_total"), 0);

    // A key the hosted issuer does not publish is refused.
    let forged = compact(
        &json!({"alg": "ES256", "typ": "JWT", "kid": key.kid()}),
        &claims(&hosted, "system:serviceaccount:ci:deployer"),
        |m| SigningKey::generate(KeyKind::P256, "forger").sign("ES256", m),
    );
    assert_refused(&server, &format!("/services/{api}"), &forged);
    assert_not_logged(server, &[&token, &forged]);
}

#[test]
fn a_hanging_issuer_holds_up_only_its_own_cold_tokens() {
    let server = insecure_server();
    let (hanging, healthy) = (TestIssuer::start(), TestIssuer::start());
    let acme = server.customer("acme", "business");
    let api = register_service(&server, &acme, "api");
    let published = server
        .authed(Method::PUT, &format!("/services/{api}/config"), &acme.token)
        .json(&super::upload(&["k1"]))
        .send()
        .unwrap();
    assert_eq!(published.status(), 200);
    oidc_account(
        &server,
        &acme,
        &hanging.url(),
        &[(&["*"], "repo:acme/*")],
        None,
    );
    oidc_account(
        &server,
        &acme,
        &healthy.url(),
        &[(&["*"], "repo:acme/*")],
        None,
    );
    let path = format!("/services/{api}");
    let warm = healthy.mint("ES256", claims(&healthy.url(), "repo:acme/warm"));
    assert_eq!(server.get(&path, &warm).status(), 200);
    hanging.set_behaviour(Behaviour::Slow(Duration::from_secs(30)));

    std::thread::scope(|scope| {
        let started = Instant::now();
        let cold: Vec<_> = (0..8)
            .map(|i| {
                let token =
                    hanging.mint("ES256", claims(&hanging.url(), &format!("repo:acme/{i}")));
                let (server, path) = (&server, &path);
                scope.spawn(move || {
                    let response = server.get(path, &token);
                    (response.status().as_u16(), started.elapsed())
                })
            })
            .collect();
        // While those wait on the issuer, everything else answers at once: a call that waited
        // for the hanging issuer would take most of its 5 s timeout, one on a loaded machine
        // far less.
        std::thread::sleep(Duration::from_millis(300));
        let mut slowest = Duration::ZERO;
        for _ in 0..20 {
            let timed = |call: &dyn Fn() -> reqwest::blocking::Response| {
                let sent = Instant::now();
                let response = call();
                (response, sent.elapsed())
            };
            let calls = [
                timed(&|| server.get(&path, &warm)),
                timed(&|| server.get(&path, &acme.token)),
                timed(&|| {
                    server
                        .hosted(Method::GET, &api, "/openid/v1/jwks")
                        .send()
                        .unwrap()
                }),
                timed(&|| server.request(Method::GET, "/healthz").send().unwrap()),
            ];
            for (response, took) in calls {
                assert_eq!(response.status(), 200);
                slowest = slowest.max(took);
            }
        }
        assert!(
            slowest < Duration::from_secs(3),
            "one of 80 other requests took {slowest:?}: it waited for the hanging issuer"
        );
        // Only meaningful before the issuer's timeout.
        if started.elapsed() < Duration::from_millis(4500) {
            assert!(
                cold.iter().all(|c| !c.is_finished()),
                "the cold tokens were answered before the issuer's timeout"
            );
        }
        for request in cold {
            let (status, took) = request.join().unwrap();
            assert_eq!(status, 401, "a token whose keys cannot be fetched");
            assert!(
                took >= Duration::from_secs(4) && took < Duration::from_secs(9),
                "a cold token waited {took:?} (the fetch times out after 5 s)"
            );
        }
    });
    // Single flight: eight cold tokens, one discovery request to the hanging issuer.
    assert_eq!(hanging.discovery_fetches(), 1);
    assert_eq!(server.get(&path, &warm).status(), 200);
}

/// A verifier port of the test's own: it knows one token, of an issuer a policy trusts, and
/// one of an issuer none does; it counts the verifications asked of it.
#[derive(Debug, Default)]
struct CountingVerifier {
    verifications: std::sync::atomic::AtomicUsize,
}

const INJECTED_ISSUER: &str = "https://ci.injected.example";
const TRUSTED_TOKEN: &str = "eyJhbGciOiJSUzI1NiJ9.eyJ0cnVzdGVkIjp0cnVlfQ.c2ln";
const MADE_UP_TOKEN: &str = "eyJhbGciOiJSUzI1NiJ9.eyJ0cnVzdGVkIjpmYWxzZX0.c2ln";

impl registry_domain::ports::IdentityTokenVerifier for CountingVerifier {
    fn unverified_issuer(&self, token: &str) -> Option<String> {
        match token {
            TRUSTED_TOKEN => Some(INJECTED_ISSUER.into()),
            MADE_UP_TOKEN => Some("https://nobody.injected.example".into()),
            _ => None,
        }
    }

    fn verify<'a>(
        &'a self,
        token: &'a str,
        _keys: registry_domain::ports::IssuerKeys<'a>,
        now: time::OffsetDateTime,
    ) -> registry_domain::ports::Verification<'a> {
        self.verifications
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let claims = json!({
            "iss": self.unverified_issuer(token),
            "aud": AUDIENCE,
            "sub": "repo:acme/app:ref:refs/heads/main",
            "exp": now.unix_timestamp() + 300,
        });
        let verified = registry_domain::ports::VerifiedToken {
            issuer: INJECTED_ISSUER.into(),
            claims: claims.as_object().cloned().unwrap_or_default(),
        };
        Box::pin(async move { Ok(verified) })
    }
}

#[test]
fn identity_tokens_are_checked_by_the_verifier_port_the_server_is_given() {
    let verifier = std::sync::Arc::new(CountingVerifier::default());
    let server = TestServer::start_with(registry_tests::server::ServerOptions {
        verifier: Some(verifier.clone()),
        ..Default::default()
    });
    let customer = server.customer("acme", "business");
    oidc_account(
        &server,
        &customer,
        INJECTED_ISSUER,
        &[(&["*"], "repo:acme/app:*")],
        None,
    );
    let verifications = || {
        verifier
            .verifications
            .load(std::sync::atomic::Ordering::SeqCst)
    };

    assert_eq!(server.get("/services", TRUSTED_TOKEN).status(), 200);
    assert_eq!(verifications(), 1);
    // Remembered: the port is not asked again for the same token.
    assert_eq!(server.get("/services", TRUSTED_TOKEN).status(), 200);
    assert_eq!(verifications(), 1);
    // An issuer no policy names never reaches the verifier.
    assert_eq!(server.get("/services", MADE_UP_TOKEN).status(), 401);
    assert_eq!(verifications(), 1);
}

/// A federated call on no one service acts by the rules that match the token and allow its
/// action: one rule's `"*"` lends nothing to another rule's actions (a review's capture: with
/// `"*"` from a read-only rule and `accounts:write` from a `sandbox-*` rule, a token minted a
/// static account over every service).
#[test]
fn no_rule_lends_its_services_to_another_rules_actions() {
    const V2: &str = "http://localhost:8080/schemas/service-account-policy/v2.json";
    let server = insecure_server();
    let issuer = TestIssuer::start();
    let iss = issuer.url();
    let acme = server.customer("acme", "business");
    let api = register_service(&server, &acme, "api");
    let web = register_service(&server, &acme, "web");
    let sub = "repo:acme/infra:ref:refs/heads/main";
    let rule = |services: &[&str], actions: &[&str]| {
        json!({"services": services, "actions": actions,
            "claims": {"iss": &iss, "aud": AUDIENCE, "sub": sub}})
    };
    let policy = json!({"$schema": V2, "kind": "oidc", "rules": [
        rule(&["*"], &["services:read", "config:read"]),
        rule(&["sandbox-*"], &["accounts:read", "accounts:write", "audit:read"]),
        rule(&[&api], &["services:write"]),
    ]});
    let created = server
        .authed(Method::POST, "/service-accounts", &acme.token)
        .json(&json!({"name": "mixed", "policy": policy}))
        .send()
        .unwrap();
    assert_eq!(created.status(), 201);
    let id = json(created)["id"].as_str().unwrap().to_owned();
    let token = issuer.mint("ES256", claims(&iss, sub));

    let minted = server
        .authed(Method::POST, "/service-accounts", &token)
        .json(
            &json!({"name": "takeover", "policy": {"$schema": V2, "kind": "static",
            "services": ["*"], "actions": ["accounts:write"]}}),
        )
        .send()
        .unwrap();
    let problem = assert_problem(minted, 403, "forbidden");
    assert!(
        problem["detail"].as_str().unwrap().contains("\"*\""),
        "{problem}"
    );
    assert_problem(server.get("/audit-events", &token), 403, "forbidden");
    // The owner learns why, as the call was judged (on every service); the record names no
    // service, as the call's path named none.
    let explained = json(
        server
            .authed(
                Method::POST,
                &format!("/service-accounts/{id}/explain"),
                &acme.token,
            )
            .json(&json!({"claims": claims(&iss, sub), "action": "accounts:write"}))
            .send()
            .unwrap(),
    );
    assert_eq!(explained["decision"], "deny", "{explained}");
    // Recorded beside the answer, not before it.
    let mut refusals = Value::Null;
    let recorded = registry_tests::wait::within(Duration::from_secs(5), || {
        refusals = json(server.get(&format!("/service-accounts/{id}/refusals"), &acme.token));
        let actions: Vec<&str> = (refusals.as_array().unwrap().iter())
            .filter(|r| r.get("service").is_none())
            .map(|r| r["action"].as_str().unwrap())
            .collect();
        actions == ["audit:read", "accounts:write"]
    });
    assert!(recorded, "{refusals}");
    // Listing is services:read, which the "*" rule allows: every service.
    let listed = json(server.get("/services", &token));
    assert_eq!(subdomains(&listed), [api.as_str(), web.as_str()]);
    // Creating is services:write, on api-* only: another name is refused.
    let other = server
        .authed(Method::POST, "/services", &token)
        .json(&json!({"title": "prod", "serviceName": "prod"}))
        .send()
        .unwrap();
    assert_eq!(other.status(), 403, "{}", other.text().unwrap());
}

/// An issuer that withdraws its keys (its key set answers 404) stops its tokens at once, those
/// this replica remembers as verified too: the fetch that finds the keys gone ends the memory
/// of every verification made with fetched keys before it.
#[test]
fn a_withdrawal_ends_the_remembered_verifications_at_once() {
    use registry_tests::issuer::Behaviour;
    let server = insecure_server();
    let issuer = TestIssuer::start();
    let iss = issuer.url();
    let acme = server.customer("acme", "business");
    let api = register_service(&server, &acme, "api");
    oidc_account(
        &server,
        &acme,
        &iss,
        &[(&[api.as_str()], "repo:acme/*")],
        None,
    );
    let token = issuer.mint("ES256", claims(&iss, "repo:acme/api"));
    let path = format!("/services/{api}");
    assert_eq!(server.get(&path, &token).status(), 200);
    assert_eq!(server.get(&path, &token).status(), 200, "remembered");
    issuer.set_behaviour(Behaviour::NotFound);
    // A token naming a key the registry does not hold makes it fetch: the keys are gone.
    let unknown_kid = issuer.mint_with_header(
        json!({"alg": "ES256", "kid": "not-published", "typ": "JWT"}),
        claims(&iss, "repo:acme/api"),
    );
    assert_refused(&server, &path, &unknown_kid);
    assert_refused(&server, &path, &token);
}
