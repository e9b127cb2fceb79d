//! `cargo xtask faults standby`: the read replica, the primary down, and a fail-over
//! (docs/api.md, "Read replicas and the primary down"), on a real primary and a real streaming
//! standby (`pg_basebackup`, synchronous, `synchronous_commit = remote_apply`).
//!
//! Two registry processes share the database as replicas behind a load balancer would: both
//! write to libpq's multi-host URL of the two clusters (`target_session_attrs=read-write`) and
//! read from the standby (`REGISTRY_DATABASE_READ_URL`).
//! 1. Reads go to the standby (its client connections), revocation holds at once on the other
//!    replica (an account deleted on A: its token refused on B by the next request), a new
//!    account works at once on B, `/readyz` says both sides are up and `/metrics` shows the lag.
//!    The standby stopped, reads fall back to the primary; the standby's replay paused (commits
//!    then not waiting for it), an account deleted on A is refused on A and B within the lag
//!    ceiling (`REGISTRY_READ_REPLICA_MAX_LAG_SECONDS`, 5 s here), `/readyz` says `lagging`.
//! 2. The primary is killed (`kill -9`) under the writers of the `kill` scenario: writes answer
//!    503 `database-unavailable` with `Retry-After`, while public hosting, authenticated GETs
//!    and federated authentication keep working from the standby, and `/readyz` stays 200 with
//!    `"primary": "down"`.
//! 3. The standby is promoted: writes resume within 10 s, neither registry restarted, and
//!    `/readyz` says both sides are up (the read URL names the promoted primary).
//! 4. The ledger of acknowledged writes is checked against the promoted database: with
//!    `remote_apply`, every write acknowledged before the kill is on the standby.

use super::{acknowledged, create_database, with_writers};
use crate::api::{hosted_issuer, oidc_policy, Api};
use crate::ledger::{locked, Ledger, Writer, TENANT};
use crate::postgres::Cluster;
use crate::registry::{self, create_customer, Registry};
use anyhow::{bail, ensure, Context, Result};
use registry_testkit::http::Http;
use registry_testkit::wait_until;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The registries' `REGISTRY_READ_REPLICA_MAX_LAG_SECONDS`.
const MAX_LAG: Duration = Duration::from_secs(5);

/// How soon writes must resume after the standby is promoted (docs/api.md, "Read replicas and the
/// primary down").
const FAIL_OVER_WITHIN: Duration = Duration::from_secs(10);

