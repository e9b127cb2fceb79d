//! Cross-customer access on every endpoint (docs/api.md, "Authentication"): another customer's
//! static token, its federated token and an anonymous secret each try every call on one customer's
//! services and service accounts. Foreign resources answer exactly like missing ones, and nothing
//! changes.

use super::{claims, create_service, insecure_server, oidc_account, static_account};
use crate::api::upload;
use registry_tests::issuer::TestIssuer;
use registry_tests::server::{assert_problem, json, TestServer};
use reqwest::blocking::Response;
use reqwest::Method;
use serde_json::{json, Value};

/// Every call that names a resource, with a body for those that take one.
fn calls_on_service(key: &str) -> Vec<(Method, String, Option<Value>)> {
    vec![
        (Method::GET, format!("/services/{key}"), None),
        (
            Method::PATCH,
            format!("/services/{key}"),
            Some(json!({"title": "owned"})),
        ),
        (Method::DELETE, format!("/services/{key}"), None),
        (Method::GET, format!("/services/{key}/config"), None),
        (
            Method::PUT,
            format!("/services/{key}/config"),
            Some(upload(&["evil"])),
        ),
        (Method::DELETE, format!("/services/{key}/config"), None),
    ]
}

fn calls_on_account(id: &str) -> Vec<(Method, String, Option<Value>)> {
    vec![
        (Method::GET, format!("/service-accounts/{id}"), None),
        (
            Method::PATCH,
            format!("/service-accounts/{id}"),
            Some(json!({"name": "owned", "policy": {"kind": "static", "services": ["*"]}})),
        ),
        (Method::DELETE, format!("/service-accounts/{id}"), None),
        (
            Method::POST,
            format!("/service-accounts/{id}/regenerate-token"),
            None,
        ),
    ]
}

fn send(
    server: &TestServer,
    token: &str,
    method: &Method,
    path: &str,
    body: Option<&Value>,
) -> Response {
    send_as(server, token, None, method, path, body)
}

/// [`send`], naming the caller's account with `X-Service-Account` when given.
fn send_as(
    server: &TestServer,
    token: &str,
    account: Option<&str>,
    method: &Method,
    path: &str,
    body: Option<&Value>,
) -> Response {
    let mut request = server.authed(method.clone(), path, token);
    if let Some(account) = account {
        request = request.header("x-service-account", account);
    }
    if let Some(body) = body {
        request = request.json(body);
    }
    request.send().unwrap()
}

/// The problem a call gets, with the resource key replaced so that a foreign resource's answer
/// can be compared with a missing one's.
fn problem(response: Response, status: u16, slug: &str, key: &str) -> Value {
    let body = assert_problem(response, status, slug);
    let text = body.to_string().replace(key, "KEY");
    serde_json::from_str(&text).unwrap()
}

