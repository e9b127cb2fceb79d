//! `cargo xtask bare-host`: the release binary on a host that has nothing but the C runtime.
//!
//! A root file system is made in `target/bare-host/root` from the binary and the libraries that
//! `ldd` names, which must be the C runtime alone (libc, libm, libgcc_s, the loader). The server
//! runs there, entered with `chroot` (as root) or in a user namespace (`unshare
//! --map-root-user`, otherwise), with an empty environment: no settings, no `PATH`, no CA
//! certificates. Then `registry customer create` makes a customer, the API registers a service
//! and publishes its configuration, and both documents are fetched as the public would.

use crate::api::{upload, Api, Signer};
use crate::cmd::{output, root, shared_libraries};
use anyhow::{bail, ensure, Context, Result};
use registry_testkit::http::Http;
use registry_testkit::wait_until;
use serde_json::Value;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The only shared libraries the binary may need: the C runtime.
const C_RUNTIME: [&str; 5] = [
    "linux-vdso.so",
    "libc.so",
    "libm.so",
    "libgcc_s.so",
    "ld-linux",
];

/// The port `serve` listens on when nothing is set (`127.0.0.1:8080`).
const DEFAULT_PORT: u16 = 8080;

pub fn run() -> Result<()> {
    let binary = crate::registry::build(true)?;
    let libraries = shared_libraries(&binary)?;
    let unexpected: Vec<&PathBuf> = libraries.iter().filter(|lib| !is_c_runtime(lib)).collect();
    ensure!(
        unexpected.is_empty(),
        "the release binary needs more than the C runtime: {unexpected:?}"
    );
    let rootfs = root().join("target/bare-host/root");
    make_root(&rootfs, &binary, &libraries)?;
    println!(
        "bare host: {} holds the binary and {} libraries ({})",
        rootfs.display(),
        libraries.len(),
        libraries
            .iter()
            .map(|l| l.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );

    // No settings at all, unless something on this machine already has the default port.
    let mut settings: Vec<(String, String)> = Vec::new();
    let port = if TcpListener::bind(("127.0.0.1", DEFAULT_PORT)).is_ok() {
        DEFAULT_PORT
    } else {
        let port = registry_testkit::free_port()?;
        println!("port {DEFAULT_PORT} is taken here: the server gets REGISTRY_LISTEN and REGISTRY_ISSUER_URL_TEMPLATE for port {port}");
        settings.push(("REGISTRY_LISTEN".into(), format!("127.0.0.1:{port}")));
        settings.push((
            "REGISTRY_ISSUER_URL_TEMPLATE".into(),
            format!("http://{{subdomain}}.localhost:{port}"),
        ));
        port
    };
    let log = root().join("target/bare-host/serve.log");
    let server = Server::start(&rootfs, &settings, &log)?;
    let checked = check(&rootfs, &settings, Http::local(port));
    let stopped = server.terminate();
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    checked.with_context(|| format!("the server's log:\n{}", crate::registry::tail(&log_text)))?;
    stopped?;
    ensure!(
        !log_text.contains("panicked"),
        "the server panicked:\n{log_text}"
    );
    // The host has no CA certificates: the server says so rather than failing later, unseen.
    ensure!(
        log_text.contains("no certificate authorities found"),
        "the server did not warn that this host has no CA certificates:\n{log_text}"
    );
    println!("bare host: served, created a customer, published and fetched a configuration");
    Ok(())
}

/// Creates a customer with the command line, then registers a service, publishes its
/// configuration and fetches both public documents.
fn check(rootfs: &Path, settings: &[(String, String)], http: Http) -> Result<()> {
    let created = output(
        inside(rootfs, settings)
            .args([
                "customer", "create", "--tenant", "bare", "--plan", "business",
            ])
            .args(["--name", "Bare host"]),
    )
    .context("registry customer create, inside the bare root")?;
    let created: Value = serde_json::from_str(&created)
        .with_context(|| format!("customer create printed {created:?}"))?;
    let token = created["token"]
        .as_str()
        .context("customer create printed no token")?;
    let api = Api::new(http, token);
    let subdomain = api.create_service("bare")?;
    let signer = Signer::generate("bare-1")?;
    api.publish(&subdomain, &upload(signer.jwks()))?;

    let discovery = http.hosted(&subdomain, "/.well-known/openid-configuration")?;
    discovery.expect(200, "GET the hosted discovery document")?;
    let discovery = discovery.json();
    let issuer = format!("http://{}", http.issuer_host(&subdomain));
    ensure!(
        discovery["issuer"] == issuer.as_str(),
        "the discovery document names {} as its issuer, not {issuer}",
        discovery["issuer"]
    );
    let jwks_uri = discovery["jwks_uri"]
        .as_str()
        .context("no jwks_uri in the discovery document")?;
    let jwks_path = jwks_uri
        .strip_prefix(&issuer)
        .with_context(|| format!("jwks_uri {jwks_uri} is not under {issuer}"))?;
    let jwks = http.hosted(&subdomain, jwks_path)?;
    jwks.expect(200, "GET the hosted key set")?;
    ensure!(
        jwks.json()["keys"] == signer.jwks()["keys"],
        "the hosted key set is not the published one: {}",
        jwks.body
    );
    Ok(())
}

/// `registry` inside the bare root, with only `settings` in its environment.
fn inside(rootfs: &Path, settings: &[(String, String)]) -> Command {
    let chroot = on_path("chroot");
    let mut command = if crate::postgres::is_root() {
        Command::new(chroot)
    } else {
        // An unprivileged user may chroot inside a user namespace of its own.
        let mut command = Command::new(on_path("unshare"));
        command.arg("--map-root-user").arg(chroot);
        command
    };
    command
        .arg(rootfs)
        .arg("/registry")
        .env_clear()
        .envs(settings.iter().cloned());
    command
}

/// `program`'s full path (the environment of the command is cleared, so the child could not look
/// it up), else its bare name.
fn on_path(program: &str) -> PathBuf {
    crate::cmd::which(program).unwrap_or_else(|| PathBuf::from(program))
}

/// `registry serve` inside the bare root.
struct Server(Child);

impl Server {
    fn start(rootfs: &Path, settings: &[(String, String)], log: &Path) -> Result<Server> {
        let log_file = std::fs::File::create(log)?;
        let child = inside(rootfs, settings)
            .arg("serve")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .context("starting registry serve inside the bare root")?;
        let mut server = Server(child);
        let port = settings
            .iter()
            .find(|(name, _)| name == "REGISTRY_LISTEN")
            .and_then(|(_, listen)| listen.rsplit(':').next()?.parse().ok())
            .unwrap_or(DEFAULT_PORT);
        let http = Http::local(port);
        let ready = wait_until(Duration::from_secs(60), || {
            matches!(server.0.try_wait(), Ok(None))
                && http
                    .call("GET", "/readyz", None, None)
                    .is_ok_and(|r| r.status == 200)
        });
        if ready.is_none() {
            let status = server.0.try_wait()?;
            let text = std::fs::read_to_string(log).unwrap_or_default();
            bail!(
                "registry serve was not ready in the bare root (exit: {status:?}); its log:\n{}",
                crate::registry::tail(&text)
            );
        }
        Ok(server)
    }

    /// SIGTERM, and a clean exit.
    fn terminate(mut self) -> Result<()> {
        crate::cmd::run(Command::new("kill").args(["-TERM", &self.0.id().to_string()]))?;
        let status = self.0.wait()?;
        ensure!(status.success(), "registry serve exited with {status}");
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The shared libraries `ldd` names (their paths; the vDSO by name).
fn is_c_runtime(library: &Path) -> bool {
    let name = library
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    C_RUNTIME.iter().any(|runtime| name.starts_with(runtime))
}

/// A fresh root holding `/registry`, the libraries at their paths, and an empty `/tmp`.
fn make_root(rootfs: &Path, binary: &Path, libraries: &[PathBuf]) -> Result<()> {
    if rootfs.exists() {
        std::fs::remove_dir_all(rootfs)
            .with_context(|| format!("removing {}", rootfs.display()))?;
    }
    std::fs::create_dir_all(rootfs.join("tmp"))?;
    std::fs::copy(binary, rootfs.join("registry"))?;
    for library in libraries.iter().filter(|l| l.is_absolute()) {
        let to = rootfs.join(library.strip_prefix("/")?);
        std::fs::create_dir_all(to.parent().context("a library path has a parent")?)?;
        // The real file, not the symlink: the root has nothing for a link to point at.
        std::fs::copy(library, &to)
            .with_context(|| format!("copying {} into the root", library.display()))?;
    }
    Ok(())
}
