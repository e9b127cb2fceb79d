//! Tenant suffixes and service subdomains.
//!
//! * A tenant suffix is 2–20 characters of `[a-z0-9]`, never `anon`. No `-`: a subdomain
//!   `{name}-{tenant}` must name its tenant unambiguously (with hyphens, tenant `acme`'s
//!   `api-foo` and tenant `foo-acme`'s `api` were the same subdomain, so one tenant could take
//!   over an issuer URL that the other's cloud trust policies still accept).
//! * A registered service's subdomain is `{name}-{tenant}`: `name` is random on `free`/`team`, and
//!   may be chosen (`serviceName`) on `business`/`enterprise`. The whole is at most 63 characters.
//! * An anonymous service's subdomain is `{random}-anon`.

use crate::customer::Plan;
use crate::ports::Randomness;

/// Length of a random registered service name.
pub const RANDOM_NAME_LEN: usize = 10;
/// Length of the random part of an anonymous subdomain.
pub const ANON_RANDOM_LEN: usize = 16;
/// The suffix that marks anonymous services.
pub const ANON_SUFFIX: &str = "-anon";
/// Longest DNS label.
pub const MAX_LABEL_LEN: usize = 63;

/// A name that breaks the naming rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NamingError {
    /// The tenant suffix is not acceptable.
    #[error("tenant suffix {0:?} is invalid: use 2 to 20 characters of a-z and 0-9 (no '-', so that a subdomain names its tenant unambiguously), and not 'anon'")]
    InvalidTenant(String),
    /// `serviceName` is not a DNS label, or makes the subdomain too long.
    #[error("serviceName {name:?} is invalid: {reason}")]
    InvalidServiceName {
        /// The name as sent.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `serviceName` is `anon` or ends in `-anon`: reserved, so that nothing but an anonymous
    /// service looks like one.
    #[error(
        "serviceName {0:?} is reserved: 'anon' and names ending in '-anon' mark anonymous services"
    )]
    ReservedSuffix(String),
    /// The customer's plan does not allow choosing a name.
    #[error("choosing serviceName requires the business or enterprise plan (current plan: {0})")]
    PlanRequired(Plan),
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_LABEL_LEN
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Checks a tenant suffix.
///
/// ```
/// use registry_domain::naming::validate_tenant;
/// assert!(validate_tenant("acme").is_ok());
/// assert!(validate_tenant("a").is_err());
/// assert!(validate_tenant("anon").is_err());
/// assert!(validate_tenant("foo-acme").is_err());
/// ```
pub fn validate_tenant(tenant: &str) -> Result<(), NamingError> {
    let ok = (2..=20).contains(&tenant.len())
        && tenant
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && tenant != "anon";
    if ok {
        Ok(())
    } else {
        Err(NamingError::InvalidTenant(tenant.to_owned()))
    }
}

/// `len` random characters of `[a-z0-9]`, uniformly distributed.
///
/// ```
/// # struct Fixed; impl registry_domain::ports::Randomness for Fixed {
/// #     fn fill_bytes(&self, b: &mut [u8]) { b.fill(7) } }
/// let label = registry_domain::naming::random_label(&Fixed, 10);
/// assert_eq!(label, "hhhhhhhhhh");
/// ```
pub fn random_label(rng: &dyn Randomness, len: usize) -> String {
    const ALPHABET: &[u8; 36] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    // 252 is the largest multiple of 36 below 256: rejecting bytes above it keeps the choice uniform.
    const LIMIT: u8 = 252;
    let mut out = String::with_capacity(len);
    let mut buf = [0u8; 64];
    while out.len() < len {
        rng.fill_bytes(&mut buf);
        for &b in buf.iter().filter(|&&b| b < LIMIT) {
            if out.len() == len {
                break;
            }
            out.push(ALPHABET[(b % 36) as usize] as char);
        }
    }
    out
}

/// The subdomain a new registered service gets.
///
/// `service_name` is the requested `serviceName` (folded to lower case); without it the name is
/// random.
///
/// ```
/// use registry_domain::{naming::{registered_subdomain, NamingError}, Plan};
/// # struct Fixed; impl registry_domain::ports::Randomness for Fixed {
/// #     fn fill_bytes(&self, b: &mut [u8]) { b.fill(0) } }
/// assert_eq!(registered_subdomain(Plan::Business, "acme", Some("Api"), &Fixed).unwrap(), "api-acme");
/// assert_eq!(registered_subdomain(Plan::Free, "acme", None, &Fixed).unwrap(), "aaaaaaaaaa-acme");
/// assert_eq!(
///     registered_subdomain(Plan::Team, "acme", Some("api"), &Fixed),
///     Err(NamingError::PlanRequired(Plan::Team))
/// );
/// ```
pub fn registered_subdomain(
    plan: Plan,
    tenant: &str,
    service_name: Option<&str>,
    rng: &dyn Randomness,
) -> Result<String, NamingError> {
    let Some(requested) = service_name else {
        return Ok(format!("{}-{tenant}", random_label(rng, RANDOM_NAME_LEN)));
    };
    if !plan.may_choose_service_name() {
        return Err(NamingError::PlanRequired(plan));
    }
    check_service_name(requested)?;
    let subdomain = format!("{}-{tenant}", requested.to_ascii_lowercase());
    // Paths take a service's id wherever they take its subdomain: a subdomain that reads as an
    // id could name another customer's service, and its owner could never reach it by name.
    if uuid::Uuid::try_parse(&subdomain).is_ok() {
        return Err(NamingError::InvalidServiceName {
            name: requested.to_owned(),
            reason: format!(
                "the subdomain {subdomain:?} would read as a service id (a UUID), which paths \
                 take in its place"
            ),
        });
    }
    if subdomain.len() > MAX_LABEL_LEN {
        return Err(NamingError::InvalidServiceName {
            name: requested.to_owned(),
            reason: format!(
                "the subdomain {subdomain:?} would be longer than {MAX_LABEL_LEN} characters"
            ),
        });
    }
    Ok(subdomain)
}

