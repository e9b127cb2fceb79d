//! `cargo xtask cdn`: a key rotation through a CDN, end to end (docs/operations.md, "Behind a CDN
//! or another cache"). Two registries on one PostgreSQL behind Varnish, configured with
//! `deploy/cdn/` as shipped; Varnish's log shipped by `registry fetch-log`; two relying parties
//! with caches of their own (jose's `createRemoteJWKSet` in Node, PyJWT's `PyJWKClient` in
//! Python) fetching the key set through Varnish, each with its User-Agent. It checks that a new
//! key stays not safe to sign with until each verifier has fetched through the cache and its log
//! was shipped, that it then turns safe, that tokens signed by it verify in both libraries, that
//! the purge makes the new set visible through Varnish within 1 s, and that Varnish still
//! answers the documents within 1 s with both registries stopped.

use crate::api::{upload, Api, Signer};
use crate::bench::require;
use crate::cmd::{root, run as run_command, succeeds};
use crate::postgres::Cluster;
use crate::registry::{self, create_customer, Registry, WorkDir};
use anyhow::{bail, Context, Result};
use registry_testkit::free_port;
use registry_testkit::http::Http;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const FETCH_LOG_TOKEN: &str = "cdn-chore-fetch-log-token-of-32-characters-at-least";
/// The relying parties' User-Agents: each is a verifier of its own.
const JOSE: &str = "jose-relying-party";
const PYJWT: &str = "pyjwt-relying-party";

