//! Dependencies point inwards: the domain does no I/O, the policy engine (`registry-policy`)
//! neither, nor does it depend on any other crate of the registry, each I/O library is used
//! by the one adapter that wraps it, and only the server speaks HTTP. Inside the server, no route decides a 403 or a 404 (the domain's
//! access decision does), and no import circle forms between its modules that is not already
//! on the list of those being taken apart.

use crate::cmd::{cargo, output};
use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Crates the domain must not reach, even transitively (by name or name prefix).
const FORBIDDEN_IN_DOMAIN: [&str; 6] = ["actix", "diesel", "reqwest", "tokio", "josekit", "hyper"];

/// (dependency name or `prefix*`, the workspace members allowed to depend on it directly as a
/// normal dependency). Dev-dependencies are free: tests may use anything. The `[bans]` of
/// `deny.toml` say the same for the crates both name (a unit test below holds them equal).
const WRAPPERS: [(&str, &[&str]); 11] = [
    ("diesel*", &["registry-store"]),
    ("libsqlite3-sys", &["registry-store"]),
    ("pq-sys", &["registry-store"]),
    // HTTP is the server's: no other crate serves it or names its types (registry-tests: its
    // support library runs the server in-process, on an actix `System`).
    ("actix*", &["registry-server", "registry-tests"]),
    ("http", &["registry-server"]),
    ("hyper*", &["registry-server"]),
    // registry-tests: its support library drives the servers it starts.
    // registry-cdn: the purges of the caches in front of the registry; registry-client: the
    // calls of the registry's API.
    (
        "reqwest",
        &[
            "registry-oidc",
            "registry-cdn",
            "registry-client",
            "registry-tests",
        ],
    ),
    // registry-testkit: the signing keys and identity tokens of the tests and the chores, which
    // reach josekit only through it. It does not ship in the binary.
    (
        "josekit",
        &["registry-oidc", "registry-testkit", "registry-tests"],
    ),
    ("rustls", &["registry-tls"]),
    ("rcgen", &["registry-testkit", "registry-tls"]),
    // gRPC is the cluster's plugin's (kube-apiserver's external signer, on a Unix socket), not
    // the registry's API; registry-tests: kube-apiserver's side, the client from the proto.
    ("tonic", &["registry-signer", "registry-tests"]),
];

/// The migrations of the two backends carry the same folder names, so that neither schema can
/// gain a change the other lacks.
fn migration_problems() -> Result<Vec<String>> {
    let folders = |backend: &str| -> Result<std::collections::BTreeSet<String>> {
        let dir = crate::cmd::root().join("migrations").join(backend);
        let mut names = std::collections::BTreeSet::new();
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?
        {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                names.insert(entry.file_name().to_string_lossy().into_owned());
            }
        }
        Ok(names)
    };
    let (sqlite, postgres) = (folders("sqlite")?, folders("postgres")?);
    Ok(sqlite
        .symmetric_difference(&postgres)
        .map(|name| {
            let has = if sqlite.contains(name) {
                "sqlite"
            } else {
                "postgres"
            };
            format!("migration {name:?} exists for {has} only: add it for both backends")
        })
        .collect())
}

fn matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == pattern,
    }
}

pub fn check() -> Result<()> {
    let mut problems = domain_problems()?;
    problems.extend(wrapper_problems()?);
    problems.extend(migration_problems()?);
    problems.extend(route_problems()?);
    problems.extend(settle_problems()?);
    problems.extend(storage_problems()?);
    problems.extend(cycle_problems()?);
    problems.extend(outside_citation_problems()?);
    if problems.is_empty() {
        println!("layering: ok");
        return Ok(());
    }
    for p in &problems {
        eprintln!("layering: {p}");
    }
    bail!("{} layering violation(s)", problems.len())
}

/// The server's sources, relative to the workspace root.
const SERVER_SRC: &str = "crates/server/src";

/// What only the domain's access decision may answer: a 403 or a 404 for a call.
const DECIDED_STATUSES: [&str; 6] = [
    "ApiError::Forbidden",
    "ApiError::NotFound",
    "StatusCode::FORBIDDEN",
    "StatusCode::NOT_FOUND",
    "HttpResponse::Forbidden",
    "HttpResponse::NotFound",
];

