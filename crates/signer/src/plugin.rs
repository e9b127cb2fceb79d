//! The gRPC service: kube-apiserver's three calls, answered through the registry's API and the
//! copy of the keys.

use crate::keys::KeyCopy;
use crate::proto::external_jwt_signer_server::ExternalJwtSigner;
use crate::proto::{
    FetchKeysRequest, FetchKeysResponse, MetadataRequest, MetadataResponse, SignJwtRequest,
    SignJwtResponse,
};
use registry_client::{ClientError, RegistryApi};
use std::sync::Arc;
use std::time::Duration;
use tonic::{Code, Request, Response, Status};

/// How often kube-apiserver is asked to call `FetchKeys` again, in seconds.
pub(crate) const REFRESH_HINT_SECONDS: i64 = 60;

/// The longest `Sign` waits for the copy to read a key it lacks, before it answers anyway.
const LEARN_WITHIN: Duration = Duration::from_secs(5);

/// The plugin's answers for one service.
#[derive(Debug)]
pub(crate) struct Plugin {
    api: RegistryApi,
    service: String,
    keys: Arc<KeyCopy>,
}

impl Plugin {
    /// The plugin of `service`.
    pub(crate) fn new(api: RegistryApi, service: String, keys: Arc<KeyCopy>) -> Self {
        Self { api, service, keys }
    }
}

#[tonic::async_trait]
impl ExternalJwtSigner for Plugin {
    async fn sign(
        &self,
        request: Request<SignJwtRequest>,
    ) -> Result<Response<SignJwtResponse>, Status> {
        let claims = request.into_inner().claims;
        let signature = self
            .api
            .sign(&self.service, &claims)
            .await
            .map_err(|e| sign_failed(&self.service, &e))?;
        // A key the copy lacks (a compromised rotation's, signing at once): kube-apiserver asks
        // FetchKeys for it when it meets the token, so the copy reads it before the answer.
        if !self.keys.knows(&signature.kid) {
            tracing::info!(
                service = self.service,
                kid = signature.kid,
                "signed with a key the copy lacks: reading the keys again"
            );
            self.keys.learn(&signature.kid, LEARN_WITHIN).await;
        }
        Ok(Response::new(SignJwtResponse {
            header: signature.header,
            signature: signature.signature,
        }))
    }

    async fn fetch_keys(
        &self,
        _: Request<FetchKeysRequest>,
    ) -> Result<Response<FetchKeysResponse>, Status> {
        let snapshot = self.keys.snapshot().ok_or_else(|| never_read(&self.keys))?;
        Ok(Response::new(FetchKeysResponse {
            keys: snapshot.keys.clone(),
            data_timestamp: Some(snapshot.read_at.into()),
            refresh_hint_seconds: REFRESH_HINT_SECONDS,
        }))
    }

    async fn metadata(
        &self,
        _: Request<MetadataRequest>,
    ) -> Result<Response<MetadataResponse>, Status> {
        let snapshot = self.keys.snapshot().ok_or_else(|| never_read(&self.keys))?;
        let max_token_expiration_seconds = snapshot.max_token_seconds.ok_or_else(|| {
            Status::unavailable(format!(
                "signing is off for the service {}: turn it on with PUT /services/{{s}}/signing",
                self.service
            ))
        })?;
        Ok(Response::new(MetadataResponse {
            max_token_expiration_seconds,
        }))
    }
}

/// The copy has never been read: why the last read failed, when one did.
fn never_read(keys: &KeyCopy) -> Status {
    let reason = keys
        .failure()
        .map(|r| format!(" ({r})"))
        .unwrap_or_default();
    Status::unavailable(format!(
        "the plugin has not read the keys from the registry yet{reason}: it tries again every 10 s"
    ))
}

