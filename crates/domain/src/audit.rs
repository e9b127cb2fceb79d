//! The audit trail (docs/api.md, "Audit trail and last use"): who changed what, from where, with
//! which credential.
//!
//! An [`AuditEvent`] is built by whoever makes a change and handed to the storage call that
//! makes it; the adapter writes it in the change's own transaction, and only when the change
//! happened (a delete of something already gone writes nothing). Pages are read newest first
//! through an opaque [`Cursor`].
//!
//! ```
//! use registry_domain::audit::{Action, Actor, AuditEvent, Resource};
//! use time::macros::datetime;
//! use uuid::Uuid;
//!
//! let customer = Uuid::new_v4();
//! let event = AuditEvent::new(
//!     Action::ConfigPut,
//!     Resource::service(Uuid::new_v4(), "api-acme"),
//!     Actor::static_token(Uuid::new_v4()),
//!     Some(customer),
//!     datetime!(2026-11-23 12:00 UTC),
//! );
//! assert_eq!(event.action.as_str(), "config.put");
//! assert_eq!(event.to_json()["actor"]["kind"], "static");
//! ```

use crate::timestamp::rfc3339;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::{json, Map, Value};
use std::fmt;
use std::str::FromStr;
use time::OffsetDateTime;
use uuid::Uuid;

/// What a change did. The strings are the contract's and never change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// An operator created a customer from the command line.
    CustomerCreate,
    /// An operator changed a customer's plan from the command line (`customer set-plan`).
    CustomerUpdate,
    /// An operator disabled a customer from the command line (`customer disable`).
    CustomerDisable,
    /// An operator enabled a disabled customer again (`customer enable`).
    CustomerEnable,
    /// A customer's service was registered.
    ServiceCreate,
    /// A customer's service's title or description changed.
    ServiceUpdate,
    /// A customer's service was deleted.
    ServiceDelete,
    /// A configuration was published.
    ConfigPut,
    /// A configuration was withdrawn.
    ConfigDelete,
    /// A retired key was withdrawn before its time.
    KeyDelete,
    /// A retired key's time ran out.
    KeyExpire,
    /// A service account was created.
    AccountCreate,
    /// A service account's name or policy changed.
    AccountUpdate,
    /// A service account was deleted.
    AccountDelete,
    /// A static token was replaced.
    AccountRegenerateToken,
    /// An anonymous service was created.
    AnonymousCreate,
    /// An anonymous service's title or description changed.
    AnonymousUpdate,
    /// An anonymous service was deleted by its secret's holder.
    AnonymousDelete,
    /// An anonymous service's time ran out.
    AnonymousExpire,
    /// A service's custom domain was set (docs/api.md, "Custom domains").
    DomainPut,
    /// A service's custom domain was removed.
    DomainDelete,
    /// The owner dismissed a verifier of a key (docs/api.md, "Key readiness").
    VerifierDismiss,
    /// Managed signing was turned on (docs/api.md, "Managed signing").
    SigningEnable,
    /// Managed signing's settings changed.
    SigningUpdate,
    /// Managed signing was turned off.
    SigningDisable,
    /// A next managed key was made: a rotation started (asked, compromised, or its period over).
    SigningRotate,
    /// The next managed key became safe and signs now; the previous one retires.
    SigningSwitch,
    /// Managed keys left the key set: every token they signed has expired.
    SigningWithdraw,
}

impl Action {
    /// Every action, in the contract's order.
    pub const ALL: [Action; 28] = [
        Action::CustomerCreate,
        Action::CustomerUpdate,
        Action::CustomerDisable,
        Action::CustomerEnable,
        Action::ServiceCreate,
        Action::ServiceUpdate,
        Action::ServiceDelete,
        Action::ConfigPut,
        Action::ConfigDelete,
        Action::KeyDelete,
        Action::KeyExpire,
        Action::AccountCreate,
        Action::AccountUpdate,
        Action::AccountDelete,
        Action::AccountRegenerateToken,
        Action::AnonymousCreate,
        Action::AnonymousUpdate,
        Action::AnonymousDelete,
        Action::AnonymousExpire,
        Action::DomainPut,
        Action::DomainDelete,
        Action::VerifierDismiss,
        Action::SigningEnable,
        Action::SigningUpdate,
        Action::SigningDisable,
        Action::SigningRotate,
        Action::SigningSwitch,
        Action::SigningWithdraw,
    ];

