//! `blob-mutex`: run a command on one host at a time, using an Azure Blob
//! Storage lease; show or break the lease; read and write the leader state;
//! show who owns which partition of a lease set.
//!
//! Run `blob-mutex --help` (and `blob-mutex <command> --help`) for the
//! commands, examples and exit codes.
//!
//! Unix only: `run` puts its command in a process group of its own, with
//! a guard process, and stops it with signals.

#[cfg(not(unix))]
compile_error!(
    "the blob-mutex command (package blob-mutex-cli) runs on Unix only: it manages its command's \
     process group with signals; the library (package blob-mutex) builds everywhere"
);

mod break_lease;
mod child;
mod cli;
mod endpoint;
mod exit;
mod group;
mod guard;
mod logs;
mod manual;
mod partitions;
mod recorder;
mod run;
mod signin;
mod state;
mod status;

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::Parser;

use crate::cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => match e.kind() {
            ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => e.exit(),
            _ => {
                eprintln!(
                    "blob-mutex: {} (see --help)",
                    one_line(&e.render().to_string())
                );
                return ExitCode::from(exit::USAGE);
            }
        },
    };
    // What needs neither a runtime nor logs.
    match &cli.command {
        Command::Guard => return guard::serve(),
        Command::Completions { shell } => return manual::completions(*shell),
        Command::Man { command } => return manual::man(command.as_deref()),
        _ => {}
    }
    logs::init(cli.log_format);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("blob-mutex: cannot start: {e}");
            return ExitCode::from(exit::ERROR);
        }
    };
    let mut command = cli.command;
    let result = runtime.block_on(async {
        command.sign_in().await?;
        match command {
            Command::Run(args) => run::run(args).await,
            Command::Status(args) => status::status(args).await,
            Command::Break(args) => break_lease::break_lease(args).await,
            Command::State(command) => state::state(command).await,
            Command::Partitions(args) => partitions::partitions(args).await,
            Command::Guard | Command::Completions { .. } | Command::Man { .. } => {
                unreachable!("dispatched before the runtime")
            }
        }
    });
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("blob-mutex: {}", one_line(&format!("{e:#}")));
            ExitCode::from(exit::of_error(&e))
        }
    }
}

/// A message as one line: clap's `error: ` prefix dropped, the lines up to
/// the first blank one joined.
fn one_line(message: &str) -> String {
    let message = message.trim_start_matches("error: ");
    message
        .lines()
        .take_while(|line| !line.trim().is_empty())
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ")
}
