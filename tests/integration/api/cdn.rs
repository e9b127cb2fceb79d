//! Behind a CDN (docs/api.md, "Behind a CDN"): the purges a replica sends to the caches in front
//! of it when a service's documents change, and the caches' access log taken as fetch evidence
//! (`POST /fetch-log`, `registry fetch-log`).

use super::{publish_kids, register_service};
use registry_tests::server::{
    assert_problem, json, pointers, registry_binary, ServerOptions, TestServer,
};
use registry_tests::wait::within;
use reqwest::Method;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const TOKEN: &str = "log-shipper-secret-of-at-least-32-characters";

/// A cache that answers every request 200 and remembers each as `METHOD path host`.
pub(super) fn cache() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let log = log.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                loop {
                    let mut request = String::new();
                    if reader.read_line(&mut request).unwrap_or(0) == 0 {
                        return;
                    }
                    let mut host = String::new();
                    let mut length = 0usize;
                    loop {
                        let mut header = String::new();
                        reader.read_line(&mut header).unwrap();
                        let header = header.trim_end();
                        if header.is_empty() {
                            break;
                        }
                        let (name, value) = header.split_once(':').unwrap();
                        match name.to_ascii_lowercase().as_str() {
                            "host" => host = value.trim().to_owned(),
                            "content-length" => length = value.trim().parse().unwrap(),
                            _ => {}
                        }
                    }
                    let mut body = vec![0; length];
                    reader.read_exact(&mut body).unwrap();
                    let mut words = request.split_whitespace();
                    let (method, path) = (words.next().unwrap(), words.next().unwrap());
                    log.lock().unwrap().push(format!("{method} {path} {host}"));
                    stream
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                        .unwrap();
                }
            });
        }
    });
    (address, seen)
}

/// A cache that is down holds up no other: while its purges are retried (for up to a minute
/// each), the cache that is up gets every path at once.
#[test]
fn a_cache_that_is_down_holds_up_no_others_purges() {
    // A port nothing listens on (below the ephemeral range, so no outgoing connection takes
    // it meanwhile): every attempt there is refused, and retried.
    let down = format!(
        "http://127.0.0.1:{}",
        registry_testkit::free_port().unwrap()
    );
    let (up, seen) = cache();
    let server = TestServer::start_with(ServerOptions {
        env: vec![("REGISTRY_PURGE_URLS".into(), format!("{down},{up}"))],
        ..ServerOptions::default()
    });
    let acme = server.customer("acme", "business");
    let sub = register_service(&server, &acme, "api");
    publish_kids(&server, &acme.token, &sub, &["k1"]);
    let issuer = server.issuer(&sub);
    let authority = issuer.split_once("://").unwrap().1;
    let purged = within(Duration::from_secs(5), || seen.lock().unwrap().len() >= 5);
    let seen = seen.lock().unwrap().clone();
    assert!(
        purged,
        "the cache that is up waited for the one that is down: {seen:?}"
    );
    for path in [
        "/.well-known/openid-configuration",
        "/openid/v1/jwks",
        "/keys",
    ] {
        let line = format!("PURGE {path} {authority}");
        assert!(seen.contains(&line), "{line} in {seen:?}");
    }
}

#[test]
fn a_change_purges_every_public_path_of_its_issuer_from_every_cache_and_readiness_waits_for_it() {
    let (first, first_seen) = cache();
    let (second, second_seen) = cache();
    let server = TestServer::start_with(ServerOptions {
        env: vec![("REGISTRY_PURGE_URLS".into(), format!("{first},{second}"))],
        ..ServerOptions::default()
    });
    let acme = server.customer("acme", "business");
    let sub = register_service(&server, &acme, "api");
    publish_kids(&server, &acme.token, &sub, &["k1"]);
    let issuer = server.issuer(&sub);
    let authority = issuer.split_once("://").unwrap().1.to_owned();
    let expected: Vec<String> = [
        "/.well-known/openid-configuration",
        "/openid/v1/jwks",
        "/.well-known/jwks.json",
        "/keys",
        "/keys.json",
    ]
    .iter()
    .map(|path| format!("PURGE {path} {authority}"))
    .collect();
    let came = within(Duration::from_secs(10), || {
        first_seen.lock().unwrap().len() >= 5 && second_seen.lock().unwrap().len() >= 5
    });
    assert!(came, "purges never came: {first_seen:?} {second_seen:?}");
    for seen in [&first_seen, &second_seen] {
        let mut seen = seen.lock().unwrap().clone();
        seen.sort();
        let mut want = expected.clone();
        want.sort();
        assert_eq!(seen, want);
    }
    // A key published with no lead and no verifier is safe once the purge is recorded.
    server.advance_clock(5);
    let put = server
        .authed(Method::PUT, &format!("/services/{sub}/config"), &acme.token)
        .json(&json!({"openidConfiguration": super::cluster_discovery(),
            "jwks": {"keys": [super::rsa_key("k1"), super::rsa_key("k2")]},
            "rotationLeadSeconds": 0}))
        .send()
        .unwrap();
    assert_eq!(put.status(), 200);
    let mut answer = Value::Null;
    let safe = within(Duration::from_secs(10), || {
        let path = format!("/services/{sub}/keys/k2/readiness");
        answer = json(server.get(&path, &acme.token));
        if answer["safeToSign"] == true {
            return true;
        }
        assert_eq!(answer["pending"][0]["reason"], "purge", "{answer}");
        false
    });
    assert!(safe, "{answer}");
    let metrics = server.metrics_text();
    assert!(
        metrics.contains("registry_purges_total{result=\"purged\"} 20"),
        "{metrics}"
    );
}

