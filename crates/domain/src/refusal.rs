//! The refusal log (docs/api.md, "Explaining refusals"): a federated request refused after its
//! signature verified is recorded for the owner of the accounts that trust its issuer, so that they
//! can find out why a 401 said nothing. Never the token; only the claims the owner's rules look at.
//!
//! Anyone can hold a genuine token of a shared issuer (any repository's workflow gets one of
//! GitHub's, with the `aud` it asks for), so the log sorts each refusal into one of two classes
//! with a budget and a retention of their own: near misses of the account's own
//! rules ([`is_near_miss`]), which outsiders cannot produce, and the rest.

use crate::policy::{Action, Policy, ReasonCode};
use crate::timestamp::rfc3339;
use serde_json::{json, Map, Value};
use std::net::IpAddr;
use time::OffsetDateTime;
use uuid::Uuid;

/// Refusals kept per account and class (near misses, others): the newest of each, so that the
/// log holds at most twice this many.
pub const KEPT_PER_ACCOUNT: usize = 100;
/// How long a refusal is kept.
pub const KEPT_FOR: time::Duration = time::Duration::days(7);

/// The customer whose accounts record a refusal: the owner of the service in the path; else the
/// customer of the account the client chose (`X-Service-Account`); else the one customer whose
/// accounts trust the token's issuer. `None` when several do: one customer never sees a token
/// meant for another.
///
/// ```
/// use registry_domain::refusal::recording_customer;
/// use uuid::Uuid;
/// let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
/// assert_eq!(recording_customer(Some(a), None, &[b]), Some(a));
/// assert_eq!(recording_customer(None, Some(b), &[a, b]), Some(b));
/// assert_eq!(recording_customer(None, None, &[a, a]), Some(a));
/// assert_eq!(recording_customer(None, None, &[a, b]), None);
/// ```
pub fn recording_customer(
    service_owner: Option<Uuid>,
    chosen_account_owner: Option<Uuid>,
    trusting_customers: &[Uuid],
) -> Option<Uuid> {
    if let Some(owner) = service_owner.or(chosen_account_owner) {
        return Some(owner);
    }
    let first = *trusting_customers.first()?;
    trusting_customers
        .iter()
        .all(|c| *c == first)
        .then_some(first)
}

/// What one refused request looked like.
#[derive(Debug, Clone, Copy)]
pub struct Refused<'a> {
    /// The verified token's claims.
    pub claims: &'a Map<String, Value>,
    /// The service in the path, if any.
    pub service: Option<&'a str>,
    /// The action the call needed.
    pub action: Action,
    /// The client's address.
    pub ip: IpAddr,
    /// What refused it.
    pub refused_by: RefusedBy,
    /// The request's id.
    pub request_id: Option<&'a str>,
    /// When.
    pub at: OffsetDateTime,
}

/// What refused a federated request whose token's signature verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusedBy {
    /// The policies of the accounts that trust its issuer.
    Policy,
    /// Several accounts accept the token and the client chose none.
    Ambiguity,
    /// A registered claim of the token, before any policy was asked: `token-expired`,
    /// `token-not-yet-valid`, `token-lifetime-too-long`, `claim-missing` or `audience-mismatch`.
    Claim(ReasonCode),
}

/// How much of a rule's `sub` pattern a token's `sub` must share to be a near miss of that rule
/// (see [`subject_anchor`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubjectAnchor<'a> {
    /// The pattern begins with a wildcard: it names no owner, so no `sub` is near by it.
    Nothing,
    /// The token's `sub` must begin with this text (ASCII case aside).
    Prefix(&'a str),
    /// The token's `sub` must be this text (ASCII case aside): the pattern has no wildcard and
    /// no owner segment to cut at.
    Exact(&'a str),
}

impl SubjectAnchor<'_> {
    /// Whether the token's `sub` shares the anchor. Case is ignored (ASCII only): an owner whose
    /// pattern differs from its tokens only in case is the near miss the hints are for, and the
    /// shared issuers' owner names are unique regardless of case.
    pub fn holds(&self, sub: &str) -> bool {
        match *self {
            SubjectAnchor::Nothing => false,
            SubjectAnchor::Prefix(prefix) => sub
                .as_bytes()
                .get(..prefix.len())
                .is_some_and(|head| head.eq_ignore_ascii_case(prefix.as_bytes())),
            SubjectAnchor::Exact(exact) => sub.eq_ignore_ascii_case(exact),
        }
    }
}

