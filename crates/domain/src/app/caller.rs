//! Who a granted call acts as: the account (or anonymous secret) that
//! [`access::decide`](crate::access::decide) accepted, its scope, and where the call came from.

use crate::access::{self, Refusal};
use crate::app::AppError;
use crate::audit::{Action, Actor, AuditEvent, Resource};
use crate::policy::{Policy, Scope};
use crate::ports::VerifiedToken;
use crate::{Service, ServiceAccount};
use std::net::IpAddr;
use std::sync::Arc;
use time::OffsetDateTime;
use uuid::Uuid;

/// Where a call came from, for the audit trail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The client's address (behind trusted proxies).
    pub ip: IpAddr,
    /// The request's `X-Request-Id`.
    pub request_id: Option<String>,
}

impl Origin {
    /// A call from `ip` with that request id.
    pub fn new(ip: IpAddr, request_id: Option<String>) -> Self {
        Self { ip, request_id }
    }

    /// `ip` as a record may show it: `None` for the unspecified address, which stands for one a
    /// forwarding chain did not reveal (limits count it as one client), rather than a made-up
    /// address.
    pub fn revealed(ip: IpAddr) -> Option<IpAddr> {
        (!ip.is_unspecified()).then_some(ip)
    }
}

/// A caller whose call was granted: a service account (with, for an identity token, the rules
/// its claims matched and the verified token), or an anonymous service's secret.
#[derive(Debug, Clone)]
pub struct Caller {
    account: Option<Arc<ServiceAccount>>,
    rules: Option<Box<[usize]>>,
    token: Option<Arc<VerifiedToken>>,
    origin: Origin,
}

impl Caller {
    /// A service account: `rules` and `token` are `Some` for an identity token.
    pub fn account(
        account: Arc<ServiceAccount>,
        rules: Option<Box<[usize]>>,
        token: Option<Arc<VerifiedToken>>,
        origin: Origin,
    ) -> Self {
        Self {
            account: Some(account),
            rules,
            token,
            origin,
        }
    }

    /// An anonymous service's secret (or nobody: anonymous creation).
    pub fn anonymous(origin: Origin) -> Self {
        Self {
            account: None,
            rules: None,
            token: None,
            origin,
        }
    }

    /// The account that acts, if one does.
    pub fn acting_account(&self) -> Option<&Arc<ServiceAccount>> {
        self.account.as_ref()
    }

    /// The customer the caller acts for; `None` for an anonymous secret.
    pub fn customer_id(&self) -> Option<Uuid> {
        self.account.as_ref().map(|a| a.customer_id)
    }

    /// The identity token a federated caller presented, verified; `None` for a static token or
    /// an anonymous secret.
    pub fn verified_token(&self) -> Option<&Arc<VerifiedToken>> {
        self.token.as_ref()
    }

