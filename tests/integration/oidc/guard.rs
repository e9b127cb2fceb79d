//! The SSRF guard and the fetch limits: schemes, addresses, redirects, response size.

use super::*;
use registry_tests::issuer::{TestIssuer, JWKS_ALT_PATH, JWKS_PATH};

/// A token for `iss`, signed by `issuer` (the signature never gets checked: the fetch is
/// refused first).
fn token_for(issuer: &TestIssuer, iss: &str) -> String {
    issuer.mint("ES256", claims(iss))
}

#[tokio::test]
async fn internal_issuers_are_refused_without_a_hang() {
    let issuer = TestIssuer::start();
    let verifier = secure_verifier();
    let port = issuer.port();
    let cases = [
        (format!("http://127.0.0.1:{port}"), "scheme must be https"),
        (format!("https://127.0.0.1:{port}"), "address is not public"),
        (
            "https://169.254.169.254".to_owned(),
            "address is not public",
        ),
        ("https://[::1]".to_owned(), "address is not public"),
        (
            "https://[::ffff:127.0.0.1]".to_owned(),
            "address is not public",
        ),
        ("https://10.0.0.1".to_owned(), "address is not public"),
        ("https://192.168.1.1".to_owned(), "address is not public"),
        ("https://100.64.0.1".to_owned(), "address is not public"),
        (
            "https://[fd00:ec2::254]".to_owned(),
            "address is not public",
        ),
        ("https://0.0.0.0".to_owned(), "address is not public"),
        ("https://2130706433".to_owned(), "address is not public"), // 127.0.0.1 as a number
        // Resolved at connect time by the guarded resolver: refused before any connection.
        (
            format!("https://localhost:{port}"),
            "which is not a public address",
        ),
        ("file:///etc/passwd".to_owned(), "scheme must be https"),
        ("not a url".to_owned(), "not a URL"),
    ];
    for (iss, expected) in cases {
        let (result, took) = timed(verify(&verifier, &token_for(&issuer, &iss))).await;
        assert_refused(result, expected);
        assert!(took < Duration::from_secs(2), "{iss} took {took:?}");
    }
    assert_eq!(
        issuer.discovery_fetches(),
        0,
        "nothing reached the loopback issuer"
    );
}

#[tokio::test]
async fn insecure_mode_admits_loopback_names_but_never_metadata() {
    let issuer = TestIssuer::start();
    // The same `localhost` issuer the secure verifier refuses works in insecure mode, so the
    // refusal above comes from the guard and not from the name.
    let iss = format!("http://localhost:{}", issuer.port());
    issuer.set_discovery_issuer(Some(&iss));
    verify(&verifier(), &token_for(&issuer, &iss))
        .await
        .unwrap();

    for metadata in [
        "http://169.254.169.254",
        "http://[fd00:ec2::254]",
        "http://[fe80::1]",
        "http://0.0.0.0",
    ] {
        let (result, took) = timed(verify(&verifier(), &token_for(&issuer, metadata))).await;
        assert_refused(result, "address is not public");
        assert!(took < Duration::from_secs(2));
    }
}

#[tokio::test]
async fn the_jwks_uri_is_guarded_too() {
    let cases = [
        (
            "http://169.254.169.254/latest/meta-data/",
            "address is not public",
        ),
        ("http://[::ffff:169.254.169.254]/", "address is not public"),
        ("ftp://127.0.0.1/jwks", "scheme must be https"),
        ("relative/jwks", "not a URL"),
    ];
    for (jwks_uri, expected) in cases {
        let issuer = TestIssuer::start();
        issuer.set_jwks_uri(Some(jwks_uri));
        let (result, took) = timed(verify(
            &verifier(),
            &issuer.mint("ES256", claims(&issuer.url())),
        ))
        .await;
        assert_refused(result, expected);
        assert!(took < Duration::from_secs(2));
        assert_eq!(issuer.discovery_fetches(), 1);
    }
}

#[tokio::test]
async fn responses_are_read_up_to_256_kib() {
    let over = TestIssuer::start();
    over.set_jwks_padding(300 * 1024);
    let token = over.mint("ES256", claims(&over.url()));
    assert_refused(verify(&verifier(), &token).await, "exceeds 262144 bytes");

    let under = TestIssuer::start();
    under.set_jwks_padding(200 * 1024);
    let token = under.mint("ES256", claims(&under.url()));
    verify(&verifier(), &token)
        .await
        .expect("a 200 KiB key set is read");
}

#[tokio::test]
async fn redirects_stay_on_the_same_host() {
    let issuer = TestIssuer::start();
    let token = issuer.mint("ES256", claims(&issuer.url()));
    // Same machine, other host name: refused.
    issuer.redirect_jwks(Some(&format!(
        "http://localhost:{}{JWKS_ALT_PATH}",
        issuer.port()
    )));
    assert_refused(
        verify(&verifier(), &token).await,
        "redirect to another host",
    );
    assert_eq!(issuer.fetches(JWKS_ALT_PATH), 0);

    issuer.redirect_jwks(Some(&format!("{}{JWKS_ALT_PATH}", issuer.url())));
    verify(&verifier(), &token)
        .await
        .expect("same-host redirect followed");
    assert_eq!(issuer.fetches(JWKS_ALT_PATH), 1);

    issuer.redirect_jwks(Some(JWKS_PATH));
    assert_refused(verify(&verifier(), &token).await, "too many redirects");
    assert!(
        issuer.fetches(JWKS_PATH) <= 2 + 4,
        "a redirect loop is cut short"
    );
}
