//! A client of the registry's API (docs/api.md): typed calls over one base URL and one
//! credential, and refusals as [`Problem`]s matched by their `type` slug. `registry sync`, the
//! command line's client commands and `registry fetch-log` call the registry through it.
//!
//! ```
//! use registry_client::{config_path, Problem};
//! use serde_json::json;
//!
//! assert_eq!(config_path("k3s acme", Some("blue")), "/services/k3s%20acme/config?source=blue");
//! let refused = Problem::from_answer(404, &json!({
//!     "type": "https://registry.example.com/problems/nothing-published",
//!     "detail": "nothing is published for \"k3s-acme\"",
//! }));
//! assert!(refused.is("nothing-published"));
//! ```

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long one call may take.
const TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer taken (a page of 500 audit events, each with whole policies, fits).
const MAX_BYTES: usize = 16 * 1024 * 1024;

/// A refusal of the API: what its `application/problem+json` body says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The HTTP status.
    pub status: u16,
    /// The last segment of the problem's `type` (`nothing-published`); empty when the answer
    /// was no problem document (a proxy's page).
    pub slug: String,
    /// What the problem says of this call (its `detail`), with each validation error
    /// (`: /pointer: message`) after it.
    pub detail: String,
}

impl Problem {
    /// The problem of an answer with `status` and JSON `body` (`Null` when it was none).
    pub fn from_answer(status: u16, body: &Value) -> Self {
        let slug = (body.get("type").and_then(Value::as_str))
            .and_then(|t| t.rsplit('/').next())
            .unwrap_or_default()
            .to_owned();
        let detail = match problem_text(body) {
            text if text.is_empty() => "no detail".to_owned(),
            text => text,
        };
        Self {
            status,
            slug,
            detail,
        }
    }

    /// Whether it is the problem `slug` (docs/api.md, "Errors").
    pub fn is(&self, slug: &str) -> bool {
        self.slug == slug
    }
}

/// What a problem document says: its `detail`, then each validation error (`/pointer:
/// message`, after a colon, `; ` between them) the detail does not already tell (a detail that
/// names the one problem says `…: /title: title is required`); empty when it says nothing. The
/// detail's pointer to the `errors` array (", see errors") is left out: they follow it.
///
/// ```
/// use registry_client::problem_text;
/// use serde_json::json;
/// let one = json!({"detail": "/jwks/keys/0: kid reused",
///     "errors": [{"pointer": "/jwks/keys/0", "message": "kid reused"}]});
/// assert_eq!(problem_text(&one), "/jwks/keys/0: kid reused");
/// let two = json!({"detail": "invalid (2 problems, see errors)",
///     "errors": [{"pointer": "/a", "message": "x"}, {"pointer": "/b", "message": "y"}]});
/// assert_eq!(problem_text(&two), "invalid (2 problems): /a: x; /b: y");
/// ```
pub fn problem_text(body: &Value) -> String {
    let detail = body
        .get("detail")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let untold: Vec<String> = (body.get("errors").and_then(Value::as_array))
        .into_iter()
        .flatten()
        .map(|error| {
            let pointer = error["pointer"].as_str().unwrap_or("");
            let message = error["message"].as_str().unwrap_or("");
            match pointer {
                "" => message.to_owned(),
                _ => format!("{pointer}: {message}"),
            }
        })
        .filter(|told| !detail.contains(told.as_str()))
        .collect();
    if untold.is_empty() {
        return detail.to_owned();
    }
    let detail = detail.replace(", see errors)", ")");
    match detail.as_str() {
        "" => untold.join("; "),
        _ => format!("{detail}: {}", untold.join("; ")),
    }
}

/// The most a command reads of one local file: a token, a policy, a document to upload. What
/// the API takes is far smaller; without a bound, `/dev/zero` or a FIFO that never ends would
/// take all memory.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// Why a local file could not be read as text: one sentence each, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// It could not be opened or read.
    #[error("cannot read {}: {reason}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why, as the system says.
        reason: String,
    },
    /// It holds more than [`MAX_FILE_BYTES`]; reading stopped there.
    #[error("{} is larger than 1 MiB, the most a command reads of a file", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// It is not UTF-8.
    #[error("{} is not UTF-8 text", path.display())]
    NotText {
        /// The file.
        path: PathBuf,
    },
}

