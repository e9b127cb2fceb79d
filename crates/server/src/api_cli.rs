//! The customer-facing commands: the binary as a client of the API, as `vault` is of Vault
//! (`registry services …`, `config …`, `keys …`, `accounts …`, `preflight`, `fetches`,
//! `audit-events`). Each reads `REGISTRY_API_URL` and `REGISTRY_TOKEN` (or an identity token
//! file), makes its call, and prints a table, or the API's JSON with `--format json`. An API
//! problem is one sentence on stderr (title, detail, each pointer) and exit 1; a wrong command
//! line is clap's usage and exit 2.

use registry_client::{config_path, path_segment as segment, Credentials, RegistryApi};
use registry_domain::text::escape_controls;
use serde_json::{json, Value};
use std::path::PathBuf;

/// How to reach the API, shared by every client command.
#[derive(Debug, Clone, clap::Args)]
pub struct Connection {
    /// The registry's API.
    #[arg(
        long,
        global = true,
        env = "REGISTRY_API_URL",
        default_value = "http://localhost:8080"
    )]
    pub api_url: String,
    /// A static token or an anonymous secret (prefer the environment: a flag shows in `ps`).
    #[arg(long, global = true, env = "REGISTRY_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// A file holding an identity token for an `oidc` service account, read at each call.
    #[arg(long, global = true, conflicts_with = "token")]
    pub identity_token_file: Option<PathBuf>,
    /// What to print: a table for people, or the API's JSON for programs.
    #[arg(long, global = true, value_enum, default_value = "table")]
    pub format: Format,
}

/// What a client command prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns (lists) or `field: value` lines (one resource).
    Table,
    /// The API's answer, as JSON.
    Json,
}

/// `registry services …`.
#[derive(Debug, clap::Subcommand)]
pub enum ServicesCommand {
    /// List the services the credential reaches.
    ///
    /// Example: `registry services list --format json`
    List,
    /// Show one service (subdomain or id).
    ///
    /// Example: `registry services get k3s-acme`
    Get {
        /// Subdomain or id.
        service: String,
    },
    /// Register a service.
    ///
    /// Example: `registry services create --name k3s --title "Dev cluster"`
    Create {
        /// The URL name (business and enterprise plans): the subdomain is `{name}-{tenant}`.
        #[arg(long)]
        name: Option<String>,
        /// A title.
        #[arg(long)]
        title: Option<String>,
        /// A description.
        #[arg(long)]
        description: Option<String>,
    },
    /// Delete a service and what it publishes.
    ///
    /// Example: `registry services delete k3s-acme`
    Delete {
        /// Subdomain or id.
        service: String,
    },
}

/// `registry config …`.
#[derive(Debug, clap::Subcommand)]
pub enum ConfigCommand {
    /// Show what a service publishes, or what one key source uploaded last.
    ///
    /// Example: `registry config get k3s-acme --source blue`
    Get {
        /// Subdomain or id.
        service: String,
        /// Only this key source's latest upload.
        #[arg(long, value_name = "NAME")]
        source: Option<String>,
    },
    /// Publish a discovery document and a key set (keys dropped stay published, retired).
    ///
    /// Example: `registry config push k3s-acme --source green --discovery-file openid-configuration.json --jwks-file jwks.json`
    Push {
        /// Subdomain or id.
        service: String,
        /// Upload as this key source (`[a-z0-9-]{1,32}`, default `default`): its keys replace
        /// that source's only, every other source's stay published.
        #[arg(long, value_name = "NAME")]
        source: Option<String>,
        /// The discovery document (`kubectl get --raw /.well-known/openid-configuration`).
        #[arg(long)]
        discovery_file: PathBuf,
        /// The key set (`kubectl get --raw /openid/v1/jwks`).
        #[arg(long)]
        jwks_file: PathBuf,
        /// How long keys the upload drops stay published, retired (0–168, default 24).
        #[arg(long)]
        retain_hours: Option<u32>,
        /// How long keys this upload publishes first must be published before they are safe to
        /// sign with (0–604800 seconds, default 600; `registry keys wait`).
        #[arg(long)]
        lead_seconds: Option<u32>,
    },
    /// Withdraw what a service publishes, or retire one key source's keys.
    ///
    /// Example: `registry config delete k3s-acme --source blue`
    Delete {
        /// Subdomain or id.
        service: String,
        /// Retire only this key source's keys; the others and the discovery document stay.
        #[arg(long, value_name = "NAME")]
        source: Option<String>,
    },
}

