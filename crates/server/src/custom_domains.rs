//! What custom domains need from outside (docs/api.md, "Custom domains"): the TXT lookup that
//! proves ownership, the ACME order of a certificate (its HTTP-01 answers stored for every
//! replica to serve, its key sealed), and the hand-over of a served domain's certificate to the
//! TLS listener. `domain_worker` runs them; the rules (when to look again, when to give up, when
//! to renew) are `registry_domain::custom_domain`'s.

use crate::settings::Settings;
use anyhow::bail;
use registry_acme::{AcmeClient, DataKey, TxtLookup};
use registry_domain::custom_domain::{CustomDomain, DomainCertificate, Schedule};
use registry_domain::ports::{Storage, StoreResult};
use registry_replica::domains::DomainChanged;
use registry_replica::Replica;
use registry_tls::Reloading;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// What the worker needs: the ACME directory, the key that seals what it stores, the DNS
/// lookups, and the schedule.
#[derive(Debug)]
pub struct CustomDomains {
    acme: AcmeClient,
    key: DataKey,
    txt: TxtLookup,
    schedule: Schedule,
    /// HTTP-01 answers read from the database, by host and token: an ACME server asks each
    /// several times, from several places.
    answers: Mutex<HashMap<(String, String), String>>,
}

/// HTTP-01 answers kept in memory at most (then forgotten all at once: they are read again).
const KEPT_ANSWERS: usize = 1024;

impl CustomDomains {
    /// The custom domains of `settings`: `None` without `REGISTRY_ACME_DIRECTORY`; an error (for
    /// the start to report, in one sentence) when a setting they need is missing or unusable.
    pub fn from_settings(
        settings: &Settings,
        tls: Option<&Arc<Reloading>>,
    ) -> anyhow::Result<Option<Self>> {
        let Some(directory) = &settings.acme_directory else {
            return Ok(None);
        };
        let Some(key) = &settings.data_key else {
            bail!("REGISTRY_ACME_DIRECTORY needs REGISTRY_DATA_KEY (32 random bytes, base64: `openssl rand -base64 32`), the same on every replica");
        };
        if tls.is_none() {
            bail!("REGISTRY_ACME_DIRECTORY needs HTTPS (REGISTRY_TLS_CERT and REGISTRY_TLS_KEY): custom domains are served over TLS");
        }
        if settings.http_redirect_listen.is_none() {
            bail!("REGISTRY_ACME_DIRECTORY needs REGISTRY_HTTP_REDIRECT_LISTEN (plain HTTP on port 80), where the ACME server's HTTP-01 challenges are answered");
        }
        let acme = AcmeClient::new(
            directory,
            settings.acme_email.as_deref(),
            settings.acme_ca_file.clone(),
        )?;
        let check =
            time::Duration::seconds(i64::try_from(settings.domain_check_seconds).unwrap_or(300));
        Ok(Some(Self {
            acme,
            key: DataKey::from_base64(key)?,
            txt: TxtLookup::new(settings.dns_resolver.as_deref())?,
            schedule: Schedule {
                first_check: check,
                ..Schedule::default()
            },
            answers: Mutex::default(),
        }))
    }
}

impl CustomDomains {
    /// The HTTP-01 answer for `host` and `token` kept from an earlier read, if any.
    pub fn known_answer(&self, host: &str, token: &str) -> Option<String> {
        let answers = self.answers.lock().unwrap_or_else(PoisonError::into_inner);
        answers.get(&(host.to_owned(), token.to_owned())).cloned()
    }

    /// Keeps an HTTP-01 answer read from the database.
    pub fn keep_answer(&self, host: String, token: String, answer: String) {
        let mut answers = self.answers.lock().unwrap_or_else(PoisonError::into_inner);
        if answers.len() >= KEPT_ANSWERS {
            answers.clear();
        }
        answers.insert((host, token), answer);
    }

    /// The ACME directory (one account each).
    pub fn directory(&self) -> &str {
        self.acme.directory()
    }

