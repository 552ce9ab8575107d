//! Least privilege on a real Azurite, which checks SAS signatures and
//! permissions: the mutex, a lease set, leader state and the CLI work with a
//! container SAS, a blob SAS (the mutex) and an account SAS; a container
//! that exists is never created; each missing permission is one fatal
//! error that names what to grant.

use blob_mutex::store::LeaseStore;

use std::time::Duration;

use blob_mutex::{
    azure::BlobLeaseManager, store::LeaseId, BlobDistributedMutex, BlobLeaseSet, BlobSettings,
    CancellationToken, Error, LeaderContext, LeaseSetOptions, MutexOptions,
};
use blob_mutex_testkit::azurite;
use blob_mutex_testkit::sas::{account_sas, blob_sas, container_sas, sas_connection_string};
use tokio::sync::mpsc;

use crate::support::{blob_mutex_on, BIN};
/// Long enough for a loaded two-core machine to campaign once.
const LIMIT: Duration = Duration::from_secs(30);
const LEASE: Duration = Duration::from_secs(15);

/// Settings for `container`/`blob` on the shared Azurite, with `sas` and no key.
fn with_sas(container: &str, blob: &str, sas: &str) -> BlobSettings {
    let connection = sas_connection_string(&azurite::shared().endpoint, sas);
    BlobSettings::from_connection_string(&connection, container, blob)
        .expect("valid settings")
        .with_backend(blob_mutex_testkit::backend::current())
}

/// Creates `container` with the account key, as an operator would before
/// handing out a SAS for it.
async fn create_container(container: &str) {
    BlobLeaseManager::new(&azurite::shared().settings(container, "setup"))
        .unwrap()
        .create_if_missing()
        .await
        .unwrap();
}

/// Leads once with `settings`: the task writes and reads the leader state,
/// reports its epoch and the state it read back, and the campaign is then
/// cancelled. Returns what the task saw.
async fn lead_once(settings: BlobSettings) -> (u64, Vec<u8>) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mutex = BlobDistributedMutex::with_options(
        settings,
        MutexOptions::default().with_lease_duration(LEASE),
        move |ctx: LeaderContext| {
            let tx = tx.clone();
            async move {
                ctx.write_state(b"kept".to_vec()).await?;
                let state = ctx.read_state().await?;
                let _ = tx.send((ctx.epoch(), state));
                ctx.cancelled().await;
                Ok::<_, Error>(())
            }
        },
    )
    .unwrap();
    let token = CancellationToken::new();
    let run = tokio::spawn({
        let token = token.clone();
        async move { mutex.run_task_when_mutex_acquired(token).await }
    });
    let seen = tokio::time::timeout(LIMIT, rx.recv()).await;
    token.cancel();
    let ended = tokio::time::timeout(LIMIT, run).await;
    let seen = seen
        .unwrap_or_else(|_| panic!("did not lead; the campaign ended with {ended:?}"))
        .expect("the task reports");
    ended.expect("the campaign ends").unwrap().unwrap();
    seen
}

/// Campaigns with `settings` and returns the error the campaign ends with;
/// the task must never run.
async fn refused(settings: BlobSettings) -> Error {
    let mutex = BlobDistributedMutex::with_options(
        settings,
        MutexOptions::default().with_lease_duration(LEASE),
        |_ctx: LeaderContext| async move {
            panic!("the task ran without the permissions it needs");
            #[allow(unreachable_code)]
            Ok::<_, Error>(())
        },
    )
    .unwrap();
    let ended = tokio::time::timeout(
        LIMIT,
        mutex.run_task_when_mutex_acquired(CancellationToken::new()),
    )
    .await
    .expect("a missing permission ends the campaign instead of retrying");
    ended.expect_err("the campaign cannot succeed")
}

/// Runs a lease set of two partitions with `settings` until this instance
/// owns both, or returns the error it ended with.
async fn run_set(settings: &BlobSettings) -> Result<(), Error> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let set = BlobLeaseSet::new(
        settings,
        ["p0", "p1"],
        LeaseSetOptions::default().with_balance_interval(Duration::from_millis(200)),
        move |ctx| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(ctx.partition().to_owned());
                ctx.cancelled().await;
                Ok::<_, Error>(())
            }
        },
    )
    .unwrap();
    let token = CancellationToken::new();
    let mut run = tokio::spawn({
        let token = token.clone();
        async move { set.run(token).await }
    });
    let mut owned = Vec::new();
    let deadline = tokio::time::Instant::now() + LIMIT;
    while owned.len() < 2 {
        tokio::select! {
            Some(partition) = rx.recv() => owned.push(partition),
            ended = &mut run => return ended.unwrap(),
            () = tokio::time::sleep_until(deadline) => panic!("owned only {owned:?}"),
        }
    }
    token.cancel();
    tokio::time::timeout(LIMIT, run).await.unwrap().unwrap()
}

