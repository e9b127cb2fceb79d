//! The hosted documents in memory (docs/api.md, "Public hosting"; `public` serves them by `Host`).
//!
//! Documents are served from memory: [`HostingCache`] holds, per subdomain, the exact bytes
//! with their ETags, built once when a configuration is published (or when a replica learns of
//! it from the change feed, or first reads it), so a public GET of a subdomain in memory never
//! touches the database; one that is not costs one indexed read, and nothing is loaded at
//! start-up (docs/api.md, "Limits that hold (second security review)", "Hosting memory").

mod cache;
mod hosted;
mod hosts;

pub use cache::{Generation, HostingCache, Lookup};
pub use hosted::{DateText, Document, Hosted};
