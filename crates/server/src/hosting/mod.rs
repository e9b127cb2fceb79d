//! Public hosting of discovery documents and key sets, chosen by `Host` (DECISIONS §8).
//!
//! Documents are served from memory: [`HostingCache`] holds, per subdomain, the exact bytes
//! with their ETags, built once when a configuration is published (or when a replica learns of
//! it from the change feed), so a public GET never touches the database.

mod cache;
mod handler;

pub use cache::{Hosted, HostingCache};
pub use handler::{config_body, current, hosted_request, serve};
