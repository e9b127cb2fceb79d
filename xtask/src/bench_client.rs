//! Setting the scene through the registry's own API (services, published documents, accounts),
//! and the RS256 identity tokens of the federated scenarios.

use anyhow::{bail, Context, Result};
use josekit::jwk::alg::rsa::RsaKeyPair;
use josekit::jws::{JwsHeader, RS256};
use josekit::jwt::{self, JwtPayload};
use reqwest::blocking::Client;
use reqwest::Method;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime};

/// The audience the benchmark's identity tokens carry.
pub const AUDIENCE: &str = "registry";
/// The subject the benchmark's identity tokens carry.
pub const SUBJECT: &str = "repo:acme/app:ref:refs/heads/main";

/// `registry customer create`: the first static token of a new customer.
pub fn create_customer(binary: &Path, database_url: &str, tenant: &str) -> Result<String> {
    let out = Command::new(binary)
        .args([
            "customer", "create", "--tenant", tenant, "--plan", "business",
        ])
        .args([
            "--name",
            "Benchmark customer",
            "--database-url",
            database_url,
        ])
        .output()
        .context("running registry customer create")?;
    if !out.status.success() {
        bail!(
            "registry customer create failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let created: Value = serde_json::from_slice(&out.stdout)?;
    created["token"]
        .as_str()
        .map(str::to_owned)
        .context("no token in the output of customer create")
}

/// One registry's API, as one caller.
#[derive(Debug, Clone)]
pub struct Api {
    client: Client,
    base: String,
    /// The caller's bearer token.
    pub token: String,
}

impl Api {
    pub fn new(base: String, token: String) -> Result<Api> {
        let client = Client::builder().timeout(Duration::from_secs(30)).build()?;
        Ok(Api {
            client,
            base,
            token,
        })
    }

    /// Calls the API; the status and the JSON body (`null` when there is none).
    pub fn call(&self, method: Method, path: &str, body: Option<&Value>) -> Result<(u16, Value)> {
        let mut request = self
            .client
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().with_context(|| format!("calling {path}"))?;
        let status = response.status().as_u16();
        let text = response.text()?;
        Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
    }

    fn expect(&self, method: Method, path: &str, body: Option<&Value>, want: u16) -> Result<Value> {
        let (status, answer) = self.call(method.clone(), path, body)?;
        if status != want {
            bail!("{method} {path}: {status} (wanted {want}): {answer}");
        }
        Ok(answer)
    }

    /// Registers `{name}-{tenant}`; its subdomain.
    pub fn create_service(&self, name: &str) -> Result<String> {
        let created = self.expect(
            Method::POST,
            "/services",
            Some(&json!({"title": name, "serviceName": name})),
            201,
        )?;
        created["subdomain"]
            .as_str()
            .map(str::to_owned)
            .context("no subdomain in the created service")
    }

    /// Publishes a discovery document and a key set for a service.
    pub fn publish(&self, subdomain: &str, upload: &Value) -> Result<()> {
        self.expect(
            Method::PUT,
            &format!("/services/{subdomain}/config"),
            Some(upload),
            200,
        )?;
        Ok(())
    }

    /// Creates a service account; its id and (static accounts) token.
    pub fn create_account(&self, name: &str, policy: Value) -> Result<(String, Option<String>)> {
        let created = self.expect(
            Method::POST,
            "/service-accounts",
            Some(&json!({"name": name, "policy": policy})),
            201,
        )?;
        let id = created["id"].as_str().context("no account id")?.to_owned();
        Ok((id, created["token"].as_str().map(str::to_owned)))
    }

    /// Deletes a service account.
    pub fn delete_account(&self, id: &str) -> Result<()> {
        self.expect(
            Method::DELETE,
            &format!("/service-accounts/{id}"),
            None,
            204,
        )?;
        Ok(())
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
        let now = SystemTime::UNIX_EPOCH
            + Duration::from_secs(
                SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)?
                    .as_secs(),
            );
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

/// The policy of an `oidc` account that trusts this benchmark's tokens from `iss` on `services`.
pub fn oidc_policy(iss: &str, services: &[&str]) -> Value {
    json!({
        "kind": "oidc",
        "rules": [{
            "services": services,
            "claims": {"iss": iss, "aud": AUDIENCE, "sub": SUBJECT}
        }]
    })
}
