//! Key readiness (docs/api.md, "Key readiness"): a new key is safe to sign with once its lead time
//! is over and every verifier that fetched the key set in the 7 days before has fetched it since;
//! `registry keys readiness` and `registry keys wait` read it from the command line.

use super::{cluster_discovery, register_service, rsa_key};
use registry_tests::server::{
    assert_problem, json, pointers, run_registry, ServerOptions, TestServer,
};
use registry_tests::wait::within;
use reqwest::Method;
use serde_json::{json, Value};
use std::time::Duration;

fn server() -> TestServer {
    TestServer::start_with(ServerOptions {
        env: vec![("REGISTRY_FETCH_FLUSH_SECONDS".into(), "1".into())],
        ..ServerOptions::default()
    })
}

fn put(server: &TestServer, token: &str, sub: &str, kids: &[&str], lead: Option<Value>) -> u16 {
    let mut body = json!({"openidConfiguration": cluster_discovery(),
        "jwks": {"keys": kids.iter().map(|k| rsa_key(k)).collect::<Vec<_>>()}});
    if let Some(lead) = lead {
        body["rotationLeadSeconds"] = lead;
    }
    let response = server
        .authed(Method::PUT, &format!("/services/{sub}/config"), token)
        .json(&body)
        .send()
        .unwrap();
    response.status().as_u16()
}

fn fetch_keys(server: &TestServer, sub: &str, agent: &str) {
    let response = server
        .hosted(Method::GET, sub, "/openid/v1/jwks")
        .header("user-agent", agent)
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
}

/// `DELETE …/keys/{kid}/readiness/verifiers/{agent}` (an agent of plain characters).
fn dismiss(
    server: &TestServer,
    token: &str,
    sub: &str,
    kid: &str,
    agent: &str,
) -> reqwest::blocking::Response {
    let path = format!("/services/{sub}/keys/{kid}/readiness/verifiers/{agent}");
    server.authed(Method::DELETE, &path, token).send().unwrap()
}

fn readiness(server: &TestServer, token: &str, sub: &str, kid: &str) -> Value {
    let response = server.get(&format!("/services/{sub}/keys/{kid}/readiness"), token);
    assert_eq!(response.status(), 200);
    json(response)
}

/// The readiness once `ready` holds of it (fetches reach the database within a second here).
fn readiness_once(
    server: &TestServer,
    token: &str,
    sub: &str,
    kid: &str,
    ready: impl Fn(&Value) -> bool,
) -> Value {
    let mut answer = Value::Null;
    let in_time = within(Duration::from_secs(30), || {
        answer = readiness(server, token, sub, kid);
        ready(&answer)
    });
    assert!(in_time, "{answer}");
    answer
}

/// Waits until the service's fetch evidence (flushed every second here) shows `agent`.
fn wait_for_agent(server: &TestServer, token: &str, sub: &str, agent: &str) {
    let counted = within(Duration::from_secs(30), || {
        let fetches = server.get(&format!("/services/{sub}/fetches"), token);
        fetches.text().unwrap().contains(agent)
    });
    assert!(counted, "fetches of {agent} never counted");
}

/// Waits until the key set's fetch history (flushed every second here) shows each of `agents`
/// fetching in `hours` distinct hours.
pub(super) fn wait_for_hours(
    server: &TestServer,
    token: &str,
    sub: &str,
    agents: &[&str],
    hours: usize,
) {
    let mut history = Value::Null;
    let counted = within(Duration::from_secs(30), || {
        history = json(server.get(&format!("/services/{sub}/fetches/history"), token));
        let fetched_in = |agent: &str| {
            (history["agents"].as_array().unwrap().iter())
                .find(|a| a["agent"] == agent)
                .map_or(0, |a| a["hours"].as_array().unwrap().len())
        };
        agents.iter().all(|agent| fetched_in(agent) == hours)
    });
    assert!(
        counted,
        "{agents:?} never counted in {hours} hours: {history}"
    );
}

