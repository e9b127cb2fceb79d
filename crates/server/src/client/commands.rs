//! The client commands' command line (clap): how to reach the API ([`Connection`]), what to
//! print ([`Format`]), each resource's commands, and [`Call`], what a command asks of the API.

use super::ApiFlags;
use registry_domain::publishing::{MAX_LEAD_SECONDS, MAX_RETAIN_HOURS};
use std::path::PathBuf;

/// How to reach the API, shared by every client command: [`ApiFlags`], as `sync` and `signer`
/// take them, and what to print.
#[derive(Debug, Clone, clap::Args)]
pub struct Connection {
    /// The API's address and the credential.
    #[command(flatten)]
    pub api: ApiFlags,
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
        /// Its title (required, as the API requires it).
        #[arg(long)]
        title: String,
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

/// A key source's name as `--source` and `--source-name` take it: one the API would refuse is a
/// wrong command line (exit 2), not a refusal of the API.
pub(crate) fn source_name(text: &str) -> Result<String, String> {
    registry_domain::keys::source_name(Some(text)).map(str::to_owned)
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
        #[arg(long, value_name = "NAME", value_parser = source_name)]
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
        #[arg(long, value_name = "NAME", value_parser = source_name)]
        source: Option<String>,
        /// The discovery document (`kubectl get --raw /.well-known/openid-configuration`).
        #[arg(long)]
        discovery_file: PathBuf,
        /// The key set (`kubectl get --raw /openid/v1/jwks`).
        #[arg(long)]
        jwks_file: PathBuf,
        /// How long keys the upload drops stay published, retired (0–168, default 24).
        #[arg(long, value_parser = clap::value_parser!(u32).range(..=i64::from(MAX_RETAIN_HOURS)))]
        retain_hours: Option<u32>,
        /// How long keys this upload publishes first must be published before they are safe to
        /// sign with (0–604800 seconds, default 600; `registry keys wait`).
        #[arg(long, value_parser = clap::value_parser!(u32).range(..=i64::from(MAX_LEAD_SECONDS)))]
        lead_seconds: Option<u32>,
    },
    /// Withdraw what a service publishes, or retire one key source's keys.
    ///
    /// Example: `registry config delete k3s-acme --source blue`
    Delete {
        /// Subdomain or id.
        service: String,
        /// Retire only this key source's keys; the others and the discovery document stay.
        #[arg(long, value_name = "NAME", value_parser = source_name)]
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
    /// Change an account's name or policy (at least one of them).
    ///
    /// Example: `registry accounts update 3553eb88-… --policy-file deployer.json`
    #[command(group = clap::ArgGroup::new("change").required(true).multiple(true)
        .args(["name", "policy_file"]))]
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
    /// `registry preflight SERVICE [--token-file F] [--issuer URL]`.
    Preflight {
        /// Subdomain or id.
        service: String,
        /// A token a workload would present, checked too.
        token_file: Option<PathBuf>,
        /// Which of the service's issuers (default its subdomain's).
        issuer: Option<String>,
    },
    /// `registry fetches SERVICE`.
    Fetches {
        /// Subdomain or id.
        service: String,
    },
    /// `registry audit-events [--since T] [--action A] [--limit N] [--cursor C]`.
    AuditEvents {
        /// Events at or after this RFC 3339 time.
        since: Option<String>,
        /// Only this action (`config.put`…).
        action: Option<String>,
        /// At most this many (1–500).
        limit: Option<u32>,
        /// The `nextCursor` of the page before.
        cursor: Option<String>,
    },
}
