//! The real `registry` binary, started the one way the tests and the chores start it:
//! `<binary> serve` on a loopback port with nothing of the caller's environment but `PATH`,
//! `RUST_LOG=info` and the settings given (see [`crate::settings`]), its log (stderr) appended to a file, started once it prints that it
//! listens, killed when dropped.
//!
//! What a caller waits for beyond that (the chores: `/readyz` answering 200) and the settings it
//! gives are its own.

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

/// How long a start may take to print its "listening on" line.
const START_LIMIT: Duration = Duration::from_secs(60);
/// How long a SIGTERM may take to end the process (the server drains for up to 30 s).
const STOP_LIMIT: Duration = Duration::from_secs(40);
/// Starts on other free ports when one was taken before the server bound it.
const RETRIES: usize = 5;

/// How to start `<binary> serve`.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The `registry` binary.
    pub binary: PathBuf,
    /// A command the binary runs under, with its arguments (`taskset -c 1`); empty: none.
    pub wrapper: Vec<OsString>,
    /// Its log (stderr), appended to and created when missing: a restarted server continues
    /// the same file.
    pub log: PathBuf,
    /// A fixed port (for a server restarted on the same database, whose published issuer URLs
    /// name the port). `None`: a free one, and another if something else takes it first.
    pub port: Option<u16>,
}

impl Launch {
    /// `binary serve`, on a free port, logging to `log`.
    pub fn new(binary: &Path, log: &Path) -> Launch {
        Launch {
            binary: binary.to_owned(),
            wrapper: Vec::new(),
            log: log.to_owned(),
            port: None,
        }
    }

    /// Starts the server with `settings` for its port (the server sees nothing else but `PATH`
    /// and `RUST_LOG`), and returns once it has bound the port. Fails when it exits first (the
    /// error holds the end of what it logged) or is not listening within 60 s.
    pub fn start(&self, settings: &crate::Settings) -> io::Result<Launched> {
        let mut attempts = 0;
        loop {
            let port = match self.port {
                Some(port) => port,
                None => crate::free_port()?,
            };
            match self.start_on(port, settings.environment(port)) {
                Err(e) if e.kind() == io::ErrorKind::AddrInUse && self.port.is_none() => {
                    attempts += 1;
                    if attempts > RETRIES {
                        return Err(e);
                    }
                }
                other => return other,
            }
        }
    }

    fn start_on(&self, port: u16, environment: Vec<(String, String)>) -> io::Result<Launched> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| {
                io::Error::new(e.kind(), format!("opening {}: {e}", self.log.display()))
            })?;
        // Only what this start writes tells why it failed.
        let log_start = log.metadata()?.len();
        let mut command = match self.wrapper.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(&self.binary);
                command
            }
            None => Command::new(&self.binary),
        };
        command
            .arg("serve")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            // Its request lines and what it decides, for the tests that read the log and for a
            // chore's report when it fails.
            .env("RUST_LOG", "info")
            .envs(environment.iter().cloned())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log);
        let spawned = Instant::now();
        let mut child = command.spawn().map_err(|e| {
            io::Error::new(e.kind(), format!("starting {}: {e}", self.binary.display()))
        })?;
        // The server prints this line once it has bound the port: until then, whatever answers
        // on the port is not this server. The thread reads on, so the pipe never fills up.
        let stdout = child.stdout.take().expect("a piped stdout");
        let (bound, listening) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.contains("listening on") {
                    let _ = bound.send(());
                }
            }
        });
        let mut launched = Launched {
            child,
            port,
            log: self.log.clone(),
            log_start,
            environment,
            spawned,
        };
        loop {
            match listening.recv_timeout(Duration::from_millis(10)) {
                Ok(()) => return Ok(launched),
                Err(RecvTimeoutError::Timeout) => {}
                // Its stdout is closed: it is exiting.
                Err(RecvTimeoutError::Disconnected) => {
                    std::thread::sleep(Duration::from_millis(10))
                }
            }
            if let Some(why) = launched.exit_report() {
                let kind = if why.contains("cannot listen on") {
                    io::ErrorKind::AddrInUse
                } else {
                    io::ErrorKind::Other
                };
                return Err(io::Error::new(kind, why));
            }
            if spawned.elapsed() > START_LIMIT {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the registry was not listening within {} s; end of its log:\n{}",
                        START_LIMIT.as_secs(),
                        crate::tail(&launched.log_since_start())
                    ),
                ));
            }
        }
    }
}

/// A running `registry serve`; killed (SIGKILL) when dropped.
#[derive(Debug)]
pub struct Launched {
    child: Child,
    /// The loopback port it listens on.
    pub port: u16,
    /// Its log.
    pub log: PathBuf,
    /// Where in its log this start began.
    log_start: u64,
    /// The settings it was started with (for reports).
    pub environment: Vec<(String, String)>,
    /// When it was spawned.
    pub spawned: Instant,
}

impl Launched {
    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What it logged since this start.
    pub fn log_since_start(&self) -> String {
        let text = std::fs::read(&self.log).unwrap_or_default();
        let start = usize::try_from(self.log_start).unwrap_or(usize::MAX);
        String::from_utf8_lossy(text.get(start..).unwrap_or_default()).into_owned()
    }