/// (file under `routes/`, function): the 404s of routing, not of access. `not_found` answers a
/// path no route serves (and `/metrics` for an address that may not see it).
const ROUTING_ANSWERS: [(&str, &str); 1] = [("mod.rs", "not_found")];

/// Import circles among the server's modules that may stay, each as its sorted module set (a
/// strongly connected set of the graph of `crate::` paths): none since the server's state was
/// split into components (issue 26). A circle passes only when its modules all belong to one
/// entry, so any circle fails today.
const ALLOWED_CYCLES: &[&[&str]] = &[];

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?
        {
            let path = entry?.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

/// The lines of `text` that count, numbered from 1: comments are not code, and a test module
/// (from a `#[cfg(test)]` at the start of a line to the end of the file, where this workspace
/// keeps them) does not ship: it may assert any status and import anything.
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .take_while(|(_, line)| !line.starts_with("#[cfg(test)]"))
        .filter(|(_, line)| !line.trim_start().starts_with("//"))
        .map(|(i, line)| (i + 1, line))
}

/// The name of the function a line `fn name…` declares.
fn declared_fn(line: &str) -> Option<&str> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "fn")?;
    let name = words.get(at + 1)?;
    let end = name
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(name.len());
    Some(&name[..end])
}

/// `file` (relative to `routes/`): each 403 or 404 it decides, by line, outside the allowed
/// routing answers.
fn decided_statuses_in(file: &str, text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let mut function = None;
    for (number, line) in code_lines(text) {
        if let Some(name) = declared_fn(line) {
            function = Some(name);
        }
        let allowed = ROUTING_ANSWERS
            .iter()
            .any(|(f, name)| *f == file && function == Some(*name));
        for status in DECIDED_STATUSES {
            if line.contains(status) && !allowed {
                problems.push(format!(
                    "{SERVER_SRC}/routes/{file}:{number}: `{status}` in a route: a 403 or 404 for \
                     a call is registry_domain::access's decision, not a handler's"
                ));
            }
        }
    }
    problems
}

fn route_problems() -> Result<Vec<String>> {
    let routes = crate::cmd::root().join(SERVER_SRC).join("routes");
    let mut problems = Vec::new();
    for path in rust_files(&routes)? {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let file = path.strip_prefix(&routes).unwrap_or(&path);
        problems.extend(decided_statuses_in(&file.to_string_lossy(), &text));
    }
    Ok(problems)
}

/// The one write path: only `AppState::write` (in `state.rs`) settles a change, so that no
/// handler can forget to.
fn settle_problems() -> Result<Vec<String>> {
    let src = crate::cmd::root().join(SERVER_SRC);
    let mut problems = Vec::new();
    for path in rust_files(&src)? {
        let file = path.strip_prefix(&src).unwrap_or(&path);
        if file == Path::new("state.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        for (line, code) in code_lines(&text) {
            if code.contains("settle_write") {
                problems.push(format!(
                    "{SERVER_SRC}/{}:{line}: settles a write outside AppState::write; call \
                     state.write(…) instead, the one write path",
                    file.display()
                ));
            }
        }
    }
    Ok(problems)
}

/// The storage ports' roles (`registry_domain::ports`): what names one outside its holders below
/// reaches storage around the use cases.
const STORAGE_ROLES: [&str; 15] = [
    "Storage",
    "CustomerStore",
    "ServiceStore",
    "AccountStore",
    "CredentialStore",
    "ChangeFeed",
    "AuditLog",
    "RefusalLog",
    "ActivityLog",
    "FetchLog",
    "ReadinessLog",
    "PurgeLog",
    "DomainStore",
    "ReplicaSource",
    "Database",
];

