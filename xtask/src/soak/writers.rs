//! The soak's writers. Each churns resources of its own through the API, records in the ledger
//! what the server acknowledged, and reads its own writes back on the way: the node that took a
//! write must show it at once, in the API and in the hosted documents.

use crate::api::{fake_keys, upload, Signer};
use crate::ledger::{kids, locked, Anonymous, Ledger, Service, Writer, TENANT};
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the writers work on.
#[derive(Debug, Clone)]
pub struct Scene {
    pub http: registry_testkit::http::Http,
    /// The customer's token (a `*` account).
    pub token: String,
    /// The issuer whose identity tokens the `oidc` account accepts for `federated_service`,
    /// and its signing key: the federated writer presents a new token at every step, as CI
    /// jobs do.
    pub issuer: String,
    pub signer: Arc<Signer>,
    pub federated_service: String,
    /// The service the account writer's static accounts cover.
    pub shared_service: String,
}

impl Scene {
    /// A writer with the customer's token.
    fn writer<'a>(&'a self, ledger: &'a Mutex<Ledger>) -> Writer<'a> {
        let (http, token) = (self.http, self.token.as_str());
        Writer {
            http,
            token,
            ledger,
        }
    }
}

/// A small deterministic generator, so that a run can be told apart from another by its seed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Read-backs: what a writer just wrote must show at once.
impl Writer<'_> {
    /// Reads the hosted key set back: `kid` published first, or nothing (404).
    fn check_hosted(&self, subdomain: &str, kid: Option<&str>) {
        let path = "/openid/v1/jwks";
        let (status, seen) = match self.http.hosted(subdomain, path) {
            Ok(hosted) => (hosted.status, kids(&hosted.json()).into_iter().next()),
            Err(e) => {
                return self
                    .record(|l| l.problem(format!("GET {subdomain} {path}: no answer: {e:#}")));
            }
        };
        let fresh = match kid {
            Some(kid) => status == 200 && seen.as_deref() == Some(kid),
            None => status == 404,
        };
        self.record(|l| {
            l.reads_checked += 1;
            if !fresh {
                l.problem(format!(
                    "stale hosted key set of {subdomain}: {status} {seen:?}, wanted {kid:?}"
                ));
            }
        });
    }

    /// Reads a service back through the API: its title and published key set.
    fn check_api(&self, subdomain: &str, expected: &Service) {
        let keys = &expected.keys.acked;
        let want = if keys.is_some() { 200 } else { 404 };
        let path = format!("/services/{subdomain}");
        let service = self.send("GET", &path, None, 200);
        let config = self.send("GET", &format!("{path}/config"), None, want);
        let (Ok(service), Ok(config)) = (service, config) else {
            return;
        };
        let title = service.json()["title"].as_str().map(str::to_owned);
        let seen = Some(kids(&config.json()["jwks"])).filter(|k| !k.is_empty());
        let fresh = title.as_deref() == Some(expected.title.acked.as_str())
            && match (keys, &seen) {
                (Some(keys), Some(seen)) => seen.starts_with(keys),
                (keys, seen) => keys.is_none() && seen.is_none(),
            };
        self.record(|l| {
            l.reads_checked += 1;
            if !fresh {
                l.problem(format!(
                    "stale read of {subdomain}: title {title:?} keys {seen:?}, wanted {expected:?}"
                ));
            }
        });
    }
}

fn running(stop: &AtomicBool) -> bool {
    !stop.load(Ordering::SeqCst)
}

