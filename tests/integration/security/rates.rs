//! Second security review, findings 4 (quotas), 6, 9 and 10 (docs/api.md, "Errors" and
//! "Authentication"): quotas per customer, write rates per credential, and failed authentications
//! that cannot lock out a working credential nor buy argon2 work.

use super::{create_service, oidc_account, server_with, static_account};
use registry_tests::issuer::TestIssuer;
use registry_tests::server::claims;
use registry_tests::server::{assert_problem, json, ServerOptions};
use reqwest::blocking::Response;
use reqwest::Method;
use serde_json::json;

/// A 429 with a `Retry-After` of whole seconds.
#[track_caller]
fn assert_rate_limited(response: Response) {
    let retry: u64 = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("a Retry-After of whole seconds");
    assert!((1..=60).contains(&retry), "Retry-After: {retry}");
    assert_problem(response, 429, "rate-limited");
}

/// Finding 4: at most REGISTRY_MAX_SERVICES_PER_CUSTOMER services and
/// REGISTRY_MAX_ACCOUNTS_PER_CUSTOMER accounts per customer (the one `customer create` minted
/// counts); past them 403 `quota-exceeded`, and another customer is not affected.
#[test]
fn quotas_bound_what_one_customer_makes() {
    let server = server_with(&[
        ("REGISTRY_MAX_SERVICES_PER_CUSTOMER", "3"),
        ("REGISTRY_MAX_ACCOUNTS_PER_CUSTOMER", "2"),
    ]);
    let (acme, other) = (
        server.customer("acme", "business"),
        server.customer("other", "business"),
    );
    let services: Vec<String> = (0..3)
        .map(|i| create_service(&server, &acme, &format!("svc{i}")).0)
        .collect();
    let refused = server
        .authed(Method::POST, "/services", &acme.token)
        .json(&json!({"title": "one too many", "serviceName": "svc3"}))
        .send()
        .unwrap();
    let problem = assert_problem(refused, 403, "quota-exceeded");
    assert!(
        problem["detail"].as_str().unwrap().contains('3'),
        "{problem}"
    );
    create_service(&server, &other, "svc0");
    let deleted = server
        .authed(
            Method::DELETE,
            &format!("/services/{}", services[0]),
            &acme.token,
        )
        .send()
        .unwrap();
    assert_eq!(deleted.status(), 204);
    create_service(&server, &acme, "svc3");

    // The bootstrap account and one more.
    let (second, _) = static_account(&server, &acme, &["*"]);
    let account = |customer: &registry_tests::server::Customer| {
        server
            .authed(Method::POST, "/service-accounts", &customer.token)
            .json(&json!({"name": "third", "policy": {"kind": "static", "services": ["*"]}}))
            .send()
            .unwrap()
    };
    assert_problem(account(&acme), 403, "quota-exceeded");
    assert_eq!(account(&other).status(), 201);
    let deleted = server
        .authed(
            Method::DELETE,
            &format!("/service-accounts/{second}"),
            &acme.token,
        )
        .send()
        .unwrap();
    assert_eq!(deleted.status(), 204);
    assert_eq!(account(&acme).status(), 201);
    // Anonymous services belong to no customer and keep their own ceiling.
    server.anonymous_service();
}

