//! Secrets at rest: a certificate's private key and the ACME account's credentials are stored
//! sealed (AES-256-GCM, a random 96-bit nonce per seal) under `REGISTRY_DATA_KEY`, so a copy of
//! the database alone gives no one a domain's key.

use crate::AcmeError;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};

/// The key that seals and opens secrets at rest.
pub struct DataKey {
    key: LessSafeKey,
    random: SystemRandom,
}

impl std::fmt::Debug for DataKey {
    // Never print key material.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DataKey(..)")
    }
}

impl DataKey {
    /// The key of `REGISTRY_DATA_KEY`: 32 bytes, base64.
    ///
    /// ```
    /// use registry_acme::DataKey;
    /// let key = DataKey::from_base64("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=").unwrap();
    /// let sealed = key.seal(b"a private key");
    /// assert_eq!(key.open(&sealed).unwrap(), b"a private key");
    /// assert!(DataKey::from_base64("c2hvcnQ=").is_err());
    /// ```
    pub fn from_base64(text: &str) -> Result<Self, AcmeError> {
        let bytes = STANDARD.decode(text.trim()).map_err(|_| {
            AcmeError::Setting("REGISTRY_DATA_KEY is not base64 (32 random bytes, base64: `openssl rand -base64 32`)".into())
        })?;
        let unbound = UnboundKey::new(&AES_256_GCM, &bytes)
            .ok()
            .filter(|_| bytes.len() == 32)
            .ok_or_else(|| {
                AcmeError::Setting(format!(
                    "REGISTRY_DATA_KEY holds {} bytes; it must hold 32 (`openssl rand -base64 32`)",
                    bytes.len()
                ))
            })?;
        Ok(Self {
            key: LessSafeKey::new(unbound),
            random: SystemRandom::new(),
        })
    }

    /// `plain` sealed: base64 of the nonce, then the ciphertext and its tag.
    pub fn seal(&self, plain: &[u8]) -> String {
        let mut nonce = [0u8; NONCE_LEN];
        self.random
            .fill(&mut nonce)
            .expect("the system's random source");
        let mut sealed = plain.to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::empty(),
                &mut sealed,
            )
            .expect("AES-GCM seals any length the registry stores");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        STANDARD.encode(out)
    }

    /// What [`DataKey::seal`] sealed.
    pub fn open(&self, sealed: &str) -> Result<Vec<u8>, AcmeError> {
        let bytes = STANDARD.decode(sealed).map_err(|_| AcmeError::Unsealable)?;
        if bytes.len() < NONCE_LEN {
            return Err(AcmeError::Unsealable);
        }
        let (nonce, sealed) = bytes.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| AcmeError::Unsealable)?;
        let mut sealed = sealed.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, Aad::empty(), &mut sealed)
            .map_err(|_| AcmeError::Unsealable)?;
        Ok(plain.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

    #[test]
    fn sealed_data_opens_only_under_its_key_and_unaltered() {
        let key = DataKey::from_base64(KEY).unwrap();
        let sealed = key.seal(b"secret");
        assert_ne!(key.seal(b"secret"), sealed, "a fresh nonce per seal");
        assert!(!sealed.contains("secret"));
        let other = DataKey::from_base64(&STANDARD.encode([7u8; 32])).unwrap();
        assert!(matches!(other.open(&sealed), Err(AcmeError::Unsealable)));
        let mut altered = STANDARD.decode(&sealed).unwrap();
        *altered.last_mut().unwrap() ^= 1;
        assert!(key.open(&STANDARD.encode(altered)).is_err());
        assert!(key.open("!!").is_err());
        assert!(format!("{key:?}").contains(".."));
    }
}
