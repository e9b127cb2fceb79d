use argon2::password_hash::phc::PasswordHash;
use argon2::{Argon2, PasswordHasher, PasswordVerifier};
use registry_domain::ports::SecretHasher;

/// argon2id with the crate's default parameters (about 17 ms per verification here, which is
/// why verified tokens are remembered, see `auth::token_cache`).
#[derive(Debug, Clone, Default)]
pub struct Argon2Hasher {
    argon2: Argon2<'static>,
}

impl SecretHasher for Argon2Hasher {
    fn hash(&self, secret: &str) -> String {
        self.argon2
            .hash_password(secret.as_bytes())
            .expect("argon2 with default parameters cannot fail")
            .to_string()
    }

    fn verify(&self, secret: &str, hash: &str) -> bool {
        PasswordHash::new(hash)
            .map(|parsed| {
                self.argon2
                    .verify_password(secret.as_bytes(), &parsed)
                    .is_ok()
            })
            .unwrap_or(false)
    }
}
