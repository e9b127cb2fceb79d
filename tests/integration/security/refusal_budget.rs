//! Finding 7 of the second review (docs/api.md, "Explaining refusals"): anyone can hold a genuine
//! token of a shared issuer (any repository's workflow gets one of GitHub's, with the `sub` of its
//! own repository and the `aud` it asks for). Such outsiders used to fill an account's refusal log
//! with text they chose, use up its per-minute recording budget, and push the owner's own refusals
//! out of the newest 100. Near misses of the account's rules now have a budget and a retention of
//! their own: the owner's refusal is recorded during the flood and stays after it.

use super::{create_service, oidc_account};
use registry_domain::audit::{AuditEvent, Resource};
use registry_domain::policy::Policy;
use registry_domain::ports::{
    AccountStore, ActivityLog, Ceiling, CredentialRecord, CustomerStore, RefusalLog,
};
use registry_domain::{Customer, Plan, ServiceAccount};
use registry_store::Store;
use registry_tests::issuer::TestIssuer;
use registry_tests::server::{
    claims, json, unix_now, Customer as TestCustomer, ServerOptions, TestServer,
};
use reqwest::Method;
use serde_json::{json, Value};
use time::OffsetDateTime;
use uuid::Uuid;

const OWNER_RULE: &str = "repo:acme/infra:ref:refs/heads/main";

fn refusals(server: &TestServer, customer: &TestCustomer, id: &str) -> Vec<Value> {
    let response = server.get(&format!("/service-accounts/{id}/refusals"), &customer.token);
    assert_eq!(response.status(), 200);
    json(response).as_array().unwrap().clone()
}

/// Sends `count` refused requests on `path`, each with a fresh genuine token whose `sub` is the
/// outsider's choice.
fn outsiders(server: &TestServer, issuer: &TestIssuer, path: &str, round: usize, count: usize) {
    for i in 0..count {
        // Outsiders' own repositories, including one whose name extends the owner's.
        let owner = if i % 2 == 0 { "evil" } else { "acme-evil" };
        let sub = format!("repo:{owner}/x{round}-{i}:ref:refs/heads/main");
        let token = issuer.mint("ES256", claims(&issuer.url(), &sub));
        let response = server
            .request(Method::GET, path)
            .bearer_auth(&token)
            .send()
            .unwrap();
        assert_eq!(response.status(), 401, "{sub}");
    }
}

fn owner_near_miss(server: &TestServer, issuer: &TestIssuer, path: &str, request_id: &str) {
    let sub = "repo:acme/infra:ref:refs/heads/release";
    let token = issuer.mint("ES256", claims(&issuer.url(), sub));
    let response = server
        .request(Method::GET, path)
        .bearer_auth(&token)
        .header("x-request-id", request_id)
        .send()
        .unwrap();
    assert_eq!(response.status(), 401);
}

fn count(log: &[Value], near: bool) -> usize {
    log.iter().filter(|r| r["near"] == near).count()
}

#[test]
fn outsiders_of_a_shared_issuer_cannot_crowd_out_the_owners_refusals() {
    let server = TestServer::start_with(ServerOptions {
        env: vec![("REGISTRY_OIDC_ALLOW_INSECURE_ISSUERS".into(), "true".into())],
        ..ServerOptions::default()
    });
    let issuer = TestIssuer::start();
    let acme = server.customer("acme", "business");
    let (api, _) = create_service(&server, &acme, "api");
    let id = oidc_account(&server, &acme, &issuer.url(), OWNER_RULE);
    let path = format!("/services/{api}");

    // A flood of 200 genuine outsider tokens in one minute, then the owner's own job. The
    // server's clock is moved to the start of a minute first: a flood that crossed into the
    // next one would rightly find a new budget there.
    server.advance_clock(60 - unix_now().rem_euclid(60));
    outsiders(&server, &issuer, &path, 0, 200);
    owner_near_miss(&server, &issuer, &path, "owner-1");
    let log = refusals(&server, &acme, &id);
    let owner: Vec<&Value> = log.iter().filter(|r| r["requestId"] == "owner-1").collect();
    assert_eq!(
        owner.len(),
        1,
        "the owner's refusal was not recorded ({} records, {} near)",
        log.len(),
        count(&log, true)
    );
    assert_eq!(owner[0]["near"], true);
    assert_eq!(owner[0]["code"], "claim-mismatch");
    assert_eq!(
        owner[0]["claims"]["sub"],
        "repo:acme/infra:ref:refs/heads/release"
    );
    assert_eq!(log[0]["requestId"], "owner-1", "newest first");
    assert_eq!(
        count(&log, false),
        30,
        "the outsiders' budget of one minute"
    );
    assert!(log
        .iter()
        .filter(|r| r["near"] == false)
        .all(|r| !r["claims"]["sub"]
            .as_str()
            .unwrap()
            .starts_with("repo:acme/")));

    // Minutes more of it: the outsiders' class fills to its 100 and turns over; the owner's
    // refusal stays, and the owner's next one is still recorded.
    for round in 1..=4 {
        server.advance_clock(60);
        outsiders(&server, &issuer, &path, round, 40);
    }
    owner_near_miss(&server, &issuer, &path, "owner-2");
    outsiders(&server, &issuer, &path, 5, 10);
    let log = refusals(&server, &acme, &id);
    // The view shows the latest 100 (docs/api.md, "Explaining refusals"): the owner's two, then far
    // ones.
    assert_eq!(log.len(), 100);
    assert_eq!(count(&log, false), 98, "far ones fill the places left");
    assert_eq!(count(&log, true), 2, "the owner's two near misses");
    let near: Vec<&Value> = log.iter().filter(|r| r["near"] == true).collect();
    assert_eq!(near[0]["requestId"], "owner-2");
    assert_eq!(near[1]["requestId"], "owner-1");
    assert!(
        log.iter()
            .all(|r| r["claims"]["sub"] != "repo:evil/x0-0:ref:refs/heads/main"),
        "the oldest outsiders' records went"
    );
}

