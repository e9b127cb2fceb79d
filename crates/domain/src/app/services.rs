//! Registered services: create, list, read, change, delete (spec §3).

use crate::app::{fetches, AppError, Caller, Registry};
use crate::audit::Action;
use crate::custom_domain::DomainStatus;
use crate::limits::quota_reached;
use crate::naming::{registered_subdomain, NamingError};
use crate::ports::Ceiling;
use crate::{Service, StoreError};
use std::collections::HashMap;
use time::OffsetDateTime;
use uuid::Uuid;

/// Longest title accepted.
pub const MAX_TITLE: usize = 200;
/// Longest description accepted.
pub const MAX_DESCRIPTION: usize = 2000;
/// Attempts at a free random name before giving up.
const RANDOM_NAME_ATTEMPTS: usize = 5;

/// `POST /services`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CreateService {
    /// The title.
    pub title: Option<String>,
    /// The requested name (`{serviceName}-{tenant}`); random without it.
    pub service_name: Option<String>,
    /// The description.
    pub description: Option<String>,
}

/// `PATCH /services/{s}`: what to change; `None` leaves a field as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpdateService {
    /// A new title.
    pub title: Option<String>,
    /// A new description; `Some(None)` clears it.
    pub description: Option<Option<String>>,
}

/// The 404 of a service that does not exist for this caller.
pub fn not_found(key: &str) -> AppError {
    AppError::NotFound(format!("no service {key:?}"))
}

/// Refuses a `serviceName` on a plan that does not choose names (403 `plan-required`), before
/// anything else is said of the name: a caller that may not choose one learns that first.
pub fn may_choose_service_name(registry: &Registry, caller: &Caller) -> Result<(), AppError> {
    let customer = (registry.store.customer(caller.customer()?)?).ok_or(
        AppError::Unauthenticated("the caller's customer no longer exists"),
    )?;
    match customer.plan.may_choose_service_name() {
        true => Ok(()),
        false => Err(NamingError::PlanRequired(customer.plan).into()),
    }
}

/// Registers a service for the caller's customer, under a name its scope covers, within the
/// customer's quota; a random name is drawn again when taken.
pub fn create(
    registry: &Registry,
    caller: &Caller,
    command: CreateService,
    now: OffsetDateTime,
) -> Result<Service, AppError> {
    let store = &*registry.store;
    let customer = store
        .customer(caller.customer()?)?
        .ok_or(AppError::Unauthenticated(
            "the caller's customer no longer exists",
        ))?;
    let quota = Ceiling(registry.settings.max_services_per_customer);
    let attempts = if command.service_name.is_some() {
        1
    } else {
        RANDOM_NAME_ATTEMPTS
    };
    for _ in 0..attempts {
        let subdomain = registered_subdomain(
            customer.plan,
            &customer.tenant,
            command.service_name.as_deref(),
            &*registry.random,
        )?;
        if !caller.may_act_on(&subdomain) {
            return Err(AppError::NotCovered { subdomain });
        }
        let service = Service {
            id: Uuid::new_v4(),
            customer_id: Some(customer.id),
            subdomain,
            title: command.title.clone(),
            description: command.description.clone(),
            created_at: now,
            expires_at: None,
        };
        let event = caller.service_event(Action::ServiceCreate, &service, now);
        match store.create_service(&service, None, quota, &event) {
            Ok(()) => return Ok(service),
            Err(StoreError::CeilingReached(max)) => {
                return Err(AppError::QuotaExceeded(quota_reached("services", max)))
            }
            Err(StoreError::Conflict(_)) if command.service_name.is_none() => continue,
            Err(StoreError::Conflict(_)) => {
                return Err(AppError::Conflict(format!(
                    "the subdomain {:?} is already taken",
                    service.subdomain
                )))
            }
            Err(other) => return Err(other.into()),
        }
    }
    Err(AppError::Conflict(
        "could not find a free random subdomain; retry".into(),
    ))
}

