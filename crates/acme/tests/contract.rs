//! This crate's adapters keep the domain's contracts of the ports they implement, the ones the
//! in-memory fakes keep (`registry_domain::testing`), against real servers that `cargo xtask
//! acme` starts: the DNS lookup (`ownership_contract`) against pebble-challtestsrv
//! (`REGISTRY_TEST_DNS`: its DNS port; `REGISTRY_TEST_DNS_MANAGEMENT`: its management API), and
//! the ACME client (`authority_contract`) against Pebble (`REGISTRY_TEST_ACME_DIRECTORY`,
//! `REGISTRY_TEST_ACME_CA_FILE`), whose HTTP-01 requests this test answers itself on
//! `REGISTRY_TEST_HTTP01` (an address and Pebble's HTTP-01 port). Ignored in the plain test run,
//! which has no such servers.

use registry_acme::{AcmeClient, TxtLookup};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// POSTs `body` to challtestsrv's management API at `address`; fails unless it answers 200.
fn manage(address: &str, path: &str, body: &str) {
    let mut stream = TcpStream::connect(address).expect("challtestsrv's management API");
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "{path} {body}: {answer}"
    );
}

#[test]
#[ignore = "needs pebble-challtestsrv: run by cargo xtask acme"]
fn the_dns_lookup_keeps_the_ownership_contract() {
    let dns = std::env::var("REGISTRY_TEST_DNS").expect("REGISTRY_TEST_DNS");
    let management =
        std::env::var("REGISTRY_TEST_DNS_MANAGEMENT").expect("REGISTRY_TEST_DNS_MANAGEMENT");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // The port is synchronous and runs on the blocking pool, as the worker's step does.
    runtime.block_on(async {
        tokio::task::spawn_blocking(move || {
            let lookup = TxtLookup::new(Some(&dns)).unwrap();
            // challtestsrv keeps one value per name: the contract adds one per name.
            let mut put = |name: &str, value: &str| {
                let body = format!(
                    r#"{{"host":"{}.","value":"{value}"}}"#,
                    name.trim_end_matches('.')
                );
                manage(&management, "/set-txt", &body);
            };
            registry_domain::testing::ownership_contract(&lookup, &mut put);
        })
        .await
        .unwrap();
    });
}

/// Answers `GET /.well-known/acme-challenge/{token}` on `address` from `answers`, until the
/// process ends.
fn serve_http01(address: &str, answers: Arc<Mutex<HashMap<String, String>>>) {
    let listener = TcpListener::bind(address).expect("the HTTP-01 address");
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream);
            let mut request = String::new();
            if reader.read_line(&mut request).is_err() {
                continue;
            }
            let token = (request.split_whitespace().nth(1))
                .and_then(|path| path.strip_prefix("/.well-known/acme-challenge/"))
                .unwrap_or_default()
                .to_owned();
            let answer = answers.lock().unwrap().get(&token).cloned();
            let reply = match answer {
                Some(body) => format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                ),
                None => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    .to_owned(),
            };
            let _ = reader.get_mut().write_all(reply.as_bytes());
        }
    });
}

#[test]
#[ignore = "needs Pebble and pebble-challtestsrv: run by cargo xtask acme"]
fn the_acme_client_keeps_the_authority_contract() {
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name}"));
    let directory = var("REGISTRY_TEST_ACME_DIRECTORY");
    let ca_file = var("REGISTRY_TEST_ACME_CA_FILE");
    let http01 = var("REGISTRY_TEST_HTTP01");
    let management = var("REGISTRY_TEST_DNS_MANAGEMENT");
    let domain = "contract.customer.test";
    let host = http01.rsplit_once(':').expect("address:port").0.to_owned();
    manage(
        &management,
        "/add-a",
        &format!(r#"{{"host":"{domain}.","addresses":["{host}"]}}"#),
    );
    let answers = Arc::new(Mutex::new(HashMap::new()));
    serve_http01(&http01, answers.clone());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        tokio::task::spawn_blocking(move || {
            let client = AcmeClient::new(&directory, None, Some(ca_file.into())).unwrap();
            let mut answer = |challenge: &registry_domain::ports::AcmeChallenge| {
                let mut answers = answers.lock().unwrap();
                answers.insert(challenge.token.clone(), challenge.key_authorization.clone());
                Ok(())
            };
            registry_domain::testing::authority_contract(&client, domain, &mut answer);
        })
        .await
        .unwrap();
    });
}
