//! What a route of the API is (`routes::table` lists them): its method, its path, what it asks
//! of a caller, its handler; what the caller arguments read of it (a resource's
//! [`ResourceAccess`]), and what the router and the client derive (`Allow`, [`serves`]).

use actix_web::web;
use registry_domain::policy::Action;

/// The HTTP methods of the API. `Get` serves HEAD too (RFC 9110 §9.3.2: a server answers HEAD
/// wherever it answers GET; actix leaves the body out of a response to HEAD).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// GET and HEAD.
    Get,
    /// POST.
    Post,
    /// PUT.
    Put,
    /// PATCH.
    Patch,
    /// DELETE.
    Delete,
}

impl Verb {
    /// The methods it answers, as an `Allow` header names them.
    pub fn allows(self) -> &'static str {
        match self {
            Verb::Get => "GET, HEAD",
            Verb::Post => "POST",
            Verb::Put => "PUT",
            Verb::Patch => "PATCH",
            Verb::Delete => "DELETE",
        }
    }

    /// The method's name (`GET` for both GET and HEAD).
    pub fn method(self) -> &'static str {
        match self {
            Verb::Get => "GET",
            Verb::Post => "POST",
            Verb::Put => "PUT",
            Verb::Patch => "PATCH",
            Verb::Delete => "DELETE",
        }
    }

    /// The verb of a request's method; HEAD is GET's.
    pub fn of(method: &actix_web::http::Method) -> Option<Self> {
        use actix_web::http::Method;
        Some(match *method {
            Method::GET | Method::HEAD => Verb::Get,
            Method::POST => Verb::Post,
            Method::PUT => Verb::Put,
            Method::PATCH => Verb::Patch,
            Method::DELETE => Verb::Delete,
            _ => return None,
        })
    }

    /// An actix route guarded by this method.
    pub fn guarded(self) -> actix_web::Route {
        use actix_web::guard;
        match self {
            Verb::Get => web::route().guard(guard::Any(guard::Get()).or(guard::Head())),
            Verb::Post => web::post(),
            Verb::Put => web::put(),
            Verb::Patch => web::patch(),
            Verb::Delete => web::delete(),
        }
    }
}

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// A caller whose policy allows this action (docs/api.md, "Actions"); a call that is not a
    /// GET counts against the credential's changes per minute.
    Caller(Action),
    /// A caller allowed this action, on a POST that changes nothing (not counted as a change).
    Reads(Action),
    /// A cache's log shipper, by the fetch-log token (`REGISTRY_FETCH_LOG_TOKEN`).
    Shipper,
    /// No caller: the handler decides (an anonymous creation, the operator's endpoints, the
    /// documents anyone may read).
    Anyone,
    /// A browser page: not part of the API, not in `/openapi.json`.
    Page,
}

impl Access {
    /// The action a caller must be allowed, if the route takes a caller.
    pub fn action(self) -> Option<Action> {
        match self {
            Access::Caller(action) | Access::Reads(action) => Some(action),
            Access::Shipper | Access::Anyone | Access::Page => None,
        }
    }
}

/// One route.
#[derive(Clone, Copy)]
pub struct Route {
    /// The scope it is registered in (`""` for none): the router matches a scope's `{subdomain}`
    /// or `{id}` once, then the rest of the path against fixed names.
    pub scope: &'static str,
    /// Its path within the scope.
    pub path: &'static str,
    /// Its method.
    pub verb: Verb,
    /// Who may call it.
    pub access: Access,
    /// Its handler, on the guarded route given.
    pub to: fn(actix_web::Route) -> actix_web::Route,
}

impl Route {
    /// Its whole path pattern (`/services/{subdomain}/config`), each `{name}` without the
    /// router's pattern of its segment.
    pub fn pattern(&self) -> String {
        named_segments(format!("{}{}", self.scope, self.path))
    }

    /// Its path with `values` in its `{name}` segments, in order, each percent-encoded as one
    /// segment (what a client calls).
    pub fn path_with(&self, values: &[&str]) -> String {
        let mut values = values.iter();
        (self.pattern().split('/'))
            .map(|segment| match segment.starts_with('{') {
                true => registry_client::path_segment(values.next().copied().unwrap_or_default()),
                false => segment.to_owned(),
            })
            .collect::<Vec<_>>()
            .join("/")
    }
}

/// `pattern` (as the router writes a matched route) with each `{name:regex}` written `{name}`
/// (`{agent:[^/]*}`: a segment that may be empty): the route that logs, metrics and the API
/// description name.
pub fn named_segments(pattern: String) -> String {
    if !pattern.contains(':') {
        return pattern;
    }
    let (mut named_only, mut named, mut skipped) = (String::new(), false, false);
    for c in pattern.chars() {
        match c {
            '{' => named = true,
            ':' if named => {
                skipped = true;
                continue;
            }
            '}' if named => (named, skipped) = (false, false),
            _ if skipped => continue,
            _ => {}
        }
        named_only.push(c);
    }
    named_only
}

impl std::fmt::Debug for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:?} {}{} ({:?})",
            self.verb, self.scope, self.path, self.access
        )
    }
}

/// What a resource's routes ask of a caller, by method: what the caller arguments read (as the
/// resource's app data) to know the action a call takes.
#[derive(Debug, Clone)]
pub struct ResourceAccess(pub Vec<(Verb, Access)>);

impl ResourceAccess {
    /// The access of the route that serves `verb`.
    pub fn of(&self, verb: Verb) -> Option<Access> {
        self.0.iter().find(|(v, _)| *v == verb).map(|(_, a)| *a)
    }
}

/// The `Allow` header of a resource serving `routes`: GET and HEAD first, then the others in
/// the table's order.
pub fn allow(routes: &[&Route]) -> String {
    let mut verbs: Vec<Verb> = routes.iter().map(|r| r.verb).collect();
    verbs.sort_by_key(|v| *v != Verb::Get);
    verbs
        .iter()
        .map(|v| v.allows())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether `path` (a path the client calls, query string left out) is served by `route`'s
/// pattern: each `{name}` stands for one segment, empty only where the router's pattern of it
/// (`[^/]*`) allows.
#[cfg(test)]
pub fn serves(route: &Route, path: &str) -> bool {
    let (raw, pattern) = (format!("{}{}", route.scope, route.path), route.pattern());
    let may_be_empty =
        |name: &str| raw.contains(&format!("{}:[^/]*}}", name.trim_end_matches('}')));
    let path = path.split('?').next().unwrap_or_default();
    let (want, got): (Vec<&str>, Vec<&str>) =
        (pattern.split('/').collect(), path.split('/').collect());
    want.len() == got.len()
        && want
            .iter()
            .zip(&got)
            .all(|(w, g)| (w.starts_with('{') && (!g.is_empty() || may_be_empty(w))) || w == g)
}
