//! `cargo xtask acme`: a custom domain end to end (docs/api.md, "Custom domains"). Two
//! registries on one PostgreSQL, each on a loopback address of its own and the HTTPS port, with
//! Pebble (Let's Encrypt's test ACME server) as their certificate authority and
//! pebble-challtestsrv as the only DNS server of the registries and of Pebble. It proves that a
//! domain is not served before its owner has set the TXT record the registry asked for; that once
//! it is set, one registry orders a certificate and Pebble's HTTP-01 check succeeds on the other
//! (the domain's A record names the replica that did not necessarily order); that both then
//! serve the service's documents under the domain, with the domain as issuer, on a chain that
//! Pebble's root alone verifies; that PyJWT, trusting only that root, verifies a token of the
//! custom issuer; and that a removed domain stops being served by both within seconds.

use crate::api::upload;
use crate::bench::require;
use crate::cdn::{wait, Killed};
use crate::postgres::Cluster;
use crate::registry::{self, create_customer, tail, Registry, WorkDir};
use anyhow::{bail, Context, Result};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use registry_testkit::http::{Http, Response};
use registry_testkit::tls::TestCa;
use registry_testkit::{free_port, unix_now, KeyKind, SigningKey};
use serde_json::{json, Value};
use std::fs::File;
use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The custom domain the customer brings.
const DOMAIN: &str = "login.customer.test";
/// The API's host; the operator's certificate covers it and the subdomain issuers.
const API_HOST: &str = "registry.test";
/// The replicas' addresses: the whole of 127/8 is loopback on Linux, so each replica can have
/// the HTTPS port and the HTTP-01 port (Pebble's `httpPort`, port 80 in production) of its own.
const REPLICA_A: &str = "127.0.0.2";
const REPLICA_B: &str = "127.0.0.3";
/// Pebble validates HTTP-01 on this port rather than 80, so that it needs no privilege.
const HTTP01_PORT: u16 = 5002;
/// Where the ACME client's contract test answers Pebble's HTTP-01 requests.
const CONTRACT_HTTP01: &str = "127.0.0.4";
/// The audience of the relying party's token (what AWS STS expects).
const AUDIENCE: &str = "sts.amazonaws.com";

pub fn run() -> Result<()> {
    require("pebble", "pebble")?;
    require("pebble-challtestsrv", "pebble")?;
    require("curl", "curl")?;
    ports_are_free()?;
    let binary = registry::build(false)?;
    let python = crate::test_python()?;
    let work = WorkDir::in_target("acme")?;
    let dir = &work.0;
    let dns = MockDns::start(dir)?;
    // The real DNS lookup keeps the contract the in-memory fake keeps (crates/acme/tests).
    crate::cmd::run(
        crate::cmd::cargo("test --quiet -p registry-acme --test contract -- --ignored ownership")
            .env("REGISTRY_TEST_DNS", format!("127.0.0.1:{}", dns.port))
            .env(
                "REGISTRY_TEST_DNS_MANAGEMENT",
                format!("127.0.0.1:{}", dns.management_port),
            ),
    )?;
    let pebble = Pebble::start(dir, dns.port)?;
    // The real ACME client keeps the contract the in-memory authority keeps (crates/acme/tests),
    // answering Pebble's HTTP-01 requests itself, on an address of its own.
    crate::cmd::run(
        crate::cmd::cargo("test --quiet -p registry-acme --test contract -- --ignored authority")
            .env("REGISTRY_TEST_ACME_DIRECTORY", &pebble.directory)
            .env("REGISTRY_TEST_ACME_CA_FILE", &pebble.listener_ca)
            .env(
                "REGISTRY_TEST_HTTP01",
                format!("{CONTRACT_HTTP01}:{HTTP01_PORT}"),
            )
            .env(
                "REGISTRY_TEST_DNS_MANAGEMENT",
                format!("127.0.0.1:{}", dns.management_port),
            ),
    )?;
    let cluster = Cluster::start()?;
    let url = cluster.admin_url();
    let token = create_customer(&binary, &url, "acme")?;
    let (shared, operator_ca) = shared_settings(dir, &pebble, dns.port)?;
    let start = |name: &str, address: &str| {
        let log = dir.join(format!("{name}.log"));
        let mut options = registry::Options::new(&binary, &url, &log)
            .env("REGISTRY_LISTEN", &format!("{address}:443"))
            .env(
                "REGISTRY_HTTP_REDIRECT_LISTEN",
                &format!("{address}:{HTTP01_PORT}"),
            );
        for (name, value) in &shared {
            options = options.env(name, value);
        }
        Registry::start(&registry::Options {
            port: Some(443),
            ..options
        })
    };
    let _a = start("registry-a", REPLICA_A)?;
    let _b = start("registry-b", REPLICA_B)?;
    println!("registries A on {REPLICA_A}:443 and B on {REPLICA_B}:443, Pebble, challtestsrv: up");

    let api = Api {
        curl: Curl::trusting(REPLICA_A, &operator_ca),
        token,
    };
    let (service, signer) = publish_a_service(&api)?;
    let scene = Scene {
        api,
        service,
        signer,
        operator_ca,
        dns,
        pebble,
        dir: dir.to_path_buf(),
        python,
        started: Instant::now(),
    };
    let result = scene.play();
    if result.is_err() {
        // The work directory goes with everything else when this returns (the scene, the
        // registries, then PostgreSQL): what they logged is printed first, the failure last.
        eprintln!("{}", scene.logs());
    }
    result
}

