//! The command line of the binary's three programs: the server (`registry serve | migrate`:
//! `crate::app`), the operator's commands (`customer …`, `audit`, `policy …`: `crate::operator`)
//! and the customer's client of the API (`services`, `config`, `keys`, `domain`, `accounts`,
//! `preflight`, `fetches`, `audit-events`, `sync`, `fetch-log`, `signer`: `crate::client`).

use crate::client::commands::{
    AccountsCommand, Call, ConfigCommand, Connection, DomainCommand, KeysCommand, ServicesCommand,
};
use crate::client::sync::SyncArgs;
use crate::client::{requests, sync};
use crate::operator::policy::PolicyCommand;
use crate::operator::{audit, customers, policy};
use crate::settings::{DatabaseArgs, Settings};
use crate::{app, log_buffer, stdout};
use clap::{Parser, Subcommand};

/// Runs a command; `serve` on an actix `System` of its own, until a signal stops it (the caller
/// installed the log first). An error is the command's failure, for one line on stderr.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(settings) => {
            let served = actix_web::rt::System::new().block_on(app::serve(*settings));
            log_buffer::flush_log();
            served
        }
        Command::Migrate(args) => {
            let url = &args.database.database_url;
            if args.check {
                let pending = app::pending_migrations(url)?;
                if pending.is_empty() {
                    stdout::line(format_args!("{}: up to date", app::redact(url)));
                    return Ok(());
                }
                stdout::line(format_args!(
                    "{}: {} pending",
                    app::redact(url),
                    pending.len()
                ));
                for name in &pending {
                    stdout::line(format_args!("  {name}"));
                }
                return Err(PendingMigrations(pending.len()).into());
            }
            let applied = app::migrate(url)?;
            stdout::line(format_args!(
                "{}: {applied} applied, up to date",
                app::redact(url)
            ));
            Ok(())
        }
        Command::Audit(args) => app::with_command_store(&args.database.database_url, |store| {
            audit::print_trail(
                &customers::registry(store),
                args.tenant.as_deref(),
                args.action,
                args.since,
            )
        }),
        Command::Sync(args) => match args.usage_problem() {
            Some(message) => Err(Exit { code: 2, message }.into()),
            None => sync::run(args),
        },
        Command::FetchLog(args) => match args.usage_problem() {
            Some(message) => Err(Exit { code: 2, message }.into()),
            None => crate::client::fetch_log::run(args),
        },
        Command::Signer(args) => match args.usage_problem() {
            Some(message) => Err(Exit { code: 2, message }.into()),
            None => {
                let served = crate::client::signer::run(args);
                log_buffer::flush_log();
                served
            }
        },
        Command::Services {
            command,
            connection,
        } => client_done(requests::run(&connection, Call::Services(command))),
        Command::Config {
            command,
            connection,
        } => client_done(requests::run(&connection, Call::Config(command))),
        Command::Keys {
            command: command @ KeysCommand::Wait { .. },
            connection,
        } => requests::wait(&connection, Call::Keys(command)).map_err(|error| {
            let code = match error {
                requests::WaitError::TimedOut { .. } => 1,
                requests::WaitError::Api(_) => 2,
            };
            Exit {
                code,
                message: error.to_string(),
            }
            .into()
        }),
        Command::Keys {
            command,
            connection,
        } => client_done(requests::run(&connection, Call::Keys(command))),
        Command::Accounts {
            command,
            connection,
        } => client_done(requests::run(&connection, Call::Accounts(command))),
        Command::Domain {
            command,
            connection,
        } => client_done(requests::run(&connection, Call::Domain(command))),
        Command::Preflight {
            service,
            token_file,
            issuer,
            connection,
        } => client_done(requests::run(
            &connection,
            Call::Preflight {
                service,
                token_file,
                issuer,
            },
        )),
        Command::Fetches {
            service,
            connection,
        } => client_done(requests::run(&connection, Call::Fetches { service })),
        Command::AuditEvents {
            since,
            action,
            limit,
            cursor,
            connection,
        } => client_done(requests::run(
            &connection,
            Call::AuditEvents {
                since,
                action,
                limit,
                cursor,
            },
        )),
        Command::Policy { command } => {
            policy::run(command).map_err(|error| match error.downcast::<policy::NotAPolicy>() {
                Ok(policy::NotAPolicy(message)) => Exit { code: 2, message }.into(),
                Err(error) => error,
            })
        }
        Command::Customer { command } => {
            let output = match command {
                CustomerCommand::Create {
                    tenant,
                    plan,
                    name,
                    database,
                } => app::with_command_store(&database.database_url, |store| {
                    customers::create(store, &tenant, &plan, &name)
                })?,
                CustomerCommand::List { database } => {
                    app::with_command_store(&database.database_url, customers::list)?
                }
                CustomerCommand::SetPlan {
                    tenant,
                    plan,
                    database,
                } => app::with_command_store(&database.database_url, |store| {
                    customers::set_plan(store, &tenant, &plan)
                })?,
                CustomerCommand::Disable { tenant, database } => {
                    app::with_command_store(&database.database_url, |store| {
                        customers::set_disabled(store, &tenant, true)
                    })?
                }
                CustomerCommand::Enable { tenant, database } => {
                    app::with_command_store(&database.database_url, |store| {
                        customers::set_disabled(store, &tenant, false)
                    })?
                }
                CustomerCommand::Delete {
                    tenant,
                    yes,
                    database,
                } => {
                    if !yes {
                        let message = format!(
                            "deleting the customer {tenant:?} deletes everything it holds and \
                             cannot be undone: add --yes"
                        );
                        return Err(Exit { code: 2, message }.into());
                    }
                    app::with_command_store(&database.database_url, |store| {
                        customers::delete(store, &tenant)
                    })?
                }
                CustomerCommand::Token { tenant, database } => {
                    app::with_command_store(&database.database_url, |store| {
                        customers::mint_token(store, &tenant)
                    })?
                }
            };
            print_json(&output);
            Ok(())
        }
    }
}

