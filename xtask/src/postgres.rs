//! A throwaway PostgreSQL cluster: a temporary data directory, a free loopback port, the unix
//! socket inside the temporary directory, no password (trust), stopped and deleted on drop.

use crate::cmd::{output, run, succeeds};
use anyhow::{bail, Context, Result};
use std::ffi::OsString;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

const NOT_INSTALLED: &str = "PostgreSQL server binaries (initdb, pg_ctl, psql) were not found \
on PATH nor in /usr/lib/postgresql/*/bin: install PostgreSQL (e.g. `apt-get install postgresql`) \
to run the suite on PostgreSQL";

/// A running cluster; dropping it stops it (`pg_ctl stop -m immediate`) and deletes its files.
#[derive(Debug)]
pub struct Cluster {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    /// `initdb` refuses to run as root: then everything runs as `postgres`.
    as_postgres: bool,
    running: bool,
}

impl Cluster {
    pub fn start() -> Result<Cluster> {
        let bin = binaries()?;
        let as_postgres = is_root();
        if as_postgres && !succeeds(Command::new("id").args(["-u", "postgres"])) {
            bail!("running as root, and there is no `postgres` user to run PostgreSQL as");
        }
        let dir = std::env::temp_dir().join(format!("registry-pg-{}", std::process::id()));
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        }
        std::fs::create_dir_all(dir.join("socket"))
            .with_context(|| format!("creating {}", dir.display()))?;
        let mut cluster = Cluster {
            bin,
            dir,
            port: free_port()?,
            as_postgres,
            running: false,
        };
        if as_postgres {
            run(Command::new("chown")
                .arg("-R")
                .arg("postgres:postgres")
                .arg(&cluster.dir))?;
        }
        let data = cluster.dir.join("data");
        output(cluster.tool("initdb").arg("-D").arg(&data).args([
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-locale",
        ]))
        .context("initdb failed")?;
        cluster.start_server()?;
        println!(
            "PostgreSQL {} listening on 127.0.0.1:{}",
            cluster.version(),
            cluster.port
        );
        Ok(cluster)
    }

    /// Starts the server on the cluster's data directory, port and socket directory (also after
    /// [`Cluster::stop_server`]: the fault chores stop and restart it under load).
    pub fn start_server(&mut self) -> Result<()> {
        let options = format!(
            // A cluster that lives for one test run needs no durability.
            "-c listen_addresses=127.0.0.1 -p {} -k {} -c max_connections=300 -c fsync=off \
             -c synchronous_commit=off -c full_page_writes=off",
            self.port,
            self.dir.join("socket").display()
        );
        self.running = true;
        let started = output(
            self.tool("pg_ctl")
                .arg("-D")
                .arg(self.dir.join("data"))
                .arg("-l")
                .arg(self.dir.join("server.log"))
                .args(["-w", "-o", &options, "start"]),
        );
        if let Err(e) = started {
            let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
            return Err(e.context(format!("pg_ctl start failed; server log:\n{log}")));
        }
        Ok(())
    }

    /// Stops the server (`pg_ctl stop -m fast`: clients are disconnected), keeping its files.
    pub fn stop_server(&mut self) -> Result<()> {
        output(
            self.tool("pg_ctl")
                .arg("-D")
                .arg(self.dir.join("data"))
                .args(["-m", "fast", "-w", "stop"]),
        )
        .context("pg_ctl stop failed")?;
        self.running = false;
        Ok(())
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

    fn tool(&self, name: &str) -> Command {
        let program = self.bin.join(name);
        if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program);
            command
        } else {
            Command::new(program)
        }
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
            let stopped = output(
                self.tool("pg_ctl")
                    .arg("-D")
                    .arg(self.dir.join("data"))
                    .args(["-m", "immediate", "-w", "stop"]),
            );
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

/// The directory holding initdb, pg_ctl and psql: PATH first, else the newest
/// `/usr/lib/postgresql/N/bin`.
fn binaries() -> Result<PathBuf> {
    let has_all = |dir: &Path| {
        ["initdb", "pg_ctl", "postgres", "psql"]
            .iter()
            .all(|t| dir.join(t).exists())
    };
    let mut versioned: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, bin)| has_all(bin))
        .collect();
    versioned.sort();
    // On Debian, PATH holds only wrappers or symlinks; resolve to the real directory.
    let on_path = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join("initdb"))
        .find(|initdb| initdb.exists())
        .and_then(|initdb| std::fs::canonicalize(initdb).ok())
        .and_then(|initdb| initdb.parent().map(Path::to_path_buf))
        .filter(|dir| has_all(dir));
    on_path
        .or_else(|| versioned.pop().map(|(_, bin)| bin))
        .context(NOT_INSTALLED)
}

fn is_root() -> bool {
    output(Command::new("id").arg("-u")).is_ok_and(|uid| uid.trim() == "0")
}

fn free_port() -> Result<u16> {
    // The port is free now; PostgreSQL binds it a moment later. Good enough for a test run.
    let listener = TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(listener.local_addr()?.port())
}
