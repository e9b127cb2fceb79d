//! Services: the things whose discovery documents are published.

use crate::keys::KeyState;
use time::OffsetDateTime;
use uuid::Uuid;

/// A registered or anonymous service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    /// Stable identifier; accepted in paths in place of the subdomain (legacy ids).
    pub id: Uuid,
    /// The owning customer; `None` for anonymous services.
    pub customer_id: Option<Uuid>,
    /// Public URL name, lower case.
    pub subdomain: String,
    /// Title (required for registered services).
    pub title: Option<String>,
    /// Free text.
    pub description: Option<String>,
    /// Creation time.
    pub created_at: OffsetDateTime,
    /// Expiry, for anonymous services only.
    pub expires_at: Option<OffsetDateTime>,
}

impl Service {
    /// Whether the service no longer exists at `now` (anonymous services only ever expire).
    ///
    /// ```
    /// use registry_domain::Service;
    /// use time::macros::datetime;
    /// let s = Service {
    ///     id: uuid::Uuid::nil(), customer_id: None, subdomain: "abcdefghijkl-anon".into(),
    ///     title: None, description: None,
    ///     created_at: datetime!(2026-11-21 10:00 UTC),
    ///     expires_at: Some(datetime!(2026-11-21 11:00 UTC)),
    /// };
    /// assert!(!s.is_expired_at(datetime!(2026-11-21 10:59:59 UTC)));
    /// assert!(s.is_expired_at(datetime!(2026-11-21 11:00 UTC)));
    /// ```
    pub fn is_expired_at(&self, now: OffsetDateTime) -> bool {
        self.expires_at.is_some_and(|at| now >= at)
    }
}

/// A published configuration: the rewritten discovery document and the key set, both as the
/// exact JSON text that is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedConfig {
    /// The service it belongs to.
    pub service_id: Uuid,
    /// Serialized discovery document (issuer and jwks_uri already rewritten).
    pub openid_configuration: String,
    /// Serialized key set (`{"keys": [...]}`).
    pub jwks: String,
    /// When it was published; drives `Last-Modified`.
    pub updated_at: OffsetDateTime,
    /// The last change of the public documents before `updated_at`, as the store recorded it
    /// (`None`: none known). A client may hold it as `Last-Modified`: when it falls in the same
    /// second as `updated_at`, a date cannot tell the two versions apart (docs/api.md, "Public
    /// hosting").
    pub previous_change_at: Option<OffsetDateTime>,
    /// When each document last changed, as the store dated it ([`VersionHistory::date`]).
    pub dates: DocumentDates,
    /// Every key published, current and retired (docs/api.md, "Key lifecycle").
    pub keys: KeyState,
}

/// When each public document last changed: its bytes, hence its `ETag` (docs/api.md, "Fetch
/// evidence"). A version that changes one document leaves the other's date as it was, so that
/// a verifier that fetched the discovery document before a key rotation has still fetched it
/// since it changed. `None`: at the version's `updated_at` (a version not yet dated, and rows
/// written before the dates were recorded).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DocumentDates {
    /// The discovery document's last change.
    pub discovery: Option<OffsetDateTime>,
    /// The key set's last change by a write; a retired key leaving later changes it again, at
    /// the time it leaves (the replica adds those).
    pub jwks: Option<OffsetDateTime>,
}

/// What a subdomain serves, as hosting reads it for an issuer it does not hold: the service's
/// public documents and what dates them, without what only the API shows (title, description,
/// the records of the current keys). The store parses the key state only when a retired key
/// has an end, so a first fetch of an issuer that retired nothing reads no JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publication {
    /// The service it belongs to (`Surrogate-Key`).
    pub service_id: Uuid,
    /// Its subdomain, lower case.
    pub subdomain: String,
    /// Expiry, for anonymous services only.
    pub expires_at: Option<OffsetDateTime>,
    /// As [`PublishedConfig::openid_configuration`].
    pub openid_configuration: String,
    /// As [`PublishedConfig::jwks`]: the key set as uploaded.
    pub jwks: String,
    /// As [`PublishedConfig::updated_at`].
    pub updated_at: OffsetDateTime,
    /// As [`PublishedConfig::previous_change_at`].
    pub previous_change_at: Option<OffsetDateTime>,
    /// As [`PublishedConfig::dates`].
    pub dates: DocumentDates,
    /// The retired keys, each with the time it leaves the key set (the current ones are
    /// `jwks`).
    pub retired: Vec<crate::keys::KeyRecord>,
}