/// A command-line error about a value that came from a `REGISTRY_*` variable, not from the
/// command line, names the variable instead of the flag the user never typed (`help` and
/// `--version`, which clap reports as errors, pass unchanged).
pub fn name_the_variable(error: clap::Error) -> clap::Error {
    use clap::error::{ContextKind, ContextValue};
    let Some(ContextValue::String(invalid)) = error.get(ContextKind::InvalidArg) else {
        return error;
    };
    let long = invalid
        .strip_prefix("--")
        .and_then(|rest| rest.split([' ', '=']).next())
        .unwrap_or_default();
    let typed = std::env::args()
        .any(|arg| arg == format!("--{long}") || arg.starts_with(&format!("--{long}=")));
    let command = <Cli as clap::CommandFactory>::command();
    let variable = command
        .get_subcommands()
        .flat_map(clap::Command::get_arguments)
        .find(|arg| arg.get_long() == Some(long))
        .and_then(clap::Arg::get_env)
        .and_then(|name| name.to_str())
        .filter(|name| !typed && std::env::var_os(name).is_some());
    match variable {
        Some(name) => {
            let text = error
                .render()
                .to_string()
                .replace(&format!("'{invalid}'"), name);
            clap::Error::raw(error.kind(), text.trim_start_matches("error: "))
        }
        None => error,
    }
}

/// A failure with an exit code of its own (`registry keys wait`: 1 at the timeout, 2 when the
/// registry refuses or does not answer).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Exit {
    /// The process's exit code.
    pub code: u8,
    /// The sentence for stderr.
    pub message: String,
}

/// `registry migrate --check` found migrations to apply (exit 1, after listing them).
#[derive(Debug, thiserror::Error)]
#[error("{0} migrations pending: run `registry migrate`")]
pub struct PendingMigrations(usize);

/// `registry migrate`'s arguments.
#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    /// Only report the pending migrations (exit 1 when there are some); change nothing.
    #[arg(long)]
    pub check: bool,
    #[command(flatten)]
    pub database: DatabaseArgs,
}

/// A client command's outcome: a command line that cannot make a call (no credentials, an API
/// URL that is none) exits 2 like any other usage error; the rest exit 1.
fn client_done(done: Result<(), requests::ClientError>) -> anyhow::Result<()> {
    match done {
        Err(requests::ClientError::Usage(message)) => Err(Exit { code: 2, message }.into()),
        other => Ok(other?),
    }
}

fn print_json(value: &serde_json::Value) {
    stdout::line(serde_json::to_string_pretty(value).unwrap_or_default());
}

