//! Before a cloud refuses (docs/api.md, "Preflight"): what AWS, GCP and Azure would refuse of a
//! hosted issuer's published documents, and of a token the owner's workload would present to them.
//!
//! Pure: the published documents, the hosted issuer, the token's parts, the outcome of the
//! signature check (done by an adapter, [`crate::ports::TokenSignatureCheck`]) and `now` are
//! parameters. Each cloud's rule is written once, in the [`Cloud`] methods; `docs/api.md`
//! cites each cloud's documentation for it.
//!
//! Codes are a list of their own, apart from the reason codes of explain: [`codes`].

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::Serialize;
use serde_json::{json, Map, Value};
use time::OffsetDateTime;

/// The codes of the findings.
pub mod codes {
    /// Nothing is published: every cloud fails to fetch the discovery document (error).
    pub const NOT_PUBLISHED: &str = "not-published";
    /// The hosted issuer is not an `https://` URL (error, every cloud).
    pub const ISSUER_NOT_HTTPS: &str = "issuer-not-https";
    /// The hosted issuer names a port (warning, AWS).
    pub const ISSUER_HAS_PORT: &str = "issuer-has-port";
    /// A published key the cloud ignores (warning).
    pub const KEY_UNSUPPORTED: &str = "key-unsupported";
    /// None of the published keys is one the cloud verifies with (error).
    pub const NO_USABLE_KEY: &str = "no-usable-key";
    /// The token names a published key that does not verify its signature (error).
    pub const SIGNATURE_INVALID: &str = "signature-invalid";
    /// No published key verifies the token (error).
    pub const KEY_UNKNOWN: &str = "key-unknown";
    /// The token's `iss` is not the hosted issuer (error).
    pub const ISSUER_MISMATCH: &str = "issuer-mismatch";
    /// The token's `alg` is one the cloud does not verify (error).
    pub const ALGORITHM_UNSUPPORTED: &str = "algorithm-unsupported";
    /// The token's header has no `kid` (error, GCP).
    pub const KID_MISSING: &str = "kid-missing";
    /// The token's `aud` is not what the cloud expects by default (warning for AWS and Azure).
    pub const AUDIENCE_MISMATCH: &str = "audience-mismatch";
    /// The token has expired, or has no `exp` (error).
    pub const TOKEN_EXPIRED: &str = "token-expired";
    /// The token lives longer than the cloud's documentation allows (error).
    pub const TOKEN_LIFETIME_TOO_LONG: &str = "token-lifetime-too-long";
}

/// The audience AWS STS expects by default (the client ID of an IAM OIDC provider).
pub const AWS_AUDIENCE: &str = "sts.amazonaws.com";
/// The audience Microsoft Entra ID expects of a federated identity credential by default.
pub const AZURE_AUDIENCE: &str = "api://AzureADTokenExchange";
/// GCP's security token service refuses a token whose `exp` is 48 hours or more after `iat`.
pub const GCP_MAX_LIFETIME_SECS: i64 = 48 * 3600;

/// A cloud whose workload-identity federation trusts the hosted issuer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cloud {
    /// AWS IAM OIDC identity providers and `AssumeRoleWithWebIdentity`.
    Aws,
    /// Google Cloud workload identity federation (its security token service).
    Gcp,
    /// Microsoft Entra ID workload identity federation (federated identity credentials).
    Azure,
}

impl Cloud {
    /// Every cloud, in the order of the answer.
    pub const ALL: [Cloud; 3] = [Cloud::Aws, Cloud::Gcp, Cloud::Azure];

