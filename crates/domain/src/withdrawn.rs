//! What a service remembers of the keys that left its key set (docs/api.md, "Key lifecycle"):
//! for eight days after a key's withdrawal, `GET …/keys` still names it, so that the console's
//! timeline draws the end of a rotation, not a row that vanished.
//!
//! Every storage adapter records the withdrawals as it writes a new version of a service's key
//! state ([`crate::service::VersionHistory::date`]), by comparing it with the version it
//! replaces: whichever use case dropped a key (an upload, a withdrawal, the upkeep, a managed
//! rotation), it is remembered the same way, and no use case has to.

use crate::keys::{KeyRecord, KeyState};
use serde::{Deserialize, Serialize};
use time::{Duration, OffsetDateTime};

/// How long a withdrawn key is remembered: the console's longest timeline.
pub const WITHDRAWN_KEPT: Duration = Duration::days(8);

/// At most this many withdrawn keys are remembered per service (the most recent), so that the
/// state stays small whatever the rate of rotation.
pub const MAX_WITHDRAWN: usize = 100;

/// At most this many bytes of `kid`s, thumbprints and source names are remembered per service
/// (the most recent keys' first): a `kid` has no length of its own.
pub const MAX_WITHDRAWN_BYTES: usize = 64 * 1024;

/// A key that left the public key set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WithdrawnKey {
    /// Its `kid`.
    pub kid: String,
    /// Its RFC 7638 thumbprint.
    pub thumbprint: String,
    /// The key source whose upload published it first.
    pub source: String,
    /// When it was first published.
    #[serde(with = "time::serde::rfc3339")]
    pub first_published_at: OffsetDateTime,
    /// When it was retired; `None` for a key withdrawn while current (its source removed with
    /// no retention, a managed key's compromise, a deleted configuration of several sources).
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub retired_at: Option<OffsetDateTime>,
    /// When it left the key set.
    #[serde(with = "time::serde::rfc3339")]
    pub withdrawn_at: OffsetDateTime,
}

impl WithdrawnKey {
    /// `key` as it is remembered once it left the key set at `at`, or at the end of its
    /// retention if that came first (a retired key leaves on its own before the upkeep drops it).
    pub fn of(key: &KeyRecord, at: OffsetDateTime) -> WithdrawnKey {
        WithdrawnKey {
            kid: key.kid.clone(),
            thumbprint: key.thumbprint.clone(),
            source: key.source.clone(),
            first_published_at: key.first_published_at,
            retired_at: key.retired_at,
            withdrawn_at: key.published_until.filter(|u| *u <= at).unwrap_or(at),
        }
    }
}

