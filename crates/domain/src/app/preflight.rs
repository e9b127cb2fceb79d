//! Before a cloud refuses (docs/api.md, "Preflight"): what AWS, GCP and Azure would refuse of a
//! service's published documents, and of a token its workload would present. Reads only: nothing is
//! written, and the token is never stored nor logged.

use crate::app::{AppError, Registry};
use crate::preflight::{self, Jws, Published};
use crate::{Service, Violation};
use serde_json::Value;
use time::OffsetDateTime;

/// `GET /services/{s}/preflight[?issuer=…]`: the published documents, checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckDocuments {
    /// The issuer to describe (`?issuer=`): the subdomain's when `None`, or the service's
    /// custom domain's (docs/api.md, "Custom domains").
    pub issuer: Option<String>,
}

/// `POST /services/{s}/preflight[?issuer=…]`: the request body, `{"token": "<compact JWS>"}`.
#[derive(Clone, PartialEq)]
pub struct CheckToken {
    /// The request body (it holds a credential: never logged, hence no `Debug` of it).
    pub body: Value,
    /// The issuer to describe, as [`CheckDocuments::issuer`].
    pub issuer: Option<String>,
}

impl std::fmt::Debug for CheckToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckToken").finish_non_exhaustive()
    }
}

/// The documents `service` serves at `now`, as verifiers fetch them: the discovery document
/// pointed at the hosted issuer, and the uploaded keys followed by the retired keys still
/// published. `None` when nothing is published.
fn served(
    registry: &Registry,
    service: &Service,
    issuer: &str,
    now: OffsetDateTime,
) -> Result<Option<(Value, Value)>, AppError> {
    let Some(config) = registry.store.config(service.id)? else {
        return Ok(None);
    };
    let mut discovery: Value = serde_json::from_str(&config.openid_configuration)
        .map_err(|e| AppError::Store(crate::StoreError::Corrupt(e.to_string())))?;
    if let Some(doc) = discovery.as_object_mut() {
        if doc.get("issuer").and_then(Value::as_str) != Some(issuer) {
            crate::publishing::point_at(doc, issuer);
        }
    }
    let uploaded: Value = serde_json::from_str(&config.jwks)
        .map_err(|e| AppError::Store(crate::StoreError::Corrupt(e.to_string())))?;
    Ok(Some((discovery, config.keys.served(&uploaded, now))))
}

/// What each cloud would refuse or ignore of what `service` publishes at `now`.
pub fn documents(
    registry: &Registry,
    service: &Service,
    command: CheckDocuments,
    now: OffsetDateTime,
) -> Result<Value, AppError> {
    let issuer = crate::app::domains::issuer(registry, service, command.issuer.as_deref())?;
    let served = served(registry, service, &issuer, now)?;
    let published = served.as_ref().map(|(discovery, jwks)| Published {
        openid_configuration: discovery,
        jwks,
    });
    Ok(preflight::check_documents(&issuer, published.as_ref()).to_json())
}

