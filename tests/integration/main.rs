mod api;
mod https;
mod oidc;
mod security;
mod signer;
mod store;
mod sync;
mod walkthrough;
