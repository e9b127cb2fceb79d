//! `registry`: the binary. Parses the command line and hands over to the library.

use clap::Parser;
use registry_server::cli::{self, Cli, Command};

/// jemalloc, whose background threads return freed memory to the system within about a
/// second of its release (options in `.cargo/config.toml`).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Exit codes: 0 done, 1 the command failed (one sentence on stderr), 2 the command line is
/// wrong (clap's usage message); a command may name its own (`cli::Exit`).
fn main() -> std::process::ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            // Help and --version come this way too, with 0.
            let error = cli::name_the_variable(error);
            let _ = error.print();
            return std::process::ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(2));
        }
    };
    match &cli.command {
        Command::Serve(settings) => registry_server::init_log(settings.log_format),
        // The plugin runs for long beside kube-apiserver: what it cannot do (read the keys,
        // reach the registry) goes to stderr as lines of the server's text log.
        Command::Signer(_) => registry_server::init_log(registry_server::LogFormat::Text),
        _ => {}
    }
    match cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            // One line, the causes joined (libpq's messages span lines): never a backtrace,
            // whatever RUST_BACKTRACE says.
            let message = format!("{error:#}");
            // What a file or an answer held is quoted inert.
            let line: Vec<&str> = message.split_whitespace().collect();
            let line = registry_domain::text::escape_controls(&line.join(" ")).into_owned();
            eprintln!("registry: {line}");
            let code = error
                .downcast_ref::<cli::Exit>()
                .map_or(1, |exit| exit.code);
            std::process::ExitCode::from(code)
        }
    }
}
