//! The `gelstore` command line: argument parsing and dispatch. Each command
//! group lives in its own module; they share the report printer in `report`.

mod assistant;
mod background_file;
mod chat;
mod device;
mod git_base;
mod lex;
mod lex_net;
mod locate;
mod output_file;
mod progress;
mod repo;
mod report;
mod serve;
mod served;
mod settings;
mod sync;
mod sync_status;

pub use lex::sync_generated;

use clap::{Parser, Subcommand, ValueEnum};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// Exit status of every command: 0 clean, 1 findings, 2 usage or I/O error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Clean,
    Findings,
    Failed,
}

impl From<Outcome> for ExitCode {
    fn from(o: Outcome) -> ExitCode {
        match o {
            Outcome::Clean => ExitCode::SUCCESS,
            Outcome::Findings => ExitCode::from(1),
            Outcome::Failed => ExitCode::from(2),
        }
    }
}

/// A failed command, with the exit status it maps to.
struct Failure {
    outcome: Outcome,
    message: String,
}

impl Failure {
    /// Refused input or state: exit 1.
    fn input(message: impl Into<String>) -> Self {
        Failure {
            outcome: Outcome::Findings,
            message: message.into(),
        }
    }

    /// The environment failed (I/O, a locked store): exit 2.
    fn env(message: impl Into<String>) -> Self {
        Failure {
            outcome: Outcome::Failed,
            message: message.into(),
        }
    }
}

/// The exit status of a command's result; a failure's message goes to stderr.
fn finish(result: Result<(), Failure>) -> Outcome {
    match result {
        Ok(()) => Outcome::Clean,
        Err(f) => {
            eprintln!("error: {}", f.message);
            f.outcome
        }
    }
}

/// Prints one line to stdout; a closed stdout (`| head`) is not an error.
fn say(line: impl std::fmt::Display) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

#[derive(Parser, Debug)]
#[command(
    name = "gelstore",
    version,
    about = "AI-assistant chats as user-owned, end-to-end sealed AT Protocol records",
    long_about = None
)]
pub struct Cli {
    /// The data folder: the repository store, the identity key and the
    /// device's keys.
    #[arg(
        long,
        global = true,
        value_name = "DIR",
        default_value = "./gelstore-data"
    )]
    pub data: PathBuf,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Lexicon tools for CI: lint schemas, check records, diff versions.
    #[command(subcommand)]
    Lex(lex::LexCommand),
    /// The local repository: init, apply writes, read, export/import CARs.
    #[command(subcommand)]
    Repo(repo::RepoCommand),
    /// This device's keys and the account's devices: init, pair, approve,
    /// join, ls, remove.
    #[command(subcommand)]
    Device(device::DeviceCommand),
    /// Chats: new, ls, send, reply (the assistant loop, or a recorded
    /// stream), ask, show, output, approvals, approve.
    #[command(subcommand)]
    Chat(chat::ChatCommand),
    /// The user's assistant settings: default model and effort, tools,
    /// approvals, MCP servers.
    #[command(subcommand)]
    Settings(settings::SettingsCommand),
    /// Sync with a PDS: pull and merge the other devices' records, push
    /// this store's, check the PDS's new root (`sync status`: compare only).
    #[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
    Sync(sync::SyncArgs),
    /// Serve the data folder's repository over XRPC to atproto clients.
    Serve(serve::ServeArgs),
}

/// Output style shared by every reporting command.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Text for people.
    #[default]
    Human,
    /// JSON for scripts, one object per line.
    Json,
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> Outcome {
    // While `gelstore serve` holds the folder, the store is its own: reads
    // go through the server; anything else says so at once rather than
    // wait on the store's lock. `lex` and `repo verify` never touch it.
    let touches_folder = !matches!(
        cli.command,
        Command::Lex(_) | Command::Repo(repo::RepoCommand::Verify(_))
    );
    if touches_folder && let Err(e) = crate::server::running::check_free(&cli.data) {
        if let Command::Repo(cmd) = &cli.command
            && let Some(outcome) = served::run(&e.running, cmd)
        {
            return outcome;
        }
        return finish(Err(Failure::env(e.to_string())));
    }
    match cli.command {
        Command::Lex(cmd) => lex::run(cmd),
        Command::Repo(cmd) => repo::run(&cli.data, cmd),
        Command::Device(cmd) => device::run(&cli.data, cmd),
        Command::Chat(cmd) => chat::run(&cli.data, cmd),
        Command::Settings(cmd) => settings::run(&cli.data, cmd),
        Command::Sync(args) => sync::run(&cli.data, args),
        Command::Serve(args) => serve::run(&cli.data, args),
    }
}