    /// The action's name, such as `config.put`.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::CustomerCreate => "customer.create",
            Action::CustomerUpdate => "customer.update",
            Action::CustomerDisable => "customer.disable",
            Action::CustomerEnable => "customer.enable",
            Action::ServiceCreate => "service.create",
            Action::ServiceUpdate => "service.update",
            Action::ServiceDelete => "service.delete",
            Action::ConfigPut => "config.put",
            Action::ConfigDelete => "config.delete",
            Action::KeyDelete => "key.delete",
            Action::KeyExpire => "key.expire",
            Action::AccountCreate => "account.create",
            Action::AccountUpdate => "account.update",
            Action::AccountDelete => "account.delete",
            Action::AccountRegenerateToken => "account.regenerate-token",
            Action::AnonymousCreate => "anonymous.create",
            Action::AnonymousUpdate => "anonymous.update",
            Action::AnonymousDelete => "anonymous.delete",
            Action::AnonymousExpire => "anonymous.expire",
            Action::DomainPut => "domain.put",
            Action::DomainDelete => "domain.delete",
            Action::VerifierDismiss => "verifier.dismiss",
            Action::SigningEnable => "signing.enable",
            Action::SigningUpdate => "signing.update",
            Action::SigningDisable => "signing.disable",
            Action::SigningRotate => "signing.rotate",
            Action::SigningSwitch => "signing.switch",
            Action::SigningWithdraw => "signing.withdraw",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The text named no action.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown action {0:?}; the actions are {list}", list = action_list())]
pub struct UnknownAction(pub String);

fn action_list() -> String {
    Action::ALL.map(Action::as_str).join(", ")
}

impl FromStr for Action {
    type Err = UnknownAction;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Action::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| UnknownAction(s.to_owned()))
    }
}

/// What kind of credential made a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ActorKind {
    /// A service account's static token.
    Static,
    /// A service account through a federated identity token.
    Oidc,
    /// The management secret of an anonymous service.
    Anonymous,
    /// An operator at the command line.
    Operator,
    /// The registry itself (expiry).
    System,
}

impl ActorKind {
    /// `static`, `oidc`, `anonymous`, `operator` or `system`.
    pub fn as_str(self) -> &'static str {
        match self {
            ActorKind::Static => "static",
            ActorKind::Oidc => "oidc",
            ActorKind::Anonymous => "anonymous",
            ActorKind::Operator => "operator",
            ActorKind::System => "system",
        }
    }

    /// The kind a stored name stands for.
    pub fn parse(s: &str) -> Option<ActorKind> {
        [
            ActorKind::Static,
            ActorKind::Oidc,
            ActorKind::Anonymous,
            ActorKind::Operator,
            ActorKind::System,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
}

/// Who made a change. Never a token or a secret: an account's id, and for a federated caller
/// the `iss` and `sub` of its identity token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    /// The credential's kind.
    pub kind: ActorKind,
    /// The service account, for `static` and `oidc`.
    pub account_id: Option<Uuid>,
    /// The identity token's issuer, for `oidc`.
    pub iss: Option<String>,
    /// The identity token's subject, for `oidc`.
    pub sub: Option<String>,
}

impl Actor {
    fn of(kind: ActorKind) -> Actor {
        Actor {
            kind,
            account_id: None,
            iss: None,
            sub: None,
        }
    }

    /// A service account with its static token.
    pub fn static_token(account_id: Uuid) -> Actor {
        Actor {
            account_id: Some(account_id),
            ..Actor::of(ActorKind::Static)
        }
    }

    /// A service account through a federated identity token of `iss` for `sub`.
    pub fn federated(account_id: Uuid, iss: Option<String>, sub: Option<String>) -> Actor {
        Actor {
            account_id: Some(account_id),
            iss,
            sub,
            ..Actor::of(ActorKind::Oidc)
        }
    }

    /// The holder of an anonymous service's secret.
    pub fn anonymous() -> Actor {
        Actor::of(ActorKind::Anonymous)
    }

    /// An operator at the command line.
    pub fn operator() -> Actor {
        Actor::of(ActorKind::Operator)
    }

    /// The registry itself.
    pub fn system() -> Actor {
        Actor::of(ActorKind::System)
    }
}

/// What kind of thing a change was made to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResourceKind {
    /// A customer.
    Customer,
    /// A service (its configuration included).
    Service,
    /// A published key, by `kid`.
    Key,
    /// A service account.
    Account,
}

