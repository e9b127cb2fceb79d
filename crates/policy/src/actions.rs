//! What a call does ([`Action`]) and what a policy lets its holder do ([`Actions`]).
//!
//! A version-2 policy lists the actions it allows (`actions`, top level for a static policy, in
//! each rule of an OIDC one); a version-1 policy allows every action but one: minting tokens
//! ([`Action::TokensSign`]) is never implied, neither by `"*"` nor by version 1, only granted by
//! a version-2 policy that names it.

use crate::violation::Violation;
use crate::Violations;
use serde_json::Value;
use std::fmt;
use std::str::FromStr;

/// What a call does, as a policy names it (`services:read`, …).
///
/// ```
/// use registry_policy::Action;
///
/// assert_eq!(Action::ConfigWrite.as_str(), "config:write");
/// assert_eq!(Action::parse("audit:read"), Some(Action::AuditRead));
/// assert_eq!(Action::parse("*"), None);
/// assert_eq!("services:read".parse::<Action>(), Ok(Action::ServicesRead));
/// assert_eq!(Action::AccountsWrite.to_string(), "accounts:write");
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    /// `services:read`: list services, read one.
    ServicesRead,
    /// `services:write`: create, change and delete services.
    ServicesWrite,
    /// `config:read`: read a service's configuration, keys, federation, preflight and fetches.
    ConfigRead,
    /// `config:write`: change a service's configuration, delete its keys, set its domain.
    ConfigWrite,
    /// `accounts:read`: list and read service accounts, their refusals, explain.
    AccountsRead,
    /// `accounts:write`: create, change and delete service accounts, regenerate their tokens.
    AccountsWrite,
    /// `audit:read`: read the audit trail.
    AuditRead,
    /// `tokens:sign`: have the registry sign a token with a service's managed key. Only a
    /// version-2 policy that names it allows it: `"*"` does not.
    TokensSign,
}

impl Action {
    /// Every action, in the order of the documentation (and of [`Actions::iter`]).
    pub const ALL: [Action; 8] = [
        Action::ServicesRead,
        Action::ServicesWrite,
        Action::ConfigRead,
        Action::ConfigWrite,
        Action::AccountsRead,
        Action::AccountsWrite,
        Action::AuditRead,
        Action::TokensSign,
    ];

    /// The name a policy writes (`"services:read"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Action::ServicesRead => "services:read",
            Action::ServicesWrite => "services:write",
            Action::ConfigRead => "config:read",
            Action::ConfigWrite => "config:write",
            Action::AccountsRead => "accounts:read",
            Action::AccountsWrite => "accounts:write",
            Action::AuditRead => "audit:read",
            Action::TokensSign => "tokens:sign",
        }
    }

    /// The action a name stands for, the inverse of [`Action::as_str`]; `None` for any other
    /// text, `"*"` included (that is [`Actions::ALL`], not one action).
    pub fn parse(text: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.as_str() == text)
    }

    /// The bit of the action in an [`Actions`].
    fn bit(self) -> u16 {
        1 << (self as u16)
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The service a request is judged on: its own, or, for a request on the whole customer rather
/// than one service (managing service accounts, reading the audit trail: `service` is `None`
/// and `action` one of those), `"*"`: a rule must cover every service, as only the pattern
/// `"*"` does. The registry judges those calls so; [`crate::Policy::evaluate`] and
/// [`crate::Policy::explain`] take the service as given, so every embedding (the registry's
/// explain and refusal log, the command line, the Python module) passes its service through
/// this first, and all judge alike.
///
/// ```
/// use registry_policy::{judged_service, Action};
/// assert_eq!(judged_service(None, Some(Action::AccountsWrite)), Some("*"));
/// assert_eq!(judged_service(None, Some(Action::ServicesRead)), None);
/// assert_eq!(judged_service(Some("api-acme"), Some(Action::ConfigRead)), Some("api-acme"));
/// ```
pub fn judged_service(service: Option<&str>, action: Option<Action>) -> Option<&str> {
    match (service, action) {
        (None, Some(Action::AccountsRead | Action::AccountsWrite | Action::AuditRead)) => Some("*"),
        (service, _) => service,
    }
}

/// The error of `str::parse::<Action>()`: the text names no action. Its sentence lists the
/// actions a call can need, without `"*"`: every place that asks for one action (explain's
/// `action`, a policy test case's, the command line's `--action`) refuses `"*"`, which only a
/// policy's `actions` grants.
///
/// ```
/// use registry_policy::Action;
/// let error = "*".parse::<Action>().unwrap_err().to_string();
/// assert!(error.starts_with("\"*\" is not an action; one of \"services:read\""));
/// assert!(!error.contains("every action"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownAction(pub String);

impl fmt::Display for UnknownAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not an action; one of {}",
            self.0,
            quoted_names()
        )
    }
}

