//! Whether a SQLite database in WAL mode changed, told without a lock: from its WAL index (the
//! `-shm` file beside it, which every connection of every process maps).
//!
//! A read transaction takes SQLite's locks even when nothing changed: a process-wide mutex on
//! the WAL index, the VFS's global mutex twice, and `fcntl` locks on one inode that the kernel
//! serialises. On many cores every worker's credential read queued there (issue 39, 16 cores:
//! `pthread_mutex_lock`, futex waits and `posix_lock_inode` among the top of P2's profile). The
//! WAL index's header says the same thing for the price of one `pread` on a file this thread
//! alone holds open.
//!
//! The header (48 bytes, stored twice: <https://www.sqlite.org/walformat.html>) counts every
//! write transaction and names the last committed frame and its checksum, so every commit
//! changes it, and a checkpoint that restarts the log changes its salts. A writer writes the
//! second copy, then (after a memory barrier) the first; this reads the first, then the second,
//! as SQLite's own readers do. Both copies equal to a header read earlier therefore mean that no
//! commit had finished writing the header since: the database is as it was, and what was read
//! from it then is still its answer. A torn or uninitialised header is no version at all: the
//! caller then reads the database.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// The length of one copy of the WAL-index header.
const HEADER: usize = 48;

/// The byte of the header that says it was initialised (`isInit`).
const IS_INIT: usize = 12;

/// The state of the database as its WAL index's header names it: equal versions, equal content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Version([u8; HEADER]);

/// One thread's handle on a database's WAL index: a file of its own, so that no other thread
/// shares its reference count.
#[derive(Debug)]
pub(crate) struct WalIndex {
    file: File,
}

impl WalIndex {
    /// The WAL index of the SQLite database at `database`, when it has one (a database in WAL
    /// mode, with a connection of this process open on it, has).
    pub(crate) fn open(database: &Path) -> Option<Self> {
        let mut name = database.as_os_str().to_owned();
        name.push("-shm");
        File::open(name).ok().map(|file| Self { file })
    }

    /// The database's version now; `None` while a writer is rewriting the header, before the
    /// index is initialised, or when it cannot be read.
    pub(crate) fn version(&self) -> Option<Version> {
        let mut both = [0u8; 2 * HEADER];
        self.file.read_exact_at(&mut both, 0).ok()?;
        version_of(&both)
    }
}

/// The version two header copies name, when they agree and say they were initialised.
fn version_of(both: &[u8; 2 * HEADER]) -> Option<Version> {
    let (first, second) = both.split_at(HEADER);
    if first != second || first[IS_INIT] != 1 {
        return None;
    }
    first.try_into().ok().map(Version)
}

#[cfg(test)]
mod tests {
    use super::*;
    use diesel::connection::SimpleConnection;
    use diesel::{Connection, SqliteConnection};

    #[test]
    fn copies_that_differ_or_were_never_initialised_name_no_version() {
        let mut both = [7u8; 2 * HEADER];
        both[IS_INIT] = 1;
        both[HEADER + IS_INIT] = 1;
        assert!(version_of(&both).is_some());
        let mut torn = both;
        torn[HEADER + 20] = 8;
        assert_eq!(version_of(&torn), None, "a writer between the copies");
        let mut fresh = both;
        fresh[IS_INIT] = 0;
        fresh[HEADER + IS_INIT] = 0;
        assert_eq!(version_of(&fresh), None, "not initialised");
    }

    #[test]
    fn every_commit_by_any_connection_changes_the_version_and_reads_do_not() {
        let dir = std::env::temp_dir().join(format!("wal-index-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("v.db");
        let open = || {
            let mut conn = SqliteConnection::establish(path.to_str().unwrap()).unwrap();
            conn.batch_execute("PRAGMA journal_mode = WAL;").unwrap();
            conn
        };
        let (mut writer, mut reader) = (open(), open());
        writer
            .batch_execute("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1);")
            .unwrap();
        let index = WalIndex::open(&path).expect("a database in WAL mode has a WAL index");
        let before = index.version().expect("an initialised header");
        reader.batch_execute("SELECT * FROM t;").unwrap();
        assert_eq!(index.version(), Some(before), "a read changes nothing");
        writer.batch_execute("INSERT INTO t VALUES (2);").unwrap();
        let after = index.version().unwrap();
        assert_ne!(after, before, "a commit");
        writer.batch_execute("UPDATE t SET x = 3;").unwrap();
        assert_ne!(index.version().unwrap(), after, "another commit");
        let restarted = index.version().unwrap();
        writer
            .batch_execute("PRAGMA wal_checkpoint(TRUNCATE); INSERT INTO t VALUES (4);")
            .unwrap();
        assert_ne!(
            index.version().unwrap(),
            restarted,
            "a commit into a log that restarted"
        );
        assert!(WalIndex::open(&dir.join("none.db")).is_none());
        drop((writer, reader));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
