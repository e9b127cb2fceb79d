mod api;
mod https;
mod oidc;
mod security;
mod store;
mod sync;
mod walkthrough;
