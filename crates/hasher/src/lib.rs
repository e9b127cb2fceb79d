//! `registry-hasher`: the domain's `SecretHasher` port on argon2id. Secrets (static tokens,
//! anonymous secrets) are hashed and verified on lanes of threads of its own with bounded
//! queues ([`HashingLanes`]): a full queue is refused at once (`HasherBusy`, a 503), so a flood
//! of bad secrets never waits on the async workers or grows a queue without bound.

use argon2::password_hash::phc::{Output, ParamsString, PasswordHash, Salt};
use argon2::password_hash::{self, generate_salt};
use argon2::{Algorithm, Argon2, Block, Params, Version};
use registry_domain::ports::{HasherBusy, SecretHasher};
use std::sync::{Mutex, PoisonError};

/// argon2id with the crate's default parameters (about 17 ms per verification here, which is
/// why verified tokens are remembered, see `auth::token_cache`), computing in memory it keeps.
///
/// The crate's own `hash_password` allocates its 19 MiB of blocks per call and frees them; the
/// first such free makes glibc raise its mmap and trim thresholds to match (they are dynamic),
/// after which every malloc arena of the process keeps tens of MiB it no longer uses: the soak
/// measured 490 MiB resident after a minute of new tokens and secrets, against 68 MiB with a
/// single arena. Allocating the blocks once, and never freeing them, leaves glibc at its
/// defaults. The output is the same PHC string as the crate's, and either verifies the other's.
#[derive(Debug, Default)]
pub struct Argon2Hasher {
    memory: Mutex<Vec<Block>>,
}

impl Argon2Hasher {
    /// `argon2` over `secret` and `salt` into `out`, in the kept memory.
    fn compute(
        &self,
        argon2: &Argon2<'_>,
        secret: &str,
        salt: &[u8],
        out: &mut [u8],
    ) -> argon2::Result<()> {
        let mut memory = self.memory.lock().unwrap_or_else(PoisonError::into_inner);
        let needed = argon2.params().block_count();
        if memory.len() < needed {
            memory.resize(needed, Block::new());
        }
        argon2.hash_password_into_with_memory(secret.as_bytes(), salt, out, &mut memory[..needed])
    }

    fn try_hash(&self, secret: &str) -> password_hash::Result<String> {
        let argon2 = Argon2::default();
        let salt = generate_salt();
        let mut out = [0u8; Params::DEFAULT_OUTPUT_LEN];
        self.compute(&argon2, secret, &salt, &mut out)?;
        Ok(PasswordHash {
            algorithm: Algorithm::Argon2id.ident(),
            version: Some(Version::default().into()),
            params: ParamsString::try_from(argon2.params())?,
            salt: Some(Salt::new(&salt)?),
            hash: Some(Output::new(&out)?),
        }
        .to_string())
    }

    fn try_verify(&self, secret: &str, hash: &str) -> password_hash::Result<bool> {
        let parsed = PasswordHash::new(hash)?;
        let (Some(salt), Some(expected)) = (&parsed.salt, &parsed.hash) else {
            return Ok(false);
        };
        let version = parsed
            .version
            .map(Version::try_from)
            .transpose()?
            .unwrap_or_default();
        let argon2 = Argon2::new(
            Algorithm::try_from(parsed.algorithm.as_str())?,
            version,
            Params::try_from(&parsed)?,
        );
        let mut out = vec![0u8; expected.len()];
        self.compute(&argon2, secret, salt, &mut out)?;
        // `Output`'s equality is constant-time.
        Ok(Output::new(&out)? == *expected)
    }
}

impl Argon2Hasher {
    /// A new hash of `secret` (PHC string).
    pub fn hash(&self, secret: &str) -> String {
        self.try_hash(secret)
            .expect("argon2 with default parameters cannot fail")
    }

    /// Whether `secret` matches `hash`.
    pub fn verify(&self, secret: &str, hash: &str) -> bool {
        self.try_verify(secret, hash).unwrap_or(false)
    }
}

impl SecretHasher for Argon2Hasher {
    fn hash(&self, secret: &str) -> Result<String, HasherBusy> {
        Ok(Argon2Hasher::hash(self, secret))
    }

    fn verify(&self, secret: &str, hash: &str) -> Result<bool, HasherBusy> {
        Ok(Argon2Hasher::verify(self, secret, hash))
    }
}

/// A hashing job: runs on a lane with that lane's hasher.
type Job = Box<dyn FnOnce(&Argon2Hasher) + Send>;

/// Verifications that may wait for a lane, per lane: beyond them a check answers 503 at once
/// (a burst of wrong secrets cannot build a queue that every later request waits behind).
const QUEUED_VERIFICATIONS_PER_LANE: usize = 8;
/// New secrets that may wait for a lane, per lane (their callers are rate limited already).
const QUEUED_HASHES_PER_LANE: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Priority {
    /// Hashing a new secret: a creation someone is waiting for.
    Hash,
    /// Checking a presented secret: the work strangers can cause.
    Verify,
}

#[derive(Default)]
struct Pending {
    hashes: std::collections::VecDeque<Job>,
    verifications: std::collections::VecDeque<Job>,
    closed: bool,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("hashes", &self.hashes.len())
            .field("verifications", &self.verifications.len())
            .finish()
    }
}

