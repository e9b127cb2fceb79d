//! Bounds on what one customer can make every request pay for, and the keys of per-address
//! limits (docs/api.md, "Limits").
//!
//! A federated token meets every rule, of every customer, that names its issuer: so the size of
//! policies, the number of issuers a customer may trust and the rules per issuer bound both the
//! memory the registry keeps and the work one token can cause. The limits of one document are the
//! policy engine's ([`check_policy`]): `Policy::parse` checks them before it compiles a pattern,
//! on every path (the API, the command line, the Python module). The customer-wide ones are
//! checked when a policy is saved ([`check_customer_budget`]); policies already stored are served
//! as they are.
//!
//! ```
//! use registry_domain::limits::{check_policy, MAX_RULES};
//! use registry_domain::policy::Policy;
//! use serde_json::json;
//!
//! let rule = json!({"services": ["*"], "claims": {"iss": "https://ci.example", "aud": "a", "sub": "s"}});
//! let rules: Vec<_> = std::iter::repeat(rule).take(MAX_RULES + 1).collect();
//! let document = json!({"kind": "oidc", "rules": rules});
//! assert_eq!(check_policy(&document)[0].pointer, "/rules");
//! let refused = Policy::parse(&document).unwrap_err().into_violations();
//! assert!(refused.iter().any(|v| v.pointer == "/rules"));
//! ```

use crate::policy::Policy;
use crate::Violation;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv6Addr};

/// The sentence of a refusal for a customer at its quota `max` of `what` ("services",
/// "service accounts").
///
/// ```
/// use registry_domain::limits::quota_reached;
/// assert!(quota_reached("services", 10_000).contains("10000 services"));
/// ```
pub fn quota_reached(what: &str, max: u64) -> String {
    format!("this customer has reached its quota of {max} {what}: delete some before creating more")
}

pub use crate::policy::limits::{
    check_policy, MAX_CLAIMS_PER_RULE, MAX_PATTERN_CHARS, MAX_POLICY_BYTES, MAX_RULES,
    MAX_SERVICES_ENTRIES,
};

/// Most distinct issuers one customer's accounts may trust together.
pub const MAX_ISSUERS_PER_CUSTOMER: usize = 20;
/// Most rules one customer's accounts may have for any one issuer: the most a token of that
/// issuer is matched against within the customer.
pub const MAX_RULES_PER_ISSUER: usize = 200;

/// The customer-wide limits: with `policy` saved beside `others` (the customer's other
/// accounts' policies), its accounts trust at most [`MAX_ISSUERS_PER_CUSTOMER`] issuers and have
/// at most [`MAX_RULES_PER_ISSUER`] rules for each. The problem points at the first rule of
/// `policy` that goes over (`/rules/{i}/claims/iss`).
///
/// ```
/// use registry_domain::limits::{check_customer_budget, MAX_ISSUERS_PER_CUSTOMER};
/// use registry_domain::policy::Policy;
/// use serde_json::json;
///
/// let trusting = |iss: String| {
///     Policy::parse(&json!({"kind": "oidc", "rules": [
///         {"services": ["*"], "claims": {"iss": iss, "aud": "a", "sub": "s"}}
///     ]})).unwrap().policy
/// };
/// let others: Vec<Policy> = (0..MAX_ISSUERS_PER_CUSTOMER)
///     .map(|i| trusting(format!("https://idp{i}.example")))
///     .collect();
/// assert!(check_customer_budget(&trusting("https://idp0.example".into()), &others).is_ok());
/// let over = check_customer_budget(&trusting("https://new.example".into()), &others).unwrap_err();
/// assert_eq!(over.pointer, "/rules/0/claims/iss");
/// ```
pub fn check_customer_budget(policy: &Policy, others: &[Policy]) -> Result<(), Violation> {
    let mut rules_by_issuer: BTreeMap<&str, usize> = BTreeMap::new();
    for other in others {
        for (issuer, rules) in other.rules_per_issuer() {
            *rules_by_issuer.entry(issuer).or_default() += rules;
        }
    }
    for (index, issuer) in policy.rule_issuers() {
        let known = rules_by_issuer.len();
        let rules = rules_by_issuer.entry(issuer).or_default();
        if *rules == 0 && known >= MAX_ISSUERS_PER_CUSTOMER {
            return Err(Violation::new(
                format!("/rules/{index}/claims/iss"),
                format!(
                    "your service accounts trust {known} issuers already, the most one customer \
                     may trust; remove the rules of an issuer you no longer use first"
                ),
            ));
        }
        *rules += 1;
        if *rules > MAX_RULES_PER_ISSUER {
            return Err(Violation::new(
                format!("/rules/{index}/claims/iss"),
                format!(
                    "your service accounts have {MAX_RULES_PER_ISSUER} rules for {issuer:?} \
                     already, the most one customer may have for one issuer"
                ),
            ));
        }
    }
    Ok(())
}

/// The key a per-address limit counts a client under (docs/api.md, "Limits"): an IPv4 address
/// alone, an IPv4-mapped IPv6 address as that IPv4 address, any other IPv6 address by its /64 (one
/// home or one cloud instance gets a whole /64: counting single IPv6 addresses is no limit at all).
///
/// ```
/// use registry_domain::limits::rate_limit_key;
/// use std::net::IpAddr;
///
/// let key = |s: &str| rate_limit_key(s.parse::<IpAddr>().unwrap()).to_string();
/// assert_eq!(key("203.0.113.7"), "203.0.113.7");
/// assert_eq!(key("::ffff:203.0.113.7"), "203.0.113.7");
/// assert_eq!(key("2001:db8:1:2:aaaa:bbbb:cccc:dddd"), "2001:db8:1:2::");
/// ```
pub fn rate_limit_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => {
            let prefix = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(Ipv6Addr::from(prefix))
        }
    }
}
