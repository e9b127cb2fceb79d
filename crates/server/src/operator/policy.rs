//! `registry policy …`: policy documents offline, through the domain crate alone (docs/api.md,
//! "Explaining refusals").

use crate::stdout;
use anyhow::Context;
use clap::Subcommand;
use registry_domain::json::parse_unique;
use registry_domain::policy::{
    compare, lint_document, parse_cases, run_cases, Action, CompareResult, Finding, Policy,
    Severity, Tally, TestCase,
};
use registry_domain::text::escape_controls;
use serde_json::{json, Map, Value};
use std::path::Path;

/// How a policy command prints its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// One line per finding, for a person.
    Text,
    /// One JSON document on stdout.
    Json,
}

/// Policy subcommands.
#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Check a policy document: its schema violations (errors) and the findings of the lint
    /// (warnings), each with a code, a pointer and a sentence. Exit 1 on an error, and on a
    /// warning with --deny-warnings; 0 otherwise.
    ///
    /// Example: `registry policy check deployer.json --deny-warnings`
    Check {
        /// The policy document (JSON).
        file: std::path::PathBuf,
        /// Output format.
        #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
        format: OutputFormat,
        /// Treat warnings as errors (exit 1).
        #[arg(long)]
        deny_warnings: bool,
    },
    /// Explain what a policy decides for a token's claims: the matching rule, or for each rule
    /// of the token's issuer the first check that failed, and hints for near misses. The policy
    /// alone: no signature and no time checks. Exit 0 whatever the decision.
    ///
    /// Example: `registry policy explain deployer.json --token "$(cat token.jwt)" --service k3s-acme --action config:write`
    Explain {
        /// The policy document (JSON).
        file: std::path::PathBuf,
        /// A JSON file holding the token's claims.
        #[arg(long, conflicts_with = "token", required_unless_present = "token")]
        claims: Option<std::path::PathBuf>,
        /// A JWT whose claims to use (its signature is not checked).
        #[arg(long)]
        token: Option<String>,
        /// The service (subdomain) the call would act on.
        #[arg(long, value_parser = service_name)]
        service: Option<String>,
        /// The client address.
        #[arg(long)]
        ip: Option<std::net::IpAddr>,
        /// The action the call would take (services:read, services:write, config:read,
        /// config:write, accounts:read, accounts:write, audit:read, tokens:sign); not checked
        /// when absent.
        #[arg(long, value_parser = parse_action)]
        action: Option<Action>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
        format: OutputFormat,
    },
    /// Run test cases against a policy: a JSON list of {name, claims, service?, ip?, action?,
    /// expect: "allow"|"deny", rule?}. Prints each result and the rules no case exercised. Exit 1 when
    /// a case fails.
    ///
    /// Example: `registry policy test deployer.json cases.json`
    Test {
        /// The policy document (JSON).
        file: std::path::PathBuf,
        /// The cases (JSON).
        cases: std::path::PathBuf,
        /// Output format.
        #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
        format: OutputFormat,
    },
    /// Compare two versions of a policy: does NEW admit a request OLD refuses? Prints
    /// narrower-or-equal (proven), widens (with requests NEW admits and OLD refuses, each
    /// confirmed by evaluating both policies) or undetermined. Exit 0, or 1 on widens with
    /// --deny-widening; 2 when a file cannot be read or is not a valid policy (1 for a file over
    /// 1 MiB, as for every policy command).
    ///
    /// Example: `registry policy compare deployer.json deployer-new.json --deny-widening`
    Compare {
        /// The policy as it is (JSON).
        old: std::path::PathBuf,
        /// The policy as it would be (JSON).
        new: std::path::PathBuf,
        /// Output format: text, or JSON {result, witnesses: [{rule, claims, service, ip?}]}.
        #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
        format: OutputFormat,
        /// Exit 1 when NEW widens OLD.
        #[arg(long)]
        deny_widening: bool,
    },
}

/// A service's name as the API's explain takes it: not empty.
fn service_name(text: &str) -> Result<String, String> {
    match text.trim().is_empty() {
        true => Err("empty: name the service (its subdomain), or leave --service out".to_owned()),
        false => Ok(text.to_owned()),
    }
}

/// An action named on the command line.
fn parse_action(text: &str) -> Result<Action, String> {
    text.parse::<Action>().map_err(|e| e.to_string())
}

/// The text of `path`, bounded (`registry_client::read_text_file`): a file too large is
/// [`TooLarge`].
fn read_bounded(path: &Path) -> anyhow::Result<String> {
    registry_client::read_text_file(path).map_err(|e| match e {
        registry_client::FileError::TooLarge { .. } => TooLarge(e.to_string()).into(),
        e => e.into(),
    })
}

fn read_json(path: &Path) -> anyhow::Result<Value> {
    let text = read_bounded(path)?;
    // Read as the API reads a policy: a member named twice has no one meaning.
    parse_unique(text.as_bytes()).with_context(|| format!("{} is not JSON", path.display()))
}

/// The policy of `path`, or the one sentence of why it is not one.
fn read_policy(path: &Path) -> anyhow::Result<Policy> {
    let document = read_json(path)?;
    Policy::parse(&document).map(|p| p.policy).map_err(|error| {
        let violations = error.into_violations();
        let first = violations
            .first()
            .map(|v| v.to_string())
            .unwrap_or_default();
        anyhow::anyhow!(
            "{} is not a valid policy ({} problem(s); first: {first}); run `registry policy \
             check` for all of them",
            path.display(),
            violations.len()
        )
    })
}

