//! The command line: `registry serve | migrate | customer …`.

use crate::settings::{DatabaseArgs, Settings};
use clap::{Parser, Subcommand};

/// Publishes OpenID Connect discovery documents and key sets of customer services, hosts
/// temporary anonymous services, and authenticates service accounts.
#[derive(Debug, Parser)]
#[command(name = "registry", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP server (applies pending migrations first).
    Serve(Box<Settings>),
    /// Apply pending database migrations and exit.
    Migrate(DatabaseArgs),
    /// Manage customers (tenants).
    Customer {
        /// What to do with customers.
        #[command(subcommand)]
        command: CustomerCommand,
    },
}

/// Customer subcommands.
#[derive(Debug, Subcommand)]
pub enum CustomerCommand {
    /// Create a customer and its first service account (policy `{"kind":"static","services":["*"]}`);
    /// prints the customer, the account and the account's token as one JSON object.
    Create {
        /// Tenant suffix: 2–20 characters of a-z, 0-9 and '-'.
        #[arg(long)]
        tenant: String,
        /// Plan: free, team, business or enterprise.
        #[arg(long)]
        plan: String,
        /// Display name.
        #[arg(long)]
        name: String,
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// List customers as a JSON array.
    List {
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// Change a customer's plan.
    SetPlan {
        /// Tenant suffix of the customer.
        #[arg(long)]
        tenant: String,
        /// New plan: free, team, business or enterprise.
        #[arg(long)]
        plan: String,
        #[command(flatten)]
        database: DatabaseArgs,
    },
}
