//! Whether a SQLite database in WAL mode changed, told without a lock: from its WAL index (the
//! `-shm` file beside it, which every connection of every process maps).
//!
//! A read transaction takes SQLite's locks even when nothing changed: a process-wide mutex on
//! the WAL index, the VFS's global mutex twice, and `fcntl` locks on one inode that the kernel
//! serialises. On many cores every worker's credential read queued there (issue 39, 16 cores:
//! `pthread_mutex_lock`, futex waits and `posix_lock_inode` among the top of P2's profile). The
//! WAL index's header says the same thing for the price of one `pread`.
//!
//! The header (48 bytes, stored twice: <https://www.sqlite.org/walformat.html>) names the last
//! committed frame (`mxFrame`), the running checksum of the log up to it, and the log's salts,
//! so every commit changes it: it appends at least one frame. A checkpoint that restarts the
//! log sets `mxFrame` back, but with new salts (the first one counts up, the second is
//! random), and every frame's checksum starts from them, so a restarted log never names a
//! state it named before. A writer writes both copies before its commit returns, each with a
//! checksum of its first 40 bytes; a read that a writer tears finds copies that differ or a
//! checksum that does not hold (no version). Both copies equal to a header read earlier
//! therefore mean that no commit has returned since: the database is as it was, and what was
//! read from it then is still its answer.
//!
//! The header is read with `pread`, where SQLite's connections write it through their mappings
//! of the file: both go through the kernel's one cache of the file's pages. That holds on the
//! local file systems named in `LOCAL_FILE_SYSTEMS`; on any other (NFS, SMB, FUSE, 9p,
//! virtiofs…, where a read may bypass that cache) no index is used, and every read asks SQLite.
//!
//! Each `-shm` file is opened once per process and never closed. SQLite's locks on it are POSIX
//! record locks, which belong to the process: closing any descriptor of the file would release
//! every lock that the process's connections hold on it (the mark that the index is in use, the
//! read marks, the write lock), and another process could then rebuild the index under them.
//! When the last connection closes, SQLite deletes the file and the next one makes another,
//! which gets a descriptor of its own.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

/// The length of one copy of the WAL-index header.
const HEADER: usize = 48;

/// The byte of the header that says it was initialised (`isInit`).
const IS_INIT: usize = 12;

/// Where the header's checksum of its own first bytes (`aCksum`) starts: it covers the bytes
/// before it.
const CHECKSUM: usize = 40;

/// The file systems (`statfs`'s type, `linux/magic.h`) on which `pread` and every mapping of a
/// file share the kernel's one cache of its pages: ext2 to ext4, XFS, Btrfs, F2FS, tmpfs and
/// overlayfs (whose files are those of the layers beneath).
const LOCAL_FILE_SYSTEMS: [i64; 6] = [
    0xEF53,
    0x5846_5342,
    0x9123_683E,
    0xF2F5_2010,
    0x0102_1994,
    0x794C_7630,
];

/// The state of the database as its WAL index's header names it: equal versions, equal content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Version([u8; HEADER]);

/// A database's WAL index, open for the rest of the process.
#[derive(Debug)]
pub(crate) struct WalIndex {
    file: File,
}

/// Every WAL index this process opened, by the database's canonical path: each stays open.
static OPENED: Mutex<Vec<(PathBuf, &'static WalIndex)>> = Mutex::new(Vec::new());

impl WalIndex {
    /// The WAL index of the SQLite database at `database`, when it has one: a database in WAL
    /// mode with a connection of this process open on it has. Named as SQLite names it, after
    /// the database's path with its links resolved. An index kept from before is answered only
    /// while it is still the file of that name: once every connection closed, SQLite deletes
    /// the file, and the next one makes another, which a descriptor of the old one would never
    /// see change.
    pub(crate) fn of(database: &Path) -> Option<&'static WalIndex> {
        let database = database.canonicalize().ok()?;
        if !on_a_local_file_system(&database) {
            return None;
        }
        let mut name = database.clone().into_os_string();
        name.push("-shm");
        let current = std::fs::metadata(&name).ok()?;
        let mut opened = OPENED.lock().unwrap_or_else(PoisonError::into_inner);
        let kept = opened.iter().position(|(path, _)| *path == database);
        if let Some(at) = kept {
            let index = opened[at].1;
            if index.file.metadata().is_ok_and(|m| same_file(&m, &current)) {
                return Some(index);
            }
        }
        let index: &'static WalIndex = Box::leak(Box::new(WalIndex {
            file: File::open(name).ok()?,
        }));
        match kept {
            // The old descriptor stays open (leaked): closing it would drop the locks.
            Some(at) => opened[at].1 = index,
            None => opened.push((database, index)),
        }
        Some(index)
    }

    /// The database's version now; `None` while a writer is rewriting the header, before the
    /// index is initialised, or when it cannot be read.
    pub(crate) fn version(&self) -> Option<Version> {
        let mut both = [0u8; 2 * HEADER];
        self.file.read_exact_at(&mut both, 0).ok()?;
        version_of(&both)
    }
}

