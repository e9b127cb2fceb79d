//! Managed signing (docs/api.md, "Managed signing"): keys the registry makes and holds for a
//! service, signs with once they are safe, and rotates itself.
//!
//! A managed key is `next` (published, not signing yet), `current` (the one that signs) or
//! `retiring` (replaced, still published until every token it signed has expired). The rules
//! here are pure: what the settings may be, which transition is due, what a token's claims must
//! hold, the header a signature covers. Time is a parameter; the keys' material is the
//! [`ManagedKeys`](crate::ports::ManagedKeys) port's.
//!
//! ```
//! use registry_domain::signing::{header, Algorithm, SigningSettings};
//! use serde_json::json;
//!
//! let settings = SigningSettings::parse(&json!({"algorithm": "RS256"}), None).unwrap();
//! assert_eq!(settings.algorithm, Algorithm::Rs256);
//! assert_eq!(settings.max_token_seconds, 86_400);
//! assert!(SigningSettings::parse(&json!({"leadSeconds": -1}), None).is_err());
//! // {"alg":"ES256","kid":"k1","typ":"JWT"}
//! assert_eq!(header(Algorithm::Es256, "k1"), "eyJhbGciOiJFUzI1NiIsImtpZCI6ImsxIiwidHlwIjoiSldUIn0");
//! ```

use crate::keys::{never_past_end, Retiring};
use crate::timestamp::rfc3339_or_null;
use crate::withdrawn::{MAX_WITHDRAWN, WITHDRAWN_KEPT};
use crate::Violation;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use time::{Duration, OffsetDateTime};

/// The key source the managed keys are published under (docs/api.md, "Key sources").
pub use crate::keys::MANAGED_SOURCE;

/// Seconds after a retiring key's last possible token expiry before it leaves the key set.
pub const WITHDRAW_MARGIN_SECONDS: i64 = 300;

/// How far ahead of the registry's clock a token's `iat` may be.
pub const IAT_LEEWAY_SECONDS: i64 = 60;

/// The largest payload signed, decoded.
pub const MAX_CLAIMS_BYTES: usize = 16 * 1024;

/// How often a rotation in progress looks again at whether its next key is safe.
pub const READINESS_POLL: Duration = Duration::seconds(5);

/// How coarsely a key's last signature is recorded: at most once a minute per key, so that a
/// signature costs no write; `withdrawAt` keeps a margin larger than this.
pub const LAST_SIGNED_GRAIN: Duration = Duration::seconds(60);

/// The algorithm of a managed key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Algorithm {
    /// ECDSA over P-256 with SHA-256 (the default).
    #[serde(rename = "ES256")]
    Es256,
    /// RSASSA-PKCS1-v1_5 with SHA-256, a 2048-bit modulus.
    #[serde(rename = "RS256")]
    Rs256,
}

impl Algorithm {
    /// The name a JWS header writes.
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::Es256 => "ES256",
            Algorithm::Rs256 => "RS256",
        }
    }

    /// Whether one signature takes tens of microseconds (ES256: about 25) rather than hundreds
    /// (RS256: about 350), short enough to make where a request is served without holding the
    /// other requests there.
    pub fn signs_quickly(self) -> bool {
        self == Algorithm::Es256
    }

    /// The algorithm a JWS header names, if it is one of these.
    pub fn parse(name: &str) -> Option<Algorithm> {
        [Algorithm::Es256, Algorithm::Rs256]
            .into_iter()
            .find(|a| a.as_str() == name)
    }
}

/// How a service's managed signing runs (`PUT /services/{s}/signing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SigningSettings {
    /// The algorithm of the keys made from now on.
    pub algorithm: Algorithm,
    /// How long the current key signs before the next one is made.
    pub rotation_period_seconds: u32,
    /// The longest a token it signs may live (`exp − iat`).
    pub max_token_seconds: u32,
    /// How long each key it makes is published before it may sign (docs/api.md, "Key readiness").
    pub lead_seconds: u32,
}

impl Default for SigningSettings {
    fn default() -> Self {
        Self {
            algorithm: Algorithm::Es256,
            rotation_period_seconds: 2_592_000,
            max_token_seconds: 86_400,
            lead_seconds: 600,
        }
    }
}

/// The bounds of each numeric member of the settings.
const BOUNDS: [(&str, u32, u32); 3] = [
    ("rotationPeriodSeconds", 3_600, 31_536_000),
    ("maxTokenSeconds", 600, 31_536_000),
    ("leadSeconds", 0, 604_800),
];

impl SigningSettings {
    /// The settings a `PUT` body asks for: every member optional, the others kept from
    /// `current` (or the defaults). Every problem with its pointer.
    pub fn parse(
        body: &Value,
        current: Option<&SigningSettings>,
    ) -> Result<SigningSettings, Vec<Violation>> {
        let Some(members) = body.as_object() else {
            return Err(vec![Violation::new("", "the body must be a JSON object")]);
        };
        let mut settings = current.copied().unwrap_or_default();
        let mut problems = Vec::new();
        for (name, value) in members {
            let pointer = format!("/{name}");
            if name == "algorithm" {
                match value.as_str().and_then(Algorithm::parse) {
                    Some(algorithm) => settings.algorithm = algorithm,
                    None => problems.push(Violation::new(
                        &pointer,
                        format!("{value} is not an algorithm: \"ES256\" or \"RS256\""),
                    )),
                }
                continue;
            }
            let Some((_, low, high)) = BOUNDS.iter().find(|(n, _, _)| n == name) else {
                problems.push(Violation::new(
                    &pointer,
                    format!(
                        "{name:?} is not a member of the signing settings: algorithm, \
                         rotationPeriodSeconds, maxTokenSeconds, leadSeconds"
                    ),
                ));
                continue;
            };
            match value.as_u64().and_then(|v| u32::try_from(v).ok()) {
                Some(v) if (*low..=*high).contains(&v) => match name.as_str() {
                    "rotationPeriodSeconds" => settings.rotation_period_seconds = v,
                    "maxTokenSeconds" => settings.max_token_seconds = v,
                    _ => settings.lead_seconds = v,
                },
                _ => problems.push(Violation::new(
                    &pointer,
                    format!("{name} must be an integer from {low} to {high}; got {value}"),
                )),
            }
        }
        match problems.is_empty() {
            true => Ok(settings),
            false => Err(problems),
        }
    }
}

