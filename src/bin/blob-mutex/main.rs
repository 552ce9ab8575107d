//! `blob-mutex`: run a command on one host at a time, using an Azure Blob
//! Storage lease; show or break the lease; read and write the leader state;
//! show who owns which partition of a lease set.
//!
//! Run `blob-mutex --help` (and `blob-mutex <command> --help`) for the
//! commands, examples and exit codes.

mod break_lease;
mod child;
mod cli;
mod endpoint;
mod exit;
mod guard;
mod partitions;
mod recorder;
mod run;
mod state;
mod status;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::Parser;
use tracing_subscriber::EnvFilter;

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
    if let Command::Guard = cli.command {
        return guard::serve();
    }
    init_logging();
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
    let result = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => run::run(args).await,
            Command::Status(args) => status::status(args).await,
            Command::Break(args) => break_lease::break_lease(args).await,
            Command::State(command) => state::state(command).await,
            Command::Partitions(args) => partitions::partitions(args).await,
            Command::Guard => unreachable!("the guard was dispatched before the runtime"),
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

/// Logs go to stderr; `RUST_LOG` chooses them (default: warnings and
/// errors), except that the storage SDKs never log below info (see
/// [`without_sdk_debug`]).
fn init_logging() {
    let directives = std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".to_owned());
    let filter = EnvFilter::try_new(without_sdk_debug(&directives))
        .unwrap_or_else(|_| EnvFilter::new(without_sdk_debug("warn")));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .init();
}

/// The targets of the storage SDKs' own logs. At debug they carry
/// credentials: `azure_core` 0.21 logs every request with its URL (a SAS
/// token in the query) and its headers, and its `Debug` of the headers
/// shows `Authorization` (a Shared Key signature or a bearer token) in
/// clear; the official SDK logs lease ids. Never below info, whatever
/// `RUST_LOG` says.
const SDK_TARGETS: [&str; 2] = ["azure_core", "typespec_client_core"];

/// `RUST_LOG`'s directives with every one naming an SDK target (or a module
/// of one) dropped, and each SDK target capped at info.
fn without_sdk_debug(directives: &str) -> String {
    let kept = directives.split(',').filter(|d| {
        let target = d.trim().split(['=', '[']).next().unwrap_or("");
        !SDK_TARGETS
            .iter()
            .any(|sdk| target == *sdk || target.starts_with(&format!("{sdk}::")))
    });
    let caps = SDK_TARGETS.iter().map(|sdk| format!("{sdk}=info"));
    kept.map(str::to_owned)
        .chain(caps)
        .filter(|d| !d.trim().is_empty())
        .collect::<Vec<_>>()
        .join(",")
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

#[cfg(test)]
mod tests {
    use super::without_sdk_debug;

    #[test]
    fn the_sdks_never_log_below_info_whatever_rust_log_says() {
        assert_eq!(
            without_sdk_debug("debug"),
            "debug,azure_core=info,typespec_client_core=info"
        );
        assert_eq!(
            without_sdk_debug(
                "warn,azure_core=trace,azure_core::policies::transport=debug,blob_mutex=debug"
            ),
            "warn,blob_mutex=debug,azure_core=info,typespec_client_core=info"
        );
        assert_eq!(
            without_sdk_debug("typespec_client_core[span]=trace,azure_core_x=debug"),
            "azure_core_x=debug,azure_core=info,typespec_client_core=info"
        );
        assert_eq!(
            without_sdk_debug(""),
            "azure_core=info,typespec_client_core=info"
        );
    }
}
