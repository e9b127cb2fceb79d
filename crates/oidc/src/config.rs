//! Settings of the verifier: network limits and cache lifetimes.

use std::time::Duration;

/// How the verifier fetches and caches issuers' keys.
///
/// [`OidcConfig::default`] holds the production values (docs/api.md, "Authentication"); only
/// `allow_insecure_issuers` is meant to change outside tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OidcConfig {
    /// Also fetch from `http` URLs and loopback/private addresses (development and tests only).
    pub allow_insecure_issuers: bool,
    /// Limit on establishing a TCP connection.
    pub connect_timeout: Duration,
    /// Limit on one HTTP exchange, from resolution to the last byte of the body.
    pub request_timeout: Duration,
    /// Largest discovery document or key set read (bytes).
    pub max_response_bytes: usize,
    /// How long keys stay fresh when the key set's response has no `max-age`.
    pub default_key_ttl: Duration,
    /// Lower bound of a response's `max-age`.
    pub min_key_ttl: Duration,
    /// Upper bound of a response's `max-age`.
    pub max_key_ttl: Duration,
    /// How long the last good keys keep working, counted from their fetch, while the issuer is
    /// down or answers an empty key set.
    pub stale_key_grace: Duration,
    /// Least time between two refetches caused by an unknown `kid`.
    pub unknown_kid_refetch_interval: Duration,
    /// Least time between a failed fetch and the next attempt.
    pub retry_after_failure: Duration,
    /// Redirects followed per fetch (same host only).
    pub max_redirects: usize,
    /// Issuers whose keys are cached at once; a new one takes the place of the least recently
    /// used.
    pub max_issuers: usize,
    /// Tokens longer than this are refused before being parsed (bytes).
    pub max_token_bytes: usize,
}

impl Default for OidcConfig {
    fn default() -> Self {
        Self {
            allow_insecure_issuers: false,
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(5),
            max_response_bytes: 256 * 1024,
            default_key_ttl: Duration::from_secs(3600),
            min_key_ttl: Duration::from_secs(5 * 60),
            max_key_ttl: Duration::from_secs(24 * 3600),
            stale_key_grace: Duration::from_secs(24 * 3600),
            unknown_kid_refetch_interval: Duration::from_secs(30),
            retry_after_failure: Duration::from_secs(5),
            max_redirects: 3,
            max_issuers: 1000,
            max_token_bytes: 16 * 1024,
        }
    }
}

impl OidcConfig {
    /// The production settings with insecure issuers admitted (development and tests).
    pub fn insecure() -> Self {
        Self {
            allow_insecure_issuers: true,
            ..Self::default()
        }
    }
}
