//! The domain's ports of what leaves the process, on this crate's clients. The ports are
//! synchronous, like storage: the worker's step runs on tokio's blocking pool, where these calls
//! run the async clients to completion on the runtime of that pool ([`finish`]).

use crate::{AcmeClient, DataKey, TxtLookup};
use registry_domain::custom_domain::{CHALLENGE_SETTLES, ORDER_LOCK};
use registry_domain::ports::{
    AcmeChallenge, CertificateAuthority, IssuedCertificate, OwnershipCheck, Sealing,
};
use std::future::Future;
use std::time::Duration;

/// How long an order may take, every request to the ACME server together, the account's
/// loading included: less than the domain's ordering lock ([`ORDER_LOCK`]), so that no other
/// replica orders for the domain while this one still may, and a server that stops answering
/// holds the worker's orders up this long at most.
const ORDER_TIME: Duration = Duration::from_secs(ORDER_LOCK.whole_seconds().unsigned_abs() - 60);

/// How long making the account may take (before the first order, under its lock too).
const ACCOUNT_TIME: Duration = Duration::from_secs(30);

/// Runs `work` to its end on the tokio runtime of the calling thread, which must be one of its
/// blocking pool's (a use case run by `registry_replica::blocking`): never a runtime's worker.
fn finish<F: Future>(work: F) -> F::Output {
    tokio::runtime::Handle::current().block_on(work)
}

/// [`finish`], for `what` taking at most `limit`: past it, the sentence that says so.
fn finish_within<T, E: ToString>(
    what: &str,
    limit: Duration,
    work: impl Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match finish(tokio::time::timeout(limit, work)) {
        Ok(done) => done.map_err(|e| e.to_string()),
        Err(_) => Err(format!(
            "{what} took longer than {} s: the ACME server did not answer in time",
            limit.as_secs()
        )),
    }
}

impl CertificateAuthority for AcmeClient {
    fn directory(&self) -> &str {
        AcmeClient::directory(self)
    }

    fn new_account(&self) -> Result<String, String> {
        let (_, made) = finish_within("making the ACME account", ACCOUNT_TIME, self.account(None))?;
        made.ok_or_else(|| "the ACME server made no account".to_owned())
    }

    fn order(
        &self,
        account: &str,
        domain: &str,
        publish: &mut dyn FnMut(&AcmeChallenge) -> Result<(), String>,
    ) -> Result<IssuedCertificate, String> {
        let issued = finish_within("the order", ORDER_TIME, async {
            let (account, _) = self.account(Some(account)).await?;
            // Every replica answers it once its read of the host's answers is fresh enough.
            let publish = |challenge: AcmeChallenge| {
                let published = publish(&challenge);
                async move {
                    if published.is_ok() {
                        tokio::time::sleep(CHALLENGE_SETTLES).await;
                    }
                    published
                }
            };
            AcmeClient::order(self, &account, domain, publish).await
        })?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An ACME server that stops answering holds an order up for its bound at most, and the
    /// domain's error says why.
    #[test]
    fn work_past_its_bound_is_given_up_with_a_sentence() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let limit = Duration::from_millis(20);
        // On the blocking pool, as the worker's steps run.
        let blocking = |work: fn(Duration) -> Result<(), String>| {
            runtime
                .block_on(async { tokio::task::spawn_blocking(move || work(limit)).await })
                .unwrap()
        };
        let given_up = blocking(|limit| {
            finish_within(
                "the order",
                limit,
                std::future::pending::<Result<(), String>>(),
            )
        });
        assert_eq!(
            given_up,
            Err("the order took longer than 0 s: the ACME server did not answer in time".into())
        );
        let answered =
            blocking(|limit| finish_within("the order", limit, async { Err::<(), _>("refused") }));
        assert_eq!(answered, Err("refused".into()));
        assert!(
            ORDER_TIME < ORDER_LOCK.unsigned_abs(),
            "the lock outlasts an order"
        );
    }
}
