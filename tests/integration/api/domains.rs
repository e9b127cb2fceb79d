//! Custom domains (docs/api.md, "Custom domains") without an ACME server: the domain calls, and
//! a domain whose certificate is in the database (a test CA's, sealed under the data key as the
//! worker seals it) served by SNI with its own issuer, federating, answering HTTP-01 challenges,
//! and gone at once when removed. `cargo xtask acme` runs the whole way through Pebble.

use super::{create_account, register_service};
use crate::https::{https_server, leaf, Files, NAMES};
use registry_acme::DataKey;
use registry_domain::custom_domain::{CustomDomain, DomainCertificate};
use registry_domain::ports::DomainStore;
use registry_store::Store;
use registry_testkit::tls::{ServerCertificate, TestCa};
use registry_tests::issuer::{KeyKind, SigningKey};
use registry_tests::server::{assert_problem, https_client, json, pointers, TestServer, AUDIENCE};
use registry_tests::wait::within;
use reqwest::Method;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use time::format_description::well_known::Rfc2822;

const DOMAIN: &str = "login.customer.test";
const DATA_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// A server on HTTPS taking custom domains: an ACME directory that is never reached, its plain
/// listener (answered too), the data key, and the DNS server `dns` (`None`: one that does not
/// answer, so no TXT record is ever found), with the settings of `more`.
fn taking_domains_with(
    ca: &TestCa,
    files: &Files,
    dns: Option<&str>,
    more: &[(&str, &str)],
) -> (TestServer, String) {
    let plain = format!("127.0.0.1:{}", registry_testkit::free_port().unwrap());
    let silent = format!("127.0.0.1:{}", registry_testkit::free_port().unwrap());
    let mut settings = vec![
        ("REGISTRY_ACME_DIRECTORY", "https://127.0.0.1:9/dir"),
        ("REGISTRY_DATA_KEY", DATA_KEY),
        ("REGISTRY_DNS_RESOLVER", dns.unwrap_or(&silent)),
        ("REGISTRY_HTTP_REDIRECT_LISTEN", &plain),
    ];
    settings.extend_from_slice(more);
    (https_server(ca, files, &settings), plain)
}

/// [`taking_domains_with`] its DNS server that does not answer, and no other setting.
fn taking_domains(ca: &TestCa, files: &Files) -> (TestServer, String) {
    taking_domains_with(ca, files, None, &[])
}

fn domain_call(
    server: &TestServer,
    method: Method,
    sub: &str,
    token: &str,
) -> reqwest::blocking::Response {
    server
        .authed(method, &format!("/services/{sub}/domain"), token)
        .send()
        .unwrap()
}

fn put_domain(
    server: &TestServer,
    sub: &str,
    token: &str,
    body: Value,
) -> reqwest::blocking::Response {
    server
        .authed(Method::PUT, &format!("/services/{sub}/domain"), token)
        .json(&body)
        .send()
        .unwrap()
}

