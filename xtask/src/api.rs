//! Setting a scene through the registry's own API (services, published documents, accounts), the
//! bodies the chores upload, and the RS256 identity tokens of their federated callers.

use crate::http::{Http, Response};
use anyhow::{bail, Context, Result};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use josekit::jwk::alg::rsa::RsaKeyPair;
use josekit::jws::{JwsHeader, RS256};
use josekit::jwt::{self, JwtPayload};
use serde_json::{json, Value};
use std::time::{Duration, SystemTime};

/// The audience the chores' identity tokens carry.
pub const AUDIENCE: &str = "registry";
/// The subject the chores' identity tokens carry.
pub const SUBJECT: &str = "repo:acme/app:ref:refs/heads/main";

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
        self.http.call(method, path, Some(&self.token), body)
    }

    /// Calls the API, failing unless the status is `want`; the JSON answer.
    pub fn expect(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        want: u16,
    ) -> Result<Value> {
        let answer = self.call(method, path, body)?;
        if answer.status != want {
            bail!(
                "{method} {path}: {} (wanted {want}): {}",
                answer.status,
                answer.body
            );
        }
        Ok(answer.json())
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

/// An RS256 signing key (2048-bit) and its public JWK.
#[derive(Debug)]
pub struct Signer {
    key: RsaKeyPair,
    kid: String,
}

impl Signer {
    pub fn generate(kid: &str) -> Result<Signer> {
        Ok(Signer {
            key: RsaKeyPair::generate(2048)?,
            kid: kid.to_owned(),
        })
    }

    /// The key set that publishes the public key.
    pub fn jwks(&self) -> Value {
        let mut jwk = self.key.to_jwk_public_key();
        jwk.set_key_id(&self.kid);
        jwk.set_algorithm("RS256");
        jwk.set_key_use("sig");
        json!({"keys": [Value::Object(jwk.as_ref().clone())]})
    }

    /// An identity token for `iss`, issued now, living an hour.
    pub fn mint(&self, iss: &str) -> Result<String> {
        self.mint_with_id(iss, None)
    }

    /// [`Signer::mint`] with a `jti`, so that tokens minted in the same second differ (as every
    /// CI job's token does).
    pub fn mint_with_id(&self, iss: &str, jti: Option<&str>) -> Result<String> {
        let mut header = JwsHeader::new();
        header.set_token_type("JWT");
        header.set_key_id(&self.kid);
        // Whole seconds, as issuers write them (josekit writes a fraction otherwise).
        let seconds = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)?
            .as_secs();
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(seconds);
        let mut payload = JwtPayload::new();
        payload.set_issuer(iss);
        payload.set_subject(SUBJECT);
        payload.set_audience(vec![AUDIENCE]);
        payload.set_issued_at(&now);
        payload.set_expires_at(&(now + Duration::from_secs(3600)));
        if let Some(jti) = jti {
            payload.set_jwt_id(jti);
        }
        let signer = RS256.signer_from_der(self.key.to_der_private_key())?;
        Ok(jwt::encode_with_signer(&payload, &header, &signer)?)
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
