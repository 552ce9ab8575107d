//! `run --once`: one term through the library's run-once call, and with
//! `--done-key` or `--at-most-every` a completion record that the library
//! keeps in the lease blob's fenced state. The record is written only after
//! the command exited 0 by itself; a skip, a record not written and a
//! refused combination each have their exit code (see [`crate::exit`]).

use std::sync::Arc;

use anyhow::{anyhow, Result};
use blob_mutex::{
    store::LeaseStore, BlobDistributedMutex, LeaderContext, OnceOptions, OnceOutcome,
};

use super::{exit_code as run_exit_code, lead, Outcome, Shared};
use crate::cli::RunArgs;
use crate::exit::{self, UsageError};

/// The run-once options the flags ask for: `None` without `--once`.
///
/// # Errors
///
/// A [`UsageError`] for a combination `run` refuses, or a value the
/// library's validation refuses, named by its flag.
pub(super) fn options(args: &RunArgs) -> Result<Option<OnceOptions>> {
    let record_flag = match (&args.done_key, args.at_most_every) {
        (Some(_), _) => Some("--done-key"),
        (None, Some(_)) => Some("--at-most-every"),
        (None, None) => None,
    };
    if let (Some(flag), false) = (record_flag, args.once) {
        return Err(usage(format!(
            "{flag} needs --once: the completion record is kept by a run that leads one term"
        )));
    }
    if !args.once {
        return Ok(None);
    }
    if args.forever {
        return Err(usage(
            "--once and --forever exclude each other: --once leads one term and exits, \
             --forever campaigns again after every term"
                .to_owned(),
        ));
    }
    let mut options = OnceOptions::default();
    if let Some(key) = &args.done_key {
        options = options.with_done_key(key.clone());
    }
    if let Some(period) = args.at_most_every {
        options = options.with_at_most_every(period);
    }
    match options.validate() {
        Ok(()) => Ok(Some(options)),
        Err(blob_mutex::Error::InvalidOption { field, reason }) => {
            Err(usage(format!("--{}: {reason}", field.replace('_', "-"))))
        }
        Err(e) => Err(e.into()),
    }
}

fn usage(message: String) -> anyhow::Error {
    UsageError(message).into()
}

/// Whether `options` keep a completion record.
pub(super) fn records(options: &OnceOptions) -> bool {
    options.done_key().is_some() || options.at_most_every().is_some()
}

/// Leads one term that runs the command, through the library: it reads
/// the record before campaigning and again in the term, and writes it
/// after the command succeeded.
pub(super) async fn lead_one_term<S: LeaseStore>(
    mutex: &BlobDistributedMutex<S>,
    shared: &Arc<Shared>,
    options: OnceOptions,
) -> blob_mutex::Result<OnceOutcome<()>> {
    let task_shared = shared.clone();
    mutex
        .run_once_with_options(shared.token.clone(), options, move |ctx| {
            lead_once(ctx, task_shared)
        })
        .await
}

/// The term's task: the command, as `run` leads it. With a completion
/// record it succeeds only when the command exited 0 by itself: anything
/// else (a failure, a stop for a signal or a lost lease, whatever the
/// command's status) is an error, so that no record is written for it.
/// Without one, the exit code says how the command ended, and the task's
/// result is not needed.
async fn lead_once(ctx: LeaderContext, shared: Arc<Shared>) -> Result<()> {
    lead(ctx, shared.clone()).await?;
    if !shared.records {
        return Ok(());
    }
    match &shared.state().outcome {
        Some(Outcome::Exited(status)) if status.success() => Ok(()),
        Some(Outcome::Exited(status)) => Err(anyhow!(
            "the command ended with {}; no completion record",
            exit::describe(*status)
        )),
        Some(Outcome::Signalled(status)) => Err(anyhow!(
            "the command was stopped by a signal to blob-mutex ({}); no completion record",
            exit::describe(*status)
        )),
        _ => Err(anyhow!(
            "the command did not run to its own end; no completion record"
        )),
    }
}

/// The exit code of a term led once, with a line on stderr when the
/// command did not run or its success was not recorded.
pub(super) fn exit_code(shared: &Shared, outcome: OnceOutcome<()>) -> u8 {
    match outcome {
        OnceOutcome::Skipped { reason, .. } => {
            crate::logs::note(&format!(
                "skipped, the command did not run: on {}, {reason}",
                shared.name
            ));
            exit::OK
        }
        OnceOutcome::Unrecorded { error, .. } => unrecorded(shared, &error),
        // `Ran`, and any outcome the library adds: the command's own end.
        _ => run_exit_code(shared),
    }
}

/// The command exited 0 by itself, and its completion record was not
/// written.
fn unrecorded(shared: &Shared, error: &dyn std::fmt::Display) -> u8 {
    crate::logs::say(&format!(
        "the command exited 0, but its completion record on {} was not written \
         ({error}); the next run will run it again",
        shared.name
    ));
    exit::UNRECORDED
}

/// The exit code for an error of the run-once call: 6 when the command
/// succeeded and the term failed after it (its task aborted during the
/// record's write, for a lost lease); the command's, when it ran or a
/// signal stopped the run; a usage error for completion records on a
/// store that keeps none (a quorum); else the error.
pub(super) fn of_error(shared: &Shared, error: blob_mutex::Error) -> Result<u8> {
    let (succeeded, ended) = {
        let state = shared.state();
        let succeeded = matches!(&state.outcome, Some(Outcome::Exited(s)) if s.success());
        (succeeded, state.outcome.is_some() || state.signal.is_some())
    };
    if succeeded && shared.records {
        return Ok(unrecorded(shared, &error));
    }
    if ended {
        return Ok(run_exit_code(shared));
    }
    match error {
        blob_mutex::Error::Unsupported { operation } => Err(usage(format!(
            "--done-key and --at-most-every keep a completion record in the lease blob's \
             state, and this store keeps none ({operation}); a quorum of storage accounts \
             keeps no state: give one account"
        ))),
        blob_mutex::Error::StateNotARecord(_) => Err(anyhow::Error::new(error).context(
            "--done-key and --at-most-every keep their record in the lease blob's state, \
             which holds something else (written by `state put`?); use another blob",
        )),
        e => Err(e.into()),
    }
}
