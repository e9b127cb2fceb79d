//! Services: the things whose discovery documents are published.

use time::OffsetDateTime;
use uuid::Uuid;

/// A registered or anonymous service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    /// Stable identifier; accepted in paths in place of the subdomain (legacy ids).
    pub id: Uuid,
    /// The owning customer; `None` for anonymous services.
    pub customer_id: Option<Uuid>,
    /// Public URL name, lower case.
    pub subdomain: String,
    /// Title (required for registered services).
    pub title: Option<String>,
    /// Free text.
    pub description: Option<String>,
    /// Creation time.
    pub created_at: OffsetDateTime,
    /// Expiry, for anonymous services only.
    pub expires_at: Option<OffsetDateTime>,
}

impl Service {
    /// Whether the service no longer exists at `now` (anonymous services only ever expire).
    ///
    /// ```
    /// use registry_domain::Service;
    /// use time::macros::datetime;
    /// let s = Service {
    ///     id: uuid::Uuid::nil(), customer_id: None, subdomain: "abcdefghijkl-anon".into(),
    ///     title: None, description: None,
    ///     created_at: datetime!(2026-11-21 10:00 UTC),
    ///     expires_at: Some(datetime!(2026-11-21 11:00 UTC)),
    /// };
    /// assert!(!s.is_expired_at(datetime!(2026-11-21 10:59:59 UTC)));
    /// assert!(s.is_expired_at(datetime!(2026-11-21 11:00 UTC)));
    /// ```
    pub fn is_expired_at(&self, now: OffsetDateTime) -> bool {
        self.expires_at.is_some_and(|at| now >= at)
    }
}

/// A published configuration: the rewritten discovery document and the key set, both as the
/// exact JSON text that is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedConfig {
    /// The service it belongs to.
    pub service_id: Uuid,
    /// Serialized discovery document (issuer and jwks_uri already rewritten).
    pub openid_configuration: String,
    /// Serialized key set (`{"keys": [...]}`).
    pub jwks: String,
    /// When it was published; drives `Last-Modified`.
    pub updated_at: OffsetDateTime,
    /// The last change of the public documents before `updated_at`, as the store recorded it
    /// (`None`: none known). A client may hold it as `Last-Modified`: when it falls in the same
    /// second as `updated_at`, a date cannot tell the two versions apart (docs/api.md, "Public
    /// hosting").
    pub previous_change_at: Option<OffsetDateTime>,
    /// Every key published, current and retired (docs/api.md, "Key lifecycle").
    pub keys: crate::keys::KeyState,
}