/// (a file, or a folder ending in `/`, under the workspace root; the roles it may name, `*` for
/// every one): one door to storage. The use cases (`registry_domain::app`) hold every role and
/// are the only writers; the store implements them, the in-memory fakes too; each other
/// consumer holds the narrow role it needs.
const STORAGE_HOLDERS: [(&str, &[&str]); 8] = [
    ("crates/domain/src/app/", &["*"]),
    ("crates/domain/src/ports.rs", &["*"]),
    ("crates/domain/src/testing.rs", &["*"]),
    ("crates/store/", &["*"]),
    // The read model reads the change log and the rows it names, and writes nothing.
    (
        "crates/replica/src/replica.rs",
        &["ReplicaSource", "Database"],
    ),
    // Last uses and refusals, outside the change log.
    ("crates/auth/src/", &["ActivityLog"]),
    // The wiring: the store, built once, handed to the use cases, the replica and the
    // authenticator.
    ("crates/server/src/state.rs", &["Storage", "Database"]),
    // `registry-tests` and the benches drive the store itself.
    ("crates/store/benches/", &["*"]),
];

/// Whether `code` names `word` as a whole identifier.
fn names(code: &str, word: &str) -> bool {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    code.match_indices(word).any(|(at, _)| {
        let before = code[..at].chars().next_back();
        let after = code[at + word.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

/// What of `code` names the ports: every `use` of `registry_domain::ports` (to its `;`, over
/// several lines) and each `ports::…` path elsewhere. A port is named there, or not used: a
/// trait's methods need it in scope.
fn port_paths(code: &[(usize, &str)]) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut open: Option<(usize, String)> = None;
    for &(number, line) in code {
        if let Some((_, text)) = open.as_mut() {
            text.push_str(line);
        } else if line.trim_start().starts_with("use ") && line.contains("ports") {
            open = Some((number, line.to_owned()));
        } else if let Some(at) = line.find("ports::") {
            found.push((number, line[at..].to_owned()));
        }
        if open.as_ref().is_some_and(|(_, text)| text.contains(';')) {
            found.extend(open.take());
        }
    }
    found
}

/// `file` (relative to the root): each storage role it names that its holder entry does not
/// allow, and each reach into the use cases' own handle on storage (`registry.store`).
fn storage_names_in(file: &str, text: &str) -> Vec<String> {
    let allowed: &[&str] = STORAGE_HOLDERS
        .iter()
        .find(|(holder, _)| match holder.strip_suffix('/') {
            Some(folder) => file.starts_with(&format!("{folder}/")),
            None => file == *holder,
        })
        .map_or(&[], |(_, roles)| roles);
    // A test module in a file of its own (`…/tests.rs`) ships no more than one inline.
    if allowed.contains(&"*") || file.ends_with("/tests.rs") {
        return Vec::new();
    }
    let code: Vec<(usize, &str)> = code_lines(text).collect();
    let mut problems = Vec::new();
    for (number, named) in port_paths(&code) {
        let glob = named.contains("ports::*");
        for role in STORAGE_ROLES {
            if (glob || names(&named, role)) && !allowed.contains(&role) {
                problems.push(format!(
                    "{file}:{number}: names the storage port `{role}`: storage is reached through \
                     the use cases of registry_domain::app (or the narrow role this file holds)"
                ));
            }
        }
    }
    for (number, line) in code {
        if line.contains("registry.store") {
            problems.push(format!(
                "{file}:{number}: reaches the use cases' storage (`registry.store`): call a use \
                 case of registry_domain::app instead"
            ));
        }
    }
    problems
}

/// One door to storage: no crate's sources name a storage role they do not hold.
fn storage_problems() -> Result<Vec<String>> {
    let root = crate::cmd::root();
    let mut problems = Vec::new();
    for crate_dir in std::fs::read_dir(root.join("crates"))? {
        let crate_dir = crate_dir?.path();
        for folder in ["src", "benches"] {
            let dir = crate_dir.join(folder);
            if !dir.is_dir() {
                continue;
            }
            for path in rust_files(&dir)? {
                let text = std::fs::read_to_string(&path)
                    .with_context(|| format!("reading {}", path.display()))?;
                let file = path.strip_prefix(&root).unwrap_or(&path);
                problems.extend(storage_names_in(&file.to_string_lossy(), &text));
            }
        }
    }
    Ok(problems)
}

/// The top-level module a file under `src/` belongs to (`auth/federation.rs` → `auth`,
/// `state.rs` → `state`); `None` for the crate root.
fn module_of(file: &Path) -> Option<String> {
    let first = file.components().next()?.as_os_str().to_str()?;
    let module = first.strip_suffix(".rs").unwrap_or(first);
    (!matches!(module, "main" | "lib")).then(|| module.to_owned())
}

/// The first segment of each `crate::` path in `code`: `crate::state::AppState` → `state`;
/// `crate::{auth, state::AppState}` → `auth`, `state`.
fn crate_paths_in(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        let after = &rest[at + "crate::".len()..];
        rest = after;
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        match after.strip_prefix('{') {
            Some(group) => found.extend(group_heads(group)),
            None => found.extend(ident(after)),
        }
    }
    found
}

/// The leading identifier of `text`.
fn ident(text: &str) -> Option<String> {
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    (end > 0).then(|| text[..end].to_owned())
}

/// The first segment of each entry of a `{…}` group, `group` starting after its `{`.
fn group_heads(group: &str) -> Vec<String> {
    let mut heads = Vec::new();
    let (mut depth, mut entry_start) = (0usize, true);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => entry_start = true,
            c if c.is_whitespace() => {}
            _ if entry_start && depth == 0 => {
                entry_start = false;
                heads.extend(ident(&group[i..]).filter(|head| head != "self"));
            }
            _ => {}
        }
    }
    heads
}

