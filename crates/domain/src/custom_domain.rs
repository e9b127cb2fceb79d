//! Custom domains (docs/api.md, "Custom domains"): a customer's own host serving a service's
//! documents under the issuer `https://<domain>`, once a TXT record proves the customer owns it
//! and a certificate has been obtained for it by ACME. This module holds the rules: which names
//! may be a custom domain, the DNS records a customer sets, and how a domain moves from
//! `verifying` to `active` (when to look again, when to give up, when to renew). Time is a
//! parameter everywhere.
//!
//! ```
//! use registry_domain::custom_domain::{CustomDomain, DomainStatus, Schedule};
//! use time::macros::datetime;
//! let t0 = datetime!(2026-11-28 10:00 UTC);
//! let schedule = Schedule::default();
//! let domain = CustomDomain::new(uuid::Uuid::nil(), "login.acme.com".into(), "token".into(), t0);
//! assert_eq!(domain.status, DomainStatus::Verifying);
//! // No TXT record yet: look again in 10 s, then less often.
//! let later = domain.checked(false, &schedule, t0);
//! assert_eq!(later.next_attempt_at, t0 + time::Duration::seconds(10));
//! // Found: the certificate is ordered at once.
//! let found = later.checked(true, &schedule, t0 + time::Duration::seconds(10));
//! assert_eq!(found.status, DomainStatus::Issuing);
//! ```

use crate::issuer::Issuers;
use crate::timestamp::rfc3339;
use crate::Violation;
use serde_json::{json, Value};
use time::{Duration, OffsetDateTime};
use uuid::Uuid;

/// The name under which the TXT record proving ownership is looked up: `_registry-challenge.`
/// then the domain.
pub const CHALLENGE_LABEL: &str = "_registry-challenge";

/// New orders (first certificates) one customer may place in an hour (docs/api.md, "Custom
/// domains").
pub const NEW_ORDERS_PER_CUSTOMER_HOUR: usize = 3;
/// Orders, renewals included, the registry's ACME account places in [`ACCOUNT_WINDOW`], at
/// most: below Let's Encrypt's 300 new orders per account per 3 hours, shared by every tenant.
pub const ORDERS_PER_ACCOUNT: usize = 250;
/// The period of [`ORDERS_PER_ACCOUNT`].
pub const ACCOUNT_WINDOW: Duration = Duration::hours(3);
/// How long an order the budget refuses waits before it asks again.
pub const BUDGET_WAIT: Duration = Duration::minutes(5);

/// How long one replica holds a domain's ordering lock: longer than an order may take (the ACME
/// adapter gives up on an order a minute before).
pub const ORDER_LOCK: Duration = Duration::minutes(5);

/// How long a domain's HTTP-01 answers are kept: a day is more than any order takes.
pub const CHALLENGE_KEPT: Duration = Duration::days(1);

/// The most HTTP-01 answers of one domain a replica reads at once (the newest): an order asks
/// for one, and a day holds few orders of a domain.
pub const MAX_CHALLENGES_READ: usize = 16;

/// How old a replica's read of a domain's HTTP-01 answers may be when it answers from it: the
/// reads of a host are at most one this often, whatever is asked, and an answer stored is seen
/// by every replica within it. The ACME adapter waits [`CHALLENGE_SETTLES`] after storing an
/// answer before it tells the server to validate.
pub const CHALLENGES_FRESH: std::time::Duration = std::time::Duration::from_secs(1);

/// How long the ACME adapter waits between storing an HTTP-01 answer and asking the server to
/// validate it: longer than [`CHALLENGES_FRESH`], so that no replica answers from a read that
/// came before the answer was stored.
pub const CHALLENGE_SETTLES: std::time::Duration = std::time::Duration::from_secs(2);

/// The last orders of the account's budget, which only renewals may take: renewals come first
/// (an active domain's certificate must not lapse for other tenants' first ones), also when new
/// orders keep the budget spent.
pub const RENEWALS_RESERVED: usize = 25;

