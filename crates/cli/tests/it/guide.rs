//! The guide's CLI chapter and the command's own help name the same flags:
//! `blob-mutex --help` and every subcommand's `--help` (the built binary's)
//! on one side, `docs/guide/cli.md` on the other.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use crate::support::BIN;
const CHAPTER: &str = "docs/guide/cli.md";

/// The help text of `blob-mutex <words> --help`.
fn help(words: &[&str]) -> String {
    let output = Command::new(BIN)
        .args(words)
        .arg("--help")
        .env_remove("AZURE_STORAGE_CONNECTION_STRING")
        .output()
        .expect("run blob-mutex");
    assert!(
        output.status.success(),
        "blob-mutex {} --help failed: {}",
        words.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("help is UTF-8")
}

/// The subcommands a help text lists under `Commands:` (not `help`).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|line| *line != "Commands:")
        .skip(1)
        .take_while(|line| !line.is_empty())
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// The long flags a help text defines: its option lines, `  -c, --container
/// <C>` or `      --dev`; descriptions and examples are not read.
fn defined_flags(help: &str) -> Vec<String> {
    help.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("      --").or_else(|| {
                let rest = line.strip_prefix("  -")?;
                rest.get(1..)?.strip_prefix(", --")
            })?;
            let name = rest.split([' ', '=']).next()?;
            Some(format!("--{name}"))
        })
        .collect()
}

/// Every flag of the command, with the commands whose help defines it.
fn flags_in_help() -> BTreeMap<String, BTreeSet<String>> {
    let mut flags: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut pending: Vec<Vec<String>> = vec![Vec::new()];
    while let Some(words) = pending.pop() {
        let words_str: Vec<&str> = words.iter().map(String::as_str).collect();
        let text = help(&words_str);
        let command = format!("blob-mutex {}", words.join(" "));
        for flag in defined_flags(&text) {
            flags
                .entry(flag)
                .or_default()
                .insert(command.trim().to_owned());
        }
        for sub in subcommands(&text) {
            let mut next = words.clone();
            next.push(sub);
            pending.push(next);
        }
    }
    flags
}

/// The long flags in a piece of a `blob-mutex` command line, up to the
/// `--` after which CMD's own arguments come, or a pipe or a comment.
fn flags_of_command_line(line: &str) -> Vec<String> {
    line.split_whitespace()
        .take_while(|word| !matches!(*word, "--" | "|" | "#" | "&&" | "||"))
        .map(|word| {
            word.trim_start_matches('[')
                .trim_end_matches([']', '.', ','])
        })
        .filter(|word| word.starts_with("--") && word.len() > 2)
        .map(|word| word.split('=').next().unwrap_or(word).to_owned())
        .collect()
}

/// The flags the chapter names: in inline code, a span that starts with a
/// flag (`--wait D`) or with `blob-mutex`; in a code block, a line that runs
/// `blob-mutex` (after a shell prompt or a crontab schedule). Other commands
/// (`cargo install blob-mutex-cli`) and CMD's arguments are not read.
fn flags_in_chapter(markdown: &str) -> BTreeSet<String> {
    let mut flags = BTreeSet::new();
    let mut fenced = false;
    let mut prose = String::new();
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if fenced {
            let start = line.trim_start_matches(|c: char| "0123456789*/,-$ ".contains(c));
            if let Some(rest) = start.strip_prefix("blob-mutex ") {
                flags.extend(flags_of_command_line(rest));
            }
        } else {
            prose.push_str(line);
            prose.push('\n');
        }
    }
    for span in prose.split('`').skip(1).step_by(2) {
        if span.starts_with("--") {
            flags.extend(flags_of_command_line(span).into_iter().take(1));
        } else if let Some(rest) = span.strip_prefix("blob-mutex ") {
            flags.extend(flags_of_command_line(rest));
        }
    }
    flags
}

#[test]
fn the_chapter_is_read_as_documented() {
    let sample = "\
Use `--wait D`, or `blob-mutex status --json`; `cargo install --path .` is not ours.

```sh
0 2 * * * blob-mutex run --container leases --blob b --wait 0 -- ./job.sh --serve
$ blob-mutex partitions --set s --json | jq --raw-output .
cargo install blob-mutex-cli
```
";
    let expected = ["--blob", "--container", "--json", "--set", "--wait"];
    assert_eq!(
        flags_in_chapter(sample),
        expected.iter().map(|f| (*f).to_owned()).collect()
    );
}

#[test]
fn the_cli_chapter_and_help_name_the_same_flags() {
    let path = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join(CHAPTER);
    let chapter = flags_in_chapter(&std::fs::read_to_string(path).expect("read the CLI chapter"));
    let help = flags_in_help();
    let mut problems = Vec::new();
    for (flag, commands) in &help {
        if !chapter.contains(flag) {
            let commands: Vec<&str> = commands.iter().map(String::as_str).collect();
            problems.push(format!(
                "{flag} is in the help of {} but not in {CHAPTER}",
                commands.join(", ")
            ));
        }
    }
    for flag in &chapter {
        if !help.contains_key(flag) {
            problems.push(format!(
                "{flag} is in {CHAPTER} but in no blob-mutex --help"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