    /// Its key in the answer (`aws`, `gcp`, `azure`).
    pub fn key(self) -> &'static str {
        match self {
            Cloud::Aws => "aws",
            Cloud::Gcp => "gcp",
            Cloud::Azure => "azure",
        }
    }

    /// Its name in a sentence.
    pub fn name(self) -> &'static str {
        match self {
            Cloud::Aws => "AWS",
            Cloud::Gcp => "GCP",
            Cloud::Azure => "Azure",
        }
    }

    /// The signature algorithms the cloud verifies, in the words of a message.
    fn algorithms(self) -> &'static str {
        match self {
            Cloud::Aws => "RSA and EC algorithms (RS*, PS*, ES*)",
            Cloud::Gcp => "RS256 and ES256",
            Cloud::Azure => "RS256",
        }
    }

    /// Whether the cloud verifies tokens signed with `alg`.
    pub fn verifies_alg(self, alg: &str) -> bool {
        match self {
            Cloud::Aws => matches!(
                alg,
                "RS256"
                    | "RS384"
                    | "RS512"
                    | "PS256"
                    | "PS384"
                    | "PS512"
                    | "ES256"
                    | "ES384"
                    | "ES512"
            ),
            Cloud::Gcp => matches!(alg, "RS256" | "ES256"),
            Cloud::Azure => alg == "RS256",
        }
    }

    /// Why the cloud ignores the published key `jwk`; `None` when it verifies with it. AWS
    /// reads RSA and EC keys; GCP RSA keys for RS256 and P-256 keys for ES256; Azure RSA keys
    /// for RS256.
    pub fn ignores_key(self, jwk: &Map<String, Value>) -> Option<String> {
        let member = |name: &str| jwk.get(name).and_then(Value::as_str);
        let (kty, crv, alg) = (member("kty"), member("crv"), member("alg"));
        let alg_is = |wanted: &str| alg.is_none_or(|a| a == wanted);
        let usable = match (self, kty) {
            (Cloud::Aws, Some("RSA" | "EC")) => true,
            (Cloud::Gcp, Some("RSA")) | (Cloud::Azure, Some("RSA")) => alg_is("RS256"),
            (Cloud::Gcp, Some("EC")) => crv == Some("P-256") && alg_is("ES256"),
            _ => false,
        };
        if usable {
            return None;
        }
        let what = match (kty, crv, alg) {
            (Some(kty), Some(crv), _) if kty != "RSA" => format!("{kty} key on {crv}"),
            (Some(kty), _, Some(alg)) => format!("{kty} key for {alg}"),
            (Some(kty), _, _) => format!("{kty} key"),
            (None, _, _) => "key without kty".to_owned(),
        };
        Some(format!(
            "{} verifies {} only and ignores this {what}",
            self.name(),
            self.algorithms()
        ))
    }
}

/// How bad a finding is: an error means the cloud refuses; a warning that it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The cloud refuses.
    Error,
    /// The cloud may refuse, or ignores something.
    Warning,
}

/// One thing a cloud would refuse or ignore, with what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// One of [`codes`].
    pub code: &'static str,
    /// Error or warning.
    pub severity: Severity,
    /// What is wrong and what to do, in a sentence or two.
    pub message: String,
    /// Where, in `{openidConfiguration, jwks}` as published (`/jwks/keys/3`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pointer: Option<String>,
}

impl Finding {
    fn error(code: &'static str, message: String, pointer: Option<String>) -> Self {
        Finding {
            code,
            severity: Severity::Error,
            message,
            pointer,
        }
    }

    fn warning(code: &'static str, message: String, pointer: Option<String>) -> Self {
        Finding {
            code,
            severity: Severity::Warning,
            message,
            pointer,
        }
    }
}

/// What one cloud would do.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CloudReport {
    /// True when there is no error.
    pub ready: bool,
    /// Every finding, errors and warnings.
    pub findings: Vec<Finding>,
}

impl CloudReport {
    fn of(findings: Vec<Finding>) -> Self {
        CloudReport {
            ready: findings.iter().all(|f| f.severity != Severity::Error),
            findings,
        }
    }

    /// Whether the report holds a finding of `code`.
    pub fn has(&self, code: &str) -> bool {
        self.findings.iter().any(|f| f.code == code)
    }
}

