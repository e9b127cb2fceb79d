//! What custom domains need from outside (docs/api.md, "Custom domains"), built from the
//! settings: the adapters of the worker's ports (`registry-acme`'s ACME client, TXT lookup and
//! sealing key), the HTTP-01 answers kept in memory, and the hand-over of a served domain's
//! certificate to the TLS listener. `domain_worker` runs the use case
//! `registry_domain::app::domains::advance` over them.

use crate::challenge_answers::ChallengeAnswers;
use crate::settings::Settings;
use anyhow::bail;
use registry_acme::{AcmeClient, DataKey, TxtLookup};
use registry_domain::app::domains::Outside;
use registry_domain::custom_domain::Schedule;
use registry_replica::domains::DomainChanged;
use registry_tls::Reloading;
use std::sync::Arc;

/// What the worker needs: the ACME directory, the key that seals what it stores, the DNS
/// lookups, and the schedule.
#[derive(Debug)]
pub struct CustomDomains {
    acme: AcmeClient,
    key: DataKey,
    txt: TxtLookup,
    schedule: Schedule,
    /// HTTP-01 answers read from the database.
    pub answers: ChallengeAnswers,
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
            answers: ChallengeAnswers::default(),
        }))
    }
}

impl CustomDomains {
    /// What the worker's step reaches outside the process: the ACME directory, the DNS
    /// lookups, the sealing key, with the schedule.
    pub fn outside(&self) -> Outside<'_> {
        Outside {
            authority: &self.acme,
            dns: &self.txt,
            sealing: &self.key,
            schedule: &self.schedule,
        }
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