pub fn read_replica_and_fail_over(binary: &Path, work: &Path) -> Result<String> {
    let mut primary = Cluster::start()?;
    let database = "faults_standby";
    create_database(&primary, database)?;
    let mut standby = primary.start_standby()?;
    // `XTASK_STANDBY_COMMIT=on` (or `local`) runs the scenario against a standby the primary
    // does not wait to apply. On loopback the standby then still replays a commit before the
    // next request has connected (the run of 2026-11-25 passed): the revocation step shows the
    // guarantee holds with `remote_apply`; only a slower link would show it failing without.
    let commit = std::env::var("XTASK_STANDBY_COMMIT").unwrap_or_else(|_| "remote_apply".into());
    primary.wait_for_standby(&commit)?;
    let write_url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/{database}?target_session_attrs=read-write",
        primary.port(),
        standby.port()
    );
    let read_url = format!(
        "postgres://postgres@127.0.0.1:{}/{database}",
        standby.port()
    );
    let token = create_customer(binary, &write_url, TENANT)?;
    // The probes' writes (whether writes work) go to another customer, outside the ledger.
    let probe = create_customer(binary, &write_url, "probe")?;
    let start = |name: &str, template: Option<&str>| -> Result<Registry> {
        let mut options = registry::Options::new(binary, &write_url, &work.join(name))
            .env("REGISTRY_DATABASE_READ_URL", &read_url)
            .env(
                "REGISTRY_READ_REPLICA_MAX_LAG_SECONDS",
                &MAX_LAG.as_secs().to_string(),
            )
            .env("REGISTRY_OIDC_ALLOW_INSECURE_ISSUERS", "true");
        if let Some(template) = template {
            options = options.env("REGISTRY_ISSUER_URL_TEMPLATE", template);
        }
        Registry::start(&options)
    };
    let a = start("standby-a.log", None)?;
    // The replicas of one registry host the same issuers.
    let template = format!("http://{{subdomain}}.localhost:{}", a.port);
    let b = start("standby-b.log", Some(&template))?;
    let (ha, hb) = (a.http(), b.http());

    let reads = replica_reads(&standby, ha, hb, &token)?;
    let fallback = standby_down(&mut standby, ha, &token)?;
    let lagging = replay_paused(&mut primary, &standby, ha, hb, &token, &commit)?;
    let api = Api::new(ha, &token);
    let (issuer, signer) = hosted_issuer(&api)?;
    api.create_account("federated", oidc_policy(&issuer, &["*"]))?;
    let identity = signer.mint(&issuer)?;
    hb.call("GET", "/services", Some(&identity), None)?
        .expect(200, "a federated call on B reading the standby")?;

    let ledger = Mutex::new(Ledger::new(ha, &token)?);
    let writer = Writer {
        http: ha,
        token: &token,
        ledger: &ledger,
    };
    let (down, resumed) = with_writers(writer, "s", || -> Result<(String, Duration)> {
        std::thread::sleep(Duration::from_secs(3));
        primary.kill9_server()?;
        let down = primary_down(ha, hb, &token, &probe, &identity, &issuer)?;
        let promoted = Instant::now();
        standby.promote()?;
        let resumed = wait_until(Duration::from_secs(30), || {
            ha.call(
                "POST",
                "/services",
                Some(&probe),
                Some(&json!({"title": "probe"})),
            )
            .is_ok_and(|r| r.status == 201)
        })
        .context("no write accepted within 30 s of the promotion")?;
        let resumed = promoted.elapsed().max(resumed);
        std::thread::sleep(Duration::from_secs(1));
        Ok((down, resumed))
    })?;
    ensure!(
        resumed <= FAIL_OVER_WITHIN,
        "writes resumed {:.1} s after the promotion (at most {} s)",
        resumed.as_secs_f64(),
        FAIL_OVER_WITHIN.as_secs()
    );
    hb.call("GET", "/services", Some(&identity), None)?
        .expect(200, "a federated call on B after the fail-over")?;
    // The read URL now names the promoted primary, which serves reads: both sides are up.
    let both_up = wait_until(Duration::from_secs(10), || {
        ha.call("GET", "/readyz", None, None).is_ok_and(|r| {
            r.status == 200 && r.json()["primary"] == "up" && r.json()["readReplica"] == "up"
        })
    });
    ensure!(
        both_up.is_some(),
        "GET /readyz after the fail-over: {}",
        ha.call("GET", "/readyz", None, None)?.body
    );
    let l = locked(&ledger);
    let verified = l
        .verify(ha, &token)
        .context("the ledger against the promoted standby")?;
    ensure!(
        l.server_errors.is_empty(),
        "server errors other than 503 database-unavailable: {:?}",
        l.server_errors
    );
    Ok(format!(
        "{reads}; {fallback}; {lagging}; {down}; writes resumed {:.1} s after the promotion, no registry restarted; \
         {}, all on the promoted standby; {} unacknowledged writes found whole; {} audit events; \
         {} answers 503 database-unavailable, no other 5xx",
        resumed.as_secs_f64(),
        acknowledged(&l),
        verified.found_whole,
        verified.audit_events,
        l.unavailable
    ))
}

/// Step 1: the replicas read the standby, and revocation holds at once across them.
fn replica_reads(standby: &Cluster, ha: Http, hb: Http, token: &str) -> Result<String> {
    let ready = ha.call("GET", "/readyz", None, None)?;
    ensure!(
        ready.status == 200
            && ready.json()["primary"] == "up"
            && ready.json()["readReplica"] == "up",
        "GET /readyz with both sides up: {} {}",
        ready.status,
        ready.body
    );
    let metrics = ha.call("GET", "/metrics", None, None)?;
    ensure!(
        metrics.body.contains("registry_read_replica_lag_seconds"),
        "/metrics has no registry_read_replica_lag_seconds"
    );
    const ROUNDS: usize = 20;
    let policy = json!({"kind": "static", "services": ["*"]});
    for round in 0..ROUNDS {
        let created = ha.call(
            "POST",
            "/service-accounts",
            Some(token),
            Some(&json!({"name": format!("r{round}"), "policy": policy})),
        )?;
        created.expect(201, "an account created on A")?;
        let body: Value = created.json();
        let (id, secret) = (
            body["id"].as_str().context("an account id")?,
            body["token"].as_str().context("a token")?,
        );
        hb.call("GET", "/services", Some(secret), None)?
            .expect(200, "a new account's token on B, at once")?;
        ha.call(
            "DELETE",
            &format!("/service-accounts/{id}"),
            Some(token),
            None,
        )?
        .expect(204, "the account deleted on A")?;
        let after = hb.call("GET", "/services", Some(secret), None)?;
        if after.status != 401 {
            bail!(
                "round {round}: a deleted account's token on B answered {} (revocation must hold \
                 at once with a remote_apply standby)",
                after.status
            );
        }
    }
    let on_standby = standby.backend_titles()?.len();
    ensure!(
        on_standby > 0,
        "no client connection on the standby: the replicas do not read from it"
    );
    Ok(format!(
        "both replicas read the standby ({on_standby} connections); {ROUNDS} accounts created on \
         A worked on B at once, and were refused on B by the first request after their deletion"
    ))
}

