//! Each worker thread's own SQLite connection, for the reads a request takes in place
//! ([`InPlace`]): the one statement every authenticated request runs takes no connection from
//! the pool, whose two critical sections per checkout every worker would otherwise queue on.
//!
//! And most requests take no statement at all: each thread keeps what those reads answered
//! ([`Memo`]) together with the database's version when it asked (`wal_index`), and answers
//! again from it while the version is the same. A commit by any connection of any process (a
//! `registry customer disable` beside the server, another replica on the same file) changes the
//! version, and the next request on every thread reads the database again.

use crate::error::{Failure, Res};
use crate::pool::{Db, Manager};
use crate::wal_index::{Version, WalIndex};
use crossbeam_utils::CachePadded;
use registry_domain::ports::{StoreResult, StoredCredential};
use registry_domain::signing::Signing;
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;
use thread_local::ThreadLocal;
use uuid::Uuid;

/// The threads' connections to one SQLite file, opened by each thread at its first read.
pub(crate) struct InPlace {
    manager: Manager,
    /// The database file whose WAL index tells its version; `None`: every read asks SQLite.
    file: Option<PathBuf>,
    threads: ThreadLocal<CachePadded<RefCell<Thread>>>,
}

/// One thread's connection, and what it read.
#[derive(Default)]
struct Thread {
    conn: Option<Db>,
    wal_index: Option<&'static WalIndex>,
    memo: Memo,
}

/// How many credentials (found or not) a thread keeps for one version of the database; past
/// that it forgets them all (made-up lookup ids cannot grow memory).
const CREDENTIALS_KEPT: usize = 4096;

/// How many services' signings a thread keeps for one version of the database; past that it
/// forgets them all. A signing holds every managed key with its sealed private half (a few
/// kilobytes each): 128 of them are about a megabyte a thread.
const SIGNINGS_KEPT: usize = 128;

/// What a thread read while the database was at one version.
#[derive(Debug, Default)]
struct Memo {
    version: Option<Version>,
    latest_change: Option<i64>,
    /// By lookup id; `None`: no such credential.
    credentials: HashMap<Box<str>, Option<StoredCredential>>,
    /// Managed signings by service; `None`: signing was never turned on.
    signings: HashMap<Uuid, Option<Signing>>,
}

impl Memo {
    /// Keeps what was kept only if the database is still at `version`.
    fn now_at(&mut self, version: Option<Version>) {
        if version.is_none() || version != self.version {
            self.version = version;
            self.latest_change = None;
            self.credentials.clear();
            self.signings.clear();
        }
    }

    fn keep_signing(&mut self, service_id: Uuid, found: &Option<Signing>) {
        keep_bounded(&mut self.signings, SIGNINGS_KEPT, service_id, found.clone());
    }

    fn credential(&self, lookup_id: &str) -> Option<Option<(StoredCredential, i64)>> {
        match self.credentials.get(lookup_id)? {
            None => Some(None),
            Some(credential) => Some(Some((credential.clone(), self.latest_change?))),
        }
    }

    fn keep_credential(&mut self, lookup_id: &str, found: &Option<(StoredCredential, i64)>) {
        if let Some((_, latest)) = found {
            self.latest_change = Some(*latest);
        }
        let credential = found.as_ref().map(|(c, _)| c.clone());
        keep_bounded(
            &mut self.credentials,
            CREDENTIALS_KEPT,
            lookup_id.into(),
            credential,
        );
    }
}

/// Inserts into a map that forgets everything once it holds `bound` entries: what the keys
/// name comes from requests, so it must not grow memory without end.
fn keep_bounded<K: std::hash::Hash + Eq, V>(
    map: &mut HashMap<K, V>,
    bound: usize,
    key: K,
    value: V,
) {
    if map.len() >= bound {
        map.clear();
    }
    map.insert(key, value);
}

impl std::fmt::Debug for InPlace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InPlace")
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

