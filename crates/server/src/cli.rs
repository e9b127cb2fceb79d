//! The command line: `registry serve | migrate | customer … | audit | sync | policy …`.

use crate::settings::{DatabaseArgs, Settings};
use clap::{Parser, Subcommand};

/// Publishes OpenID Connect discovery documents and key sets of customer services, hosts
/// temporary anonymous services, and authenticates service accounts.
#[derive(Debug, Parser)]
#[command(name = "registry", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP server (applies pending migrations first).
    Serve(Box<Settings>),
    /// Apply pending database migrations and exit.
    Migrate(DatabaseArgs),
    /// Manage customers (tenants).
    Customer {
        /// What to do with customers.
        #[command(subcommand)]
        command: CustomerCommand,
    },
    /// Print the audit trail of a customer (or of anonymous services) as JSON lines, newest
    /// first, for operators. Exit codes: 0 printed (perhaps nothing), 1 failed (no such tenant,
    /// database unreachable), 2 wrong command line.
    Audit(AuditArgs),
    /// Keep a service's published documents in step with a source issuer (a Kubernetes API
    /// server, any issuer URL, or files): upload only when they differ. Prints one JSON line per
    /// cycle on stdout, errors on stderr. Exit codes: 0 in sync or updated, 1 failed (`--once`),
    /// 2 wrong command line.
    Sync(SyncArgs),
    /// Work with policy documents offline: no database, no network.
    Policy {
        /// What to do with a policy.
        #[command(subcommand)]
        command: PolicyCommand,
    },
}

/// How a policy command prints its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// One line per finding, for a person.
    Text,
    /// One JSON document on stdout.
    Json,
}

/// Policy subcommands.
#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Check a policy document: its schema violations (errors) and the findings of the lint
    /// (warnings), each with a code, a pointer and a sentence. Exit 1 on an error, and on a
    /// warning with --deny-warnings; 0 otherwise.
    Check {
        /// The policy document (JSON).
        file: std::path::PathBuf,
        /// Output format.
        #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
        format: OutputFormat,
        /// Treat warnings as errors (exit 1).
        #[arg(long)]
        deny_warnings: bool,
    },
    /// Explain what a policy decides for a token's claims: the matching rule, or for each rule
    /// of the token's issuer the first check that failed, and hints for near misses. The policy
    /// alone: no signature and no time checks. Exit 0 whatever the decision.
    Explain {
        /// The policy document (JSON).
        file: std::path::PathBuf,
        /// A JSON file holding the token's claims.
        #[arg(long, conflicts_with = "token", required_unless_present = "token")]
        claims: Option<std::path::PathBuf>,
        /// A JWT whose claims to use (its signature is not checked).
        #[arg(long)]
        token: Option<String>,
        /// The service (subdomain) the call would act on.
        #[arg(long)]
        service: Option<String>,
        /// The client address.
        #[arg(long)]
        ip: Option<std::net::IpAddr>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
        format: OutputFormat,
    },
    /// Run test cases against a policy: a JSON list of {name, claims, service?, ip?, expect:
    /// "allow"|"deny", rule?}. Prints each result and the rules no case exercised. Exit 1 when
    /// a case fails.
    Test {
        /// The policy document (JSON).
        file: std::path::PathBuf,
        /// The cases (JSON).
        cases: std::path::PathBuf,
        /// Output format.
        #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
        format: OutputFormat,
    },
}

/// `registry sync`.
#[derive(Debug, clap::Args)]
pub struct SyncArgs {
    /// The service (subdomain or id) whose documents to keep in step.
    #[arg(long)]
    pub service: String,
    /// The registry's API.
    #[arg(
        long,
        env = "REGISTRY_API_URL",
        default_value = "http://localhost:8080"
    )]
    pub api_url: String,
    /// A static token of the registry (prefer the environment: a flag shows in `ps`).
    #[arg(long, env = "REGISTRY_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// An identity token file (a projected service-account token whose audience is the
    /// registry), read afresh before every call, for an `oidc` service account: no stored secret.
    #[arg(long, conflicts_with = "token")]
    pub identity_token_file: Option<std::path::PathBuf>,
    /// The source issuer (default: the in-cluster API server,
    /// `https://kubernetes.default.svc`, with the in-cluster CA and token).
    #[arg(long, conflicts_with_all = ["discovery_file", "jwks_file"])]
    pub source: Option<String>,
    /// A PEM CA bundle for the source.
    #[arg(long)]
    pub source_ca: Option<std::path::PathBuf>,
    /// A file with the bearer token the source wants, read before every fetch.
    #[arg(long)]
    pub source_token_file: Option<std::path::PathBuf>,
    /// Read the discovery document from this file instead of a source URL.
    #[arg(long, requires = "jwks_file")]
    pub discovery_file: Option<std::path::PathBuf>,
    /// Read the key set from this file instead of a source URL.
    #[arg(long, requires = "discovery_file")]
    pub jwks_file: Option<std::path::PathBuf>,
    /// Run once and exit (the default).
    #[arg(long, conflicts_with = "interval")]
    pub once: bool,
    /// Keep running, one cycle every SECONDS; retries with backoff when either side is down.
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    pub interval: Option<u64>,
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

fn rfc3339(text: &str) -> Result<time::OffsetDateTime, String> {
    time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .map_err(|_| "not an RFC 3339 time such as 2026-11-23T10:00:00Z".to_owned())
}

fn action(text: &str) -> Result<registry_domain::audit::Action, String> {
    text.parse()
        .map_err(|e: registry_domain::audit::UnknownAction| e.to_string())
}

/// Customer subcommands.
#[derive(Debug, Subcommand)]
pub enum CustomerCommand {
    /// Create a customer and its first service account (policy `{"kind":"static","services":["*"]}`);
    /// prints the customer, the account and the account's token as one JSON object.
    Create {
        /// Tenant suffix: 2–20 characters of a-z and 0-9 (no '-').
        #[arg(long)]
        tenant: String,
        /// Plan: free, team, business or enterprise.
        #[arg(long)]
        plan: String,
        /// Display name.
        #[arg(long)]
        name: String,
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// List customers as a JSON array.
    List {
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// Change a customer's plan.
    SetPlan {
        /// Tenant suffix of the customer.
        #[arg(long)]
        tenant: String,
        /// New plan: free, team, business or enterprise.
        #[arg(long)]
        plan: String,
        #[command(flatten)]
        database: DatabaseArgs,
    },
}