/// Whether `path` lies on one of the [`LOCAL_FILE_SYSTEMS`].
// `f_type` is an `i64` on x86-64 but 32 bits wide on other machines.
#[allow(clippy::useless_conversion)]
fn on_a_local_file_system(path: &Path) -> bool {
    rustix::fs::statfs(path).is_ok_and(|fs| LOCAL_FILE_SYSTEMS.contains(&i64::from(fs.f_type)))
}

/// Whether two metadata are of one file (device and inode).
fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    (a.dev(), a.ino()) == (b.dev(), b.ino())
}

/// The version two header copies name, when they agree, say they were initialised and hold
/// their checksum.
fn version_of(both: &[u8; 2 * HEADER]) -> Option<Version> {
    let (first, second) = both.split_at(HEADER);
    if first != second || first[IS_INIT] != 1 || checksum(&first[..CHECKSUM]) != first[CHECKSUM..] {
        return None;
    }
    first.try_into().ok().map(Version)
}

/// SQLite's checksum of a WAL-index header's first bytes, as it stores it: over words of the
/// machine's own byte order, two sums that each feed the other (`walChecksumBytes`).
fn checksum(bytes: &[u8]) -> [u8; 8] {
    let word =
        |at: usize| u32::from_ne_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    let (mut s1, mut s2) = (0u32, 0u32);
    for pair in (0..bytes.len()).step_by(8) {
        s1 = s1.wrapping_add(word(pair)).wrapping_add(s2);
        s2 = s2.wrapping_add(word(pair + 4)).wrapping_add(s1);
    }
    let mut sums = [0u8; 8];
    sums[..4].copy_from_slice(&s1.to_ne_bytes());
    sums[4..].copy_from_slice(&s2.to_ne_bytes());
    sums
}

#[cfg(test)]
mod tests {
    use super::*;
    use diesel::connection::SimpleConnection;
    use diesel::{Connection, SqliteConnection};

    #[test]
    fn copies_that_differ_were_never_initialised_or_fail_their_checksum_name_no_version() {
        let mut header = [7u8; HEADER];
        header[IS_INIT] = 1;
        let sums = checksum(&header[..CHECKSUM]);
        header[CHECKSUM..].copy_from_slice(&sums);
        let mut both = [0u8; 2 * HEADER];
        both[..HEADER].copy_from_slice(&header);
        both[HEADER..].copy_from_slice(&header);
        assert!(version_of(&both).is_some());
        let mut torn = both;
        torn[HEADER + 20] = 8;
        assert_eq!(version_of(&torn), None, "a writer between the copies");
        let mut mixed = both;
        mixed[20] = 8;
        mixed[HEADER + 20] = 8;
        assert_eq!(version_of(&mixed), None, "both copies torn alike");
        let mut fresh = both;
        fresh[IS_INIT] = 0;
        fresh[HEADER + IS_INIT] = 0;
        assert_eq!(version_of(&fresh), None, "not initialised");
    }

    #[test]
    fn the_index_is_read_on_local_file_systems_only() {
        assert!(on_a_local_file_system(&std::env::temp_dir()));
        assert!(!on_a_local_file_system(Path::new("/proc")), "procfs");
        assert!(!on_a_local_file_system(Path::new("/nowhere")));
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
        let index = WalIndex::of(&path).expect("a database in WAL mode has a WAL index");
        let before = index.version().expect("an initialised header");
        reader.batch_execute("SELECT * FROM t;").unwrap();
        assert_eq!(index.version(), Some(before), "a read changes nothing");
        writer.batch_execute("INSERT INTO t VALUES (2);").unwrap();
        let after = index.version().unwrap();
        assert_ne!(after, before, "a commit");
        writer.batch_execute("UPDATE t SET x = 3;").unwrap();
        assert_ne!(index.version().unwrap(), after, "another commit");
        // A log checkpointed to its end restarts at the next commit, from frame 0 again: its
        // versions are still none seen before.
        let mut seen = vec![before, after, index.version().unwrap()];
        for round in 0..3 {
            writer
                .batch_execute("PRAGMA wal_checkpoint(TRUNCATE);")
                .unwrap();
            seen.push(index.version().unwrap());
            for x in 0..2 {
                writer
                    .batch_execute(&format!("INSERT INTO t VALUES ({round}{x});"))
                    .unwrap();
                let version = index.version().unwrap();
                assert!(
                    !seen.contains(&version),
                    "a commit into a log that restarted (round {round}, commit {x})"
                );
                seen.push(version);
            }
        }
        assert!(WalIndex::of(&dir.join("none.db")).is_none());
        let link = dir.join("link.db");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(
            std::ptr::eq(WalIndex::of(&link).unwrap(), index),
            "one index per database file, whatever names it"
        );
        // The last connection closed: SQLite deleted the index file, and the next one makes
        // another.
        drop((writer, reader));
        assert!(!dir.join("v.db-shm").exists());
        let mut again = open();
        again.batch_execute("SELECT * FROM t;").unwrap();
        let renewed = WalIndex::of(&path).unwrap();
        assert!(
            !std::ptr::eq(renewed, index),
            "a new index file, a new descriptor"
        );
        let before = renewed.version().unwrap();
        again.batch_execute("INSERT INTO t VALUES (5);").unwrap();
        assert_ne!(
            renewed.version().unwrap(),
            before,
            "seen through the new descriptor"
        );
        drop(again);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
