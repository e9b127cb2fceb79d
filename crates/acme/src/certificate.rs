//! What the registry reads of an issued certificate: its validity and its issuer, for the
//! domain's `certificate` member, the renewal time and the expiry metric.

use crate::AcmeError;
use time::OffsetDateTime;
use x509_parser::pem::Pem;

/// A leaf certificate's validity and issuer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validity {
    /// Not valid before.
    pub not_before: OffsetDateTime,
    /// Not valid after.
    pub not_after: OffsetDateTime,
    /// The issuer's distinguished name (RFC 4514 text).
    pub issuer: String,
}

impl Validity {
    /// The validity and issuer of the first certificate of a PEM chain.
    pub fn of_chain(chain_pem: &str) -> Result<Validity, AcmeError> {
        let unreadable = |why: String| AcmeError::Order(format!("the issued certificate: {why}"));
        let (pem, _) = Pem::read(std::io::Cursor::new(chain_pem.as_bytes()))
            .map_err(|e| unreadable(e.to_string()))?;
        let leaf = pem.parse_x509().map_err(|e| unreadable(e.to_string()))?;
        let validity = leaf.validity();
        let at = |t: x509_parser::time::ASN1Time| {
            OffsetDateTime::from_unix_timestamp(t.timestamp())
                .map_err(|e| unreadable(e.to_string()))
        };
        Ok(Validity {
            not_before: at(validity.not_before)?,
            not_after: at(validity.not_after)?,
            issuer: leaf.issuer().to_string(),
        })
    }
}
