//! Service accounts: programmatic identities governed by a policy.

use crate::policy::Policy;
use time::OffsetDateTime;
use uuid::Uuid;

/// A service account of a customer.
#[derive(Debug, Clone)]
pub struct ServiceAccount {
    /// Stable identifier.
    pub id: Uuid,
    /// The owning customer.
    pub customer_id: Uuid,
    /// Display name.
    pub name: String,
    /// The parsed policy (it keeps the document as it was saved).
    pub policy: Policy,
    /// Creation time.
    pub created_at: OffsetDateTime,
    /// The minute of its last successful request (docs/api.md, "Audit trail and last use"), `None`
    /// when never used.
    pub last_used_at: Option<OffsetDateTime>,
}