/// Modules, each with the modules it imports and where it first does.
type Graph = BTreeMap<String, BTreeMap<String, String>>;

fn module_graph(crate_src: &str) -> Result<Graph> {
    let src = crate::cmd::root().join(crate_src);
    let files = rust_files(&src)?;
    let relative: Vec<&Path> = files
        .iter()
        .map(|f| f.strip_prefix(&src).unwrap_or(f))
        .collect();
    let modules: BTreeSet<String> = relative.iter().filter_map(|f| module_of(f)).collect();
    let mut graph = Graph::new();
    for (path, file) in files.iter().zip(&relative) {
        let Some(from) = module_of(file) else {
            continue;
        };
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let imports = graph.entry(from.clone()).or_default();
        for (number, line) in code_lines(&text) {
            for to in crate_paths_in(line) {
                if to != from && modules.contains(&to) {
                    imports
                        .entry(to)
                        .or_insert_with(|| format!("{crate_src}/{}:{number}", file.display()));
                }
            }
        }
    }
    Ok(graph)
}

/// The strongly connected sets of more than one module (Tarjan's algorithm), sorted.
fn cycles(graph: &Graph) -> Vec<BTreeSet<String>> {
    struct Walk<'g> {
        graph: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        found: Vec<BTreeSet<String>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, node: &'g str) {
            let n = self.index.len();
            self.index.insert(node, n);
            self.low.insert(node, n);
            self.stack.push(node);
            self.on_stack.insert(node);
            for next in self.graph.get(node).into_iter().flat_map(|e| e.keys()) {
                let next = next.as_str();
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next]);
                    self.low.insert(node, low);
                } else if self.on_stack.contains(next) {
                    let low = self.low[node].min(self.index[next]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut set = BTreeSet::new();
                while let Some(member) = self.stack.pop() {
                    self.on_stack.remove(member);
                    set.insert(member.to_owned());
                    if member == node {
                        break;
                    }
                }
                if set.len() > 1 {
                    self.found.push(set);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !walk.index.contains_key(node.as_str()) {
            walk.visit(node);
        }
    }
    walk.found.sort();
    walk.found
}

/// A shortest circle through `start` inside `set`, as its import sites: `a -> b (file:line)`.
fn circle_through(graph: &Graph, set: &BTreeSet<String>, start: &str) -> Vec<String> {
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        for next in graph.get(node).into_iter().flat_map(|e| e.keys()) {
            if !set.contains(next) || came_from.contains_key(next.as_str()) {
                continue;
            }
            came_from.insert(next, node);
            if next == start {
                let mut hops = Vec::new();
                let mut to = start;
                loop {
                    let from = came_from[to];
                    hops.push(format!("{from} -> {to} ({})", graph[from][to]));
                    to = from;
                    if to == start {
                        break;
                    }
                }
                hops.reverse();
                return hops;
            }
            queue.push_back(next);
        }
    }
    Vec::new()
}