/// Where a managed key is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    /// Published, waiting to be safe; it signs once it is and replaces the current key.
    Next,
    /// The key that signs.
    Current,
    /// Replaced: published until every token it signed has expired.
    Retiring,
}

impl Stage {
    /// Its name in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Next => "next",
            Stage::Current => "current",
            Stage::Retiring => "retiring",
        }
    }
}

/// One managed key. Its private half is only ever stored sealed (`sealed`), and is never part of
/// any answer.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManagedKey {
    /// Its `kid`: the RFC 7638 thumbprint of its public key.
    pub kid: String,
    /// Where it is in its life.
    pub stage: Stage,
    /// Its algorithm.
    pub algorithm: Algorithm,
    /// When it was made (and first published).
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// When it became safe to sign with.
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub safe_at: Option<OffsetDateTime>,
    /// When it started signing.
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub signing_since: Option<OffsetDateTime>,
    /// When it stopped signing (replaced, or signing turned off); `None` while it may sign.
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub signing_until: Option<OffsetDateTime>,
    /// Its last signature, kept to the minute.
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub last_signed_at: Option<OffsetDateTime>,
    /// When it leaves the key set (retiring keys only).
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub withdraw_at: Option<OffsetDateTime>,
    /// Its lead (`leadSeconds` when it was made: a later change applies to the keys made after
    /// it); `None` for a key made before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lead_seconds: Option<u32>,
    /// The longest `maxTokenSeconds` the settings had before their latest change, while it could
    /// sign: a token it signed then may outlive the settings' present bound (0: never changed).
    #[serde(default)]
    pub token_seconds: u32,
    /// Whether it is the service's very first key, made when nothing was published and nobody
    /// had fetched the service's key set for a week: no cache can hold a key set without it
    /// (only a 404 no verifier trusts), so it is safe without a purge. Decided when it is made,
    /// read by every request and the rotation step alike.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub first_of_all: bool,
    /// The public key as a verifier reads it (a JWK with `kid`, `alg` and `use`).
    pub jwk: Map<String, Value>,
    /// The public key, DER SubjectPublicKeyInfo, base64.
    pub public_key: String,
    /// The private key, sealed under the data key.
    pub sealed: String,
}

impl std::fmt::Debug for ManagedKey {
    // Never the sealed key, even sealed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagedKey")
            .field("kid", &self.kid)
            .field("stage", &self.stage)
            .field("algorithm", &self.algorithm)
            .finish_non_exhaustive()
    }
}

/// A key just made by the [`ManagedKeys`](crate::ports::ManagedKeys) port.
#[derive(Clone, PartialEq, Eq)]
pub struct MadeKey {
    /// The public JWK (`kty` and its members; the rest is added here).
    pub jwk: Map<String, Value>,
    /// The public key, DER SubjectPublicKeyInfo.
    pub public_key_der: Vec<u8>,
    /// The private key, sealed.
    pub sealed: String,
}

impl std::fmt::Debug for MadeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MadeKey").finish_non_exhaustive()
    }
}

impl ManagedKey {
    /// A key made at `now`, as a `stage` key of `algorithm`; `None` when the made key has no
    /// thumbprint (not a public key the registry publishes).
    pub fn new(
        made: MadeKey,
        algorithm: Algorithm,
        stage: Stage,
        now: OffsetDateTime,
    ) -> Option<ManagedKey> {
        let kid = crate::keys::thumbprint(&made.jwk)?;
        let mut jwk = made.jwk;
        jwk.insert("kid".into(), kid.clone().into());
        jwk.insert("alg".into(), algorithm.as_str().into());
        jwk.insert("use".into(), "sig".into());
        let current = stage == Stage::Current;
        Some(ManagedKey {
            kid,
            stage,
            algorithm,
            created_at: now,
            safe_at: current.then_some(now),
            signing_since: current.then_some(now),
            signing_until: None,
            last_signed_at: None,
            withdraw_at: None,
            lead_seconds: None,
            token_seconds: 0,
            first_of_all: false,
            jwk,
            public_key: base64::engine::general_purpose::STANDARD.encode(&made.public_key_der),
            sealed: made.sealed,
        })
    }

    /// When it leaves the key set once it stops signing at `now`: the expiry of the last token
    /// it may have signed (under `max_token_seconds`, or under a longer bound the settings had
    /// earlier), and a margin; at once when it never signed.
    fn withdrawal(&self, max_token_seconds: u32, now: OffsetDateTime) -> OffsetDateTime {
        let lifetime = self.token_seconds.max(max_token_seconds);
        match self.last_signed_at {
            // A token's `iat` may be up to a minute ahead, and the last signature is kept to
            // the minute: the margin covers both.
            Some(at) => at + Duration::seconds(i64::from(lifetime) + WITHDRAW_MARGIN_SECONDS),
            None => now,
        }
    }
}

/// A service's managed signing: its settings and its keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Signing {
    /// The settings.
    pub settings: SigningSettings,
    /// Whether it is on: off (after `DELETE`) it signs nothing, and its keys only wait to leave.
    pub enabled: bool,
    /// Its keys, oldest first.
    pub keys: Vec<ManagedKey>,
    /// The keys withdrawn in the last [`WITHDRAWN_KEPT`], newest first, at most
    /// [`MAX_WITHDRAWN`]: what the console draws of a rotation that is over.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub withdrawn: Vec<WithdrawnManagedKey>,
}

