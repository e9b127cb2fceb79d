//! Whether a new version of a policy admits a request the old one refuses: what the
//! review of a policy change needs.
//!
//! Two halves, each sound on its own. The proof: every rule of the new policy is subsumed by
//! rules of the old one (same issuer; each claim the old rule checks, the new one checks with a
//! pattern whose values all match the old pattern; the new rule's services inside the old
//! rules'), and the new `ip_allowlist` lies inside the old one. The search: requests built from
//! the new policy's own patterns and address ranges, each kept only when [`Policy::evaluate`]
//! allows it under the new policy and refuses it under the old. A witness is a widening; a proof
//! is `narrower-or-equal`; neither is `undetermined`.
//!
//! Pattern subsumption is decided on the patterns' text: the old pattern must match the new one
//! read as a string of literal characters, `?` and `*` (an old `*` takes any run of them, an old
//! `?` any one character or `?`). That is exact for literal and prefix or suffix patterns, and
//! on the safe side otherwise (`?*` against `*?` is not proven).

use super::{Action, Actions, Policy, PolicyKind};
use ipnetwork::IpNetwork;
use serde_json::{json, Map, Value};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The answer of [`compare`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CompareResult {
    /// Proven: the new policy admits no request the old one refuses.
    NarrowerOrEqual,
    /// The new policy admits a request the old one refuses; the witnesses show it.
    Widens,
    /// Neither proven nor disproven: review the change by hand.
    Undetermined,
}

impl CompareResult {
    /// `"narrower-or-equal"`, `"widens"` or `"undetermined"`.
    pub fn as_str(self) -> &'static str {
        match self {
            CompareResult::NarrowerOrEqual => "narrower-or-equal",
            CompareResult::Widens => "widens",
            CompareResult::Undetermined => "undetermined",
        }
    }
}

impl std::fmt::Display for CompareResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A request the new policy admits and the old one refuses, as [`Policy::evaluate`] decides.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Witness {
    /// The rule of the new policy that admits it (`None` for a static policy).
    pub rule: Option<usize>,
    /// The token's claims (`None`: a static token).
    pub claims: Option<Map<String, Value>>,
    /// The service the request acts on (`None`: a call on no one service, such as listing).
    pub service: Option<String>,
    /// The client's address, when either policy has an `ip_allowlist` (`None`: any address).
    pub ip: Option<IpAddr>,
    /// The action the request needs, when the difference lies in the actions (`None`: any
    /// action, not checked).
    pub action: Option<Action>,
}

impl Witness {
    /// `{rule, claims, service, ip?, action?}`.
    pub fn to_json(&self) -> Value {
        let mut value = json!({
            "rule": self.rule,
            "claims": self.claims,
            "service": self.service,
        });
        if let Some(ip) = self.ip {
            value["ip"] = ip.to_string().into();
        }
        if let Some(action) = self.action {
            value["action"] = action.as_str().into();
        }
        value
    }
}

/// What [`compare`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Comparison {
    /// The verdict.
    pub result: CompareResult,
    /// With [`CompareResult::Widens`], at least one request the new policy admits and the old
    /// one refuses (at most one per rule of the new policy, at most [`MAX_WITNESSES`]); empty
    /// otherwise.
    pub witnesses: Vec<Witness>,
    /// With [`CompareResult::Undetermined`], pointers into the new policy of what no proof
    /// covers (`/rules/2`, `/services`, `/ip_allowlist`, `/kind`); empty otherwise.
    pub unproven: Vec<String>,
}

impl Comparison {
    /// `{result, witnesses}`, the output of `registry policy compare --format json`.
    pub fn to_json(&self) -> Value {
        json!({
            "result": self.result.as_str(),
            "witnesses": self.witnesses.iter().map(Witness::to_json).collect::<Vec<_>>(),
        })
    }
}

/// The most witnesses [`compare`] reports.
pub const MAX_WITNESSES: usize = 10;

/// The work [`compare`] may spend on the proof, in units of about one step of the glob
/// inclusion test (one cell of its table).
const PROOF_BUDGET: u64 = 100_000_000;

/// The work [`compare`] may spend looking for witnesses, in the same units: a request costs
/// 16 units and one more for each 64 bytes of the two documents and of its claims (what
/// evaluating it under both policies can cost: their rules, services and address ranges).
pub(crate) const SEARCH_BUDGET: u64 = 10_000_000;

/// How much work passes between two calls of the hook of [`compare_with`].
const POLL_EVERY: u64 = 200_000;

/// The work [`compare`] may still do, and the caller's hook to stop it.
struct Budget<'a> {
    left: u64,
    unpolled: u64,
    keep_going: &'a mut dyn FnMut() -> bool,
    stopped: bool,
}

