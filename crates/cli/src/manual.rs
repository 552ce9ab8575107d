//! `blob-mutex completions SHELL` and `blob-mutex man [COMMAND]`: the
//! shell completions and the manual pages, made from the command's own
//! definition (`cli.rs`), so that they say what `--help` says and never
//! drift from it. Packages install their output (bash, zsh and fish
//! completions; `blob-mutex.1` and one page per subcommand).

use std::io::Write;
use std::process::ExitCode;

use clap::CommandFactory;

use crate::cli::Cli;
use crate::exit;

/// The program's name, as the scripts and pages call it.
const NAME: &str = "blob-mutex";

/// Prints the completion script of `shell`.
pub(crate) fn completions(shell: clap_complete::Shell) -> ExitCode {
    let mut command = public();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, NAME, &mut script);
    print(&script)
}

/// Prints the manual page of blob-mutex, or of its subcommand `name`.
pub(crate) fn man(name: Option<&str>) -> ExitCode {
    let mut command = Cli::command();
    // Built, each subcommand is named as man(1) looks its page up
    // (`blob-mutex-run(1)`), with `blob-mutex run` in its synopsis.
    command.build();
    let page = match name {
        None => command,
        Some(name) => {
            let Some(sub) = command
                .get_subcommands()
                .find(|s| s.get_name() == name && !s.is_hide_set())
            else {
                let known: Vec<&str> = command
                    .get_subcommands()
                    .filter(|s| !s.is_hide_set())
                    .map(clap::Command::get_name)
                    .collect();
                eprintln!(
                    "{NAME}: man: no command {name:?} (one of: {}) (see --help)",
                    known.join(", ")
                );
                return ExitCode::from(exit::USAGE);
            };
            sub.clone()
        }
    };
    let mut roff = Vec::new();
    let source = format!("{NAME} {}", env!("CARGO_PKG_VERSION"));
    match clap_mangen::Man::new(page).source(source).render(&mut roff) {
        Ok(()) => print(&roff),
        Err(e) => {
            eprintln!("{NAME}: man: cannot render the page: {e}");
            ExitCode::from(exit::ERROR)
        }
    }
}

/// The command as its users see it: without the hidden subcommand (the
/// guard `run` starts), which the completion scripts would otherwise offer.
fn public() -> clap::Command {
    let command = Cli::command();
    let shown: Vec<clap::Command> = command
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
        .collect();
    clap::Command::new(NAME)
        .version(env!("CARGO_PKG_VERSION"))
        .args(command.get_arguments().cloned())
        .subcommands(shown)
}

/// Writes `bytes` to standard output. A reader that closed the pipe
/// (`| head`) took what it wanted: that is no error.
fn print(bytes: &[u8]) -> ExitCode {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{NAME}: cannot write to standard output: {e}");
            ExitCode::from(exit::ERROR)
        }
    }
}