/// The documents a hosted issuer serves: its discovery document and its public key set (the
/// uploaded keys, then the retired keys still published), as verifiers fetch them.
#[derive(Debug, Clone, Copy)]
pub struct Published<'a> {
    /// The discovery document.
    pub openid_configuration: &'a Value,
    /// The public key set (`{"keys": [...]}`).
    pub jwks: &'a Value,
}

impl Published<'_> {
    /// The keys, each with its index in the set.
    fn keys(&self) -> impl Iterator<Item = (usize, &Map<String, Value>)> {
        self.jwks
            .get("keys")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
            .filter_map(|(i, key)| Some((i, key.as_object()?)))
    }
}

/// A compact JWS, read without verifying it: its header and its claims.
#[derive(Debug, Clone, PartialEq)]
pub struct Jws {
    /// The header.
    pub header: Map<String, Value>,
    /// The payload's claims.
    pub claims: Map<String, Value>,
}

impl Jws {
    /// Reads `token` as a compact JWS (three base64url parts, the first two JSON objects, the
    /// last a non-empty signature); else a sentence saying why it is not one.
    pub fn parse(token: &str) -> Result<Jws, String> {
        let parts: Vec<&str> = token.trim().split('.').collect();
        let [header, payload, signature] = parts[..] else {
            return Err(
                "the token is not a compact JWS: it must be three base64url parts separated \
                 by dots (header.payload.signature)"
                    .into(),
            );
        };
        let object = |part: &str, what: &str| {
            crate::claims::jws_part(part).map_err(|why| format!("the token's {what} {why}"))
        };
        let header = object(header, "header")?;
        let claims = object(payload, "payload")?;
        match URL_SAFE_NO_PAD.decode(signature) {
            Ok(bytes) if !bytes.is_empty() => {}
            _ => return Err("the token's signature is missing or not base64url".into()),
        }
        if header.get("alg").and_then(Value::as_str).is_none() {
            return Err("the token's header names no alg".into());
        }
        Ok(Jws { header, claims })
    }

    /// The header's `alg`.
    pub fn alg(&self) -> &str {
        self.header.get("alg").and_then(Value::as_str).unwrap_or("")
    }

    /// The header's `kid`, if it is a string.
    pub fn kid(&self) -> Option<&str> {
        self.header.get("kid").and_then(Value::as_str)
    }

    /// What the answer shows of the token, and nothing else:
    /// `{header: {alg, kid}, claims: {iss, sub, aud, exp, iat, nbf}}`.
    pub fn summary(&self) -> Value {
        let claim = |name: &str| self.claims.get(name).cloned().unwrap_or(Value::Null);
        let header = |name: &str| self.header.get(name).cloned().unwrap_or(Value::Null);
        json!({
            "header": {"alg": header("alg"), "kid": header("kid")},
            "claims": {"iss": claim("iss"), "sub": claim("sub"), "aud": claim("aud"),
                "exp": claim("exp"), "iat": claim("iat"), "nbf": claim("nbf")},
        })
    }

    /// A time claim as the registry reads it (`claims::seconds`): `None` when it is missing or
    /// no number. A huge one is cut to `i64`'s bounds, so what is done with it saturates.
    fn number(&self, name: &'static str) -> Option<i64> {
        crate::claims::seconds(&self.claims, name).ok().flatten()
    }

    fn audiences(&self) -> Vec<&str> {
        match self.claims.get("aud") {
            Some(Value::String(aud)) => vec![aud.as_str()],
            Some(Value::Array(list)) => list.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        }
    }
}

/// What the published keys say of a token's signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signature {
    /// The published key at this index of the key set verifies it.
    Verified {
        /// Its index in the public key set.
        key: usize,
    },
    /// The token's `kid` names the published key at this index, which does not verify it.
    Invalid {
        /// Its index in the public key set.
        key: usize,
    },
    /// No published key verifies it: its `kid` is not published, or it has none and no key
    /// verifies it.
    Unknown,
}

