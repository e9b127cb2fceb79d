//! `registry signer`: the cluster's signing plugin (docs/api.md, "Managed signing"), served by
//! `registry-signer` on a Unix socket, through the registry's API.

use registry_client::{ClientError, Credentials, RegistryApi};
use std::path::PathBuf;

/// `registry signer --service S --socket PATH`.
#[derive(Debug, clap::Args)]
pub struct SignerArgs {
    /// The service (subdomain or id) whose managed keys sign the cluster's tokens.
    #[arg(long)]
    pub service: String,
    /// The Unix socket to serve on (created with mode 0600; kube-apiserver's
    /// `--service-account-signing-endpoint`).
    #[arg(long)]
    pub socket: PathBuf,
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
    /// An identity token file, read afresh before every call, for an `oidc` service account.
    #[arg(long, conflicts_with = "token")]
    pub identity_token_file: Option<PathBuf>,
}

/// Serves until SIGTERM or SIGINT; the error of a plugin that could not start (another live
/// plugin on the socket, a path that is not a socket, no credentials).
pub fn run(args: SignerArgs) -> anyhow::Result<()> {
    let credentials =
        Credentials::from_flags(args.token.as_deref(), args.identity_token_file.as_deref())
            .ok_or(ClientError::NoCredentials)?;
    let api = RegistryApi::new(&args.api_url, credentials)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(registry_signer::serve(api, args.service, args.socket))?;
    Ok(())
}