impl Publication {
    /// What `service` serves under `config`.
    pub fn of(service: &Service, config: PublishedConfig) -> Self {
        debug_assert_eq!(
            service.id, config.service_id,
            "the service's own configuration"
        );
        Self::at(service.subdomain.clone(), service.expires_at, config)
    }

    /// What the service of `config` serves at `subdomain`, expiring at `expires_at`: for a
    /// reader that has only these of the service (the store's read by subdomain).
    pub fn at(
        subdomain: String,
        expires_at: Option<OffsetDateTime>,
        config: PublishedConfig,
    ) -> Self {
        Self {
            service_id: config.service_id,
            subdomain,
            expires_at,
            openid_configuration: config.openid_configuration,
            jwks: config.jwks,
            updated_at: config.updated_at,
            previous_change_at: config.previous_change_at,
            dates: config.dates,
            retired: (config.keys.keys.into_iter())
                .filter(|k| k.retired_at.is_some())
                .collect(),
        }
    }
}

/// What `Last-Modified` needs to know of the version a write replaces (docs/api.md, "Public
/// hosting"): every storage adapter dates the version it writes by it, in the write's
/// transaction ([`VersionHistory::date`]).
#[derive(Debug)]
pub struct VersionHistory {
    updated_at: OffsetDateTime,
    previous_change_at: Option<OffsetDateTime>,
    /// What the version serves, to tell which document a write changes.
    openid_configuration: String,
    jwks: String,
    dates: DocumentDates,
    /// The version's keys: which retired ones leave when, and those a write drops, to remember
    /// ([`crate::withdrawn`]).
    keys: KeyState,
}

impl VersionHistory {
    /// The history of the stored version `config`.
    pub fn of(config: &PublishedConfig) -> Self {
        Self {
            updated_at: config.updated_at,
            previous_change_at: config.previous_change_at,
            openid_configuration: config.openid_configuration.clone(),
            jwks: config.jwks.clone(),
            dates: config.dates,
            keys: config.keys.clone(),
        }
    }

    /// The retired keys that leave (or left) the public set after `updated_at`: `kid`, when.
    fn leaving(&self) -> impl Iterator<Item = (&str, OffsetDateTime)> {
        (self.keys.keys.iter())
            .filter_map(|k| Some((k.kid.as_str(), k.published_until?)))
            .filter(|(_, until)| *until > self.updated_at)
    }

    /// `config`'s [`DocumentDates`], as it replaces this version at its `updated_at` (already
    /// dated): a document whose bytes stay as they were keeps its date. The key set served at
    /// that time is the uploaded one and the retired keys still published then.
    fn dates_of(&self, config: &PublishedConfig) -> DocumentDates {
        let at = config.updated_at;
        let discovery = match config.openid_configuration == self.openid_configuration {
            true => self.dates.discovery.unwrap_or(self.updated_at),
            false => at,
        };
        let published = |retired: &[(String, Option<OffsetDateTime>)]| -> Vec<String> {
            (retired.iter())
                .filter(|(_, until)| until.is_none_or(|until| at < until))
                .map(|(kid, _)| kid.clone())
                .collect()
        };
        let same_set = config.jwks == self.jwks
            && published(&retired_keys(&config.keys)) == published(&retired_keys(&self.keys));
        let jwks = match same_set {
            // Unchanged by the write; changed meanwhile by every key that left until then.
            true => (self.leaving())
                .map(|(_, until)| until)
                .filter(|until| *until <= at)
                .fold(
                    self.dates.jwks.unwrap_or(self.updated_at),
                    OffsetDateTime::max,
                ),
            false => at,
        };
        DocumentDates {
            discovery: Some(discovery),
            jwks: Some(jwks),
        }
    }

    /// The last change of the public documents at or before `at`, as far as the row tells:
    /// its publication, or a retired key's leaving.
    fn last_change(&self, at: OffsetDateTime, inclusive: bool) -> Option<OffsetDateTime> {
        std::iter::once(self.updated_at)
            .chain(self.leaving().map(|(_, until)| until))
            .filter(|change| *change < at || (inclusive && *change == at))
            .max()
    }

    /// `config`, about to replace the version this history describes, with
    /// `previous_change_at` recorded: the last change before it, so that a version published
    /// in the same second as that change is known as such on every replica. Two more rules keep
    /// `Last-Modified` from moving back, which would make a client's older date look current:
    /// a version is never dated before the one it replaces (replicas' clocks differ), and when
    /// a write keeps the version but drops retired keys that had already left (the reaper), the
    /// version is dated when the last of them left, since the row will no longer tell.
    pub fn applied_to(&self, config: PublishedConfig) -> PublishedConfig {
        let mut config = self.dated(config);
        let held = |kid: &str| config.keys.keys.iter().any(|k| k.kid == kid);
        let withdrawn = self.keys.remembered(held, config.updated_at);
        config.keys.withdrawn = withdrawn;
        config
    }