#[test]
fn a_domain_is_asked_for_read_and_removed_with_the_records_to_set() {
    let ca = TestCa::new("operator CA");
    let files = Files::with(&ca.server_certificate(&NAMES));
    let (server, _) = taking_domains(&ca, &files);
    let acme = server.customer("acme", "business");
    let sub = register_service(&server, &acme, "k3s");
    let other = register_service(&server, &acme, "old");

    let added = put_domain(&server, &sub, &acme.token, json!({"domain": DOMAIN}));
    assert_eq!(added.status(), 202);
    let added = json(added);
    assert_eq!(added["domain"], DOMAIN);
    assert_eq!(added["status"], "verifying");
    let records = added["records"].as_array().unwrap();
    assert_eq!(
        records[0],
        json!({"type": "CNAME", "name": DOMAIN, "value": format!("{sub}.oidc.test")})
    );
    assert_eq!(records[1]["type"], "TXT");
    assert_eq!(records[1]["name"], format!("_registry-challenge.{DOMAIN}"));
    assert!(records[1]["value"].as_str().unwrap().len() >= 32);
    assert!(added.get("certificate").is_none() && added.get("error").is_none());
    // The same domain again: the same records; read back the same.
    let again = json(put_domain(
        &server,
        &sub,
        &acme.token,
        json!({"domain": DOMAIN}),
    ));
    assert_eq!(again, added);
    assert_eq!(
        json(domain_call(&server, Method::GET, &sub, &acme.token)),
        added
    );
    // The list shows it, in one request.
    let listed = json(server.get("/services?include=status", &acme.token));
    let shown = (listed.as_array().unwrap().iter())
        .find(|s| s["subdomain"] == sub.as_str())
        .unwrap();
    assert_eq!(
        shown["status"]["domain"],
        json!({"domain": DOMAIN, "status": "verifying"})
    );

    // Another service's claim of it while it is unproven: no conflict, a claim of its own
    // (fourth security review: a domain is held only once proven; `cargo xtask acme` and the
    // unit tests take one claim to held and the other to failed).
    let claimed = json(put_domain(
        &server,
        &other,
        &acme.token,
        json!({"domain": DOMAIN}),
    ));
    assert_eq!(claimed["status"], "verifying");
    assert_ne!(claimed["records"][1]["value"], added["records"][1]["value"]);
    assert_eq!(
        domain_call(&server, Method::DELETE, &other, &acme.token).status(),
        204
    );
    // Names that cannot be a custom domain.
    for bad in [
        "Login.customer.test",
        "customer",
        "*.customer.test",
        "login.customer.test:443",
        "registry.test",
        "x.oidc.test",
        "oidc.test",
        &format!("{}.test", "a".repeat(250)),
        // 234 characters: `_registry-challenge.<domain>` would pass DNS's 253.
        &format!("{0}.{0}.{0}.{1}.test", "a".repeat(57), "b".repeat(55)),
    ] {
        let problem = assert_problem(
            put_domain(&server, &other, &acme.token, json!({"domain": bad})),
            400,
            "validation-failed",
        );
        assert_eq!(pointers(&problem), ["/domain"], "{bad}: {problem}");
    }
    let extra = put_domain(
        &server,
        &other,
        &acme.token,
        json!({"domain": "a.example.com", "port": 443}),
    );
    assert_problem(extra, 400, "validation-failed");
    // An anonymous service has no custom domain: its secret's every domain call is a 403, a
    // PUT's before its body is read.
    let (anonymous, secret) = server.anonymous_service();
    for body in [json!({"domain": "anon.example.com"}), json!({})] {
        assert_problem(
            put_domain(&server, &anonymous, &secret, body),
            403,
            "forbidden",
        );
    }
    let path = format!("/services/{anonymous}/domain");
    for method in [Method::GET, Method::DELETE] {
        let refused = server.authed(method, &path, &secret).send().unwrap();
        assert_problem(refused, 403, "forbidden");
    }
    // Nothing is served for the domain while it is verifying.
    let client = https_client(&[ca.pem()], &[DOMAIN], server.port);
    let served = client
        .get(format!(
            "https://{DOMAIN}:{}/.well-known/openid-configuration",
            server.port
        ))
        .send();
    assert!(
        served.is_err(),
        "no certificate for the domain, no document: {served:?}"
    );

    assert_problem(
        domain_call(&server, Method::GET, &other, &acme.token),
        404,
        "not-found",
    );
    assert_eq!(
        domain_call(&server, Method::DELETE, &sub, &acme.token).status(),
        204
    );
    assert_problem(
        domain_call(&server, Method::DELETE, &sub, &acme.token),
        404,
        "not-found",
    );
    assert_eq!(
        put_domain(&server, &other, &acme.token, json!({"domain": DOMAIN})).status(),
        202,
        "free again"
    );
    // The claims and removals, the other service's unproven claim among them.
    let events = json(server.get("/audit-events?action=domain.put", &acme.token));
    assert_eq!(events["events"].as_array().unwrap().len(), 3);
    let events = json(server.get("/audit-events?action=domain.delete", &acme.token));
    assert_eq!(events["events"].as_array().unwrap().len(), 2);
}

/// Fourth security review (docs/api.md, "Custom domains"): an IP address in any spelling a
/// resolver reads, a numeric last label, and the registry's own names (the API's host
/// `registry.test`, the issuers' base `oidc.test`) with what is under or above them, are 400 at
/// `/domain`, and nothing is held for them.
#[test]
fn ip_literals_numeric_last_labels_and_the_registrys_own_names_are_refused() {
    let ca = TestCa::new("operator CA");
    let files = Files::with(&ca.server_certificate(&NAMES));
    let (server, _) = taking_domains(&ca, &files);
    let acme = server.customer("acme", "business");
    let sub = register_service(&server, &acme, "k3s");
    for bad in [
        "127.0.0.1",
        "169.254.169.254",
        "0x7f.1",
        "0x7f.0.0.1",
        "0177.0.0.1",
        "2130706433",
        "10.0.1",
        "login.customer.123",
        "login.customer.0x1",
        "login.customer.t3st",
        "registry.test",
        "x.registry.test",
        "a.b.registry.test",
        "oidc.test",
        "k3s-acme.oidc.test",
    ] {
        let problem = assert_problem(
            put_domain(&server, &sub, &acme.token, json!({"domain": bad})),
            400,
            "validation-failed",
        );
        assert_eq!(pointers(&problem), ["/domain"], "{bad}: {problem}");
    }
    assert_problem(
        domain_call(&server, Method::GET, &sub, &acme.token),
        404,
        "not-found",
    );
    // A name with digits where a name may have them is a name.
    assert_eq!(
        put_domain(
            &server,
            &sub,
            &acme.token,
            json!({"domain": "127.0.0.1.customer.test"})
        )
        .status(),
        202
    );
}