/// Registered services in `slots` slots of writer `id`: created, published, retitled,
/// unpublished, deleted and created again, each write read back.
pub fn services(scene: &Scene, id: usize, slots: usize, stop: &AtomicBool, ledger: &Mutex<Ledger>) {
    let writer = scene.writer(ledger);
    let mut rng = Rng::new(id as u64 + 1);
    let mut generation = 0u64;
    while running(stop) {
        generation += 1;
        let slot = rng.below(slots as u64);
        let name = format!("w{id}s{slot}");
        let subdomain = format!("{name}-{TENANT}");
        let current = locked(ledger).services.get(&subdomain).cloned();
        let Some(current) = current.filter(|s| s.exists.acked) else {
            writer.create_service(&name, None);
            continue;
        };
        let path = format!("/services/{subdomain}");
        match rng.below(20) {
            0..=7 => {
                let base = format!("{subdomain}-g{generation}");
                let kind = "configuration published";
                if writer.publish(kind, &subdomain, &base, 1).acked() {
                    writer.check_hosted(&subdomain, Some(&format!("{base}-0")));
                }
            }
            8..=12 => {
                let title = format!("title {generation}");
                writer.retitle("title changed", &subdomain, &title);
            }
            13..=14 => {
                // Withdrawing nothing is a 404, and no change.
                let want = if current.keys.acked.is_some() {
                    204
                } else {
                    404
                };
                let path = format!("{path}/config");
                let sent = writer.write("configuration removed", "DELETE", &path, None, want);
                if let Some(ack) = sent.ack.filter(|_| want == 204) {
                    writer.record(|l| l.service_published(&subdomain, None, ack));
                }
                if sent.acked() {
                    writer.check_hosted(&subdomain, None);
                }
            }
            15..=16 => {
                let sent = writer.write("service deleted", "DELETE", &path, None, 204);
                if let Some(ack) = sent.ack {
                    writer.record(|l| l.service_deleted(&subdomain, ack));
                }
                if sent.acked() {
                    writer.check_hosted(&subdomain, None);
                }
            }
            _ => writer.check_api(&subdomain, &current),
        }
    }
}

/// Static service accounts over the shared service: created, used, their token regenerated
/// (the old one must stop working at once), renamed, deleted (the token with them).
pub fn accounts(scene: &Scene, stop: &AtomicBool, ledger: &Mutex<Ledger>) {
    let writer = scene.writer(ledger);
    let probe = format!("/services/{}", scene.shared_service);
    let services = [scene.shared_service.clone()];
    let mut rng = Rng::new(101);
    // Ids and tokens of the live accounts.
    let mut mine: Vec<(String, String)> = Vec::new();
    let mut n = 0u64;
    // Each round refuses about one token on purpose; failed authentications are limited to
    // 1,000 a minute per client address, so the rounds are paced well below that.
    while running(stop) {
        std::thread::sleep(Duration::from_millis(100));
        n += 1;
        let name = format!("soak account {n}");
        if mine.len() < 4 {
            let reply = writer.create_account(&name, &services).json();
            if let Some((id, secret)) = reply["id"].as_str().zip(reply["token"].as_str()) {
                let _ = writer.with(secret).send("GET", &probe, None, 200);
                mine.push((id.to_owned(), secret.to_owned()));
            }
            continue;
        }
        let index = rng.below(mine.len() as u64) as usize;
        let (id, old) = mine[index].clone();
        let path = format!("/service-accounts/{id}");
        match rng.below(10) {
            0..=3 => {
                let regenerate = format!("{path}/regenerate-token");
                let sent = writer.write("token regenerated", "POST", &regenerate, None, 200);
                let reply = sent.json();
                let fresh = reply["token"].as_str();
                if let Some(ack) = sent.ack {
                    writer.record(|l| l.token_regenerated(&id, fresh, ack));
                }
                if let Some(fresh) = fresh {
                    let _ = writer.with(&old).send("GET", &probe, None, 401);
                    let _ = writer.with(fresh).send("GET", &probe, None, 200);
                    mine[index].1 = fresh.to_owned();
                }
            }
            4..=6 => {
                let body = json!({"name": name});
                let sent = writer.write("account renamed", "PATCH", &path, Some(&body), 200);
                if let Some(ack) = sent.ack {
                    writer.record(|l| l.account_renamed(&id, &name, ack));
                }
                let read = sent.acked().then(|| writer.send("GET", &path, None, 200));
                if let Some(Ok(read)) = read {
                    let seen = read.json()["name"].as_str().map(str::to_owned);
                    writer.record(|l| {
                        l.reads_checked += 1;
                        if seen.as_deref() != Some(name.as_str()) {
                            l.problem(format!("stale account name of {id}: {seen:?}"));
                        }
                    });
                }
            }
            _ => {
                let sent = writer.write("account deleted", "DELETE", &path, None, 204);
                if let Some(ack) = sent.ack {
                    writer.record(|l| l.account_deleted(&id, ack));
                }
                if sent.acked() {
                    let _ = writer.with(&old).send("GET", &probe, None, 401);
                    mine.remove(index);
                }
            }
        }
    }
}