/// Separators of the subjects of shared issuers: GitHub `repo:owner/name:ref:…`, GitLab
/// `project_path:group/project:…`, Buildkite and Terraform Cloud `organization:name:…`, CircleCI
/// `org/id/project/…`.
fn is_separator(c: u8) -> bool {
    c == b':' || c == b'/'
}

/// The part of a `sub` pattern that names the token's owner, which a holder of a token of the
/// same issuer cannot choose: the pattern's literal prefix (the text before its first `*` or
/// `?`) through its second run of separators (`:` and `/`; a run such as `://` counts once),
/// because the subjects of shared issuers begin with a kind and an owner's name (GitHub
/// `repo:acme/`, GitLab `project_path:group/`, Terraform Cloud `organization:acme:`). With fewer
/// than two runs, the whole literal prefix (or the whole pattern, exactly, when it has no
/// wildcard); a pattern that begins with a wildcard anchors nothing.
///
/// ```
/// use registry_domain::refusal::{subject_anchor, SubjectAnchor};
///
/// let main = subject_anchor("repo:acme/infra:ref:refs/heads/main");
/// assert_eq!(main, SubjectAnchor::Prefix("repo:acme/"));
/// assert!(main.holds("repo:acme/infra:ref:refs/heads/release"));
/// assert!(main.holds("repo:acme/infra:environment:prod"));
/// assert!(!main.holds("repo:evil/x:ref:refs/heads/main"));
/// assert!(!main.holds("repo:acme-evil/infra:ref:refs/heads/main"));
/// assert_eq!(subject_anchor("sc://org/project/*"), SubjectAnchor::Prefix("sc://org/"));
/// assert_eq!(subject_anchor("1234*"), SubjectAnchor::Prefix("1234"));
/// assert_eq!(subject_anchor("user:42"), SubjectAnchor::Exact("user:42"));
/// assert_eq!(subject_anchor("*:ref:refs/heads/main"), SubjectAnchor::Nothing);
/// ```
pub fn subject_anchor(pattern: &str) -> SubjectAnchor<'_> {
    let literal_len = pattern.find(['*', '?']).unwrap_or(pattern.len());
    let literal = &pattern.as_bytes()[..literal_len];
    let mut runs = 0;
    for (i, &c) in literal.iter().enumerate() {
        let run_ends = is_separator(c) && literal.get(i + 1).is_none_or(|&n| !is_separator(n));
        if run_ends {
            runs += 1;
            if runs == 2 {
                return SubjectAnchor::Prefix(&pattern[..=i]);
            }
        }
    }
    match (literal_len, literal_len == pattern.len()) {
        (_, true) => SubjectAnchor::Exact(pattern),
        (0, false) => SubjectAnchor::Nothing,
        (_, false) => SubjectAnchor::Prefix(&pattern[..literal_len]),
    }
}

/// Whether a refusal of a token with `claims` is a near miss of `policy`'s rules, and so goes
/// to the class of the log that outsiders cannot fill (docs/api.md, "Explaining refusals"): a rule
/// with the token's exact `iss` accepts all its claims (the service or the address was refused), or
/// the token's `sub` shares the [`subject_anchor`] of such a rule's `sub` pattern. A holder of a
/// token of the same issuer who is not the owner (`repo:evil/…`, `repo:acme-evil/…`) is far.
///
/// ```
/// use registry_domain::policy::Policy;
/// use registry_domain::refusal::is_near_miss;
/// use serde_json::json;
///
/// let policy = Policy::parse(&json!({"kind": "oidc", "rules": [{"services": ["api-acme"],
///     "claims": {"iss": "https://ci", "aud": "registry", "sub": "repo:acme/infra:ref:refs/heads/main"}}]}))
///     .unwrap().policy;
/// let token = |iss: &str, sub: &str| json!({"iss": iss, "aud": "registry", "sub": sub});
/// let near = |claims: serde_json::Value| is_near_miss(&policy, claims.as_object().unwrap());
/// assert!(near(token("https://ci", "repo:acme/infra:ref:refs/heads/release")));
/// assert!(near(token("https://ci", "repo:acme/infra:ref:refs/heads/main"))); // another service
/// assert!(!near(token("https://ci", "repo:evil/x:ref:refs/heads/main")));
/// assert!(!near(token("https://ci", "repo:acme-evil/infra:ref:refs/heads/main")));
/// assert!(!near(token("https://other", "repo:acme/infra:ref:refs/heads/release")));
/// ```
pub fn is_near_miss(policy: &Policy, claims: &Map<String, Value>) -> bool {
    near_miss(policy, claims, || !policy.matching_rules(claims).is_empty())
}

