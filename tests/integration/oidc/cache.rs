//! The key cache: warm verifications, rotation, single flight, outages, freshness.

use super::*;
use registry_oidc::OidcMetrics;
use registry_tests::issuer::{Behaviour, KeyKind, TestIssuer, JWKS_PATH};

#[tokio::test]
async fn a_warm_verification_makes_no_fetch() {
    let issuer = TestIssuer::start();
    let verifier = verifier();
    let first = issuer.mint("RS256", claims(&issuer.url()));
    verify(&verifier, &first).await.unwrap();
    assert_eq!((issuer.discovery_fetches(), issuer.jwks_fetches()), (1, 1));
    for alg in ["RS256", "PS384", "ES256", "ES384", "EdDSA"] {
        let token = issuer.mint(alg, claims(&issuer.url()));
        verify(&verifier, &token).await.unwrap();
    }
    assert_eq!((issuer.discovery_fetches(), issuer.jwks_fetches()), (1, 1));
    assert_eq!(
        verifier.metrics(),
        OidcMetrics {
            key_fetches: 1,
            key_fetch_failures: 0,
            cache_hits: 5
        }
    );
}

#[tokio::test]
async fn rotated_keys_are_fetched_once_per_refetch_interval() {
    let issuer = TestIssuer::start_with(&[KeyKind::Rsa]);
    let verifier = verifier();
    let old = issuer.mint("RS256", claims(&issuer.url()));
    verify(&verifier, &old).await.unwrap();

    issuer.rotate_keys();
    let rotated = issuer.mint("RS256", claims(&issuer.url()));
    verify(&verifier, &rotated)
        .await
        .expect("the unknown kid refetches");
    assert_eq!(issuer.jwks_fetches(), 2);
    // The old key left the published set, so it left the cache.
    assert_refused(verify(&verifier, &old).await, "no key with kid \"rsa-1\"");

    issuer.rotate_keys();
    let again = issuer.mint("RS256", claims(&issuer.url()));
    assert_refused(verify(&verifier, &again).await, "no key with kid");
    assert_refused(verify(&verifier, &again).await, "no key with kid");
    assert_eq!(
        issuer.jwks_fetches(),
        2,
        "a second unknown kid within 30 s must not refetch"
    );
    // Known keys keep working meanwhile.
    verify(&verifier, &rotated).await.unwrap();
    assert_eq!(verifier.fetch_count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_cold_verifications_share_one_fetch() {
    let issuer = TestIssuer::start();
    issuer.set_behaviour(Behaviour::Slow(Duration::from_millis(300)));
    let verifier = verifier();
    let algs = [
        "RS256", "PS256", "ES256", "ES384", "EdDSA", "RS512", "PS512", "ES256",
    ];
    let mut tasks = tokio::task::JoinSet::new();
    for alg in algs.iter().cycle().take(24) {
        let (verifier, token) = (verifier.clone(), issuer.mint(alg, claims(&issuer.url())));
        tasks.spawn(async move { verify(&verifier, &token).await.map(|_| ()) });
    }
    while let Some(result) = tasks.join_next().await {
        result.unwrap().unwrap();
    }
    assert_eq!((issuer.discovery_fetches(), issuer.jwks_fetches()), (1, 1));
    assert_eq!(verifier.fetch_count(), 1);

    // Likewise for a new kid on a warm cache, including callers arriving while the refetch
    // is under way (they must wait for it, not refuse on the keys it is replacing).
    let added = issuer.add_key(KeyKind::P256);
    let header = json!({"alg": "ES256", "kid": added.kid()});
    let token = registry_tests::issuer::compact(&header, &claims(&issuer.url()), |m| {
        added.sign("ES256", m)
    });
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..8 {
        if i == 1 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (verifier, token) = (verifier.clone(), token.clone());
        tasks.spawn(async move { verify(&verifier, &token).await.map(|_| ()) });
    }
    while let Some(result) = tasks.join_next().await {
        result.unwrap().unwrap();
    }
    assert_eq!((issuer.discovery_fetches(), issuer.jwks_fetches()), (2, 2));
}

#[tokio::test]
async fn warm_keys_survive_an_outage() {
    for outage in [Behaviour::Unavailable, Behaviour::CloseConnection] {
        let issuer = TestIssuer::start();
        let verifier = verifier();
        let token = issuer.mint("ES256", claims(&issuer.url()));
        verify(&verifier, &token).await.unwrap();
        issuer.set_behaviour(outage);
        verify(&verifier, &token).await.unwrap();
        // An unknown kid makes the verifier try the issuer, which fails ...
        let unknown =
            issuer.mint_with_header(json!({"alg": "ES256", "kid": "new"}), claims(&issuer.url()));
        assert_refused(verify(&verifier, &unknown).await, "no key with kid \"new\"");
        assert_eq!(issuer.discovery_fetches(), 2, "{outage:?}");
        assert_eq!(verifier.metrics().key_fetch_failures, 1);
        // ... and the keys it had keep working.
        verify(&verifier, &token).await.unwrap();
    }
}

#[tokio::test]
async fn a_cold_cache_fails_fast_when_the_issuer_is_down() {
    for outage in [Behaviour::Unavailable, Behaviour::CloseConnection] {
        let issuer = TestIssuer::start();
        issuer.set_behaviour(outage);
        let verifier = verifier();
        let token = issuer.mint("ES256", claims(&issuer.url()));
        let (result, took) = timed(verify(&verifier, &token)).await;
        assert!(result.is_err(), "{outage:?}");
        assert!(took < Duration::from_secs(1), "{outage:?} took {took:?}");
        // Right after a failure the verifier does not hammer the issuer.
        assert_refused(
            verify(&verifier, &token).await,
            "unavailable (a recent fetch failed)",
        );
        assert_eq!(issuer.discovery_fetches(), 1);
    }
}

#[tokio::test]
async fn a_hanging_issuer_is_cut_off_by_the_timeout() {
    let issuer = TestIssuer::start();
    issuer.set_behaviour(Behaviour::Slow(Duration::from_secs(30)));
    let verifier = verifier();
    let token = issuer.mint("ES256", claims(&issuer.url()));
    let (result, took) = timed(verify(&verifier, &token)).await;
    assert!(result.is_err());
    assert!(
        // The 5 s timeout, and a loaded machine's moment more.
        took >= Duration::from_secs(4) && took < Duration::from_secs(8),
        "took {took:?}"
    );
}

/// An empty key set is the issuer withdrawing its keys (docs/api.md, "Authentication"), not an
/// outage: the cached keys are dropped at that fetch, and tokens of the keys it had are refused.
#[tokio::test]
async fn an_empty_key_set_is_a_withdrawal() {
    let issuer = TestIssuer::start();
    let verifier = verifier();
    let token = issuer.mint("EdDSA", claims(&issuer.url()));
    verify(&verifier, &token).await.unwrap();
    issuer.set_behaviour(Behaviour::EmptyKeys);
    let unknown = issuer.mint_with_header(
        json!({"alg": "EdDSA", "kid": "gone"}),
        claims(&issuer.url()),
    );
    assert_refused(
        verify(&verifier, &unknown).await,
        "publishes no usable signing key",
    );
    assert_eq!(
        issuer.jwks_fetches(),
        2,
        "the unknown kid refetched and got an empty set"
    );
    // Until the next fetch may be tried, still a key the issuer no longer has, not an issuer
    // out of reach.
    let again = verify(&verifier, &token).await.unwrap_err();
    assert!(
        again.to_string().contains("publishes no key set"),
        "{again}"
    );
    assert_eq!(again.reason_code().as_str(), "key-unknown", "{again}");

    let cold = TestIssuer::start();
    cold.set_behaviour(Behaviour::EmptyKeys);
    let token = cold.mint("EdDSA", claims(&cold.url()));
    assert_refused(
        verify(&verifier, &token).await,
        "publishes no usable signing key",
    );
    // Explained as a key the issuer no longer has, not as an issuer out of reach; a 404 too.
    for behaviour in [Behaviour::EmptyKeys, Behaviour::NotFound] {
        let gone = TestIssuer::start();
        gone.set_behaviour(behaviour);
        let token = gone.mint("EdDSA", claims(&gone.url()));
        for _ in 0..2 {
            let refused = verify(&verifier, &token).await.unwrap_err();
            assert_eq!(refused.reason_code().as_str(), "key-unknown", "{refused}");
        }
    }
}

/// The grace of stale keys is for an issuer that cannot answer (time-out, connection error,
/// 5xx): one that answers a 403, or a document that is not its own, gets none, and its keys
/// serve only while fresh. A later outage brings the grace back.
#[tokio::test]
async fn an_issuer_that_answers_without_its_keys_gets_no_grace() {
    let issuer = TestIssuer::start();
    let (verifier, ticks) = short_lived(OidcConfig {
        retry_after_failure: Duration::from_millis(200),
        ..OidcConfig::insecure()
    });
    issuer.set_cache_control(Some("max-age=1"));
    let token = issuer.mint("ES256", claims(&issuer.url()));
    verify(&verifier, &token).await.unwrap();
    issuer.set_behaviour(Behaviour::Forbidden);
    ticks.advance(Duration::from_millis(1100));
    assert_refused(verify(&verifier, &token).await, "HTTP 403");
    ticks.advance(Duration::from_millis(100));
    assert_refused(verify(&verifier, &token).await, "unavailable");
    // The same keys through an outage: the grace holds.
    issuer.set_behaviour(Behaviour::Normal);
    ticks.advance(Duration::from_millis(200));
    verify(&verifier, &token).await.expect("the issuer is back");
    issuer.set_behaviour(Behaviour::Unavailable);
    ticks.advance(Duration::from_millis(1100));
    verify(&verifier, &token)
        .await
        .expect("stale keys within the grace of an outage");
    // A document naming another issuer is an answer too.
    issuer.set_behaviour(Behaviour::Normal);
    issuer.set_discovery_issuer(Some("https://someone-else.example"));
    ticks.advance(Duration::from_millis(300));
    assert_refused(verify(&verifier, &token).await, "names issuer");
}

/// A verifier whose keys may be fresh for as little as a second, on time the test moves.
fn short_lived(config: OidcConfig) -> (OidcVerifier, Arc<ManualTicks>) {
    let config = OidcConfig {
        min_key_ttl: Duration::from_secs(1),
        ..config
    };
    let ticks = Arc::new(ManualTicks::default());
    (OidcVerifier::new(config, ticks.clone()).unwrap(), ticks)
}

#[tokio::test]
async fn max_age_sets_freshness() {
    let issuer = TestIssuer::start();
    let (verifier, ticks) = short_lived(OidcConfig::insecure());
    let token = issuer.mint("ES256", claims(&issuer.url()));
    issuer.set_cache_control(Some("public, max-age=1"));
    verify(&verifier, &token).await.unwrap();
    issuer.set_cache_control(Some("max-age=3600"));
    ticks.advance(Duration::from_millis(999));
    verify(&verifier, &token).await.unwrap();
    assert_eq!(issuer.fetches(JWKS_PATH), 1, "fresh for its max-age");
    ticks.advance(Duration::from_millis(1));
    verify(&verifier, &token).await.unwrap();
    assert_eq!(issuer.fetches(JWKS_PATH), 2, "stale after max-age");
    ticks.advance(Duration::from_secs(3599));
    verify(&verifier, &token).await.unwrap();
    assert_eq!(issuer.fetches(JWKS_PATH), 2, "fresh for an hour now");

    // The lower bound applies to small and missing-but-forbidding values alike.
    let clamped = TestIssuer::start();
    clamped.set_cache_control(Some("no-store"));
    let ticks = Arc::new(ManualTicks::default());
    let default_min = OidcVerifier::new(OidcConfig::insecure(), ticks.clone()).unwrap();
    let token = clamped.mint("ES256", claims(&clamped.url()));
    verify(&default_min, &token).await.unwrap();
    ticks.advance(Duration::from_secs(299));
    verify(&default_min, &token).await.unwrap();
    assert_eq!(
        clamped.fetches(JWKS_PATH),
        1,
        "no-store still caches for the 5 min minimum"
    );
}

#[tokio::test]
async fn stale_keys_work_through_an_outage_until_the_grace_ends() {
    let issuer = TestIssuer::start();
    let (verifier, ticks) = short_lived(OidcConfig {
        stale_key_grace: Duration::from_secs(3),
        retry_after_failure: Duration::from_millis(200),
        ..OidcConfig::insecure()
    });
    issuer.set_cache_control(Some("max-age=1"));
    let token = issuer.mint("ES256", claims(&issuer.url()));
    verify(&verifier, &token).await.unwrap();
    issuer.set_behaviour(Behaviour::Unavailable);
    ticks.advance(Duration::from_millis(1100));
    verify(&verifier, &token)
        .await
        .expect("stale keys within the grace");
    assert_eq!(
        verifier.metrics().key_fetch_failures,
        1,
        "a refresh was attempted"
    );
    ticks.advance(Duration::from_millis(1899));
    verify(&verifier, &token)
        .await
        .expect("stale keys until the grace's last moment");
    ticks.advance(Duration::from_millis(1));
    assert!(verify(&verifier, &token).await.is_err(), "grace over");
    issuer.set_behaviour(Behaviour::Normal);
    // The last fetch failed 1 ms ago (the one of the grace's last moment): none is tried within
    // retry_after_failure of it, whatever the issuer does meanwhile.
    assert!(
        verify(&verifier, &token).await.is_err(),
        "no fetch sooner than retry_after_failure after the last failure"
    );
    ticks.advance(Duration::from_millis(199));
    verify(&verifier, &token).await.expect("the issuer is back");
}