#[derive(Debug, Default)]
struct Queue {
    pending: Mutex<Pending>,
    ready: std::sync::Condvar,
}

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next job, new secrets first; `None` once the lanes are dropped.
    fn next(&self) -> Option<Job> {
        let mut pending = self.lock();
        loop {
            if let Some(job) = pending.hashes.pop_front() {
                return Some(job);
            }
            if let Some(job) = pending.verifications.pop_front() {
                return Some(job);
            }
            if pending.closed {
                return None;
            }
            pending = self
                .ready
                .wait(pending)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// argon2 on a fixed set of threads of its own, each with its [`Argon2Hasher`] and so its
/// 19 MiB of blocks, allocated once: memory for hashing is bounded by the number of lanes, and so
/// is the CPU it can take (a flood of new secrets queues for a lane instead of starving the rest
/// of the server, as it would on the blocking pool). Two bounded queues feed the lanes: new
/// secrets go first, so that wrong secrets presented in bulk delay no creation; when a queue is
/// full the caller gets `HasherBusy` (503) at once.
#[derive(Debug)]
pub struct HashingLanes {
    queue: std::sync::Arc<Queue>,
    lanes: usize,
}

impl Drop for HashingLanes {
    fn drop(&mut self) {
        self.queue.lock().closed = true;
        self.queue.ready.notify_all();
    }
}

impl HashingLanes {
    /// Starts `lanes` threads (at least one); they end when the lanes are dropped.
    pub fn start(lanes: usize) -> std::io::Result<Self> {
        let lanes = lanes.max(1);
        let queue = std::sync::Arc::new(Queue::default());
        for lane in 0..lanes {
            let queue = queue.clone();
            std::thread::Builder::new()
                .name(format!("argon2-{lane}"))
                .spawn(move || {
                    let hasher = Argon2Hasher::default();
                    while let Some(job) = queue.next() {
                        job(&hasher);
                    }
                })?;
        }
        Ok(Self { queue, lanes })
    }

    /// Queues `work` for a lane, or refuses it when that priority's queue is full.
    fn enqueue<T: Send + 'static>(
        &self,
        priority: Priority,
        work: impl FnOnce(&Argon2Hasher) -> T + Send + 'static,
    ) -> Result<tokio::sync::oneshot::Receiver<T>, HasherBusy> {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move |hasher| {
            let _ = answer.send(work(hasher));
        });
        {
            let mut pending = self.queue.lock();
            let (queue, bound) = match priority {
                Priority::Hash => (&mut pending.hashes, QUEUED_HASHES_PER_LANE),
                Priority::Verify => (&mut pending.verifications, QUEUED_VERIFICATIONS_PER_LANE),
            };
            if queue.len() >= bound * self.lanes {
                return Err(HasherBusy);
            }
            queue.push_back(job);
        }
        self.queue.ready.notify_one();
        Ok(answered)
    }

    /// A verification on a lane; [`HasherBusy`] when too many wait already.
    pub async fn verify(&self, secret: String, hash: String) -> Result<bool, HasherBusy> {
        let answered = self.enqueue(Priority::Verify, move |hasher| {
            hasher.verify(&secret, &hash)
        })?;
        answered.await.map_err(|_| HasherBusy)
    }
}

/// The use cases hash new secrets through the port, on the blocking pool: the lanes bound the
/// work there too, and the thread waits for its answer.
impl SecretHasher for HashingLanes {
    fn hash(&self, secret: &str) -> Result<String, HasherBusy> {
        let secret = secret.to_owned();
        let answered = self.enqueue(Priority::Hash, move |hasher| hasher.hash(&secret))?;
        answered.blocking_recv().map_err(|_| HasherBusy)
    }

    fn verify(&self, secret: &str, hash: &str) -> Result<bool, HasherBusy> {
        let (secret, hash) = (secret.to_owned(), hash.to_owned());
        let answered = self.enqueue(Priority::Verify, move |hasher| {
            hasher.verify(&secret, &hash)
        })?;
        answered.blocking_recv().map_err(|_| HasherBusy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use argon2::PasswordHasher as _;
    use argon2::PasswordVerifier as _;

    #[test]
    fn hashes_verify_both_ways_with_the_crate_s_own_api() {
        let ours = Argon2Hasher::default();
        let hash = ours.hash("rgst_secret");
        assert!(
            hash.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"),
            "{hash}"
        );
        assert!(ours.verify("rgst_secret", &hash));
        assert!(!ours.verify("rgst_secreT", &hash));
        assert!(Argon2::default()
            .verify_password(b"rgst_secret", &PasswordHash::new(&hash).unwrap())
            .is_ok());

        let theirs = Argon2::default()
            .hash_password(b"rgan_other")
            .unwrap()
            .to_string();
        assert!(ours.verify("rgan_other", &theirs));
        assert!(!ours.verify("rgan_othe", &theirs));
        // Two hashes of one secret differ (fresh salts); the memory is reused between them.
        assert_ne!(ours.hash("rgst_secret"), hash);
        assert_eq!(ours.memory.lock().unwrap().len(), 19_456);
    }

    #[test]
    fn malformed_hashes_never_verify() {
        let ours = Argon2Hasher::default();
        for hash in [
            "",
            "plain",
            "$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHQ",
            "$scrypt$ln=15,r=8,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA",
            "$argon2id$v=99$m=19456,t=2,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA",
        ] {
            assert!(!ours.verify("x", hash), "{hash}");
        }
    }

    #[tokio::test]
    async fn lanes_hash_and_verify() {
        let lanes = std::sync::Arc::new(HashingLanes::start(2).unwrap());
        // New secrets are hashed through the port, from the blocking pool.
        let hasher = lanes.clone();
        let hash = tokio::task::spawn_blocking(move || SecretHasher::hash(&*hasher, "rgst_lane"))
            .await
            .unwrap()
            .unwrap();
        assert!(lanes
            .verify("rgst_lane".into(), hash.clone())
            .await
            .unwrap());
        assert!(!lanes.verify("rgst_lanE".into(), hash).await.unwrap());
    }
}
