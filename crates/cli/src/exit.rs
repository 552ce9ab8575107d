//! The exit codes of `blob-mutex`, and the errors and command statuses that
//! choose them.

use std::fmt;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

/// Success: `status` found the lease held (or a schedule's record, whose lease is free
/// between slots), `break` broke it, `run`'s command exited 0 (or `run --once` skipped it,
/// as its completion record said), `partitions` found the set.
pub(crate) const OK: u8 = 0;
/// An error: storage could not be reached, refused the credentials, or failed.
pub(crate) const ERROR: u8 = 1;
/// A usage error: a bad flag, an invalid option value or connection string,
/// a combination of flags `run` refuses, a credential of `--auth` that
/// cannot get a token at start. (clap uses 2 for its own parse errors too.)
pub(crate) const USAGE: u8 = 2;
/// `status`: the lease is free (and the blob holds no schedule's record). `break`: there
/// was no lease to break.
/// `run --wait`: the lease was not acquired in time; the command did not run.
/// `partitions`: the set has no blobs.
pub(crate) const FREE_OR_NOT_ACQUIRED: u8 = 3;
/// `run`: the lease was lost (broken, taken, or not renewed in time) while the
/// command ran; the command was stopped.
pub(crate) const LEASE_LOST: u8 = 4;
/// `state put`: storage refused the write, because the lease of the `run`
/// that started the command was lost, broken or passed on; nothing was written.
pub(crate) const STATE_REFUSED: u8 = LEASE_LOST;
/// `run`: a process of the command's group survived SIGKILL (it is stuck in
/// the kernel) for 5 s; `run` exited without releasing the lease, which
/// expires on its own, and did not start the command again.
pub(crate) const UNKILLABLE: u8 = 5;
/// `run --once` with `--done-key` or `--at-most-every`: the command exited
/// 0, but its completion record was not written (the lease was lost
/// before the write, or the write failed). Not 0, because the promise
/// those flags make is not kept: the next run will run the command again.
/// Not the command's code nor 4, because the command did its work to the
/// end. A script that accepts a second run can take 6 as success.
pub(crate) const UNRECORDED: u8 = 6;
/// `run`: the command was found but could not be started.
pub(crate) const CANNOT_EXECUTE: u8 = 126;
/// `run`: the command was not found.
pub(crate) const NOT_FOUND: u8 = 127;

/// The exit-code table shown at the end of `--help`.
pub(crate) const TABLE: &str = "\
Exit codes:
  0      success: run's command exited 0; status: the lease is held, or the blob holds a
         schedule's record (free between slots); break: the lease was broken; partitions: the set
         exists; run --once: the completion record said the command was not due (already done
         for --done-key, or run within --at-most-every); it did not run
  1      error: storage unreachable, authentication refused, or another failure;
         schedule: storage never answered within --first-contact-timeout
  2      usage: a bad flag, an invalid option value or an invalid connection string;
         --auth: the credential could not get a token at start (within 10s), or its
         settings are missing; run: --done-key or --at-most-every without --once,
         --once with --forever, or a completion record asked of a quorum of accounts;
         schedule: a bad --cron, --tz, --catch-up, --retries or --timeout, a quorum of
         accounts, or a lease blob that holds another record (at the first look)
  3      status: the lease is free, and the blob holds no schedule's record;
         break: there was no lease to break;
         run: not leader within --wait (the command did not run);
         partitions: the set has no partitions and no members
  4      run: the lease was lost while the command ran; the command was stopped;
         state put: refused, the lease was lost, broken or passed on (nothing written)
  5      run: the command could not be killed; the lease was left to expire
  6      run --once: the command exited 0 but its completion record was not written
         (the lease was lost first); the next run will run it again
  126    run: the command could not be executed
  127    run: the command was not found
  128+N  run: the command died from signal N, or signal N stopped blob-mutex
         before the command started; schedule: signal N stopped it (a running
         command got the signal first)
  other  run: the command's own exit code";

/// An error that is the user's to fix: it exits with [`USAGE`].
#[derive(Debug)]
pub(crate) struct UsageError(pub(crate) String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// The exit code for an error that ended a command.
pub(crate) fn of_error(error: &anyhow::Error) -> u8 {
    if error.downcast_ref::<UsageError>().is_some() {
        return USAGE;
    }
    match error.downcast_ref::<blob_mutex::Error>() {
        Some(
            blob_mutex::Error::InvalidOption { .. } | blob_mutex::Error::InvalidConnectionString(_),
        ) => USAGE,
        Some(blob_mutex::Error::StateWriteRefused(_)) => STATE_REFUSED,
        _ => ERROR,
    }
}

/// The shell's convention for a child's status: its exit code, or 128 + N
/// when signal N killed it.
pub(crate) fn of_status(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(u8::MAX),
        (None, Some(signal)) => u8::try_from(128 + (signal & 0x7f)).unwrap_or(u8::MAX),
        (None, None) => ERROR,
    }
}

/// A status in words: `exit code 3` or `killed by signal 15 (SIGTERM)`.
pub(crate) fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => match nix::sys::signal::Signal::try_from(signal) {
            Ok(name) => format!("killed by signal {signal} ({name})"),
            Err(_) => format!("killed by signal {signal}"),
        },
        (None, None) => "an unknown status".to_owned(),
    }
}
