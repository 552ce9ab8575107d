//! The command's settings from the environment, as an operator's unit
//! file or manifest gives them: every flag of `run` and of the account
//! has a `BLOB_MUTEX_*` variable that `--help` names; a flag given beats
//! its variable; the account is taken whole from the flags or from the
//! variables, never a part of each. And the logs: by default they show
//! the leader's start and end; `--log-format json` writes one JSON object
//! per line.

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use blob_mutex_testkit::azurite;
use tokio::process::Command;

use crate::support::BIN;

/// A time within which a run on a loaded machine has certainly ended.
const RUN_LIMIT: Duration = Duration::from_secs(60);

/// The variables a test must not inherit from whoever runs it.
const INHERITED: [&str; 6] = [
    "RUST_LOG",
    "AZURE_STORAGE_CONNECTION_STRING",
    "BLOB_MUTEX_CONNECTION_STRING",
    "BLOB_MUTEX_ACCOUNT_URL",
    "BLOB_MUTEX_AUTH",
    "BLOB_MUTEX_DEV",
];

fn command(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(BIN);
    command.args(args).stdin(Stdio::null()).kill_on_drop(true);
    for name in INHERITED {
        command.env_remove(name);
    }
    command.envs(env.iter().copied());
    command
}

async fn output(mut command: Command) -> Output {
    tokio::time::timeout(RUN_LIMIT, command.output())
        .await
        .expect("blob-mutex ended in time")
        .expect("run blob-mutex")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Each option of a `--help` text's `Options:` section (a line that
/// starts with a dash after at most six spaces; descriptions are indented
/// further, and the section ends at the next heading), by its long name,
/// with its whole description.
fn options(help: &str) -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = Vec::new();
    let section = help
        .lines()
        .skip_while(|line| *line != "Options:")
        .skip(1)
        .take_while(|line| line.is_empty() || line.starts_with(' '));
    for line in section {
        let indent = line.len() - line.trim_start().len();
        if indent <= 6 && line.trim_start().starts_with('-') {
            let name = line
                .split_whitespace()
                .find(|word| word.starts_with("--"))
                .unwrap_or_default()
                .to_owned();
            found.push((name, String::new()));
        } else if let Some((_, description)) = found.last_mut() {
            description.push_str(line);
            description.push('\n');
        }
    }
    found
}

#[tokio::test]
async fn every_flag_of_run_and_of_the_account_names_its_variable_in_help() {
    let help = output(command(&["run", "--help"], &[])).await;
    assert_eq!(help.status.code(), Some(0));
    let help = text(&help.stdout);
    let options = options(&help);
    assert!(options.len() > 20, "{options:?}");
    for (name, description) in &options {
        if name == "--help" {
            continue;
        }
        // The client id keeps Azure's own variable: AKS's workload identity
        // sets AZURE_CLIENT_ID in the pod.
        let expected = if name == "--client-id" {
            "[env: AZURE_CLIENT_ID".to_owned()
        } else {
            format!(
                "[env: BLOB_MUTEX_{}",
                name.trim_start_matches("--")
                    .replace('-', "_")
                    .to_uppercase()
            )
        };
        assert!(
            description.contains(&expected),
            "{name} does not name {expected}]: {description}"
        );
    }
}

/// `run --once` of one term on `container`/`job`, the account given by
/// flag; the command and any further flags are appended by the caller.
fn run_once_on<'a>(connection: &'a str, container: &'a str) -> Vec<&'a str> {
    vec![
        "run",
        "--connection-string",
        connection,
        "--container",
        container,
        "--blob",
        "job",
        "--once",
    ]
}

/// Asserts that `output` is a usage error (exit code 2) that names `name`.
fn assert_usage_error_naming(output: &Output, name: &str) {
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(name), "{stderr}");
}

