//! What the client commands print of an answer: aligned columns for lists, `field: value`
//! lines for one resource, every control character escaped (docs/api.md, "Text people read").

use super::commands::{AccountsCommand, Call, DomainCommand, KeysCommand, ServicesCommand};
use registry_domain::text::escape_controls;
use serde_json::{json, Value};

/// The columns of a list: header and the JSON pointer of each row's value.
type Columns = &'static [(&'static str, &'static str)];

const SERVICES: Columns = &[
    ("SUBDOMAIN", "/subdomain"),
    ("TITLE", "/title"),
    ("ISSUER", "/issuer"),
    ("CREATED", "/createdAt"),
];
const ACCOUNTS: Columns = &[
    ("ID", "/id"),
    ("NAME", "/name"),
    ("KIND", "/policy/kind"),
    ("LAST USED", "/lastUsedAt"),
];
const KEYS: Columns = &[
    ("KID", "/kid"),
    ("STATE", "/state"),
    ("SOURCE", "/source"),
    ("ALG", "/alg"),
    ("FIRST PUBLISHED", "/firstPublishedAt"),
    ("PUBLISHED UNTIL", "/publishedUntil"),
];
const WITHDRAWN: Columns = &[
    ("WITHDRAWN KID", "/kid"),
    ("SOURCE", "/source"),
    ("RETIRED", "/retiredAt"),
    ("WITHDRAWN", "/withdrawnAt"),
];
const EVENTS: Columns = &[
    ("AT", "/at"),
    ("ACTION", "/action"),
    ("RESOURCE", "/resource/type"),
    ("ID", "/resource/id"),
    ("ACTOR", "/actor/kind"),
];
const VERIFIERS: Columns = &[
    ("VERIFIER", "/agent"),
    ("LAST FETCH", "/lastFetchedAt"),
    ("FETCHED SINCE KEY", "/fetchedSinceKey"),
    ("NETWORKS", "/networkList"),
];
const RECORDS: Columns = &[("TYPE", "/type"), ("NAME", "/name"), ("VALUE", "/value")];
const FETCHES: Columns = &[
    ("ISSUER", "/issuer"),
    ("PATH", "/path"),
    ("FETCHED SINCE CHANGE", "/fetchedSinceChange"),
    ("FETCHES 24H", "/fetches24h"),
    ("LAST FETCH", "/lastFetchedAt"),
    ("LAST CHANGED", "/lastChangedAt"),
];

const AGENTS: Columns = &[
    ("ISSUER", "/issuer"),
    ("PATH", "/path"),
    ("AGENT", "/agent"),
    ("FETCHES 24H", "/count"),
    ("LAST FETCH", "/lastFetchedAt"),
];