impl<'a> Budget<'a> {
    fn new(keep_going: &'a mut dyn FnMut() -> bool) -> Self {
        Budget {
            left: 0,
            unpolled: 0,
            keep_going,
            stopped: false,
        }
    }

    /// Starts a phase with `units` to spend.
    fn refill(&mut self, units: u64) {
        if !self.stopped {
            self.left = units;
        }
    }

    /// Spends `units`; `false` (and nothing is left) when they are not there or the hook asked
    /// to stop: the work must not be done.
    fn spend(&mut self, units: u64) -> bool {
        if self.stopped || units > self.left {
            self.left = 0;
            return false;
        }
        self.left -= units;
        self.unpolled += units;
        if self.unpolled >= POLL_EVERY {
            self.unpolled = 0;
            if !(self.keep_going)() {
                self.stopped = true;
                self.left = 0;
                return false;
            }
        }
        true
    }
}

/// Whether `new` admits a request `old` refuses: [`CompareResult::Widens`] with witnesses that
/// [`Policy::evaluate`] confirms (allowed by `new`, refused by `old`),
/// [`CompareResult::NarrowerOrEqual`] only when proven, [`CompareResult::Undetermined`]
/// otherwise.
///
/// ```
/// use registry_policy::{compare, CompareResult, Policy};
/// use serde_json::json;
///
/// let policy = |sub: &str, services: serde_json::Value| Policy::parse(&json!({"kind": "oidc",
///     "rules": [{"services": services,
///         "claims": {"iss": "https://ci.example", "aud": "registry", "sub": sub}}]}))
///     .unwrap().policy;
/// let old = policy("repo:acme/api:*", json!(["api-*"]));
///
/// // A narrower subject and fewer services: proven.
/// let narrower = policy("repo:acme/api:ref:refs/heads/main", json!(["api-acme"]));
/// assert_eq!(compare(&old, &narrower).result, CompareResult::NarrowerOrEqual);
///
/// // Every repository of acme: a token of another repository gets in.
/// let wider = compare(&old, &policy("repo:acme/*", json!(["api-*"])));
/// assert_eq!(wider.result, CompareResult::Widens);
/// let witness = &wider.witnesses[0];
/// assert_eq!(witness.rule, Some(0));
/// let claims = witness.claims.as_ref().unwrap();
/// assert!(!old.evaluate(Some(claims), witness.service.as_deref(), witness.ip, None).is_allowed());
/// assert_eq!(wider.to_json()["result"], "widens");
/// ```
///
/// The work is bounded (whatever the documents, it finishes within about a second): past its
/// budget, what is not proven is [`CompareResult::Undetermined`], never a wrong
/// `NarrowerOrEqual`.
pub fn compare(old: &Policy, new: &Policy) -> Comparison {
    compare_with(old, new, &mut || true)
}

/// [`compare`], asking `keep_going` now and then (every few milliseconds of work) whether to go
/// on: when it answers `false`, the comparison stops and answers what it found so far, at best
/// [`CompareResult::Undetermined`] unless a witness was found (a witness is always confirmed;
/// a proof is never cut short into `NarrowerOrEqual`). A caller that can be interrupted (the
/// Python module checks for signals) passes its check here.
///
/// ```
/// use registry_policy::{compare_with, CompareResult, Policy};
/// use serde_json::json;
///
/// let policy = |sub: &str| Policy::parse(&json!({"kind": "oidc", "rules": [{"services": ["*"],
///     "claims": {"iss": "https://ci.example", "aud": "registry", "sub": sub}}]}))
///     .unwrap().policy;
/// let mut asked = 0;
/// let mut keep_going = || { asked += 1; true };
/// let comparison = compare_with(&policy("repo:acme/*"), &policy("repo:acme/api"), &mut keep_going);
/// assert_eq!(comparison.result, CompareResult::NarrowerOrEqual);
/// ```
pub fn compare_with(
    old: &Policy,
    new: &Policy,
    keep_going: &mut dyn FnMut() -> bool,
) -> Comparison {
    let mut budget = Budget::new(keep_going);
    budget.refill(PROOF_BUDGET);
    let subsumed = subsumed_rules(old, new, &mut budget);
    budget.refill(SEARCH_BUDGET);
    let witnesses = search(old, new, &subsumed, &mut budget);
    if !witnesses.is_empty() {
        return Comparison {
            result: CompareResult::Widens,
            witnesses,
            unproven: Vec::new(),
        };
    }
    let unproven = unproven(old, new, &subsumed);
    Comparison {
        result: if unproven.is_empty() {
            CompareResult::NarrowerOrEqual
        } else {
            CompareResult::Undetermined
        },
        witnesses: Vec::new(),
        unproven,
    }
}

/// One OIDC rule as written: its issuer, its other claims' patterns, its services (lower case).
#[derive(Debug)]
struct RuleText<'a> {
    index: usize,
    issuer: &'a str,
    claims: Vec<(&'a str, &'a str)>,
    services: Vec<String>,
    actions: Actions,
}