fn assert_names_grant(error: &Error, grant: &str) {
    assert!(
        matches!(error, Error::Authentication { .. }) && error.is_fatal(),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(message.contains(grant), "{message:?} names no {grant:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_sas_runs_the_mutex_state_and_a_set_on_a_container_that_exists() {
    let container = azurite::unique_container("sas-container");
    create_container(&container).await;
    let sas = container_sas(&container, "racwdl");
    let (first, state) = lead_once(with_sas(&container, "lock", &sas)).await;
    assert_eq!(state.as_slice(), &b"kept"[..]);
    // Again: the blob exists now, and the next term has the next epoch.
    let (epoch, _) = lead_once(with_sas(&container, "lock", &sas)).await;
    assert_eq!(epoch, first + 1);
    run_set(&with_sas(&container, "set", &sas)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blob_sas_is_enough_for_the_mutex_and_its_state() {
    let container = azurite::unique_container("sas-blob");
    create_container(&container).await;
    // Read (properties and state), create (the blob) and write (lease,
    // metadata, state) on the one blob; nothing on the container.
    let sas = blob_sas(&container, "lock", "rcw");
    let (epoch, state) = lead_once(with_sas(&container, "lock", &sas)).await;
    assert!(epoch > 0);
    assert_eq!(state.as_slice(), &b"kept"[..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_sas_creates_a_missing_container_and_runs_everything() {
    let container = azurite::unique_container("sas-account");
    // Containers and objects; no service-level resource type needed.
    let sas = account_sas("co", "rwdlac");
    let (epoch, state) = lead_once(with_sas(&container, "lock", &sas)).await;
    assert!(epoch > 0);
    assert_eq!(state.as_slice(), &b"kept"[..]);
    run_set(&with_sas(&container, "set", &sas)).await.unwrap();
    let other = azurite::unique_container("sas-account-set");
    run_set(&with_sas(&other, "set", &sas)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_container_that_the_sas_cannot_create_is_one_clear_error() {
    let container = azurite::unique_container("sas-no-container");
    let sas = container_sas(&container, "racwdl");
    let error = refused(with_sas(&container, "lock", &sas)).await;
    assert_names_grant(&error, "create the container");
    // The same with an account SAS for objects only.
    let error = refused(with_sas(&container, "lock", &account_sas("o", "rwdlac"))).await;
    assert_names_grant(&error, "create the container");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_without_list_is_one_clear_error() {
    let container = azurite::unique_container("sas-no-list");
    create_container(&container).await;
    let sas = container_sas(&container, "racwd");
    let error = run_set(&with_sas(&container, "set", &sas))
        .await
        .expect_err("a set cannot balance without list");
    assert_names_grant(&error, "list (l)");
    // The service's own message is kept beside its code.
    assert!(
        error
            .to_string()
            .contains("storage said: This request is not authorized"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutex_without_write_is_one_clear_error() {
    let container = azurite::unique_container("sas-no-write");
    create_container(&container).await;
    let error = refused(with_sas(
        &container,
        "lock",
        &container_sas(&container, "rl"),
    ))
    .await;
    assert_names_grant(&error, "write (w)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_without_write_is_one_clear_error() {
    let container = azurite::unique_container("sas-state");
    let owner = BlobLeaseManager::new(&azurite::shared().settings(&container, "lock")).unwrap();
    let lease = LeaseId::new();
    owner.acquire(lease, LEASE).await.unwrap();
    let reader = BlobLeaseManager::new(&with_sas(
        &container,
        "lock",
        &container_sas(&container, "rl"),
    ))
    .unwrap();
    assert_eq!(reader.read_state().await.unwrap(), Vec::<u8>::new());
    let error = reader.write_state(lease, b"x").await.unwrap_err();
    assert_names_grant(&error, "write (w)");
    owner.release(lease).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_runs_and_keeps_state_with_a_container_sas() {
    let container = azurite::unique_container("sas-cli");
    create_container(&container).await;
    let connection = sas_connection_string(
        &azurite::shared().endpoint,
        &container_sas(&container, "racwdl"),
    );
    let script = format!(
        "printf kept | {BIN} state put --container {container} --blob lock && \
         {BIN} state get --container {container} --blob lock"
    );
    let output = blob_mutex_on(&connection)
        .args(["run", "--container", &container, "--blob", "lock", "--"])
        .args(["sh", "-c", &script])
        .output();
    let output = tokio::time::timeout(LIMIT, output).await.unwrap().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{:?}: {stderr}", output.status);
    assert_eq!(String::from_utf8_lossy(&output.stdout), "kept");
    assert!(!stderr.contains("sig="), "the SAS was printed: {stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_names_the_permission_it_lacks() {
    let container = azurite::unique_container("sas-cli-none");
    let connection = sas_connection_string(
        &azurite::shared().endpoint,
        &container_sas(&container, "racwdl"),
    );
    let output = blob_mutex_on(&connection)
        .args([
            "run",
            "--container",
            &container,
            "--blob",
            "lock",
            "--",
            "true",
        ])
        .output();
    let output = tokio::time::timeout(LIMIT, output).await.unwrap().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("create the container"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_without_delete_still_runs_and_leaves_its_member_blob_behind() {
    let container = azurite::unique_container("sas-no-delete");
    create_container(&container).await;
    let settings = with_sas(&container, "set", &container_sas(&container, "racwl"));
    run_set(&settings).await.unwrap();
    let store = blob_mutex::azure::BlobLeaseSetStore::new(&settings).unwrap();
    let members = blob_mutex::store::LeaseSetStore::list(&store, "members/")
        .await
        .unwrap();
    assert_eq!(members.len(), 1, "{members:?}");
}