/// The withdrawn keys remembered at `at` when of `before`'s keys only those `held` are still
/// there: the others, and those `before` remembered, for [`WITHDRAWN_KEPT`] after they left,
/// newest first, one per `kid` (a key published again is no longer withdrawn), at most
/// [`MAX_WITHDRAWN`].
pub fn remembered(
    before: &KeyState,
    held: impl Fn(&str) -> bool,
    at: OffsetDateTime,
) -> Vec<WithdrawnKey> {
    let left = (before.keys.iter())
        .filter(|k| !held(&k.kid))
        .map(|k| WithdrawnKey::of(k, at));
    let mut withdrawn: Vec<WithdrawnKey> = (left.chain(before.withdrawn.iter().cloned()))
        .filter(|w| !held(&w.kid) && w.withdrawn_at > at - WITHDRAWN_KEPT)
        .collect();
    withdrawn.sort_by(|a, b| (b.withdrawn_at.cmp(&a.withdrawn_at)).then(a.kid.cmp(&b.kid)));
    let mut seen = std::collections::HashSet::new();
    withdrawn.retain(|w| seen.insert(w.kid.clone()));
    withdrawn.truncate(MAX_WITHDRAWN);
    let mut bytes = 0;
    withdrawn.retain(|w| {
        bytes += w.kid.len() + w.thumbprint.len() + w.source.len();
        bytes <= MAX_WITHDRAWN_BYTES
    });
    withdrawn
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::DEFAULT_SOURCE;
    use time::macros::datetime;

    fn key(kid: &str, retired: Option<OffsetDateTime>, until: Option<OffsetDateTime>) -> KeyRecord {
        KeyRecord {
            kid: kid.into(),
            jwk: serde_json::Map::new(),
            thumbprint: format!("t-{kid}"),
            first_published_at: datetime!(2026-11-20 09:00 UTC),
            retired_at: retired,
            published_until: until,
            lead_seconds: 600,
            source: DEFAULT_SOURCE.into(),
            also_sources: Vec::new(),
            verifiers: None,
            dismissed_at: None,
        }
    }

    fn state(keys: Vec<KeyRecord>, withdrawn: Vec<WithdrawnKey>) -> KeyState {
        KeyState {
            keys,
            withdrawn,
            ..KeyState::default()
        }
    }

    #[test]
    fn a_key_that_leaves_is_remembered_when_it_left() {
        let t = datetime!(2026-11-25 12:00 UTC);
        let retired = Some(datetime!(2026-11-24 12:00 UTC));
        let before = state(
            vec![
                key("now", None, None),
                // Its retention ended an hour before the upkeep dropped it.
                key("ended", retired, Some(t - Duration::hours(1))),
                // Withdrawn at once, its retention still running.
                key("pulled", retired, Some(t + Duration::hours(5))),
            ],
            Vec::new(),
        );
        let after = state(vec![key("now", None, None)], Vec::new());
        let got = remembered(&before, |kid| after.keys.iter().any(|k| k.kid == kid), t);
        let at: Vec<(&str, OffsetDateTime)> = got
            .iter()
            .map(|w| (w.kid.as_str(), w.withdrawn_at))
            .collect();
        assert_eq!(at, [("pulled", t), ("ended", t - Duration::hours(1))]);
        assert_eq!(got[0].retired_at, retired);
        assert_eq!(got[0].thumbprint, "t-pulled");
    }

    #[test]
    fn a_withdrawal_is_forgotten_after_eight_days_or_when_its_key_comes_back() {
        let t = datetime!(2026-11-25 12:00 UTC);
        let gone = |kid: &str, at| WithdrawnKey::of(&key(kid, None, None), at);
        let before = state(
            vec![key("back", None, None)],
            vec![
                gone("recent", t - Duration::days(7)),
                gone("old", t - WITHDRAWN_KEPT),
                gone("back", t - Duration::days(1)),
            ],
        );
        let got = remembered(&before, |kid| kid == "back", t);
        let kids: Vec<&str> = got.iter().map(|w| w.kid.as_str()).collect();
        assert_eq!(kids, ["recent"]);
    }

    #[test]
    fn at_most_the_latest_hundred_are_kept_one_per_kid() {
        let t = datetime!(2026-11-25 12:00 UTC);
        let mut older: Vec<WithdrawnKey> = (0..MAX_WITHDRAWN)
            .map(|i| {
                WithdrawnKey::of(
                    &key(&format!("k{i}"), None, None),
                    t - Duration::minutes(i as i64 + 1),
                )
            })
            .collect();
        // The same kid withdrawn twice (published again in between): the later one stays.
        older.push(WithdrawnKey::of(
            &key("k0", None, None),
            t - Duration::days(2),
        ));
        let before = state(vec![key("last", None, None)], older);
        let got = remembered(&before, |_| false, t);
        assert_eq!(got.len(), MAX_WITHDRAWN);
        assert_eq!(got[0].kid, "last");
        assert_eq!(got[1].kid, "k0");
        assert_eq!(got[1].withdrawn_at, t - Duration::minutes(1));
        assert!(!got
            .iter()
            .any(|w| w.kid == format!("k{}", MAX_WITHDRAWN - 1)));
        // Long kids: as many of the latest as their bytes allow.
        let long = |i: usize| key(&format!("{i}{}", "k".repeat(15_000)), None, None);
        let before = state(vec![long(1), long(2), long(3)], Vec::new());
        assert_eq!(remembered(&before, |_| false, t).len(), 2);
    }
}