/// The rules of a requested `serviceName` that hold whatever the tenant and plan: a DNS label
/// once folded to lower case, and not a reserved name. A request body can be checked with this
/// before anything is read from storage; [`registered_subdomain`] applies it too.
///
/// ```
/// use registry_domain::naming::{check_service_name, NamingError};
/// assert!(check_service_name("Api-2").is_ok());
/// assert!(matches!(check_service_name("api_2"), Err(NamingError::InvalidServiceName { .. })));
/// assert!(matches!(check_service_name("web-anon"), Err(NamingError::ReservedSuffix(_))));
/// assert!(matches!(check_service_name("xn--abc"), Err(NamingError::InvalidServiceName { .. })));
/// assert!(check_service_name("a--b").is_ok());
/// ```
pub fn check_service_name(requested: &str) -> Result<(), NamingError> {
    let name = requested.to_ascii_lowercase();
    if !is_dns_label(&name) {
        return Err(NamingError::InvalidServiceName {
            name: requested.to_owned(),
            reason: "use a-z, 0-9 and '-', starting and ending with a letter or digit, at most 63 \
                     characters"
                .to_owned(),
        });
    }
    // The subdomain starts with the name: a label with "--" as its third and fourth characters
    // is IDNA's (`xn--…`, RFC 5891 §4.2.3.1), and URL parsers refuse one that does not decode.
    if name.get(2..4) == Some("--") {
        return Err(NamingError::InvalidServiceName {
            name: requested.to_owned(),
            reason: "'--' as the third and fourth characters is reserved for internationalized \
                     names (as in 'xn--'), which URL parsers check"
                .to_owned(),
        });
    }
    if name == "anon" || name.ends_with(ANON_SUFFIX) {
        return Err(NamingError::ReservedSuffix(requested.to_owned()));
    }
    Ok(())
}

/// A new anonymous subdomain: `{random}-anon`.
///
/// ```
/// # struct Fixed; impl registry_domain::ports::Randomness for Fixed {
/// #     fn fill_bytes(&self, b: &mut [u8]) { b.fill(1) } }
/// let s = registry_domain::naming::anonymous_subdomain(&Fixed);
/// assert!(s.ends_with("-anon") && s.len() >= 12 + 5);
/// ```
pub fn anonymous_subdomain(rng: &dyn Randomness) -> String {
    format!("{}{ANON_SUFFIX}", random_label(rng, ANON_RANDOM_LEN))
}

/// Whether a subdomain is an anonymous one.
pub fn is_anonymous_subdomain(subdomain: &str) -> bool {
    subdomain.ends_with(ANON_SUFFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Counter(std::sync::atomic::AtomicU8);
    impl Randomness for Counter {
        fn fill_bytes(&self, b: &mut [u8]) {
            for x in b {
                *x = self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    #[test]
    fn tenant_rules() {
        for ok in ["ac", "acme", "x1", "1a", "abcdefghijklmnopqrst"] {
            assert!(validate_tenant(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "a",
            "anon",
            "x-anon",
            "a-b",
            "foo-acme",
            "-ab",
            "ab-",
            "Acme",
            "a_b",
            "a.b",
            "abcdefghijklmnopqrstu",
        ] {
            assert!(validate_tenant(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn random_labels_use_the_whole_alphabet_and_skip_biased_bytes() {
        let rng = Counter(std::sync::atomic::AtomicU8::new(0));
        let label = random_label(&rng, 300);
        assert_eq!(label.len(), 300);
        for c in "abcdefghijklmnopqrstuvwxyz0123456789".chars() {
            assert!(label.contains(c), "{c}");
        }
    }

    #[test]
    fn service_name_rules() {
        let rng = Counter(std::sync::atomic::AtomicU8::new(0));
        let ok = |n: &str| registered_subdomain(Plan::Enterprise, "acme", Some(n), &rng);
        assert_eq!(ok("my-api").unwrap(), "my-api-acme");
        assert!(matches!(
            ok("-x"),
            Err(NamingError::InvalidServiceName { .. })
        ));
        assert!(matches!(
            ok("a_b"),
            Err(NamingError::InvalidServiceName { .. })
        ));
        assert!(matches!(
            ok(""),
            Err(NamingError::InvalidServiceName { .. })
        ));
        assert!(matches!(ok("x-anon"), Err(NamingError::ReservedSuffix(_))));
        // A subdomain that reads as a service id, whatever the case.
        let hex = |n: &str| registered_subdomain(Plan::Enterprise, "bec75d012409", Some(n), &rng);
        for id_like in ["16d94391-3aa0-4eba-8923", "16D94391-3AA0-4EBA-8923"] {
            let refused = hex(id_like).unwrap_err().to_string();
            assert!(refused.contains("service id"), "{refused}");
        }
        assert!(hex("16d94391-3aa0-4eba").is_ok());
        assert!(matches!(
            ok(&"a".repeat(59)),
            Err(NamingError::InvalidServiceName { .. })
        ));
        assert_eq!(ok(&"a".repeat(58)).unwrap().len(), MAX_LABEL_LEN);
        let random = registered_subdomain(Plan::Free, "acme", None, &rng).unwrap();
        assert_eq!(random.len(), RANDOM_NAME_LEN + 5);
        assert!(random.ends_with("-acme"));
    }
}