#[test]
fn without_an_acme_directory_custom_domains_are_refused() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let sub = register_service(&server, &acme, "k3s");
    assert_problem(
        put_domain(&server, &sub, &acme.token, json!({"domain": DOMAIN})),
        409,
        "custom-domains-disabled",
    );
    // Who may ask, and what was asked, are answered first, whatever the settings.
    let invalid = put_domain(&server, &sub, &acme.token, json!({"domain": "no-dot"}));
    assert_eq!(
        pointers(&assert_problem(invalid, 400, "validation-failed")),
        ["/domain"]
    );
    // With an unknown member: both problems at once.
    let both = put_domain(
        &server,
        &sub,
        &acme.token,
        json!({"foo": 1, "domain": "no-dot"}),
    );
    assert_eq!(
        pointers(&assert_problem(both, 400, "validation-failed")),
        ["/foo", "/domain"]
    );
    let (anon, secret) = server.anonymous_service();
    let refused = put_domain(&server, &anon, &secret, json!({"domain": DOMAIN}));
    assert_eq!(refused.status(), 403);
}

/// `DOMAIN` asked for by `sub` (202), then made active with `certificate`, as the worker records
/// an order.
fn activate(server: &TestServer, sub: &str, token: &str, certificate: &ServerCertificate) {
    assert_eq!(
        put_domain(server, sub, token, json!({"domain": DOMAIN})).status(),
        202
    );
    let store = Store::connect(&server.database_url).unwrap();
    let domain = store.domain_named(DOMAIN).unwrap().unwrap();
    let key = DataKey::from_base64(DATA_KEY).unwrap();
    let now = time::OffsetDateTime::now_utc();
    let active = domain.clone().ordered(
        Ok(DomainCertificate {
            chain_pem: certificate.chain.clone(),
            sealed_key: key.seal(certificate.key.as_bytes()),
            not_before: now - time::Duration::hours(1),
            not_after: now + time::Duration::days(90),
            issuer: "CN=domain CA".into(),
        }),
        &Default::default(),
        now,
    );
    assert!(store.update_domain(&domain, &active).unwrap());
}

/// A domain added or removed purges its host from the caches in front of the registry: once
/// removed, a cache must not keep serving the documents under a name the registry left.
#[test]
fn adding_and_removing_an_active_domain_purge_its_host_from_the_caches() {
    let (cache, seen) = super::cdn::cache();
    let ca = TestCa::new("operator CA");
    let files = Files::with(&ca.server_certificate(&NAMES));
    let purging = [("REGISTRY_PURGE_URLS", cache.as_str())];
    let (server, _) = taking_domains_with(&ca, &files, None, &purging);
    let acme = server.customer("acme", "business");
    let sub = register_service(&server, &acme, "k3s");
    super::publish_kids(&server, &acme.token, &sub, &["k1"]);
    let certificate = TestCa::new("domain CA").server_certificate(&[DOMAIN]);
    activate(&server, &sub, &acme.token, &certificate);
    let purged = format!("PURGE /openid/v1/jwks {DOMAIN}");
    eventually("the domain's host purged once it is served", || {
        seen.lock().unwrap().contains(&purged)
    });
    seen.lock().unwrap().clear();
    let removed = domain_call(&server, Method::DELETE, &sub, &acme.token);
    assert_eq!(removed.status(), 204);
    eventually(
        "the domain's host purged once it is no longer served",
        || seen.lock().unwrap().contains(&purged),
    );
}

