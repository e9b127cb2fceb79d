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
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;
use thread_local::ThreadLocal;

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
    wal_index: Option<WalIndex>,
    memo: Memo,
}

/// How many credentials (found or not) a thread keeps for one version of the database; past
/// that it forgets them all (made-up lookup ids cannot grow memory).
const CREDENTIALS_KEPT: usize = 4096;

/// What a thread read while the database was at one version.
#[derive(Debug, Default)]
struct Memo {
    version: Option<Version>,
    latest_change: Option<i64>,
    /// By lookup id; `None`: no such credential.
    credentials: HashMap<Box<str>, Option<StoredCredential>>,
}

impl Memo {
    /// Keeps what was kept only if the database is still at `version`.
    fn now_at(&mut self, version: Option<Version>) {
        if version.is_none() || version != self.version {
            self.version = version;
            self.latest_change = None;
            self.credentials.clear();
        }
    }

    fn credential(&self, lookup_id: &str) -> Option<Option<(StoredCredential, i64)>> {
        match self.credentials.get(lookup_id)? {
            None => Some(None),
            Some(credential) => Some(Some((credential.clone(), self.latest_change?))),
        }
    }

    fn keep_credential(&mut self, lookup_id: &str, found: &Option<(StoredCredential, i64)>) {
        if self.credentials.len() >= CREDENTIALS_KEPT {
            self.credentials.clear();
        }
        if let Some((_, latest)) = found {
            self.latest_change = Some(*latest);
        }
        self.credentials
            .insert(lookup_id.into(), found.as_ref().map(|(c, _)| c.clone()));
    }
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

    /// `recall`ed from the thread's memo while the database's version is the one it was kept
    /// at, else `read` on the thread's connection and kept. `None` when there is no connection
    /// to use now (it cannot be opened, or the thread is already in a read): the caller then
    /// uses the pool. A connection that failed a statement is closed, and the thread's next
    /// read opens another.
    fn answer<T>(
        &self,
        recall: impl FnOnce(&Memo) -> Option<T>,
        read: impl FnOnce(&mut Db) -> Res<T>,
        keep: impl FnOnce(&mut Memo, &T),
    ) -> Option<StoreResult<T>> {
        let cell: &RefCell<Thread> = self.threads.get_or_default();
        let mut thread = cell.try_borrow_mut().ok()?;
        let thread = &mut *thread;
        if thread.conn.is_none() {
            thread.conn = Some(self.manager.open().ok()?);
            // Opened after the connection, which made sure the index exists.
            thread.wal_index = self.file.as_deref().and_then(WalIndex::open);
        }
        // Read before the statement: a commit between the two leaves a version that the next
        // request does not see again, so what the statement read is never kept for too long.
        let version = thread.wal_index.as_ref().and_then(WalIndex::version);
        thread.memo.now_at(version);
        if version.is_some() {
            if let Some(known) = recall(&thread.memo) {
                return Some(Ok(known));
            }
        }
        let conn = thread.conn.as_mut()?;
        match read(conn) {
            Ok(answer) => {
                if version.is_some() {
                    keep(&mut thread.memo, &answer);
                }
                Some(Ok(answer))
            }
            Err(Failure(e)) => {
                *thread = Thread::default();
                Some(Err(e))
            }
        }
    }
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