/// The caller's customer's services that its scope covers, oldest first.
pub fn list(registry: &Registry, caller: &Caller) -> Result<Vec<Service>, AppError> {
    let services = registry.store.services_of(caller.customer()?)?;
    Ok(services
        .into_iter()
        .filter(|s| caller.may_act_on(&s.subdomain))
        .collect())
}

/// What a list shows of a service beside the service itself (`GET /services?include=status`):
/// the facts an owner scans a list for, each read from the store, never from a replica's memory,
/// so every replica answers the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceStatus {
    /// Whether it publishes documents.
    pub published: bool,
    /// The keys of its public key set, retired ones included.
    pub key_count: usize,
    /// The last fetch of its key set, under any of its issuers, in the fetch evidence's window.
    pub last_fetched_at: Option<OffsetDateTime>,
    /// Its custom domain and where that stands.
    pub domain: Option<(String, DomainStatus)>,
    /// Its managed signing, while on.
    pub signing: Option<SigningStatus>,
}

/// Managed signing as a list shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SigningStatus {
    /// The algorithm of the keys it makes.
    pub algorithm: crate::signing::Algorithm,
    /// When the next rotation starts by itself.
    pub next_rotation_at: Option<OffsetDateTime>,
}

/// [`list`], each service with its [`ServiceStatus`] where the caller may read its
/// configuration (`config:read`: the status says what `GET …/config`, `…/domain`, `…/signing`
/// and `…/fetches` would), else `None`: three indexed reads per such service and one for every
/// service's last fetch.
pub fn list_with_status(
    registry: &Registry,
    caller: &Caller,
    now: OffsetDateTime,
) -> Result<Vec<(Service, Option<ServiceStatus>)>, AppError> {
    // The policy judges each service once.
    let services: Vec<(Service, bool)> = (list(registry, caller)?.into_iter())
        .map(|s| {
            let readable = caller.allows(crate::policy::Action::ConfigRead, &s.subdomain);
            (s, readable)
        })
        .collect();
    let ids: Vec<Uuid> = (services.iter())
        .filter(|(_, readable)| *readable)
        .map(|(s, _)| s.id)
        .collect();
    let fetched: HashMap<Uuid, OffsetDateTime> = (registry.store)
        .last_key_set_fetches(&ids, now - fetches::KEPT_FOR)?
        .into_iter()
        .collect();
    services
        .into_iter()
        .map(|(service, readable)| {
            if !readable {
                return Ok((service, None));
            }
            let config = registry.store.config(service.id)?;
            let signing = registry.store.signing(service.id)?;
            let domain = registry.store.domain_of(service.id)?;
            let status = ServiceStatus {
                published: config.is_some(),
                key_count: config.map_or(0, |c| c.keys.published(now).count()),
                last_fetched_at: fetched.get(&service.id).copied(),
                domain: domain.map(|d| (d.domain, d.status)),
                signing: (signing.filter(|s| s.enabled)).map(|s| SigningStatus {
                    algorithm: s.settings.algorithm,
                    next_rotation_at: s.next_rotation_at(),
                }),
            };
            Ok((service, Some(status)))
        })
        .collect()
}

/// The action of a change to the service itself: `service.*` for a customer's, `anonymous.*`
/// for an anonymous one.
fn service_action(service: &Service, customers: Action, anonymous: Action) -> Action {
    if service.customer_id.is_some() {
        customers
    } else {
        anonymous
    }
}

/// Changes the title and description of `service` (granted to the caller), with the
/// `service.update` (or `anonymous.update`) event recording the members that changed, with their
/// old and new values.
pub fn update(
    registry: &Registry,
    caller: &Caller,
    service: &Service,
    command: UpdateService,
    now: OffsetDateTime,
) -> Result<Service, AppError> {
    // `service` may be a lagging copy (a read replica's), or another call may change it before
    // this one writes: the write then answers what is stored, and the change is made again
    // over it, so of two changes at once neither undoes the other and neither is refused.
    let mut before = service.clone();
    for _ in 0..UPDATE_ATTEMPTS {
        match update_once(registry, caller, &before, &command, now)? {
            Ok(updated) => return Ok(updated),
            Err(stored) => before = stored,
        }
    }
    Err(AppError::Conflict(
        "the service kept changing meanwhile: try again".to_owned(),
    ))
}