impl InPlace {
    /// No connection yet; each is opened by `manager` (so never after [`Store::close`]).
    /// `file`: the database file, when its WAL index may tell its version (a plain path: a
    /// `file:` URI may choose a VFS that keeps the index elsewhere, and a stale `-shm` file
    /// would then seem never to change).
    ///
    /// [`Store::close`]: crate::Store::close
    pub(crate) fn new(manager: Manager, file: Option<PathBuf>) -> Self {
        Self {
            manager,
            file,
            threads: ThreadLocal::new(),
        }
    }

    /// The credential with `lookup_id` and the change log's newest position, as `read` answers
    /// them, or as it answered them on this thread while the database was as it is now.
    pub(crate) fn credential(
        &self,
        lookup_id: &str,
        read: impl FnOnce(&mut Db) -> Res<Option<(StoredCredential, i64)>>,
    ) -> Option<StoreResult<Option<(StoredCredential, i64)>>> {
        self.answer(
            |memo| memo.credential(lookup_id),
            read,
            |memo, found| memo.keep_credential(lookup_id, found),
        )
    }

    /// The change log's newest position, as [`InPlace::credential`] answers it.
    pub(crate) fn latest_change(
        &self,
        read: impl FnOnce(&mut Db) -> Res<i64>,
    ) -> Option<StoreResult<i64>> {
        self.answer(
            |memo| memo.latest_change,
            read,
            |memo, latest| memo.latest_change = Some(*latest),
        )
    }

    /// The managed signing of `service_id`, as [`InPlace::credential`] answers a credential: a
    /// signature reads it, and it changes only with a commit (a rotation, a compromise, a
    /// signature's recorded use), which changes the version.
    pub(crate) fn signing(
        &self,
        service_id: Uuid,
        read: impl FnOnce(&mut Db) -> Res<Option<Signing>>,
    ) -> Option<StoreResult<Option<Signing>>> {
        self.answer(
            |memo| memo.signings.get(&service_id).cloned(),
            read,
            |memo, found| memo.keep_signing(service_id, found),
        )
    }

    /// What `read` answers on the thread's connection, kept nowhere (what it reads is too large
    /// to keep per thread, and the caller keeps it itself). Nothing recalled, so the version is
    /// not read: a cold issuer's first fetch takes one system call fewer.
    pub(crate) fn read<T>(&self, read: impl FnOnce(&mut Db) -> Res<T>) -> Option<StoreResult<T>> {
        self.on_thread(|thread| thread.run(read))
    }

    /// `recall`ed from the thread's memo while the database's version is the one it was kept
    /// at, else `read` on the thread's connection and kept.
    fn answer<T>(
        &self,
        recall: impl FnOnce(&Memo) -> Option<T>,
        read: impl FnOnce(&mut Db) -> Res<T>,
        keep: impl FnOnce(&mut Memo, &T),
    ) -> Option<StoreResult<T>> {
        self.on_thread(|thread| {
            // Read before the statement: a commit between the two leaves a version that the
            // next request does not see again, so what the statement read is never kept for
            // too long.
            let version = thread.wal_index.and_then(WalIndex::version);
            thread.memo.now_at(version);
            if version.is_some() {
                if let Some(known) = recall(&thread.memo) {
                    return Some(Ok(known));
                }
            }
            let answer = thread.run(read)?;
            if let (Ok(answer), Some(_)) = (&answer, version) {
                keep(&mut thread.memo, answer);
            }
            Some(answer)
        })
    }

    /// `use_thread` on this thread's state, its connection open. `None` when there is no
    /// connection to use now (it cannot be opened, or the thread is already in a read): the
    /// caller then uses the pool.
    fn on_thread<T>(
        &self,
        use_thread: impl FnOnce(&mut Thread) -> Option<StoreResult<T>>,
    ) -> Option<StoreResult<T>> {
        let cell: &RefCell<Thread> = self.threads.get_or_default();
        let mut thread = cell.try_borrow_mut().ok()?;
        if thread.conn.is_none() {
            let mut conn = self.manager.open().ok()?;
            // Looked for with the connection open, which keeps the index there; only in WAL
            // mode, where the index is live (a `-shm` file left from another mode is not).
            thread.wal_index = match &self.file {
                Some(file) if in_wal_mode(&mut conn) => WalIndex::of(file),
                _ => None,
            };
            thread.conn = Some(conn);
        }
        use_thread(&mut thread)
    }
}