/// Publishes OpenID Connect discovery documents and key sets of customer services, hosts
/// temporary anonymous services, and authenticates service accounts.
#[derive(Debug, Parser)]
#[command(
    name = "registry",
    version,
    about,
    after_help = "Example: `registry serve` (then `registry customer create --tenant acme --plan \
                  team --name Acme` prints a token, and `REGISTRY_TOKEN=rgst_… registry services \
                  list` uses it). `registry help COMMAND` shows a command's own example."
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP server (applies pending migrations first). Every setting is a flag and a
    /// `REGISTRY_*` variable; none is needed to start.
    ///
    /// Example: `registry serve --listen 0.0.0.0:8080 --database-url sqlite:///var/lib/registry/registry.db`
    Serve(Box<Settings>),
    /// Apply the pending database migrations and exit (creating a SQLite database that does not
    /// exist yet); with --check, only say which are pending (exit 1 when some are). Several
    /// replicas may migrate at once: one applies, the others find nothing left. A database a
    /// newer registry migrated is refused. Exit codes: 0 up to date, 1 pending (--check) or
    /// failed, 2 wrong command line.
    ///
    /// Example: `registry migrate --check --database-url postgres://registry@db/registry`
    Migrate(MigrateArgs),
    /// Manage customers (tenants).
    ///
    /// Example: `registry customer create --tenant acme --plan business --name "Acme Corp"`
    Customer {
        /// What to do with customers.
        #[command(subcommand)]
        command: CustomerCommand,
    },
    /// Print the audit trail of a customer (or of anonymous services) as JSON lines, newest
    /// first, for operators. Exit codes: 0 printed (perhaps nothing), 1 failed (no such tenant,
    /// database unreachable), 2 wrong command line.
    ///
    /// Example: `registry audit --tenant acme --action config.put --since 2026-11-01T00:00:00Z`
    Audit(AuditArgs),
    /// Keep a service's published documents in step with a source issuer (a Kubernetes API
    /// server, any issuer URL, or files): upload only when they differ. Prints one JSON line per
    /// cycle on stdout, errors on stderr. Exit codes: 0 in sync or updated, 1 failed (`--once`),
    /// 2 wrong command line. The least policy it needs (version 2): `{"$schema":
    /// "{base_url}/schemas/service-account-policy/v2.json", "kind": "static", "services":
    /// ["k3s-acme"], "actions": ["config:read", "config:write"]}` (or the same `services` and
    /// `actions` in the rule of an `oidc` account).
    ///
    /// Example: `REGISTRY_TOKEN=rgst_… registry sync --service k3s-acme --interval 300`
    Sync(SyncArgs),
    /// Ship a cache's access log to the registry as fetch evidence: JSON lines on stdin
    /// (`{time, host, path, status, method, userAgent, clientAddress}`, as `varnishncsa -j`
    /// writes them with deploy/cdn/varnishncsa.format; without `clientAddress` a line counts as
    /// a fetch but never as a verifier's for key readiness), posted to `POST /fetch-log` in
    /// batches. Prints one JSON line
    /// per batch. Exit codes: 0 at the end of stdin with every line shipped, 1 when lines were
    /// refused or the registry stayed unreachable for 60 s, 2 wrong command line.
    ///
    /// Example: `varnishncsa -j -F "$(cat deploy/cdn/varnishncsa.format)" | registry fetch-log --api-url https://registry.example.com`
    FetchLog(crate::client::fetch_log::FetchLogArgs),
    /// Serve kube-apiserver's external JWT signer (`ExternalJWTSigner` v1) on a Unix socket for
    /// a service with managed signing: `Sign` through `POST /services/{s}/sign`, `FetchKeys` from
    /// a copy of the service's keys read every 10 s (answered while the registry is
    /// unreachable), `Metadata` its `maxTokenSeconds`. Runs until SIGTERM or SIGINT. Exit codes:
    /// 0 stopped by a signal, 1 could not serve (another live plugin on the socket), 2 wrong
    /// command line (no credentials among them). The least policy it needs (version 2): `{"$schema":
    /// "{base_url}/schemas/service-account-policy/v2.json", "kind": "static", "services":
    /// ["k3s-acme"], "actions": ["tokens:sign", "config:read"]}`.
    ///
    /// Example: `REGISTRY_TOKEN=rgst_… registry signer --service k3s-acme --socket /var/run/registry-signer.sock`
    Signer(crate::client::signer::SignerArgs),
    /// Your services (a client of the API: REGISTRY_API_URL, REGISTRY_TOKEN; --format json for
    /// the API's JSON). Exit codes: 0 done, 1 refused by the API (one sentence) or unreachable,
    /// 2 wrong command line.
    ///
    /// Example: `REGISTRY_TOKEN=rgst_… registry services list`
    Services {
        /// What to do.
        #[command(subcommand)]
        command: ServicesCommand,
        #[command(flatten)]
        connection: Connection,
    },
    /// What a service publishes: get, push (upload) or delete its documents (a client of the
    /// API, as `services` is).
    ///
    /// Example: `registry config push k3s-acme --discovery-file openid-configuration.json --jwks-file jwks.json`
    Config {
        /// What to do.
        #[command(subcommand)]
        command: ConfigCommand,
        #[command(flatten)]
        connection: Connection,
    },
    /// A service's custom domain: set, get or delete it (a client of the API). `set` prints the
    /// DNS records to create; the registry then proves ownership and obtains a certificate.
    ///
    /// Example: `registry domain set k3s-acme login.example.com`
    Domain {
        /// What to do.
        #[command(subcommand)]
        command: DomainCommand,
        #[command(flatten)]
        connection: Connection,
    },
    /// The keys a service publishes, withdrawing a retired one, and whether a new one is safe to
    /// sign with (a client of the API).
    ///
    /// Example: `registry keys wait --service k3s-acme --kid 2026-11`
    Keys {
        /// What to do.
        #[command(subcommand)]
        command: KeysCommand,
        #[command(flatten)]
        connection: Connection,
    },
    /// Your service accounts (a client of the API).
    ///
    /// Example: `registry accounts create --name deployer --policy-file deployer.json`
    Accounts {
        /// What to do.
        #[command(subcommand)]
        command: AccountsCommand,
        #[command(flatten)]
        connection: Connection,
    },
    /// What AWS, GCP and Azure will say of a service's documents, and of a token your workload
    /// would present (a client of the API).
    ///
    /// Example: `registry preflight k3s-acme --token-file token.jwt`, or for the service's
    /// custom domain: `registry preflight k3s-acme --issuer https://issuer.acme.example`
    Preflight {
        /// Subdomain or id.
        service: String,
        /// A token to check too (a file holding the JWT).
        #[arg(long)]
        token_file: Option<std::path::PathBuf>,
        /// Which of the service's issuers to describe (its custom domain's URL); default the
        /// subdomain's.
        #[arg(long)]
        issuer: Option<String>,
        #[command(flatten)]
        connection: Connection,
    },
    /// Who fetched a service's documents, and whether since they last changed (a client of the
    /// API).
    ///
    /// Example: `registry fetches k3s-acme`
    Fetches {
        /// Subdomain or id.
        service: String,
        #[command(flatten)]
        connection: Connection,
    },
    /// Your audit trail, newest first (a client of the API; operators have `registry audit`).
    ///
    /// Example: `registry audit-events --action config.put --since 2026-11-01T00:00:00Z`
    AuditEvents {
        /// Events at or after this time (RFC 3339).
        #[arg(long, value_parser = checked(rfc3339))]
        since: Option<String>,
        /// Only this action (`config.put`, `account.create`…).
        #[arg(long, value_parser = checked(action))]
        action: Option<String>,
        /// At most this many (1–500, default 100).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=500))]
        limit: Option<u32>,
        /// The page after an earlier one: the `nextCursor` it ended with (a table's last line
        /// prints it).
        #[arg(long)]
        cursor: Option<String>,
        #[command(flatten)]
        connection: Connection,
    },
    /// Work with policy documents offline: no database, no network.
    ///
    /// Example: `registry policy check deployer.json --deny-warnings`
    Policy {
        /// What to do with a policy.
        #[command(subcommand)]
        command: PolicyCommand,
    },
}