impl ResourceKind {
    /// `customer`, `service`, `key` or `account`.
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceKind::Customer => "customer",
            ResourceKind::Service => "service",
            ResourceKind::Key => "key",
            ResourceKind::Account => "account",
        }
    }

    /// The kind a stored name stands for.
    pub fn parse(s: &str) -> Option<ResourceKind> {
        [
            ResourceKind::Customer,
            ResourceKind::Service,
            ResourceKind::Key,
            ResourceKind::Account,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
}

/// The thing a change was made to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    /// Its kind.
    pub kind: ResourceKind,
    /// Its id: a UUID, or a key's `kid`.
    pub id: String,
    /// The subdomain of the service it is or belongs to.
    pub subdomain: Option<String>,
}

impl Resource {
    /// A customer.
    pub fn customer(id: Uuid) -> Resource {
        Resource {
            kind: ResourceKind::Customer,
            id: id.to_string(),
            subdomain: None,
        }
    }

    /// A service (or its configuration).
    pub fn service(id: Uuid, subdomain: &str) -> Resource {
        Resource {
            kind: ResourceKind::Service,
            id: id.to_string(),
            subdomain: Some(subdomain.to_owned()),
        }
    }

    /// The key `kid` of the service at `subdomain`.
    pub fn key(kid: &str, subdomain: &str) -> Resource {
        Resource {
            kind: ResourceKind::Key,
            id: kid.to_owned(),
            subdomain: Some(subdomain.to_owned()),
        }
    }

    /// A service account.
    pub fn account(id: Uuid) -> Resource {
        Resource {
            kind: ResourceKind::Account,
            id: id.to_string(),
            subdomain: None,
        }
    }
}

/// One member an update changed, with its value before and after, as the API shows them
/// (`null` for none). Never a secret: a token, a secret or its hash is never a member recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberChange {
    /// The member's name as the API or the command line shows it (`plan`, `disabledAt`, `title`).
    pub member: String,
    /// Its value before the update.
    pub old: Value,
    /// Its value after it.
    pub new: Value,
}

/// The changes of an event as the trail shows and stores them: `{"plan": {"old": "free",
/// "new": "team"}}`.
pub fn changes_to_json(changes: &[MemberChange]) -> Value {
    Value::Object(
        changes
            .iter()
            .map(|c| {
                (
                    c.member.clone(),
                    json!({"old": c.old.clone(), "new": c.new.clone()}),
                )
            })
            .collect(),
    )
}

/// The changes [`changes_to_json`] wrote; `None` when `value` is not of that shape.
pub fn changes_from_json(value: &Value) -> Option<Vec<MemberChange>> {
    value
        .as_object()?
        .iter()
        .map(|(member, change)| {
            let change = change.as_object()?;
            Some(MemberChange {
                member: member.clone(),
                old: change.get("old")?.clone(),
                new: change.get("new")?.clone(),
            })
        })
        .collect()
}

/// One change, as the trail keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEvent {
    /// The event's own id.
    pub id: Uuid,
    /// When the change was made.
    pub at: OffsetDateTime,
    /// The customer whose trail holds it; `None` for anonymous services.
    pub customer_id: Option<Uuid>,
    /// What was done.
    pub action: Action,
    /// To what.
    pub resource: Resource,
    /// By whom.
    pub actor: Actor,
    /// The client's address, for changes requested over HTTP.
    pub ip: Option<String>,
    /// The request's `X-Request-Id`, for changes requested over HTTP.
    pub request_id: Option<String>,
    /// What an update changed, member by member; empty for events that are not updates.
    pub changes: Vec<MemberChange>,
}

impl AuditEvent {
    /// An event with a fresh id and no address or request id.
    pub fn new(
        action: Action,
        resource: Resource,
        actor: Actor,
        customer_id: Option<Uuid>,
        at: OffsetDateTime,
    ) -> AuditEvent {
        AuditEvent {
            id: Uuid::new_v4(),
            at,
            customer_id,
            action,
            resource,
            actor,
            ip: None,
            request_id: None,
            changes: Vec::new(),
        }
    }

    /// The event recording that `member` went from `old` to `new` (after the members recorded
    /// before it). A member whose value is the same before and after is not recorded.
    pub fn with_change(mut self, member: &str, old: Value, new: Value) -> AuditEvent {
        if old != new {
            self.changes.push(MemberChange {
                member: member.to_owned(),
                old,
                new,
            });
        }
        self
    }

    /// The event with the client's address (`None`: unknown) and request id of the HTTP request
    /// that made it.
    pub fn from_request(mut self, ip: Option<String>, request_id: Option<String>) -> AuditEvent {
        self.ip = ip;
        self.request_id = request_id;
        self
    }