/// A managed key that left the key set: its life, as `GET …/signing` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WithdrawnManagedKey {
    /// Its `kid`.
    pub kid: String,
    /// When it was made (and first published).
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// When it became safe to sign with.
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub safe_at: Option<OffsetDateTime>,
    /// When it started signing.
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub signing_since: Option<OffsetDateTime>,
    /// When it stopped signing.
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub signing_until: Option<OffsetDateTime>,
    /// When it left the key set.
    #[serde(with = "time::serde::rfc3339")]
    pub withdrawn_at: OffsetDateTime,
}

/// A transition of managed signing, each an audit event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    /// The next key is safe: it signs now, the previous one retires.
    Switch {
        /// The key that signs now.
        kid: String,
    },
    /// The rotation period is over: a next key is made.
    Rotate,
    /// Retiring keys whose tokens have all expired leave the key set.
    Withdraw {
        /// Their `kid`s.
        kids: Vec<String>,
    },
}

impl Signing {
    /// Turned on with `settings` and its first key.
    pub fn new(settings: SigningSettings, first: ManagedKey) -> Signing {
        Signing {
            settings,
            enabled: true,
            keys: vec![first],
            withdrawn: Vec::new(),
        }
    }

    /// The latest moment its keys record (one made, one switched in or out): a request that
    /// reads this state acts no earlier, whatever the clock said when it started (it may have
    /// waited behind the write, or run on a replica whose clock is a little behind).
    pub fn written_through(&self) -> Option<OffsetDateTime> {
        (self.keys.iter())
            .flat_map(|k| [Some(k.created_at), k.signing_since, k.signing_until])
            .flatten()
            .max()
    }

    /// The key that signs, if any.
    pub fn current(&self) -> Option<&ManagedKey> {
        self.keys.iter().find(|k| k.stage == Stage::Current)
    }

    /// The next key, while a rotation is in progress.
    pub fn next(&self) -> Option<&ManagedKey> {
        self.keys.iter().find(|k| k.stage == Stage::Next)
    }

    /// When the next rotation starts by itself: the current key's start of signing and the
    /// period; `None` while off, rotating already, or without a current key.
    pub fn next_rotation_at(&self) -> Option<OffsetDateTime> {
        if !self.enabled || self.next().is_some() {
            return None;
        }
        let since = self.current()?.signing_since?;
        Some(since + Duration::seconds(i64::from(self.settings.rotation_period_seconds)))
    }

    /// `GET /services/{s}/signing`'s answer at `now` (never a private key, sealed or not), for
    /// a service that ends at `ends_at` (an anonymous one: its keys never outlive it).
    pub fn view(&self, now: OffsetDateTime, ends_at: Option<OffsetDateTime>) -> Value {
        let keys: Vec<Value> = (self.keys.iter())
            .map(|k| {
                json!({
                    "kid": k.kid,
                    "state": k.stage.as_str(),
                    "algorithm": k.algorithm.as_str(),
                    "createdAt": rfc3339_or_null(Some(k.created_at)),
                    "safeToSignAt": rfc3339_or_null(k.safe_at),
                    "signingSince": rfc3339_or_null(k.signing_since),
                    "lastSignedAt": rfc3339_or_null(k.last_signed_at),
                    "withdrawAt": rfc3339_or_null(k.withdraw_at.map(|at| never_past_end(at, ends_at))),
                    "publicKey": k.public_key,
                })
            })
            .collect();
        let withdrawn: Vec<Value> = (self.still_remembered(now))
            .map(|k| {
                json!({
                    "kid": k.kid,
                    "createdAt": rfc3339_or_null(Some(k.created_at)),
                    "safeToSignAt": rfc3339_or_null(k.safe_at),
                    "signingSince": rfc3339_or_null(k.signing_since),
                    "signingUntil": rfc3339_or_null(k.signing_until),
                    "withdrawnAt": rfc3339_or_null(Some(k.withdrawn_at)),
                })
            })
            .collect();
        json!({
            "algorithm": self.settings.algorithm.as_str(),
            "rotationPeriodSeconds": self.settings.rotation_period_seconds,
            "maxTokenSeconds": self.settings.max_token_seconds,
            "leadSeconds": self.settings.lead_seconds,
            "nextRotationAt": rfc3339_or_null(self.next_rotation_at()),
            "keys": keys,
            "withdrawn": withdrawn,
        })
    }

    /// When the rotation step next has something to do: look again at a next key's readiness,
    /// start a rotation, withdraw a retiring key; `None` when nothing will happen by itself.
    pub fn due_at(&self, now: OffsetDateTime) -> Option<OffsetDateTime> {
        self.due_at_holding_rotation(now, None)
    }

    /// [`Signing::due_at`], with a rotation that must wait (the key set has no room for its
    /// key) looked at again no earlier than `held_until`.
    pub fn due_at_holding_rotation(
        &self,
        now: OffsetDateTime,
        held_until: Option<OffsetDateTime>,
    ) -> Option<OffsetDateTime> {
        let withdrawals = self.keys.iter().filter_map(|k| k.withdraw_at);
        let poll = self.next().map(|_| now + READINESS_POLL);
        let rotation = (self.next_rotation_at()).map(|at| held_until.map_or(at, |h| at.max(h)));
        // Kept only for its memory of withdrawals: looked at once that memory ends, when the
        // step's write lets it go ([`Signing::worth_keeping`]).
        let forgotten = (self.keys.is_empty())
            .then(|| self.still_remembered(now).map(|w| w.withdrawn_at).max())
            .flatten()
            .map(|last| last + WITHDRAWN_KEPT);
        withdrawals
            .chain(poll)
            .chain(rotation)
            .chain(forgotten)
            .min()
    }

    /// A rotation asked for (`POST …/signing/rotate`): `made` becomes the next key. `Err` while a
    /// next key exists already.
    pub fn rotate(&mut self, made: ManagedKey) -> Result<(), &ManagedKey> {
        if let Some(pending) = self.keys.iter().position(|k| k.stage == Stage::Next) {
            return Err(&self.keys[pending]);
        }
        self.keys.push(made);
        Ok(())
    }

