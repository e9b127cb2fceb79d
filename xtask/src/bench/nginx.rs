//! nginx serving the registry's discovery document, the yardstick of P1 (plain HTTP, and
//! HTTPS with the registry's certificate).

use anyhow::{bail, Context, Result};
use registry_testkit::free_port;
use registry_testkit::http::Http;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// nginx serving one file as `/.well-known/openid-configuration`.
#[derive(Debug)]
pub struct Nginx {
    child: Child,
    /// Its loopback port.
    pub port: u16,
    /// Its HTTPS port, serving the same.
    pub tls_port: u16,
    /// Its configuration, for the report.
    pub config: String,
    /// Its access log.
    pub log: PathBuf,
}

impl Nginx {
    /// The master's process id (its workers run under it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Starts nginx with `workers` worker processes in `dir`, serving the discovery document
    /// and, when given, the key set with the registry's headers, on plain HTTP and on HTTPS with
    /// the certificate `tls` names (chain, key).
    pub fn start(
        dir: &Path,
        (discovery, jwks): (&[u8], Option<&[u8]>),
        cpus: Option<&str>,
        workers: usize,
        (cert, key): (&Path, &Path),
    ) -> Result<Nginx> {
        let root = dir.join("www");
        std::fs::create_dir_all(root.join(".well-known"))?;
        std::fs::write(root.join(".well-known/openid-configuration"), discovery)?;
        if let Some(jwks) = jwks {
            std::fs::create_dir_all(root.join("openid/v1"))?;
            std::fs::write(root.join("openid/v1/jwks"), jwks)?;
        }
        let ports = (free_port()?, free_port()?);
        let site = format!(
            "root {root};
        location = /.well-known/openid-configuration {{
            default_type application/json;
            add_header Cache-Control \"public, max-age=30\";
            add_header Access-Control-Allow-Origin \"*\";
        }}
        {JWKS_LOCATION}",
            root = root.display(),
        );
        let config = config(dir, workers, "max=64", (cert, key), ports, &site);
        Nginx::launch(dir, config, cpus, ports, None)
    }

    /// Starts nginx as a host of many issuers would be set up: `www/<host>/openid/v1/jwks` per
    /// issuer (the key set `root` for every name in `hosts`, a directory each), chosen by the
    /// request's `Host` (`root …/$host`), with the descriptors of the last 1,000 files cached
    /// (`open_file_cache`, as a tuned host of many small files is: 100,000 of them would not
    /// fit in a real host's cache either).
    pub fn start_hosts(
        dir: &Path,
        jwks: &[u8],
        hosts: &[String],
        cpus: Option<&str>,
        workers: usize,
        (cert, key): (&Path, &Path),
    ) -> Result<Nginx> {
        let root = dir.join("www");
        for host in hosts {
            let keys = root.join(host).join("openid/v1");
            std::fs::create_dir_all(&keys)?;
            std::fs::write(keys.join("jwks"), jwks)?;
        }
        let ports = (free_port()?, free_port()?);
        // `$host`: the Host header's name, lower case, without its port.
        let site = format!(
            "root {root}/$host;\n        {JWKS_LOCATION}",
            root = root.display()
        );
        let open_files = "max=1000 inactive=60s;\n    open_file_cache_valid 60s;\n    \
                          open_file_cache_errors on";
        let config = config(dir, workers, open_files, (cert, key), ports, &site);
        let probe = hosts.first().map(String::as_str);
        Nginx::launch(dir, config, cpus, ports, probe)
    }

    /// Writes `config` and starts nginx on it; ready once it serves its first document (the
    /// discovery document, or the key set of the host `probe`).
    fn launch(
        dir: &Path,
        config: String,
        cpus: Option<&str>,
        (port, tls_port): (u16, u16),
        probe: Option<&str>,
    ) -> Result<Nginx> {
        let log = dir.join("access.log");
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, &config)?;
        let mut command = match cpus {
            Some(cpus) => {
                let mut taskset = Command::new("taskset");
                taskset.args(["-c", cpus, "nginx"]);
                taskset
            }
            None => Command::new("nginx"),
        };
        let child = command
            .arg("-c")
            .arg(&conf)
            .arg("-e")
            .arg(dir.join("error.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting nginx")?;
        let nginx = Nginx {
            child,
            port,
            tls_port,
            config,
            log,
        };
        let started = Instant::now();
        let http = Http::local(port);
        let path = match probe {
            Some(_) => "/openid/v1/jwks",
            None => "/.well-known/openid-configuration",
        };
        while http
            .send("GET", path, None, None, probe)
            .map_or(true, |r| r.status != 200)
        {
            if started.elapsed() > Duration::from_secs(10) {
                bail!(
                    "nginx did not answer within 10 s: {}",
                    std::fs::read_to_string(dir.join("error.log")).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(nginx)
    }
}

/// The key set's location, with the registry's headers.
const JWKS_LOCATION: &str = "location = /openid/v1/jwks {
            default_type application/jwk-set+json;
            add_header Cache-Control \"public, max-age=30\";
            add_header Access-Control-Allow-Origin \"*\";
        }";

/// nginx.conf for `workers` worker processes in `dir`, tuned as a static file server would be
/// (sendfile, cached file descriptors: `open_file_cache`'s arguments, long keep-alive), logging
/// every request like the registry does, through a buffer like the registry's (64 KiB, written
/// at least every second), on plain HTTP and HTTPS (`ports`) with the certificate `tls`, and
/// serving `site` (the server block's root and locations).
fn config(
    dir: &Path,
    workers: usize,
    open_files: &str,
    (cert, key): (&Path, &Path),
    (port, tls_port): (u16, u16),
    site: &str,
) -> String {
    let d = dir.display();
    format!(
        "worker_processes {workers};
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 1024; }}
http {{
    access_log {d}/access.log combined buffer=64k flush=1s;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    open_file_cache {open_files};
    keepalive_requests 1000000;
    client_body_temp_path {d}/tmp-body;
    proxy_temp_path {d}/tmp-proxy;
    fastcgi_temp_path {d}/tmp-fastcgi;
    uwsgi_temp_path {d}/tmp-uwsgi;
    scgi_temp_path {d}/tmp-scgi;
    ssl_certificate {cert};
    ssl_certificate_key {key};
    ssl_protocols TLSv1.2 TLSv1.3;
    server {{
        listen 127.0.0.1:{port};
        listen 127.0.0.1:{tls_port} ssl;
        {site}
    }}
}}
",
        cert = cert.display(),
        key = key.display(),
    )
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM: the master stops its worker too (SIGKILL would leave the worker listening).
        // The shell's own `kill`: a machine the bench kit runs on may have no kill program, and
        // then the wait below would never end. SIGKILL when even that fails, for the same wait.
        let stopped = Command::new("sh")
            .arg("-c")
            .arg(format!("kill -TERM {}", self.child.id()))
            .status()
            .is_ok_and(|status| status.success());
        if !stopped {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}