/// `registry domain …` (docs/api.md, "Custom domains").
#[derive(Debug, clap::Subcommand)]
pub enum DomainCommand {
    /// Show a service's custom domain: its status, the DNS records to set, its certificate.
    ///
    /// Example: `registry domain get k3s-acme`
    Get {
        /// Subdomain or id.
        service: String,
    },
    /// Serve a service's documents under a domain of yours (issuer `https://DOMAIN`), once the
    /// DNS records it prints are set.
    ///
    /// Example: `registry domain set k3s-acme login.example.com`
    Set {
        /// Subdomain or id.
        service: String,
        /// The domain, such as login.example.com.
        domain: String,
    },
    /// Stop serving a service's custom domain (its certificate is deleted).
    ///
    /// Example: `registry domain delete k3s-acme`
    Delete {
        /// Subdomain or id.
        service: String,
    },
}

/// `registry keys …`.
#[derive(Debug, clap::Subcommand)]
pub enum KeysCommand {
    /// The keys a service publishes, current and retired, with until when.
    ///
    /// Example: `registry keys list k3s-acme`
    List {
        /// Subdomain or id.
        service: String,
    },
    /// Withdraw a retired key at once (a compromised key).
    ///
    /// Example: `registry keys delete k3s-acme 2f1c…`
    Delete {
        /// Subdomain or id.
        service: String,
        /// The key's `kid`.
        kid: String,
    },
    /// Whether a key is safe to sign with, and what holds it back.
    ///
    /// Example: `registry keys readiness k3s-acme 2026-11`
    Readiness {
        /// Subdomain or id.
        service: String,
        /// The key's `kid`.
        kid: String,
    },
    /// Wait until a key is safe to sign with. Prints one JSON line each time what holds it back
    /// changes; exits 0 once it is safe, 1 at the timeout, 2 on a usage or API error.
    ///
    /// Example: `registry keys wait --service k3s-acme --kid 2026-11 --timeout 30m`
    Wait {
        /// Subdomain or id.
        #[arg(long)]
        service: String,
        /// The key's `kid`.
        #[arg(long)]
        kid: String,
        /// How long to wait: `90s`, `10m`, `1h` (a bare number is seconds).
        #[arg(long, default_value = "1h", value_parser = duration)]
        timeout: std::time::Duration,
    },
}

/// A duration of the command line: a whole number with `s`, `m` or `h`, or alone (seconds).
fn duration(text: &str) -> Result<std::time::Duration, String> {
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let seconds: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration such as 90s, 10m or 1h"))?;
    let unit = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => return Err(format!("{text:?} is not a duration such as 90s, 10m or 1h")),
    };
    Ok(std::time::Duration::from_secs(seconds.saturating_mul(unit)))
}

/// `registry accounts …`.
#[derive(Debug, clap::Subcommand)]
pub enum AccountsCommand {
    /// List the customer's service accounts.
    ///
    /// Example: `registry accounts list`
    List,
    /// Show one account.
    ///
    /// Example: `registry accounts get 3553eb88-5cd4-413c-a51b-09f15e5c26fa`
    Get {
        /// The account's id.
        id: String,
    },
    /// Create an account from a policy file (a static one prints its token, once).
    ///
    /// Example: `registry accounts create --name deployer --policy-file deployer.json`
    Create {
        /// Its name.
        #[arg(long)]
        name: String,
        /// The policy document (JSON).
        #[arg(long)]
        policy_file: PathBuf,
    },
    /// Change an account's name or policy.
    ///
    /// Example: `registry accounts update 3553eb88-… --policy-file deployer.json`
    Update {
        /// The account's id.
        id: String,
        /// A new name.
        #[arg(long)]
        name: Option<String>,
        /// A new policy document (JSON).
        #[arg(long)]
        policy_file: Option<PathBuf>,
    },
    /// Delete an account (its token stops working at once).
    ///
    /// Example: `registry accounts delete 3553eb88-…`
    Delete {
        /// The account's id.
        id: String,
    },
    /// Replace a static account's token; prints the new one, once.
    ///
    /// Example: `registry accounts regenerate 3553eb88-…`
    Regenerate {
        /// The account's id.
        id: String,
    },
}

