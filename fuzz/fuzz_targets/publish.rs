//! Published configurations: `registry_domain::publishing::publish` (validate + rewrite).
//!
//! Input: any bytes; those that are JSON are taken as a PUT /services/{s}/config body. Checked
//! for every accepted upload: the hosted `issuer` and `jwks_uri` replaced the uploaded ones, the
//! five required discovery members are there, no private or symmetric key material got through,
//! the key set is kept as uploaded, and publishing the result again is accepted unchanged with no
//! issuer or rotation warning (what a client that re-uploads the GET /config answer does).
#![no_main]

use libfuzzer_sys::fuzz_target;
use registry_domain::publishing::{jwks_uri, key_ids, publish};
use serde_json::{json, Value};

const ISSUER: &str = "https://api-acme.registry.example";
const PRIVATE: [&str; 9] = ["d", "p", "q", "dp", "dq", "qi", "oth", "k", "priv"];
const REQUIRED: [&str; 5] = [
    "issuer",
    "jwks_uri",
    "response_types_supported",
    "subject_types_supported",
    "id_token_signing_alg_values_supported",
];

fuzz_target!(|data: &[u8]| {
    let Ok(upload) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let previous = vec!["k1".to_owned()];
    for previous_kids in [None, Some(previous.as_slice())] {
        let Ok(published) = publish(&upload, ISSUER, previous_kids) else {
            continue;
        };
        let config = &published.openid_configuration;
        assert_eq!(config["issuer"], ISSUER);
        assert_eq!(config["jwks_uri"], jwks_uri(ISSUER).as_str());
        for member in REQUIRED {
            assert!(
                config.get(member).is_some(),
                "{member} missing from {config}"
            );
        }
        assert_eq!(
            published.jwks, upload["jwks"],
            "the key set must be kept as uploaded"
        );
        let keys = published.jwks["keys"]
            .as_array()
            .expect("accepted sets have keys");
        assert!(!keys.is_empty() && keys.len() <= 100);
        for key in keys {
            let key = key.as_object().expect("accepted keys are objects");
            assert_ne!(
                key.get("kty"),
                Some(&json!("oct")),
                "a symmetric key was accepted"
            );
            for member in PRIVATE {
                assert!(
                    !key.contains_key(member),
                    "private member {member} was accepted"
                );
            }
        }
        let kids = key_ids(&published.jwks);
        let again = publish(
            &json!({"openidConfiguration": config, "jwks": published.jwks}),
            ISSUER,
            Some(&kids),
        )
        .unwrap_or_else(|e| panic!("re-publishing the published result failed: {e:?}"));
        assert_eq!(&again.openid_configuration, config);
        assert!(
            again.warnings.iter().all(|w| w.contains("\"none\"")),
            "re-publishing warned: {:?}",
            again.warnings
        );
    }
});