    /// `None` while it runs; once it has exited, why: its status and the end of what it logged
    /// since this start.
    pub fn exit_report(&mut self) -> Option<String> {
        let status = self.child.try_wait().ok()??;
        Some(format!(
            "the registry exited ({status}); its log:\n{}",
            crate::tail(&self.log_since_start())
        ))
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// `kill -9`: no chance to finish anything. Returns once it is reaped.
    pub fn kill9(&mut self) -> io::Result<()> {
        // `Child::kill` is SIGKILL on Unix.
        self.child.kill()?;
        self.child.wait().map(drop)
    }

    /// SIGTERM (with the `kill` command), then waits for the exit (a graceful shutdown) at most
    /// 40 s; its exit status.
    pub fn terminate(&mut self) -> io::Result<ExitStatus> {
        self.signal("TERM")?;
        self.exit_within(STOP_LIMIT)
    }

    /// Sends the signal `name` (`TERM`, `INT`) with the `kill` command.
    pub fn signal(&self, name: &str) -> io::Result<()> {
        let pid = self.pid().to_string();
        let sent = Command::new("kill")
            .args([&format!("-{name}"), &pid])
            .status()?;
        if sent.success() {
            Ok(())
        } else {
            Err(io::Error::other(format!("kill -{name} {pid}: {sent}")))
        }
    }

    /// Its exit status, waiting for it at most `limit` (then an error: it still runs).
    pub fn exit_within(&mut self, limit: Duration) -> io::Result<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the registry still runs after {limit:?}"),
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Its resident memory now (`VmRSS`), in KiB.
    pub fn rss_kib(&self) -> io::Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .ok_or_else(|| io::Error::other("no VmRSS in /proc/PID/status"))
    }
}

impl Drop for Launched {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TempDir;
    use std::os::unix::fs::PermissionsExt;

    /// A stand-in for the binary: a shell script that is given `serve`.
    fn script(dir: &TempDir, body: &str) -> PathBuf {
        let path = dir.join("registry");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    fn settings() -> crate::Settings {
        crate::Settings::new("sqlite://launched.db").set("REGISTRY_LOG_FORMAT", "text")
    }

    #[test]
    fn a_started_server_listens_with_the_settings_for_its_port_only() {
        let dir = TempDir::new("testkit-launch");
        let binary = script(
            &dir,
            r#"echo "$1 $REGISTRY_LISTEN $RUST_LOG ${HOME:-no-home}" >&2
echo "registry listening on http://$REGISTRY_LISTEN"
exec sleep 60"#,
        );
        // Under a wrapper, as `taskset` would run it.
        let launch = Launch {
            wrapper: vec!["env".into()],
            ..Launch::new(&binary, &dir.join("log"))
        };
        let mut launched = launch.start(&settings()).unwrap();
        assert_eq!(launched.environment, settings().environment(launched.port));
        assert!(launched.is_running());
        assert!(launched.rss_kib().unwrap() > 0);
        let log = std::fs::read_to_string(dir.join("log")).unwrap();
        assert_eq!(
            log.trim(),
            format!("serve 127.0.0.1:{} info no-home", launched.port)
        );
        let status = launched.terminate().unwrap();
        assert!(!status.success(), "SIGTERM ends sleep: {status}");
        assert!(!launched.is_running());
    }

    #[test]
    fn a_taken_port_is_retried_on_another() {
        let dir = TempDir::new("testkit-launch");
        // Fails as the server does on a taken port the first time, listens the second.
        let binary = script(
            &dir,
            &format!(
                r#"if [ ! -e {marker} ]; then : > {marker}; echo "Error: cannot listen on $REGISTRY_LISTEN" >&2; exit 1; fi
echo "registry listening on http://$REGISTRY_LISTEN"
exec sleep 60"#,
                marker = dir.join("tried").display()
            ),
        );
        let mut launched = Launch::new(&binary, &dir.join("log"))
            .start(&settings())
            .unwrap();
        assert!(launched.log_since_start().is_empty());
        launched.kill9().unwrap();
        assert!(!launched.is_running());

        // On a fixed port, it is an error.
        std::fs::remove_file(dir.join("tried")).unwrap();
        let fixed = Launch {
            port: Some(crate::free_port().unwrap()),
            ..Launch::new(&binary, &dir.join("log"))
        };
        let error = fixed.start(&settings()).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::AddrInUse, "{error}");
    }

    #[test]
    fn a_server_that_exits_at_once_reports_its_log() {
        let dir = TempDir::new("testkit-launch");
        std::fs::write(dir.join("log"), "an earlier start\n").unwrap();
        let binary = script(&dir, "echo 'Error: bad settings' >&2; exit 2");
        let error = Launch::new(&binary, &dir.join("log"))
            .start(&settings())
            .unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains("exited") && text.contains("bad settings"),
            "{text}"
        );
        assert!(!text.contains("an earlier start"), "{text}");
    }
}
