//! Publishing a service's discovery document and key set.
//!
//! An upload is `{"openidConfiguration": {...}, "jwks": {"keys": [...]}}`. The discovery
//! document's `issuer` and `jwks_uri` are replaced by the hosted ones (added when missing; every
//! other member is kept as uploaded, in order), and it must then hold the five members that OIDC
//! Discovery requires. The key set must hold 1–100 public signing keys with unique `kid`s; any
//! private or symmetric material is refused, never stripped, because a key that was uploaded in
//! the clear must be rotated.

use crate::violation::escape_token;
use crate::{Violation, Violations};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::{Map, Value};
use std::collections::HashSet;

/// The path of the key set below the issuer (the one kube-apiserver uses).
pub const JWKS_PATH: &str = "/openid/v1/jwks";
/// Most keys accepted in one set.
pub const MAX_KEYS: usize = 100;
/// Smallest RSA modulus accepted, in bits.
pub const MIN_RSA_BITS: usize = 2048;
/// Largest RSA modulus accepted, in bits (docs/api.md, "Key lifecycle"): a verifier's work grows
/// with the modulus, and a forged token must not cost it more than a key of 8192 bits does.
pub const MAX_RSA_BITS: usize = 8192;
/// Largest RSA public exponent accepted, 2^31 − 1 (docs/api.md, "Key lifecycle"): verifying takes
/// one multiplication per bit of the exponent, so an exponent as large as the modulus (`n − 2`)
/// makes every verification as slow as signing.
pub const MAX_RSA_EXPONENT: u32 = i32::MAX as u32;

/// Why an RSA public key is not one a verifier can afford (a modulus of 2048 to 8192 bits and an
/// odd public exponent from 3 to 2^31 − 1: docs/api.md, "Key lifecycle").
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RsaBound {
    /// The modulus has this many bits, outside [`MIN_RSA_BITS`]–[`MAX_RSA_BITS`].
    #[error(
        "RSA keys must have a modulus of {MIN_RSA_BITS} to {MAX_RSA_BITS} bits (this one has {0})"
    )]
    ModulusBits(usize),
    /// The modulus is even: the product of two odd primes never is, and a verifier (Go's,
    /// ring) refuses to import it.
    #[error("the RSA modulus is even: no RSA key has one")]
    EvenModulus,
    /// The exponent is even, below 3 or above [`MAX_RSA_EXPONENT`].
    #[error("the RSA exponent must be odd, from 3 to 2^31-1 ({MAX_RSA_EXPONENT})")]
    Exponent,
}

/// The size in bits of an RSA modulus given as big-endian bytes (JWK `n`, decoded), if it is
/// within the bounds and odd. Leading zero bytes do not count.
///
/// ```
/// use registry_domain::publishing::{rsa_modulus_bits, RsaBound};
/// let mut n = vec![0xffu8; 256];
/// assert_eq!(rsa_modulus_bits(&n), Ok(2048));
/// n.insert(0, 0); // a leading zero is not a larger key
/// assert_eq!(rsa_modulus_bits(&n), Ok(2048));
/// assert_eq!(rsa_modulus_bits(&[0xff; 2048]), Err(RsaBound::ModulusBits(16384)));
/// assert_eq!(rsa_modulus_bits(&[0x01; 256]), Err(RsaBound::ModulusBits(2041)));
/// n[256] = 0xfe;
/// assert_eq!(rsa_modulus_bits(&n), Err(RsaBound::EvenModulus));
/// ```
pub fn rsa_modulus_bits(n: &[u8]) -> Result<usize, RsaBound> {
    let significant = n.iter().position(|b| *b != 0).map_or(&[][..], |i| &n[i..]);
    let bits = significant.first().map_or(0, |first| {
        significant.len() * 8 - first.leading_zeros() as usize
    });
    if !(MIN_RSA_BITS..=MAX_RSA_BITS).contains(&bits) {
        Err(RsaBound::ModulusBits(bits))
    } else if significant.last().is_some_and(|last| last % 2 == 0) {
        Err(RsaBound::EvenModulus)
    } else {
        Ok(bits)
    }
}

