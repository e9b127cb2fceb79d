//! Fourth security review, "Text people read is inert" (docs/api.md, "Text people read"): a
//! title, a name or a description holding a control character is refused with its pointer, on
//! every way in (the API, the operator's command line); a description keeps its tab and line
//! feed; what was accepted reads back as it was sent; a path cannot forge fields of the text
//! log.

use registry_tests::server::{assert_problem, json, pointers, run_cli, TestServer};
use reqwest::blocking::Response;
use reqwest::Method;
use serde_json::{json, Value};

/// ESC then OSC 52 (write the clipboard), a line feed, NEL (C1), DEL and the line separator;
/// and a NEL alone (which trims to nothing: the problem is still the control character).
const HOSTILE: [&str; 6] = [
    "Dev\u{1b}]52;c;aGFjaw==\u{7}",
    "two\nlines",
    "next\u{85}line",
    "del\u{7f}",
    "js\u{2028}line",
    "\u{85}",
];

fn send(
    server: &TestServer,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Value,
) -> Response {
    let request = match token {
        Some(token) => server.authed(method, path, token),
        None => server.request(method, path),
    };
    request.json(&body).send().unwrap()
}

#[track_caller]
fn refused_at(response: Response, expected: &[&str]) {
    let problem = assert_problem(response, 400, "validation-failed");
    assert_eq!(pointers(&problem), expected, "{problem}");
    assert!(
        problem.to_string().contains("control character"),
        "{problem}"
    );
}

#[test]
fn control_characters_in_titles_names_and_descriptions_are_refused_with_their_pointer() {
    let server = TestServer::start();
    let acme = server.customer("acme", "business");
    let token = Some(acme.token.as_str());

    for bad in HOSTILE {
        refused_at(
            send(
                &server,
                Method::POST,
                "/services",
                token,
                json!({"title": bad}),
            ),
            &["/title"],
        );
        refused_at(
            send(
                &server,
                Method::POST,
                "/anonymous/services",
                None,
                json!({"title": bad}),
            ),
            &["/title"],
        );
        refused_at(
            send(
                &server,
                Method::POST,
                "/service-accounts",
                token,
                json!({"name": bad, "policy": {"kind": "static", "services": ["*"]}}),
            ),
            &["/name"],
        );
    }
    // Both members at once: one 400 with both pointers.
    refused_at(
        send(
            &server,
            Method::POST,
            "/services",
            token,
            json!({"title": "a\u{9b}b", "description": "c\u{1b}[2Jd"}),
        ),
        &["/title", "/description"],
    );
    // A description keeps tab and line feed, and nothing else of the kind.
    let prose = "First line.\n\tIndented second line.";
    let created = send(
        &server,
        Method::POST,
        "/services",
        token,
        json!({"title": "Billing — 請求 ☕", "serviceName": "billing", "description": prose}),
    );
    assert_eq!(created.status(), 201);
    let created = json(created);
    assert_eq!(created["description"], prose);
    assert_eq!(created["title"], "Billing — 請求 ☕");
    let service = format!("/services/{}", created["subdomain"].as_str().unwrap());
    for bad in [
        "carriage\rreturn",
        "esc\u{1b}",
        "para\u{2029}sep",
        "nul\u{1}",
    ] {
        refused_at(
            send(
                &server,
                Method::PATCH,
                &service,
                token,
                json!({"description": bad}),
            ),
            &["/description"],
        );
    }
    refused_at(
        send(
            &server,
            Method::PATCH,
            &service,
            token,
            json!({"title": "x\ty"}),
        ),
        &["/title"],
    );
    refused_at(
        send(
            &server,
            Method::POST,
            "/anonymous/services",
            None,
            json!({"description": "\u{80}"}),
        ),
        &["/description"],
    );
    let account = json(send(
        &server,
        Method::POST,
        "/service-accounts",
        token,
        json!({"name": "deployer", "policy": {"kind": "static", "services": ["*"]}}),
    ));
    let account = format!("/service-accounts/{}", account["id"].as_str().unwrap());
    refused_at(
        send(
            &server,
            Method::PATCH,
            &account,
            token,
            json!({"name": "de\u{1b}ployer"}),
        ),
        &["/name"],
    );
    // Nothing refused was stored.
    let stored = json(server.get(&service, &acme.token));
    assert_eq!(stored["description"], prose);
    let listed = json(server.get("/services", &acme.token)).to_string();
    assert!(
        !listed.contains("\\u001b") && !listed.contains('\u{85}'),
        "{listed}"
    );
}

#[test]
fn the_operators_customer_name_holds_no_control_character() {
    let server = TestServer::start();
    for bad in HOSTILE {
        let error = run_cli(
            &[
                "customer", "create", "--tenant", "globex", "--plan", "team", "--name", bad,
            ],
            &server.database_url,
        )
        .unwrap_err();
        assert!(error.contains("--name must not hold"), "{bad:?}: {error}");
        assert!(error.contains("control character"), "{bad:?}: {error}");
    }
    let listed = run_cli(&["customer", "list"], &server.database_url).unwrap();
    assert_eq!(listed, json!([]));
    let created = run_cli(
        &[
            "customer",
            "create",
            "--tenant",
            "globex",
            "--plan",
            "team",
            "--name",
            "Globex ☕",
        ],
        &server.database_url,
    )
    .unwrap();
    assert_eq!(created["customer"]["name"], "Globex ☕");
}

/// The text log quotes a path that could pass for fields of its own (`/x"route=/services`):
/// one request, one line, the fields it had.
#[test]
fn a_path_cannot_forge_fields_of_the_text_log() {
    use std::io::{Read, Write};
    let server = TestServer::start_with(registry_tests::server::ServerOptions::binary(&[(
        "REGISTRY_LOG_FORMAT",
        "text",
    )]));
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    stream
        .write_all(
            b"GET /x\"route=/services HTTP/1.1\r\nHost: 127.0.0.1\r\n\
              User-Agent: curl \"a=b\"\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    let log = server.log_when(|log| log.contains("route=(unmatched)"));
    let line = log
        .lines()
        .find(|l| l.contains("request method=GET route=(unmatched)"))
        .unwrap_or_else(|| panic!("no request line in {log}"));
    assert!(
        line.contains(r#" path="/x\"route=/services" status=404 "#),
        "{line}"
    );
    assert_eq!(line.matches(" route=").count(), 1, "{line}");
    assert!(line.contains(r#" user_agent="curl \"a=b\"""#), "{line}");
}
