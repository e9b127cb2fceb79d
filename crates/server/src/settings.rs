//! Settings of `registry serve`: each a flag and a `REGISTRY_*` environment variable.

use clap::{Args, FromArgMatches, ValueEnum};
use ipnetwork::IpNetwork;

/// Fewest characters of `REGISTRY_FETCH_LOG_TOKEN`.
pub const MIN_FETCH_LOG_TOKEN: usize = 32;

/// Where the database is; shared by every subcommand.
#[derive(Debug, Clone, Args)]
pub struct DatabaseArgs {
    /// Database URL: `sqlite://FILE` or `postgres://…` for several replicas (libpq's URL;
    /// `connect_timeout=5` is added unless it names one). Only `serve` and `migrate` create a
    /// database; other commands refuse one that does not exist or holds no registry.
    // A URL may carry a password: `--help` names the variable, never its value.
    #[arg(
        long,
        env = "REGISTRY_DATABASE_URL",
        hide_env_values = true,
        default_value = "sqlite://registry.db"
    )]
    pub database_url: String,
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Every setting of the server.
#[derive(Debug, Clone, Args)]
pub struct Settings {
    /// Address and port to listen on.
    #[arg(long, env = "REGISTRY_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: String,

    /// PEM file of the TLS certificate chain (leaf first): with REGISTRY_TLS_KEY, the listener
    /// speaks HTTPS only (TLS 1.3 and 1.2, HTTP/2 and HTTP/1.1). Both files are re-read when
    /// they change (a renewal needs no restart); one that does not load keeps the certificate
    /// served and logs why.
    #[arg(long, env = "REGISTRY_TLS_CERT")]
    pub tls_cert: Option<std::path::PathBuf>,

    /// PEM file of that certificate's private key (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "REGISTRY_TLS_KEY")]
    pub tls_key: Option<std::path::PathBuf>,

    /// With TLS: a second address, plain HTTP, that answers `GET /healthz` and redirects
    /// everything else (308) to the same path over HTTPS on the API or issuer host asked for.
    #[arg(long, env = "REGISTRY_HTTP_REDIRECT_LISTEN")]
    pub http_redirect_listen: Option<String>,

    #[command(flatten)]
    pub database: DatabaseArgs,

    /// A hot standby of that PostgreSQL database (`postgres://…`): what serves requests is read
    /// there, writes go to REGISTRY_DATABASE_URL, and reads fall back to it while the standby
    /// does not answer. Revocation stays immediate on every replica only with a synchronous
    /// standby and `synchronous_commit = remote_apply` (docs/api.md).
    #[arg(long, env = "REGISTRY_DATABASE_READ_URL", hide_env_values = true)]
    pub database_read_url: Option<String>,

    /// With a read replica: the most its replay may lag behind the primary, in seconds, before
    /// reads go to the primary until it catches up. A credential deleted or regenerated is
    /// refused on every replica within this bound, whatever the standby does.
    #[arg(long, env = "REGISTRY_READ_REPLICA_MAX_LAG_SECONDS", default_value_t = 5,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub read_replica_max_lag_seconds: u64,

