//! The hosted issuers' URLs, derived in one place: which issuer URL a service's subdomain has,
//! and which subdomain a `Host` header names. Built once from `REGISTRY_ISSUER_URL_TEMPLATE`
//! (`{subdomain}` in its host, no path) and the API's base URL, whose host is never an issuer's.
//!
//! ```
//! use registry_domain::issuer::Issuers;
//! let issuers = Issuers::new("https://{subdomain}.oidc.example.com", "https://registry.example.com").unwrap();
//! assert_eq!(issuers.issuer_of("acme"), "https://acme.oidc.example.com");
//! assert_eq!(issuers.subdomain_of_host("ACME.oidc.example.com:443").as_deref(), Some("acme"));
//! assert!(issuers.subdomain_of_host("registry.example.com").is_none());
//! ```

/// The issuers this registry hosts: the template their URLs are made from and the API's host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issuers {
    template: String,
    /// The template's text around each `{subdomain}`.
    template_parts: Vec<String>,
    host_prefix: String,
    host_suffix: String,
    api_host: String,
    api_origin: String,
}

impl Issuers {
    /// The issuer URL of `subdomain`: the template with `{subdomain}` filled in, no trailing
    /// slash.
    pub fn issuer_of(&self, subdomain: &str) -> String {
        // Joined from the parts split once, in one allocation: each issuer's first fetch names
        // its issuer.
        let mut issuer = String::with_capacity(self.template.len() + subdomain.len());
        for (i, part) in self.template_parts.iter().enumerate() {
            if i > 0 {
                issuer.push_str(subdomain);
            }
            issuer.push_str(part);
        }
        issuer.truncate(issuer.trim_end_matches('/').len());
        issuer
    }

    /// The authority of `subdomain`'s issuer as clients send it in `Host`: its host, with the port
    /// when the issuer URL names one (the template has no path).
    ///
    /// ```
    /// use registry_domain::issuer::Issuers;
    /// let issuers = Issuers::new("http://{subdomain}.localhost:6081", "http://127.0.0.1:8080").unwrap();
    /// assert_eq!(issuers.authority_of("acme"), "acme.localhost:6081");
    /// ```
    pub fn authority_of(&self, subdomain: &str) -> String {
        let issuer = self.issuer_of(subdomain);
        match issuer.split_once("://") {
            Some((_, authority)) => authority.to_owned(),
            None => issuer,
        }
    }

    /// The issuers of `template` (`{subdomain}` in the host part, no path); the host of
    /// `base_url`, the API's, is never an issuer's.
    pub fn new(template: &str, base_url: &str) -> Result<Self, UnusableUrl> {
        if !(has_scheme(template, "https") || has_scheme(template, "http")) {
            return Err(UnusableUrl(format!(
                "REGISTRY_ISSUER_URL_TEMPLATE {template:?} must be an https:// (or http://) URL: \
                 clouds fetch the issuer's documents over it"
            )));
        }
        let host = host_of(template, "REGISTRY_ISSUER_URL_TEMPLATE")?;
        let path = template
            .split_once("://")
            .map(|(_, rest)| rest.split_once('/').map_or("", |(_, path)| path))
            .unwrap_or("");
        if !path.trim_end_matches('/').is_empty() {
            return Err(UnusableUrl(format!(
                "REGISTRY_ISSUER_URL_TEMPLATE {template:?} must not have a path: issuers are told apart by host"
            )));
        }
        let (host_prefix, host_suffix) = host.split_once("{subdomain}").ok_or_else(|| {
            UnusableUrl(format!(
                "REGISTRY_ISSUER_URL_TEMPLATE {template:?} must hold {{subdomain}} in its host"
            ))
        })?;
        Ok(Self {
            host_prefix: host_prefix.to_owned(),
            host_suffix: host_suffix.to_owned(),
            api_host: host_of(base_url, "REGISTRY_BASE_URL")?,
            api_origin: base_url.trim_end_matches('/').to_owned(),
            template_parts: template.split("{subdomain}").map(str::to_owned).collect(),
            template: template.to_owned(),
        })
    }