/// Whether one more order fits the budget: a renewal (`renewal`) or a new order, given the
/// customer's new orders in the last hour and the account's orders in [`ACCOUNT_WINDOW`].
///
/// ```
/// use registry_domain::custom_domain::may_order;
/// assert!(may_order(false, 2, 10));
/// assert!(!may_order(false, 3, 10), "a customer's fourth new order in an hour");
/// assert!(may_order(true, 3, 10), "renewals are not the customer's new orders");
/// assert!(!may_order(false, 0, 225), "the budget's last 25 are the renewals'");
/// assert!(may_order(true, 0, 249));
/// assert!(!may_order(true, 0, 250), "the account's budget holds for everyone");
/// ```
pub fn may_order(renewal: bool, customer_new_orders: usize, account_orders: usize) -> bool {
    let room = match renewal {
        true => ORDERS_PER_ACCOUNT,
        false => ORDERS_PER_ACCOUNT - RENEWALS_RESERVED,
    };
    account_orders < room && (renewal || customer_new_orders < NEW_ORDERS_PER_CUSTOMER_HOUR)
}

/// The ACME problem type of an order refused for the server's rate limits (RFC 8555 §6.7).
pub const RATE_LIMITED: &str = "urn:ietf:params:acme:error:rateLimited";
/// How long an order refused with [`RATE_LIMITED`] waits.
pub const RATE_LIMITED_WAIT: Duration = Duration::hours(1);

/// The time an ACME problem detail names after "retry after " (`2026-11-29 10:25:00 UTC`), if
/// it names one.
fn retry_after_in(detail: &str) -> Option<OffsetDateTime> {
    let format =
        time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second] UTC");
    let (_, rest) = detail.split_once("retry after ")?;
    let text = rest.get(..23)?;
    time::PrimitiveDateTime::parse(text, format)
        .ok()
        .map(time::PrimitiveDateTime::assume_utc)
}

/// Failed orders of a domain's first certificate before the domain is `failed`.
pub const MAX_FAILED_ORDERS: u32 = 5;

/// The code of a claim another service proved first.
pub const DOMAIN_TAKEN: &str = "domain-taken";

/// Longest custom domain: its TXT record's name, `_registry-challenge.<domain>`, is a DNS name
/// too, and has at most 253 characters (RFC 1035).
pub const MAX_DOMAIN: usize = 253 - CHALLENGE_LABEL.len() - 1;

/// Where a custom domain stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DomainStatus {
    /// Waiting for the TXT record that proves ownership.
    Verifying,
    /// Owned; its certificate is being ordered (or an order failed and is retried).
    Issuing,
    /// Served, with its certificate.
    Active,
    /// The TXT record never came (72 hours): nothing more is tried.
    Failed,
}

impl DomainStatus {
    /// Its name in the API and the database.
    pub fn as_str(self) -> &'static str {
        match self {
            DomainStatus::Verifying => "verifying",
            DomainStatus::Issuing => "issuing",
            DomainStatus::Active => "active",
            DomainStatus::Failed => "failed",
        }
    }

    /// The status of a name [`DomainStatus::as_str`] gave.
    pub fn parse(name: &str) -> Option<DomainStatus> {
        [
            DomainStatus::Verifying,
            DomainStatus::Issuing,
            DomainStatus::Active,
            DomainStatus::Failed,
        ]
        .into_iter()
        .find(|s| s.as_str() == name)
    }
}

/// Why a domain is not (or no longer) progressing: `dns-not-verified` or `acme-order-failed`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainProblem {
    /// The code.
    pub code: String,
    /// A sentence (for an order, the ACME server's problem detail).
    pub message: String,
}

/// A domain's certificate as stored: the chain, its private key sealed under
/// `REGISTRY_DATA_KEY`, and what the API shows of it.
#[derive(Clone, PartialEq, Eq)]
pub struct DomainCertificate {
    /// The chain, leaf first (PEM).
    pub chain_pem: String,
    /// The leaf's private key, sealed (never stored in the clear).
    pub sealed_key: String,
    /// Not valid before.
    pub not_before: OffsetDateTime,
    /// Not valid after.
    pub not_after: OffsetDateTime,
    /// The issuer's name.
    pub issuer: String,
}

