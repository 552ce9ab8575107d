//! `blob-mutex break`: force the lease free, whoever holds it.

use anyhow::Result;

use crate::cli::BreakArgs;
use crate::exit;

/// Runs `blob-mutex break` and returns its exit code.
pub(crate) async fn break_lease(args: BreakArgs) -> Result<u8> {
    let manager = args.target.lease_manager()?;
    let name = args.target.name();
    let info = manager.inspect_existing().await?;
    let Some(info) = info.filter(|i| !i.state.is_free()) else {
        crate::logs::note(&format!("no lease to break on {name}: it is free"));
        return Ok(exit::FREE_OR_NOT_ACQUIRED);
    };
    let left = match manager.break_lease(args.period).await {
        Ok(left) => left,
        // The library reports "no lease to break" (409) as this storage error.
        Err(blob_mutex::Error::Storage { status: 409, .. }) => {
            crate::logs::note(&format!(
                "no lease to break on {name}: it was released meanwhile"
            ));
            return Ok(exit::FREE_OR_NOT_ACQUIRED);
        }
        Err(e) => return Err(e.into()),
    };
    let whose = match &info.holder {
        Some(holder) => format!("{holder} (epoch {})", info.epoch),
        None => "an unnamed holder".to_owned(),
    };
    let when = if left.is_zero() {
        "it is free now".to_owned()
    } else {
        format!("it is free in {} s", left.as_secs())
    };
    println!("broke the lease of {whose} on {name}; {when}");
    Ok(exit::OK)
}