    /// Public base URL of the API (used in Location headers, problem types, dashboard links).
    #[arg(
        long,
        env = "REGISTRY_BASE_URL",
        default_value = "http://localhost:8080"
    )]
    pub base_url: String,

    /// Issuer URL of a service; `{subdomain}` is replaced by the service's subdomain.
    #[arg(
        long,
        env = "REGISTRY_ISSUER_URL_TEMPLATE",
        default_value = "http://{subdomain}.localhost:8080"
    )]
    pub issuer_url_template: String,

    /// Comma-separated CIDRs of reverse proxies whose X-Forwarded-For or Forwarded (for=) is trusted.
    #[arg(
        long,
        env = "REGISTRY_TRUSTED_PROXIES",
        value_delimiter = ',',
        default_value = ""
    )]
    pub trusted_proxies: Vec<String>,

    /// Also fetch keys from http:// and loopback/private issuers (development and tests only).
    #[arg(
        long,
        env = "REGISTRY_OIDC_ALLOW_INSECURE_ISSUERS",
        default_value_t = false,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub oidc_allow_insecure_issuers: bool,

    /// Anonymous services one client address may create per hour.
    #[arg(long, env = "REGISTRY_ANON_CREATE_PER_HOUR", default_value_t = 20,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub anon_create_per_hour: u32,

    /// Most anonymous services live at once, across all clients; beyond it creation answers
    /// 503 (problem `capacity`).
    #[arg(long, env = "REGISTRY_ANON_MAX_ACTIVE", default_value_t = 100_000)]
    pub anon_max_active: u64,

    /// Most bytes of published documents held in memory; past it the least recently served
    /// are read from the database again when asked for.
    #[arg(long, env = "REGISTRY_HOSTING_CACHE_BYTES", default_value_t = 512 * 1024 * 1024)]
    pub hosting_cache_bytes: usize,

    /// Days the audit trail keeps its events; older ones are deleted by the reaper.
    #[arg(
        long,
        env = "REGISTRY_AUDIT_RETENTION_DAYS",
        default_value_t = registry_domain::audit::DEFAULT_RETENTION_DAYS,
        value_parser = clap::value_parser!(u32).range(1..=36_500)
    )]
    pub audit_retention_days: u32,

    /// Tests only: seconds between two rounds of the reaper (expiry, retention).
    #[arg(long, env = "REGISTRY_TEST_REAP_EVERY_SECONDS", hide = true, default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub reap_every_seconds: u64,

    /// Tests only: in how many distinct clock hours an agent must have fetched a key set to be
    /// a verifier of the next key (docs/api.md, "Key readiness": 2). For a test of real
    /// processes that cannot wait an hour (`cargo xtask cdn`).
    #[arg(long, env = "REGISTRY_TEST_VERIFIER_HOURS", hide = true,
          default_value_t = registry_domain::keys::VERIFIER_HOURS,
          value_parser = clap::value_parser!(u32).range(1..=168))]
    pub verifier_hours: u32,

    /// Seconds between two flushes of this replica's counts of public fetches to the database
    /// (`GET /services/{s}/fetches` sums every replica's within 60 s).
    #[arg(long, env = "REGISTRY_FETCH_FLUSH_SECONDS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=30))]
    pub fetch_flush_seconds: u64,

    /// Comma-separated addresses (`http(s)://host:port`) of the caches in front of the registry:
    /// when a service's public documents change, each replica sends them `PURGE` for every public
    /// path of the service, with the issuer's Host.
    #[arg(
        long,
        env = "REGISTRY_PURGE_URLS",
        hide_env_values = true,
        value_delimiter = ',',
        default_value = ""
    )]
    pub purge_urls: Vec<String>,

    /// The bearer of `POST /fetch-log`, which takes a cache's access log as fetch evidence
    /// (`registry fetch-log`); without it the endpoint answers 404. While it is set, public GETs
    /// from REGISTRY_TRUSTED_PROXIES are counted from the log only.
    #[arg(long, env = "REGISTRY_FETCH_LOG_TOKEN", hide_env_values = true)]
    pub fetch_log_token: Option<String>,

    /// How many custom domains of one customer may wait for their TXT record at once; past
    /// it, `PUT /services/{s}/domain` answers 409 `too-many-pending-domains`.
    #[arg(long, env = "REGISTRY_MAX_PENDING_DOMAINS", default_value_t = 5,
          value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub max_pending_domains: u64,

    /// The ACME directory custom domains get their certificates from (RFC 8555), such as
    /// `https://acme-v02.api.letsencrypt.org/directory`. Without it, custom domains are refused
    /// (409 `custom-domains-disabled`). Needs REGISTRY_DATA_KEY and TLS (REGISTRY_TLS_CERT).
    #[arg(long, env = "REGISTRY_ACME_DIRECTORY")]
    pub acme_directory: Option<String>,

    /// The contact of the ACME account (an e-mail address).
    #[arg(long, env = "REGISTRY_ACME_EMAIL")]
    pub acme_email: Option<String>,

    /// A PEM file of the root that the ACME directory's HTTPS certificate chains to, for an ACME
    /// server with a private CA (a test server such as Pebble).
    #[arg(long, env = "REGISTRY_ACME_CA_FILE")]
    pub acme_ca_file: Option<std::path::PathBuf>,

    /// 32 random bytes, base64 (`openssl rand -base64 32`): the key that seals managed signing
    /// keys, custom domains' private keys and the ACME account at rest (AES-256-GCM). The same
    /// on every replica. Without it, turning managed signing on is refused (409
    /// `signing-disabled`) and custom domains are too.
    #[arg(long, env = "REGISTRY_DATA_KEY", hide_env_values = true)]
    pub data_key: Option<String>,

    /// The DNS server (`host:port`) the TXT records proving a custom domain's ownership are
    /// looked up through (default: the system's resolver).
    #[arg(long, env = "REGISTRY_DNS_RESOLVER")]
    pub dns_resolver: Option<String>,

    /// Seconds between the first TXT lookups of a custom domain (doubling up to 5 minutes).
    #[arg(long, env = "REGISTRY_DOMAIN_CHECK_SECONDS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=300))]
    pub domain_check_seconds: u64,

    /// Failed authentications one client address may make per minute before it gets 429
    /// (an IPv4 address alone, IPv6 by its /64). A credential this replica
    /// verified within the last minute (the fetch-log token too) is never refused by it.
    #[arg(long, env = "REGISTRY_AUTH_FAILURES_PER_MINUTE", default_value_t = 1000,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub auth_failures_per_minute: u32,

    /// Open connections one TCP peer address may hold at once (keyed like the rate limits;
    /// `REGISTRY_TRUSTED_PROXIES` are exempt). Past it, new connections are closed at once.
    #[arg(long, env = "REGISTRY_MAX_CONNECTIONS_PER_ADDRESS", default_value_t = 256,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections_per_address: u32,

    /// Most services (registered ones) one customer may have; past it 403 `quota-exceeded`.
    #[arg(
        long,
        env = "REGISTRY_MAX_SERVICES_PER_CUSTOMER",
        default_value_t = 10_000
    )]
    pub max_services_per_customer: u64,

    /// Most service accounts one customer may have (the one `customer create` minted
    /// included); past it 403 `quota-exceeded`.
    #[arg(
        long,
        env = "REGISTRY_MAX_ACCOUNTS_PER_CUSTOMER",
        default_value_t = 1_000
    )]
    pub max_accounts_per_customer: u64,

    /// Changing requests one credential (a static token's account, a federated account, an
    /// anonymous secret) may make per minute; past it 429 with `Retry-After`.
    #[arg(long, env = "REGISTRY_WRITES_PER_MINUTE", default_value_t = 300,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub writes_per_minute: u32,

    /// Tokens or claims one customer (an anonymous service: itself) may have explained (`POST
    /// /service-accounts/{id}/explain`) or checked (`POST /services/{s}/preflight`) per minute,
    /// together; past it 429 with `Retry-After`.
    #[arg(long, env = "REGISTRY_EXPLAIN_PER_MINUTE", default_value_t = 60,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub explain_per_minute: u32,

    /// `POST /services/{s}/sign` calls one customer (an anonymous service: itself) may make per
    /// minute; past it 429 with `Retry-After` (docs/api.md, "Managed signing").
    #[arg(long, env = "REGISTRY_SIGN_PER_MINUTE", default_value_t = 6000,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub sign_per_minute: u32,

    /// Comma-separated CIDRs of the client addresses that may read `/metrics`; others get 404.
    #[arg(
        long,
        env = "REGISTRY_METRICS_ALLOW",
        value_delimiter = ',',
        default_value = "127.0.0.0/8,::1/128,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,fc00::/7"
    )]
    pub metrics_allow: Vec<String>,

    /// Largest accepted request body, in bytes.
    #[arg(long, env = "REGISTRY_MAX_BODY_BYTES", default_value_t = 65536, value_parser = at_least_one)]
    pub max_body_bytes: usize,

    /// HTTP worker threads, at least 1 (default: the number of cores).
    #[arg(long, env = "REGISTRY_WORKERS", value_parser = clap::value_parser!(u16).range(1..))]
    pub workers: Option<u16>,

    /// Log format.
    #[arg(long, env = "REGISTRY_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
}