impl std::fmt::Debug for DomainCertificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DomainCertificate")
            .field("not_after", &self.not_after)
            .field("issuer", &self.issuer)
            .finish_non_exhaustive()
    }
}

impl DomainCertificate {
    /// When it is renewed: once two thirds of its lifetime have passed.
    pub fn renew_at(&self) -> OffsetDateTime {
        self.not_before + (self.not_after - self.not_before) * 2 / 3
    }
}

/// A service's custom domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomDomain {
    /// The service it serves.
    pub service_id: Uuid,
    /// The domain, lower case.
    pub domain: String,
    /// Where it stands.
    pub status: DomainStatus,
    /// The value the TXT record must hold.
    pub txt_token: String,
    /// When it was added.
    pub created_at: OffsetDateTime,
    /// When the worker next looks at it (the TXT record, an order, a renewal).
    pub next_attempt_at: OffsetDateTime,
    /// Looks or orders that failed in a row: the backoff.
    pub attempts: u32,
    /// Why it is failed, or why the last order failed.
    pub problem: Option<DomainProblem>,
    /// Its certificate, once there is one.
    pub certificate: Option<DomainCertificate>,
}

/// What the worker does for a domain due. The two kinds go on side by side, so that no order
/// (minutes, on a slow ACME server) holds back a TXT lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DomainWork {
    /// Looking up the TXT record of a claim being verified.
    Lookup,
    /// Ordering a certificate: a renewal (active) or a first one (issuing).
    Order,
}

impl DomainWork {
    /// The statuses of the domains with this work, in the order they are served.
    pub fn statuses(self) -> &'static [DomainStatus] {
        match self {
            DomainWork::Lookup => &[DomainStatus::Verifying],
            DomainWork::Order => &[DomainStatus::Active, DomainStatus::Issuing],
        }
    }
}

/// How often the worker looks again (docs/api.md, "Custom domains").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// The first interval between TXT lookups (10 s), doubling up to `longest_check`.
    pub first_check: Duration,
    /// The longest interval between TXT lookups (5 minutes).
    pub longest_check: Duration,
    /// How long ownership may take before the domain fails (72 hours).
    pub give_up_after: Duration,
    /// The first retry of a failed order (1 minute), doubling up to `longest_retry`.
    pub first_retry: Duration,
    /// The longest interval between orders (1 hour).
    pub longest_retry: Duration,
}

impl Default for Schedule {
    fn default() -> Self {
        Schedule {
            first_check: Duration::seconds(10),
            longest_check: Duration::minutes(5),
            give_up_after: Duration::hours(72),
            first_retry: Duration::minutes(1),
            longest_retry: Duration::hours(1),
        }
    }
}

/// `first` doubled `attempts` times, at most `longest`.
fn backoff(first: Duration, longest: Duration, attempts: u32) -> Duration {
    let factor = 2i32.saturating_pow(attempts.min(20));
    (first * factor).min(longest)
}

