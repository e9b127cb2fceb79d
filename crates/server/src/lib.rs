//! `registry-server`: the registry's HTTP server and command line, as a library. The `registry`
//! binary (`main.rs`) parses its command line and hands it to [`cli::run`]; other programs (the
//! integration tests) start the server in their own process with [`start`].
//!
//! Process-wide state, which several servers in one process share: the base URL of problem
//! `type` addresses (the first server's), the log (whatever `tracing` subscriber the process
//! installed) and its buffer ([`log_line`], [`flush_log`]).

mod anonymous_ceiling;
mod answer_headers;
mod app;
mod background;
mod body;
mod caller;
mod challenge_answers;
pub mod cli;
mod client;
mod client_ip;
mod connections;
mod custom_domains;
mod dashboard;
mod domain_worker;
mod drain;
mod http_date;
mod listeners;
mod log_buffer;
mod log_format;
mod metrics;
mod observe;
mod one_at_a_time;
mod operator;
mod problem;
mod process;
mod public;
mod request_line;
mod route;
mod routes;
pub mod settings;
mod starting;
mod state;
mod stdout;
mod system;
mod tls;
mod views;
mod way_in;

pub use app::{serve, start, Injected, Running};
pub use log_buffer::{flush_log, log_line, LogLine};
pub use log_format::init as init_log;
pub use settings::{LogFormat, Settings};
pub use system::{SystemClock, SystemTicks};