/// [`documents`], and what each cloud would refuse of the command's token: its signature
/// checked against every key `service` publishes (current and retired), its header and claims
/// against each cloud's rules. A body without a compact JWS at `/token` is a 400.
pub fn token(
    registry: &Registry,
    service: &Service,
    command: CheckToken,
    now: OffsetDateTime,
) -> Result<Value, AppError> {
    let body = command.body.as_object().ok_or_else(|| {
        AppError::Invalid(vec![Violation::new(
            "",
            "the body must be {\"token\": \"<a JWT the workload would present>\"}",
        )])
    })?;
    // Every problem of the body at once: its unknown members and its token.
    let mut problems: Vec<Violation> = body
        .keys()
        .filter(|k| *k != "token")
        .map(|k| {
            let pointer = format!("/{}", crate::violation::escape_token(k));
            Violation::new(pointer, "unknown field: the body is {\"token\"}")
        })
        .collect();
    let token = match body.get("token") {
        Some(Value::String(text)) => Jws::parse(text.trim()).map(|jws| (text.trim(), jws)),
        Some(_) => Err("the token must be a string".into()),
        None => Err("the token is required".into()),
    };
    let (text, jws) = match token {
        Ok(token) if problems.is_empty() => token,
        Ok(_) => return Err(AppError::Invalid(problems)),
        Err(message) => {
            problems.push(Violation::new("/token", message));
            return Err(AppError::Invalid(problems));
        }
    };
    let issuer = crate::app::domains::issuer(registry, service, command.issuer.as_deref())?;
    let served = served(registry, service, &issuer, now)?;
    let published = served.as_ref().map(|(discovery, jwks)| Published {
        openid_configuration: discovery,
        jwks,
    });
    let signature = match &published {
        Some(published) => preflight::check_signature(published, &jws, |jwk| {
            registry.signatures.verifies(text, jwk)
        }),
        None => preflight::Signature::Unknown,
    };
    let report = preflight::check_token(&issuer, published.as_ref(), &jws, signature, now);
    let mut answer = report.to_json();
    answer["token"] = jws.summary();
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::testing::{caller, registry};
    use crate::app::{config, services};
    use crate::preflight::codes;
    use crate::Plan;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;
    use serde_json::json;
    use time::macros::datetime;

    const NOW: OffsetDateTime = datetime!(2026-11-25 10:00 UTC);

    fn jwt(header: Value, claims: Value) -> String {
        let part = |v: &Value| URL_SAFE_NO_PAD.encode(v.to_string());
        // The test registry's signature check accepts a signature reading "good".
        format!(
            "{}.{}.{}",
            part(&header),
            part(&claims),
            URL_SAFE_NO_PAD.encode("good")
        )
    }

    fn published_service() -> (Registry, Service, String) {
        let (registry, _, account) = registry(Plan::Business, NOW);
        let caller = caller(account);
        let command = services::CreateService {
            service_name: Some("k3s".into()),
            ..Default::default()
        };
        let service = services::create(&registry, &caller, command, NOW).unwrap();
        let mut n = vec![0xa5u8; 256];
        n[0] = 0xc3;
        let n = URL_SAFE_NO_PAD.encode(&n);
        let upload = |kid: &str| {
            let key = json!({"kty": "RSA", "kid": kid, "alg": "RS256", "e": "AQAB", "n": n});
            let body = crate::testing::upload_of(key, "RS256");
            config::publish(
                &registry,
                &caller,
                &service,
                config::PublishConfig {
                    body,
                    source: crate::keys::DEFAULT_SOURCE.into(),
                },
                NOW,
            )
            .unwrap();
        };
        upload("old");
        // Rotating "old" out retires it: it stays published.
        upload("new");
        let issuer = registry.issuer_of(&service.subdomain);
        (registry, service, issuer)
    }

    #[test]
    fn documents_are_checked_as_served_with_retired_keys() {
        let (registry, service, issuer) = published_service();
        let answer = documents(&registry, &service, CheckDocuments::default(), NOW).unwrap();
        assert_eq!(answer["issuer"], issuer.as_str());
        assert_eq!(answer["published"], true);
        // The default template is http:// with a port.
        let aws = answer["clouds"]["aws"]["findings"].to_string();
        assert!(aws.contains(codes::ISSUER_NOT_HTTPS), "{aws}");
        assert!(aws.contains(codes::ISSUER_HAS_PORT), "{aws}");
        assert_eq!(answer["clouds"]["gcp"]["ready"], false);
        assert!(!answer["clouds"]["gcp"]
            .to_string()
            .contains(codes::NO_USABLE_KEY));
    }

    #[test]
    fn nothing_published_is_an_answer_not_a_404() {
        let (registry, _, account) = registry(Plan::Business, NOW);
        let command = services::CreateService::default();
        let service = services::create(&registry, &caller(account), command, NOW).unwrap();
        let answer = documents(&registry, &service, CheckDocuments::default(), NOW).unwrap();
        assert_eq!(answer["published"], false);
        for cloud in ["aws", "gcp", "azure"] {
            assert!(answer["clouds"][cloud]
                .to_string()
                .contains(codes::NOT_PUBLISHED));
        }
    }

    #[test]
    fn a_token_is_checked_against_current_and_retired_keys() {
        let (registry, service, issuer) = published_service();
        let now = NOW.unix_timestamp();
        let claims = json!({"iss": issuer, "sub": "s", "aud": "sts.amazonaws.com", "iat": now, "exp": now + 600});
        for kid in ["new", "old"] {
            let token = jwt(json!({"alg": "RS256", "kid": kid}), claims.clone());
            let answer = token_check(&registry, &service, json!({"token": token}));
            let aws = answer["clouds"]["aws"].to_string();
            assert!(!aws.contains(codes::KEY_UNKNOWN), "{kid}: {aws}");
            assert!(!aws.contains(codes::SIGNATURE_INVALID), "{kid}: {aws}");
            assert_eq!(
                answer["token"]["header"],
                json!({"alg": "RS256", "kid": kid})
            );
        }
        let token = jwt(json!({"alg": "RS256", "kid": "never"}), claims);
        let answer = token_check(&registry, &service, json!({"token": token}));
        assert!(answer["clouds"]["azure"]
            .to_string()
            .contains(codes::KEY_UNKNOWN));
    }

    fn token_check(registry: &Registry, service: &Service, body: Value) -> Value {
        token(registry, service, CheckToken { body, issuer: None }, NOW).unwrap()
    }

    #[test]
    fn a_body_without_a_jws_is_invalid_at_token() {
        let (registry, service, _) = published_service();
        for body in [
            json!({"token": "not.a-jws"}),
            json!({"token": 3}),
            json!({}),
        ] {
            let refused =
                token(&registry, &service, CheckToken { body, issuer: None }, NOW).unwrap_err();
            let AppError::Invalid(violations) = refused else {
                panic!("{refused:?}")
            };
            assert_eq!(violations[0].pointer, "/token");
        }
        let extra = json!({"token": "a.b.c", "more": 1});
        let refused = token(
            &registry,
            &service,
            CheckToken {
                body: extra,
                issuer: None,
            },
            NOW,
        )
        .unwrap_err();
        assert!(matches!(refused, AppError::Invalid(v) if v[0].pointer == "/more"));
        // Every problem at once, each at its escaped pointer.
        let both = json!({"token": "abc", "a/b": 1});
        let refused = token(
            &registry,
            &service,
            CheckToken {
                body: both,
                issuer: None,
            },
            NOW,
        );
        let Err(AppError::Invalid(violations)) = refused else {
            panic!("{refused:?}")
        };
        let pointers: Vec<&str> = violations.iter().map(|v| v.pointer.as_str()).collect();
        assert_eq!(pointers, ["/a~1b", "/token"]);
    }

    #[test]
    fn the_summary_shows_only_the_listed_members() {
        let (registry, service, issuer) = published_service();
        let token = jwt(
            json!({"alg": "RS256", "kid": "new", "typ": "JWT"}),
            json!({"iss": issuer, "secret": "x", "exp": 1}),
        );
        let answer = token_check(&registry, &service, json!({"token": token.clone()}));
        assert!(!answer.to_string().contains("secret"));
        assert!(!answer.to_string().contains(&token));
        assert!(answer["clouds"]["gcp"]
            .to_string()
            .contains(codes::TOKEN_EXPIRED));
    }
}