fn rules_of(policy: &Policy) -> Vec<RuleText<'_>> {
    let rules = policy.document().get("rules").and_then(Value::as_array);
    rules
        .into_iter()
        .flatten()
        .enumerate()
        .filter_map(|(index, rule)| {
            let claims = rule.get("claims")?.as_object()?;
            Some(RuleText {
                index,
                issuer: claims.get("iss")?.as_str()?,
                claims: claims
                    .iter()
                    .filter(|(name, _)| name.as_str() != "iss")
                    .filter_map(|(name, p)| Some((name.as_str(), p.as_str()?)))
                    .collect(),
                services: services_of(rule.get("services")),
                actions: policy.rules_actions(&[index]),
            })
        })
        .collect()
}

fn services_of(list: Option<&Value>) -> Vec<String> {
    list.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_ascii_lowercase)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The proof.

/// For each rule of `new` (in the order of [`rules_of`]), whether the rules of `old` are proven
/// to admit every request it admits (its address aside); `false` when the budget ran out
/// first. For two static policies, one answer: whether the old `services` cover the new ones.
/// Empty otherwise.
fn subsumed_rules(old: &Policy, new: &Policy, budget: &mut Budget<'_>) -> Vec<bool> {
    match (old.kind(), new.kind()) {
        (PolicyKind::Oidc, PolicyKind::Oidc) => {}
        (PolicyKind::Static, PolicyKind::Static) => {
            let outer = services_of(old.document().get("services"));
            let inner = services_of(new.document().get("services"));
            return vec![inner.iter().all(|s| service_covered(&outer, s, budget))];
        }
        _ => return Vec::new(),
    }
    let old_rules = rules_of(old);
    rules_of(new)
        .iter()
        .map(|rule| rule_subsumed(&old_rules, rule, budget))
        .collect()
}

/// Pointers into `new` of what no proof covers; empty when `new` is proven narrower or equal.
/// `subsumed` is [`subsumed_rules`]'s answer.
fn unproven(old: &Policy, new: &Policy, subsumed: &[bool]) -> Vec<String> {
    let mut unproven = Vec::new();
    let ip_within = new.ip_allowlist().is_within(old.ip_allowlist());
    match (old.kind(), new.kind()) {
        (PolicyKind::Static, PolicyKind::Static) => {
            if !subsumed.first().copied().unwrap_or(false) {
                unproven.push("/services".to_owned());
            }
            if !old.actions().includes(new.actions()) {
                unproven.push("/actions".to_owned());
            }
            if !ip_within {
                unproven.push("/ip_allowlist".to_owned());
            }
        }
        (PolicyKind::Oidc, PolicyKind::Oidc) => {
            for (rule, subsumed) in rules_of(new).iter().zip(subsumed) {
                if !subsumed {
                    unproven.push(format!("/rules/{}", rule.index));
                }
            }
            // A policy that admits no token admits nothing from anywhere.
            if !ip_within && !rules_of(new).is_empty() {
                unproven.push("/ip_allowlist".to_owned());
            }
        }
        // Identity tokens where static tokens were: only a policy that admits none is proven.
        (PolicyKind::Static, PolicyKind::Oidc) if rules_of(new).is_empty() => {}
        _ => unproven.push("/kind".to_owned()),
    }
    unproven
}

/// Whether the rules of `old` admit every request `rule` admits (its address aside): for each
/// of its services, and for calls on no service, and for each of its actions, an old rule whose
/// claims cover `rule`'s, that covers the service and allows the action. (`"*"` is covered only
/// by `"*"`: the union of the old rules' actions must include `rule`'s.)
fn rule_subsumed(old: &[RuleText<'_>], rule: &RuleText<'_>, budget: &mut Budget<'_>) -> bool {
    let covering: Vec<&RuleText<'_>> = old
        .iter()
        .filter(|o| claims_cover(o, rule, budget))
        .collect();
    let union = |rules: &mut dyn Iterator<Item = &&RuleText<'_>>| {
        rules.fold(Actions::NONE, |all, o| all.union(o.actions))
    };
    union(&mut covering.iter()).includes(rule.actions)
        && rule.services.iter().all(|s| {
            union(
                &mut covering
                    .iter()
                    .filter(|o| service_covered(&o.services, s, budget)),
            )
            .includes(rule.actions)
        })
}

/// Whether every token `inner` accepts, `outer` accepts: the same issuer, and each claim
/// `outer` checks, `inner` checks with a pattern `outer` covers (a claim `inner` does not check
/// may be missing, which no pattern accepts).
fn claims_cover(outer: &RuleText<'_>, inner: &RuleText<'_>, budget: &mut Budget<'_>) -> bool {
    outer.issuer == inner.issuer
        && outer.claims.iter().all(|(name, pattern)| {
            inner
                .claims
                .iter()
                .any(|(n, p)| n == name && claim_pattern_covers(pattern, p, budget))
        })
}

