//! The customer's client: the binary as a client of the registry's API, as `vault` is of Vault.
//! `commands` (`registry services …`, `config …`, `keys …`, `domain …`, `accounts …`,
//! `preflight`, `fetches`, `audit-events`) read `REGISTRY_API_URL` and `REGISTRY_TOKEN` (or an
//! identity token file), make their call (`requests`) and print a table (`tables`), or the API's
//! JSON with `--format json`; an API problem is one sentence on stderr (title, detail, each
//! pointer) and exit 1; a wrong command line is clap's usage and exit 2. `sync` keeps a
//! service's documents in step with a source issuer; `fetch_log` ships a cache's log; `signer`
//! serves kube-apiserver's external signer on a Unix socket (`registry-signer`). All of them call
//! the registry through `registry-client`.

pub mod commands;
pub mod fetch_log;
pub mod requests;
pub mod signer;
pub mod sync;
pub mod tables;

use registry_client::{ClientError, Credentials, RegistryApi};
use registry_domain::segment::is_dot_segment;
use std::path::{Path, PathBuf};

/// How every client of the API reaches it (the client commands, through
/// [`commands::Connection`], `registry sync` and `registry signer`): its address and one
/// credential. Global: a client command takes them after its subcommand too.
#[derive(Debug, Clone, clap::Args)]
pub struct ApiFlags {
    /// The registry's API.
    #[arg(
        long,
        global = true,
        env = "REGISTRY_API_URL",
        // A URL may hold a password, which a call refuses and help must not show.
        hide_env_values = true,
        default_value = "http://localhost:8080"
    )]
    pub api_url: String,
    /// A static token, or an anonymous secret where a call takes one (prefer the environment:
    /// a flag shows in `ps`).
    #[arg(long, global = true, env = "REGISTRY_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// An identity token file (a projected service-account token whose audience is the
    /// registry), read afresh before every call, for an `oidc` service account: no stored secret.
    /// It wins over a token (`REGISTRY_TOKEN` set in the environment too).
    #[arg(long, global = true)]
    pub identity_token_file: Option<PathBuf>,
    /// With --identity-token-file: the id of the `oidc` account to call as, when several
    /// accounts may accept the token (sent as `X-Service-Account`; a call naming no service,
    /// such as `services list`, needs it when another customer's accounts trust the issuer).
    #[arg(long, global = true, env = "REGISTRY_SERVICE_ACCOUNT")]
    pub service_account: Option<String>,
}

/// Why `url` cannot be the registry's API, if it cannot (a usage error): it must be an
/// `http://` or `https://` URL, without a user or password (the registry takes a token, and
/// a password in a URL shows in every error that names it), a query or a fragment (each path
/// is put after it).
pub fn api_url_problem(url: &str) -> Option<String> {
    url_problem(
        url,
        "REGISTRY_API_URL (--api-url)",
        "a token (REGISTRY_TOKEN)",
    )
}

/// Why `url`, the value of `variable`, cannot be a base URL the client puts paths after, if it
/// cannot (see [`api_url_problem`]); `credentials` says what authenticates instead. The
/// message never shows a URL that holds a password.
pub fn url_problem(url: &str, variable: &str, credentials: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    // First, so that no other message shows it (`htps://user:password@host` too).
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Some(format!(
            "{variable} holds a user or password: authenticate with {credentials}, never in the URL"
        ));
    }
    if !matches!(scheme.to_ascii_lowercase().as_str(), "http" | "https") {
        return Some(format!(
            "{variable} {url:?} is not an http:// or https:// URL"
        ));
    }
    url.contains(['?', '#'])
        .then(|| format!("{variable} {url:?} has a query or a fragment: give the base URL alone"))
}

/// Why `service` cannot name a service, if it cannot (a usage error): empty, or only dots
/// (`.` and `..` are steps of a URL's path, not names; `role` says what the service is for).
pub fn service_problem(service: &str, role: &str) -> Option<String> {
    if service.trim().is_empty() {
        return Some(format!(
            "--service is empty: name the service {role} (its subdomain)"
        ));
    }
    is_dot_segment(service).then(|| {
        format!("--service {service:?} names no service: name the service {role} (its subdomain)")
    })
}

/// Why `account` (`--service-account`) cannot be sent, if it cannot (a usage error): it names
/// the account an identity token calls as, so it goes with an identity token file (a static
/// token is its account already), and it is an account's id, a UUID. An empty one (a variable
/// set to nothing) names none.
pub fn account_problem(
    identity_token_file: Option<&Path>,
    account: Option<&str>,
) -> Option<String> {
    let account = account.filter(|a| !a.trim().is_empty())?;
    if identity_token_file.is_none() {
        return Some(
            "REGISTRY_SERVICE_ACCOUNT (--service-account) goes with --identity-token-file: a \
             static token calls as its own account"
                .to_owned(),
        );
    }
    uuid::Uuid::parse_str(account).is_err().then(|| {
        format!(
            "REGISTRY_SERVICE_ACCOUNT (--service-account) {account:?} is no account id: give the \
             id (a UUID) of the oidc account to call as"
        )
    })
}

/// Why `token`, the value of `variable`, cannot be sent, if it cannot (a usage error): an HTTP
/// header carries visible ASCII only, and a token with anything else was copied wrong. The
/// message never shows the token.
pub fn token_problem(token: &str, variable: &str) -> Option<String> {
    (!registry_client::is_token_text(token)).then(|| {
        format!(
            "{variable} holds a space, a control character or a non-ASCII character, which no \
             token has: check what was copied"
        )
    })
}

impl ApiFlags {
    /// What makes these flags unusable for any call (exit 2), if anything: an API address that
    /// is no http(s) URL, or no credentials.
    pub fn usage_problem(&self) -> Option<String> {
        let credentials = self.credentials();
        api_url_problem(&self.api_url)
            .or_else(|| {
                credentials
                    .is_none()
                    .then(|| ClientError::NoCredentials.to_string())
            })
            .or_else(|| {
                let token = self
                    .token
                    .as_deref()
                    .filter(|_| self.identity_token_file.is_none());
                token.and_then(|t| token_problem(t, "REGISTRY_TOKEN (--token)"))
            })
            .or_else(|| {
                account_problem(
                    self.identity_token_file.as_deref(),
                    self.service_account.as_deref(),
                )
            })
    }

    fn credentials(&self) -> Option<Credentials> {
        Credentials::from_flags(
            self.token.as_deref(),
            self.identity_token_file.as_deref(),
            self.service_account.as_deref(),
        )
    }

    /// What makes a command on one service through these flags unusable (exit 2), if
    /// anything: no service named ([`service_problem`]; `role` says what the service is for,
    /// as "whose keys sign"), then [`Self::usage_problem`].
    pub fn service_usage_problem(&self, service: &str, role: &str) -> Option<String> {
        service_problem(service, role).or_else(|| self.usage_problem())
    }

    /// The API these flags name; `NoCredentials` without a token or an identity token file.
    pub fn api(&self) -> Result<RegistryApi, ClientError> {
        let credentials = self.credentials().ok_or(ClientError::NoCredentials)?;
        RegistryApi::new(&self.api_url, credentials)
    }
}