/// [`is_near_miss`], told by `claims_accepted` whether a rule accepts every claim (a caller
/// that explained the refusal already knows, without matching again).
fn near_miss(
    policy: &Policy,
    claims: &Map<String, Value>,
    claims_accepted: impl FnOnce() -> bool,
) -> bool {
    shares_an_owner(policy, claims) || claims_accepted()
}

/// The second half of [`is_near_miss`]: the token's `sub` shares the [`subject_anchor`] of the
/// `sub` pattern of a rule with its `iss`. Cheap: no pattern is matched.
fn shares_an_owner(policy: &Policy, claims: &Map<String, Value>) -> bool {
    let Some(iss) = claims.get("iss").and_then(Value::as_str) else {
        return false;
    };
    let sub = claims.get("sub").and_then(Value::as_str);
    let rules = policy.document().get("rules").and_then(Value::as_array);
    sub.is_some_and(|sub| {
        rules
            .into_iter()
            .flatten()
            .filter_map(|rule| rule.get("claims"))
            .filter(|c| c.get("iss").and_then(Value::as_str) == Some(iss))
            .filter_map(|c| c.get("sub").and_then(Value::as_str))
            .any(|pattern| subject_anchor(pattern).holds(sub))
    })
}

/// The class a stored record belongs to: whether [`record`] found it a near miss.
///
/// ```
/// use serde_json::json;
/// assert!(registry_domain::refusal::is_near_record(&json!({"code": "claim-mismatch", "near": true})));
/// assert!(!registry_domain::refusal::is_near_record(&json!({"code": "claim-mismatch"})));
/// ```
pub fn is_near_record(record: &Value) -> bool {
    record.get("near").and_then(Value::as_bool) == Some(true)
}

/// The refusals an account's log shows: `records` (newest first, as kept: up to
/// [`KEPT_PER_ACCOUNT`] of each class) cut to the newest `max`, where far ones only fill the
/// places near misses leave, so that outsiders never crowd the owner's own refusals out of the
/// view either. The order stays newest first.
///
/// ```
/// use registry_domain::refusal::shown;
/// use serde_json::json;
/// let records: Vec<_> = (0..5)
///     .map(|n| json!({"n": n, "near": n == 4}))
///     .collect();
/// let kept: Vec<_> = shown(records, 2).iter().map(|r| r["n"].as_i64().unwrap()).collect();
/// assert_eq!(kept, [0, 4]);
/// ```
pub fn shown(records: Vec<Value>, max: usize) -> Vec<Value> {
    let near = records
        .iter()
        .filter(|r| is_near_record(r))
        .count()
        .min(max);
    let mut far_places = max - near;
    let mut near_places = near;
    records
        .into_iter()
        .filter(|record| {
            let places = if is_near_record(record) {
                &mut near_places
            } else {
                &mut far_places
            };
            let keep = *places > 0;
            *places = places.saturating_sub(1);
            keep
        })
        .collect()
}

/// Whether a reason is one a rule gives after it accepted every claim: the address, the action
/// or the service was refused, not the token.
fn left_by_an_accepting_rule(code: ReasonCode) -> bool {
    matches!(
        code,
        ReasonCode::AddressNotAllowed
            | ReasonCode::ActionNotAllowed
            | ReasonCode::ServiceNotAllowed
    )
}