/// The standby stopped: reads fall back to the primary, `/readyz` stays 200 and says the read
/// replica is down; then the standby comes back and is read again. (No write here: the primary
/// waits for its synchronous standby.)
fn standby_down(standby: &mut Cluster, http: Http, token: &str) -> Result<String> {
    standby.stop_server()?;
    let ready = http.call("GET", "/readyz", None, None)?;
    ensure!(
        ready.status == 200
            && ready.json()["primary"] == "up"
            && ready.json()["readReplica"] == "down",
        "GET /readyz with the standby down: {} {}",
        ready.status,
        ready.body
    );
    let mut took = Vec::new();
    for _ in 0..20 {
        let started = Instant::now();
        http.call("GET", "/services", Some(token), None)?
            .expect(200, "an authenticated GET with the standby down")?;
        took.push(started.elapsed());
    }
    took.sort();
    // Reads skip a standby known down: no wait for a connection that will not come.
    let median = took[took.len() / 2];
    ensure!(
        median < Duration::from_millis(250),
        "GETs with the standby down took {:.0} ms (median): reads wait for the standby",
        median.as_secs_f64() * 1000.0
    );
    standby.start_server()?;
    let back = wait_until(Duration::from_secs(30), || {
        http.call("GET", "/readyz", None, None)
            .is_ok_and(|r| r.json()["readReplica"] == "up")
    })
    .context("the read replica never came back in /readyz")?;
    Ok(format!(
        "standby stopped: /readyz 200 readReplica down, 20 authenticated GETs 200 from the \
         primary (median {:.0} ms); back in /readyz {:.1} s after its restart",
        median.as_secs_f64() * 1000.0,
        back.as_secs_f64()
    ))
}

