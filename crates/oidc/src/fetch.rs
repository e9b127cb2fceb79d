//! Guarded HTTP fetches of discovery documents and key sets.
//!
//! The guard has two halves: [`check_url`] refuses bad schemes and non-public IP-literal hosts
//! before any request (reqwest does not call the resolver for IP literals), and
//! [`GuardedResolver`] resolves every host name at connect time and refuses the connection
//! unless all its addresses are allowed, so a DNS answer that changes between a check and the
//! connect (rebinding) cannot reach an internal address.

use crate::address::classify;
use crate::config::OidcConfig;
use crate::error::OidcError;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::header::CACHE_CONTROL;
use reqwest::redirect;
use serde_json::Value;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
use url::{Host, Url};

/// Checks what can be checked of a URL without resolving it.
pub fn check_url(url: &Url, allow_insecure: bool) -> Result<(), &'static str> {
    match url.scheme() {
        "https" => {}
        "http" if allow_insecure => {}
        _ => return Err("scheme must be https"),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("credentials in URL");
    }
    let ip = match url.host() {
        None => return Err("no host"),
        Some(Host::Domain(_)) => return Ok(()),
        Some(Host::Ipv4(ip)) => IpAddr::V4(ip),
        Some(Host::Ipv6(ip)) => IpAddr::V6(ip),
    };
    if classify(ip).allowed(allow_insecure) {
        Ok(())
    } else {
        Err("address is not public")
    }
}

/// Resolves with the system resolver, then refuses names with any address not allowed.
#[derive(Debug)]
struct GuardedResolver {
    allow_insecure: bool,
}

/// The loopback addresses of `localhost` and `*.localhost`, which RFC 6761 §6.3 reserves for
/// the local host: answered here because system resolvers disagree (glibc resolves `localhost`
/// from `/etc/hosts` but not `foo.localhost`), and a hosted issuer is `{subdomain}.localhost`
/// by default (docs/api.md, "Public hosting"). IPv4 first, so an IPv4-only listener is reached at
/// once.
fn localhost_addrs(host: &str) -> Option<[IpAddr; 2]> {
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    let is_localhost = host == "localhost"
        || host
            .strip_suffix(".localhost")
            .is_some_and(|labels| !labels.is_empty());
    is_localhost.then_some([
        IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
    ])
}