/// An RSA public exponent given as big-endian bytes (JWK `e`, decoded), if it is odd and from
/// 3 to [`MAX_RSA_EXPONENT`].
///
/// ```
/// use registry_domain::publishing::{rsa_exponent, RsaBound};
/// assert_eq!(rsa_exponent(&[0x01, 0x00, 0x01]), Ok(65537));
/// assert_eq!(rsa_exponent(&[0x03]), Ok(3));
/// assert_eq!(rsa_exponent(&[0x01]), Err(RsaBound::Exponent));
/// assert_eq!(rsa_exponent(&[0x01, 0x00, 0x00]), Err(RsaBound::Exponent)); // even
/// assert_eq!(rsa_exponent(&[0x80, 0x00, 0x00, 0x01]), Err(RsaBound::Exponent)); // 2^31 + 1
/// ```
pub fn rsa_exponent(e: &[u8]) -> Result<u32, RsaBound> {
    let significant = e.iter().position(|b| *b != 0).map_or(&[][..], |i| &e[i..]);
    if significant.len() > 4 {
        return Err(RsaBound::Exponent);
    }
    let value = significant
        .iter()
        .fold(0u32, |value, byte| (value << 8) | u32::from(*byte));
    if value % 2 == 1 && (3..=MAX_RSA_EXPONENT).contains(&value) {
        Ok(value)
    } else {
        Err(RsaBound::Exponent)
    }
}

const REQUIRED_ARRAYS: [&str; 3] = [
    "response_types_supported",
    "subject_types_supported",
    "id_token_signing_alg_values_supported",
];
const PRIVATE_MEMBERS: [&str; 9] = ["d", "p", "q", "dp", "dq", "qi", "oth", "k", "priv"];

/// The hosted key-set address of an issuer.
///
/// ```
/// use registry_domain::publishing::jwks_uri;
/// assert_eq!(jwks_uri("http://api-acme.localhost:8080"), "http://api-acme.localhost:8080/openid/v1/jwks");
/// ```
pub fn jwks_uri(issuer: &str) -> String {
    format!("{issuer}{JWKS_PATH}")
}

/// The default subject of the wiring guide: a Kubernetes service account.
pub const DEFAULT_WIRING_SUBJECT: &str = "system:serviceaccount:default:default";

/// What to register in AWS, GCP and Azure to trust `issuer` (docs/api.md, "Key lifecycle", the
/// wiring guide), for tokens whose `sub` is `subject`. The AWS trust policy conditions on `aud`
/// **and** `sub`: a policy on `aud` alone lets every subject of the issuer assume the role. A
/// subject with IAM's wildcards (`*`, `?`) is compared by `StringLike`, where they are
/// wildcards (`StringEquals` would compare them as characters no token holds); `aud` always
/// by `StringEquals`. A `$` of the subject is written `${$}` in the trust policy: IAM reads
/// `${…}` as a policy variable in either comparison.
///
/// ```
/// use registry_domain::publishing::wiring_guide;
/// let guide = wiring_guide("https://k3s-acme.oidc.example.com", "system:serviceaccount:ci:deployer");
/// let condition = &guide["aws"]["trustPolicy"]["Statement"][0]["Condition"]["StringEquals"];
/// assert_eq!(condition["k3s-acme.oidc.example.com:aud"], "sts.amazonaws.com");
/// assert_eq!(condition["k3s-acme.oidc.example.com:sub"], "system:serviceaccount:ci:deployer");
/// assert_eq!(guide["jwksUri"], "https://k3s-acme.oidc.example.com/openid/v1/jwks");
///
/// let any = wiring_guide("https://k3s-acme.oidc.example.com", "system:serviceaccount:ci:*");
/// let condition = &any["aws"]["trustPolicy"]["Statement"][0]["Condition"];
/// assert_eq!(condition["StringEquals"]["k3s-acme.oidc.example.com:aud"], "sts.amazonaws.com");
/// assert_eq!(condition["StringLike"]["k3s-acme.oidc.example.com:sub"], "system:serviceaccount:ci:*");
/// assert!(condition["StringEquals"].get("k3s-acme.oidc.example.com:sub").is_none());
///
/// let dollar = wiring_guide("https://k3s-acme.oidc.example.com", "user:${aws:username}");
/// let condition = &dollar["aws"]["trustPolicy"]["Statement"][0]["Condition"]["StringEquals"];
/// assert_eq!(condition["k3s-acme.oidc.example.com:sub"], "user:${$}{aws:username}");
/// assert_eq!(dollar["azure"]["subjectExample"], "user:${aws:username}");
/// ```
pub fn wiring_guide(issuer: &str, subject: &str) -> Value {
    let host_and_path = issuer
        .split_once("://")
        .map_or(issuer, |(_, rest)| rest)
        .trim_end_matches('/');
    let aud = format!("{host_and_path}:aud");
    let sub = format!("{host_and_path}:sub");
    let iam_subject = subject.replace('$', "${$}");
    let condition = match subject.contains(['*', '?']) {
        false => serde_json::json!({"StringEquals": {aud: "sts.amazonaws.com", sub: iam_subject}}),
        true => serde_json::json!({
            "StringEquals": {aud: "sts.amazonaws.com"},
            "StringLike": {sub: iam_subject}
        }),
    };
    serde_json::json!({
        "issuer": issuer,
        "jwksUri": jwks_uri(issuer),
        "aws": {
            "providerUrl": issuer,
            "audience": "sts.amazonaws.com",
            "trustPolicy": {
                "Version": "2012-10-17",
                "Statement": [{
                    "Effect": "Allow",
                    "Principal": {
                        "Federated": format!("arn:aws:iam::<ACCOUNT_ID>:oidc-provider/{host_and_path}")
                    },
                    "Action": "sts:AssumeRoleWithWebIdentity",
                    "Condition": condition
                }]
            }
        },
        "gcp": {
            "issuerUri": issuer,
            "allowedAudiences": [
                "//iam.googleapis.com/projects/<PROJECT_NUMBER>/locations/global/workloadIdentityPools/<POOL_ID>/providers/<PROVIDER_ID>"
            ],
            "attributeMapping": {"google.subject": "assertion.sub"}
        },
        "azure": {
            "issuer": issuer,
            "audience": "api://AzureADTokenExchange",
            "subjectExample": subject
        }
    })
}