/// A domain released by one customer's service and claimed by another's serves the new
/// service's documents: a client that revalidates the old ones by date is answered them, not
/// a 304 that would keep it trusting the old owner's keys, though the new service's documents
/// are older than the date it holds.
#[test]
fn a_domain_that_changed_hands_is_not_revalidated_by_an_earlier_date() {
    let ca = TestCa::new("operator CA");
    let files = Files::with(&ca.server_certificate(&NAMES));
    let (server, _) = taking_domains(&ca, &files);
    let (acme, globex) = (
        server.customer("acme", "business"),
        server.customer("globex", "business"),
    );
    // The new owner's documents first: they are the older ones.
    let theirs = register_service(&server, &globex, "k3s");
    super::publish_kids(&server, &globex.token, &theirs, &["globex-key"]);
    let ours = register_service(&server, &acme, "k3s");
    super::publish_kids(&server, &acme.token, &ours, &["acme-key"]);
    let domain_ca = TestCa::new("domain CA");
    let certificate = domain_ca.server_certificate(&[DOMAIN]);
    let port = server.port;
    let client = https_client(&[domain_ca.pem()], &[DOMAIN], port);
    let url = format!("https://{DOMAIN}:{port}/openid/v1/jwks");
    let kid_served = |held: Option<&str>| {
        let mut request = client.get(&url);
        if let Some(date) = held {
            request = request.header("If-Modified-Since", date);
        }
        // Until the domain is served, the handshake gets the operator's certificate.
        let Ok(answer) = request.send() else {
            return (Some("no answer".to_owned()), String::new());
        };
        let modified = (answer.headers().get("last-modified"))
            .map(|date| date.to_str().unwrap().to_owned())
            .unwrap_or_default();
        let kid = match answer.status().as_u16() {
            304 => None,
            200 => json(answer)["keys"][0]["kid"].as_str().map(str::to_owned),
            other => Some(format!("an answer {other}")),
        };
        (kid, modified)
    };

    activate(&server, &ours, &acme.token, &certificate);
    // Revalidated by its date (a 304), once the second of the claim has passed (until then
    // the date is the answer's own Date, and a 200 answers it).
    let mut held = String::new();
    eventually(
        "the domain serves its documents, revalidated by date",
        || {
            let (kid, date) = kid_served(None);
            held = date;
            kid.as_deref() == Some("acme-key") && kid_served(Some(&held)).0.is_none()
        },
    );
    let removed = domain_call(&server, Method::DELETE, &ours, &acme.token);
    assert_eq!(removed.status(), 204);
    activate(&server, &theirs, &globex.token, &certificate);
    eventually("the domain serves the new owner's keys", || {
        kid_served(None).0.as_deref() == Some("globex-key")
    });

    let (kid, _) = kid_served(Some(&held));
    assert_eq!(kid.as_deref(), Some("globex-key"), "not a 304 for {held}");
    // Its own date revalidates it, once that second has passed; a later one than the old.
    let mut modified = String::new();
    eventually("the new owner's date revalidates its documents", || {
        modified = kid_served(None).1;
        kid_served(Some(&modified)).0.is_none()
    });
    let date = |text: &str| time::OffsetDateTime::parse(text, &Rfc2822).unwrap();
    assert!(date(&modified) > date(&held), "{modified} after {held}");
}

/// Waits until `check` holds (the replicas apply the change log within half a second).
fn eventually(what: &str, check: impl FnMut() -> bool) {
    assert!(
        within(Duration::from_secs(10), check),
        "not within 10 s: {what}"
    );
}