/// How long after its `exp` a token a claim refused still counts as a near miss: a job whose
/// token just expired is the owner's, but an expired token copied out of a log may be replayed
/// by anyone for as long as its issuer keeps the key, and would crowd the owner's own refusals
/// out of the class outsiders cannot fill.
const NEAR_AFTER_EXPIRY: time::Duration = time::Duration::minutes(10);

/// Whether `refused` may be a near miss by its times: always, unless a claim refused it and it
/// was not issued within the last day (plus [`NEAR_AFTER_EXPIRY`]), or expired more than
/// [`NEAR_AFTER_EXPIRY`] ago. A token living too long is near for a day after its issue, not
/// until its far `exp`. Times are read as the claim checks read them.
fn lately_valid(refused: &Refused<'_>) -> bool {
    if !matches!(refused.refused_by, RefusedBy::Claim(_)) {
        return true;
    }
    let time = |name| crate::claims::seconds(refused.claims, name).ok().flatten();
    let (at, grace) = (
        refused.at.unix_timestamp(),
        NEAR_AFTER_EXPIRY.whole_seconds(),
    );
    let issued_lately = time("iat")
        .is_some_and(|iat| iat >= at - crate::claims::MAX_LIFETIME.whole_seconds() - grace);
    let expired_lately = time("exp").is_some_and(|exp| exp >= at - grace);
    issued_lately && expired_lately
}