    /// A compromise (`?compromised=true`): `made` signs at once, and every other key leaves the
    /// key set at once; their `kid`s.
    pub fn replace_compromised(&mut self, mut made: ManagedKey) -> Vec<String> {
        let kids: Vec<String> = self.keys.iter().map(|k| k.kid.clone()).collect();
        self.withdraw(&kids, made.created_at);
        // It signs before it is safe: when it became safe is Key readiness's to say.
        made.safe_at = None;
        self.keys = vec![made];
        kids
    }

    /// Turned off at `now` (`DELETE`): nothing signs; every key retires until its tokens have
    /// expired (a key that never signed leaves at once).
    pub fn disable(&mut self, now: OffsetDateTime) {
        self.enabled = false;
        let max = self.settings.max_token_seconds;
        for key in &mut self.keys {
            if key.stage != Stage::Retiring {
                if key.stage == Stage::Current {
                    key.signing_until = Some(now);
                }
                key.stage = Stage::Retiring;
                key.withdraw_at = Some(key.withdrawal(max, now));
            }
        }
    }

    /// New settings while on (a `PUT`): a new algorithm or lead applies from the next key made;
    /// each key that may still sign keeps the longest token lifetime it may have signed under,
    /// so that lowering `maxTokenSeconds` never withdraws it before an earlier token expires.
    pub fn change(&mut self, settings: SigningSettings) {
        let before = self.settings.max_token_seconds;
        for key in &mut self.keys {
            if key.stage != Stage::Retiring {
                key.token_seconds = key.token_seconds.max(before);
            }
        }
        self.settings = settings;
    }

    /// Turned on again (a `PUT` after `DELETE`), with `made` as its next key.
    pub fn enable(&mut self, settings: SigningSettings, made: ManagedKey) {
        self.settings = settings;
        self.enabled = true;
        self.keys.retain(|k| k.stage == Stage::Retiring);
        self.keys.push(made);
    }

    /// The transition due at `now`, given whether the next key is safe (`next_safe_at`: when it
    /// became so), in order: a safe next key switches; retiring keys past their time leave; the
    /// period over starts a rotation (`Rotate`: the caller makes the key). `None`: nothing due.
    pub fn due(
        &self,
        next_safe_at: Option<OffsetDateTime>,
        now: OffsetDateTime,
    ) -> Option<Transition> {
        if let (Some(next), Some(_)) = (self.next(), next_safe_at) {
            if self.enabled {
                return Some(Transition::Switch {
                    kid: next.kid.clone(),
                });
            }
        }
        let leaving: Vec<String> = (self.keys.iter())
            .filter(|k| k.withdraw_at.is_some_and(|at| at <= now))
            .map(|k| k.kid.clone())
            .collect();
        if !leaving.is_empty() {
            return Some(Transition::Withdraw { kids: leaving });
        }
        match self.next_rotation_at() {
            Some(at) if at <= now => Some(Transition::Rotate),
            _ => None,
        }
    }

    /// The next key signs from `now` (it became safe at `safe_at`); the current one retires
    /// until the tokens it signed have expired.
    pub fn switch(&mut self, safe_at: OffsetDateTime, now: OffsetDateTime) {
        let max = self.settings.max_token_seconds;
        for key in &mut self.keys {
            match key.stage {
                Stage::Current => {
                    key.stage = Stage::Retiring;
                    key.signing_until = Some(now);
                    key.withdraw_at = Some(key.withdrawal(max, now));
                }
                Stage::Next => {
                    key.stage = Stage::Current;
                    key.safe_at = Some(safe_at);
                    key.signing_since = Some(now);
                }
                Stage::Retiring => {}
            }
        }
    }

    /// When the key at `i` stopped signing: as recorded, or, for a key retired before its end
    /// was recorded, when the next one started (else its last signature). `None` while it may
    /// sign, and for a key that never signed.
    fn stopped_signing(&self, i: usize) -> Option<OffsetDateTime> {
        let key = &self.keys[i];
        if key.signing_until.is_some()
            || key.signing_since.is_none()
            || key.stage != Stage::Retiring
        {
            return key.signing_until;
        }
        (self.keys[i + 1..].iter())
            .find_map(|k| k.signing_since)
            .or(key.last_signed_at)
    }

    /// Without the keys `kids`, withdrawn at `now`: remembered for [`WITHDRAWN_KEPT`].
    pub fn withdraw(&mut self, kids: &[String], now: OffsetDateTime) {
        let until: Vec<Option<OffsetDateTime>> = (0..self.keys.len())
            .map(|i| {
                let key = &self.keys[i];
                // A key withdrawn while it signed (a compromise) signed until then.
                let signing = key.stage != Stage::Retiring && key.signing_since.is_some();
                self.stopped_signing(i).or(signing.then_some(now))
            })
            .collect();
        let mut withdrawn = Vec::new();
        let mut kept = Vec::new();
        for (k, until) in std::mem::take(&mut self.keys).into_iter().zip(until) {
            if !kids.contains(&k.kid) {
                kept.push(k);
                continue;
            }
            withdrawn.push(WithdrawnManagedKey {
                kid: k.kid,
                created_at: k.created_at,
                safe_at: k.safe_at,
                signing_since: k.signing_since,
                signing_until: until,
                withdrawn_at: now,
            });
        }
        self.keys = kept;
        withdrawn.extend(
            std::mem::take(&mut self.withdrawn)
                .into_iter()
                .filter(|w| w.withdrawn_at > now - WITHDRAWN_KEPT),
        );
        withdrawn.truncate(MAX_WITHDRAWN);
        self.withdrawn = withdrawn;
    }

    /// Records a signature by `kid` at `at`: its `lastSignedAt`, and, should it be retiring
    /// already (a signature that raced the switch), a `withdrawAt` no earlier than that
    /// signature's tokens' expiry. `false` when nothing changed.
    pub fn record_signature(&mut self, kid: &str, at: OffsetDateTime) -> bool {
        let max = self.settings.max_token_seconds;
        let Some(key) = self.keys.iter_mut().find(|k| k.kid == kid) else {
            return false;
        };
        if key.last_signed_at.is_some_and(|last| last >= at) {
            return false;
        }
        key.last_signed_at = Some(at);
        if let Some(until) = key.withdraw_at {
            key.withdraw_at = Some(until.max(key.withdrawal(max, at)));
        }
        true
    }