    /// `config` with its dates ([`Self::applied_to`]).
    fn dated(&self, mut config: PublishedConfig) -> PublishedConfig {
        if config.updated_at == self.updated_at {
            let kept = |kid: &str| config.keys.keys.iter().any(|k| k.kid == kid);
            let left = (self.leaving())
                .filter(|(kid, _)| !kept(kid))
                .map(|(_, until)| until)
                .max();
            match left {
                Some(left) => {
                    config.updated_at = left;
                    config.previous_change_at = self.last_change(left, false);
                }
                None => config.previous_change_at = self.previous_change_at,
            }
            config.dates = self.dates_of(&config);
            return config;
        }
        config.updated_at = config.updated_at.max(self.updated_at);
        config.previous_change_at = self.last_change(config.updated_at, true);
        config.dates = self.dates_of(&config);
        config
    }

    /// The history of a configuration deleted at `at` (`DELETE …/config`, its last source
    /// removed): the version published after it is a change at `at`, so that a client holding
    /// the deleted version's date, in the same second, is not told it holds the new one.
    pub fn removed(at: OffsetDateTime) -> Self {
        Self {
            updated_at: at,
            // A version published in the very millisecond of the removal still shares its
            // second with it.
            previous_change_at: Some(at),
            openid_configuration: String::new(),
            jwks: String::new(),
            dates: DocumentDates::default(),
            keys: KeyState::default(),
        }
    }

    /// `config` as it is stored when it replaces the version `history` describes (`None`:
    /// it is the first, and no change came before it), with the keys it withdraws remembered.
    pub fn date(history: Option<&Self>, config: PublishedConfig) -> PublishedConfig {
        match history {
            Some(history) => history.applied_to(config),
            None => PublishedConfig {
                previous_change_at: None,
                dates: DocumentDates {
                    discovery: Some(config.updated_at),
                    jwks: Some(config.updated_at),
                },
                keys: KeyState {
                    withdrawn: Vec::new(),
                    ..config.keys
                },
                ..config
            },
        }
    }
}

