//! The machine's clocks and random source, behind the domain's `Clock`, `Ticks` and `Randomness`
//! ports.

use rand::TryRngCore;
use registry_domain::ports::{Clock, Randomness, Ticks};
use time::OffsetDateTime;

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }
}

/// The system's monotonic time.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemTicks;

impl Ticks for SystemTicks {
    fn now(&self) -> std::time::Instant {
        std::time::Instant::now()
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