#[test]
fn an_active_domain_serves_the_documents_under_its_own_issuer_and_certificate() {
    let ca = TestCa::new("operator CA");
    let files = Files::with(&ca.server_certificate(&NAMES));
    let (server, plain) = taking_domains(&ca, &files);
    let acme = server.customer("acme", "business");
    let sub = register_service(&server, &acme, "k3s");
    let key = SigningKey::generate(KeyKind::P256, "k1");
    let published = server
        .authed(Method::PUT, &format!("/services/{sub}/config"), &acme.token)
        .json(&json!({"openidConfiguration": super::cluster_discovery(), "jwks": key.jwks()}))
        .send()
        .unwrap();
    assert_eq!(published.status(), 200);
    let domain_ca = TestCa::new("domain CA");
    let certificate = domain_ca.server_certificate(&[DOMAIN]);
    activate(&server, &sub, &acme.token, &certificate);

    // A client that trusts only the domain's CA gets its certificate, by SNI.
    let port = server.port;
    let client = https_client(&[domain_ca.pem()], &[DOMAIN], port);
    let url = |path: &str| format!("https://{DOMAIN}:{port}{path}");
    eventually("the domain is served", || {
        client
            .get(url("/openid/v1/jwks"))
            .send()
            .is_ok_and(|r| r.status() == 200)
    });
    let discovery = client
        .get(url("/.well-known/openid-configuration"))
        .send()
        .unwrap();
    assert_eq!(
        leaf(&discovery),
        certificate.der,
        "the domain's own certificate"
    );
    let discovery = json(discovery);
    assert_eq!(
        discovery["issuer"],
        format!("https://{DOMAIN}"),
        "never with a port"
    );
    assert_eq!(
        discovery["jwks_uri"],
        format!("https://{DOMAIN}/openid/v1/jwks")
    );
    assert_eq!(discovery["response_types_supported"], json!(["id_token"]));
    let keys = json(client.get(url("/openid/v1/jwks")).send().unwrap());
    let host = format!("{sub}.oidc.test");
    let issuer_client = https_client(&[ca.pem()], &[&host], port);
    let at_subdomain = |path: &str| {
        json(
            issuer_client
                .get(format!("https://{host}:{port}{path}"))
                .send()
                .unwrap(),
        )
    };
    assert_eq!(
        keys,
        at_subdomain("/openid/v1/jwks"),
        "both issuers serve the same keys"
    );
    assert_eq!(
        at_subdomain("/.well-known/openid-configuration")["issuer"],
        format!("https://{host}:{port}"),
        "the subdomain keeps its own issuer"
    );
    // The API's name still gets the operator's certificate.
    assert_eq!(server.status_of("/healthz"), 200);
    let shown = json(domain_call(&server, Method::GET, &sub, &acme.token));
    assert_eq!(shown["status"], "active");
    assert_eq!(shown["certificate"]["issuer"], "CN=domain CA");
    let metrics = server.metrics_text();
    assert!(
        metrics.contains(&format!(
            "registry_domain_certificate_not_after_seconds{{domain=\"{DOMAIN}\"}}"
        )),
        "{metrics}"
    );

    // Preflight and the wiring guide describe the issuer asked for, one of the service's.
    let issuer = format!("https://{DOMAIN}");
    let guide = json(server.get(
        &format!("/services/{sub}/federation?issuer={issuer}"),
        &acme.token,
    ));
    assert_eq!(guide["issuer"], issuer.as_str(), "{guide}");
    let guide = json(server.get(&format!("/services/{sub}/federation"), &acme.token));
    assert_eq!(guide["issuer"], format!("https://{host}:{port}"));
    let checked = server.get(
        &format!("/services/{sub}/preflight?issuer={issuer}"),
        &acme.token,
    );
    assert_eq!(checked.status(), 200);
    let refused = server.get(
        &format!("/services/{sub}/preflight?issuer=https://elsewhere.test"),
        &acme.token,
    );
    let problem = assert_problem(refused, 400, "validation-failed");
    assert!(
        problem["detail"].as_str().unwrap().contains(&issuer),
        "{problem}"
    );

    // A token whose issuer is the domain is checked against the hosted keys, never fetched.
    let other = register_service(&server, &acme, "api");
    let policy = json!({"kind": "oidc", "rules": [{"services": [other],
        "claims": {"iss": format!("https://{DOMAIN}"), "aud": AUDIENCE, "sub": registry_testkit::SUBJECT}}]});
    create_account(&server, &acme, "federated", policy);
    let token = key.mint(&format!("https://{DOMAIN}"));
    let called = server.get(&format!("/services/{other}"), &token);
    assert_eq!(
        called.status(),
        200,
        "{}",
        called.text().unwrap_or_default()
    );
    assert_eq!(server.metric("registry_oidc_key_fetches_total"), 0);

    // The plain listener answers an HTTP-01 challenge stored for the domain, and redirects it.
    let store = Store::connect(&server.database_url).unwrap();
    store
        .put_challenge(
            DOMAIN,
            "tok3n",
            "tok3n.thumbprint",
            time::OffsetDateTime::now_utc(),
        )
        .unwrap();
    let plain_client = reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let get = |host: &str, path: &str| {
        plain_client
            .get(format!("http://{plain}{path}"))
            .header("host", host)
            .send()
            .unwrap()
    };
    // No order is under way for the active domain: answered from memory, 404, the database
    // not read (fourth security review).
    let answer = get(&format!("{DOMAIN}:80"), "/.well-known/acme-challenge/tok3n");
    assert_eq!(answer.status(), 404);
    // Its renewal comes due (in half a minute: within the replicas' clock difference, and
    // later than the test): the answer stored is served.
    let active = store.domain_named(DOMAIN).unwrap().unwrap();
    let due = CustomDomain {
        next_attempt_at: time::OffsetDateTime::now_utc() + time::Duration::seconds(30),
        ..active.clone()
    };
    assert!(store.update_domain(&active, &due).unwrap());
    eventually("the renewal's challenge is answered", || {
        get(&format!("{DOMAIN}:80"), "/.well-known/acme-challenge/tok3n").status() == 200
    });
    let answer = get(&format!("{DOMAIN}:80"), "/.well-known/acme-challenge/tok3n");
    assert_eq!(answer.text().unwrap(), "tok3n.thumbprint");
    assert_eq!(
        get(DOMAIN, "/.well-known/acme-challenge/other").status(),
        404
    );
    assert_eq!(
        get("elsewhere.test", "/.well-known/acme-challenge/tok3n").status(),
        404
    );
    let redirected = get(DOMAIN, "/.well-known/openid-configuration");
    assert_eq!(redirected.status(), 308);
    assert_eq!(
        redirected.headers()["location"],
        url("/.well-known/openid-configuration").replace(&format!(":{port}"), "")
    );

    // Removed: no longer served, at once on this replica.
    assert_eq!(
        domain_call(&server, Method::DELETE, &sub, &acme.token).status(),
        204
    );
    // A new connection (a kept one keeps its handshake): its name no longer gets its certificate.
    eventually("the domain's certificate is no longer served", || {
        let fresh = https_client(&[domain_ca.pem()], &[DOMAIN], port);
        fresh
            .get(url("/.well-known/openid-configuration"))
            .send()
            .is_err()
    });
    assert_problem(
        client
            .get(url("/.well-known/openid-configuration"))
            .send()
            .unwrap(),
        404,
        "not-found",
    );
    let operator = https_client(&[ca.pem()], &[DOMAIN], port);
    let gone = operator
        .get(url("/.well-known/openid-configuration"))
        .send();
    assert!(gone.is_err() || gone.unwrap().status() == 404);
    assert_eq!(
        server.get(&format!("/services/{other}"), &token).status(),
        401
    );
}

