//! What the client commands send and how: each [`Call`] as a request of the API (checked against
//! the route table before it leaves), made through `registry-client`, its answer printed by
//! [`super::tables`] or its problem as one sentence; and `registry keys wait`'s polling.

use super::commands::{
    AccountsCommand, Call, ConfigCommand, Connection, DomainCommand, Format, KeysCommand,
    ServicesCommand,
};
use super::tables::{problem_sentence, table};
use crate::route::Verb::{self, Delete, Get, Patch, Post, Put};
use crate::routes::table;
use registry_client::{path_segment as segment, RegistryApi};
use serde_json::{json, Value};
use std::path::Path;

/// Why a client command failed: one sentence.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// A file named on the command line could not be read or is not JSON.
    #[error("{0}")]
    File(String),
    /// The command line cannot make a call: no credentials, an API URL that is none (exit 2,
    /// as for any other usage error).
    #[error("{0}")]
    Usage(String),
    /// The registry did not answer, or not as the registry does.
    #[error("{0}")]
    Unreachable(String),
    /// The API answered a problem.
    #[error("{0}")]
    Problem(String),
}

/// A request: method, path, body.
type Request = (&'static str, String, Option<Value>);

/// A local file's text, bounded (`registry_client::read_text_file`).
fn read_file(path: &Path) -> Result<String, ClientError> {
    registry_client::read_text_file(path).map_err(|e| ClientError::File(e.to_string()))
}

fn read_json(path: &Path) -> Result<Value, ClientError> {
    let text = read_file(path)?;
    // Read as the API reads a body: a member named twice, or a number that would be sent as
    // another, is refused here, not quietly sent otherwise.
    let value = registry_domain::json::parse_unique(text.as_bytes())
        .map_err(|e| ClientError::File(format!("{} is not JSON: {e}", path.display())))?;
    match registry_domain::json::number_changed(text.as_bytes(), &value) {
        None => Ok(value),
        Some((_, sentence)) => Err(ClientError::File(format!("{}: {sentence}", path.display()))),
    }
}

/// The request of the route of the table (`routes::table`) that serves `verb` on `pattern`,
/// its `{name}` segments filled with `values` (each percent-encoded), with `body`: every call a
/// command makes is derived from the table, so it names a route the server serves.
fn api(
    verb: Verb,
    pattern: &str,
    values: &[&str],
    body: Option<Value>,
) -> Result<Request, ClientError> {
    // `services get ..` would ask for `/`. No name of the registry is one.
    if let Some(dots) = values
        .iter()
        .find(|v| v.is_empty() || registry_domain::segment::is_dot_segment(v))
    {
        return Err(ClientError::Usage(format!(
            "{dots:?} is no name the registry gives: a name cannot be empty, . or .."
        )));
    }
    let route = table::find(verb, pattern).ok_or_else(|| {
        ClientError::Unreachable(format!(
            "{} {pattern} is no route of the registry's API",
            verb.method()
        ))
    })?;
    Ok((verb.method(), route.path_with(values), body))
}

/// `request` with `?source=` when a key source is named.
fn with_source(request: Request, source: Option<&str>) -> Request {
    with_query(request, "source", source)
}

/// `request` with `?{name}=` when `value` is given.
fn with_query((method, path, body): Request, name: &str, value: Option<&str>) -> Request {
    match value {
        Some(value) => (method, format!("{path}?{name}={}", segment(value)), body),
        None => (method, path, body),
    }
}

pub(super) fn request(call: &Call) -> Result<Request, ClientError> {
    const SERVICE: &str = "/services/{subdomain}";
    const ACCOUNT: &str = "/service-accounts/{id}";
    Ok(match call {
        Call::Services(ServicesCommand::List) => api(Get, "/services", &[], None)?,
        Call::Services(ServicesCommand::Get { service: s }) => api(Get, SERVICE, &[s], None)?,
        Call::Services(ServicesCommand::Create {
            name,
            title,
            description,
        }) => {
            let mut body = json!({ "title": title });
            for (field, value) in [("serviceName", name), ("description", description)] {
                if let Some(value) = value {
                    body[field] = json!(value);
                }
            }
            api(Post, "/services", &[], Some(body))?
        }
        Call::Services(ServicesCommand::Delete { service: s }) => api(Delete, SERVICE, &[s], None)?,
        Call::Config(ConfigCommand::Get { service: s, source }) => with_source(
            api(Get, "/services/{subdomain}/config", &[s], None)?,
            source.as_deref(),
        ),
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
            let put = api(Put, "/services/{subdomain}/config", &[s], Some(body))?;
            with_source(put, source.as_deref())
        }
        Call::Config(ConfigCommand::Delete { service: s, source }) => with_source(
            api(Delete, "/services/{subdomain}/config", &[s], None)?,
            source.as_deref(),
        ),
        Call::Domain(DomainCommand::Get { service: s }) => {
            api(Get, "/services/{subdomain}/domain", &[s], None)?
        }
        Call::Domain(DomainCommand::Set { service: s, domain }) => {
            let body = Some(json!({"domain": domain}));
            api(Put, "/services/{subdomain}/domain", &[s], body)?
        }
        Call::Domain(DomainCommand::Delete { service: s }) => {
            api(Delete, "/services/{subdomain}/domain", &[s], None)?
        }
        Call::Keys(KeysCommand::List { service: s }) => {
            api(Get, "/services/{subdomain}/keys", &[s], None)?
        }
        Call::Keys(KeysCommand::Delete { service: s, kid }) => {
            api(Delete, "/services/{subdomain}/keys/{kid}", &[s, kid], None)?
        }
        Call::Keys(
            KeysCommand::Readiness { service: s, kid }
            | KeysCommand::Wait {
                service: s, kid, ..
            },
        ) => api(
            Get,
            "/services/{subdomain}/keys/{kid}/readiness",
            &[s, kid],
            None,
        )?,
        Call::Accounts(AccountsCommand::List) => api(Get, "/service-accounts", &[], None)?,
        Call::Accounts(AccountsCommand::Get { id }) => api(Get, ACCOUNT, &[id], None)?,
        Call::Accounts(AccountsCommand::Create { name, policy_file }) => {
            let body = json!({"name": name, "policy": read_json(policy_file)?});
            api(Post, "/service-accounts", &[], Some(body))?
        }
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
            api(Patch, ACCOUNT, &[id], Some(body))?
        }
        Call::Accounts(AccountsCommand::Delete { id }) => api(Delete, ACCOUNT, &[id], None)?,
        Call::Accounts(AccountsCommand::Regenerate { id }) => {
            api(Post, "/service-accounts/{id}/regenerate-token", &[id], None)?
        }
        Call::Preflight {
            service: s,
            token_file,
            issuer,
        } => {
            let request = match token_file {
                None => api(Get, "/services/{subdomain}/preflight", &[s], None)?,
                Some(file) => {
                    let token = read_file(file)?;
                    let body = Some(json!({"token": token.trim()}));
                    api(Post, "/services/{subdomain}/preflight", &[s], body)?
                }
            };
            with_query(request, "issuer", issuer.as_deref())
        }
        Call::Fetches { service: s } => api(Get, "/services/{subdomain}/fetches", &[s], None)?,
        Call::AuditEvents {
            since,
            action,
            limit,
            cursor,
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
            if let Some(cursor) = cursor {
                query.push(format!("cursor={}", segment(cursor)));
            }
            let query = if query.is_empty() {
                String::new()
            } else {
                format!("?{}", query.join("&"))
            };
            let (method, path, body) = api(Get, "/audit-events", &[], None)?;
            (method, format!("{path}{query}"), body)
        }
    })
}

