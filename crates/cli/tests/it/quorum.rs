//! `blob-mutex` on a quorum of accounts (three Azurites): `run` leads on a
//! majority, `status` shows each account and the majority's view, and the
//! commands that work on one account refuse several.

use blob_mutex::store::LeaseStore;

use std::process::{Output, Stdio};
use std::time::Duration;

use blob_mutex::{azure::BlobLeaseManager, store::LeaseId, store::StampOptions, BlobSettings};
use blob_mutex_testkit::azurite::{self, Azurite};
use blob_mutex_testkit::wait_for;
use tokio::process::Command;

use crate::support::BIN;

/// `blob-mutex args`, with no connection string in its environment.
fn command(args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env_remove("AZURE_STORAGE_CONNECTION_STRING")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

async fn output(args: &[&str]) -> Output {
    command(args).output().await.expect("run blob-mutex")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Two accounts as flags and the third in an accounts file.
struct Quorum {
    accounts: [Azurite; 3],
    file: std::path::PathBuf,
    container: String,
}

impl Quorum {
    fn start(name: &str) -> Quorum {
        let accounts = [Azurite::start(), Azurite::start(), Azurite::start()];
        let container = azurite::unique_container(name);
        let file = std::env::temp_dir().join(format!("blob-mutex-{container}.accounts"));
        let lines = format!(
            "# the third account\n\n{}\n",
            accounts[2].connection_string()
        );
        std::fs::write(&file, lines).expect("write the accounts file");
        Quorum {
            accounts,
            file,
            container,
        }
    }

    /// `blob-mutex <subcommand>` on the quorum's blob, with `extra` flags.
    fn args(&self, subcommand: &str, extra: &[&str]) -> Vec<String> {
        let mut args: Vec<String> = vec![subcommand.to_owned()];
        for account in &self.accounts[..2] {
            args.push("--connection-string".to_owned());
            args.push(account.connection_string());
        }
        args.extend([
            "--accounts-file".to_owned(),
            self.file.display().to_string(),
        ]);
        args.extend(["--container", &self.container, "--blob", "lock"].map(str::to_owned));
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        args
    }
}

impl Drop for Quorum {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
    }
}

fn refs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

#[tokio::test]
async fn run_leads_on_a_quorum_and_status_shows_each_account() {
    let quorum = Quorum::start("cli-quorum");
    let once = quorum.args(
        "run",
        &[
            "--wait",
            "20s",
            "--",
            "sh",
            "-c",
            r#"echo "epoch=$BLOB_MUTEX_EPOCH account=${AZURE_STORAGE_CONNECTION_STRING:-none}""#,
        ],
    );
    let first = output(&refs(&once)).await;
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let said = text(&first.stdout);
    let epoch: u64 = said
        .trim()
        .strip_prefix("epoch=")
        .and_then(|rest| rest.strip_suffix(" account=none"))
        .and_then(|e| e.parse().ok())
        .unwrap_or_else(|| panic!("the command runs as leader, with no account passed on: {said}"));
    assert!(
        epoch >= 1 << 20,
        "a new record starts at storage's clock: {epoch}"
    );

    let long = quorum.args("run", &["--holder", "quorum-holder", "--", "sleep", "60"]);
    let _leader = command(&refs(&long)).spawn().expect("start run");
    let status = quorum.args("status", &[]);
    let table = wait_for(
        "status to find the lease held",
        Duration::from_secs(20),
        || {
            let args = status.clone();
            async move {
                let out = output(&refs(&args)).await;
                let table = text(&out.stdout);
                // The first run's lease may still be held (its release is best
                // effort): wait for the second run's.
                (out.status.code() == Some(0) && table.contains("holder       quorum-holder"))
                    .then_some(table)
            }
        },
    )
    .await;
    let lines: Vec<&str> = table.lines().collect();
    for (line, account) in lines.iter().zip(&quorum.accounts) {
        assert!(
            line.starts_with("account ") && line.contains(&account.endpoint),
            "{table}"
        );
    }
    // A majority at least carries the term (an account that answered late
    // joins it at the next renewal).
    let carrying = lines[..3]
        .iter()
        .filter(|line| line.contains(&format!("leased holder quorum-holder epoch {}", epoch + 1)))
        .count();
    assert!(carrying >= 2, "{table}");
    assert_eq!(lines[3], "majority of 3 accounts:", "{table}");
    assert!(table.contains("leased (fixed)"), "{table}");

    let json = output(&refs(&quorum.args("status", &["--json"]))).await;
    let json = text(&json.stdout);
    assert!(json.contains(r#""leased":true"#), "{json}");
    assert_eq!(json.matches(r#""account":"#).count(), 3, "{json}");
    assert!(
        json.contains(&format!(
            r#""holder":"quorum-holder","epoch":{}"#,
            epoch + 1
        )),
        "{json}"
    );
    assert!(!json.contains(azurite::DEV_KEY) && !table.contains(azurite::DEV_KEY));
}

#[tokio::test]
async fn commands_on_one_account_refuse_a_quorum_with_code_2_and_partitions_lists_it() {
    let quorum = Quorum::start("cli-quorum-refused");
    let out = output(&refs(&quorum.args("break", &[]))).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("works on one storage account, not a quorum of 3"),
        "{stderr}"
    );
    assert!(!stderr.contains(azurite::DEV_KEY));

    // `partitions` lists a set on the quorum: an empty one here.
    let mut args = quorum.args("partitions", &["--json"]);
    let at = args.iter().position(|a| a == "--blob").unwrap();
    args[at] = "--set".to_owned();
    let out = output(&refs(&args)).await;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(r#""exists":false"#),
        "{}",
        text(&out.stdout)
    );
    let state: Vec<String> = [
        "state",
        "get",
        "--connection-string",
        &quorum.accounts[0].connection_string(),
        "--connection-string",
        &quorum.accounts[1].connection_string(),
        "--container",
        &quorum.container,
        "--blob",
        "lock",
    ]
    .map(str::to_owned)
    .to_vec();
    let out = output(&refs(&state)).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("not a quorum of 2"));

    let missing = output(&[
        "status",
        "--accounts-file",
        "/nonexistent/accounts",
        "--container",
        &quorum.container,
        "--blob",
        "lock",
    ])
    .await;
    assert_eq!(missing.status.code(), Some(2));
    assert!(text(&missing.stderr).contains("cannot read --accounts-file /nonexistent/accounts"));
}

#[tokio::test]
async fn status_names_a_holder_only_where_the_stamp_shows_it() {
    let quorum = Quorum::start("cli-quorum-holding");
    let stores: Vec<BlobLeaseManager> = quorum
        .accounts
        .iter()
        .map(|account| {
            let cs = account.connection_string();
            let settings = BlobSettings::from_connection_string(&cs, &quorum.container, "lock");
            BlobLeaseManager::new(
                &settings
                    .unwrap()
                    .with_backend(blob_mutex_testkit::backend::current()),
            )
            .unwrap()
        })
        .collect();
    let (earlier, newest) = (LeaseId::new(), LeaseId::new());
    let minute = Duration::from_secs(60);
    // Account 0: an earlier holder's lease, not expired yet. Account 1: the
    // newest term's. Account 2: the newest holder's lease, on a blob that
    // no renewal has brought up to its stamp yet.
    stores[0].acquire(earlier, minute).await.unwrap();
    let floor = |floor| StampOptions::new().with_floor(floor);
    stores[0]
        .stamp(earlier, "earlier", &floor(3))
        .await
        .unwrap();
    stores[1].acquire(newest, minute).await.unwrap();
    stores[1].stamp(newest, "newest", &floor(4)).await.unwrap();
    stores[2].acquire(newest, minute).await.unwrap();

    let out = output(&refs(&quorum.args("status", &[]))).await;
    let table = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{table}{}", text(&out.stderr));
    let lines: Vec<&str> = table.lines().collect();
    let unknown = "leased, holder unknown: the stamp here";
    assert!(
        lines[0].ends_with(&format!(
            "{unknown} (holder earlier epoch 3) is not the newest term's"
        )),
        "{table}"
    );
    assert!(
        lines[1].ends_with("leased holder newest epoch 4"),
        "{table}"
    );
    assert!(
        lines[2].ends_with(&format!(
            "{unknown} (never stamped) is not the newest term's"
        )),
        "{table}"
    );
    assert!(
        table.contains(
            "holder       unknown: no majority of the accounts carries one holder and epoch"
        ),
        "{table}"
    );
    let json = text(
        &output(&refs(&quorum.args("status", &["--json"])))
            .await
            .stdout,
    );
    assert!(
        json.contains(
            r#""state":"leased","lease":"unattributed","holder":null,"epoch":null,"last_holder":"earlier","last_epoch":3"#
        ),
        "{json}"
    );
    assert!(
        json.contains(r#""lease":"term","holder":"newest","epoch":4"#),
        "{json}"
    );
    assert!(
        json.contains(r#""leased":true,"duration":"fixed","holder":null,"epoch":null"#),
        "{json}"
    );

    // A renewal brings account 2 up to the stamp: a majority carries it.
    let floor = StampOptions::new().with_floor(4);
    stores[2].stamp(newest, "newest", &floor).await.unwrap();
    let table = text(&output(&refs(&quorum.args("status", &[]))).await.stdout);
    assert!(
        lines_end_with(&table, 2, "leased holder newest epoch 4"),
        "{table}"
    );
    assert!(
        table.contains("holder       newest\nepoch        4\n"),
        "{table}"
    );
}

fn lines_end_with(table: &str, line: usize, end: &str) -> bool {
    table.lines().nth(line).is_some_and(|l| l.ends_with(end))
}