#[test]
fn a_start_without_what_custom_domains_need_fails_with_one_sentence_before_the_database() {
    let ca = TestCa::new("operator CA");
    let files = Files::with(&ca.server_certificate(&NAMES));
    let dir = registry_tests::server::TempDir::new("acme-start");
    let database = dir.join("registry.db");
    let tls = [
        ("REGISTRY_TLS_CERT", files.cert().display().to_string()),
        ("REGISTRY_TLS_KEY", files.key().display().to_string()),
        ("REGISTRY_HTTP_REDIRECT_LISTEN", "127.0.0.1:0".to_owned()),
    ];
    let cases: [(&[(&str, String)], &str); 4] = [
        (&[], "REGISTRY_ACME_DIRECTORY needs REGISTRY_DATA_KEY"),
        (
            &[("REGISTRY_DATA_KEY", DATA_KEY.to_owned())],
            "REGISTRY_ACME_DIRECTORY needs HTTPS",
        ),
        (
            &[
                ("REGISTRY_DATA_KEY", "c2hvcnQ=".to_owned()),
                tls[0].clone(),
                tls[1].clone(),
                tls[2].clone(),
            ],
            "REGISTRY_DATA_KEY holds 5 bytes; it must hold 32",
        ),
        (
            &[
                ("REGISTRY_DATA_KEY", DATA_KEY.to_owned()),
                tls[0].clone(),
                tls[1].clone(),
                tls[2].clone(),
                ("REGISTRY_DNS_RESOLVER", "nowhere".to_owned()),
            ],
            "REGISTRY_DNS_RESOLVER \"nowhere\" is not a host and port",
        ),
    ];
    for (more, says) in cases {
        let mut command = std::process::Command::new(registry_tests::server::registry_binary());
        command
            .args(["serve", "--listen", "127.0.0.1:0"])
            .env(
                "REGISTRY_DATABASE_URL",
                format!("sqlite://{}", database.display()),
            )
            .env("REGISTRY_ACME_DIRECTORY", "https://acme.example/directory")
            .env("RUST_LOG", "off");
        for (name, value) in more {
            command.env(name, value);
        }
        let output = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.starts_with("registry: ") && stderr.contains(says),
            "{says}: {stderr}"
        );
        assert!(!database.exists(), "checked before the database");
    }
}