    /// The event as the API and the command line show it (docs/api.md, "Audit trail and last use"):
    /// absent fields are left out.
    pub fn to_json(&self) -> Value {
        let mut resource = Map::new();
        resource.insert("type".into(), self.resource.kind.as_str().into());
        resource.insert("id".into(), self.resource.id.clone().into());
        if let Some(subdomain) = &self.resource.subdomain {
            resource.insert("subdomain".into(), subdomain.clone().into());
        }
        let mut actor = Map::new();
        actor.insert("kind".into(), self.actor.kind.as_str().into());
        if let Some(id) = self.actor.account_id {
            actor.insert("accountId".into(), id.to_string().into());
        }
        if let Some(iss) = &self.actor.iss {
            actor.insert("iss".into(), iss.clone().into());
        }
        if let Some(sub) = &self.actor.sub {
            actor.insert("sub".into(), sub.clone().into());
        }
        let mut event = json!({
            "id": self.id.to_string(),
            "at": rfc3339(self.at),
            "action": self.action.as_str(),
            "resource": resource,
            "actor": actor,
        });
        if let Some(ip) = &self.ip {
            event["ip"] = ip.clone().into();
        }
        if let Some(request_id) = &self.request_id {
            event["requestId"] = request_id.clone().into();
        }
        if !self.changes.is_empty() {
            event["changes"] = changes_to_json(&self.changes);
        }
        event
    }
}

/// Whose events a query reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trail {
    /// One customer's.
    Customer(Uuid),
    /// Those of anonymous services, which belong to no customer.
    Anonymous,
}

/// A query of the trail: newest first, `limit` at most, older than `cursor`, optionally one
/// action and no older than `since`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditQuery {
    /// Whose events.
    pub trail: Trail,
    /// Where the previous page ended.
    pub cursor: Option<Cursor>,
    /// Only this action.
    pub action: Option<Action>,
    /// Only events at or after this instant.
    pub since: Option<OffsetDateTime>,
    /// At most this many.
    pub limit: usize,
}

/// Default and largest page sizes of `GET /audit-events`.
pub const DEFAULT_PAGE: usize = 100;
/// See [`DEFAULT_PAGE`].
pub const MAX_PAGE: usize = 500;

/// A page of the trail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditPage {
    /// The events, newest first.
    pub events: Vec<AuditEvent>,
    /// Where the next page starts, when there may be one.
    pub next: Option<Cursor>,
}

/// A position in the trail: the page that follows holds the events written before the event
/// it names. Events are ordered as their transactions commit, so events written while a client
/// pages land before its first page, never between two of its pages.
///
/// The cursor names the last event of the previous page by its id, a random UUID the client
/// has already seen in that page: it carries no position in the log, which would count every
/// customer's events (docs/api.md, "Audit trail and last use"). The store resumes after that event
/// within the caller's own trail; a cursor naming an event of another trail (or none) is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// The id of the last event of the previous page.
    pub after: Uuid,
}

/// The text given as a cursor is not one the registry made, or not for this trail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cursor is not a nextCursor returned by this API for this caller's events")]
pub struct BadCursor;

/// The version tag that starts every cursor's bytes; `a1` cursors carried a log position.
const CURSOR_TAG: &[u8; 2] = b"a2";