/// The replicas probe (stop 84): each replica counted the limits alone, so two replicas on one
/// database let a credential make twice its writes. The replicas now share their counts (about
/// once a second): a credential's writes and a customer's explains have one allowance.
#[test]
fn replicas_share_one_allowance_per_credential_and_per_customer() {
    let env = [
        ("REGISTRY_WRITES_PER_MINUTE", "3"),
        ("REGISTRY_EXPLAIN_PER_MINUTE", "3"),
        ("REGISTRY_ANON_CREATE_PER_HOUR", "2"),
    ];
    let server = server_with(&env);
    let replica = registry_tests::server::TestServer::start_with(ServerOptions {
        env: (env.iter())
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        database_url: Some(server.database_url.clone()),
        ..ServerOptions::default()
    });
    let acme = server.customer("acme", "business");
    let (api, _) = create_service(&server, &acme, "api");
    let patch = |on: &registry_tests::server::TestServer, n: usize| {
        on.authed(Method::PATCH, &format!("/services/{api}"), &acme.token)
            .json(&json!({"title": format!("title {n}")}))
            .send()
            .unwrap()
    };
    let explain = |on: &registry_tests::server::TestServer| {
        on.authed(
            Method::POST,
            &format!("/service-accounts/{}/explain", acme.account_id),
            &acme.token,
        )
        .json(&json!({"claims": {"iss": "https://ci.example", "sub": "x", "aud": "y"}}))
        .send()
        .unwrap()
    };
    let create_anonymous = |on: &registry_tests::server::TestServer| {
        on.request(Method::POST, "/anonymous/services")
            .json(&json!({}))
            .send()
            .unwrap()
    };
    // Two of three on the first replica (the service's creation was the first write), one of
    // the address's two anonymous services.
    assert_eq!(patch(&server, 1).status(), 200);
    assert_eq!(create_anonymous(&server).status(), 201);
    for _ in 0..2 {
        assert_eq!(explain(&server).status(), 200);
    }
    // Each replica shares its counts about once a second; one event of three comes back every
    // 20 s, so none does before the end.
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert_eq!(patch(&replica, 2).status(), 200, "the third write");
    assert_rate_limited(patch(&replica, 3));
    assert_eq!(explain(&replica).status(), 200, "the third explain");
    assert_rate_limited(explain(&replica));
    assert_eq!(
        create_anonymous(&replica).status(),
        201,
        "the second creation"
    );
    assert_problem(create_anonymous(&replica), 429, "rate-limited");
    // And the first replica learns of the second's.
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert_rate_limited(patch(&server, 4));
    assert_rate_limited(explain(&server));
    assert_problem(create_anonymous(&server), 429, "rate-limited");
}

/// Finding 6: one anonymous secret made 3,495 PATCHes a second. Now each credential makes at
/// most REGISTRY_WRITES_PER_MINUTE changes a minute; reads, and other credentials, go on.
#[test]
fn writes_are_limited_per_credential() {
    let server = server_with(&[("REGISTRY_WRITES_PER_MINUTE", "5")]);
    let acme = server.customer("acme", "business");
    let (api, _) = create_service(&server, &acme, "api");
    let (anon, secret) = server.anonymous_service();
    let (_, narrow) = static_account(&server, &acme, &[api.as_str()]);
    let patch = |subdomain: &str, token: &str, n: usize| {
        server
            .authed(Method::PATCH, &format!("/services/{subdomain}"), token)
            .json(&json!({"title": format!("title {n}")}))
            .send()
            .unwrap()
    };
    for (subdomain, token) in [(&anon, &secret), (&api, &narrow)] {
        for n in 0..5 {
            assert_eq!(patch(subdomain, token, n).status(), 200, "write {n}");
        }
        assert_rate_limited(patch(subdomain, token, 5));
        let read = server.get(&format!("/services/{subdomain}"), token);
        assert_eq!(read.status(), 200);
        assert_eq!(
            json(read)["title"],
            "title 4",
            "the refused write changed nothing"
        );
    }
    // The customer's other account still writes.
    assert_eq!(patch(&api, &acme.token, 9).status(), 200);
    // Explaining changes nothing: it is not a write.
    for _ in 0..6 {
        let explained = server
            .authed(
                Method::POST,
                &format!("/service-accounts/{}/explain", acme.account_id),
                &acme.token,
            )
            .json(&json!({"claims": {"iss": "https://ci.example", "sub": "x", "aud": "y"}}))
            .send()
            .unwrap();
        assert_eq!(explained.status(), 200);
        // Nor is checking a token by preflight (the explain budget meters it).
        let checked = server
            .authed(Method::POST, &format!("/services/{api}/preflight"), &narrow)
            .json(&json!({"token": "not-a-jwt"}))
            .send()
            .unwrap();
        assert_ne!(checked.status(), 429);
    }
}

