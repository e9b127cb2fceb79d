//! `cargo xtask setup [--for test|lint|e2e|all] [--check]`: every program from outside the
//! repository that a chore runs, checked at once before the chore starts, so that a missing one
//! stops it at its first second rather than at its last chore.
//!
//! What is missing is installed where that can be done without asking anyone: Debian's packages
//! with `apt-get` when running as root (`apt-get update -qq` once, then one `apt-get install`
//! of them all), cargo-deny with `cargo install`, rustfmt and clippy with `rustup`. Then
//! everything is checked again. Whatever is still missing is named, all of it in one message,
//! with the package that provides it and the commands that install it, and the chore does not
//! start. `cargo xtask test`, `lint` and `e2e` run this first, each for its own tools.

use crate::cmd::{cargo, output, run, succeeds};
use anyhow::{bail, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Examples and exit status, under `cargo xtask setup --help`.
pub const HELP: &str = "Examples:
  cargo xtask setup                     what `cargo xtask test` needs: check, install what is missing
  cargo xtask setup --for all           the same for test, lint and e2e together
  cargo xtask setup --for e2e --check   only check: name what is missing, install nothing

Installs: Debian packages with apt-get (as root only; `apt-get update -qq`, then one
`apt-get install -y -qq` of them all), cargo-deny with `cargo install --locked`, rustfmt and
clippy with `rustup component add`.

Exit status: 0 when every tool is there (found, or installed now); 1 when any is missing and
could not be installed: each one is named, with its package and the command that installs it;
2 when the command line is wrong.";

/// The commands whose tools are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scope {
    /// `cargo xtask test`: PostgreSQL's server, Python, curl, jq, openssl, systemd-analyze,
    /// readelf, Node.js, Varnish, Pebble…
    Test,
    /// `cargo xtask lint`: rustfmt, clippy, cargo-deny.
    Lint,
    /// `cargo xtask e2e`: Node.js with npm, Chromium, openssl.
    E2e,
    /// All of the above.
    All,
}

impl Scope {
    /// What a person types for it.
    fn command(self) -> &'static str {
        match self {
            Scope::Test => "`cargo xtask test`",
            Scope::Lint => "`cargo xtask lint`",
            Scope::E2e => "`cargo xtask e2e`",
            Scope::All => "`cargo xtask test`, `lint` and `e2e`",
        }
    }

    /// "needs", or "need" after several commands.
    fn needs(self) -> &'static str {
        if self == Scope::All {
            "need"
        } else {
            "needs"
        }
    }

    fn flag(self) -> &'static str {
        match self {
            Scope::Test => "test",
            Scope::Lint => "lint",
            Scope::E2e => "e2e",
            Scope::All => "all",
        }
    }
}

#[derive(Debug, clap::Args)]
#[command(after_help = HELP)]
pub struct Options {
    /// Whose tools: `test`, `lint`, `e2e`, or `all` of them.
    #[arg(long = "for", value_enum, default_value = "test")]
    scope: Scope,
    /// Only check: install nothing, name every missing tool.
    #[arg(long)]
    check: bool,
}

/// `cargo xtask setup`.
pub fn run_options(options: &Options) -> Result<()> {
    ensure(options.scope, !options.check)
}

