//! The settings of a registry started on loopback, built in this one place for the tests and the
//! chores: as the `REGISTRY_*` environment that `registry serve` reads (the launched binary) and
//! that the server library's `Settings::from_vars` takes (the tests' in-process server).

/// What a registry on loopback is set to, before its port is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `REGISTRY_DATABASE_URL`.
    pub database_url: String,
    /// `REGISTRY_WORKERS`; `None`: the server's default, one per core.
    pub workers: Option<usize>,
    /// More settings, in order: a name given again replaces the earlier value (this type's own
    /// included), and `{port}` in a value is replaced by the server's port.
    pub more: Vec<(String, String)>,
}

impl Settings {
    /// A server on `database_url` with two workers (the machines the suite runs on have two
    /// cores), its API at `http://127.0.0.1:{port}` and its issuers at
    /// `http://{subdomain}.localhost:{port}`.
    pub fn new(database_url: &str) -> Settings {
        Settings {
            database_url: database_url.to_owned(),
            workers: Some(2),
            more: Vec::new(),
        }
    }

    /// Sets `name` to `value` (see [`Settings::more`]).
    pub fn set(mut self, name: &str, value: &str) -> Settings {
        self.more.push((name.to_owned(), value.to_owned()));
        self
    }

    /// The whole environment of a server on `port`, each name once.
    pub fn environment(&self, port: u16) -> Vec<(String, String)> {
        let mut vars: Vec<(String, String)> = vec![
            ("REGISTRY_LISTEN".into(), format!("127.0.0.1:{port}")),
            ("REGISTRY_DATABASE_URL".into(), self.database_url.clone()),
            ("REGISTRY_BASE_URL".into(), base_url(port)),
            ("REGISTRY_ISSUER_URL_TEMPLATE".into(), issuer_template(port)),
        ];
        if let Some(workers) = self.workers {
            vars.push(("REGISTRY_WORKERS".into(), workers.to_string()));
        }
        for (name, value) in &self.more {
            vars.retain(|(n, _)| n != name);
            vars.push((name.clone(), value.replace("{port}", &port.to_string())));
        }
        vars
    }
}

/// The `REGISTRY_BASE_URL` of a server on `port`.
pub fn base_url(port: u16) -> String {
    format!("http://127.0.0.1:{port}")
}

/// The `REGISTRY_ISSUER_URL_TEMPLATE` of a server on `port`.
pub fn issuer_template(port: u16) -> String {
    format!("http://{{subdomain}}.localhost:{port}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value<'a>(vars: &'a [(String, String)], name: &str) -> Vec<&'a str> {
        vars.iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    #[test]
    fn a_server_is_set_to_its_port_and_database() {
        let vars = Settings::new("sqlite:///tmp/x.db").environment(4321);
        assert_eq!(value(&vars, "REGISTRY_LISTEN"), ["127.0.0.1:4321"]);
        assert_eq!(
            value(&vars, "REGISTRY_DATABASE_URL"),
            ["sqlite:///tmp/x.db"]
        );
        assert_eq!(value(&vars, "REGISTRY_BASE_URL"), ["http://127.0.0.1:4321"]);
        assert_eq!(
            value(&vars, "REGISTRY_ISSUER_URL_TEMPLATE"),
            ["http://{subdomain}.localhost:4321"]
        );
        assert_eq!(value(&vars, "REGISTRY_WORKERS"), ["2"]);
    }

    #[test]
    fn a_setting_given_again_replaces_the_earlier_one_and_names_the_port() {
        let settings = Settings {
            workers: None,
            ..Settings::new("sqlite://a.db")
        }
        .set("REGISTRY_WRITES_PER_MINUTE", "5")
        .set("REGISTRY_BASE_URL", "https://api.localhost:{port}")
        .set("REGISTRY_WRITES_PER_MINUTE", "7");
        let vars = settings.environment(99);
        assert_eq!(
            value(&vars, "REGISTRY_BASE_URL"),
            ["https://api.localhost:99"]
        );
        assert_eq!(value(&vars, "REGISTRY_WRITES_PER_MINUTE"), ["7"]);
        assert!(value(&vars, "REGISTRY_WORKERS").is_empty());
        assert_eq!(vars.len(), 5);
    }
}