    /// The subdomain a `Host` header names, if it is a hosted issuer's host.
    pub fn subdomain_of_host(&self, host: &str) -> Option<Label> {
        let host = name_of(host);
        if host.eq_ignore_ascii_case(&self.api_host) {
            return None;
        }
        let label = strip_prefix_ignore_case(host, &self.host_prefix)?;
        Label::parse(strip_suffix_ignore_case(label, &self.host_suffix)?)
    }

    /// The origin a request for `host` belongs to: the issuer's URL or the API's base URL;
    /// `None` for any other host (never a host the client chose).
    pub fn origin_of_host(&self, host: &str) -> Option<String> {
        Some(match self.subdomain_of_host(host) {
            Some(subdomain) => self.issuer_of(&subdomain),
            None if name_of(host).eq_ignore_ascii_case(&self.api_host) => self.api_origin.clone(),
            None => return None,
        })
    }

    /// Which hosted issuer a token's `iss` is: `None` when it is not of this template (another
    /// host, port or scheme: its keys are fetched over HTTP), `Some(None)` when it names a
    /// hosted issuer in other letters than the registry publishes (no document names it),
    /// `Some(Some(subdomain))` when it is exactly a hosted issuer's URL.
    pub fn hosted(&self, issuer: &str) -> Option<Option<Label>> {
        let (scheme, _) = self.template.split_once("://")?;
        let host = issuer
            .strip_prefix(scheme)
            .and_then(|rest| rest.strip_prefix("://"))
            .filter(|host| !host.contains('/'))?;
        let subdomain = self.subdomain_of_host(host)?;
        let ours = self.issuer_of(&subdomain);
        if !ours.eq_ignore_ascii_case(issuer) {
            return None;
        }
        Some((ours == issuer).then_some(subdomain))
    }

    /// The host of `subdomain`'s issuer, without a port: what a custom domain's CNAME names.
    ///
    /// ```
    /// use registry_domain::issuer::Issuers;
    /// let issuers = Issuers::new("http://{subdomain}.localhost:6081", "http://127.0.0.1:8080").unwrap();
    /// assert_eq!(issuers.host_of_issuer("acme"), "acme.localhost");
    /// ```
    pub fn host_of_issuer(&self, subdomain: &str) -> String {
        name_of(&self.authority_of(subdomain)).to_owned()
    }

    /// Why `domain` (lower case, no port) cannot be a custom domain: the API's host or the
    /// issuers' base (the zone their hosts are in: `oidc.example.com` for
    /// `{subdomain}.oidc.example.com`, `example.com` for `{subdomain}-oidc.example.com`), a
    /// name under one of them (`acme.oidc.example.com`, `x.registry.example.com`), or a name
    /// above one of them (`example.com`): a tenant holding any of these would answer for the
    /// registry's own hosts or their certificates.
    ///
    /// ```
    /// use registry_domain::issuer::Issuers;
    /// let issuers = Issuers::new("https://{subdomain}.oidc.example.com", "https://registry.example.com").unwrap();
    /// assert!(issuers.refuses_custom_domain("login.customer.com").is_none());
    /// assert!(issuers.refuses_custom_domain("registry.example.com").is_some());
    /// assert!(issuers.refuses_custom_domain("x.registry.example.com").is_some());
    /// assert!(issuers.refuses_custom_domain("a.oidc.example.com").is_some());
    /// assert!(issuers.refuses_custom_domain("oidc.example.com").is_some());
    /// assert!(issuers.refuses_custom_domain("example.com").is_some());
    /// ```
    pub fn refuses_custom_domain(&self, domain: &str) -> Option<String> {
        // `a` is `b` or a name under it, at a label boundary.
        let at_or_under = |a: &str, b: &str| {
            !b.is_empty()
                && (a.eq_ignore_ascii_case(b)
                    || strip_suffix_ignore_case(a, b).is_some_and(|head| head.ends_with('.')))
        };
        if at_or_under(domain, &self.api_host) || at_or_under(&self.api_host, domain) {
            return Some(format!(
                "{domain:?} is the registry's API host {:?}, a name under it or a name above it",
                self.api_host
            ));
        }
        // `.oidc.example.com` → `oidc.example.com`; `-oidc.example.com` → `example.com`.
        let base = match self.host_suffix.split_once('.') {
            Some((_, zone)) => zone,
            None => self.host_suffix.as_str(),
        };
        let refused = strip_suffix_ignore_case(domain, &self.host_suffix).is_some()
            || at_or_under(domain, base)
            || at_or_under(base, domain);
        refused.then(|| {
            format!(
                "{domain:?} is the issuers' base {base:?}, a name under it or a name above it, \
                 where the registry's own issuers are served"
            )
        })
    }

