//! `blob-mutex`: run a command on one host at a time, using an Azure Blob
//! Storage lease; show or break the lease; read and write the leader state;
//! show who owns which partition of a lease set; run a cron schedule's
//! every slot once across hosts.
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
mod orphans;
mod partitions;
mod recorder;
mod run;
mod schedule;
mod signals;
mod signin;
mod state;
mod status;
mod usage;
mod version;

use std::process::ExitCode;

use clap::error::ErrorKind;

use crate::cli::Command;

/// The `BLOB_MUTEX_*` variables the command reads itself, besides those of
/// its flags; `run` sets some of them for its command, which may be
/// `blob-mutex` again.
const READ_BY_HAND: &[&str] = &[
    "BLOB_MUTEX_ACCOUNTS_FILE",
    "BLOB_MUTEX_DEV",
    "BLOB_MUTEX_CONNECTION_STRING",
    "BLOB_MUTEX_QUORUM_CONNECTION_STRINGS",
    "BLOB_MUTEX_ACCOUNT_URL",
    "BLOB_MUTEX_AUTH",
    "BLOB_MUTEX_EPOCH",
    "BLOB_MUTEX_LEASE_ID",
    "BLOB_MUTEX_HOLDER",
    "BLOB_MUTEX_CONTAINER",
    "BLOB_MUTEX_BLOB",
    "BLOB_MUTEX_BACKEND",
    "BLOB_MUTEX_SLOT",
];

fn main() -> ExitCode {
    let cli = match usage::parse() {
        Ok(cli) => cli,
        Err(e) => match e.kind() {
            ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => e.exit(),
            _ => {
                eprintln!(
                    "blob-mutex: {} (see --help)",
                    usage::clap_error(&e, one_line)
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
        Command::Version { json } => return version::print(*json),
        _ => {}
    }
    logs::init(cli.log_format);
    // Warned, not refused: a variable of a newer version, or one that a
    // parent `run` sets for its command, must not stop an older command.
    let environment = std::env::vars_os().filter_map(|(k, _)| k.into_string().ok());
    for (variable, nearest) in usage::unknown_variables(environment, READ_BY_HAND) {
        let nearest = nearest.map_or_else(String::new, |n| format!("; did you mean {n}?"));
        tracing::warn!(%variable, "an unknown variable is ignored{nearest}");
    }
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
            Command::Schedule(args) => schedule::schedule(args).await,
            Command::Status(args) => status::status(args).await,
            Command::Break(args) => break_lease::break_lease(args).await,
            Command::State(command) => state::state(command).await,
            Command::Partitions(args) => partitions::partitions(args).await,
            Command::Guard
            | Command::Completions { .. }
            | Command::Man { .. }
            | Command::Version { .. } => {
                unreachable!("dispatched before the runtime")
            }
        }
    });
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            logs::say(&usage::reword(&one_line(&format!("{e:#}")), &e));
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