/// The retired keys of `keys`: `kid`, end (`None`: published until withdrawn).
fn retired_keys(keys: &KeyState) -> Vec<(String, Option<OffsetDateTime>)> {
    (keys.keys.iter())
        .filter(|k| k.retired_at.is_some())
        .map(|k| (k.kid.clone(), k.published_until))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{KeyRecord, KeyState};
    use time::macros::datetime;

    fn key(kid: &str, until: Option<OffsetDateTime>) -> KeyRecord {
        KeyRecord {
            kid: kid.into(),
            jwk: serde_json::Map::new(),
            thumbprint: kid.into(),
            first_published_at: datetime!(2026-11-25 09:00 UTC),
            retired_at: until.map(|_| datetime!(2026-11-25 09:30 UTC)),
            published_until: until,
            lead_seconds: 600,
            source: crate::keys::DEFAULT_SOURCE.into(),
            also_sources: Vec::new(),
            verifiers: None,
            dismissed_at: None,
        }
    }

    fn version(at: OffsetDateTime, keys: Vec<KeyRecord>) -> PublishedConfig {
        PublishedConfig {
            service_id: Uuid::nil(),
            openid_configuration: "{}".into(),
            jwks: "{}".into(),
            updated_at: at,
            previous_change_at: None,
            dates: DocumentDates::default(),
            keys: KeyState {
                keys,
                ..KeyState::default()
            },
        }
    }

    #[test]
    fn a_new_version_records_the_last_change_before_it() {
        let t = datetime!(2026-11-25 10:00:00.100 UTC);
        let first = version(t, vec![key("a", None)]);
        let second = VersionHistory::of(&first).applied_to(version(
            t + time::Duration::milliseconds(300),
            vec![key("b", None)],
        ));
        assert_eq!(second.previous_change_at, Some(t));
        // A retired key that left in between is the last change.
        let left = t + time::Duration::milliseconds(500);
        let with_retired = version(t, vec![key("a", None), key("old", Some(left))]);
        let next = VersionHistory::of(&with_retired).applied_to(version(
            t + time::Duration::seconds(1),
            vec![key("a", None)],
        ));
        assert_eq!(next.previous_change_at, Some(left));
        // A replica whose clock is behind never dates a version before the one it replaces.
        let behind = VersionHistory::of(&first).applied_to(version(
            t - time::Duration::milliseconds(50),
            vec![key("c", None)],
        ));
        assert_eq!(behind.updated_at, t);
        assert_eq!(behind.previous_change_at, Some(t));
    }

    #[test]
    fn a_version_after_a_removal_shares_its_second() {
        let t = datetime!(2026-11-25 10:00:00.100 UTC);
        for later in [0, 300] {
            let at = t + time::Duration::milliseconds(later);
            let next = VersionHistory::date(
                Some(&VersionHistory::removed(t)),
                version(at, vec![key("a", None)]),
            );
            assert_eq!(next.updated_at, at);
            assert_eq!(next.previous_change_at, Some(t), "{later} ms after");
            assert_eq!(next.dates.discovery, Some(at));
            assert_eq!(next.dates.jwks, Some(at));
        }
        // A replica whose clock is behind dates it at the removal.
        let behind = VersionHistory::date(
            Some(&VersionHistory::removed(t)),
            version(t - time::Duration::milliseconds(50), vec![]),
        );
        assert_eq!(behind.updated_at, t);
        assert_eq!(behind.previous_change_at, Some(t));
    }

    #[test]
    fn dropping_keys_that_left_dates_the_version_when_they_left() {
        let t = datetime!(2026-11-25 10:00:00 UTC);
        let left = t + time::Duration::hours(24);
        let current = PublishedConfig {
            previous_change_at: Some(t - time::Duration::hours(1)),
            dates: DocumentDates {
                discovery: Some(t - time::Duration::hours(2)),
                jwks: Some(t),
            },
            ..version(t, vec![key("a", None), key("old", Some(left))])
        };
        // The reaper: the same version, without the key whose time ran out.
        let reaped = VersionHistory::of(&current).applied_to(version(t, vec![key("a", None)]));
        assert_eq!(reaped.updated_at, left);
        assert_eq!(reaped.previous_change_at, Some(t));
        assert_eq!(
            reaped.dates.jwks,
            Some(left),
            "the key set changed when the key left"
        );
        assert_eq!(reaped.dates.discovery, current.dates.discovery);
        // A write that keeps the version and its keys keeps its history.
        let same = VersionHistory::of(&current).applied_to(current.clone());
        assert_eq!(same, current);
    }

    #[test]
    fn a_document_a_write_leaves_as_it_was_keeps_its_date() {
        let t = datetime!(2026-11-25 10:00:00 UTC);
        let first = VersionHistory::date(None, version(t, vec![key("a", None)]));
        assert_eq!(first.dates.discovery, Some(t));
        assert_eq!(first.dates.jwks, Some(t));
        // A key rotation: a new key set, the same discovery document.
        let rotated_at = t + time::Duration::hours(1);
        let rotated = PublishedConfig {
            jwks: r#"{"keys":["b"]}"#.into(),
            ..version(
                rotated_at,
                vec![key("b", None), key("a", Some(t + time::Duration::days(1)))],
            )
        };
        let rotated = VersionHistory::of(&first).applied_to(rotated);
        assert_eq!(rotated.dates.discovery, Some(t));
        assert_eq!(rotated.dates.jwks, Some(rotated_at));
        // The same documents again: neither date moves, though the version is newer.
        let again_at = rotated_at + time::Duration::hours(1);
        let again = VersionHistory::of(&rotated).applied_to(PublishedConfig {
            updated_at: again_at,
            ..rotated.clone()
        });
        assert_eq!(again.updated_at, again_at);
        assert_eq!(again.dates, rotated.dates);
        // Only the discovery document changes.
        let edited_at = again_at + time::Duration::hours(1);
        let edited = VersionHistory::of(&again).applied_to(PublishedConfig {
            openid_configuration: r#"{"claims_supported":["sub"]}"#.into(),
            updated_at: edited_at,
            ..again.clone()
        });
        assert_eq!(edited.dates.discovery, Some(edited_at));
        assert_eq!(edited.dates.jwks, Some(rotated_at));
        // A retired key that left before the write changed the key set when it left.
        let late = t + time::Duration::days(2);
        let after_leaving = VersionHistory::of(&edited).applied_to(PublishedConfig {
            updated_at: late,
            ..edited.clone()
        });
        assert_eq!(after_leaving.dates.jwks, Some(t + time::Duration::days(1)));
        assert_eq!(after_leaving.dates.discovery, Some(edited_at));
    }
}
