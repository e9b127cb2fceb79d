//! HTTP routes, declared once in [`table`]. Handlers parse, call the use cases of
//! `registry_domain::app` (through `AppState::read` and `AppState::write`), and shape responses;
//! the rules they apply live in `registry-domain`.

pub mod accounts;
pub mod anonymous;
pub mod audit;
pub mod config;
pub mod domains;
pub mod fetch_log;
pub mod keys;
pub mod ops;
pub mod preflight;
pub mod refusals;
pub mod services;
pub mod signing;

pub mod table;

use crate::problem::ApiError;
use crate::route::{allow, ResourceAccess, Route};
use actix_web::web;
use std::sync::OnceLock;

/// Each resource's `Allow` header, built once from the table, in its order.
fn allows() -> &'static [String] {
    static ALLOWS: OnceLock<Vec<String>> = OnceLock::new();
    ALLOWS.get_or_init(|| {
        (table::resources().iter())
            .map(|(_, _, routes)| allow(routes))
            .collect()
    })
}

/// Registers every route of [`table::ROUTES`]: one resource per path, its routes by method,
/// what each asks of a caller as the resource's data, and a 405 (problem+json, with `Allow`)
/// for the methods it does not serve. A scope's resources go in one actix scope.
pub fn configure(cfg: &mut web::ServiceConfig) {
    // In the table's order, a scope where its first resource is.
    enum Entry {
        Resource(actix_web::Resource),
        Scope(&'static str),
    }
    let mut order = Vec::new();
    let mut scopes: Vec<(&str, Option<actix_web::Scope>)> = Vec::new();
    for ((scope, path, routes), allow) in table::resources().into_iter().zip(allows()) {
        let resource = resource(path, &routes, allow);
        if scope.is_empty() {
            order.push(Entry::Resource(resource));
            continue;
        }
        match scopes.iter_mut().find(|(name, _)| *name == scope) {
            Some((_, taken)) => *taken = taken.take().map(|s| s.service(resource)),
            None => {
                scopes.push((scope, Some(web::scope(scope).service(resource))));
                order.push(Entry::Scope(scope));
            }
        }
    }
    for entry in order {
        match entry {
            Entry::Resource(resource) => {
                cfg.service(resource);
            }
            Entry::Scope(name) => {
                let scope = scopes.iter_mut().find(|(n, _)| *n == name);
                if let Some(scope) = scope.and_then(|(_, s)| s.take()) {
                    cfg.service(scope);
                }
            }
        }
    }
}

/// One resource: its routes, their access, and the answer to any other method.
fn resource(path: &str, routes: &[&'static Route], allow: &'static str) -> actix_web::Resource {
    let access = ResourceAccess(routes.iter().map(|r| (r.verb, r.access)).collect());
    let mut resource = web::resource(path).app_data(access);
    for route in routes {
        resource = resource.route((route.to)(route.verb.guarded()));
    }
    // `/metrics` answers another method as it answers a GET to who may not read it.
    if path == "/metrics" {
        return resource.default_service(web::to(ops::metrics_other_method));
    }
    // `/fetch-log` without a token configured is not served, whatever the method.
    if path == "/fetch-log" {
        return resource.default_service(web::to(fetch_log::other_method));
    }
    resource.default_service(web::to(move || not_allowed(allow)))
}

async fn not_allowed(allowed: &'static str) -> Result<actix_web::HttpResponse, ApiError> {
    Err(ApiError::MethodNotAllowed(allowed))
}

/// The answer to a path no route serves.
pub async fn not_found() -> Result<actix_web::HttpResponse, ApiError> {
    Err(ApiError::NotFound("no such endpoint".into()))
}
