//! Custom domains at work (docs/api.md, "Custom domains"): the worker every replica runs, which
//! looks for each verifying domain's TXT record and orders (or renews) the certificates of
//! verified ones by ACME, one replica at a time per domain; and the installer that hands each
//! served domain's certificate to the TLS listener. The rules (when to look again, when to give
//! up, when to renew) are `registry_domain::custom_domain`'s.

use crate::settings::Settings;
use crate::state::AppState;
use actix_web::web;
use anyhow::bail;
use registry_acme::{AcmeClient, DataKey, TxtLookup};
use registry_domain::custom_domain::{CustomDomain, DomainCertificate, DomainStatus, Schedule};
use registry_replica::domains::DomainChanged;
use registry_tls::Reloading;
use std::sync::Arc;
use std::time::Duration;

/// How often the worker asks which domains are due.
const LOOK_EVERY: Duration = Duration::from_secs(1);
/// Domains handled per look.
const BATCH: usize = 16;
/// How long one replica holds a domain's ordering lock: longer than an order takes.
const ORDER_LOCK: time::Duration = time::Duration::minutes(5);

/// What the worker needs: the ACME directory, the key that seals what it stores, the DNS
/// lookups, and the schedule.
#[derive(Debug)]
pub struct CustomDomains {
    acme: AcmeClient,
    key: DataKey,
    txt: TxtLookup,
    schedule: Schedule,
}

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
        let check = time::Duration::seconds(settings.domain_check_seconds.cast_signed());
        Ok(Some(Self {
            acme,
            key: DataKey::from_base64(key)?,
            txt: TxtLookup::new(settings.dns_resolver.as_deref())?,
            schedule: Schedule {
                first_check: check,
                ..Schedule::default()
            },
        }))
    }
}

/// Runs a storage call of the worker on the blocking pool.
async fn stored<T: Send + 'static>(
    state: &AppState,
    f: impl FnOnce(&dyn registry_domain::ports::Storage) -> registry_domain::ports::StoreResult<T>
        + Send
        + 'static,
) -> anyhow::Result<T> {
    Ok(state.replica.db(f).await?)
}

/// The worker: every second, the domains due get their next step. Every replica runs it; the
/// database's lock lets one order for a domain at a time.
pub async fn work(state: web::Data<AppState>) {
    let Some(domains) = state.custom_domains.clone() else {
        return;
    };
    let mut interval = tokio::time::interval(LOOK_EVERY);
    loop {
        interval.tick().await;
        let now = state.now();
        let due = match stored(&state, move |s| s.domains_due(now, BATCH)).await {
            Ok(due) => due,
            Err(error) => {
                tracing::warn!(%error, "custom domains: cannot read the domains due");
                continue;
            }
        };
        for domain in due {
            let name = domain.domain.clone();
            if let Err(error) = advance(&state, &domains, domain).await {
                tracing::warn!(domain = name, %error, "custom domain: the step failed; retried");
            }
        }
    }
}

/// One step of one domain: a TXT lookup, or an order.
async fn advance(
    state: &AppState,
    domains: &CustomDomains,
    domain: CustomDomain,
) -> anyhow::Result<()> {
    let next = match domain.status {
        DomainStatus::Verifying => {
            let found = match domains
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
            domain.checked(found, &domains.schedule, state.now())
        }
        DomainStatus::Issuing | DomainStatus::Active => {
            let (id, now) = (domain.service_id, state.now());
            let until = now + ORDER_LOCK;
            if !stored(state, move |s| s.lock_domain(id, until, now)).await? {
                return Ok(());
            }
            let outcome = order(state, domains, &domain).await;
            if let Err(why) = &outcome {
                tracing::warn!(
                    domain = domain.domain,
                    why,
                    "custom domain: the order failed"
                );
            }
            domain.ordered(outcome, &domains.schedule, state.now())
        }
        DomainStatus::Failed => return Ok(()),
    };
    let updated = stored(state, move |s| s.update_domain(&next)).await?;
    if updated {
        // This replica serves the new state at once; the others within the change log's bound.
        state.replica.settle_write().await;
    }
    Ok(())
}

/// Orders a certificate for `domain`: the account of the directory (made once, kept sealed),
/// the HTTP-01 answers stored for every replica to serve, the key sealed.
async fn order(
    state: &AppState,
    domains: &CustomDomains,
    domain: &CustomDomain,
) -> Result<DomainCertificate, String> {
    let account = account(state, domains).await.map_err(|e| e.to_string())?;
    let name = domain.domain.clone();
    let issued = domains
        .acme
        .order(&account, &domain.domain, |challenge| {
            let name = name.clone();
            let now = state.now();
            async move {
                stored(state, move |s| {
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
        sealed_key: domains.key.seal(issued.key_pem.as_bytes()),
        chain_pem: issued.chain_pem,
        not_before: issued.validity.not_before,
        not_after: issued.validity.not_after,
        issuer: issued.validity.issuer,
    })
}

/// The ACME account of the directory: the one kept (by whichever replica made it first), or a
/// new one, kept.
async fn account(
    state: &AppState,
    domains: &CustomDomains,
) -> anyhow::Result<registry_acme::Account> {
    let directory = domains.acme.directory().to_owned();
    let kept = {
        let directory = directory.clone();
        stored(state, move |s| s.acme_account(&directory)).await?
    };
    let opened = match kept {
        Some(sealed) => Some(String::from_utf8(domains.key.open(&sealed)?)?),
        None => None,
    };
    let (account, made) = domains.acme.account(opened.as_deref()).await?;
    let Some(credentials) = made else {
        return Ok(account);
    };
    let sealed = domains.key.seal(credentials.as_bytes());
    let kept = stored(state, move |s| s.put_acme_account(&directory, &sealed)).await?;
    if domains.key.open(&kept)? == credentials.as_bytes() {
        return Ok(account);
    }
    // Another replica made one first: use that one.
    let credentials = String::from_utf8(domains.key.open(&kept)?)?;
    Ok(domains.acme.account(Some(&credentials)).await?.0)
}

/// Hands each served domain's certificate to the TLS listener as this replica applies it:
/// those served at start, then every change.
pub async fn install_certificates(state: web::Data<AppState>) {
    let (Some(domains), Some(tls)) = (state.custom_domains.clone(), state.certificate.clone())
    else {
        return;
    };
    let mut changes = state.replica.watch_domains();
    for served in state.replica.domains.all() {
        install(&domains, &tls, &DomainChanged::Served(served));
    }
    while let Some(change) = changes.recv().await {
        install(&domains, &tls, &change);
    }
}

fn install(domains: &CustomDomains, tls: &Reloading, change: &DomainChanged) {
    match change {
        DomainChanged::Served(served) => {
            let Some(certificate) = &served.domain.certificate else {
                return;
            };
            let installed = domains
                .key
                .open(&certificate.sealed_key)
                .map_err(|e| e.to_string())
                .and_then(|key| {
                    tls.serve_domain(
                        &served.domain.domain,
                        certificate.chain_pem.as_bytes(),
                        &key,
                    )
                    .map_err(|e| e.to_string())
                });
            match installed {
                Ok(()) => tracing::info!(
                    domain = served.domain.domain,
                    "custom domain: certificate served"
                ),
                Err(why) => tracing::error!(
                    domain = served.domain.domain,
                    why,
                    "custom domain: its certificate cannot be served"
                ),
            }
        }
        DomainChanged::Dropped(name) => tls.drop_domain(name),
    }
}
