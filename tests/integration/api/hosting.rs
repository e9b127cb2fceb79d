use super::{publish_api, upload};
use registry_tests::server::{json, TestServer};
use reqwest::Method;

fn published(server: &TestServer) -> String {
    publish_api(server, &server.customer("acme", "business"))
}

#[test]
fn documents_are_public_by_host_with_caching_headers() {
    let server = TestServer::start();
    let customer = server.customer("acme", "business");
    let sub = publish_api(&server, &customer);
    let issuer = server.issuer(&sub);

    let discovery = server
        .hosted(Method::GET, &sub, "/.well-known/openid-configuration")
        .send()
        .unwrap();
    assert_eq!(discovery.status(), 200);
    let headers = discovery.headers().clone();
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(
        headers["cache-control"],
        "public, max-age=30, stale-while-revalidate=30, stale-if-error=86400"
    );
    let service = json(server.get(&format!("/services/{sub}"), &customer.token));
    assert_eq!(headers["surrogate-key"], service["id"].as_str().unwrap());
    assert_eq!(headers["access-control-allow-origin"], "*");
    assert!(headers.get("access-control-allow-credentials").is_none());
    let etag = headers["etag"].to_str().unwrap().to_owned();
    assert!(
        etag.starts_with('"') && etag.ends_with('"'),
        "strong etag {etag}"
    );
    let last_modified = headers["last-modified"].to_str().unwrap().to_owned();
    assert!(last_modified.ends_with(" GMT"));
    let doc = json(discovery);
    assert_eq!(doc["issuer"], issuer.as_str());
    assert_eq!(doc["jwks_uri"], format!("{issuer}/openid/v1/jwks"));

    let mut jwks_bodies = Vec::new();
    for path in [
        "/openid/v1/jwks",
        "/.well-known/jwks.json",
        "/keys",
        "/keys.json",
    ] {
        let response = server.hosted(Method::GET, &sub, path).send().unwrap();
        assert_eq!(response.status(), 200, "{path}");
        assert_eq!(
            response.headers()["content-type"],
            "application/jwk-set+json"
        );
        jwks_bodies.push(json(response));
    }
    assert!(jwks_bodies.iter().all(|b| b == &jwks_bodies[0]));
    assert_eq!(jwks_bodies[0]["keys"][0]["kid"], "k1");

    let not_modified = server
        .hosted(Method::GET, &sub, "/.well-known/openid-configuration")
        .header("if-none-match", &etag)
        .send()
        .unwrap();
    assert_eq!(not_modified.status(), 304);
    assert_eq!(not_modified.headers()["etag"], etag.as_str());
    let since = server
        .hosted(Method::GET, &sub, "/.well-known/openid-configuration")
        .header("if-modified-since", &last_modified)
        .send()
        .unwrap();
    assert_eq!(since.status(), 304);
    // The two obsolete forms of the same date, which a recipient must accept too (RFC 9110
    // §5.6.7).
    let at = time::PrimitiveDateTime::parse(
        &last_modified,
        time::macros::format_description!(
            "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
        ),
    )
    .unwrap();
    let rfc_850 = time::macros::format_description!(
        "[weekday repr:long], [day]-[month repr:short]-[year repr:last_two] [hour]:[minute]:[second] GMT"
    );
    let asctime = time::macros::format_description!(
        "[weekday repr:short] [month repr:short] [day padding:space] [hour]:[minute]:[second] [year]"
    );
    for obsolete in [at.format(rfc_850).unwrap(), at.format(asctime).unwrap()] {
        let since = server
            .hosted(Method::GET, &sub, "/.well-known/openid-configuration")
            .header("if-modified-since", &obsolete)
            .send()
            .unwrap();
        assert_eq!(since.status(), 304, "{obsolete}");
    }
    let other = server
        .hosted(Method::GET, &sub, "/.well-known/openid-configuration")
        .header("if-none-match", "\"something-else\"")
        .send()
        .unwrap();
    assert_eq!(other.status(), 200);

    let head = server
        .hosted(Method::HEAD, &sub, "/.well-known/openid-configuration")
        .send()
        .unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(head.headers()["etag"], etag.as_str());
    assert_eq!(head.text().unwrap(), "");

    let post = server
        .hosted(Method::POST, &sub, "/.well-known/openid-configuration")
        .send()
        .unwrap();
    assert_eq!(post.status(), 405);
    assert_eq!(post.headers()["allow"], "GET, HEAD");

    let origin = server
        .hosted(Method::GET, &sub, "/openid/v1/jwks")
        .header("origin", "https://evil.example")
        .send()
        .unwrap();
    assert_eq!(origin.headers()["access-control-allow-origin"], "*");
}

#[test]
fn unknown_unpublished_and_removed_issuers_answer_404_at_once() {
    let server = TestServer::start();
    let sub = published(&server);
    let unknown = server
        .hosted(
            Method::GET,
            "nope-acme",
            "/.well-known/openid-configuration",
        )
        .send()
        .unwrap();
    assert_eq!(unknown.status(), 404);
    // Open to every origin, like the documents: a page learns the issuer is unknown.
    assert_eq!(unknown.headers()["access-control-allow-origin"], "*");
    let other_path = server
        .hosted(Method::GET, &sub, "/services")
        .send()
        .unwrap();
    assert_eq!(other_path.status(), 404);
    assert_eq!(other_path.headers()["access-control-allow-origin"], "*");
}

#[test]
fn a_new_upload_is_served_at_once_and_a_removal_stops_it() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    publish_api(&server, &acme);
    let path = "/services/api-acme/config";
    let first = server
        .hosted(Method::GET, "api-acme", "/keys")
        .send()
        .unwrap();
    let first_etag = first.headers()["etag"].to_str().unwrap().to_owned();
    server
        .authed(Method::PUT, path, &acme.token)
        .json(&upload(&["k1", "k2"]))
        .send()
        .unwrap();
    let second = server
        .hosted(Method::GET, "api-acme", "/keys")
        .send()
        .unwrap();
    assert_ne!(second.headers()["etag"].to_str().unwrap(), first_etag);
    assert_eq!(json(second)["keys"].as_array().unwrap().len(), 2);

    server
        .authed(Method::DELETE, path, &acme.token)
        .send()
        .unwrap();
    assert_eq!(
        server
            .hosted(Method::GET, "api-acme", "/keys")
            .send()
            .unwrap()
            .status(),
        404
    );
    server
        .authed(Method::PUT, path, &acme.token)
        .json(&upload(&["k1"]))
        .send()
        .unwrap();
    assert_eq!(
        server
            .hosted(Method::GET, "api-acme", "/keys")
            .send()
            .unwrap()
            .status(),
        200
    );
    server
        .authed(Method::DELETE, "/services/api-acme", &acme.token)
        .send()
        .unwrap();
    assert_eq!(
        server
            .hosted(Method::GET, "api-acme", "/keys")
            .send()
            .unwrap()
            .status(),
        404
    );
}