/// Sets a discovery document's `issuer` and `jwks_uri` to the hosted ones, in place when they
/// are present (serde_json's `preserve_order` keeps their position), appended when not. Also used
/// to re-point documents published under an earlier issuer URL template.
///
/// ```
/// use registry_domain::publishing::point_at;
/// use serde_json::json;
/// let mut doc = json!({"issuer": "https://old", "jwks_uri": "https://old/keys", "x": 1});
/// point_at(doc.as_object_mut().unwrap(), "https://new");
/// assert_eq!(doc.to_string(), r#"{"issuer":"https://new","jwks_uri":"https://new/openid/v1/jwks","x":1}"#);
/// ```
pub fn point_at(doc: &mut Map<String, Value>, issuer: &str) {
    doc.insert("issuer".into(), Value::String(issuer.to_owned()));
    doc.insert("jwks_uri".into(), Value::String(jwks_uri(issuer)));
}

/// A checked, rewritten upload, ready to be served.
#[derive(Debug, Clone, PartialEq)]
pub struct Publication {
    /// The discovery document with the hosted `issuer` and `jwks_uri`.
    pub openid_configuration: Value,
    /// The key set as uploaded.
    pub jwks: Value,
    /// Sentences about valid but risky uploads.
    pub warnings: Vec<String>,
}

