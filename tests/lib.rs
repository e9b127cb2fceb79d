//! Integration test support (see `integration/`).
//!
//! The suite runs on whichever database [`fresh_database_url`] hands out: a fresh SQLite file by
//! default, or a fresh database on a throwaway PostgreSQL cluster when
//! `REGISTRY_TEST_POSTGRES_URL` names one (`cargo xtask test` starts such a cluster and runs the
//! suite a second time). This package does not depend on diesel: PostgreSQL databases are
//! created with `psql`.

mod support;

/// The repository's README, whose Rust example (embedding the policy engine) runs as this
/// crate's doc test, so that it keeps to the engine's signatures; its other blocks are shell,
/// JSON and the like, which rustdoc does not run.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeExamples;

pub use support::database::{
    backend_name, execute_sql, fresh_database_url, hold_migration_lock, hold_sqlite_reads,
    hold_write_lock, postgres_tool, query_sql, sqlite_python, HeldLock, POSTGRES_URL_VAR,
};

/// The test OIDC issuer (see [`issuer::TestIssuer`]).
pub use support::issuer;
/// A stand-in for a kube-apiserver's issuer discovery endpoints.
pub use support::kube;

/// A TCP proxy that cuts a server off its PostgreSQL database (see [`proxy::Proxy`]).
pub use support::proxy;

/// The registry on a free port, in the test process or the real binary (see
/// [`server::TestServer`]).
pub use support::server;

/// How a test waits for what happens in the background (see [`wait::within`]).
pub use support::wait;