/// Arguments of `registry audit`.
#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    /// Tenant suffix of the customer whose trail to print.
    #[arg(
        long,
        required_unless_present = "anonymous",
        conflicts_with = "anonymous"
    )]
    pub tenant: Option<String>,
    /// Print the events of anonymous services (they belong to no customer).
    #[arg(long)]
    pub anonymous: bool,
    /// Only events at or after this time (RFC 3339, e.g. 2026-11-23T10:00:00Z).
    #[arg(long, value_parser = rfc3339)]
    pub since: Option<time::OffsetDateTime>,
    /// Only events of this action (e.g. config.put).
    #[arg(long, value_parser = clap::builder::ValueParser::new(action))]
    pub action: Option<registry_domain::audit::Action>,
    #[command(flatten)]
    pub database: DatabaseArgs,
}

/// A value the API reads, sent as written once `parse` has found it well formed: a wrong one is
/// a usage error (exit 2) before any call, as for the operators' commands.
fn checked<T: 'static>(
    parse: fn(&str) -> Result<T, String>,
) -> impl Fn(&str) -> Result<String, String> + Clone + Send + Sync + 'static {
    move |text| parse(text).map(|_| text.to_owned())
}

fn rfc3339(text: &str) -> Result<time::OffsetDateTime, String> {
    time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .map_err(|_| "not an RFC 3339 time such as 2026-11-23T10:00:00Z".to_owned())
}

