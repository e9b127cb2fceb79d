//! The plugin's copy of the keys that may verify the service's tokens, what `FetchKeys` and
//! `Metadata` answer: read from the registry every 10 s and when `Sign` names a key the copy
//! lacks, and kept as it was while the registry cannot be read.
//!
//! One read is `GET /services/{s}/signing` (the managed keys in every state, each with its
//! public key, and `maxTokenSeconds`) and `GET /services/{s}/keys` (every key the service
//! publishes, current and retired, with its source and its public `jwk`). A key's material is
//! converted once, when the copy first meets it, and kept while the registry lists the key. A
//! service whose signing is off (`…/signing` a 404) still has its managed keys listed by
//! `…/keys` until their `withdrawAt`, so a plugin started after signing was turned off still
//! answers them. A service that is gone (`…/keys` a 404) has no key left: the copy empties.

use crate::jwk::{spki_of_base64, spki_of_jwk};
use crate::proto::Key;
use registry_client::{ClientError, RegistryApi};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::{watch, Mutex, Notify};

/// The source of the keys the registry makes (docs/api.md, "Managed signing").
const MANAGED: &str = "managed";

/// One successful read of the keys.
#[derive(Debug)]
pub(crate) struct Snapshot {
    /// Every key that may verify, managed keys first.
    pub(crate) keys: Vec<Key>,
    /// The service's `maxTokenSeconds`; `None` when its signing is off and was never read on.
    pub(crate) max_token_seconds: Option<i64>,
    /// When it was read.
    pub(crate) read_at: SystemTime,
}

impl Snapshot {
    fn knows(&self, kid: &str) -> bool {
        self.keys.iter().any(|key| key.key_id == kid)
    }
}

/// The copy and how many reads began and ended, which [`KeyCopy::learn`] waits on.
#[derive(Debug, Default)]
struct Progress {
    snapshot: Option<Arc<Snapshot>>,
    started: u64,
    finished: u64,
    /// Why the last read failed, when it did.
    failure: Option<String>,
}

/// What the copy learned of each key the registry lists, by `kid`: what it was read from (the
/// listing's `publicKey` or `jwk`: a `kid` published again with other material is read again),
/// and its DER, or `None` when it has none kube-apiserver can use (a key type it cannot verify
/// with, a retired key never met).
type Material = HashMap<String, (String, Option<Vec<u8>>)>;

/// The DER `material` holds for `kid` when it was read from `origin`.
fn known<'m>(material: &'m Material, kid: &str, origin: &str) -> Option<&'m Option<Vec<u8>>> {
    (material.get(kid)).and_then(|(from, der)| (from == origin).then_some(der))
}

/// The copy of `service`'s keys.
#[derive(Debug)]
pub(crate) struct KeyCopy {
    api: RegistryApi,
    service: String,
    progress: watch::Sender<Progress>,
    wake: Notify,
    /// Held for a whole read: one read at a time.
    material: Mutex<Material>,
}

impl KeyCopy {
    /// A copy that has read nothing yet.
    pub(crate) fn new(api: RegistryApi, service: String) -> Self {
        Self {
            api,
            service,
            progress: watch::Sender::new(Progress::default()),
            wake: Notify::new(),
            material: Mutex::new(Material::new()),
        }
    }

    /// The last successful read; `None` before the first.
    pub(crate) fn snapshot(&self) -> Option<Arc<Snapshot>> {
        self.progress.borrow().snapshot.clone()
    }

    /// Why the last read failed; `None` when it succeeded (or none ended yet).
    pub(crate) fn failure(&self) -> Option<String> {
        self.progress.borrow().failure.clone()
    }

    /// Whether the last successful read has the key `kid`.
    pub(crate) fn knows(&self, kid: &str) -> bool {
        (self.progress.borrow().snapshot.as_ref()).is_some_and(|snapshot| snapshot.knows(kid))
    }

    /// Reads the keys from the registry; the copy changes only when the whole read succeeds.
    /// The error is the reason, one line.
    pub(crate) async fn refresh(&self) -> Result<(), String> {
        let mut material = self.material.lock().await;
        self.progress.send_modify(|p| p.started += 1);
        let previous = self.snapshot();
        let read = self.read(&mut material, previous.as_deref()).await;
        self.progress.send_modify(|p| {
            p.finished += 1;
            match &read {
                Ok(snapshot) => (p.snapshot, p.failure) = (Some(Arc::clone(snapshot)), None),
                Err(reason) => p.failure = Some(reason.clone()),
            }
        });
        read.map(drop)
    }

