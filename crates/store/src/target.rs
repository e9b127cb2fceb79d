//! Which database a URL names: the backend is chosen from the scheme here, never by trying to
//! connect (diesel's derived `establish` would fall through to SQLite and create a file named
//! like the PostgreSQL URL).

use crate::SetupError;

/// A database to connect to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// A SQLite file path, `file:` URI or `:memory:`.
    Sqlite(String),
    /// A libpq connection URL, given a `connect_timeout` when it has none.
    Postgres(String),
}

impl Target {
    /// The file a SQLite target names (a path, or the path of a `file:` URI); `None` for
    /// PostgreSQL and for in-memory databases.
    pub(crate) fn sqlite_file(&self) -> Option<std::path::PathBuf> {
        let Target::Sqlite(name) = self else {
            return None;
        };
        let path = match name.strip_prefix("file:") {
            Some(uri) => {
                let path = uri.split(['?', '#']).next().unwrap_or_default();
                // `file://host/path` and `file:///path`: the path after the authority.
                match path.strip_prefix("//") {
                    Some(rest) => &rest[rest.find('/').unwrap_or(rest.len())..],
                    None => path,
                }
            }
            None => name.as_str(),
        };
        (!path.is_empty() && path != ":memory:" && !name.contains("mode=memory"))
            .then(|| std::path::PathBuf::from(path))
    }
}

/// libpq waits for a TCP connect as long as the kernel does, about two minutes for an address
/// that drops packets, holding one of the pool's few connecting threads all that time.
const PG_CONNECT_TIMEOUT_SECS: u32 = 5;

/// `url` with `connect_timeout` added, unless it names one or the operator set
/// `PGCONNECT_TIMEOUT` (`environment_sets_one`; a URL parameter would override it).
fn with_connect_timeout(url: &str, environment_sets_one: bool) -> String {
    // The query starts after the user part: a `?` in a password is not it.
    let after_user = url.rfind('@').map_or(0, |at| at + 1);
    let parameter = format!("connect_timeout={PG_CONNECT_TIMEOUT_SECS}");
    match url[after_user..].split_once('?').map(|(_, query)| query) {
        _ if environment_sets_one => url.to_owned(),
        Some(query)
            if query
                .split('&')
                .any(|pair| pair.split('=').next() == Some("connect_timeout")) =>
        {
            url.to_owned()
        }
        Some(query) if query.is_empty() || query.ends_with('&') => format!("{url}{parameter}"),
        Some(_) => format!("{url}&{parameter}"),
        None => format!("{url}?{parameter}"),
    }
}