/// Checks and rewrites an upload (the whole PUT body) for the service hosted at `issuer`.
/// `previous_kids` are the key ids of the set published before, if any.
///
/// ```
/// use registry_domain::publishing::publish;
/// use serde_json::json;
/// let upload = json!({
///     "openidConfiguration": {
///         "issuer": "https://kubernetes.default.svc.cluster.local",
///         "jwks_uri": "https://10.0.0.1:6443/openid/v1/jwks",
///         "response_types_supported": ["id_token"],
///         "subject_types_supported": ["public"],
///         "id_token_signing_alg_values_supported": ["ES256"]
///     },
///     "jwks": {"keys": [{"kty": "EC", "crv": "P-256", "kid": "k1", "use": "sig", "alg": "ES256",
///         "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
///         "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}
/// });
/// let p = publish(&upload, "https://api-acme.example.com", None).unwrap();
/// assert_eq!(p.openid_configuration["issuer"], "https://api-acme.example.com");
/// assert_eq!(p.openid_configuration["jwks_uri"], "https://api-acme.example.com/openid/v1/jwks");
/// assert_eq!(p.warnings.len(), 1); // the uploaded issuer differed
/// ```
pub fn publish(
    upload: &Value,
    issuer: &str,
    previous_kids: Option<&[String]>,
) -> Result<Publication, Violations> {
    let mut problems = Vec::new();
    let Some(body) = upload.as_object() else {
        return Err(vec![Violation::new("", "the body must be a JSON object")]);
    };
    for key in body.keys() {
        const FIELDS: [&str; 4] = [
            "openidConfiguration",
            "jwks",
            "retainRemovedKeysHours",
            "rotationLeadSeconds",
        ];
        if !FIELDS.contains(&key.as_str()) {
            problems.push(Violation::new(
                format!("/{}", escape_token(key)),
                format!(
                    "unknown field {key:?}: only openidConfiguration, jwks, \
                     retainRemovedKeysHours and rotationLeadSeconds are accepted"
                ),
            ));
        }
    }
    if let Err(violation) = retain_hours(body.get("retainRemovedKeysHours")) {
        problems.push(violation);
    }
    if let Err(violation) = lead_seconds(body.get("rotationLeadSeconds")) {
        problems.push(violation);
    }
    let mut warnings = Vec::new();
    let configuration = match body.get("openidConfiguration") {
        Some(Value::Object(doc)) => Some(rewrite(doc, issuer, &mut problems, &mut warnings)),
        Some(_) => {
            problems.push(Violation::new(
                "/openidConfiguration",
                "must be a JSON object",
            ));
            None
        }
        None => {
            problems.push(Violation::new("/openidConfiguration", "is required"));
            None
        }
    };
    let kids = match body.get("jwks") {
        Some(jwks) => check_key_set(jwks, &mut problems),
        None => {
            problems.push(Violation::new("/jwks", "is required"));
            Vec::new()
        }
    };
    if !problems.is_empty() {
        return Err(problems);
    }
    if let Some(previous) = previous_kids.filter(|p| !p.is_empty()) {
        if !previous.iter().any(|k| kids.contains(k)) {
            warnings.push(no_overlap_warning(previous, None));
        }
    }
    Ok(Publication {
        openid_configuration: configuration.unwrap_or_default(),
        jwks: body["jwks"].clone(),
        warnings,
    })
}

/// The warning of an upload that keeps no key of the previous set (docs/api.md, "Upload checks");
/// with the time until which the registry keeps the old keys published, when it does (docs/api.md,
/// "Key lifecycle").
pub(crate) fn no_overlap_warning(
    previous: &[String],
    retained_until: Option<time::OffsetDateTime>,
) -> String {
    let kept = match retained_until.map(crate::timestamp::rfc3339) {
        Some(until) => format!(
            "; the registry keeps the old keys published until {until} \
             (retainRemovedKeysHours), so verifiers that refetch accept tokens signed with them \
             until then"
        ),
        None => String::new(),
    };
    format!(
        "no key of the previously published set ({}) is in the new one: verifiers that cached \
         the old set will reject tokens signed with the new keys until they refetch; publish old \
         and new keys together during a rotation{kept}",
        previous.join(", ")
    )
}