    /// The API's host and the issuers' hosts as a pattern (`*` for the subdomain), the names a
    /// certificate is served for: `["registry.example.com", "*.oidc.example.com"]`.
    pub fn hosts(&self) -> [String; 2] {
        [
            self.api_host.clone(),
            format!("{}*{}", self.host_prefix, self.host_suffix),
        ]
    }

    /// The host names a certificate must cover: the API's host, and the host of an issuer
    /// (`example` as its subdomain: a wildcard covers them all).
    pub fn names_served(&self) -> [String; 2] {
        let issuer = format!("{}example{}", self.host_prefix, self.host_suffix);
        [self.api_host.clone(), issuer]
    }
}

/// The longest DNS label.
const MAX_LABEL: usize = 63;

/// A subdomain read from a `Host` header: a DNS label, lower-cased into a fixed buffer, so that
/// recognising the host of every public request allocates nothing.
#[derive(Clone, Copy)]
pub struct Label {
    bytes: [u8; MAX_LABEL],
    len: usize,
}

impl Label {
    /// `text` lower-cased, when it is a non-empty label of letters, digits and `-`.
    fn parse(text: &str) -> Option<Self> {
        let is_label = !text.is_empty()
            && text.len() <= MAX_LABEL
            && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if !is_label {
            return None;
        }
        let mut bytes = [0; MAX_LABEL];
        bytes[..text.len()].copy_from_slice(text.as_bytes());
        bytes.make_ascii_lowercase();
        Some(Self {
            bytes,
            len: text.len(),
        })
    }
}

impl std::ops::Deref for Label {
    type Target = str;

    fn deref(&self) -> &str {
        // Only ASCII letters, digits and `-` were copied in.
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default()
    }
}

impl std::fmt::Debug for Label {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self)
    }
}

/// `host` without its `suffix`, ASCII case ignored.
fn strip_suffix_ignore_case<'a>(host: &'a str, suffix: &str) -> Option<&'a str> {
    let cut = host.len().checked_sub(suffix.len())?;
    (host.is_char_boundary(cut) && host[cut..].eq_ignore_ascii_case(suffix)).then(|| &host[..cut])
}

/// `host` without its `prefix`, ASCII case ignored.
fn strip_prefix_ignore_case<'a>(host: &'a str, prefix: &str) -> Option<&'a str> {
    let cut = prefix.len();
    (host.is_char_boundary(cut) && host.get(..cut)?.eq_ignore_ascii_case(prefix))
        .then(|| &host[cut..])
}

/// Whether `url` is of `scheme` (`"https"`): a scheme is the same in any case, and an issuer is
/// published as the operator wrote it.
///
/// ```
/// use registry_domain::issuer::has_scheme;
/// assert!(has_scheme("HTTPS://a.example", "https"));
/// assert!(!has_scheme("http://a.example", "https"));
/// ```
pub fn has_scheme(url: &str, scheme: &str) -> bool {
    strip_prefix_ignore_case(url, scheme)
        .and_then(|rest| rest.strip_prefix("://"))
        .is_some()
}

/// A URL setting the issuers cannot be built from: the sentence a failed start prints.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UnusableUrl(String);