/// What a table mode prints for the answer to `call`.
pub(super) fn table(call: &Call, answer: &Value) -> String {
    let list = |rows: &Value, columns: Columns| {
        rows_table(rows.as_array().map_or(&[], Vec::as_slice), columns)
    };
    match call {
        Call::Services(ServicesCommand::List) => list(answer, SERVICES),
        Call::Accounts(AccountsCommand::List) => list(answer, ACCOUNTS),
        Call::Keys(KeysCommand::List { .. }) => {
            let mut text = list(&answer["keys"], KEYS);
            // The keys gone in the last eight days, which a verifier may still ask for.
            if answer["withdrawn"]
                .as_array()
                .is_some_and(|w| !w.is_empty())
            {
                text.push_str("\n\n");
                text.push_str(&list(&answer["withdrawn"], WITHDRAWN));
            }
            text
        }
        Call::Keys(KeysCommand::Readiness { .. }) => {
            let mut text = fields(&json!({
                "kid": answer["kid"],
                "state": answer["state"],
                "safeToSign": answer["safeToSign"],
                "safeToSignAt": answer["safeToSignAt"],
                "leadSeconds": answer["leadSeconds"],
                "firstPublishedAt": answer["firstPublishedAt"],
            }));
            for pending in answer["pending"].as_array().into_iter().flatten() {
                text.push_str(&format!(
                    "\npending: {}: {}",
                    cell(pending.get("reason")),
                    cell(pending.get("message"))
                ));
            }
            // A verifier's networks as a list people read (`a, b`), not JSON.
            let verifiers: Vec<Value> = (answer["verifiers"].as_array().into_iter().flatten())
                .map(|verifier| {
                    let networks: Vec<&str> = (verifier["networks"].as_array().into_iter())
                        .flatten()
                        .filter_map(Value::as_str)
                        .collect();
                    let mut row = verifier.clone();
                    row["networkList"] = json!(networks.join(", "));
                    row
                })
                .collect();
            text.push_str("\n\n");
            text.push_str(&rows_table(&verifiers, VERIFIERS));
            text
        }
        Call::AuditEvents { .. } => {
            let mut text = list(&answer["events"], EVENTS);
            // Where the next page starts, as the flag that asks for it.
            if let Some(next) = answer["nextCursor"].as_str() {
                text.push_str(&format!("\nmore: --cursor {next}"));
            }
            text
        }
        Call::Fetches { .. } => {
            // Who fetched: each document's agents, in a table of their own.
            let mut agents = Vec::new();
            for document in answer["documents"].as_array().into_iter().flatten() {
                for agent in document["agents"].as_array().into_iter().flatten() {
                    agents.push(
                        json!({"issuer": document["issuer"], "path": document["path"],
                        "agent": agent["agent"], "count": agent["count"],
                        "lastFetchedAt": agent["lastFetchedAt"]}),
                    );
                }
            }
            format!(
                "{}\n\n{}",
                list(&answer["documents"], FETCHES),
                rows_table(&agents, AGENTS)
            )
        }
        Call::Preflight { .. } => {
            // Each cloud's verdict, then each finding with what to do about it.
            let (mut verdicts, mut findings) = (Vec::new(), Vec::new());
            for (cloud, verdict) in answer["clouds"].as_object().into_iter().flatten() {
                let found = verdict["findings"]
                    .as_array()
                    .map_or(&[][..], Vec::as_slice);
                verdicts.push(json!({"cloud": cloud, "ready": verdict["ready"],
                    "findings": found.len()}));
                findings.extend(found.iter().map(|f| {
                    json!({"cloud": cloud, "severity": f["severity"], "code": f["code"],
                        "pointer": f["pointer"], "message": f["message"]})
                }));
            }
            let mut text =
                fields(&json!({"issuer": answer["issuer"], "published": answer["published"]}));
            text.push_str("\n\n");
            text.push_str(&rows_table(
                &verdicts,
                &[
                    ("CLOUD", "/cloud"),
                    ("READY", "/ready"),
                    ("FINDINGS", "/findings"),
                ],
            ));
            if !findings.is_empty() {
                text.push_str("\n\n");
                text.push_str(&rows_table(
                    &findings,
                    &[
                        ("CLOUD", "/cloud"),
                        ("SEVERITY", "/severity"),
                        ("CODE", "/code"),
                        ("AT", "/pointer"),
                        ("WHAT TO DO", "/message"),
                    ],
                ));
            }
            text
        }
        Call::Domain(DomainCommand::Get { .. } | DomainCommand::Set { .. }) => {
            let mut summary = json!({"domain": answer["domain"], "status": answer["status"]});
            if let Some(certificate) = answer.get("certificate") {
                summary["certificate"] = json!(format!(
                    "{} until {}",
                    cell(certificate.get("issuer")),
                    cell(certificate.get("notAfter"))
                ));
            }
            if let Some(error) = answer.get("error") {
                summary["error"] = json!(format!(
                    "{}: {}",
                    cell(error.get("code")),
                    cell(error.get("message"))
                ));
            }
            format!(
                "{}\n\n{}",
                fields(&summary),
                list(&answer["records"], RECORDS)
            )
        }
        _ if answer.is_null() => "done".into(),
        _ => fields(answer),
    }
}

/// A value as a cell: text as it is, `-` for nothing, anything else as compact JSON; any
/// control character escaped (`\u{1b}`), since a stored title or agent printed raw would act
/// on the operator's terminal (docs/api.md, "Text people read").
fn cell(value: Option<&Value>) -> String {
    let text = match value {
        None | Some(Value::Null) => return "-".into(),
        Some(Value::String(text)) if text.is_empty() => return "-".into(),
        Some(Value::String(text)) => return escape_controls(text).into_owned(),
        // serde_json leaves C1 controls and U+2028/U+2029 as they are.
        Some(other) => other.to_string(),
    };
    escape_controls(&text).into_owned()
}

