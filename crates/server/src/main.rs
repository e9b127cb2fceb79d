//! `registry`: the binary. Parses the command line and hands over to the wiring in `app`.

mod adapters;
mod app;
mod audit;
mod auth;
mod background;
mod body;
mod cli;
mod client_ip;
mod connections;
mod customers;
mod dashboard;
mod directory;
mod hosting;
mod last_use;
mod metrics;
mod observe;
mod policy_cli;
mod problem;
mod rate_limit;
mod refusals;
mod routes;
mod settings;
mod state;
mod sync;
mod views;

use clap::Parser;
use cli::{Cli, Command, CustomerCommand};
use settings::LogFormat;

/// jemalloc, whose background threads return freed memory to the system within about a
/// second of its release (options in `.cargo/config.toml`).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(observe::log_line)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}

fn print_json(value: &serde_json::Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_default()
    );
}

/// Exit codes: 0 done, 1 the command failed (one sentence on stderr), 2 the command line is
/// wrong (clap's usage message).
fn main() -> std::process::ExitCode {
    match run(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            // One line, the causes joined (libpq's messages span lines): never a backtrace,
            // whatever RUST_BACKTRACE says.
            let message = format!("{error:#}");
            let line: Vec<&str> = message.split_whitespace().collect();
            eprintln!("registry: {}", line.join(" "));
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(settings) => {
            init_logging(settings.log_format);
            let served = actix_web::rt::System::new().block_on(app::serve(*settings));
            observe::flush_log();
            served
        }
        Command::Migrate(database) => {
            app::with_command_store(&database.database_url, |_| Ok(()))?;
            eprintln!(
                "migrations applied to {}",
                app::redact(&database.database_url)
            );
            Ok(())
        }
        Command::Audit(args) => app::with_command_store(&args.database.database_url, |store| {
            audit::print_trail(store, &args, &mut std::io::stdout().lock())
        }),
        Command::Sync(args) => sync::run(args),
        Command::Policy { command } => policy_cli::run(command),
        Command::Customer { command } => {
            let output = match command {
                CustomerCommand::Create {
                    tenant,
                    plan,
                    name,
                    database,
                } => app::with_command_store(&database.database_url, |store| {
                    customers::create(store, &tenant, &plan, &name)
                })?,
                CustomerCommand::List { database } => {
                    app::with_command_store(&database.database_url, customers::list)?
                }
                CustomerCommand::SetPlan {
                    tenant,
                    plan,
                    database,
                } => app::with_command_store(&database.database_url, |store| {
                    customers::set_plan(store, &tenant, &plan)
                })?,
            };
            print_json(&output);
            Ok(())
        }
    }
}
