mod api;
mod oidc;
mod security;
mod store;
mod sync;