/// A process killed when dropped (varnishd, the log shipper; Pebble for the acme chore).
pub(crate) struct Killed(pub(crate) Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The relying parties' folder (`xtask/cdn`: jose's `verify.mjs` with its `node_modules`,
/// PyJWT's `verify.py`), jose installed (`npm ci`) when it is not yet: this chore's verifiers,
/// and the integration suite's (`signer`, through `REGISTRY_TEST_RELYING_PARTIES`).
pub(crate) fn relying_parties() -> Result<PathBuf> {
    let relying = root().join("xtask/cdn");
    if !relying.join("node_modules/jose").is_dir() {
        run_command(
            Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund"])
                .current_dir(&relying),
        )?;
    }
    Ok(relying)
}

pub fn run() -> Result<()> {
    require("varnishd", "varnish")?;
    require("varnishncsa", "varnish")?;
    if !succeeds(Command::new("npm").arg("--version")) {
        bail!("npm not found: the jose relying party needs Node.js 20 or later with npm");
    }
    let binary = registry::build(false)?;
    let relying = relying_parties()?;
    let python = crate::test_python()?;
    let work = WorkDir::in_target("cdn")?;
    let dir = &work.0;
    let cluster = Cluster::start()?;
    let url = cluster.admin_url();
    let token = create_customer(&binary, &url, "acme")?;

    let (a_port, b_port, cache_port) = (free_port()?, free_port()?, free_port()?);
    let _varnish = varnish(dir, (a_port, b_port), cache_port)?;
    let start = |name: &str, port: u16| {
        Registry::start(&registry::Options {
            port: Some(port),
            ..registry::Options::new(&binary, &url, &dir.join(format!("{name}.log")))
                .env(
                    "REGISTRY_ISSUER_URL_TEMPLATE",
                    &format!("http://{{subdomain}}.localhost:{cache_port}"),
                )
                .env(
                    "REGISTRY_PURGE_URLS",
                    &format!("http://127.0.0.1:{cache_port}"),
                )
                .env("REGISTRY_FETCH_LOG_TOKEN", FETCH_LOG_TOKEN)
                .env("REGISTRY_TRUSTED_PROXIES", "127.0.0.1/32")
                .env("REGISTRY_FETCH_FLUSH_SECONDS", "1")
                // A verifier fetches in two distinct clock hours before a key's publication
                // (docs/api.md, "Key readiness"); this test cannot wait an hour. The
                // integration suite, whose clock moves, holds the two-hour rule.
                .env("REGISTRY_TEST_VERIFIER_HOURS", "1")
        })
    };
    let mut a = start("registry-a", a_port)?;
    let mut b = start("registry-b", b_port)?;
    let cache = Http::local(cache_port);
    // Varnish's probes find both registries healthy (two good probes out of three, a second
    // apart): then every request through it reaches one.
    wait(
        Duration::from_secs(30),
        "Varnish's probes of the registries",
        || {
            Ok((0..6).all(|_| {
                (cache.call("GET", "/healthz", None, None)).is_ok_and(|r| r.status == 200)
            }))
        },
    )?;
    std::thread::sleep(Duration::from_secs(2));
    let _shipper = shipper(&binary, dir, a_port)?;
    let started = Instant::now();
    let at = || format!("{:6.2} s", started.elapsed().as_secs_f64());

    let api = Api::new(a.http(), &token);
    let service = api.create_service("k3s")?;
    let issuer = format!("http://{service}.localhost:{cache_port}");
    let jwks_url = format!("{issuer}/openid/v1/jwks");
    let with_lead = |keys: Value| {
        let mut body = upload(keys);
        body["rotationLeadSeconds"] = json!(1);
        body
    };
    let k1 = Signer::generate("k1")?;
    api.publish(&service, &with_lead(k1.jwks()))?;
    // The purger keeps the contract the in-memory caches keep (crates/cdn/tests), on this cache.
    run_command(
        crate::cmd::cargo("test --quiet -p registry-cdn --test contract -- --ignored")
            .env("REGISTRY_TEST_CACHE", format!("127.0.0.1:{cache_port}"))
            .env(
                "REGISTRY_TEST_CACHE_HOST",
                format!("{service}.localhost:{cache_port}"),
            )
            .env("REGISTRY_TEST_CACHE_PATH", "/openid/v1/jwks"),
    )?;
    let verify = |party: &str, token: &str| -> Result<()> {
        let out = match party {
            JOSE => Command::new("node")
                .arg(relying.join("verify.mjs"))
                .args([&jwks_url, token, JOSE])
                .output()?,
            _ => Command::new(&python)
                .arg(relying.join("verify.py"))
                .args([&jwks_url, token, PYJWT])
                .output()?,
        };
        if !out.status.success() {
            let served = cache.hosted(&service, "/openid/v1/jwks");
            let served = served
                .map(|r| format!("{} {}", r.status, r.body))
                .unwrap_or_default();
            bail!(
                "{party} refused the token: {} (Varnish serves the key set: {served})",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    };
    // The two relying parties verify k1's tokens through the cache: they are the verifiers.
    for party in [JOSE, PYJWT] {
        verify(party, &k1.mint(&issuer)?)?;
    }
    wait(
        Duration::from_secs(30),
        "the verifiers' fetches in the evidence",
        || {
            let answer = api.expect("GET", &format!("/services/{service}/fetches"), None, 200)?;
            let text = answer.to_string();
            Ok(text.contains(JOSE) && text.contains(PYJWT))
        },
    )?;
    println!(
        "{}  {JOSE} and {PYJWT} fetched the key set with k1 through Varnish",
        at()
    );

    // The rotation: k2 is published beside k1.
    let k2 = Signer::generate("k2")?;
    let both = json!({"keys": [k1.jwks()["keys"][0], k2.jwks()["keys"][0]]});
    api.publish(&service, &with_lead(both))?;
    let published = Instant::now();
    println!("{}  k2 published beside k1 (on registry A)", at());
    wait(
        Duration::from_secs(1),
        "the new key set through Varnish",
        || {
            let answer = cache.hosted(&service, "/openid/v1/jwks")?;
            Ok(answer.status == 200 && answer.body.contains("\"k2\""))
        },
    )
    .context("the purge did not make the new key set visible through Varnish within 1 s")?;
    println!(
        "{}  Varnish serves the set with k2, {} ms after the upload (purged)",
        at(),
        published.elapsed().as_millis()
    );
    let readiness = |registry: &Registry| -> Result<Value> {
        let on = Api::new(registry.http(), &token);
        on.expect(
            "GET",
            &format!("/services/{service}/keys/k2/readiness"),
            None,
            200,
        )
    };
    std::thread::sleep(Duration::from_millis(1500));
    let before = readiness(&b)?;
    let reasons = before["pending"].to_string();
    if before["safeToSign"] != false || !reasons.contains(JOSE) || !reasons.contains(PYJWT) {
        bail!("k2 should wait for both verifiers: {before}");
    }
    println!(
        "{}  readiness (registry B): not safe, pending {JOSE} and {PYJWT}",
        at()
    );

    // Each verifier fetches the new set through the cache (its log shipped), with a k2 token.
    for party in [JOSE, PYJWT] {
        verify(party, &k2.mint(&issuer)?)?;
        println!(
            "{}  {party} fetched the new set and accepted a token signed by k2",
            at()
        );
    }
    wait(Duration::from_secs(30), "k2 safe to sign with", || {
        Ok(readiness(&a)?["safeToSign"] == true)
    })?;
    let after = readiness(&b)?;
    println!(
        "{}  readiness (registry B): safe since {}, verifiers {}",
        at(),
        after["safeToSignAt"],
        after["verifiers"]
    );
    for party in [JOSE, PYJWT] {
        verify(party, &k2.mint(&issuer)?)?;
    }
    println!("{}  tokens signed by k2 verify in both libraries", at());

    // Both registries stop: Varnish answers from its copies, past their max-age, within a second.
    let paths = ["/.well-known/openid-configuration", "/openid/v1/jwks"];
    for path in paths {
        let answer = cache.hosted(&service, path)?;
        if answer.status != 200 {
            bail!("{path} through Varnish answered {}", answer.status);
        }
    }
    a.kill9()?;
    b.kill9()?;
    println!("{}  both registries stopped (SIGKILL)", at());
    // Past the copies' max-age (30 s): what is served now is stale, kept for stale-if-error.
    std::thread::sleep(Duration::from_secs(32));
    for path in paths {
        let asked = Instant::now();
        let answer = cache.hosted(&service, path)?;
        let took = asked.elapsed();
        if answer.status != 200 || took > Duration::from_secs(1) {
            bail!(
                "with both registries stopped, {path} answered {} in {took:?}",
                answer.status
            );
        }
        println!(
            "{}  Varnish served {path} (its copy past its max-age) in {} ms",
            at(),
            took.as_millis()
        );
    }
    drop(cluster);
    Ok(())
}

/// Polls `check` every 50 ms until it holds, for at most `limit`.
pub(crate) fn wait(
    limit: Duration,
    what: &str,
    mut check: impl FnMut() -> Result<bool>,
) -> Result<()> {
    let started = Instant::now();
    loop {
        if check().unwrap_or(false) {
            return Ok(());
        }
        if started.elapsed() > limit {
            bail!("{what}: not within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// varnishd with `deploy/cdn/registry.vcl` as shipped, and a `backends.vcl` naming the two
/// registries; answering once it is up.
fn varnish(dir: &Path, (a, b): (u16, u16), port: u16) -> Result<Killed> {
    let shipped = root().join("deploy/cdn");
    let example = std::fs::read_to_string(shipped.join("backends.example.vcl"))?;
    let backends = example
        .replacen(
            "\"10.0.0.11\";\n    .port = \"8080\"",
            &format!("\"127.0.0.1\";\n    .port = \"{a}\""),
            1,
        )
        .replacen(
            "\"10.0.0.12\";\n    .port = \"8080\"",
            &format!("\"127.0.0.1\";\n    .port = \"{b}\""),
            1,
        )
        .replace(
            "    \"10.0.0.11\";\n    \"10.0.0.12\";\n",
            "    \"127.0.0.1\";\n",
        );
    if !backends.contains(&format!("\"{a}\"")) || !backends.contains("    \"127.0.0.1\";\n}") {
        bail!("deploy/cdn/backends.example.vcl no longer has the shape this chore edits");
    }
    std::fs::write(dir.join("backends.vcl"), backends)?;
    std::fs::copy(shipped.join("registry.vcl"), dir.join("registry.vcl"))?;
    let child = Command::new("varnishd")
        .args(["-F", "-j", "none", "-s", "malloc,64m"])
        .arg("-a")
        .arg(format!("127.0.0.1:{port}"))
        .arg("-f")
        .arg(dir.join("registry.vcl"))
        .arg("-p")
        .arg(format!("vcl_path={}", dir.display()))
        .arg("-n")
        .arg(varnish_dir(dir))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join("varnishd.log"))?)
        .stderr(std::fs::File::create(dir.join("varnishd.err"))?)
        .spawn()
        .context("starting varnishd")?;
    let varnish = Killed(child);
    let http = Http::local(port);
    wait(Duration::from_secs(30), "varnishd listening", || {
        Ok(http.call("GET", "/healthz", None, None).is_ok())
    })
    .with_context(|| std::fs::read_to_string(dir.join("varnishd.err")).unwrap_or_default())?;
    Ok(varnish)
}

fn varnish_dir(dir: &Path) -> PathBuf {
    dir.join("varnish")
}

/// `varnishncsa` with `deploy/cdn/varnishncsa.format`, piped into `registry fetch-log`.
fn shipper(binary: &Path, dir: &Path, api_port: u16) -> Result<[Killed; 2]> {
    let format = std::fs::read_to_string(root().join("deploy/cdn/varnishncsa.format"))?;
    let mut log = Command::new("varnishncsa")
        .arg("-n")
        .arg(varnish_dir(dir))
        .args(["-j", "-F", format.trim_end()])
        .env("TZ", "UTC")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.join("varnishncsa.err"))?)
        .spawn()
        .context("starting varnishncsa")?;
    let lines = log.stdout.take().context("varnishncsa's output")?;
    let log = Killed(log);
    let ship = Command::new(binary)
        .arg("fetch-log")
        .env("REGISTRY_API_URL", format!("http://127.0.0.1:{api_port}"))
        .env("REGISTRY_FETCH_LOG_TOKEN", FETCH_LOG_TOKEN)
        .stdin(lines)
        .stdout(std::fs::File::create(dir.join("fetch-log.out"))?)
        .stderr(std::fs::File::create(dir.join("fetch-log.err"))?)
        .spawn()
        .context("starting registry fetch-log")?;
    Ok([log, Killed(ship)])
}