impl std::error::Error for UnknownAction {}

impl FromStr for Action {
    type Err = UnknownAction;

    fn from_str(text: &str) -> Result<Action, UnknownAction> {
        Action::parse(text).ok_or_else(|| UnknownAction(text.to_owned()))
    }
}

/// The sentence that lists the accepted values of `actions`.
pub(crate) fn accepted_values() -> String {
    format!("accepted values: {}, \"*\" (every action)", quoted_names())
}

/// Every action's name, quoted, separated by `, `.
fn quoted_names() -> String {
    let names: Vec<String> = Action::ALL
        .iter()
        .map(|a| format!("\"{}\"", a.as_str()))
        .collect();
    names.join(", ")
}

/// A set of actions. `Actions::ALL` is what `"*"` grants (every action, and any added later,
/// except [`Action::TokensSign`], which is never implied) and what every version-1 document
/// grants.
///
/// `"*"` is not the list of today's seven other actions: a policy that lists them all does not
/// grant an action added later, so it does not [include](Actions::includes) `Actions::ALL`.
///
/// ```
/// use registry_policy::{Action, Actions};
///
/// let read = Actions::of(&[Action::ServicesRead, Action::ConfigRead]);
/// assert!(read.contains(Action::ConfigRead));
/// assert!(!read.contains(Action::ConfigWrite));
/// assert!(Actions::ALL.includes(read));
/// assert!(!read.includes(Actions::ALL));
/// let seven = Actions::of(&Action::ALL[..7]);
/// assert!(Actions::ALL.includes(seven) && !seven.includes(Actions::ALL));
/// // Minting tokens is never implied by "*".
/// assert!(!Actions::ALL.contains(Action::TokensSign));
/// let signer = Actions::ALL.union(Actions::of(&[Action::TokensSign]));
/// assert!(signer.is_all() && signer.contains(Action::TokensSign));
/// assert_eq!(read.union(Actions::of(&[Action::AuditRead])).iter().count(), 3);
/// assert!(Actions::NONE.is_empty() && Actions::default().is_empty());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Actions(u16);

impl Actions {
    /// Every action, and any added later (`"*"`), but [`Action::TokensSign`].
    pub const ALL: Actions = Actions(!(1 << Action::TokensSign as u16));
    /// No action.
    pub const NONE: Actions = Actions(0);

    /// The set of these actions.
    pub fn of(actions: &[Action]) -> Actions {
        Actions(actions.iter().fold(0, |bits, a| bits | a.bit()))
    }

    /// Whether the set holds `action`.
    pub fn contains(self, action: Action) -> bool {
        self.0 & action.bit() != 0
    }

    /// Whether the set holds every action `other` holds (`Actions::ALL` includes every set; a
    /// list of every action known today does not include `Actions::ALL`).
    pub fn includes(self, other: Actions) -> bool {
        self.0 & other.0 == other.0
    }

    /// The actions of either set.
    pub fn union(self, other: Actions) -> Actions {
        Actions(self.0 | other.0)
    }

    /// Whether the set holds no action.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether the set holds `"*"` (every action, and any added later, but
    /// [`Action::TokensSign`], which it may hold besides).
    pub fn is_all(self) -> bool {
        self.includes(Actions::ALL)
    }

    /// The actions of the set, in the order of [`Action::ALL`].
    pub fn iter(self) -> impl Iterator<Item = Action> {
        Action::ALL.into_iter().filter(move |a| self.contains(*a))
    }

    /// The set as a policy writes it: `["*"]` for [`Actions::ALL`] (then `"tokens:sign"` when
    /// it holds that too), else the names in the order of [`Action::ALL`].
    ///
    /// ```
    /// use registry_policy::{Action, Actions};
    /// use serde_json::json;
    ///
    /// assert_eq!(Actions::ALL.to_json(), json!(["*"]));
    /// assert_eq!(Actions::of(&[Action::AuditRead, Action::ConfigRead]).to_json(),
    ///     json!(["config:read", "audit:read"]));
    /// ```
    pub fn to_json(self) -> Value {
        if self.is_all() {
            let mut names = vec!["*"];
            if self.contains(Action::TokensSign) {
                names.push(Action::TokensSign.as_str());
            }
            return Value::from(names);
        }
        Value::from(self.iter().map(Action::as_str).collect::<Vec<_>>())
    }