/// The text of the file `path`, at most [`MAX_FILE_BYTES`]: one byte more is read, never the
/// rest, so that a file that does not end (a device, a FIFO) fails as soon as it is too large.
///
/// ```
/// let error = registry_client::read_text_file("/dev/zero".as_ref()).unwrap_err();
/// assert!(matches!(error, registry_client::FileError::TooLarge { .. }));
/// ```
pub fn read_text_file(path: &Path) -> Result<String, FileError> {
    use std::io::Read;
    let unreadable = |e: std::io::Error| FileError::Unreadable {
        path: path.to_owned(),
        reason: e.to_string(),
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(unreadable)?
        .take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(FileError::TooLarge {
            path: path.to_owned(),
        });
    }
    String::from_utf8(bytes).map_err(|_| FileError::NotText {
        path: path.to_owned(),
    })
}

/// What went wrong calling the registry: one sentence each.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The registry did not answer.
    #[error("cannot reach the registry at {url}: {reason}")]
    Unreachable {
        /// The URL.
        url: String,
        /// Why, as the HTTP client says.
        reason: String,
    },
    /// The registry refused the call.
    #[error("the registry answered {} to {method} {url}: {}", problem.status, problem.detail)]
    Refused {
        /// The method.
        method: &'static str,
        /// The URL.
        url: String,
        /// What it said.
        problem: Problem,
    },
    /// The identity token file could not be read, or holds no token.
    #[error("the identity token file {path}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// No way to authenticate was given.
    #[error("no credentials for the registry: set REGISTRY_TOKEN or --identity-token-file")]
    NoCredentials,
    /// A success whose body is not JSON: what answered is not the registry's API.
    #[error("the answer to {method} {url} is not JSON: is REGISTRY_API_URL the registry's API?")]
    NotJson {
        /// The method.
        method: &'static str,
        /// The URL.
        url: String,
    },
    /// The registry accepted the call but its answer is not what the call answers.
    #[error("the registry's answer to {method} {url} is not {expected}")]
    Unexpected {
        /// The method.
        method: &'static str,
        /// The URL.
        url: String,
        /// What the answer should have been (`{header, signature, kid}`).
        expected: &'static str,
    },
}

/// A signature the registry made with one of a service's managed keys (`POST
/// /services/{s}/sign`): the token is `header.claims.signature`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// The token's first segment, base64url: the JSON header `{"alg", "kid", "typ": "JWT"}`.
    pub header: String,
    /// The token's third segment, base64url: the signature of `header.claims`.
    pub signature: String,
    /// The key that signed, as the header names it.
    pub kid: String,
}

impl Signature {
    /// The signature of a 200 answer's body; `None` when a member is missing or not a string.
    fn from_answer(body: &Value) -> Option<Self> {
        let member = |name: &str| body.get(name).and_then(Value::as_str).map(str::to_owned);
        Some(Self {
            header: member("header")?,
            signature: member("signature")?,
            kid: member("kid")?,
        })
    }
}

/// A path segment of the API made of the user's text: what is not unreserved (RFC 3986) is
/// percent-encoded.
///
/// ```
/// assert_eq!(registry_client::path_segment("a b/c"), "a%20b%2Fc");
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
/// use registry_client::config_path;
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

/// Whether `token` is visible ASCII only, as every token is and as an HTTP header carries:
/// one with a space, a control character or anything else was copied wrong.
///
/// ```
/// assert!(registry_client::is_token_text("rgst_ab12_cd34"));
/// assert!(!registry_client::is_token_text("rgst_ab12\ncd34"));
/// ```
pub fn is_token_text(token: &str) -> bool {
    token.bytes().all(|b| b.is_ascii_graphic())
}

/// How a client authenticates to the registry.
#[derive(Debug, Clone)]
pub enum Credentials {
    /// A static token (`REGISTRY_TOKEN`).
    Token(String),
    /// An identity token in a file, read afresh before every call: a projected service-account
    /// token rotates on disk. `account` is the id of the `oidc` account to call as, sent as
    /// `X-Service-Account`: a call naming no service needs it when accounts of several customers
    /// trust the token's issuer, or several accounts accept the token.
    IdentityTokenFile {
        /// The file.
        file: PathBuf,
        /// The account's id, when one is named.
        account: Option<String>,
    },
}

