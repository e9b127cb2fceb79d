//! Errors of this crate, and the one place where diesel's errors become domain errors.

use diesel::result::{DatabaseErrorKind, Error as DieselError};
use registry_domain::StoreError;

/// Why a [`crate::Store`] could not be opened or migrated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SetupError {
    /// The URL names no supported database.
    #[error("{0}")]
    UnsupportedUrl(String),
    /// The database could not be reached or opened.
    #[error("cannot open the {backend} database: {reason}")]
    Unreachable {
        /// `sqlite` or `postgres`.
        backend: &'static str,
        /// What the driver said.
        reason: String,
    },
    /// Applying the migrations failed.
    #[error("cannot migrate the database: {0}")]
    Migration(String),
    /// A command that only uses a database was pointed at a SQLite file that does not exist.
    #[error("there is no database at {0}: check REGISTRY_DATABASE_URL (or --database-url), or create one with `registry migrate`")]
    NoDatabase(String),
    /// A command that only uses a database was pointed at one without the registry's tables.
    #[error("the database holds no registry: check REGISTRY_DATABASE_URL (or --database-url), or set it up with `registry migrate`")]
    NoSchema,
    /// The database was migrated by a newer registry than this binary.
    #[error("the database's schema is newer than this binary: it does not know the migration {0} (upgrade the binary, or roll the database back)")]
    SchemaNewer(String),
}

/// A failed storage step inside this crate: already a domain error, so that `?` works on
/// diesel results and domain checks alike.
#[derive(Debug)]
pub(crate) struct Failure(pub(crate) StoreError);

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        Failure(e)
    }
}

impl From<DieselError> for Failure {
    fn from(e: DieselError) -> Self {
        Failure(map_diesel(e))
    }
}

impl From<Failure> for StoreError {
    fn from(f: Failure) -> Self {
        f.0
    }
}

/// Result inside this crate.
pub(crate) type Res<T> = Result<T, Failure>;

/// Unique violations name what is taken; a missing parent row is `NotFound`; everything else
/// means the database is not doing its job right now.
pub(crate) fn map_diesel(e: DieselError) -> StoreError {
    match e {
        DieselError::DatabaseError(DatabaseErrorKind::UniqueViolation, info) => {
            // PostgreSQL names the constraint (`services_subdomain_key`); SQLite names the
            // column in the message (`UNIQUE constraint failed: services.subdomain`).
            let what = info.constraint_name().unwrap_or_else(|| info.message());
            StoreError::Conflict(conflict_subject(what).to_owned())
        }
        DieselError::DatabaseError(DatabaseErrorKind::ForeignKeyViolation, _) => {
            StoreError::NotFound
        }
        DieselError::NotFound => StoreError::NotFound,
        other => StoreError::Unavailable(other.to_string()),
    }
}

fn conflict_subject(what: &str) -> &'static str {
    const SUBJECTS: [(&str, &str); 10] = [
        ("subdomain", "subdomain taken"),
        ("custom_domains", "domain taken"),
        ("tenant", "tenant suffix taken"),
        ("credentials_account_id", "account already has a token"),
        ("credentials.account_id", "account already has a token"),
        ("credentials_service_id", "service already has a secret"),
        ("credentials.service_id", "service already has a secret"),
        ("credentials", "credential lookup id taken"),
        ("service_accounts", "service account id taken"),
        ("account_issuers", "issuer already indexed"),
    ];
    const IDS: [(&str, &str); 3] = [
        ("customers", "customer id taken"),
        ("services", "service id taken"),
        ("published_configs", "configuration already published"),
    ];
    SUBJECTS
        .iter()
        .chain(IDS.iter())
        .find(|(needle, _)| what.contains(needle))
        .map_or("already exists", |(_, subject)| subject)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conflicts_are_named_on_both_backends() {
        for (pg, sqlite, subject) in [
            (
                "services_subdomain_key",
                "UNIQUE constraint failed: services.subdomain",
                "subdomain taken",
            ),
            (
                "customers_tenant_key",
                "UNIQUE constraint failed: customers.tenant",
                "tenant suffix taken",
            ),
            (
                "credentials_pkey",
                "UNIQUE constraint failed: credentials.lookup_id",
                "credential lookup id taken",
            ),
            (
                "services_pkey",
                "UNIQUE constraint failed: services.id",
                "service id taken",
            ),
            (
                "customers_pkey",
                "UNIQUE constraint failed: customers.id",
                "customer id taken",
            ),
            (
                "service_accounts_pkey",
                "UNIQUE constraint failed: service_accounts.id",
                "service account id taken",
            ),
            (
                "credentials_account_id_key",
                "UNIQUE constraint failed: credentials.account_id",
                "account already has a token",
            ),
        ] {
            assert_eq!(conflict_subject(pg), subject, "{pg}");
            assert_eq!(conflict_subject(sqlite), subject, "{sqlite}");
        }
        assert_eq!(conflict_subject("something_else"), "already exists");
    }

    #[test]
    fn other_errors_are_unavailable_or_not_found() {
        assert_eq!(map_diesel(DieselError::NotFound), StoreError::NotFound);
        assert!(matches!(
            map_diesel(DieselError::BrokenTransactionManager),
            StoreError::Unavailable(_)
        ));
    }
}
