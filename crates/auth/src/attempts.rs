//! One argon2 check at a time per lookup id. A burst of wrong secrets for one real lookup id
//! (it is public: it is part of every token) takes one hashing lane, not all of them; a client
//! that sends its new token on several connections at once waits for the first check, whose
//! success the others then find in the token cache.

use crate::{AuthError, AuthResult};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Checks that may wait behind the one running for a lookup id; beyond them, 503 at once.
const WAITING_PER_LOOKUP_ID: usize = 4;

#[derive(Debug, Default)]
struct Gate {
    lock: Arc<tokio::sync::Mutex<()>>,
    /// Checks running or waiting (changed under the map's lock).
    turns: usize,
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
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut gates = self.attempts.lock();
        if let Some(gate) = gates.get_mut(&self.lookup_id) {
            gate.turns -= 1;
            if gate.turns == 0 {
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
    _ticket: Ticket<'a>,
}

impl Attempts {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Box<str>, Gate>> {
        self.gates.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for the turn of `lookup_id`; [`AuthError::Busy`] when too many checks wait already.
    pub async fn turn(&self, lookup_id: &str) -> AuthResult<Turn<'_>> {
        let lock = {
            let mut gates = self.lock();
            let gate = gates.entry(lookup_id.into()).or_default();
            if gate.turns > WAITING_PER_LOOKUP_ID {
                return Err(AuthError::Busy);
            }
            gate.turns += 1;
            gate.lock.clone()
        };
        let ticket = Ticket {
            attempts: self,
            lookup_id: lookup_id.into(),
        };
        let guard = lock.lock_owned().await;
        Ok(Turn {
            _guard: guard,
            _ticket: ticket,
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

    #[tokio::test]
    async fn one_check_per_lookup_id_and_a_bounded_wait() {
        let attempts = Attempts::default();
        let first = attempts.turn("abc").await.unwrap();
        let other = attempts.turn("xyz").await.unwrap();
        drop(other);
        let mut waiting = Vec::new();
        for _ in 0..WAITING_PER_LOOKUP_ID {
            let attempts = &attempts;
            waiting.push(Box::pin(
                async move { attempts.turn("abc").await.map(drop) },
            ));
        }
        // Each waiting check registers itself on its first poll.
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        for w in &mut waiting {
            assert!(std::future::Future::poll(w.as_mut(), &mut cx).is_pending());
        }
        assert!(matches!(attempts.turn("abc").await, Err(AuthError::Busy)));
        drop(first);
        for w in waiting {
            w.await.unwrap();
        }
        assert_eq!(attempts.len(), 0);
    }
}
