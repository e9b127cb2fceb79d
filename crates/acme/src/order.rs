//! Orders by ACME (RFC 8555): one account per directory (its credentials kept sealed by the
//! caller), one order per domain, the HTTP-01 challenge published by the caller wherever every
//! replica answers it, then the certificate.

use crate::certificate::Validity;
use crate::AcmeError;
use instant_acme::{
    Account, AccountBuilder, AccountCredentials, AuthorizationStatus, ChallengeType, Identifier,
    NewAccount, NewOrder, OrderStatus, RetryPolicy,
};
use registry_domain::ports::{AcmeChallenge, IssuedCertificate};
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

/// The ACME directory certificates are ordered from (`REGISTRY_ACME_DIRECTORY`), with the
/// account's contact (`REGISTRY_ACME_EMAIL`) and, for a private CA, the root its HTTPS is
/// verified with (`REGISTRY_ACME_CA_FILE`).
#[derive(Debug, Clone)]
pub struct AcmeClient {
    directory: String,
    email: Option<String>,
    ca_file: Option<PathBuf>,
}

/// How long the ACME server may take to validate a challenge, and to issue.
const VALIDATION: RetryPolicy = RetryPolicy::new()
    .initial_delay(Duration::from_millis(500))
    .backoff(1.5)
    .timeout(Duration::from_secs(120));

impl AcmeClient {
    /// A client of `directory`. The CA file, when given, must hold a PEM certificate: checked
    /// here, so that a start fails at once rather than at the first order.
    pub fn new(
        directory: &str,
        email: Option<&str>,
        ca_file: Option<PathBuf>,
    ) -> Result<Self, AcmeError> {
        if !(directory.starts_with("https://") || directory.starts_with("http://")) {
            return Err(AcmeError::Setting(format!(
                "REGISTRY_ACME_DIRECTORY {directory:?} is not a URL (https://…/directory)"
            )));
        }
        if let Some(file) = &ca_file {
            let text = std::fs::read_to_string(file).map_err(|e| {
                AcmeError::Setting(format!("REGISTRY_ACME_CA_FILE {}: {e}", file.display()))
            })?;
            if !text.contains("-----BEGIN CERTIFICATE-----") {
                return Err(AcmeError::Setting(format!(
                    "REGISTRY_ACME_CA_FILE {} holds no PEM certificate",
                    file.display()
                )));
            }
        }
        Ok(Self {
            directory: directory.to_owned(),
            email: email.filter(|e| !e.is_empty()).map(str::to_owned),
            ca_file,
        })
    }

    /// The directory's URL.
    pub fn directory(&self) -> &str {
        &self.directory
    }

    fn builder(&self) -> Result<AccountBuilder, AcmeError> {
        match &self.ca_file {
            Some(file) => Account::builder_with_root(file),
            None => Account::builder(),
        }
        .map_err(|e| AcmeError::Order(format!("the ACME client: {e}")))
    }

    /// The account whose credentials (JSON) were `stored`, or a new one: then its credentials
    /// come back too, for the caller to keep.
    pub async fn account(
        &self,
        stored: Option<&str>,
    ) -> Result<(Account, Option<String>), AcmeError> {
        if let Some(stored) = stored {
            let credentials: AccountCredentials = serde_json::from_str(stored)
                .map_err(|e| AcmeError::Order(format!("the stored ACME account: {e}")))?;
            let account = self
                .builder()?
                .from_credentials(credentials)
                .await
                .map_err(|e| problem("loading the ACME account", e))?;
            return Ok((account, None));
        }
        let contact = self.email.as_ref().map(|e| format!("mailto:{e}"));
        let contact: Vec<&str> = contact.iter().map(String::as_str).collect();
        let (account, credentials) = self
            .builder()?
            .create(
                &NewAccount {
                    contact: &contact,
                    terms_of_service_agreed: true,
                    only_return_existing: false,
                },
                self.directory.clone(),
                None,
            )
            .await
            .map_err(|e| problem("creating the ACME account", e))?;
        let credentials = serde_json::to_string(&credentials)
            .map_err(|e| AcmeError::Order(format!("the new ACME account: {e}")))?;
        Ok((account, Some(credentials)))
    }

    /// A certificate for `domain`: an order, each authorization's HTTP-01 challenge handed to
    /// `publish` (which makes every replica answer it) before the server is told to validate,
    /// then the certificate with a new key.
    pub async fn order<F, Fut>(
        &self,
        account: &Account,
        domain: &str,
        mut publish: F,
    ) -> Result<IssuedCertificate, AcmeError>
    where
        F: FnMut(AcmeChallenge) -> Fut,
        Fut: Future<Output = Result<(), String>>,
    {
        let identifiers = [Identifier::Dns(domain.to_owned())];
        let mut order = account
            .new_order(&NewOrder::new(&identifiers))
            .await
            .map_err(|e| problem("the new order", e))?;
        let mut authorizations = order.authorizations();
        while let Some(authorization) = authorizations.next().await {
            let mut authorization =
                authorization.map_err(|e| problem("reading an authorization", e))?;
            if authorization.status == AuthorizationStatus::Valid {
                continue;
            }
            let mut challenge =
                authorization
                    .challenge(ChallengeType::Http01)
                    .ok_or_else(|| {
                        AcmeError::Order("the ACME server offers no HTTP-01 challenge".into())
                    })?;
            publish(AcmeChallenge {
                token: challenge.token.clone(),
                key_authorization: challenge.key_authorization().as_str().to_owned(),
            })
            .await
            .map_err(AcmeError::Order)?;
            challenge
                .set_ready()
                .await
                .map_err(|e| problem("answering the challenge", e))?;
        }
        let status = order
            .poll_ready(&VALIDATION)
            .await
            .map_err(|e| problem("the validation", e))?;
        if status != OrderStatus::Ready {
            return Err(AcmeError::Order(format!(
                "the order ended {status:?}: the ACME server could not validate the challenge"
            )));
        }
        let key_pem = order
            .finalize()
            .await
            .map_err(|e| problem("finalizing the order", e))?;
        let chain_pem = order
            .poll_certificate(&VALIDATION)
            .await
            .map_err(|e| problem("downloading the certificate", e))?;
        let validity = Validity::of_chain(&chain_pem)?;
        Ok(IssuedCertificate {
            chain_pem,
            key_pem,
            not_before: validity.not_before,
            not_after: validity.not_after,
            issuer: validity.issuer,
        })
    }
}

/// An ACME failure as a sentence: the step, and the server's problem detail when it sent one.
fn problem(step: &str, error: instant_acme::Error) -> AcmeError {
    let detail = match &error {
        instant_acme::Error::Api(problem) => match (&problem.r#type, &problem.detail) {
            (Some(kind), Some(detail)) => format!("{kind}: {detail}"),
            (None, Some(detail)) => detail.clone(),
            _ => error.to_string(),
        },
        _ => error.to_string(),
    };
    AcmeError::Order(format!("{step}: {detail}"))
}