/// Each circle of `graph` outside `allowed`, with one of its paths, file and line per import;
/// and a note on each circle that is still allowed.
fn cycle_problems_in(graph: &Graph, allowed: &[&[&str]]) -> (Vec<String>, Vec<String>) {
    let (mut problems, mut notes) = (Vec::new(), Vec::new());
    let allowed: Vec<BTreeSet<&str>> = allowed
        .iter()
        .map(|c| c.iter().copied().collect())
        .collect();
    for set in cycles(graph) {
        let names: Vec<&str> = set.iter().map(String::as_str).collect();
        if allowed.iter().any(|a| names.iter().all(|m| a.contains(m))) {
            notes.push(format!(
                "allowed import circle (to take apart): {}",
                names.join(", ")
            ));
            continue;
        }
        // Start from a module that no allowed circle explains, when there is one.
        let closest = allowed
            .iter()
            .max_by_key(|a| names.iter().filter(|m| a.contains(*m)).count());
        let start = names
            .iter()
            .find(|m| closest.is_none_or(|a| !a.contains(*m)))
            .unwrap_or(&names[0]);
        problems.push(format!(
            "new import circle among the server's modules {{{}}}: {}; break it (a module imports \
             only from modules that do not import it back), or shrink an existing one",
            names.join(", "),
            circle_through(graph, &set, start).join(", "),
        ));
    }
    (problems, notes)
}

/// The crates whose modules must not import each other in a circle: the server, the replica and
/// the authenticator.
const NO_CIRCLES_IN: [&str; 3] = [SERVER_SRC, "crates/replica/src", "crates/auth/src"];

fn cycle_problems() -> Result<Vec<String>> {
    let mut problems = Vec::new();
    for src in NO_CIRCLES_IN {
        let (found, notes) = cycle_problems_in(&module_graph(src)?, ALLOWED_CYCLES);
        for note in notes {
            println!("layering: {note}");
        }
        problems.extend(found.into_iter().map(|p| format!("{src}: {p}")));
    }
    Ok(problems)
}

fn domain_problems() -> Result<Vec<String>> {
    let tree = output(&mut cargo(
        "tree -p registry-domain -e normal --prefix none",
    ))?;
    let mut problems = domain_problems_in(&tree);
    let tree = output(&mut cargo(
        "tree -p registry-policy -e normal --prefix none",
    ))?;
    problems.extend(policy_problems_in(&tree));
    Ok(problems)
}

fn domain_problems_in(tree: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for name in tree.lines().filter_map(|l| l.split_whitespace().next()) {
        if FORBIDDEN_IN_DOMAIN.iter().any(|f| name.starts_with(f)) {
            let problem = format!("registry-domain depends on {name} (the domain does no I/O)");
            if !problems.contains(&problem) {
                problems.push(problem);
            }
        }
    }
    problems
}

/// The policy engine is published on its own: no I/O crate, and no crate of
/// the registry (its storage, HTTP and ports stay out), even transitively.
fn policy_problems_in(tree: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for name in tree.lines().filter_map(|l| l.split_whitespace().next()) {
        let io = FORBIDDEN_IN_DOMAIN.iter().any(|f| name.starts_with(f));
        let registry = name.starts_with("registry-") && name != "registry-policy";
        if io || registry {
            let problem = format!(
                "registry-policy depends on {name} (the engine does no I/O and stands alone)"
            );
            if !problems.contains(&problem) {
                problems.push(problem);
            }
        }
    }
    problems
}

fn wrapper_problems() -> Result<Vec<String>> {
    let metadata = output(&mut cargo("metadata --format-version 1 --no-deps"))?;
    let metadata: Value = serde_json::from_str(&metadata).context("reading cargo metadata")?;
    Ok(wrapper_problems_in(&metadata))
}

