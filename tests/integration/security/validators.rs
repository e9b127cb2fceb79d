//! Second security review, finding 8 (docs/api.md, "Public hosting"): two uploads within one
//! second, and `If-Modified-Since` with the first one's `Last-Modified` answered 304 though the key
//! set had changed. Dates have whole seconds, so the registry records when a version shares its
//! second with the change before it (in the database: every replica answers alike), and then only a
//! later date answers 304.

use crate::api::{register_service, upload};
use registry_tests::server::{json, TestServer};
use reqwest::blocking::Response;
use reqwest::Method;
use std::time::Duration;
use time::format_description::well_known::Rfc2822;
use time::OffsetDateTime;

const DISCOVERY: &str = "/.well-known/openid-configuration";
const JWKS: &str = "/openid/v1/jwks";

fn publish(server: &TestServer, token: &str, subdomain: &str, kids: &[&str]) {
    let response = server
        .authed(Method::PUT, &format!("/services/{subdomain}/config"), token)
        .json(&upload(kids))
        .send()
        .unwrap();
    assert_eq!(response.status(), 200, "publishing {kids:?}");
}

fn header(response: &Response, name: &str) -> String {
    response.headers()[name].to_str().unwrap().to_owned()
}

fn get(server: &TestServer, subdomain: &str, path: &str, headers: &[(&str, &str)]) -> Response {
    let mut request = server.hosted(Method::GET, subdomain, path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().unwrap();
    // Never dated after the response itself (RFC 9110 §8.8.2.1).
    let date = |name| OffsetDateTime::parse(&header(&response, name), &Rfc2822).unwrap();
    assert!(
        date("last-modified") <= date("date"),
        "Last-Modified {} after Date {}",
        header(&response, "last-modified"),
        header(&response, "date")
    );
    response
}

fn kids(response: Response) -> Vec<String> {
    json(response)["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kid"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_change_within_the_same_second_is_never_answered_304_by_date() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let subdomain = register_service(&server, &acme, "api");
    // Two uploads within one second (a second boundary between them: try again).
    let mut attempt = 0;
    let first_modified = loop {
        attempt += 1;
        assert!(attempt <= 10, "no two uploads fell within one second");
        publish(&server, &acme.token, &subdomain, &[&format!("a{attempt}")]);
        let first = get(&server, &subdomain, JWKS, &[]);
        assert_eq!(first.status(), 200);
        let first_modified = header(&first, "last-modified");
        publish(&server, &acme.token, &subdomain, &[&format!("b{attempt}")]);
        let second = get(&server, &subdomain, DISCOVERY, &[]);
        if header(&second, "last-modified") == first_modified {
            break first_modified;
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    let current = format!("b{attempt}");

    // A client holding the first version's date gets the second version, for both documents.
    let since = [("if-modified-since", first_modified.as_str())];
    let jwks = get(&server, &subdomain, JWKS, &since);
    assert_eq!(jwks.status(), 200, "If-Modified-Since {first_modified}");
    let etag = header(&jwks, "etag");
    // The new key first; the one it replaced stays published, retired (docs/api.md, "Key
    // lifecycle").
    assert_eq!(kids(jwks)[0], current);
    let discovery = get(&server, &subdomain, DISCOVERY, &since);
    assert_eq!(discovery.status(), 200);
    assert_eq!(
        json(discovery)["issuer"],
        server.issuer(&subdomain).as_str()
    );

    // The ETag still revalidates (If-None-Match wins over the date).
    let matched = get(
        &server,
        &subdomain,
        JWKS,
        &[
            ("if-none-match", &etag),
            ("if-modified-since", &first_modified),
        ],
    );
    assert_eq!(matched.status(), 304);
    assert_eq!(header(&matched, "etag"), etag);
    let other = get(&server, &subdomain, JWKS, &[("if-none-match", "\"other\"")]);
    assert_eq!(other.status(), 200);

    // A later date than the change still answers 304.
    std::thread::sleep(Duration::from_millis(1100));
    let later = OffsetDateTime::now_utc().to_offset(time::UtcOffset::UTC);
    let later = later
        .format(time::macros::format_description!(
            "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
        ))
        .unwrap();
    let revalidated = get(&server, &subdomain, JWKS, &[("if-modified-since", &later)]);
    assert_eq!(revalidated.status(), 304, "If-Modified-Since {later}");

    // A third upload a second later stands alone in its second: its date revalidates.
    publish(&server, &acme.token, &subdomain, &["c"]);
    let third = get(&server, &subdomain, JWKS, &[]);
    let third_modified = header(&third, "last-modified");
    assert_ne!(third_modified, first_modified);
    for path in [JWKS, DISCOVERY] {
        let response = get(
            &server,
            &subdomain,
            path,
            &[("if-modified-since", &third_modified)],
        );
        assert_eq!(
            response.status(),
            304,
            "{path} If-Modified-Since {third_modified}"
        );
    }
    let stale = get(&server, &subdomain, JWKS, &since);
    assert_eq!(stale.status(), 200);
    assert_eq!(kids(stale)[0], "c");
}

#[test]
fn a_lone_upload_revalidates_by_date_and_every_replica_dates_it_alike() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let subdomain = register_service(&server, &acme, "api");
    publish(&server, &acme.token, &subdomain, &["k1"]);
    let first = get(&server, &subdomain, DISCOVERY, &[]);
    let modified = header(&first, "last-modified");
    for path in [DISCOVERY, JWKS] {
        let response = get(
            &server,
            &subdomain,
            path,
            &[("if-modified-since", &modified)],
        );
        assert_eq!(response.status(), 304, "{path}");
        assert_eq!(header(&response, "last-modified"), modified);
    }

    // Two quick uploads, then a replica on the same database: same dates, same answers.
    publish(&server, &acme.token, &subdomain, &["k2"]);
    publish(&server, &acme.token, &subdomain, &["k3"]);
    let replica = TestServer::start_with(registry_tests::server::ServerOptions {
        database_url: Some(server.database_url.clone()),
        ..Default::default()
    });
    let here = get(&server, &subdomain, JWKS, &[]);
    let there = get(&replica, &subdomain, JWKS, &[]);
    assert_eq!(header(&here, "etag"), header(&there, "etag"));
    let modified = header(&here, "last-modified");
    assert_eq!(modified, header(&there, "last-modified"));
    let since = [("if-modified-since", modified.as_str())];
    assert_eq!(
        get(&server, &subdomain, JWKS, &since).status(),
        get(&replica, &subdomain, JWKS, &since).status()
    );
}

/// The replicas probe (stop 84): `DELETE …/config` (or of the service, then a service created
/// again under its name) and a new upload within one second; the new version had no history, so
/// a client holding the deleted version's date was answered 304.
#[test]
fn an_upload_after_a_deletion_within_the_same_second_is_never_answered_304_by_date() {
    for deleted in ["/config", ""] {
        an_upload_after_a_deletion_of(deleted);
    }
}

/// [`an_upload_after_a_deletion_within_the_same_second_is_never_answered_304_by_date`], with
/// `DELETE /services/{s}{deleted}`.
fn an_upload_after_a_deletion_of(deleted: &str) {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let subdomain = register_service(&server, &acme, "api");
    let mut attempt = 0;
    let deleted_modified = loop {
        attempt += 1;
        assert!(
            attempt <= 10,
            "no deletion and upload fell within one second"
        );
        publish(&server, &acme.token, &subdomain, &[&format!("a{attempt}")]);
        let first = get(&server, &subdomain, JWKS, &[]);
        let first_modified = header(&first, "last-modified");
        let gone = server
            .authed(
                Method::DELETE,
                &format!("/services/{subdomain}{deleted}"),
                &acme.token,
            )
            .send()
            .unwrap();
        assert_eq!(gone.status(), 204, "DELETE …{deleted}");
        if deleted.is_empty() {
            assert_eq!(register_service(&server, &acme, "api"), subdomain);
        }
        assert_eq!(get_status(&server, &subdomain), 404, "deleted");
        publish(&server, &acme.token, &subdomain, &[&format!("b{attempt}")]);
        let again = get(&server, &subdomain, DISCOVERY, &[]);
        if header(&again, "last-modified") == first_modified {
            break first_modified;
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    let since = [("if-modified-since", deleted_modified.as_str())];
    for path in [JWKS, DISCOVERY] {
        let response = get(&server, &subdomain, path, &since);
        assert_eq!(
            response.status(),
            200,
            "{path} If-Modified-Since {deleted_modified}"
        );
        if path == JWKS {
            assert_eq!(kids(response), [format!("b{attempt}")], "DELETE …{deleted}");
        }
    }
    // A replica that reads the new version from the database dates it alike.
    let replica = TestServer::start_with(registry_tests::server::ServerOptions {
        database_url: Some(server.database_url.clone()),
        ..Default::default()
    });
    assert_eq!(get(&replica, &subdomain, JWKS, &since).status(), 200);
}

/// The status of the key set's GET, whatever it is.
fn get_status(server: &TestServer, subdomain: &str) -> u16 {
    let response = server.hosted(Method::GET, subdomain, JWKS).send().unwrap();
    response.status().as_u16()
}