    /// The schedule of lookups, orders and renewals.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// `domain` after one look for its TXT record at `now` (a failed lookup counts as not
    /// found: it is looked up again later).
    pub async fn look(&self, domain: CustomDomain, now: time::OffsetDateTime) -> CustomDomain {
        let found = match self
            .txt
            .holds(&domain.challenge_name(), &domain.txt_token)
            .await
        {
            Ok(found) => found,
            Err(error) => {
                tracing::info!(domain = domain.domain, %error, "custom domain: TXT lookup failed");
                false
            }
        };
        if found {
            tracing::info!(domain = domain.domain, "custom domain: ownership proven");
        }
        domain.checked(found, &self.schedule, now)
    }

    /// A certificate for `domain` by ACME: the directory's account (made once, kept sealed),
    /// the HTTP-01 answers stored for every replica to serve, the new key sealed. `Err` is the
    /// sentence the domain's `error` shows.
    pub async fn order(
        &self,
        replica: &Replica,
        domain: &CustomDomain,
    ) -> Result<DomainCertificate, String> {
        let account = self.account(replica).await.map_err(|e| e.to_string())?;
        let issued = self
            .acme
            .order(&account, &domain.domain, |challenge| {
                let name = domain.domain.clone();
                let now = replica.now();
                async move {
                    stored(replica, move |s| {
                        s.put_challenge(&name, &challenge.token, &challenge.key_authorization, now)
                    })
                    .await
                    .map_err(|e| format!("storing the HTTP-01 answer: {e}"))
                }
            })
            .await
            .map_err(|e| e.to_string())?;
        tracing::info!(domain = domain.domain, not_after = %issued.validity.not_after, "custom domain: certificate issued");
        Ok(DomainCertificate {
            sealed_key: self.key.seal(issued.key_pem.as_bytes()),
            chain_pem: issued.chain_pem,
            not_before: issued.validity.not_before,
            not_after: issued.validity.not_after,
            issuer: issued.validity.issuer,
        })
    }

    /// The ACME account of the directory: the one kept (by whichever replica made it first), or
    /// a new one, kept.
    async fn account(&self, replica: &Replica) -> anyhow::Result<registry_acme::Account> {
        let directory = self.acme.directory().to_owned();
        let kept = {
            let directory = directory.clone();
            stored(replica, move |s| s.acme_account(&directory)).await?
        };
        let opened = match kept {
            Some(sealed) => Some(String::from_utf8(self.key.open(&sealed)?)?),
            None => None,
        };
        let (account, made) = self.acme.account(opened.as_deref()).await?;
        let Some(credentials) = made else {
            return Ok(account);
        };
        let sealed = self.key.seal(credentials.as_bytes());
        let kept = stored(replica, move |s| s.put_acme_account(&directory, &sealed)).await?;
        let kept = String::from_utf8(self.key.open(&kept)?)?;
        if kept == credentials {
            return Ok(account);
        }
        // Another replica made one first: that one is used, by every replica.
        Ok(self.acme.account(Some(&kept)).await?.0)
    }

    /// Hands a change of the domains served to the TLS listener: a served domain's certificate
    /// (its key opened) is served to handshakes naming it, a dropped one no longer.
    pub fn install(&self, tls: &Reloading, change: &DomainChanged) {
        let served = match change {
            DomainChanged::Served(served) => served,
            DomainChanged::Dropped(name) => return tls.drop_domain(name),
        };
        let Some(certificate) = &served.domain.certificate else {
            return;
        };
        let name = &served.domain.domain;
        let installed = self
            .key
            .open(&certificate.sealed_key)
            .map_err(|e| e.to_string())
            .and_then(|key| {
                tls.serve_domain(name, certificate.chain_pem.as_bytes(), &key)
                    .map_err(|e| e.to_string())
            });
        match installed {
            Ok(()) => tracing::info!(domain = name, "custom domain: certificate served"),
            Err(why) => {
                tracing::error!(
                    domain = name,
                    why,
                    "custom domain: its certificate cannot be served"
                )
            }
        }
    }
}

/// Runs a storage call on the blocking pool.
async fn stored<T: Send + 'static>(
    replica: &Replica,
    f: impl FnOnce(&dyn Storage) -> StoreResult<T> + Send + 'static,
) -> anyhow::Result<T> {
    Ok(replica.db(f).await?)
}
