//! Orphans: `run` is a child subreaper, and in a container often process 1,
//! so a process its command leaves behind (a background job whose parent
//! exited, a daemon that forked away) is reparented to `run` when its parent
//! exits. The kernel keeps such a process as a zombie once it exits, until
//! its new parent waits for it; `run` does, so that none pile up.
//!
//! `run`'s own children (each command and its guard) are waited for by
//! Tokio, which must get their exit status: they are started through
//! [`spawn`], which notes their process ids under the same lock the reaper
//! takes, and the reaper leaves them alone. It also leaves alone every
//! child in `run`'s own process group, which only `run`'s libraries start
//! (a credential's helper, say) and wait for themselves: everything a
//! command starts is in the command's group, or in one it made.

use std::collections::BTreeSet;
use std::io;
use std::sync::{Mutex, MutexGuard, PoisonError};

use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::{getpgrp, getpid, Pid};
use tokio::signal::unix::{signal, SignalKind};
use tracing::{debug, warn};

/// The process ids of `run`'s children that Tokio waits for.
static OWN: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

fn own() -> MutexGuard<'static, BTreeSet<i32>> {
    OWN.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Makes `run` the reaper of its descendants' orphans and reaps them for as
/// long as the runtime runs.
pub(crate) fn reap_orphans() {
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        // Process 1 reaps orphans anyway; elsewhere they go to it.
        debug!(error = %e, "cannot become a child subreaper");
    }
    let mut children = match signal(SignalKind::child()) {
        Ok(children) => children,
        Err(e) => {
            warn!(error = %e, "cannot watch for exited children; orphans are not reaped");
            return;
        }
    };
    tokio::spawn(async move {
        reap_exited();
        while children.recv().await.is_some() {
            reap_exited();
        }
    });
}

/// Starts one of `run`'s own children with `start`, which Tokio waits for,
/// and keeps the reaper off it.
///
/// # Errors
///
/// As `start`.
pub(crate) fn spawn(
    start: impl FnOnce() -> io::Result<tokio::process::Child>,
) -> io::Result<tokio::process::Child> {
    let mut own = own();
    let child = start()?;
    if let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok()) {
        own.insert(pid);
    }
    Ok(child)
}

/// One of `run`'s own children has been waited for: its process id may be
/// reused by an orphan from now on.
pub(crate) fn waited(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        own().remove(&pid);
    }
}

/// Waits for every exited child that is an orphan taken in.
fn reap_exited() {
    let own = own();
    let (me, group) = (getpid().as_raw(), getpgrp().as_raw());
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        // Gone since the listing: nothing to reap.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some(process) = Stat::parse(&stat) else {
            continue;
        };
        if process.zombie && process.parent == me && process.group != group && !own.contains(&pid) {
            // WNOHANG: a process that is no longer our zombie is not waited for.
            match waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)) {
                Ok(status) => debug!(pid, ?status, "reaped an orphan"),
                Err(e) => debug!(pid, error = %e, "could not reap an orphan"),
            }
        }
    }
}

/// What the reaper reads of a `/proc/<pid>/stat` line.
#[derive(Debug, PartialEq, Eq)]
struct Stat {
    zombie: bool,
    parent: i32,
    group: i32,
}

impl Stat {
    fn parse(line: &str) -> Option<Stat> {
        // The state follows the parenthesised name, which may contain anything.
        let (_, rest) = line.rsplit_once(") ")?;
        let mut fields = rest.split_whitespace();
        let state = fields.next()?;
        let parent = fields.next()?.parse().ok()?;
        let group = fields.next()?.parse().ok()?;
        Some(Stat {
            zombie: state == "Z",
            parent,
            group,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_says_whether_a_zombie_and_whose() {
        let line = "4242 (a) b (c)) Z 1 4240 4240 0 -1 4194560 105 0 0 0";
        let stat = Stat::parse(line).unwrap();
        assert_eq!(
            stat,
            Stat {
                zombie: true,
                parent: 1,
                group: 4240
            }
        );
        assert!(!Stat::parse("7 (sleep) S 3 7 7").unwrap().zombie);
        assert_eq!(Stat::parse("garbage"), None);
    }
}