/// A scratch file that the command of a run creates.
fn marker(dir: &Path) -> String {
    dir.join("ran").display().to_string()
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("blob-mutex-env-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("make the scratch directory");
    dir
}

#[tokio::test]
async fn the_variables_configure_run_and_a_flag_beats_its_variable() {
    let azurite = azurite::shared();
    let container = azurite::unique_container("cli-env");
    let connection = azurite.connection_string();
    let dir = scratch("configure");
    let ran = marker(&dir);
    let env = [
        ("BLOB_MUTEX_CONNECTION_STRING", connection.as_str()),
        ("BLOB_MUTEX_CONTAINER", container.as_str()),
        ("BLOB_MUTEX_BLOB", "job"),
        ("BLOB_MUTEX_ONCE", "1"),
        ("BLOB_MUTEX_WAIT", "30s"),
        // Shorter than Azure allows: refused, unless a flag replaces it.
        ("BLOB_MUTEX_LEASE_DURATION", "5s"),
    ];
    let refused = output(command(&["run", "--", "touch", &ran], &env)).await;
    assert_eq!(
        refused.status.code(),
        Some(2),
        "the variable's lease duration is used: {}",
        text(&refused.stderr)
    );
    assert!(
        text(&refused.stderr).contains("invalid BLOB_MUTEX_LEASE_DURATION"),
        "names the variable that was set: {}",
        text(&refused.stderr)
    );
    assert!(!Path::new(&ran).exists(), "nothing ran");

    let flagged = output(command(
        &["run", "--lease-duration", "15s", "--", "touch", &ran],
        &env,
    ))
    .await;
    assert_eq!(
        flagged.status.code(),
        Some(0),
        "the flag beats the variable: {}",
        text(&flagged.stderr)
    );
    assert!(
        Path::new(&ran).exists(),
        "the command ran on the variables' account"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn an_account_flag_takes_the_whole_account_and_no_variable_of_it() {
    let azurite = azurite::shared();
    let container = azurite::unique_container("cli-env-whole");
    let connection = azurite.connection_string();
    let dir = scratch("whole");
    let sas = dir.join("other.sas");
    std::fs::write(&sas, "sv=2022-11-02&sig=other").expect("write the SAS file");
    let auth = format!("sas-file:{}", sas.display());
    // Another account, as `run` gives its command: were any of it read
    // beside the flag, the run would be a quorum of two accounts with one
    // unreachable, or sign in with the other's credential.
    let env = [
        ("BLOB_MUTEX_ACCOUNT_URL", "http://127.0.0.1:9/other"),
        ("BLOB_MUTEX_AUTH", auth.as_str()),
        ("BLOB_MUTEX_CONNECTION_STRING", "not a connection string"),
    ];
    let mut args = run_once_on(&connection, &container);
    args.extend_from_slice(&["--wait", "30s", "--", "true"]);
    let run = output(command(&args, &env)).await;
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));

    // No flag: the variables' account, which here cannot be reached.
    let status = output(command(
        &[
            "status",
            "--container",
            &container,
            "--blob",
            "job",
            "--request-timeout",
            "1s",
        ],
        &env[..2],
    ))
    .await;
    assert_ne!(status.status.code(), Some(0), "{}", text(&status.stdout));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn an_account_url_variable_without_its_sign_in_is_a_usage_error() {
    let status = output(command(
        &["status", "--container", "c", "--blob", "b"],
        &[(
            "BLOB_MUTEX_ACCOUNT_URL",
            "https://acct.blob.core.windows.net",
        )],
    ))
    .await;
    assert_usage_error_naming(&status, "BLOB_MUTEX_AUTH");
    let dev = output(command(
        &["status", "--container", "c", "--blob", "b"],
        &[("BLOB_MUTEX_DEV", "perhaps")],
    ))
    .await;
    assert_usage_error_naming(&dev, "BLOB_MUTEX_DEV is neither a yes");
}

/// A run of `sleep 0.2` as leader, once, with the given extra flags; its
/// stderr.
async fn leader_logs(flags: &[&str]) -> String {
    let azurite = azurite::shared();
    let container = azurite::unique_container("cli-env-logs");
    let connection = azurite.connection_string();
    let mut args = run_once_on(&connection, &container);
    args.extend_from_slice(flags);
    args.extend_from_slice(&["--", "sleep", "0.2"]);
    let run = output(command(&args, &[])).await;
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    text(&run.stderr)
}

#[tokio::test]
async fn by_default_the_logs_show_the_leaders_start_and_end() {
    let logs = leader_logs(&[]).await;
    let lines: Vec<&str> = logs.lines().collect();
    assert_eq!(lines.len(), 2, "{logs}");
    assert!(lines[0].contains("leader: started the command"), "{logs}");
    assert!(lines[1].contains("leader: the command ended"), "{logs}");
    assert!(lines.iter().all(|l| l.contains(" INFO ")), "{logs}");
}

#[tokio::test]
async fn json_logs_are_one_object_per_line_with_the_leaders_fields() {
    let logs = leader_logs(&["--log-format", "json"]).await;
    let events: Vec<serde_json::Value> = logs
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    assert_eq!(events.len(), 2, "{logs}");
    let started = &events[0];
    assert_eq!(started["level"], "INFO", "{started}");
    assert_eq!(started["target"], "blob_mutex::leader", "{started}");
    assert_eq!(
        started["fields"]["message"], "leader: started the command",
        "{started}"
    );
    assert!(started["fields"]["epoch"].as_u64().is_some(), "{started}");
    assert!(
        started["fields"]["group"].as_i64().is_some(),
        "a number: {started}"
    );
    assert!(started["timestamp"].is_string(), "{started}");
    for event in &events {
        let named = event["spans"].as_array().is_some_and(|spans| {
            spans.iter().any(|s| {
                s["lease"].as_str().is_some_and(|l| l.ends_with("/job")) && s["holder"].is_string()
            })
        });
        assert!(named, "every line names the lease and the holder: {event}");
    }
    // The final error of a run is a JSON line too.
    let failed = output(command(
        &[
            "run",
            "--log-format",
            "json",
            "--dev",
            "-c",
            "leases",
            "-b",
            "nightly",
            "--grace",
            "9s",
            "--",
            "true",
        ],
        &[],
    ))
    .await;
    let stderr = text(&failed.stderr);
    let last: serde_json::Value = serde_json::from_str(stderr.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {stderr}"));
    assert_eq!(last["level"], "ERROR", "{last}");
    assert!(
        last["fields"]["message"]
            .as_str()
            .unwrap()
            .contains("--grace"),
        "{last}"
    );
    assert_eq!(failed.status.code(), Some(2), "{stderr}");
    assert_eq!(
        events[1]["fields"]["message"], "leader: the command ended; the lease is released",
        "{}",
        events[1]
    );
}

/// Every usage error names the flag or the variable that was actually set,
/// never a field of the library's options: a zero or fractional duration,
/// a grace too long for the lease (by flag and by variable), a variable
/// that is not a boolean; and a misspelled variable is warned about,
/// naming the nearest known one. None of them needs storage.
#[tokio::test]
async fn usage_errors_name_the_flag_or_the_variable_that_was_set() {
    let target = ["--dev", "-c", "leases", "-b", "nightly"];
    let usage = |args: &[&str], env: &[(&str, &str)]| {
        let all = [&args[..1], &target[..], &args[1..]].concat();
        let command = command(&all, env);
        async move { output(command).await }
    };
    let zero = usage(&["status", "--request-timeout", "0"], &[]).await;
    assert_usage_error_naming(&zero, "--request-timeout");
    let fraction = usage(&["break", "--period", "1.5s"], &[]).await;
    assert_usage_error_naming(&fraction, "--period");
    assert!(
        text(&fraction.stderr).contains("whole seconds"),
        "{}",
        text(&fraction.stderr)
    );

    let by_flag = usage(&["run", "--grace", "9s", "--", "true"], &[]).await;
    assert_usage_error_naming(&by_flag, "--grace");
    let by_variable = usage(&["run", "--", "true"], &[("BLOB_MUTEX_GRACE", "9s")]).await;
    assert_usage_error_naming(&by_variable, "BLOB_MUTEX_GRACE");
    for output in [&by_flag, &by_variable] {
        let stderr = text(&output.stderr);
        assert!(
            !stderr.contains("stop_grace") && !stderr.contains("renew_interval"),
            "{stderr}"
        );
    }
    let boolean = usage(&["run", "--", "true"], &[("BLOB_MUTEX_FOREVER", "maybe")]).await;
    assert_usage_error_naming(&boolean, "BLOB_MUTEX_FOREVER");

    let misspelled = [
        ("BLOB_MUTEX_LEASE_DURATON", "30s"),
        ("BLOB_MUTEX_GRACE", "9s"),
    ];
    let warned = usage(&["run", "--", "true"], &misspelled).await;
    let stderr = text(&warned.stderr);
    assert!(
        stderr.contains("BLOB_MUTEX_LEASE_DURATON")
            && stderr.contains("did you mean BLOB_MUTEX_LEASE_DURATION?"),
        "{stderr}"
    );
}

/// With `--log-format json`, each line the command writes, to stdout and
/// to stderr, is a JSON line on the same stream, naming the stream, the
/// command's pid, the lease and the holder; a line that is not UTF-8 or has
/// no end of line is passed on too: stderr holds nothing but JSON.
#[tokio::test]
async fn under_json_logs_the_commands_own_lines_are_json_lines_on_their_streams() {
    let azurite = azurite::shared();
    let container = azurite::unique_container("cli-env-output");
    let connection = azurite.connection_string();
    let mut args = run_once_on(&connection, &container);
    args.extend_from_slice(&["--log-format", "json", "--", "sh", "-c"]);
    args.push(r#"echo "to out"; echo 'to "err"' >&2; printf 'last\377' >&2"#);
    let run = output(command(&args, &[])).await;
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    let parse = |bytes: &[u8]| -> Vec<serde_json::Value> {
        text(bytes)
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
            .collect()
    };
    let (out, err) = (parse(&run.stdout), parse(&run.stderr));
    let command = |events: &[serde_json::Value], stream: &str| -> Vec<String> {
        events
            .iter()
            .filter(|e| e["target"] == "blob_mutex::command")
            .inspect(|e| {
                assert_eq!(e["fields"]["stream"], stream, "{e}");
                assert!(e["fields"]["pid"].as_u64().is_some(), "{e}");
                assert!(
                    e["fields"]["lease"]
                        .as_str()
                        .is_some_and(|l| l.ends_with("/job")),
                    "{e}"
                );
                assert!(e["fields"]["holder"].is_string(), "{e}");
            })
            .map(|e| e["fields"]["message"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(command(&out, "stdout"), ["to out"]);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(command(&err, "stderr"), ["to \"err\"", "last\u{fffd}"]);
    let started = err
        .iter()
        .position(|e| e["fields"]["message"] == "leader: started the command");
    let ended = err.iter().position(|e| {
        e["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("leader: the command ended"))
    });
    let last = err
        .iter()
        .position(|e| e["fields"]["message"] == "last\u{fffd}");
    assert!(started < last && last < ended, "in order: {err:#?}");
}
