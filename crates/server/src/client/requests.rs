//! What the client commands send and how: each [`Call`] as a request of the API (checked against
//! the route table before it leaves), made through `registry-client`, its answer printed by
//! [`super::tables`] or its problem as one sentence; and `registry keys wait`'s polling.

use super::commands::{
    AccountsCommand, Call, ConfigCommand, Connection, DomainCommand, Format, KeysCommand,
    ServicesCommand,
};
use super::tables::{problem_sentence, table};
use registry_client::{config_path, path_segment as segment, Credentials, RegistryApi};
use serde_json::{json, Value};
use std::path::PathBuf;

/// Why a client command failed: one sentence.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// A file named on the command line could not be read or is not JSON.
    #[error("{0}")]
    File(String),
    /// The registry did not answer, or the credentials are missing.
    #[error("{0}")]
    Unreachable(String),
    /// The API answered a problem.
    #[error("{0}")]
    Problem(String),
}

/// A request: method, path, body.
type Request = (&'static str, String, Option<Value>);

fn read_json(path: &PathBuf) -> Result<Value, ClientError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ClientError::File(format!("cannot read {}: {e}", path.display())))?;
    serde_json::from_str(&text)
        .map_err(|e| ClientError::File(format!("{} is not JSON: {e}", path.display())))
}

/// Whether the API has a route for `method` on `path`: every call the commands make is one of
/// the route table's (`routes::table`), checked before it leaves.
fn routed(method: &str, path: &str) -> bool {
    use crate::route::serves;
    use crate::routes::table::ROUTES;
    ROUTES
        .iter()
        .any(|route| route.verb.method() == method && serves(route, path))
}

pub(super) fn request(call: &Call) -> Result<Request, ClientError> {
    let service = |s: &str| format!("/services/{}", segment(s));
    let account = |id: &str| format!("/service-accounts/{}", segment(id));
    Ok(match call {
        Call::Services(ServicesCommand::List) => ("GET", "/services".into(), None),
        Call::Services(ServicesCommand::Get { service: s }) => ("GET", service(s), None),
        Call::Services(ServicesCommand::Create {
            name,
            title,
            description,
        }) => {
            let mut body = json!({});
            for (field, value) in [
                ("serviceName", name),
                ("title", title),
                ("description", description),
            ] {
                if let Some(value) = value {
                    body[field] = json!(value);
                }
            }
            ("POST", "/services".into(), Some(body))
        }
        Call::Services(ServicesCommand::Delete { service: s }) => ("DELETE", service(s), None),
        Call::Config(ConfigCommand::Get { service: s, source }) => {
            ("GET", config_path(s, source.as_deref()), None)
        }
        Call::Config(ConfigCommand::Push {
            service: s,
            source,
            discovery_file,
            jwks_file,
            retain_hours,
            lead_seconds,
        }) => {
            let mut body = json!({
                "openidConfiguration": read_json(discovery_file)?,
                "jwks": read_json(jwks_file)?,
            });
            if let Some(hours) = retain_hours {
                body["retainRemovedKeysHours"] = json!(hours);
            }
            if let Some(seconds) = lead_seconds {
                body["rotationLeadSeconds"] = json!(seconds);
            }
            ("PUT", config_path(s, source.as_deref()), Some(body))
        }
        Call::Config(ConfigCommand::Delete { service: s, source }) => {
            ("DELETE", config_path(s, source.as_deref()), None)
        }
        Call::Domain(DomainCommand::Get { service: s }) => {
            ("GET", format!("{}/domain", service(s)), None)
        }
        Call::Domain(DomainCommand::Set { service: s, domain }) => (
            "PUT",
            format!("{}/domain", service(s)),
            Some(json!({"domain": domain})),
        ),
        Call::Domain(DomainCommand::Delete { service: s }) => {
            ("DELETE", format!("{}/domain", service(s)), None)
        }
        Call::Keys(KeysCommand::List { service: s }) => {
            ("GET", format!("{}/keys", service(s)), None)
        }
        Call::Keys(KeysCommand::Delete { service: s, kid }) => (
            "DELETE",
            format!("{}/keys/{}", service(s), segment(kid)),
            None,
        ),
        Call::Keys(
            KeysCommand::Readiness { service: s, kid }
            | KeysCommand::Wait {
                service: s, kid, ..
            },
        ) => (
            "GET",
            format!("{}/keys/{}/readiness", service(s), segment(kid)),
            None,
        ),
        Call::Accounts(AccountsCommand::List) => ("GET", "/service-accounts".into(), None),
        Call::Accounts(AccountsCommand::Get { id }) => ("GET", account(id), None),
        Call::Accounts(AccountsCommand::Create { name, policy_file }) => (
            "POST",
            "/service-accounts".into(),
            Some(json!({"name": name, "policy": read_json(policy_file)?})),
        ),
        Call::Accounts(AccountsCommand::Update {
            id,
            name,
            policy_file,
        }) => {
            let mut body = json!({});
            if let Some(name) = name {
                body["name"] = json!(name);
            }
            if let Some(file) = policy_file {
                body["policy"] = read_json(file)?;
            }
            ("PATCH", account(id), Some(body))
        }
        Call::Accounts(AccountsCommand::Delete { id }) => ("DELETE", account(id), None),
        Call::Accounts(AccountsCommand::Regenerate { id }) => {
            ("POST", format!("{}/regenerate-token", account(id)), None)
        }
        Call::Preflight {
            service: s,
            token_file: None,
        } => ("GET", format!("{}/preflight", service(s)), None),
        Call::Preflight {
            service: s,
            token_file: Some(file),
        } => {
            let token = std::fs::read_to_string(file)
                .map_err(|e| ClientError::File(format!("cannot read {}: {e}", file.display())))?;
            (
                "POST",
                format!("{}/preflight", service(s)),
                Some(json!({"token": token.trim()})),
            )
        }
        Call::Fetches { service: s } => ("GET", format!("{}/fetches", service(s)), None),
        Call::AuditEvents {
            since,
            action,
            limit,
        } => {
            let mut query = Vec::new();
            if let Some(limit) = limit {
                query.push(format!("limit={limit}"));
            }
            if let Some(action) = action {
                query.push(format!("action={}", segment(action)));
            }
            if let Some(since) = since {
                query.push(format!("since={}", segment(since)));
            }
            let query = if query.is_empty() {
                String::new()
            } else {
                format!("?{}", query.join("&"))
            };
            ("GET", format!("/audit-events{query}"), None)
        }
    })
}