impl Settings {
    /// The settings `registry serve` reads when its environment holds these `REGISTRY_*`
    /// variables and nothing else: the process's own environment and command line play no part,
    /// and every setting not named takes its default. For a server started inside another
    /// program (the integration tests start several in one process, each with its own
    /// settings). An unknown variable or a value the flag refuses is an error.
    pub fn from_vars<K, V>(vars: impl IntoIterator<Item = (K, V)>) -> anyhow::Result<Self>
    where
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let command = Self::augment_args(clap::Command::new("serve")).no_binary_name(true);
        let mut args = Vec::new();
        for (name, value) in vars {
            let name = name.as_ref();
            let long = command
                .get_arguments()
                .find(|arg| arg.get_env().is_some_and(|env| env == name))
                .and_then(clap::Arg::get_long)
                .ok_or_else(|| anyhow::anyhow!("{name} is not a setting of registry serve"))?;
            args.push(format!("--{long}={}", value.as_ref()));
        }
        let matches = command
            .mut_args(|arg| arg.env(None::<&'static str>))
            .try_get_matches_from(args)?;
        Ok(Self::from_arg_matches(&matches)?)
    }

    /// The base URL without a trailing slash.
    pub fn base(&self) -> &str {
        self.base_url.trim_end_matches('/')
    }

    /// The origin of [`Self::base`] (`https://registry.example.com:8443`, no path): what a
    /// browser sends as `Origin` from the registry's own pages.
    pub fn origin(&self) -> String {
        let base = self.base();
        let scheme = base.split_once("://").map_or("", |(scheme, _)| scheme);
        format!("{scheme}://{}", authority(base))
    }

    /// Refuses a fetch-log token shorter than [`MIN_FETCH_LOG_TOKEN`] characters, or holding
    /// anything but visible ASCII (a header cannot carry a space, a control character or other
    /// bytes reliably: the token could never be presented) (docs/api.md, "Behind a CDN"): the
    /// token lets anyone who holds it write key readiness's evidence.
    pub fn check_fetch_log_token(&self) -> anyhow::Result<()> {
        match &self.fetch_log_token {
            Some(token) if token.chars().count() < MIN_FETCH_LOG_TOKEN => anyhow::bail!(
                "REGISTRY_FETCH_LOG_TOKEN must be at least {MIN_FETCH_LOG_TOKEN} characters \
                 long (for example: openssl rand -hex 32)"
            ),
            Some(token) if !token.chars().all(|c| c.is_ascii_graphic()) => anyhow::bail!(
                "REGISTRY_FETCH_LOG_TOKEN holds a space, a control character or a character \
                 that is not ASCII, which no Authorization header carries reliably (for \
                 example: openssl rand -hex 32)"
            ),
            _ => Ok(()),
        }
    }

    /// Refuses a `REGISTRY_DATA_KEY` that is not a key (checked at the start, before the
    /// database is touched: docs/api.md, "Operations").
    pub fn check_data_key(&self) -> anyhow::Result<()> {
        if let Some(key) = &self.data_key {
            registry_acme::DataKey::from_base64(key)?;
        }
        Ok(())
    }

    /// Refuses a DNS server that is not `host:port` and an ACME contact that is not an e-mail
    /// address (checked at the start, whether or not custom domains are on).
    pub fn check_domain_settings(&self) -> anyhow::Result<()> {
        if let Some(server) = &self.dns_resolver {
            let port = server
                .rsplit_once(':')
                .map(|(host, port)| (host, port.parse::<u16>()));
            // An IPv6 address is bracketed (`[::1]:53`): a bare one reads as a host and port.
            let host_ok = |host: &str| {
                !host.is_empty()
                    && (!host.contains(':') || host.starts_with('[') && host.ends_with(']'))
            };
            if !matches!(port, Some((host, Ok(_))) if host_ok(host)) {
                anyhow::bail!(
                    "REGISTRY_DNS_RESOLVER {server:?} is not a host and port (such as \
                     127.0.0.1:53 or dns.internal:53)"
                );
            }
        }
        if let Some(email) = &self.acme_email {
            let plain = !email.chars().any(|c| c.is_whitespace() || c.is_control());
            let parts = email.split_once('@');
            if !plain
                || !parts.is_some_and(|(local, domain)| {
                    !local.is_empty() && domain.contains('.') && !domain.contains('@')
                })
            {
                anyhow::bail!("REGISTRY_ACME_EMAIL {email:?} is not an e-mail address");
            }
        }
        Ok(())
    }

    /// Refuses a read replica beside anything but PostgreSQL (checked at the start, before
    /// either database is touched).
    pub fn check_read_url(&self) -> anyhow::Result<()> {
        let postgres = |url: &str| {
            let scheme = url
                .split_once("://")
                .map(|(scheme, _)| scheme.to_ascii_lowercase());
            matches!(scheme.as_deref(), Some("postgres" | "postgresql"))
        };
        match self
            .database_read_url
            .as_deref()
            .filter(|u| !u.trim().is_empty())
        {
            Some(read) if !postgres(read) || !postgres(&self.database.database_url) => {
                anyhow::bail!(
                    "REGISTRY_DATABASE_READ_URL: a read replica needs PostgreSQL: \
                     REGISTRY_DATABASE_URL and REGISTRY_DATABASE_READ_URL must both be \
                     postgres:// URLs"
                )
            }
            _ => Ok(()),
        }
    }

    /// The trusted proxy networks, parsed.
    pub fn trusted_proxy_networks(&self) -> anyhow::Result<Vec<IpNetwork>> {
        networks("REGISTRY_TRUSTED_PROXIES", &self.trusted_proxies)
    }

    /// The purger of the caches of `REGISTRY_PURGE_URLS`; `None` without any.
    pub fn purger(&self) -> anyhow::Result<Option<registry_cdn::Purger>> {
        registry_cdn::Purger::new(&self.purge_urls)
            .map_err(|e| anyhow::anyhow!("REGISTRY_PURGE_URLS: {e}"))
    }

    /// The networks that may read `/metrics`, parsed.
    pub fn metrics_allow_networks(&self) -> anyhow::Result<Vec<IpNetwork>> {
        networks("REGISTRY_METRICS_ALLOW", &self.metrics_allow)
    }
}

/// A count that must be at least one (a body limit of 0 would refuse every body).
fn at_least_one(value: &str) -> Result<usize, String> {
    match value.parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_owned()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// A list of CIDRs from the setting `name`; blank entries are skipped.
fn networks(name: &str, entries: &[String]) -> anyhow::Result<Vec<IpNetwork>> {
    entries
        .iter()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<IpNetwork>()
                .map_err(|e| anyhow::anyhow!("{name}: {s:?} is not a CIDR: {e}"))
        })
        .collect()
}