/// Whether every claim value `inner` matches, `outer` matches: as strings, and a boolean
/// (which only an exact `true` or `false` matches) only if `outer` is that same word.
fn claim_pattern_covers(outer: &str, inner: &str, budget: &mut Budget<'_>) -> bool {
    if outer == inner {
        return true;
    }
    let boolean = matches!(inner, "true" | "false");
    !boolean && glob_covers(outer, inner, Wildcards::StarAndQuestion, budget)
}

/// The proof's coverage of patterns on its own budget, for the lint's shadowed rules: a
/// question it cannot afford to answer is answered `false` (no warning), never a guess.
pub(crate) struct Coverage {
    left: u64,
}

impl Coverage {
    /// A budget of `units` (a comparison has [`SEARCH_BUDGET`]).
    pub(crate) fn with(units: u64) -> Self {
        Coverage { left: units }
    }

    /// What is left of the budget.
    pub(crate) fn left(&self) -> u64 {
        self.left
    }

    /// Runs `proof` on what is left of the budget, and keeps what it did not spend.
    fn with_budget(&mut self, proof: impl FnOnce(&mut Budget<'_>) -> bool) -> bool {
        let mut keep_going = || true;
        let mut budget = Budget::new(&mut keep_going);
        budget.refill(self.left);
        let proven = proof(&mut budget);
        self.left = budget.left;
        proven
    }

    /// Whether every claim value the pattern `inner` admits, `outer` admits (a boolean only
    /// the same literal `true` or `false`).
    pub(crate) fn claim(&mut self, outer: &str, inner: &str) -> bool {
        self.with_budget(|budget| claim_pattern_covers(outer, inner, budget))
    }

    /// Whether every service the `inner` patterns name, one of the `outer` patterns names
    /// (both lower case).
    pub(crate) fn services(&mut self, outer: &[String], inner: &[String]) -> bool {
        self.with_budget(|budget| inner.iter().all(|i| service_covered(outer, i, budget)))
    }
}

/// Whether one of the `outer` service patterns covers the service pattern `inner`.
fn service_covered(outer: &[String], inner: &str, budget: &mut Budget<'_>) -> bool {
    outer
        .iter()
        .any(|o| glob_covers(o, inner, Wildcards::StarOnly, budget))
}

/// Which characters are wildcards: claim patterns have `*` and `?`, service patterns only `*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wildcards {
    StarAndQuestion,
    StarOnly,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Symbol {
    Star,
    One,
    Char(char),
}

fn symbols(pattern: &str, wildcards: Wildcards) -> Vec<Symbol> {
    let mut out: Vec<Symbol> = Vec::new();
    for c in pattern.chars() {
        let symbol = match c {
            '*' => Symbol::Star,
            '?' if wildcards == Wildcards::StarAndQuestion => Symbol::One,
            c => Symbol::Char(c),
        };
        match (symbol, out.last()) {
            // `**` means `*`.
            (Symbol::Star, Some(Symbol::Star)) => {}
            // `*?` means `?*`: a run of wildcards is written with its `?`s first, so that the
            // proof below, which compares symbol by symbol, sees `*?` cover `a*`.
            (Symbol::One, Some(Symbol::Star)) => {
                out.pop();
                out.extend([Symbol::One, Symbol::Star]);
            }
            _ => out.push(symbol),
        }
    }
    out
}

/// Whether every string `inner` matches, `outer` matches (sound; see the module's comment);
/// `false` when the budget does not allow the work.
fn glob_covers(outer: &str, inner: &str, wildcards: Wildcards, budget: &mut Budget<'_>) -> bool {
    let units = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    if !budget.spend(units(outer.len() + inner.len() + 1)) {
        return false;
    }
    let (outer, inner) = (symbols(outer, wildcards), symbols(inner, wildcards));
    let (m, n) = (outer.len(), inner.len());
    // The literal text before the first wildcard of `outer` must start `inner` as literal text
    // (a wildcard of `inner` there admits characters `outer` refuses), and likewise the text
    // after its last: a cheap refusal before the table.
    let head = outer.iter().take_while(|s| matches!(s, Symbol::Char(_)));
    if head.clone().count() > n || !head.clone().zip(&inner).all(|(o, i)| o == i) {
        return false;
    }
    let tail = outer
        .iter()
        .rev()
        .take_while(|s| matches!(s, Symbol::Char(_)));
    if tail.clone().count() > n || !tail.clone().zip(inner.iter().rev()).all(|(o, i)| o == i) {
        return false;
    }
    if !budget.spend(units((m + 1).saturating_mul(n + 1))) {
        return false;
    }
    // covers[i][j]: outer[j..] covers inner[i..]; filled from the ends, one row kept at a time.
    let mut next = vec![false; m + 1]; // row i + 1
    let mut row = vec![false; m + 1];
    for i in (0..=n).rev() {
        for j in (0..=m).rev() {
            row[j] = match outer.get(j) {
                None => i == n,
                Some(Symbol::Star) => row[j + 1] || (i < n && next[j]),
                Some(Symbol::One) => i < n && !matches!(inner[i], Symbol::Star) && next[j + 1],
                Some(Symbol::Char(c)) => i < n && inner[i] == Symbol::Char(*c) && next[j + 1],
            };
        }
        std::mem::swap(&mut row, &mut next);
    }
    next[0]
}

// ---------------------------------------------------------------------------------------------
// The search.

/// What a `*` becomes in an instance of a pattern: the empty run first, then short runs that
/// patterns rarely pin.
const FILLERS: [&str; 4] = ["", "x", "0", "zq-compare"];

/// An instance of a glob: each `*` is `filler`, each `?` its first character (or `x`).
fn instance(pattern: &str, filler: &str, wildcards: Wildcards) -> String {
    let one = filler.chars().next().unwrap_or('x');
    symbols(pattern, wildcards)
        .into_iter()
        .fold(String::new(), |mut out, symbol| {
            match symbol {
                Symbol::Star => out.push_str(filler),
                Symbol::One => out.push(one),
                Symbol::Char(c) => out.push(c),
            }
            out
        })
}

/// Requests built from `new`'s patterns, each kept when `new` admits it and `old` refuses it;
/// the rules `subsumed` (see [`subsumed_rules`]) are skipped when the address cannot make a
/// difference.
fn search(old: &Policy, new: &Policy, subsumed: &[bool], budget: &mut Budget<'_>) -> Vec<Witness> {
    let addresses = probe_addresses(old, new);
    let show_ip = !old.ip_allowlist().is_empty() || !new.ip_allowlist().is_empty();
    let size = old.document().to_string().len() + new.document().to_string().len();
    let mut witnesses = Vec::new();
    // A request without an action first (any action will do); when both policies admit it,
    // each action the new policy may allow, in case only the actions differ.
    let try_request = |claims: Option<&Map<String, Value>>,
                       service: Option<&str>,
                       ip: IpAddr,
                       actions: Actions,
                       budget: &mut Budget<'_>|
     -> Option<Witness> {
        let chars = claims.map_or(0, |c| {
            c.values()
                .map(|v| v.as_str().map_or(1, str::len))
                .sum::<usize>()
        }) + service.map_or(0, str::len);
        let units = 16 + u64::try_from((size + chars) / 64).unwrap_or(u64::MAX);
        let probes = std::iter::once(None).chain(actions.iter().map(Some));
        for action in probes {
            if !budget.spend(units) {
                return None;
            }
            let decision = new.evaluate(claims, service, ip, action);
            let super::Decision::Allow { rule } = decision else {
                // Refused without an action: refused with every one.
                action?;
                continue;
            };
            if !old.evaluate(claims, service, ip, action).is_allowed() {
                return Some(Witness {
                    rule,
                    claims: claims.cloned(),
                    service: service.map(str::to_owned),
                    ip: show_ip.then_some(ip),
                    action,
                });
            }
        }
        None
    };
    match new.kind() {
        PolicyKind::Oidc => {
            let ip_within = new.ip_allowlist().is_within(old.ip_allowlist());
            for (r, rule) in rules_of(new).into_iter().enumerate() {
                // A subsumed rule can only widen through an address the old list refuses.
                if ip_within && subsumed.get(r).copied().unwrap_or(false) {
                    continue;
                }
                // A pattern `true` or `false` also matches that boolean, which other patterns
                // (`*`, `t???`) do not: one more request, with those claims booleans.
                let words = |p: &str| matches!(p, "true" | "false");
                let booleans = rule.claims.iter().any(|(_, p)| words(p));
                let variants =
                    (FILLERS.iter().map(|f| (*f, false))).chain(booleans.then_some(("", true)));
                'rule: for (filler, as_booleans) in variants {
                    let mut claims = Map::new();
                    claims.insert("iss".into(), rule.issuer.into());
                    for (name, pattern) in &rule.claims {
                        let value = match as_booleans && words(pattern) {
                            true => Value::Bool(*pattern == "true"),
                            false => instance(pattern, filler, Wildcards::StarAndQuestion).into(),
                        };
                        claims.insert((*name).to_owned(), value);
                    }
                    for service in service_probes(&rule.services) {
                        for &ip in &addresses {
                            if budget.left == 0 {
                                break 'rule;
                            }
                            let found = try_request(
                                Some(&claims),
                                service.as_deref(),
                                ip,
                                rule.actions,
                                budget,
                            );
                            if let Some(witness) = found {
                                witnesses.push(witness);
                                break 'rule;
                            }
                        }
                    }
                }
                if witnesses.len() >= MAX_WITNESSES || budget.left == 0 {
                    break;
                }
            }
        }
        _ => {
            let services = services_of(new.document().get("services"));
            'search: for service in service_probes(&services) {
                for &ip in &addresses {
                    if budget.left == 0 {
                        break 'search;
                    }
                    let found = try_request(None, service.as_deref(), ip, new.actions(), budget);
                    if let Some(witness) = found {
                        witnesses.push(witness);
                        break 'search;
                    }
                }
            }
        }
    }
    witnesses
}