    /// Reads the keys every `every`, and at once when woken ([`KeyCopy::learn`]); logs when a
    /// read fails, and when they succeed again.
    pub(crate) async fn keep_fresh(self: Arc<Self>, every: Duration) {
        let mut failing: Option<String> = None;
        loop {
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                () = self.wake.notified() => {}
            }
            match self.refresh().await {
                Ok(()) => {
                    if failing.take().is_some() {
                        tracing::info!(
                            service = self.service,
                            "read the keys from the registry again"
                        );
                    }
                }
                Err(reason) => {
                    if failing.as_ref() != Some(&reason) {
                        match self.snapshot() {
                            Some(last) => tracing::warn!(
                                service = self.service,
                                %reason,
                                last_read_seconds_ago = last.read_at.elapsed().unwrap_or_default().as_secs(),
                                "cannot read the keys from the registry: FetchKeys answers the last copy read"
                            ),
                            None => tracing::warn!(
                                service = self.service,
                                %reason,
                                "cannot read the keys from the registry: FetchKeys and Metadata are \
                                 unavailable until a read succeeds"
                            ),
                        }
                    }
                    failing = Some(reason);
                }
            }
        }
    }

    /// Has the copy read again at once, and waits (at most `within`) until it has `kid` or that
    /// read has ended.
    pub(crate) async fn learn(&self, kid: &str, within: Duration) {
        let mut progress = self.progress.subscribe();
        let after = progress.borrow().started;
        self.wake.notify_one();
        let _ = tokio::time::timeout(
            within,
            progress.wait_for(|p| {
                p.finished > after || p.snapshot.as_ref().is_some_and(|s| s.knows(kid))
            }),
        )
        .await;
    }

    async fn read(
        &self,
        material: &mut Material,
        previous: Option<&Snapshot>,
    ) -> Result<Arc<Snapshot>, String> {
        let error = |e: ClientError| e.to_string();
        let signing = match self.api.signing(&self.service).await {
            Ok(body) => Some(body),
            // Signing is off: the managed keys still published are listed by `…/keys`.
            Err(ClientError::Refused { problem, .. }) if problem.is("not-found") => None,
            Err(e) => return Err(error(e)),
        };
        let inventory = match self.api.keys(&self.service).await {
            Ok(body) => body,
            // The service is gone (deleted): as a key set answering 404
            // tells a verifier its issuer withdrew the keys, no key verifies its tokens any
            // more. Only a registry that cannot be read keeps the last copy.
            Err(ClientError::Refused { problem, .. }) if problem.is("not-found") => {
                // Said once: at the first read (a --service mistyped), or as the keys go.
                if previous.is_none_or(|p| !p.keys.is_empty()) {
                    tracing::warn!(
                        service = self.service,
                        "the registry has no such service (for this credential): FetchKeys \
                         answers no key"
                    );
                }
                serde_json::json!({"keys": []})
            }
            Err(e) => return Err(error(e)),
        };
        let read_at = SystemTime::now();
        let mut keys = Vec::new();
        let mut listed = HashSet::new();
        let mut max_token_seconds = previous.and_then(|p| p.max_token_seconds);
        if let Some(signing) = &signing {
            max_token_seconds = Some(
                (signing.get("maxTokenSeconds").and_then(Value::as_i64))
                    .ok_or("GET …/signing answered no maxTokenSeconds")?,
            );
            for key in members(signing, "keys", "GET …/signing")? {
                let Some(kid) = key.get("kid").and_then(Value::as_str) else {
                    continue;
                };
                listed.insert(kid.to_owned());
                let public = key.get("publicKey").and_then(Value::as_str);
                let origin = public.unwrap_or_default();
                let der = match known(material, kid, origin) {
                    Some(known) => known.clone(),
                    None => {
                        let der = (public.ok_or_else(|| "no publicKey".to_owned()))
                            .and_then(spki_of_base64);
                        let der = der
                            .map_err(|reason| {
                                tracing::warn!(service = self.service, kid, %reason, "FetchKeys leaves out a managed key");
                            })
                            .ok();
                        material.insert(kid.to_owned(), (origin.to_owned(), der.clone()));
                        der
                    }
                };
                keys.extend(der.map(|der| key_of(kid, der)));
            }
        }
        for entry in members(&inventory, "keys", "GET …/keys")? {
            let Some(kid) = entry.get("kid").and_then(Value::as_str) else {
                continue;
            };
            let source = entry.get("source").and_then(Value::as_str).unwrap_or("");
            // While signing is on, `…/signing` is the managed keys' list.
            if listed.contains(kid) || (signing.is_some() && source == MANAGED) {
                continue;
            }
            listed.insert(kid.to_owned());
            // A listing without a `jwk` tells nothing new of the key: what was read stays.
            let origin = entry.get("jwk").map(Value::to_string);
            let reused = match &origin {
                Some(origin) => known(material, kid, origin),
                None => material.get(kid).map(|(_, der)| der),
            };
            let origin = origin.unwrap_or_default();
            if let Some(known) = reused {
                keys.extend(known.clone().map(|der| key_of(kid, der)));
                continue;
            }
            match entry.get("jwk").map(spki_of_jwk) {
                Some(Ok(der)) => {
                    material.insert(kid.to_owned(), (origin, Some(der.clone())));
                    keys.push(key_of(kid, der));
                }
                Some(Err(reason)) => {
                    tracing::warn!(service = self.service, kid, source, %reason, "FetchKeys leaves out a key kube-apiserver cannot verify with");
                    material.insert(kid.to_owned(), (origin, None));
                }
                None => {
                    tracing::warn!(
                        service = self.service,
                        kid,
                        source,
                        "GET …/keys answered no jwk: FetchKeys leaves the key out"
                    );
                    material.insert(kid.to_owned(), (origin, None));
                }
            }
        }
        material.retain(|kid, _| listed.contains(kid));
        Ok(Arc::new(Snapshot {
            keys,
            max_token_seconds,
            read_at,
        }))
    }
}

/// `FetchKeys`' entry of a key.
fn key_of(kid: &str, der: Vec<u8>) -> Key {
    Key {
        key_id: kid.to_owned(),
        key: der,
        exclude_from_oidc_discovery: false,
    }
}

/// The array `name` of an answer.
fn members<'a>(body: &'a Value, name: &str, call: &str) -> Result<&'a Vec<Value>, String> {
    (body.get(name).and_then(Value::as_array)).ok_or_else(|| format!("{call} answered no {name}"))
}
