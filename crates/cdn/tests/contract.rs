//! The purger keeps the domain's contract of a `CachePurger`
//! (`registry_domain::testing::purger_contract`), the one the in-memory caches keep, against
//! Varnish with the shipped VCL: `cargo xtask cdn` runs it with `REGISTRY_TEST_CACHE` (the
//! cache's address), `REGISTRY_TEST_CACHE_HOST` (an issuer's host) and `REGISTRY_TEST_CACHE_PATH`
//! (a document it publishes). Ignored in the plain test run, which has no cache.

use registry_cdn::Purger;
use std::io::{Read, Write};
use std::net::TcpStream;

/// A GET of `path` under `host` through the cache at `cache`: whether the cache answered it
/// (Varnish's `X-Varnish` names two transactions on a hit, one on a miss).
fn from_cache(cache: &str, host: &str, path: &str) -> bool {
    let mut stream = TcpStream::connect(cache).expect("the cache");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let xids = answer
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("x-varnish")
                .then(|| value.split_whitespace().count())
        })
        .expect("X-Varnish");
    xids == 2
}

#[test]
#[ignore = "needs Varnish in front of a registry: run by cargo xtask cdn"]
fn the_purger_keeps_the_purger_contract() {
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name}"));
    let (cache, host, path) = (
        var("REGISTRY_TEST_CACHE"),
        var("REGISTRY_TEST_CACHE_HOST"),
        var("REGISTRY_TEST_CACHE_PATH"),
    );
    let purger = Purger::new(&[format!("http://{cache}")]).unwrap().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut through = |host: &str, path: &str| from_cache(&cache, host, path);
    runtime.block_on(registry_domain::testing::purger_contract(
        &purger,
        &host,
        &path,
        &mut through,
    ));
}
