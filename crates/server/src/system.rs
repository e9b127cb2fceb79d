//! The machine's clock and random source, behind the domain's `Clock` and `Randomness` ports.

use rand::TryRngCore;
use registry_domain::ports::{Clock, Randomness};
use time::OffsetDateTime;

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }
}

/// The operating system's random source.
#[derive(Debug, Clone, Copy, Default)]
pub struct OsRandomness;

impl Randomness for OsRandomness {
    fn fill_bytes(&self, buf: &mut [u8]) {
        rand::rngs::OsRng
            .try_fill_bytes(buf)
            .expect("the operating system's random source failed");
    }
}
