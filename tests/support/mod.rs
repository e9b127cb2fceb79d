//! Modules of the support library.

pub mod database;
pub mod issuer;
pub mod kube;
pub mod proxy;
pub mod server;
pub mod wait;