#[test]
fn no_customer_reaches_another_customers_services_or_accounts() {
    let server = insecure_server();
    let issuer = TestIssuer::start();
    let iss = issuer.url();
    let acme = server.customer("acme", "business");
    let evil = server.customer("evil", "business");
    let (api, api_id) = create_service(&server, &acme, "api");
    let published = send(
        &server,
        &acme.token,
        &Method::PUT,
        &format!("/services/{api}/config"),
        Some(&upload(&["k1"])),
    );
    assert_eq!(published.status(), 200);
    let (victim_id, victim_token) = static_account(&server, &acme, &["*"]);
    let victim_oidc = oidc_account(&server, &acme, &iss, "repo:acme/*");
    // The attacker trusts the same issuer for its own repositories, with a `*` scope.
    let evil_oidc = oidc_account(&server, &evil, &iss, "repo:evil/*");
    let federated = issuer.mint("ES256", claims(&iss, "repo:evil/tool"));
    let (_, anonymous_secret) = server.anonymous_service();
    let before_services = json(send(&server, &acme.token, &Method::GET, "/services", None));
    // The reads are uses of the victim's own bootstrap token: its `lastUsedAt` moves when a
    // minute ends between them, whatever the attackers do.
    let accounts = || {
        let mut list = json(send(
            &server,
            &acme.token,
            &Method::GET,
            "/service-accounts",
            None,
        ));
        for account in list.as_array_mut().into_iter().flatten() {
            if account["id"] == acme.account_id.as_str() {
                account["lastUsedAt"] = Value::Null;
            }
        }
        list
    };
    let before_accounts = accounts();

    let missing_service = "missing-acme".to_owned();
    let missing_account = uuid::Uuid::new_v4().to_string();
    let attackers = [
        ("static token", evil.token.as_str()),
        ("federated token", federated.as_str()),
        ("anonymous secret", anonymous_secret.as_str()),
    ];
    let mut tried = 0;
    for (who, token) in attackers {
        for key in [api.as_str(), api_id.as_str()] {
            for ((method, path, body), (_, missing_path, _)) in calls_on_service(key)
                .into_iter()
                .zip(calls_on_service(&missing_service))
            {
                let foreign = problem(
                    send(&server, token, &method, &path, body.as_ref()),
                    404,
                    "not-found",
                    key,
                );
                let missing = problem(
                    send(&server, token, &method, &missing_path, body.as_ref()),
                    404,
                    "not-found",
                    &missing_service,
                );
                assert_eq!(
                    foreign, missing,
                    "{who}: {method} {path} differs from a missing service's"
                );
                tried += 1;
            }
        }
        for id in [
            victim_id.as_str(),
            victim_oidc.as_str(),
            acme.account_id.as_str(),
        ] {
            for ((method, path, body), (_, missing_path, _)) in calls_on_account(id)
                .into_iter()
                .zip(calls_on_account(&missing_account))
            {
                // An anonymous secret manages no account at all: 403, whoever owns it.
                let (status, slug) = if who == "anonymous secret" {
                    (403, "forbidden")
                } else {
                    (404, "not-found")
                };
                // Both customers trust the issuer: a federated caller names its account on
                // calls that are not about one service (docs/api.md, "Authentication").
                let account = (who == "federated token").then_some(evil_oidc.as_str());
                let foreign = problem(
                    send_as(&server, token, account, &method, &path, body.as_ref()),
                    status,
                    slug,
                    id,
                );
                let missing = problem(
                    send_as(
                        &server,
                        token,
                        account,
                        &method,
                        &missing_path,
                        body.as_ref(),
                    ),
                    status,
                    slug,
                    &missing_account,
                );
                assert_eq!(
                    foreign, missing,
                    "{who}: {method} {path} differs from a missing account's"
                );
                tried += 1;
            }
        }
    }
    assert_eq!(tried, 3 * (2 * 6 + 3 * 4));

    // Collections show only the caller's own resources.
    assert_eq!(
        json(send(&server, &evil.token, &Method::GET, "/services", None)),
        json!([])
    );
    let evil_accounts = json(send(
        &server,
        &evil.token,
        &Method::GET,
        "/service-accounts",
        None,
    ));
    let mut ids: Vec<&str> = evil_accounts
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    let mut expected = vec![evil.account_id.as_str(), evil_oidc.as_str()];
    expected.sort_unstable();
    assert_eq!(ids, expected);
    // A policy naming the foreign service is refused exactly like one naming no service.
    let naming = |name: &str| {
        send(
            &server,
            &evil.token,
            &Method::POST,
            "/service-accounts",
            Some(&json!({"name": "x", "policy": {"kind": "static", "services": [name]}})),
        )
    };
    let foreign = problem(naming(&api), 400, "unknown-services", &api);
    let missing = problem(
        naming(&missing_service),
        400,
        "unknown-services",
        &missing_service,
    );
    assert_eq!(foreign, missing);
    // The federated attacker cannot pick the victim's account.
    let picked = server
        .authed(Method::GET, "/services", &federated)
        .header("X-Service-Account", &victim_oidc)
        .send()
        .unwrap();
    assert_problem(picked, 401, "unauthorized");

    // Nothing changed: services, configuration, accounts, and the victim's token still works.
    assert_eq!(
        json(send(&server, &acme.token, &Method::GET, "/services", None)),
        before_services
    );
    assert_eq!(accounts(), before_accounts);
    let config = json(send(
        &server,
        &acme.token,
        &Method::GET,
        &format!("/services/{api}/config"),
        None,
    ));
    assert_eq!(config["jwks"]["keys"][0]["kid"], "k1");
    assert_eq!(
        server
            .hosted(Method::GET, &api, "/openid/v1/jwks")
            .send()
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        send(&server, &victim_token, &Method::GET, "/services", None).status(),
        200
    );
}