/// What a client command asks of the API.
#[derive(Debug)]
pub enum Call {
    /// `registry services …`.
    Services(ServicesCommand),
    /// `registry config …`.
    Config(ConfigCommand),
    /// `registry keys …`.
    Keys(KeysCommand),
    /// `registry domain …`.
    Domain(DomainCommand),
    /// `registry accounts …`.
    Accounts(AccountsCommand),
    /// `registry preflight SERVICE [--token-file F]`.
    Preflight {
        /// Subdomain or id.
        service: String,
        /// A token a workload would present, checked too.
        token_file: Option<PathBuf>,
    },
    /// `registry fetches SERVICE`.
    Fetches {
        /// Subdomain or id.
        service: String,
    },
    /// `registry audit-events [--since T] [--action A] [--limit N]`.
    AuditEvents {
        /// Events at or after this RFC 3339 time.
        since: Option<String>,
        /// Only this action (`config.put`…).
        action: Option<String>,
        /// At most this many (1–500).
        limit: Option<u32>,
    },
}

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

fn request(call: &Call) -> Result<Request, ClientError> {
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

/// A problem answer as one sentence: its title, its detail, and each pointer with its message.
fn problem_sentence(status: u16, body: &Value) -> String {
    let title = body["title"].as_str().unwrap_or("the API refused the call");
    let mut sentence = format!("{title} ({status})");
    if let Some(detail) = body["detail"].as_str() {
        sentence.push_str(&format!(": {detail}"));
    }
    for error in body["errors"].as_array().into_iter().flatten() {
        sentence.push_str(&format!(
            "; {} {}",
            error["pointer"].as_str().unwrap_or(""),
            error["message"].as_str().unwrap_or("")
        ));
    }
    // The detail and messages may quote what the caller sent.
    escape_controls(&sentence).into_owned()
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
];
const RECORDS: Columns = &[("TYPE", "/type"), ("NAME", "/name"), ("VALUE", "/value")];
const FETCHES: Columns = &[
    ("ISSUER", "/issuer"),
    ("PATH", "/path"),
    ("FETCHED SINCE CHANGE", "/fetchedSinceChange"),
    ("FETCHES 24H", "/fetches24h"),
    ("LAST FETCH", "/lastFetchedAt"),
];

/// What a table mode prints for the answer to `call`.
fn table(call: &Call, answer: &Value) -> String {
    let list = |rows: &Value, columns: Columns| {
        rows_table(rows.as_array().map_or(&[], Vec::as_slice), columns)
    };
    match call {
        Call::Services(ServicesCommand::List) => list(answer, SERVICES),
        Call::Accounts(AccountsCommand::List) => list(answer, ACCOUNTS),
        Call::Keys(KeysCommand::List { .. }) => list(&answer["keys"], KEYS),
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
                text.push_str(&format!("\npending: {}", cell(pending.get("message"))));
            }
            text.push_str("\n\n");
            text.push_str(&list(&answer["verifiers"], VERIFIERS));
            text
        }
        Call::AuditEvents { .. } => list(&answer["events"], EVENTS),
        Call::Fetches { .. } => list(&answer["documents"], FETCHES),
        Call::Preflight { .. } => {
            let mut rows = Vec::new();
            for (cloud, verdict) in answer["clouds"].as_object().into_iter().flatten() {
                let findings: Vec<&str> = verdict["findings"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|f| f["code"].as_str())
                    .collect();
                rows.push(json!({"cloud": cloud, "ready": verdict["ready"], "findings": findings.join(", ")}));
            }
            rows_table(
                &rows,
                &[
                    ("CLOUD", "/cloud"),
                    ("READY", "/ready"),
                    ("FINDINGS", "/findings"),
                ],
            )
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
            .map(|(name, value)| format!("{name}: {}", cell(Some(value))))
            .collect::<Vec<_>>()
            .join("\n"),
        None => cell(Some(answer)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The commands' calls are routes of the table, however their arguments are spelled.
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
