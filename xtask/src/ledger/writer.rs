//! Writes whose fate goes into the ledger.

use super::{locked, Ack, Ledger, TENANT};
use crate::api::{fake_keys, upload};
use registry_testkit::http::{Http, Response};
use serde_json::{json, Value};
use std::sync::Mutex;

/// What became of a write.
#[derive(Debug)]
pub struct Sent {
    /// `None`: no answer.
    pub answer: Option<Response>,
    /// `Acked`: the answer wanted; `Unsure`: no answer, or a 5xx (it may or may not have
    /// happened); `None`: another answer (it did not happen).
    pub ack: Option<Ack>,
}

impl Sent {
    /// The JSON answer of an acknowledged write (`Null` otherwise).
    pub fn json(&self) -> Value {
        match (&self.answer, self.ack) {
            (Some(response), Some(Ack::Acked)) => response.json(),
            _ => Value::Null,
        }
    }

    pub fn acked(&self) -> bool {
        self.ack == Some(Ack::Acked)
    }
}

/// A client that writes in the ledger what became of its requests.
#[derive(Debug, Clone, Copy)]
pub struct Writer<'a> {
    pub http: Http,
    /// The bearer token it sends (`""`: none).
    pub token: &'a str,
    pub ledger: &'a Mutex<Ledger>,
}

impl<'a> Writer<'a> {
    /// The same writer with another token.
    pub fn with<'b>(&self, token: &'b str) -> Writer<'b>
    where
        'a: 'b,
    {
        Writer { token, ..*self }
    }

    pub fn record<R>(&self, change: impl FnOnce(&mut Ledger) -> R) -> R {
        change(&mut locked(self.ledger))
    }

    /// Sends a request; any status other than `want`, or no answer, is a problem, and `Err`
    /// (with the answer, if there was one).
    pub fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        want: u16,
    ) -> Result<Response, Option<Response>> {
        let token = (!self.token.is_empty()).then_some(self.token);
        match self.http.call(method, path, token, body) {
            Ok(response) if response.status == want => Ok(response),
            Ok(response) => {
                let (status, body) = (response.status, &response.body);
                let summary: String = body.chars().take(200).collect();
                let problem = format!("{method} {path} → {status} (wanted {want}): {summary}");
                self.record(|l| l.problem(problem));
                Err(Some(response))
            }
            Err(e) => {
                self.record(|l| l.problem(format!("{method} {path}: no answer: {e:#}")));
                Err(None)
            }
        }
    }

    /// [`Writer::send`] for a write, counted as `kind` when acknowledged.
    pub fn write(
        &self,
        kind: &'static str,
        method: &str,
        path: &str,
        body: Option<&Value>,
        want: u16,
    ) -> Sent {
        let (answer, ack) = match self.send(method, path, body, want) {
            Ok(response) => {
                self.record(|l| l.acknowledge(kind));
                (Some(response), Some(Ack::Acked))
            }
            Err(None) => (None, Some(Ack::Unsure)),
            Err(Some(response)) if response.status < 500 => (Some(response), None),
            Err(Some(response)) => {
                let (status, body) = (response.status, &response.body);
                let error = format!("{method} {path} → {status}: {body}");
                let unavailable = response.is_unavailable();
                self.record(|l| match unavailable {
                    true => l.unavailable += 1,
                    false => l.server_errors.push(error),
                });
                (Some(response), Some(Ack::Unsure))
            }
        };
        Sent { answer, ack }
    }

    /// Registers `{name}-acme`, titled `name`.
    pub fn create_service(&self, name: &str, description: Option<&str>) -> Sent {
        let mut body = json!({"title": name, "serviceName": name});
        if let Some(description) = description {
            body["description"] = description.into();
        }
        let sent = self.write("service created", "POST", "/services", Some(&body), 201);
        if let Some(ack) = sent.ack {
            self.record(|l| l.service_created(&format!("{name}-{TENANT}"), name, ack));
        }
        sent
    }

    /// Publishes `count` keys named `{base}-{i}` for a service. The keys it replaces are not
    /// kept: writers republish far more often than a public key set of at most 100 keys allows
    /// with the default retention of a day.
    pub fn publish(&self, kind: &'static str, subdomain: &str, base: &str, count: usize) -> Sent {
        let path = format!("/services/{subdomain}/config");
        let mut body = upload(fake_keys(base, count));
        body["retainRemovedKeysHours"] = 0.into();
        let sent = self.write(kind, "PUT", &path, Some(&body), 200);
        if let Some(ack) = sent.ack {
            let kids = (0..count).map(|i| format!("{base}-{i}")).collect();
            self.record(|l| l.service_published(subdomain, Some(kids), ack));
        }
        sent
    }

    pub fn retitle(&self, kind: &'static str, subdomain: &str, title: &str) -> Sent {
        let path = format!("/services/{subdomain}");
        let body = json!({ "title": title });
        let sent = self.write(kind, "PATCH", &path, Some(&body), 200);
        if let Some(ack) = sent.ack {
            self.record(|l| l.service_retitled(subdomain, title, ack));
        }
        sent
    }

    /// Creates a static account `name` over `services`.
    pub fn create_account(&self, name: &str, services: &[String]) -> Sent {
        let body = json!({"name": name, "policy": {"kind": "static", "services": services}});
        let sent = self.write(
            "account created",
            "POST",
            "/service-accounts",
            Some(&body),
            201,
        );
        if let Some(ack) = sent.ack {
            let reply = sent.json();
            let created = reply["id"].as_str().zip(reply["token"].as_str());
            self.record(|l| l.account_created(created, name, services, ack));
        }
        sent
    }
}
