//! The domain's ports of what leaves the process, on this crate's clients. The ports are
//! synchronous, like storage: the worker's step runs on tokio's blocking pool, where these calls
//! run the async clients to completion on the runtime of that pool ([`finish`]).

use crate::{AcmeClient, DataKey, TxtLookup};
use registry_domain::ports::{
    AcmeChallenge, CertificateAuthority, IssuedCertificate, OwnershipCheck, Sealing,
};
use std::future::Future;

/// Runs `work` to its end on the tokio runtime of the calling thread, which must be one of its
/// blocking pool's (a use case run by `registry_replica::blocking`): never a runtime's worker.
fn finish<F: Future>(work: F) -> F::Output {
    tokio::runtime::Handle::current().block_on(work)
}

impl CertificateAuthority for AcmeClient {
    fn directory(&self) -> &str {
        AcmeClient::directory(self)
    }

    fn new_account(&self) -> Result<String, String> {
        let (_, made) = finish(self.account(None)).map_err(|e| e.to_string())?;
        made.ok_or_else(|| "the ACME server made no account".to_owned())
    }

    fn order(
        &self,
        account: &str,
        domain: &str,
        publish: &mut dyn FnMut(&AcmeChallenge) -> Result<(), String>,
    ) -> Result<IssuedCertificate, String> {
        let issued = finish(async {
            let (account, _) = self.account(Some(account)).await?;
            let publish = |challenge: AcmeChallenge| {
                let published = publish(&challenge);
                async move { published }
            };
            AcmeClient::order(self, &account, domain, publish).await
        })
        .map_err(|e| e.to_string())?;
        tracing::info!(domain, not_after = %issued.not_after, "custom domain: certificate issued");
        Ok(issued)
    }
}

impl OwnershipCheck for TxtLookup {
    fn holds(&self, name: &str, token: &str) -> Result<bool, String> {
        finish(TxtLookup::holds(self, name, token)).map_err(|e| e.to_string())
    }
}

impl Sealing for DataKey {
    fn seal(&self, plain: &[u8]) -> String {
        DataKey::seal(self, plain)
    }

    fn open(&self, sealed: &str) -> Result<Vec<u8>, String> {
        DataKey::open(self, sealed).map_err(|e| e.to_string())
    }
}
