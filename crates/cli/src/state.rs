//! `blob-mutex state get|put`: the leader state kept in the lease blob.

use blob_mutex::store::LeaseStore;
use std::io::{Read, Write};

use anyhow::{Context, Result};
use blob_mutex::{store::LeaseId, store::MAX_STATE_LEN};

use crate::child::LEASE_ID_ENV;
use crate::cli::{StateCommand, StateGetArgs, StatePutArgs};
use crate::exit::{self, UsageError};

/// Runs `blob-mutex state get` or `put` and returns its exit code.
pub(crate) async fn state(command: StateCommand) -> Result<u8> {
    match command {
        StateCommand::Get(args) => get(args).await,
        StateCommand::Put(args) => put(args).await,
    }
}

async fn get(args: StateGetArgs) -> Result<u8> {
    let mut target = args.target.target();
    target.sign_in().await?;
    let manager = target.lease_manager()?;
    let state = manager.read_state().await?;
    if let Some(path) = &args.output {
        std::fs::write(path, &state).with_context(|| format!("cannot write {}", path.display()))?;
    } else {
        let mut out = std::io::stdout().lock();
        out.write_all(&state)?;
        out.flush()?;
    }
    Ok(exit::OK)
}

async fn put(args: StatePutArgs) -> Result<u8> {
    // Only from the environment `run` gives its command: a flag would show
    // the lease id to every user of `ps`. The value is never printed.
    let lease: LeaseId = match std::env::var(LEASE_ID_ENV) {
        Ok(value) => value
            .trim()
            .parse()
            .map_err(|_| UsageError(format!("{LEASE_ID_ENV} is not a lease id (a UUID)")))?,
        Err(_) => {
            return Err(UsageError(format!(
                "state put writes under the lease of `blob-mutex run`: run it inside the command \
                 that `run` started ({LEASE_ID_ENV} is not set; `run --once` with --done-key or \
                 --at-most-every sets none, as its completion record owns the state)"
            ))
            .into())
        }
    };
    let state = read_input(&args)?;
    let mut target = args.target.target();
    target.sign_in().await?;
    let manager = target.lease_manager()?;
    match manager.write_state(lease, &state).await {
        Ok(()) => Ok(exit::OK),
        Err(blob_mutex::Error::StateWriteRefused(_)) => {
            crate::logs::say(&format!(
                "state put on {} refused: the lease this command ran under was lost, \
                 broken or passed on; nothing was written",
                target.name()
            ));
            Ok(exit::STATE_REFUSED)
        }
        Err(e) => Err(e.into()),
    }
}

/// The bytes to write, from the file or standard input, at most one byte
/// over the limit (the library refuses that with its message).
fn read_input(args: &StatePutArgs) -> Result<Vec<u8>> {
    let limit = u64::try_from(MAX_STATE_LEN).unwrap_or(u64::MAX) + 1;
    let mut state = Vec::new();
    match &args.input {
        Some(path) if path.as_os_str() != "-" => {
            std::fs::File::open(path)
                .with_context(|| format!("cannot read {}", path.display()))?
                .take(limit)
                .read_to_end(&mut state)
                .with_context(|| format!("cannot read {}", path.display()))?;
        }
        _ => {
            std::io::stdin()
                .lock()
                .take(limit)
                .read_to_end(&mut state)
                .context("cannot read standard input")?;
        }
    }
    Ok(state)
}