/// A failed `Sign`, with the problem's detail: the registry refusing the claims (a 400) is
/// `INVALID_ARGUMENT`; refusing the plugin's credential `UNAUTHENTICATED` (401) or
/// `PERMISSION_DENIED` (403); signing off or no such service `FAILED_PRECONDITION` (404); no key
/// safe yet (409) `UNAVAILABLE` and the signature budget spent (429) `RESOURCE_EXHAUSTED`, both
/// worth another try later; a registry that cannot be reached, answers a 5xx or an answer that is
/// not a signature is `UNAVAILABLE` with the reason. Logged without the claims.
fn sign_failed(service: &str, error: &ClientError) -> Status {
    match error {
        ClientError::Refused { problem, .. } if (400..500).contains(&problem.status) => {
            tracing::info!(
                service,
                status = problem.status,
                problem = problem.slug,
                "the registry refused to sign"
            );
            let code = match problem.status {
                401 => Code::Unauthenticated,
                403 => Code::PermissionDenied,
                404 => Code::FailedPrecondition,
                409 => Code::Unavailable,
                429 => Code::ResourceExhausted,
                _ => Code::InvalidArgument,
            };
            let message = format!(
                "the registry refused to sign ({} {}): {}",
                problem.status, problem.slug, problem.detail
            );
            Status::new(code, message)
        }
        other => {
            tracing::warn!(service, error = %other, "cannot sign");
            Status::unavailable(other.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::external_jwt_signer_client::ExternalJwtSignerClient;
    use crate::proto::Key;
    use crate::testing::{api_at, nowhere, FakeRegistry, TempDir};
    use crate::Signer;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
    use base64::Engine as _;
    use openssl::ec::{EcGroup, EcKey};
    use openssl::nid::Nid;
    use openssl::pkey::PKey;
    use openssl::rsa::Rsa;
    use serde_json::{json, Value};
    use tokio::sync::oneshot;
    use tonic::transport::{Channel, Endpoint};

    const SIGNING: &str = "/services/k3s-acme/signing";
    const KEYS: &str = "/services/k3s-acme/keys";
    const SIGN: &str = "/services/k3s-acme/sign";

    /// A managed key: its kid, DER, and its entry in `GET …/signing`.
    fn managed(kid: &str, state: &str) -> (Vec<u8>, Value) {
        let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap();
        let der = PKey::from_ec_key(EcKey::generate(&group).unwrap())
            .unwrap()
            .public_key_to_der()
            .unwrap();
        let entry = json!({
            "kid": kid, "state": state, "algorithm": "ES256",
            "createdAt": "2026-11-29T09:50:00Z", "safeToSignAt": null, "signingSince": null,
            "lastSignedAt": null, "withdrawAt": null, "publicKey": STANDARD.encode(&der),
        });
        (der, entry)
    }

    /// An uploaded RSA key: its DER and its JWK.
    fn uploaded(kid: &str) -> (Vec<u8>, Value) {
        let rsa = Rsa::generate(2048).unwrap();
        let jwk = json!({
            "kty": "RSA", "kid": kid, "alg": "RS256", "use": "sig",
            "n": URL_SAFE_NO_PAD.encode(rsa.n().to_vec()),
            "e": URL_SAFE_NO_PAD.encode(rsa.e().to_vec()),
        });
        (
            PKey::from_rsa(rsa).unwrap().public_key_to_der().unwrap(),
            jwk,
        )
    }

    fn signing(keys: &[&Value]) -> Value {
        json!({
            "algorithm": "ES256", "rotationPeriodSeconds": 2592000, "maxTokenSeconds": 86400,
            "leadSeconds": 600, "nextRotationAt": "2026-12-29T10:00:00Z", "keys": keys,
        })
    }

    fn listed(kid: &str, state: &str, source: &str) -> Value {
        json!({"kid": kid, "kty": "RSA", "thumbprint": "t", "state": state, "source": source,
               "sources": [source], "firstPublishedAt": "2026-11-29T09:50:00Z"})
    }

    /// An entry of `GET …/keys` with its public `jwk`, as the registry lists every key.
    fn listed_jwk(jwk: &Value, state: &str, source: &str) -> Value {
        let mut entry = listed(jwk["kid"].as_str().unwrap(), state, source);
        entry["jwk"] = jwk.clone();
        entry
    }

    fn key(kid: &str, der: &[u8]) -> Key {
        Key {
            key_id: kid.into(),
            key: der.to_vec(),
            exclude_from_oidc_discovery: false,
        }
    }

    /// A plugin serving on a fresh socket, its copy, and what stops it.
    struct Running {
        client: ExternalJwtSignerClient<Channel>,
        keys: Arc<KeyCopy>,
        stop: oneshot::Sender<()>,
        served: tokio::task::JoinHandle<Result<(), crate::SignerError>>,
        _dir: TempDir,
    }

    impl Running {
        async fn start(api: RegistryApi) -> Self {
            let dir = TempDir::new();
            let path = dir.path().join("signer.sock");
            let signer = Signer::bind(api, "k3s-acme".into(), path.clone())
                .await
                .unwrap();
            let keys = Arc::clone(&signer.keys);
            let (stop, stopped) = oneshot::channel::<()>();
            let served = tokio::spawn(signer.serve_until(async {
                let _ = stopped.await;
            }));
            let channel = Endpoint::from_shared(format!("unix:{}", path.display()))
                .unwrap()
                .connect()
                .await
                .unwrap();
            Self {
                client: ExternalJwtSignerClient::new(channel),
                keys,
                stop,
                served,
                _dir: dir,
            }
        }

        async fn fetch_keys(&mut self) -> Result<FetchKeysResponse, Status> {
            (self.client.fetch_keys(FetchKeysRequest {}).await).map(Response::into_inner)
        }

        async fn sign(&mut self, claims: &str) -> Result<SignJwtResponse, Status> {
            let request = SignJwtRequest {
                claims: claims.into(),
            };
            self.client.sign(request).await.map(Response::into_inner)
        }

        async fn stop(self) {
            drop(self.client);
            self.stop.send(()).unwrap();
            self.served.await.unwrap().unwrap();
        }
    }

    #[tokio::test]
    async fn a_termination_stops_the_plugin_though_kube_apiserver_stays_connected() {
        let registry = FakeRegistry::start().await;
        let mut running = Running::start(registry.api()).await;
        // One call, so that the connection is open and in use, as kube-apiserver keeps it.
        let _ = running.fetch_keys().await;
        running.stop.send(()).unwrap();
        let stopped =
            tokio::time::timeout(std::time::Duration::from_secs(10), running.served).await;
        assert!(stopped.is_ok(), "the plugin waited for its client to leave");
        drop(running.client);
    }

    #[tokio::test]
    async fn metadata_fetch_keys_and_sign_answer_through_the_registry() {
        let registry = FakeRegistry::start().await;
        let (m1, m1_entry) = managed("m1", "current");
        let (m2, m2_entry) = managed("m2", "next");
        let (u1, u1_jwk) = uploaded("u1");
        let okp = json!({"kty": "OKP", "crv": "Ed25519", "kid": "o1", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"});
        registry.set("GET", SIGNING, 200, signing(&[&m1_entry, &m2_entry]));
        let inventory = json!({"keys": [
            listed("m1", "current", "managed"), listed("m2", "current", "managed"),
            listed_jwk(&u1_jwk, "current", "blue"), listed_jwk(&okp, "current", "blue"),
        ]});
        registry.set("GET", KEYS, 200, inventory);
        registry.set(
            "POST",
            SIGN,
            200,
            json!({"header": "eyJhbGciOiJFUzI1NiJ9", "signature": "c2ln", "kid": "m1"}),
        );
        let mut plugin = Running::start(registry.api()).await;

        let metadata = plugin.client.metadata(MetadataRequest {}).await.unwrap();
        assert_eq!(metadata.into_inner().max_token_expiration_seconds, 86400);

        let fetched = plugin.fetch_keys().await.unwrap();
        assert_eq!(
            fetched.keys,
            [key("m1", &m1), key("m2", &m2), key("u1", &u1)],
            "managed keys in every state, then the uploaded keys kube-apiserver can verify with"
        );
        assert_eq!(fetched.refresh_hint_seconds, 60);
        let read_at = plugin.keys.snapshot().unwrap().read_at;
        assert_eq!(fetched.data_timestamp, Some(read_at.into()));

        let signed = plugin.sign("eyJpc3MiOiJ4In0").await.unwrap();
        assert_eq!(
            (signed.header.as_str(), signed.signature.as_str()),
            ("eyJhbGciOiJFUzI1NiJ9", "c2ln")
        );
        let calls = registry.calls();
        let sign_call = calls
            .iter()
            .find(|(m, p, _)| m == "POST" && p == SIGN)
            .unwrap();
        assert_eq!(sign_call.2, json!({"claims": "eyJpc3MiOiJ4In0"}));
        plugin.stop().await;
        registry.stop().await;
    }

    #[tokio::test]
    async fn fetch_keys_answers_the_last_copy_while_the_registry_is_unreachable() {
        let registry = FakeRegistry::start().await;
        let (m1, m1_entry) = managed("m1", "current");
        registry.set("GET", SIGNING, 200, signing(&[&m1_entry]));
        registry.set(
            "GET",
            KEYS,
            200,
            json!({"keys": [listed("m1", "current", "managed")]}),
        );
        let mut plugin = Running::start(registry.api()).await;
        let before = plugin.fetch_keys().await.unwrap();
        assert_eq!(before.keys, [key("m1", &m1)]);

        registry.stop().await;
        let reason = plugin.keys.refresh().await.unwrap_err();
        assert!(reason.starts_with("cannot reach the registry"), "{reason}");
        let after = plugin.fetch_keys().await.unwrap();
        assert_eq!(after, before, "the same keys, read at the same time");
        let metadata = plugin.client.metadata(MetadataRequest {}).await.unwrap();
        assert_eq!(metadata.into_inner().max_token_expiration_seconds, 86400);

        let refused = plugin.sign("eyJpc3MiOiJ4In0").await.unwrap_err();
        assert_eq!(refused.code(), Code::Unavailable);
        assert!(refused
            .message()
            .starts_with("cannot reach the registry at http://"));
        plugin.stop().await;
    }

    #[tokio::test]
    async fn before_any_read_fetch_keys_and_metadata_are_unavailable_with_the_reason() {
        let mut plugin = Running::start(api_at(&nowhere().await)).await;
        let refused = plugin.fetch_keys().await.unwrap_err();
        assert_eq!(refused.code(), Code::Unavailable);
        assert!(
            refused
                .message()
                .contains("(cannot reach the registry at http://"),
            "{}",
            refused.message()
        );
        let metadata = plugin
            .client
            .metadata(MetadataRequest {})
            .await
            .unwrap_err();
        assert_eq!(metadata.code(), Code::Unavailable);
        plugin.stop().await;
    }

    #[tokio::test]
    async fn a_refusal_of_the_claims_is_invalid_argument_and_a_failing_registry_unavailable() {
        let registry = FakeRegistry::start().await;
        let (_, m1_entry) = managed("m1", "current");
        registry.set("GET", SIGNING, 200, signing(&[&m1_entry]));
        registry.set("GET", KEYS, 200, json!({"keys": []}));
        let problem = json!({
            "type": "http://registry.test/problems/invalid-claims",
            "detail": "exp is more than maxTokenSeconds after iat",
        });
        registry.set("POST", SIGN, 400, problem);
        let mut plugin = Running::start(registry.api()).await;
        let refused = plugin.sign("eyJleHAiOjF9").await.unwrap_err();
        assert_eq!(refused.code(), Code::InvalidArgument);
        assert_eq!(
            refused.message(),
            "the registry refused to sign (400 invalid-claims): exp is more than maxTokenSeconds after iat"
        );
        // Refusals that are not the claims': each its own code.
        for (status, slug, code) in [
            (409, "no-key-ready", Code::Unavailable),
            (429, "rate-limited", Code::ResourceExhausted),
            (401, "unauthorized", Code::Unauthenticated),
            (403, "action-not-allowed", Code::PermissionDenied),
            (404, "not-found", Code::FailedPrecondition),
        ] {
            let problem =
                json!({"type": format!("http://registry.test/problems/{slug}"), "detail": "why"});
            registry.set("POST", SIGN, status, problem);
            let refused = plugin.sign("eyJleHAiOjF9").await.unwrap_err();
            assert_eq!(refused.code(), code, "{status}");
            assert!(
                refused
                    .message()
                    .ends_with(&format!("({status} {slug}): why")),
                "{}",
                refused.message()
            );
        }
        registry.set("POST", SIGN, 503, json!({"type": "http://registry.test/problems/unavailable", "detail": "the primary is down"}));
        let failed = plugin.sign("eyJleHAiOjF9").await.unwrap_err();
        assert_eq!(failed.code(), Code::Unavailable);
        assert!(
            failed.message().contains("the primary is down"),
            "{}",
            failed.message()
        );
        registry.set("POST", SIGN, 200, json!({"header": "eyJh"}));
        assert_eq!(
            plugin.sign("eyJleHAiOjF9").await.unwrap_err().code(),
            Code::Unavailable
        );
        plugin.stop().await;
        registry.stop().await;
    }

    #[tokio::test]
    async fn a_signature_by_a_key_the_copy_lacks_is_answered_once_the_copy_has_it() {
        let registry = FakeRegistry::start().await;
        let (m1, m1_entry) = managed("m1", "current");
        registry.set("GET", SIGNING, 200, signing(&[&m1_entry]));
        registry.set(
            "GET",
            KEYS,
            200,
            json!({"keys": [listed("m1", "current", "managed")]}),
        );
        let mut plugin = Running::start(registry.api()).await;

        // A compromised rotation: the new key signs at once, the old one is withdrawn.
        let (m2, m2_entry) = managed("m2", "current");
        registry.set("GET", SIGNING, 200, signing(&[&m2_entry]));
        registry.set(
            "GET",
            KEYS,
            200,
            json!({"keys": [listed("m2", "current", "managed")]}),
        );
        registry.set(
            "POST",
            SIGN,
            200,
            json!({"header": "eyJh", "signature": "c2ln", "kid": "m2"}),
        );
        assert_eq!(plugin.fetch_keys().await.unwrap().keys, [key("m1", &m1)]);
        plugin.sign("eyJpc3MiOiJ4In0").await.unwrap();
        assert_eq!(
            plugin.fetch_keys().await.unwrap().keys,
            [key("m2", &m2)],
            "read before Sign answered, not 10 s later"
        );
        plugin.stop().await;
        registry.stop().await;
    }

    #[tokio::test]
    async fn a_kid_published_again_with_other_material_is_answered_with_the_new() {
        let registry = FakeRegistry::start().await;
        let (m1, m1_entry) = managed("m1", "current");
        let (old, old_jwk) = uploaded("u1");
        registry.set("GET", SIGNING, 200, signing(&[&m1_entry]));
        let inventory = |jwk: &Value| json!({"keys": [listed("m1", "current", "managed"), listed_jwk(jwk, "current", "blue")]});
        registry.set("GET", KEYS, 200, inventory(&old_jwk));
        let mut plugin = Running::start(registry.api()).await;
        assert_eq!(
            plugin.fetch_keys().await.unwrap().keys,
            [key("m1", &m1), key("u1", &old)]
        );
        // u1 was withdrawn (compromised) and a new key published under its kid.
        let (new, new_jwk) = uploaded("u1");
        registry.set("GET", KEYS, 200, inventory(&new_jwk));
        plugin.keys.refresh().await.unwrap();
        assert_eq!(
            plugin.fetch_keys().await.unwrap().keys,
            [key("m1", &m1), key("u1", &new)]
        );
        plugin.stop().await;
        registry.stop().await;
    }

    #[tokio::test]
    async fn retired_keys_are_answered_met_or_not_and_one_without_material_is_left_out() {
        let registry = FakeRegistry::start().await;
        let (m1, m1_entry) = managed("m1", "current");
        let (u1, u1_jwk) = uploaded("u1");
        let (u2, u2_jwk) = uploaded("u2");
        let (r0, r0_jwk) = uploaded("r0");
        registry.set("GET", SIGNING, 200, signing(&[&m1_entry]));
        let inventory = json!({"keys": [
            listed("m1", "current", "managed"), listed_jwk(&u1_jwk, "current", "blue"),
            listed_jwk(&r0_jwk, "retired", "blue"), listed("x0", "retired", "blue"),
        ]});
        registry.set("GET", KEYS, 200, inventory);
        let mut plugin = Running::start(registry.api()).await;
        assert_eq!(
            plugin.fetch_keys().await.unwrap().keys,
            [key("m1", &m1), key("u1", &u1), key("r0", &r0)],
            "r0 retired before the plugin met it; x0 listed without material"
        );

        // Blue uploads u2: u1 retires; r0's time runs out.
        let inventory = json!({"keys": [
            listed("m1", "current", "managed"), listed_jwk(&u2_jwk, "current", "blue"),
            listed_jwk(&u1_jwk, "retired", "blue"),
        ]});
        registry.set("GET", KEYS, 200, inventory);
        plugin.keys.refresh().await.unwrap();
        assert_eq!(
            plugin.fetch_keys().await.unwrap().keys,
            [key("m1", &m1), key("u2", &u2), key("u1", &u1)]
        );

        // Signing turned off: the managed key stays listed until its withdrawAt.
        registry.set(
            "GET",
            SIGNING,
            404,
            json!({"type": "http://registry.test/problems/not-found", "detail": "signing is off"}),
        );
        plugin.keys.refresh().await.unwrap();
        let keys = plugin.fetch_keys().await.unwrap().keys;
        assert_eq!(keys, [key("m1", &m1), key("u2", &u2), key("u1", &u1)]);
        let metadata = plugin.client.metadata(MetadataRequest {}).await.unwrap();
        assert_eq!(metadata.into_inner().max_token_expiration_seconds, 86400);
        plugin.stop().await;
        registry.stop().await;
    }
}
