//! # registry-oidc
//!
//! The remote-JWKS adapter of the registry: verifies identity tokens minted by external OIDC
//! issuers (docs/api.md, "Authentication").
//!
//! A token's header and payload are read without trust to learn `alg`, `kid` and `iss`; the
//! issuer's keys come from `{iss}/.well-known/openid-configuration` → `jwks_uri`, fetched
//! through a client that only connects to public addresses (checked at connect time by its DNS
//! resolver, see [`classify`]) and cached per issuer as ready verifiers. Then the signature, and
//! the registered claims through [`registry_domain::claims::check`]: a token refused for its
//! claims after its signature verified keeps them in its error, for the refusal log.
//!
//! The cargo feature `fuzzing` (off by default, never enabled by the server) adds
//! `registry_oidc::fuzzing`: the same verification against a fixed key set, without the
//! network, for the fuzz targets in `fuzz/`.
//!
//! The verifier fetches whatever issuer a token names: callers should verify only tokens whose
//! `iss` some policy rule names, so that strangers cannot make the registry fetch at will.
//!
//! ```no_run
//! use registry_domain::ports::{IdentityTokenVerifier, IssuerKeys, Ticks};
//! use registry_oidc::{OidcConfig, OidcVerifier};
//! use std::sync::Arc;
//! # #[derive(Debug)]
//! # struct SystemTicks;
//! # impl Ticks for SystemTicks {
//! #     fn now(&self) -> std::time::Instant { std::time::Instant::now() }
//! # }
//! # async fn run(token: &str) -> Result<(), Box<dyn std::error::Error>> {
//! let verifier = OidcVerifier::new(OidcConfig::default(), Arc::new(SystemTicks))?;
//! let verifier: Arc<dyn IdentityTokenVerifier> = Arc::new(verifier);
//! let now = time::OffsetDateTime::now_utc();
//! let verified = verifier.verify(token, IssuerKeys::Fetched, now).await?;
//! println!("{} says sub={:?}", verified.issuer, verified.claims.get("sub"));
//! # Ok(()) }
//! ```

mod address;
mod cache;
mod config;
mod error;
mod fetch;
mod hosted;
mod keys;
mod managed;
pub mod sync;
mod tls;
mod token;

#[cfg(feature = "fuzzing")]
pub mod fuzzing;

pub use address::{classify, AddressClass};
pub use cache::OidcMetrics;
pub use config::OidcConfig;
pub use error::OidcError;
pub use hosted::HostedKeys;
pub use keys::{Alg, VerifierKeyImport, VerifierSignatureCheck};
pub use managed::SealedKeys;
pub use tls::{trust_roots, TrustRoots};

use cache::KeyCache;
use fetch::Fetcher;
use hosted::HostedSets;
use registry_domain::claims;
use registry_domain::ports::{
    IdentityTokenVerifier, IssuerKeys, Ticks, TokenRejection, Verification, VerifiedToken,
};
use std::sync::Arc;
use time::OffsetDateTime;

/// Verifies federated tokens against their issuers' published keys. Cheap to clone: clones
/// share one key cache and one HTTP client.
#[derive(Debug, Clone)]
pub struct OidcVerifier {
    cache: Arc<KeyCache>,
    hosted: Arc<HostedSets>,
    max_token_bytes: usize,
}

impl OidcVerifier {
    /// A verifier with an empty key cache, whose keys' ages count in `ticks`.
    pub fn new(config: OidcConfig, ticks: Arc<dyn Ticks>) -> Result<Self, OidcError> {
        let fetcher = Fetcher::new(&config)?;
        Ok(Self {
            max_token_bytes: config.max_token_bytes,
            hosted: Arc::new(HostedSets::new(config.max_issuers)),
            cache: Arc::new(KeyCache::new(fetcher, config, ticks)),
        })
    }

