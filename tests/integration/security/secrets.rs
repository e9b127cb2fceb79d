//! Secrets (static tokens, anonymous secrets, identity tokens, uploaded private key material)
//! never reach the server log, an error body, a later read, `/metrics` or the CLI, and the
//! database holds only their hashes: the whole database is dumped (Python's `sqlite3`
//! `iterdump`, or `pg_dump` on PostgreSQL) and searched.

use super::{assert_no_secret, claims, create_service, oidc_account, static_account};
use crate::api::upload;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use registry_tests::issuer::TestIssuer;
use registry_tests::server::{run_cli, TestServer};
use registry_tests::{postgres_tool, sqlite_python};
use reqwest::Method;
use serde_json::json;
use std::process::Command;

/// Records what the server answered, except the one response that hands a secret out.
struct Transcript<'a> {
    server: &'a TestServer,
    seen: Vec<String>,
    /// The request id of each response: the log is read once each has its line.
    ids: Vec<String>,
}

impl Transcript<'_> {
    fn call(
        &mut self,
        method: Method,
        path: &str,
        authorization: Option<&str>,
        body: Option<serde_json::Value>,
    ) -> u16 {
        self.call_with(method, path, authorization, body, &[])
    }

    /// [`Transcript::call`] with more request headers.
    fn call_with(
        &mut self,
        method: Method,
        path: &str,
        authorization: Option<&str>,
        body: Option<serde_json::Value>,
        headers: &[(&str, &str)],
    ) -> u16 {
        let mut request = self.server.request(method.clone(), path);
        if let Some(value) = authorization {
            request = request.header("authorization", value);
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().unwrap();
        let status = response.status().as_u16();
        let id = &response.headers()["x-request-id"];
        self.ids.push(id.to_str().unwrap().to_owned());
        let headers = format!("{:?}", response.headers());
        let text = response.text().unwrap();
        // The path may hold a secret on purpose: the label keeps only what precedes a query.
        let route = path.split('?').next().unwrap_or(path);
        let route = route.split("/rg").next().unwrap_or(route);
        self.seen
            .push(format!("{method} {route} → {status}\n{headers}\n{text}"));
        status
    }
}

