//! The customer's client: the binary as a client of the registry's API, as `vault` is of Vault.
//! `commands` (`registry services …`, `config …`, `keys …`, `domain …`, `accounts …`,
//! `preflight`, `fetches`, `audit-events`) read `REGISTRY_API_URL` and `REGISTRY_TOKEN` (or an
//! identity token file), make their call (`requests`) and print a table (`tables`), or the API's
//! JSON with `--format json`; an API problem is one sentence on stderr (title, detail, each
//! pointer) and exit 1; a wrong command line is clap's usage and exit 2. `sync` keeps a
//! service's documents in step with a source issuer; `fetch_log` ships a cache's log; `signer`
//! serves kube-apiserver's external signer on a Unix socket (`registry-signer`). All of them call
//! the registry through `registry-client`.

pub mod commands;
pub mod fetch_log;
pub mod requests;
pub mod signer;
pub mod sync;
pub mod tables;
