//! Fresh, empty databases for tests: one per call, never shared between tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, Once};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The variable naming an admin URL of a throwaway PostgreSQL cluster, e.g.
/// `postgres://postgres@127.0.0.1:5433/postgres`.
pub const POSTGRES_URL_VAR: &str = "REGISTRY_TEST_POSTGRES_URL";

static COUNTER: AtomicU32 = AtomicU32::new(0);

fn postgres_admin_url() -> Option<String> {
    std::env::var(POSTGRES_URL_VAR)
        .ok()
        .filter(|url| !url.trim().is_empty())
}

/// `"postgres"` when [`POSTGRES_URL_VAR`] is set, else `"sqlite"`: the backend of every URL
/// [`fresh_database_url`] returns in this process.
pub fn backend_name() -> &'static str {
    if postgres_admin_url().is_some() {
        "postgres"
    } else {
        "sqlite"
    }
}

/// The URL of a new, empty database (no schema): a new database on the cluster named by
/// [`POSTGRES_URL_VAR`] when it is set, else a new SQLite file in a temporary directory
/// (`sqlite://…`). Panics with the reason when the database cannot be made. A PostgreSQL
/// database made on a named thread (libtest names each test's) is dropped when that thread
/// ends: a helper thread that makes one for its test must stay unnamed.
pub fn fresh_database_url() -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    match postgres_admin_url() {
        Some(admin) => fresh_postgres(&admin, n),
        None => fresh_sqlite(n),
    }
}

fn fresh_sqlite(n: u32) -> String {
    let root = std::env::temp_dir().join("registry-tests");
    static SWEEP: Once = Once::new();
    SWEEP.call_once(|| sweep_dead_processes(&root));
    let dir = root.join(std::process::id().to_string());
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    format!("sqlite://{}", dir.join(format!("db-{n}.db")).display())
}

/// Test processes cannot clean up when they exit, so each one removes the directories of
/// earlier ones that are gone (Linux: a process is alive while `/proc/PID` exists).
fn sweep_dead_processes(root: &Path) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid != std::process::id() && !Path::new("/proc").join(pid.to_string()).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn fresh_postgres(admin_url: &str, n: u32) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let name = format!("registry_test_{}_{n}_{nanos}", std::process::id());
    let psql = postgres_tool("psql");
    // Parallel tests: one CREATE DATABASE at a time (they all copy template1).
    static CREATE: Mutex<()> = Mutex::new(());
    let _serial = CREATE.lock().unwrap_or_else(|e| e.into_inner());
    let mut last_error = String::new();
    for attempt in 0..5 {
        if attempt > 0 {
            std::thread::sleep(Duration::from_millis(200 * attempt));
        }
        let output = Command::new(&psql)
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", admin_url, "-c"])
            .arg(format!("CREATE DATABASE \"{name}\""))
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", psql.display()));
        if output.status.success() {
            DroppedWithTheTest::register(&psql, admin_url, &name);
            return with_database(admin_url, &name);
        }
        last_error = String::from_utf8_lossy(&output.stderr).trim().to_owned();
    }
    panic!("cannot create database {name} on {POSTGRES_URL_VAR}: {last_error}");
}

/// The databases a test made, dropped when its thread ends: a run makes some three hundred of
/// them, several gigabytes when all are kept.
///
/// Only a test's own thread (libtest names it for the test) registers; a database made on a thread
/// the test spawned lives until the cluster goes, since that thread may end before its test does.
/// The thread's locals (its servers, its stores) are gone by the time its thread-locals are
/// dropped, also after a panic; `WITH (FORCE)` closes what a server left behind.
struct DroppedWithTheTest {
    psql: PathBuf,
    admin_url: String,
    names: Vec<String>,
}

thread_local! {
    static MADE_BY_THIS_TEST: std::cell::RefCell<Option<DroppedWithTheTest>> =
        const { std::cell::RefCell::new(None) };
}