/// A cache's log line for a custom domain's host, with or without a port, counts for that
/// domain's issuer (docs/api.md, "Behind a CDN"); before, such lines were skipped.
#[test]
fn a_caches_log_lines_for_a_custom_domain_count_for_its_issuer() {
    const TOKEN: &str = "log-shipper-secret-of-at-least-32-characters";
    let ca = TestCa::new("operator CA");
    let files = Files::with(&ca.server_certificate(&NAMES));
    let more = [
        ("REGISTRY_FETCH_LOG_TOKEN", TOKEN),
        ("REGISTRY_FETCH_FLUSH_SECONDS", "1"),
    ];
    let (server, _) = taking_domains_with(&ca, &files, None, &more);
    let acme = server.customer("acme", "business");
    let sub = register_service(&server, &acme, "k3s");
    let key = SigningKey::generate(KeyKind::P256, "k1");
    let published = server
        .authed(Method::PUT, &format!("/services/{sub}/config"), &acme.token)
        .json(&json!({"openidConfiguration": super::cluster_discovery(), "jwks": key.jwks()}))
        .send()
        .unwrap();
    assert_eq!(published.status(), 200);
    let certificate = TestCa::new("domain CA").server_certificate(&[DOMAIN]);
    activate(&server, &sub, &acme.token, &certificate);
    let now = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let line = |host: &str, agent: &str| {
        json!({"time": now, "host": host, "path": "/openid/v1/jwks", "status": 200,
            "method": "GET", "userAgent": agent, "clientAddress": "203.0.113.7"})
        .to_string()
    };
    let body = [
        line(DOMAIN, "gcp-sts"),
        line(&format!("{DOMAIN}:443"), "aws-sts"),
        line(&format!("{sub}.oidc.test"), "azure"),
    ]
    .join("\n");
    eventually("the domain is served", || {
        let answer = server
            .request(Method::POST, "/fetch-log")
            .bearer_auth(TOKEN)
            .header("content-type", "application/x-ndjson")
            .body(line(DOMAIN, "probe"))
            .send()
            .unwrap();
        answer.status() == 200 && json(answer)["accepted"] == 1
    });
    let answer = server
        .request(Method::POST, "/fetch-log")
        .bearer_auth(TOKEN)
        .header("content-type", "application/x-ndjson")
        .body(body)
        .send()
        .unwrap();
    assert_eq!(json(answer), json!({"accepted": 3, "skipped": 0}));
    // A line from before the domain was asked for is another owner's fetch: skipped (the
    // subdomain's of that time is counted).
    let earlier = (time::OffsetDateTime::now_utc() - time::Duration::minutes(5))
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let old_line = |host: &str| {
        json!({"time": earlier, "host": host, "path": "/openid/v1/jwks", "status": 200,
            "method": "GET", "userAgent": "earlier", "clientAddress": "203.0.113.7"})
        .to_string()
    };
    let answer = server
        .request(Method::POST, "/fetch-log")
        .bearer_auth(TOKEN)
        .header("content-type", "application/x-ndjson")
        .body([old_line(DOMAIN), old_line(&format!("{sub}.oidc.test"))].join("\n"))
        .send()
        .unwrap();
    assert_eq!(json(answer), json!({"accepted": 1, "skipped": 1}));
    eventually("the domain's key set counted apart", || {
        let evidence = json(server.get(&format!("/services/{sub}/fetches"), &acme.token));
        let on_domain = (evidence["documents"].as_array().unwrap().iter())
            .find(|d| d["issuer"] == format!("https://{DOMAIN}") && d["path"] == "/openid/v1/jwks")
            .cloned()
            .unwrap_or_default();
        let agents = on_domain["agents"].to_string();
        agents.contains("gcp-sts")
            && agents.contains("aws-sts")
            && !agents.contains("azure")
            && !agents.contains("earlier")
    });
}

/// A DNS server on loopback that answers TXT queries for the names in `records` and never
/// answers any other: a customer's domains whose DNS never answers, beside one that does.
fn dns_server(
    records: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, String>>>,
) -> String {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let address = socket.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let mut buffer = [0u8; 1500];
        while let Ok((n, from)) = socket.recv_from(&mut buffer) {
            let query = &buffer[..n];
            // The question's name, label by label, from byte 12.
            let (mut at, mut labels) = (12, Vec::new());
            while at < n && query[at] != 0 {
                let len = usize::from(query[at]);
                labels.push(String::from_utf8_lossy(&query[at + 1..at + 1 + len]).to_lowercase());
                at += 1 + len;
            }
            let question_end = at + 5;
            let name = labels.join(".");
            let Some(value) = records.lock().unwrap().get(&name).cloned() else {
                continue;
            };
            let mut answer = Vec::new();
            answer.extend_from_slice(&query[..2]);
            answer.extend_from_slice(&[0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0]);
            answer.extend_from_slice(&query[12..question_end]);
            answer.extend_from_slice(&[0xc0, 0x0c, 0, 16, 0, 1, 0, 0, 0, 0]);
            let rdata_len = u16::try_from(value.len() + 1).unwrap();
            answer.extend_from_slice(&rdata_len.to_be_bytes());
            answer.push(u8::try_from(value.len()).unwrap());
            answer.extend_from_slice(value.as_bytes());
            let _ = socket.send_to(&answer, from);
        }
    });
    address
}