/// Whether a key of `jwk`'s type (and curve) can sign with `alg` at all.
fn fits(alg: &str, jwk: &Map<String, Value>) -> bool {
    let member = |name: &str| jwk.get(name).and_then(Value::as_str);
    match (member("kty"), member("crv")) {
        (Some("RSA"), _) => alg.starts_with("RS") || alg.starts_with("PS"),
        (Some("EC"), Some("P-256")) => alg == "ES256",
        (Some("EC"), Some("P-384")) => alg == "ES384",
        (Some("EC"), Some("P-521")) => alg == "ES512",
        (Some("OKP"), _) => alg == "EdDSA",
        _ => false,
    }
}

/// The signature work one check of a token may spend, in units of one 2048-bit RSA
/// verification ([`verification_cost`]): a few milliseconds of CPU at most, however many (and
/// however large) keys a set publishes. A token without `kid` that no key within it verifies
/// is reported as signed by no published key.
pub const SIGNATURE_BUDGET: u32 = 16;

/// What verifying with `jwk` costs, in units of one 2048-bit RSA verification: an RSA
/// verification grows with the square of the modulus; curves cost about one unit.
pub fn verification_cost(jwk: &Map<String, Value>) -> u32 {
    let modulus_bytes = jwk
        .get("n")
        .and_then(Value::as_str)
        .map_or(0, |n| n.len() * 3 / 4);
    let blocks = u32::try_from(modulus_bytes.div_ceil(256)).unwrap_or(u32::MAX);
    blocks.saturating_mul(blocks).max(1)
}

/// Checks `token`'s signature against the published keys (current and retired): the key of
/// its `kid`, or, when it has none, the keys that can sign with its `alg` (a key's own `alg`,
/// when it names one, must be the token's), within [`SIGNATURE_BUDGET`]: the first candidate
/// is always tried, the others while the budget lasts. `verifies` is the adapter's check of
/// one key.
pub fn check_signature(
    published: &Published<'_>,
    token: &Jws,
    verifies: impl Fn(&Map<String, Value>) -> bool,
) -> Signature {
    let (kid, alg) = (token.kid(), token.alg());
    let mut named = None;
    let mut spent = 0u32;
    for (i, jwk) in published.keys() {
        let key_kid = jwk.get("kid").and_then(Value::as_str);
        if kid.is_some() && key_kid != kid {
            continue;
        }
        named = named.or(kid.map(|_| i));
        let key_alg = jwk.get("alg").and_then(Value::as_str);
        if !fits(alg, jwk) || key_alg.is_some_and(|key_alg| key_alg != alg) {
            continue;
        }
        let cost = verification_cost(jwk);
        if spent > 0 && spent.saturating_add(cost) > SIGNATURE_BUDGET {
            break;
        }
        spent = spent.saturating_add(cost);
        if verifies(jwk) {
            return Signature::Verified { key: i };
        }
    }
    match named {
        Some(key) => Signature::Invalid { key },
        None => Signature::Unknown,
    }
}

/// What the clouds would do: one report per cloud, in [`Cloud::ALL`] order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preflight {
    /// The hosted issuer.
    pub issuer: String,
    /// Whether anything is published.
    pub published: bool,
    /// One report per cloud.
    pub clouds: [(Cloud, CloudReport); 3],
}

impl Preflight {
    /// The report of `cloud`.
    pub fn cloud(&self, cloud: Cloud) -> &CloudReport {
        &self
            .clouds
            .iter()
            .find(|(c, _)| *c == cloud)
            .expect("every cloud has a report")
            .1
    }

    /// The answer: `{issuer, published, clouds: {aws, gcp, azure}}`.
    pub fn to_json(&self) -> Value {
        let clouds: Map<String, Value> = self
            .clouds
            .iter()
            .map(|(cloud, report)| (cloud.key().to_owned(), json!(report)))
            .collect();
        json!({"issuer": self.issuer, "published": self.published, "clouds": clouds})
    }
}