/// Where a missing tool comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// A Debian package, which `apt-get` installs as root.
    Apt(&'static str),
    /// A crate's binaries: `cargo install --locked NAME --version VERSION`.
    Crate {
        name: &'static str,
        version: &'static str,
    },
    /// A component of the Rust toolchain: `rustup component add NAME`.
    Rustup(&'static str),
}

impl Source {
    fn describe(self) -> String {
        match self {
            Source::Apt(package) => format!("Debian package {package}"),
            Source::Crate { name, version } => format!("crate {name} {version}"),
            Source::Rustup(component) => format!("rustup component {component}"),
        }
    }
}

/// How a tool is found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probe {
    /// An executable of the tool's name in a directory of `PATH`, where the chores run it from.
    OnPath,
    /// The machine's PostgreSQL server binaries, the directory `postgres.rs` picks
    /// (`PATH`'s `initdb`, else the newest `/usr/lib/postgresql/N/bin`), with `pg_basebackup`.
    PostgresServer,
    /// `python3` with the `venv` and `ensurepip` modules (Debian ships them apart).
    PythonVenv,
    /// `node --version`, at least [`NODE_MIN`].
    Node,
    /// `CHROMIUM_PATH`, else `/usr/bin/chromium`, as `cargo xtask e2e` looks.
    Chromium,
    /// `cargo SUBCOMMAND --version` succeeds.
    Cargo(&'static str),
}

/// One program (or set of programs) a chore runs.
#[derive(Debug)]
struct Tool {
    name: &'static str,
    source: Source,
    probe: Probe,
    /// The commands that need it (besides `all`).
    scopes: &'static [Scope],
    /// What needs it, for the message when it is missing.
    used_for: &'static str,
}

/// The oldest Node.js that `e2e/package.json` and `xtask/cdn/package.json` accept (`engines`).
const NODE_MIN: (u32, u32) = (20, 10);

/// cargo-deny, pinned: 0.20.2 needs rustc 1.88 or later.
const CARGO_DENY: Source = Source::Crate {
    name: "cargo-deny",
    version: "0.20.2",
};

const TEST: &[Scope] = &[Scope::Test];
const NODE_USERS: &[Scope] = &[Scope::Test, Scope::E2e];

/// Every tool, in the order they are checked and named. A C compiler, `perl` and `make` are
/// not among them: xtask itself is built with OpenSSL from source, so they are there.
const TOOLS: &[Tool] = &[
    Tool {
        name: "PostgreSQL server",
        source: Source::Apt("postgresql"),
        probe: Probe::PostgresServer,
        scopes: TEST,
        used_for: "initdb, pg_ctl and pg_basebackup: the suite on PostgreSQL and the standby \
                   scenario (the pgserver wheel has no pg_basebackup)",
    },
    Tool {
        name: "python3",
        source: Source::Apt("python3"),
        probe: Probe::OnPath,
        scopes: TEST,
        used_for: "the Prometheus parser, SQLite files and the Python relying parties",
    },
    Tool {
        name: "python3 -m venv",
        source: Source::Apt("python3-venv"),
        probe: Probe::PythonVenv,
        scopes: TEST,
        used_for: "the virtual environments under target/ (pip, PyPI)",
    },
    Tool {
        name: "bash",
        source: Source::Apt("bash"),
        probe: Probe::OnPath,
        scopes: TEST,
        used_for: "the README's walk-through, run as written",
    },
    Tool {
        name: "curl",
        source: Source::Apt("curl"),
        probe: Probe::OnPath,
        scopes: TEST,
        used_for: "the README's walk-through and the custom domain chore (cargo xtask acme)",
    },
    Tool {
        name: "jq",
        source: Source::Apt("jq"),
        probe: Probe::OnPath,
        scopes: TEST,
        used_for: "the README's walk-through",
    },
    Tool {
        name: "openssl",
        source: Source::Apt("openssl"),
        probe: Probe::OnPath,
        scopes: &[Scope::Test, Scope::E2e],
        used_for: "the README's walk-through; the console's browser tests make their \
                   server's certificate with it",
    },
    Tool {
        name: "kill",
        source: Source::Apt("procps"),
        probe: Probe::OnPath,
        scopes: TEST,
        used_for: "signals to the registry and PostgreSQL",
    },
    Tool {
        name: "systemd-analyze",
        source: Source::Apt("systemd"),
        probe: Probe::OnPath,
        scopes: TEST,
        used_for: "deploy/systemd/registry.service (cargo xtask manifests)",
    },
    Tool {
        name: "readelf",
        source: Source::Apt("binutils"),
        probe: Probe::OnPath,
        scopes: TEST,
        used_for: "the container image's libraries (cargo xtask manifests)",
    },
    Tool {
        name: "node",
        source: Source::Apt("nodejs"),
        probe: Probe::Node,
        scopes: NODE_USERS,
        used_for: "the jose relying party (cargo xtask cdn) and the browser tests",
    },
    Tool {
        name: "npm",
        source: Source::Apt("npm"),
        probe: Probe::OnPath,
        scopes: NODE_USERS,
        used_for: "installing jose and playwright-core (npm ci)",
    },
    Tool {
        name: "varnishd",
        source: Source::Apt("varnish"),
        probe: Probe::OnPath,
        scopes: TEST,
        used_for: "the key rotation through a cache (cargo xtask cdn)",
    },
    Tool {
        name: "varnishncsa",
        source: Source::Apt("varnish"),
        probe: Probe::OnPath,
        scopes: TEST,
        used_for: "the cache's log, shipped to the registry (cargo xtask cdn)",
    },
    Tool {
        name: "pebble",
        source: Source::Apt("pebble"),
        probe: Probe::OnPath,
        scopes: TEST,
        used_for: "the ACME server of the custom domain chore (cargo xtask acme)",
    },
    Tool {
        name: "pebble-challtestsrv",
        source: Source::Apt("pebble"),
        probe: Probe::OnPath,
        scopes: TEST,
        used_for: "the DNS of the custom domain chore (cargo xtask acme)",
    },
    Tool {
        name: "rustfmt",
        source: Source::Rustup("rustfmt"),
        probe: Probe::Cargo("fmt"),
        scopes: &[Scope::Lint],
        used_for: "cargo fmt --check",
    },
    Tool {
        name: "clippy",
        source: Source::Rustup("clippy"),
        probe: Probe::Cargo("clippy"),
        scopes: &[Scope::Lint],
        used_for: "cargo clippy",
    },
    Tool {
        name: "cargo-deny",
        source: CARGO_DENY,
        probe: Probe::Cargo("deny"),
        scopes: &[Scope::Lint],
        used_for: "cargo deny check bans licenses sources",
    },
    Tool {
        name: "chromium",
        source: Source::Apt("chromium"),
        probe: Probe::Chromium,
        scopes: &[Scope::E2e],
        used_for: "the browser tests (or point CHROMIUM_PATH at a Chromium or Chrome binary)",
    },
];

/// The tools `scope` needs, in [`TOOLS`]' order.
fn tools(scope: Scope) -> Vec<&'static Tool> {
    TOOLS
        .iter()
        .filter(|tool| scope == Scope::All || tool.scopes.contains(&scope))
        .collect()
}