fn rewrite(
    doc: &Map<String, Value>,
    issuer: &str,
    problems: &mut Violations,
    warnings: &mut Vec<String>,
) -> Value {
    let mut doc = doc.clone();
    match doc.get("issuer") {
        Some(Value::String(uploaded)) if uploaded == issuer => {}
        // Verifiers compare issuers exactly: a token carrying the uploaded one is refused.
        Some(Value::String(uploaded)) if uploaded.trim_end_matches('/') == issuer => {
            warnings.push(format!(
                "the uploaded issuer {uploaded:?} differs from the hosted issuer {issuer:?} by a \
                 trailing slash: verifiers compare issuers exactly, so tokens must carry the \
                 hosted issuer; set --service-account-issuer={issuer} on the kube-apiserver (or \
                 the issuer setting of your identity provider)"
            ))
        }
        Some(uploaded) => warnings.push(format!(
            "the uploaded issuer {uploaded} differs from the hosted issuer {issuer:?}: tokens must \
             carry the hosted issuer, so set --service-account-issuer={issuer} on the \
             kube-apiserver (or the issuer setting of your identity provider)"
        )),
        None => {}
    }
    point_at(&mut doc, issuer);
    for member in REQUIRED_ARRAYS {
        let pointer = format!("/openidConfiguration/{member}");
        match doc.get(member) {
            None => problems.push(Violation::new(
                pointer,
                format!("{member} is required by OpenID Connect Discovery"),
            )),
            Some(Value::Array(items))
                if !items.is_empty() && items.iter().all(Value::is_string) => {}
            Some(_) => problems.push(Violation::new(
                pointer,
                "must be a non-empty array of strings",
            )),
        }
    }
    let offers_none = doc
        .get("id_token_signing_alg_values_supported")
        .and_then(Value::as_array)
        .is_some_and(|algs| algs.iter().any(|a| a == "none"));
    if offers_none {
        warnings.push(
            "id_token_signing_alg_values_supported lists \"none\": unsigned tokens must never be \
             trusted, and verifiers such as cloud providers will refuse this issuer"
                .to_owned(),
        );
    }
    Value::Object(doc)
}

/// Checks a key set; returns the `kid`s found.
fn check_key_set(jwks: &Value, problems: &mut Violations) -> Vec<String> {
    let Some(set) = jwks.as_object() else {
        problems.push(Violation::new(
            "/jwks",
            "must be a JSON object with a keys array",
        ));
        return Vec::new();
    };
    for key in set.keys().filter(|k| *k != "keys") {
        problems.push(Violation::new(
            format!("/jwks/{}", escape_token(key)),
            format!("unknown field {key:?}: a key set holds only keys"),
        ));
    }
    let keys = match set.get("keys") {
        Some(Value::Array(keys)) => keys,
        Some(_) => {
            problems.push(Violation::new(
                "/jwks/keys",
                "must be an array of JSON Web Keys",
            ));
            return Vec::new();
        }
        None => {
            problems.push(Violation::new("/jwks/keys", "is required"));
            return Vec::new();
        }
    };
    if keys.is_empty() || keys.len() > MAX_KEYS {
        problems.push(Violation::new(
            "/jwks/keys",
            format!(
                "must hold between 1 and {MAX_KEYS} keys (found {})",
                keys.len()
            ),
        ));
    }
    let mut seen = HashSet::new();
    let mut kids = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let at = format!("/jwks/keys/{i}");
        let Some(key) = key.as_object() else {
            problems.push(Violation::new(at, "must be a JSON Web Key object"));
            continue;
        };
        if let Some(kid) = check_key(key, &at, problems) {
            if !seen.insert(kid.clone()) {
                problems.push(Violation::new(
                    format!("{at}/kid"),
                    format!("kid {kid:?} appears more than once in the set"),
                ));
            }
            kids.push(kid);
        }
    }
    kids
}

/// Whether `key` carries private or symmetric material (a member of a private key, or
/// `kty: oct`): such a key is refused, never stripped, and must be treated as compromised.
pub fn holds_secret(key: &Map<String, Value>) -> bool {
    PRIVATE_MEMBERS.iter().any(|m| key.contains_key(*m))
        || key.get("kty").and_then(Value::as_str) == Some("oct")
}

