use rand::TryRngCore;
use registry_domain::ports::Randomness;

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