/// A tool that is not there, and how that was found.
#[derive(Debug)]
struct Missing {
    tool: &'static Tool,
    reason: String,
    /// Whether its package would bring it: not when a setting names another place for it.
    installable: bool,
}

/// What can install here.
#[derive(Debug, Clone, Copy)]
struct Installers {
    /// Running as root, with `apt-get` on `PATH`.
    apt: bool,
    /// `rustup` on `PATH`.
    rustup: bool,
}

/// The installations that would bring the missing tools, for the installers there are: each
/// package, crate and component once, in the order of [`TOOLS`].
#[derive(Debug, Default, PartialEq, Eq)]
struct Plan {
    apt: Vec<&'static str>,
    crates: Vec<(&'static str, &'static str)>,
    rustup: Vec<&'static str>,
}

impl Plan {
    fn is_empty(&self) -> bool {
        self.apt.is_empty() && self.crates.is_empty() && self.rustup.is_empty()
    }

    /// The commands a person runs for it (`apt-get` as root).
    fn commands(&self) -> Vec<String> {
        let mut commands = Vec::new();
        if !self.apt.is_empty() {
            commands.push(format!(
                "apt-get update && apt-get install -y {}    (as root)",
                self.apt.join(" ")
            ));
        }
        for (name, version) in &self.crates {
            commands.push(format!("cargo install --locked {name} --version {version}"));
        }
        if !self.rustup.is_empty() {
            commands.push(format!("rustup component add {}", self.rustup.join(" ")));
        }
        commands
    }
}

fn plan(missing: &[Missing], installers: Installers) -> Plan {
    fn add<T: PartialEq>(list: &mut Vec<T>, item: T) {
        if !list.contains(&item) {
            list.push(item);
        }
    }
    let mut plan = Plan::default();
    for missing in missing.iter().filter(|m| m.installable) {
        match missing.tool.source {
            Source::Apt(package) if installers.apt => add(&mut plan.apt, package),
            Source::Crate { name, version } => add(&mut plan.crates, (name, version)),
            Source::Rustup(component) if installers.rustup => add(&mut plan.rustup, component),
            Source::Apt(_) | Source::Rustup(_) => {}
        }
    }
    plan
}

