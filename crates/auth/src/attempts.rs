//! One argon2 check at a time per lookup id. A burst of wrong secrets for one real lookup id
//! (it is public: it is part of every token) takes one hashing lane, not all of them; a client
//! that sends its new token on several connections at once waits for the first check, whose
//! success the others then find in the token cache, or whose failure they are told (a burst of
//! one wrong secret costs one check).

use crate::{AuthError, AuthResult};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Other secrets that may wait behind the one checked for a lookup id; beyond them, 503 at
/// once.
const WAITING_PER_LOOKUP_ID: usize = 4;

/// Requests with one secret that may be in line at once: they cost no check of their own once
/// the first is remembered (or found wrong), so a client's fan-out joins; beyond them, 503.
const COPIES_PER_SECRET: usize = 64;

/// A secret's place in a line: its SHA-256 (the secret itself is not kept).
type Fingerprint = [u8; 32];

#[derive(Debug, Default)]
struct Gate {
    lock: Arc<tokio::sync::Mutex<()>>,
    /// The checks running or waiting, by secret (changed under the map's lock).
    secrets: HashMap<Fingerprint, Line>,
}

/// The requests in line with one secret.
#[derive(Debug, Default)]
struct Line {
    /// How many.
    copies: usize,
    /// Whether a check of it found it wrong: those still waiting are refused without one.
    wrong: bool,
}

/// The checks under way, by lookup id.
#[derive(Debug, Default)]
pub struct Attempts {
    gates: Mutex<HashMap<Box<str>, Gate>>,
}

/// A place in the line of one lookup id, given back when dropped (also by a check abandoned
/// while it waited).
#[derive(Debug)]
struct Ticket<'a> {
    attempts: &'a Attempts,
    lookup_id: Box<str>,
    secret: Fingerprint,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut gates = self.attempts.lock();
        if let Some(gate) = gates.get_mut(&self.lookup_id) {
            if let Some(line) = gate.secrets.get_mut(&self.secret) {
                line.copies -= 1;
                if line.copies == 0 {
                    gate.secrets.remove(&self.secret);
                }
            }
            if gate.secrets.is_empty() {
                gates.remove(&self.lookup_id);
            }
        }
    }
}

/// The right to run the check of one lookup id; the next waiting check runs when it is dropped.
#[derive(Debug)]
pub struct Turn<'a> {
    // Fields drop in order: the lock is released before the ticket is given back.
    _guard: tokio::sync::OwnedMutexGuard<()>,
    ticket: Ticket<'a>,
}

impl Turn<'_> {
    /// Whether a check this one waited behind found its very secret wrong.
    pub fn found_wrong(&self) -> bool {
        let ticket = &self.ticket;
        let gates = ticket.attempts.lock();
        (gates.get(&ticket.lookup_id))
            .and_then(|gate| gate.secrets.get(&ticket.secret))
            .is_some_and(|line| line.wrong)
    }

    /// Records that this check found its secret wrong, for those waiting with the same.
    pub fn wrong(&self) {
        let ticket = &self.ticket;
        let mut gates = ticket.attempts.lock();
        let gate = gates.get_mut(&ticket.lookup_id);
        if let Some(line) = gate.and_then(|gate| gate.secrets.get_mut(&ticket.secret)) {
            line.wrong = true;
        }
    }
}

impl Attempts {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Box<str>, Gate>> {
        self.gates.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for the turn of `secret` of `lookup_id`; [`AuthError::Busy`] when too many other
    /// secrets of it wait already.
    pub async fn turn(&self, lookup_id: &str, secret: &str) -> AuthResult<Turn<'_>> {
        let fingerprint: Fingerprint = Sha256::digest(secret.as_bytes()).into();
        let lock = {
            let mut gates = self.lock();
            let gate = gates.entry(lookup_id.into()).or_default();
            let full = match gate.secrets.get(&fingerprint) {
                Some(line) => line.copies >= COPIES_PER_SECRET,
                None => gate.secrets.len() > WAITING_PER_LOOKUP_ID,
            };
            if full {
                return Err(AuthError::Busy);
            }
            gate.secrets.entry(fingerprint).or_default().copies += 1;
            gate.lock.clone()
        };
        let ticket = Ticket {
            attempts: self,
            lookup_id: lookup_id.into(),
            secret: fingerprint,
        };
        let guard = lock.lock_owned().await;
        Ok(Turn {
            _guard: guard,
            ticket,
        })
    }

    /// How many lookup ids have a check under way or waiting.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::pin::Pin;

    type Waiting<'a> = Vec<Pin<Box<dyn Future<Output = AuthResult<()>> + 'a>>>;

    /// Checks of `secrets` of lookup id "abc", each registered in the line (first poll).
    fn waiting<'a>(attempts: &'a Attempts, secrets: &[&'a str]) -> Waiting<'a> {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        (secrets.iter())
            .map(|&secret| {
                let mut check: Pin<Box<dyn Future<Output = _>>> =
                    Box::pin(async move { attempts.turn("abc", secret).await.map(drop) });
                assert!(check.as_mut().poll(&mut cx).is_pending());
                check
            })
            .collect()
    }

    #[tokio::test]
    async fn one_check_per_lookup_id_and_a_bounded_wait_of_other_secrets() {
        let attempts = Attempts::default();
        let first = attempts.turn("abc", "s0").await.unwrap();
        let other = attempts.turn("xyz", "s0").await.unwrap();
        drop(other);
        let waiting = waiting(&attempts, &["s1", "s2", "s3", "s4"]);
        assert_eq!(waiting.len(), WAITING_PER_LOOKUP_ID);
        assert!(matches!(
            attempts.turn("abc", "s5").await,
            Err(AuthError::Busy)
        ));
        drop(first);
        for w in waiting {
            w.await.unwrap();
        }
        assert_eq!(attempts.len(), 0);
    }

    #[tokio::test]
    async fn those_waiting_with_a_secret_found_wrong_are_told() {
        let attempts = Attempts::default();
        let first = attempts.turn("abc", "wrong").await.unwrap();
        let told = |secret: &'static str| {
            let attempts = &attempts;
            let mut check: Pin<Box<dyn Future<Output = bool>>> =
                Box::pin(async move { attempts.turn("abc", secret).await.unwrap().found_wrong() });
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            assert!(check.as_mut().poll(&mut cx).is_pending());
            check
        };
        let (same, other) = (told("wrong"), told("right"));
        first.wrong();
        drop(first);
        assert!(same.await, "the same secret, found wrong");
        assert!(!other.await, "another secret is checked");
        let again = attempts.turn("abc", "wrong").await.unwrap();
        assert!(!again.found_wrong(), "forgotten once nobody was in line");
    }

    /// A client's new token sent on many connections at once: each request waits for the
    /// first check (then finds it remembered), none is refused.
    #[tokio::test]
    async fn one_secret_sent_many_times_at_once_waits_in_one_line() {
        let attempts = Attempts::default();
        let first = attempts.turn("abc", "new").await.unwrap();
        let same = waiting(&attempts, &["new"; COPIES_PER_SECRET - 1]);
        assert!(matches!(
            attempts.turn("abc", "new").await,
            Err(AuthError::Busy)
        ));
        // Other secrets still have their places beside it.
        let others = waiting(&attempts, &["s1", "s2", "s3", "s4"]);
        assert!(matches!(
            attempts.turn("abc", "s5").await,
            Err(AuthError::Busy)
        ));
        drop(first);
        for w in same.into_iter().chain(others) {
            w.await.unwrap();
        }
        assert_eq!(attempts.len(), 0);
    }
}