/// Finding 9: junk tokens from one address of a /64 made a working token from another address
/// of that /64 get 429. The per-address limit never refuses a credential this replica accepted
/// within the last minute; one it has not is refused as before.
#[test]
fn a_neighbour_cannot_lock_out_a_working_token() {
    let server = server_with(&[
        ("REGISTRY_AUTH_FAILURES_PER_MINUTE", "20"),
        ("REGISTRY_TRUSTED_PROXIES", "127.0.0.1/32"),
    ]);
    let acme = server.customer("acme", "business");
    let (api, _) = create_service(&server, &acme, "api");
    let (_, idle) = static_account(&server, &acme, &["*"]);
    // Past the minute in which the registry minted both tokens.
    server.advance_clock(120);
    let from = |token: &str, address: &str| {
        server
            .authed(Method::GET, &format!("/services/{api}"), token)
            .header("x-forwarded-for", address)
            .send()
            .unwrap()
    };
    assert_eq!(from(&acme.token, "2001:db8:7:7::1").status(), 200);
    let junk = "rgst_0000000000000000_notavalidsecretnotavalidsecretnotavalidsecret";
    // Junk from one address until its /64 is refused (20 a minute: a place back every 3 s).
    let limit = || (0..40).any(|_| from(junk, "2001:db8:7:7::2").status() == 429);
    assert!(limit(), "the junk address was never limited");
    for call in 0..50 {
        assert_eq!(
            from(&acme.token, "2001:db8:7:7::3").status(),
            200,
            "call {call} of the working token"
        );
    }
    // A genuine token this replica has not accepted within the minute: refused like junk (the
    // /64 limited again first: a slow machine's 50 calls may have lasted past a place's return).
    assert!(limit(), "the junk address was never limited again");
    assert_rate_limited(from(&idle, "2001:db8:7:7::3"));
    // Another /64 is not affected.
    assert_eq!(from(&idle, "2001:db8:7:8::1").status(), 200);
}

/// A genuine identity token that no account accepts is no working credential: once it verified,
/// its refusals went past the per-address limit for good (each still a database read and a
/// policy match). Refused like junk once the limit is reached; the same token accepted once is
/// spared.
#[test]
fn a_verified_token_no_account_accepts_is_limited_like_junk() {
    let server = server_with(&[
        ("REGISTRY_AUTH_FAILURES_PER_MINUTE", "3"),
        ("REGISTRY_OIDC_ALLOW_INSECURE_ISSUERS", "true"),
    ]);
    let issuer = TestIssuer::start();
    let acme = server.customer("acme", "business");
    let (api, _) = create_service(&server, &acme, "api");
    oidc_account(&server, &acme, &issuer.url(), "repo:acme/*");
    let path = format!("/services/{api}");
    let refused = issuer.mint("ES256", claims(&issuer.url(), "repo:other/x"));
    let statuses: Vec<u16> = (0..6)
        .map(|_| server.get(&path, &refused).status().as_u16())
        .collect();
    // The owner's first argon2 check counted before it ran, and was given back once it
    // verified.
    assert_eq!(statuses, [401, 401, 401, 429, 429, 429]);
    // A token granted just before is spared, from the same address.
    let other = server_with(&[
        ("REGISTRY_AUTH_FAILURES_PER_MINUTE", "3"),
        ("REGISTRY_OIDC_ALLOW_INSECURE_ISSUERS", "true"),
    ]);
    let acme = other.customer("acme", "business");
    let (api, _) = create_service(&other, &acme, "api");
    oidc_account(&other, &acme, &issuer.url(), "repo:acme/*");
    let path = format!("/services/{api}");
    let working = issuer.mint("ES256", claims(&issuer.url(), "repo:acme/api"));
    assert_eq!(other.get(&path, &working).status(), 200);
    let junk = "rgst_0000000000000000_notavalidsecretnotavalidsecretnotavalidsecret";
    assert!((0..6).any(|_| other.get(&path, junk).status() == 429));
    assert_eq!(other.get(&path, &working).status(), 200);
}