/// The API client of a command and the runtime that drives it.
fn client(connection: &Connection) -> Result<(RegistryApi, tokio::runtime::Runtime), ClientError> {
    let credentials = Credentials::from_flags(
        connection.token.as_deref(),
        connection.identity_token_file.as_deref(),
    )
    .ok_or_else(|| {
        ClientError::Unreachable(
            "no credentials: set REGISTRY_TOKEN (or --token, or --identity-token-file)".into(),
        )
    })?;
    let api = RegistryApi::new(&connection.api_url, credentials)
        .map_err(|e| ClientError::Unreachable(e.to_string()))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ClientError::Unreachable(e.to_string()))?;
    Ok((api, runtime))
}

/// Makes `request`'s call: the answer of a success, the problem sentence of a failure.
fn call(
    (api, runtime): &(RegistryApi, tokio::runtime::Runtime),
    (method, path, body): &Request,
) -> Result<Value, ClientError> {
    if !routed(method, path) {
        return Err(ClientError::Unreachable(format!(
            "{method} {path} is no route of the registry's API"
        )));
    }
    let (status, answer) = runtime
        .block_on(api.call(method, path, body.as_ref()))
        .map_err(|e| ClientError::Unreachable(e.to_string()))?;
    if status >= 400 {
        return Err(ClientError::Problem(problem_sentence(status, &answer)));
    }
    Ok(answer)
}

/// How often `registry keys wait` asks.
const WAIT_POLL: std::time::Duration = std::time::Duration::from_secs(1);

/// Why `registry keys wait` stopped without the key being safe.
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    /// The timeout came first (exit 1).
    #[error("key {kid:?} is not safe to sign with after {waited:?}: still pending: {pending}")]
    TimedOut {
        /// The key.
        kid: String,
        /// How long it waited.
        waited: std::time::Duration,
        /// The reasons still pending.
        pending: String,
    },
    /// The registry refused or did not answer (exit 2).
    #[error(transparent)]
    Api(#[from] ClientError),
}