/// The authority of an absolute URL (`host[:port]`: what stands between `://` and its path).
///
/// ```
/// use registry_server::settings::authority;
/// assert_eq!(authority("https://login.acme.com:8443/tenant/a"), "login.acme.com:8443");
/// assert_eq!(authority("http://127.0.0.1:8080"), "127.0.0.1:8080");
/// ```
pub fn authority(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.split('/').next().unwrap_or(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_from_variables_alone() {
        let settings = Settings::from_vars([
            ("REGISTRY_LISTEN", "127.0.0.1:0"),
            ("REGISTRY_TRUSTED_PROXIES", "10.0.0.0/8,192.168.0.0/16"),
            ("REGISTRY_OIDC_ALLOW_INSECURE_ISSUERS", "true"),
            ("REGISTRY_TEST_REAP_EVERY_SECONDS", "1"),
        ])
        .unwrap();
        assert_eq!(settings.listen, "127.0.0.1:0");
        assert_eq!(settings.trusted_proxies, ["10.0.0.0/8", "192.168.0.0/16"]);
        assert!(settings.oidc_allow_insecure_issuers);
        assert_eq!(settings.reap_every_seconds, 1);
        assert_eq!(settings.writes_per_minute, 300, "a default");
        assert_eq!(settings.database.database_url, "sqlite://registry.db");
        let unknown = Settings::from_vars([("REGISTRY_NO_SUCH_THING", "1")]).unwrap_err();
        assert!(
            unknown.to_string().contains("REGISTRY_NO_SUCH_THING"),
            "{unknown}"
        );
        assert!(Settings::from_vars([("REGISTRY_WRITES_PER_MINUTE", "0")]).is_err());
        assert!(Settings::from_vars([("REGISTRY_MAX_BODY_BYTES", "0")]).is_err());
    }

    #[test]
    fn a_fetch_log_token_is_long_and_presentable() {
        let check = |value: &str| {
            let settings = Settings::from_vars([("REGISTRY_FETCH_LOG_TOKEN", value)]).unwrap();
            settings.check_fetch_log_token().map_err(|e| e.to_string())
        };
        assert!(check(&"a".repeat(32)).is_ok());
        for bad in [
            "a".repeat(31),
            " ".repeat(40),
            format!("{} {}", "a".repeat(20), "b".repeat(20)),
            format!("{}\t", "a".repeat(32)),
            format!("{}é", "a".repeat(32)),
        ] {
            let refused = check(&bad).unwrap_err();
            assert!(refused.contains("REGISTRY_FETCH_LOG_TOKEN"), "{refused}");
        }
    }

    #[test]
    fn a_dns_server_and_an_acme_contact_are_checked_at_the_start() {
        let check = |name: &str, value: &str| {
            let settings = Settings::from_vars([(name, value)]).unwrap();
            settings.check_domain_settings().map_err(|e| e.to_string())
        };
        assert!(check("REGISTRY_DNS_RESOLVER", "127.0.0.1:53").is_ok());
        assert!(check("REGISTRY_DNS_RESOLVER", "[::1]:5353").is_ok());
        assert!(check("REGISTRY_DNS_RESOLVER", "dns.internal:53").is_ok());
        for bad in ["bad", "127.0.0.1", ":53", "dns:port", "::1"] {
            let refused = check("REGISTRY_DNS_RESOLVER", bad).unwrap_err();
            assert!(refused.contains("REGISTRY_DNS_RESOLVER"), "{refused}");
        }
        assert!(check("REGISTRY_ACME_EMAIL", "ops@example.com").is_ok());
        for bad in [
            "notanemail",
            "@example.com",
            "ops@localhost",
            "a b@example.com",
        ] {
            let refused = check("REGISTRY_ACME_EMAIL", bad).unwrap_err();
            assert!(refused.contains("REGISTRY_ACME_EMAIL"), "{refused}");
        }
    }
}
