//! The hosted documents in memory (DECISIONS §8; `public` serves them by `Host`).
//!
//! Documents are served from memory: [`HostingCache`] holds, per subdomain, the exact bytes
//! with their ETags, built once when a configuration is published (or when a replica learns of
//! it from the change feed), so a public GET never touches the database.

mod cache;

pub(crate) use cache::{http_date, HTTP_DATE};
pub use cache::{Document, Hosted, HostingCache, Lookup};