/// The fourth security review: one customer's 20 domains whose DNS never answers do not stall
/// another customer's: its proven TXT record takes it to `issuing` within 15 s (lookups run 16
/// at once, 3 s each at most, customers in turn).
#[test]
fn one_customers_silent_domains_do_not_stall_anothers() {
    let records = std::sync::Arc::new(std::sync::Mutex::new(std::collections::HashMap::new()));
    let dns = dns_server(records.clone());
    let ca = TestCa::new("operator CA");
    let files = Files::with(&ca.server_certificate(&NAMES));
    let more = [
        ("REGISTRY_MAX_PENDING_DOMAINS", "20"),
        ("REGISTRY_DOMAIN_CHECK_SECONDS", "1"),
    ];
    let (server, _) = taking_domains_with(&ca, &files, Some(&dns), &more);
    let greedy = server.customer("greedy", "business");
    for i in 0..20 {
        let sub = register_service(&server, &greedy, &format!("s{i}"));
        let body = json!({"domain": format!("d{i}.greedy.test")});
        assert_eq!(put_domain(&server, &sub, &greedy.token, body).status(), 202);
    }
    let refused = put_domain(
        &server,
        &register_service(&server, &greedy, "s20"),
        &greedy.token,
        json!({"domain": "d20.greedy.test"}),
    );
    assert_problem(refused, 409, "too-many-pending-domains");
    // Let the greedy customer's lookups start first.
    std::thread::sleep(Duration::from_secs(2));
    let victim = server.customer("victim", "business");
    let sub = register_service(&server, &victim, "api");
    let claim = json(put_domain(
        &server,
        &sub,
        &victim.token,
        json!({"domain": "login.victim.test"}),
    ));
    let token = claim["records"][1]["value"].as_str().unwrap().to_owned();
    records
        .lock()
        .unwrap()
        .insert("_registry-challenge.login.victim.test".into(), token);
    let proven_at = Instant::now();
    let mut shown = Value::Null;
    let issuing = within(Duration::from_secs(15), || {
        shown = json(domain_call(&server, Method::GET, &sub, &victim.token));
        shown["status"] == "issuing"
    });
    assert!(issuing, "still {shown} after 15 s");
    eprintln!("proven TXT to issuing in {:?}", proven_at.elapsed());
    // The greedy customer, at its limit of waiting claims, asks for the name the victim holds:
    // taken, the answer that says why (no claim would come of it).
    let refused = put_domain(
        &server,
        &register_service(&server, &greedy, "s21"),
        &greedy.token,
        json!({"domain": "login.victim.test"}),
    );
    assert_problem(refused, 409, "domain-taken");
}

/// PUTs at once: of one name on one service, every answer names the one TXT record kept (each
/// made its own, and the last written replaced the others'); of claims on several services,
/// never more unproven claims than the bound (each counted before any wrote).
#[test]
fn puts_at_once_answer_one_txt_record_and_never_pass_the_pending_bound() {
    let ca = TestCa::new("operator CA");
    let files = Files::with(&ca.server_certificate(&NAMES));
    let bound = [("REGISTRY_MAX_PENDING_DOMAINS", "2")];
    let (server, _) = taking_domains_with(&ca, &files, None, &bound);
    let acme = server.customer("acme", "business");
    let subs: Vec<String> = (0..6)
        .map(|i| register_service(&server, &acme, &format!("s{i}")))
        .collect();
    let at_once = |puts: Vec<(&str, String)>| -> Vec<(u16, Value)> {
        let barrier = std::sync::Barrier::new(puts.len());
        std::thread::scope(|scope| {
            let sent: Vec<_> = (puts.iter())
                .map(|(sub, name)| {
                    let (barrier, server, token) = (&barrier, &server, &acme.token);
                    scope.spawn(move || {
                        barrier.wait();
                        let answer = put_domain(server, sub, token, json!({"domain": name}));
                        (answer.status().as_u16(), json(answer))
                    })
                })
                .collect();
            sent.into_iter().map(|s| s.join().unwrap()).collect()
        })
    };
    let same = at_once(
        (0..8)
            .map(|_| (subs[0].as_str(), "one.example.com".into()))
            .collect(),
    );
    assert!(same.iter().all(|(status, _)| *status == 202), "{same:?}");
    let kept = json(domain_call(&server, Method::GET, &subs[0], &acme.token));
    for (_, answer) in &same {
        assert_eq!(answer["records"][1], kept["records"][1], "{same:?}");
    }
    let claims = at_once(
        (subs[1..].iter())
            .enumerate()
            .map(|(i, sub)| (sub.as_str(), format!("d{i}.example.com")))
            .collect(),
    );
    let made = claims.iter().filter(|(status, _)| *status == 202).count();
    assert_eq!(made, 1, "one more claim fits the bound of 2: {claims:?}");
    assert!(
        (claims.iter()).all(|(status, answer)| *status == 202
            || answer["type"]
                .as_str()
                .unwrap()
                .ends_with("/too-many-pending-domains")),
        "{claims:?}"
    );
}