/// The message naming every missing tool, its package, why it is needed, and the commands that
/// install them all; `note` says why this run did not (or could not) install them.
fn report(scope: Scope, missing: &[Missing], note: &str) -> String {
    let count = match missing.len() {
        1 => "1 tool".to_owned(),
        n => format!("{n} tools"),
    };
    let mut message = format!(
        "{} {} {count} that this machine lacks ({note}):\n",
        scope.command(),
        scope.needs()
    );
    for Missing { tool, reason, .. } in missing {
        message.push_str(&format!(
            "  - {} ({}): {reason}; for {}\n",
            tool.name,
            tool.source.describe(),
            tool.used_for
        ));
    }
    let everything = Installers {
        apt: true,
        rustup: true,
    };
    let commands = plan(missing, everything).commands();
    if commands.is_empty() {
        message.push_str("Fix that, then run the command again.\n");
    } else {
        message.push_str("Install them, then run the command again:\n");
    }
    for command in commands {
        message.push_str(&format!("  {command}\n"));
    }
    message.push_str(&format!(
        "(`cargo xtask setup --for {}` checks them again without running anything else, and \
         installs what it can: Debian packages only as root.)",
        scope.flag()
    ));
    message
}

/// `v20.20.2` (what `node --version` prints) as (major, minor).
fn node_version(printed: &str) -> Option<(u32, u32)> {
    let mut parts = printed.trim().strip_prefix('v')?.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// Checks `scope`'s tools, installs the missing ones when `install` and it can, and fails,
/// naming every tool still missing, unless all are there.
pub fn ensure(scope: Scope, install: bool) -> Result<()> {
    let tools = tools(scope);
    let mut missing = find_missing(&tools);
    if missing.is_empty() {
        println!(
            "setup: the {} tools that {} {} are present: {}",
            tools.len(),
            scope.command(),
            scope.needs(),
            tools
                .iter()
                .map(|tool| tool.name)
                .collect::<Vec<_>>()
                .join(", ")
        );
        return Ok(());
    }
    if !install {
        bail!(report(scope, &missing, "--check: nothing installed"));
    }

    let root = crate::postgres::is_root();
    let installers = Installers {
        apt: root && on_path("apt-get").is_some(),
        rustup: on_path("rustup").is_some(),
    };
    let plan = plan(&missing, installers);
    let mut notes = Vec::new();
    if !plan.is_empty() {
        println!(
            "setup: missing for {}: {}",
            scope.command(),
            missing
                .iter()
                .map(|m| m.tool.name)
                .collect::<Vec<_>>()
                .join(", ")
        );
        notes.extend(
            execute(&plan)
                .err()
                .map(|e| format!("installing failed: {e:#}")),
        );
        missing = find_missing(&tools);
        if missing.is_empty() {
            println!("setup: installed; the {} tools are present", tools.len());
            return Ok(());
        }
        if notes.is_empty() {
            notes.push("still missing after installing".to_owned());
        }
    }
    let apt_left = missing
        .iter()
        .any(|m| matches!(m.tool.source, Source::Apt(_)));
    if apt_left && !installers.apt {
        notes.push(
            if root {
                "no apt-get here to install Debian packages"
            } else {
                "not root: Debian packages were not installed"
            }
            .to_owned(),
        );
    }
    let rustup_left = missing
        .iter()
        .any(|m| matches!(m.tool.source, Source::Rustup(_)));
    if rustup_left && !installers.rustup {
        notes.push("no rustup here to add components".to_owned());
    }
    if notes.is_empty() {
        notes.push("nothing was installed".to_owned());
    }
    bail!(report(scope, &missing, &notes.join("; ")))
}

/// Runs `plan`: `apt-get update` once and one `apt-get install` of every package, then each
/// `cargo install`, then `rustup component add`. Stops at the first failure.
fn execute(plan: &Plan) -> Result<()> {
    if !plan.apt.is_empty() {
        println!("setup: installing Debian packages: {}", plan.apt.join(" "));
        run(Command::new("apt-get").args(["update", "-qq"]))?;
        run(Command::new("apt-get")
            .args(["install", "-y", "-qq"])
            .args(&plan.apt)
            .env("DEBIAN_FRONTEND", "noninteractive"))?;
    }
    for (name, version) in &plan.crates {
        println!("setup: installing {name} {version} (cargo install, a few minutes)");
        run(cargo("install --locked")
            .arg(name)
            .arg("--version")
            .arg(version))?;
    }
    if !plan.rustup.is_empty() {
        run(Command::new("rustup")
            .args(["component", "add"])
            .args(&plan.rustup))?;
    }
    Ok(())
}

fn find_missing(tools: &[&'static Tool]) -> Vec<Missing> {
    tools
        .iter()
        .filter_map(|&tool| {
            let reason = probe(tool).err()?;
            // Debian's Chromium is no help when the tests are told to drive another one.
            let elsewhere =
                tool.probe == Probe::Chromium && std::env::var_os("CHROMIUM_PATH").is_some();
            Some(Missing {
                tool,
                reason: if elsewhere {
                    format!("{reason} (CHROMIUM_PATH)")
                } else {
                    reason
                },
                installable: !elsewhere,
            })
        })
        .collect()
}

/// Whether `tool` is there; if not, how that shows.
fn probe(tool: &Tool) -> Result<(), String> {
    match tool.probe {
        Probe::OnPath => on_path(tool.name)
            .map(drop)
            .ok_or_else(|| "not found on PATH".to_owned()),
        Probe::PostgresServer => match crate::postgres::machine_binaries() {
            Some(bin) if bin.join("pg_basebackup").is_file() => Ok(()),
            Some(bin) => Err(format!("no pg_basebackup in {}", bin.display())),
            None => Err("none on PATH or in /usr/lib/postgresql/*/bin".to_owned()),
        },
        Probe::PythonVenv => {
            let venv = Command::new("python3")
                .args(["-c", "import venv, ensurepip"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
            match venv {
                Ok(status) if status.success() => Ok(()),
                Ok(_) => Err("python3 has no venv or ensurepip module".to_owned()),
                Err(_) => Err("no python3".to_owned()),
            }
        }
        Probe::Node => {
            if on_path("node").is_none() {
                return Err("not found on PATH".to_owned());
            }
            let printed = output(Command::new("node").arg("--version"))
                .map_err(|e| format!("`node --version` failed: {e:#}"))?;
            match node_version(&printed) {
                Some(version) if version >= NODE_MIN => Ok(()),
                _ => Err(format!(
                    "node {} is older than {}.{} (`engines` of e2e/ and xtask/cdn/; Debian 12's \
                     is 18, NodeSource's or Debian 13's are newer)",
                    printed.trim(),
                    NODE_MIN.0,
                    NODE_MIN.1
                )),
            }
        }
        Probe::Chromium => {
            let chromium = chromium();
            if chromium.is_file() {
                Ok(())
            } else {
                Err(format!("not found at {}", chromium.display()))
            }
        }
        Probe::Cargo(subcommand) => {
            if succeeds(&mut cargo(&format!("{subcommand} --version"))) {
                Ok(())
            } else {
                Err(format!("`cargo {subcommand} --version` fails"))
            }
        }
    }
}

/// The first executable file named `program` in a directory of `PATH`.
fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Debian's Chromium, the browser tests' default.
const DEFAULT_CHROMIUM: &str = "/usr/bin/chromium";

/// The Chromium the tests drive: `CHROMIUM_PATH`, else Debian's `/usr/bin/chromium`.
pub fn chromium() -> PathBuf {
    std::env::var_os("CHROMIUM_PATH")
        .map(PathBuf::from)
        .unwrap_or_else(|| DEFAULT_CHROMIUM.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str) -> &'static Tool {
        TOOLS.iter().find(|t| t.name.starts_with(name)).unwrap()
    }

    fn missing(names: &[&str]) -> Vec<Missing> {
        names
            .iter()
            .map(|name| Missing {
                tool: tool(name),
                reason: "not found on PATH".to_owned(),
                installable: true,
            })
            .collect()
    }

    const NONE: Installers = Installers {
        apt: false,
        rustup: false,
    };
    const ALL: Installers = Installers {
        apt: true,
        rustup: true,
    };

    #[test]
    fn each_command_checks_its_own_tools() {
        let names = |scope| tools(scope).iter().map(|t| t.name).collect::<Vec<_>>();
        let test = names(Scope::Test);
        for name in [
            "python3",
            "curl",
            "jq",
            "openssl",
            "systemd-analyze",
            "varnishd",
            "pebble",
            "pebble-challtestsrv",
            "node",
            "npm",
        ] {
            assert!(test.contains(&name), "test lacks {name}: {test:?}");
        }
        assert_eq!(test[0], "PostgreSQL server");
        assert!(!test.contains(&"cargo-deny") && !test.contains(&"chromium"));
        assert_eq!(names(Scope::Lint), ["rustfmt", "clippy", "cargo-deny"]);
        assert_eq!(names(Scope::E2e), ["openssl", "node", "npm", "chromium"]);
        assert_eq!(names(Scope::All).len(), TOOLS.len());
    }

    #[test]
    fn nothing_missing_plans_nothing() {
        assert!(plan(&[], ALL).is_empty());
    }

    #[test]
    fn debian_packages_once_each_in_one_install() {
        let missing = missing(&["varnishd", "varnishncsa", "pebble", "pebble-challtestsrv"]);
        let planned = plan(&missing, ALL);
        assert_eq!(planned.apt, ["varnish", "pebble"]);
        assert_eq!(
            planned.commands(),
            ["apt-get update && apt-get install -y varnish pebble    (as root)"]
        );
    }

    #[test]
    fn without_root_no_debian_package_is_planned_but_cargo_deny_is() {
        let missing = missing(&["curl", "cargo-deny", "clippy"]);
        let planned = plan(&missing, NONE);
        assert_eq!(
            planned,
            Plan {
                apt: vec![],
                crates: vec![("cargo-deny", "0.20.2")],
                rustup: vec![],
            }
        );
        assert_eq!(plan(&missing, ALL).apt, ["curl"]);
        assert_eq!(plan(&missing, ALL).rustup, ["clippy"]);
    }

    #[test]
    fn the_message_names_every_missing_tool_and_how_to_install_it() {
        let missing = missing(&["varnishd", "pebble", "cargo-deny", "chromium"]);
        let message = report(Scope::All, &missing, "not root");
        assert!(message.starts_with(
            "`cargo xtask test`, `lint` and `e2e` need 4 tools that this machine lacks (not root):\n"
        ));
        for line in [
            "  - varnishd (Debian package varnish): not found on PATH; for the key rotation",
            "  - pebble (Debian package pebble): not found on PATH; for the ACME server",
            "  - cargo-deny (crate cargo-deny 0.20.2): not found on PATH; for cargo deny",
            "  - chromium (Debian package chromium): not found on PATH; for the browser tests",
            "  apt-get update && apt-get install -y varnish pebble chromium    (as root)",
            "  cargo install --locked cargo-deny --version 0.20.2",
            "`cargo xtask setup --for all`",
        ] {
            assert!(message.contains(line), "no {line:?} in:\n{message}");
        }
        assert!(!message.contains("rustup"), "{message}");
    }

    #[test]
    fn one_missing_tool_is_one_tool() {
        let message = report(Scope::Test, &missing(&["jq"]), "--check: nothing installed");
        assert!(message.starts_with(
            "`cargo xtask test` needs 1 tool that this machine lacks (--check: nothing installed):\n"
        ));
        assert!(message.contains("apt-get install -y jq "));
        assert!(message.contains("`cargo xtask setup --for test`"));
    }

    #[test]
    fn a_tool_its_package_would_not_bring_is_named_without_a_command() {
        let mut missing = missing(&["chromium", "jq"]);
        missing[0].installable = false;
        missing[0].reason = "not found at /opt/chrome (CHROMIUM_PATH)".to_owned();
        assert_eq!(plan(&missing, ALL).apt, ["jq"]);
        let message = report(Scope::All, &missing, "--check: nothing installed");
        assert!(message.contains("  - chromium (Debian package chromium): not found at /opt/chrome (CHROMIUM_PATH); for the browser tests"), "{message}");
        assert!(
            message.contains("  apt-get update && apt-get install -y jq    (as root)\n"),
            "{message}"
        );
    }

    #[test]
    fn node_versions_are_read_and_compared() {
        assert_eq!(node_version("v20.20.2\n"), Some((20, 20)));
        assert_eq!(node_version("v18.19.0"), Some((18, 19)));
        assert_eq!(node_version("20.1"), None);
        assert!(node_version("v20.10.0").unwrap() >= NODE_MIN);
        assert!(node_version("v20.9.0").unwrap() < NODE_MIN);
        assert!(node_version("v22.0.0").unwrap() >= NODE_MIN);
    }
}