/// The API client of a command and the runtime that drives it.
fn client(connection: &Connection) -> Result<(RegistryApi, tokio::runtime::Runtime), ClientError> {
    if let Some(problem) = connection.api.usage_problem() {
        return Err(ClientError::Usage(problem));
    }
    let api = (connection.api.api()).map_err(|e| ClientError::Unreachable(e.to_string()))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ClientError::Unreachable(e.to_string()))?;
    Ok((api, runtime))
}

/// Makes `request`'s call: the answer of a success, the problem sentence of a failure.
fn call(
    api: &(RegistryApi, tokio::runtime::Runtime),
    request: &Request,
) -> Result<Value, ClientError> {
    let (status, answer) =
        answered(api, request).map_err(|e| ClientError::Unreachable(e.to_string()))?;
    if status >= 400 {
        return Err(ClientError::Problem(problem_sentence(status, &answer)));
    }
    Ok(answer)
}

/// Makes `request`'s call: its status and body, whatever the status.
fn answered(
    (api, runtime): &(RegistryApi, tokio::runtime::Runtime),
    (method, path, body): &Request,
) -> Result<(u16, Value), registry_client::ClientError> {
    runtime.block_on(api.call(method, path, body.as_ref()))
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
    /// The registry refused the call, or what answered is not the registry (exit 2). A
    /// registry that does not answer is asked again until the timeout.
    #[error(transparent)]
    Api(#[from] ClientError),
}

/// `registry keys wait`: polls the key's readiness, prints one JSON line each time `pending`
/// changes, and returns once the key is safe to sign with, or fails at `timeout`. A registry
/// that does not answer for a while (a restart or a rolling upgrade closes the connection, a
/// draining replica answers 503) is asked again until the timeout, which then says so: a wait
/// of an hour must not end at the first upgrade.
pub fn wait(connection: &Connection, command: Call) -> Result<(), WaitError> {
    let Call::Keys(KeysCommand::Wait { kid, timeout, .. }) = &command else {
        return Ok(());
    };
    let asked = request(&command)?;
    let api = client(connection)?;
    let started = std::time::Instant::now();
    let mut printed: Option<Value> = None;
    let mut was_down = false;
    loop {
        let (pending, outage) = match answered(&api, &asked) {
            Ok((status @ 502..=504, answer)) => (None, problem_sentence(status, &answer)),
            Err(down @ registry_client::ClientError::Unreachable { .. }) => {
                (None, down.to_string())
            }
            Ok((status, answer)) if status >= 400 => {
                return Err(ClientError::Problem(problem_sentence(status, &answer)).into())
            }
            Ok((_, answer)) => (Some(answer), String::new()),
            // Not the registry's API, or a credential file that cannot be read: no wait mends it.
            Err(other) => return Err(ClientError::Unreachable(other.to_string()).into()),
        };
        // An outage is told on stderr as it begins and ends (stdout stays the JSON lines).
        if pending.is_none() && !was_down {
            crate::stdout::report(format_args!(
                "registry keys wait: the registry did not answer ({outage}); asking again \
                 every second until the timeout"
            ));
        } else if pending.is_some() && was_down {
            crate::stdout::report(format_args!(
                "registry keys wait: the registry answers again"
            ));
        }
        was_down = pending.is_none();
        if let Some(answer) = &pending {
            let safe = answer["safeToSign"] == true;
            let pending = answer["pending"].clone();
            if printed.as_ref() != Some(&pending) {
                let line = json!({
                    "kid": answer["kid"],
                    "safeToSign": safe,
                    "safeToSignAt": answer["safeToSignAt"],
                    "pending": pending,
                });
                crate::stdout::progress(line);
                printed = Some(pending);
            }
            if safe {
                return Ok(());
            }
        }
        let waited = started.elapsed();
        if waited >= *timeout {
            let reasons = match &pending {
                Some(answer) => (answer["pending"].as_array().into_iter().flatten())
                    .filter_map(|p| p["reason"].as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                None => format!("unknown, the registry did not answer: {outage}"),
            };
            return Err(WaitError::TimedOut {
                kid: kid.clone(),
                waited: *timeout,
                pending: reasons,
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
        crate::stdout::line(text.trim_end());
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
                issuer: Some("https://issuer.acme.example".into()),
            },
            Call::Fetches { service: s() },
            Call::AuditEvents {
                since: None,
                action: Some("config.put".into()),
                limit: Some(5),
                cursor: Some("c".into()),
            },
        ];
        for call in &calls {
            let (method, path, _) = request(call).unwrap();
            let served = (table::ROUTES.iter())
                .any(|r| r.verb.method() == method && crate::route::serves(r, &path));
            assert!(served, "{method} {path}");
        }
        let (_, path, _) = request(&calls[9]).unwrap();
        assert_eq!(
            path, "/services/api%20acme%2Fx/keys/k%201/readiness",
            "one segment each"
        );
        assert!(api(Post, "/services/{subdomain}/keys", &["x"], None).is_err());
        assert!(api(Get, "/services/{subdomain}/nothing", &["x"], None).is_err());
    }

    #[test]
    fn a_problem_is_one_sentence_with_its_pointers() {
        let body = json!({"title": "Invalid request", "detail": "the request body is invalid (2 problems, see errors)",
            "errors": [{"pointer": "/name", "message": "is required"}, {"pointer": "/policy", "message": "is required"}]});
        assert_eq!(
            problem_sentence(400, &body),
            "Invalid request (400): the request body is invalid (2 problems): /name: is required; /policy: is required"
        );
        // One problem, told by the detail already: said once.
        let body = json!({"title": "Invalid request", "detail": "the request body is invalid: /title: title is required",
            "errors": [{"pointer": "/title", "message": "title is required"}]});
        assert_eq!(
            problem_sentence(400, &body),
            "Invalid request (400): the request body is invalid: /title: title is required"
        );
    }

    #[test]
    fn path_segments_are_encoded() {
        assert_eq!(segment("k3s-acme"), "k3s-acme");
        assert_eq!(segment("a/b c"), "a%2Fb%20c");
    }
}
