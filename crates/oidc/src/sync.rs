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
/// Largest document read from a source: reading stops past it, whatever the source sends.
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
    /// The source, or a file, holds more than a document, a token or a CA bundle can (1 MiB);
    /// reading stopped there.
    #[error(
        "{url} is larger than 1 MiB, more than an issuer's document, a token or a CA bundle holds"
    )]
    TooLarge {
        /// The URL, or the file.
        url: String,
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

/// A file read up to [`MAX_BYTES`] (a larger one, `/dev/zero`, is refused without reading on).
fn read_file(path: &Path) -> Result<Vec<u8>, SyncError> {
    use std::io::Read;
    let failed = |e: std::io::Error| SyncError::File {
        path: path.to_owned(),
        reason: e.to_string(),
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(failed)?
        .take(MAX_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(failed)?;
    if bytes.len() > MAX_BYTES {
        return Err(SyncError::TooLarge {
            url: path.display().to_string(),
        });
    }
    Ok(bytes)
}

fn parse_object(text: &[u8], what: &str) -> Result<Value, SyncError> {
    // Read strictly, as the registry reads the upload: a key set naming a member twice, or a
    // number this reader would write as another, would be uploaded as this reader took it, not
    // as the source meant it.
    let value = registry_domain::json::parse_unique(text).map_err(|e| SyncError::NotJson {
        what: what.to_owned(),
        reason: e.to_string(),
    })?;
    if let Some((_, sentence)) = registry_domain::json::number_changed(text, &value) {
        return Err(SyncError::NotJson {
            what: what.to_owned(),
            reason: sentence,
        });
    }
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
        let pem = read_file(ca)?;
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

/// The body, read a chunk at a time and given up past [`MAX_BYTES`], so that a broken or
/// hostile source (or one it redirects to) cannot fill the memory of the process.
async fn read_limited(url: &str, mut response: reqwest::Response) -> Result<Vec<u8>, SyncError> {
    let too_large = || SyncError::TooLarge {
        url: url.to_owned(),
    };
    if response
        .content_length()
        .is_some_and(|n| n > MAX_BYTES as u64)
    {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| SyncError::SourceUnreachable {
            url: url.to_owned(),
            reason: reason(&e),
        })?
    {
        if body.len() + chunk.len() > MAX_BYTES {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

impl Source {
    /// The discovery document and the key set.
    pub async fn fetch(&self) -> Result<(Value, Value), SyncError> {
        match self {
            Source::Files { discovery, jwks } => Ok((
                parse_object(&read_file(discovery)?, &discovery.display().to_string())?,
                parse_object(&read_file(jwks)?, &jwks.display().to_string())?,
            )),
            Source::Url {
                url,
                ca,
                token_file,
            } => {
                let client = client(ca.as_deref())?;
                let base = url.trim_end_matches('/');
                let discovery_url = format!("{base}/.well-known/openid-configuration");
                let token_file = token_file.as_deref();
                let discovery = get(&client, &discovery_url, token_file).await?;
                let own_path = format!("{base}/openid/v1/jwks");
                let jwks = match discovery.get("jwks_uri").and_then(Value::as_str) {
                    Some(uri) if same_host(uri, base) => get(&client, uri, token_file).await?,
                    // A Kubernetes API server names its external issuer's key set (often the
                    // registry's own copy, which must not be synced from); its own path serves
                    // the same keys. An issuer whose key set lives on another host (Google's)
                    // has no such path: its `jwks_uri` is followed then, without the token
                    // meant for the source.
                    Some(uri) => match get(&client, &own_path, token_file).await {
                        Err(SyncError::SourceStatus { status: 404, .. })
                            if follows_scheme(uri, base) =>
                        {
                            get(&client, uri, None).await?
                        }
                        read => read?,
                    },
                    None => get(&client, &own_path, token_file).await?,
                };
                Ok((discovery, jwks))
            }
        }
    }
}

/// Whether a key set named on another host may be read for a source: over HTTPS, or over the
/// source's own scheme (a source the operator reads over plain HTTP on a private network).
fn follows_scheme(uri: &str, source: &str) -> bool {
    match (url::Url::parse(uri), url::Url::parse(source)) {
        (Ok(uri), Ok(source)) => uri.scheme() == "https" || uri.scheme() == source.scheme(),
        _ => false,
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
        request = request.bearer_auth(String::from_utf8_lossy(&read_file(file)?).trim());
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
    let body = read_limited(url, response).await?;
    parse_object(&body, url)
}
