//! Anonymous services (docs/api.md, "Responses"): a temporary service for anyone, managed with a
//! secret shown once. Their changes and deletion go through [`services`](crate::app::services); the
//! per-address creation limit is the server's (an HTTP-level limit).

use crate::app::{AppError, Caller, Origin, Registry};
use crate::audit::Action;
use crate::credentials::{self, CredentialKind, GeneratedSecret};
use crate::naming::anonymous_subdomain;
use crate::ports::{Ceiling, CredentialRecord};
use crate::timestamp::whole_second;
use crate::{Service, StoreError};
use time::{Duration, OffsetDateTime};
use uuid::Uuid;

/// How long a client waits before trying again when the ceiling of live anonymous services is
/// reached.
pub const CEILING_RETRY_AFTER_SECS: u64 = 60;

/// Where a browser says a request comes from (its `Sec-Fetch-Site`); programs say nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestSite {
    /// No word of it: a program, or an old browser.
    Unsaid,
    /// A page of the registry's own origin (`same-origin`), or an address typed in (`none`).
    ThisSite,
    /// A page of another site, or of another origin of this one (`cross-site`, `same-site`).
    OtherSite,
}

/// Whether a request from `site` may create an anonymous service: not one that another site's
/// page made, where a form with no field needs no script, spends its visitor's creations for
/// the hour and shows them a secret (a 403).
///
/// ```
/// use registry_domain::app::anonymous::{may_create, RequestSite};
/// assert!(may_create(RequestSite::Unsaid).is_ok());
/// assert!(may_create(RequestSite::ThisSite).is_ok());
/// assert!(may_create(RequestSite::OtherSite).is_err());
/// ```
pub fn may_create(site: RequestSite) -> Result<(), AppError> {
    match site {
        RequestSite::Unsaid | RequestSite::ThisSite => Ok(()),
        RequestSite::OtherSite => Err(AppError::Forbidden(
            "a page of another site may not create anonymous services (its Sec-Fetch-Site or \
             Origin says so): create one from the registry's own page or from a program"
                .to_owned(),
        )),
    }
}

/// `POST /anonymous/services`, its body checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateAnonymous {
    /// The title.
    pub title: Option<String>,
    /// The description.
    pub description: Option<String>,
    /// How long the service lives (see [`crate::anonymous::lifetime`]).
    pub ttl: Duration,
}

/// A new anonymous service with its management secret.
#[derive(Debug)]
pub struct CreatedAnonymous {
    /// The service, `expires_at` set.
    pub service: Service,
    /// The secret (plaintext and lookup id): shown to the creator once, never stored.
    pub secret: GeneratedSecret,
    /// The secret's stored hash, for the caller to remember that the secret is good (the
    /// creator's first call then pays for no hashing).
    pub hash: String,
}

/// When a service made at `now` to live `ttl` ends: in whole seconds, as `expiresAt` states it
/// (the service ends at the time the answer gives, not up to a second after it), rounded up, so
/// that it lives at least what was asked (a second, at the least), but never past its 24 hours.
fn expiry(now: OffsetDateTime, ttl: time::Duration) -> OffsetDateTime {
    let end = now + ttl;
    let down = whole_second(end);
    let up = if down == end {
        end
    } else {
        down + time::Duration::SECOND
    };
    if up - now <= crate::anonymous::MAX_LIFETIME {
        up
    } else {
        down
    }
}