/// A client whose connections come from `address` (on loopback: another /24 than 127.0.0.1's).
fn client_from(address: &str) -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .local_address(address.parse::<std::net::IpAddr>().unwrap())
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// What holds the key back: `lead`, and each verifier's agent.
fn pending(answer: &Value) -> Vec<String> {
    let mut reasons: Vec<String> = (answer["pending"].as_array().unwrap().iter())
        .map(|p| match p["agent"].as_str() {
            Some(agent) => agent.to_owned(),
            None => p["reason"].as_str().unwrap().to_owned(),
        })
        .collect();
    reasons.sort();
    reasons
}

#[test]
fn a_new_key_is_safe_once_its_lead_is_over_and_every_verifier_fetched_it() {
    let server = server();
    let acme = server.customer("acme", "business");
    let sub = register_service(&server, &acme, "api");
    assert_eq!(put(&server, &acme.token, &sub, &["k1"], None), 200);
    // Two verifiers know the key set with k1 only: each fetched it in two distinct hours.
    fetch_keys(&server, &sub, "aws-sts");
    fetch_keys(&server, &sub, "gcp-sts");
    // An agent seen in one hour only is no verifier.
    fetch_keys(&server, &sub, "one-off");
    // Each flush counts at its last fetch's hour: the first hour's are flushed first.
    wait_for_agent(&server, &acme.token, &sub, "one-off");
    server.advance_clock(3600);
    fetch_keys(&server, &sub, "aws-sts");
    fetch_keys(&server, &sub, "gcp-sts");
    wait_for_hours(&server, &acme.token, &sub, &["aws-sts", "gcp-sts"], 2);
    server.advance_clock(5);

    // A lead out of range is refused, naming it.
    let refused = server
        .authed(Method::PUT, &format!("/services/{sub}/config"), &acme.token)
        .json(&json!({"openidConfiguration": cluster_discovery(),
            "jwks": {"keys": [rsa_key("k1"), rsa_key("k2")]}, "rotationLeadSeconds": 604_801}))
        .send()
        .unwrap();
    assert_eq!(
        pointers(&assert_problem(refused, 400, "validation-failed")),
        ["/rotationLeadSeconds"]
    );

    // k2 is published beside k1, with a lead of a minute.
    assert_eq!(
        put(&server, &acme.token, &sub, &["k1", "k2"], Some(json!(60))),
        200
    );
    let answer = readiness(&server, &acme.token, &sub, "k2");
    assert_eq!(answer["safeToSign"], false, "{answer}");
    assert_eq!(answer["safeToSignAt"], Value::Null);
    assert_eq!(answer["leadSeconds"], 60);
    assert_eq!(answer["state"], "current");
    assert_eq!(pending(&answer), ["aws-sts", "gcp-sts", "lead"]);
    let verifiers = answer["verifiers"].as_array().unwrap();
    assert_eq!(verifiers.len(), 2);
    assert!(verifiers.iter().all(|v| v["fetchedSinceKey"] == false));
    assert!(
        verifiers
            .iter()
            .all(|v| v["networks"] == json!(["127.0.0.0/24"])),
        "{answer}"
    );
    // k1 keeps the default lead of its upload.
    assert_eq!(
        readiness(&server, &acme.token, &sub, "k1")["leadSeconds"],
        600
    );

    // The lead ends; aws fetches the new set, then gcp.
    server.advance_clock(61);
    let answer = readiness(&server, &acme.token, &sub, "k2");
    assert_eq!(pending(&answer), ["aws-sts", "gcp-sts"]);
    fetch_keys(&server, &sub, "aws-sts");
    let answer = readiness_once(&server, &acme.token, &sub, "k2", |a| {
        pending(a) == ["gcp-sts"]
    });
    assert_eq!(answer["safeToSign"], false);
    fetch_keys(&server, &sub, "gcp-sts");
    let answer = readiness_once(&server, &acme.token, &sub, "k2", |a| {
        a["safeToSign"] == true
    });
    assert_eq!(answer["pending"], json!([]));
    assert!(answer["safeToSignAt"].is_string(), "{answer}");
    let verifiers = answer["verifiers"].as_array().unwrap();
    assert!(verifiers.iter().all(|v| v["fetchedSinceKey"] == true));

    // From the command line: the table, and `wait`, which returns at once for a safe key...
    let env = [
        ("REGISTRY_API_URL", server.base.as_str()),
        ("REGISTRY_TOKEN", acme.token.as_str()),
    ];
    let (code, stdout, stderr) = run_registry(&["keys", "readiness", &sub, "k2"], &env);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("safeToSign: true"), "{stdout}");
    assert!(stdout.contains("aws-sts"), "{stdout}");
    let wait = |kid: &str, timeout: &str| {
        run_registry(
            &[
                "keys",
                "wait",
                "--service",
                &sub,
                "--kid",
                kid,
                "--timeout",
                timeout,
            ],
            &env,
        )
    };
    let (code, stdout, stderr) = wait("k2", "5s");
    assert_eq!(code, Some(0), "{stderr}");
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{stdout}");
    assert_eq!(lines[0]["safeToSign"], true);
    // ...gives up at its timeout on a key still held back, saying by what (exit 1)...
    assert_eq!(put(&server, &acme.token, &sub, &["k2", "k3"], None), 200);
    let (code, stdout, stderr) = wait("k3", "2s");
    assert_eq!(code, Some(1), "{stdout} {stderr}");
    let last: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last["safeToSign"], false);
    assert!(
        stderr.contains("not safe to sign with") && stderr.contains("lead"),
        "{stderr}"
    );
    // ...and says what the API refused (exit 2); so does a timeout that is no duration.
    let (code, _, stderr) = wait("nope", "2s");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("404"), "{stderr}");
    let (code, _, stderr) = wait("k3", "soon");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("is not a duration"), "{stderr}");
    // A registry that does not answer for a while (a restart, a rolling upgrade) is asked
    // again until the timeout: here it answers once the wait has said it is down, and the
    // wait ends well; one that never answers ends the wait at its timeout (exit 1), saying so.
    let port = registry_testkit::free_port().unwrap();
    let down = format!("http://127.0.0.1:{port}");
    let mut waiting = std::process::Command::new(registry_tests::server::registry_binary())
        .args([
            "keys",
            "wait",
            "--service",
            &sub,
            "--kid",
            "k2",
            "--timeout",
            "30s",
        ])
        .env_clear()
        .env("REGISTRY_API_URL", &down)
        .env("REGISTRY_TOKEN", &acme.token)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Its stderr, line by line; the registry comes up once the wait has said it is down.
    let (told, lines) = std::sync::mpsc::channel::<String>();
    let stderr = waiting.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = told.send(line);
        }
    });
    let first = lines.recv_timeout(Duration::from_secs(20)).unwrap();
    let back = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        let body = json!({"kid": "k2", "safeToSign": true, "pending": [],
            "safeToSignAt": "2026-11-25T12:00:00Z"})
        .to_string();
        for stream in back.incoming().flatten().take(3) {
            let mut stream = stream;
            let mut head = [0u8; 4096];
            let _ = stream.read(&mut head);
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let output = waiting.wait_with_output().unwrap();
    reader.join().unwrap();
    let told: Vec<String> = std::iter::once(first).chain(lines.iter()).collect();
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), told.join("\n"));
    assert_eq!(output.status.code(), Some(0), "{stdout} {stderr}");
    assert!(stdout.contains(r#""safeToSign":true"#), "{stdout}");
    // The outage is told on stderr as it begins and ends, once each.
    assert_eq!(told.len(), 2, "{stderr}");
    assert!(told[0].contains("the registry did not answer"), "{stderr}");
    assert!(told[1].contains("answers again"), "{stderr}");
    let env_down = [
        ("REGISTRY_API_URL", "http://127.0.0.1:9"),
        ("REGISTRY_TOKEN", acme.token.as_str()),
    ];
    let (code, _, stderr) = run_registry(
        &[
            "keys",
            "wait",
            "--service",
            &sub,
            "--kid",
            "k3",
            "--timeout",
            "2s",
        ],
        &env_down,
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("the registry did not answer"), "{stderr}");

    // An unknown kid is a 404; so is another customer's service.
    let response = server.get(&format!("/services/{sub}/keys/nope/readiness"), &acme.token);
    assert_problem(response, 404, "not-found");
    let other = server.customer("other", "business");
    let response = server.get(&format!("/services/{sub}/keys/k2/readiness"), &other.token);
    assert_problem(response, 404, "not-found");
}

/// The fourth security review (docs/api.md, "Key readiness"): no outsider can make a key safe,
/// or hold one back, by sending made-up or copied User-Agents.
#[test]
fn outsiders_neither_forge_readiness_nor_hold_a_key_back() {
    let server = server();
    let acme = server.customer("acme", "business");
    let sub = register_service(&server, &acme, "api");
    assert_eq!(
        put(&server, &acme.token, &sub, &["k1"], Some(json!(0))),
        200
    );
    // The verifier: two hours of fetches from 127.0.0.0/24.
    fetch_keys(&server, &sub, "aws-sts");
    wait_for_agent(&server, &acme.token, &sub, "aws-sts");
    server.advance_clock(3600);
    fetch_keys(&server, &sub, "aws-sts");
    // Before the publication, one fetch under a new agent (from anywhere) holds nothing back.
    let elsewhere = client_from("127.0.9.9");
    let outsider = |agent: &str| {
        let response = elsewhere
            .get(format!("http://127.0.0.1:{}/openid/v1/jwks", server.port))
            .header("host", format!("{sub}.localhost:{}", server.port))
            .header("user-agent", agent)
            .send()
            .unwrap();
        assert_eq!(response.status(), 200);
    };
    // And one under the verifier's agent, from the outsider's /24: a network seen in one hour
    // only is not the verifier's (its later fetch from there below would satisfy it).
    outsider("aws-sts");
    outsider("new-agent/1.0");
    wait_for_agent(&server, &acme.token, &sub, "new-agent/1.0");
    server.advance_clock(5);
    assert_eq!(
        put(&server, &acme.token, &sub, &["k1", "k2"], Some(json!(0))),
        200
    );
    server.advance_clock(1);
    let before = readiness(&server, &acme.token, &sub, "k2");
    assert_eq!(pending(&before), ["aws-sts"], "{before}");
    assert_eq!(before["verifiers"][0]["networks"], json!(["127.0.0.0/24"]));

    // 5,000 GETs under 1,000 made-up agents from another /24, and the verifier's exact agent
    // from another /24: neither safeToSign nor pending moves.
    for i in 0..5_000 {
        outsider(&format!("made-up/{}", i % 1_000));
    }
    outsider("aws-sts");
    // All of them counted (the key set's evidence lists only its top agents).
    let mut evidence = Value::Null;
    let counted = within(Duration::from_secs(30), || {
        evidence = json(server.get(&format!("/services/{sub}/fetches"), &acme.token));
        evidence["documents"][1]["fetches24h"].as_u64() >= Some(5_004)
    });
    assert!(counted, "{evidence}");
    let after = readiness(&server, &acme.token, &sub, "k2");
    assert_eq!(after["safeToSign"], false, "{after}");
    assert_eq!(after["pending"], before["pending"], "{after}");
    assert_eq!(after["verifiers"][0]["fetchedSinceKey"], false);

    // The verifier itself, from its own network: safe, though a flood of one-off agents from
    // another /24 follows its fetch before the replica's next flush.
    fetch_keys(&server, &sub, "aws-sts");
    for i in 0..300 {
        outsider(&format!("flood/{i}"));
    }
    let safe = readiness_once(&server, &acme.token, &sub, "k2", |a| {
        a["safeToSign"] == true
    });
    assert_eq!(safe["verifiers"][0]["networks"], json!(["127.0.0.0/24"]));

    // A verifier that will never come back is dismissed by the owner (an audit event).
    assert_eq!(
        put(&server, &acme.token, &sub, &["k2", "k3"], Some(json!(0))),
        200
    );
    server.advance_clock(1);
    assert_eq!(
        pending(&readiness(&server, &acme.token, &sub, "k3")),
        ["aws-sts"]
    );
    let dismissed = dismiss(&server, &acme.token, &sub, "k3", "aws-sts");
    assert_eq!(dismissed.status(), 204);
    let answer = readiness(&server, &acme.token, &sub, "k3");
    assert_eq!(answer["safeToSign"], true, "{answer}");
    let again = dismiss(&server, &acme.token, &sub, "k3", "aws-sts");
    assert_problem(again, 404, "not-found");
    let audit = server.get("/audit-events?action=verifier.dismiss", &acme.token);
    assert_eq!(audit.status(), 200);
    let events = json(audit);
    assert_eq!(
        events["events"].as_array().map(Vec::len),
        Some(1),
        "{events}"
    );
    // It names the key and the verifier dismissed.
    let event = &events["events"][0];
    assert_eq!(
        event["resource"],
        json!({"type": "key", "id": "k3", "subdomain": sub}),
        "{event}"
    );
    assert_eq!(
        event["changes"],
        json!({"verifiers": {"old": ["aws-sts"], "new": []}}),
        "{event}"
    );
}

/// The probe of §24 (F2): agents made up on many networks (4 each, no crowd), busier than the
/// verifier in its hour, used to push it out of the hour's 64 places, on the replica and in
/// the store, until it was seen in too few hours to be a verifier.
#[test]
fn agents_made_up_on_many_networks_keep_no_verifier_out_of_its_hour() {
    let server = TestServer::start_with(ServerOptions {
        env: vec![("REGISTRY_FETCH_FLUSH_SECONDS".into(), "3".into())],
        ..ServerOptions::default()
    });
    let acme = server.customer("acme", "business");
    let sub = register_service(&server, &acme, "api");
    assert_eq!(put(&server, &acme.token, &sub, &["k1"], None), 200);
    // Ten fetches in each of two hours (the history lists the 32 busiest agents of the week).
    for _ in 0..10 {
        fetch_keys(&server, &sub, "aws-sts");
    }
    wait_for_agent(&server, &acme.token, &sub, "aws-sts");
    server.advance_clock(3600);
    for _ in 0..10 {
        fetch_keys(&server, &sub, "aws-sts");
    }
    wait_for_hours(&server, &acme.token, &sub, &["aws-sts"], 2);
    server.advance_clock(3600);

    let fetched = || {
        let evidence = json(server.get(&format!("/services/{sub}/fetches"), &acme.token));
        evidence["documents"][1]["fetches24h"].as_u64().unwrap_or(0)
    };
    let clients: Vec<reqwest::blocking::Client> = (0..72)
        .map(|i| client_from(&format!("127.{}.{}.1", 1 + i / 16, i % 16)))
        .collect();
    // `agents` made up on as many networks as it takes, 4 each, `times` fetches each.
    let flood = |networks: &[reqwest::blocking::Client], name: &str, agents: usize, times| {
        for i in 0..agents {
            for _ in 0..times {
                let response = networks[i / 4]
                    .get(format!("http://127.0.0.1:{}/openid/v1/jwks", server.port))
                    .header("host", format!("{sub}.localhost:{}", server.port))
                    .header("user-agent", format!("{name} {i}"))
                    .send()
                    .unwrap();
                assert_eq!(response.status(), 200);
            }
        }
    };
    // More agents than a replica keeps, even split by a flush: the hour's 64 places go to
    // made-up ones, and the replica learns who fetched the key set in the week before.
    let (first, busy, busier) = (&clients[..40], &clients[40..56], &clients[56..]);
    let before = fetched();
    flood(first, "first", 160, 1);
    let counted = within(Duration::from_secs(30), || fetched() >= before + 160);
    assert!(counted, "the first flood never counted");
    // Right after a flush, so that one replica window holds what follows: busier made-up
    // agents fill the window, the verifier fetches once, and more follow.
    let before = fetched();
    assert!(within(Duration::from_secs(10), || fetched() > before || {
        flood(busier, "probe", 1, 1);
        false
    }));
    flood(busy, "busy", 64, 2);
    fetch_keys(&server, &sub, "aws-sts");
    flood(busier, "busier", 64, 2);
    wait_for_hours(&server, &acme.token, &sub, &["aws-sts"], 3);
}

/// The probe of §22: a verifier that sent no User-Agent (listed as `""`) could not be named
/// in the dismissal's path, and held every later key back.
#[test]
fn a_verifier_without_an_agent_is_dismissed_at_an_empty_segment() {
    let server = server();
    let acme = server.customer("acme", "business");
    let sub = register_service(&server, &acme, "api");
    assert_eq!(put(&server, &acme.token, &sub, &["k1"], None), 200);
    fetch_keys(&server, &sub, "");
    wait_for_hours(&server, &acme.token, &sub, &[""], 1);
    server.advance_clock(3600);
    fetch_keys(&server, &sub, "");
    wait_for_hours(&server, &acme.token, &sub, &[""], 2);
    assert_eq!(
        put(&server, &acme.token, &sub, &["k1", "k2"], Some(json!(0))),
        200
    );
    assert_eq!(pending(&readiness(&server, &acme.token, &sub, "k2")), [""]);
    // The empty agent, percent-encoded, is an empty segment: `…/verifiers/`.
    assert_eq!(dismiss(&server, &acme.token, &sub, "k2", "").status(), 204);
    let answer = readiness(&server, &acme.token, &sub, "k2");
    assert_eq!(answer["safeToSign"], true, "{answer}");
}

#[test]
fn a_key_under_a_kid_used_before_is_not_safe_by_the_earlier_key() {
    let server = server();
    let acme = server.customer("acme", "business");
    let sub = register_service(&server, &acme, "api");
    assert_eq!(
        put(&server, &acme.token, &sub, &["k1"], Some(json!(0))),
        200
    );
    let first = readiness(&server, &acme.token, &sub, "k1");
    assert_eq!(first["safeToSign"], true, "{first}");

    // The key is withdrawn, and a key under the same kid is published later.
    let path = format!("/services/{sub}/config");
    let response = server
        .authed(Method::DELETE, &path, &acme.token)
        .send()
        .unwrap();
    assert_eq!(response.status(), 204);
    server.advance_clock(5);
    assert_eq!(
        put(&server, &acme.token, &sub, &["k1"], Some(json!(600))),
        200
    );
    let again = readiness(&server, &acme.token, &sub, "k1");
    assert_eq!(again["safeToSign"], false, "{again}");
    assert_eq!(again["safeToSignAt"], Value::Null, "{again}");
    assert_eq!(pending(&again), ["lead"]);

    server.advance_clock(600);
    let safe = readiness(&server, &acme.token, &sub, "k1");
    assert_eq!(safe["safeToSign"], true, "{safe}");
    let at = |member: &str| {
        let text = safe[member].as_str().unwrap_or_default();
        time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).unwrap()
    };
    assert!(at("safeToSignAt") >= at("firstPublishedAt"), "{safe}");
}