impl Thread {
    /// `read` on the connection. One that failed a statement is closed, with what the thread
    /// kept, and the thread's next read opens another.
    fn run<T>(&mut self, read: impl FnOnce(&mut Db) -> Res<T>) -> Option<StoreResult<T>> {
        match read(self.conn.as_mut()?) {
            Ok(answer) => Some(Ok(answer)),
            Err(Failure(e)) => {
                *self = Thread::default();
                Some(Err(e))
            }
        }
    }
}

/// Whether a connection's database is in WAL mode.
fn in_wal_mode(conn: &mut Db) -> bool {
    use diesel::RunQueryDsl;
    let Db::Sqlite(conn) = conn else {
        return false;
    };
    let mode = diesel::dsl::sql::<diesel::sql_types::Text>(
        "(SELECT journal_mode FROM pragma_journal_mode())",
    );
    diesel::select(mode)
        .get_result::<String>(conn)
        .is_ok_and(|mode| mode.eq_ignore_ascii_case("wal"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use registry_domain::ports::CredentialOwner;

    fn credential(hash: &str) -> StoredCredential {
        StoredCredential {
            owner: CredentialOwner::Account(uuid::Uuid::nil()),
            hash: hash.into(),
        }
    }

    #[test]
    fn a_memo_answers_only_for_the_version_it_was_kept_at() {
        let mut memo = Memo::default();
        assert_eq!(memo.credential("a"), None);
        memo.keep_credential("a", &Some((credential("h"), 7)));
        memo.keep_credential("gone", &None);
        assert_eq!(memo.credential("a"), Some(Some((credential("h"), 7))));
        assert_eq!(memo.credential("gone"), Some(None), "a miss is an answer");
        assert_eq!(memo.latest_change, Some(7));
        memo.now_at(None);
        assert_eq!(memo.credential("a"), None, "no version: nothing kept");
        assert_eq!(memo.latest_change, None);
    }

    /// A folder of a test's own, removed when the test ends.
    struct Scratch(std::path::PathBuf);

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A WAL database with one table (in `Scratch`), and the threads' reads of it.
    fn database(
        name: &str,
    ) -> (
        Scratch,
        std::path::PathBuf,
        diesel::SqliteConnection,
        InPlace,
    ) {
        use crate::pool::{ConnectGate, Reachability};
        use diesel::connection::SimpleConnection;
        use diesel::Connection;
        let dir = std::env::temp_dir().join(format!("in-place-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        let mut admin = diesel::SqliteConnection::establish(path.to_str().unwrap()).unwrap();
        admin
            .batch_execute("PRAGMA journal_mode = WAL; CREATE TABLE t (x INTEGER);")
            .unwrap();
        let manager = Manager::new(
            crate::target::Target::Sqlite(path.display().to_string()),
            std::sync::Arc::new(Reachability::default()),
            std::sync::Arc::new(ConnectGate::default()),
        );
        let in_place = InPlace::new(manager.clone(), manager.versioned_file());
        (Scratch(dir), path, admin, in_place)
    }

    fn latest(in_place: &InPlace, read: impl FnOnce(&mut Db) -> Res<i64>) -> i64 {
        in_place.latest_change(read).expect("in place").unwrap()
    }

    #[test]
    fn a_thread_answers_from_memory_until_a_commit() {
        use diesel::connection::SimpleConnection;
        let (_dir, _path, mut admin, in_place) = database("memory.db");
        assert_eq!(latest(&in_place, |_| Ok(1)), 1);
        let unread = |_: &mut Db| -> Res<i64> { panic!("the database is unchanged") };
        assert_eq!(latest(&in_place, unread), 1, "from memory");
        assert_eq!(latest(&in_place, unread), 1, "again");
        admin.batch_execute("INSERT INTO t VALUES (1);").unwrap();
        assert_eq!(latest(&in_place, |_| Ok(2)), 2, "read again after a commit");
        // A commit that lands while the statement runs: what it read is not kept past it (the
        // version is read before the statement).
        admin.batch_execute("INSERT INTO t VALUES (1);").unwrap();
        let committing = |_: &mut Db| -> Res<i64> {
            admin.batch_execute("INSERT INTO t VALUES (2);").unwrap();
            Ok(2)
        };
        assert_eq!(latest(&in_place, committing), 2);
        assert_eq!(latest(&in_place, |_| Ok(3)), 3, "read again");
        assert_eq!(latest(&in_place, unread), 3);
    }

    #[test]
    fn a_failed_read_forgets_what_the_thread_kept() {
        let (_dir, _path, _admin, in_place) = database("failed.db");
        assert_eq!(latest(&in_place, |_| Ok(1)), 1);
        let failed = in_place.credential("another", |_| {
            Err(Failure(registry_domain::StoreError::Unavailable(
                "gone".into(),
            )))
        });
        assert!(matches!(failed, Some(Err(_))));
        assert_eq!(
            latest(&in_place, |_| Ok(4)),
            4,
            "a new connection reads again"
        );
    }

    /// The POSIX locks this process holds on `file`, as `/proc/locks` lists them: the most of
    /// several readings. One reading can miss a line: the kernel writes the list a piece at a
    /// time, and locks that the tests beside this one take and release meanwhile move the
    /// lines (seen about once in a hundred runs). A lock really gone stays gone in every reading.
    fn locks_on(file: &std::path::Path) -> usize {
        use std::os::unix::fs::MetadataExt;
        let inode = format!(":{}", std::fs::metadata(file).unwrap().ino());
        let pid = std::process::id().to_string();
        let reading = || {
            std::fs::read_to_string("/proc/locks")
                .unwrap()
                .lines()
                .filter(|line| {
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    fields.get(4) == Some(&pid.as_str())
                        && fields.get(5).is_some_and(|id| id.ends_with(&inode))
                })
                .count()
        };
        (0..5)
            .map(|_| {
                std::thread::sleep(std::time::Duration::from_millis(2));
                reading()
            })
            .max()
            .unwrap_or(0)
    }

    #[test]
    fn a_failed_read_leaves_sqlites_locks_on_the_index_in_place() {
        let (_dir, path, _admin, in_place) = database("locks.db");
        assert_eq!(latest(&in_place, |_| Ok(1)), 1);
        let mut shm = path.clone().into_os_string();
        shm.push("-shm");
        let held = locks_on(std::path::Path::new(&shm));
        assert!(held > 0, "the connections mark the index as in use");
        let failed = in_place.credential("another", |_| {
            Err(Failure(registry_domain::StoreError::Unavailable(
                "gone".into(),
            )))
        });
        assert!(matches!(failed, Some(Err(_))));
        // The failed connection closed; the other one's locks must not go with it, as they
        // would if a descriptor of the file had been closed.
        assert!(locks_on(std::path::Path::new(&shm)) > 0);
    }

    #[test]
    fn a_memos_signings_go_with_its_version_and_past_their_bound() {
        let mut memo = Memo::default();
        let service = Uuid::new_v4();
        memo.keep_signing(service, &None);
        assert_eq!(
            memo.signings.get(&service),
            Some(&None),
            "no signing is an answer"
        );
        memo.now_at(None);
        assert!(memo.signings.is_empty(), "no version: nothing kept");
        for _ in 0..SIGNINGS_KEPT {
            memo.keep_signing(Uuid::new_v4(), &None);
        }
        memo.keep_signing(service, &None);
        assert_eq!(memo.signings.len(), 1);
    }

    #[test]
    fn a_memo_forgets_everything_past_its_bound() {
        let mut memo = Memo::default();
        for i in 0..CREDENTIALS_KEPT {
            memo.keep_credential(&i.to_string(), &None);
        }
        memo.keep_credential("one more", &None);
        assert_eq!(memo.credentials.len(), 1);
        assert_eq!(memo.credential("one more"), Some(None));
    }
}