fn wrapper_problems_in(metadata: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    for package in metadata["packages"].as_array().into_iter().flatten() {
        let member = package["name"].as_str().unwrap_or_default();
        for dep in package["dependencies"].as_array().into_iter().flatten() {
            // `kind` is null for normal dependencies, "dev" or "build" otherwise.
            if !dep["kind"].is_null() {
                continue;
            }
            let name = dep["name"].as_str().unwrap_or_default();
            for (pattern, allowed) in WRAPPERS {
                if matches(pattern, name) && !allowed.contains(&member) {
                    problems.push(format!(
                        "{member} depends on {name}; only {} may",
                        allowed.join(", ")
                    ));
                }
            }
        }
    }
    problems
}

/// What a maintainer or a user of the repository reads: code, tests, chores and docs cite the
/// project's own documents (`docs/api.md` and its sections), never the contract kept outside
/// the repository, which they do not have.
const SELF_CONTAINED: [&str; 12] = [
    "crates",
    "xtask",
    "tests",
    "docs",
    "migrations",
    "fuzz",
    "deploy",
    "schemas",
    "README.md",
    "ARCHITECTURE.md",
    "Cargo.toml",
    ".cargo/config.toml",
];

/// The name of that outside contract, in two pieces so that this file does not cite it.
const OUTSIDE_CONTRACT: &str = concat!("DECI", "SIONS");

/// Each line under [`SELF_CONTAINED`] that cites the contract outside the repository.
fn outside_citation_problems() -> Result<Vec<String>> {
    let root = crate::cmd::root();
    let mut problems = Vec::new();
    for top in SELF_CONTAINED {
        for path in every_file(&root.join(top))? {
            // Images and other files that are not text cite nothing.
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let file = path.strip_prefix(&root).unwrap_or(&path);
            problems.extend(outside_citations_in(&file.to_string_lossy(), &text));
        }
    }
    Ok(problems)
}

/// `file`'s lines that cite the outside contract, each as `file:line`.
fn outside_citations_in(file: &str, text: &str) -> Vec<String> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| line.contains(OUTSIDE_CONTRACT))
        .map(|(i, _)| {
            format!(
                "{file}:{}: cites {OUTSIDE_CONTRACT}, which is not in the repository: cite the \
                 section of docs/api.md that states it (add it there if it is missing)",
                i + 1
            )
        })
        .collect()
}