/// What each cloud would refuse or ignore of the documents `issuer` publishes (`None`: nothing
/// is published): `GET /services/{s}/preflight`.
///
/// ```
/// use registry_domain::preflight::{check_documents, codes, Cloud, Published};
/// use serde_json::json;
///
/// let discovery = json!({"issuer": "https://api-acme.example.com"});
/// let jwks = json!({"keys": [{"kty": "EC", "crv": "P-384", "kid": "a", "x": "…", "y": "…"}]});
/// let published = Published { openid_configuration: &discovery, jwks: &jwks };
/// let report = check_documents("https://api-acme.example.com", Some(&published));
/// // AWS verifies with a P-384 key; GCP only with P-256, Azure with no EC key at all.
/// assert!(report.cloud(Cloud::Aws).ready);
/// assert!(report.cloud(Cloud::Gcp).has(codes::KEY_UNSUPPORTED));
/// assert!(report.cloud(Cloud::Azure).has(codes::NO_USABLE_KEY));
/// assert!(!report.cloud(Cloud::Azure).ready);
/// ```
pub fn check_documents(issuer: &str, published: Option<&Published<'_>>) -> Preflight {
    check(issuer, published, |cloud| {
        document_findings(cloud, issuer, published)
    })
}

/// [`check_documents`] and what each cloud would refuse of `token` (`POST
/// /services/{s}/preflight`), whose signature the published keys judged `signature`, at `now`.
pub fn check_token(
    issuer: &str,
    published: Option<&Published<'_>>,
    token: &Jws,
    signature: Signature,
    now: OffsetDateTime,
) -> Preflight {
    check(issuer, published, |cloud| {
        let mut findings = document_findings(cloud, issuer, published);
        findings.extend(token_findings(
            cloud, issuer, published, token, signature, now,
        ));
        findings
    })
}

fn check(
    issuer: &str,
    published: Option<&Published<'_>>,
    findings: impl Fn(Cloud) -> Vec<Finding>,
) -> Preflight {
    Preflight {
        issuer: issuer.to_owned(),
        published: published.is_some(),
        clouds: Cloud::ALL.map(|cloud| (cloud, CloudReport::of(findings(cloud)))),
    }
}

const ISSUER_POINTER: &str = "/openidConfiguration/issuer";

/// The port of an `http(s)://host:port/…` URL, if it names one.
fn port_of(url: &str) -> Option<&str> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    let host_and_port = authority.rsplit('@').next().unwrap_or(authority);
    let after_host = match host_and_port.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map_or("", |(_, after)| after),
        None => host_and_port,
    };
    after_host
        .rsplit_once(':')
        .map(|(_, port)| port)
        .filter(|port| !port.is_empty())
}

fn document_findings(
    cloud: Cloud,
    issuer: &str,
    published: Option<&Published<'_>>,
) -> Vec<Finding> {
    let mut findings = Vec::new();
    let pointer = || published.map(|_| ISSUER_POINTER.to_owned());
    if !crate::issuer::has_scheme(issuer, "https") {
        findings.push(Finding::error(
            codes::ISSUER_NOT_HTTPS,
            format!(
                "the issuer {issuer:?} is not an https:// URL: {} only trusts issuers it fetches \
                 over HTTPS. The operator must set REGISTRY_ISSUER_URL_TEMPLATE to an https:// \
                 URL",
                cloud.name()
            ),
            pointer(),
        ));
    }
    if cloud == Cloud::Aws {
        if let Some(port) = port_of(issuer) {
            findings.push(Finding::warning(
                codes::ISSUER_HAS_PORT,
                format!(
                    "the issuer names port {port}: AWS expects an issuer URL without a port \
                     number. Serve the issuer on the default HTTPS port"
                ),
                pointer(),
            ));
        }
    }
    let Some(published) = published else {
        findings.push(Finding::error(
            codes::NOT_PUBLISHED,
            format!(
                "nothing is published: {} cannot fetch the discovery document. Upload the \
                 cluster's documents (PUT /services/{{s}}/config)",
                cloud.name()
            ),
            None,
        ));
        return findings;
    };
    let mut usable = 0;
    for (i, jwk) in published.keys() {
        match cloud.ignores_key(jwk) {
            None => usable += 1,
            Some(why) => findings.push(Finding::warning(
                codes::KEY_UNSUPPORTED,
                format!("{why}: tokens signed with it are refused there"),
                Some(format!("/jwks/keys/{i}")),
            )),
        }
    }
    if usable == 0 {
        findings.push(Finding::error(
            codes::NO_USABLE_KEY,
            format!(
                "none of the published keys is one {} verifies with ({}): sign the workload's \
                 tokens with such a key and publish it",
                cloud.name(),
                cloud.algorithms()
            ),
            Some("/jwks/keys".to_owned()),
        ));
    }
    findings
}