/// The record of `refused` for an account with `policy`: `{at, code, rule?, hints, claims,
/// service?, ip, action, requestId, near}` (`near`: see [`is_near_miss`]; an ambiguous request is near,
/// the account's rules accept it). `None` when this account's policy admits the request (the
/// refusal was another account's business, or the client chose another), unless a claim of the
/// token refused it: then `rule` is the rule that would have admitted it, if one would.
pub fn record(policy: &Policy, refused: &Refused<'_>) -> Option<Value> {
    let service = crate::policy::judged_service(refused.service, Some(refused.action));
    let explained = policy.explain(
        Some(refused.claims),
        service,
        Some(refused.ip),
        refused.action,
    );
    let (code, rule) = match refused.refused_by {
        RefusedBy::Claim(code) => (code, explained.rule),
        RefusedBy::Ambiguity => (ReasonCode::AccountAmbiguous, explained.rule),
        RefusedBy::Policy if explained.allowed => return None,
        RefusedBy::Policy => {
            // The reason that decided: a rule that accepted every claim refused the address, the
            // action or the service; only when none did, the first rule's mismatch (the
            // explanation lists every rule's reasons, another rule's mismatch perhaps first).
            let decided = (explained.reasons.iter())
                .find(|r| left_by_an_accepting_rule(r.code))
                .or(explained.reasons.first())?;
            (decided.code, decided.rule)
        }
    };
    // A rule that accepted every claim admitted the request or left a refusal of the service or
    // the address: the explanation's matching says so, without matching again.
    let claims_accepted = || {
        explained.allowed || (explained.reasons.iter()).any(|r| left_by_an_accepting_rule(r.code))
    };
    let near = refused.refused_by == RefusedBy::Ambiguity
        || (lately_valid(refused) && near_miss(policy, refused.claims, claims_accepted));
    let mut shown = Map::new();
    for name in ["iss", "sub", "aud"]
        .into_iter()
        .chain(policy.claim_names())
    {
        if let Some(value) = refused.claims.get(name) {
            shown.insert(name.to_owned(), value.clone());
        }
    }
    let mut record = json!({
        "at": rfc3339(refused.at),
        "code": code.as_str(),
        "hints": explained.hints.iter().map(|h| json!({"rule": h.rule, "pointer": h.pointer,
            "message": h.message})).collect::<Vec<_>>(),
        "claims": shown,
        "ip": refused.ip.to_string(),
        "action": refused.action.as_str(),
        "requestId": refused.request_id,
        "near": near,
    });
    if let Some(rule) = rule {
        record["rule"] = rule.into();
    }
    // The service in the path, not the `"*"` a whole-customer call is judged on.
    if let Some(service) = refused.service {
        record["service"] = service.into();
    }
    Some(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_show_the_claims_rules_name_and_never_others() {
        let policy = Policy::parse(&json!({"kind": "oidc", "rules": [{"services": ["api-acme"],
            "claims": {"iss": "https://ci", "aud": "registry", "sub": "repo:acme/x:ref:main",
                       "repository_owner": "acme"}}]}))
        .unwrap()
        .policy;
        let claims = json!({"iss": "https://ci", "aud": "registry", "sub": "repo:acme/x:environment:prod",
            "repository_owner": "acme", "secret_claim": "s3cr3t"});
        let refused = Refused {
            claims: claims.as_object().unwrap(),
            service: Some("api-acme"),
            action: Action::ConfigRead,
            ip: "192.0.2.7".parse().unwrap(),
            refused_by: RefusedBy::Policy,
            request_id: Some("r1"),
            at: OffsetDateTime::UNIX_EPOCH,
        };
        let record = record(&policy, &refused).unwrap();
        assert_eq!(record["code"], "claim-mismatch");
        assert_eq!(record["rule"], 0);
        assert_eq!(record["service"], "api-acme");
        assert!(record["claims"].get("secret_claim").is_none());
        assert_eq!(record["claims"]["repository_owner"], "acme");
        assert!(record["hints"][0]["message"]
            .as_str()
            .unwrap()
            .contains("environment"));
        // An account that admits the request records nothing, unless it was ambiguous.
        let fine = json!({"iss": "https://ci", "aud": "registry", "sub": "repo:acme/x:ref:main",
            "repository_owner": "acme"});
        let admitted = Refused {
            claims: fine.as_object().unwrap(),
            ..refused
        };
        assert_eq!(record["near"], true, "the owner's repository: near");
        assert!(super::record(&policy, &admitted).is_none());
        let ambiguous = Refused {
            refused_by: RefusedBy::Ambiguity,
            ..admitted
        };
        assert_eq!(
            super::record(&policy, &ambiguous).unwrap()["code"],
            "account-ambiguous"
        );
    }

    /// The probe of the session's review: a token that rule 0 accepts, on a service rule 0 does
    /// not cover, beside a rule 1 whose subject it misses, is recorded as rule 0's refusal of
    /// the service (what decided), not as rule 1's mismatch.
    #[test]
    fn the_record_names_the_reason_that_decided() {
        let policy = oidc(json!([
            {"services": ["life-acme"], "claims": {"iss": "https://ci", "aud": "registry", "sub": "svcna"}},
            {"services": ["*"], "claims": {"iss": "https://ci", "aud": "registry", "sub": "other"}},
        ]));
        let claims = json!({"iss": "https://ci", "aud": "registry", "sub": "svcna"});
        let refused = Refused {
            claims: claims.as_object().unwrap(),
            service: Some("life2-acme"),
            action: Action::ServicesRead,
            ip: "192.0.2.7".parse().unwrap(),
            refused_by: RefusedBy::Policy,
            request_id: None,
            at: OffsetDateTime::UNIX_EPOCH,
        };
        let recorded = record(&policy, &refused).unwrap();
        assert_eq!(
            (recorded["code"].as_str(), recorded["rule"].as_u64()),
            (Some("service-not-allowed"), Some(0)),
            "{recorded}"
        );
    }

    /// A token its issuer signed but its times refused is recorded with its code and the rule
    /// that would have admitted it; near while it expired lately, far once it is an old token
    /// anyone may have copied from a log.
    #[test]
    fn a_token_refused_for_its_times_is_near_only_while_it_expired_lately() {
        let policy = oidc(json!([
            {"services": ["*"], "claims": {"iss": "https://ci", "aud": "registry", "sub": "repo:acme/x"}},
        ]));
        let at = OffsetDateTime::UNIX_EPOCH + time::Duration::days(30);
        let record_of = |iat: OffsetDateTime, exp: serde_json::Value| {
            let claims = json!({"iss": "https://ci", "aud": "registry", "sub": "repo:acme/x",
                "iat": iat.unix_timestamp(), "exp": exp});
            let refused = Refused {
                claims: claims.as_object().unwrap(),
                service: Some("api-acme"),
                action: Action::ServicesRead,
                ip: "192.0.2.7".parse().unwrap(),
                refused_by: RefusedBy::Claim(ReasonCode::TokenExpired),
                request_id: None,
                at,
            };
            record(&policy, &refused).unwrap()
        };
        let hours = |h: i64| at + time::Duration::hours(h);
        let stamp = |t: OffsetDateTime| json!(t.unix_timestamp());
        let five_minutes_ago = at - time::Duration::minutes(5);
        let lately = record_of(hours(-1), stamp(five_minutes_ago));
        assert_eq!(
            (lately["code"].as_str(), lately["rule"].as_u64()),
            (Some("token-expired"), Some(0))
        );
        assert_eq!(lately["near"], true, "{lately}");
        // A fraction of a second is a time as the checks read it.
        let fraction = json!(five_minutes_ago.unix_timestamp() as f64 + 0.5);
        assert_eq!(record_of(hours(-1), fraction)["near"], true);
        assert_eq!(record_of(hours(-3), stamp(hours(-2)))["near"], false);
        // Living too long: near for a day after its issue, whatever its far exp.
        assert_eq!(record_of(hours(0), stamp(hours(48)))["near"], true);
        assert_eq!(record_of(hours(-30), stamp(hours(48)))["near"], false);
        assert_eq!(record_of(hours(-1), json!(null))["near"], false, "no exp");
    }

    /// A call on no service (`GET /service-accounts`) is judged on `"*"`, but its record names
    /// no service: `service` is the service in the path.
    #[test]
    fn a_call_on_no_service_is_recorded_without_one() {
        let policy = oidc(json!([
            {"services": ["*"], "claims": {"iss": "https://ci", "aud": "registry", "sub": "me"}},
        ]));
        let claims = json!({"iss": "https://ci", "aud": "registry", "sub": "someone-else"});
        let refused = Refused {
            claims: claims.as_object().unwrap(),
            service: None,
            action: Action::AccountsRead,
            ip: "192.0.2.7".parse().unwrap(),
            refused_by: RefusedBy::Policy,
            request_id: None,
            at: OffsetDateTime::UNIX_EPOCH,
        };
        let recorded = record(&policy, &refused).unwrap();
        assert_eq!(recorded["code"], "claim-mismatch", "{recorded}");
        assert!(recorded.get("service").is_none(), "{recorded}");
    }

    fn oidc(rules: Value) -> Policy {
        Policy::parse(&json!({"kind": "oidc", "rules": rules}))
            .unwrap()
            .policy
    }

    fn near(policy: &Policy, claims: Value) -> bool {
        is_near_miss(policy, claims.as_object().unwrap())
    }

    #[test]
    fn anchors_cut_after_the_owner_segment_of_the_shared_issuers_subjects() {
        for (pattern, anchor) in [
            (
                "repo:acme/infra:ref:refs/heads/main",
                SubjectAnchor::Prefix("repo:acme/"),
            ),
            ("repo:acme/*", SubjectAnchor::Prefix("repo:acme/")),
            (
                "repo:acme/infra:environment:*",
                SubjectAnchor::Prefix("repo:acme/"),
            ),
            (
                "project_path:group/project:ref_type:branch:ref:main",
                SubjectAnchor::Prefix("project_path:group/"),
            ),
            (
                "organization:acme:project:p:workspace:w:run_phase:*",
                SubjectAnchor::Prefix("organization:acme:"),
            ),
            ("sc://org/project/conn", SubjectAnchor::Prefix("sc://org/")),
            ("repo:acme*", SubjectAnchor::Prefix("repo:acme")),
            ("repo:ac?e/x", SubjectAnchor::Prefix("repo:ac")),
            ("1234567890", SubjectAnchor::Exact("1234567890")),
            ("repo:acme", SubjectAnchor::Exact("repo:acme")),
            ("*", SubjectAnchor::Nothing),
            ("?x:y:z", SubjectAnchor::Nothing),
            ("", SubjectAnchor::Exact("")),
        ] {
            assert_eq!(subject_anchor(pattern), anchor, "{pattern}");
        }
        let exact = subject_anchor("repo:acme");
        assert!(exact.holds("REPO:Acme"));
        assert!(!exact.holds("repo:acme-evil"));
        assert!(!SubjectAnchor::Nothing.holds(""));
        // A cut inside a multi-byte character is no match, never a panic.
        assert!(!SubjectAnchor::Prefix("repo:é/").holds("repo:\u{e9}\u{301}"));
        assert!(SubjectAnchor::Prefix("repo:é/").holds("repo:é/x"));
    }

    #[test]
    fn outsiders_are_far_and_the_owners_own_refusals_near() {
        let policy = oidc(json!([
            {"services": ["api-acme"], "claims": {"iss": "https://gh", "aud": "registry",
                "sub": "repo:acme/infra:ref:refs/heads/main"}},
            {"services": ["*"], "claims": {"iss": "https://gl", "aud": "registry",
                "sub": "*", "namespace_path": "acme"}}
        ]));
        let gh = |sub: &str| json!({"iss": "https://gh", "aud": "registry", "sub": sub});
        assert!(near(&policy, gh("repo:acme/infra:ref:refs/heads/release")));
        assert!(near(&policy, gh("repo:acme/other:pull_request")));
        assert!(near(&policy, gh("repo:ACME/infra:ref:refs/heads/main")));
        let mut wrong_audience = gh("repo:acme/infra:ref:refs/heads/main");
        wrong_audience["aud"] = json!("sts.amazonaws.com");
        assert!(near(&policy, wrong_audience));
        for outsider in [
            "repo:evil/x:ref:refs/heads/main",
            "repo:acme-evil/infra:ref:refs/heads/main",
            "repo:acm/e/infra",
            "repo:acme",
            "",
        ] {
            assert!(!near(&policy, gh(outsider)), "{outsider}");
        }
        assert!(!near(
            &policy,
            json!({"iss": "https://gh", "aud": "registry", "sub": 7})
        ));
        assert!(!near(
            &policy,
            json!({"aud": "registry", "sub": "repo:acme/infra"})
        ));
        // The issuer is compared exactly, as the rules compare it.
        assert!(!near(
            &policy,
            json!({"iss": "https://gh/", "aud": "registry",
            "sub": "repo:acme/infra:ref:refs/heads/main"})
        ));
        // A rule whose sub is a wildcard names no owner: only tokens it accepts whole are near.
        let gl = |namespace: &str| {
            json!({"iss": "https://gl", "aud": "registry",
            "sub": "project_path:acme/x", "namespace_path": namespace})
        };
        assert!(near(&policy, gl("acme")));
        assert!(!near(&policy, gl("evil")));
    }

    #[test]
    fn refusals_of_tokens_the_rules_accept_are_near_whatever_their_subject() {
        let policy = Policy::parse(&json!({"kind": "oidc", "ip_allowlist": ["10.0.0.0/8"],
            "rules": [{"services": ["api-acme"], "claims": {"iss": "https://ci",
                "aud": "registry", "sub": "*", "repository_owner": "acme"}}]}))
        .unwrap()
        .policy;
        let claims = json!({"iss": "https://ci", "aud": "registry", "sub": "anything",
            "repository_owner": "acme"});
        let at = |ip: &str, service: &'static str| {
            let refused = Refused {
                claims: claims.as_object().unwrap(),
                service: Some(service),
                action: Action::ConfigRead,
                ip: ip.parse().unwrap(),
                refused_by: RefusedBy::Policy,
                request_id: None,
                at: OffsetDateTime::UNIX_EPOCH,
            };
            record(&policy, &refused).unwrap()
        };
        let outside = at("192.0.2.1", "api-acme");
        assert_eq!(outside["code"], "address-not-allowed");
        assert_eq!(outside["near"], true);
        let elsewhere = at("10.1.2.3", "web-acme");
        assert_eq!(elsewhere["code"], "service-not-allowed");
        assert_eq!(elsewhere["near"], true);
        assert!(is_near_record(&elsewhere));
        let stranger = json!({"iss": "https://ci", "aud": "registry", "sub": "anything",
            "repository_owner": "evil"});
        let refused = Refused {
            claims: stranger.as_object().unwrap(),
            service: Some("api-acme"),
            action: Action::ConfigRead,
            ip: "10.1.2.3".parse().unwrap(),
            refused_by: RefusedBy::Policy,
            request_id: None,
            at: OffsetDateTime::UNIX_EPOCH,
        };
        let far = record(&policy, &refused).unwrap();
        assert_eq!(far["near"], false);
        assert!(!is_near_record(&far));
    }
}