/// Everything the scenario acts on.
struct Scene {
    api: Api,
    /// The service's subdomain.
    service: String,
    /// The key its published set holds.
    signer: SigningKey,
    operator_ca: PathBuf,
    dns: MockDns,
    pebble: Pebble,
    dir: PathBuf,
    python: PathBuf,
    started: Instant,
}

impl Scene {
    fn play(&self) -> Result<()> {
        let txt = self.ask_for_the_domain()?;
        self.an_unproven_domain_is_not_served()?;
        self.prove_ownership(&txt)?;
        self.wait_until_active()?;
        let root = self.pebble.root(&self.dir)?;
        for replica in [REPLICA_A, REPLICA_B] {
            self.served_under_the_domain(replica, &root)?;
        }
        self.a_relying_party_verifies(&root)?;
        self.remove_the_domain()
    }

    /// One line of progress, with the time since the scenario began.
    fn say(&self, what: &str) {
        println!("{:6.2} s  {what}", self.started.elapsed().as_secs_f64());
    }

    fn domain_path(&self) -> String {
        format!("/services/{}/domain", self.service)
    }

    fn subdomain_issuer(&self) -> String {
        format!("https://{}.oidc.test", self.service)
    }

    /// Step a: the registry answers with the records to set, and verifies them later.
    fn ask_for_the_domain(&self) -> Result<String> {
        let body = json!({"domain": DOMAIN});
        let answer = self
            .api
            .expect("PUT", &self.domain_path(), Some(&body), 202)?;
        if answer["status"] != "verifying" {
            bail!("a new domain should be `verifying`: {answer}");
        }
        let record = |kind: &str, name: &str| {
            answer["records"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|r| r["type"] == kind && r["name"] == name)
                .cloned()
        };
        let issuer_host = format!("{}.oidc.test", self.service);
        let cname = record("CNAME", DOMAIN);
        if cname.as_ref().map(|r| &r["value"]) != Some(&json!(issuer_host)) {
            bail!("the records should hold a CNAME from {DOMAIN} to {issuer_host}: {answer}");
        }
        let txt_name = format!("_registry-challenge.{DOMAIN}");
        let txt = record("TXT", &txt_name)
            .and_then(|r| r["value"].as_str().map(str::to_owned))
            .filter(|value| !value.is_empty())
            .with_context(|| format!("the records should hold a TXT {txt_name}: {answer}"))?;
        self.say(&format!(
            "{DOMAIN} asked for: verifying, CNAME to {issuer_host}, TXT {txt_name}"
        ));
        Ok(txt)
    }

