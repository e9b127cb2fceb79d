//! The DNS lookup that proves a custom domain's ownership keeps the domain's contract of an
//! `OwnershipCheck` (`registry_domain::testing::ownership_contract`), the one the in-memory fake
//! keeps, against a real DNS server: pebble-challtestsrv, which `cargo xtask acme` starts and
//! names in `REGISTRY_TEST_DNS` (its DNS port) and `REGISTRY_TEST_DNS_MANAGEMENT` (its
//! management API). Ignored in the plain test run, which has no such server.

use registry_acme::TxtLookup;
use std::io::{Read, Write};
use std::net::TcpStream;

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
