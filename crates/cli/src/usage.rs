//! Usage errors in the operator's words: the flag or the environment
//! variable that was actually set, never a field of the library's options;
//! and a warning for a `BLOB_MUTEX_*` variable that nothing reads.
//!
//! The command line is parsed once here, keeping clap's record of where each
//! value came from; [`describe`] then names an option's source for an error
//! of the library (`invalid --grace: …`, `invalid BLOB_MUTEX_GRACE: …`),
//! and [`clap_error`] does the same for clap's own errors, which name the
//! flag even when the value came from its variable.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches};

use crate::cli::Cli;

/// The library's option fields, and the arguments (clap's ids) that set them.
const FIELDS: &[(&str, &str)] = &[
    ("lease_duration", "lease_duration"),
    ("renew_interval", "renew_interval"),
    ("acquire_retry", "acquire_retry"),
    ("stop_grace", "grace"),
    ("request_timeout", "request_timeout"),
    ("first_contact_timeout", "first_contact_timeout"),
    ("acquire_timeout", "wait"),
    ("holder", "holder"),
    ("advertised", "advertise"),
    ("priority", "priority"),
    ("period", "period"),
    ("blob", "blob"),
    ("container", "container_flag"),
    ("set", "set"),
    ("cron", "cron"),
    ("time_zone", "tz"),
    ("catch_up", "catch_up"),
];

/// Variables of the project's own tools and of the systemd unit, which the
/// command does not read but may meet in its environment.
const TOOLS: &[&str] = &[
    "BLOB_MUTEX_ARGS",
    "BLOB_MUTEX_COMMAND",
    "BLOB_MUTEX_TRACE_DIR",
    "BLOB_MUTEX_MODEL",
    "BLOB_MUTEX_AZURITE_BIN",
    "BLOB_MUTEX_FENCE_ADDR",
];

/// Prefixes of the project's test and chaos tools' variables.
const TOOL_PREFIXES: &[&str] = &["BLOB_MUTEX_TEST_", "BLOB_MUTEX_CHAOS_"];

/// How each argument of the command line was given: its flag, its
/// variable, and whether its value came from the variable.
#[derive(Debug, Default)]
struct Sources(BTreeMap<String, Source>);

#[derive(Debug)]
struct Source {
    flag: String,
    env: Option<String>,
    from_env: bool,
}

static SOURCES: OnceLock<Sources> = OnceLock::new();

/// Parses the command line, keeping where each value came from.
///
/// # Errors
///
/// Clap's error, for [`clap_error`] to word.
pub(crate) fn parse() -> Result<Cli, clap::Error> {
    let mut matches = Cli::command().try_get_matches()?;
    let mut sources = Sources::default();
    sources.read(&Cli::command(), &matches);
    let _ = SOURCES.set(sources);
    Cli::from_arg_matches_mut(&mut matches)
}

impl Sources {
    /// The arguments of `command`, given or not, and of the subcommand
    /// given, recursively.
    fn read(&mut self, command: &clap::Command, matches: &ArgMatches) {
        for arg in command.get_arguments() {
            let id = arg.get_id().as_str();
            let source = matches
                .try_contains_id(id)
                .ok()
                .and_then(|_| matches.value_source(id));
            let flag = arg
                .get_long()
                .map_or_else(|| id.to_owned(), |long| format!("--{long}"));
            let env = arg.get_env().map(|e| e.to_string_lossy().into_owned());
            let from_env = source == Some(ValueSource::EnvVariable);
            self.0.insert(
                id.to_owned(),
                Source {
                    flag,
                    env,
                    from_env,
                },
            );
        }
        if let Some((name, sub)) = matches.subcommand() {
            if let Some(command) = command.find_subcommand(name) {
                self.read(command, sub);
            }
        }
    }
}

/// How the operator set the library's option `field`: `--flag`, or its
/// variable when the value came from there; `field` itself when no
/// argument of this command line sets it.
pub(crate) fn describe(field: &str) -> String {
    let id = FIELDS
        .iter()
        .find(|(f, _)| *f == field)
        .map_or(field, |(_, id)| *id);
    match SOURCES.get().and_then(|s| s.0.get(id)) {
        Some(Source {
            env: Some(env),
            from_env: true,
            ..
        }) => env.clone(),
        Some(source) => source.flag.clone(),
        None => field.to_owned(),
    }
}

/// An error's message in the operator's words: the option an
/// [`InvalidOption`](blob_mutex::Error::InvalidOption) names, and the
/// option fields its reason names (those with an underscore: `blob` or
/// `period` are words of the prose too).
pub(crate) fn reword(message: &str, error: &anyhow::Error) -> String {
    let mut words = message.to_owned();
    if let Some(blob_mutex::Error::InvalidOption { field, .. }) = error.downcast_ref() {
        words = words.replacen(
            &format!("invalid {field}: "),
            &format!("invalid {}: ", describe(field)),
            1,
        );
    }
    for (field, _) in FIELDS.iter().filter(|(f, _)| f.contains('_')) {
        let named = describe(field);
        if named != *field {
            words = replace_word(&words, field, &named);
        }
    }
    words
}

