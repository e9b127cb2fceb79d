//! The soak's writers. Each churns resources of its own through the API, records in the ledger
//! what the server acknowledged, and reads its own writes back on the way: the node that took a
//! write must show it at once, in the API and in the hosted documents.

use super::ledger::{first_kid, Account, Anonymous, Ledger, Service};
use crate::bench::client::Signer;
use crate::faults::harness::{Http, Response};
use crate::faults::upload;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the writers work on.
#[derive(Debug, Clone)]
pub struct Scene {
    pub http: Http,
    pub port: u16,
    /// The customer's token (a `*` account).
    pub token: String,
    /// The tenant suffix of the customer's subdomains.
    pub tenant: String,
    /// The issuer whose identity tokens the `oidc` account accepts for `federated_service`,
    /// and its signing key: the federated writer presents a new token at every step, as CI
    /// jobs do.
    pub issuer: String,
    pub signer: Arc<Signer>,
    pub federated_service: String,
    /// The service the account writer's static accounts cover.
    pub shared_service: String,
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

/// One writer's view: the scene, the shared ledger, and its own pacing.
struct Writer<'a> {
    scene: &'a Scene,
    ledger: &'a Mutex<Ledger>,
}

impl Writer<'_> {
    fn record(&self, f: impl FnOnce(&mut Ledger)) {
        f(&mut self.ledger.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// Sends a request (`token` empty: none); any other status than `want` (or no answer) is a
    /// problem, and `None`.
    fn expect(
        &self,
        method: &str,
        path: &str,
        token: &str,
        body: Option<&Value>,
        want: u16,
    ) -> Option<Response> {
        let token = (!token.is_empty()).then_some(token);
        match self.scene.http.call(method, path, token, body) {
            Ok(response) if response.status == want => Some(response),
            Ok(response) => {
                let summary: String = response.body.chars().take(200).collect();
                self.record(|l| {
                    l.problem(format!(
                        "{method} {path} → {} (wanted {want}): {summary}",
                        response.status
                    ));
                });
                None
            }
            Err(e) => {
                self.record(|l| l.problem(format!("{method} {path}: no answer: {e:#}")));
                None
            }
        }
    }

    /// The hosted key set of `subdomain`: its status and first `kid`.
    fn hosted(&self, subdomain: &str) -> Option<(u16, Option<String>)> {
        let host = format!("{subdomain}.localhost:{}", self.scene.port);
        match self
            .scene
            .http
            .send("GET", "/openid/v1/jwks", None, None, Some(&host))
        {
            Ok(response) => {
                let kid = first_kid(&response.json()).map(str::to_owned);
                Some((response.status, kid))
            }
            Err(e) => {
                self.record(|l| l.problem(format!("GET {host}/openid/v1/jwks: no answer: {e:#}")));
                None
            }
        }
    }

    /// Reads the hosted key set back: `kid` published, or nothing (404).
    fn check_hosted(&self, subdomain: &str, kid: Option<&str>) {
        let Some((status, seen)) = self.hosted(subdomain) else {
            return;
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

    /// Reads a service back through the API: its title and published `kid`.
    fn check_api(&self, subdomain: &str, token: &str, expected: &Service) {
        let service = self.expect("GET", &format!("/services/{subdomain}"), token, None, 200);
        let want = if expected.kid.is_some() { 200 } else { 404 };
        let config = self.expect(
            "GET",
            &format!("/services/{subdomain}/config"),
            token,
            None,
            want,
        );
        let (Some(service), Some(config)) = (service, config) else {
            return;
        };
        let title = service.json()["title"].as_str().map(str::to_owned);
        let kid = first_kid(&config.json()["jwks"]).map(str::to_owned);
        self.record(|l| {
            l.reads_checked += 1;
            if title.as_deref() != Some(expected.title.as_str()) || kid != expected.kid {
                l.problem(format!(
                    "stale read of {subdomain}: title {title:?} kid {kid:?}, wanted {expected:?}"
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
    let writer = Writer { scene, ledger };
    let token = scene.token.as_str();
    let mut rng = Rng::new(id as u64 + 1);
    let mut mine: Vec<Option<Service>> = vec![None; slots];
    let mut generation = 0u64;
    while running(stop) {
        generation += 1;
        let slot = rng.below(slots as u64) as usize;
        let name = format!("w{id}s{slot}");
        let subdomain = format!("{name}-{}", scene.tenant);
        let Some(current) = mine[slot].clone() else {
            let body = json!({"title": name, "serviceName": name});
            if writer
                .expect("POST", "/services", token, Some(&body), 201)
                .is_some()
            {
                let service = Service {
                    title: name.clone(),
                    kid: None,
                };
                writer.record(|l| {
                    l.acknowledge("service created");
                    l.deleted_services.remove(&subdomain);
                    l.services.insert(subdomain.clone(), service.clone());
                });
                mine[slot] = Some(service);
            }
            continue;
        };
        let path = format!("/services/{subdomain}");
        let config = format!("{path}/config");
        match rng.below(20) {
            0..=7 => {
                let base = format!("{subdomain}-g{generation}");
                let body = upload(&base, 1);
                if writer
                    .expect("PUT", &config, token, Some(&body), 200)
                    .is_some()
                {
                    let kid = format!("{base}-0");
                    let service = Service {
                        kid: Some(kid.clone()),
                        ..current
                    };
                    writer.record(|l| {
                        l.acknowledge("configuration published");
                        l.services.insert(subdomain.clone(), service.clone());
                    });
                    mine[slot] = Some(service);
                    writer.check_hosted(&subdomain, Some(&kid));
                }
            }
            8..=12 => {
                let title = format!("title {generation}");
                let body = json!({"title": title});
                if writer
                    .expect("PATCH", &path, token, Some(&body), 200)
                    .is_some()
                {
                    let service = Service { title, ..current };
                    writer.record(|l| {
                        l.acknowledge("title changed");
                        l.services.insert(subdomain.clone(), service.clone());
                    });
                    mine[slot] = Some(service);
                }
            }
            13..=14 => {
                let want = if current.kid.is_some() { 204 } else { 404 };
                if writer
                    .expect("DELETE", &config, token, None, want)
                    .is_some()
                {
                    let service = Service {
                        kid: None,
                        ..current
                    };
                    writer.record(|l| {
                        l.acknowledge("configuration removed");
                        l.services.insert(subdomain.clone(), service.clone());
                    });
                    mine[slot] = Some(service);
                    writer.check_hosted(&subdomain, None);
                }
            }
            15..=16 => {
                if writer.expect("DELETE", &path, token, None, 204).is_some() {
                    writer.record(|l| {
                        l.acknowledge("service deleted");
                        l.services.remove(&subdomain);
                        l.deleted_services.insert(subdomain.clone());
                    });
                    mine[slot] = None;
                    writer.check_hosted(&subdomain, None);
                }
            }
            _ => writer.check_api(&subdomain, token, &current),
        }
    }
}

/// Static service accounts over the shared service: created, used, their token regenerated
/// (the old one must stop working at once), renamed, deleted (the token with them).
pub fn accounts(scene: &Scene, stop: &AtomicBool, ledger: &Mutex<Ledger>) {
    let writer = Writer { scene, ledger };
    let token = scene.token.as_str();
    let probe = format!("/services/{}", scene.shared_service);
    let mut rng = Rng::new(101);
    let mut mine: Vec<(String, Account)> = Vec::new();
    let mut n = 0u64;
    // Each round refuses about one token on purpose; failed authentications are limited to
    // 1,000 a minute per client address, so the rounds are paced well below that.
    while running(stop) {
        std::thread::sleep(Duration::from_millis(100));
        n += 1;
        if mine.len() < 4 {
            let name = format!("soak account {n}");
            let body = json!({"name": name, "policy": {"kind": "static", "services": [scene.shared_service]}});
            let Some(created) = writer.expect("POST", "/service-accounts", token, Some(&body), 201)
            else {
                continue;
            };
            let created = created.json();
            let (Some(id), Some(secret)) = (created["id"].as_str(), created["token"].as_str())
            else {
                writer.record(|l| {
                    l.problem(format!("account created without id or token: {created}"))
                });
                continue;
            };
            let account = Account {
                name,
                token: secret.to_owned(),
            };
            writer.record(|l| {
                l.acknowledge("account created");
                l.accounts.insert(id.to_owned(), account.clone());
            });
            writer.expect("GET", &probe, &account.token, None, 200);
            mine.push((id.to_owned(), account));
            continue;
        }
        let index = rng.below(mine.len() as u64) as usize;
        let (id, account) = mine[index].clone();
        let path = format!("/service-accounts/{id}");
        match rng.below(10) {
            0..=3 => {
                let Some(answer) = writer.expect(
                    "POST",
                    &format!("{path}/regenerate-token"),
                    token,
                    None,
                    200,
                ) else {
                    continue;
                };
                let Some(fresh) = answer.json()["token"].as_str().map(str::to_owned) else {
                    writer.record(|l| l.problem(format!("regeneration of {id} gave no token")));
                    continue;
                };
                let renewed = Account {
                    token: fresh,
                    ..account.clone()
                };
                writer.record(|l| {
                    l.acknowledge("token regenerated");
                    l.accounts.insert(id.clone(), renewed.clone());
                    l.retire(account.token.clone());
                });
                writer.expect("GET", &probe, &account.token, None, 401);
                writer.expect("GET", &probe, &renewed.token, None, 200);
                mine[index].1 = renewed;
            }
            4..=6 => {
                let name = format!("soak account {n}");
                let body = json!({"name": name});
                if writer
                    .expect("PATCH", &path, token, Some(&body), 200)
                    .is_some()
                {
                    let renamed = Account {
                        name,
                        ..account.clone()
                    };
                    writer.record(|l| {
                        l.acknowledge("account renamed");
                        l.accounts.insert(id.clone(), renamed.clone());
                    });
                    if let Some(read) = writer.expect("GET", &path, token, None, 200) {
                        let seen = read.json()["name"].as_str().map(str::to_owned);
                        writer.record(|l| {
                            l.reads_checked += 1;
                            if seen.as_deref() != Some(renamed.name.as_str()) {
                                l.problem(format!("stale account name of {id}: {seen:?}"));
                            }
                        });
                    }
                    mine[index].1 = renamed;
                }
            }
            _ => {
                if writer.expect("DELETE", &path, token, None, 204).is_some() {
                    writer.record(|l| {
                        l.acknowledge("account deleted");
                        l.accounts.remove(&id);
                        l.retire(account.token.clone());
                    });
                    writer.expect("GET", &probe, &account.token, None, 401);
                    mine.remove(index);
                }
            }
        }
    }
}

/// Anonymous services living `ttl_hours`: created, published with their secret, read from their
/// public subdomain, then every other one deleted; the rest expire during the run (the reaper
/// works under load).
pub fn anonymous(scene: &Scene, ttl_hours: f64, stop: &AtomicBool, ledger: &Mutex<Ledger>) {
    let writer = Writer { scene, ledger };
    let mut n = 0u64;
    while running(stop) {
        std::thread::sleep(Duration::from_millis(50));
        n += 1;
        let sent = Instant::now();
        let body = json!({"title": format!("soak {n}"), "ttlHours": ttl_hours});
        let Some(created) = writer.expect("POST", "/anonymous/services", "", Some(&body), 201)
        else {
            continue;
        };
        let arrived = Instant::now();
        let created = created.json();
        let (Some(subdomain), Some(secret), Some(remaining)) = (
            created["service"]["subdomain"].as_str(),
            created["secret"].as_str(),
            created["remainingSeconds"].as_u64(),
        ) else {
            writer.record(|l| l.problem(format!("anonymous creation answered {created}")));
            continue;
        };
        let kid = format!("{subdomain}-0");
        let config = format!("/services/{subdomain}/config");
        let upload = upload(subdomain, 1);
        if writer
            .expect("PUT", &config, secret, Some(&upload), 200)
            .is_none()
        {
            continue;
        }
        let mut record = Anonymous {
            subdomain: subdomain.to_owned(),
            secret: secret.to_owned(),
            kid: kid.clone(),
            expires_earliest: sent + Duration::from_secs(remaining),
            expires_latest: arrived + Duration::from_secs(remaining + 1),
            deleted: false,
        };
        writer.record(|l| l.acknowledge("anonymous service created and published"));
        writer.check_hosted(subdomain, Some(&kid));
        if n % 2 == 0
            && writer
                .expect(
                    "DELETE",
                    &format!("/services/{subdomain}"),
                    secret,
                    None,
                    204,
                )
                .is_some()
        {
            record.deleted = true;
            writer.record(|l| l.acknowledge("anonymous service deleted"));
            writer.check_hosted(subdomain, None);
        }
        writer.record(|l| l.anonymous.push(record));
    }
}

/// A federated caller (`oidc` account) retitling and republishing its service with a new
/// identity token each time, reading each write back with the same token.
pub fn federated(scene: &Scene, stop: &AtomicBool, ledger: &Mutex<Ledger>) {
    let writer = Writer { scene, ledger };
    let subdomain = scene.federated_service.as_str();
    let path = format!("/services/{subdomain}");
    let Some(mut current) = ledger
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .services
        .get(subdomain)
        .cloned()
    else {
        writer.record(|l| l.problem(format!("{subdomain} is not in the ledger")));
        return;
    };
    let mut n = 0u64;
    while running(stop) {
        std::thread::sleep(Duration::from_millis(20));
        n += 1;
        let Ok(token) = scene
            .signer
            .mint_with_id(&scene.issuer, Some(&format!("soak-{n}")))
        else {
            writer.record(|l| l.problem("minting an identity token failed".into()));
            continue;
        };
        let jwt = token.as_str();
        if n % 5 == 0 {
            let base = format!("{subdomain}-f{n}");
            if writer
                .expect(
                    "PUT",
                    &format!("{path}/config"),
                    jwt,
                    Some(&upload(&base, 1)),
                    200,
                )
                .is_some()
            {
                current.kid = Some(format!("{base}-0"));
                writer.record(|l| {
                    l.acknowledge("federated: configuration published");
                    l.services.insert(subdomain.to_owned(), current.clone());
                });
                writer.check_hosted(subdomain, current.kid.as_deref());
            }
        } else {
            let title = format!("federated {n}");
            if writer
                .expect("PATCH", &path, jwt, Some(&json!({"title": title})), 200)
                .is_some()
            {
                current.title = title;
                writer.record(|l| {
                    l.acknowledge("federated: title changed");
                    l.services.insert(subdomain.to_owned(), current.clone());
                });
                writer.check_api(subdomain, jwt, &current);
            }
        }
    }
}