/// Checks a domain a customer asks for: a lower-case DNS name of at least two labels whose
/// last label is alphabetic, no IP address in any form a resolver reads as one (`127.0.0.1`,
/// `0x7f.1`, `0177.0.0.1`), no wildcard, no port, at most 253 characters, and neither the API's
/// host nor the issuers' base, nor a name under them or above them
/// ([`Issuers::refuses_custom_domain`]). The violation points at `/domain`.
///
/// ```
/// use registry_domain::custom_domain::check_domain;
/// use registry_domain::issuer::Issuers;
/// let issuers = Issuers::new("https://{subdomain}.oidc.example.com", "https://registry.example.com").unwrap();
/// assert!(check_domain("login.acme.com", &issuers).is_ok());
/// for bad in ["Login.acme.com", "acme", "*.acme.com", "acme.com:443", "a..b", "-a.com", "x.oidc.example.com",
///             "127.0.0.1", "0x7f.1", "login.acme.123", "example.com", "x.registry.example.com",
///             "https://login.acme.com", "::1", "[::1]"] {
///     assert_eq!(check_domain(bad, &issuers).unwrap_err().pointer, "/domain", "{bad}");
/// }
/// // The longest: 233 characters, so that `_registry-challenge.<domain>` has DNS's 253.
/// let longest = format!("{}.{}.{}.{}.com", "a".repeat(57), "b".repeat(57), "c".repeat(57), "d".repeat(55));
/// assert_eq!(longest.len(), 233);
/// assert!(check_domain(&longest, &issuers).is_ok());
/// assert!(check_domain(&format!("x{longest}"), &issuers).is_err());
/// ```
pub fn check_domain(domain: &str, issuers: &Issuers) -> Result<(), Violation> {
    let refuse = |why: String| Err(Violation::new("/domain", why));
    if domain.len() > MAX_DOMAIN {
        return refuse(format!(
            "a custom domain has at most {MAX_DOMAIN} characters: its TXT record's name, \
             {CHALLENGE_LABEL}.<domain>, is a DNS name of at most 253"
        ));
    }
    if domain.contains('*') {
        return refuse("a wildcard cannot be a custom domain: name one host".into());
    }
    if domain.contains("://") || domain.contains('/') {
        return refuse(format!(
            "{domain:?} is a URL: a custom domain is a host name alone, such as login.example.com"
        ));
    }
    let unbracketed = domain
        .trim_start_matches('[')
        .split(']')
        .next()
        .unwrap_or(domain);
    if unbracketed.parse::<std::net::Ipv6Addr>().is_ok() {
        return refuse(format!(
            "{domain:?} is an IP address: a custom domain is a DNS name"
        ));
    }
    if domain.contains(':') {
        return refuse("a domain has no port: relying parties reach it on 443".into());
    }
    let labels: Vec<&str> = domain.split('.').collect();
    let label_ok = |l: &&str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    // Before the label rules: `2130706433` is one label, and its answer should say why.
    if is_ipv4_literal(domain) {
        return refuse(format!(
            "{domain:?} is an IP address as a resolver reads it: a custom domain is a DNS name"
        ));
    }
    if labels.len() < 2 || !labels.iter().all(label_ok) {
        return refuse(format!(
            "{domain:?} is not a lower-case DNS name of at least two labels (letters, digits and \
             hyphens, such as login.example.com)"
        ));
    }
    // A top-level domain is letters: a numeric last label is how resolvers and URL parsers tell
    // an IPv4 address in one of its many spellings from a name.
    if !labels
        .last()
        .is_some_and(|tld| tld.bytes().all(|b| b.is_ascii_lowercase()))
    {
        return refuse(format!(
            "the last label of {domain:?} is not alphabetic: it is not a name on the public DNS"
        ));
    }
    match issuers.refuses_custom_domain(domain) {
        Some(why) => refuse(why),
        None => Ok(()),
    }
}

/// Whether `text` is an IPv4 address as `inet_aton` (and so most resolvers and URL parsers)
/// reads it: one to four parts separated by dots, each decimal, octal (a leading `0`) or
/// hexadecimal (`0x`): `127.0.0.1`, `0177.0.0.1`, `0x7f.1`, `2130706433`.
fn is_ipv4_literal(text: &str) -> bool {
    let part_ok = |part: &str| match part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
        Some(hex) => hex.bytes().all(|b| b.is_ascii_hexdigit()),
        None => !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()),
    };
    let parts: Vec<&str> = text.split('.').collect();
    parts.len() <= 4 && parts.into_iter().all(part_ok)
}