/// A purge lost with the replica that was retrying it (stopped while the cache was down) is
/// sent by the next replica to start: the key it held back turns safe, not at the next change.
#[test]
fn a_purge_lost_with_a_stopped_replica_is_sent_by_the_next_to_start() {
    let down = format!(
        "http://127.0.0.1:{}",
        registry_testkit::free_port().unwrap()
    );
    let first = TestServer::start_with(ServerOptions {
        env: vec![("REGISTRY_PURGE_URLS".into(), down)],
        ..ServerOptions::default()
    });
    let acme = first.customer("acme", "business");
    let sub = register_service(&first, &acme, "api");
    let put = first
        .authed(Method::PUT, &format!("/services/{sub}/config"), &acme.token)
        .json(&json!({"openidConfiguration": super::cluster_discovery(),
            "jwks": {"keys": [super::rsa_key("k1")]}, "rotationLeadSeconds": 0}))
        .send()
        .unwrap();
    assert_eq!(put.status(), 200);
    let readiness = format!("/services/{sub}/keys/k1/readiness");
    let answer = json(first.get(&readiness, &acme.token));
    assert_eq!(answer["pending"][0]["reason"], "purge", "{answer}");
    let database_url = first.database_url.clone();
    drop(first);
    let (up, seen) = cache();
    let next = TestServer::start_with(ServerOptions {
        env: vec![("REGISTRY_PURGE_URLS".into(), up)],
        database_url: Some(database_url),
        ..ServerOptions::default()
    });
    let mut answer = Value::Null;
    let safe = within(Duration::from_secs(10), || {
        answer = json(next.get(&readiness, &acme.token));
        answer["safeToSign"] == true
    });
    assert!(safe, "{answer}");
    let authority = next.issuer(&sub).split_once("://").unwrap().1.to_owned();
    let line = format!("PURGE /openid/v1/jwks {authority}");
    assert!(seen.lock().unwrap().contains(&line), "{line}");
}

/// Documents a replica dropped from memory for room may still be in a cache: deleting them
/// purges them all the same, a configuration's and a service's alike.
#[test]
fn deleted_documents_are_purged_though_no_replica_holds_them_in_memory() {
    let (address, seen) = cache();
    let server = TestServer::start_with(ServerOptions {
        env: vec![
            ("REGISTRY_PURGE_URLS".into(), address),
            ("REGISTRY_HOSTING_CACHE_BYTES".into(), "2500".into()),
        ],
        ..ServerOptions::default()
    });
    let published: Vec<(registry_tests::server::Customer, String)> =
        ["one", "two", "three", "four"]
            .iter()
            .map(|tenant| {
                let customer = server.customer(tenant, "business");
                let subdomain = super::publish_api(&server, &customer);
                (customer, subdomain)
            })
            .collect();
    let held = server.metric("registry_hosted_issuers");
    assert!(held < 4, "{held} issuers held: none was dropped for room");
    let purged_with = |subdomain: &str| {
        let authority = server
            .issuer(subdomain)
            .split_once("://")
            .unwrap()
            .1
            .to_owned();
        let path = format!("PURGE /openid/v1/jwks {authority}");
        seen.lock()
            .unwrap()
            .iter()
            .filter(|line| **line == path)
            .count()
    };
    // Each publication was purged once.
    let once = within(Duration::from_secs(10), || {
        published.iter().all(|(_, sub)| purged_with(sub) == 1)
    });
    assert!(once, "{:?}", seen.lock().unwrap());
    for (i, (customer, subdomain)) in published.iter().enumerate() {
        let path = match i % 2 {
            0 => format!("/services/{subdomain}/config"),
            _ => format!("/services/{subdomain}"),
        };
        let response = server
            .authed(Method::DELETE, &path, &customer.token)
            .send()
            .unwrap();
        assert_eq!(response.status(), 204, "{path}");
    }
    let again = within(Duration::from_secs(10), || {
        published.iter().all(|(_, sub)| purged_with(sub) >= 2)
    });
    assert!(again, "{:?}", seen.lock().unwrap());
}