/// The whole database as SQL text.
pub(super) fn dump(database_url: &str) -> String {
    let output = match database_url.strip_prefix("sqlite://") {
        Some(path) => sqlite_python(path, "print('\\n'.join(db.iterdump()))", ""),
        None => Command::new(postgres_tool("pg_dump"))
            .arg("--no-owner")
            .arg(database_url)
            .output()
            .expect("run pg_dump"),
    };
    assert!(
        output.status.success(),
        "dumping the database failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("a UTF-8 dump")
}

#[test]
fn secrets_reach_neither_logs_nor_bodies_nor_the_database_in_plaintext() {
    let server = registry_tests::server::insecure_binary_server();
    let issuer = TestIssuer::start();
    let iss = issuer.url();
    let acme = server.customer("acme", "business");
    let (api, _) = create_service(&server, &acme, "api");
    let (account, first) = static_account(&server, &acme, &["*"]);
    let regenerated = server
        .authed(
            Method::POST,
            &format!("/service-accounts/{account}/regenerate-token"),
            &acme.token,
        )
        .send()
        .unwrap();
    assert_eq!(regenerated.status(), 200);
    let second = regenerated.json::<serde_json::Value>().unwrap()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let (anon, anon_secret) = server.anonymous_service();
    let (_, other_anon_secret) = server.anonymous_service();
    oidc_account(&server, &acme, &iss, "repo:acme/*");
    let federated = issuer.mint("ES256", claims(&iss, "repo:acme/api"));
    // Private key material uploaded by mistake is a secret too: refused, and never echoed.
    let random = |n: usize| -> Vec<u8> {
        (0..n.div_ceil(16))
            .flat_map(|_| uuid::Uuid::new_v4().into_bytes())
            .take(n)
            .collect()
    };
    let private_d = URL_SAFE_NO_PAD.encode(random(256));
    let private_p = URL_SAFE_NO_PAD.encode(random(128));
    let secrets = vec![
        acme.token.clone(),
        first.clone(),
        second.clone(),
        anon_secret.clone(),
        other_anon_secret.clone(),
        federated.clone(),
        private_d.clone(),
        private_p.clone(),
    ];

    let mut t = Transcript {
        server: &server,
        seen: Vec::new(),
        ids: Vec::new(),
    };
    let bearer = |token: &str| format!("Bearer {token}");
    // Honest use of every credential.
    assert_eq!(
        t.call(Method::GET, "/services", Some(&bearer(&acme.token)), None),
        200
    );
    assert_eq!(
        t.call(
            Method::GET,
            "/service-accounts",
            Some(&bearer(&second)),
            None
        ),
        200
    );
    assert_eq!(
        t.call(
            Method::GET,
            &format!("/service-accounts/{account}"),
            Some(&bearer(&second)),
            None
        ),
        200
    );
    assert_eq!(
        t.call(
            Method::GET,
            &format!("/services/{anon}"),
            Some(&bearer(&anon_secret)),
            None
        ),
        200
    );
    assert_eq!(
        t.call(
            Method::GET,
            &format!("/services/{api}"),
            Some(&bearer(&federated)),
            None
        ),
        200
    );
    // Every way of getting it wrong.
    assert_eq!(
        t.call(Method::GET, "/services", Some(&bearer(&first)), None),
        401,
        "revoked"
    );
    let mut tampered = second.clone();
    tampered.replace_range(tampered.len() - 4.., "zzzz");
    assert_eq!(
        t.call(Method::GET, "/services", Some(&bearer(&tampered)), None),
        401
    );
    assert_eq!(
        t.call(
            Method::GET,
            "/services",
            Some(&format!("Bearer {second} extra")),
            None
        ),
        401
    );
    assert_eq!(
        t.call(
            Method::GET,
            "/services",
            Some(&format!("Basic {second}")),
            None
        ),
        401
    );
    assert_eq!(
        t.call(
            Method::GET,
            "/services",
            Some(&format!("Bearer {}", &second[..second.len() - 1])),
            None
        ),
        401
    );
    assert_eq!(
        t.call(
            Method::GET,
            &format!("/services/{anon}"),
            Some(&bearer(&other_anon_secret)),
            None
        ),
        404
    );
    assert_eq!(
        t.call(
            Method::GET,
            "/service-accounts",
            Some(&bearer(&anon_secret)),
            None
        ),
        403
    );
    assert_eq!(
        t.call(
            Method::POST,
            "/services",
            Some(&bearer(&anon_secret)),
            Some(json!({"title": "x"}))
        ),
        403
    );
    let mut forged = federated.clone();
    forged.replace_range(forged.len() - 6.., "AAAAAA");
    assert_eq!(
        t.call(
            Method::GET,
            &format!("/services/{api}"),
            Some(&bearer(&forged)),
            None
        ),
        401
    );
    // A careless client puts the token in the query string: the log keeps only the route.
    assert_eq!(
        t.call(
            Method::GET,
            &format!("/services?access_token={second}"),
            None,
            None
        ),
        401
    );
    // Or in a path no route serves, a Host, a User-Agent: the line shows them, the token cut
    // out.
    assert_eq!(
        t.call(Method::GET, &format!("/nope/{second}"), None, None),
        404
    );
    let host = format!("{anon_secret}.localhost");
    let agent = format!("deploy-bot {second}");
    // And a request id holding a token is no request id: a new one is logged and answered.
    let carriers: [&[(&str, &str)]; 2] = [
        &[("host", &host), ("user-agent", &agent)],
        &[("x-request-id", &second)],
    ];
    for headers in carriers {
        assert_eq!(
            t.call_with(Method::GET, "/healthz", None, None, headers),
            200
        );
    }
    let mut leaked = upload(&["k1"]);
    leaked["jwks"]["keys"][0]["d"] = json!(private_d);
    leaked["jwks"]["keys"][0]["p"] = json!(private_p);
    assert_eq!(
        t.call(
            Method::PUT,
            &format!("/services/{api}/config"),
            Some(&bearer(&second)),
            Some(leaked)
        ),
        400
    );
    assert_eq!(t.call(Method::GET, "/metrics", None, None), 200);
    // Searched once every request above has its line (a thread flushes the log): a log read
    // too early would hold no secret because it held nothing yet.
    let every_line = |log: &str| t.ids.iter().all(|id| log.contains(id.as_str()));
    let log = server.log_when(every_line);
    assert!(every_line(&log), "a request was never logged: {log}");

    for seen in &t.seen {
        assert_no_secret(
            &format!("the response to {}", seen.lines().next().unwrap_or("")),
            seen,
            &secrets,
        );
    }
    assert_no_secret("the server log", &log, &secrets);
    for shown in [
        "path=/nope/rgst_[redacted]",
        "host=\"rgan_[redacted].localhost\"",
        "user_agent=\"deploy-bot rgst_[redacted]\"",
    ] {
        assert!(log.contains(shown), "no {shown} in {log}");
    }
    let listed = run_cli(&["customer", "list"], &server.database_url).expect("customer list");
    assert_no_secret("`registry customer list`", &listed.to_string(), &secrets);

    let database_url = server.database_url.clone();
    drop(server);
    let dump = dump(&database_url);
    assert!(
        dump.contains("$argon2id$"),
        "no argon2id hash in the database dump"
    );
    let lookup = second.split('_').nth(1).unwrap();
    assert!(
        dump.contains(lookup),
        "the public lookup id is stored for the indexed look-up"
    );
    assert_no_secret("the database", &dump, &secrets);
}