/// The order the worker serves the domains due in (docs/api.md, "Custom domains"), each with
/// its customer: renewals first, then new orders, then TXT lookups; within each, one domain of
/// each customer in turn (round-robin, each customer's in the order given), so that one
/// customer's many domains never delay another's.
///
/// ```
/// use registry_domain::custom_domain::{in_fair_order, CustomDomain};
/// use time::macros::datetime;
/// let at = datetime!(2026-11-28 10:00 UTC);
/// let claim = |name: &str| CustomDomain::new(uuid::Uuid::new_v4(), name.into(), "t".into(), at);
/// let (greedy, other) = (Some(uuid::Uuid::from_u128(1)), Some(uuid::Uuid::from_u128(2)));
/// let due = vec![(claim("a1.x.com"), greedy), (claim("a2.x.com"), greedy),
///                (claim("a3.x.com"), greedy), (claim("b.y.com"), other)];
/// let names: Vec<String> = in_fair_order(due).into_iter().map(|d| d.domain).collect();
/// assert_eq!(names, ["a1.x.com", "b.y.com", "a2.x.com", "a3.x.com"]);
/// ```
pub fn in_fair_order(due: Vec<(CustomDomain, Option<Uuid>)>) -> Vec<CustomDomain> {
    let class = |d: &CustomDomain| match d.status {
        DomainStatus::Active => 0,
        DomainStatus::Issuing => 1,
        DomainStatus::Verifying | DomainStatus::Failed => 2,
    };
    let mut ordered = Vec::with_capacity(due.len());
    for rank in 0..3 {
        // Each customer's queue, customers in the order they first come.
        let mut queues: Vec<(Option<Uuid>, std::collections::VecDeque<CustomDomain>)> = Vec::new();
        for (domain, customer) in due.iter().filter(|(d, _)| class(d) == rank) {
            match queues.iter_mut().find(|(c, _)| c == customer) {
                Some((_, queue)) => queue.push_back(domain.clone()),
                None => queues.push((*customer, [domain.clone()].into())),
            }
        }
        while !queues.is_empty() {
            for (_, queue) in &mut queues {
                ordered.extend(queue.pop_front());
            }
            queues.retain(|(_, queue)| !queue.is_empty());
        }
    }
    ordered
}

impl CustomDomain {
    /// A domain just added at `now`, waiting for its TXT record to hold `txt_token`.
    pub fn new(service_id: Uuid, domain: String, txt_token: String, now: OffsetDateTime) -> Self {
        CustomDomain {
            service_id,
            domain,
            status: DomainStatus::Verifying,
            txt_token,
            created_at: now,
            next_attempt_at: now,
            attempts: 0,
            problem: None,
            certificate: None,
        }
    }

    /// The issuer it serves: `https://<domain>`, never with a port.
    pub fn issuer(&self) -> String {
        format!("https://{}", self.domain)
    }

    /// The name the TXT record is looked up under.
    pub fn challenge_name(&self) -> String {
        format!("{CHALLENGE_LABEL}.{}", self.domain)
    }

    /// Whether its next order is a renewal: it has a certificate.
    pub fn renews(&self) -> bool {
        self.certificate.is_some()
    }

    /// The domain with its next order put off until `until` (the budget is spent): nothing
    /// failed, no attempt counted.
    pub fn postponed(mut self, until: OffsetDateTime) -> Self {
        self.next_attempt_at = self.next_attempt_at.max(until);
        self
    }

    /// Whether its service holds the name: proven by its TXT record (issuing or active). Until
    /// then it is a claim, and other services may claim the name too.
    pub fn is_held(&self) -> bool {
        matches!(self.status, DomainStatus::Issuing | DomainStatus::Active)
    }

    /// Whether this domain (as stored now) is still `was`, as a step of the worker read it:
    /// the same name, status, TXT token, next attempt (to the millisecond) and attempt count.
    /// Anything else means another step, or the owner, changed it meanwhile.
    pub fn is_still(&self, was: &CustomDomain) -> bool {
        let ms = |t: OffsetDateTime| t.unix_timestamp_nanos() / 1_000_000;
        self.service_id == was.service_id
            && self.domain == was.domain
            && self.status == was.status
            && self.txt_token == was.txt_token
            && ms(self.next_attempt_at) == ms(was.next_attempt_at)
            && self.attempts == was.attempts
    }

    /// Whether a service's domain now (`current`) is still the one a request read (`was`;
    /// `None`: it had none then, or has none now).
    pub fn still_as_read(current: Option<&CustomDomain>, was: Option<&CustomDomain>) -> bool {
        match (current, was) {
            (None, None) => true,
            (Some(current), Some(was)) => current.is_still(was),
            _ => false,
        }
    }

    /// Whether its documents are served now: active, with a certificate.
    pub fn is_served(&self) -> bool {
        self.status == DomainStatus::Active && self.certificate.is_some()
    }