/// How the token's `iss` differs from the issuer, in words.
fn issuer_difference(iss: &str, issuer: &str) -> String {
    let (bare_iss, bare_issuer) = (iss.trim_end_matches('/'), issuer.trim_end_matches('/'));
    let slash = iss.len() - bare_iss.len() != issuer.len() - bare_issuer.len();
    if bare_iss.eq_ignore_ascii_case(bare_issuer) {
        let which = match (slash, bare_iss == bare_issuer) {
            (true, true) => "only by a trailing slash",
            (true, false) => "by a trailing slash and by case",
            (false, _) => "only by case",
        };
        return format!(
            "the token's iss {iss:?} differs from the issuer {issuer:?} {which}: the clouds \
             compare issuers exactly. Set the cluster's --service-account-issuer to {issuer:?}"
        );
    }
    format!(
        "the token's iss {iss:?} is not the issuer {issuer:?}: the clouds look its keys up by \
         iss. Set the cluster's --service-account-issuer to {issuer:?}"
    )
}

fn token_findings(
    cloud: Cloud,
    issuer: &str,
    published: Option<&Published<'_>>,
    token: &Jws,
    signature: Signature,
    now: OffsetDateTime,
) -> Vec<Finding> {
    let mut findings = Vec::new();
    let name = cloud.name();
    if published.is_some() {
        match signature {
            Signature::Verified { .. } => {}
            Signature::Invalid { key } => findings.push(Finding::error(
                codes::SIGNATURE_INVALID,
                format!(
                    "the published key {:?} does not verify the token's signature: the key was \
                     replaced under the same kid, or the token was altered. Upload the key the \
                     cluster signs with, under a new kid",
                    token.kid().unwrap_or_default()
                ),
                Some(format!("/jwks/keys/{key}")),
            )),
            Signature::Unknown => findings.push(Finding::error(
                codes::KEY_UNKNOWN,
                match token.kid() {
                    Some(kid) => format!(
                        "no published key has kid {kid:?}, current or retired: the cluster \
                         signs with a key that was never uploaded (or was withdrawn). Upload \
                         its current key set (PUT /services/{{s}}/config or registry sync)"
                    ),
                    None => "no published key verifies the token: the cluster signs with a key \
                             that was never uploaded (or was withdrawn). Upload its current \
                             key set (PUT /services/{s}/config or registry sync)"
                        .to_owned(),
                },
                Some("/jwks/keys".to_owned()),
            )),
        }
    }
    match token.claims.get("iss").and_then(Value::as_str) {
        Some(iss) if iss == issuer => {}
        Some(iss) => findings.push(Finding::error(
            codes::ISSUER_MISMATCH,
            issuer_difference(iss, issuer),
            Some(ISSUER_POINTER.to_owned()),
        )),
        None => findings.push(Finding::error(
            codes::ISSUER_MISMATCH,
            format!(
                "the token has no iss: {name} needs it to be the issuer {issuer:?}. Set the \
                 cluster's --service-account-issuer to {issuer:?}"
            ),
            Some(ISSUER_POINTER.to_owned()),
        )),
    }
    let alg = token.alg();
    if !cloud.verifies_alg(alg) {
        findings.push(Finding::error(
            codes::ALGORITHM_UNSUPPORTED,
            format!(
                "the token is signed with {alg:?}; {name} verifies {} only. Sign the \
                 workload's tokens with such an algorithm and key",
                cloud.algorithms()
            ),
            None,
        ));
    }
    if cloud == Cloud::Gcp && token.kid().is_none() {
        findings.push(Finding::error(
            codes::KID_MISSING,
            "the token's header has no kid: GCP requires one, naming the published key that \
             signed it. Have the issuer write kid in the header"
                .to_owned(),
            None,
        ));
    }
    if let Some(finding) = audience_finding(cloud, &token.audiences()) {
        findings.push(finding);
    }
    match token.number("exp") {
        Some(exp) if now.unix_timestamp() < exp => {}
        Some(exp) => findings.push(Finding::error(
            codes::TOKEN_EXPIRED,
            format!(
                "the token expired {} seconds ago (exp {exp}): present a fresh one",
                now.unix_timestamp().saturating_sub(exp)
            ),
            None,
        )),
        None => findings.push(Finding::error(
            codes::TOKEN_EXPIRED,
            "the token has no numeric exp: the clouds refuse tokens that never expire".to_owned(),
            None,
        )),
    }
    if cloud == Cloud::Gcp {
        if let (Some(iat), Some(exp)) = (token.number("iat"), token.number("exp")) {
            let lifetime = exp.saturating_sub(iat);
            if lifetime >= GCP_MAX_LIFETIME_SECS {
                findings.push(Finding::error(
                    codes::TOKEN_LIFETIME_TOO_LONG,
                    format!(
                        "the token lives {} hours from iat to exp: GCP requires exp to be less \
                         than 48 hours after iat. Request tokens with a shorter \
                         expirationSeconds",
                        lifetime / 3600
                    ),
                    None,
                ));
            }
        }
    }
    findings
}