    /// Verifies `token` at `now`, with the detailed reason on refusal.
    pub async fn verify_token(
        &self,
        token: &str,
        now: OffsetDateTime,
    ) -> Result<VerifiedToken, OidcError> {
        let token = token::parse(token, self.max_token_bytes)?;
        // The keys were looked up by this very `iss`, so the issuer that vouched for the token
        // is the one it names.
        let keys = self.cache.keys(&token.issuer, token.kid.as_deref()).await?;
        signed(token, &keys.set, now)
    }

    /// Verifies `token` at `now` against the key set of an issuer this registry hosts, as its
    /// own data says (`keys`, looked up by the caller for the token's `iss`): no fetch, no
    /// grace. `issuer` is the issuer `keys` were looked up for; a token naming another is
    /// refused.
    pub fn verify_hosted(
        &self,
        token: &str,
        now: OffsetDateTime,
        issuer: &str,
        keys: HostedKeys<'_>,
    ) -> Result<VerifiedToken, OidcError> {
        let token = token::parse(token, self.max_token_bytes)?;
        if token.issuer != issuer {
            return Err(OidcError::Claims(claims::ClaimProblem::Issuer));
        }
        let set = match keys {
            HostedKeys::Withdrawn => {
                self.hosted.forget(issuer);
                return Err(OidcError::Withdrawn(token.issuer));
            }
            HostedKeys::Published { version, jwks } => self.hosted.set(issuer, version, jwks)?,
        };
        signed(token, &set, now)
    }

    /// The `iss` a token claims, read without verifying anything (`None` when the token is not
    /// a well-formed compact JWS with an accepted algorithm). Callers use it to refuse tokens of
    /// issuers that no policy trusts before any key is fetched, so a stranger cannot make the
    /// registry fetch from arbitrary hosts or fill the key cache.
    pub fn unverified_issuer(&self, token: &str) -> Option<String> {
        token::parse(token, self.max_token_bytes)
            .ok()
            .map(|t| t.issuer)
    }

    /// Counters of fetches and cache hits.
    pub fn metrics(&self) -> OidcMetrics {
        self.cache.metrics()
    }

    /// Key refreshes attempted so far (each: discovery, then the key set).
    pub fn fetch_count(&self) -> u64 {
        self.metrics().key_fetches
    }
}

/// The signature, then the registered claims at `now`: the checks shared by both verifications
/// and the `fuzzing` entry point. The signature comes first so that a token refused for its
/// claims (expired, say) is known to be its issuer's, and its refusal can be recorded for the
/// owner of the accounts that trust it (docs/api.md, "Explaining refusals").
fn signed(
    token: token::UnverifiedToken<'_>,
    set: &keys::KeySet,
    now: OffsetDateTime,
) -> Result<VerifiedToken, OidcError> {
    let verifier = set.verifier(token.kid.as_deref(), token.alg)?;
    verifier
        .verify(token.signing_input, &token.signature)
        .map_err(|_| OidcError::Signature)?;
    let token = VerifiedToken {
        issuer: token.issuer,
        claims: token.claims,
    };
    match claims::check(&token.claims, now) {
        Ok(()) => Ok(token),
        Err(problem) => Err(OidcError::Refused {
            problem,
            token: Box::new(token),
        }),
    }
}

impl IdentityTokenVerifier for OidcVerifier {
    fn unverified_issuer(&self, token: &str) -> Option<String> {
        OidcVerifier::unverified_issuer(self, token)
    }

    fn key_generation(&self, issuer: &str) -> u64 {
        self.cache.generation(issuer)
    }

    fn verify<'a>(
        &'a self,
        token: &'a str,
        keys: IssuerKeys<'a>,
        now: OffsetDateTime,
    ) -> Verification<'a> {
        Box::pin(async move {
            let verified = match keys {
                IssuerKeys::Fetched => self.verify_token(token, now).await,
                IssuerKeys::Hosted {
                    issuer,
                    version,
                    jwks,
                } => {
                    self.verify_hosted(token, now, issuer, HostedKeys::Published { version, jwks })
                }
                IssuerKeys::Withdrawn { issuer } => {
                    self.verify_hosted(token, now, issuer, HostedKeys::Withdrawn)
                }
            };
            verified.map_err(TokenRejection::from)
        })
    }
}