    /// Whether a signature by `key` at `now` should be recorded: its last one is older than
    /// [`LAST_SIGNED_GRAIN`].
    pub fn signature_worth_recording(key: &ManagedKey, now: OffsetDateTime) -> bool {
        key.last_signed_at
            .is_none_or(|last| now - last >= LAST_SIGNED_GRAIN)
    }

    /// The keys that no longer sign and wait to leave the key set, as `GET …/keys` lists them:
    /// since they stopped signing, until their `withdrawAt` (a key that never signed stopped
    /// waiting to at its `withdrawAt`: it leaves at once), on a service that ends at `ends_at`.
    pub fn retiring(&self, ends_at: Option<OffsetDateTime>) -> Vec<Retiring> {
        (self.keys.iter().enumerate())
            .filter(|(_, k)| k.stage == Stage::Retiring)
            .filter_map(|(i, k)| {
                let published_until = never_past_end(k.withdraw_at?, ends_at);
                let retired_at = self.stopped_signing(i).unwrap_or(published_until);
                Some(Retiring {
                    kid: k.kid.clone(),
                    retired_at: retired_at.min(published_until),
                    published_until,
                })
            })
            .collect()
    }

    /// The keys withdrawn in the last [`WITHDRAWN_KEPT`] before `now`, as a key state remembers
    /// a withdrawn key (a managed key's `kid` is its thumbprint): what a service that publishes
    /// nothing any more still refuses to publish again (a compromised key's copy, say) and
    /// lists as withdrawn.
    pub fn remembered(&self, now: OffsetDateTime) -> Vec<crate::withdrawn::WithdrawnKey> {
        (self.still_remembered(now))
            .map(|w| crate::withdrawn::WithdrawnKey {
                kid: w.kid.clone(),
                thumbprint: w.kid.clone(),
                source: MANAGED_SOURCE.to_owned(),
                first_published_at: w.created_at,
                // Signing until its withdrawal (a compromise): withdrawn while current.
                retired_at: w.signing_until.filter(|until| *until < w.withdrawn_at),
                withdrawn_at: w.withdrawn_at,
            })
            .collect()
    }

    /// Gives the managed keys among `withdrawn` (a key state's memory, which knew them current
    /// to the end) the time they stopped signing, when they stopped before they left.
    pub fn date_withdrawals(&self, withdrawn: &mut [crate::withdrawn::WithdrawnKey]) {
        for key in withdrawn.iter_mut() {
            if key.source != MANAGED_SOURCE || key.retired_at.is_some() {
                continue;
            }
            key.retired_at = (self.withdrawn.iter())
                .find(|w| w.kid == key.kid)
                .and_then(|w| w.signing_until)
                .filter(|until| *until < key.withdrawn_at);
        }
    }

    /// Whether it is worth keeping: keys, or withdrawn keys still remembered at `now`.
    pub fn worth_keeping(&self, now: OffsetDateTime) -> bool {
        !self.keys.is_empty() || self.still_remembered(now).next().is_some()
    }

    /// The withdrawn keys still remembered at `now`: those of the last [`WITHDRAWN_KEPT`].
    fn still_remembered(&self, now: OffsetDateTime) -> impl Iterator<Item = &WithdrawnManagedKey> {
        (self.withdrawn.iter()).filter(move |w| w.withdrawn_at > now - WITHDRAWN_KEPT)
    }

    /// The managed keys as the key set publishes them: every key, whatever its stage, with its
    /// lead.
    pub fn published(&self) -> Vec<(String, Map<String, Value>)> {
        (self.keys.iter())
            .map(|k| (k.kid.clone(), k.jwk.clone()))
            .collect()
    }
}

/// The discovery document of a service whose only current keys are managed (docs/api.md,
/// "Managed signing"), as kube-apiserver writes its own: `issuer`, `jwks_uri` and what it
/// supports (`algorithms`: those of every key it publishes, [`crate::keys::KeyState::algorithms`]).
pub fn discovery_document(issuer: &str, algorithms: &[&str]) -> Value {
    let mut names = algorithms.to_vec();
    names.sort_unstable();
    names.dedup();
    json!({
        "issuer": issuer,
        "jwks_uri": crate::publishing::jwks_uri(issuer),
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": names,
    })
}

/// The base64url of a signature's JWS header: exactly `{"alg", "kid", "typ": "JWT"}`.
pub fn header(algorithm: Algorithm, kid: &str) -> String {
    let header = json!({"alg": algorithm.as_str(), "kid": kid, "typ": "JWT"});
    URL_SAFE_NO_PAD.encode(header.to_string())
}

/// What the claims of a token to sign must hold, beyond the service's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRules<'a> {
    /// The service's issuers: its subdomain's and its active custom domain's.
    pub issuers: &'a [String],
    /// The longest a token may live.
    pub max_token_seconds: u32,
    /// An anonymous service's end: no token it signs outlives it.
    pub expires_at: Option<OffsetDateTime>,
}