/// Creates an anonymous service for whoever calls from `origin`, below the ceiling of live
/// anonymous services (`anon_max_active`), with a new secret stored only as its hash and the
/// `anonymous.create` event.
///
/// `now` is read twice: for the ceiling, before any hashing (a full registry costs no argon2),
/// and once the secret is hashed, for the service's times. Hashing may wait for a free lane
/// (and takes a second unoptimised): the lifetime starts when the service is made, as the
/// `remainingSeconds` the creator reads says.
pub fn create(
    registry: &Registry,
    origin: Origin,
    command: CreateAnonymous,
    now: impl Fn() -> OffsetDateTime,
) -> Result<CreatedAnonymous, AppError> {
    let store = &*registry.store;
    let ceiling = registry.settings.anon_max_active;
    // A full registry costs no argon2.
    if store.live_anonymous(now())? >= ceiling {
        return Err(at_ceiling(ceiling));
    }
    let secret = credentials::generate(CredentialKind::AnonymousSecret, &*registry.random);
    let hash = registry.hasher.hash(&secret.plaintext)?;
    let record = CredentialRecord {
        lookup_id: secret.lookup_id.clone(),
        hash: hash.clone(),
    };
    let now = now();
    let service = Service {
        id: Uuid::new_v4(),
        customer_id: None,
        subdomain: anonymous_subdomain(&*registry.random),
        title: command.title,
        description: command.description,
        created_at: now,
        expires_at: Some(expiry(now, command.ttl)),
    };
    let event = Caller::anonymous(origin).service_event(Action::AnonymousCreate, &service, now);
    // Counted again in the insert's transaction: creations racing past the check above
    // never pass the ceiling together.
    registry
        .store
        .create_service(&service, Some(&record), Ceiling(ceiling), &event)
        .map_err(|error| match error {
            StoreError::CeilingReached(_) => at_ceiling(ceiling),
            other => other.into(),
        })?;
    Ok(CreatedAnonymous {
        service,
        secret,
        hash,
    })
}

