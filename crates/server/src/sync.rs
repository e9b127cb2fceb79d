//! `registry sync` (DECISIONS §11): one cycle reads the source, compares it with what the
//! registry publishes (`registry_domain::keys::sync_plan`) and uploads only on a change. With
//! `--interval` it keeps going: a failed cycle is one line on stderr and a retry after a backoff
//! (1 s, doubling, at most the interval), never an exit.

use crate::cli::SyncArgs;
use registry_domain::keys::sync_plan;
use registry_oidc::sync::{
    Credentials, RegistryApi, Source, SyncError, IN_CLUSTER_DIR, IN_CLUSTER_URL,
};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;

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

fn credentials(args: &SyncArgs) -> Result<Credentials, SyncError> {
    match (&args.token, &args.identity_token_file) {
        (_, Some(file)) => Ok(Credentials::IdentityTokenFile(file.clone())),
        (Some(token), None) if !token.is_empty() => Ok(Credentials::Token(token.clone())),
        _ => Err(SyncError::NoCredentials),
    }
}

/// One cycle: the JSON line to print.
async fn cycle(
    api: &RegistryApi,
    source: &Source,
    service: &str,
) -> Result<serde_json::Value, SyncError> {
    let (discovery, jwks) = source.fetch().await?;
    let published = api.published(service).await?;
    let plan = sync_plan(published.as_ref(), &discovery, &jwks);
    let warnings = if plan.changed {
        api.publish(service, &discovery, &jwks).await?
    } else {
        Vec::new()
    };
    Ok(json!({
        "service": service,
        "changed": plan.changed,
        "added": plan.added,
        "retired": plan.retired,
        "warnings": warnings,
    }))
}

/// Runs the command; the error of a failed `--once` run.
pub fn run(args: SyncArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let api = RegistryApi::new(&args.api_url, credentials(&args)?)?;
        let source = source(&args);
        let Some(interval) = args.interval.map(Duration::from_secs) else {
            let line = cycle(&api, &source, &args.service).await?;
            println!("{line}");
            return Ok(());
        };
        let mut backoff = Duration::from_secs(1);
        loop {
            match cycle(&api, &source, &args.service).await {
                Ok(line) => {
                    println!("{line}");
                    backoff = Duration::from_secs(1);
                    tokio::time::sleep(interval).await;
                }
                Err(error) => {
                    eprintln!("registry sync: {error}");
                    tokio::time::sleep(backoff.min(interval)).await;
                    backoff = (backoff * 2).min(interval);
                }
            }
        }
    })
}
