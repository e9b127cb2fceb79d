//! Fetch evidence (docs/api.md, "Fetch evidence"): `GET /services/{s}/fetches` sums the public
//! fetches every replica counted, within 60 s (here 1 s: `REGISTRY_FETCH_FLUSH_SECONDS`).

use super::{publish_api, publish_kids, register_service, upload};
use registry_tests::server::{assert_problem, json, ServerOptions, TestServer};
use registry_tests::wait::within;
use reqwest::Method;
use serde_json::{json, Value};
use std::time::Duration;

const JWKS: &str = "/openid/v1/jwks";
const DISCOVERY: &str = "/.well-known/openid-configuration";

fn flushing_every_second(database_url: Option<String>) -> TestServer {
    TestServer::start_with(ServerOptions {
        env: vec![("REGISTRY_FETCH_FLUSH_SECONDS".into(), "1".into())],
        database_url,
        ..ServerOptions::default()
    })
}

/// A public GET by `agent`; its status.
fn fetch(server: &TestServer, sub: &str, path: &str, agent: &str, etag: Option<&str>) -> u16 {
    let mut request = server
        .hosted(Method::GET, sub, path)
        .header("user-agent", agent);
    if let Some(etag) = etag {
        request = request.header("if-none-match", etag);
    }
    let response = request.send();
    response
        .unwrap_or_else(|e| panic!("GET {path} by {agent:?}: {e:?}"))
        .status()
        .as_u16()
}

