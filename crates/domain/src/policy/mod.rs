//! The service-account policy document, version 1 (STUB: the public API is fixed, the bodies are
//! being written).

use crate::Violations;
use serde_json::{Map, Value};
use std::net::IpAddr;

/// How an account authenticates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    /// A static bearer token.
    Static,
    /// Federation with an external OIDC issuer.
    Oidc,
}

impl PolicyKind {
    /// `"static"` or `"oidc"`.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyKind::Static => "static",
            PolicyKind::Oidc => "oidc",
        }
    }
}

/// A non-wildcard `services` entry, for the ownership check of spec §4 rule 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiteralService {
    /// Pointer into the policy document (e.g. `/rules/0/services/1`).
    pub pointer: String,
    /// The subdomain as written.
    pub subdomain: String,
}

/// A set of service patterns a caller may act on.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    patterns: Vec<String>,
}

impl Scope {
    /// Whether `subdomain` is covered.
    pub fn matches(&self, subdomain: &str) -> bool {
        self.patterns.iter().any(|p| p == "*" || p == subdomain)
    }
    /// Whether the scope holds `"*"`.
    pub fn includes_all(&self) -> bool {
        self.patterns.iter().any(|p| p == "*")
    }
}

/// A parsed policy and the warnings found while parsing it.
#[derive(Debug, Clone)]
pub struct ParsedPolicy {
    /// The policy.
    pub policy: Policy,
    /// Sentences about risky but valid choices.
    pub warnings: Vec<String>,
}

/// A parsed, compiled policy document.
#[derive(Debug, Clone)]
pub struct Policy {
    document: Value,
    kind: PolicyKind,
    services: Vec<String>,
}

impl Policy {
    /// Parses and checks a policy document.
    pub fn parse(document: &Value) -> Result<ParsedPolicy, Violations> {
        let kind = match document.get("kind").and_then(Value::as_str) {
            Some("oidc") => PolicyKind::Oidc,
            _ => PolicyKind::Static,
        };
        let services = document
            .get("services")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        Ok(ParsedPolicy {
            policy: Policy {
                document: document.clone(),
                kind,
                services,
            },
            warnings: vec![],
        })
    }
    /// The document as saved.
    pub fn document(&self) -> &Value {
        &self.document
    }
    /// The kind.
    pub fn kind(&self) -> PolicyKind {
        self.kind
    }
    /// Distinct exact issuers of the OIDC rules.
    pub fn issuers(&self) -> Vec<&str> {
        vec![]
    }
    /// Every non-wildcard services entry with its pointer.
    pub fn literal_services(&self) -> Vec<LiteralService> {
        vec![]
    }
    /// Whether the source address may call.
    pub fn allows_ip(&self, _ip: IpAddr) -> bool {
        true
    }
    /// For a static policy, its services scope.
    pub fn static_scope(&self) -> Option<Scope> {
        (self.kind == PolicyKind::Static).then(|| Scope {
            patterns: self.services.clone(),
        })
    }
    /// For an OIDC policy, the union of the services of every rule whose claims match.
    pub fn oidc_scope(&self, _claims: &Map<String, Value>) -> Option<Scope> {
        None
    }
}