#[derive(Debug, thiserror::Error)]
#[error("{host} resolves to {ip}, which is not a public address")]
struct RefusedAddress {
    host: String,
    ip: IpAddr,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow_insecure = self.allow_insecure;
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> = match localhost_addrs(&host) {
                Some(ips) => ips.into_iter().map(|ip| SocketAddr::new(ip, 0)).collect(),
                None => tokio::net::lookup_host((host.as_str(), 0)).await?.collect(),
            };
            // All, not any: a name answering one public and one internal address would let the
            // connector pick the internal one.
            if let Some(bad) = addrs
                .iter()
                .find(|a| !classify(a.ip()).allowed(allow_insecure))
            {
                return Err(Box::new(RefusedAddress { host, ip: bad.ip() }) as _);
            }
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// Follows at most `max` redirects, to the same host only, each target passing [`check_url`].
fn redirect_policy(max: usize, allow_insecure: bool) -> redirect::Policy {
    redirect::Policy::custom(move |attempt| {
        let original = attempt
            .previous()
            .first()
            .and_then(Url::host_str)
            .map(str::to_owned);
        if attempt.previous().len() > max {
            attempt.error("too many redirects")
        } else if attempt.url().host_str().map(str::to_owned) != original {
            attempt.error("redirect to another host")
        } else if let Err(reason) = check_url(attempt.url(), allow_insecure) {
            attempt.error(reason)
        } else {
            attempt.follow()
        }
    })
}

/// A response body and the freshness it announced.
#[derive(Debug)]
pub struct Fetched {
    /// The JSON document.
    pub document: Value,
    /// `Cache-Control: max-age`, when present.
    pub max_age: Option<Duration>,
}

/// The HTTP side of the verifier.
#[derive(Debug)]
pub struct Fetcher {
    client: reqwest::Client,
    allow_insecure: bool,
    max_bytes: usize,
}

impl Fetcher {
    /// Builds the guarded client.
    pub fn new(config: &OidcConfig) -> Result<Self, OidcError> {
        let client = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .timeout(config.request_timeout)
            .redirect(redirect_policy(
                config.max_redirects,
                config.allow_insecure_issuers,
            ))
            .dns_resolver(GuardedResolver {
                allow_insecure: config.allow_insecure_issuers,
            })
            // A proxy would connect on our behalf, bypassing the resolver's check.
            .no_proxy()
            .https_only(!config.allow_insecure_issuers)
            .user_agent(concat!("registry-oidc/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(OidcError::Client)?;
        Ok(Self {
            client,
            allow_insecure: config.allow_insecure_issuers,
            max_bytes: config.max_response_bytes,
        })
    }

    /// Parses and checks a URL taken from a token or a document.
    pub fn url(&self, text: &str) -> Result<Url, OidcError> {
        let refused = |reason| OidcError::RefusedUrl {
            url: text.to_owned(),
            reason,
        };
        let url = Url::parse(text).map_err(|_| refused("not a URL"))?;
        check_url(&url, self.allow_insecure).map_err(refused)?;
        Ok(url)
    }

    /// GETs `url` and reads a JSON body of at most the configured size.
    pub async fn json(&self, url: &Url) -> Result<Fetched, OidcError> {
        let failed = |source| OidcError::Fetch {
            url: url.to_string(),
            source,
        };
        let too_large = || OidcError::ResponseTooLarge {
            url: url.to_string(),
            limit: self.max_bytes,
        };
        let mut response = self
            .client
            .get(url.clone())
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(failed)?;
        if response.status() != reqwest::StatusCode::OK {
            return Err(OidcError::Status {
                url: url.to_string(),
                status: response.status().as_u16(),
            });
        }
        if response
            .content_length()
            .is_some_and(|n| n > self.max_bytes as u64)
        {
            return Err(too_large());
        }
        let max_age = response
            .headers()
            .get_all(CACHE_CONTROL)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(max_age);
        // Streamed, so a body without (or lying about) Content-Length is cut at the limit.
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(failed)? {
            if body.len() + chunk.len() > self.max_bytes {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        let document = serde_json::from_slice(&body).map_err(|e| OidcError::Document {
            url: url.to_string(),
            reason: e.to_string(),
        })?;
        Ok(Fetched { document, max_age })
    }
}

/// The `max-age` of a `Cache-Control` value; `no-cache`/`no-store` count as zero (the
/// caller's lower bound then applies).
fn max_age(header: &str) -> Option<Duration> {
    header.split(',').map(str::trim).find_map(|directive| {
        let lower = directive.to_ascii_lowercase();
        if lower == "no-cache" || lower == "no-store" {
            return Some(Duration::ZERO);
        }
        let value = lower.strip_prefix("max-age=")?.trim_matches('"');
        // An absurdly large value is still "a long time": saturate instead of ignoring it.
        value
            .parse::<u64>()
            .ok()
            .or_else(|| {
                (!value.is_empty() && value.bytes().all(|b| b.is_ascii_digit())).then_some(u64::MAX)
            })
            .map(Duration::from_secs)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_control() {
        assert_eq!(max_age("max-age=600"), Some(Duration::from_secs(600)));
        assert_eq!(
            max_age("public, Max-Age=30, must-revalidate"),
            Some(Duration::from_secs(30))
        );
        assert_eq!(max_age("no-store"), Some(Duration::ZERO));
        assert_eq!(
            max_age("max-age=99999999999999999999999"),
            Some(Duration::from_secs(u64::MAX))
        );
        assert_eq!(max_age("public"), None);
        assert_eq!(max_age("max-age=abc"), None);
        assert_eq!(max_age("s-maxage=5"), None);
    }

    #[test]
    fn localhost_names_are_loopback() {
        for name in [
            "localhost",
            "LocalHost",
            "localhost.",
            "api-acme.localhost",
            "a.b.localhost",
        ] {
            let ips = localhost_addrs(name).unwrap_or_else(|| panic!("{name}"));
            assert!(ips.iter().all(IpAddr::is_loopback), "{name}");
            assert!(ips.iter().any(IpAddr::is_ipv4) && ips.iter().any(IpAddr::is_ipv6));
        }
        for name in [
            "notlocalhost",
            "localhost.example.com",
            ".localhost",
            "localhos",
            "",
        ] {
            assert_eq!(localhost_addrs(name), None, "{name}");
        }
    }

    #[tokio::test]
    async fn localhost_names_resolve_without_the_system_resolver_and_stay_guarded() {
        let resolve = |allow_insecure, name: &str| {
            GuardedResolver { allow_insecure }.resolve(name.parse().expect("a name"))
        };
        let addrs: Vec<IpAddr> = resolve(true, "issuer.localhost")
            .await
            .expect("resolved")
            .map(|a| a.ip())
            .collect();
        assert_eq!(
            addrs,
            [
                "127.0.0.1".parse::<IpAddr>().unwrap(),
                "::1".parse().unwrap()
            ]
        );
        let refused = match resolve(false, "issuer.localhost").await {
            Ok(_) => panic!("a loopback name was admitted in secure mode"),
            Err(e) => e.to_string(),
        };
        assert!(refused.contains("not a public address"), "{refused}");
    }

    /// A one-shot HTTP server on 127.0.0.1 answering `body`; returns its port and a counter
    /// of the connections it accepted.
    async fn serve_json(
        body: &'static str,
    ) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = std::sync::Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(n) if n > 0 => head.extend_from_slice(&buf[..n]),
                        _ => break,
                    }
                }
                let response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
            }
        });
        (port, accepted)
    }