/// Every file at or under `path`, sorted; none when it does not exist. Build outputs and
/// caches (`target`, `node_modules`, `__pycache__`, hidden folders) are not the project's text.
fn every_file(path: &Path) -> Result<Vec<PathBuf>> {
    if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    let mut pending = vec![path.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry
                .with_context(|| format!("reading {}", dir.display()))?
                .path();
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            if path.is_dir() {
                let skipped = name.starts_with('.')
                    || ["target", "node_modules", "__pycache__"].contains(&name.as_ref());
                if !skipped {
                    pending.push(path);
                }
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn io_crates_in_the_domain_tree_are_reported_once() {
        let tree = "registry-domain v0.1.0 (/w/crates/domain)\nserde v1.0.229\n\
                    tokio v1.54.1\ntokio v1.54.1 (*)\ndiesel_derives v2.3.10\n";
        let problems = domain_problems_in(tree);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("tokio") && problems[1].contains("diesel_derives"));
        assert!(domain_problems_in("registry-domain v0.1.0\nserde v1.0\n").is_empty());
    }

    #[test]
    fn the_policy_engine_reaches_no_registry_crate_and_no_io() {
        let tree = "registry-policy v0.1.0 (/w/crates/policy)\nserde_json v1.0\n\
                    registry-domain v0.1.0 (/w/crates/domain)\ntokio v1.54.1\n";
        let problems = policy_problems_in(tree);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("registry-domain") && problems[1].contains("tokio"));
        assert!(policy_problems_in("registry-policy v0.1.0\nipnetwork v0.21\n").is_empty());
    }

    /// For each crate both name, the workspace members `deny.toml` lets depend on it are the
    /// ones `WRAPPERS` allows.
    #[test]
    fn the_wrappers_agree_with_deny_toml() {
        let deny = std::fs::read_to_string(crate::cmd::root().join("deny.toml")).unwrap();
        let mut compared = 0;
        for line in deny
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("{ crate = "))
        {
            let quoted = |key: &str| -> Vec<String> {
                let Some(rest) = line.split_once(key).map(|(_, rest)| rest) else {
                    return Vec::new();
                };
                let list = rest.split(']').next().unwrap_or_default();
                list.split('"')
                    .skip(1)
                    .step_by(2)
                    .map(str::to_owned)
                    .collect()
            };
            let name = line.split('"').nth(1).unwrap();
            let ours = |member: &String| member.starts_with("registry-") || member == "xtask";
            let mut denied: Vec<String> = quoted("wrappers = [").into_iter().filter(ours).collect();
            denied.sort();
            let Some((_, allowed)) = WRAPPERS.iter().find(|(pattern, _)| matches(pattern, name))
            else {
                continue;
            };
            let mut allowed: Vec<String> = allowed.iter().map(|m| (*m).to_owned()).collect();
            allowed.sort();
            assert_eq!(denied, allowed, "deny.toml and WRAPPERS disagree on {name}");
            compared += 1;
        }
        assert!(compared >= 6, "only {compared} crates compared");
    }

    #[test]
    fn only_the_wrapping_member_may_depend_on_an_io_crate() {
        let metadata = json!({"packages": [
            {"name": "registry-store", "dependencies": [
                {"name": "diesel", "kind": null}, {"name": "pq-sys", "kind": null}]},
            {"name": "registry-server", "dependencies": [
                {"name": "actix-web", "kind": null}, {"name": "diesel_migrations", "kind": null}]},
            {"name": "registry-tests", "dependencies": [
                {"name": "diesel", "kind": "dev"}, {"name": "josekit", "kind": "dev"}]},
            {"name": "registry-testkit", "dependencies": [{"name": "josekit", "kind": null}]},
        ]});
        assert_eq!(
            wrapper_problems_in(&metadata),
            ["registry-server depends on diesel_migrations; only registry-store may"]
        );
    }

    /// A graph of `from -> to` edges, each imported at `from.rs:1`.
    fn graph(edges: &[(&str, &str)]) -> Graph {
        let mut graph = Graph::new();
        for (from, to) in edges {
            graph
                .entry((*from).to_owned())
                .or_default()
                .insert((*to).to_owned(), format!("{from}.rs:1"));
            graph.entry((*to).to_owned()).or_default();
        }
        graph
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn cycles_are_the_strongly_connected_sets_of_more_than_one_module() {
        let g = graph(&[
            ("a", "b"),
            ("b", "c"),
            ("c", "a"),
            ("c", "d"),
            ("d", "e"),
            ("e", "d"),
            ("e", "f"),
            ("g", "a"),
        ]);
        assert_eq!(cycles(&g), [set(&["a", "b", "c"]), set(&["d", "e"])]);
        assert!(cycles(&graph(&[("a", "b"), ("b", "c"), ("a", "c")])).is_empty());
    }

    #[test]
    fn a_circle_passes_only_inside_an_allowed_set() {
        let g = graph(&[("a", "b"), ("b", "a"), ("c", "d"), ("d", "c")]);
        let (problems, notes) = cycle_problems_in(&g, &[&["a", "b", "x"]]);
        assert_eq!(notes, ["allowed import circle (to take apart): a, b"]);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains("{c, d}: c -> d (c.rs:1), d -> c (d.rs:1)"),
            "{problems:?}"
        );
        // A module joining an allowed circle makes a new one; the path shows the newcomer.
        let g = graph(&[("a", "b"), ("b", "a"), ("b", "n"), ("n", "a")]);
        let (problems, _) = cycle_problems_in(&g, &[&["a", "b"]]);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains("{a, b, n}: n -> a (n.rs:1), a -> b (a.rs:1), b -> n (b.rs:1)"),
            "{problems:?}"
        );
    }

    #[test]
    fn crate_paths_name_their_top_module() {
        assert_eq!(crate_paths_in("use crate::state::AppState;"), ["state"]);
        assert_eq!(
            crate_paths_in("    crate::directory::catch_up(&state).await; crate::problem::x()"),
            ["directory", "problem"]
        );
        assert_eq!(
            crate_paths_in("use crate::{auth, directory::{self, Entry}, self, state::{A, B}};"),
            ["auth", "directory", "state"]
        );
        assert!(crate_paths_in("registry_crate::x; $crate::y; use std::fmt;").is_empty());
        assert_eq!(module_of(Path::new("auth/federation.rs")).unwrap(), "auth");
        assert_eq!(module_of(Path::new("state.rs")).unwrap(), "state");
        assert_eq!(module_of(Path::new("main.rs")), None);
    }

    #[test]
    fn routes_may_not_decide_a_403_or_404_but_routing_may_answer_one() {
        let routes = "/// The answer to a path no route serves.\n\
                      pub async fn not_found() -> Result<HttpResponse, ApiError> {\n\
                      \x20   Err(ApiError::NotFound(\"no such endpoint\".into()))\n\
                      }\n\
                      // A comment may name ApiError::Forbidden.\n\
                      fn account(x: u8) -> ApiResult<()> {\n\
                      \x20   if x == 0 { return Err(ApiError::Forbidden(\"no\".into())); }\n\
                      \x20   Ok(HttpResponse::NotFound().finish())\n\
                      }\n\
                      #[cfg(test)]\n\
                      mod tests { const S: StatusCode = StatusCode::NOT_FOUND; }\n";
        let problems = decided_statuses_in("mod.rs", routes);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].starts_with("crates/server/src/routes/mod.rs:7: `ApiError::Forbidden`"));
        assert!(
            problems[1].starts_with("crates/server/src/routes/mod.rs:8: `HttpResponse::NotFound`")
        );
        // The name is allowed in routes/mod.rs only.
        assert_eq!(decided_statuses_in("keys.rs", routes).len(), 3);
    }

    #[test]
    fn storage_is_named_only_by_its_holders_and_each_holds_its_role() {
        let auth = "use registry_domain::ports::{ActivityLog, Storage};\n";
        let found = storage_names_in("crates/auth/src/last_use.rs", auth);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("`Storage`"), "{found:?}");
        let server = "let s = state.registry.store.clone(); // Storage, a comment\n\
                      let x = \"FetchLog\"; Command::FetchLog(a);\n";
        let found = storage_names_in("crates/server/src/background.rs", server);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("registry.store"), "{found:?}");
        assert!(storage_names_in("crates/store/src/fetches.rs", auth).is_empty());
        assert!(storage_names_in("crates/domain/src/app/keys.rs", auth).is_empty());
        let replica = "use registry_domain::ports::{\n    DatabaseSides, ReplicaSource,\n    Database,\n};\nfn x(d: &dyn registry_domain::ports::FetchLog) {}\n";
        let found = storage_names_in("crates/replica/src/replica.rs", replica);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("crates/replica/src/replica.rs:5:"),
            "{found:?}"
        );
        assert_eq!(
            storage_names_in("crates/replica/src/directory.rs", replica).len(),
            3
        );
        let glob = "use registry_domain::ports::*;\n";
        assert_eq!(
            storage_names_in("crates/oidc/src/lib.rs", glob).len(),
            STORAGE_ROLES.len()
        );
        let tests = "#[cfg(test)]\nuse registry_domain::ports::Storage;\n";
        assert!(storage_names_in("crates/server/src/tls.rs", tests).is_empty());
        assert!(storage_names_in("crates/auth/src/authenticator/tests.rs", auth).is_empty());
    }

    #[test]
    fn patterns_match_names_and_prefixes() {
        assert!(matches("diesel*", "diesel"));
        assert!(matches("diesel*", "diesel_migrations"));
        assert!(matches("reqwest", "reqwest"));
        assert!(!matches("reqwest", "reqwest-middleware"));
        assert!(!matches("actix*", "tokio"));
    }

    #[test]
    fn citations_of_the_outside_contract_are_reported_by_file_and_line() {
        let text =
            format!("//! Fine.\n/// See {OUTSIDE_CONTRACT} §5.\nok\n# {OUTSIDE_CONTRACT}.md\n");
        let problems = outside_citations_in("crates/x/src/lib.rs", &text);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].starts_with("crates/x/src/lib.rs:2: cites "));
        assert!(problems[1].starts_with("crates/x/src/lib.rs:4: cites "));
        assert!(
            outside_citations_in("docs/api.md", "see docs/api.md, \"Key lifecycle\"").is_empty()
        );
    }
}
