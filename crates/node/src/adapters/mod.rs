//! Production implementations of the domain's small ports.

mod clock;
mod hashing;
mod random;

pub use clock::SystemClock;
pub use hashing::{Argon2Hasher, HashingLanes};
pub use random::OsRandomness;