/// The standby's replay paused (the review's capture: a deleted account's token kept working for
/// as long as the pause): with commits that no longer wait for the standby, an account deleted on
/// A is refused on A and on B within the lag ceiling, and `/readyz` says the standby lags; once
/// replay resumes, the standby is read again.
fn replay_paused(
    primary: &mut Cluster,
    standby: &Cluster,
    ha: Http,
    hb: Http,
    token: &str,
    commit: &str,
) -> Result<String> {
    // Commits that do not wait for the standby to apply them (a restart of the primary: the
    // setting is on its command line).
    primary.wait_for_standby("local")?;
    let mut created = None;
    wait_until(Duration::from_secs(30), || {
        created = ha
            .call(
                "POST",
                "/service-accounts",
                Some(token),
                Some(&json!({"name": "paused", "policy": {"kind": "static", "services": ["*"]}})),
            )
            .ok()
            .filter(|r| r.status == 201);
        created.is_some()
    })
    .context("no account created within 30 s of the primary's restart")?;
    let body: Value = created.context("an account")?.json();
    let (id, secret) = (
        body["id"].as_str().context("an account id")?.to_owned(),
        body["token"].as_str().context("a token")?.to_owned(),
    );
    for (name, http) in [("A", ha), ("B", hb)] {
        wait_until(Duration::from_secs(10), || {
            http.call("GET", "/services", Some(&secret), None)
                .is_ok_and(|r| r.status == 200)
        })
        .with_context(|| format!("the new account's token never worked on {name}"))?;
    }
    // A service both replicas know, to change with replay paused.
    let subdomain = Api::new(ha, token).create_service("lagging")?;
    for (name, http) in [("A", ha), ("B", hb)] {
        wait_until(Duration::from_secs(10), || {
            let path = format!("/services/{subdomain}");
            http.call("GET", &path, Some(token), None)
                .is_ok_and(|r| r.status == 200)
        })
        .with_context(|| format!("the new service never showed on {name}"))?;
    }
    // And an account both know, to change on A and re-key on B with replay paused.
    let created = ha.call(
        "POST",
        "/service-accounts",
        Some(token),
        Some(&json!({"name": "rekeyed", "policy": {"kind": "static", "services": ["*"]}})),
    )?;
    created.expect(201, "an account to re-key")?;
    let rekeyed = created.json()["id"]
        .as_str()
        .context("an account id")?
        .to_owned();
    wait_until(Duration::from_secs(10), || {
        let path = format!("/service-accounts/{rekeyed}");
        hb.call("GET", &path, Some(token), None)
            .is_ok_and(|r| r.status == 200)
    })
    .context("the new account never showed on B")?;
    pause_replay(primary, standby)?;
    // Both within the 3.75 s before B leaves the lagging standby for the primary (the ceiling
    // less the time a change takes to be seen): each shows a copy behind the write.
    let rekeyed_token = regeneration_over_a_lagging_copy(ha, hb, token, &rekeyed)?;
    let patched = patches_over_a_lagging_copy(ha, hb, token, &subdomain)?;
    ha.call(
        "DELETE",
        &format!("/service-accounts/{id}"),
        Some(token),
        None,
    )?
    .expect(204, "the account deleted on A, replay paused")?;
    let deleted = Instant::now();
    let mut refused = Vec::new();
    for (name, http) in [("A", ha), ("B", hb)] {
        wait_until(MAX_LAG + Duration::from_secs(10), || {
            http.call("GET", "/services", Some(&secret), None)
                .is_ok_and(|r| r.status == 401)
        })
        .with_context(|| format!("a deleted account's token still worked on {name}"))?;
        let since = deleted.elapsed();
        ensure!(
            since <= MAX_LAG,
            "a deleted account's token worked on {name} for {:.1} s with replay paused (ceiling {} s)",
            since.as_secs_f64(),
            MAX_LAG.as_secs()
        );
        refused.push(format!("{name} {:.1} s", since.as_secs_f64()));
    }
    let ready = ha.call("GET", "/readyz", None, None)?;
    ensure!(
        ready.status == 200 && ready.json()["readReplica"] == "lagging",
        "GET /readyz with replay paused: {} {}",
        ready.status,
        ready.body
    );
    let lag = ready.json()["readReplicaLagSeconds"]
        .as_f64()
        .unwrap_or(0.0);
    standby.sql("SELECT pg_wal_replay_resume()")?;
    primary.wait_for_standby(commit)?;
    let back = wait_until(Duration::from_secs(30), || {
        ha.call("GET", "/readyz", None, None)
            .is_ok_and(|r| r.json()["readReplica"] == "up" && r.json()["primary"] == "up")
    })
    .context("the standby never caught up in /readyz after replay resumed")?;
    ensure!(
        hb.call("GET", "/services", Some(&rekeyed_token), None)?
            .status
            == 200,
        "the token regenerated on B with replay paused did not work on B once it caught up"
    );
    Ok(format!(
        "replay paused: {patched}, a token regenerated on B after A changed the account's \
         policy answered 200 (B's copy lagging) and worked once the standby caught up, a deleted \
         account's token refused within the {} s ceiling \
         ({}), /readyz 200 readReplica lagging ({lag:.1} s), up again {:.1} s after replay \
         resumed",
        MAX_LAG.as_secs(),
        refused.join(", "),
        back.as_secs_f64()
    ))
}

/// Pauses the standby's replay, and waits until it has paused: a pause asked for while the
/// standby waits for WAL takes effect only when the next record arrives, which would still be
/// replayed (the run of 2026-12-04 20:53: B read the first change made "with replay paused").
/// A record written to the primary's own database brings it.
fn pause_replay(primary: &Cluster, standby: &Cluster) -> Result<()> {
    standby.sql("SELECT pg_wal_replay_pause()")?;
    primary.sql("CREATE TABLE IF NOT EXISTS xtask_nudge (at timestamptz)")?;
    wait_until(Duration::from_secs(10), || {
        primary
            .sql("INSERT INTO xtask_nudge VALUES (now())")
            .is_ok()
            && standby
                .sql("SELECT pg_get_wal_replay_pause_state()")
                .is_ok_and(|state| state.trim() == "paused")
    })
    .context("the standby's replay never paused")?;
    Ok(())
}

/// With replay paused, `PATCH`es of one service on A and B, one after the other: each replica
/// reads the service from the standby, which has not seen the other's change, and each answers
/// 200 with both changes (docs/api.md, "A `PATCH` is made over what is stored"), not a 409.
fn patches_over_a_lagging_copy(ha: Http, hb: Http, token: &str, subdomain: &str) -> Result<String> {
    let path = format!("/services/{subdomain}");
    let changes = [
        (ha, "A", json!({"title": "from A"})),
        (hb, "B", json!({"description": "from B"})),
        (ha, "A", json!({"title": "from A again"})),
    ];
    let mut last = Value::Null;
    for (http, name, change) in changes {
        // B's copy lags behind A's first change (else the step would show nothing).
        if name == "B" {
            let copy = http.call("GET", &path, Some(token), None)?;
            ensure!(
                copy.status == 200 && copy.json()["title"] != "from A",
                "GET {path} on B right after A's PATCH, replay paused, already showed it: {} {}",
                copy.status,
                copy.body
            );
        }
        let answer = http.call("PATCH", &path, Some(token), Some(&change))?;
        ensure!(
            answer.status == 200,
            "PATCH {path} {change} on {name} with replay paused: {} {}",
            answer.status,
            answer.body
        );
        last = answer.json();
    }
    ensure!(
        last["title"] == "from A again" && last["description"] == "from B",
        "the last PATCH with replay paused answered {last}: a change was undone"
    );
    Ok("three PATCHes of one service on A, B, A answered 200 with both fields".to_owned())
}

