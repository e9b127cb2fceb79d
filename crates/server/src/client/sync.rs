//! `registry sync` (docs/api.md, "Key lifecycle"): one cycle reads the source, compares it with
//! what the registry publishes (`registry_domain::keys::sync_plan`) and uploads only on a change.
//! With `--interval` it keeps going: a failed cycle is one line on stderr and a retry after a
//! backoff (1 s, doubling, at most the interval), never an exit.

use registry_client::{ClientError, RegistryApi};
use registry_domain::keys::sync_plan;
use registry_oidc::sync::{Source, SyncError, IN_CLUSTER_DIR, IN_CLUSTER_URL};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `registry sync`.
#[derive(Debug, clap::Args)]
pub struct SyncArgs {
    /// The service (subdomain or id) whose documents to keep in step.
    #[arg(long)]
    pub service: String,
    /// The registry's API and the credential.
    #[command(flatten)]
    pub api: super::ApiFlags,
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
    /// Upload as this key source (`[a-z0-9-]{1,32}`), so that several clusters publish under
    /// one issuer, each through its own `registry sync`; removing a source
    /// (`registry config delete SERVICE --source NAME`) retires its keys only.
    #[arg(long, value_name = "NAME", value_parser = super::commands::source_name)]
    pub source_name: Option<String>,
    /// Run once and exit (the default).
    #[arg(long, conflicts_with = "interval")]
    pub once: bool,
    /// Keep running, one cycle every SECONDS; retries with backoff when either side is down.
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    pub interval: Option<u64>,
}

/// The source the flags name.
fn source(args: &SyncArgs) -> Source {
    if let (Some(discovery), Some(jwks)) = (&args.discovery_file, &args.jwks_file) {
        return Source::Files {
            discovery: discovery.clone(),
            jwks: jwks.clone(),
        };
    }
    let in_cluster = |name: &str| -> Option<PathBuf> {
        let path = Path::new(IN_CLUSTER_DIR).join(name);
        path.exists().then_some(path)
    };
    match &args.source {
        Some(url) => Source::Url {
            url: url.clone(),
            ca: args.source_ca.clone(),
            token_file: args.source_token_file.clone(),
        },
        None => Source::Url {
            url: IN_CLUSTER_URL.into(),
            ca: args.source_ca.clone().or_else(|| in_cluster("ca.crt")),
            token_file: args
                .source_token_file
                .clone()
                .or_else(|| in_cluster("token")),
        },
    }
}

/// Why a cycle failed: the source, or the registry.
#[derive(Debug, thiserror::Error)]
enum CycleError {
    #[error(transparent)]
    Source(#[from] SyncError),
    #[error(transparent)]
    Registry(#[from] ClientError),
}

/// The key source an upload without `?source=` is (docs/api.md, "Key sources").
const DEFAULT_SOURCE: &str = "default";

/// One cycle: the JSON line to print.
async fn cycle(
    api: &RegistryApi,
    source: &Source,
    service: &str,
    source_name: Option<&str>,
) -> Result<serde_json::Value, CycleError> {
    let (discovery, jwks) = source.fetch().await?;
    // Compared with this source's own upload (`default` when none is named), never with the
    // union of every source's keys: another cluster's keys are not this one's to retire.
    let own_source = source_name.unwrap_or(DEFAULT_SOURCE);
    let published = api.published(service, Some(own_source)).await?;
    let plan = sync_plan(published.as_ref(), &discovery, &jwks);
    let warnings = if plan.changed {
        api.publish(service, source_name, &discovery, &jwks).await?
    } else {
        Vec::new()
    };
    // The source's keys not yet safe to sign with (docs/api.md, "Key readiness").
    let kids: Vec<&str> = (jwks["keys"].as_array().into_iter().flatten())
        .filter_map(|k| k["kid"].as_str())
        .collect();
    let pending = api.pending(service, &kids).await?;
    Ok(json!({
        "service": service,
        "changed": plan.changed,
        "added": plan.added,
        "retired": plan.retired,
        "warnings": warnings,
        "pending": pending,
    }))
}

impl SyncArgs {
    /// What makes this command line unusable (exit 2), if anything: no service named, an API
    /// address that is no URL, or no credentials (an interval run would retry them for ever), a
    /// source that is no base URL.
    pub fn usage_problem(&self) -> Option<String> {
        (self.api)
            .service_usage_problem(&self.service, "to keep in step")
            .or_else(|| {
                let source = self.source.as_deref()?;
                super::url_problem(source, "--source", "--source-token-file")
            })
    }
}

/// Runs the command; the error of a failed `--once` run.
pub fn run(args: SyncArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let api = args.api.api()?;
        let source = source(&args);
        let Some(interval) = args.interval.map(Duration::from_secs) else {
            let line = cycle(&api, &source, &args.service, args.source_name.as_deref()).await?;
            crate::stdout::line(&line);
            return Ok(());
        };
        let mut backoff = Duration::from_secs(1);
        loop {
            match cycle(&api, &source, &args.service, args.source_name.as_deref()).await {
                Ok(line) => {
                    crate::stdout::line(&line);
                    backoff = Duration::from_secs(1);
                    tokio::time::sleep(interval).await;
                }
                Err(error) => {
                    crate::stdout::report(format_args!("registry sync: {error}"));
                    tokio::time::sleep(backoff.min(interval)).await;
                    backoff = (backoff * 2).min(interval);
                }
            }
        }
    })
}
