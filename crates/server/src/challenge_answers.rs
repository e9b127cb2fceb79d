//! The HTTP-01 answers of custom domains, as this replica last read them (docs/api.md, "Custom
//! domains"): anyone may ask for any token of any host, as often as they like, so an unknown
//! token must not cost a database read each time; and an ACME server must never be told "no"
//! for an answer stored before it asked.

use registry_domain::custom_domain::CHALLENGES_FRESH;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

/// Hosts whose answers are kept at most (then forgotten all at once: they are read again).
const KEPT_HOSTS: usize = 1024;

/// Each host's HTTP-01 answers, from this replica's last read of them.
#[derive(Debug, Default)]
pub struct ChallengeAnswers {
    hosts: Mutex<HashMap<String, Arc<tokio::sync::Mutex<HostAnswers>>>>,
}

/// A host's answers as its last read found them.
#[derive(Debug, Default)]
struct HostAnswers {
    /// When that read began; `None`: not read yet.
    read_at: Option<Instant>,
    /// Token and answer.
    answers: Vec<(String, String)>,
}

impl ChallengeAnswers {
    /// The answer for `host` and `token`, if one is stored: from the host's last read when it
    /// began less than [`CHALLENGES_FRESH`] ago, else from a new one, `read` (every answer of
    /// the host at once). One read of a host at a time, and whoever asks meanwhile waits for
    /// it: unknown tokens cost a host one read a [`CHALLENGES_FRESH`] at most, and an answer
    /// stored before a read began is in it (the ACME adapter asks for validation only
    /// `CHALLENGE_SETTLES` after it stored the answer, later than any read before it is used).
    pub async fn answer<F, Fut, E>(
        &self,
        host: &str,
        token: &str,
        read: F,
    ) -> Result<Option<String>, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Vec<(String, String)>, E>>,
    {
        let slot = {
            let mut hosts = self.hosts.lock().unwrap_or_else(PoisonError::into_inner);
            if hosts.len() >= KEPT_HOSTS && !hosts.contains_key(host) {
                hosts.clear();
            }
            Arc::clone(hosts.entry(host.to_owned()).or_default())
        };
        let mut kept = slot.lock().await;
        if kept
            .read_at
            .is_none_or(|at| at.elapsed() >= CHALLENGES_FRESH)
        {
            let began = Instant::now();
            let answers = read().await?;
            *kept = HostAnswers {
                read_at: Some(began),
                answers,
            };
        }
        Ok((kept.answers.iter())
            .find(|(t, _)| t == token)
            .map(|(_, answer)| answer.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn stored() -> Vec<(String, String)> {
        vec![("t".to_owned(), "t.k".to_owned())]
    }

    #[tokio::test]
    async fn unknown_tokens_cost_one_read_a_second_per_host() {
        let answers = ChallengeAnswers::default();
        let reads = AtomicUsize::new(0);
        let read = || async {
            reads.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ()>(stored())
        };
        assert_eq!(
            answers.answer("a.test", "t", read).await,
            Ok(Some("t.k".into()))
        );
        for i in 0..100 {
            let asked = format!("random-{i}");
            assert_eq!(answers.answer("a.test", &asked, read).await, Ok(None));
        }
        assert_eq!(reads.load(Ordering::SeqCst), 1);
        // Another host is read on its own.
        assert_eq!(
            answers.answer("b.test", "t", read).await,
            Ok(Some("t.k".into()))
        );
        assert_eq!(reads.load(Ordering::SeqCst), 2);
        // A second later the host is read again: an answer stored since is found.
        tokio::time::sleep(CHALLENGES_FRESH).await;
        let newer = || async {
            reads.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ()>(vec![("u".to_owned(), "u.k".to_owned())])
        };
        assert_eq!(
            answers.answer("a.test", "u", newer).await,
            Ok(Some("u.k".into()))
        );
        assert_eq!(reads.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn those_who_ask_during_a_read_wait_for_it() {
        let answers = ChallengeAnswers::default();
        let reads = AtomicUsize::new(0);
        let read = || async {
            reads.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            Ok::<_, ()>(stored())
        };
        let asked = (0..20).map(|_| answers.answer("a.test", "t", read));
        let found = futures_util::future::join_all(asked).await;
        assert!(found.iter().all(|f| f == &Ok(Some("t.k".to_owned()))));
        assert_eq!(reads.load(Ordering::SeqCst), 1);
        // A failed read is the caller's error, and the next asks again.
        let failing = || async { Err::<Vec<(String, String)>, _>("down") };
        let other = answers.answer("c.test", "t", failing).await;
        assert_eq!(other, Err("down"));
        assert_eq!(
            answers.answer("c.test", "t", read).await,
            Ok(Some("t.k".into()))
        );
    }
}