impl DroppedWithTheTest {
    fn register(psql: &Path, admin_url: &str, name: &str) {
        let thread = std::thread::current();
        if thread.name().is_none_or(|n| n == "main") {
            return;
        }
        // A thread-local being torn down cannot take more: the database then stays.
        let _ = MADE_BY_THIS_TEST.try_with(|made| {
            made.borrow_mut()
                .get_or_insert_with(|| DroppedWithTheTest {
                    psql: psql.to_owned(),
                    admin_url: admin_url.to_owned(),
                    names: Vec::new(),
                })
                .names
                .push(name.to_owned());
        });
    }
}

impl Drop for DroppedWithTheTest {
    fn drop(&mut self) {
        // Never panics: a panic here would abort the whole test binary.
        for name in &self.names {
            let _ = Command::new(&self.psql)
                .args(["-X", "-q", "-d", &self.admin_url, "-c"])
                .arg(format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
                .output();
        }
    }
}

/// Runs one SQL statement on a test database (SQLite or `psql`), as if someone changed a row
/// outside the registry.
pub fn execute_sql(database_url: &str, statement: &str) {
    run_sql(
        database_url,
        statement,
        "db.executescript(sys.argv[2]); db.commit()",
        &[],
    );
}

/// Runs one SQL query on a test database (SQLite or `psql`); returns its rows, each row's
/// columns joined by `|`.
pub fn query_sql(database_url: &str, query: &str) -> Vec<String> {
    let rows = "for row in db.execute(sys.argv[2]): print('|'.join(str(c) for c in row))";
    run_sql(database_url, query, rows, &["-tA"])
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Runs `sql` on a test database, by Python's `sqlite3` running `python` (`sys.argv[2]` holds
/// the SQL) or by `psql` with `psql_flags`; its output.
fn run_sql(database_url: &str, sql: &str, python: &str, psql_flags: &[&str]) -> String {
    let output = match database_url.strip_prefix("sqlite://") {
        Some(path) => sqlite_python(path, python, sql),
        None => Command::new(postgres_tool("psql"))
            .args([database_url, "-v", "ON_ERROR_STOP=1"])
            .args(psql_flags)
            .args(["-c", sql])
            .output()
            .expect("run psql"),
    };
    assert!(
        output.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A database lock held by another process until dropped (see [`hold_migration_lock`] and
/// [`hold_write_lock`]).
#[derive(Debug)]
pub struct HeldLock(std::process::Child);

/// The lock a registry takes to apply its migrations (SQLite's write lock, PostgreSQL's advisory
/// lock `registry`), held by another process until dropped: a start that waits for it. Returns
/// once it is held.
pub fn hold_migration_lock(database_url: &str) -> HeldLock {
    // The registry's `MIGRATION_LOCK` (0x7265_6769_7374_7279, "registry").
    hold_lock(
        database_url,
        "SELECT pg_advisory_xact_lock(8243108395577799289);",
    )
}

/// The lock every logged write of a registry takes first (SQLite's write lock, PostgreSQL's
/// lock on the change log; not the writes set aside, such as last use), held by another
/// process until dropped: those writes wait for it, reads do not. Returns once it is held.
pub fn hold_write_lock(database_url: &str) -> HeldLock {
    hold_lock(
        database_url,
        "LOCK TABLE changes IN SHARE ROW EXCLUSIVE MODE;",
    )
}

/// Makes a SQLite database unreadable by any other process until dropped: the locks of its
/// shared-memory file that every read takes (bytes 120 to 127: the WAL's write, checkpoint,
/// recovery and readers' marks), held exclusively. Returns once they are held.
pub fn hold_sqlite_reads(database_url: &str) -> HeldLock {
    use std::process::Stdio;
    let path = database_url
        .strip_prefix("sqlite://")
        .expect("a SQLite database");
    let child = Command::new("python3")
        .arg("-c")
        .arg(
            "import fcntl, os, sys\n\
             fd = os.open(sys.argv[1] + '-shm', os.O_RDWR)\n\
             fcntl.lockf(fd, fcntl.LOCK_EX, 8, 120)\n\
             print('locked', flush=True)\n\
             sys.stdin.read()",
        )
        .arg(path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    once_locked(child)
}

/// The lock `child` takes, once it says `locked` on its stdout.
fn once_locked(mut child: std::process::Child) -> HeldLock {
    use std::io::{BufRead, BufReader};
    let stdout = child.stdout.take().expect("stdout");
    let locked = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|line| line.trim() == "locked");
    assert!(locked, "the lock was not taken");
    HeldLock(child)
}

/// Holds SQLite's write lock, or runs `postgres_statement` in an open PostgreSQL transaction.
fn hold_lock(database_url: &str, postgres_statement: &str) -> HeldLock {
    use std::io::Write;
    use std::process::Stdio;
    let child = match database_url.strip_prefix("sqlite://") {
        Some(path) => Command::new("python3")
            .arg("-c")
            .arg(
                "import sqlite3, sys\n\
                 db = sqlite3.connect(sys.argv[1], isolation_level=None)\n\
                 db.execute('BEGIN IMMEDIATE')\n\
                 print('locked', flush=True)\n\
                 sys.stdin.read()\n\
                 db.execute('COMMIT')",
            )
            .arg(path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3"),
        None => {
            let mut psql = Command::new(postgres_tool("psql"))
                .args([database_url, "-q", "-v", "ON_ERROR_STOP=1"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("psql");
            writeln!(
                psql.stdin.as_mut().expect("stdin"),
                "BEGIN;\n{postgres_statement}\n\\echo locked"
            )
            .expect("write to psql");
            psql
        }
    };
    once_locked(child)
}

impl Drop for HeldLock {
    fn drop(&mut self) {
        // Closing stdin ends the transaction (Python commits, psql's session ends).
        drop(self.0.stdin.take());
        let _ = self.0.wait();
    }
}

/// Runs `code` with Python's `sqlite3` module, `db` open on the SQLite file at `path` and
/// `sys.argv[2]` = `argument`: the Python every machine of ours has, rather than the sqlite3
/// shell, which would be one more package to install.
pub fn sqlite_python(path: &str, code: &str, argument: &str) -> Output {
    Command::new("python3")
        .arg("-c")
        .arg(format!(
            "import sqlite3, sys\ndb = sqlite3.connect(sys.argv[1])\n{code}"
        ))
        .arg(path)
        .arg(argument)
        .output()
        .expect("python3 is needed to read SQLite databases in tests")
}

/// A PostgreSQL client tool (`psql`, `pg_dump`): from `PATH` (where `cargo xtask test` puts
/// the binaries of the cluster it started), else from the newest `/usr/lib/postgresql/*/bin`.
pub fn postgres_tool(name: &str) -> PathBuf {
    let on_path = Command::new(name)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if on_path {
        return PathBuf::from(name);
    }
    let mut candidates: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            let path = e.path().join("bin").join(name);
            path.exists().then_some((version, path))
        })
        .collect();
    candidates.sort();
    candidates
        .pop()
        .map(|(_, path)| path)
        .unwrap_or_else(|| panic!("{POSTGRES_URL_VAR} is set but {name} is not installed"))
}

/// `admin_url` with its database replaced by `database` (user, host, port and query kept).
fn with_database(admin_url: &str, database: &str) -> String {
    let (scheme, rest) = admin_url
        .split_once("://")
        .unwrap_or_else(|| panic!("{POSTGRES_URL_VAR} is not a postgres:// URL"));
    let (before_query, query) = match rest.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (rest, None),
    };
    let authority = before_query
        .split_once('/')
        .map_or(before_query, |(a, _)| a);
    let mut url = format!("{scheme}://{authority}/{database}");
    if let Some(query) = query {
        url.push('?');
        url.push_str(query);
    }
    url
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_is_replaced_and_the_rest_kept() {
        let cases = [
            (
                "postgres://postgres@127.0.0.1:5433/postgres",
                "postgres://postgres@127.0.0.1:5433/t1",
            ),
            (
                "postgres://u:p@h:1/admin?sslmode=disable",
                "postgres://u:p@h:1/t1?sslmode=disable",
            ),
            ("postgresql://h", "postgresql://h/t1"),
            ("postgres://h?host=/tmp/s", "postgres://h/t1?host=/tmp/s"),
        ];
        for (admin, expected) in cases {
            assert_eq!(with_database(admin, "t1"), expected, "{admin}");
        }
    }
}