/// Reads `sqlite://PATH`, `sqlite:PATH`, a bare path, `postgres://…` or `postgresql://…`.
pub(crate) fn parse(url: &str) -> Result<Target, SetupError> {
    if url.trim().is_empty() {
        return Err(SetupError::UnsupportedUrl(
            "the database URL is empty".into(),
        ));
    }
    let Some((scheme, rest)) = url.split_once(':') else {
        return Ok(Target::Sqlite(url.to_owned()));
    };
    match scheme.to_ascii_lowercase().as_str() {
        "postgres" | "postgresql" if rest.starts_with("//") => {
            let environment_sets_one = std::env::var_os("PGCONNECT_TIMEOUT").is_some();
            Ok(Target::Postgres(with_connect_timeout(
                url,
                environment_sets_one,
            )))
        }
        "sqlite" => {
            let path = rest.strip_prefix("//").unwrap_or(rest);
            if path.is_empty() {
                Err(SetupError::UnsupportedUrl(
                    "a sqlite URL needs a file path, e.g. sqlite://registry.db".into(),
                ))
            } else {
                Ok(Target::Sqlite(path.to_owned()))
            }
        }
        // SQLite opens `file:` URIs itself; a one-letter "scheme" is a Windows drive; `:memory:`
        // and paths whose first colon follows a `/` or `.` are file names.
        "file" | "" => Ok(Target::Sqlite(url.to_owned())),
        s if s.len() == 1 || !s.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) => {
            Ok(Target::Sqlite(url.to_owned()))
        }
        s if s.contains(['/', '.']) => Ok(Target::Sqlite(url.to_owned())),
        other => Err(SetupError::UnsupportedUrl(format!(
            "unsupported database URL scheme {other:?}: use sqlite://PATH, postgres://… or postgresql://…"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqlite(p: &str) -> Result<Target, SetupError> {
        Ok(Target::Sqlite(p.into()))
    }

    #[test]
    fn sqlite_forms() {
        assert_eq!(parse("sqlite://registry.db"), sqlite("registry.db"));
        assert_eq!(parse("sqlite:///var/lib/r.db"), sqlite("/var/lib/r.db"));
        assert_eq!(parse("sqlite:registry.db"), sqlite("registry.db"));
        assert_eq!(parse("sqlite::memory:"), sqlite(":memory:"));
        assert_eq!(parse("SQLite://x.db"), sqlite("x.db"));
        assert_eq!(parse("registry.db"), sqlite("registry.db"));
        assert_eq!(parse("/tmp/a/registry.db"), sqlite("/tmp/a/registry.db"));
        assert_eq!(parse("./dir:with/colon.db"), sqlite("./dir:with/colon.db"));
        assert_eq!(
            parse("file:registry.db?mode=rwc"),
            sqlite("file:registry.db?mode=rwc")
        );
        assert_eq!(parse(":memory:"), sqlite(":memory:"));
    }

    #[test]
    fn postgres_forms() {
        let postgres = |u: &str| Ok(Target::Postgres(u.into()));
        assert_eq!(
            parse("postgres://u:p@127.0.0.1:5432/db?sslmode=disable"),
            postgres("postgres://u:p@127.0.0.1:5432/db?sslmode=disable&connect_timeout=5")
        );
        assert_eq!(
            parse("postgresql://localhost/db"),
            postgres("postgresql://localhost/db?connect_timeout=5")
        );
        let own = "postgres://localhost/db?connect_timeout=30";
        assert_eq!(parse(own), postgres(own));
    }

    #[test]
    fn a_connect_timeout_is_added_only_where_none_is_set() {
        for (url, expected) in [
            ("postgres://h/db", "postgres://h/db?connect_timeout=5"),
            ("postgres://h/db?", "postgres://h/db?connect_timeout=5"),
            (
                "postgres://h/db?sslmode=require&",
                "postgres://h/db?sslmode=require&connect_timeout=5",
            ),
            (
                "postgres://u:p?ss@h/db",
                "postgres://u:p?ss@h/db?connect_timeout=5",
            ),
            (
                "postgres://u:connect_timeout=1@h/db",
                "postgres://u:connect_timeout=1@h/db?connect_timeout=5",
            ),
            (
                "postgres://h/db?application_name=connect_timeout=9",
                "postgres://h/db?application_name=connect_timeout=9&connect_timeout=5",
            ),
            (
                "postgres://h/db?sslmode=require&connect_timeout=30",
                "postgres://h/db?sslmode=require&connect_timeout=30",
            ),
        ] {
            assert_eq!(with_connect_timeout(url, false), expected, "{url}");
        }
        assert_eq!(
            with_connect_timeout("postgres://h/db", true),
            "postgres://h/db"
        );
    }

    #[test]
    fn other_schemes_are_refused_not_opened_as_files() {
        for url in [
            "mysql://localhost/db",
            "postgres:db",
            "http://x",
            "redis://h",
            "",
            "  ",
        ] {
            let err = parse(url).unwrap_err();
            assert!(
                matches!(err, SetupError::UnsupportedUrl(_)),
                "{url}: {err:?}"
            );
        }
        let msg = parse("mysql://root:hunter2@h/db").unwrap_err().to_string();
        assert!(msg.contains("mysql") && !msg.contains("hunter2"), "{msg}");
    }
}