    /// Step b: without the TXT record, nothing proves the customer owns the domain.
    fn an_unproven_domain_is_not_served(&self) -> Result<()> {
        // Five of the registry's checks (REGISTRY_DOMAIN_CHECK_SECONDS=1).
        std::thread::sleep(Duration::from_secs(5));
        let answer = self.api.expect("GET", &self.domain_path(), None, 200)?;
        if answer["status"] != "verifying" {
            bail!("without its TXT record, the domain should stay `verifying`: {answer}");
        }
        let url = format!("https://{DOMAIN}/.well-known/openid-configuration");
        // Any certificate (-k): a TLS failure or a 404 both mean "not served".
        if let Ok(served) = Curl::insecure(REPLICA_A).get(&url) {
            if served.status == 200 {
                bail!("{DOMAIN} is served before its owner set the TXT record: {served:?}");
            }
        }
        self.say("5 s later, without the TXT record: still verifying, the domain not served");
        Ok(())
    }

    /// Step c: the customer sets the TXT record; the domain's A record names replica B, so
    /// Pebble's HTTP-01 request reaches a replica that did not necessarily order.
    fn prove_ownership(&self, txt: &str) -> Result<()> {
        let host = format!("_registry-challenge.{DOMAIN}.");
        self.dns
            .post("/set-txt", &json!({"host": host, "value": txt}))?;
        self.dns.post(
            "/add-a",
            &json!({"host": format!("{DOMAIN}."), "addresses": [REPLICA_B]}),
        )?;
        self.say(&format!(
            "TXT record set; {DOMAIN} resolves to {REPLICA_B} (registry B)"
        ));
        Ok(())
    }

    /// Polls the domain (at most 90 s) until it is `active` with its certificate described. A
    /// failed order is retried by the registry (the domain stays `issuing`, with an `error`):
    /// each new error is shown as it comes, and the wait goes on.
    fn wait_until_active(&self) -> Result<()> {
        let limit = Duration::from_secs(90);
        let asked = Instant::now();
        let mut last = Value::Null;
        while asked.elapsed() < limit {
            let previous_error = last["error"].clone();
            last = self.api.expect("GET", &self.domain_path(), None, 200)?;
            if !last["error"].is_null() && last["error"] != previous_error {
                self.say(&format!(
                    "{}, with an error: {}",
                    last["status"], last["error"]
                ));
            }
            match last["status"].as_str() {
                Some("active") => return self.certificate_is_described(&last),
                Some("failed") => bail!("the domain failed: {last}"),
                _ => std::thread::sleep(Duration::from_secs(1)),
            }
        }
        bail!("the domain was not active within {limit:?}: {last}")
    }

    fn certificate_is_described(&self, domain: &Value) -> Result<()> {
        let certificate = &domain["certificate"];
        for field in ["notBefore", "notAfter", "issuer"] {
            if certificate[field].is_null() || certificate[field] == "" {
                bail!("an active domain's certificate should have `{field}`: {domain}");
            }
        }
        self.say(&format!(
            "active: a certificate from {}, valid until {}",
            certificate["issuer"], certificate["notAfter"]
        ));
        Ok(())
    }