impl Cursor {
    /// The opaque text a client passes back: always 24 characters.
    pub fn encode(self) -> String {
        let mut bytes = [0u8; 18];
        bytes[..2].copy_from_slice(CURSOR_TAG);
        bytes[2..].copy_from_slice(self.after.as_bytes());
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// Reads a cursor [`Cursor::encode`] made. Whether its event is in the caller's trail is
    /// the store's to say.
    ///
    /// ```
    /// use registry_domain::audit::Cursor;
    /// use uuid::Uuid;
    /// let cursor = Cursor { after: Uuid::new_v4() };
    /// assert_eq!(cursor.encode().len(), 24);
    /// assert_eq!(Cursor::decode(&cursor.encode()), Ok(cursor));
    /// assert!(Cursor::decode("garbage!").is_err());
    /// ```
    pub fn decode(text: &str) -> Result<Cursor, BadCursor> {
        let bytes = URL_SAFE_NO_PAD.decode(text).map_err(|_| BadCursor)?;
        let id = bytes
            .strip_prefix(CURSOR_TAG.as_slice())
            .and_then(|id| Uuid::from_slice(id).ok())
            .filter(|id| !id.is_nil())
            .ok_or(BadCursor)?;
        Ok(Cursor { after: id })
    }
}

/// How long the trail keeps events by default (`REGISTRY_AUDIT_RETENTION_DAYS`).
pub const DEFAULT_RETENTION_DAYS: u32 = 90;

/// The minute a use of a service account is recorded as (`lastUsedAt` is exact to the minute:
/// docs/api.md, "Audit trail and last use"), so that every replica writes the same value within one
/// minute and at most one write a minute changes the row.
///
/// ```
/// use registry_domain::audit::last_used_minute;
/// use time::macros::datetime;
/// assert_eq!(
///     last_used_minute(datetime!(2026-11-23 12:34:56.789 UTC)),
///     datetime!(2026-11-23 12:34 UTC)
/// );
/// ```
pub fn last_used_minute(now: OffsetDateTime) -> OffsetDateTime {
    let seconds = now.unix_timestamp();
    OffsetDateTime::from_unix_timestamp(seconds - seconds.rem_euclid(60)).unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_round_trip() {
        for action in Action::ALL {
            assert_eq!(action.as_str().parse::<Action>(), Ok(action));
        }
        let err = "config.post".parse::<Action>().unwrap_err().to_string();
        assert!(err.contains("config.put"), "{err}");
    }

    #[test]
    fn cursors_refuse_what_they_did_not_make() {
        let id = Uuid::from_u128(0x0123_4567_89ab_4def_8123_4567_89ab_cdef);
        let good = Cursor { after: id }.encode();
        let short = URL_SAFE_NO_PAD.encode(&URL_SAFE_NO_PAD.decode(&good).unwrap()[..17]);
        let nil = Cursor { after: Uuid::nil() }.encode();
        // The a1 cursors of before, which carried a log position ("a1.5"), are refused too.
        for bad in [
            "",
            "YTEuMA",
            "YTEuNQ",
            "%%%",
            &short,
            &nil,
            &format!("{good}=="),
        ] {
            assert_eq!(Cursor::decode(bad), Err(BadCursor), "{bad}");
        }
        assert_eq!(Cursor::decode(&good), Ok(Cursor { after: id }));
    }

    #[test]
    fn a_cursor_is_the_same_length_whatever_it_names() {
        let lengths: std::collections::HashSet<usize> = [Uuid::nil(), Uuid::max(), Uuid::new_v4()]
            .into_iter()
            .map(|after| Cursor { after }.encode().len())
            .collect();
        assert_eq!(lengths.len(), 1);
    }

    #[test]
    fn an_update_shows_the_members_it_changed_with_old_and_new_values() {
        let event = AuditEvent::new(
            Action::CustomerUpdate,
            Resource::customer(Uuid::nil()),
            Actor::operator(),
            None,
            OffsetDateTime::UNIX_EPOCH,
        )
        .with_change("plan", json!("free"), json!("team"))
        .with_change("name", json!("Acme"), json!("Acme"));
        let json = event.to_json();
        assert_eq!(
            json["changes"],
            json!({"plan": {"old": "free", "new": "team"}})
        );
        assert_eq!(
            changes_from_json(&json["changes"]).as_deref(),
            Some(event.changes.as_slice())
        );
        let plain = AuditEvent {
            changes: Vec::new(),
            ..event
        };
        assert!(plain.to_json().get("changes").is_none());
        assert_eq!(changes_from_json(&json!({"plan": "team"})), None);
    }

    #[test]
    fn customer_disable_and_enable_are_actions_of_their_own() {
        assert_eq!(Action::CustomerDisable.as_str(), "customer.disable");
        assert_eq!("customer.enable".parse(), Ok(Action::CustomerEnable));
    }

    #[test]
    fn federated_actor_shows_issuer_and_subject() {
        let at = OffsetDateTime::UNIX_EPOCH;
        let account = Uuid::nil();
        let event = AuditEvent::new(
            Action::KeyDelete,
            Resource::key("k1", "api-acme"),
            Actor::federated(account, Some("https://idp".into()), Some("ci".into())),
            None,
            at,
        )
        .from_request(Some("192.0.2.1".into()), Some("r-1".into()));
        let json = event.to_json();
        assert_eq!(json["actor"]["iss"], "https://idp");
        assert_eq!(json["actor"]["sub"], "ci");
        assert_eq!(json["resource"]["type"], "key");
        assert_eq!(json["resource"]["subdomain"], "api-acme");
        assert_eq!(json["ip"], "192.0.2.1");
        assert_eq!(json["requestId"], "r-1");
        assert_eq!(json["at"], "1970-01-01T00:00:00Z");
    }
}