/// The 503 of a registry holding `ceiling` live anonymous services.
fn at_ceiling(ceiling: u64) -> AppError {
    AppError::Capacity {
        retry_after_secs: CEILING_RETRY_AFTER_SECS,
        detail: format!(
            "the registry holds {ceiling} live anonymous services, the most it keeps; retry \
             later, when some have expired"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::testing::{origin, registry_over, MemoryStore};
    use crate::audit::{ActorKind, ResourceKind};
    use crate::credentials::parse;
    use crate::naming::is_anonymous_subdomain;
    use crate::ports::{CredentialOwner, CredentialStore, ServiceStore};
    use crate::Plan;
    use std::sync::Arc;
    use time::macros::datetime;

    const NOW: OffsetDateTime = datetime!(2026-11-23 12:00 UTC);

    fn command() -> CreateAnonymous {
        CreateAnonymous {
            title: Some("demo".into()),
            description: None,
            ttl: Duration::hours(2),
        }
    }

    fn setup(ceiling: u64) -> (Registry, Arc<MemoryStore>) {
        let store = Arc::new(MemoryStore::default());
        let (mut registry, ..) = registry_over(store.clone(), Plan::Business, NOW);
        registry.settings.anon_max_active = ceiling;
        (registry, store)
    }

    #[test]
    fn creates_a_service_that_expires_with_a_secret_stored_as_its_hash() {
        let (registry, store) = setup(10);

        let created = create(&registry, origin(), command(), || NOW).unwrap();

        let service = &created.service;
        assert_eq!(service.customer_id, None);
        assert!(is_anonymous_subdomain(&service.subdomain), "{service:?}");
        assert_eq!(service.title.as_deref(), Some("demo"));
        assert_eq!(service.created_at, NOW);
        assert_eq!(service.expires_at, Some(NOW + Duration::hours(2)));
        assert_eq!(store.service(service.id).unwrap().as_ref(), Some(service));
        // The secret's shape: `rgan_{lookup}_{secret}`, its lookup id the outcome's.
        let parsed = parse(&created.secret.plaintext).expect("a well-formed secret");
        assert_eq!(parsed.kind, CredentialKind::AnonymousSecret);
        assert_eq!(parsed.lookup_id, created.secret.lookup_id);
        assert!(created.secret.plaintext.starts_with("rgan_"));
        // Only the hash, made by the port, is stored, and it is the one the outcome carries.
        assert_eq!(created.hash, format!("plain:{}", created.secret.plaintext));
        let stored = store
            .credential(&created.secret.lookup_id)
            .unwrap()
            .unwrap();
        assert_eq!(stored.owner, CredentialOwner::AnonymousService(service.id));
        assert_eq!(stored.hash, created.hash);
        // Created in the middle of a second, it ends at a whole second, as its answer states
        // (`expiresAt`): the next one, so that it lives what was asked, at the least a second.
        let later = NOW + Duration::milliseconds(750);
        let created = create(&registry, origin(), command(), || later).unwrap();
        let two_hours = NOW + Duration::hours(2) + Duration::SECOND;
        assert_eq!(created.service.expires_at, Some(two_hours));
        let one_second = CreateAnonymous {
            ttl: Duration::SECOND,
            ..command()
        };
        let created = create(&registry, origin(), one_second, || later).unwrap();
        assert_eq!(created.service.expires_at, Some(NOW + Duration::seconds(2)));
        // Never past its 24 hours: then the second before.
        let longest = CreateAnonymous {
            ttl: crate::anonymous::MAX_LIFETIME,
            ..command()
        };
        let created = create(&registry, origin(), longest, || later).unwrap();
        assert_eq!(created.service.expires_at, Some(NOW + Duration::hours(24)));
    }

    #[test]
    fn writes_the_anonymous_create_event_from_the_caller_s_origin() {
        let (registry, store) = setup(10);

        let created = create(&registry, origin(), command(), || NOW).unwrap();

        let events = store.events_of(Action::AnonymousCreate);
        assert_eq!(events.len(), 1);
        let event = &events[0];
        assert_eq!(event.customer_id, None);
        assert_eq!(event.at, NOW);
        assert_eq!(event.actor.kind, ActorKind::Anonymous);
        assert_eq!(event.actor.account_id, None);
        assert_eq!(event.resource.kind, ResourceKind::Service);
        assert_eq!(event.resource.id, created.service.id.to_string());
        assert_eq!(
            event.resource.subdomain.as_deref(),
            Some(created.service.subdomain.as_str())
        );
        assert_eq!(event.ip.as_deref(), Some("192.0.2.1"));
        assert_eq!(event.request_id.as_deref(), Some("req-1"));
        let text = format!("{:?}", store.events());
        assert!(!text.contains(&created.secret.plaintext), "{text}");
    }

    #[test]
    fn the_ceiling_of_live_anonymous_services_is_a_capacity_error() {
        let (registry, store) = setup(2);
        create(&registry, origin(), command(), || NOW).unwrap();
        create(&registry, origin(), command(), || NOW).unwrap();
        let before = store.events().len();

        let refused = create(&registry, origin(), command(), || NOW).unwrap_err();

        assert_eq!(
            refused,
            AppError::Capacity {
                retry_after_secs: 60,
                detail: "the registry holds 2 live anonymous services, the most it keeps; retry \
                         later, when some have expired"
                    .into(),
            }
        );
        assert_eq!(store.live_anonymous(NOW).unwrap(), 2);
        assert_eq!(store.events().len(), before, "a refusal writes no event");
        // Expired services no longer count.
        let later = NOW + Duration::hours(3);
        assert!(create(&registry, origin(), command(), || later).is_ok());
    }

    #[test]
    fn the_lifetime_starts_once_the_secret_is_hashed() {
        let (registry, store) = setup(1);
        let hashed = NOW + Duration::seconds(2);
        let readings = std::cell::Cell::new(0);
        let clock = || {
            readings.set(readings.get() + 1);
            if readings.get() == 1 {
                NOW
            } else {
                hashed
            }
        };

        let created = create(&registry, origin(), command(), clock).unwrap();

        assert_eq!(readings.get(), 2);
        assert_eq!(created.service.created_at, hashed);
        assert_eq!(
            created.service.expires_at,
            Some(hashed + Duration::hours(2))
        );
        assert_eq!(store.events_of(Action::AnonymousCreate)[0].at, hashed);
    }
}