/// The document at `path` of the evidence.
fn document(answer: &Value, path: &str) -> Value {
    answer["documents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["path"] == path)
        .unwrap_or_else(|| panic!("no {path} in {answer}"))
        .clone()
}

/// The evidence once `ready` holds of it (within 60 s: docs/api.md, "Fetch evidence").
fn evidence_once(
    server: &TestServer,
    token: &str,
    sub: &str,
    ready: impl Fn(&Value) -> bool,
) -> Value {
    let mut answer = Value::Null;
    let in_time = within(Duration::from_secs(60), || {
        let response = server.get(&format!("/services/{sub}/fetches"), token);
        assert_eq!(response.status(), 200);
        answer = json(response);
        ready(&answer)
    });
    assert!(in_time, "{answer}");
    answer
}

/// Twelve agents, all from this host: the ten most frequent are listed with their counts (the
/// bound on one network's agents only applies to an hour that is full).
#[test]
fn the_ten_most_frequent_agents_are_listed_though_they_share_one_network() {
    let server = flushing_every_second(None);
    let acme = server.customer("acme", "business");
    let sub = publish_api(&server, &acme);
    for i in 0..12_u16 {
        for _ in 0..(13 - i) {
            assert_eq!(
                fetch(&server, &sub, JWKS, &format!("agent {i:02}"), None),
                200
            );
        }
    }
    let answer = evidence_once(&server, &acme.token, &sub, |answer| {
        document(answer, JWKS)["fetches24h"] == (2..=13).sum::<u64>()
    });
    let jwks = document(&answer, JWKS);
    let listed: Vec<(String, u64)> = (jwks["agents"].as_array().unwrap().iter())
        .map(|a| {
            (
                a["agent"].as_str().unwrap().to_owned(),
                a["count"].as_u64().unwrap(),
            )
        })
        .collect();
    let expected: Vec<(String, u64)> = (0..10_u16)
        .map(|i| (format!("agent {i:02}"), u64::from(13 - i)))
        .collect();
    assert_eq!(listed, expected, "{answer}");
}

fn agent_count(doc: &Value, agent: &str) -> u64 {
    doc["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["agent"] == agent)
        .map_or(0, |a| a["count"].as_u64().unwrap())
}

#[test]
fn every_replicas_fetches_are_summed_and_say_whether_a_change_was_picked_up() {
    let a = flushing_every_second(None);
    let b = flushing_every_second(Some(a.database_url.clone()));
    let acme = a.customer("acme", "business");
    let sub = publish_api(&a, &acme);

    let before = json(a.get(&format!("/services/{sub}/fetches"), &acme.token));
    let jwks = document(&before, JWKS);
    assert_eq!(jwks["fetches24h"], 0);
    assert_eq!(jwks["lastFetchedAt"], Value::Null);
    assert_eq!(jwks["fetchedSinceChange"], false);
    assert_eq!(jwks["agents"], json!([]));
    let etag = jwks["currentETag"].as_str().unwrap().to_owned();
    assert!(etag.starts_with('"'), "{before}");
    assert!(document(&before, DISCOVERY)["lastChangedAt"].is_string());

    for _ in 0..3 {
        assert_eq!(fetch(&a, &sub, JWKS, "AWS STS", None), 200);
    }
    // On the other replica (once it serves the documents), and a 304.
    assert!(
        within(Duration::from_secs(10), || {
            fetch(&b, &sub, "/keys", "Google", None) == 200
        }),
        "B never served the key set"
    );
    assert_eq!(fetch(&b, &sub, JWKS, "Google", Some(&etag)), 304);
    assert_eq!(fetch(&b, &sub, DISCOVERY, "Azure\tAD", None), 200);
    let long = "x".repeat(300);
    assert_eq!(fetch(&a, &sub, DISCOVERY, &long, None), 200);
    // A careless client's token as its agent: the owner reads agents, so the token is not kept.
    let careless = format!("deploy-bot {}", acme.token);
    assert_eq!(fetch(&a, &sub, DISCOVERY, &careless, None), 200);

    let answer = evidence_once(&b, &acme.token, &sub, |answer| {
        document(answer, JWKS)["fetches24h"] == 5 && document(answer, DISCOVERY)["fetches24h"] == 3
    });
    let jwks = document(&answer, JWKS);
    assert_eq!(jwks["fetchedSinceChange"], true, "{answer}");
    assert_eq!(jwks["currentETag"], etag.as_str());
    assert_eq!(agent_count(&jwks, "AWS STS"), 3);
    assert_eq!(agent_count(&jwks, "Google"), 2, "a 200 and a 304");
    assert_eq!(jwks["agents"][0]["agent"], "AWS STS", "most frequent first");
    assert!(jwks["agents"][0]["lastFetchedAt"].is_string());
    let discovery = document(&answer, DISCOVERY);
    assert_eq!(
        agent_count(&discovery, "AzureAD"),
        1,
        "control characters removed"
    );
    assert_eq!(agent_count(&discovery, &"x".repeat(100)), 1, "cut to 100");
    assert_eq!(
        agent_count(&discovery, "deploy-bot rgst_[redacted]"),
        1,
        "{discovery}"
    );
    assert!(!answer.to_string().contains(&acme.token), "{answer}");

    // A new upload: nothing fetched it yet, on either replica.
    publish_kids(&a, &acme.token, &sub, &["k1", "k2"]);
    let changed = evidence_once(&a, &acme.token, &sub, |answer| {
        document(answer, JWKS)["currentETag"] != etag.as_str()
    });
    assert_eq!(
        document(&changed, JWKS)["fetchedSinceChange"],
        false,
        "{changed}"
    );
    assert_eq!(document(&changed, JWKS)["fetches24h"], 5);
    assert!(
        within(Duration::from_secs(10), || {
            fetch(&b, &sub, JWKS, "AWS STS", Some(&etag)) == 200
        }),
        "B serves the new set"
    );
    let picked_up = evidence_once(&a, &acme.token, &sub, |answer| {
        document(answer, JWKS)["fetchedSinceChange"] == true
    });
    // The upload rotated keys only: the discovery document is as it was, with its date, and
    // its fetches before the rotation are still fetches since its last change.
    let discovery = document(&picked_up, DISCOVERY);
    let discovery_before = document(&before, DISCOVERY);
    assert_eq!(discovery["currentETag"], discovery_before["currentETag"]);
    assert_eq!(
        discovery["lastChangedAt"],
        discovery_before["lastChangedAt"]
    );
    assert_eq!(discovery["fetchedSinceChange"], true, "{picked_up}");
    let jwks_changed_at = document(&picked_up, JWKS)["lastChangedAt"].clone();
    assert_ne!(jwks_changed_at, document(&before, JWKS)["lastChangedAt"]);

    // Then only the discovery document changes: the key set keeps its date and its evidence,
    // on both replicas.
    let mut edited = upload(&["k1", "k2"]);
    edited["openidConfiguration"]["claims_supported"] = json!(["sub", "aud"]);
    let put = (a.authed(Method::PUT, &format!("/services/{sub}/config"), &acme.token))
        .json(&edited)
        .send()
        .unwrap();
    assert_eq!(put.status(), 200);
    for server in [&a, &b] {
        let answer = evidence_once(server, &acme.token, &sub, |answer| {
            document(answer, DISCOVERY)["currentETag"] != discovery["currentETag"]
        });
        let (edited, jwks) = (document(&answer, DISCOVERY), document(&answer, JWKS));
        assert_eq!(edited["fetchedSinceChange"], false, "{answer}");
        assert_ne!(edited["lastChangedAt"], discovery_before["lastChangedAt"]);
        assert_eq!(jwks["lastChangedAt"], jwks_changed_at, "{answer}");
        assert_eq!(jwks["fetchedSinceChange"], true, "{answer}");
    }
}

#[test]
fn anonymous_secrets_see_their_own_services_evidence_and_no_other() {
    let server = flushing_every_second(None);
    let acme = server.customer("acme", "business");
    let sub = publish_api(&server, &acme);
    let (anon, secret) = server.anonymous_service();
    let (anon, secret) = (anon.as_str(), secret.as_str());
    let answer = json(server.get(&format!("/services/{anon}/fetches"), secret));
    let jwks = document(&answer, JWKS);
    assert_eq!(
        jwks["currentETag"],
        Value::Null,
        "nothing published: {answer}"
    );
    assert_eq!(jwks["fetchedSinceChange"], false);
    let path = format!("/services/{sub}/fetches");
    assert_eq!(server.get(&path, secret).status(), 404);
    let globex = server.customer("globex", "business");
    assert_eq!(server.get(&path, &globex.token).status(), 404);
    let anon_path = format!("/services/{anon}/fetches");
    assert_eq!(server.get(&anon_path, &acme.token).status(), 404);
    // The fetch history and dismissing a verifier are registered customers' calls.
    let history = server.get(&format!("/services/{anon}/fetches/history"), secret);
    let problem = assert_problem(history, 403, "forbidden");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("registered services"),
        "{problem}"
    );
    let dismiss = server
        .authed(
            Method::DELETE,
            &format!("/services/{anon}/keys/k1/readiness/verifiers/AWS"),
            secret,
        )
        .send()
        .unwrap();
    assert_problem(dismiss, 403, "forbidden");
    assert_eq!(
        server.request(Method::GET, &path).send().unwrap().status(),
        401
    );
    let post = server
        .authed(Method::POST, &path, &acme.token)
        .send()
        .unwrap();
    assert_eq!(post.status(), 405);
}

#[test]
fn the_history_and_the_list_say_who_fetched_the_key_set_and_when() {
    let server = flushing_every_second(None);
    let acme = server.customer("acme", "business");
    let sub = publish_api(&server, &acme);
    let quiet = register_service(&server, &acme, "quiet");
    let history_path = format!("/services/{sub}/fetches/history");
    let empty = json(server.get(&history_path, &acme.token));
    assert_eq!(empty["agents"], json!([]), "{empty}");

    for _ in 0..2 {
        assert_eq!(fetch(&server, &sub, JWKS, "AWS STS", None), 200);
    }
    assert_eq!(fetch(&server, &sub, "/keys", "Google", None), 200);
    // Not the key set: no verifier's fetch of the keys.
    assert_eq!(fetch(&server, &sub, DISCOVERY, "curl", None), 200);
    let mut history = Value::Null;
    let counted = within(Duration::from_secs(60), || {
        history = json(server.get(&history_path, &acme.token));
        history["agents"].as_array().unwrap().len() == 2
    });
    assert!(counted, "{history}");
    let agents = history["agents"].as_array().unwrap();
    assert_eq!(
        agents[0]["agent"], "AWS STS",
        "most active first: {history}"
    );
    assert_eq!(agents[0]["count"], 2);
    assert_eq!(agents[1]["agent"], "Google");
    let hours = agents[0]["hours"].as_array().unwrap();
    assert_eq!(hours.len(), 1, "{history}");
    assert_eq!(hours[0]["count"], 2);
    assert!(hours[0]["hour"].as_str().unwrap().ends_with(":00:00Z"));
    assert_eq!(hours[0]["lastFetchedAt"], agents[0]["lastFetchedAt"]);
    let since = history["since"].as_str().unwrap();
    assert!(since.ends_with(":00:00Z") && since < hours[0]["hour"].as_str().unwrap());

    // The list, in one request: the last fetch, the keys, nothing else on.
    let listed = json(server.get("/services?include=status", &acme.token));
    let status = |sub: &str| {
        (listed.as_array().unwrap().iter())
            .find(|s| s["subdomain"] == sub)
            .unwrap_or_else(|| panic!("no {sub} in {listed}"))["status"]
            .clone()
    };
    let api = status(&sub);
    assert_eq!(api["published"], true, "{listed}");
    assert_eq!(api["keyCount"], 1);
    assert!(api["lastFetchedAt"].is_string(), "{listed}");
    assert_eq!(
        (&api["domain"], &api["signing"]),
        (&Value::Null, &Value::Null)
    );
    assert_eq!(
        status(&quiet),
        json!({"published": false, "keyCount": 0, "lastFetchedAt": null, "domain": null,
               "signing": null})
    );
    // An account that may list the services but not read their configuration: no status.
    let lister = super::create_account(
        &server,
        &acme,
        "lister",
        json!({"$schema": "https://registry.example/schemas/service-account-policy/v2.json",
               "kind": "static", "services": ["*"], "actions": ["services:read"]}),
    );
    let lister = lister["token"].as_str().unwrap();
    let listed = json(server.get("/services?include=status", lister));
    assert_eq!(listed.as_array().unwrap().len(), 2, "{listed}");
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["status"].is_null()),
        "{listed}"
    );
    let plain = json(server.get("/services", &acme.token));
    assert!(plain[0].get("status").is_none(), "only when asked: {plain}");
    let wrong = server.get("/services?include=keys", &acme.token);
    assert_eq!(wrong.status(), 400);
    assert!(wrong.text().unwrap().contains("query parameter include"));
}