/// How many times a `PATCH` makes its change again over what another write stored meanwhile.
pub(crate) const UPDATE_ATTEMPTS: usize = 8;

/// One attempt of [`update`] over `before`, the service as last read: `Err` with the service as
/// stored when it changed since.
fn update_once(
    registry: &Registry,
    caller: &Caller,
    before: &Service,
    command: &UpdateService,
    now: OffsetDateTime,
) -> Result<Result<Service, Service>, AppError> {
    let mut service = before.clone();
    if let Some(title) = &command.title {
        service.title = Some(title.clone());
    }
    if let Some(description) = &command.description {
        service.description.clone_from(description);
    }
    let action = service_action(&service, Action::ServiceUpdate, Action::AnonymousUpdate);
    let event = caller
        .service_event(action, &service, now)
        .with_change(
            "title",
            before.title.clone().into(),
            service.title.clone().into(),
        )
        .with_change(
            "description",
            before.description.clone().into(),
            service.description.clone().into(),
        );
    // Even a change that changes nothing goes to the store, which compares it with what is
    // stored (`before` may be a lagging copy); it is not written, nor recorded, when stored
    // already (docs/api.md, "Audit trail").
    let key = service.subdomain.clone();
    let written = registry
        .store
        .update_service(before, &service, &event)
        .map_err(AppError::gone(|| format!("no service {key:?}")))?;
    Ok(written.map(|()| service))
}

