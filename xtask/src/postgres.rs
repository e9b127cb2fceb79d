//! A throwaway PostgreSQL cluster: a temporary data directory, a free loopback port, the unix
//! socket inside the temporary directory, no password (trust), stopped and deleted on drop.
//! Without durability (`fsync=off`) unless started with [`Cluster::start_durable`].
//!
//! The server binaries are the machine's when it has them (`PATH`, Debian's
//! `/usr/lib/postgresql/N/bin`), else those that the `pgserver` wheel ships, installed once from
//! PyPI into `target/postgresql/venv` with the machine's Python: no root, no package manager.

use crate::cmd::{output, run, succeeds};
use crate::processes::{children_of, is_alive};
use anyhow::{bail, Context, Result};
use registry_testkit::free_port;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The wheel whose binaries serve when the machine has none (PostgreSQL 16, manylinux x86_64).
const WHEEL: &str = "pgserver==0.1.4";

/// Set to `wheel`, the binaries come from the wheel even when the machine has its own.
const FROM_VAR: &str = "XTASK_POSTGRES";

/// The lines of the server's log printed after a failed run ([`Cluster::report`]).
const REPORTED_LOG_LINES: usize = 60;

/// A running cluster; dropping it stops it (`pg_ctl stop -m immediate`) and deletes its files.
#[derive(Debug)]
pub struct Cluster {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    /// `initdb` refuses to run as root: then everything runs as this user (`postgres`, else
    /// `nobody`).
    run_as: Option<&'static str>,
    running: bool,
    /// `fsync`, `synchronous_commit` and `full_page_writes` on (PostgreSQL's defaults).
    durable: bool,
    /// More `-c` settings, after (and over) those above.
    settings: Vec<(String, String)>,
}

impl Cluster {
    /// A cluster for one test run: `fsync=off`, so a crash of the machine would lose commits.
    pub fn start() -> Result<Cluster> {
        Cluster::start_with(false)
    }

    /// A cluster with PostgreSQL's durability settings, for the chores that crash it.
    pub fn start_durable() -> Result<Cluster> {
        Cluster::start_with(true)
    }

