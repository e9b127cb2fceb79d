//! How a test waits for what happens in the background (a log flushed by a thread, fetch
//! evidence flushed every second, a change applied by another replica): by asking until it
//! holds, never by sleeping for as long as a fast machine needs.

use std::time::{Duration, Instant};

/// Whether `check` holds within `limit`, asked at once and then every 50 ms. Callers assert on
/// the answer with what they saw, so that a timeout says why.
pub fn within(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
