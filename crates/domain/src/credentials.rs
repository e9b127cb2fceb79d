//! The shape of secrets the registry hands out.
//!
//! A secret reads `{prefix}_{lookup}_{secret}`: a recognisable prefix for secret scanners
//! (`rgst` for static tokens, `rgan` for anonymous secrets), a public lookup id that finds the
//! stored hash with one indexed query, and 52 random characters of `[a-z0-9]` (≈ 268 bits).

use crate::naming::random_label;
use crate::ports::Randomness;
use std::borrow::Cow;

/// Length of the public lookup id.
pub const LOOKUP_LEN: usize = 16;
/// Length of the random secret part.
pub const SECRET_LEN: usize = 52;

/// Which kind of secret a bearer string is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CredentialKind {
    /// A service account's static token (`rgst_…`).
    StaticToken,
    /// An anonymous service's management secret (`rgan_…`).
    AnonymousSecret,
}

impl CredentialKind {
    /// The prefix, without the separator.
    pub fn prefix(self) -> &'static str {
        match self {
            CredentialKind::StaticToken => "rgst",
            CredentialKind::AnonymousSecret => "rgan",
        }
    }
}

/// A freshly generated secret; the plaintext is shown once and then only its hash is kept.
#[derive(Clone)]
pub struct GeneratedSecret {
    /// The whole secret, to return to the client once.
    pub plaintext: String,
    /// Its public lookup id.
    pub lookup_id: String,
}

impl std::fmt::Debug for GeneratedSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GeneratedSecret")
            .field("lookup_id", &self.lookup_id)
            .field("plaintext", &"<redacted>")
            .finish()
    }
}

/// Generates a new secret of `kind`.
///
/// ```
/// use registry_domain::credentials::{generate, parse, CredentialKind};
/// # struct Fixed; impl registry_domain::ports::Randomness for Fixed {
/// #     fn fill_bytes(&self, b: &mut [u8]) { for (i, x) in b.iter_mut().enumerate() { *x = i as u8; } } }
/// let s = generate(CredentialKind::StaticToken, &Fixed);
/// assert!(s.plaintext.starts_with("rgst_"));
/// let parsed = parse(&s.plaintext).unwrap();
/// assert_eq!(parsed.kind, CredentialKind::StaticToken);
/// assert_eq!(parsed.lookup_id, s.lookup_id);
/// ```
pub fn generate(kind: CredentialKind, rng: &dyn Randomness) -> GeneratedSecret {
    let lookup_id = random_label(rng, LOOKUP_LEN);
    let secret = random_label(rng, SECRET_LEN);
    GeneratedSecret {
        plaintext: format!("{}_{lookup_id}_{secret}", kind.prefix()),
        lookup_id,
    }
}

/// A bearer string that has the shape of one of our secrets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParsedCredential<'a> {
    /// Which kind.
    pub kind: CredentialKind,
    /// The lookup id inside it.
    pub lookup_id: &'a str,
}

/// Recognises a static token or anonymous secret; `None` for anything else (a JWT, garbage).
///
/// ```
/// use registry_domain::credentials::parse;
/// assert!(parse("rgst_short_x").is_none());
/// assert!(parse("eyJhbGciOiJSUzI1NiJ9.e30.sig").is_none());
/// ```
pub fn parse(bearer: &str) -> Option<ParsedCredential<'_>> {
    let (prefix, rest) = bearer.split_once('_')?;
    let kind = match prefix {
        "rgst" => CredentialKind::StaticToken,
        "rgan" => CredentialKind::AnonymousSecret,
        _ => return None,
    };
    let (lookup_id, secret) = rest.split_once('_')?;
    let well_formed = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    (well_formed(lookup_id, LOOKUP_LEN) && well_formed(secret, SECRET_LEN))
        .then_some(ParsedCredential { kind, lookup_id })
}

/// `text` with every run that starts like one of the registry's secrets (`rgst_`, `rgan_`, then
/// the secret's characters) cut to its prefix and `[redacted]`: for text a client chose that a
/// log or the fetch evidence keeps (a path no route serves, a `Host`, a `User-Agent`), where a
/// careless client may have put its token. Text without one is returned as it came, borrowed
/// or owned, after a `memchr` for a `_` (which every secret holds and almost no such text
/// does: searching each field cost about 270 instructions of a public request, callgrind).
///
/// ```
/// use registry_domain::credentials::redact_secrets;
/// let secret = format!("rgst_{}_{}", "a".repeat(16), "b".repeat(52));
/// assert_eq!(redact_secrets(&format!("/nope/{secret}/x")), "/nope/rgst_[redacted]/x");
/// assert_eq!(redact_secrets("rgan_0123456789abcdef_x.host"), "rgan_[redacted].host");
/// assert_eq!(redact_secrets("curl/8.5 (x86_64)"), "curl/8.5 (x86_64)");
/// assert_eq!(redact_secrets("a rgst_x b_rgan_y_z é"), "a rgst_[redacted] b_rgan_[redacted] é");
/// assert_eq!(redact_secrets("rgst_"), "rgst_[redacted]");
/// assert!(matches!(redact_secrets("Mozilla/5.0"), std::borrow::Cow::Borrowed(_)));
/// ```
pub fn redact_secrets<'a>(text: impl Into<Cow<'a, str>>) -> Cow<'a, str> {
    let text = text.into();
    if !text.as_bytes().contains(&b'_') {
        return text;
    }
    match cut_secrets(&text) {
        Some(cut) => Cow::Owned(cut),
        None => text,
    }
}

/// `text` with its secrets cut out ([`redact_secrets`]); `None` when it holds none.
fn cut_secrets(text: &str) -> Option<String> {
    let starts_secret = |at: usize| {
        at >= 4
            && [CredentialKind::StaticToken, CredentialKind::AnonymousSecret]
                .iter()
                .any(|kind| &text.as_bytes()[at - 4..at] == kind.prefix().as_bytes())
    };
    let first = (text.match_indices('_'))
        .map(|(at, _)| at)
        .find(|at| starts_secret(*at))?;
    let secret_char = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_';
    let mut out = String::with_capacity(text.len());
    let mut rest = first;
    out.push_str(&text[..first]);
    while rest < text.len() {
        // `rest` is the `_` after a prefix already written.
        let end = (text.as_bytes()[rest + 1..].iter())
            .position(|b| !secret_char(*b))
            .map_or(text.len(), |n| rest + 1 + n);
        out.push_str("_[redacted]");
        let next = (text[end..].match_indices('_'))
            .map(|(at, _)| end + at)
            .find(|at| starts_secret(*at));
        let stop = next.unwrap_or(text.len());
        out.push_str(&text[end..stop]);
        rest = stop;
    }
    Some(out)
}