    /// Where the call came from.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// The services this caller may act on (`None`: none at all).
    pub fn scope(&self) -> Option<Scope<'_>> {
        access::scope_of(self.account.as_ref()?, self.rules.as_deref())
    }

    /// Whether the caller may act on `subdomain`.
    pub fn may_act_on(&self, subdomain: &str) -> bool {
        self.scope().is_some_and(|s| s.matches(subdomain))
    }

    /// Whether the caller's policy lets it take `action` on some service (an identity token:
    /// by the rules its claims matched).
    pub fn holds(&self, action: crate::policy::Action) -> bool {
        (self.account.as_ref())
            .is_some_and(|a| access::actions_of(a, self.rules.as_deref()).contains(action))
    }

    /// Whether the caller's policy allows `action` on `subdomain`, judged as a call on that
    /// service would be (its address, and an identity token's claims, included): what a call
    /// on several services may show of each. An anonymous secret: nothing.
    pub fn allows(&self, action: crate::policy::Action, subdomain: &str) -> bool {
        let Some(account) = &self.account else {
            return false;
        };
        let claims = self.token.as_ref().map(|t| &t.claims);
        let decision = (account.policy).evaluate(claims, Some(subdomain), self.origin.ip, action);
        matches!(decision, crate::policy::Decision::Allow { .. })
    }

    /// Who the caller is in the audit trail: a static token's account, a federated token's
    /// account with the token's `iss` and `sub`, or an anonymous secret. Built only for changes:
    /// reads pay for no copy of the claims.
    pub fn actor(&self) -> Actor {
        match (&self.account, &self.token) {
            (Some(account), Some(token)) => {
                let sub = token.claims.get("sub").and_then(|s| s.as_str());
                Actor::federated(
                    account.id,
                    Some(token.issuer.clone()),
                    sub.map(str::to_owned),
                )
            }
            (Some(account), None) => Actor::static_token(account.id),
            (None, _) => Actor::anonymous(),
        }
    }

    /// The audit event of a change this caller makes now.
    pub fn event(
        &self,
        action: Action,
        resource: Resource,
        customer_id: Option<Uuid>,
        now: OffsetDateTime,
    ) -> AuditEvent {
        let ip = Origin::revealed(self.origin.ip).map(|ip| ip.to_string());
        AuditEvent::new(action, resource, self.actor(), customer_id, now)
            .from_request(ip, self.origin.request_id.clone())
    }

    /// The audit event of a change to `service` (its configuration included).
    pub fn service_event(
        &self,
        action: Action,
        service: &Service,
        now: OffsetDateTime,
    ) -> AuditEvent {
        self.event(
            action,
            Resource::service(service.id, &service.subdomain),
            service.customer_id,
            now,
        )
    }

    /// The customer of a caller on a collection call (`/services`, `/service-accounts…`):
    /// anonymous secrets act on their own service only.
    pub fn customer(&self) -> Result<Uuid, AppError> {
        self.customer_id()
            .ok_or_else(|| AppError::Forbidden(access::OWN_CALLS_ONLY.into()))
    }

    /// Whether the caller covers every service of its customer (its patterns include `"*"`),
    /// which `needed_for` (a read of the whole customer, as "reading the audit trail") needs: a
    /// 403 that says so otherwise.
    pub fn covers_every_service(&self, needed_for: &str) -> Result<(), AppError> {
        self.customer()?;
        let scope = self.scope().unwrap_or_default();
        access::covers_all(&scope, needed_for).map_err(forbidden)
    }

    /// [`access::may_manage`]: the caller manages the customer's accounts (its patterns include
    /// `"*"`), and `target` (a new policy, or the one of an account it would change, delete or
    /// re-key) is no broader than the caller: within its addresses and its actions.
    pub fn may_manage(&self, target: Option<&Policy>) -> Result<(), AppError> {
        let account = self
            .account
            .as_ref()
            .ok_or_else(|| AppError::Forbidden(access::OWN_CALLS_ONLY.into()))?;
        let scope = self.scope().unwrap_or_default();
        let actions = access::actions_of(account, self.rules.as_deref());
        access::may_manage(&scope, actions, &account.policy, target).map_err(forbidden)
    }
}

/// The 403 of a call on an anonymous service that its secret does not make (docs/api.md,
/// "Authentication", lists those it makes): `what` (as "a custom domain") is for registered
/// services. Only the secret reaches an anonymous service, so the service says who calls.
pub fn registered_only(service: &Service, what: &str) -> Result<(), AppError> {
    match service.customer_id {
        Some(_) => Ok(()),
        None => Err(AppError::Forbidden(format!(
            "{what} is for registered services: an anonymous service's secret does not make \
             this call (register a service)"
        ))),
    }
}

/// A refusal of `access::may_manage` or `access::covers_all`, which answer only 403s.
fn forbidden(refusal: Refusal) -> AppError {
    match refusal {
        Refusal::Forbidden(detail) => AppError::Forbidden(detail),
        other => AppError::Forbidden(format!("{other:?}")),
    }
}