/// With replay paused, an account's policy changed on A and its token regenerated on B, which
/// still reads the old policy from the standby: B judges the caller again over the stored policy
/// and answers 200 (docs/api.md, "A `PATCH` is made over what is stored"), not a 409. Its token
/// (returned) works once the standby has caught up.
fn regeneration_over_a_lagging_copy(ha: Http, hb: Http, token: &str, id: &str) -> Result<String> {
    let path = format!("/service-accounts/{id}");
    let policy = json!({"kind": "static", "services": ["*"], "ip_allowlist": ["127.0.0.0/8"]});
    ha.call(
        "PATCH",
        &path,
        Some(token),
        Some(&json!({ "policy": policy })),
    )?
    .expect(200, "an account's policy changed on A, replay paused")?;
    // B's copy lags (else the step would show nothing).
    let copy = hb.call("GET", &path, Some(token), None)?;
    ensure!(
        copy.status == 200 && copy.json()["policy"] != policy,
        "GET {path} on B right after A's PATCH, replay paused, already showed it: {} {} (B's \
         /readyz: {})",
        copy.status,
        copy.body,
        hb.call("GET", "/readyz", None, None)?.body
    );
    let answer = hb.call(
        "POST",
        &format!("{path}/regenerate-token"),
        Some(token),
        None,
    )?;
    ensure!(
        answer.status == 200,
        "POST {path}/regenerate-token on B after A changed its policy, replay paused: {} {}",
        answer.status,
        answer.body
    );
    answer.json()["token"]
        .as_str()
        .map(str::to_owned)
        .context("a regenerated token")
}

/// Step 2, with the primary killed: writes are 503 with `Retry-After`, reads and federated
/// authentication work, `/readyz` stays 200 and names the side that is down.
fn primary_down(
    ha: Http,
    hb: Http,
    token: &str,
    probe: &str,
    identity: &str,
    issuer: &str,
) -> Result<String> {
    let killed = Instant::now();
    let mut last = String::new();
    let refused = wait_until(Duration::from_secs(30), || {
        let answer = ha.call(
            "POST",
            "/services",
            Some(probe),
            Some(&json!({"title": "probe"})),
        );
        last = match &answer {
            Ok(r) => format!("{} {}", r.status, r.body),
            Err(e) => format!("{e:#}"),
        };
        answer.is_ok_and(|r| r.is_unavailable())
    })
    .with_context(|| {
        format!("no write answered 503 database-unavailable with the primary killed; last: {last}")
    })?;
    let write = hb.call(
        "POST",
        "/services",
        Some(probe),
        Some(&json!({"title": "probe"})),
    )?;
    write.expect(503, "a write on B with the primary down")?;
    ensure!(
        write.retry_after.is_some(),
        "a 503 of a write without Retry-After"
    );
    let ready = hb.call("GET", "/readyz", None, None)?;
    ensure!(
        ready.status == 200
            && ready.json()["primary"] == "down"
            && ready.json()["readReplica"] == "up",
        "GET /readyz with the primary down: {} {}",
        ready.status,
        ready.body
    );
    let mut reads = 0;
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        for (http, credential) in [(ha, token), (hb, token), (hb, identity), (ha, identity)] {
            http.call("GET", "/services", Some(credential), None)?
                .expect(200, "an authenticated GET with the primary down")?;
            reads += 1;
        }
        let subdomain = issuer
            .trim_start_matches("http://")
            .split('.')
            .next()
            .unwrap_or_default();
        hb.hosted(subdomain, "/.well-known/jwks.json")?
            .expect(200, "public hosting with the primary down")?;
        reads += 1;
    }
    Ok(format!(
        "primary killed: writes 503 database-unavailable with Retry-After after {:.1} s, \
         /readyz 200 primary down, {reads} authenticated, federated and public GETs all 200 \
         from the standby in {:.1} s",
        refused.as_secs_f64(),
        killed.elapsed().as_secs_f64()
    ))
}