    /// Step d: `replica` serves the service's documents under the domain, the domain being the
    /// issuer, on a chain that Pebble's root alone verifies (so the server sends the
    /// intermediate).
    fn served_under_the_domain(&self, replica: &'static str, root: &Path) -> Result<()> {
        let pebble = Curl::trusting(replica, root);
        let issuer = format!("https://{DOMAIN}");
        let discovery = format!("{issuer}/.well-known/openid-configuration");
        // Replica B learns of the certificate through the change feed: a moment, not more.
        wait(Duration::from_secs(5), "the custom domain served", || {
            Ok(pebble.get(&discovery)?.status == 200)
        })
        .with_context(|| format!("{replica}: {}", describe(pebble.get(&discovery))))?;
        let document = pebble.expect_json(&discovery)?;
        let jwks_uri = format!("{issuer}/openid/v1/jwks");
        if document["issuer"] != issuer.as_str() || document["jwks_uri"] != jwks_uri.as_str() {
            bail!("{replica}: the document under {DOMAIN} should name it as issuer: {document}");
        }
        let keys = pebble.expect_json(&jwks_uri)?;
        let operator = Curl::trusting(replica, &self.operator_ca);
        let at_subdomain =
            operator.expect_json(&format!("{}/openid/v1/jwks", self.subdomain_issuer()))?;
        if keys != at_subdomain {
            bail!("{replica}: the key set under {DOMAIN} ({keys}) is not the service's ({at_subdomain})");
        }
        self.say(&format!(
            "{replica} serves {DOMAIN} (chain verified by Pebble's root), its issuer and key set"
        ));
        Ok(())
    }

    /// Step e: PyJWT, trusting Pebble's root only, verifies a token of the custom issuer.
    fn a_relying_party_verifies(&self, root: &Path) -> Result<()> {
        let issuer = format!("https://{DOMAIN}");
        let now = unix_now();
        let claims = json!({
            "iss": issuer, "sub": registry_testkit::SUBJECT, "aud": AUDIENCE,
            "iat": now, "exp": now + 3600
        });
        let token = self.signer.sign_claims("RS256", &claims);
        let out = Command::new(&self.python)
            .arg(crate::cmd::root().join("xtask/acme/verify.py"))
            .arg(format!("{issuer}/openid/v1/jwks"))
            .args([&token, &issuer, AUDIENCE])
            .arg(root)
            .arg(REPLICA_A)
            .output()
            .context("running xtask/acme/verify.py")?;
        if !out.status.success() {
            bail!(
                "PyJWT refused the custom issuer's token: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        self.say(&format!(
            "PyJWT (trusting Pebble's root only) verified a token of {issuer}"
        ));
        Ok(())
    }

    /// Step f: a removed domain stops being served by both replicas.
    fn remove_the_domain(&self) -> Result<()> {
        self.api.expect("DELETE", &self.domain_path(), None, 204)?;
        let removed = Instant::now();
        let url = format!("https://{DOMAIN}/.well-known/openid-configuration");
        let served = |replica| {
            Curl::insecure(replica)
                .get(&url)
                .is_ok_and(|r| r.status == 200)
        };
        wait(
            Duration::from_secs(6),
            "the removed domain unserved",
            || Ok(!served(REPLICA_A) && !served(REPLICA_B)),
        )
        .with_context(|| {
            format!(
                "{DOMAIN} after its removal: served by A {}, by B {}",
                served(REPLICA_A),
                served(REPLICA_B)
            )
        })?;
        self.say(&format!(
            "removed: neither replica serves {DOMAIN}, {} ms after the DELETE",
            removed.elapsed().as_millis()
        ));
        Ok(())
    }