/// `text` with every whole-word `word` replaced by `with`.
fn replace_word(text: &str, word: &str, with: &str) -> String {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(word) {
        let before = rest[..at].chars().next_back();
        let after = rest[at + word.len()..].chars().next();
        out.push_str(&rest[..at]);
        if before.is_some_and(is_word) || after.is_some_and(is_word) {
            out.push_str(word);
        } else {
            out.push_str(with);
        }
        rest = &rest[at + word.len()..];
    }
    out.push_str(rest);
    out
}

/// Clap's error as one line, naming the variable instead of the flag when
/// the refused value came from the variable.
pub(crate) fn clap_error(error: &clap::Error, one_line: impl Fn(&str) -> String) -> String {
    let mut line = one_line(&error.render().to_string());
    let (
        Some(clap::error::ContextValue::String(arg)),
        Some(clap::error::ContextValue::String(value)),
    ) = (
        error.get(clap::error::ContextKind::InvalidArg),
        error.get(clap::error::ContextKind::InvalidValue),
    )
    else {
        return line;
    };
    let long = arg.split_whitespace().next().unwrap_or(arg);
    let on_command_line = std::env::args().any(|a| a == long || a.starts_with(&format!("{long}=")));
    if on_command_line {
        return line;
    }
    if let Some(env) = env_of(&Cli::command(), long) {
        if std::env::var(&env).is_ok_and(|v| v == *value) {
            line = line.replace(&format!("'{arg}'"), &format!("{env} ({long})"));
        }
    }
    line
}

/// The variable of the flag `long` (`--forever`), in any subcommand.
fn env_of(command: &clap::Command, long: &str) -> Option<String> {
    let name = long.trim_start_matches("--");
    command
        .get_arguments()
        .find(|a| a.get_long() == Some(name))
        .and_then(|a| a.get_env())
        .map(|e| e.to_string_lossy().into_owned())
        .or_else(|| command.get_subcommands().find_map(|c| env_of(c, long)))
}

/// Every `BLOB_MUTEX_*` variable the command reads.
fn known(command: &clap::Command, into: &mut Vec<String>) {
    into.extend(
        command
            .get_arguments()
            .filter_map(|a| a.get_env())
            .map(|e| e.to_string_lossy().into_owned()),
    );
    for sub in command.get_subcommands() {
        known(sub, into);
    }
}

/// The `BLOB_MUTEX_*` variables of `environment` that nothing reads, each
/// with the known variable nearest to it when one is near.
pub(crate) fn unknown_variables(
    environment: impl Iterator<Item = String>,
    read_by_hand: &[&str],
) -> Vec<(String, Option<String>)> {
    let mut names = Vec::new();
    known(&Cli::command(), &mut names);
    names.extend(read_by_hand.iter().map(|n| (*n).to_owned()));
    environment
        .filter(|v| v.starts_with("BLOB_MUTEX_"))
        .filter(|v| !names.contains(v) && !TOOLS.contains(&v.as_str()))
        .filter(|v| !TOOL_PREFIXES.iter().any(|p| v.starts_with(p)))
        .map(|v| {
            let nearest = names
                .iter()
                .map(|n| (strsim::levenshtein(n, &v), n))
                .min()
                .filter(|(distance, _)| *distance <= 3)
                .map(|(_, n)| n.clone());
            (v, nearest)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_is_replaced_as_a_whole_word_only() {
        assert_eq!(
            replace_word(
                "renew_interval (5s) + stop_grace (9s); stop_grace_x",
                "stop_grace",
                "--grace"
            ),
            "renew_interval (5s) + --grace (9s); stop_grace_x"
        );
    }

    #[test]
    fn a_misspelled_variable_is_named_with_the_nearest_known_one_and_tools_are_left_alone() {
        let environment = [
            "BLOB_MUTEX_LEASE_DURATON",
            "BLOB_MUTEX_LEASE_DURATION",
            "BLOB_MUTEX_TRACE_DIR",
            "BLOB_MUTEX_TEST_KILL_DELAY",
            "BLOB_MUTEX_SOMETHING_ELSE_ENTIRELY",
            "PATH",
        ]
        .map(str::to_owned);
        let unknown = unknown_variables(environment.into_iter(), &["BLOB_MUTEX_DEV"]);
        assert_eq!(
            unknown,
            vec![
                (
                    "BLOB_MUTEX_LEASE_DURATON".to_owned(),
                    Some("BLOB_MUTEX_LEASE_DURATION".to_owned())
                ),
                ("BLOB_MUTEX_SOMETHING_ELSE_ENTIRELY".to_owned(), None),
            ]
        );
    }
}