/// An anonymous service's documents leave the caches in front of the registry as it expires,
/// not at the reaper's next round (an hour away here): it was created after that round was
/// planned, and expires before it.
#[test]
fn an_anonymous_services_documents_are_purged_as_it_expires() {
    let (address, seen) = cache();
    let server = TestServer::start_with(ServerOptions {
        env: vec![
            ("REGISTRY_PURGE_URLS".into(), address),
            ("REGISTRY_TEST_REAP_EVERY_SECONDS".into(), "3600".into()),
        ],
        ..ServerOptions::default()
    });
    // Fifteen seconds to live: ample for the publication's purge to be done before.
    let created = (server.request(Method::POST, "/anonymous/services"))
        .json(&json!({"ttlHours": 15.0 / 3600.0}))
        .send()
        .unwrap();
    assert_eq!(created.status(), 201);
    let created = json(created);
    let (sub, secret) = (
        created["service"]["subdomain"].as_str().unwrap(),
        created["secret"].as_str().unwrap(),
    );
    let expires_at = time::OffsetDateTime::parse(
        created["expiresAt"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    publish_kids(&server, secret, sub, &["k1"]);
    let authority = server.issuer(sub).split_once("://").unwrap().1.to_owned();
    let line = format!("PURGE /openid/v1/jwks {authority}");
    let purges = || seen.lock().unwrap().iter().filter(|l| **l == line).count();
    let published = within(Duration::from_secs(10), || purges() >= 1);
    assert!(published, "{:?}", seen.lock().unwrap());
    // The purges before its expiry, then one more after it.
    let before = (expires_at - time::Duration::seconds(2)) - time::OffsetDateTime::now_utc();
    std::thread::sleep(before.try_into().unwrap_or_default());
    let before = purges();
    let expired = within(Duration::from_secs(30), || purges() > before);
    assert!(expired, "{:?}", seen.lock().unwrap());
    let gone = server
        .hosted(Method::GET, sub, "/openid/v1/jwks")
        .send()
        .unwrap();
    assert_eq!(gone.status(), 404);
}

/// A time a cache logs a fetch at: two minutes ago (lines more than ten minutes old are
/// skipped).
fn logged_at() -> time::OffsetDateTime {
    let now = time::OffsetDateTime::now_utc();
    now.replace_nanosecond(500_000_000).unwrap() - time::Duration::minutes(2)
}

fn rfc3339(at: time::OffsetDateTime) -> String {
    at.format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

fn log_line(host: &str, path: &str, status: u16, method: &str, agent: &str) -> String {
    json!({"time": rfc3339(logged_at()), "host": host, "path": path, "status": status,
        "method": method, "userAgent": agent})
    .to_string()
}

fn post_log(
    server: &TestServer,
    token: &str,
    content_type: &str,
    body: String,
) -> reqwest::blocking::Response {
    server
        .request(Method::POST, "/fetch-log")
        .bearer_auth(token)
        .header("content-type", content_type)
        .body(body)
        .send()
        .unwrap()
}

/// The agents of the key set's evidence once `agent` shows in it.
fn agents_once(server: &TestServer, token: &str, sub: &str, agent: &str) -> Vec<Value> {
    let (mut answer, mut agents) = (Value::Null, Vec::new());
    let counted = within(Duration::from_secs(30), || {
        answer = json(server.get(&format!("/services/{sub}/fetches"), token));
        agents = (answer["documents"][1]["agents"].as_array().cloned()).unwrap_or_default();
        agents.iter().any(|a| a["agent"] == agent)
    });
    assert!(counted, "{answer}");
    agents
}

#[test]
fn a_caches_access_log_counts_as_the_fetches_it_records() {
    let server = TestServer::start_with(ServerOptions {
        env: vec![
            ("REGISTRY_FETCH_LOG_TOKEN".into(), TOKEN.into()),
            ("REGISTRY_FETCH_FLUSH_SECONDS".into(), "1".into()),
            ("REGISTRY_TRUSTED_PROXIES".into(), "127.0.0.1/32".into()),
        ],
        ..ServerOptions::default()
    });
    let acme = server.customer("acme", "business");
    let sub = register_service(&server, &acme, "api");
    publish_kids(&server, &acme.token, &sub, &["k1"]);
    let host = server.issuer(&sub).split_once("://").unwrap().1.to_owned();

    // A fetch that reached the registry from the (trusted) cache is not counted directly: the
    // cache's log will say it.
    let direct = server
        .hosted(Method::GET, &sub, "/openid/v1/jwks")
        .header("user-agent", "direct")
        .send()
        .unwrap();
    assert_eq!(direct.status(), 200);

    let lines = [
        log_line(&host, "/openid/v1/jwks", 200, "GET", "aws-sts"),
        log_line(&host, "/keys.json", 304, "HEAD", "gcp-sts"),
        log_line(&host, "/openid/v1/jwks", 200, "POST", "aws-sts"),
        log_line(
            "elsewhere.example",
            "/openid/v1/jwks",
            200,
            "GET",
            "aws-sts",
        ),
        log_line(&host, "/openid/v1/jwks", 404, "GET", "aws-sts"),
    ];
    let answer = post_log(
        &server,
        TOKEN,
        "application/x-ndjson",
        lines.join("\n") + "\n",
    );
    assert_eq!(answer.status(), 200);
    assert_eq!(json(answer), json!({"accepted": 2, "skipped": 3}));
    let agents = agents_once(&server, &acme.token, &sub, "gcp-sts");
    let names: Vec<&str> = agents
        .iter()
        .map(|a| a["agent"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"aws-sts") && !names.contains(&"direct"),
        "{names:?}"
    );
    let aws = agents.iter().find(|a| a["agent"] == "aws-sts").unwrap();
    let counted_at = time::OffsetDateTime::parse(
        aws["lastFetchedAt"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    assert_eq!(counted_at.nanosecond(), 500_000_000, "counted at its time");
    assert!(
        (logged_at() - counted_at).abs() < time::Duration::minutes(1),
        "counted at its time: {counted_at}"
    );

    // A malformed line: 400 naming it, and nothing of the batch counted.
    let body = format!(
        "{}\n{{\"time\": \"soon\"}}\n",
        log_line(&host, "/keys", 200, "GET", "azure")
    );
    let refused = post_log(&server, TOKEN, "application/x-ndjson", body);
    let problem = assert_problem(refused, 400, "validation-failed");
    assert_eq!(pointers(&problem), ["/1"]);
    assert!(problem.to_string().contains("line 2"), "{problem}");
    // Members a log format adds are not read: the line counts.
    let mut extra: Value =
        serde_json::from_str(&log_line(&host, "/keys", 200, "GET", "fastly")).unwrap();
    extra["bytes"] = json!(1234);
    let answer = post_log(&server, TOKEN, "application/x-ndjson", extra.to_string());
    assert_eq!(json(answer), json!({"accepted": 1, "skipped": 0}));
    // The wrong token, the wrong type, too much.
    let line = log_line(&host, "/keys", 200, "GET", "azure");
    assert_problem(
        post_log(&server, "nope", "application/x-ndjson", line.clone()),
        401,
        "unauthorized",
    );
    let problem = assert_problem(
        post_log(&server, TOKEN, "application/json", line.clone()),
        415,
        "unsupported-media-type",
    );
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("application/x-ndjson"),
        "the type it reads: {problem}"
    );
    // Up to 1 MiB, whatever the general body limit (64 KiB here); more is a 413.
    let bulk = log_line(&host, "/keys", 200, "GET", "bulk");
    let lines_of = |bytes: usize| (bulk.clone() + "\n").repeat(bytes / (bulk.len() + 1));
    let answer = post_log(&server, TOKEN, "application/x-ndjson", lines_of(999_900));
    assert_eq!(answer.status(), 200);
    assert_problem(
        post_log(&server, TOKEN, "application/x-ndjson", lines_of(1_100_000)),
        413,
        "payload-too-large",
    );
    // Lines dated too far from the batch's arrival are skipped: a line of 2031 made a key
    // nobody fetched safe.
    let dated = |at: time::OffsetDateTime| {
        json!({"time": rfc3339(at), "host": host, "path": "/openid/v1/jwks", "status": 200,
            "method": "GET", "userAgent": "from-another-time"})
        .to_string()
    };
    let now = time::OffsetDateTime::now_utc();
    let body = [
        dated(now + time::Duration::days(5 * 365)),
        dated(now - time::Duration::minutes(11)),
        dated(now + time::Duration::minutes(2)),
        dated(now - time::Duration::minutes(9)),
    ]
    .join("\n");
    let answer = post_log(&server, TOKEN, "application/x-ndjson", body);
    assert_eq!(json(answer), json!({"accepted": 1, "skipped": 3}));

    // `registry fetch-log` ships stdin in batches, one JSON line per batch.
    let mut shipper = std::process::Command::new(registry_binary())
        .args(["fetch-log", "--api-url", &server.base])
        .env_clear()
        .env("REGISTRY_FETCH_LOG_TOKEN", TOKEN)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = shipper.stdin.take().unwrap();
    for agent in ["azure", "azure", "oci"] {
        writeln!(
            stdin,
            "{}",
            log_line(&host, "/openid/v1/jwks", 200, "GET", agent)
        )
        .unwrap();
    }
    drop(stdin);
    let output = shipper.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let shipped: Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    assert_eq!(shipped, json!({"lines": 3, "accepted": 3, "skipped": 0}));
    let agents = agents_once(&server, &acme.token, &sub, "oci");
    let azure = agents.iter().find(|a| a["agent"] == "azure").unwrap();
    assert_eq!(azure["count"], 2);
    // A batch larger than the endpoint takes is a usage error, not batches refused (413).
    let too_large = std::process::Command::new(registry_binary())
        .args([
            "fetch-log",
            "--api-url",
            &server.base,
            "--batch-bytes",
            "1048577",
        ])
        .env_clear()
        .env("REGISTRY_FETCH_LOG_TOKEN", TOKEN)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&too_large.stderr);
    assert_eq!(too_large.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("1024..=1048576"), "{stderr}");
}

/// Two lines of one batch in two clock hours are counted each in its own hour (a replica's
/// counts of one flush went to the hour of the last fetch), so that an agent that fetched in
/// two hours is a verifier of the next key.
#[test]
fn a_batch_across_the_hour_counts_each_line_in_its_hour() {
    let server = TestServer::start_with(ServerOptions {
        env: vec![
            ("REGISTRY_FETCH_LOG_TOKEN".into(), TOKEN.into()),
            ("REGISTRY_FETCH_FLUSH_SECONDS".into(), "1".into()),
        ],
        ..ServerOptions::default()
    });
    let acme = server.customer("acme", "business");
    let sub = register_service(&server, &acme, "api");
    publish_kids(&server, &acme.token, &sub, &["k1"]);
    let host = server.issuer(&sub).split_once("://").unwrap().1.to_owned();
    // The server's clock five minutes past the next hour.
    let now = time::OffsetDateTime::now_utc();
    let ahead = 3_600 - now.unix_timestamp().rem_euclid(3_600) + 300;
    server.advance_clock(ahead);
    let arrival = now + time::Duration::seconds(ahead);
    let line = |minutes_ago: i64| {
        json!({"time": rfc3339(arrival - time::Duration::minutes(minutes_ago)), "host": host,
            "path": "/openid/v1/jwks", "status": 200, "method": "GET", "userAgent": "aws-sts",
            "clientAddress": "203.0.113.7"})
        .to_string()
    };
    // 7 minutes ago is the hour before; 2 minutes ago, this one.
    let body = [line(7), line(2)].join("\n");
    let answer = post_log(&server, TOKEN, "application/x-ndjson", body);
    assert_eq!(json(answer), json!({"accepted": 2, "skipped": 0}));
    let mut history = Value::Null;
    let in_two = within(Duration::from_secs(30), || {
        history = json(server.get(&format!("/services/{sub}/fetches/history"), &acme.token));
        (history["agents"].as_array().unwrap().iter())
            .find(|a| a["agent"] == "aws-sts")
            .is_some_and(|a| a["hours"].as_array().unwrap().len() == 2)
    });
    assert!(in_two, "{history}");
    server.advance_clock(1);
    publish_kids(&server, &acme.token, &sub, &["k1", "k2"]);
    let readiness = json(server.get(&format!("/services/{sub}/keys/k2/readiness"), &acme.token));
    assert_eq!(readiness["verifiers"][0]["agent"], "aws-sts", "{readiness}");
}

/// The fourth security review's probe, in one batch (so in one flush of the replica's counts):
/// a thousand one-off agents between two frequent ones and a third after them. The frequent
/// ones are listed with their own fetches, the flood's past the bound are `other`, and no agent
/// is listed with a fetch it did not make.
#[test]
fn a_flood_of_agents_is_the_others_and_no_agent_is_given_fetches_it_did_not_make() {
    let server = TestServer::start_with(ServerOptions {
        env: vec![("REGISTRY_FETCH_LOG_TOKEN".into(), TOKEN.into())],
        ..ServerOptions::default()
    });
    let acme = server.customer("acme", "business");
    let sub = register_service(&server, &acme, "api");
    publish_kids(&server, &acme.token, &sub, &["k1"]);
    let host = server.issuer(&sub).split_once("://").unwrap().1.to_owned();
    let lines_of = |agent: &str, times: usize| {
        vec![log_line(&host, "/openid/v1/jwks", 200, "GET", agent); times]
    };
    let mut lines = [lines_of("top A", 100), lines_of("top B", 50)].concat();
    lines.extend((0..1_000).map(|i| log_line(&host, "/keys", 200, "GET", &format!("single {i}"))));
    lines.extend(lines_of("top C", 20));
    let answer = post_log(&server, TOKEN, "application/x-ndjson", lines.join("\n"));
    assert_eq!(json(answer), json!({"accepted": 1_170, "skipped": 0}));
    let agents = agents_once(&server, &acme.token, &sub, "top C");
    let count = |agent: &str| {
        let listed = agents.iter().find(|a| a["agent"] == agent);
        listed.map_or(0, |a| a["count"].as_u64().unwrap())
    };
    assert_eq!(
        (count("top A"), count("top B"), count("top C")),
        (100, 50, 20),
        "{agents:?}"
    );
    assert!(count("other") > 900, "{agents:?}");
    let mut flood = (agents.iter()).filter(|a| a["agent"].as_str().unwrap().starts_with("single"));
    assert!(flood.all(|a| a["count"] == 1), "{agents:?}");
    assert_eq!(agents.len(), 10, "the ten most frequent");
}

/// The per-address limit on failed authentications never refuses the fetch-log token this
/// replica accepted within the last minute, as it never refuses an account's: wrong tokens
/// from the shipper's address (a neighbour behind the same NAT) cannot stop the evidence.
#[test]
fn failures_from_its_address_do_not_lock_out_a_working_shipper() {
    let server = TestServer::start_with(ServerOptions {
        env: vec![
            ("REGISTRY_FETCH_LOG_TOKEN".into(), TOKEN.into()),
            ("REGISTRY_AUTH_FAILURES_PER_MINUTE".into(), "3".into()),
        ],
        ..ServerOptions::default()
    });
    let ship = |token: &str| post_log(&server, token, "application/x-ndjson", String::new());
    assert_eq!(ship(TOKEN).status(), 200);
    let wrong = "x".repeat(TOKEN.len());
    let statuses: Vec<u16> = (0..5).map(|_| ship(&wrong).status().as_u16()).collect();
    assert_eq!(statuses, [401, 401, 401, 429, 429]);
    assert_eq!(ship(TOKEN).status(), 200, "the working shipper locked out");
    // The limit still holds for what it has not seen work.
    assert_eq!(ship(&wrong).status(), 429);
}

#[test]
fn without_its_token_the_fetch_log_is_not_served() {
    let server = TestServer::start();
    let response = post_log(&server, TOKEN, "application/x-ndjson", "{}".into());
    assert_problem(response, 404, "not-found");
    // Nor does another method tell that it would be (a 405 would).
    for method in [Method::GET, Method::PUT, Method::DELETE] {
        let response = server.request(method.clone(), "/fetch-log").send().unwrap();
        assert_problem(response, 404, "not-found");
    }
    // With a token, the other methods are a 405 naming POST.
    let served = TestServer::start_with(ServerOptions {
        env: vec![("REGISTRY_FETCH_LOG_TOKEN".into(), TOKEN.into())],
        ..ServerOptions::default()
    });
    let response = served.request(Method::GET, "/fetch-log").send().unwrap();
    assert_eq!(response.headers()["allow"], "POST");
    assert_problem(response, 405, "method-not-allowed");
}
