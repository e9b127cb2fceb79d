//! The certificate authority side of custom domains (docs/api.md, "Custom domains"): the proof
//! that a customer owns a domain (a TXT record, looked up through a configurable DNS server), a
//! certificate for it ordered from an ACME directory (RFC 8555) with the HTTP-01 challenge, and
//! the sealing of its private key at rest (AES-256-GCM under `REGISTRY_DATA_KEY`).
//!
//! The ACME protocol is `instant-acme`'s and DNS is `hickory-resolver`'s: this crate only says
//! which calls the registry makes, and turns their failures into sentences a customer can act on.
//! It implements the domain's ports of what leaves the process (`ports`): `AcmeClient` is a
//! `CertificateAuthority`, `TxtLookup` an `OwnershipCheck`, `DataKey` the `Sealing`; the use
//! case `registry_domain::app::domains::advance` drives them.

mod certificate;
mod order;
mod ports;
mod sealed;
mod txt;

pub use certificate::Validity;
/// The ACME account orders are made with.
pub use instant_acme::Account;
pub use order::AcmeClient;
pub use sealed::DataKey;
pub use txt::TxtLookup;

/// What went wrong, as a sentence for the domain's `error.message` or a start-up failure.
#[derive(Debug, thiserror::Error)]
pub enum AcmeError {
    /// A setting is unusable (`REGISTRY_DATA_KEY`, `REGISTRY_DNS_RESOLVER`,
    /// `REGISTRY_ACME_CA_FILE`).
    #[error("{0}")]
    Setting(String),
    /// The ACME server refused or failed a step (its problem detail, when it gave one).
    #[error("{0}")]
    Order(String),
    /// The DNS lookup failed (not an absent record: that is an answer).
    #[error("DNS lookup of {name} failed: {why}")]
    Dns {
        /// The name looked up.
        name: String,
        /// Why.
        why: String,
    },
    /// Sealed data does not open under this key (another key, or altered).
    #[error("sealed data does not open under REGISTRY_DATA_KEY: another key, or altered data")]
    Unsealable,
}