/// Checks one key; returns its `kid` when it has a usable one.
fn check_key(key: &Map<String, Value>, at: &str, problems: &mut Violations) -> Option<String> {
    if holds_secret(key) {
        let private: Vec<&str> = PRIVATE_MEMBERS
            .into_iter()
            .filter(|m| key.contains_key(*m))
            .collect();
        problems.push(Violation::new(
            at,
            format!(
                "this key contains private or symmetric key material ({}): only public keys may \
                 be published. Treat the key as compromised: rotate it, and upload only the \
                 public part of the new key",
                if private.is_empty() {
                    "kty oct".to_owned()
                } else {
                    private.join(", ")
                }
            ),
        ));
        return None;
    }
    let kty = key.get("kty").and_then(Value::as_str);
    let kid = match key.get("kid") {
        // A browser resolves `…/keys/../readiness`, encoded or not, before it asks: no client
        // could name such a key.
        Some(Value::String(kid)) if crate::segment::is_dot_segment(kid) => {
            problems.push(Violation::new(
                format!("{at}/kid"),
                "a kid of . or .. cannot be named in a URL (…/keys/{kid}): give the key another \
                 kid",
            ));
            None
        }
        Some(Value::String(kid)) if !kid.is_empty() => Some(kid.clone()),
        _ => {
            problems.push(Violation::new(
                format!("{at}/kid"),
                "every key needs a non-empty kid",
            ));
            None
        }
    };
    match key.get("use") {
        None => {}
        Some(Value::String(u)) if u == "sig" => {}
        Some(_) => problems.push(Violation::new(
            format!("{at}/use"),
            "use must be \"sig\" (or absent): published keys verify signatures",
        )),
    }
    // A verifier imports a key only when its `key_ops`, if any, allow verifying (josekit, which
    // imports keys here as the verifiers do, and WebCrypto's `importKey` alike); RFC 7517
    // forbids an operation listed twice.
    if let Some(ops) = key.get("key_ops") {
        let listed = ops.as_array().and_then(|ops| {
            let names: Option<HashSet<&str>> = ops.iter().map(Value::as_str).collect();
            names.filter(|names| names.len() == ops.len())
        });
        if !listed.is_some_and(|names| names.contains("verify")) {
            problems.push(Violation::new(
                format!("{at}/key_ops"),
                "key_ops must list \"verify\" (or be absent), each operation once: published \
                 keys verify signatures",
            ));
        }
    }
    let alg = match key.get("alg") {
        None => None,
        Some(Value::String(alg)) => Some(alg.as_str()),
        Some(_) => {
            problems.push(Violation::new(format!("{at}/alg"), "alg must be a string"));
            None
        }
    };
    let member = |name: &str, problems: &mut Violations| -> Option<Vec<u8>> {
        let pointer = format!("{at}/{name}");
        match key.get(name).and_then(Value::as_str) {
            None => {
                problems.push(Violation::new(
                    pointer,
                    format!("{name} is required for this key type"),
                ));
                None
            }
            Some(text) => match URL_SAFE_NO_PAD.decode(text.trim_end_matches('=')) {
                Ok(bytes) if !bytes.is_empty() => Some(bytes),
                _ => {
                    problems.push(Violation::new(pointer, format!("{name} is not base64url")));
                    None
                }
            },
        }
    };
    let fits: &[&str] = match kty {
        Some("RSA") => {
            if let Some(n) = member("n", problems) {
                if let Err(bound) = rsa_modulus_bits(&n) {
                    problems.push(Violation::new(format!("{at}/n"), bound.to_string()));
                }
            }
            if let Some(e) = member("e", problems) {
                // A verifier refuses an even exponent or 1 (OpenSSL does); a huge one is a
                // verification as slow as a signature.
                if let Err(bound) = rsa_exponent(&e) {
                    problems.push(Violation::new(format!("{at}/e"), bound.to_string()));
                }
            }
            &["RS256", "RS384", "RS512", "PS256", "PS384", "PS512"]
        }
        Some("EC") => {
            let (size, algs): (usize, &[&str]) = match key.get("crv").and_then(Value::as_str) {
                // The curves of the algorithms verifiers accept (ES256, ES384: docs/api.md,
                // "Key lifecycle").
                Some("P-256") => (32, &["ES256"]),
                Some("P-384") => (48, &["ES384"]),
                _ => {
                    problems.push(Violation::new(
                        format!("{at}/crv"),
                        "crv must be P-256 or P-384 for an EC key (ES256, ES384)",
                    ));
                    (0, &[])
                }
            };
            for coordinate in ["x", "y"] {
                if let Some(bytes) = member(coordinate, problems) {
                    if size != 0 && bytes.len() != size {
                        problems.push(Violation::new(
                            format!("{at}/{coordinate}"),
                            format!("{coordinate} must be {size} bytes for this curve"),
                        ));
                    }
                }
            }
            algs
        }
        Some("OKP") => {
            let size = match key.get("crv").and_then(Value::as_str) {
                Some("Ed25519") => 32,
                Some("Ed448") => 57,
                _ => {
                    problems.push(Violation::new(
                        format!("{at}/crv"),
                        "crv must be Ed25519 or Ed448 for an OKP signing key",
                    ));
                    0
                }
            };
            if let Some(x) = member("x", problems) {
                if size != 0 && x.len() != size {
                    problems.push(Violation::new(
                        format!("{at}/x"),
                        format!("x must be {size} bytes for this curve"),
                    ));
                }
            }
            &["EdDSA"]
        }
        Some(other) => {
            problems.push(Violation::new(
                format!("{at}/kty"),
                format!("kty {other:?} is not supported: use RSA, EC or OKP"),
            ));
            &[]
        }
        None => {
            problems.push(Violation::new(format!("{at}/kty"), "kty is required"));
            &[]
        }
    };
    if let Some(alg) = alg {
        if !fits.is_empty() && !fits.contains(&alg) {
            problems.push(Violation::new(
                format!("{at}/alg"),
                format!(
                    "alg {alg:?} does not fit this key (expected one of {})",
                    fits.join(", ")
                ),
            ));
        }
    }
    kid
}

