//! The one table of routes (the types are [`crate::route`]'s): each declared once, with its
//! method, path, access and handler. The router (`routes::configure`), the `Allow` header of a
//! 405, the action a caller must be allowed (`caller`), the paths of `/openapi.json` (checked
//! against the document) and the client commands' calls (`client::requests::api`: a route of the
//! table, its segments filled) all derive from it. A route's `access` is a field every entry must
//! give: a route without one does not compile.

use super::{
    accounts, anonymous, audit, config, domains, fetch_log, keys, ops, preflight, refusals,
    services, signing,
};
use crate::dashboard;
use crate::route::{Access, Route, Verb};
use registry_domain::policy::Action::*;

/// A service's routes are under this scope.
const SERVICE: &str = "/services/{subdomain}";
/// An account's routes are under this scope.
const ACCOUNT: &str = "/service-accounts/{id}";

macro_rules! routes {
    ($($scope:expr, $path:literal, $verb:ident, $access:expr, $handler:path;)*) => {
        /// Every route, in the order the router tries them (resources of one path together).
        pub const ROUTES: &[Route] = &[$(Route {
            scope: $scope,
            path: $path,
            verb: Verb::$verb,
            access: $access,
            to: |route| route.to($handler),
        }),*];
    };
}

use Access::{Anyone, Caller, Page, Reads, Shipper};

routes! {
    "", "/services", Get, Caller(ServicesRead), services::list;
    "", "/services", Post, Caller(ServicesWrite), services::create;
    SERVICE, "", Get, Caller(ServicesRead), services::get;
    SERVICE, "", Patch, Caller(ServicesWrite), services::patch;
    SERVICE, "", Delete, Caller(ServicesWrite), services::delete;
    SERVICE, "/config", Get, Caller(ConfigRead), config::get;
    SERVICE, "/config", Put, Caller(ConfigWrite), config::put;
    SERVICE, "/config", Delete, Caller(ConfigWrite), config::delete;
    SERVICE, "/domain", Get, Caller(ConfigRead), domains::get;
    SERVICE, "/domain", Put, Caller(ConfigWrite), domains::put;
    SERVICE, "/domain", Delete, Caller(ConfigWrite), domains::delete;
    SERVICE, "/signing", Get, Caller(ConfigRead), signing::get;
    SERVICE, "/signing", Put, Caller(ConfigWrite), signing::put;
    SERVICE, "/signing", Delete, Caller(ConfigWrite), signing::delete;
    SERVICE, "/signing/rotate", Post, Caller(ConfigWrite), signing::rotate;
    // A signature counts against the customer's signatures per minute, not its writes.
    SERVICE, "/sign", Post, Reads(TokensSign), signing::sign;
    SERVICE, "/keys", Get, Caller(ConfigRead), keys::list;
    SERVICE, "/keys/{kid}", Delete, Caller(ConfigWrite), keys::delete;
    SERVICE, "/keys/{kid}/readiness", Get, Caller(ConfigRead), keys::readiness;
    // The agent may be empty: a verifier that sent no User-Agent is `""`.
    SERVICE, "/keys/{kid}/readiness/verifiers/{agent:[^/]*}", Delete, Caller(ConfigWrite),
        keys::dismiss_verifier;
    SERVICE, "/federation", Get, Caller(ConfigRead), keys::federation;
    SERVICE, "/preflight", Get, Caller(ConfigRead), preflight::documents;
    // Checking a token changes nothing: it counts against the explain budget, not the writes.
    SERVICE, "/preflight", Post, Reads(ConfigRead), preflight::token;
    SERVICE, "/fetches", Get, Caller(ConfigRead), preflight::fetches;
    SERVICE, "/fetches/history", Get, Caller(ConfigRead), preflight::history;
    "", "/anonymous/services", Post, Anyone, anonymous::create;
    "", "/service-accounts", Get, Caller(AccountsRead), accounts::list;
    "", "/service-accounts", Post, Caller(AccountsWrite), accounts::create;
    ACCOUNT, "", Get, Caller(AccountsRead), accounts::get;
    ACCOUNT, "", Patch, Caller(AccountsWrite), accounts::patch;
    ACCOUNT, "", Delete, Caller(AccountsWrite), accounts::delete;
    ACCOUNT, "/regenerate-token", Post, Caller(AccountsWrite), accounts::regenerate_token;
    ACCOUNT, "/explain", Post, Reads(AccountsRead), refusals::explain;
    ACCOUNT, "/refusals", Get, Caller(AccountsRead), refusals::list;
    "", "/audit-events", Get, Caller(AuditRead), audit::list;
    "", "/fetch-log", Post, Shipper, fetch_log::post;
    "", "/", Get, Page, dashboard::landing;
    "", "/dashboard/anonymous/{subdomain}", Get, Page, dashboard::anonymous;
    "", "/console", Get, Page, dashboard::console;
    "", "/healthz", Get, Anyone, ops::healthz;
    "", "/readyz", Get, Anyone, ops::readyz;
    "", "/metrics", Get, Anyone, ops::metrics;
    "", "/openapi.json", Get, Anyone, ops::openapi;
    "", "/problems/{slug}", Get, Anyone, crate::problem::pages::page;
    "", "/schemas/service-account-policy/v1.json", Get, Anyone, ops::policy_schema;
    "", "/schemas/service-account-policy/v2.json", Get, Anyone, ops::policy_schema_v2;
}

/// The route serving `verb` on the path pattern `pattern`, if the table has one.
pub fn find(verb: Verb, pattern: &str) -> Option<&'static Route> {
    ROUTES
        .iter()
        .find(|route| route.verb == verb && route.pattern() == pattern)
}