    #[tokio::test]
    async fn a_subdomain_of_localhost_is_fetched_only_in_insecure_mode() {
        use std::sync::atomic::Ordering;
        let (port, accepted) = serve_json(r#"{"issuer":"ok"}"#).await;
        let url = Url::parse(&format!("http://issuer.localhost:{port}/doc")).unwrap();

        let secure = Fetcher::new(&OidcConfig::default()).unwrap();
        // `http` is refused before resolution in secure mode; `https` reaches the resolver.
        let https = Url::parse(&format!("https://issuer.localhost:{port}/doc")).unwrap();
        let error = secure.json(&https).await.expect_err("loopback refused");
        let chain = std::iter::successors(Some(&error as &dyn std::error::Error), |e| e.source())
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(": ");
        assert!(chain.contains("not a public address"), "{chain}");
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            0,
            "no connection in secure mode"
        );

        let insecure = Fetcher::new(&OidcConfig::insecure()).unwrap();
        let fetched = insecure.json(&url).await.expect("fetched over loopback");
        assert_eq!(fetched.document["issuer"], "ok");
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn urls() {
        let check = |u: &str, insecure| check_url(&Url::parse(u).unwrap(), insecure);
        assert_eq!(check("https://accounts.example.com", false), Ok(()));
        assert_eq!(check("https://8.8.8.8/x", false), Ok(()));
        assert!(check("http://accounts.example.com", false).is_err());
        assert_eq!(check("http://accounts.example.com", true), Ok(()));
        assert!(check("ftp://accounts.example.com", true).is_err());
        assert!(check("https://127.0.0.1", false).is_err());
        assert_eq!(check("http://127.0.0.1:8080", true), Ok(()));
        assert!(check("https://[::1]", false).is_err());
        assert!(check("https://[::ffff:10.0.0.1]", false).is_err());
        assert!(check("https://169.254.169.254", true).is_err());
        assert!(check("https://[fd00:ec2::254]", true).is_err());
        assert!(check("https://0x7f000001", false).is_err()); // the URL parser normalises it
        assert!(check("https://user:pw@accounts.example.com", false).is_err());
    }
}
