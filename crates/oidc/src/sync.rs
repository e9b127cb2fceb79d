//! The source side of `registry sync` (docs/api.md, "Key lifecycle"): read a source issuer's
//! discovery document and key set (a Kubernetes API server, any issuer URL, or files). What the
//! registry publishes is read, and uploads go, through `registry-client`;
//! `registry_domain::keys::sync_plan` decides.
//!
//! Unlike the verifier's fetcher, this client goes where its operator points it (an in-cluster
//! API server has a private address), with the operator's CA and bearer token.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where the Kubernetes in-cluster service-account files live.
pub const IN_CLUSTER_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The in-cluster API server.
pub const IN_CLUSTER_URL: &str = "https://kubernetes.default.svc";

const TIMEOUT: Duration = Duration::from_secs(10);
/// Largest document read from a source or the registry.
const MAX_BYTES: usize = 1024 * 1024;

/// What went wrong reading the source: one sentence each, for stderr.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// A file could not be read.
    #[error("cannot read {path}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The CA file holds no usable certificate.
    #[error("the CA file {0} holds no PEM certificate")]
    BadCa(PathBuf),
    /// The source did not answer (down, refused, TLS failure: a wrong CA shows here).
    #[error("cannot reach the source {url}: {reason}")]
    SourceUnreachable {
        /// The URL.
        url: String,
        /// Why, as the HTTP client says.
        reason: String,
    },
    /// The source answered with an error status.
    #[error("the source {url} answered {status}{hint}")]
    SourceStatus {
        /// The URL.
        url: String,
        /// The status.
        status: u16,
        /// What to check.
        hint: &'static str,
    },
    /// A document is not JSON (or not an object).
    #[error("{what} is not a JSON object: {reason}")]
    NotJson {
        /// Which document.
        what: String,
        /// Why.
        reason: String,
    },
}

fn read_file(path: &Path) -> Result<String, SyncError> {
    std::fs::read_to_string(path).map_err(|e| SyncError::File {
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

fn parse_object(text: &[u8], what: &str) -> Result<Value, SyncError> {
    let value: Value = serde_json::from_slice(text).map_err(|e| SyncError::NotJson {
        what: what.to_owned(),
        reason: e.to_string(),
    })?;
    if value.is_object() {
        Ok(value)
    } else {
        Err(SyncError::NotJson {
            what: what.to_owned(),
            reason: "it is not an object".into(),
        })
    }
}

/// Where the documents come from.
#[derive(Debug, Clone)]
pub enum Source {
    /// An issuer over HTTPS: a Kubernetes API server or any OIDC issuer.
    Url {
        /// Its URL (`https://kubernetes.default.svc`).
        url: String,
        /// A PEM CA bundle to trust (besides the system's).
        ca: Option<PathBuf>,
        /// A file holding the bearer token to send, read afresh for every fetch.
        token_file: Option<PathBuf>,
    },
    /// Files on disk.
    Files {
        /// The discovery document.
        discovery: PathBuf,
        /// The key set.
        jwks: PathBuf,
    },
}

fn client(ca: Option<&Path>) -> Result<reqwest::Client, SyncError> {
    let mut builder = reqwest::Client::builder()
        .timeout(TIMEOUT)
        .connect_timeout(Duration::from_secs(5))
        .redirect(reqwest::redirect::Policy::limited(3));
    if let Some(ca) = ca {
        let pem = std::fs::read(ca).map_err(|e| SyncError::File {
            path: ca.to_owned(),
            reason: e.to_string(),
        })?;
        let certificates = reqwest::Certificate::from_pem_bundle(&pem)
            .ok()
            .filter(|c| !c.is_empty())
            .ok_or_else(|| SyncError::BadCa(ca.to_owned()))?;
        for certificate in certificates {
            builder = builder.add_root_certificate(certificate);
        }
    }
    builder.build().map_err(|e| SyncError::SourceUnreachable {
        url: String::new(),
        reason: e.to_string(),
    })
}

/// A chain of errors as one line.
fn reason(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

async fn read_limited(response: reqwest::Response) -> Result<Vec<u8>, reqwest::Error> {
    let bytes = response.bytes().await?;
    Ok(bytes[..bytes.len().min(MAX_BYTES)].to_vec())
}

impl Source {
    /// The discovery document and the key set.
    pub async fn fetch(&self) -> Result<(Value, Value), SyncError> {
        match self {
            Source::Files { discovery, jwks } => Ok((
                parse_object(
                    read_file(discovery)?.as_bytes(),
                    &discovery.display().to_string(),
                )?,
                parse_object(read_file(jwks)?.as_bytes(), &jwks.display().to_string())?,
            )),
            Source::Url {
                url,
                ca,
                token_file,
            } => {
                let client = client(ca.as_deref())?;
                let base = url.trim_end_matches('/');
                let discovery_url = format!("{base}/.well-known/openid-configuration");
                let discovery = get(&client, &discovery_url, token_file.as_deref()).await?;
                // A Kubernetes API server names its external issuer's key set; in the cluster,
                // its own path serves the same keys. Another issuer's key set is followed.
                let jwks_url = match discovery.get("jwks_uri").and_then(Value::as_str) {
                    Some(uri) if same_host(uri, base) => uri.to_owned(),
                    _ => format!("{base}/openid/v1/jwks"),
                };
                let jwks = get(&client, &jwks_url, token_file.as_deref()).await?;
                Ok((discovery, jwks))
            }
        }
    }
}

fn same_host(a: &str, b: &str) -> bool {
    match (url::Url::parse(a), url::Url::parse(b)) {
        (Ok(a), Ok(b)) => {
            a.host_str() == b.host_str() && a.port_or_known_default() == b.port_or_known_default()
        }
        _ => false,
    }
}

async fn get(
    client: &reqwest::Client,
    url: &str,
    token_file: Option<&Path>,
) -> Result<Value, SyncError> {
    let mut request = client.get(url).header("accept", "application/json");
    if let Some(file) = token_file {
        request = request.bearer_auth(read_file(file)?.trim());
    }
    let unreachable = |e: reqwest::Error| SyncError::SourceUnreachable {
        url: url.to_owned(),
        reason: reason(&e),
    };
    let response = request.send().await.map_err(unreachable)?;
    let status = response.status().as_u16();
    if !response.status().is_success() {
        return Err(SyncError::SourceStatus {
            url: url.to_owned(),
            status,
            hint: match status {
                401 => " (the token was refused: check --source-token-file)",
                403 => {
                    " (the token may not read the issuer's documents: bind the \
                     system:service-account-issuer-discovery ClusterRole)"
                }
                _ => "",
            },
        });
    }
    let body = read_limited(response).await.map_err(unreachable)?;
    parse_object(&body, url)
}
