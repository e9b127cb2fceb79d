mod api;
mod oidc;
mod store;
