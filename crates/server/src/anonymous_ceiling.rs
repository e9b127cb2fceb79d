//! The registry full of anonymous services, as this replica last found it (docs/api.md,
//! "Anonymous services"): for a second after a creation found it full, the others are told so
//! from memory, so that a flood of creations while it is full costs a database read a second.

use crate::problem::{ApiError, ApiResult};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long a creation that found the registry full answers for the others: they are told the
/// same from memory, without a database read, so a flood of creations while it is full costs a
/// read a second.
const FULL_FOR: Duration = Duration::from_secs(1);

/// The last creation that found the registry full, and its answer.
#[derive(Debug, Default)]
pub struct Full(Mutex<Option<(Instant, u64, String)>>);

impl Full {
    /// The 503 a creation found less than [`FULL_FOR`] ago, if one did.
    pub fn still(&self) -> ApiResult<()> {
        let full = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match &*full {
            Some((at, retry_after_secs, detail)) if at.elapsed() < FULL_FOR => {
                Err(ApiError::Capacity {
                    retry_after_secs: *retry_after_secs,
                    detail: detail.clone(),
                })
            }
            _ => Ok(()),
        }
    }

    /// Remembers a creation's `capacity` answer.
    pub fn found(&self, retry_after_secs: u64, detail: &str) {
        let mut full = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        *full = Some((Instant::now(), retry_after_secs, detail.to_owned()));
    }
}