fn audience_finding(cloud: Cloud, audiences: &[&str]) -> Option<Finding> {
    let shown = format!("{audiences:?}");
    match cloud {
        Cloud::Aws if !audiences.contains(&AWS_AUDIENCE) => Some(Finding::warning(
            codes::AUDIENCE_MISMATCH,
            format!(
                "the token's aud {shown} lacks {AWS_AUDIENCE:?}: AWS accepts only the audiences \
                 (client IDs) registered on its IAM OIDC provider. Register one of them there, \
                 or request the token with audience {AWS_AUDIENCE:?}"
            ),
            None,
        )),
        Cloud::Azure if !audiences.contains(&AZURE_AUDIENCE) => Some(Finding::warning(
            codes::AUDIENCE_MISMATCH,
            format!(
                "the token's aud {shown} lacks {AZURE_AUDIENCE:?}, the audience of a federated \
                 identity credential unless it was changed: request the token with audience \
                 {AZURE_AUDIENCE:?}"
            ),
            None,
        )),
        Cloud::Gcp if !audiences.iter().any(|aud| names_gcp_provider(aud)) => Some(Finding::error(
            codes::AUDIENCE_MISMATCH,
            format!(
                "the token's aud {shown} names no workload identity provider: GCP expects \
                     //iam.googleapis.com/projects/…/locations/global/workloadIdentityPools/…/\
                     providers/… (or the same with https:), unless the provider lists other \
                     allowed audiences"
            ),
            None,
        )),
        _ => None,
    }
}

/// Whether `aud` names a workload identity pool provider as GCP's default audience does:
/// `//iam.googleapis.com/projects/{p}/locations/{l}/workloadIdentityPools/{pool}/providers/{id}`
/// (or the same with `https:`), every name present.
fn names_gcp_provider(aud: &str) -> bool {
    let Some(path) = (aud.strip_prefix("//iam.googleapis.com/"))
        .or_else(|| aud.strip_prefix("https://iam.googleapis.com/"))
    else {
        return false;
    };
    let parts: Vec<&str> = path.split('/').collect();
    let named = [
        "projects",
        "locations",
        "workloadIdentityPools",
        "providers",
    ];
    parts.len() == 8
        && (parts.chunks(2))
            .zip(named)
            .all(|(pair, name)| pair[0] == name && !pair[1].is_empty())
}

#[cfg(test)]
mod tests;
