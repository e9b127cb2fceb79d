use super::*;
use registry_domain::ports::{Change, ChangeFeed, ServiceStore};

fn all_changes(store: &Store) -> Vec<Change> {
    store.changes_since(0, 1000).unwrap().1
}

/// A change is dated by the time of its write, not by its event (the contract's pruning case
/// holds for both): an hour ago prunes nothing of what was just written, an hour ahead all but
/// the newest.
#[test]
fn a_change_is_dated_by_the_time_of_its_write() {
    let store = store();
    let (c, ..) = seeded(&store, "acme");
    let last = registered(c.id, "api-acme", 1);
    // Events dated five years apart from now, either way.
    let event_at = |years: i64| AuditEvent {
        at: OffsetDateTime::now_utc() + Duration::days(365 * years),
        ..ev()
    };
    store
        .create_service(&last, None, Ceiling::NONE, &event_at(-5))
        .unwrap();
    let retitled = Service {
        title: Some("retitled".into()),
        ..last.clone()
    };
    let updated = store
        .update_service(&last, &retitled, &event_at(5))
        .unwrap();
    assert_eq!(updated, Ok(()));

    assert_eq!(
        store
            .prune_changes(OffsetDateTime::now_utc() - Duration::hours(1))
            .unwrap(),
        0
    );
    assert_eq!(all_changes(&store).len(), 3);
    assert_eq!(
        store
            .prune_changes(OffsetDateTime::now_utc() + Duration::hours(1))
            .unwrap(),
        2
    );
    assert_eq!(all_changes(&store), [Change::Service(last.id)]);
}

#[test]
fn a_second_handle_on_the_same_database_sees_the_changes() {
    let url = registry_tests::fresh_database_url();
    let writer = Store::connect(&url).unwrap();
    writer.migrate().unwrap();
    let replica = Store::connect(&url).unwrap();
    let cursor = replica.latest_change().unwrap();
    let (c, ..) = seeded(&writer, "acme");
    let s = registered(c.id, "api-acme", 1);
    writer
        .create_service(&s, None, Ceiling::NONE, &ev())
        .unwrap();
    writer
        .put_config(&config(s.id, "http://api-acme", 2), &ev())
        .unwrap();

    let (_, changes) = replica.changes_since(cursor, 100).unwrap();

    assert!(changes.ends_with(&[Change::Service(s.id), Change::Service(s.id)]));
    assert_eq!(replica.config(s.id).unwrap(), writer.config(s.id).unwrap());
}

/// The one read of an authenticated request, taken in place (on SQLite, on each thread's own
/// connection), sees every write committed before it, by any handle, on every thread: a
/// deleted account's token is gone at the next read.
#[test]
fn reads_taken_in_place_see_every_committed_write_on_every_thread() {
    use registry_domain::ports::{AccountStore, Database};
    let url = registry_tests::fresh_database_url();
    let writer = Store::connect(&url).unwrap();
    writer.migrate().unwrap();
    let reader = Store::connect(&url).unwrap();
    if reader.backend() != registry_store::Backend::Sqlite {
        // A network round trip would hold an HTTP worker: never in place.
        assert!(reader.latest_change_now().is_none());
        return;
    }
    let latest = || reader.latest_change_now().expect("in place").unwrap();
    let before = latest();
    let (_, account, token) = seeded(&writer, "acme");
    let created = latest();
    assert!(created > before);
    let credential = || {
        reader
            .credential_and_latest_change_now(&token.lookup_id)
            .expect("in place")
            .unwrap()
    };
    assert_eq!(credential().map(|(_, at)| at), Some(created));
    std::thread::scope(|scope| {
        scope.spawn(|| {
            assert_eq!(latest(), created, "another thread, its own connection");
            assert!(credential().is_some());
        });
    });
    assert!(writer.delete_account(account.id, &ev()).unwrap());
    assert!(credential().is_none(), "deleted: gone at the next read");
    std::thread::scope(|scope| {
        scope.spawn(|| assert!(credential().is_none()));
    });
    assert!(latest() > created);
}

/// On SQLite a thread answers the request's read from what it read before while the database is
/// unchanged (its WAL index says so): so well that it answers while another process holds every
/// lock a SQLite reader needs. And a commit by another process, straight into the file, is
/// still seen at the next read, on a thread that has answered from memory before.
#[test]
fn reads_taken_in_place_see_a_commit_by_another_process_at_once() {
    use registry_domain::ports::Database;
    let url = registry_tests::fresh_database_url();
    let Some(path) = url.strip_prefix("sqlite://") else {
        return; // PostgreSQL: never in place (above).
    };
    let store = Store::connect(&url).unwrap();
    store.migrate().unwrap();
    let (_, _, token) = seeded(&store, "acme");
    let credential = || {
        store
            .credential_and_latest_change_now(&token.lookup_id)
            .expect("in place")
            .unwrap()
    };
    let latest = || store.latest_change_now().expect("in place").unwrap();
    let before = latest();
    for _ in 0..3 {
        assert!(credential().is_some());
        assert_eq!(latest(), before);
    }
    {
        // Every read mark of the WAL index (`WAL_READ_LOCK(0..4)`, bytes 123 to 127 of the
        // `-shm` file) locked by another process: no SQLite read can begin until it lets go.
        use std::io::{BufRead, BufReader};
        use std::process::{Command, Stdio};
        // Retried for a while: a read begun meanwhile (the pool opening a connection) holds
        // one of the marks for microseconds.
        const HOLD_READ_MARKS: &str = r#"
import fcntl, os, sys, time
fd = os.open(os.path.realpath(sys.argv[1]) + '-shm', os.O_RDWR)
for attempt in range(200):
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 5, 123, 0)
        print('locked', flush=True)
        break
    except OSError:
        time.sleep(0.025)
else:
    print('busy', flush=True)
    sys.exit(1)
sys.stdin.read()
"#;
        let mut locker = Command::new("python3")
            .arg("-c")
            .arg(HOLD_READ_MARKS)
            .arg(path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3");
        let mut said = String::new();
        BufReader::new(locker.stdout.take().unwrap())
            .read_line(&mut said)
            .unwrap();
        assert_eq!(said.trim(), "locked", "the read marks could not be taken");
        let found = (store.credential_and_latest_change_now(&token.lookup_id))
            .map(|read| read.map(|found| found.is_some()).map_err(|e| e.to_string()));
        let latest_now = (store.latest_change_now()).map(|read| read.map_err(|e| e.to_string()));
        drop(locker.stdin.take());
        assert!(locker.wait().unwrap().success());
        assert_eq!(
            (found, latest_now),
            (Some(Ok(true)), Some(Ok(before))),
            "answered from memory, no read begun"
        );
    }
    let deleted = registry_tests::sqlite_python(
        path,
        "db.execute('DELETE FROM credentials WHERE lookup_id = ?', (sys.argv[2],))\n\
         db.execute(\"INSERT INTO changes (kind, subject_id, created_at) VALUES ('account', 'x', 0)\")\n\
         db.commit()",
        &token.lookup_id,
    );
    assert!(deleted.status.success(), "{deleted:?}");
    assert!(credential().is_none(), "deleted by another process");
    assert!(latest() > before, "logged by another process");
}