    /// After a TXT lookup at `now` that found the token (`found`) or not.
    pub fn checked(mut self, found: bool, schedule: &Schedule, now: OffsetDateTime) -> Self {
        if found {
            self.status = DomainStatus::Issuing;
            self.attempts = 0;
            self.next_attempt_at = now;
            self.problem = None;
        } else if now - self.created_at >= schedule.give_up_after {
            self.status = DomainStatus::Failed;
            self.problem = Some(DomainProblem {
                code: "dns-not-verified".into(),
                message: format!(
                    "no TXT record {} holding the token was found within {} hours",
                    self.challenge_name(),
                    schedule.give_up_after.whole_hours()
                ),
            });
        } else {
            let wait = backoff(schedule.first_check, schedule.longest_check, self.attempts);
            self.attempts = self.attempts.saturating_add(1);
            self.next_attempt_at = (now + wait).min(self.created_at + schedule.give_up_after);
        }
        self
    }

    /// After an order at `now`: its certificate (`Ok`), or why it failed (`Err`, retried with
    /// backoff; an active domain keeps serving the certificate it has).
    pub fn ordered(
        mut self,
        outcome: Result<DomainCertificate, String>,
        schedule: &Schedule,
        now: OffsetDateTime,
    ) -> Self {
        match outcome {
            Ok(certificate) => {
                self.status = DomainStatus::Active;
                self.attempts = 0;
                self.problem = None;
                self.next_attempt_at = certificate.renew_at();
                self.certificate = Some(certificate);
            }
            // The ACME server's own limit: no failure of the domain's, and retrying sooner
            // only spends the shared account's budget. The ACME client does not hand over the
            // answer's Retry-After header; the time its problem detail names when it names one
            // (Let's Encrypt's "retry after 2026-11-29 10:25:00 UTC"), else an hour.
            Err(message) if message.contains(RATE_LIMITED) => {
                let named = retry_after_in(&message).filter(|at| *at > now);
                self.next_attempt_at = named.unwrap_or(now + RATE_LIMITED_WAIT);
                self.problem = Some(DomainProblem {
                    code: "acme-order-failed".into(),
                    message,
                });
            }
            Err(message) => {
                let wait = backoff(schedule.first_retry, schedule.longest_retry, self.attempts);
                self.attempts = self.attempts.saturating_add(1);
                self.next_attempt_at = now + wait;
                // A first certificate that keeps failing stops costing every tenant's ACME
                // budget until its owner asks again (a PUT); a renewal keeps trying, the domain
                // served with its certificate meanwhile.
                if self.status == DomainStatus::Issuing && self.attempts >= MAX_FAILED_ORDERS {
                    self.status = DomainStatus::Failed;
                }
                self.problem = Some(DomainProblem {
                    code: "acme-order-failed".into(),
                    message,
                });
            }
        }
        self
    }

    /// Whether the worker has something to do for it at `now`: look for the TXT record, order,
    /// or renew.
    pub fn is_due(&self, now: OffsetDateTime) -> bool {
        self.status != DomainStatus::Failed && self.next_attempt_at <= now
    }

