//! The shape of secrets the registry hands out.
//!
//! A secret reads `{prefix}_{lookup}_{secret}`: a recognisable prefix for secret scanners
//! (`rgst` for static tokens, `rgan` for anonymous secrets), a public lookup id that finds the
//! stored hash with one indexed query, and 52 random characters of `[a-z0-9]` (≈ 268 bits).

use crate::naming::random_label;
use crate::ports::Randomness;

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