/// Anonymous services living `ttl_hours`: created, published with their secret, read from their
/// public subdomain, then every other one deleted; the rest expire during the run (the reaper
/// works under load). Their changes are in no customer's audit trail.
pub fn anonymous(scene: &Scene, ttl_hours: f64, stop: &AtomicBool, ledger: &Mutex<Ledger>) {
    let nobody = scene.writer(ledger).with("");
    let mut n = 0u64;
    while running(stop) {
        std::thread::sleep(Duration::from_millis(50));
        n += 1;
        let sent = Instant::now();
        let body = json!({"title": format!("soak {n}"), "ttlHours": ttl_hours});
        let Ok(created) = nobody.send("POST", "/anonymous/services", Some(&body), 201) else {
            continue;
        };
        let arrived = Instant::now();
        let created = created.json();
        let (Some(subdomain), Some(secret), Some(remaining)) = (
            created["service"]["subdomain"].as_str(),
            created["secret"].as_str(),
            created["remainingSeconds"].as_u64(),
        ) else {
            nobody.record(|l| l.problem(format!("anonymous creation answered {created}")));
            continue;
        };
        let owner = nobody.with(secret);
        let config = format!("/services/{subdomain}/config");
        let upload = upload(fake_keys(subdomain, 1));
        if owner.send("PUT", &config, Some(&upload), 200).is_err() {
            continue;
        }
        owner.record(|l| l.acknowledge("anonymous service created and published"));
        let kid = format!("{subdomain}-0");
        let mut record = Anonymous {
            subdomain: subdomain.to_owned(),
            secret: secret.to_owned(),
            kid: kid.clone(),
            expires_earliest: sent + Duration::from_secs(remaining),
            expires_latest: arrived + Duration::from_secs(remaining + 1),
            deleted: false,
        };
        owner.check_hosted(subdomain, Some(&kid));
        let path = format!("/services/{subdomain}");
        if n % 2 == 0 && owner.send("DELETE", &path, None, 204).is_ok() {
            record.deleted = true;
            owner.record(|l| l.acknowledge("anonymous service deleted"));
            owner.check_hosted(subdomain, None);
        }
        owner.record(|l| l.anonymous.push(record));
    }
}

/// A federated caller (`oidc` account) retitling and republishing its service with a new
/// identity token each time, reading each write back with the same token.
pub fn federated(scene: &Scene, stop: &AtomicBool, ledger: &Mutex<Ledger>) {
    let subdomain = scene.federated_service.as_str();
    let mut n = 0u64;
    while running(stop) {
        std::thread::sleep(Duration::from_millis(20));
        n += 1;
        let id = format!("soak-{n}");
        let Ok(token) = scene.signer.mint_with_id(&scene.issuer, Some(&id)) else {
            let problem = "minting an identity token failed".to_owned();
            locked(ledger).problem(problem);
            continue;
        };
        let writer = scene.writer(ledger).with(&token);
        if n % 5 == 0 {
            let base = format!("{subdomain}-f{n}");
            let kind = "federated: configuration published";
            if writer.publish(kind, subdomain, &base, 1).acked() {
                writer.check_hosted(subdomain, Some(&format!("{base}-0")));
            }
        } else {
            let title = format!("federated {n}");
            let kind = "federated: title changed";
            if writer.retitle(kind, subdomain, &title).acked() {
                // Not under the lock: the check records what it reads.
                let current = locked(ledger).services.get(subdomain).cloned();
                if let Some(current) = current {
                    writer.check_api(subdomain, &current);
                }
            }
        }
    }
}