/// Checks the payload to sign (`claims`: base64url without padding, the JWT's second segment)
/// at `now`: a JSON object of at most [`MAX_CLAIMS_BYTES`] with unique member names, `iss` one
/// of the service's issuers, integer `iat` and `exp`, `exp` after `iat` and `exp − iat` within
/// the service's `maxTokenSeconds`, `exp` in the future, `iat` at most a minute ahead. `Err` names the claim (the problem `invalid-claims`).
///
/// ```
/// use base64::Engine;
/// use registry_domain::signing::{check_claims, ClaimRules};
/// use time::OffsetDateTime;
///
/// let now = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
/// let issuers = ["https://k3s-acme.example.com".to_owned()];
/// let rules = ClaimRules { issuers: &issuers, max_token_seconds: 3600, expires_at: None };
/// let encode = |v: serde_json::Value| {
///     base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
/// };
/// let good = encode(serde_json::json!({"iss": issuers[0], "iat": 1_800_000_000i64, "exp": 1_800_003_600i64}));
/// assert!(check_claims(&good, &rules, now).is_ok());
/// let long = encode(serde_json::json!({"iss": issuers[0], "iat": 1_800_000_000i64, "exp": 1_800_003_601i64}));
/// assert!(check_claims(&long, &rules, now).unwrap_err().contains("exp"));
/// ```
pub fn check_claims(
    claims: &str,
    rules: &ClaimRules<'_>,
    now: OffsetDateTime,
) -> Result<(), String> {
    if claims.len() > MAX_CLAIMS_BYTES * 4 / 3 + 4 {
        return Err(format!(
            "the claims take more than {MAX_CLAIMS_BYTES} bytes"
        ));
    }
    let bytes = URL_SAFE_NO_PAD.decode(claims).map_err(|_| {
        "claims must be the token's payload as base64url without padding (the JWT's second \
         segment)"
            .to_owned()
    })?;
    if bytes.len() > MAX_CLAIMS_BYTES {
        return Err(format!(
            "the claims take {} bytes; at most {MAX_CLAIMS_BYTES} are signed",
            bytes.len()
        ));
    }
    let payload = match crate::json::parse_unique(&bytes) {
        Ok(Value::Object(claims)) => claims,
        // serde_json adds where it stopped: the claim's name says enough.
        Err(twice) if crate::json::named_twice(&twice) => {
            let why = twice.to_string();
            let why = why.split(" at line ").next().unwrap_or(&why);
            return Err(format!("{why}: claim names must be unique"));
        }
        // serde_json reads at most 128 levels of arrays and objects.
        Err(deep) if crate::json::too_deep(&deep) => {
            return Err("the claims nest arrays and objects more than 128 levels deep".to_owned())
        }
        Err(huge) => match crate::json::out_of_range(&huge, &bytes) {
            Some(Some(claim)) => {
                let times = ["exp", "iat", "nbf"].contains(&claim);
                let why = if times {
                    ": times are whole seconds since 1970"
                } else {
                    ""
                };
                return Err(format!("{claim} is a number out of range{why}"));
            }
            Some(None) => return Err("the claims hold a number out of range".to_owned()),
            None => return Err("the claims must be a JSON object".to_owned()),
        },
        Ok(_) => return Err("the claims must be a JSON object".to_owned()),
    };
    match payload.get("iss") {
        Some(Value::String(iss)) if rules.issuers.iter().any(|i| i == iss) => {}
        Some(Value::String(iss)) => {
            return Err(format!(
                "iss {iss:?} is not an issuer of this service ({})",
                rules.issuers.join(", ")
            ))
        }
        Some(other) => {
            return Err(format!(
                "iss must be a string, the service's issuer URL; got {other}"
            ))
        }
        None => return Err("iss is required: the service's issuer URL".to_owned()),
    }
    let time = |name: &str| match payload.get(name) {
        Some(Value::Number(n)) if n.is_i64() => Ok(n.as_i64().unwrap_or_default()),
        Some(other) => Err(format!(
            "{name} must be an integer (seconds since the epoch); got {other}"
        )),
        None => Err(format!("{name} is required (seconds since the epoch)")),
    };
    let (iat, exp) = (time("iat")?, time("exp")?);
    let now_s = now.unix_timestamp();
    if iat > now_s + IAT_LEEWAY_SECONDS {
        return Err(format!(
            "iat {iat} is more than {IAT_LEEWAY_SECONDS} s ahead of the registry's clock ({now_s})"
        ));
    }
    if exp <= now_s {
        return Err(format!("exp {exp} is not in the future (now {now_s})"));
    }
    if exp <= iat {
        return Err(format!("exp {exp} is not after iat {iat}"));
    }
    // In i128: an `iat` near i64::MIN must not wrap the difference into a small one.
    let lifetime = i128::from(exp) - i128::from(iat);
    if lifetime > i128::from(rules.max_token_seconds) {
        return Err(format!(
            "exp − iat is {lifetime} s; the service's maxTokenSeconds is {}",
            rules.max_token_seconds
        ));
    }
    if let Some(end) = rules.expires_at {
        if exp > end.unix_timestamp() {
            return Err(format!(
                "exp {exp} is after the anonymous service expires ({})",
                end.unix_timestamp()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_800_000_000 + s).unwrap()
    }

    fn key(n: u8, stage: Stage, now: OffsetDateTime) -> ManagedKey {
        let jwk = json!({"kty": "EC", "crv": "P-256", "x": format!("x{n}"), "y": "y"});
        let made = MadeKey {
            jwk: jwk.as_object().unwrap().clone(),
            public_key_der: vec![n],
            sealed: format!("sealed-{n}"),
        };
        ManagedKey::new(made, Algorithm::Es256, stage, now).unwrap()
    }

    #[test]
    fn settings_take_defaults_ranges_and_point_at_every_problem() {
        let defaults = SigningSettings::parse(&json!({}), None).unwrap();
        assert_eq!(defaults, SigningSettings::default());
        assert_eq!(defaults.rotation_period_seconds, 2_592_000);
        let problems = SigningSettings::parse(
            &json!({"algorithm": "HS256", "rotationPeriodSeconds": 3599, "maxTokenSeconds": 599,
                    "leadSeconds": 604_801, "extra": 1}),
            None,
        )
        .unwrap_err();
        let pointers: Vec<&str> = problems.iter().map(|p| p.pointer.as_str()).collect();
        for pointer in [
            "/algorithm",
            "/rotationPeriodSeconds",
            "/maxTokenSeconds",
            "/leadSeconds",
            "/extra",
        ] {
            assert!(pointers.contains(&pointer), "{pointer} in {pointers:?}");
        }
        let kept = SigningSettings::parse(
            &json!({"leadSeconds": 0}),
            Some(&SigningSettings {
                algorithm: Algorithm::Rs256,
                ..SigningSettings::default()
            }),
        )
        .unwrap();
        assert_eq!((kept.algorithm, kept.lead_seconds), (Algorithm::Rs256, 0));
    }

    #[test]
    fn a_rotation_publishes_next_switches_once_safe_and_withdraws_after_the_last_token() {
        let mut signing = Signing::new(SigningSettings::default(), key(1, Stage::Current, at(0)));
        assert_eq!(signing.due(None, at(10)), None);
        let period = i64::from(signing.settings.rotation_period_seconds);
        assert_eq!(signing.next_rotation_at(), Some(at(period)));
        assert_eq!(signing.due(None, at(period)), Some(Transition::Rotate));
        signing.record_signature(&signing.keys[0].kid.clone(), at(period));
        signing.rotate(key(2, Stage::Next, at(period))).unwrap();
        assert!(signing.rotate(key(3, Stage::Next, at(period))).is_err());
        assert_eq!(
            signing.due_at(at(period)),
            Some(at(period) + READINESS_POLL)
        );
        // Not safe yet: the current key keeps signing.
        assert_eq!(signing.due(None, at(period + 5)), None);
        let next = signing.next().unwrap().kid.clone();
        assert_eq!(
            signing.due(Some(at(period + 600)), at(period + 605)),
            Some(Transition::Switch { kid: next.clone() })
        );
        signing.switch(at(period + 600), at(period + 605));
        assert_eq!(signing.current().unwrap().kid, next);
        let retiring = &signing.keys[0];
        assert_eq!(retiring.stage, Stage::Retiring);
        let withdraw = at(period + 86_400 + 300);
        assert_eq!(retiring.withdraw_at, Some(withdraw));
        assert_eq!(signing.due(None, withdraw - Duration::seconds(1)), None);
        let kids = vec![retiring.kid.clone()];
        assert_eq!(
            signing.due(None, withdraw),
            Some(Transition::Withdraw { kids: kids.clone() })
        );
        assert_eq!(signing.keys[0].signing_until, Some(at(period + 605)));
        let listed_retired = Retiring {
            kid: kids[0].clone(),
            retired_at: at(period + 605),
            published_until: withdraw,
        };
        assert_eq!(
            signing.retiring(None),
            std::slice::from_ref(&listed_retired)
        );
        // A state written before the end was recorded: the next key's start says it.
        signing.keys[0].signing_until = None;
        assert_eq!(
            signing.retiring(None),
            std::slice::from_ref(&listed_retired)
        );
        // An anonymous service's keys never outlive it: listed as leaving at its end.
        let end = withdraw - Duration::seconds(60);
        let ending = signing.retiring(Some(end));
        assert_eq!(ending[0].published_until, end);
        let view = signing.view(at(period + 605), Some(end));
        assert_eq!(
            view["keys"][0]["withdrawAt"],
            crate::timestamp::rfc3339(end)
        );
        assert_eq!(
            signing.retiring(Some(withdraw + Duration::days(1))),
            [listed_retired]
        );
        signing.withdraw(&kids, withdraw);
        assert_eq!(signing.keys.len(), 1);
        // Remembered with its life, for the console.
        let gone = &signing.withdrawn[0];
        assert_eq!(
            (gone.kid.as_str(), gone.withdrawn_at),
            (kids[0].as_str(), withdraw)
        );
        assert_eq!(gone.signing_until, Some(at(period + 605)));
        assert_eq!(gone.safe_at, Some(at(0)));
        // Listed for eight days, not after.
        let listed = |now| {
            signing.view(now, None)["withdrawn"]
                .as_array()
                .map(Vec::len)
        };
        assert_eq!(listed(withdraw + Duration::days(7)), Some(1));
        assert_eq!(listed(withdraw + WITHDRAWN_KEPT), Some(0));
    }

    #[test]
    fn a_signature_racing_the_switch_pushes_the_withdrawal_back() {
        let mut signing = Signing::new(SigningSettings::default(), key(1, Stage::Current, at(0)));
        let old = signing.keys[0].kid.clone();
        signing.rotate(key(2, Stage::Next, at(10))).unwrap();
        signing.switch(at(20), at(20));
        // It never signed: it leaves at once…
        assert_eq!(signing.keys[0].withdraw_at, Some(at(20)));
        // …unless a signature made before the switch is recorded after it.
        assert!(signing.record_signature(&old, at(19)));
        assert_eq!(signing.keys[0].withdraw_at, Some(at(19 + 86_400 + 300)));
        assert!(!signing.record_signature(&old, at(19)));
    }

    #[test]
    fn lowering_max_token_seconds_never_withdraws_a_key_before_its_earlier_tokens_expire() {
        let mut signing = Signing::new(SigningSettings::default(), key(1, Stage::Current, at(0)));
        let old = signing.keys[0].kid.clone();
        // Tokens of a day, then the bound lowered to ten minutes, then a rotation.
        signing.record_signature(&old, at(100));
        let short = SigningSettings {
            max_token_seconds: 600,
            ..SigningSettings::default()
        };
        signing.change(short);
        assert_eq!(signing.settings, short);
        signing.rotate(key(2, Stage::Next, at(200))).unwrap();
        signing.switch(at(300), at(300));
        assert_eq!(
            signing.keys[0].withdraw_at,
            Some(at(100 + 86_400 + 300)),
            "the day-long token signed at 100 s still verifies"
        );
        // The next key only ever signed under the short bound (it was made after the change).
        let new = signing.current().unwrap().kid.clone();
        signing.record_signature(&new, at(400));
        signing.disable(at(500));
        let new = signing.keys.iter().find(|k| k.kid == new).unwrap();
        assert_eq!(new.withdraw_at, Some(at(400 + 600 + 300)));
        // Raised again, then lowered: the longest bound is kept, not the latest.
        let mut signing = Signing::new(SigningSettings::default(), key(3, Stage::Current, at(0)));
        for max in [172_800, 600] {
            signing.change(SigningSettings {
                max_token_seconds: max,
                ..SigningSettings::default()
            });
        }
        let kid = signing.keys[0].kid.clone();
        signing.record_signature(&kid, at(10));
        signing.disable(at(20));
        assert_eq!(signing.keys[0].withdraw_at, Some(at(10 + 172_800 + 300)));
    }

    #[test]
    fn a_compromise_leaves_one_key_signing_and_disabling_retires_every_key() {
        let mut signing = Signing::new(SigningSettings::default(), key(1, Stage::Current, at(0)));
        signing.rotate(key(2, Stage::Next, at(10))).unwrap();
        let withdrawn = signing.replace_compromised(key(3, Stage::Current, at(20)));
        assert_eq!(withdrawn.len(), 2);
        assert_eq!(signing.keys.len(), 1);
        assert_eq!(signing.current().unwrap().signing_since, Some(at(20)));
        let kid = signing.keys[0].kid.clone();
        signing.record_signature(&kid, at(30));
        signing.disable(at(40));
        assert!(signing.current().is_none());
        assert_eq!(signing.keys[0].withdraw_at, Some(at(30 + 86_400 + 300)));
        assert_eq!(signing.next_rotation_at(), None);
    }

    #[test]
    fn the_view_holds_no_private_key() {
        let signing = Signing::new(SigningSettings::default(), key(1, Stage::Current, at(0)));
        let view = signing.view(at(0), None).to_string();
        assert!(!view.contains("sealed-1"), "{view}");
        assert!(view.contains("\"state\":\"current\""));
        assert!(!format!("{:?}", signing).contains("sealed-1"));
    }

    #[test]
    fn claims_are_checked_and_each_refusal_names_its_claim() {
        let issuers = ["https://a.example".to_owned()];
        let rules = ClaimRules {
            issuers: &issuers,
            max_token_seconds: 600,
            expires_at: Some(at(500)),
        };
        let encode = |v: Value| URL_SAFE_NO_PAD.encode(v.to_string());
        let base = |iat: i64, exp: i64| json!({"iss": "https://a.example", "iat": at(iat).unix_timestamp(), "exp": at(exp).unix_timestamp()});
        assert!(check_claims(&encode(base(0, 300)), &rules, at(0)).is_ok());
        let cases = [
            (
                json!({"iss": "https://b.example", "iat": 0, "exp": 1}),
                "iss",
            ),
            (json!([1, 2]), "JSON object"),
            (
                json!({"iss": 5, "iat": 0, "exp": 1}),
                "iss must be a string",
            ),
            (
                json!({"iss": "https://a.example", "iat": "0", "exp": 1}),
                "iat",
            ),
            (base(61, 300), "iat"),
            (base(-700, -1), "exp"),
            (base(0, 601), "exp"),
            (base(0, 501), "exp"),
            // Far in the past: exp − iat past i64::MAX must not wrap into a short lifetime.
            (
                json!({"iss": "https://a.example", "iat": i64::MIN, "exp": at(300).unix_timestamp()}),
                "maxTokenSeconds",
            ),
        ];
        for (claims, named) in cases {
            let refused = check_claims(&encode(claims.clone()), &rules, at(0)).unwrap_err();
            assert!(refused.contains(named), "{claims}: {refused}");
        }
        assert!(check_claims("not base64!", &rules, at(0)).is_err());
        // A token that ends before it was issued is no token.
        let backwards = check_claims(&encode(base(50, 5)), &rules, at(0)).unwrap_err();
        assert!(backwards.contains("not after iat"), "{backwards}");
        // A claim named twice: verifiers could read the first, the check the last.
        let (iat, exp) = (at(0).unix_timestamp(), at(300).unix_timestamp());
        let twice = format!(
            r#"{{"iss":"https://a.example","iat":{iat},"exp":{},"exp":{exp}}}"#,
            exp + 100_000_000
        );
        let refused = check_claims(&URL_SAFE_NO_PAD.encode(twice), &rules, at(0)).unwrap_err();
        assert_eq!(
            refused,
            r#"the member "exp" appears twice in one object: claim names must be unique"#
        );
        // Nested past serde_json's 128 levels: said so, not "not an object".
        let deep = format!(
            r#"{{"iss":"https://a.example","iat":{iat},"exp":{exp},"x":{}{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        let refused = check_claims(&URL_SAFE_NO_PAD.encode(deep), &rules, at(0)).unwrap_err();
        assert!(refused.contains("128 levels"), "{refused}");
        // A number past an f64's: the claim named, not "not an object".
        let huge = r#"{"iss":"https://a.example","iat":0,"exp":1e400}"#;
        let refused = check_claims(&URL_SAFE_NO_PAD.encode(huge), &rules, at(0)).unwrap_err();
        assert!(
            refused.starts_with("exp is a number out of range: times are"),
            "{refused}"
        );
        // Another claim's: no word of times.
        let huge = r#"{"iss":"https://a.example","iat":0,"exp":1,"amount":1e400}"#;
        let refused = check_claims(&URL_SAFE_NO_PAD.encode(huge), &rules, at(0)).unwrap_err();
        assert_eq!(refused, "amount is a number out of range");
        // A payload that merely says so is not a JSON object.
        let said = URL_SAFE_NO_PAD.encode(r#""the claim \"x\" is named twice""#);
        assert!(check_claims(&said, &rules, at(0))
            .unwrap_err()
            .contains("JSON object"));
        let big = encode(json!({"iss": "https://a.example", "pad": "x".repeat(MAX_CLAIMS_BYTES)}));
        assert!(check_claims(&big, &rules, at(0))
            .unwrap_err()
            .contains("bytes"));
    }

    #[test]
    fn the_written_discovery_document_lists_the_published_algorithms() {
        let doc = discovery_document("https://a.example", &["RS256", "ES256", "ES256"]);
        assert_eq!(doc["jwks_uri"], "https://a.example/openid/v1/jwks");
        assert_eq!(
            doc["id_token_signing_alg_values_supported"],
            json!(["ES256", "RS256"])
        );
        assert_eq!(doc["response_types_supported"], json!(["id_token"]));
    }
}
