use registry_tests::server::{assert_problem, json, pointers, TestServer};
use reqwest::Method;
use serde_json::json;

#[test]
fn create_get_list_patch_delete_a_registered_service() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");

    let created = server
        .authed(Method::POST, "/services", &acme.token)
        .json(&json!({"title": "API", "serviceName": "Api", "description": "prod"}))
        .send()
        .unwrap();
    assert_eq!(created.status(), 201);
    assert_eq!(
        created.headers()["location"],
        format!("{}/services/api-acme", server.base).as_str()
    );
    let body = json(created);
    assert_eq!(body["subdomain"], "api-acme");
    assert_eq!(body["title"], "API");
    assert_eq!(body["description"], "prod");
    assert_eq!(body["issuer"], server.issuer("api-acme"));
    let id = body["id"].as_str().unwrap().to_owned();
    assert!(uuid::Uuid::parse_str(&id).is_ok());
    let created_at = body["createdAt"].as_str().unwrap();
    assert!(
        created_at.ends_with('Z') && created_at.len() == 20,
        "{created_at}"
    );

    let got = json(
        server
            .authed(Method::GET, "/services/api-acme", &acme.token)
            .send()
            .unwrap(),
    );
    assert_eq!(got, body);
    // Legacy UUID ids and any case are accepted in place of the subdomain.
    let by_id = json(
        server
            .authed(Method::GET, &format!("/services/{id}"), &acme.token)
            .send()
            .unwrap(),
    );
    assert_eq!(by_id["subdomain"], "api-acme");
    let upper = server
        .authed(Method::GET, "/services/API-ACME", &acme.token)
        .send()
        .unwrap();
    assert_eq!(upper.status(), 200);

    let list = json(
        server
            .authed(Method::GET, "/services", &acme.token)
            .send()
            .unwrap(),
    );
    assert_eq!(list, json!([body]));

    let patched = server
        .authed(Method::PATCH, "/services/api-acme", &acme.token)
        .json(&json!({"title": "API v2", "description": null}))
        .send()
        .unwrap();
    assert_eq!(patched.status(), 200);
    let patched = json(patched);
    assert_eq!(patched["title"], "API v2");
    assert_eq!(patched["description"], json!(null));

    let deleted = server
        .authed(Method::DELETE, "/services/api-acme", &acme.token)
        .send()
        .unwrap();
    assert_eq!(deleted.status(), 204);
    assert_eq!(deleted.text().unwrap(), "");
    let gone = server
        .authed(Method::GET, "/services/api-acme", &acme.token)
        .send()
        .unwrap();
    assert_problem(gone, 404, "not-found");
    let again = server
        .authed(Method::DELETE, "/services/api-acme", &acme.token)
        .send()
        .unwrap();
    assert_problem(again, 404, "not-found");
}

#[test]
fn naming_rules_follow_the_plan() {
    let server = TestServer::start();
    let free = server.customer("freeco", "free");
    let random = json(
        server
            .authed(Method::POST, "/services", &free.token)
            .json(&json!({"title": "x"}))
            .send()
            .unwrap(),
    );
    let subdomain = random["subdomain"].as_str().unwrap();
    let (name, tenant) = subdomain.split_once('-').unwrap();
    assert_eq!(tenant, "freeco");
    assert_eq!(name.len(), 10);
    assert!(name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()));

    let chosen = server
        .authed(Method::POST, "/services", &free.token)
        .json(&json!({"title": "x", "serviceName": "api"}))
        .send()
        .unwrap();
    assert_problem(chosen, 403, "plan-required");
    // Whatever the name (one it could never have, not a string at all) and whatever else the
    // body gets wrong: refused for the plan first.
    let bodies = [
        json!({"title": "x", "serviceName": "Not_A_Label"}),
        json!({"title": "x", "serviceName": "web-anon"}),
        json!({"title": "x", "serviceName": ""}),
        json!({"title": "x", "serviceName": null}),
        json!({"title": "x", "serviceName": 5}),
        json!({"serviceName": "api"}),
    ];
    for body in bodies {
        let chosen = server
            .authed(Method::POST, "/services", &free.token)
            .json(&body)
            .send()
            .unwrap();
        assert_problem(chosen, 403, "plan-required");
    }

    // After an upgrade the same request works.
    registry_tests::server::run_cli(
        &[
            "customer",
            "set-plan",
            "--tenant",
            "freeco",
            "--plan",
            "enterprise",
        ],
        &server.database_url,
    )
    .unwrap();
    let chosen = server
        .authed(Method::POST, "/services", &free.token)
        .json(&json!({"title": "x", "serviceName": "api"}))
        .send()
        .unwrap();
    assert_eq!(chosen.status(), 201);
    let taken = server
        .authed(Method::POST, "/services", &free.token)
        .json(&json!({"title": "y", "serviceName": "API"}))
        .send()
        .unwrap();
    assert_problem(taken, 409, "conflict");
    // Label rules, the reserved suffix and (with the tenant) the subdomain's length: each a 400
    // that points at the field.
    for bad in ["-api", "a_b", "x-anon", "xn--abc", &"a".repeat(60)] {
        let response = server
            .authed(Method::POST, "/services", &free.token)
            .json(&json!({"title": "y", "serviceName": bad}))
            .send()
            .unwrap();
        assert_eq!(response.status(), 400, "{bad}");
        let body = json(response);
        assert_eq!(
            body["errors"][0]["pointer"], "/serviceName",
            "{bad}: {body}"
        );
    }
}

#[test]
fn create_validates_every_field_at_once() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let response = server
        .authed(Method::POST, "/services", &acme.token)
        .json(&json!({"serviceName": 7, "description": "", "extra": true}))
        .send()
        .unwrap();
    let body = assert_problem(response, 400, "validation-failed");
    assert_eq!(
        pointers(&body),
        ["/extra", "/title", "/serviceName", "/description"]
    );
    // A name that breaks the label rules is one of the problems, not a problem of its own.
    let response = server
        .authed(Method::POST, "/services", &acme.token)
        .json(&json!({"title": "t", "serviceName": "Bad_Name", "description": 4}))
        .send()
        .unwrap();
    let body = assert_problem(response, 400, "validation-failed");
    assert_eq!(pointers(&body), ["/serviceName", "/description"]);
}

#[test]
fn other_customers_get_404_on_every_service_call() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let evil = server.customer("evil", "business");
    let created = json(
        server
            .authed(Method::POST, "/services", &acme.token)
            .json(&json!({"title": "API", "serviceName": "api"}))
            .send()
            .unwrap(),
    );
    let id = created["id"].as_str().unwrap();
    for key in ["api-acme", id] {
        for (method, path) in [
            (Method::GET, format!("/services/{key}")),
            (Method::PATCH, format!("/services/{key}")),
            (Method::DELETE, format!("/services/{key}")),
            (Method::GET, format!("/services/{key}/config")),
            (Method::PUT, format!("/services/{key}/config")),
            (Method::DELETE, format!("/services/{key}/config")),
        ] {
            let response = server
                .authed(method.clone(), &path, &evil.token)
                .json(&super::upload(&["k1"]))
                .send()
                .unwrap();
            assert_problem(response, 404, "not-found");
        }
    }
    let list = json(
        server
            .authed(Method::GET, "/services", &evil.token)
            .send()
            .unwrap(),
    );
    assert_eq!(list, json!([]));
    // Nothing was changed by the attempts.
    let still = json(
        server
            .authed(Method::GET, "/services/api-acme", &acme.token)
            .send()
            .unwrap(),
    );
    assert_eq!(still, created);
}