fn store_account(customer_id: Uuid, name: &str, policy: Policy) -> ServiceAccount {
    ServiceAccount {
        id: Uuid::new_v4(),
        customer_id,
        name: name.into(),
        policy,
        created_at: OffsetDateTime::UNIX_EPOCH,
        last_used_at: None,
    }
}

#[test]
fn the_store_keeps_the_newest_hundred_of_each_class() {
    let store = Store::connect(&registry_tests::fresh_database_url()).unwrap();
    store.migrate().unwrap();
    let at = |s: i64| OffsetDateTime::from_unix_timestamp(1_795_000_000 + s).unwrap();
    let acme = Customer {
        id: Uuid::new_v4(),
        name: "Acme Inc".into(),
        tenant: "acme".into(),
        plan: Plan::Business,
        created_at: at(0),
        disabled_at: None,
    };
    let policy = Policy::parse(&json!({"kind": "static", "services": ["*"]}))
        .unwrap()
        .policy;
    let boot = store_account(acme.id, "boot", policy);
    let event = || {
        AuditEvent::new(
            registry_domain::audit::Action::CustomerCreate,
            Resource::customer(acme.id),
            registry_domain::audit::Actor::system(),
            Some(acme.id),
            at(0),
        )
    };
    let credential = CredentialRecord {
        lookup_id: Uuid::new_v4().simple().to_string()[..16].to_owned(),
        hash: "h".into(),
    };
    store
        .create_customer(&acme, &boot, &credential, &event())
        .unwrap();
    let other = store_account(
        acme.id,
        "other",
        Policy::parse(&json!({"kind": "static", "services": ["*"]}))
            .unwrap()
            .policy,
    );
    store
        .create_account(&other, None, Ceiling::NONE, None, &event())
        .unwrap();

    for n in 0..3 {
        store
            .record_refusals(&[(boot.id, json!({"n": n, "near": true}))], at(n))
            .unwrap();
    }
    for n in 3..253 {
        store
            .record_refusals(
                &[
                    (boot.id, json!({"n": n, "near": false})),
                    (other.id, json!({"n": n})),
                ],
                at(n),
            )
            .unwrap();
    }
    let kept = store.refusals(boot.id, at(0), 500).unwrap();
    assert_eq!(kept.len(), 103);
    assert_eq!(kept[0]["n"], 252, "newest first");
    let near: Vec<&Value> = kept.iter().filter(|r| r["near"] == true).collect();
    assert_eq!(near.len(), 3, "far ones never push near ones out");
    assert_eq!(near[2]["n"], 0);
    assert_eq!(kept[99]["n"], 153, "the newest 100 far ones");
    // Records without the field are of the far class; each account has its own log.
    assert_eq!(store.refusals(other.id, at(0), 500).unwrap().len(), 100);
    // The near class turns over by itself too.
    for n in 253..360 {
        store
            .record_refusals(&[(boot.id, json!({"n": n, "near": true}))], at(n))
            .unwrap();
    }
    let kept = store.refusals(boot.id, at(0), 500).unwrap();
    assert_eq!(kept.len(), 200);
    assert_eq!(kept.iter().filter(|r| r["near"] == true).count(), 100);
    assert_eq!(kept[0]["n"], 359);
}