/// The claims of a compact JWS, read without checking anything.
fn unverified_claims(token: &str) -> anyhow::Result<Map<String, Value>> {
    let payload = token
        .split('.')
        .nth(1)
        .context("the token is not a JWT (header.payload.signature)")?;
    registry_domain::claims::jws_part(payload.trim_end_matches('='))
        .map_err(|why| anyhow::anyhow!("the token's payload {why}"))
}

fn read_cases(path: &Path) -> anyhow::Result<Vec<TestCase>> {
    parse_cases(&read_json(path)?).map_err(|why| anyhow::anyhow!("{} {why}", path.display()))
}

/// Prints an answer of the engine: its JSON, or its text (`registry_policy::report`), as a line.
fn show(format: OutputFormat, json: Value, text: &dyn std::fmt::Display) {
    match format {
        OutputFormat::Json => stdout::line(json),
        OutputFormat::Text => print_text(format_args!("{text}\n")),
    }
}

/// Prints `text`, which ends its own lines, each line inert: the files' names, keys and cases
/// are their author's (docs/api.md, "Text people read"), and a review in CI shows them.
fn print_text(text: impl std::fmt::Display) {
    let text = text.to_string();
    let lines: Vec<_> = text.split('\n').map(escape_controls).collect();
    stdout::text(lines.join("\n"))
}

/// A file past `registry_client::MAX_FILE_BYTES`: exit 1 for every policy command (docs/api.md,
/// "Limits that hold (second security review)"), `compare` included.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct TooLarge(String);

/// A command that ran but found problems: exit 1 with nothing more on stderr than the output
/// already says.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Failed(pub String);

/// A file `registry policy compare` was given is no policy: exit 2, so that a review gate
/// tells a broken file from a widening (exit 1).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NotAPolicy(pub String);

/// Runs a policy command.
pub fn run(command: PolicyCommand) -> anyhow::Result<()> {
    match command {
        PolicyCommand::Check {
            file,
            format,
            deny_warnings,
        } => {
            // A file that is not JSON is the check's own finding (the document it checks),
            // printed like the others; one that cannot be read is an error of the command.
            let findings = match parse_unique(read_bounded(&file)?.as_bytes()) {
                Ok(document) => lint_document(&document),
                Err(error) => vec![Finding {
                    code: "json",
                    severity: Severity::Error,
                    pointer: String::new(),
                    message: format!("{} is not JSON: {error}", file.display()),
                }],
            };
            let json =
                json!({"findings": findings.iter().map(Finding::to_json).collect::<Vec<_>>()});
            match format {
                OutputFormat::Text if findings.is_empty() => {
                    print_text(format_args!("{}: no findings\n", file.display()))
                }
                OutputFormat::Text => findings
                    .iter()
                    .for_each(|finding| print_text(format_args!("{finding}\n"))),
                OutputFormat::Json => stdout::line(json),
            }
            let tally = Tally::of(&findings);
            if tally.errors > 0 || (deny_warnings && tally.warnings > 0) {
                return Err(Failed(format!("{}: {tally}", file.display())).into());
            }
            Ok(())
        }
        PolicyCommand::Explain {
            file,
            claims,
            token,
            service,
            ip,
            action,
            format,
        } => {
            let policy = read_policy(&file)?;
            let claims = match (claims, token) {
                (Some(path), _) => match read_json(&path)? {
                    Value::Object(claims) => claims,
                    _ => anyhow::bail!("{} is not a JSON object of claims", path.display()),
                },
                (None, Some(token)) => {
                    let claims = unverified_claims(&token)?;
                    eprintln!("note: the token's signature and times are not checked");
                    claims
                }
                (None, None) => anyhow::bail!("give --claims FILE or --token JWT"),
            };
            // A request on the whole customer is judged as the registry judges it.
            let service = registry_domain::policy::judged_service(service.as_deref(), action);
            let explanation = policy.explain(Some(&claims), service, ip, action);
            show(format, explanation.to_json(), &explanation);
            Ok(())
        }
        PolicyCommand::Test {
            file,
            cases,
            format,
        } => {
            let policy = read_policy(&file)?;
            let cases = read_cases(&cases)?;
            let run = run_cases(&policy, &cases);
            match format {
                OutputFormat::Json => stdout::line(run.report(&cases).to_json()),
                OutputFormat::Text => print_text(run.report(&cases)),
            }
            let failed = run.failed();
            if failed > 0 {
                return Err(Failed(format!("{failed} of {} case(s) failed", cases.len())).into());
            }
            Ok(())
        }
        PolicyCommand::Compare {
            old,
            new,
            format,
            deny_widening,
        } => {
            // Exit 2 for a file that is not a policy, so that a review gate tells a broken file
            // from a widening (exit 1); a file too large to read is exit 1, as for every policy
            // command.
            let (old, new) = match read_policy(&old).and_then(|o| Ok((o, read_policy(&new)?))) {
                Ok(policies) => policies,
                Err(error) if error.downcast_ref::<TooLarge>().is_some() => return Err(error),
                Err(error) => return Err(NotAPolicy(format!("{error:#}")).into()),
            };
            let comparison = compare(&old, &new);
            show(format, comparison.to_json(), &comparison);
            if deny_widening && comparison.result == CompareResult::Widens {
                return Err(Failed("NEW widens OLD (--deny-widening)".into()).into());
            }
            Ok(())
        }
    }
}