/// Rows as aligned columns under their headers.
fn rows_table(rows: &[Value], columns: Columns) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            columns
                .iter()
                .map(|(_, at)| cell(row.pointer(at)))
                .collect()
        })
        .collect();
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, (header, _))| {
            cells
                .iter()
                .map(|row| row[i].chars().count())
                .chain([header.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |values: Vec<&str>| {
        values
            .iter()
            .zip(&widths)
            .map(|(value, width)| format!("{value:<width$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_owned()
    };
    let mut out = vec![line(columns.iter().map(|(header, _)| *header).collect())];
    out.extend(
        cells
            .iter()
            .map(|row| line(row.iter().map(String::as_str).collect())),
    );
    out.join("\n")
}

/// One resource as `field: value` lines, in the API's order.
fn fields(answer: &Value) -> String {
    match answer.as_object() {
        Some(object) => object
            .iter()
            .map(|(name, value)| format!("{}: {}", escape_controls(name), cell(Some(value))))
            .collect::<Vec<_>>()
            .join("\n"),
        None => cell(Some(answer)),
    }
}

/// A problem answer as one sentence: its title, its detail, and each pointer with its message.
pub(super) fn problem_sentence(status: u16, body: &Value) -> String {
    let title = body["title"].as_str().unwrap_or("the API refused the call");
    let mut sentence = format!("{title} ({status})");
    let text = registry_client::problem_text(body);
    if !text.is_empty() {
        sentence.push_str(&format!(": {text}"));
    }
    // The detail and messages may quote what the caller sent.
    escape_controls(&sentence).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::requests::request;

    #[test]
    fn a_resource_prints_its_field_names_inert_too() {
        let answer = json!({"id": "a", "name\u{1b}]0;pwned\u{7}": "x"});
        let text = fields(&answer);
        assert!(!text.contains('\u{1b}'), "{text}");
        assert!(text.contains("name\\u{1b}]0;pwned\\u{7}: x"), "{text}");
    }

    #[test]
    fn the_fetches_say_who_fetched() {
        let answer = json!({"documents": [{"issuer": "http://k3s-acme.localhost:8080",
            "path": "/openid/v1/jwks", "fetchedSinceChange": true, "fetches24h": 3,
            "lastFetchedAt": "2026-11-30T10:00:00Z",
            "agents": [{"agent": "aws-sts", "count": 2, "lastFetchedAt": "2026-11-30T10:00:00Z"},
                       {"agent": "other", "count": 1, "lastFetchedAt": "2026-11-30T09:00:00Z"}]}]});
        let text = table(
            &Call::Fetches {
                service: "k3s-acme".into(),
            },
            &answer,
        );
        let agents: Vec<&str> = text.lines().skip_while(|l| !l.contains("AGENT")).collect();
        assert!(
            agents.len() == 3 && agents[1].contains("aws-sts") && agents[1].contains(" 2 "),
            "{text}"
        );
        assert!(agents[2].contains("other"), "{text}");
    }

    #[test]
    fn keys_show_the_withdrawn_and_readiness_its_reasons_and_networks() {
        let keys = json!({"keys": [{"kid": "k2", "state": "current"}],
            "withdrawn": [{"kid": "k1", "source": "default", "retiredAt": "2026-11-30T10:00:00Z",
                "withdrawnAt": "2026-11-30T11:00:00Z"}]});
        let text = table(
            &Call::Keys(KeysCommand::List {
                service: "k3s-acme".into(),
            }),
            &keys,
        );
        let withdrawn: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("WITHDRAWN"))
            .collect();
        assert!(
            withdrawn.len() == 2
                && withdrawn[1].starts_with("k1")
                && withdrawn[1].ends_with("11:00:00Z"),
            "{text}"
        );
        let none = json!({"keys": [], "withdrawn": []});
        let call = Call::Keys(KeysCommand::List {
            service: "k3s-acme".into(),
        });
        assert!(!table(&call, &none).contains("WITHDRAWN"));
        let readiness = json!({"kid": "k2", "pending": [{"reason": "verifier", "agent": "aws",
            "message": "aws has not fetched"}],
            "verifiers": [{"agent": "aws", "networks": ["203.0.113.0/24"], "fetchedSinceKey": false}]});
        let text = table(
            &Call::Keys(KeysCommand::Readiness {
                service: "k3s-acme".into(),
                kid: "k2".into(),
            }),
            &readiness,
        );
        assert!(
            text.contains("pending: verifier: aws has not fetched"),
            "{text}"
        );
        assert!(
            text.contains("203.0.113.0/24") && !text.contains("[\""),
            "{text}"
        );
    }

    #[test]
    fn a_stored_escape_sequence_is_printed_escaped_in_tables_fields_and_problems() {
        let osc52 = "Dev\u{1b}]52;c;aGFjaw==\u{7}\u{1b}[2J\u{9b}31m\u{2028}";
        let rows = [json!({"subdomain": "k3s-acme", "title": osc52,
            "issuer": "http://k3s-acme.localhost:8080", "createdAt": "2026-11-26T10:00:00Z"})];
        let text = rows_table(&rows, SERVICES);
        assert!(
            text.contains("Dev\\u{1b}]52;c;aGFjaw==\\u{7}\\u{1b}[2J\\u{9b}31m\\u{2028}"),
            "{text}"
        );
        let one = fields(&json!({"title": osc52, "tags": [osc52]}));
        let problem = problem_sentence(
            400,
            &json!({"title": "Invalid request", "detail": osc52, "errors": [{"pointer": "/title", "message": osc52}]}),
        );
        for shown in [text, one, problem] {
            assert!(
                !shown
                    .chars()
                    .any(|c| c != '\n' && registry_domain::text::is_control(c)),
                "{shown:?}"
            );
        }
    }

    #[test]
    fn lists_are_aligned_columns_with_a_dash_for_nothing() {
        let rows = [
            json!({"subdomain": "k3s-acme", "title": "Dev", "issuer": "http://k3s-acme.localhost:8080", "createdAt": "2026-11-26T10:00:00Z"}),
            json!({"subdomain": "a-acme", "title": null, "issuer": "http://a-acme.localhost:8080", "createdAt": "2026-11-26T11:00:00Z"}),
        ];
        let text = rows_table(&rows, SERVICES);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "SUBDOMAIN  TITLE  ISSUER                          CREATED"
        );
        assert_eq!(
            lines[2],
            "a-acme     -      http://a-acme.localhost:8080    2026-11-26T11:00:00Z"
        );
    }

    #[test]
    fn a_domain_shows_its_status_certificate_problem_and_records() {
        let answer = json!({"domain": "login.acme.com", "status": "active",
            "records": [
                {"type": "CNAME", "name": "login.acme.com", "value": "k3s-acme.oidc.example.com"},
                {"type": "TXT", "name": "_registry-challenge.login.acme.com", "value": "t0k3n"}],
            "certificate": {"notBefore": "2026-11-28T00:00:00Z", "notAfter": "2027-02-26T00:00:00Z",
                "issuer": "CN=R11"},
            "error": {"code": "acme-order-failed", "message": "the renewal failed"}});
        let call = Call::Domain(DomainCommand::Get {
            service: "k3s-acme".into(),
        });
        let text = table(&call, &answer);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[..4],
            [
                "domain: login.acme.com",
                "status: active",
                "certificate: CN=R11 until 2027-02-26T00:00:00Z",
                "error: acme-order-failed: the renewal failed",
            ]
        );
        assert_eq!(lines[5], "TYPE   NAME                                VALUE");
        assert_eq!(lines[7], "TXT    _registry-challenge.login.acme.com  t0k3n");
        let set = Call::Domain(DomainCommand::Set {
            service: "k3s-acme".into(),
            domain: "login.acme.com".into(),
        });
        assert_eq!(
            request(&set).ok(),
            Some((
                "PUT",
                "/services/k3s-acme/domain".to_owned(),
                Some(json!({"domain": "login.acme.com"}))
            ))
        );
    }
}