/// Deletes `service` (granted to the caller) with its configuration and secret.
pub fn delete(
    registry: &Registry,
    caller: &Caller,
    service: &Service,
    now: OffsetDateTime,
) -> Result<(), AppError> {
    let action = service_action(service, Action::ServiceDelete, Action::AnonymousDelete);
    let event = caller.service_event(action, service, now);
    if registry.store.delete_service(service.id, &event)? {
        Ok(())
    } else {
        Err(not_found(&service.subdomain))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::testing::{
        add_account, add_customer, caller, origin, registry, registry_over, FixedRandomness,
        MemoryStore,
    };
    use crate::audit::{ActorKind, ResourceKind};
    use crate::ports::ServiceStore;
    use crate::Plan;
    use serde_json::json;
    use std::sync::Arc;
    use time::macros::datetime;

    const NOW: OffsetDateTime = datetime!(2026-11-23 12:00 UTC);

    fn named(name: &str, title: &str) -> CreateService {
        CreateService {
            title: Some(title.into()),
            service_name: Some(name.into()),
            description: None,
        }
    }

    fn random_name() -> CreateService {
        CreateService {
            title: Some("Random".into()),
            ..CreateService::default()
        }
    }

    #[test]
    fn create_with_a_chosen_name_registers_it_and_audits_the_caller() {
        let store = Arc::new(MemoryStore::default());
        let (registry, customer, admin) = registry_over(store.clone(), Plan::Business, NOW);
        let service = create(&registry, &caller(admin.clone()), named("Api", "API"), NOW).unwrap();

        assert_eq!(service.subdomain, "api-acme");
        assert_eq!(service.customer_id, Some(customer.id));
        assert_eq!(service.title.as_deref(), Some("API"));
        assert_eq!(store.service(service.id).unwrap(), Some(service.clone()));
        let events = store.events_of(Action::ServiceCreate);
        assert_eq!(events.len(), 1);
        let event = &events[0];
        assert_eq!(event.actor.kind, ActorKind::Static);
        assert_eq!(event.actor.account_id, Some(admin.id));
        assert_eq!(event.ip.as_deref(), Some("192.0.2.1"));
        assert_eq!(event.request_id.as_deref(), Some("req-1"));
        assert_eq!(event.customer_id, Some(customer.id));
        assert_eq!(event.resource.kind, ResourceKind::Service);
        assert_eq!(event.resource.id, service.id.to_string());
        assert_eq!(event.resource.subdomain.as_deref(), Some("api-acme"));
        assert_eq!(event.at, NOW);
    }

    #[test]
    fn a_random_name_is_drawn_again_when_taken() {
        let store = Arc::new(MemoryStore::default());
        let (mut registry, _, admin) = registry_over(store.clone(), Plan::Free, NOW);
        let random = Arc::new(FixedRandomness::default());
        registry.random = random.clone();
        let admin = caller(admin);
        let first = create(&registry, &admin, random_name(), NOW).unwrap();
        random.rewind();
        let second = create(&registry, &admin, random_name(), NOW).unwrap();

        // The names of the first two draws, drawn again from the same bytes.
        let same = FixedRandomness::default();
        let draws: Vec<String> = (0..2)
            .map(|_| registered_subdomain(Plan::Free, "acme", None, &same).unwrap())
            .collect();
        assert_ne!(draws[0], draws[1]);
        assert!(draws[0].ends_with("-acme"), "{}", draws[0]);
        assert_eq!(first.subdomain, draws[0]);
        // The second creation drew the first name again, found it taken, and took the next.
        assert_eq!(second.subdomain, draws[1]);
        let created = store.events_of(Action::ServiceCreate);
        assert_eq!(
            created.len(),
            2,
            "one event per service made, none for the collision"
        );
        assert_eq!(
            created[1].resource.subdomain.as_deref(),
            Some(&*second.subdomain)
        );
    }

    #[test]
    fn random_names_that_keep_colliding_are_a_conflict() {
        let store = Arc::new(MemoryStore::default());
        let (mut registry, _, admin) = registry_over(store.clone(), Plan::Free, NOW);
        let admin = caller(admin);
        let random = Arc::new(FixedRandomness::default());
        registry.random = random.clone();
        // Take the names of every draw one creation may make, then draw them again.
        for _ in 0..RANDOM_NAME_ATTEMPTS {
            create(&registry, &admin, random_name(), NOW).unwrap();
        }
        random.rewind();
        let err = create(&registry, &admin, random_name(), NOW).unwrap_err();

        assert!(matches!(err, AppError::Conflict(_)), "{err:?}");
        let created = store.events_of(Action::ServiceCreate);
        assert_eq!(created.len(), RANDOM_NAME_ATTEMPTS);
    }

    #[test]
    fn a_taken_chosen_name_is_a_conflict() {
        let store = Arc::new(MemoryStore::default());
        let (registry, _, admin) = registry_over(store.clone(), Plan::Enterprise, NOW);
        let admin = caller(admin);
        create(&registry, &admin, named("api", "First"), NOW).unwrap();
        let err = create(&registry, &admin, named("API", "Second"), NOW).unwrap_err();

        assert!(
            matches!(&err, AppError::Conflict(d) if d.contains("api-acme")),
            "{err:?}"
        );
        assert_eq!(store.events_of(Action::ServiceCreate).len(), 1);
    }

    #[test]
    fn a_customer_at_its_quota_creates_nothing() {
        let store = Arc::new(MemoryStore::default());
        let (mut registry, customer, admin) = registry_over(store.clone(), Plan::Business, NOW);
        registry.settings.max_services_per_customer = 1;
        let admin = caller(admin);
        create(&registry, &admin, named("api", "API"), NOW).unwrap();
        let err = create(&registry, &admin, named("web", "Web"), NOW).unwrap_err();

        assert!(matches!(err, AppError::QuotaExceeded(_)), "{err:?}");
        assert_eq!(store.count_services_of(customer.id).unwrap(), 1);
        assert_eq!(store.find_service("web-acme").unwrap(), None);
    }

    #[test]
    fn a_name_outside_the_callers_scope_is_forbidden() {
        let store = Arc::new(MemoryStore::default());
        let (registry, customer, _) = registry_over(store.clone(), Plan::Business, NOW);
        let web_only = add_account(
            &registry,
            &customer,
            json!({"kind": "static", "services": ["web-*"]}),
            NOW,
        );
        let web_only = caller(web_only);
        let err = create(&registry, &web_only, named("api", "API"), NOW).unwrap_err();
        assert!(
            matches!(&err, AppError::NotCovered { subdomain } if subdomain == "api-acme"),
            "{err:?}"
        );
        assert_eq!(store.find_service("api-acme").unwrap(), None);
        // What its scope covers, it may create.
        let web = create(&registry, &web_only, named("web-1", "Web"), NOW).unwrap();
        assert_eq!(web.subdomain, "web-1-acme");
        assert_eq!(store.events_of(Action::ServiceCreate).len(), 1);
    }

    #[test]
    fn an_anonymous_caller_may_not_create_nor_list() {
        let store = Arc::new(MemoryStore::default());
        let (registry, customer, _) = registry_over(store.clone(), Plan::Business, NOW);
        let anonymous = Caller::anonymous(origin());
        let err = create(&registry, &anonymous, named("api", "API"), NOW).unwrap_err();
        assert!(matches!(err, AppError::Forbidden(_)), "{err:?}");
        let err = list(&registry, &anonymous).unwrap_err();
        assert!(matches!(err, AppError::Forbidden(_)), "{err:?}");
        assert_eq!(store.count_services_of(customer.id).unwrap(), 0);
        assert!(store.events_of(Action::ServiceCreate).is_empty());
    }

    #[test]
    fn list_shows_only_what_the_scope_covers() {
        let (registry, customer, admin) = registry(Plan::Business, NOW);
        let admin = caller(admin);
        // Listed oldest first (the store's order for services created at one instant is
        // their ids').
        for (second, name) in (0..).zip(["api", "web-1", "web-2"]) {
            let at = NOW + time::Duration::seconds(second);
            create(&registry, &admin, named(name, name), at).unwrap();
        }
        // Another customer's service is never listed, even to a scope of "*".
        let (someone_else, _) = add_customer(&registry, "other", Plan::Business, NOW);
        let other = Service {
            id: Uuid::new_v4(),
            customer_id: Some(someone_else.id),
            subdomain: "api-other".into(),
            title: None,
            description: None,
            created_at: NOW,
            expires_at: None,
        };
        let event = admin.service_event(Action::ServiceCreate, &other, NOW);
        registry
            .store
            .create_service(&other, None, Ceiling::NONE, &event)
            .unwrap();
        let web_only = add_account(
            &registry,
            &customer,
            json!({"kind": "static", "services": ["web-*"]}),
            NOW,
        );

        let subdomains = |c: &Caller| -> Vec<String> {
            let services = list(&registry, c).unwrap();
            services.into_iter().map(|s| s.subdomain).collect()
        };
        assert_eq!(subdomains(&admin), ["api-acme", "web-1-acme", "web-2-acme"]);
        assert_eq!(subdomains(&caller(web_only)), ["web-1-acme", "web-2-acme"]);
    }

    #[test]
    fn update_changes_the_title_and_clears_the_description() {
        let store = Arc::new(MemoryStore::default());
        let (registry, customer, admin) = registry_over(store.clone(), Plan::Business, NOW);
        let admin = caller(admin);
        let command = CreateService {
            description: Some("to clear".into()),
            ..named("api", "Old")
        };
        let service = create(&registry, &admin, command, NOW).unwrap();
        let later = NOW + time::Duration::minutes(5);
        let change = UpdateService {
            title: Some("New".into()),
            description: Some(None),
        };
        let updated = update(&registry, &admin, &service, change, later).unwrap();

        assert_eq!(updated.title.as_deref(), Some("New"));
        assert_eq!(updated.description, None);
        assert_eq!(updated.subdomain, "api-acme");
        assert_eq!(store.service(service.id).unwrap(), Some(updated.clone()));
        let event = store.last_event().unwrap();
        assert_eq!(event.action, Action::ServiceUpdate);
        assert_eq!(event.resource.id, service.id.to_string());
        assert_eq!(event.customer_id, Some(customer.id));
        assert_eq!(event.request_id.as_deref(), Some("req-1"));
        assert_eq!(event.at, later);
        assert_eq!(
            event.to_json()["changes"],
            serde_json::json!({
                "title": {"old": "Old", "new": "New"},
                "description": {"old": "to clear", "new": null},
            })
        );
        // The same again changes nothing: no event.
        let events = store.events_of(Action::ServiceUpdate).len();
        let same = UpdateService {
            title: Some("New".into()),
            description: Some(None),
        };
        assert_eq!(
            update(&registry, &admin, &updated, same, later).unwrap(),
            updated
        );
        assert_eq!(store.events_of(Action::ServiceUpdate).len(), events);
    }

    #[test]
    fn update_over_a_lagging_copy_changes_only_its_members_over_what_is_stored() {
        let store = Arc::new(MemoryStore::default());
        let (registry, _, admin) = registry_over(store.clone(), Plan::Business, NOW);
        let admin = caller(admin);
        let stale = create(&registry, &admin, named("api", "Old"), NOW).unwrap();
        // Another replica's call changed the description; this copy has not seen it.
        let described = UpdateService {
            description: Some(Some("theirs".into())),
            ..UpdateService::default()
        };
        update(&registry, &admin, &stale, described, NOW).unwrap();
        let events = store.events_of(Action::ServiceUpdate).len();

        let retitled = UpdateService {
            title: Some("New".into()),
            ..UpdateService::default()
        };
        let updated = update(&registry, &admin, &stale, retitled, NOW).unwrap();
        assert_eq!(updated.title.as_deref(), Some("New"));
        assert_eq!(updated.description.as_deref(), Some("theirs"));
        assert_eq!(store.service(stale.id).unwrap(), Some(updated.clone()));
        assert_eq!(
            store.last_event().unwrap().to_json()["changes"],
            serde_json::json!({"title": {"old": "Old", "new": "New"}})
        );

        // The lagging copy's title asked for again is a change of what is stored ("New").
        let back = UpdateService {
            title: Some("Old".into()),
            ..UpdateService::default()
        };
        let updated = update(&registry, &admin, &stale, back, NOW).unwrap();
        assert_eq!(updated.title.as_deref(), Some("Old"));
        assert_eq!(store.service(stale.id).unwrap(), Some(updated));
        assert_eq!(store.events_of(Action::ServiceUpdate).len(), events + 2);
    }

    #[test]
    fn update_leaves_what_it_is_not_given() {
        let (registry, _, admin) = registry(Plan::Business, NOW);
        let admin = caller(admin);
        let command = CreateService {
            description: Some("kept".into()),
            ..named("api", "Kept")
        };
        let service = create(&registry, &admin, command, NOW).unwrap();
        let updated = update(&registry, &admin, &service, UpdateService::default(), NOW).unwrap();
        assert_eq!(updated.title.as_deref(), Some("Kept"));
        assert_eq!(updated.description.as_deref(), Some("kept"));
    }

    #[test]
    fn update_of_a_deleted_service_is_not_found() {
        let store = Arc::new(MemoryStore::default());
        let (registry, _, admin) = registry_over(store.clone(), Plan::Business, NOW);
        let admin = caller(admin);
        let service = create(&registry, &admin, named("api", "API"), NOW).unwrap();
        delete(&registry, &admin, &service, NOW).unwrap();
        let change = UpdateService {
            title: Some("New".into()),
            description: None,
        };
        let err = update(&registry, &admin, &service, change, NOW).unwrap_err();

        assert!(
            matches!(&err, AppError::NotFound(d) if d.contains("api-acme")),
            "{err:?}"
        );
        assert!(store.events_of(Action::ServiceUpdate).is_empty());
    }

    #[test]
    fn delete_audits_once_and_a_second_delete_is_not_found() {
        let store = Arc::new(MemoryStore::default());
        let (registry, customer, admin) = registry_over(store.clone(), Plan::Business, NOW);
        let admin_caller = caller(admin.clone());
        let service = create(&registry, &admin_caller, named("api", "API"), NOW).unwrap();
        delete(&registry, &admin_caller, &service, NOW).unwrap();

        assert_eq!(store.service(service.id).unwrap(), None);
        let event = store.last_event().unwrap();
        assert_eq!(event.action, Action::ServiceDelete);
        assert_eq!(event.resource.subdomain.as_deref(), Some("api-acme"));
        assert_eq!(event.actor.account_id, Some(admin.id));
        assert_eq!(event.customer_id, Some(customer.id));

        let err = delete(&registry, &admin_caller, &service, NOW).unwrap_err();
        assert!(matches!(err, AppError::NotFound(_)), "{err:?}");
        assert_eq!(store.events_of(Action::ServiceDelete).len(), 1);
    }

    #[test]
    fn the_status_of_each_listed_service_has_its_last_key_set_fetch() {
        use crate::ports::{AgentFetches, DocumentFetches, FetchLog, FetchedDocument};
        let store = Arc::new(MemoryStore::default());
        let (registry, _, admin) = registry_over(store.clone(), Plan::Business, NOW);
        let fetched = create(&registry, &caller(admin.clone()), named("a", "A"), NOW).unwrap();
        let quiet = create(&registry, &caller(admin.clone()), named("b", "B"), NOW).unwrap();
        let at = NOW - time::Duration::hours(30);
        let fetch = |document| DocumentFetches {
            service_id: fetched.id,
            document,
            ok: 1,
            not_modified: 0,
            last_at: at,
            agents: vec![AgentFetches {
                agent: "aws".into(),
                count: 1,
                last_at: at,
                networks: Vec::new(),
            }],
        };
        store
            .record_fetches(&[fetch(FetchedDocument::Jwks)])
            .unwrap();
        // A discovery document's fetch is no verifier's fetch of the keys.
        let later = DocumentFetches {
            last_at: NOW,
            ..fetch(FetchedDocument::Discovery)
        };
        store.record_fetches(&[later]).unwrap();

        let listed = list_with_status(&registry, &caller(admin), NOW).unwrap();
        let of = |id: Uuid| {
            let status = &listed.iter().find(|(s, _)| s.id == id).unwrap().1;
            status
                .clone()
                .expect("the first account reads every configuration")
        };
        let nothing = ServiceStatus {
            published: false,
            key_count: 0,
            last_fetched_at: None,
            domain: None,
            signing: None,
        };
        assert_eq!(of(quiet.id), nothing);
        assert_eq!(
            of(fetched.id),
            ServiceStatus {
                last_fetched_at: Some(at),
                ..nothing
            }
        );
    }

    #[test]
    fn a_caller_that_may_not_read_configurations_gets_no_status() {
        let (registry, customer, admin) = registry(Plan::Business, NOW);
        let api = create(&registry, &caller(admin.clone()), named("api", "API"), NOW).unwrap();
        create(&registry, &caller(admin), named("web", "Web"), NOW).unwrap();
        let lister = add_account(
            &registry,
            &customer,
            json!({"$schema": "https://registry.example/schemas/service-account-policy/v2.json",
                   "kind": "static", "services": ["*"], "actions": ["services:read"]}),
            NOW,
        );
        let listed = list_with_status(&registry, &caller(lister), NOW).unwrap();
        assert_eq!(listed.len(), 2);
        assert!(
            listed.iter().all(|(_, status)| status.is_none()),
            "{listed:?}"
        );
        // With `config:read` as well, on the one service it lists: that status.
        let reader = add_account(
            &registry,
            &customer,
            json!({"$schema": "https://registry.example/schemas/service-account-policy/v2.json",
                   "kind": "static", "services": [api.subdomain],
                   "actions": ["services:read", "config:read"]}),
            NOW,
        );
        let listed = list_with_status(&registry, &caller(reader), NOW).unwrap();
        assert_eq!(listed.len(), 1);
        assert!(listed[0].1.is_some());
    }
}