/// A limit of N failed authentications a minute lets N through from an address: the next
/// request is a 429 before its credential is looked at (an unknown lookup id let one more
/// through: refused only at the hit that went over, answered 401 itself).
#[test]
fn the_failed_authentication_limit_lets_exactly_its_number_through() {
    let server = server_with(&[("REGISTRY_AUTH_FAILURES_PER_MINUTE", "3")]);
    let junk = "rgst_0000000000000000_notavalidsecretnotavalidsecretnotavalidsecret";
    let statuses: Vec<u16> = (0..5)
        .map(|_| server.get("/services", junk).status().as_u16())
        .collect();
    assert_eq!(statuses, [401, 401, 401, 429, 429]);
}

/// Working credentials are no failed authentications: each first use of a genuine token (an
/// argon2 check, counted before it runs) is given back once it verifies. Four working tokens
/// from one address under a limit of 3 are all accepted (the fourth was a 429), and junk is
/// still refused after its third failure.
#[test]
fn first_uses_of_working_tokens_are_no_failures() {
    let server = server_with(&[("REGISTRY_AUTH_FAILURES_PER_MINUTE", "3")]);
    let acme = server.customer("acme", "business");
    let tokens: Vec<String> = (0..4)
        .map(|_| static_account(&server, &acme, &["*"]).1)
        .collect();
    // Past the minute in which the registry minted them: each use below is an argon2 check.
    server.advance_clock(120);
    let statuses: Vec<u16> = tokens
        .iter()
        .map(|token| server.get("/services", token).status().as_u16())
        .collect();
    assert_eq!(statuses, [200; 4]);
    let junk = "rgst_0000000000000000_notavalidsecretnotavalidsecretnotavalidsecret";
    let statuses: Vec<u16> = (0..4)
        .map(|_| server.get("/services", junk).status().as_u16())
        .collect();
    assert_eq!(statuses, [401, 401, 401, 429]);
}

/// A new token sent on many connections at once (a CI job's fan-out right after
/// `regenerate-token`): one argon2 check, the others wait for it; none is refused as busy.
#[test]
fn a_new_token_sent_many_times_at_once_is_checked_once_and_refused_nowhere() {
    let minting = server_with(&[]);
    let acme = minting.customer("acme", "business");
    let (_, token) = static_account(&minting, &acme, &["*"]);
    // Another replica: it never saw the token (the one that minted it remembers it).
    let server = registry_tests::server::TestServer::start_with(ServerOptions {
        database_url: Some(minting.database_url.clone()),
        ..ServerOptions::default()
    });
    let before = server.metric("registry_argon2_verifications_total");
    let statuses: Vec<u16> = std::thread::scope(|scope| {
        let sent: Vec<_> = (0..12)
            .map(|_| scope.spawn(|| server.get("/services", &token).status().as_u16()))
            .collect();
        sent.into_iter().map(|s| s.join().unwrap()).collect()
    });
    assert_eq!(statuses, [200; 12]);
    let hashed = server.metric("registry_argon2_verifications_total") - before;
    assert_eq!(hashed, 1, "argon2 verifications of one token");
}