impl Credentials {
    /// What the command line's flags give: an identity token file (with the account it calls
    /// as, if named) first, else a static token that is not empty; `None` without either.
    pub fn from_flags(
        token: Option<&str>,
        identity_token_file: Option<&Path>,
        account: Option<&str>,
    ) -> Option<Self> {
        match (token, identity_token_file) {
            (_, Some(file)) => Some(Credentials::IdentityTokenFile {
                file: file.to_owned(),
                // An empty value (a variable set to nothing) names no account.
                account: account.filter(|a| !a.trim().is_empty()).map(str::to_owned),
            }),
            (Some(token), None) if !token.is_empty() => Some(Credentials::Token(token.to_owned())),
            _ => None,
        }
    }
}

/// A chain of errors as one line (`outer: cause: cause`): what the API's callers log when the
/// registry cannot be reached.
///
/// ```
/// let io = std::io::Error::new(std::io::ErrorKind::Other, "refused");
/// assert_eq!(registry_client::error_chain(&io), "refused");
/// ```
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The registry's API at one base URL, with one credential.
#[derive(Debug, Clone)]
pub struct RegistryApi {
    base: String,
    credentials: Credentials,
    client: reqwest::Client,
}

impl RegistryApi {
    /// A client of the registry at `base` (`https://registry.example.com`).
    pub fn new(base: &str, credentials: Credentials) -> Result<Self, ClientError> {
        let client = reqwest::Client::builder()
            .user_agent(concat!("registry/", env!("CARGO_PKG_VERSION")))
            .timeout(TIMEOUT)
            .connect_timeout(Duration::from_secs(5))
            .redirect(reqwest::redirect::Policy::limited(3))
            .build()
            .map_err(|e| ClientError::Unreachable {
                url: base.to_owned(),
                reason: error_chain(&e),
            })?;
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            credentials,
            client,
        })
    }

    fn bearer(&self) -> Result<String, ClientError> {
        match &self.credentials {
            Credentials::Token(token) => Ok(token.clone()),
            Credentials::IdentityTokenFile { file: path, .. } => {
                let read = read_text_file(path).map(|token| token.trim().to_owned());
                let reason = match read {
                    Ok(token) if token.is_empty() => "it is empty".to_owned(),
                    // What no header can carry, and no token holds: the wrong file.
                    Ok(token) if !is_token_text(&token) => {
                        "it holds a space, a control character or a non-ASCII character, \
                         which no token has"
                            .to_owned()
                    }
                    Ok(token) => return Ok(token),
                    Err(FileError::Unreadable { reason, .. }) => reason,
                    Err(FileError::TooLarge { .. }) => "it is larger than 1 MiB".to_owned(),
                    Err(FileError::NotText { .. }) => "it is not UTF-8 text".to_owned(),
                };
                Err(ClientError::File {
                    path: path.to_owned(),
                    reason,
                })
            }
        }
    }

    /// One call of the API (`GET`, `PUT`, `POST`, `PATCH` or `DELETE` on `path`, with a JSON
    /// body): the status and the body as JSON (`Null` when it has none, or for a failure, when
    /// it is not JSON). An error when the registry does not answer, or when a success's body is
    /// not JSON (a page, a proxy's answer: not the registry's API).
    pub async fn call(
        &self,
        method: &'static str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(u16, Value), ClientError> {
        let body = body.map(|body| ("application/json", body.to_string()));
        self.send(method, path, body).await
    }

    /// One call with a body of another type (`content type`, text): as [`RegistryApi::call`].
    pub async fn send(
        &self,
        method: &'static str,
        path: &str,
        body: Option<(&'static str, String)>,
    ) -> Result<(u16, Value), ClientError> {
        let url = format!("{}{path}", self.base);
        let mut request = match method {
            "PUT" => self.client.put(&url),
            "POST" => self.client.post(&url),
            "PATCH" => self.client.patch(&url),
            "DELETE" => self.client.delete(&url),
            _ => self.client.get(&url),
        }
        .bearer_auth(self.bearer()?);
        if let Credentials::IdentityTokenFile {
            account: Some(account),
            ..
        } = &self.credentials
        {
            request = request.header("x-service-account", account);
        }
        if let Some((content_type, body)) = body {
            request = request.header("content-type", content_type).body(body);
        }
        let unreachable = |e: reqwest::Error| ClientError::Unreachable {
            url: url.clone(),
            reason: error_chain(&e),
        };
        let response = request.send().await.map_err(unreachable)?;
        let status = response.status().as_u16();
        let bytes = response.bytes().await.map_err(unreachable)?;
        if bytes.len() > MAX_BYTES {
            return Err(ClientError::Unexpected {
                method,
                url,
                expected: "an answer of at most 16 MiB",
            });
        }
        match serde_json::from_slice(&bytes) {
            Ok(json) => Ok((status, json)),
            Err(_) if (200..300).contains(&status) && !bytes.is_empty() => {
                Err(ClientError::NotJson { method, url })
            }
            Err(_) => Ok((status, Value::Null)),
        }
    }

    fn refused(&self, method: &'static str, path: &str, status: u16, body: &Value) -> ClientError {
        ClientError::Refused {
            method,
            url: format!("{}{path}", self.base),
            problem: Problem::from_answer(status, body),
        }
    }

    /// What `service` publishes (`GET /services/{s}/config`), or what key source `source`
    /// uploaded last (`?source=`); `None` when nothing is (the problem `nothing-published`).
    pub async fn published(
        &self,
        service: &str,
        source: Option<&str>,
    ) -> Result<Option<Value>, ClientError> {
        let path = config_path(service, source);
        match self.call("GET", &path, None).await? {
            (200, body) => Ok(Some(body)),
            (status, body) => match self.refused("GET", &path, status, &body) {
                ClientError::Refused { problem, .. } if problem.is("nothing-published") => Ok(None),
                refused => Err(refused),
            },
        }
    }

    /// The keys among `kids` that `service` publishes and that are not safe to sign with yet
    /// (`GET …/keys/{kid}/readiness`), each as `{kid, reasons}`; keys not published are left out.
    pub async fn pending(&self, service: &str, kids: &[&str]) -> Result<Vec<Value>, ClientError> {
        let mut pending = Vec::new();
        for kid in kids {
            let path = format!(
                "/services/{}/keys/{}/readiness",
                path_segment(service),
                path_segment(kid)
            );
            match self.call("GET", &path, None).await? {
                (200, body) if body["safeToSign"] == false => {
                    // Each reason once: two verifiers waited for are one `verifier`.
                    let mut reasons: Vec<Value> = Vec::new();
                    for entry in body["pending"].as_array().into_iter().flatten() {
                        if !reasons.contains(&entry["reason"]) {
                            reasons.push(entry["reason"].clone());
                        }
                    }
                    pending.push(serde_json::json!({"kid": kid, "reasons": reasons}));
                }
                (200 | 404, _) => {}
                (status, body) => return Err(self.refused("GET", &path, status, &body)),
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
    ) -> Result<Vec<String>, ClientError> {
        let path = config_path(service, source);
        let body = serde_json::json!({"openidConfiguration": discovery, "jwks": jwks});
        match self.call("PUT", &path, Some(&body)).await? {
            (200, body) => Ok((body["warnings"].as_array().into_iter().flatten())
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()),
            (status, body) => Err(self.refused("PUT", &path, status, &body)),
        }
    }

    /// Has the registry sign `claims` (the token's payload, base64url without padding: exactly
    /// its second segment) with `service`'s current managed key (`POST /services/{s}/sign`,
    /// action `tokens:sign`). Any answer but a 200 is [`ClientError::Refused`]: `invalid-claims`,
    /// `no-key-ready` (no managed key is safe to sign with yet), a 429, a 5xx.
    pub async fn sign(&self, service: &str, claims: &str) -> Result<Signature, ClientError> {
        let path = format!("/services/{}/sign", path_segment(service));
        let body = serde_json::json!({"claims": claims});
        match self.call("POST", &path, Some(&body)).await? {
            (200, body) => Signature::from_answer(&body).ok_or_else(|| ClientError::Unexpected {
                method: "POST",
                url: format!("{}{path}", self.base),
                expected: "{header, signature, kid}",
            }),
            (status, body) => Err(self.refused("POST", &path, status, &body)),
        }
    }

    /// How `service` signs (`GET /services/{s}/signing`, action `config:read`): `{algorithm,
    /// rotationPeriodSeconds, maxTokenSeconds, leadSeconds, nextRotationAt, keys}`, each key
    /// `{kid, state, algorithm, createdAt, safeToSignAt, signingSince, lastSignedAt, withdrawAt,
    /// publicKey}` with `state` `next`, `current` or `retiring` and `publicKey` the DER
    /// SubjectPublicKeyInfo in base64 (standard alphabet, padded). A service that does not sign
    /// is a 404, [`ClientError::Refused`] like any answer but a 200.
    pub async fn signing(&self, service: &str) -> Result<Value, ClientError> {
        let path = format!("/services/{}/signing", path_segment(service));
        match self.call("GET", &path, None).await? {
            (200, body) => Ok(body),
            (status, body) => Err(self.refused("GET", &path, status, &body)),
        }
    }

    /// Every key `service` publishes or keeps, current ones first (`GET /services/{s}/keys`,
    /// action `config:read`): `{keys: [{kid, kty, alg, thumbprint, state, source, sources,
    /// firstPublishedAt, retiredAt, publishedUntil}]}`, `state` `current` or `retired`, `source`
    /// the key source that published it first (`managed` for the keys the registry makes). Any
    /// answer but a 200 is [`ClientError::Refused`].
    pub async fn keys(&self, service: &str) -> Result<Value, ClientError> {
        let path = format!("/services/{}/keys", path_segment(service));
        match self.call("GET", &path, None).await? {
            (200, body) => Ok(body),
            (status, body) => Err(self.refused("GET", &path, status, &body)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_problem_is_its_slug_and_its_detail_with_every_error() {
        let problem = Problem::from_answer(
            400,
            &json!({
                "type": "http://localhost:8080/problems/validation-failed",
                "detail": "the policy is invalid",
                "errors": [{"pointer": "/policy/rules/0", "message": "is empty"}],
            }),
        );
        assert!(problem.is("validation-failed"));
        assert!(!problem.is("not-found"));
        assert_eq!(
            problem.detail,
            "the policy is invalid: /policy/rules/0: is empty"
        );
        let page = Problem::from_answer(502, &Value::Null);
        assert_eq!(
            (page.slug.as_str(), page.detail.as_str()),
            ("", "no detail")
        );
    }

    #[test]
    fn a_signature_is_its_three_members_and_nothing_less() {
        let answer = json!({"header": "eyJh", "signature": "c2ln", "kid": "k1", "extra": 1});
        assert_eq!(
            Signature::from_answer(&answer),
            Some(Signature {
                header: "eyJh".into(),
                signature: "c2ln".into(),
                kid: "k1".into(),
            })
        );
        assert_eq!(
            Signature::from_answer(&json!({"header": "eyJh", "signature": "c2ln"})),
            None
        );
        assert_eq!(
            Signature::from_answer(&json!({"header": "eyJh", "signature": 1, "kid": "k1"})),
            None
        );
        assert_eq!(Signature::from_answer(&Value::Null), None);
    }

    #[test]
    fn credentials_prefer_the_identity_token_file_and_ignore_an_empty_token() {
        let file = Path::new("/var/run/token");
        assert!(matches!(
            Credentials::from_flags(Some("t"), Some(file), Some("a1")),
            Some(Credentials::IdentityTokenFile { account: Some(a), .. }) if a == "a1"
        ));
        assert!(matches!(
            Credentials::from_flags(None, Some(file), Some(" ")),
            Some(Credentials::IdentityTokenFile { account: None, .. })
        ));
        assert!(Credentials::from_flags(Some(""), None, None).is_none());
        assert!(matches!(
            Credentials::from_flags(Some("t"), None, None),
            Some(Credentials::Token(t)) if t == "t"
        ));
    }
}