/// The host of `url`, a setting's value, lower case: an `http://` or `https://` URL with a host,
/// no space, control character or non-ASCII text in it (links and problem types are built from
/// it as it is).
fn host_of(url: &str, setting: &str) -> Result<String, UnusableUrl> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| UnusableUrl(format!("{setting} {url:?} is not an absolute URL")))?;
    if !(scheme.eq_ignore_ascii_case("https") || scheme.eq_ignore_ascii_case("http")) {
        return Err(UnusableUrl(format!(
            "{setting} {url:?} must be an https:// (or http://) URL"
        )));
    }
    if !url.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(UnusableUrl(format!(
            "{setting} {url:?} holds a space, a control character or non-ASCII text: write the \
             URL percent-encoded"
        )));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = strip_port(authority).trim_end_matches('.');
    if host.is_empty() || host.contains('@') {
        return Err(UnusableUrl(format!("{setting} {url:?} names no host")));
    }
    Ok(host.to_ascii_lowercase())
}

/// The name a `Host` header gives, without its port. A fully qualified name may end in a dot;
/// it names the same host (`host_of` drops it from the configured ones).
///
/// ```
/// use registry_domain::issuer::name_of;
/// assert_eq!(name_of("login.example.com.:80"), "login.example.com");
/// assert_eq!(name_of("[::1]:8080"), "[::1]");
/// ```
pub fn name_of(host: &str) -> &str {
    let host = strip_port(host);
    host.strip_suffix('.').unwrap_or(host)
}

fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host.split_inclusive(']').next().unwrap_or(host);
    }
    // Bytes from the end: the port is a few digits away, and every public request asks.
    match host.bytes().rposition(|b| b == b':') {
        Some(colon) if host.as_bytes()[colon + 1..].iter().all(u8::is_ascii_digit) => {
            &host[..colon]
        }
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_url_is_an_http_url_with_a_host_and_no_space() {
        let template = "https://{subdomain}.oidc.example.com";
        assert!(Issuers::new(template, "http://localhost:8080").is_ok());
        for base in [
            "http://a b",
            "ftp://x",
            "https://",
            "https://:8080",
            "notaurl",
            "https://é",
        ] {
            let refused = Issuers::new(template, base).unwrap_err().to_string();
            assert!(
                refused.starts_with("REGISTRY_BASE_URL"),
                "{base}: {refused}"
            );
        }
    }

    #[test]
    fn a_port_is_the_digits_after_the_last_colon() {
        for (host, name) in [
            ("acme.localhost:8080", "acme.localhost"),
            ("acme.localhost", "acme.localhost"),
            ("acme.localhost:", "acme.localhost"),
            ("acme.localhost:http", "acme.localhost:http"),
            ("a:1:2", "a:1"),
            ("[::1]:8080", "[::1]"),
            ("[::1]", "[::1]"),
            ("", ""),
        ] {
            assert_eq!(strip_port(host), name, "{host}");
        }
    }

    #[test]
    fn an_issuer_is_its_template_filled_in_without_a_trailing_slash() {
        let base = "https://registry.example.com";
        for template in [
            "https://{subdomain}.oidc.example.com",
            "https://{subdomain}.oidc.example.com/",
            "http://{subdomain}-oidc.localhost:8080//",
            "https://oidc-{subdomain}",
            "https://{subdomain}.{subdomain}.example",
        ] {
            let issuers = Issuers::new(template, base).unwrap();
            for subdomain in ["acme", "", "a/"] {
                let filled = template.replace("{subdomain}", subdomain);
                assert_eq!(
                    issuers.issuer_of(subdomain),
                    filled.trim_end_matches('/'),
                    "{template} {subdomain}"
                );
            }
        }
        // Clouds fetch an issuer over HTTP(S) only.
        for template in ["ftp://{subdomain}.example.com", "{subdomain}.example.com"] {
            let refused = Issuers::new(template, base).unwrap_err();
            assert!(refused.0.contains("https://"), "{}", refused.0);
        }
    }

    #[test]
    fn a_known_host_belongs_to_its_issuer_or_to_the_api_and_no_other_does() {
        let base = "https://registry.example.com";
        let issuers = Issuers::new("https://{subdomain}.oidc.example.com", base).unwrap();
        assert_eq!(
            issuers.origin_of_host("acme.oidc.example.com").as_deref(),
            Some("https://acme.oidc.example.com")
        );
        assert_eq!(
            issuers.origin_of_host("Registry.Example.com:80").as_deref(),
            Some("https://registry.example.com")
        );
        assert_eq!(issuers.origin_of_host("evil.example"), None);
        assert_eq!(issuers.origin_of_host("a.b.oidc.example.com"), None);
        let issuers =
            Issuers::new("http://{subdomain}.localhost:8443", "http://localhost:8443").unwrap();
        assert_eq!(
            issuers.origin_of_host("acme.localhost:8080").as_deref(),
            Some("http://acme.localhost:8443")
        );
        assert_eq!(
            issuers.names_served(),
            ["localhost".to_owned(), "example.localhost".to_owned()]
        );
    }

    #[test]
    fn a_tokens_issuer_is_hosted_only_in_the_spelling_the_registry_publishes() {
        let issuers =
            Issuers::new("http://{subdomain}.localhost:8080", "http://localhost:8080").unwrap();
        let hosted = |iss: &str| issuers.hosted(iss).map(|s| s.map(|s| s.to_string()));
        assert_eq!(
            hosted("http://acme.localhost:8080"),
            Some(Some("acme".into()))
        );
        assert_eq!(hosted("http://ACME.localhost:8080"), Some(None));
        assert_eq!(hosted("http://acme.localhost:9090"), None);
        assert_eq!(hosted("https://acme.localhost:8080"), None);
        assert_eq!(hosted("http://acme.localhost:8080/x"), None);
        assert_eq!(hosted("http://localhost:8080"), None);
        assert_eq!(hosted("https://accounts.google.com"), None);
    }

    #[test]
    fn recognises_hosted_hosts() {
        let issuers =
            Issuers::new("http://{subdomain}.localhost:8080", "http://localhost:8080").unwrap();
        assert_eq!(
            issuers
                .subdomain_of_host("api-acme.localhost:8080")
                .as_deref(),
            Some("api-acme")
        );
        assert_eq!(
            issuers.subdomain_of_host("API-acme.LOCALHOST").as_deref(),
            Some("api-acme")
        );
        assert_eq!(
            issuers
                .subdomain_of_host("api-acme.localhost.:8080")
                .as_deref(),
            Some("api-acme")
        );
        assert_eq!(
            issuers.subdomain_of_host("localhost.:8080").as_deref(),
            None
        );
        assert_eq!(
            issuers.subdomain_of_host("api-acme.localhost..").as_deref(),
            None
        );
        assert_eq!(issuers.subdomain_of_host("localhost:8080").as_deref(), None);
        assert_eq!(issuers.subdomain_of_host("a.b.localhost").as_deref(), None);
        assert_eq!(issuers.subdomain_of_host("example.com").as_deref(), None);
        assert_eq!(issuers.subdomain_of_host(".localhost").as_deref(), None);
        assert_eq!(issuers.subdomain_of_host("é.localhost").as_deref(), None);
        assert_eq!(
            issuers
                .subdomain_of_host(&format!("{}.localhost", "a".repeat(64)))
                .as_deref(),
            None
        );
        let prefixed = Issuers::new(
            "https://oidc-{subdomain}.example.com/",
            "https://api.example.com",
        )
        .unwrap();
        assert_eq!(
            prefixed
                .subdomain_of_host("oidc-x-acme.example.com")
                .as_deref(),
            Some("x-acme")
        );
        assert_eq!(
            prefixed.subdomain_of_host("api.example.com").as_deref(),
            None
        );
        assert_eq!(
            prefixed
                .subdomain_of_host("OIDC-X-acme.Example.COM")
                .as_deref(),
            Some("x-acme")
        );
        assert!(Issuers::new("http://localhost:8080/{subdomain}", "http://localhost").is_err());
        assert!(Issuers::new("https://{subdomain}.example.com/oidc", "http://localhost",).is_err());
    }
}