    /// The answer of `GET /services/{s}/domain` (and of the PUT): the domain, its status, the
    /// records to set (`issuer_host`: the service's issuer host, the CNAME's target), the
    /// certificate once there is one, the problem when there is one.
    pub fn view(&self, issuer_host: &str) -> Value {
        let mut view = json!({
            "domain": self.domain,
            "status": self.status.as_str(),
            "records": [
                {"type": "CNAME", "name": self.domain, "value": issuer_host},
                {"type": "TXT", "name": self.challenge_name(), "value": self.txt_token},
            ],
        });
        if let Some(certificate) = &self.certificate {
            view["certificate"] = json!({
                "notBefore": rfc3339(certificate.not_before),
                "notAfter": rfc3339(certificate.not_after),
                "issuer": certificate.issuer,
            });
        }
        if let Some(problem) = &self.problem {
            view["error"] = json!({"code": problem.code, "message": problem.message});
        }
        view
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_certificate_failing_five_times_fails_the_domain_and_a_renewal_keeps_trying() {
        let t0 = time::macros::datetime!(2026-11-28 10:00 UTC);
        let schedule = Schedule::default();
        let mut domain = CustomDomain::new(Uuid::nil(), "login.acme.com".into(), "t".into(), t0)
            .checked(true, &schedule, t0);
        for i in 1..=MAX_FAILED_ORDERS {
            assert_eq!(domain.status, DomainStatus::Issuing, "before failure {i}");
            domain = domain.ordered(Err("rejected".into()), &schedule, t0);
        }
        assert_eq!(domain.status, DomainStatus::Failed);
        assert_eq!(domain.problem.unwrap().code, "acme-order-failed");
        let mut active = CustomDomain {
            status: DomainStatus::Active,
            ..CustomDomain::new(Uuid::nil(), "login.acme.com".into(), "t".into(), t0)
        };
        for _ in 0..10 {
            active = active.ordered(Err("rejected".into()), &schedule, t0);
        }
        assert_eq!(active.status, DomainStatus::Active);
        // Refused for the server's rate limit: an hour's wait, no attempt counted.
        let issuing = CustomDomain::new(Uuid::nil(), "a.acme.com".into(), "t".into(), t0)
            .checked(true, &schedule, t0);
        let limited = format!("new order: {RATE_LIMITED}: too many new orders recently");
        let waiting = issuing.clone().ordered(Err(limited), &schedule, t0);
        assert_eq!(
            (waiting.status, waiting.attempts),
            (DomainStatus::Issuing, 0)
        );
        assert_eq!(waiting.next_attempt_at, t0 + RATE_LIMITED_WAIT);
        // The time the server names, when it names one.
        let named = format!(
            "new order: {RATE_LIMITED}: too many certificates (5) already issued for this \
             exact set of identifiers in the last 168h0m0s, retry after 2026-11-28 13:25:00 UTC: \
             see https://letsencrypt.org/docs/rate-limits/"
        );
        let waiting = issuing.ordered(Err(named), &schedule, t0);
        assert_eq!(
            waiting.next_attempt_at,
            time::macros::datetime!(2026-11-28 13:25 UTC)
        );
    }
    use time::macros::datetime;

    const T0: OffsetDateTime = datetime!(2026-11-28 10:00 UTC);

    fn added() -> CustomDomain {
        CustomDomain::new(Uuid::nil(), "login.acme.com".into(), "t0k3n".into(), T0)
    }

    fn certificate(days: i64) -> DomainCertificate {
        DomainCertificate {
            chain_pem: "chain".into(),
            sealed_key: "sealed".into(),
            not_before: T0,
            not_after: T0 + Duration::days(days),
            issuer: "CN=Pebble".into(),
        }
    }

    #[test]
    fn ip_literals_in_every_spelling_and_numeric_last_labels_are_refused() {
        let issuers = Issuers::new(
            "https://{subdomain}.oidc.example.com",
            "https://registry.example.com",
        )
        .unwrap();
        for bad in [
            "127.0.0.1",
            "169.254.169.254",
            "0x7f.1",
            "0x7f.0x0.0x0.0x1",
            "0177.0.0.1",
            "2130706433",
            "10.1",
            "0x0a000001",
            "login.acme.123",
            "login.acme.0x7f",
            "acme.c0m",
            "acme.co-m",
        ] {
            let refused = check_domain(bad, &issuers).unwrap_err();
            assert_eq!(refused.pointer, "/domain", "{bad}");
        }
        assert!(check_domain("127.0.0.1", &issuers)
            .unwrap_err()
            .message
            .contains("IP address"));
        for good in [
            "login.acme.com",
            "1.acme.com",
            "0x7f.acme.io",
            "123.example.org",
        ] {
            assert_eq!(check_domain(good, &issuers), Ok(()), "{good}");
        }
    }

    #[test]
    fn the_api_host_the_issuer_base_and_names_above_or_below_them_are_refused() {
        let issuers = Issuers::new(
            "https://{subdomain}.oidc.example.com",
            "https://api.registry.example.com:8443",
        )
        .unwrap();
        for bad in [
            "api.registry.example.com",
            "x.api.registry.example.com",
            "registry.example.com",
            "example.com",
            "oidc.example.com",
            "acme.oidc.example.com",
            "a.b.oidc.example.com",
        ] {
            assert_eq!(
                check_domain(bad, &issuers).unwrap_err().pointer,
                "/domain",
                "{bad}"
            );
        }
        for good in [
            "login.example.org",
            "xexample.com",
            "oidc.example.com.evil.net",
            "registry.example.net",
        ] {
            assert_eq!(check_domain(good, &issuers), Ok(()), "{good}");
        }
        // An issuer template with its subdomain inside a label: its base is the zone it is in.
        let dashed = Issuers::new(
            "https://{subdomain}-oidc.example.com",
            "https://registry.example.net",
        )
        .unwrap();
        for bad in [
            "acme-oidc.example.com",
            "example.com",
            "x.example.com",
            "x.registry.example.net",
            "example.net",
        ] {
            assert!(check_domain(bad, &dashed).is_err(), "{bad}");
        }
        assert_eq!(check_domain("login.example.org", &dashed), Ok(()));
    }

    /// A URL or an IPv6 address given as a domain is refused for what it is, not for a port.
    #[test]
    fn a_refused_domain_is_told_what_it_is() {
        let issuers = Issuers::new(
            "https://{subdomain}.oidc.example.com",
            "https://r.example.com",
        )
        .unwrap();
        for (bad, says) in [
            ("https://login.acme.com", "is a URL"),
            ("login.acme.com/x", "is a URL"),
            ("::1", "is an IP address"),
            ("[::1]", "is an IP address"),
            ("[::1]:443", "is an IP address"),
            ("::ffff:192.0.2.1", "is an IP address"),
            ("login.acme.com:8443", "no port"),
            ("localhost:8443", "no port"),
        ] {
            let refused = check_domain(bad, &issuers).unwrap_err();
            assert!(refused.message.contains(says), "{bad}: {}", refused.message);
        }
    }

    #[test]
    fn lookups_back_off_to_five_minutes_and_give_up_after_72_hours() {
        let schedule = Schedule::default();
        let mut domain = added();
        let mut waits = Vec::new();
        let mut now = T0;
        for _ in 0..8 {
            domain = domain.checked(false, &schedule, now);
            waits.push((domain.next_attempt_at - now).whole_seconds());
            now = domain.next_attempt_at;
        }
        assert_eq!(waits, [10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(domain.status, DomainStatus::Verifying);
        let late = domain.checked(false, &schedule, T0 + Duration::hours(72));
        assert_eq!(late.status, DomainStatus::Failed);
        assert_eq!(late.problem.as_ref().unwrap().code, "dns-not-verified");
        assert!(!late.is_due(T0 + Duration::days(9)));
        assert_eq!(late.view("x")["error"]["code"], "dns-not-verified");
    }

    #[test]
    fn an_order_activates_and_renews_at_two_thirds_and_a_failure_is_retried() {
        let schedule = Schedule::default();
        let issuing = added().checked(true, &schedule, T0);
        assert_eq!(
            (issuing.status, issuing.is_due(T0)),
            (DomainStatus::Issuing, true)
        );
        let failed = issuing.ordered(
            Err("urn:ietf:params:acme:error:connection".into()),
            &schedule,
            T0,
        );
        assert_eq!(failed.status, DomainStatus::Issuing);
        assert_eq!(failed.next_attempt_at, T0 + Duration::minutes(1));
        assert_eq!(failed.view("x")["error"]["code"], "acme-order-failed");
        let active = failed.ordered(Ok(certificate(90)), &schedule, T0);
        assert!(active.is_served() && active.problem.is_none());
        assert_eq!(active.next_attempt_at, T0 + Duration::days(60));
        let view = active.view("acme.oidc.example.com");
        assert_eq!(view["status"], "active");
        assert_eq!(view["certificate"]["issuer"], "CN=Pebble");
        assert_eq!(view["records"][0]["value"], "acme.oidc.example.com");
        assert_eq!(
            view["records"][1]["name"],
            "_registry-challenge.login.acme.com"
        );
        assert_eq!(view["records"][1]["value"], "t0k3n");
        // A failed renewal keeps the certificate served.
        let renewing = active.ordered(Err("down".into()), &schedule, T0 + Duration::days(60));
        assert!(renewing.is_served());
    }
}
