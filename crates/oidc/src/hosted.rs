//! Issuers this registry hosts itself (docs/api.md, "Authentication"): their tokens are checked
//! against the key sets the registry publishes, read from its own data by the caller, never fetched
//! over HTTP. A withdrawal, a deletion or a key withdrawal then applies to the very next token, on
//! every replica, instead of after a key cache's grace.

use crate::error::OidcError;
use crate::keys::KeySet;
use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

/// What a hosted issuer publishes now, as the registry's own data says.
#[derive(Debug, Clone, Copy)]
pub enum HostedKeys<'a> {
    /// Nothing: no configuration is published there (deleted, withdrawn or expired).
    Withdrawn,
    /// The public key set document, and a tag that changes whenever it does (its ETag).
    Published {
        /// Changes with every change of `jwks`.
        version: &'a [u8],
        /// The key set document (`{"keys": [...]}`), as served.
        jwks: &'a [u8],
    },
}

/// One issuer's set, and the version it was built from.
type Versioned = (Box<[u8]>, Arc<KeySet>);

/// Ready verifiers of each hosted issuer's current key set: building them costs about 120 µs
/// a key, so they are built once per version of the set.
#[derive(Debug)]
pub(crate) struct HostedSets {
    sets: RwLock<HashMap<String, Versioned>>,
    max_issuers: usize,
}

impl HostedSets {
    pub(crate) fn new(max_issuers: usize) -> Self {
        Self {
            sets: RwLock::default(),
            max_issuers: max_issuers.max(1),
        }
    }

    /// The verifiers of `issuer`'s key set at `version`, built from `jwks` when the version is
    /// new.
    pub(crate) fn set(
        &self,
        issuer: &str,
        version: &[u8],
        jwks: &[u8],
    ) -> Result<Arc<KeySet>, OidcError> {
        if let Some((known, set)) = self
            .sets
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(issuer)
        {
            if **known == *version {
                return Ok(set.clone());
            }
        }
        let document: serde_json::Value =
            serde_json::from_slice(jwks).map_err(|e| OidcError::Document {
                url: issuer.to_owned(),
                reason: e.to_string(),
            })?;
        let set = KeySet::from_document(&document).map_err(|reason| OidcError::Document {
            url: issuer.to_owned(),
            reason,
        })?;
        if set.is_empty() {
            return Err(OidcError::NoKeys(issuer.to_owned()));
        }
        let set = Arc::new(set);
        let mut sets = self.sets.write().unwrap_or_else(PoisonError::into_inner);
        // A bound on memory: the sets are rebuilt on demand, so starting over loses nothing.
        if sets.len() >= self.max_issuers && !sets.contains_key(issuer) {
            sets.clear();
        }
        sets.insert(issuer.to_owned(), (version.into(), set.clone()));
        Ok(set)
    }

    /// Forgets the verifiers of an issuer that publishes nothing now.
    pub(crate) fn forget(&self, issuer: &str) {
        let mut sets = self.sets.write().unwrap_or_else(PoisonError::into_inner);
        sets.remove(issuer);
    }
}
