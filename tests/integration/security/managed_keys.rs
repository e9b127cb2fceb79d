//! The private keys of managed signing (docs/api.md, "Managed signing") appear in no response, no
//! log line and no database column in clear: the test opens the sealed keys with the data key (as
//! only the registry can), takes each key's private numbers, and searches for every encoding of
//! them (hex, base64, base64url at each alignment of their DER) in every answer it got, the
//! server's whole log and the whole database dump.

use super::secrets::dump;
use crate::api::register_service;
use crate::api::signing::{account_for, payload, sign, turn_on, DATA_KEY};
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use openssl::pkey::PKey;
use registry_acme::DataKey;
use registry_tests::server::{ServerOptions, TestServer};
use reqwest::Method;
use serde_json::json;
use std::time::{SystemTime, UNIX_EPOCH};

/// Every string a leak of `secret` (bytes inside the DER `der`) would contain: 16-character
/// pieces of its hex, and of the base64 and base64url of the DER from each of the three
/// alignments at which its bytes may start.
fn pieces(secret: &[u8], der: &[u8]) -> Vec<String> {
    let mut encodings: Vec<String> = vec![secret.iter().map(|b| format!("{b:02x}")).collect()];
    let start = (0..der.len())
        .find(|i| der[*i..].starts_with(secret))
        .expect("the secret is in its DER");
    for k in 0..3 {
        let bytes = &der[start + k..start + secret.len()];
        encodings.push(STANDARD.encode(bytes));
        encodings.push(URL_SAFE_NO_PAD.encode(bytes));
    }
    let mut pieces = Vec::new();
    for encoding in encodings {
        // The first and last characters of a base64 text depend on its neighbours: inside only.
        let inner: Vec<char> = encoding.chars().skip(2).collect();
        for window in inner.windows(16).step_by(4) {
            pieces.push(window.iter().collect());
        }
    }
    pieces
}

/// The private numbers of a PKCS#8 key: EC's scalar, RSA's `d`, `p` and `q`.
fn private_numbers(pkcs8: &[u8]) -> Vec<Vec<u8>> {
    let key = PKey::private_key_from_pkcs8(pkcs8).unwrap();
    match (key.ec_key(), key.rsa()) {
        (Ok(ec), _) => vec![ec.private_key().to_vec()],
        (_, Ok(rsa)) => vec![
            rsa.d().to_vec(),
            rsa.p().unwrap().to_vec(),
            rsa.q().unwrap().to_vec(),
        ],
        _ => panic!("neither EC nor RSA"),
    }
}

#[test]
fn managed_private_keys_are_in_no_answer_log_or_column_in_clear() {
    let server = TestServer::start_with(ServerOptions::binary(&[("REGISTRY_DATA_KEY", DATA_KEY)]));
    let acme = server.customer("acme", "business");
    let mut answers = Vec::new();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    for (name, algorithm) in [("ec", "ES256"), ("rsa", "RS256")] {
        let sub = register_service(&server, &acme, name);
        let state = turn_on(
            &server,
            &acme.token,
            &sub,
            json!({"leadSeconds": 0, "algorithm": algorithm}),
        );
        answers.push(state.to_string());
        let signer = account_for(&server, &acme, &sub, &["tokens:sign", "config:read"]);
        let (status, signed) = sign(
            &server,
            &signer,
            &sub,
            &payload(&server.issuer(&sub), now, 600),
        );
        assert_eq!(status, 200, "{signed}");
        answers.push(signed.to_string());
        for (method, path) in [
            (Method::POST, format!("/services/{sub}/signing/rotate")),
            (Method::GET, format!("/services/{sub}/signing")),
            (Method::GET, format!("/services/{sub}/keys")),
            (Method::GET, format!("/services/{sub}/config")),
            (Method::GET, "/audit-events".to_owned()),
        ] {
            let response = server.authed(method, &path, &acme.token).send().unwrap();
            let headers = format!("{:?}", response.headers());
            answers.push(format!("{headers}\n{}", response.text().unwrap()));
        }
        for path in ["/openid/v1/jwks", "/.well-known/openid-configuration"] {
            let response = server.hosted(Method::GET, &sub, path).send().unwrap();
            answers.push(response.text().unwrap());
        }
    }
    answers.push(server.metrics_text());
    let database = dump(&server.database_url);
    let log = server.final_log();

    // Every private key the registry holds, opened as only it can.
    let sealed: Vec<&str> = database
        .split("\"sealed\":\"")
        .skip(1)
        .map(|rest| rest.split('"').next().unwrap())
        .collect();
    assert_eq!(sealed.len(), 4, "two services, two keys each");
    let data_key = DataKey::from_base64(DATA_KEY).unwrap();
    let mut searched = 0;
    for sealed in sealed {
        let pkcs8 = data_key.open(sealed).expect("sealed under the data key");
        for number in private_numbers(&pkcs8) {
            for piece in pieces(&number, &pkcs8) {
                for (what, text) in [("the database", &database), ("the log", &log)] {
                    assert!(
                        !text.contains(&piece),
                        "{what} holds a piece of a private key: {piece}"
                    );
                }
                for answer in &answers {
                    assert!(
                        !answer.contains(&piece),
                        "an answer holds a piece of a private key"
                    );
                }
                searched += 1;
            }
        }
    }
    assert!(searched > 100, "{searched} pieces searched");
}
