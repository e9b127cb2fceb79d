//! `registry signer`: the cluster's signing plugin (docs/api.md, "Managed signing"), served by
//! `registry-signer` on a Unix socket, through the registry's API.

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
    /// The registry's API and the credential.
    #[command(flatten)]
    pub api: super::ApiFlags,
}

impl SignerArgs {
    /// What makes this command line unusable (exit 2), if anything: no service named, an API
    /// address that is no URL, or no credentials.
    pub fn usage_problem(&self) -> Option<String> {
        (self.api).service_usage_problem(&self.service, "whose keys sign")
    }
}

/// Serves until SIGTERM or SIGINT; the error of a plugin that could not start (another live
/// plugin on the socket, a path that is not a socket).
pub fn run(args: SignerArgs) -> anyhow::Result<()> {
    let api = args.api.api()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(registry_signer::serve(api, args.service, args.socket))?;
    Ok(())
}