/// `registry keys wait`: polls the key's readiness, prints one JSON line each time `pending`
/// changes, and returns once the key is safe to sign with, or fails at `timeout`.
pub fn wait(connection: &Connection, command: Call) -> Result<(), WaitError> {
    let Call::Keys(KeysCommand::Wait { kid, timeout, .. }) = &command else {
        return Ok(());
    };
    let asked = request(&command)?;
    let api = client(connection)?;
    let started = std::time::Instant::now();
    let mut printed: Option<Value> = None;
    loop {
        let answer = call(&api, &asked)?;
        let safe = answer["safeToSign"] == true;
        let pending = answer["pending"].clone();
        if printed.as_ref() != Some(&pending) {
            let line = json!({
                "kid": answer["kid"],
                "safeToSign": safe,
                "safeToSignAt": answer["safeToSignAt"],
                "pending": pending,
            });
            println!("{line}");
            printed = Some(pending);
        }
        if safe {
            return Ok(());
        }
        let waited = started.elapsed();
        if waited >= *timeout {
            let reasons: Vec<&str> = (answer["pending"].as_array().into_iter().flatten())
                .filter_map(|p| p["reason"].as_str())
                .collect();
            return Err(WaitError::TimedOut {
                kid: kid.clone(),
                waited: *timeout,
                pending: reasons.join(", "),
            });
        }
        std::thread::sleep(WAIT_POLL.min(*timeout - waited));
    }
}

/// Runs a client command: the call, then what it prints.
pub fn run(connection: &Connection, call: Call) -> Result<(), ClientError> {
    let asked = request(&call)?;
    let answer = self::call(&client(connection)?, &asked)?;
    let text = match connection.format {
        Format::Json if answer.is_null() => String::new(),
        Format::Json => serde_json::to_string_pretty(&answer).unwrap_or_default(),
        Format::Table => table(&call, &answer),
    };
    if !text.is_empty() {
        println!("{}", text.trim_end());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_calls_a_route_of_the_table() {
        let s = || "api acme/x".to_owned();
        let calls = [
            Call::Services(ServicesCommand::List),
            Call::Services(ServicesCommand::Get { service: s() }),
            Call::Services(ServicesCommand::Delete { service: s() }),
            Call::Config(ConfigCommand::Get {
                service: s(),
                source: Some("blue".into()),
            }),
            Call::Config(ConfigCommand::Delete {
                service: s(),
                source: None,
            }),
            Call::Domain(DomainCommand::Get { service: s() }),
            Call::Domain(DomainCommand::Delete { service: s() }),
            Call::Keys(KeysCommand::List { service: s() }),
            Call::Keys(KeysCommand::Delete {
                service: s(),
                kid: "k/1".into(),
            }),
            Call::Keys(KeysCommand::Readiness {
                service: s(),
                kid: "k 1".into(),
            }),
            Call::Accounts(AccountsCommand::List),
            Call::Accounts(AccountsCommand::Get { id: "a".into() }),
            Call::Accounts(AccountsCommand::Delete { id: "a".into() }),
            Call::Accounts(AccountsCommand::Regenerate { id: "a".into() }),
            Call::Preflight {
                service: s(),
                token_file: None,
            },
            Call::Fetches { service: s() },
            Call::AuditEvents {
                since: None,
                action: Some("config.put".into()),
                limit: Some(5),
            },
        ];
        for call in &calls {
            let (method, path, _) = request(call).unwrap();
            assert!(routed(method, &path), "{method} {path}");
        }
        assert!(
            !routed("POST", "/services/x/keys"),
            "a method the path does not serve"
        );
        assert!(!routed("GET", "/services/x/nothing"));
    }

    #[test]
    fn a_problem_is_one_sentence_with_its_pointers() {
        let body = json!({"title": "Invalid request", "detail": "the request body is invalid (2 problems, see errors)",
            "errors": [{"pointer": "/name", "message": "is required"}, {"pointer": "/policy", "message": "is required"}]});
        assert_eq!(
            problem_sentence(400, &body),
            "Invalid request (400): the request body is invalid (2 problems, see errors); /name is required; /policy is required"
        );
    }

    #[test]
    fn path_segments_are_encoded() {
        assert_eq!(segment("k3s-acme"), "k3s-acme");
        assert_eq!(segment("a/b c"), "a%2Fb%20c");
    }
}
