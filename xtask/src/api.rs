//! Setting a scene through the registry's own API (services, published documents, accounts), the
//! bodies the chores upload, and the RS256 identity tokens of their federated callers.

use anyhow::{bail, Context, Result};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use registry_testkit::http::{Http, Response};
use registry_testkit::{KeyKind, SigningKey};
/// The audience and subject the chores' identity tokens carry.
pub use registry_testkit::{AUDIENCE, SUBJECT};
use serde_json::{json, Value};

/// One registry's API, as one caller.
#[derive(Debug, Clone)]
pub struct Api {
    pub http: Http,
    /// The caller's bearer token.
    pub token: String,
}

impl Api {
    pub fn new(http: Http, token: &str) -> Api {
        Api {
            http,
            token: token.to_owned(),
        }
    }

    pub fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Response> {
        Ok(self.http.call(method, path, Some(&self.token), body)?)
    }

    /// Calls the API, failing unless the status is `want`; the JSON answer.
    pub fn expect(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        want: u16,
    ) -> Result<Value> {
        expected(method, path, self.call(method, path, body)?, want)
    }

    /// Registers `{name}-{tenant}`, titled `name`; its subdomain.
    pub fn create_service(&self, name: &str) -> Result<String> {
        let body = json!({"title": name, "serviceName": name});
        let created = self.expect("POST", "/services", Some(&body), 201)?;
        created["subdomain"]
            .as_str()
            .map(str::to_owned)
            .context("no subdomain in the created service")
    }

    /// Publishes a discovery document and a key set for a service.
    pub fn publish(&self, subdomain: &str, upload: &Value) -> Result<()> {
        let path = format!("/services/{subdomain}/config");
        self.expect("PUT", &path, Some(upload), 200).map(drop)
    }

    /// Creates a service account; its id and (static accounts) token.
    pub fn create_account(&self, name: &str, policy: Value) -> Result<(String, Option<String>)> {
        let body = json!({"name": name, "policy": policy});
        let created = self.expect("POST", "/service-accounts", Some(&body), 201)?;
        let id = created["id"].as_str().context("no account id")?.to_owned();
        Ok((id, created["token"].as_str().map(str::to_owned)))
    }

    pub fn delete_account(&self, id: &str) -> Result<()> {
        let path = format!("/service-accounts/{id}");
        self.expect("DELETE", &path, None, 204).map(drop)
    }
}

/// What `PUT /services/{s}/config` takes: a discovery document (its `issuer` and `jwks_uri` are
/// rewritten by the registry) and a key set.
pub fn upload(jwks: Value) -> Value {
    json!({
        "openidConfiguration": {
            "issuer": "https://placeholder.invalid",
            "jwks_uri": "https://placeholder.invalid/openid/v1/jwks",
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "claims_supported": ["iss", "sub", "aud", "exp", "iat"]
        },
        "jwks": jwks
    })
}

/// A key set of `count` RSA public keys named `{base}-0`, `{base}-1`, …: valid, cheap, and
/// nothing signs with them.
pub fn fake_keys(base: &str, count: usize) -> Value {
    let mut n = vec![0xa5u8; 256];
    n[0] = 0xc3;
    let n = URL_SAFE_NO_PAD.encode(&n);
    let keys: Vec<Value> = (0..count)
        .map(|i| json!({"kty": "RSA", "kid": format!("{base}-{i}"), "use": "sig", "alg": "RS256", "e": "AQAB", "n": n}))
        .collect();
    json!({ "keys": keys })
}

/// An RS256 signing key (2048-bit) and its public JWK: the test kit's [`SigningKey`], with the
/// `Result`s the chores' `?` expects.
#[derive(Debug)]
pub struct Signer(SigningKey);

impl Signer {
    pub fn generate(kid: &str) -> Result<Signer> {
        Ok(Signer(SigningKey::generate(KeyKind::Rsa, kid)))
    }

    /// The key set that publishes the public key (`kid`, `alg` RS256, `use` sig).
    pub fn jwks(&self) -> Value {
        self.0.jwks()
    }

    /// An identity token for `iss` ([`SUBJECT`], [`AUDIENCE`]), issued now, living an hour.
    pub fn mint(&self, iss: &str) -> Result<String> {
        Ok(self.0.mint(iss))
    }

    /// [`Signer::mint`] with a `jti`, so that tokens minted in the same second differ (as every
    /// CI job's token does).
    pub fn mint_with_id(&self, iss: &str, jti: Option<&str>) -> Result<String> {
        Ok(self.0.mint_with_id(iss, jti))
    }
}

/// The policy of an `oidc` account that trusts the chores' tokens from `iss` on `services`.
pub fn oidc_policy(iss: &str, services: &[&str]) -> Value {
    json!({
        "kind": "oidc",
        "rules": [{
            "services": services,
            "claims": {"iss": iss, "aud": AUDIENCE, "sub": SUBJECT}
        }]
    })
}

/// An identity provider hosted by the registry itself: a service `idp` publishing an RS256 key,
/// so that identity tokens it signs verify on loopback (the server needs
/// `REGISTRY_OIDC_ALLOW_INSECURE_ISSUERS=true` for an `http` issuer). Its issuer URL and signer.
pub fn hosted_issuer(api: &Api) -> Result<(String, Signer)> {
    let signer = Signer::generate("idp-1")?;
    let idp = api.create_service("idp")?;
    api.publish(&idp, &upload(signer.jwks()))?;
    Ok((format!("http://{}", api.http.issuer_host(&idp)), signer))
}

/// The JSON of `answer` to `method path` when its status is `want`; else the failure naming the
/// call, the status and the body.
pub fn expected(method: &str, path: &str, answer: Response, want: u16) -> Result<Value> {
    if answer.status != want {
        bail!(
            "{method} {path}: {} (wanted {want}): {}",
            answer.status,
            answer.body
        );
    }
    Ok(answer.json())
}