/// Finding 10: wrong secrets for one lookup id, paced under the per-address limit from many
/// addresses, made the registry run argon2 for each. Now at most 10 a minute per lookup id
/// from any address; a secret this replica verified is still accepted.
#[test]
fn wrong_secrets_for_one_lookup_id_cost_little_argon2() {
    let server = server_with(&[("REGISTRY_TRUSTED_PROXIES", "127.0.0.1/32")]);
    let acme = server.customer("acme", "business");
    let (api, _) = create_service(&server, &acme, "api");
    let path = format!("/services/{api}");
    assert_eq!(server.get(&path, &acme.token).status(), 200);
    let lookup_id = acme.token.split('_').nth(1).expect("rgst_<id>_<secret>");
    let before = server.metric("registry_argon2_verifications_total");
    let mut statuses = Vec::new();
    let secret_len = acme.token.rsplit('_').next().unwrap().len();
    for n in 0..24 {
        // Well formed, of the right length, wrong.
        let wrong = format!("rgst_{lookup_id}_{:0>secret_len$}", n);
        let response = server
            .authed(Method::GET, &path, &wrong)
            .header("x-forwarded-for", format!("198.51.100.{}", n + 1))
            .send()
            .unwrap();
        statuses.push(response.status().as_u16());
        if response.status() == 429 {
            assert_rate_limited(response);
        }
    }
    assert_eq!(&statuses[..10], &[401; 10], "{statuses:?}");
    assert!(statuses[10..].iter().all(|s| *s == 429), "{statuses:?}");
    let hashed = server.metric("registry_argon2_verifications_total") - before;
    assert!(
        hashed <= 10,
        "{hashed} argon2 verifications for one lookup id"
    );
    // The owner's token, verified before, is still accepted, from any address.
    let owner = server
        .authed(Method::GET, &path, &acme.token)
        .header("x-forwarded-for", "198.51.100.1")
        .send()
        .unwrap();
    assert_eq!(owner.status(), 200);
}

/// Wrong secrets for one lookup id sent at once, after nine failed: those waiting behind the
/// tenth were hashed too (each had passed the allowance before its turn came).
#[test]
fn wrong_secrets_at_once_cost_no_more_argon2() {
    let server = server_with(&[("REGISTRY_TRUSTED_PROXIES", "127.0.0.1/32")]);
    let acme = server.customer("acme", "business");
    let lookup_id = acme.token.split('_').nth(1).expect("rgst_<id>_<secret>");
    let secret_len = acme.token.rsplit('_').next().unwrap().len();
    let wrong = |n: usize| format!("rgst_{lookup_id}_{:0>secret_len$}", n);
    let send = |n: usize| {
        server
            .authed(Method::GET, "/services", &wrong(n))
            .header("x-forwarded-for", format!("198.51.100.{}", n + 1))
            .send()
            .unwrap()
            .status()
            .as_u16()
    };
    let before = server.metric("registry_argon2_verifications_total");
    for n in 0..9 {
        assert_eq!(send(n), 401);
    }
    let statuses: Vec<u16> = std::thread::scope(|scope| {
        let sent: Vec<_> = (9..15).map(|n| scope.spawn(move || send(n))).collect();
        sent.into_iter().map(|s| s.join().unwrap()).collect()
    });
    assert!(
        statuses.iter().all(|s| [401, 429, 503].contains(s)),
        "{statuses:?}"
    );
    let hashed = server.metric("registry_argon2_verifications_total") - before;
    assert!(
        hashed <= 10,
        "{hashed} argon2 verifications for one lookup id: {statuses:?}"
    );
}

/// Finding 5: explaining cost 18–25 ms a call with large array claims, with no limit, on the
/// HTTP workers. Now at most REGISTRY_EXPLAIN_PER_MINUTE a minute per customer (the work runs
/// on the blocking pool); another customer is not affected, and other calls go on.
#[test]
fn explaining_is_limited_per_customer() {
    let server = server_with(&[("REGISTRY_EXPLAIN_PER_MINUTE", "3")]);
    let (acme, other) = (
        server.customer("acme", "business"),
        server.customer("other", "business"),
    );
    // Large array claims: the case that cost the most.
    let many: Vec<String> = (0..2_000).map(|n| format!("group-{n}")).collect();
    let explain = |customer: &registry_tests::server::Customer| {
        server
            .authed(
                Method::POST,
                &format!("/service-accounts/{}/explain", customer.account_id),
                &customer.token,
            )
            .json(&json!({"claims": {"iss": "https://ci.example", "sub": "x", "aud": many}}))
            .send()
            .unwrap()
    };
    for _ in 0..3 {
        assert_eq!(explain(&acme).status(), 200);
    }
    assert_rate_limited(explain(&acme));
    assert_eq!(explain(&other).status(), 200);
    assert_eq!(server.get("/service-accounts", &acme.token).status(), 200);
}