    fn start_with(durable: bool) -> Result<Cluster> {
        // One process may run several clusters (the fault chores).
        static STARTED: AtomicUsize = AtomicUsize::new(0);
        let (bin, origin) = binaries()?;
        let run_as = if !is_root() {
            None
        } else if succeeds(Command::new("id").args(["-u", "postgres"])) {
            Some("postgres")
        } else if succeeds(Command::new("id").args(["-u", "nobody"])) {
            Some("nobody")
        } else {
            bail!("running as root, and there is neither a `postgres` nor a `nobody` user to run PostgreSQL as");
        };
        let dir = std::env::temp_dir().join(format!(
            "registry-pg-{}-{}",
            std::process::id(),
            STARTED.fetch_add(1, Ordering::SeqCst)
        ));
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        }
        std::fs::create_dir_all(dir.join("socket"))
            .with_context(|| format!("creating {}", dir.display()))?;
        let mut cluster = Cluster {
            bin,
            dir,
            port: free_port()?,
            run_as,
            running: false,
            durable,
            settings: Vec::new(),
        };
        if let Some(user) = run_as {
            run(Command::new("chown").arg("-R").arg(user).arg(&cluster.dir))?;
        }
        let data = cluster.dir.join("data");
        let initdb = "-U postgres --auth=trust -E UTF8 --no-locale".split(' ');
        output(cluster.tool("initdb").arg("-D").arg(&data).args(initdb))
            .context("initdb failed")?;
        cluster.start_server()?;
        println!(
            "PostgreSQL {} ({origin}) listening on 127.0.0.1:{}{}",
            cluster.version(),
            cluster.port,
            if durable { " (fsync on)" } else { "" }
        );
        Ok(cluster)
    }

    /// Starts the server on the cluster's data directory, port and socket directory (also after
    /// [`Cluster::stop_server`]: the fault chores stop and restart it under load).
    pub fn start_server(&mut self) -> Result<()> {
        // A cluster that lives for one test run needs no durability, unless it is crashed.
        let durability = if self.durable { "on" } else { "off" };
        // Dynamic shared memory (the statistics of every database the tests make among its
        // users) in files of the data directory rather than in /dev/shm, which a container
        // may size at 64 MB.
        let mut options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {} -c max_connections=300 \
             -c fsync={durability} -c synchronous_commit={durability} \
             -c full_page_writes={durability} -c dynamic_shared_memory_type=mmap",
            self.port,
            self.dir.join("socket").display()
        );
        for (name, value) in &self.settings {
            options.push_str(&format!(" -c {name}={value}"));
        }
        self.running = true;
        let log = self.server_log();
        let started = output(
            self.pg_ctl("-w -l")
                .arg(log)
                .args(["-o", &options, "start"]),
        );
        if let Err(e) = started {
            let log = self.server_log_text();
            return Err(e.context(format!("pg_ctl start failed; server log:\n{log}")));
        }
        Ok(())
    }

    /// A hot standby of this cluster, streaming from it (`pg_basebackup -R`), started on a port
    /// of its own. It becomes synchronous with [`Cluster::wait_for_standby`].
    pub fn start_standby(&self) -> Result<Cluster> {
        let dir = self.dir.with_file_name(format!(
            "{}-standby",
            self.dir.file_name().unwrap_or_default().to_string_lossy()
        ));
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        }
        std::fs::create_dir_all(dir.join("socket"))
            .with_context(|| format!("creating {}", dir.display()))?;
        if let Some(user) = self.run_as {
            run(Command::new("chown").arg("-R").arg(user).arg(&dir))?;
        }
        let mut standby = Cluster {
            bin: self.bin.clone(),
            dir,
            port: free_port()?,
            run_as: self.run_as,
            running: false,
            durable: self.durable,
            settings: Vec::new(),
        };
        let source = format!(
            "host=127.0.0.1 port={} user=postgres application_name=standby",
            self.port
        );
        output(
            standby
                .tool("pg_basebackup")
                .arg("-D")
                .arg(standby.dir.join("data"))
                // A fast checkpoint: a spread one waits minutes after a bulk load.
                .args(["-R", "-X", "stream", "-c", "fast", "-d", &source]),
        )
        .context("pg_basebackup failed")?;
        standby.start_server()?;
        println!(
            "PostgreSQL standby of 127.0.0.1:{} listening on 127.0.0.1:{}",
            self.port, standby.port
        );
        Ok(standby)
    }

    /// Makes every commit wait for a standby as `synchronous_commit` says (`remote_apply`:
    /// until it has applied it; `synchronous_standby_names = '*'`; a restart of the server),
    /// then waits (at most 30 s) until a standby streams synchronously.
    pub fn wait_for_standby(&mut self, synchronous_commit: &str) -> Result<()> {
        self.settings = vec![
            ("synchronous_standby_names".into(), "'*'".into()),
            ("synchronous_commit".into(), synchronous_commit.into()),
        ];
        self.stop_server()?;
        self.start_server()?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let state = self.sql("SELECT sync_state FROM pg_stat_replication")?;
            if state.trim() == "sync" {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("no synchronous standby after 30 s (pg_stat_replication: {state:?})");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Runs one SQL statement as the superuser (psql); its output, unaligned, without headers.
    pub fn sql(&self, statement: &str) -> Result<String> {
        output(
            Command::new("psql")
                .env("PATH", self.path_with_binaries()?)
                .args(["-X", "-A", "-t", "-d"])
                .arg(self.admin_url())
                .arg("-c")
                .arg(statement),
        )
    }

    /// Promotes a standby to a primary (`pg_ctl promote`, waiting until it accepts writes).
    pub fn promote(&mut self) -> Result<()> {
        output(&mut self.pg_ctl("-w promote")).context("pg_ctl promote failed")?;
        Ok(())
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops the server (`pg_ctl stop -m fast`: clients are disconnected), keeping its files.
    pub fn stop_server(&mut self) -> Result<()> {
        output(&mut self.pg_ctl("-m fast -w stop")).context("pg_ctl stop failed")?;
        self.running = false;
        Ok(())
    }

    /// `kill -9` of the postmaster and of every process it started (a crash: no shutdown
    /// checkpoint, clients cut off mid-transaction), then waits until all are gone; how many
    /// processes died. The files stay: [`Cluster::start_server`] then runs crash recovery.
    pub fn kill9_server(&mut self) -> Result<usize> {
        let postmaster = self.postmaster()?;
        // Stopped first, it cannot start a backend between the listing and the kill.
        output(Command::new("kill").args(["-STOP", &postmaster.to_string()]))?;
        let mut pids = children_of(postmaster);
        pids.push(postmaster);
        output(
            Command::new("kill")
                .arg("-KILL")
                .args(pids.iter().map(u32::to_string)),
        )?;
        self.running = false;
        let deadline = Instant::now() + Duration::from_secs(30);
        while pids.iter().any(|&pid| is_alive(pid)) {
            if Instant::now() > deadline {
                bail!("PostgreSQL processes survived kill -9: {pids:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(pids.len())
    }

    /// The process titles of the client backends (`… 127.0.0.1(PORT) INSERT`, `… idle`, `… idle
    /// in transaction`): what each connection is doing now.
    pub fn backend_titles(&self) -> Result<Vec<String>> {
        Ok(children_of(self.postmaster()?)
            .into_iter()
            .filter_map(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).ok())
            .map(|title| {
                String::from_utf8_lossy(&title)
                    .trim_end_matches(['\0', ' '])
                    .to_owned()
            })
            .filter(|title| title.contains('('))
            .collect())
    }

    fn postmaster(&self) -> Result<u32> {
        let lock = self.dir.join("data/postmaster.pid");
        std::fs::read_to_string(&lock)
            .with_context(|| format!("reading {}", lock.display()))?
            .lines()
            .next()
            .and_then(|pid| pid.trim().parse().ok())
            .context("no postmaster pid in postmaster.pid")
    }

    /// The server's own log (`pg_ctl -l`).
    pub fn server_log(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// A superuser URL on the `postgres` database.
    pub fn admin_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// `PATH` with the PostgreSQL binaries first (the tests call `psql`).
    pub fn path_with_binaries(&self) -> Result<OsString> {
        let mut paths = vec![self.bin.clone()];
        paths.extend(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        ));
        Ok(std::env::join_paths(paths)?)
    }

    /// `pg_ctl -D DATA` with `args`, split at spaces.
    fn pg_ctl(&self, args: &str) -> Command {
        let mut command = self.tool("pg_ctl");
        command
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(args.split(' '));
        command
    }

    fn tool(&self, name: &str) -> Command {
        let program = self.bin.join(name);
        if let Some(user) = self.run_as {
            let mut command = Command::new("runuser");
            command.args(["-u", user, "--"]).arg(program);
            command
        } else {
            Command::new(program)
        }
    }

    /// The server's log so far (empty when it cannot be read; bytes that are not UTF-8 replaced).
    fn server_log_text(&self) -> String {
        let log = std::fs::read(self.server_log()).unwrap_or_default();
        String::from_utf8_lossy(&log).into_owned()
    }

    /// Prints what a failed run needs to tell a broken server from broken tests: the last lines
    /// of the server's log, the room left on the cluster's disk and the memory left.
    pub fn report(&self) {
        let log = self.server_log_text();
        let lines: Vec<&str> = log.lines().collect();
        let tail = &lines[lines.len().saturating_sub(REPORTED_LOG_LINES)..];
        eprintln!("xtask: the last {} lines of PostgreSQL's log:", tail.len());
        for line in tail {
            eprintln!("  {line}");
        }
        let disk = output(
            Command::new("df")
                .args(["-h", "--output=avail,target"])
                .arg(&self.dir),
        );
        eprintln!(
            "xtask: room on its disk: {}",
            disk.unwrap_or_default()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        );
        let memory = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let available = memory.lines().find(|l| l.starts_with("MemAvailable"));
        eprintln!("xtask: memory: {}", available.unwrap_or("unknown"));
    }

    fn version(&self) -> String {
        output(Command::new(self.bin.join("postgres")).arg("--version"))
            .map(|v| v.split_whitespace().nth(2).unwrap_or_default().to_owned())
            .unwrap_or_default()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.running {
            let stopped = output(&mut self.pg_ctl("-m immediate -w stop"));
            match stopped {
                Ok(_) => println!("PostgreSQL stopped"),
                Err(e) => eprintln!("xtask: stopping PostgreSQL: {e:#}"),
            }
        }
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            eprintln!("xtask: removing {}: {e}", self.dir.display());
        }
    }
}

/// The directory holding initdb, pg_ctl, postgres and psql, and where it came from: the
/// machine's ([`machine_binaries`]), else the wheel (also when `XTASK_POSTGRES=wheel`).
fn binaries() -> Result<(PathBuf, String)> {
    if std::env::var(FROM_VAR).as_deref() == Ok("wheel") {
        return wheel();
    }
    match machine_binaries() {
        Some(bin) => {
            let origin = format!("the machine's, {}", bin.display());
            Ok((bin, origin))
        }
        None => wheel(),
    }
}

/// The machine's own server binaries: the directory of `initdb` on `PATH` when it holds them
/// all, else the newest `/usr/lib/postgresql/N/bin` that does (what `cargo xtask setup` checks,
/// with `pg_basebackup` there for the standby).
pub fn machine_binaries() -> Option<PathBuf> {
    let mut versioned: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, bin)| has_all(bin))
        .collect();
    versioned.sort();
    // On Debian, PATH holds only wrappers or symlinks; resolve to the real directory.
    let on_path = crate::cmd::which("initdb")
        .and_then(|initdb| std::fs::canonicalize(initdb).ok())
        .and_then(|initdb| initdb.parent().map(Path::to_path_buf))
        .filter(|dir| has_all(dir));
    on_path.or_else(|| versioned.pop().map(|(_, bin)| bin))
}

/// The binaries of the `pgserver` wheel, installed now unless they already are.
fn wheel() -> Result<(PathBuf, String)> {
    let venv = crate::python::venv("postgresql", WHEEL).context(
        "no PostgreSQL on this machine, and its binaries could not be fetched from PyPI",
    )?;
    let site_packages = std::fs::read_dir(venv.join("lib"))?
        .flatten()
        .map(|python| python.path().join("site-packages"))
        .find(|dir| dir.exists())
        .context("the virtual environment has no site-packages")?;
    let bin = site_packages.join("pgserver/pginstall/bin");
    if !has_all(&bin) {
        bail!(
            "{WHEEL} has no initdb, pg_ctl, postgres and psql in {}",
            bin.display()
        );
    }
    let origin = format!("{WHEEL} from PyPI, {}", bin.display());
    Ok((bin, origin))
}

fn has_all(dir: &Path) -> bool {
    ["initdb", "pg_ctl", "postgres", "psql", "pg_dump"]
        .iter()
        .all(|tool| dir.join(tool).exists())
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    output(Command::new("id").arg("-u")).is_ok_and(|uid| uid.trim() == "0")
}