    /// The end of each process's log.
    fn logs(&self) -> String {
        ["registry-a", "registry-b", "pebble", "challtestsrv"]
            .iter()
            .map(|name| {
                let text = std::fs::read_to_string(self.dir.join(format!("{name}.log")))
                    .unwrap_or_default();
                format!("end of {name}'s log:\n{}", tail(&text))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// The settings of both replicas but their addresses: the operator's certificate (for the API
/// and the subdomain issuers, from a CA of its own), the ACME CA and its trust, the DNS server,
/// and one data key. With the operator's CA file, which the API's clients trust.
fn shared_settings(
    dir: &Path,
    pebble: &Pebble,
    dns_port: u16,
) -> Result<(Vec<(&'static str, String)>, PathBuf)> {
    let ca = TestCa::new("operator CA");
    let (cert, key, ca_file) = (
        dir.join("operator.pem"),
        dir.join("operator.key"),
        dir.join("operator-ca.pem"),
    );
    ca.server_certificate(&[API_HOST, "*.oidc.test"])
        .write(&cert, &key)?;
    std::fs::write(&ca_file, ca.pem())?;
    let path = |p: &Path| p.to_string_lossy().into_owned();
    let settings = vec![
        ("REGISTRY_TLS_CERT", path(&cert)),
        ("REGISTRY_TLS_KEY", path(&key)),
        ("REGISTRY_BASE_URL", format!("https://{API_HOST}")),
        (
            "REGISTRY_ISSUER_URL_TEMPLATE",
            "https://{subdomain}.oidc.test".to_owned(),
        ),
        ("REGISTRY_ACME_DIRECTORY", pebble.directory.clone()),
        ("REGISTRY_ACME_EMAIL", "ops@example.com".to_owned()),
        ("REGISTRY_ACME_CA_FILE", path(&pebble.listener_ca)),
        // The same on both: either replica unseals the key of a certificate the other ordered.
        ("REGISTRY_DATA_KEY", data_key()?),
        ("REGISTRY_DNS_RESOLVER", format!("127.0.0.1:{dns_port}")),
        // The first TXT check after a second, not after the production interval.
        ("REGISTRY_DOMAIN_CHECK_SECONDS", "1".to_owned()),
    ];
    Ok((settings, ca_file))
}

/// What a request got, for a failure's message.
fn describe(answer: Result<Response>) -> String {
    match answer {
        Ok(answer) => format!("{} {}", answer.status, answer.body),
        Err(e) => format!("{e:#}"),
    }
}

/// A service `login`, publishing an RS256 key: its subdomain and the key.
fn publish_a_service(api: &Api) -> Result<(String, SigningKey)> {
    let body = json!({"title": "login", "serviceName": "login"});
    let created = api.expect("POST", "/services", Some(&body), 201)?;
    let service = created["subdomain"]
        .as_str()
        .context("no subdomain in the created service")?
        .to_owned();
    let signer = SigningKey::generate(KeyKind::Rsa, "login-1");
    let path = format!("/services/{service}/config");
    api.expect("PUT", &path, Some(&upload(signer.jwks())), 200)?;
    Ok((service, signer))
}

/// The registry's API at `https://registry.test`, on one replica, as the customer.
struct Api {
    curl: Curl,
    token: String,
}

impl Api {
    /// Calls the API, failing unless the status is `want`; the JSON answer.
    fn expect(&self, method: &str, path: &str, body: Option<&Value>, want: u16) -> Result<Value> {
        let url = format!("https://{API_HOST}{path}");
        let answer = self.curl.call(method, &url, Some(&self.token), body)?;
        crate::api::expected(method, path, answer, want)
    }
}

/// HTTPS with curl to one replica's address whatever the URL's host (`--resolve`: the names
/// exist only for this chore), trusting one CA's file, or nothing (`-k`) for the checks that
/// look only at whether a domain is served. The test kit's client speaks plain HTTP only.
#[derive(Debug, Clone)]
struct Curl {
    address: &'static str,
    ca: Option<PathBuf>,
}

impl Curl {
    fn trusting(address: &'static str, ca: &Path) -> Curl {
        Curl {
            address,
            ca: Some(ca.to_path_buf()),
        }
    }

    fn insecure(address: &'static str) -> Curl {
        Curl { address, ca: None }
    }

    /// A request; an error when curl fails (no connection, a TLS failure).
    fn call(
        &self,
        method: &str,
        url: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> Result<Response> {
        let host = url
            .strip_prefix("https://")
            .and_then(|rest| rest.split('/').next())
            .with_context(|| format!("not an https URL: {url}"))?;
        // `--resolve` names the port the URL connects to: 443 unless it says another.
        let (name, port) = host.rsplit_once(':').unwrap_or((host, "443"));
        let mut command = Command::new("curl");
        command
            .args(["-sS", "--connect-timeout", "5", "--max-time", "30"])
            .args(["-X", method, "-w", "\n%{http_code}", "--resolve"])
            .arg(format!("{name}:{port}:{}", self.address));
        match &self.ca {
            Some(ca) => command.arg("--cacert").arg(ca),
            None => command.arg("-k"),
        };
        if let Some(token) = token {
            command.args(["-H", &format!("Authorization: Bearer {token}")]);
        }
        if let Some(body) = body {
            command
                .args(["-H", "Content-Type: application/json", "--data-binary"])
                .arg(body.to_string());
        }
        let out = command.arg(url).output().context("running curl")?;
        if !out.status.success() {
            bail!(
                "curl {method} {url} on {}: {}",
                self.address,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let (body, status) = text.rsplit_once('\n').context("curl printed no status")?;
        Ok(Response {
            status: status.trim().parse().context("curl's status")?,
            body: body.to_owned(),
            retry_after: None,
        })
    }

    fn get(&self, url: &str) -> Result<Response> {
        self.call("GET", url, None, None)
    }

    /// A GET that must answer 200; its JSON.
    fn expect_json(&self, url: &str) -> Result<Value> {
        let answer = self.get(url)?;
        if answer.status != 200 {
            bail!(
                "GET {url} on {}: {} {}",
                self.address,
                answer.status,
                answer.body
            );
        }
        serde_json::from_str(&answer.body).with_context(|| format!("GET {url}: {}", answer.body))
    }
}

/// pebble-challtestsrv as a DNS server alone (its challenge servers off): the DNS of the
/// registries (the TXT check) and of Pebble (the A record of the HTTP-01 check), set through its
/// management API.
struct MockDns {
    _process: Killed,
    /// Its DNS port (UDP and TCP) on 127.0.0.1.
    port: u16,
    /// Its management API's port on 127.0.0.1.
    management_port: u16,
    management: Http,
}

impl MockDns {
    fn start(dir: &Path) -> Result<MockDns> {
        let (port, management) = (free_port()?, free_port()?);
        let log = dir.join("challtestsrv.log");
        let mut process = spawn(
            Command::new("pebble-challtestsrv")
                .args(["-dns01", &format!("127.0.0.1:{port}")])
                .args(["-management", &format!("127.0.0.1:{management}")])
                .args(["-http01", "", "-https01", "", "-tlsalpn01", ""])
                // No AAAA answers: Pebble's HTTP-01 request goes to the A record's replica.
                .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""]),
            &log,
        )?;
        let management_port = management;
        let management = Http::local(management);
        ready(&mut process, &log, "pebble-challtestsrv", || {
            management.call("GET", "/", None, None).is_ok()
        })?;
        Ok(MockDns {
            _process: process,
            port,
            management_port,
            management,
        })
    }

    /// A call of its management API (`/set-txt`, `/add-a`…), which answers 200.
    fn post(&self, path: &str, body: &Value) -> Result<()> {
        let answer = self.management.call("POST", path, None, Some(body))?;
        if answer.status != 200 {
            bail!(
                "challtestsrv {path} {body}: {} {}",
                answer.status,
                answer.body
            );
        }
        Ok(())
    }
}

/// Pebble, on HTTPS with a certificate of this chore's own CA, resolving names with the mock
/// DNS, at full speed and without randomness: no sleep before validating, no nonce refused,
/// no authorization reused (each order is validated by HTTP-01 again).
struct Pebble {
    _process: Killed,
    /// Its ACME directory URL.
    directory: String,
    /// The CA of its HTTPS listeners (`REGISTRY_ACME_CA_FILE`).
    listener_ca: PathBuf,
    management: u16,
}

impl Pebble {
    fn start(dir: &Path, dns_port: u16) -> Result<Pebble> {
        let ca = TestCa::new("Pebble listener CA");
        let listener_ca = dir.join("pebble-listener-ca.pem");
        std::fs::write(&listener_ca, ca.pem())?;
        let (cert, key) = (dir.join("pebble.pem"), dir.join("pebble.key"));
        ca.server_certificate(&["localhost", "127.0.0.1"])
            .write(&cert, &key)?;
        let (port, management) = (free_port()?, free_port()?);
        let config = json!({"pebble": {
            "listenAddress": format!("127.0.0.1:{port}"),
            "managementListenAddress": format!("127.0.0.1:{management}"),
            "certificate": cert, "privateKey": key,
            "httpPort": HTTP01_PORT, "tlsPort": 5001,
            "ocspResponderURL": "", "externalAccountBindingRequired": false
        }});
        let config_file = dir.join("pebble.json");
        std::fs::write(&config_file, config.to_string())?;
        let log = dir.join("pebble.log");
        let mut process = spawn(
            Command::new("pebble")
                .arg("-config")
                .arg(&config_file)
                .args(["-dnsserver", &format!("127.0.0.1:{dns_port}")])
                .env("PEBBLE_VA_NOSLEEP", "1")
                .env("PEBBLE_WFE_NONCEREJECT", "0")
                .env("PEBBLE_AUTHZREUSE", "0"),
            &log,
        )?;
        let directory = format!("https://127.0.0.1:{port}/dir");
        let client = Curl::trusting("127.0.0.1", &listener_ca);
        ready(&mut process, &log, "pebble", || {
            client.get(&directory).is_ok_and(|r| r.status == 200)
        })?;
        Ok(Pebble {
            _process: process,
            directory,
            listener_ca,
            management,
        })
    }

    /// Its issuing root (made anew at each start), written to `pebble-root.pem`: what a client
    /// of the custom domain trusts.
    fn root(&self, dir: &Path) -> Result<PathBuf> {
        let url = format!("https://127.0.0.1:{}/roots/0", self.management);
        let answer = Curl::trusting("127.0.0.1", &self.listener_ca).get(&url)?;
        if answer.status != 200 || !answer.body.contains("BEGIN CERTIFICATE") {
            bail!("Pebble's root: {} {}", answer.status, answer.body);
        }
        let path = dir.join("pebble-root.pem");
        std::fs::write(&path, answer.body)?;
        Ok(path)
    }
}

/// Starts `command`, its output into `log`; killed when dropped.
fn spawn(command: &mut Command, log: &Path) -> Result<Killed> {
    let out = File::create(log)?;
    let child = command
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .with_context(|| format!("starting {}", command.get_program().to_string_lossy()))?;
    Ok(Killed(child))
}

/// Waits (at most 30 s) until `answers`, failing at once, with its log, when the process exits.
fn ready(process: &mut Killed, log: &Path, what: &str, answers: impl Fn() -> bool) -> Result<()> {
    let started = Instant::now();
    while !answers() {
        let exited = process.0.try_wait()?;
        if exited.is_some() || started.elapsed() > Duration::from_secs(30) {
            let why = exited.map_or_else(|| "not within 30 s".to_owned(), |s| s.to_string());
            let text = std::fs::read_to_string(log).unwrap_or_default();
            bail!(
                "{what} did not start ({why}); end of its log:\n{}",
                tail(&text)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// The replicas need the HTTPS port and Pebble's HTTP-01 port on their own addresses: root (or
/// a lowered `net.ipv4.ip_unprivileged_port_start`), and nothing else there.
fn ports_are_free() -> Result<()> {
    for address in [REPLICA_A, REPLICA_B] {
        for port in [443, HTTP01_PORT] {
            TcpListener::bind((address, port)).with_context(|| {
                format!(
                    "cannot listen on {address}:{port}, which a registry of this chore needs \
                     (port 443 needs root, or a lowered net.ipv4.ip_unprivileged_port_start)"
                )
            })?;
        }
    }
    Ok(())
}

/// `REGISTRY_DATA_KEY`: 32 random bytes, base64 (standard, padded).
fn data_key() -> Result<String> {
    let mut bytes = [0u8; 32];
    File::open("/dev/urandom")
        .and_then(|mut random| random.read_exact(&mut bytes))
        .context("reading /dev/urandom")?;
    Ok(STANDARD.encode(bytes))
}
