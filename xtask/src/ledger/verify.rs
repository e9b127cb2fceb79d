//! The check that the server holds what the ledger says.

use super::{audit, Ledger};
use anyhow::{bail, ensure, Result};
use registry_testkit::http::Http;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

impl Ledger {
    /// Checks that the server holds what the ledger says, that nothing it holds is half-written
    /// (a service's stored and hosted key sets agree), and that its audit trail agrees with both.
    pub fn verify(&self, http: Http, token: &str) -> Result<Verified> {
        let mut verified = Verified::default();
        let services = listed(http, token, "/services", "subdomain")?;
        let mut published = Vec::new();
        for (subdomain, service) in &services {
            for field in ["id", "subdomain", "title", "issuer", "createdAt"] {
                ensure!(
                    service.get(field).is_some(),
                    "service {subdomain} has no {field}: {service}"
                );
            }
            // What a write must have left in both: the configuration, and the hosted key set.
            let path = format!("/services/{subdomain}/config");
            let config = http.call("GET", &path, Some(token), None)?;
            let hosted = http.hosted(subdomain, "/openid/v1/jwks")?;
            let kids = match config.status {
                200 => {
                    let stored = config.json();
                    ensure!(
                        stored["openidConfiguration"]["issuer"] == service["issuer"],
                        "{subdomain}: configuration issuer differs from the service's"
                    );
                    // The uploaded keys come first; retired ones, kept for a while, follow.
                    hosted.expect(200, &format!("{subdomain}, published, hosted"))?;
                    let served = hosted.json()["keys"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default();
                    let uploaded = stored["jwks"]["keys"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default();
                    ensure!(
                        served.starts_with(&uploaded),
                        "{subdomain}: the hosted key set does not start with the stored one"
                    );
                    published.push(subdomain.clone());
                    Some(kids(&stored["jwks"]))
                }
                404 => {
                    hosted.expect(404, &format!("{subdomain}, nothing published, hosted"))?;
                    None
                }
                other => bail!("GET /services/{subdomain}/config → {other}"),
            };
            // Services the ledger does not know were made before it: the audit check sees to it.
            let Some(expected) = self.services.get(subdomain) else {
                continue;
            };
            ensure!(
                expected.exists.may_be(&true),
                "{subdomain} exists, but its deletion was acknowledged"
            );
            let title = service["title"].as_str().unwrap_or_default().to_owned();
            ensure!(
                expected.title.may_be(&title),
                "{subdomain}: title {title:?}, but {:?} was acknowledged last",
                expected.title.acked
            );
            // The uploaded keys come first, then any retired ones.
            let holds = |uploaded: &Option<Vec<String>>| match (uploaded, &kids) {
                (Some(uploaded), Some(kids)) => kids.starts_with(uploaded),
                (uploaded, kids) => uploaded.is_none() && kids.is_none(),
            };
            ensure!(
                expected.keys.any(holds),
                "{subdomain}: key set {kids:?}, but {:?} was acknowledged last",
                expected.keys.acked
            );
            if expected.exists.acked {
                verified.live_services += 1;
            } else {
                verified.found_whole += 1;
            }
        }
        for (subdomain, expected) in &self.services {
            if services.contains_key(subdomain) {
                continue;
            }
            ensure!(
                expected.exists.may_be(&false),
                "acknowledged service {subdomain} is missing"
            );
            let hosted = http.hosted(subdomain, "/openid/v1/jwks")?;
            hosted.expect(404, &format!("{subdomain}, gone, hosted"))?;
            if expected.exists.unsure.is_empty() {
                verified.deleted_services += 1;
            }
        }
        let accounts = listed(http, token, "/service-accounts", "id")?;
        self.verify_accounts(http, &accounts, &mut verified)?;
        self.verify_anonymous(http, &mut verified)?;
        let trail = audit::Trail::read(http, token)?;
        verified.audit_events = audit::check(&trail, self, &services, &published, &accounts)?;
        Ok(verified)
    }

    fn verify_accounts(
        &self,
        http: Http,
        listed: &BTreeMap<String, Value>,
        verified: &mut Verified,
    ) -> Result<()> {
        for (id, expected) in &self.accounts {
            let Some(account) = listed.get(id) else {
                ensure!(
                    expected.exists.may_be(&false),
                    "acknowledged account {id} is missing"
                );
                continue;
            };
            ensure!(
                expected.exists.may_be(&true),
                "account {id} exists, but its deletion was acknowledged"
            );
            let name = account["name"].as_str().unwrap_or_default().to_owned();
            ensure!(
                expected.name.may_be(&name),
                "account {id}: {name:?} listed, {:?} acknowledged",
                expected.name.acked
            );
            // Its last token works and shows exactly the services of its policy.
            let mut works = expected.token.may_be(&String::new());
            let tokens = std::iter::once(&expected.token.acked).chain(&expected.token.unsure);
            for token in tokens.filter(|t| !t.is_empty()) {
                let mine = http.call("GET", "/services", Some(token), None)?;
                if mine.status == 200 {
                    let visible: Vec<String> =
                        listed_in(&mine.json(), "subdomain").into_keys().collect();
                    ensure!(
                        visible == expected.services,
                        "account {id} sees {visible:?}"
                    );
                    works = true;
                    break;
                }
            }
            ensure!(works, "the last token of account {id} is refused");
            verified.accounts += 1;
        }
        for retired in &self.retired_tokens {
            let answer = http.call("GET", "/services", Some(retired), None)?;
            answer.expect(401, "a retired token")?;
            verified.retired_tokens += 1;
        }
        Ok(())
    }

    fn verify_anonymous(&self, http: Http, verified: &mut Verified) -> Result<()> {
        let margin = Duration::from_secs(1);
        for anonymous in &self.anonymous {
            let subdomain = &anonymous.subdomain;
            // Checking thousands takes longer than their lifetime: each is judged by the clock
            // around its own request.
            let before = Instant::now();
            let hosted = http.hosted(subdomain, "/openid/v1/jwks")?;
            let after = Instant::now();
            if anonymous.deleted || before > anonymous.expires_latest + margin {
                let deleted = anonymous.deleted;
                hosted.expect(
                    404,
                    &format!("anonymous {subdomain} (deleted: {deleted}), hosted"),
                )?;
                verified.anonymous_gone += 1;
            } else if after + margin < anonymous.expires_earliest {
                hosted.expect(200, &format!("anonymous {subdomain}, live, hosted"))?;
                let kid = kids(&hosted.json()).into_iter().next();
                ensure!(
                    kid.as_ref() == Some(&anonymous.kid),
                    "anonymous {subdomain}: {kid:?}"
                );
                let path = format!("/services/{subdomain}");
                let api = http.call("GET", &path, Some(&anonymous.secret), None)?;
                api.expect(200, &format!("anonymous {subdomain} with its secret"))?;
                verified.anonymous_live += 1;
            }
        }
        Ok(())
    }
}

/// The `kid`s of a key set, in order.
pub fn kids(jwks: &Value) -> Vec<String> {
    let keys = jwks["keys"].as_array().into_iter().flatten();
    keys.filter_map(|k| k["kid"].as_str().map(str::to_owned))
        .collect()
}

/// The objects of a JSON array by their `key` field.
fn listed_in(list: &Value, key: &str) -> BTreeMap<String, Value> {
    let items = list.as_array().map(Vec::as_slice).unwrap_or_default();
    items
        .iter()
        .filter_map(|item| Some((item[key].as_str()?.to_owned(), item.clone())))
        .collect()
}

/// `GET path` (a list), by each item's `key`.
fn listed(http: Http, token: &str, path: &str, key: &str) -> Result<BTreeMap<String, Value>> {
    let answer = http.call("GET", path, Some(token), None)?;
    ensure!(answer.status == 200, "GET {path} → {}", answer.status);
    let list = answer.json();
    ensure!(list.is_array(), "GET {path} is not an array");
    Ok(listed_in(&list, key))
}

/// What a check looked at.
#[derive(Debug, Default)]
pub struct Verified {
    pub live_services: usize,
    pub deleted_services: usize,
    /// Services whose creation was never acknowledged (in flight at a crash), found whole.
    pub found_whole: usize,
    pub accounts: usize,
    pub retired_tokens: usize,
    pub anonymous_live: usize,
    pub anonymous_gone: usize,
    /// Audit events read and found to agree with the ledger and the data.
    pub audit_events: u64,
}

impl std::fmt::Display for Verified {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} live services as last written (title, key set, hosted set), {} deleted ones gone, \
             {} accounts with working tokens, {} retired tokens refused, {} anonymous services \
             live and {} expired or deleted as expected, {} audit events each matching its change",
            self.live_services,
            self.deleted_services,
            self.accounts,
            self.retired_tokens,
            self.anonymous_live,
            self.anonymous_gone,
            self.audit_events
        )
    }
}
