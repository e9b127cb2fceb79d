//! The proof of ownership: the TXT record `_registry-challenge.<domain>` holds the token the
//! registry gave, looked up through `REGISTRY_DNS_RESOLVER` (or the system's resolver).

use crate::AcmeError;
use hickory_resolver::config::{NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::RData;
use hickory_resolver::TokioResolver;
use std::net::{SocketAddr, ToSocketAddrs};

/// How long one TXT lookup may take.
pub const LOOKUP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// Looks up TXT records.
pub struct TxtLookup {
    resolver: TokioResolver,
}

impl std::fmt::Debug for TxtLookup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TxtLookup")
    }
}

impl TxtLookup {
    /// A lookup through the DNS server at `server` (`host:port`), or the system's resolver
    /// (`/etc/resolv.conf`) when `None`. Answers are not cached: each check asks again.
    pub fn new(server: Option<&str>) -> Result<Self, AcmeError> {
        let builder = match server {
            Some(server) => {
                // `host:port`: an address, or a name looked up once, at the start.
                let address: SocketAddr = match server.parse() {
                    Ok(address) => address,
                    Err(_) => (server.to_socket_addrs().ok())
                        .and_then(|mut found| found.next())
                        .ok_or_else(|| {
                            AcmeError::Setting(format!(
                                "REGISTRY_DNS_RESOLVER {server:?} is not a host and port (such as \
                                 127.0.0.1:53 or dns.internal:53) that resolves"
                            ))
                        })?,
                };
                let mut name_server = NameServerConfig::udp_and_tcp(address.ip());
                for connection in &mut name_server.connections {
                    connection.port = address.port();
                }
                let config = ResolverConfig::from_name_servers(vec![name_server]);
                TokioResolver::builder_with_config(config, TokioRuntimeProvider::default())
            }
            None => TokioResolver::builder_tokio()
                .map_err(|e| AcmeError::Setting(format!("the system's DNS configuration: {e}")))?,
        };
        let mut builder = builder;
        builder.options_mut().cache_size = 0;
        let resolver = builder
            .build()
            .map_err(|e| AcmeError::Setting(format!("the DNS resolver: {e}")))?;
        Ok(Self { resolver })
    }

    /// Whether a TXT record of `name` holds exactly `value` (a record split in several strings
    /// counts joined). No record, or no such name, is `false`.
    pub async fn holds(&self, name: &str, value: &str) -> Result<bool, AcmeError> {
        let fqdn = format!("{}.", name.trim_end_matches('.'));
        // A name whose DNS server never answers costs this long, no more (docs/api.md, "Custom
        // domains": one customer's domains must not stall another's).
        let asked = tokio::time::timeout(LOOKUP_TIMEOUT, self.resolver.txt_lookup(fqdn));
        let Ok(answered) = asked.await else {
            return Err(AcmeError::Dns {
                name: name.to_owned(),
                why: format!("no answer within {} s", LOOKUP_TIMEOUT.as_secs()),
            });
        };
        match answered {
            Ok(found) => Ok(found.answers().iter().any(|record| match &record.data {
                RData::TXT(txt) => {
                    let joined: Vec<u8> = txt.txt_data.iter().flatten().copied().collect();
                    joined == value.as_bytes()
                }
                _ => false,
            })),
            Err(error) if error.is_no_records_found() || error.is_nx_domain() => Ok(false),
            Err(error) => Err(AcmeError::Dns {
                name: name.to_owned(),
                why: error.to_string(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resolver_is_a_host_and_port() {
        for server in ["127.0.0.1:53", "[::1]:8053", "localhost:8053"] {
            assert!(TxtLookup::new(Some(server)).is_ok(), "{server}");
        }
        for server in ["127.0.0.1", "localhost", ""] {
            let refused = TxtLookup::new(Some(server)).unwrap_err().to_string();
            assert!(
                refused.contains("REGISTRY_DNS_RESOLVER"),
                "{server}: {refused}"
            );
        }
    }
}