fn action(text: &str) -> Result<registry_domain::audit::Action, String> {
    text.parse()
        .map_err(|e: registry_domain::audit::UnknownAction| e.to_string())
}

/// A plan's name, checked by the command line (a wrong one is a usage error, exit 2).
fn plan_name(text: &str) -> Result<String, String> {
    let plan: registry_domain::Plan = text
        .parse()
        .map_err(|e: registry_domain::customer::UnknownPlan| e.to_string())?;
    Ok(plan.as_str().to_owned())
}

/// Customer subcommands.
#[derive(Debug, Subcommand)]
pub enum CustomerCommand {
    /// Create a customer and its first service account (policy `{"kind":"static","services":["*"]}`);
    /// prints the customer, the account and the account's token as one JSON object.
    ///
    /// Example: `registry customer create --tenant acme --plan business --name "Acme Corp"`
    Create {
        /// Tenant suffix: 2–20 characters of a-z and 0-9 (no '-').
        #[arg(long)]
        tenant: String,
        /// Plan: free, team, business or enterprise.
        #[arg(long, value_parser = plan_name)]
        plan: String,
        /// Display name.
        #[arg(long)]
        name: String,
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// List customers as a JSON array.
    ///
    /// Example: `registry customer list --database-url postgres://registry@db/registry`
    List {
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// Change a customer's plan. Prints the customer.
    ///
    /// Example: `registry customer set-plan --tenant acme --plan enterprise`
    SetPlan {
        /// Tenant suffix of the customer.
        #[arg(long)]
        tenant: String,
        /// New plan: free, team, business or enterprise.
        #[arg(long, value_parser = plan_name)]
        plan: String,
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// Disable a customer: its credentials get 401 and its services' public documents 404, on
    /// every replica from its next request, until it is enabled again; nothing is deleted.
    /// Prints the customer.
    ///
    /// Example: `registry customer disable --tenant acme`
    Disable {
        /// Tenant suffix of the customer.
        #[arg(long)]
        tenant: String,
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// Enable a disabled customer again. Prints the customer.
    ///
    /// Example: `registry customer enable --tenant acme`
    Enable {
        /// Tenant suffix of the customer.
        #[arg(long)]
        tenant: String,
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// Delete a customer and everything it holds (services, published documents, accounts,
    /// tokens, its audit trail), on every replica from its next request. Cannot be undone.
    ///
    /// Example: `registry customer delete --tenant acme --yes`
    Delete {
        /// Tenant suffix of the customer.
        #[arg(long)]
        tenant: String,
        /// Confirms the deletion (required).
        #[arg(long)]
        yes: bool,
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// Mint a new service account on every service (`"services": ["*"]`) and print its token,
    /// once: the way back after a lost bootstrap token. Revoke the old one afterwards
    /// (`DELETE /service-accounts/{id}` with the new token).
    ///
    /// Example: `registry customer token --tenant acme`
    Token {
        /// Tenant suffix of the customer.
        #[arg(long)]
        tenant: String,
        #[command(flatten)]
        database: DatabaseArgs,
    },
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    /// Every command, and every subcommand of a group, shows an example in its `--help`.
    #[test]
    fn every_commands_help_has_an_example() {
        fn walk(command: &clap::Command, path: String, missing: &mut Vec<String>) {
            for sub in command.get_subcommands().filter(|s| s.get_name() != "help") {
                let path = format!("{path} {}", sub.get_name());
                let help = sub.clone().render_long_help().to_string();
                if !help.contains("Example: `registry ")
                    && !help.contains("Example: `REGISTRY_")
                    && !help.contains("Example: `varnishncsa")
                {
                    missing.push(path.clone());
                }
                walk(sub, path, missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "registry".to_owned(), &mut missing);
        assert!(missing.is_empty(), "no example in the help of: {missing:?}");
    }
}