/// The resources of the table, in order: (scope, path, the routes of that path).
pub fn resources() -> Vec<(&'static str, &'static str, Vec<&'static Route>)> {
    let mut resources: Vec<(&str, &str, Vec<&Route>)> = Vec::new();
    for route in ROUTES {
        match resources
            .iter_mut()
            .find(|(scope, path, _)| *scope == route.scope && *path == route.path)
        {
            Some((_, _, routes)) => routes.push(route),
            None => resources.push((route.scope, route.path, vec![route])),
        }
    }
    resources
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::{allow, serves};
    use registry_domain::policy::Action;
    use std::collections::BTreeSet;

    /// Every call that takes a caller, with its action (docs/api.md's table of actions).
    #[test]
    fn every_call_takes_the_action_of_the_table() {
        let expected: &[(&str, Verb, Action)] = &[
            ("/services", Verb::Get, ServicesRead),
            ("/services", Verb::Post, ServicesWrite),
            ("/services/{subdomain}", Verb::Get, ServicesRead),
            ("/services/{subdomain}", Verb::Patch, ServicesWrite),
            ("/services/{subdomain}/config", Verb::Put, ConfigWrite),
            (
                "/services/{subdomain}/keys/{kid}",
                Verb::Delete,
                ConfigWrite,
            ),
            ("/services/{subdomain}/preflight", Verb::Post, ConfigRead),
            ("/service-accounts/{id}/explain", Verb::Post, AccountsRead),
            (
                "/service-accounts/{id}/regenerate-token",
                Verb::Post,
                AccountsWrite,
            ),
            ("/audit-events", Verb::Get, AuditRead),
            ("/services/{subdomain}/signing", Verb::Get, ConfigRead),
            ("/services/{subdomain}/signing", Verb::Put, ConfigWrite),
            (
                "/services/{subdomain}/signing/rotate",
                Verb::Post,
                ConfigWrite,
            ),
            ("/services/{subdomain}/sign", Verb::Post, TokensSign),
        ];
        for (pattern, verb, action) in expected {
            let route = ROUTES
                .iter()
                .find(|r| r.pattern() == *pattern && r.verb == *verb)
                .unwrap_or_else(|| panic!("{verb:?} {pattern} is in the table"));
            assert_eq!(route.access.action(), Some(*action), "{route:?}");
        }
        // Reads are GETs, and the reading POSTs (and signing, which changes nothing a cache
        // holds and is counted against its own limit); nothing else.
        for route in ROUTES {
            let is_read = |a: Action| a.as_str().ends_with(":read");
            let reads = matches!(route.access.action(), Some(a) if is_read(a));
            let writes = matches!(route.access.action(), Some(a) if !is_read(a));
            assert!(
                !(writes && route.verb == Verb::Get),
                "{route:?}: a GET that writes"
            );
            if let Access::Reads(action) = route.access {
                assert!(reads || action == TokensSign, "{route:?}");
            }
        }
    }

    #[test]
    fn a_route_is_declared_once_and_allow_names_its_resources_methods() {
        let mut seen = BTreeSet::new();
        for route in ROUTES {
            assert!(
                seen.insert((route.pattern(), route.verb.method().to_lowercase())),
                "{route:?} twice"
            );
        }
        let resources = resources();
        let of = |pattern: &str| {
            let (_, _, routes) = (resources.iter())
                .find(|(s, p, _)| format!("{s}{p}") == pattern)
                .unwrap();
            allow(routes)
        };
        assert_eq!(of("/services"), "GET, HEAD, POST");
        assert_eq!(of("/services/{subdomain}"), "GET, HEAD, PATCH, DELETE");
        assert_eq!(of("/services/{subdomain}/keys/{kid}"), "DELETE");
        assert_eq!(of("/anonymous/services"), "POST");
    }

    /// `/openapi.json` documents exactly the table's routes, pages aside.
    #[test]
    fn the_api_document_names_every_route_and_no_other() {
        let doc: serde_json::Value = serde_json::from_str(crate::routes::ops::OPENAPI).unwrap();
        let mut documented = BTreeSet::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for method in ["get", "post", "put", "patch", "delete"] {
                if item.get(method).is_some() {
                    documented.insert((path.clone(), method.to_owned()));
                }
            }
        }
        let routed: BTreeSet<(String, String)> = (ROUTES.iter())
            .filter(|r| r.access != Access::Page)
            .map(|r| (r.pattern(), r.verb.method().to_lowercase()))
            .collect();
        assert_eq!(documented, routed);
    }

    #[test]
    fn a_pattern_serves_paths_segment_by_segment() {
        let route = ROUTES
            .iter()
            .find(|r| r.pattern() == "/services/{subdomain}/keys/{kid}/readiness")
            .unwrap();
        assert!(serves(route, "/services/api-acme/keys/k%201/readiness"));
        assert!(serves(route, "/services/api-acme/keys/k1/readiness?x=1"));
        assert!(!serves(route, "/services/api-acme/keys//readiness"));
        assert!(!serves(route, "/services/api-acme/keys/k1"));
        // A segment whose router pattern allows it empty: served so, and named without it.
        let verifiers = "/services/{subdomain}/keys/{kid}/readiness/verifiers/{agent}";
        let route = ROUTES.iter().find(|r| r.pattern() == verifiers).unwrap();
        assert!(serves(
            route,
            "/services/api-acme/keys/k1/readiness/verifiers/"
        ));
        assert!(serves(
            route,
            "/services/api-acme/keys/k1/readiness/verifiers/curl"
        ));
        assert!(!serves(
            route,
            "/services/api-acme/keys//readiness/verifiers/curl"
        ));
        let matched = format!("{}{}", route.scope, route.path);
        assert!(matched.contains(':'));
        assert_eq!(crate::route::named_segments(matched), verifiers);
    }
}
