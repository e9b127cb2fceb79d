//! What a service remembers of the keys that left its key set (docs/api.md, "Key lifecycle"):
//! for eight days after a key's withdrawal, `GET …/keys` still names it, so that the console's
//! timeline draws the end of a rotation, not a row that vanished.
//!
//! Every storage adapter records the withdrawals as it writes a new version of a service's key
//! state ([`crate::service::VersionHistory::date`]), by comparing it with the version it
//! replaces (`KeyState::remembered`): whichever use case dropped a key (an upload, a
//! withdrawal, the upkeep, a managed rotation), it is remembered the same way, and no use case
//! has to.

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

/// The withdrawn keys remembered at `at`: the keys that `left` now, and those remembered
/// `before`, for [`WITHDRAWN_KEPT`] after they left and unless `held` again (a key published
/// again is no longer withdrawn), newest first, one per `kid`, at most [`MAX_WITHDRAWN`] and
/// [`MAX_WITHDRAWN_BYTES`].
pub fn remembered(
    left: Vec<WithdrawnKey>,
    before: &[WithdrawnKey],
    held: impl Fn(&str) -> bool,
    at: OffsetDateTime,
) -> Vec<WithdrawnKey> {
    let mut withdrawn: Vec<WithdrawnKey> = (left.into_iter().chain(before.iter().cloned()))
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
    use time::macros::datetime;

    const T: OffsetDateTime = datetime!(2026-11-25 12:00 UTC);

    fn gone(kid: &str, at: OffsetDateTime) -> WithdrawnKey {
        WithdrawnKey {
            kid: kid.into(),
            thumbprint: format!("t-{kid}"),
            source: "default".into(),
            first_published_at: datetime!(2026-11-20 09:00 UTC),
            retired_at: None,
            withdrawn_at: at,
        }
    }

    #[test]
    fn a_withdrawal_is_forgotten_after_eight_days_or_when_its_key_comes_back() {
        let before = [
            gone("recent", T - Duration::days(7)),
            gone("old", T - WITHDRAWN_KEPT),
            gone("back", T - Duration::days(1)),
        ];
        let got = remembered(vec![gone("now", T)], &before, |kid| kid == "back", T);
        let kids: Vec<&str> = got.iter().map(|w| w.kid.as_str()).collect();
        assert_eq!(kids, ["now", "recent"]);
    }

    #[test]
    fn at_most_the_latest_hundred_are_kept_one_per_kid() {
        let mut older: Vec<WithdrawnKey> = (0..MAX_WITHDRAWN)
            .map(|i| gone(&format!("k{i}"), T - Duration::minutes(i as i64 + 1)))
            .collect();
        // The same kid withdrawn twice (published again in between): the later one stays.
        older.push(gone("k0", T - Duration::days(2)));
        let got = remembered(vec![gone("last", T)], &older, |_| false, T);
        assert_eq!(got.len(), MAX_WITHDRAWN);
        assert_eq!(got[0].kid, "last");
        assert_eq!(got[1].kid, "k0");
        assert_eq!(got[1].withdrawn_at, T - Duration::minutes(1));
        let last = format!("k{}", MAX_WITHDRAWN - 1);
        assert!(!got.iter().any(|w| w.kid == last));
        // Long kids: as many of the latest as their bytes allow.
        let long = |i: usize| gone(&format!("{i}{}", "k".repeat(15_000)), T);
        assert_eq!(
            remembered(vec![long(1), long(2), long(3)], &[], |_| false, T).len(),
            2
        );
    }
}