    /// Reads an `actions` member at `pointer` (a non-empty array of unique action names or
    /// `"*"`), with every problem pointed at; used where the schema did not run (a stored
    /// document), so it never panics.
    pub(crate) fn compile(value: Option<&Value>, pointer: &str) -> Result<Actions, Violations> {
        let Some(value) = value else {
            return Err(vec![Violation::new(
                pointer,
                format!(
                    "\"actions\" is required in a version-2 policy; {}",
                    accepted_values()
                ),
            )]);
        };
        let Some(items) = value.as_array() else {
            return Err(vec![Violation::new(
                pointer,
                "\"actions\" must be an array of action names",
            )]);
        };
        if items.is_empty() {
            return Err(vec![Violation::new(
                pointer,
                "\"actions\" must list at least 1 entry",
            )]);
        }
        let mut problems = Violations::new();
        let mut actions = Actions::NONE;
        for (i, item) in items.iter().enumerate() {
            match item.as_str() {
                Some("*") => actions = actions.union(Actions::ALL),
                Some(name) => match Action::parse(name) {
                    Some(action) => actions = actions.union(Actions::of(&[action])),
                    None => problems.push(unknown_action(&format!("{pointer}/{i}"), item)),
                },
                None => problems.push(unknown_action(&format!("{pointer}/{i}"), item)),
            }
        }
        if problems.is_empty() {
            Ok(actions)
        } else {
            Err(problems)
        }
    }
}

/// The violation of an entry of `actions` that names no action.
pub(crate) fn unknown_action(pointer: &str, found: &Value) -> Violation {
    Violation::new(
        pointer,
        format!("{found} is not an action; {}", accepted_values()),
    )
}

impl fmt::Display for Actions {
    /// `*`, or the names separated by `, ` (`none` for the empty set).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_all() {
            return match self.contains(Action::TokensSign) {
                true => f.write_str("*, tokens:sign"),
                false => f.write_str("*"),
            };
        }
        if self.is_empty() {
            return f.write_str("none");
        }
        let names: Vec<&str> = self.iter().map(Action::as_str).collect();
        f.write_str(&names.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_round_trip() {
        for action in Action::ALL {
            assert_eq!(Action::parse(action.as_str()), Some(action));
            assert_eq!(action.to_string().parse::<Action>(), Ok(action));
        }
        assert!("config"
            .parse::<Action>()
            .unwrap_err()
            .to_string()
            .contains("audit:read"));
    }

    #[test]
    fn all_is_not_the_list_of_seven() {
        let seven = Actions::of(&Action::ALL[..7]);
        assert_ne!(seven, Actions::ALL);
        assert!(Action::ALL[..7]
            .iter()
            .all(|a| seven.contains(*a) && Actions::ALL.contains(*a)));
        assert!(!Actions::ALL.contains(Action::TokensSign));
        assert!(!seven.includes(Actions::ALL));
        assert!(Actions::ALL.includes(seven));
        assert!(Actions::NONE.iter().next().is_none());
        assert_eq!(Actions::ALL.iter().count(), 7);
        assert_eq!(seven.union(Actions::ALL), Actions::ALL);
        assert_eq!(Actions::ALL.to_string(), "*");
        assert_eq!(Actions::of(&[Action::AuditRead]).to_string(), "audit:read");
    }

    #[test]
    fn compile_points_at_each_problem() {
        let ok = Actions::compile(Some(&json!(["config:read", "config:write"])), "/actions");
        assert_eq!(
            ok,
            Ok(Actions::of(&[Action::ConfigRead, Action::ConfigWrite]))
        );
        assert_eq!(
            Actions::compile(Some(&json!(["audit:read", "*"])), "/actions"),
            Ok(Actions::ALL)
        );
        let bad = Actions::compile(
            Some(&json!(["config:read", "config:delete", 3])),
            "/actions",
        )
        .unwrap_err();
        let pointers: Vec<&str> = bad.iter().map(|v| v.pointer.as_str()).collect();
        assert_eq!(pointers, ["/actions/1", "/actions/2"]);
        assert!(bad[0].message.contains("\"services:read\""));
        for value in [None, Some(json!("*")), Some(json!([]))] {
            let problems = Actions::compile(value.as_ref(), "/rules/0/actions").unwrap_err();
            assert_eq!(problems[0].pointer, "/rules/0/actions");
        }
    }
}