/// Services to try for a rule (or a static policy): an instance of each pattern, then no
/// service at all (a call such as listing).
fn service_probes(patterns: &[String]) -> Vec<Option<String>> {
    let mut probes: Vec<Option<String>> = Vec::new();
    for filler in FILLERS {
        for pattern in patterns {
            let filler = if filler.is_empty() && pattern.chars().all(|c| c == '*') {
                "x"
            } else {
                filler
            };
            let probe = Some(instance(pattern, filler, Wildcards::StarOnly));
            if !probes.contains(&probe) {
                probes.push(probe);
            }
        }
    }
    probes.push(None);
    probes
}

/// Client addresses to try, all inside the new allowlist: those the old one refuses first.
/// When the new list is inside the old one the address cannot make a difference, and one
/// address is enough.
fn probe_addresses(old: &Policy, new: &Policy) -> Vec<IpAddr> {
    let mut probes: Vec<IpAddr> = [
        IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
        IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)),
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V4(Ipv4Addr::BROADCAST),
        IpAddr::V6(Ipv6Addr::LOCALHOST),
    ]
    .into();
    for list in [new.ip_allowlist(), old.ip_allowlist()] {
        for net in list.entries() {
            probes.extend(edges(*net));
        }
    }
    let mut allowed: Vec<IpAddr> = Vec::new();
    for ip in probes {
        if new.allows_ip(ip) && !allowed.contains(&ip) {
            allowed.push(ip);
        }
    }
    if new.ip_allowlist().is_within(old.ip_allowlist()) {
        allowed.truncate(1);
        return allowed;
    }
    allowed.sort_by_key(|ip| old.allows_ip(*ip));
    allowed
}