/// The `kid`s of a published key set.
pub fn key_ids(jwks: &Value) -> Vec<String> {
    jwks.get("keys")
        .and_then(Value::as_array)
        .map(|keys| {
            keys.iter()
                .filter_map(|k| k.get("kid").and_then(Value::as_str).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Default of `retainRemovedKeysHours`.
pub const DEFAULT_RETAIN_HOURS: u32 = 24;
/// Largest `retainRemovedKeysHours` (a week).
pub const MAX_RETAIN_HOURS: u32 = 168;

/// Reads `retainRemovedKeysHours` (absent: [`DEFAULT_RETAIN_HOURS`]); an integer 0–168, else a
/// violation at `/retainRemovedKeysHours`.
///
/// ```
/// use registry_domain::keys::retain_hours;
/// use serde_json::json;
/// assert_eq!(retain_hours(None).unwrap(), 24);
/// assert_eq!(retain_hours(Some(&json!(0))).unwrap(), 0);
/// for bad in [json!(null), json!("24"), json!(1.5), json!(-1), json!(169)] {
///     assert!(retain_hours(Some(&bad)).is_err(), "{bad}");
/// }
/// ```
pub fn retain_hours(value: Option<&Value>) -> Result<u32, Violation> {
    let retention = ("/retainRemovedKeysHours", "hours", DEFAULT_RETAIN_HOURS);
    whole_number(value, retention, MAX_RETAIN_HOURS)
}

/// An optional whole number of the upload, from 0 to `max`, in `unit`s: `default` when absent,
/// else a violation at `pointer`.
fn whole_number(
    value: Option<&Value>,
    (pointer, unit, default): (&str, &str, u32),
    max: u32,
) -> Result<u32, Violation> {
    let Some(value) = value else {
        return Ok(default);
    };
    value
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| *n <= max)
        .ok_or_else(|| {
            Violation::new(
                pointer,
                format!("must be a whole number of {unit} from 0 to {max}"),
            )
        })
}

/// Default of `rotationLeadSeconds` (docs/api.md, "Key readiness").
pub const DEFAULT_LEAD_SECONDS: u32 = 600;
/// Largest `rotationLeadSeconds` (a week).
pub const MAX_LEAD_SECONDS: u32 = 604_800;

/// Reads `rotationLeadSeconds` (absent: [`DEFAULT_LEAD_SECONDS`]): how long a key the upload
/// publishes first must be published before it is safe to sign with; an integer 0–604800, else a
/// violation at `/rotationLeadSeconds`.
///
/// ```
/// use registry_domain::publishing::lead_seconds;
/// use serde_json::json;
/// assert_eq!(lead_seconds(None), Ok(600));
/// assert_eq!(lead_seconds(Some(&json!(0))), Ok(0));
/// assert!(lead_seconds(Some(&json!(604_801))).is_err());
/// assert!(lead_seconds(Some(&json!("60"))).is_err());
/// ```
pub fn lead_seconds(value: Option<&Value>) -> Result<u32, Violation> {
    let lead = ("/rotationLeadSeconds", "seconds", DEFAULT_LEAD_SECONDS);
    whole_number(value, lead, MAX_LEAD_SECONDS)
}

#[cfg(test)]
mod tests;
