//! What the command's tests share: the built `blob-mutex`, started as an
//! operator's service manager starts it.

use std::process::Stdio;

use tokio::process::Command;

/// The command under test, as cargo built it for this package's tests.
pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_blob-mutex");

/// `blob-mutex`, connected to storage by the environment variable an
/// operator sets, with none of the test's own log filter (`RUST_LOG`), no
/// standard input, and killed if the test drops it.
pub(crate) fn blob_mutex_on(connection_string: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = Command::new(BIN);
    command
        .env("AZURE_STORAGE_CONNECTION_STRING", connection_string)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}
