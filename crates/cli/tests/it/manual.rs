//! `blob-mutex completions SHELL` and `blob-mutex man [COMMAND]`: made
//! from the command's own definition, without storage or settings, and
//! what a package installs.

use std::process::{Command, Output};

use crate::support::BIN;

fn blob_mutex(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        // Settings in the environment change nothing here.
        .env_remove("AZURE_STORAGE_CONNECTION_STRING")
        .output()
        .expect("the command starts")
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).expect("UTF-8")
}

#[test]
fn completions_are_printed_for_bash_zsh_and_fish_with_every_subcommand_and_no_hidden_one() {
    let bash = stdout(&blob_mutex(&["completions", "bash"]));
    assert!(bash.contains("complete -F _blob__mutex"), "{bash}");
    let zsh = stdout(&blob_mutex(&["completions", "zsh"]));
    assert!(zsh.starts_with("#compdef blob-mutex"), "{zsh}");
    let fish = stdout(&blob_mutex(&["completions", "fish"]));
    assert!(fish.contains("complete -c blob-mutex"), "{fish}");
    for script in [&bash, &zsh, &fish] {
        for word in [
            "run",
            "status",
            "break",
            "partitions",
            "--forever",
            "--container",
        ] {
            assert!(script.contains(word), "no {word} in:\n{script}");
        }
        assert!(!script.contains("__guard"), "the internal guard is offered");
    }
}

#[test]
fn an_unknown_shell_is_a_usage_error_naming_the_known_ones() {
    let output = blob_mutex(&["completions", "tcsh"]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("bash") && stderr.contains("fish"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty());
}

#[test]
fn the_manual_pages_of_the_command_and_of_run_are_roff_made_from_the_help() {
    let page = stdout(&blob_mutex(&["man"]));
    assert!(page.contains(".TH blob-mutex 1"), "{page}");
    let version = concat!("\"blob-mutex ", env!("CARGO_PKG_VERSION"), "\"");
    assert!(page.contains(version), "the source names the version");
    assert!(page.contains("partitions"), "{page}");
    let run = stdout(&blob_mutex(&["man", "run"]));
    assert!(run.contains(".TH blob-mutex-run 1"), "{run}");
    // roff writes each hyphen as `\-`.
    assert!(run.contains("blob\\-mutex run"), "{run}");
    // The flags and the exit codes of `--help` are on the page.
    for word in [
        "\\-\\-forever",
        "\\-\\-grace",
        "done\\-key",
        "BLOB_MUTEX_EPOCH",
        "exit code 3",
    ] {
        assert!(run.contains(word), "no {word} on the run page");
    }
}

#[test]
fn a_page_of_an_unknown_or_internal_command_is_a_usage_error() {
    for name in ["nosuch", "__guard"] {
        let output = blob_mutex(&["man", name]);
        assert_eq!(output.status.code(), Some(2), "man {name}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("one of: run, schedule, status"), "{stderr}");
    }
}

#[test]
fn the_schedule_has_its_manual_page_and_its_flags_are_completed() {
    let page = stdout(&blob_mutex(&["man", "schedule"]));
    assert!(page.contains(".TH blob-mutex-schedule 1"), "{page}");
    for word in [
        "\\-\\-cron",
        "\\-\\-tz",
        "\\-\\-catch\\-up",
        "\\-\\-overlap",
        "\\-\\-retries",
        "BLOB_MUTEX_SLOT",
        "BLOB_MUTEX_EPOCH",
    ] {
        assert!(page.contains(word), "no {word} on the page:\n{page}");
    }
    let bash = stdout(&blob_mutex(&["completions", "bash"]));
    for word in ["schedule", "--cron", "--catch-up", "skip wait"] {
        assert!(bash.contains(word), "no {word} in:\n{bash}");
    }
}

/// The exit codes at the end of `schedule --help` and on its page name
/// `schedule` where it exits with them: 1 (storage never answered, a
/// failure), 2 (a bad flag, a blob that holds another record) and 128 + N
/// (stopped by signal N).
#[test]
fn the_exit_codes_of_the_schedule_name_it_in_its_help_and_on_its_page() {
    let help = stdout(&blob_mutex(&["schedule", "--help"]));
    let (_, table) = help
        .split_once("Exit codes:\n")
        .unwrap_or_else(|| panic!("no exit codes in:\n{help}"));
    let mut entries: Vec<(String, String)> = Vec::new();
    for line in table.lines() {
        let code = line.split_whitespace().next().unwrap_or("");
        if line.starts_with("  ") && !line.starts_with("   ") {
            entries.push((code.to_owned(), line.to_owned()));
        } else if let Some((_, text)) = entries.last_mut() {
            text.push_str(line);
        }
    }
    for code in ["1", "2", "128+N"] {
        let (_, text) = entries
            .iter()
            .find(|(c, _)| c == code)
            .unwrap_or_else(|| panic!("no exit code {code} in:\n{table}"));
        assert!(text.contains("schedule:"), "{code}: {text}");
    }
    let page = stdout(&blob_mutex(&["man", "schedule"]));
    assert!(
        page.contains("schedule: signal N stopped it"),
        "no exit code of the schedule on the page:\n{page}"
    );
}
