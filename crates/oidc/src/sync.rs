//! The HTTP side of `registry sync` (docs/api.md, "Key lifecycle"): read a source issuer's
//! discovery document and key set (a Kubernetes API server, any issuer URL, or files), read what
//! the registry publishes, and upload when they differ (`registry_domain::keys::sync_plan`
//! decides).
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

/// What went wrong in a sync cycle: one sentence each, for stderr.
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
    /// The registry did not answer.
    #[error("cannot reach the registry at {url}: {reason}")]
    RegistryUnreachable {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// The registry refused the call.
    #[error("the registry answered {status} to {method} {url}: {detail}")]
    RegistryStatus {
        /// The method.
        method: &'static str,
        /// The URL.
        url: String,
        /// The status.
        status: u16,
        /// The problem's detail.
        detail: String,
    },
    /// No way to authenticate was given.
    #[error("no credentials for the registry: set REGISTRY_TOKEN or --identity-token-file")]
    NoCredentials,
}

/// A path segment of the API made of the user's text: what is not unreserved (RFC 3986) is
/// percent-encoded.
///
/// ```
/// assert_eq!(registry_oidc::sync::path_segment("a b/c"), "a%20b%2Fc");
/// ```
pub fn path_segment(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// The path of `service`'s published configuration, with `?source=` when a key source is named.
///
/// ```
/// use registry_oidc::sync::config_path;
/// assert_eq!(config_path("k3s-acme", None), "/services/k3s-acme/config");
/// assert_eq!(config_path("k3s-acme", Some("blue")), "/services/k3s-acme/config?source=blue");
/// ```
pub fn config_path(service: &str, source: Option<&str>) -> String {
    let path = format!("/services/{}/config", path_segment(service));
    match source {
        Some(source) => format!("{path}?source={}", path_segment(source)),
        None => path,
    }
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

/// How `registry sync` authenticates to the registry.
#[derive(Debug, Clone)]
pub enum Credentials {
    /// A static token (`REGISTRY_TOKEN`).
    Token(String),
    /// An identity token in a file, read afresh before every call: a projected service-account
    /// token rotates on disk.
    IdentityTokenFile(PathBuf),
}

impl Credentials {
    /// What the command line's flags give: an identity token file first, else a static token
    /// that is not empty; `None` without either.
    pub fn from_flags(token: Option<&str>, identity_token_file: Option<&Path>) -> Option<Self> {
        match (token, identity_token_file) {
            (_, Some(file)) => Some(Credentials::IdentityTokenFile(file.to_owned())),
            (Some(token), None) if !token.is_empty() => Some(Credentials::Token(token.to_owned())),
            _ => None,
        }
    }
}

/// The registry's API, as `registry sync` and the command line's client commands call it.
#[derive(Debug, Clone)]
pub struct RegistryApi {
    base: String,
    credentials: Credentials,
    client: reqwest::Client,
}

impl RegistryApi {
    /// A client of the registry at `base` (`https://registry.example.com`).
    pub fn new(base: &str, credentials: Credentials) -> Result<Self, SyncError> {
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            credentials,
            client: client(None)?,
        })
    }

    fn bearer(&self) -> Result<String, SyncError> {
        match &self.credentials {
            Credentials::Token(token) => Ok(token.clone()),
            Credentials::IdentityTokenFile(path) => Ok(read_file(path)?.trim().to_owned()),
        }
    }

    /// One call of the API (`GET`, `PUT`, `POST`, `PATCH` or `DELETE` on `path`, with a JSON
    /// body): the status and the body as JSON (`Null` when it has none or is not JSON). An
    /// error only when the registry does not answer.
    pub async fn call(
        &self,
        method: &'static str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(u16, Value), SyncError> {
        let body = body.map(|body| ("application/json", body.to_string()));
        self.send(method, path, body).await
    }

    /// One call with a body of another type (`content type`, text): as [`RegistryApi::call`].
    pub async fn send(
        &self,
        method: &'static str,
        path: &str,
        body: Option<(&'static str, String)>,
    ) -> Result<(u16, Value), SyncError> {
        let url = format!("{}{path}", self.base);
        let mut request = match method {
            "PUT" => self.client.put(&url),
            "POST" => self.client.post(&url),
            "PATCH" => self.client.patch(&url),
            "DELETE" => self.client.delete(&url),
            _ => self.client.get(&url),
        }
        .bearer_auth(self.bearer()?);
        if let Some((content_type, body)) = body {
            request = request.header("content-type", content_type).body(body);
        }
        let unreachable = |e: reqwest::Error| SyncError::RegistryUnreachable {
            url: url.clone(),
            reason: reason(&e),
        };
        let response = request.send().await.map_err(unreachable)?;
        let status = response.status().as_u16();
        let body = read_limited(response).await.map_err(unreachable)?;
        let value: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        Ok((status, value))
    }

    fn refused(method: &'static str, url: String, status: u16, body: &Value) -> SyncError {
        let mut detail = body
            .get("detail")
            .and_then(Value::as_str)
            .unwrap_or("no detail")
            .to_owned();
        if let Some(errors) = body.get("errors").and_then(Value::as_array) {
            for e in errors {
                detail.push_str(&format!(
                    "; {} {}",
                    e["pointer"].as_str().unwrap_or(""),
                    e["message"].as_str().unwrap_or("")
                ));
            }
        }
        SyncError::RegistryStatus {
            method,
            url,
            status,
            detail,
        }
    }

    /// What `service` publishes (`GET /services/{s}/config`), or what key source `source`
    /// uploaded last (`?source=`); `None` when nothing is.
    pub async fn published(
        &self,
        service: &str,
        source: Option<&str>,
    ) -> Result<Option<Value>, SyncError> {
        let path = config_path(service, source);
        match self.call("GET", &path, None).await? {
            (200, body) => Ok(Some(body)),
            (404, body)
                if body["detail"]
                    .as_str()
                    .is_some_and(|d| d.starts_with("nothing") || d.contains("no key source")) =>
            {
                Ok(None)
            }
            (status, body) => Err(Self::refused(
                "GET",
                format!("{}{path}", self.base),
                status,
                &body,
            )),
        }
    }

    /// The keys among `kids` that `service` publishes and that are not safe to sign with yet
    /// (`GET …/keys/{kid}/readiness`), each as `{kid, reasons}`; keys not published are left out.
    pub async fn pending(&self, service: &str, kids: &[&str]) -> Result<Vec<Value>, SyncError> {
        let mut pending = Vec::new();
        for kid in kids {
            let path = format!("/services/{service}/keys/{}/readiness", path_segment(kid));
            match self.call("GET", &path, None).await? {
                (200, body) if body["safeToSign"] == false => {
                    let reasons: Vec<Value> = (body["pending"].as_array().into_iter().flatten())
                        .map(|p| p["reason"].clone())
                        .collect();
                    pending.push(serde_json::json!({"kid": kid, "reasons": reasons}));
                }
                (200 | 404, _) => {}
                (status, body) => {
                    return Err(Self::refused(
                        "GET",
                        format!("{}{path}", self.base),
                        status,
                        &body,
                    ))
                }
            }
        }
        Ok(pending)
    }

    /// Uploads the documents, as key source `source` when one is named; the response's
    /// `warnings`.
    pub async fn publish(
        &self,
        service: &str,
        source: Option<&str>,
        discovery: &Value,
        jwks: &Value,
    ) -> Result<Vec<String>, SyncError> {
        let path = config_path(service, source);
        let body = serde_json::json!({"openidConfiguration": discovery, "jwks": jwks});
        match self.call("PUT", &path, Some(&body)).await? {
            (200, body) => Ok(body["warnings"]
                .as_array()
                .map(|w| {
                    w.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default()),
            (status, body) => Err(Self::refused(
                "PUT",
                format!("{}{path}", self.base),
                status,
                &body,
            )),
        }
    }
}