/// The first and last addresses of a range, and the addresses just outside it.
fn edges(net: IpNetwork) -> Vec<IpAddr> {
    match net {
        IpNetwork::V4(n) => {
            let (first, last) = (u32::from(n.network()), u32::from(n.broadcast()));
            [
                Some(first),
                Some(last),
                first.checked_sub(1),
                last.checked_add(1),
            ]
            .into_iter()
            .flatten()
            .map(|a| IpAddr::V4(Ipv4Addr::from(a)))
            .collect()
        }
        IpNetwork::V6(n) => {
            let first = u128::from(n.network());
            let size = 128 - u32::from(n.prefix());
            let last = first | 1u128.checked_shl(size).map_or(u128::MAX, |s| s - 1);
            [
                Some(first),
                Some(last),
                first.checked_sub(1),
                last.checked_add(1),
            ]
            .into_iter()
            .flatten()
            .map(|a| IpAddr::V6(Ipv6Addr::from(a)))
            .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(document: Value) -> Policy {
        Policy::parse(&document)
            .unwrap_or_else(|e| panic!("{document}: {e}"))
            .policy
    }

    fn rule(sub: &str, services: &[&str]) -> Value {
        json!({"services": services,
            "claims": {"iss": "https://ci.example", "aud": "registry", "sub": sub}})
    }

    fn oidc(rules: Vec<Value>, allowlist: Option<&[&str]>) -> Policy {
        let mut document = json!({"kind": "oidc", "rules": rules});
        if let Some(list) = allowlist {
            document["ip_allowlist"] = json!(list);
        }
        policy(document)
    }

    /// Every witness is allowed by `new` and refused by `old`.
    fn confirmed(old: &Policy, new: &Policy, comparison: &Comparison) {
        for w in &comparison.witnesses {
            assert_eq!(
                new.evaluate(w.claims.as_ref(), w.service.as_deref(), w.ip, None),
                super::super::Decision::Allow { rule: w.rule },
                "{w:?}"
            );
            assert!(
                !old.evaluate(w.claims.as_ref(), w.service.as_deref(), w.ip, None)
                    .is_allowed(),
                "{w:?}"
            );
        }
    }

    fn result(old: &Policy, new: &Policy) -> CompareResult {
        let comparison = compare(old, new);
        confirmed(old, new, &comparison);
        assert_eq!(
            comparison.result == CompareResult::Widens,
            !comparison.witnesses.is_empty()
        );
        comparison.result
    }

    fn glob_covers(outer: &str, inner: &str, wildcards: Wildcards) -> bool {
        let mut go_on = || true;
        let mut budget = Budget::new(&mut go_on);
        budget.refill(PROOF_BUDGET);
        super::glob_covers(outer, inner, wildcards, &mut budget)
    }

    fn claim_pattern_covers(outer: &str, inner: &str) -> bool {
        let mut go_on = || true;
        let mut budget = Budget::new(&mut go_on);
        budget.refill(PROOF_BUDGET);
        super::claim_pattern_covers(outer, inner, &mut budget)
    }

    #[test]
    fn glob_inclusion() {
        let q = Wildcards::StarAndQuestion;
        for (outer, inner) in [
            ("*", "anything"),
            ("*", "a*b?"),
            ("repo:acme/*", "repo:acme/api:*"),
            ("repo:acme/*", "repo:acme/api"),
            ("repo:*:ref:main", "repo:acme/*:ref:main"),
            ("a?c", "abc"),
            ("a?c", "a?c"),
            ("a*", "a**"),
            ("*x*", "ax*"),
            ("*?", "a*"),
            ("a*?b", "a?*b"),
            ("*?*?", "xy"),
        ] {
            assert!(glob_covers(outer, inner, q), "{outer} ⊇ {inner}");
        }
        for (outer, inner) in [
            ("repo:acme/api:*", "repo:acme/*"),
            ("abc", "a?c"),
            ("a?c", "a*c"),
            ("x*", "*"),
            ("*x", "*"),
            ("abc", "abcd"),
        ] {
            assert!(!glob_covers(outer, inner, q), "{outer} ⊉ {inner}");
        }
        // Services: `?` is a character like any other.
        assert!(!glob_covers("a?c", "abc", Wildcards::StarOnly));
        assert!(glob_covers("api-*", "api-?", Wildcards::StarOnly));
        // A boolean matches only the word itself.
        assert!(!claim_pattern_covers("t*", "true"));
        assert!(claim_pattern_covers("true", "true"));
        assert!(claim_pattern_covers("t*", "tru?"));
    }

    /// A pattern `true` matches the boolean, which `*` or `t???` does not: a witness with that
    /// boolean, not `undetermined`.
    #[test]
    fn a_boolean_a_pattern_newly_matches_is_a_witness() {
        let with_flag = |flag: &str| {
            oidc(
                vec![
                    json!({"services": ["*"], "claims": {"iss": "https://i", "aud": "a",
                    "sub": "s", "flag": flag}}),
                ],
                None,
            )
        };
        for (old, new) in [("*", "true"), ("t???", "true"), ("f*", "false")] {
            let comparison = compare(&with_flag(old), &with_flag(new));
            confirmed(&with_flag(old), &with_flag(new), &comparison);
            assert_eq!(comparison.result, CompareResult::Widens, "{old} → {new}");
            let claims = comparison.witnesses[0].claims.as_ref().unwrap();
            assert_eq!(claims["flag"], json!(new == "true"), "{old} → {new}");
        }
        assert_eq!(
            result(&with_flag("true"), &with_flag("true")),
            CompareResult::NarrowerOrEqual
        );
    }

    #[test]
    fn narrower_claims_and_services_are_proven() {
        let old = oidc(vec![rule("repo:acme/*", &["api-*", "web-acme"])], None);
        let new = oidc(
            vec![
                rule("repo:acme/api:ref:refs/heads/main", &["api-acme"]),
                rule("repo:acme/web:*", &["web-acme", "api-*"]),
            ],
            None,
        );
        assert_eq!(result(&old, &new), CompareResult::NarrowerOrEqual);
        assert_eq!(result(&old, &old), CompareResult::NarrowerOrEqual);
        // Wider the other way round.
        assert_eq!(result(&new, &old), CompareResult::Widens);
    }

    #[test]
    fn a_new_rule_is_covered_by_several_old_ones_service_by_service() {
        let old = oidc(
            vec![
                rule("repo:acme/*", &["api-acme"]),
                rule("repo:*", &["web-acme"]),
            ],
            None,
        );
        let new = oidc(vec![rule("repo:acme/x", &["api-acme", "web-acme"])], None);
        assert_eq!(result(&old, &new), CompareResult::NarrowerOrEqual);
    }

    #[test]
    fn widenings_carry_a_witness() {
        let old = oidc(
            vec![
                rule("repo:acme/api:*", &["api-acme"]),
                rule("repo:acme/web:*", &["web-*"]),
            ],
            None,
        );
        // A broader subject in the second of two rules.
        let new = oidc(
            vec![
                rule("repo:acme/api:*", &["api-acme"]),
                rule("repo:acme/*", &["web-*"]),
            ],
            None,
        );
        let comparison = compare(&old, &new);
        assert_eq!(comparison.result, CompareResult::Widens);
        assert_eq!(comparison.witnesses[0].rule, Some(1));
        assert_eq!(
            comparison.witnesses[0].ip, None,
            "no allowlist: any address"
        );
        confirmed(&old, &new, &comparison);
        // A broader service pattern.
        let new = oidc(
            vec![
                rule("repo:acme/api:*", &["api-*"]),
                rule("repo:acme/web:*", &["web-*"]),
            ],
            None,
        );
        let comparison = compare(&old, &new);
        assert_eq!(comparison.result, CompareResult::Widens);
        assert_ne!(comparison.witnesses[0].service.as_deref(), Some("api-acme"));
        // A claim the old rule checked and the new one drops.
        let strict = oidc(
            vec![
                json!({"services": ["*"], "claims": {"iss": "https://ci.example", "aud":
                "registry", "sub": "repo:acme/*", "ref": "refs/heads/main"}}),
            ],
            None,
        );
        let loose = oidc(vec![rule("repo:acme/*", &["*"])], None);
        assert_eq!(result(&strict, &loose), CompareResult::Widens);
        assert_eq!(result(&loose, &strict), CompareResult::NarrowerOrEqual);
        // Another issuer.
        let other = policy(
            json!({"kind": "oidc", "rules": [{"services": ["*"], "claims":
            {"iss": "https://other.example", "aud": "registry", "sub": "repo:acme/*"}}]}),
        );
        assert_eq!(result(&loose, &other), CompareResult::Widens);
    }

    #[test]
    fn cidr_changes() {
        let rules = || vec![rule("repo:acme/*", &["*"])];
        let office = oidc(rules(), Some(&["203.0.113.0/24"]));
        let desk = oidc(rules(), Some(&["203.0.113.7", "203.0.113.128/25"]));
        let anywhere = oidc(rules(), None);
        let wider = oidc(rules(), Some(&["203.0.112.0/23"]));
        let v6 = oidc(rules(), Some(&["203.0.113.0/24", "2001:db8::/32"]));
        assert_eq!(result(&office, &desk), CompareResult::NarrowerOrEqual);
        assert_eq!(result(&anywhere, &office), CompareResult::NarrowerOrEqual);
        for new in [&anywhere, &wider, &v6] {
            let comparison = compare(&office, new);
            assert_eq!(
                comparison.result,
                CompareResult::Widens,
                "{:?}",
                new.document()
            );
            confirmed(&office, new, &comparison);
            let ip = comparison.witnesses[0]
                .ip
                .expect("an allowlist: the address says it");
            assert!(!office.allows_ip(ip));
        }
        // Two old ranges that together cover the new one: no witness, and no proof either.
        let halves = oidc(rules(), Some(&["203.0.113.0/25", "203.0.113.128/25"]));
        assert_eq!(result(&halves, &office), CompareResult::Undetermined);
        assert_eq!(compare(&halves, &office).unproven, ["/ip_allowlist"]);
    }

    #[test]
    fn static_policies_and_kinds() {
        let old = policy(json!({"kind": "static", "services": ["api-*", "web-acme"]}));
        let narrower = policy(json!({"kind": "static", "services": ["api-acme"]}));
        let wider = policy(json!({"kind": "static", "services": ["*-acme"]}));
        assert_eq!(result(&old, &narrower), CompareResult::NarrowerOrEqual);
        let comparison = compare(&old, &wider);
        assert_eq!(comparison.result, CompareResult::Widens);
        assert_eq!(comparison.witnesses[0].rule, None);
        assert_eq!(comparison.witnesses[0].claims, None);
        // Service patterns fold case.
        let upper = policy(json!({"kind": "static", "services": ["API-acme"]}));
        assert_eq!(result(&old, &upper), CompareResult::NarrowerOrEqual);
        // A static policy where an OIDC one was: a static token gets in.
        let oidc_old = oidc(vec![rule("repo:acme/*", &["*"])], None);
        assert_eq!(result(&oidc_old, &narrower), CompareResult::Widens);
        assert_eq!(result(&narrower, &oidc_old), CompareResult::Widens);
        let nothing = Policy::from_stored(&json!({"kind": "oidc", "rules": []})).unwrap();
        assert_eq!(result(&narrower, &nothing), CompareResult::NarrowerOrEqual);
    }

    #[test]
    fn patterns_beyond_the_proof_are_undetermined() {
        // `?*` accepts every string `*a` does (none is empty), which the proof, symbol by
        // symbol, does not see: the `?` would have to stand for the `*` or the `a`.
        let old = oidc(vec![rule("?*", &["*"])], None);
        let new = oidc(vec![rule("*a", &["*"])], None);
        let comparison = compare(&old, &new);
        assert_eq!(comparison.result, CompareResult::Undetermined);
        assert_eq!(comparison.unproven, ["/rules/0"]);
        assert_eq!(
            comparison.to_json(),
            json!({"result": "undetermined", "witnesses": []})
        );
    }
}
