use registry_domain::ports::Clock;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use time::OffsetDateTime;

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }
}

/// How often [`ShiftedClock`] reads its file again.
const REREAD_EVERY: Duration = Duration::from_millis(50);

/// The system clock shifted by a whole number of seconds written in a file: how the integration
/// tests move a running server's time forward (an anonymous service's expiry, a key's
/// retention) instead of waiting for it. Only `REGISTRY_TEST_CLOCK_FILE` turns it on; a file
/// that is missing or holds no number is no shift.
#[derive(Debug)]
pub struct ShiftedClock {
    path: PathBuf,
    shift_secs: AtomicI64,
    read_at: Mutex<Option<Instant>>,
}

impl ShiftedClock {
    /// A clock shifted by what `path` says.
    pub fn new(path: PathBuf) -> Self {
        Self {
            path,
            shift_secs: AtomicI64::new(0),
            read_at: Mutex::new(None),
        }
    }

    fn shift(&self) -> i64 {
        let mut read_at = self.read_at.lock().unwrap_or_else(|e| e.into_inner());
        if read_at.is_none_or(|at| at.elapsed() >= REREAD_EVERY) {
            let shift = std::fs::read_to_string(&self.path)
                .ok()
                .and_then(|text| text.trim().parse::<i64>().ok())
                .unwrap_or(0);
            self.shift_secs.store(shift, Ordering::Relaxed);
            *read_at = Some(Instant::now());
        }
        self.shift_secs.load(Ordering::Relaxed)
    }
}

impl Clock for ShiftedClock {
    fn now(&self) -> OffsetDateTime {
        OffsetDateTime::now_utc() + time::Duration::seconds(self.shift())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shifts_by_the_file_and_follows_it() {
        let path = std::env::temp_dir().join(format!("clock-{}", uuid::Uuid::new_v4()));
        let clock = ShiftedClock::new(path.clone());
        let drift = (clock.now() - OffsetDateTime::now_utc()).whole_seconds();
        assert!(drift.abs() <= 1, "no file, no shift");
        std::fs::write(&path, "7200\n").unwrap();
        std::thread::sleep(REREAD_EVERY);
        let shift = (clock.now() - OffsetDateTime::now_utc()).whole_seconds();
        assert!((7199..=7201).contains(&shift), "{shift}");
        let _ = std::fs::remove_file(path);
    }
}
