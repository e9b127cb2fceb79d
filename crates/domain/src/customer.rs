//! Customers (tenants) and their plans.

use std::fmt;
use std::str::FromStr;
use time::OffsetDateTime;
use uuid::Uuid;

/// The commercial plan of a customer; it decides whether `serviceName` may be chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Plan {
    /// Random service names only.
    Free,
    /// Random service names only.
    Team,
    /// May choose `serviceName`.
    Business,
    /// May choose `serviceName`.
    Enterprise,
}

impl Plan {
    /// Every plan, in price order.
    pub const ALL: [Plan; 4] = [Plan::Free, Plan::Team, Plan::Business, Plan::Enterprise];

    /// The plan's name as written in the API and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Plan::Free => "free",
            Plan::Team => "team",
            Plan::Business => "business",
            Plan::Enterprise => "enterprise",
        }
    }

    /// Whether customers on this plan may choose their services' URL names.
    ///
    /// ```
    /// use registry_domain::Plan;
    /// assert!(!Plan::Team.may_choose_service_name());
    /// assert!(Plan::Business.may_choose_service_name());
    /// ```
    pub fn may_choose_service_name(self) -> bool {
        matches!(self, Plan::Business | Plan::Enterprise)
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A plan name that is none of `free`, `team`, `business`, `enterprise`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown plan {0:?}: expected free, team, business or enterprise")]
pub struct UnknownPlan(pub String);

impl FromStr for Plan {
    type Err = UnknownPlan;

    /// ```
    /// use registry_domain::Plan;
    /// assert_eq!("business".parse::<Plan>().unwrap(), Plan::Business);
    /// assert!("gold".parse::<Plan>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Plan::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| UnknownPlan(s.to_owned()))
    }
}

/// A customer: the owner of services and service accounts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Customer {
    /// Stable identifier.
    pub id: Uuid,
    /// Display name.
    pub name: String,
    /// Tenant suffix, the last label of every registered subdomain (see [`crate::naming`]).
    pub tenant: String,
    /// Current plan.
    pub plan: Plan,
    /// When the customer was created.
    pub created_at: OffsetDateTime,
    /// Since when it is disabled (`registry customer disable`): its credentials are refused and
    /// its services' documents are not served. `None`: enabled.
    pub disabled_at: Option<OffsetDateTime>,
}
